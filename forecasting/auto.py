"""`auto`: a choice among candidate models, validated inside each training history only.

    AutoForecaster([Theta(12), ETS(12), DLinear(h=18), PatchTST(h=18)])     # how="global", top=2, tolerance=0.2

For every series, each candidate forecasts validation windows of h values before the series' first
cutoff c_0, rolling back from it (window v holds y[c_0 - v h: c_0 - (v - 1) h]), up to `windows` of them,
each from what came before it: a statistical model fitted before each window (where that history holds
more than h values and more than the model needs), a neural model trained once before the earliest of
them (a second training, with its own early stopping on its own validation tail; where the history
holds the model's `min_history`), forecasting every window from its look-back. So every candidate is
judged on windows that neither its fit nor its early stopping saw: the network trained for c_0 would be
judged on the tail it early-stopped on, which flatters it. A series is validated on the windows that
every candidate validating its nearest window can forecast, so they are compared on the same values:
many where the history is long, one where it is short. A candidate's error on a window is its MAE over
the series' in-sample one-step MAE (a MASE that needs no season). `how` turns the errors into the
forecast of every window:

    "global"   per group of series that the same candidates forecast and validate, the mean of
               the `top` candidates of the least mean relative error over the group (an error over the
               least of its series and window, averaged over the series' windows, so that every series
               has the same say), those within `tolerance` (relative) of the least: the best one alone
               where it stands out, else the combination of the near-best (the default; top=1 is a plain
               choice)
    "global_weights"  the candidates weighted by the inverse of their mean relative error (per group)
    "select"   per series, the candidate of the least mean relative validation error
    "weights"  per series, the candidates weighted by the inverse of their mean relative validation errors

Why "global" with the near-best combined: a few validation windows per series are too little to tell
two near-equal candidates apart; why relative errors: a mean of the errors themselves follows the few
series where a candidate fails worst; why several windows: with few series (ETTh2's seven) one window
each ranks the candidates by chance (benchmarks/forecast_auto_rules.py compares the rules;
docs/forecasting.md).

Nothing after a series' first cutoff enters the choice, and later windows keep it (their histories
contain the first one's). A candidate that cannot forecast a series (a neural look-back longer than
its history) is left out for that series; a series too short for any validation window takes the
weights the rule gives over the other series, for the candidates it can forecast (their median only
where it forecasts with all of them: the median of fewer is another forecast than the one validated).
So `auto` forecasts every series a statistical candidate can: short series fall back to the statistical
candidates on their own. With `median` (and three or more candidates) the candidates' median is one more candidate,
validated on the same windows from the same forecasts, at no cost; so is each median of `median_of` (named
members, e.g. the candidates but a baseline: the command's median column). In a backtest a candidate also run
alone is fitted once (forecasting.reuse).

After `forecast_cutoffs` the model holds what it forecast each series with (`choice_`, an AutoChoice:
the candidates' weights per series); a backtest reports it (BacktestResult.choices, the CLI's
auto_weights.csv).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Sequence

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from frozenvit.backbone.suite.errors import ParameterError

from .base import Forecaster
from .baselines import LocalModel, validation_scale
from .defaults import AUTO_COMBINE
from .errors import SeriesError

HOW = ("global", "global_weights", "select", "weights")
MEDIAN = "median of candidates"           # the candidates' median, as auto's choices name it
VALIDATED, OTHERS, NONE = "validated", "others", "none"     # AutoChoice.source: where a series' weights came from


@dataclass(frozen=True)
class AutoChoice:
    """What `auto` forecast each series with: its candidates' names (its medians last: MEDIAN, the median of
    all of them, and any of `median_of`) and their weights (S, C), each series' summing to 1."""

    candidates: list[str]
    weights: np.ndarray
    # where each series' weights come from (S,): VALIDATED, its own validation windows; OTHERS, too short to
    # validate, the rule over the series that were; NONE, too short and no series to borrow from, its first
    # candidate that forecasts it (no validation at all). None: every series validated (or not known)
    source: np.ndarray | None = None

    def counts(self) -> dict[str, int]:
        """How many series took their weights from each source (VALIDATED, OTHERS, NONE)."""
        src = np.full(self.weights.shape[0], VALIDATED) if self.source is None else np.asarray(self.source)
        return {k: int((src == k).sum()) for k in (VALIDATED, OTHERS, NONE)}

    def validation_note(self, where: str) -> str:
        """How the weights were validated, for a line `auto forecast with (<note>): <describe()>`; `where`
        names the validation windows, e.g. "before each series' last 14 values". Never claims a validation
        that did not happen: series too short for any validation window are said to be, with what forecast them."""
        n = self.counts()
        S = self.weights.shape[0]
        if n[VALIDATED] == S:
            return f"validated {where}"
        parts = [f"validated {where} on {n[VALIDATED]} of {S} series"] if n[VALIDATED] else []
        if n[OTHERS]:
            parts.append(f"{n[OTHERS]} of {S} series too short to validate took the weights validated on the others")
        if n[NONE]:
            firsts = sorted({self.candidates[int(np.argmax(self.weights[s]))]
                             for s in np.flatnonzero(np.asarray(self.source) == NONE)})
            parts.append(f"{n[NONE]} of {S} series too short to validate the candidates on: not validated, each "
                         f"forecast by its first candidate that can, {' or '.join(firsts)}")
        return "; ".join(parts)

    def combinations(self) -> list[dict]:
        """Each distinct weighting, most series first: {"members": {name: weight}, "series": count}."""
        found: dict[tuple, int] = {}
        for row in np.round(self.weights, 6):
            key = tuple((self.candidates[c], float(row[c])) for c in np.flatnonzero(row))
            found[key] = found.get(key, 0) + 1
        return [{"members": dict(k), "series": n} for k, n in sorted(found.items(), key=lambda kv: -kv[1])]

    def mean_weights(self) -> dict[str, float]:
        """Each candidate's weight, averaged over the series."""
        return {name: float(w) for name, w in zip(self.candidates, self.weights.mean(axis=0))}

    def to_dict(self) -> dict:
        n = self.counts()
        return {"candidates": list(self.candidates), "mean_weights": self.mean_weights(),
                "combinations": self.combinations(),
                **({} if n[VALIDATED] == self.weights.shape[0] else
                   {"series_validated": n[VALIDATED], "series_weighted_by_others": n[OTHERS],
                    "series_not_validated": n[NONE]})}

    def describe(self, most: int = 4) -> str:
        """One line: the `most` commonest weightings and how many series took each, e.g. 'Theta + ETS (1/2
        each) on 640 of 645 series'."""
        S, found = self.weights.shape[0], self.combinations()
        parts = []
        for c in found[:most]:
            names, ws = list(c["members"]), list(c["members"].values())
            how = "" if len(ws) == 1 else f" (1/{len(ws)} each)" if len(set(ws)) == 1 else \
                " (" + ", ".join(f"{w:.2f}" for w in ws) + ")"
            parts.append(f"{' + '.join(names)}{how} on {c['series']} of {S} series")
        rest = sum(c["series"] for c in found[most:])
        return "; ".join(parts) + (f"; {len(found) - most} other weightings on {rest} series" if rest else "")


