"""Tiles for images larger than the model input: where they lie, and how their maps are stitched back.

A tile is a window of the ORIGINAL image with the model input's aspect ratio, so resizing it to the
model input never stretches it. At `scale` 1 a tile is the model input's size in original pixels
(one original pixel per canvas pixel); at `scale` 2 it covers twice that and is shrunk 2x. An image
smaller than a tile gets the largest window of that aspect that fits inside it, so it is enlarged
only as much as the model input needs. Along each axis the tiles are evenly spaced, the first at
0 and the last flush with the border, as few as keep neighbours overlapping by at least `overlap`
of a tile: every pixel is covered, none is padded.

    t = Tiling.plan((1250, 500), (224, 224), scale=1.0, overlap=0.25)   # 7 x 3 windows of 224 x 224
    crops = t.crops(image)                  # [(224, 224, 3)] views, row-major
    amap = t.stitch(tile_maps)              # (T, 224, 224) -> (1250, 500), overlaps averaged

Stitching is linear and, because the windows are every (top, left) pair, separable: `stitch_operators`
turns it into one matrix per axis, so resampling, stitching and smoothing fold into two small products.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np


def tile_size(image_size: tuple[int, int], model_size: tuple[int, int], scale: float = 1.0) -> tuple[int, int]:
    """(height, width) of a tile in original pixels: `scale` x the model input, shrunk (aspect kept)
    until it fits inside the image. Raises ValueError for a non-positive scale or an empty image."""
    (h0, w0), (mh, mw) = image_size, model_size
    if not scale > 0 or h0 < 1 or w0 < 1:
        raise ValueError(f"tiles need scale > 0 and a non-empty image, got scale {scale}, image {h0}x{w0}")
    f = min(1.0, h0 / (scale * mh), w0 / (scale * mw))                 # shrink factor for small images
    return min(h0, max(1, round(scale * mh * f))), min(w0, max(1, round(scale * mw * f)))


def tile_starts(length: int, tile: int, overlap: float = 0.25) -> tuple[int, ...]:
    """First pixels of the tiles along one axis: evenly spaced from 0 to length - tile (flush with the
    border), the fewest whose neighbours overlap by at least `overlap` x tile pixels."""
    if tile >= length:
        return (0,)
    stride = max(1.0, tile * (1.0 - overlap))                           # the longest step allowed
    n = math.ceil((length - tile) / stride) + 1
    return tuple(round(i * (length - tile) / (n - 1)) for i in range(n))


@dataclass(frozen=True)
class Tiling:
    """Tiles of one image. Derived once from the image and model sizes, used for crops and stitching."""
    image_size: tuple[int, int]      # (H0, W0) original pixels
    tile_size: tuple[int, int]       # (th, tw) original pixels, the model input's aspect
    tops: tuple[int, ...]            # first row of each tile row
    lefts: tuple[int, ...]           # first column of each tile column

    @classmethod
    def plan(cls, image_size: tuple[int, int], model_size: tuple[int, int], scale: float = 1.0,
             overlap: float = 0.25) -> "Tiling":
        if not 0 <= overlap < 1:
            raise ValueError(f"tile overlap must be a fraction in [0, 1), got {overlap}")
        th, tw = tile_size(image_size, model_size, scale)
        return cls(tuple(image_size), (th, tw), tile_starts(image_size[0], th, overlap),
                   tile_starts(image_size[1], tw, overlap))

    @property
    def windows(self) -> list[tuple[int, int]]:
        """(top, left) of every tile, row-major."""
        return [(t, l) for t in self.tops for l in self.lefts]

    def __len__(self) -> int:
        return len(self.tops) * len(self.lefts)

    def crops(self, image: np.ndarray) -> list[np.ndarray]:
        """The tiles of an (H0, W0, ...) array, row-major (views, no copies)."""
        if tuple(image.shape[:2]) != self.image_size:
            raise ValueError(f"image {image.shape[:2]} is not the {self.image_size} this tiling was planned for")
        th, tw = self.tile_size
        return [image[t:t + th, l:l + tw] for t, l in self.windows]

    def coverage(self) -> np.ndarray:
        """(H0, W0) int: how many tiles cover each pixel (>= 1 everywhere)."""
        n = np.zeros(self.image_size, np.int32)
        th, tw = self.tile_size
        for t, l in self.windows:
            n[t:t + th, l:l + tw] += 1
        return n

    def stitch(self, tile_maps: Iterable[np.ndarray]) -> np.ndarray:
        """Per-tile maps, T arrays (th, tw) in `windows` order (any iterable, consumed one at a time) ->
        (H0, W0) float32: each pixel the mean of the tiles covering it."""
        acc = np.zeros(self.image_size, np.float64)
        th, tw = self.tile_size
        try:
            for m, (t, l) in zip(tile_maps, self.windows, strict=True):
                if m.shape != (th, tw):
                    raise ValueError(f"tile map {m.shape} is not the tile size {self.tile_size}")
                acc[t:t + th, l:l + tw] += m
        except ValueError as e:
            raise ValueError(f"stitching needs {len(self)} maps of {self.tile_size}: {e}") from e
        return (acc / self.coverage()).astype(np.float32)

    def stitch_operators(self, ry: np.ndarray, rx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stitching as two matrices. ry (th, h) and rx (tw, w) resample a tile's (h, w) map onto its window
        (tile = ry @ p @ rx.T). Returns Sy (H0, R*h) and Sx (W0, C*w), float64, such that
        stitch([ry @ p_k @ rx.T for every tile k]) == Sy @ B @ Sx.T, where B (R*h, C*w) holds the R x C tile
        maps p_k (row-major `windows`) as blocks (`tile_blocks`). Exact: the windows are the product of `tops`
        and `lefts`, so the number of tiles covering (y, x) factorises as n_y(y) * n_x(x)."""
        th, tw = self.tile_size
        if ry.shape[0] != th or rx.shape[0] != tw:
            raise ValueError(f"operators {ry.shape}, {rx.shape} do not resample onto the tile size {self.tile_size}")
        return _axis_operator(self.image_size[0], self.tops, ry), _axis_operator(self.image_size[1], self.lefts, rx)


def _axis_operator(length: int, starts: tuple[int, ...], r: np.ndarray) -> np.ndarray:
    """(length, len(starts) * k): operator r (tile, k) placed at every start, each row divided by its coverage."""
    tile, k = r.shape
    out = np.zeros((length, len(starts) * k), np.float64)
    count = np.zeros(length, np.float64)
    for i, s in enumerate(starts):
        out[s:s + tile, i * k:(i + 1) * k] = r
        count[s:s + tile] += 1
    return out / count[:, None]


def tile_blocks(tile_maps: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """(T, h, w) tile maps, T = rows * cols row-major -> (rows * h, cols * w), tile (i, j) at block (i, j)."""
    t, h, w = tile_maps.shape
    if t != rows * cols:
        raise ValueError(f"{t} tile maps do not fill a {rows} x {cols} grid of tiles")
    return tile_maps.reshape(rows, cols, h, w).transpose(0, 2, 1, 3).reshape(rows * h, cols * w)
