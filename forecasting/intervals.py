"""Prediction intervals for backtests: split-conformal from earlier windows' residuals.

Every model gets conformal intervals from its own out-of-sample errors. The score of a past window
j at horizon step k is its error scaled by MASE's scale of j's history, |y - f| / scale_j, so that
series of any size pool together. The interval of window w at step k is

    f_w,k  +-  q_k * scale_w,   q_k = the ceil((n + 1) level)-th smallest of the n scores at step k

over every series' windows whose truth was known at w's cutoff (split conformal: with exchangeable
scores the coverage is at least `level`). Two kinds of past windows qualify:

- K calibration windows inside the history before the first cutoff, at origins c_0 - K h, ...,
  c_0 - h (non-overlapping, the last one's truth ends at c_0). The model forecasts them out of
  sample: a local model refits at each origin, as in the backtest. A global neural model, by default
  ("holdout", `global_calibration`), forecasts them with the very model trained for the first cutoff:
  its training targets end before the validation tail it holds out (val_size, default h), and the
  calibration windows must lie inside that tail (K h <= val_size; K = 1 by default). So the
  calibration errors are those of the network being calibrated, and no second training runs; the
  tail did pick which epoch to keep (early stopping), the one way it touched the model. "retrain"
  trains a second model on the history before the first calibration window instead: on M4 Hourly
  that network's errors differed from the test network's more than the windows did (docs). So a
  one-window backtest (M4) has intervals too, at the price of K more local fits per series.
- the backtest's own earlier windows w' with c_w' + h <= c_w.

Where fewer than level / (1 - level) scores are known (e.g. 19 for 95 %), the interval is NaN:
no interval is better than a made-up one. Pooling is by window index across series: series that
end together (the usual panel) share their calendar, so the pool holds only the past.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .errors import SeriesError


def fraction_levels(levels: Sequence[float]) -> list[float]:
    """The levels that look like fractions (0.8 for 80 %): at most 1. A central interval of 1 % or less is
    never meant, 0.8 and 0.95 always are 80 % and 95 %; levels above 1 (a 10-90 % fan) are left alone."""
    return [float(v) for v in levels if 0 < float(v) <= 1]


def as_percent_hint(levels: Sequence[float]) -> str:
    """`--levels 80,95` for fraction levels (0.8, 0.95): how to write them in percent."""
    return ",".join(f"{100 * float(v):g}" if 0 < float(v) <= 1 else f"{float(v):g}" for v in levels)


def fractions_note(levels: Sequence[float]) -> tuple[str, str] | None:
    """For levels written as fractions: (why they are refused, the percentages meant); None for percentages."""
    fractions = fraction_levels(levels)
    if not fractions:
        return None
    return f"{fractions[0]:g} would be a {fractions[0]:g} % interval", as_percent_hint(levels)


def check_levels(levels: Sequence[float]) -> tuple[float, ...]:
    """Levels in percent, each strictly between 0 and 100, distinct, sorted. A level of at most 1 (a fraction,
    0.95 for 95 %) is a ParameterError naming the percentages meant."""
    from frozenvit.backbone.suite.errors import ParameterError

    note = fractions_note(levels)
    if note:
        why, hint = note
        raise ParameterError(f"interval levels are percentages, got {list(levels)} ({why}); pass "
                             f"levels=({hint}{',' if ',' not in hint else ''}), on the command line --levels {hint}")
    out = tuple(sorted(float(v) for v in levels))
    bad = [v for v in out if not 0 < v < 100]
    if bad or len(set(out)) < len(out):
        raise SeriesError(f"interval levels must be distinct percentages strictly between 0 and 100, got "
                          f"{list(levels)}; e.g. --levels 80,95")
    return out


def calibration_cutoffs(cutoffs: np.ndarray, n_calibration: int, h: int) -> np.ndarray:
    """(S, K) origins c_0 - K h, ..., c_0 - h before each series' first cutoff c_0 = cutoffs[:, 0]."""
    back = h * np.arange(n_calibration, 0, -1)                                        # (K,)
    return np.asarray(cutoffs)[:, :1] - back[None, :]


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The ceil((n + 1) level / 100)-th smallest finite score; NaN when that rank exceeds n."""
    s = np.sort(np.asarray(scores, float)[np.isfinite(scores)])
    rank = math.ceil((s.size + 1) * level / 100.0 - 1e-9)
    return float(s[rank - 1]) if 0 < rank <= s.size else float("nan")


def errors_needed(level: float) -> int:
    """The fewest scores that give `conformal_quantile` a value at `level` % (19 for 95, 4 for 80): the least n
    with ceil((n + 1) level / 100) <= n."""
    n = 1
    while math.ceil((n + 1) * level / 100.0 - 1e-9) > n:
        n += 1
    return n


def known_windows(n_calibration: int, n_windows: int, h: int, step: int) -> list[int]:
    """For each backtest window w, how many of the combined windows (K calibration, then the
    backtest's) have their truth known at w's cutoff: all K, then w' <= w - ceil(h / step)."""
    gap = -(-h // step)
    return [n_calibration + max(0, w - gap + 1) for w in range(n_windows)]


def conformal_bounds(point: np.ndarray, scale: np.ndarray, scores: np.ndarray, known: Sequence[int],
                     levels: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Conformal intervals of the backtest's forecasts.

    point (S, W, h): forecasts; scale (S, W): MASE scale of each window's history;
    scores (S, K + W, h): scaled absolute errors of the combined windows (calibration first);
    known[w]: how many leading combined windows window w may use (`known_windows`).
    Returns lo, hi (S, W, h, L); NaN where too few scores are known for a level.
    """
    S, W, h = point.shape
    q = np.full((W, h, len(levels)), np.nan)
    for w in range(W):
        pool = scores[:, : known[w]].reshape(-1, h)                                   # (S * n_w, h)
        for k in range(h):
            q[w, k] = [conformal_quantile(pool[:, k], lv) for lv in levels]
    half = q[None] * scale[:, :, None, None]                                          # (S, W, h, L)
    return point[..., None] - half, point[..., None] + half
