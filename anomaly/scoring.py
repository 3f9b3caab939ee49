"""Image scores from patch scores: PatchCore's reweighted maximum, the maximum, or the mean of the top fraction.

Patch scores are distances to the nearest bank entry (anomaly/search.py); `score_border` rings of edge patches can
be left out of image scores (the maps keep them).
"""
from __future__ import annotations

import numpy as np

IMAGE_SCORES = ("reweighted", "max", "topk")


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


def inner(patch_scores: np.ndarray, rings: int) -> np.ndarray:
    """(..., h, w) patch scores -> the part that counts in image scores: `rings` rows and columns off each edge."""
    d = patch_scores
    return d[..., rings:d.shape[-2] - rings, rings:d.shape[-1] - rings] if rings else d


def inner_indices(grid: tuple[int, int], rings: int) -> np.ndarray | None:
    """Flat indices (row-major on `grid`) of the patches inside `rings`; None: all of them (rings 0)."""
    if not rings:
        return None
    h, w = grid
    return np.arange(h * w).reshape(h, w)[rings:h - rings, rings:w - rings].ravel()


def image_score_of_inputs(patch_scores: np.ndarray, input_scores: list[float], rule: str, rings: int,
                          topk_frac: float) -> float:
    """One image's score from its T inputs' patch scores (T, h, w) (its tiles; T = 1 untiled) and their own
    scores: "topk" over all its tiles' inner patches; otherwise the score of the input holding the worst inner
    patch (the untiled rule over all of them)."""
    d = inner(patch_scores, rings)                                   # (T, h', w') the patches that count
    if rule == "topk" and len(patch_scores) > 1:
        return float(topk_mean(d.reshape(1, -1), topk_frac)[0])
    return input_scores[int(d.reshape(len(d), -1).max(axis=1).argmax())]
