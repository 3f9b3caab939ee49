"""Rolling-origin backtests with MASE per horizon step.

For each series, window w = 0..n_windows-1 has its cutoff after position
c_w = T - h - (n_windows - 1 - w) * step_size: the history is y[:c_w], the truth y[c_w:c_w + h].
Every model forecasts through one contract, `Forecaster.forecast_cutoffs` (forecasting.base):
local (statistical) models refit at every cutoff on the history only; global (neural) models
train once on every series' history before the first cutoff (or again every `refit_every`
windows, on the history before that window) and forecast each window from its own look-back.
The MASE scale of a window is computed from that window's history only. A window whose history does
not change over the MASE season (a constant, all zeros) has no MASE: it is forecast and scored by sMAPE,
MAE and MSE like any other, left out of every mean of MASE and MSIS, and named in `mase_undefined`.

With `levels`, every model also gets conformal intervals (forecasting.intervals), calibrated on
windows whose truth was known at the cutoff, and models with their own intervals (ETS) give those
too; the result reports coverage per level and step and M4's MSIS. An `Ensemble` combines its
members' forecasts; a member that also runs alone is fitted once, and members not named alone
are added as columns, so that the ensemble can be tested against each (`dm_vs_members`).
"""
from __future__ import annotations

import contextlib
import copy
import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from frozenvit.backbone.suite.engine import check_engine, ray_session, use_engine
from frozenvit.backbone.suite.errors import ParameterError

from .base import Forecaster
from .data import DS, ID, Y, validate
from .defaults import CONFORMAL, GLOBAL_CALIBRATIONS
from .ensemble import Ensemble, combine, same_model
from .errors import SeriesError
from .intervals import calibration_cutoffs, check_levels, conformal_bounds, known_windows, warn_flat_then_moving
from .lookback import auto_windows, kept_for_windows, prepare, skipped
from .metrics import diebold_mariano, interval_score_terms, mase_scale, smape_terms
from .reuse import shared_fits

METRICS = ("mase", "smape", "mae", "mse")


class UndefinedMASEWarning(UserWarning):
    """Some windows' histories are flat over the MASE season: they are scored without MASE."""


class SeasonWarning(UserWarning):
    """A model's own season differs from the season_length of the backtest or forecast that runs it (MASE's lag),
    or a model without a season is run by a call that was given none (season 1)."""


