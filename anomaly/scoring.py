"""Pure functions from patch grids to patch features, and from patch scores to image scores and maps."""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage


def local_aggregate(grid: torch.Tensor, size: int = 3) -> torch.Tensor:
    """Mean over each token's size x size neighbourhood: (B, C, h, w) -> (B, C, h, w).

    Border tokens average over the neighbours that exist (no zero padding), so a border
    patch is not pulled towards zero; equals avg_pool2d(count_include_pad=False). Computed as a
    separable box sum of shifted views, ~4x faster than avg_pool2d on CPU. size 1 is the identity.
    """
    if size <= 1:
        return grid
    if size % 2 == 0:
        raise ValueError(f"aggregation size must be odd, got {size}")
    r = size // 2
    h, w = grid.shape[-2:]
    p = F.pad(grid, (r, r, r, r))                                    # (B, C, h + 2r, w + 2r)
    s = sum(p[..., :, i:i + w] for i in range(size))                 # (B, C, h + 2r, w) row sums
    s = sum(s[..., i:i + h, :] for i in range(size))                 # (B, C, h, w) box sums
    ones = F.pad(grid.new_ones(1, 1, h, w), (r, r, r, r))
    count = F.avg_pool2d(ones, size, stride=1) * size * size         # (1, 1, h, w) neighbours inside
    return s / count


def center_tokens(grid: torch.Tensor) -> torch.Tensor:
    """Subtract a robust image-wide reference token: (B, C, h, w) -> (B, C, h, w).

    The reference is the mean of the half of the tokens nearest to the plain mean (a trimmed mean):
    a defect covering less than half of the image does not move it, unlike the plain mean, and it
    costs a few elementwise passes where a per-channel median needs a sort (~20x slower on CPU).
    """
    t = grid.flatten(2)                                              # (B, C, N)
    d = (t - t.mean(2, keepdim=True)).square_().sum(1)               # (B, N) squared distance to the mean
    k = t.shape[2] // 2 + 1
    near = (d <= d.kthvalue(k, dim=1, keepdim=True).values).to(t.dtype)   # (B, N) the nearer half
    ref = (t * near[:, None]).sum(2) / near.sum(1, keepdim=True)     # (B, C)
    return grid - ref[..., None, None]


def reduced_width(width: int, reduce_dim: int | float | None) -> int:
    """Channels kept by `fuse_blocks`: None keeps `width`; an int is absolute (capped at width); a float
    in (0, 1] is a fraction of width (at least 1 channel)."""
    if reduce_dim is None:
        return width
    if isinstance(reduce_dim, bool) or not isinstance(reduce_dim, (int, float)) or reduce_dim <= 0:
        raise ValueError(f"reduce_dim must be None, a positive int (channels) or a fraction in (0, 1], got {reduce_dim!r}")
    if isinstance(reduce_dim, float):
        if reduce_dim > 1:
            raise ValueError(f"a fractional reduce_dim must lie in (0, 1], got {reduce_dim}; pass an int for a "
                             "channel count")
        return max(1, round(reduce_dim * width))
    return min(int(reduce_dim), width)


def fuse_blocks(grids: Sequence[torch.Tensor], reduce_dim: int | float | None = None) -> torch.Tensor:
    """Fuse per-block grids (B, C_i, h_i, w_i) into (B, sum C_i, h, w) on the finest grid (h, w).

    Grids of other sizes (ConvNet stages, ViT blocks at other resolutions) are resampled bilinearly
    (half-pixel centres) onto the finest one, the one with the most tokens, as PatchCore does; grids
    already of that size pass unchanged. With `reduce_dim` (see `reduced_width`), each token vector is
    then average-pooled along channels (PatchCore's adaptive average pooling: deterministic, nothing to
    fit or store). Raises ValueError when the grids hold different numbers of images.
    """
    if len({g.shape[0] for g in grids}) > 1:
        raise ValueError(f"grids of blocks hold different numbers of images: {[tuple(g.shape) for g in grids]}")
    h, w = max((tuple(g.shape[-2:]) for g in grids), key=lambda s: s[0] * s[1])
    grids = [g if tuple(g.shape[-2:]) == (h, w) else
             F.interpolate(g, size=(h, w), mode="bilinear", align_corners=False)   # (B, C_i, h, w)
             for g in grids]
    x = torch.cat(list(grids), dim=1)                                # (B, D, h, w)
    b, d = x.shape[:2]
    r = reduced_width(d, reduce_dim)
    if r < d:
        if d % r == 0:                                               # equal groups: same as adaptive pooling, cheaper
            x = x.reshape(b, r, d // r, h, w).mean(dim=2)            # (B, r, h, w)
        else:
            t = x.permute(0, 2, 3, 1).reshape(-1, 1, d)              # (B*h*w, 1, D)
            t = F.adaptive_avg_pool1d(t, r)                          # (B*h*w, 1, r)
            x = t.reshape(b, h, w, r).permute(0, 3, 1, 2)            # (B, r, h, w)
    return x.contiguous()


def topk_mean(patch_scores: np.ndarray, frac: float = 0.01) -> np.ndarray:
    """Mean of the top ceil(frac * N) scores of each image: (B, N) -> (B,)."""
    p = np.asarray(patch_scores).reshape(len(patch_scores), -1)      # (B, N)
    k = max(1, int(np.ceil(frac * p.shape[1])))
    return np.sort(p, axis=1)[:, -k:].mean(axis=1)


def reweighted_max(max_dist: np.ndarray, neighbour_dists: np.ndarray) -> np.ndarray:
    """PatchCore's image score (Roth et al. 2022, eq. 7), vectorised over images.

    max_dist (B,): s* = distance of the most anomalous test patch m_test to its nearest bank entry m*.
    neighbour_dists (B, b): distances of m_test to the b bank entries nearest to m* (m* included).
    Returns (1 - exp(s*) / sum_b exp(d_b)) * s*, computed stably in log space.
    """
    s = np.asarray(max_dist, np.float64)                             # (B,)
    d = np.asarray(neighbour_dists, np.float64)                      # (B, b)
    m = d.max(axis=1, keepdims=True)
    log_sum = m[:, 0] + np.log(np.exp(d - m).sum(axis=1))            # (B,) logsumexp
    return ((1.0 - np.exp(s - log_sum)) * s).astype(np.float32)


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
