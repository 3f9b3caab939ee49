"""Statistical baselines, fitted per series on history only.

Every model here is local: `fit(y)` on one series' history (T,), `predict(h)` -> (h,).
In a backtest a fresh copy is fitted at every cutoff.
"""
from __future__ import annotations

import warnings
from numbers import Integral
from typing import Sequence

import numpy as np
from sklearn.base import clone
from sklearn.utils._param_validation import Interval, StrOptions

from frozenvit.backbone.suite.engine import current_engine
from frozenvit.backbone.suite.errors import NotFittedError, ParameterError
from frozenvit.backbone.suite.progress import progress_bar

from .base import Forecaster
from .errors import SeriesError
from .reuse import once


# chunks of series per Ray worker (engine="ray"): with 16, the last chunk to finish holds ~1/16 of a worker's
# share (~6 s of AutoETS on M4 Hourly with 2 workers), while a task costs milliseconds to schedule
RAY_CHUNKS_PER_WORKER = 16


def validation_scale(history: np.ndarray) -> float:
    """Mean |y_t - y_{t-1}| of a history (the in-sample one-step naive MAE); 1 where that is 0 or undefined."""
    d = np.abs(np.diff(np.asarray(history, dtype=float)))
    s = float(d.mean()) if d.size else 0.0
    return s if s > 0 else 1.0


def check_horizon(h, where: str) -> int:
    """h as an int; ParameterError where it is not a whole number of steps >= 1 (a bool, 2.7, 0, "24")."""
    try:
        ok = not isinstance(h, (bool, np.bool_)) and int(h) == h and h >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ParameterError(f"{where}: the horizon h must be a whole number of steps >= 1, e.g. 24, got {h!r}")
    return int(h)


def _fit_cutoffs(model: "LocalModel", y: np.ndarray, cuts: np.ndarray, predict, nested: bool, tick=None) -> list:
    """predict(a fresh copy fitted on y[:c]) for every cutoff c of one series, as tuples of parts; `tick()`
    after each fit."""
    out = []
    for c in cuts:
        part = predict(clone(model).fit(y[:c]))
        out.append(tuple(part) if nested else (part,))
        if tick is not None:
            tick()
    return out


def _fill(outs: tuple[np.ndarray, ...], s: int, per_cutoff: list) -> None:
    for w, parts in enumerate(per_cutoff):
        for out, part in zip(outs, parts):
            out[s, w] = np.asarray(part, dtype=float).reshape(out.shape[2:])


def _fit_chunk(model: "LocalModel", series: list, cutoffs: np.ndarray, predict, nested: bool) -> list:
    """A Ray task: `_fit_cutoffs` for each series of a chunk."""
    return [_fit_cutoffs(model, y, cs, predict, nested) for y, cs in zip(series, cutoffs)]