@dataclass
class BacktestResult:
    """Forecasts of every model at every (series, cutoff, step), like statsforecast's cross_validation.

    forecasts: columns unique_id, cutoff, ds, step (1..h), y, <one column per model>
    scales: unique_id, cutoff, scale (MASE denominator from the history before the cutoff)
    """

    forecasts: pd.DataFrame
    scales: pd.DataFrame
    models: list[str]
    h: int
    season_length: int
    n_windows: int = 1                             # cutoffs per series, as asked
    step_size: int | None = None                   # steps between a series' cutoffs (default h)
    mase_season: int | None = None                 # lag of MASE's scale (default season_length)
    fitted: dict = field(default_factory=dict)     # alias -> the model fitted last, where one outlives a window
    seconds: dict = field(default_factory=dict)    # alias -> wall seconds (fit + predict; an ensemble: its members')
    levels: tuple = ()                             # interval levels in percent, e.g. (80.0, 95.0)
    calibration_windows: int = 0                   # conformal calibration windows before the first cutoff
    global_calibration: str | None = None          # where global models' calibration forecasts came from
    intervals: dict = field(default_factory=dict)  # label -> level -> (lo, hi), each (rows,) like forecasts;
                                                   # label: the model's alias (conformal) or '<alias>/own'
    members: dict = field(default_factory=dict)    # ensemble alias -> its members' aliases
    input_size: int | None = None                  # the global models' look-back, where the backtest set it
    short_series: dict = field(default_factory=dict)   # {"policy", "ids"}: series too short for that look-back
    neural_lengths: dict = field(default_factory=dict)  # input_size="auto": look-back, patch... (lookback.py)
    choices: dict = field(default_factory=dict)    # auto's alias -> its AutoChoice: each series' candidates' weights
    mase_undefined: dict = field(default_factory=dict)  # {"ids", "windows", "reason"}: flat histories, no MASE

    def errors(self, metric: str) -> pd.DataFrame:
        """Per-row error terms of `metric` for each model: columns unique_id, cutoff, step, <models>."""
        f = self.forecasts
        y = f[Y].to_numpy()
        out = f[[ID, "cutoff", "step"]].copy()
        if metric == "mase":
            scale = self._row_scale()
        for m in self.models:
            p = f[m].to_numpy()
            if metric == "mase":
                out[m] = np.abs(y - p) / scale
            elif metric == "smape":
                out[m] = smape_terms(y, p)
            elif metric == "mae":
                out[m] = np.abs(y - p)
            elif metric == "mse":
                out[m] = (y - p) ** 2
            else:
                raise ValueError(f"unknown metric {metric!r}; use one of {METRICS}")
        return out

    def by_horizon(self, metric: str = "mase") -> pd.DataFrame:
        """model x horizon step (1..h): the metric averaged over series and cutoffs."""
        e = self.errors(metric)
        return e.groupby("step")[self.models].mean().T.rename_axis("model")

    def mase_by_horizon(self) -> pd.DataFrame:
        return self.by_horizon("mase")

    def per_series(self, metric: str = "mase") -> pd.DataFrame:
        """unique_id x model: the metric averaged over that series' cutoffs and steps."""
        return self.errors(metric).groupby(ID, sort=False)[self.models].mean()

    def overall(self, metric: str = "mase") -> pd.Series:
        """model -> the metric averaged per series first, then over series (M4's convention)."""
        return self.per_series(metric).mean()

    def mase(self) -> pd.Series:
        return self.overall("mase")

    def dm_test(self, baseline: str | None = None, loss: str = "mase") -> pd.DataFrame:
        """Diebold-Mariano test of each model against `baseline` (default: the seasonal naive).

        Loss differential d = loss(model) - loss(baseline) with `loss` one of the METRICS' terms
        (scaled absolute error by default). With several series: d is averaged per series and
        the test runs across series (independent units). With one series: d per step of every
        window, in time order, with a Newey-West lag of h - 1. Negative statistic: model better.
        Where the test cannot be computed (one window of one series, too few differentials) dm_stat and
        p_value are NaN and the column `reason` says why ("" elsewhere).
        """
        base = baseline or self.default_baseline
        if base not in self.models:
            raise ValueError(f"baseline {base!r} is not among the models {self.models}")
        e = self.errors(loss).sort_values([ID, "cutoff", "step"])
        rows = []
        for m in self.models:
            if m == base:
                continue
            d = e[m] - e[base]
            if e[ID].nunique() > 1:
                d, lag = d.groupby(e[ID], sort=False).mean().to_numpy(), 0
            else:
                d, lag = d.to_numpy(), self.h - 1
            if np.isfinite(d).any() and (d[np.isfinite(d)] == 0).all():      # the same forecasts: no test
                rows.append({"model": m, "baseline": base, "dm_stat": np.nan, "p_value": np.nan, "mean_diff": 0.0,
                             "n": int(np.isfinite(d).sum()),
                             "reason": f"not computed: its forecasts are {base}'s (every loss differential is 0)"})
                continue
            if np.isfinite(d).sum() < 2:        # windows without MASE (flat histories) leave too few
                rows.append({"model": m, "baseline": base, "dm_stat": np.nan, "p_value": np.nan,
                             "mean_diff": np.nan, "n": int(np.isfinite(d).sum()),
                             "reason": f"not computed: {int(np.isfinite(d).sum())} loss differential(s) with a "
                                       f"{loss} (flat histories have none); it needs 2"})
                continue
            r = diebold_mariano(d, lag=lag)
            rows.append({"model": m, "baseline": base, "dm_stat": r.statistic, "p_value": r.p_value,
                         "mean_diff": r.mean_diff, "n": r.n, "reason": r.reason})
        return pd.DataFrame(rows).set_index("model") if rows else pd.DataFrame()

    def dm_not_computed(self) -> dict[str, str]:
        """model -> why its Diebold-Mariano test against the baseline has no value (NaN); {} when all have one."""
        dm = self.dm_test() if len(self.models) > 1 else pd.DataFrame()
        return {} if dm.empty else {m: r for m, r in dm["reason"].items() if r}

    def dm_vs_members(self, loss: str = "mase") -> pd.DataFrame:
        """Diebold-Mariano test of every ensemble against each of its members (rows: ensemble, member)."""
        rows = [{"ensemble": e, "member": m, **self.dm_test(baseline=m, loss=loss).loc[e].to_dict()}
                for e, ms in self.members.items() for m in ms]
        return pd.DataFrame(rows).drop(columns="baseline").set_index(["ensemble", "member"]) if rows else pd.DataFrame()

    def _row_scale(self) -> np.ndarray:
        """MASE's scale of each forecasts row's window, (rows,)."""
        return self.forecasts.merge(self.scales, on=[ID, "cutoff"], how="left")["scale"].to_numpy()

    def interval_rows(self, label: str, level: float) -> pd.DataFrame:
        """Per-row terms of one interval set: columns unique_id, cutoff, step, has (an interval exists),
        covered (lo <= y <= hi), is (interval score) and width, both over MASE's scale; NaN where
        there is no interval."""
        f = self.forecasts
        lo, hi = self.intervals[label][level]
        y, scale = f[Y].to_numpy(), self._row_scale()
        has = np.isfinite(lo) & np.isfinite(hi)
        out = f[[ID, "cutoff", "step"]].copy()
        out["has"], out["covered"] = has, np.where(has, (lo <= y) & (y <= hi), np.nan)
        out["is"] = np.where(has, interval_score_terms(y, lo, hi, level) / scale, np.nan)
        out["width"] = np.where(has, (hi - lo) / scale, np.nan)
        return out

    def coverage_by_horizon(self, level: float) -> pd.DataFrame:
        """label x horizon step: the share of truths inside the `level` % intervals (rows with one)."""
        return pd.DataFrame({lab: self.interval_rows(lab, level).groupby("step")["covered"].mean()
                             for lab in self.intervals}).T.rename_axis("interval")

    def interval_summary(self) -> pd.DataFrame:
        """(interval, level) x coverage (rows with an interval), MSIS (M4: per series, then the mean over
        series), width (mean width over MASE's scale), share (of rows that have an interval)."""
        rows = []
        for lab in self.intervals:
            for lv in self.levels:
                r = self.interval_rows(lab, lv)
                rows.append({"interval": lab, "level": lv, "coverage": r["covered"].mean(),
                             "msis": r.groupby(ID, sort=False)["is"].mean().mean(), "width": r["width"].mean(),
                             "share": r["has"].mean()})
        return pd.DataFrame(rows).set_index(["interval", "level"]) if rows else pd.DataFrame()

    def forecasts_with_intervals(self) -> pd.DataFrame:
        """`forecasts` plus columns '<label>-lo-<level>' and '<label>-hi-<level>' (statsforecast's names)."""
        out = self.forecasts.copy()
        for lab, by_level in self.intervals.items():
            for lv, (lo, hi) in by_level.items():
                out[f"{lab}-lo-{lv:g}"], out[f"{lab}-hi-{lv:g}"] = lo, hi
        return out

    @property
    def default_baseline(self) -> str:
        """The model `dm_test` compares against when given none: the seasonal naive, else the first model."""
        return next((m for m in self.models if m.startswith("SeasonalNaive")), self.models[0])

    def summary(self) -> pd.DataFrame:
        """model x (MASE, sMAPE, MAE, MSE, DM statistic and p-value vs the baseline, seconds)."""
        out = pd.DataFrame({k.upper() if k != "smape" else "sMAPE": self.overall(k) for k in METRICS})
        dm = self.dm_test() if len(self.models) > 1 else pd.DataFrame()
        if not dm.empty:
            out = out.join(dm[["dm_stat", "p_value"]])
        if self.levels:
            iv = self.interval_summary()
            for lv in self.levels:
                for col, name in (("coverage", "cov"), ("msis", "MSIS")):
                    out[f"{name}{lv:g}"] = pd.Series({m: iv.loc[(m, lv), col] for m in self.models})
        out["seconds"] = pd.Series(self.seconds)
        return out.rename_axis("model")

    def cutoffs(self) -> dict[str, list]:
        """unique_id -> its cutoffs (the last timestamp of each window's history), in order."""
        return {str(uid): g.tolist() for uid, g in self.scales.groupby(ID, sort=False)["cutoff"]}

    def auto_weights(self) -> pd.DataFrame:
        """What each `auto` forecast each series with: columns model, unique_id and one per candidate (its
        weight; the row sums to 1). Empty without an auto model."""
        return weights_frame(self.choices, list(self.cutoffs()))

    def to_dict(self) -> dict:
        """Settings, per-series cutoffs (timestamps as ISO text), summary rows and MASE by step: JSON-ready."""
        hz = self.mase_by_horizon()
        def stamp(c):
            return c.isoformat() if isinstance(c, pd.Timestamp) else int(c)
        return {"h": self.h, "season_length": self.season_length,
                "mase_season": self.season_length if self.mase_season is None else self.mase_season,
                "models": self.models,
                "n_series": int(self.forecasts[ID].nunique()), "n_windows": self.n_windows,
                "step_size": self.step_size or self.h,
                "cutoffs": {uid: [stamp(c) for c in cs] for uid, cs in self.cutoffs().items()},
                "summary": self.summary().reset_index().to_dict(orient="records"),
                "mase_by_horizon": {m: [float(v) for v in hz.loc[m]] for m in self.models},
                **({"mase_undefined": self.mase_undefined} if self.mase_undefined else {}),
                **({"dm_not_computed": self.dm_not_computed()} if self.dm_not_computed() else {}),
                **(self._intervals_dict() if self.levels else {}),
                **({"auto_choices": {a: c.to_dict() for a, c in self.choices.items()}} if self.choices else {}),
                **({"ensembles": self.members,
                    "dm_vs_members": self.dm_vs_members().reset_index().to_dict(orient="records")}
                   if self.members else {})}

    def _intervals_dict(self) -> dict:
        cov = {lv: self.coverage_by_horizon(lv) for lv in self.levels}
        return {"levels": list(self.levels), "calibration_windows": self.calibration_windows,
                "global_calibration": self.global_calibration,
                "intervals": self.interval_summary().reset_index().to_dict(orient="records"),
                "coverage_by_horizon": {lab: {f"{lv:g}": [float(v) for v in cov[lv].loc[lab]] for lv in self.levels}
                                        for lab in self.intervals}}


