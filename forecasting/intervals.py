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

A series flat for most of its history that has only begun to move (a new item's leading zeros, intermittent
demand) has a MASE scale far below its changes now, and so intervals far too narrow for its values: such
series are named in a FlatHistoryWarning (`flat_then_moving`); their intervals are left as the method gives them.
"""
from __future__ import annotations

import math
import warnings
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


def windows_needed(level: float, n_series: int) -> int:
    """The calibration windows that give `n_series` series `errors_needed(level)` errors per step together."""
    return -(-errors_needed(level) // max(1, int(n_series)))


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


# A history flat for most of it (its value unchanged from a season before at FLAT_SHARE of its steps or more) whose
# last max(season, h) steps change SCALE_JUMP times as much as MASE's scale says: the scale sizes no interval of now.
FLAT_SHARE = 0.5
SCALE_JUMP = 10


class FlatHistoryWarning(UserWarning):
    """Some series' intervals are sized by the MASE scale of a history flat for most of it, far below their last
    values' changes: they are too narrow for those series now."""


def flat_then_moving(history: np.ndarray, season_length: int, h: int) -> tuple[float, float] | None:
    """(MASE's scale, the mean |y_t - y_{t-m}| of the last max(m, h) steps) of a history (T,) flat for most of it
    (FLAT_SHARE of its seasonal differences zero) whose last steps change at least SCALE_JUMP times its scale;
    None for any other history (too short to tell, flat throughout, or moving all along)."""
    y, m = np.asarray(history, dtype=float), int(season_length)
    n = max(m, int(h))
    if y.size <= n + m:
        return None
    d = np.abs(y[m:] - y[:-m])                                                        # (T - m,)
    scale, recent = float(d.mean()), float(d[-n:].mean())
    if scale > 0 and recent >= SCALE_JUMP * scale and (d == 0).mean() >= FLAT_SHARE:
        return scale, recent
    return None


def warn_flat_then_moving(ids: Sequence, series: Sequence[np.ndarray], cutoffs: np.ndarray, season_length: int,
                          h: int, stacklevel: int = 3) -> list[str]:
    """A FlatHistoryWarning naming the series whose history before some cutoff (S, W) is `flat_then_moving`; the
    names (none: no warning)."""
    found = {}
    for uid, y, cs in zip(ids, series, np.asarray(cutoffs)):
        for c in cs:
            hit = flat_then_moving(np.asarray(y)[: int(c)], season_length, h)
            if hit is not None:
                found.setdefault(str(uid), hit)
    if found:
        (uid, (scale, recent)), n = next(iter(found.items())), max(int(season_length), int(h))
        named = ", ".join(list(found)[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        warnings.warn(f"conformal intervals of {len(found)} series ({named}) are sized by the MASE scale of a history "
                      f"that was flat for most of it ({uid}: {scale:.3g}, while its last {n} steps change by "
                      f"{recent:.3g}, {recent / scale:.0f} times as much): they are far too narrow for such a series' values now "
                      "(a new item, or intermittent demand that has begun to sell); drop such a series' values from "
                      "before it began to move (its leading flat stretch), so that its history is what it is now",
                      FlatHistoryWarning, stacklevel=stacklevel)
    return list(found)