class LocalModel(Forecaster):
    """Base of per-series models. Subclasses implement `_fit(y)` (setting `n_obs_`) and `_predict(h)`."""

    def fit(self, y: np.ndarray) -> "LocalModel":
        self.check_params()
        y = np.asarray(y, dtype=float)
        if y.ndim != 1 or y.size == 0:
            raise SeriesError(f"{self.alias}.fit expects a non-empty 1-D history, got shape {y.shape}")
        if not np.isfinite(y).all():
            raise SeriesError(f"{self.alias}.fit: the history contains NaN/inf; fill it first, e.g. "
                              "validate(df, fill='ffill') or read_long_csv(path, fill='ffill')")
        self._fit(y)
        return self

    def predict(self, h: int) -> np.ndarray:
        """The next h values after the fitted history, (h,) float64. ParameterError for an h that is not a
        whole number of steps >= 1 (2.7 would otherwise be read as 2)."""
        if not hasattr(self, "n_obs_"):
            raise NotFittedError(f"{self.alias} is not fitted; call fit(history) first")
        return self._predict(check_horizon(h, f"{self.alias}.predict"))

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None) -> tuple[np.ndarray, None]:
        """A fresh copy fitted on `y[:c]` at every cutoff c (see `Forecaster.forecast_cutoffs`)."""
        cutoffs = np.asarray(cutoffs)
        return once(self, f"forecast {h}", [*series, cutoffs],
                    lambda: self._each_cutoff(series, cutoffs, lambda m: m.predict(h), (h,), progress)[0]), None

    def has_own_intervals(self) -> bool:
        return type(self)._predict_interval is not LocalModel._predict_interval

    def forecast_intervals(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int,
                           levels: Sequence[float], *, progress: bool | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """As `forecast_cutoffs`, with the model's own intervals where it has them (`_predict_interval`)."""
        if not self.has_own_intervals():
            return None
        L = len(levels)
        return self._each_cutoff(series, cutoffs, lambda m: m._predict_interval(int(h), list(levels)),
                                 ((h,), (h, L), (h, L)), progress, nested=True)

    def _each_cutoff(self, series, cutoffs, predict, shapes, progress, nested=False) -> tuple[np.ndarray, ...]:
        """Fit a fresh copy on `y[:c]` at every cutoff c and gather `predict(copy)` into (S, W, *shape)
        arrays (one per shape when `nested`, as `predict` then returns a tuple). Under
        `use_engine("ray")` the series go out in chunks as Ray tasks (`_each_cutoff_ray`)."""
        shapes = shapes if nested else (shapes,)
        outs = tuple(np.empty((len(series), cutoffs.shape[1], *shape)) for shape in shapes)
        bar = progress_bar(total=int(cutoffs.size), desc=self.alias, unit="fit", leave=False,   # a fit per cutoff
                           disable=None if progress is None else not progress)
        engine, workers = current_engine()
        if engine == "ray" and len(series) > 1:
            self._each_cutoff_ray(series, cutoffs, predict, nested, outs, bar, workers)
        else:
            for s, y in enumerate(series):
                _fill(outs, s, _fit_cutoffs(self, y, cutoffs[s], predict, nested, lambda: bar.update(1)))
        bar.close()
        return outs

    def _each_cutoff_ray(self, series, cutoffs, predict, nested, outs, bar, workers) -> None:
        """`_each_cutoff`'s loop as Ray tasks: the series split into about RAY_CHUNKS_PER_WORKER chunks per
        worker (a task costs milliseconds, a fit of AutoETS ~0.7 s), filled in as chunks finish; a task
        whose worker dies is retried by Ray."""
        from frozenvit.backbone.suite.engine import cluster_cpus, ray_session

        with ray_session(num_cpus=workers) as ray:
            n = workers or cluster_cpus(ray)
            size = max(1, -(-len(series) // (n * RAY_CHUNKS_PER_WORKER)))
            task = ray.remote(num_cpus=1, max_retries=3)(_fit_chunk)
            model = ray.put(self)
            pending = {task.remote(model, list(series[i:i + size]), cutoffs[i:i + size], predict, nested): i
                       for i in range(0, len(series), size)}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                got = ray.get(ready[0])
                for k, parts in enumerate(got):
                    _fill(outs, i + k, parts)
                bar.update(sum(len(parts) for parts in got))

    def _fit(self, y: np.ndarray) -> None:
        raise NotImplementedError

    def _predict(self, h: int) -> np.ndarray:
        raise NotImplementedError

    def _predict_interval(self, h: int, levels: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forecasts (h,) and the model's own lo, hi (h, L) at `levels` %; only some models have them."""
        raise NotImplementedError


class Naive(LocalModel):
    """Last value carried forward."""

    def __init__(self, alias: str | None = None) -> None:
        self.alias = alias

    def _fit(self, y: np.ndarray) -> None:
        self.last_ = float(y[-1])
        self.n_obs_ = y.size

    def _predict(self, h: int) -> np.ndarray:
        return np.full(h, self.last_)


class SeasonalModel(LocalModel):
    """Base of the models with a season (`season_length`, in steps). None, the default: the season of the
    `backtest` or `forecast` call that runs the model (its `season_length=`), so that one setting says the
    data's cycle to every model and to MASE; `repr` always shows it. A model fitted alone needs one."""

    def season(self) -> int | tuple[int, ...]:
        """season_length as given; ParameterError where it is None outside a backtest or forecast."""
        if self.season_length is None:
            raise ParameterError(f"{type(self).__name__}(season_length=None) takes its season from the backtest() "
                                 f"or forecast() that runs it (season_length=); fitted alone it needs one: "
                                 f"{type(self).__name__}(24) for hours, 7 for days, 12 for months")
        return self.season_length

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        """scikit-learn's, with the season shown even where it is the default (None: the caller's)."""
        text = super().__repr__(N_CHAR_MAX)
        name = type(self).__name__
        if "season_length=" in text or not text.startswith(name + "("):
            return text
        rest = text[len(name) + 1:]
        return f"{name}(season_length={self.season_length!r}" + (", " if rest != ")" else "") + rest


class SeasonalNaive(SeasonalModel):
    """The value one season earlier: f_{T+k} = y_{T+k-m*ceil(k/m)}."""

    _parameter_constraints = {"season_length": [Interval(Integral, 1, None, closed="left"), None]}

    def __init__(self, season_length: int | None = None, alias: str | None = None) -> None:
        self.season_length = season_length
        self.alias = alias

    def min_history(self) -> int:
        return int(self.season())

    def _fit(self, y: np.ndarray) -> None:
        m = int(self.season())
        if y.size < m:
            raise SeriesError(f"SeasonalNaive needs at least one season ({m} values) of history, got {y.size}")
        self.last_season_ = y[-m:].copy()
        self.n_obs_ = y.size

    def _predict(self, h: int) -> np.ndarray:
        m = self.last_season_.size
        return np.resize(self.last_season_, h) if h > m else self.last_season_[:h].copy()


def _statsforecast(name: str):
    """statsforecast.models.<name>, or ImportError with the install line."""
    try:
        import statsforecast.models as sf
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("ETS, Theta and ARIMA need statsforecast: pip install 'frozenvit[forecast]'") from e
    return getattr(sf, name)


# The longest season ETS and ARIMA are given as a seasonal part of their own: R's ets refuses more, AutoETS fits
# m - 1 initial states poorly and AutoARIMA's seasonal lag polynomials make a fit take minutes. Above it, with
# long_season="stl" (their default), STL takes the season out first, as R's forecast::stlf does.
MOST_SEASON = 24
LONG_SEASONS = ("stl", "own")
# ETS and ARIMA take several seasons at once (season_length=(24, 168): the day and the week of hourly data), all
# taken out by STL together (statsforecast's MSTL); the other models take one.
SEASONS = [Interval(Integral, 1, None, closed="left"), tuple, list, None]


class StatsForecastModel(SeasonalModel):
    """Base of the models fitted by statsforecast: `_make(m)` builds the unfitted statsforecast model for a
    season of m steps. The season is dropped (m = 1) when the history holds fewer than two seasons.

    `history`: how much of each history the model is fitted on. None: all of it; N: the last N values;
    "auto": one N for all the series of a `forecast_cutoffs` call (a backtest), validated before their
    first cutoffs: each of all and k max(m, h) values (k in HISTORY_LADDER, shorter than the longest
    history) forecasts the h values before each series' first cutoff from what precedes them; the window
    of the least mean relative error over the series (each error over the least of its series) replaces
    all of it only where it is better by more than one standard error of their paired difference (the
    one-standard-error rule: the whole history unless the data say otherwise; with fewer than two
    series validated, all of it). On long high-frequency series a recent window fits the level, trend and
    season of now, and fits much faster; on short ones all of it does (docs/forecasting.md, "The
    statistical models' history"). `history_` holds the N used (None: all). `fit(y)` alone with "auto"
    fits all of y. With intervals, the conformal calibration windows (which end by the first cutoff) are
    forecast by the same rule, applied before the first of them: their errors are those of the whole procedure,
    the choice included, and none comes from a choice that saw its truth; `history_` stays the N chosen for the
    forecasts' cutoffs, the one their forecasts use.

    A history of `tiny_history(m)` values or fewer, too short for statsforecast to fit the model at all, is
    fitted by simple exponential smoothing (its alpha optimised; one value: carried forward), as R's
    forecast::ets does for tiny series, so that every series of one value or more gets a forecast."""

    _parameter_constraints = {"season_length": [Interval(Integral, 1, None, closed="left"), None],
                              "history": [Interval(Integral, 2, None, closed="left"), StrOptions({"auto"}), None]}

    def tiny_history(self, m: int | tuple[int, ...]) -> int:
        """The longest history statsforecast refuses to fit this model to, with a season of m steps."""
        return 0

    def check_params(self) -> "StatsForecastModel":
        super().check_params()
        if self.season_length is not None:
            self.seasons()
        return self

    def _make(self, m: int):
        raise NotImplementedError

    def seasons(self) -> tuple[int, ...]:
        """season_length as a tuple, ascending, each season once: (24,) or, for ETS and ARIMA, several
        ((24, 168)); ParameterError for an empty one or a season under 1 step."""
        season = self.season()
        given = season if isinstance(season, (tuple, list)) else [season]
        out = tuple(sorted({int(m) for m in given}))
        if not out or out[0] < 1 or any(isinstance(m, bool) or int(m) != m for m in given):
            raise ParameterError(f"{type(self).__name__}: season_length must be a whole number of steps >= 1, or "
                                 f"several of them (ETS and ARIMA), got {self.season_length!r}")
        if len(out) > 1 and getattr(self, "long_season", "stl") == "own":
            raise ParameterError(f"{type(self).__name__}: several seasons {out} are taken out by STL together; "
                                 "long_season='own' models one season: give one, or long_season='stl'")
        return out

    def fitted_seasons(self, n: int) -> int | tuple[int, ...]:
        """The season(s) a history of n values is fitted with: those of `seasons()` that it holds twice over
        (the rest dropped); one as an int, several as a tuple, none as 1."""
        kept = tuple(m for m in self.seasons() if m > 1 and n >= 2 * m)
        return 1 if not kept else kept[0] if len(kept) == 1 else kept

    def seasonal_form(self, m: int | Sequence[int] | None = None) -> str:
        """How a season of m steps (default: season_length) is modelled: "own" (the model's own seasonal
        part, which an automatic search may still reject), "stl" (STL first, the model on the seasonally
        adjusted series: ETS and ARIMA above MOST_SEASON with long_season="stl", and several seasons at once)
        or "none"."""
        ms = [x for x in (self.seasons() if m is None else m if isinstance(m, (tuple, list)) else [m]) if x > 1]
        if not ms:
            return "none"
        if len(ms) > 1:
            return "stl"
        return "stl" if ms[0] > MOST_SEASON and getattr(self, "long_season", "own") == "stl" else "own"

    @staticmethod
    def _stl(m: int | Sequence[int], model):
        """statsforecast's MSTL: STL's seasonal component of m steps (of each of several seasons), repeated from
        its last season, plus `model`'s forecasts of the rest."""
        return _statsforecast("MSTL")(season_length=list(m) if isinstance(m, (tuple, list)) else m,
                                      trend_forecaster=model)

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None) -> tuple[np.ndarray, None]:
        """As LocalModel's; with history="auto", from the history chosen first (`choose_history`). Records the
        history fitted on in `history_` (N, or None: all), the one attribute it sets on `self`."""
        if getattr(self, "history", None) != "auto":
            self.history_ = getattr(self, "history", None)
            return super().forecast_cutoffs(series, cutoffs, h, refit_every=refit_every, progress=progress)
        self.check_params()
        self.history_ = self.choose_history(series, cutoffs, h, progress)
        return clone(self).set_params(history=self.history_).forecast_cutoffs(series, cutoffs, h, progress=progress)

    def forecast_with_calibration(self, series: Sequence[np.ndarray], cutoffs: np.ndarray,
                                  calib_cutoffs: np.ndarray, h: int, *, refit_every: int | None = None,
                                  progress: bool | None = None, global_calibration: str | None = None
                                  ) -> tuple[np.ndarray, np.ndarray, None]:
        """As LocalModel's, the calibration windows forecast first, so that `history_` is the backtest's."""
        calib = (self.forecast_cutoffs(series, calib_cutoffs, h, progress=progress)[0]
                 if np.asarray(calib_cutoffs).shape[1] else np.empty((len(series), 0, h)))
        return (*self.forecast_cutoffs(series, cutoffs, h, progress=progress)[:1], calib, None)

    def forecast_intervals(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int,
                           levels: Sequence[float], *, progress: bool | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        if getattr(self, "history", None) != "auto":
            return super().forecast_intervals(series, cutoffs, h, levels, progress=progress)
        self.check_params()
        self.history_ = self.choose_history(series, cutoffs, h, progress)
        return clone(self).set_params(history=self.history_).forecast_intervals(series, cutoffs, h, levels,
                                                                                 progress=progress)

    def choose_history(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int,
                       progress: bool | None = None) -> int | None:
        """history="auto"'s choice for these series and cutoffs (see the class doc): an N, or None for all.
        Series whose history before the first cutoff holds fewer than 2 max(m, h) + h values, or
        too few for the model, are not validated; with none validated, all of it."""
        from .defaults import HISTORY_LADDER

        first = np.asarray(cutoffs)[:, 0] if len(series) else np.empty(0, dtype=int)
        unit = max(max(self.seasons()), int(h))                                  # whole longest seasons
        starts = first - h
        ok = np.flatnonzero(starts >= max(2 * unit, self.min_history(), 3))
        longest = int(starts[ok].max()) if ok.size else 0
        ladder = [None] + [k * unit for k in sorted(HISTORY_LADDER, reverse=True) if k * unit < longest]
        if len(ladder) == 1:
            return None
        ys = [np.asarray(series[s], dtype=float) for s in ok]
        truth = np.stack([y[c: c + h] for y, c in zip(ys, starts[ok])])
        scale = np.array([validation_scale(y[:c]) for y, c in zip(ys, starts[ok])])
        errors = np.stack([np.abs(clone(self).set_params(history=n).forecast_cutoffs(
            ys, starts[ok][:, None], h, progress=progress)[0][:, 0] - truth).mean(axis=1) / scale
            for n in ladder])                                                                  # (N, S)
        least = errors.min(axis=0)
        keep = np.isfinite(least) & (least > 0)
        if keep.sum() < 2:
            return None
        rel = errors[:, keep] / least[keep]                                                    # (N, S)
        best = int(np.argmin(rel.mean(axis=1)))                                                # all first: on a tie
        gain = rel[best] - rel[0]                                                              # per series, < 0: better
        return ladder[best] if gain.mean() + gain.std(ddof=1) / np.sqrt(gain.size) < 0 else None

    def _fit(self, y: np.ndarray) -> None:
        n_obs = y.size
        history = getattr(self, "history", None)
        y = y[-int(history):] if history not in (None, "auto") else y
        m = self.fitted_seasons(y.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.model_ = (self._make(m) if y.size > self.tiny_history(m)
                           else _statsforecast("SimpleExponentialSmoothingOptimized")()).fit(y)
        self.n_obs_ = n_obs

    def _predict(self, h: int) -> np.ndarray:
        return np.asarray(self.model_.predict(h=h)["mean"], dtype=float)

    def _predict_interval(self, h: int, levels: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The fitted model's own prediction intervals (statsforecast's)."""
        p = self.model_.predict(h=h, level=levels)
        lo = np.stack([np.asarray(p[f"lo-{lv}"], dtype=float) for lv in levels], axis=1)     # (h, L)
        hi = np.stack([np.asarray(p[f"hi-{lv}"], dtype=float) for lv in levels], axis=1)
        return np.asarray(p["mean"], dtype=float), lo, hi


class ETS(StatsForecastModel):
    """Automatic exponential smoothing (error/trend/season chosen by AICc): statsforecast's AutoETS.

    AutoETS searches the model space within bounded, admissible parameters and stays numerically
    stable on long hourly series, where statsmodels' ETSModel optimiser can diverge or return NaN.
    `model` is AutoETS' "ZZZ"-style spec (its season part dropped with the season).

    A season longer than MOST_SEASON (24) steps, such as 52 weeks or 48 half-hours, is a seasonal state
    of m - 1 free initial values, which R's ets refuses to fit and AutoETS fits poorly and often rejects
    for a non-seasonal model (weekly CO2: ETS(A,Ad,N)). With `long_season="stl"` (the default) such a
    history is decomposed by STL instead, ETS (the spec's error and trend, no season) forecasts the
    seasonally adjusted series and the last season of the seasonal component is added back, as R's
    forecast::stlf does (the season additive). "own" leaves the season to AutoETS' search.
    (benchmarks/forecast_long_season.py measures both.)

    Several seasons, `ETS((24, 168))` for the day and the week of hourly data, are taken out by STL together
    (statsforecast's MSTL, R's mstl; each season the history holds twice over) and ETS forecasts the rest.
    """

    _parameter_constraints = {**StatsForecastModel._parameter_constraints, "season_length": SEASONS, "model": [str],
                              "damped": ["boolean", None], "long_season": [StrOptions(set(LONG_SEASONS))]}

    def check_params(self) -> "ETS":
        """Also ParameterError for a `model` spec AutoETS cannot fit: three letters, error A, M or Z, trend
        and season N, A, M or Z (damping is `damped=True`, not a fourth letter), and none of the combinations
        AutoETS forbids (additive error with a multiplicative trend, or season where ETS models the season)."""
        super().check_params()
        spec = self.model
        grammar = ("model is AutoETS' spec of three letters, error (A, M or Z), trend (N, A, M or Z) and season "
                   "(N, A, M or Z), e.g. 'ZZZ' (all chosen by AICc), 'AAN', 'MAM' or 'ZZN'; a damped trend is "
                   "damped=True")
        if len(spec) != 3 or spec[0] not in "AMZ" or spec[1] not in "NAMZ" or spec[2] not in "NAMZ":
            raise ParameterError(f"ETS: model={spec!r} is not a valid spec: {grammar}")
        own_season = self.season_length is not None and self.seasonal_form() == "own"
        if (spec[0] == "A" and spec[1] == "M") or (own_season and (spec[0] == "A" and spec[2] == "M"
                                                                   or spec[:3] == "MMA")):
            raise ParameterError(f"ETS: model={spec!r} is a combination AutoETS refuses (an additive error with a "
                                 "multiplicative trend or season, or a multiplicative error and trend with an "
                                 "additive season); use 'Z' for the part to choose, e.g. 'ZMN', or 'MAM'")
        if self.damped and spec[1] == "N":
            raise ParameterError(f"ETS: damped=True damps a trend, and model={spec!r} has none (its trend is N); "
                                 "give it a trend to damp, e.g. model='AAN', or 'ZZZ' (AutoETS then chooses a damped "
                                 "trend or none), or leave damped=None")
        return self

    def fitted_spec(self, m: int | tuple[int, ...]) -> str:
        """The spec AutoETS fits with a season of m steps: the model's, its season dropped where the season is
        not its own (none kept, or taken out by STL first)."""
        return self.model if self.seasonal_form(m) == "own" else self.model[:2] + "N"

    def positive_only(self, n: int) -> bool:
        """Whether a history of n values is fitted by AutoETS itself (not STL first, nor the tiny-history
        fallback) with a multiplicative error, trend or season: AutoETS fits those only to values that are all
        > 0. ('Z' parts choose among the models the data allow.)"""
        m = self.fitted_seasons(n)
        return n > self.tiny_history(m) and self.seasonal_form(m) != "stl" and "M" in self.fitted_spec(m)

    def _positive_cure(self) -> str:
        return (f"ETS(model={self.model!r}) fits a multiplicative error, trend or season, which needs every value "
                "> 0: use model='ZZZ' (AutoETS then chooses among the models the data allow) or an additive spec, "
                "e.g. 'AAA' or 'ANA'")

    def series_problem(self, ids: Sequence[str], series: Sequence[np.ndarray], cutoffs: np.ndarray) -> str | None:
        """The first series whose history before some cutoff has a value <= 0 where this model fits a
        multiplicative part to it (`positive_only`), named with that value; else None."""
        history = self.history
        for uid, y, cs in zip(ids, series, np.asarray(cutoffs)):
            for c in sorted({int(c) for c in cs if c >= 1}, reverse=True):
                n = c if history in (None, "auto") else min(c, int(history))
                low = np.flatnonzero(np.asarray(y[c - n: c]) <= 0)
                if low.size and self.positive_only(n):
                    i = c - n + int(low[0])
                    return (f"series {uid!r} has a value <= 0 ({float(y[i]):g} at position {i}) in the history "
                            f"{self.alias} is fitted on; {self._positive_cure()}, or leave {self.alias} out")
                if not low.size and history in (None, "auto"):
                    break                       # the earlier cutoffs' histories are parts of this one
        return None

    def _fit(self, y: np.ndarray) -> None:
        history = self.history
        fitted = y[-int(history):] if history not in (None, "auto") else y
        if fitted.min() <= 0 and self.positive_only(fitted.size):
            raise SeriesError(f"{self.alias}: the history has values <= 0 (the least {fitted.min():g}); "
                              f"{self._positive_cure()}")
        try:
            super()._fit(y)
        except Exception as e:          # statsforecast's, e.g. on a seasonally adjusted series (STL) that is not > 0
            if "negative or zero" not in str(e) and "no model able" not in str(e):
                raise
            raise SeriesError(f"{self.alias}: AutoETS fits no model of spec {self.model!r} to this history "
                              f"({e}); {self._positive_cure()}") from e

    def tiny_history(self, m: int | tuple[int, ...]) -> int:
        """statsforecast's AutoETS fits nothing to 4 values more than the spec's parameters or fewer (level 2,
        a trend or season given as A or M 2 each, damping 1; Z counts none)."""
        spec = self.model if self.seasonal_form(m) == "own" else self.model[:2] + "N"
        return 4 + 2 + 2 * (spec[1] in "AM") + 2 * (spec[2] in "AM") + int(bool(self.damped))

    def __init__(self, season_length: int | Sequence[int] | None = None, model: str = "ZZZ",
                 damped: bool | None = None, history: int | None = None, long_season: str = "stl",
                 alias: str | None = None) -> None:
        self.season_length = season_length
        self.history = history
        self.model = model
        self.damped = damped
        self.long_season = long_season
        self.alias = alias

    def seasonal_form(self, m: int | Sequence[int] | None = None) -> str:
        """As StatsForecastModel's; "none" for a spec without a season ("ZZN")."""
        return "none" if self.model[2] == "N" else super().seasonal_form(m)

    def _make(self, m: int | tuple[int, ...]):
        auto = _statsforecast("AutoETS")
        if self.seasonal_form(m) == "stl":
            return self._stl(m, auto(model=self.model[:2] + "N", damped=self.damped))
        return auto(season_length=m, model=self.model if m > 1 else self.model[:2] + "N", damped=self.damped)


THETA_METHODS = {"dotm": "DynamicOptimizedTheta", "auto": "AutoTheta"}


class Theta(StatsForecastModel):
    """The Theta method on the seasonally adjusted series (multiplicative decomposition when a
    seasonality test finds a season): statsforecast's DynamicOptimizedTheta (`method="dotm"`, the
    optimised dynamic Theta of Fiorucci et al. 2016) or AutoTheta (`"auto"`: the best of the four
    Theta variants by in-sample MSE, about four times the fitting time)."""

    _parameter_constraints = {**StatsForecastModel._parameter_constraints,
                              "method": [StrOptions(set(THETA_METHODS))]}

    def tiny_history(self, m: int) -> int:
        """statsforecast's Theta models fit nothing to 3 values or fewer."""
        return 3

    def __init__(self, season_length: int | None = None, method: str = "dotm", history: int | None = None,
                 alias: str | None = None) -> None:
        self.season_length = season_length
        self.method = method
        self.history = history
        self.alias = alias

    def _make(self, m: int):
        return _statsforecast(THETA_METHODS[self.method])(season_length=m)


class ARIMA(StatsForecastModel):
    """Automatic (seasonal) ARIMA, orders chosen by AICc in a stepwise search: statsforecast's AutoARIMA.
    Slow on long seasons (hours: m = 24) as every seasonal order is a long lag polynomial; above
    MOST_SEASON (24) steps a fit takes minutes (benchmarks/forecast_long_season.py --arima-history), so
    with `long_season="stl"` (the default) STL takes such a season out and a non-seasonal AutoARIMA
    forecasts the rest, as R's forecast::stlf(method="arima") does; "own" keeps AutoARIMA's seasonal search.
    Several seasons (`ARIMA((24, 168))`) are taken out by STL together, as ETS's are."""

    _parameter_constraints = {**StatsForecastModel._parameter_constraints, "season_length": SEASONS,
                              "long_season": [StrOptions(set(LONG_SEASONS))]}

    def __init__(self, season_length: int | Sequence[int] | None = None, history: int | None = None,
                 long_season: str = "stl", alias: str | None = None) -> None:
        self.season_length = season_length
        self.history = history
        self.long_season = long_season
        self.alias = alias

    def _make(self, m: int | tuple[int, ...]):
        auto = _statsforecast("AutoARIMA")
        return self._stl(m, auto()) if self.seasonal_form(m) == "stl" else auto(season_length=m)