def weights_frame(choices: dict, ids: list) -> pd.DataFrame:
    """auto's choices (alias -> AutoChoice) as rows model, unique_id, one weight column per candidate."""
    frames = [pd.DataFrame(c.weights, columns=c.candidates).assign(model=alias, **{ID: ids})
              for alias, c in choices.items()]
    if not frames:
        return pd.DataFrame(columns=["model", ID])
    out = pd.concat(frames, ignore_index=True)
    return out[["model", ID] + [c for c in out.columns if c not in ("model", ID)]]


def check_models_and_season(models: Sequence[Forecaster], season_length, task: str) -> int:
    """ParameterError for no model at all; the season the `task` ("backtest", "forecast") works with: an
    integer as given, or of several seasons (7, 14), as the command's --season-length 7,14, the shortest (the
    models themselves were built with theirs: ETS((7, 14)), SeasonalNaive(7))."""
    if isinstance(models, Forecaster) or not len(models):
        raise ParameterError(f"{task} needs a list of one or more models, e.g. [SeasonalNaive(7), ETS(7)], got "
                             f"{models!r}")
    if isinstance(season_length, (tuple, list, np.ndarray)):
        seasons = list(season_length)
        if not seasons or any(isinstance(m, bool) or int(m) != m or m < 1 for m in seasons):
            raise ParameterError(f"season_length must be an integer >= 1 or a tuple of them (several seasons, "
                                 f"e.g. (24, 168)), got {season_length!r}")
        return int(min(seasons))
    return season_length


