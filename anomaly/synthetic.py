"""A seeded synthetic dataset in MVTec AD layout: procedural textures and a simple object, with
inserted scratches, holes, cracks and stains, and their exact masks.

A defect's mask is exactly the set of pixels the defect painted (clipped to the object for
object categories), so pixel metrics on this set have no annotation noise. Every image is
drawn from its own generator seeded by (seed, split, index): the set is identical on every
machine and one image never changes when the set grows.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image
from scipy import ndimage

from frozenvit.backbone.suite.artifacts import atomic_write_bytes
from frozenvit.backbone.suite.errors import ParameterError

CATEGORIES = ("weave", "grain", "washer")   # two textures, one object
MIN_SIDE, MAX_SIDE = 32, 2048               # image sides in pixels: large enough for a defect, small enough to render
DEFECTS = ("scratch", "hole", "crack", "stain")


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


def render_normal(category: str, rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """One defect-free image: float RGB (H, W, 3) in [0, 1] and the bool (H, W) region defects may hit."""
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    s = min(h, w)
    if category == "weave":   # crossed sinusoids, random phase: a woven fabric
        p = s / 7.0
        fx, fy = rng.uniform(0, 2 * np.pi, 2)
        v = 0.5 + 0.22 * np.sin(2 * np.pi * xx / p + fx) * np.sin(2 * np.pi * yy / p + fy)
        v += ndimage.gaussian_filter(rng.normal(0, 0.06, (h, w)), 0.8)
        tint = np.array([0.75, 0.62, 0.45]) + rng.normal(0, 0.015, 3)
        img = v[..., None] * tint / 0.6
        region = np.ones((h, w), bool)
    elif category == "grain":   # streaks of smoothed noise, warped: wood grain
        n = ndimage.gaussian_filter(rng.normal(0, 1, (h, w)), (s / 48.0, s / 6.0))
        n /= n.std() + 1e-9
        v = 0.55 + 0.08 * np.sin(2 * np.pi * yy / (s / 5.0) + 1.5 * n) + 0.04 * n
        v += rng.normal(0, 0.015, (h, w))
        tint = np.array([0.95, 0.72, 0.48]) + rng.normal(0, 0.015, 3)
        img = v[..., None] * tint
        region = np.ones((h, w), bool)
    elif category == "washer":   # a bright ring on a dark, slightly noisy background
        cy, cx = h / 2 + rng.normal(0, s * 0.02), w / 2 + rng.normal(0, s * 0.02)
        r = np.hypot(yy - cy, xx - cx)
        ro, ri = s * 0.38, s * 0.14
        ring = (r <= ro) & (r >= ri)
        bg = 0.15 + ndimage.gaussian_filter(rng.normal(0, 0.03, (h, w)), 1.0)
        shade = 0.78 - 0.12 * (r - ri) / (ro - ri) + rng.normal(0, 0.01, (h, w))
        v = np.where(ring, shade, bg)
        img = np.repeat(v[..., None], 3, axis=2) * np.array([0.92, 0.94, 1.0])
        region = ndimage.binary_erosion(ring, iterations=max(1, s // 48))
    else:
        raise ValueError(f"unknown synthetic category {category!r}; choose one of {CATEGORIES}")
    return np.clip(img, 0, 1), region


def _thick(mask: np.ndarray, width: int) -> np.ndarray:
    """Dilate a 1-px line to `width` pixels."""
    return mask if width <= 1 else ndimage.binary_dilation(mask, structure=np.ones((width, width), bool))


def _line(mask: np.ndarray, y0: float, x0: float, y1: float, x1: float) -> None:
    """Set the pixels of a 1-px segment (sampled every half pixel), clipped to the image."""
    n = int(np.ceil(2 * max(abs(y1 - y0), abs(x1 - x0)))) + 1
    rr = np.round(np.linspace(y0, y1, n)).astype(int)
    cc = np.round(np.linspace(x0, x1, n)).astype(int)
    ok = (rr >= 0) & (rr < mask.shape[0]) & (cc >= 0) & (cc < mask.shape[1])
    mask[rr[ok], cc[ok]] = True


def _ellipse(shape: tuple[int, int], cy: float, cx: float, ry: float, rx: float, angle: float = 0.0) -> np.ndarray:
    """bool (H, W): pixel centres inside a rotated ellipse (a disk when ry == rx)."""
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float64)
    dy, dx = yy - cy, xx - cx
    u = dy * np.cos(angle) + dx * np.sin(angle)
    v = -dy * np.sin(angle) + dx * np.cos(angle)
    return (u / ry) ** 2 + (v / rx) ** 2 <= 1.0


def _point_in(region: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    ys, xs = np.nonzero(region)
    i = rng.integers(len(ys))
    return int(ys[i]), int(xs[i])


def insert_defect(img: np.ndarray, region: np.ndarray, kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Paint one defect into float RGB `img` (H, W, 3); return (new image, bool (H, W) exact mask)."""
    h, w = region.shape
    s = min(h, w)
    width = max(1, round(s / 48))
    for _ in range(50):   # redraw until the defect covers enough of the allowed region
        m = np.zeros((h, w), bool)
        y0, x0 = _point_in(region, rng)
        if kind in ("scratch", "crack"):
            n_seg = 1 if kind == "scratch" else int(rng.integers(5, 9))
            length = rng.uniform(0.25, 0.45) * s
            ang = rng.uniform(0, np.pi)
            y, x = float(y0), float(x0)
            for _ in range(n_seg):
                a = ang + (rng.normal(0, 0.6) if kind == "crack" else 0.0)
                y1, x1 = y + np.sin(a) * length / n_seg, x + np.cos(a) * length / n_seg
                _line(m, y, x, y1, x1)
                y, x = y1, x1
            m = _thick(m, width + (1 if kind == "crack" else 0))
            color = np.array([0.92, 0.9, 0.86]) if kind == "scratch" else np.array([0.1, 0.07, 0.05])
        elif kind == "hole":
            r = rng.uniform(0.05, 0.09) * s
            m = _ellipse((h, w), y0, x0, r, r)
            color = np.array([0.02, 0.02, 0.02])
        elif kind == "stain":
            m = _ellipse((h, w), y0, x0, rng.uniform(0.06, 0.12) * s, rng.uniform(0.06, 0.12) * s,
                         rng.uniform(0, np.pi))
            color = None
        else:
            raise ValueError(f"unknown defect {kind!r}; choose one of {DEFECTS}")
        m &= region
        if m.sum() >= max(6, 0.002 * h * w):
            break
    out = img.copy()
    if color is None:   # stain: a brown-green tint at constant strength inside the mask
        alpha = rng.uniform(0.3, 0.5)
        out[m] = (1 - alpha) * out[m] + alpha * np.array([0.35, 0.3, 0.1])
    else:
        out[m] = color + rng.normal(0, 0.02, (int(m.sum()), 3))
    return np.clip(out, 0, 1), m


