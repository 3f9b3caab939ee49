"""Anomaly maps: patch scores -> upsampled, smoothed defect maps at each image's ORIGINAL size.

    maps = anomaly_maps(patch_scores, where, sigma=4.0)   # [(H0_i, W0_i)] float32

Untiled, a token map goes bilinear onto the model canvas, Gaussian(sigma) there, then onto the original pixels
through the backbone's GridMapping (stretch or pad alike). Tiled, each tile's map goes onto its window, the
windows are stitched (overlaps averaged) and smoothed once. Every step is linear and separable, so each runs as
two small matrix products through cached per-axis operators.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage


def anomaly_maps(patch_scores: Any, where: Sequence[Any], sigma: float = 4.0) -> list[np.ndarray]:
    """Token maps -> defect maps [(H0_i, W0_i)]. Untiled, (B, h, w) with GridMappings: bilinear to the model
    canvas, Gaussian(sigma) there, then resampled onto each original image through its GridMapping. Tiled,
    [(T_i, h, w)] with (Tiling, tile GridMapping) per image: each tile bilinear onto its window, stitched
    (overlaps averaged), then Gaussian(sigma x the tile's original pixels per model pixel) once over the image;
    an image that was its own one tile (its entry a GridMapping) is mapped as untiled."""
    if isinstance(patch_scores, np.ndarray):                        # untiled (or no image needed tiles)
        return original_maps(patch_scores, where, sigma)
    out = []
    for p, w in zip(patch_scores, where):
        if not isinstance(w, tuple):        # an image that was its own single tile: scored and mapped untiled
            out.append(original_maps(p, [w], sigma)[0])
            continue
        tiling, m = w
        # one product through cached operators, equal to stitching the tiles' maps and then smoothing
        out.append(tiled_original_map(p, tiling, m, sigma * tiling.tile_size[0] / m.model_size[0]))   # (H0, W0)
    return out


def gaussian_kernel1d(sigma: float, truncate: float = 4.0) -> torch.Tensor:
    """Normalised 1-D Gaussian taps, radius int(truncate * sigma + 0.5) as in scipy.ndimage."""
    r = int(truncate * sigma + 0.5)
    x = torch.arange(-r, r + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return (k / k.sum()).float()


def smooth_batch(maps: torch.Tensor, sigma: float = 4.0) -> torch.Tensor:
    """Separable Gaussian on (B, H, W) with edge replication (scipy's mode='nearest') -> (B, H, W)."""
    if sigma <= 0:
        return maps
    gh = _gaussian_matrix(maps.shape[1], sigma)                                # (H, H)
    gw = _gaussian_matrix(maps.shape[2], sigma)                                # (W, W)
    return gh @ maps @ gw.T


@lru_cache(maxsize=16)
def _gaussian_matrix(n: int, sigma: float) -> torch.Tensor:
    """(n, n) matrix of a 1-D Gaussian filter with edge replication: out = G @ x."""
    k = gaussian_kernel1d(sigma).double()
    r = len(k) // 2
    g = torch.zeros(n, n, dtype=torch.float64)
    rows = torch.arange(n)
    for t in range(len(k)):
        g.index_put_((rows, (rows + t - r).clamp(0, n - 1)), k[t].expand(n), accumulate=True)
    return g.float()


@lru_cache(maxsize=16)
def _canvas_operator(tokens: int, pixels: int, sigma: float) -> torch.Tensor:
    """(pixels, tokens): bilinear upsampling (half-pixel centres) followed by the Gaussian, along one axis."""
    eye = torch.eye(tokens)[None, None]                                        # (1, 1, tokens, tokens)
    up = F.interpolate(eye, size=(pixels, tokens), mode="bilinear", align_corners=False)[0, 0]   # (pixels, tokens)
    return _gaussian_matrix(pixels, sigma) @ up if sigma > 0 else up


def canvas_maps(patch_scores: np.ndarray, model_size: tuple[int, int], sigma: float = 4.0) -> np.ndarray:
    """Token maps (B, h, w) -> smoothed maps on the model canvas (B, H, W): bilinear upsampling with
    each token covering its patch (half-pixel centres), then Gaussian(sigma) in canvas pixels with edge
    replication. Both steps are linear and separable, so they run as two small matrix products
    A_H @ P @ A_W^T (cached operators), much cheaper than filtering the upsampled maps."""
    p = torch.as_tensor(np.asarray(patch_scores, np.float32))                 # (B, h, w)
    ah = _canvas_operator(p.shape[1], int(model_size[0]), float(sigma))       # (H, h)
    aw = _canvas_operator(p.shape[2], int(model_size[1]), float(sigma))       # (W, w)
    return (ah @ p @ aw.T).numpy()                                             # (B, H, W)


@lru_cache(maxsize=64)
def _original_operators(mapping, tokens: tuple[int, int], sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(H0, h) and (W0, w): token map -> canvas (bilinear + Gaussian) -> original pixels, per axis."""
    H, W = (int(v) for v in mapping.model_size)
    ry, rx = mapping.axis_operators(H, W)                                      # (H0, H), (W0, W)
    return (torch.from_numpy(ry) @ _canvas_operator(tokens[0], H, sigma),
            torch.from_numpy(rx) @ _canvas_operator(tokens[1], W, sigma))


def original_maps(patch_scores: np.ndarray, mappings: Sequence, sigma: float = 4.0) -> list[np.ndarray]:
    """Token maps (B, h, w) -> defect maps at each image's original size [(H0_i, W0_i)]: the same values
    as canvas_maps followed by GridMapping.to_original, as one product per image through cached
    per-axis operators (~3x cheaper than resampling the canvas for 512 px images)."""
    p = torch.as_tensor(np.asarray(patch_scores, np.float32))                 # (B, h, w)
    out = []
    for pi, m in zip(p, mappings):
        oy, ox = _original_operators(m, tuple(p.shape[1:]), float(sigma))      # (H0, h), (W0, w)
        out.append((oy @ pi @ ox.T).numpy())                                   # (H0, W0)
    return out


@lru_cache(maxsize=8)
def _tiled_operators(tiling, mapping, tokens: tuple[int, int], sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(H0, R*h) and (W0, C*w): the R x C tiles' token maps -> each tile's window (bilinear) -> stitched
    (overlaps averaged) -> Gaussian(sigma) in original pixels with edge replication, per axis."""
    ry, rx = _original_operators(mapping, tokens, 0.0)                         # (th, h), (tw, w)
    sy, sx = tiling.stitch_operators(ry.double().numpy(), rx.double().numpy())  # (H0, R*h), (W0, C*w)
    if sigma > 0:   # the filter of `smooth`, run down the operator's columns: G @ S, never an (H0, H0) matrix
        sy = ndimage.gaussian_filter1d(sy, sigma, axis=0, mode="nearest")
        sx = ndimage.gaussian_filter1d(sx, sigma, axis=0, mode="nearest")
    return torch.from_numpy(sy).float(), torch.from_numpy(sx).float()


def tiled_original_map(patch_scores: np.ndarray, tiling, mapping, sigma: float = 4.0) -> np.ndarray:
    """Token maps of an image's tiles (T, h, w), row-major over `tiling.windows`, each tile seen through the
    GridMapping `mapping` -> defect map (H0, W0): the same values as stitching every tile's original_maps(...,
    sigma=0) with `Tiling.stitch` and then `smooth(sigma)` (sigma in original pixels), as one product
    Sy @ B @ Sx.T through cached per-axis operators: resampling, stitching and the Gaussian are linear and
    separable. The full-resolution Gaussian alone cost ~25 ms per 1250 x 500 image; the product costs ~1-2 ms."""
    from .tiling import tile_blocks

    p = np.asarray(patch_scores, np.float32)                                   # (T, h, w)
    sy, sx = _tiled_operators(tiling, mapping, tuple(p.shape[1:]), float(sigma))   # (H0, R*h), (W0, C*w)
    blocks = torch.from_numpy(np.ascontiguousarray(tile_blocks(p, len(tiling.tops), len(tiling.lefts))))  # (R*h, C*w)
    return (sy @ blocks @ sx.T).numpy()                                        # (H0, W0)


def smooth(amap: np.ndarray, sigma: float = 4.0) -> np.ndarray:
    """Gaussian smoothing (H, W) -> (H, W), sigma in pixels, border mode 'nearest' (scipy reference)."""
    return ndimage.gaussian_filter(np.asarray(amap, np.float32), sigma=sigma, mode="nearest") if sigma > 0 else amap