def with_seasons(models: Sequence[Forecaster], season_length, task: str) -> list[Forecaster]:
    """`models` with every seasonal model built without a season (season_length=None, the default), at any
    depth (an ensemble's members, auto's candidates), given the `task`'s season: the shortest, or for ETS and
    ARIMA, which take several, all of them. A model that needs no change is the same object; one that does is
    a copy (the models given are not changed). Warns (SeasonWarning) where a model's own season differs
    from the task's season_length, MASE's lag, and where a model without one meets a task given none (1)."""
    from .baselines import SEASONS, SeasonalModel

    given = season_length is not None
    several = isinstance(season_length, (tuple, list, np.ndarray))
    shortest = int(min(season_length)) if several else int(season_length) if given else 1
    full = tuple(int(m) for m in season_length) if several else shortest
    memo: dict[int, Forecaster] = {}
    differ, unset = [], []

    def walk(model: Forecaster) -> Forecaster:
        if id(model) in memo:
            return memo[id(model)]
        params, new = model.get_params(deep=False), {}
        for k, v in params.items():
            if isinstance(v, Forecaster):
                r = walk(v)
                if r is not v:
                    new[k] = r
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, Forecaster) for x in v):
                rs = [walk(x) for x in v]
                if any(r is not x for r, x in zip(rs, v)):
                    new[k] = type(v)(rs)
        if isinstance(model, SeasonalModel):
            if model.season_length is None:
                takes_several = type(model)._parameter_constraints.get("season_length") is SEASONS
                new["season_length"] = full if takes_several else shortest
                unset.append(model)
            else:
                own = model.season_length
                own = min(own) if isinstance(own, (tuple, list)) and len(own) else own
                if own != shortest:
                    differ.append(model)
        out = model
        if new:
            out = copy.copy(model)
            out.set_params(**new)
        memo[id(model)] = out
        return out

    out = [walk(m) for m in models]
    if unset and not given:
        warnings.warn(f"{', '.join(sorted({repr(m) for m in unset}))} take{'s' if len(unset) == 1 else ''} the "
                      f"{task}'s season, and {task}() was given no season_length: they forecast with a season of 1 "
                      f"step (none); pass season_length= to {task}() (24 for hours, 7 for days, 12 for months)",
                      SeasonWarning, stacklevel=3)
    if differ:
        named = ", ".join(sorted({repr(m) for m in differ}))
        warnings.warn(f"{named}: a season other than {task}()'s season_length={shortest}"
                      f"{'' if given else ' (not given: 1)'}, which is MASE's lag; each model forecasts with its own "
                      f"season. To score with the models' season pass it as {task}(season_length=...) (and "
                      f"mase_season= for another MASE lag), or build the models without one "
                      f"(SeasonalNaive() takes the {task}'s)", SeasonWarning, stacklevel=3)
    return out


def check_unique_aliases(models: Sequence[Forecaster]) -> list[str]:
    """The models' column names; ParameterError where two (ensemble members included) share one."""
    aliases = [m.alias for m in models]
    twice = [a for i, a in enumerate(aliases) if a in aliases[:i]]
    if twice:
        name = type(next(m for m in models if m.alias == twice[0])).__name__
        raise ParameterError(f"two or more models are named {', '.join(map(repr, dict.fromkeys(twice)))} (model "
                             f"names: {aliases}); give each setting a name of its own with alias=, e.g. "
                             f"{name}(..., alias='{twice[0]}-2')")
    return aliases


