"""Point and interval forecast metrics and the Diebold-Mariano test. Pure numpy functions.

MASE follows the M4 competition: the absolute error divided by the in-sample mean absolute
seasonal difference of the history the forecast was made from (nothing after the cutoff).
MSIS, M4's interval metric, divides the interval score by that same scale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .errors import SeriesError


def mase_scale(history: np.ndarray, season_length: int) -> float:
    """Mean |y_t - y_{t-m}| over the history (T,); NaN when it is zero (a constant history)."""
    history = np.asarray(history, dtype=float)
    if history.size <= season_length:
        raise SeriesError(f"MASE needs more than --season-length {season_length} values of history, "
                          f"got {history.size}; use a longer history or a smaller --season-length")
    s = float(np.mean(np.abs(history[season_length:] - history[:-season_length])))
    return s if s > 0 else float("nan")


def smape_terms(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """200 |y - f| / (|y| + |f|) elementwise (M4's sMAPE, in percent); 0 where both are 0."""
    y, f = np.asarray(y, float), np.asarray(f, float)
    den = np.abs(y) + np.abs(f)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, 200.0 * np.abs(y - f) / den, 0.0)


def mase(y: np.ndarray, f: np.ndarray, history: np.ndarray, season_length: int) -> float:
    """MASE of one forecast `f` (h,) of `y` (h,) made from `history` (T,)."""
    return float(np.mean(np.abs(np.asarray(y, float) - np.asarray(f, float))) / mase_scale(history, season_length))


def smape(y: np.ndarray, f: np.ndarray) -> float:
    return float(np.mean(smape_terms(y, f)))


def interval_score_terms(y: np.ndarray, lo: np.ndarray, hi: np.ndarray, level: float) -> np.ndarray:
    """Elementwise interval score of the central `level` % interval [lo, hi] (M4's, before scaling):
    (hi - lo) + 2/a (lo - y) 1{y < lo} + 2/a (y - hi) 1{y > hi}, with a = 1 - level / 100."""
    y, lo, hi = np.asarray(y, float), np.asarray(lo, float), np.asarray(hi, float)
    a = 1.0 - level / 100.0
    return (hi - lo) + 2.0 / a * (np.maximum(lo - y, 0.0) + np.maximum(y - hi, 0.0))


def msis(y: np.ndarray, lo: np.ndarray, hi: np.ndarray, history: np.ndarray, season_length: int,
         level: float = 95.0) -> float:
    """MSIS of one interval forecast [lo, hi] (h,) of `y` (h,) made from `history` (T,): the mean
    interval score over the h steps divided by MASE's scale (M4: level 95, season m)."""
    return float(np.mean(interval_score_terms(y, lo, hi, level)) / mase_scale(history, season_length))


def coverage(y: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Share of values inside their closed interval, lo <= y <= hi; NaN bounds (no interval) are left out."""
    y, lo, hi = np.asarray(y, float), np.asarray(lo, float), np.asarray(hi, float)
    has = np.isfinite(lo) & np.isfinite(hi)
    return float(np.mean((lo[has] <= y[has]) & (y[has] <= hi[has]))) if has.any() else float("nan")


@dataclass(frozen=True)
class DMResult:
    statistic: float      # negative: the first forecast has the lower loss
    p_value: float        # two-sided
    n: int
    mean_diff: float      # mean loss differential (first minus second)
    reason: str = ""      # why statistic and p_value are NaN (the test cannot be computed); "" when they are not


def diebold_mariano(d: np.ndarray, lag: int = 0, harvey: bool = True) -> DMResult:
    """Diebold-Mariano test on a loss-differential sequence `d` (n,), e.g. |e1| - |e2|.

    The long-run variance is the Newey-West (Bartlett) sum of autocovariances up to `lag`
    (h - 1 for h-step forecasts). With `harvey` the Harvey-Leybourne-Newbold small-sample
    correction is applied and the p-value comes from Student's t with n - 1 degrees of freedom
    (with lag 0 this is exactly the one-sample t-test of mean(d) = 0). Where that correction is 0 (n = lag + 1:
    one window of h steps of one series) the test cannot be computed: statistic and p-value are NaN and
    `reason` says why (never a p-value of 1, which would read as "no difference").
    """
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    n = d.size
    if n < 2:
        raise SeriesError(f"Diebold-Mariano needs at least 2 loss differentials, got {n}")
    mean = float(d.mean())
    dc = d - mean
    lrv = float(dc @ dc) / n
    for k in range(1, min(lag, n - 1) + 1):
        lrv += 2.0 * (1.0 - k / (lag + 1)) * float(dc[k:] @ dc[:-k]) / n
    if lrv <= 0:
        stat = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    else:
        stat = mean / math.sqrt(lrv / n)
    if harvey:
        h = lag + 1
        correction = n + 1 - 2 * h + h * (h - 1) / n
        if correction <= 0:
            return DMResult(float("nan"), float("nan"), n, mean,
                            f"not computed: {n} loss differentials with a lag of {lag} leave the Harvey small-sample "
                            "correction at 0 (one window of one series); use more windows or more series")
        stat *= math.sqrt(correction / n)
        p = 2.0 * float(stats.t.sf(abs(stat), df=n - 1))
    else:
        p = 2.0 * float(stats.norm.sf(abs(stat)))
    return DMResult(float(stat), p, n, mean)
