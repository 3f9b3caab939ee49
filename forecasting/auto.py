"""`auto`: a choice among candidate models, validated inside each training history only.

    AutoForecaster([Theta(12), ETS(12), DLinear(h=18), PatchTST(h=18)], how="global")

For every series, each candidate forecasts the validation window of the h values just before the
series' first cutoff, from what came before it: a statistical model fitted on y[:c_0 - h], a neural
model trained for the first cutoff, which held those h values out of its training (its validation
tail: early stopping's, never a gradient step's target; `NeuralForecaster.forecast_with_calibration`
"holdout"). Each candidate's validation error is its MAE over the series' in-sample one-step MAE
(a MASE that needs no season). `how` turns the errors into the forecast of every window:

    "select"   per series, the candidate of the least validation error
    "weights"  per series, the candidates weighted by the inverse of their validation errors
    "global"   the candidate of the least validation error averaged over the series, for every series
               (over each group of series that the same candidates forecast: short series apart)
    "global_weights"  the candidates weighted by the inverse of their validation errors averaged over
               the series (per group, as "global")

Nothing after a series' first cutoff enters the choice, and later windows keep it (their histories
contain the first one's). A candidate that cannot forecast a series (a neural look-back longer than
its history) is left out for that series; a series without a validation window for any candidate
gets the first candidate that can forecast it. So `auto` forecasts every series a statistical
candidate can: short series fall back to the statistical candidates on their own. With `median`
(and three or more candidates) the candidates' median is one more candidate, validated on the same
window from the same forecasts, at no cost.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from sklearn.utils._param_validation import StrOptions

from frozenvit.backbone.suite.errors import ParameterError

from .base import Forecaster
from .errors import SeriesError

HOW = ("select", "weights", "global", "global_weights")


def _is_local(model: Forecaster) -> bool:
    from .baselines import LocalModel

    return isinstance(model, LocalModel)


def validation_scale(history: np.ndarray) -> float:
    """Mean |y_t - y_{t-1}| of a history (the in-sample one-step naive MAE); 1 where that is 0 or undefined."""
    d = np.abs(np.diff(np.asarray(history, dtype=float)))
    s = float(d.mean()) if d.size else 0.0
    return s if s > 0 else 1.0


class AutoForecaster(Forecaster):
    """Per series (or globally), the candidate chosen or the candidates weighted by their error on the
    validation window before the first cutoff (see the module doc). Candidates: distinct aliases."""

    _parameter_constraints = {"candidates": [list, tuple], "how": [StrOptions(set(HOW))], "median": ["boolean"]}

    def __init__(self, candidates: Sequence[Forecaster], how: str = "global", median: bool = True) -> None:
        self.candidates = candidates
        self.how = how
        self.median = median

    @property
    def alias(self) -> str:
        return "Auto"

    def check_params(self) -> "AutoForecaster":
        """Also ParameterError for no candidate or a candidate named twice; each candidate checked."""
        super().check_params()
        aliases = [m.alias for m in self.candidates]
        if not aliases or len(set(aliases)) < len(aliases):
            raise ParameterError(f"AutoForecaster needs one or more candidates of distinct aliases, got {aliases}")
        for m in self.candidates:
            m.check_params()
        return self

    def min_history(self) -> int:
        return min(m.min_history() for m in self.candidates)

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None) -> tuple[np.ndarray, None]:
        """Every candidate's forecasts and validation forecasts, combined per `how`; nothing to save."""
        self.check_params()
        preds, errors = self.candidate_forecasts(series, cutoffs, h, refit_every=refit_every, progress=progress)
        return combine_validated(preds, self.weights(errors)), None

    def candidate_forecasts(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                            refit_every: int | None = None, progress: bool | None = None
                            ) -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's forecasts (C, S, W, h), NaN for a series it cannot forecast, and its validation
        error (C, S), NaN where it has none; with `median` and three or more candidates, one more row: their
        median (of those that forecast the series), validated where every candidate is."""
        cutoffs = np.asarray(cutoffs)
        S, W = cutoffs.shape
        first = cutoffs[:, 0]
        val = (first - h)[:, None]                                                          # (S, 1)
        preds = np.full((len(self.candidates), S, W, h), np.nan)
        errors = np.full((len(self.candidates), S), np.nan)
        vals = np.full((len(self.candidates), S, h), np.nan)                               # validation forecasts
        truth = np.stack([y[c - h: c] for y, c in zip(series, first)]) if S else np.empty((0, h))   # (S, h)
        scale = np.array([validation_scale(y[: c - h]) for y, c in zip(series, first)])
        for i, model in enumerate(self.candidates):
            fits = first >= model.min_history()
            validated = fits & (first - h >= max(model.min_history(), 2) if _is_local(model) else fits)
            how = "holdout" if not _is_local(model) and model.calibration_problem(
                cutoffs[fits], val[fits], h, "holdout") is None else "retrain"
            for idx, with_val in ((np.flatnonzero(validated), True), (np.flatnonzero(fits & ~validated), False)):
                if not idx.size:
                    continue
                part = [series[s] for s in idx]
                if with_val:
                    p, v, _ = model.forecast_with_calibration(part, cutoffs[idx], val[idx], h, refit_every=refit_every,
                                                              progress=progress, global_calibration=how)
                    vals[i, idx] = v[:, 0]
                    errors[i, idx] = np.abs(v[:, 0] - truth[idx]).mean(axis=1) / scale[idx]
                else:
                    p = model.forecast_cutoffs(part, cutoffs[idx], h, refit_every=refit_every, progress=progress)[0]
                preds[i, idx] = p
        if self.median and len(self.candidates) >= 3:            # their median: one more candidate, no fit
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                preds = np.concatenate([preds, np.nanmedian(preds, axis=0, keepdims=True)])
                errors = np.concatenate([errors, np.abs(np.nanmedian(vals, axis=0) - truth).mean(axis=1)[None]
                                         / scale[None]])
            errors[-1, ~np.isfinite(errors[:-1]).all(axis=0)] = np.nan    # validated only where all are
        if S and np.isnan(preds).all(axis=(2, 3)).all(axis=0).any():
            s = int(np.flatnonzero(np.isnan(preds).all(axis=(2, 3)).all(axis=0))[0])
            raise SeriesError(f"no candidate of auto can forecast series {s} ({first[s]} values before its first "
                              "cutoff); add a statistical candidate")
        return preds, errors

    def weights(self, errors: np.ndarray) -> np.ndarray:
        """Validation errors (C, S) -> weights (C, S), each series' summing to 1 over the candidates that have
        an error; a series without any goes to its first candidate that can forecast it (`combine_validated`)."""
        has = np.isfinite(errors)
        w = np.zeros_like(errors)
        if self.how in ("global", "global_weights"):          # per group of series that the same candidates forecast
            groups: dict[tuple, list[int]] = {}
            for s in range(errors.shape[1]):
                groups.setdefault(tuple(has[:, s]), []).append(s)
            for pattern, cols in groups.items():
                if not any(pattern):
                    continue
                mean = np.where(pattern, np.nanmean(np.where(has[:, cols], errors[:, cols], 0.0), axis=1), np.inf)
                if self.how == "global":
                    w[int(np.argmin(mean)), cols] = 1.0
                else:
                    inv = np.where(pattern, 1.0 / np.maximum(mean, 1e-12), 0.0)
                    w[:, cols] = (inv / inv.sum())[:, None]
            return w
        if self.how == "select":
            cols = np.flatnonzero(has.any(axis=0))
            w[np.nanargmin(np.where(has, errors, np.inf)[:, cols], axis=0), cols] = 1.0
        else:
            inv = np.where(has, 1.0 / np.maximum(np.where(has, errors, 1.0), 1e-12), 0.0)
            w = inv / np.maximum(inv.sum(axis=0, keepdims=True), 1e-300)
        return w


def combine_validated(preds: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Candidates' forecasts (C, S, W, h) weighted per series by `weights` (C, S) -> (S, W, h); a series of
    zero weights takes its first candidate that has forecasts."""
    out = np.einsum("cs,cswh->swh", weights, np.nan_to_num(preds))
    for s in np.flatnonzero(weights.sum(axis=0) == 0):
        c = next(c for c in range(preds.shape[0]) if np.isfinite(preds[c, s]).all())
        out[s] = preds[c, s]
    return out