# The fitted attributes a backtest or forecast leaves on the models given: what each chose for the series (auto's
# weights, a statistical model's history), which `frozenvit forecast` reports.
KEPT = ("choice_", "history_")


def keep_choices(given: Sequence[Forecaster], ran: Sequence[Forecaster]) -> None:
    """Copy the attributes of KEPT (auto's `choice_`, a statistical model's `history_`) from the copy that ran
    (`with_seasons`) to the model given."""
    for g, r in zip(given, ran):
        for name in KEPT if r is not g else ():
            if hasattr(r, name) and (name != "choice_" or r.choice_ is not None):
                setattr(g, name, getattr(r, name))


def nested(models: Sequence[Forecaster]) -> list[Forecaster]:
    """`models` and every model inside them (an ensemble's members, auto's candidates, a fallback's two), each
    once."""
    out: list[Forecaster] = []

    def walk(model: Forecaster) -> None:
        if any(model is m for m in out):
            return
        out.append(model)
        for v in model.get_params(deep=False).values():
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(x, Forecaster):
                    walk(x)

    for m in models:
        walk(m)
    return out


def check_horizon_fits(models: Sequence[Forecaster], h: int, task: str) -> None:
    """SeriesError, before any model of the `task` ("backtest", "forecast") runs, for a model (at any depth) that
    cannot forecast h steps: a network built for another horizon."""
    for model in nested(models):
        problem = model.horizon_problem(h, task)
        if problem:
            raise SeriesError(problem)


def check_series_fit(models: Sequence[Forecaster], ids: Sequence[str], series: Sequence[np.ndarray],
                     cutoffs: np.ndarray) -> None:
    """SeriesError, before any model runs, for a model (at any depth) that cannot be fitted to some history
    before `cutoffs` (S, W), as far as that is known without fitting (`Forecaster.series_problem`)."""
    for model in nested(models):
        problem = model.series_problem(ids, series, cutoffs)
        if problem:
            raise SeriesError(problem)


def _cutoff_positions(T: int, h: int, n_windows: int, step_size: int) -> list[int]:
    return [T - h - (n_windows - 1 - w) * step_size for w in range(n_windows)]


def with_members(models: Sequence[Forecaster]) -> list[Forecaster]:
    """`models`, then every ensemble member that is not among them (each once)."""
    out = list(models)
    for e in models:
        for m in e.members if isinstance(e, Ensemble) else ():
            if not any(same_model(m, o) for o in out):
                out.append(m)
    return out


@dataclass
class _Run:
    """One model's forecasts in a backtest: the windows (S, W, h), the calibration windows (S, K, h),
    its own intervals (lo, hi: (S, W, h, L)) where it has them, the model to save, wall seconds."""
    preds: np.ndarray
    calib: np.ndarray
    own: tuple | None
    fitted: Forecaster | None
    seconds: float