def _u8(img: np.ndarray) -> np.ndarray:
    return np.round(np.clip(img, 0, 1) * 255).astype(np.uint8)


def render_sample(category: str, defect: str | None, seed: int, index: int,
                  size: tuple[int, int] = (96, 112)) -> tuple[np.ndarray, np.ndarray]:
    """One image: uint8 RGB (H, W, 3) and its bool (H, W) mask (all False when `defect` is None)."""
    key = 0 if defect is None else 1 + DEFECTS.index(defect)
    rng = _rng(seed, CATEGORIES.index(category), key, index)
    img, region = render_normal(category, rng, size)
    mask = np.zeros(size, bool)
    if defect is not None:
        img, mask = insert_defect(img, region, defect, rng)
    return _u8(img), mask


def make_synthetic_mvtec(root: str | os.PathLike, category: str = "weave", *, n_train: int = 30,
                         n_test_good: int = 10, n_test_defect: int = 3, defects: tuple[str, ...] = DEFECTS,
                         size: tuple[int, int] = (96, 112), seed: int = 0) -> Path:
    """Write `root/category/` in MVTec AD layout and return that folder.

    n_test_defect images per defect type. Train images use indices [0, n_train), good test images
    [n_train, n_train + n_test_good), so the test goods are never training images.
    """
    if not all(MIN_SIDE <= int(v) <= MAX_SIDE for v in size):
        raise ParameterError(f"synthetic images must be {MIN_SIDE} to {MAX_SIDE} px a side, got {size[0]}x{size[1]}")
    base = Path(root) / category

    def save(a: np.ndarray, path: Path) -> None:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        atomic_write_bytes(path, buf.getvalue())
    for i in range(n_train):
        save(render_sample(category, None, seed, i, size)[0], base / "train" / "good" / f"{i:03d}.png")
    for i in range(n_test_good):
        save(render_sample(category, None, seed, n_train + i, size)[0], base / "test" / "good" / f"{i:03d}.png")
    for d in defects:
        for i in range(n_test_defect):
            img, mask = render_sample(category, d, seed, i, size)
            save(img, base / "test" / d / f"{i:03d}.png")
            save(mask.astype(np.uint8) * 255, base / "ground_truth" / d / f"{i:03d}_mask.png")
    return base


def synthetic_files(category: str, *, n_train: int = 30, n_test_good: int = 10, n_test_defect: int = 3,
                    defects: tuple[str, ...] = DEFECTS) -> list[str]:
    """The files `make_synthetic_mvtec(root, category, ...)` writes, relative to root (posix)."""
    files = [f"{category}/train/good/{i:03d}.png" for i in range(n_train)]
    files += [f"{category}/test/good/{i:03d}.png" for i in range(n_test_good)]
    for d in defects:
        for i in range(n_test_defect):
            files += [f"{category}/test/{d}/{i:03d}.png", f"{category}/ground_truth/{d}/{i:03d}_mask.png"]
    return files
