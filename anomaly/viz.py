"""Overlays of defect maps on the original image (uint8 RGB in, uint8 RGB out)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import ndimage


#: pixels blended at a time: the float32 temporaries of a large image's overlay stay this size, not the image's
STRIP_PIXELS = 1 << 22


def overlay(image: np.ndarray, amap: np.ndarray, lo: float, hi: float, mask: np.ndarray | None = None,
            alpha: float = 0.6) -> np.ndarray:
    """Blend a 'jet' heat map of amap (H, W) onto image (H, W, 3) uint8.

    Values <= lo are transparent, >= hi fully coloured (alpha): a fixed scale per model, so
    overlays of different images compare. A ground-truth mask is outlined in green. Blended in strips of rows
    (`STRIP_PIXELS`), each pixel as if at once.
    """
    from matplotlib import colormaps

    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    if img.shape[:2] != amap.shape:
        raise ValueError(f"map {amap.shape} does not match image {img.shape[:2]}")
    # the colormap's own 256-entry table, indexed as matplotlib bins a float in [0, 1]: the same
    # colours as colormaps["jet"](t), without building an (H, W, 4) float64 array per image
    lut = colormaps["jet"](np.arange(256))[:, :3].astype(np.float32)             # (256, 3)
    edge = None
    if mask is not None and mask.any():
        edge = mask & ~ndimage.binary_erosion(mask, iterations=max(1, min(mask.shape) // 200))
    out = np.empty(img.shape, np.uint8)                                          # (H, W, 3)
    rows = max(1, STRIP_PIXELS // max(1, img.shape[1]))
    for r in range(0, img.shape[0], rows):
        s = slice(r, r + rows)
        t = np.clip((amap[s] - lo) / max(hi - lo, 1e-12), 0, 1)                  # (h, W) in [0, 1]
        heat = lut[np.minimum((t * 256).astype(np.intp), 255)]                   # (h, W, 3)
        a = (alpha * t).astype(np.float32)[..., None]
        blend = (1 - a) * (img[s].astype(np.float32) / 255) + a * heat
        if edge is not None:
            blend[edge[s]] = (0.1, 1.0, 0.1)
        out[s] = np.round(np.clip(blend, 0, 1) * 255)
    return out


def overlay_file_names(images: Sequence[str]) -> list[str]:
    """A distinct PNG file name for the overlay of each image (relative paths or paths, in order): the path with
    "/" as "__" and its suffix as ".png" (`good/000.jpg` -> `good__000.png`); a name taken already (also when
    only its case differs) gets "~2", "~3", ... before the suffix, so `x.png` and `x.jpg` never share a file."""
    used: set[str] = set()
    out = []
    for name in images:
        stem = name.replace("/", "__").rsplit(".", 1)[0]
        candidate, k = f"{stem}.png", 1
        while candidate.lower() in used:
            k += 1
            candidate = f"{stem}~{k}.png"
        used.add(candidate.lower())
        out.append(candidate)
    return out