def backtest(df: pd.DataFrame, models: Sequence[Forecaster], h: int, n_windows: int | str = 1,
             step_size: int | None = None, season_length: int | None = None, refit_every: int | None = None,
             progress: bool | None = None, mase_season: int | None = None, levels: Sequence[float] = (),
             calibration_windows: int = CONFORMAL["calibration_windows"],
             global_calibration: str = CONFORMAL["global_calibration"], engine: str = "local",
             workers: int | None = None, input_size: int | str | None = None,
             short_series: str | None = None, fallback_history: int | str | None = None) -> BacktestResult:
    """Rolling-origin evaluation of `models` on a long frame (unique_id, ds, y); see the module doc.

    engine "ray": the statistical models' (series x cutoff) fits go out as Ray tasks over `workers`
    CPUs (None: all of the cluster's), chunked by series (backbone.suite.engine); the forecasts are
    the same to the last digit. Each neural model trains as one Ray task, all series as locally, at
    this process's torch thread count (the same weights for the same seed), all of them sent out at
    once so that they train beside each other and the statistical fits (forecasting.remote).

    MASE's scale is the in-sample mean absolute difference at lag `mase_season` (default
    `season_length`, the season the models were given); the two may differ, e.g. a model told of a
    weekly season scored against the daily one.

    `levels` (percent, e.g. (80, 95)) asks for intervals; `calibration_windows` K >= 0 non-overlapping
    windows of h before the first cutoff calibrate them (forecasting.intervals), so each series then
    needs K h more values. Without `levels` nothing is calibrated and nothing costs more.
    `global_calibration` says where a global (neural) model's calibration forecasts come from:
    "holdout" (default), the model trained for the first cutoff, on the validation tail it held out
    (K h must fit inside its val_size); "retrain", a second training before the first calibration
    window (forecasting.defaults, forecasting.intervals).

    `input_size` sets the global (neural) models' look-back: None keeps each model's own, an int sets
    it, "auto" chooses it from the data; `short_series` ("skip", "baseline", "error"; None: the length
    check below) says what becomes of series too short for it (forecasting.lookback); where `models` hold
    no statistical model, "statistical" forecasts them with Theta and ETS fitted on `fallback_history`
    (None: all of each history; forecasting.baselines). The result
    records both (`input_size`, `short_series`). The models given are never fitted; they keep only what they
    chose (backtest.KEPT): an `auto`'s `choice_` (what it forecast each series with; the result's `choices`) and
    a statistical model's `history_` (how many of each history's last values it was fitted on, None: all).

    `n_windows="auto"`: as many as the shortest series allows after its calibration windows, at most 8
    (`lookback.auto_windows`); with `short_series="skip"` the shortest of the series kept (`lookback.kept_for_windows`).
    `season_length` may be several seasons, (24, 168), as the command's --season-length 24,168: the shortest
    is the MASE season and the one the lengths are checked with (the models keep the seasons they were built
    with). No model at all is a ParameterError.
    `step_size` defaults to h. Raises SeriesError when a setting is below 1, or when a series is
    too short for the history the models need plus h + (n_windows - 1) * step_size values to forecast
    (`short_series="skip"` leaves such series out instead, and records them, unless none would remain);
    before any model runs also for a network built for another h, and for ETS with a multiplicative part
    on a history with values <= 0.
    """
    given_season = season_length
    season_length = check_models_and_season(models, 1 if season_length is None else season_length, "backtest")
    step_given = step_size is not None
    step_size = h if step_size is None else step_size
    mase_season = season_length if mase_season is None else mase_season
    for name, v in (("h", h), ("n_windows", 1 if n_windows == "auto" else n_windows), ("step_size", step_size),
                    ("season_length", season_length),
                    ("mase_season", mase_season), ("refit_every", 1 if refit_every is None else refit_every),
                    ("calibration_windows + 1", calibration_windows + 1)):
        if int(v) != v or v < 1:
            raise SeriesError(f"backtest needs {name} >= 1 (an integer), got {v!r}")
    h, step_size, season_length = int(h), int(step_size), int(season_length)
    mase_season = int(mase_season)
    levels = check_levels(levels) if len(levels) else ()
    if global_calibration not in GLOBAL_CALIBRATIONS:
        raise ParameterError(f"global_calibration must be one of {', '.join(GLOBAL_CALIBRATIONS)}, "
                             f"got {global_calibration!r}")
    K = int(calibration_windows) if levels else 0
    for model in models:                # every hyperparameter, before any work (and a season's warning)
        model.check_params()
    given_models, models = models, with_seasons(models, given_season, "backtest")
    for model, given in zip(models, given_models):
        if model is not given:          # given the backtest's season
            model.check_params()
    check_horizon_fits(models, h, "backtest")
    df = validate(df)
    if n_windows == "auto":             # room for the calibration windows; over the series kept (skip)
        n_windows = auto_windows(kept_for_windows(df, models, h, step_size, season_length, K, input_size,
                                                  short_series, fallback_history),
                                 h, step_size, season_length, calibration_windows=K)
    n_windows = int(n_windows)
    prep = prepare(df, models, h, n_windows, step_size, season_length, K, input_size, short_series,
                   fallback_history)
    df, models = prep.df, with_members(prep.models)
    aliases = check_unique_aliases(models)
    need_hist, why, cure = max(                     # the history every series needs first, and what asks for it
        [(season_length + 1, f"a season of --season-length {season_length} + 1",
          "a smaller --season-length (season_length=)"),
         (mase_season + 1, f"MASE's lag --mase-season {mase_season} + 1", "a smaller --mase-season (mase_season=)")] +
        [(m.min_history(), f"{m.alias}'s look-back and training",
          "a smaller --h (h=), a shorter --input-size (input_size=)") for m in models], key=lambda need: need[0])
    need = need_hist + K * h + h + (n_windows - 1) * step_size
    calib_text = f" + {K} --calibration-windows of --h" if K else ""
    ids, ds, ys = [], [], []
    for uid, g in df.groupby(ID, sort=False):
        ids.append(uid), ds.append(g[DS].to_numpy()), ys.append(g[Y].to_numpy(dtype=float))
    short = [(uid, y.size) for uid, y in zip(ids, ys) if y.size < need]
    record = prep.short_series
    if short and record.get("policy") == "skip" and len(short) < len(ids):    # asked: leave them out too
        record = skipped(record, short, len(ids), need, f"history {need_hist}, {why}{calib_text} + --h {h} + "
                         f"{n_windows - 1} more --windows of --step-size {step_size}", "backtest")
        keep = [i for i, y in enumerate(ys) if y.size >= need]
        ids, ds, ys = [ids[i] for i in keep], [ds[i] for i in keep], [ys[i] for i in keep]
        short = []
    if short:
        (uid, n), others = short[0], [str(u) for u, _ in short[1:]]
        more = (f" (and {len(others)} more of the {len(ids)} series: {', '.join(others[:5])}"
                f"{', ...' if len(others) > 5 else ''})") if others else ""
        cures = _length_cures(max(n for _, n in short), models, h, n_windows, step_size, step_given,
                              season_length, mase_season, K) \
            + (["--short-series skip (short_series='skip')"] if len(short) < len(ids) else [])
        raise SeriesError(f"series {uid!r} has {n} values{more}; this backtest needs {need} (history {need_hist}, "
                          f"{why}{calib_text} + --h {h} + {n_windows - 1} more --windows of --step-size "
                          f"{step_size}); use {', '.join(cures)}, or drop {'those series' if others else 'it'}")
    cuts = np.array([_cutoff_positions(y.size, h, n_windows, step_size) for y in ys])      # (S, W)
    ccuts = calibration_cutoffs(cuts, K, h)                                                 # (S, K)

    for model in models:                # before any work: can each model calibrate as asked?
        problem = None if isinstance(model, Ensemble) or not K else \
            model.calibration_problem(cuts, ccuts, h, global_calibration)
        if problem:
            raise SeriesError(problem)
    check_series_fit(models, ids, ys, np.concatenate([ccuts, cuts], axis=1))

    rows, scale_rows = [], []          # one frame per (series, window)
    for uid, t, y, cs in zip(ids, ds, ys, cuts):
        for c in cs:
            rows.append(pd.DataFrame({ID: uid, "cutoff": t[c - 1], DS: t[c: c + h], "step": np.arange(1, h + 1),
                                      Y: y[c: c + h]}))
            scale_rows.append({ID: uid, "cutoff": t[c - 1], "scale": mase_scale(y[:c], mase_season)})
    frame = pd.concat(rows, ignore_index=True)
    scales = pd.DataFrame(scale_rows)
    flat = _flat_histories(scales, len(ids), mase_season)

    runs: list[tuple[Forecaster, _Run]] = []
    sent = None                         # engine "ray": the global models' tasks (forecasting.remote.GlobalRuns)

    def run(model: Forecaster) -> _Run:
        """The model's forecasts, computed once per model (an ensemble reuses its members')."""
        done = next((r for m, r in runs if same_model(m, model)), None)
        if done is not None:
            return done
        if isinstance(model, Ensemble):
            parts = [run(m) for m in model.members]
            r = _Run(combine([p.preds for p in parts], model.how), combine([p.calib for p in parts], model.how),
                     None, None, sum(p.seconds for p in parts))
        else:
            t0 = time.perf_counter()
            kw = dict(refit_every=refit_every, progress=progress)
            remote = sent.take(model) if sent is not None else None
            own = None
            if remote:                              # trained as one Ray task: its own seconds, not the wait
                preds, calib, fitted, t_task, choice = remote
                t0 = time.perf_counter() - t_task
                if choice is not None:              # auto's, made in the task
                    model.choice_ = choice
            elif levels and model.has_own_intervals():      # a local model: the calibration windows refit as the rest
                # the calibration windows first, so that what the model records of its choice (history="auto":
                # `history_`) is the test cutoffs' choice, the one its forecasts use; each calibration window's
                # history is chosen by the same rule from the data before the calibration windows
                calib = model.forecast_cutoffs(ys, ccuts, h, **kw)[0] if K else np.empty((len(ys), 0, h))
                own = model.forecast_intervals(ys, cuts, h, levels, progress=progress)
                preds, fitted = own[0], None
            else:
                preds, calib, fitted = model.forecast_with_calibration(ys, cuts, ccuts, h, **kw,
                                                                       global_calibration=global_calibration)
            r = _Run(preds, calib, None if own is None else own[1:], fitted, time.perf_counter() - t0)
        runs.append((model, r))
        return r

    truth = np.stack([np.stack([y[c: c + h] for c in np.concatenate([cc, cs])])
                      for y, cc, cs in zip(ys, ccuts, cuts)])                               # (S, K + W, h)
    scale = np.array([[mase_scale(y[:c], mase_season) for c in np.concatenate([cc, cs])]
                      for y, cc, cs in zip(ys, ccuts, cuts)])                               # (S, K + W)
    known = known_windows(K, n_windows, h, step_size)
    if levels:
        warn_flat_then_moving(ids, ys, cuts, mase_season, h)
    fitted, seconds, intervals = {}, {}, {}
    with contextlib.ExitStack() as stack:
        if check_engine(engine) == "ray":
            stack.enter_context(ray_session(num_cpus=workers))      # one instance for every model
            from .remote import GlobalRuns

            sent = GlobalRuns(models, ys, cuts, ccuts, h, refit_every=refit_every,
                              global_calibration=global_calibration)
        stack.enter_context(use_engine(engine, workers))
        stack.enter_context(shared_fits())          # a model run alone and as auto's candidate: fitted once
        for model in models:
            run(model)
    for model in models:
        r = run(model)
        frame[model.alias] = r.preds.reshape(-1)
        seconds[model.alias] = r.seconds
        if r.fitted is not None:
            fitted[model.alias] = r.fitted
        if levels:
            both = np.concatenate([r.calib, r.preds], axis=1)                              # (S, K + W, h)
            scores = np.abs(truth - both) / scale[:, :, None]
            lo, hi = conformal_bounds(r.preds, scale[:, K:], scores, known, levels)
            intervals[model.alias] = {lv: (lo[..., i].reshape(-1), hi[..., i].reshape(-1)) for i, lv in enumerate(levels)}
            if r.own is not None:
                intervals[f"{model.alias}/own"] = {lv: (r.own[0][..., i].reshape(-1), r.own[1][..., i].reshape(-1))
                                                   for i, lv in enumerate(levels)}
    members = {m.alias: [p.alias for p in m.members] for m in models if isinstance(m, Ensemble)}
    choices = {m.alias: m.choice_ for m, _ in runs if getattr(m, "choice_", None) is not None}
    keep_choices(given_models, models)
    return BacktestResult(frame, scales, aliases, h, season_length, n_windows, step_size, mase_season, fitted,
                          seconds, levels=levels, calibration_windows=K, intervals=intervals, members=members,
                          global_calibration=global_calibration if levels else None, input_size=prep.input_size,
                          short_series=record, neural_lengths=prep.lengths, choices=choices,
                          mase_undefined=flat)


