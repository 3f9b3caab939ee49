"""Synthetic defects planted into normal images, for choosing a configuration without defect labels.

    img, mask = plant_cutpaste(normal, donor, rng)     # a rectangle cut from another normal (CutPaste)
    img, mask = plant_texture(normal, donor, rng)      # a smooth-noise blob filled with another normal's texture
    img, mask = plant_scar(normal, donor, rng)         # a thin band of another normal's texture, darker or brighter
    img, mask = plant_stain(normal, donor, rng)        # a smooth-noise blob of the image itself, darker or brighter
    planted = plant_defects(normals, donors, seed=0)   # [(image, mask)], kinds alternating, seeded

Every kind changes only the pixels of its mask (bool (H, W)), so the mask is the planted defect's ground
truth. cutpaste, texture and scar take their material from other normal images of the same set, as in CutPaste
(Li et al. 2021) and NSA (Schlüter et al. 2022): a detector cannot tell the first two apart by their colours
alone, only by their being out of place. The blobs of texture and stain are thresholded low-frequency noise, as
DRAEM's Perlin masks (Zavrtanik et al. 2021); texture's fill is the donor's texture mirrored, so it does not line
up with the structure around it. scar (CutPaste's thin variant) and stain also change the shade, by a factor
drawn from GAIN, which makes them visible on uniform surfaces where material from another normal is not.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy import ndimage

from frozenvit.backbone.preprocess import to_rgb_uint8

from . import defaults as D
from .images import as_image

KINDS = D.PLANTED_KIND_NAMES   # cutpaste, texture, scar, stain
AREA = (0.005, 0.03)            # a planted defect's area, as a fraction of the image, drawn uniformly
SCAR_LENGTH = (0.1, 0.3)        # a scar's length, as a fraction of the image's shorter side
SCAR_WIDTH = (0.008, 0.025)     # its width, the same (at least 2 pixels)
GAIN = (0.55, 0.8)              # a stain's or scar's brightness factor, or its inverse (brighter), drawn uniformly


def _rgb(image: Any) -> np.ndarray:
    return to_rgb_uint8(as_image(image))                             # (H, W, 3) uint8


def _donor_window(donor: np.ndarray, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A random (h, w, 3) window of `donor` (tiled when the donor is smaller)."""
    h, w = shape
    reps = (-(-h // donor.shape[0]), -(-w // donor.shape[1]), 1)
    d = np.tile(donor, reps) if reps[:2] != (1, 1) else donor
    top = int(rng.integers(0, d.shape[0] - h + 1))
    left = int(rng.integers(0, d.shape[1] - w + 1))
    return d[top:top + h, left:left + w]


def plant_cutpaste(image: Any, donor: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A rectangle of random aspect (1:3 to 3:1) and area (`AREA` of the image) cut from a random place of `donor`,
    flipped left-right, pasted at a random place of `image`. Returns the (H, W, 3) uint8 image and its bool mask."""
    img, src = _rgb(image), _rgb(donor)
    H, W = img.shape[:2]
    area = rng.uniform(*AREA) * H * W
    aspect = np.exp(rng.uniform(np.log(1 / 3), np.log(3)))
    h = int(np.clip(round(np.sqrt(area * aspect)), 2, H))
    w = int(np.clip(round(np.sqrt(area / aspect)), 2, W))
    patch = _donor_window(src, (h, w), rng)[:, ::-1]                 # (h, w, 3)
    top, left = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
    out = img.copy()
    out[top:top + h, left:left + w] = patch
    mask = np.zeros((H, W), bool)
    mask[top:top + h, left:left + w] = True
    return out, mask


def smooth_blob(shape: tuple[int, int], area: float, rng: np.random.Generator) -> np.ndarray:
    """A bool (H, W) blob of about `area` (fraction) of the image: low-pass noise around a random centre,
    thresholded, its largest component kept."""
    H, W = shape
    s = max(2.0, np.sqrt(area * H * W))                              # the blob's side, pixels
    noise = ndimage.gaussian_filter(rng.normal(0, 1, (H, W)), s / 4)  # (H, W) low-frequency
    cy, cx = rng.uniform(0, H), rng.uniform(0, W)
    yy, xx = np.mgrid[0:H, 0:W]
    bump = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (s / 1.5) ** 2))
    field = bump * (1 + noise / (noise.std() + 1e-9) * 0.5)
    k = max(1, int(round(area * H * W)))
    mask = field >= np.partition(field.ravel(), -k)[-k]              # the k highest
    labels, n = ndimage.label(mask)
    if n > 1:
        sizes = ndimage.sum(mask, labels, range(1, n + 1))
        mask = labels == 1 + int(np.argmax(sizes))
    return mask


def plant_texture(image: Any, donor: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A smooth blob (`smooth_blob`, `AREA` of the image) filled with a random window of `donor`, mirrored both
    ways. Returns the (H, W, 3) uint8 image and its bool mask (exactly the pixels replaced)."""
    img, src = _rgb(image), _rgb(donor)
    H, W = img.shape[:2]
    mask = smooth_blob((H, W), rng.uniform(*AREA), rng)
    fill = _donor_window(src, (H, W), rng)[::-1, ::-1]               # (H, W, 3)
    out = img.copy()
    out[mask] = fill[mask]
    return out, mask


def _gain(rng: np.random.Generator) -> float:
    """A brightness factor below 1 (darker) or above 1 (brighter), with even odds."""
    g = rng.uniform(*GAIN)
    return g if rng.random() < 0.5 else 1 / g


def plant_scar(image: Any, donor: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A thin straight band at a random angle (`SCAR_LENGTH` by `SCAR_WIDTH` of the shorter side), filled with
    `donor`'s texture made darker or brighter by a `GAIN` factor, as CutPaste's scar. Scratches and cracks are
    shaped like this. Returns the (H, W, 3) uint8 image and its bool mask."""
    img, src = _rgb(image), _rgb(donor)
    H, W = img.shape[:2]
    side = min(H, W)
    length = rng.uniform(*SCAR_LENGTH) * side
    width = max(2.0, rng.uniform(*SCAR_WIDTH) * side)
    angle = rng.uniform(0, np.pi)
    cy, cx = rng.uniform(0, H), rng.uniform(0, W)
    yy, xx = np.mgrid[0:H, 0:W]
    along = (yy - cy) * np.sin(angle) + (xx - cx) * np.cos(angle)
    across = (yy - cy) * np.cos(angle) - (xx - cx) * np.sin(angle)
    mask = (np.abs(along) <= length / 2) & (np.abs(across) <= width / 2)
    if not mask.any():
        mask[int(np.clip(cy, 0, H - 1)), int(np.clip(cx, 0, W - 1))] = True
    fill = _donor_window(src, (H, W), rng).astype(np.float32) * _gain(rng)
    out = img.copy()
    out[mask] = np.clip(fill[mask], 0, 255).astype(np.uint8)
    return out, mask


def plant_stain(image: Any, donor: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A smooth blob (`smooth_blob`, `AREA` of the image) of the image itself made darker or brighter by a `GAIN`
    factor: a change of shade with the structure kept, as a stain or discolouration. `donor` is not used (the
    signature is the other kinds'). Returns the (H, W, 3) uint8 image and its bool mask."""
    img = _rgb(image)
    H, W = img.shape[:2]
    mask = smooth_blob((H, W), rng.uniform(*AREA), rng)
    out = img.copy()
    out[mask] = np.clip(img[mask].astype(np.float32) * _gain(rng), 0, 255).astype(np.uint8)
    return out, mask


def plant_defects(images: Sequence[Any], donors: Sequence[Any], seed: int = 0,
                  kinds: Sequence[str] = D.PLANTED_KINDS) -> list[tuple[np.ndarray, np.ndarray]]:
    """One planted defect per image and kind: for image i and kind k, a donor drawn from `donors` and the defect
    drawn from a generator seeded by (seed, i, k), so the result does not depend on the other images. Returns
    [(image (H, W, 3) uint8, mask (H, W) bool)], image-major. Raises ValueError for no donors or an unknown kind."""
    plant = {"cutpaste": plant_cutpaste, "texture": plant_texture, "scar": plant_scar, "stain": plant_stain}
    if not donors:
        raise ValueError("planting defects needs at least one donor normal image")
    if unknown := set(kinds) - set(plant):
        raise ValueError(f"unknown planted defect kinds {sorted(unknown)}; choose from {KINDS}")
    out = []
    for i, img in enumerate(images):
        for kind in kinds:
            rng = np.random.default_rng([seed, i, KINDS.index(kind)])
            donor = donors[int(rng.integers(len(donors)))]
            out.append(plant[kind](img, donor, rng))
    return out