def _is_local(model: Forecaster) -> bool:
    return isinstance(model, LocalModel)


class AutoForecaster(Forecaster):
    """Per series (or globally), the candidate chosen or the candidates weighted by their error on the
    validation window before the first cutoff (see the module doc). Candidates: distinct aliases."""

    _parameter_constraints = {"candidates": [list, tuple], "how": [StrOptions(set(HOW))], "median": ["boolean"],
                              "median_of": [list, tuple],
                              "top": [Interval(Integral, 1, None, closed="left")],
                              "windows": [Interval(Integral, 1, None, closed="left")],
                              "tolerance": [Interval(Real, 0, None, closed="left")]}

    def __init__(self, candidates: Sequence[Forecaster], how: str = "global", median: bool = True,
                 top: int = AUTO_COMBINE["top"], tolerance: float = AUTO_COMBINE["tolerance"],
                 windows: int = AUTO_COMBINE["windows"], median_of: Sequence[Sequence[str]] = (),
                 alias: str | None = None) -> None:
        self.alias = alias
        self.candidates = candidates
        self.how = how
        self.median = median
        self.median_of = median_of
        self.top = top
        self.tolerance = tolerance
        self.windows = windows

    def _default_alias(self) -> str:
        return "Auto"

    def check_params(self) -> "AutoForecaster":
        """Also ParameterError for no candidate or a candidate named twice; each candidate checked."""
        super().check_params()
        aliases = [m.alias for m in self.candidates]
        if not aliases or len(set(aliases)) < len(aliases):
            raise ParameterError(f"AutoForecaster needs one or more candidates of distinct aliases, got {aliases}")
        for m in self.candidates:
            m.check_params()
        for members in self.median_of:
            if len(set(members)) < 2 or len(set(members)) < len(members) or not set(members) <= set(aliases):
                raise ParameterError(f"each median of auto's median_of names two or more of its candidates ({aliases}) "
                                     f"once each, got {list(members)}")
        return self

    def medians(self) -> list[tuple[str, np.ndarray]]:
        """The medians that are candidates too, as (name, member indices), in the order of their rows after
        the candidates': with `median` (and three or more candidates) all of them (MEDIAN), then each of
        `median_of`, named as the command names a median column ("median(Theta,ETS)")."""
        out = [(MEDIAN, np.arange(len(self.candidates)))] if self.median and len(self.candidates) >= 3 else []
        aliases = [m.alias for m in self.candidates] if self.median_of else []
        return out + [(f"median({','.join(members)})", np.array([aliases.index(a) for a in members]))
                      for members in self.median_of]

    def min_history(self) -> int:
        return min(m.min_history() for m in self.candidates)

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None) -> tuple[np.ndarray, None]:
        """Every candidate's forecasts and validation forecasts, combined per `how`; nothing to save. Sets
        `choice_` (AutoChoice): the weights each series was forecast with."""
        self.check_params()
        preds, errors = self.candidate_forecasts(series, cutoffs, h, refit_every=refit_every, progress=progress)
        ruled = self.weights(errors, np.isfinite(preds).all(axis=(2, 3)))
        w = effective_weights(preds, ruled)
        names = [m.alias for m in self.candidates] + [name for name, _ in self.medians()]
        source = np.where(np.isfinite(errors).any(axis=(0, 2)), VALIDATED,
                          np.where(ruled.sum(axis=0) > 0, OTHERS, NONE))
        self.choice_ = AutoChoice(names, w.T, source)
        return np.einsum("cs,cswh->swh", w, np.nan_to_num(preds)), None

    def forecast_with_calibration(self, series: Sequence[np.ndarray], cutoffs: np.ndarray,
                                  calib_cutoffs: np.ndarray, h: int, *, refit_every: int | None = None,
                                  progress: bool | None = None, global_calibration: str | None = None
                                  ) -> tuple[np.ndarray, np.ndarray, None]:
        """As a local model's (the calibration windows forecast as the backtest's, each validated before
        its own); `choice_` stays that of the backtest's windows."""
        kw = dict(refit_every=refit_every, progress=progress)
        preds, fitted = self.forecast_cutoffs(series, cutoffs, h, **kw)
        choice = self.choice_
        calib = (self.forecast_cutoffs(series, calib_cutoffs, h, **kw)[0]
                 if np.asarray(calib_cutoffs).shape[1] else np.empty((len(series), 0, h)))
        self.choice_ = choice
        return preds, calib, fitted

    def candidate_forecasts(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                            refit_every: int | None = None, progress: bool | None = None
                            ) -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's forecasts (C, S, W, h), NaN for a series it cannot forecast, and its validation
        errors (C, S, V) on the `windows` V validation windows (window 0 the nearest the first cutoff), NaN
        where it has none; then one row per median (`medians`): the median of its members (of those that
        forecast the series), validated where every member is. A series is validated on the windows
        that every candidate validating its nearest window can validate (see `validation_windows`)."""
        cutoffs = np.asarray(cutoffs)
        S, W = cutoffs.shape
        V = int(self.windows)
        first = cutoffs[:, 0]
        starts = first[:, None] - h * np.arange(1, V + 1)[None]                              # (S, V)
        counts = self.validation_windows(first, h)                                            # (C, S)
        preds = np.full((len(self.candidates), S, W, h), np.nan)
        vals = np.full((len(self.candidates), S, V, h), np.nan)                              # validation forecasts
        truth = np.stack([np.stack([y[c: c + h] if c >= 0 else np.full(h, np.nan) for c in cs])
                          for y, cs in zip(series, starts)]) if S else np.empty((0, V, h))  # (S, V, h)
        scale = np.array([validation_scale(y[: c - h]) for y, c in zip(series, first)])
        for i, model in enumerate(self.candidates):
            idx = np.flatnonzero(first >= model.min_history())
            if idx.size:           # every fitting series in one call: the same work as the model run alone
                preds[i, idx] = model.forecast_cutoffs([series[s] for s in idx], cutoffs[idx], h,
                                                       refit_every=refit_every, progress=progress)[0]
            vals[i] = self._validate(model, series, starts, counts[i], h, progress)
        errors = np.abs(vals - truth[None]).mean(axis=3) / scale[None, :, None]              # (C, S, V)
        medians = self.medians()
        if medians:                                              # more candidates, no fit
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                rows = [np.nanmedian(preds[idx], axis=0) for _, idx in medians]
                errs = [np.where(np.isfinite(errors[idx]).all(axis=0),
                                 np.abs(np.nanmedian(vals[idx], axis=0) - truth).mean(axis=2) / scale[:, None], np.nan)
                        for _, idx in medians]                                                  # (S, V) each
            preds, errors = np.concatenate([preds, np.stack(rows)]), np.concatenate([errors, np.stack(errs)])
        if S and np.isnan(preds).all(axis=(2, 3)).all(axis=0).any():
            s = int(np.flatnonzero(np.isnan(preds).all(axis=(2, 3)).all(axis=0))[0])
            raise SeriesError(f"no candidate of auto can forecast series {s} ({first[s]} values before its first "
                              "cutoff); add a statistical candidate")
        return preds, errors

    def validation_windows(self, first: np.ndarray, h: int) -> np.ndarray:
        """How many validation windows (C, S) each candidate forecasts for each series, given the series'
        first cutoffs (S,). Window 1 ends at the first cutoff, window v where window v - 1 starts, and a
        candidate can validate it where the history before it holds what a fit needs: a statistical model
        more than h values and more than it needs, a network its look-back and tails (its `min_history`).
        Every candidate that can validate a series' nearest window gets the windows all of them can (at most
        `windows`), so that they are compared on the same values; the others get none."""
        first = np.asarray(first)
        starts = first[:, None] - h * np.arange(1, int(self.windows) + 1)[None]                 # (S, V)
        need = np.array([max(m.min_history(), h, 3) + 1 if _is_local(m) else m.min_history()
                         for m in self.candidates])
        fits = np.array([first >= m.min_history() for m in self.candidates]).reshape(len(need), -1)
        can = ((starts[None] >= need[:, None, None]).sum(axis=2) * fits)                          # (C, S)
        shared = np.where(can > 0, can, np.iinfo(int).max).min(axis=0)                             # (S,)
        return np.where(can > 0, shared[None], 0)

    @staticmethod
    def _validate(model: Forecaster, series: Sequence[np.ndarray], starts: np.ndarray, counts: np.ndarray, h: int,
                  progress: bool | None) -> np.ndarray:
        """`model`'s forecasts (S, V, h) of each series' first `counts` (S,) validation windows (cutoffs
        `starts`, (S, V), nearest first), NaN beyond: a statistical model fitted before each window, a
        network trained once on each series' history before its earliest window, then forecasting them all."""
        S, V = starts.shape
        out = np.full((S, V, h), np.nan)
        if _is_local(model):                  # a fit per window: series of the same count in one call
            for k in np.unique(counts[counts > 0]):
                idx = np.flatnonzero(counts == k)
                out[idx, :k] = model.forecast_cutoffs([series[s] for s in idx], starts[idx, :k][:, ::-1], h,
                                                      progress=progress)[0][:, ::-1]
            return out
        idx = np.flatnonzero(counts)
        if idx.size:                          # one training: cutoffs from each series' earliest window on
            cuts = starts[idx[:, None], np.minimum(np.arange(V)[None], counts[idx, None] - 1)]       # (n, V)
            f = model.forecast_cutoffs([series[s] for s in idx], cuts[:, ::-1], h, progress=progress)[0][:, ::-1]
            out[idx] = np.where(np.arange(V)[None, :, None] < counts[idx, None, None], f, np.nan)
        return out

    def weights(self, errors: np.ndarray, forecasts: np.ndarray | None = None) -> np.ndarray:
        """Validation errors (C, S, V), or (C, S) for one window -> weights (C, S), each series' summing to 1
        over the candidates that have an error. The group rules ("global", "global_weights") rule each group
        of series that the same candidates validate and (given `forecasts`) forecast: series too short for
        a network's look-back are not ruled by those it forecasts without validating, and (where validated)
        take what auto over the statistical candidates alone gives them. A series without any error takes
        the weights of the group rule ("global", or "global_weights" for the weighting rules) over every
        series validated for all the candidates that `forecasts` (C, S: which candidate forecasts which
        series) says it has, a median only where every member forecasts it (a median of fewer members is not
        the one validated); else (no such series, or no `forecasts`) zeros: its first candidate
        (`combine_validated`)."""
        errors = np.asarray(errors, dtype=float)
        errors = errors[:, :, None] if errors.ndim == 2 else errors
        has = np.isfinite(errors).any(axis=2)                                                     # (C, S)
        w = np.zeros(has.shape)
        inverse = self.how in ("global_weights", "weights")
        if self.how in ("global", "global_weights"):          # per group: the same candidates validate and forecast
            fc = np.ones_like(has) if forecasts is None else np.array(forecasts, dtype=bool)
            groups: dict[tuple, list[int]] = {}
            for s in range(errors.shape[1]):
                groups.setdefault((tuple(has[:, s]), tuple(fc[:, s])), []).append(s)
            for (validated, _), cols in groups.items():
                pattern = np.array(validated)
                if pattern.any():
                    w[:, cols] = self._group(errors[:, cols], pattern, inverse)[:, None]
        else:                                                 # per series
            for s in np.flatnonzero(has.any(axis=0)):
                w[:, s] = self._group(errors[:, s:s + 1], has[:, s], inverse, top=1 if self.how == "select" else None)
        C = len(self.candidates)
        medians = self.medians()[: max(errors.shape[0] - C, 0)]       # the rows given (a study may give fewer)
        for s in np.flatnonzero(~has.any(axis=0)) if forecasts is not None else ():
            pattern = np.array(forecasts, dtype=bool)[:, s]
            for j, (_, idx) in enumerate(medians):
                if not pattern[idx].all():            # this median is of fewer members than the one validated
                    pattern[C + j] = False
            cols = np.flatnonzero(has[pattern].all(axis=0)) if pattern.any() else []
            if len(cols):
                w[:, s] = self._group(errors[:, cols], pattern, inverse)
        return w

    def _group(self, errors: np.ndarray, pattern: np.ndarray, inverse: bool, top: int | None = None) -> np.ndarray:
        """Errors (C, s, V) of a group of series, of which the candidates in `pattern` (C,) are used -> weights
        (C,). Each candidate's score: its mean relative error, an error over the least of its series and
        window (of the candidates in `pattern`), so that every series has the same say, whatever its errors'
        size (windows whose least error is 0 tell nothing and are left out), averaged over each series'
        windows, then over the series. With `inverse`, each candidate weighted by the inverse of its score;
        else the equal-weight mean of the `top` of the least score that lie within `tolerance` (relative) of
        the least."""
        used = np.where(pattern[:, None, None], errors, np.nan)                                    # (C, s, V)
        least = np.nanmin(np.where(np.isfinite(used), used, np.inf), axis=0)                      # (s, V)
        with warnings.catch_warnings():                   # windows or series without any error: all NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            rel = used / np.where((least > 0) & np.isfinite(least), least, np.nan)[None]
            if not np.isfinite(rel[pattern]).any():      # every least error 0: the errors as they are
                rel = used
            mean = np.nanmean(np.nanmean(rel, axis=2), axis=1)                                     # (C,)
        mean = np.where(pattern & np.isfinite(mean), mean, np.inf)
        if inverse:
            inv = np.where(np.isfinite(mean), 1.0 / np.maximum(mean, 1e-12), 0.0)
            return inv / inv.sum()
        w = np.zeros(errors.shape[0])
        order = np.argsort(mean, kind="stable")[: int(self.top if top is None else top)]
        keep = order[mean[order] <= mean[order[0]] * (1 + float(self.tolerance))]
        w[keep] = 1.0 / keep.size
        return w


def effective_weights(preds: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """`weights` (C, S) as they combine the forecasts (C, S, W, h): a series of zero weights takes its first
    candidate that has forecasts (weight 1)."""
    w = np.array(weights, dtype=float)
    for s in np.flatnonzero(w.sum(axis=0) == 0):
        w[next(c for c in range(preds.shape[0]) if np.isfinite(preds[c, s]).all()), s] = 1.0
    return w


def combine_validated(preds: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Candidates' forecasts (C, S, W, h) weighted per series by `weights` (C, S) -> (S, W, h); a series of
    zero weights takes its first candidate that has forecasts."""
    return np.einsum("cs,cswh->swh", effective_weights(preds, weights), np.nan_to_num(preds))