def _length_cures(n: int, models: Sequence[Forecaster], h: int, n_windows: int, step_size: int, step_given: bool,
                  season_length: int, mase_season: int, K: int) -> list[str]:
    """The settings that, each changed alone as far as it goes, would let a series of n values be backtested,
    --h first; where none would alone, every one that can still be made smaller (together they may)."""
    nets = [m for m in models if "input_size" in m.get_params(deep=False)]
    net = max([m.min_history() for m in nets], default=0)

    def need(h=h, windows=n_windows, step=step_size, season=season_length, mase=mase_season, k=K, look=net) -> int:
        return max(season + 1, mase + 1, look) + k * h + h + (windows - 1) * step

    net_h1 = max(0, net - 2 * (h - 1)) if nets else 0          # a network's look-back stays; its tails shrink
    options = [  # (can it be smaller at all, the need at its least, the cure)
        (h > 1, need(h=1, step=step_size if step_given else 1, look=net_h1), "a smaller --h (h=)"),
        (season_length > 1, need(season=1, mase=1 if mase_season == season_length else mase_season),
         "a smaller --season-length (season_length=)"),
        (mase_season > 1 and mase_season != season_length, need(mase=1), "a smaller --mase-season (mase_season=)"),
        (bool(nets), need(look=net - min([int(m.input_size) for m in nets], default=1) + 1), "a shorter --input-size (input_size=)"),
        (n_windows > 1, need(windows=1), "fewer --windows (n_windows=)"),
        (n_windows > 1 and step_size > 1, need(step=1), "a smaller --step-size (step_size=)"),
        (K > 0, need(k=0), "fewer --calibration-windows (calibration_windows=)")]
    helps = [cure for can, least, cure in options if can and least <= n]
    return helps or [cure for can, _, cure in options if can]


def _flat_histories(scales: pd.DataFrame, n_series: int, mase_season: int) -> dict:
    """The windows whose history does not change over `mase_season` steps (MASE's scale is 0 there):
    {} where there are none, else {ids, windows, reason} and an UndefinedMASEWarning. Such windows are
    forecast and scored by sMAPE, MAE and MSE, and left out of every mean of MASE and MSIS. SeriesError
    when no window has a MASE at all."""
    bad = scales["scale"].isna().to_numpy()
    if not bad.any():
        return {}
    ids = scales.loc[bad, ID].unique().tolist()
    named = ", ".join(map(str, ids[:5])) + (", ..." if len(ids) > 5 else "")
    why = (f"their history before a cutoff does not change over {mase_season} steps (the MASE season: "
           "--mase-season, else --season-length)")
    if bad.all():
        raise SeriesError(f"MASE is undefined for every window of the {n_series} series ({named}): {why}; "
                          "use another --mase-season, or series whose history changes")
    reason = (f"MASE is undefined for {int(bad.sum())} of the {bad.size} windows, of {len(ids)} of the "
              f"{n_series} series ({named}): {why}")
    warnings.warn(f"{reason}; they are forecast and scored by sMAPE, MAE and MSE, and left out of MASE and "
                  "MSIS", UndefinedMASEWarning, stacklevel=3)
    return {"ids": [str(u) for u in ids], "windows": int(bad.sum()), "reason": reason}
