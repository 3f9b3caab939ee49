"""Forecasts of the h values after each series' last one: what a backtest judges, put to use.

    from frozenvit.forecasting import AutoForecaster, ETS, forecast
    fc = forecast(df, [AutoForecaster(...), ETS(12)], h=18, season_length=12, levels=(80, 95))
    fc.frame            # unique_id, ds (the next h timestamps), one column per model, '<model>-lo-80', ...

Each model forecasts through the contract a backtest uses (`Forecaster.forecast_cutoffs`), with one cutoff
per series after its last value: local models are fitted on each whole history, global models trained on
every series' history, `auto` validated inside it. The look-back, the short-series policy and the statistical
models' history are set as a backtest sets them (forecasting.lookback). Intervals are conformal: the scaled
errors of `calibration_windows` windows of h that end by the last value, forecast from the history before
each, size them (forecasting.intervals): by default as many windows as give every step 19 errors over the
series. The statistical models (ETS, Theta, ARIMA) give their own as well ('ETS/own').
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from frozenvit.backbone.suite.engine import check_engine, ray_session, use_engine
from frozenvit.backbone.suite.errors import ParameterError

from .backtest import (check_horizon_fits, check_models_and_season, check_series_fit, check_unique_aliases,
                       keep_choices, weights_frame, with_members, with_seasons)
from .base import Forecaster
from .data import DS, ID, Y, month_stamps_after, validate
from .defaults import GLOBAL_CALIBRATIONS
from .ensemble import Ensemble, combine, same_model
from .errors import SeriesError
from .fallback import season_dropped
from .intervals import calibration_cutoffs, check_levels, conformal_bounds, errors_needed, warn_flat_then_moving
from .lookback import prepare, skipped
from .metrics import mase_scale
from .reuse import shared_fits

SCORES_WANTED = errors_needed(95)   # scaled errors per step that a 95 % conformal interval needs (19)


@dataclass
class Forecast:
    """The forecasts of the h values after each series' last value.

    frame: unique_id, ds (the next h timestamps on each series' step), step (1..h), one column per model and,
    with `levels`, '<label>-lo-<level>' / '<label>-hi-<level>' (statsforecast's names; label: the model's
    alias, or '<alias>/own' for a model's own intervals); NaN where an interval could not be sized.
    """

    frame: pd.DataFrame
    models: list[str]
    h: int
    season_length: int
    levels: tuple = ()
    calibration_windows: int = 0
    global_calibration: str | None = None
    # the windows the networks (and the ensembles and auto that forecast through them) are calibrated on, where
    # fewer than calibration_windows keep their look-back (`forecast`); None: the same windows as every model
    network_calibration_windows: int | None = None
    last: dict = field(default_factory=dict)            # unique_id -> its last timestamp (ISO text or int)
    fitted: dict = field(default_factory=dict)          # alias -> the global model trained on every history
    seconds: dict = field(default_factory=dict)
    input_size: int | None = None
    short_series: dict = field(default_factory=dict)
    neural_lengths: dict = field(default_factory=dict)
    choices: dict = field(default_factory=dict)         # auto's alias -> its AutoChoice
    network_calibrated: list = field(default_factory=list)   # the aliases calibrated on network_calibration_windows

    def auto_weights(self) -> pd.DataFrame:
        """What each `auto` forecast each series with: model, unique_id and one weight per candidate."""
        return weights_frame(self.choices, list(self.last))

    def interval_share(self) -> dict:
        """label -> level -> the share of forecast rows that have an interval."""
        share = {}
        for col in self.frame.columns:
            if "-lo-" in col:
                label, level = col.rsplit("-lo-", 1)
                share.setdefault(label, {})[level] = float(self.frame[col].notna().mean())
        return share

    def to_dict(self) -> dict:
        """Settings, each series' last timestamp, auto's choices: JSON-ready (the forecasts are in `frame`)."""
        return {"h": self.h, "season_length": self.season_length, "models": self.models,
                "n_series": len(self.last), "last": self.last, "seconds": self.seconds,
                "input_size": self.input_size, "short_series": self.short_series,
                "neural_lengths": self.neural_lengths,
                **({"levels": list(self.levels), "calibration_windows": self.calibration_windows,
                    "network_calibration_windows": self.network_calibration_windows,
                    "global_calibration": self.global_calibration, "interval_share": self.interval_share()}
                   if self.levels else {}),
                **({"auto_choices": {a: c.to_dict() for a, c in self.choices.items()}} if self.choices else {})}


def future_stamps(ds: pd.Series, h: int) -> np.ndarray | pd.DatetimeIndex:
    """The h timestamps after the last of one validated series, on its step (a calendar step for dates)."""
    if pd.api.types.is_integer_dtype(ds):
        t = ds.to_numpy().astype(np.int64)
        step = int(np.diff(t).min()) if t.size > 1 else 1
        return t[-1] + step * np.arange(1, h + 1)
    idx = pd.DatetimeIndex(ds)
    months = month_stamps_after(idx, h) if idx.size >= 3 else None
    if months is not None:                           # the same day of every k-th month: 2018-01-15, 2018-02-15, ...
        return months
    freq = pd.infer_freq(idx) if idx.size >= 3 else None
    if freq is None:
        if idx.size < 2:
            raise SeriesError(f"cannot tell the step of a series with {idx.size} timestamp(s); forecasting its "
                              "future needs at least two")
        freq = pd.Timedelta(np.diff(idx.asi8).min())
    return pd.date_range(idx[-1], periods=h + 1, freq=freq)[1:]


def auto_calibration_windows(lengths: Sequence[int], h: int, season_length: int) -> int:
    """Calibration windows for a future forecast's intervals: enough that every step has 19 scaled errors over
    the series (a 95 % interval's least: 19 windows for one series, 1 from 19 series on), as many as the
    shortest series holds after a season's history; at least 1."""
    fit = (int(min(lengths)) - season_length - 1) // h
    return max(1, min(-(-SCORES_WANTED // len(lengths)), fit))


def _holds_network(model: Forecaster) -> bool:
    """Whether `model` is, or forecasts through, a network that trains on every series (a global model): itself,
    an ensemble's member, auto's candidate, or the model a fallback wraps."""
    from .auto import AutoForecaster
    from .fallback import WithFallback
    from .lookback import _is_global

    if isinstance(model, Ensemble):
        return any(_holds_network(m) for m in model.members)
    if isinstance(model, AutoForecaster):
        return any(_holds_network(m) for m in model.candidates)
    if isinstance(model, WithFallback):
        return _holds_network(model.model) or _holds_network(model.fallback)
    return _is_global(model)


def _unchanged_networks(df: pd.DataFrame, models: Sequence[Forecaster], h: int, season_length: int, most: int,
                        *args) -> int:
    """The most calibration windows (1..most) with which the global models get the look-back and the series
    they get with one: asking for intervals never changes a point forecast."""
    def plan(k: int) -> tuple:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p = prepare(df, models, h, 1, h, season_length, k, *args, future=True)
            except SeriesError:
                return None
        return p.input_size, tuple(p.short_series.get("ids", ()))
    one = plan(1)
    return next((k for k in range(most, 1, -1) if plan(k) == one), 1)


class SeasonDroppedWarning(UserWarning):
    """Series shorter than a season are forecast by naive in seasonal naive's column."""


class LookBackWarning(UserWarning):
    """The calibration windows changed the networks' look-back or the series they forecast."""


def _say_look_back_changed(df, models, h, season_length, K, input_size, short_series, fallback_history, prep) -> None:
    """Warn, in one line, where the K calibration windows give the networks another look-back, or other
    series, than a forecast without intervals: their point forecasts then differ from it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            plain = prepare(df, models, h, 1, h, season_length, 0, input_size, short_series, fallback_history,
                            future=True)
        except SeriesError:
            return
    fewer = sorted(set(prep.short_series.get("ids", ())) - set(plain.short_series.get("ids", ())))
    if plain.input_size == prep.input_size and not fewer:
        return
    what = [f"a look-back of {prep.input_size}, not {plain.input_size}"] if plain.input_size != prep.input_size \
        else []
    what += [f"{len(fewer)} more series forecast by their fallback ({', '.join(fewer[:5])}"
             f"{', ...' if len(fewer) > 5 else ''})"] if fewer else []
    warnings.warn(f"{K} --calibration-windows of --h {h}: the networks get {' and '.join(what)} as without "
                  "--levels (each series' last windows calibrate the intervals and are no look-back's history), so "
                  "their point forecasts differ from a forecast without --levels; fewer --calibration-windows "
                  "keep them", LookBackWarning, stacklevel=3)


def calibrated(model: Forecaster, cuts: np.ndarray, ccuts: np.ndarray, global_calibration: str) -> np.ndarray:
    """(S,) whether each series' history holds what `model` needs to forecast its calibration windows: a
    network (holdout) its look-back, (retrain) a training's history; a fallback what the model it hands the
    series to needs; any other model its `min_history`. No window: True."""
    from .fallback import WithFallback
    from .lookback import _is_global

    first = np.asarray(ccuts)[:, 0] if np.asarray(ccuts).shape[1] else None
    if first is None:
        return np.ones(len(cuts), dtype=bool)
    if isinstance(model, WithFallback):
        long = np.asarray(cuts)[:, 0] >= model.model.min_history()
        return np.where(long, calibrated(model.model, cuts, ccuts, global_calibration),
                        calibrated(model.fallback, cuts, ccuts, global_calibration))
    if _is_global(model):
        need = int(model.input_size) if global_calibration == "holdout" else model.min_history()
    else:
        need = model.min_history()
    return first >= max(1, need)


def _calibration(model: Forecaster, ys: list, ccuts: np.ndarray, ok: np.ndarray, h: int, progress) -> np.ndarray:
    """`model`'s forecasts (S, K, h) of the calibration windows of the series `ok`, NaN elsewhere."""
    out = np.full((len(ys), ccuts.shape[1], h), np.nan)
    idx = np.flatnonzero(ok)
    if ccuts.shape[1] and idx.size:
        out[idx] = model.forecast_cutoffs([ys[i] for i in idx], ccuts[idx], h, progress=progress)[0]
    return out


def forecast(df: pd.DataFrame, models: Sequence[Forecaster], h: int, season_length: int | None = None,
             levels: Sequence[float] = (), calibration_windows: int | str = "auto",
             global_calibration: str | None = None, input_size: int | str | None = None,
             short_series: str | None = None, fallback_history: int | str | None = None,
             progress: bool | None = None, engine: str = "local", workers: int | None = None) -> Forecast:
    """Forecast the h values after each series of `df` (long: unique_id, ds, y) with every model; see the
    module doc. The settings mean what they mean to `backtest`, but for the intervals' calibration:
    `calibration_windows="auto"` takes `auto_calibration_windows` for every model but the networks (and the
    ensembles and auto that forecast through them), which take the last of those windows, no more than leave
    them the look-back and the series they get with one (so that intervals never change a point forecast;
    `network_calibration_windows` records how many when fewer); `global_calibration` None is "holdout" for one
    network window, "retrain" for more (a network's validation tail holds one). `engine="ray"` sends the statistical models' fits out as Ray tasks over
    `workers` CPUs, as in a backtest (the same forecasts); the networks train here. Raises SeriesError for a
    series too short for the models (or, with `short_series="skip"`, leaves it out and records it). Several
    seasons, (24, 168), and no model at all: as in `backtest`."""
    given_season = season_length
    season_length = check_models_and_season(models, 1 if season_length is None else season_length, "forecast")
    for name, v in (("h", h), ("season_length", season_length)):
        if int(v) != v or v < 1:
            raise SeriesError(f"forecast needs {name} >= 1 (an integer), got {v!r}")
    df = validate(df)
    lengths = df.groupby(ID, sort=False).size().to_numpy()
    chosen = calibration_windows == "auto"
    if chosen:
        calibration_windows = auto_calibration_windows(lengths, int(h), int(season_length))
    if int(calibration_windows + 1) != calibration_windows + 1 or calibration_windows + 1 < 1:
        raise SeriesError(f"forecast needs calibration_windows + 1 >= 1 (an integer), got {calibration_windows + 1!r}")
    if global_calibration is not None and global_calibration not in GLOBAL_CALIBRATIONS:
        raise ParameterError(f"global_calibration must be one of {', '.join(GLOBAL_CALIBRATIONS)}, "
                             f"got {global_calibration!r}")
    h, season_length = int(h), int(season_length)
    levels = check_levels(levels) if len(levels) else ()
    K = int(calibration_windows) if levels else 0
    for model in models:
        model.check_params()
    given_models, models = models, with_seasons(models, given_season, "forecast")
    for model, given in zip(models, given_models):
        if model is not given:          # given the forecast's season
            model.check_params()
    check_horizon_fits(models, h, "forecast")
    K_net = K                           # the networks' windows: no more than leave their look-back as one does
    if chosen and K > 1:
        K_net = _unchanged_networks(df, models, h, season_length, K, input_size, short_series, fallback_history)
    if global_calibration is None:
        global_calibration = "holdout" if K_net <= 1 else "retrain"
    prep = prepare(df, models, h, 1, h, season_length, K_net, input_size, short_series, fallback_history,
                   future=True)
    if K_net and prep.input_size is not None:
        _say_look_back_changed(df, models, h, season_length, K_net, input_size, short_series, fallback_history,
                               prep)
    lengths_kept = prep.df.groupby(ID, sort=False).size().to_numpy()
    record = prep.short_series
    models = prep.models
    if record.get("policy") != "skip" and len(lengths_kept):     # less than a season: naive in snaive's column
        models, dropped = season_dropped(models, int(lengths_kept.min()))
        if dropped:
            few = [(str(u), n) for u, n in prep.df.groupby(ID, sort=False).size().items() if n < season_length]
            warnings.warn(f"{', '.join(dropped)}: {len(few)} of {len(lengths_kept)} series hold less than one season "
                          f"({season_length} values): {', '.join(f'{u} ({n})' for u, n in few[:10])}"
                          f"{' and more' if len(few) > 10 else ''}; forecast by their last value (naive) in "
                          f"{'its' if len(dropped) == 1 else 'their'} column, as ETS and Theta drop a season a "
                          "history does not hold", SeasonDroppedWarning, stacklevel=2)
    models = with_members(models)
    aliases = check_unique_aliases(models)
    needs = [(m.min_history(), m) for m in models]
    need = max(n for n, _ in needs)             # what a point forecast needs; intervals take what each series holds
    groups = list(prep.df.groupby(ID, sort=False))
    short = [(str(u), len(g)) for u, g in groups if len(g) < need]
    if short and record.get("policy") == "skip" and len(short) < len(groups):
        record = skipped(record, short, len(groups), need, "the models' history", "forecast")
        groups = [(u, g) for u, g in groups if len(g) >= need]
    elif short:
        (uid, n), more = short[0], len(short) - 1
        others = f" (and {more} more of the {len(groups)} series)" if more else ""
        limiting = [m for k, m in needs if k > n]
        named = ", ".join(dict.fromkeys(m.alias for m in limiting))
        nets = [m for m in limiting if "input_size" in m.get_params()]
        seasonal = [m for m in limiting if m not in nets]
        cures = ([f"a shorter --input-size (the networks need {max(m.min_history() for m in nets)})",
                  "--short-series statistical or baseline"] if nets and prep.input_size is not None else []) \
            + (["--short-series statistical or baseline"] if nets and prep.input_size is None else []) \
            + (["a smaller --season-length"] if seasonal else []) \
            + (["--short-series skip"] if record.get("policy") != "skip" and len(short) < len(groups) else [])
        raise SeriesError(f"series {uid!r} has {n} values{others}; a forecast by {named} needs {need}; use "
                          f"{', '.join(dict.fromkeys(cures))}, drop {named} from the models, or drop those series")
    ids = [str(u) for u, _ in groups]
    ys = [g[Y].to_numpy(dtype=float) for _, g in groups]
    cuts = np.array([[y.size] for y in ys])                                         # (S, 1): after the last value
    ccuts = calibration_cutoffs(cuts, K, h)                                         # (S, K)

    def own_cutoffs(model: Forecaster) -> np.ndarray:
        """The calibration cutoffs `model` forecasts: all K, or a network's last K_net."""
        return ccuts[:, K - K_net:] if K_net < K and _holds_network(model) else ccuts

    for model in models:
        problem = None if isinstance(model, Ensemble) or not K else \
            model.calibration_problem(cuts, own_cutoffs(model), h, global_calibration)
        if problem:
            raise SeriesError(problem)
    check_series_fit(models, ids, ys, np.concatenate([ccuts, cuts], axis=1))

    done: list[tuple[Forecaster, tuple]] = []

    def run(model: Forecaster) -> tuple:
        """(preds (S, 1, h), calib (S, K, h), own (lo, hi) or None, fitted, seconds), once per model."""
        hit = next((r for m, r in done if same_model(m, model)), None)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        if isinstance(model, Ensemble):
            parts = [run(m) for m in model.members]
            r = (combine([p[0] for p in parts], model.how), combine([p[1] for p in parts], model.how), None, None,
                 sum(p[4] for p in parts))
        else:
            mine = own_cutoffs(model)                                               # (S, K or K_net)
            ok = calibrated(model, cuts, mine, global_calibration)
            own = None
            if levels and model.has_own_intervals():
                # the calibration windows first, so that what the model records of its choice (history="auto":
                # `history_`) is the forecast's, the one its forecasts use (as in a backtest)
                calib = _calibration(model, ys, mine, ok, h, progress)
                own = model.forecast_intervals(ys, cuts, h, levels, progress=progress)
                preds, fitted = own[0], None
            elif ok.all():
                preds, calib, fitted = model.forecast_with_calibration(ys, cuts, mine, h, progress=progress,
                                                                       global_calibration=global_calibration)
            else:           # a series whose history holds no calibration window has no calibration errors
                calib = _calibration(model, ys, mine, ok, h, progress)
                preds, fitted = model.forecast_cutoffs(ys, cuts, h, progress=progress)
            if mine.shape[1] < K:                       # a network's earlier windows: no forecast, no error
                calib = np.concatenate([np.full((len(ys), K - mine.shape[1], h), np.nan), calib], axis=1)
            r = (preds, calib, None if own is None else own[1:], fitted, time.perf_counter() - t0)
        done.append((model, r))
        return r

    with contextlib.ExitStack() as stack:
        if check_engine(engine) == "ray":
            stack.enter_context(ray_session(num_cpus=workers))
        stack.enter_context(use_engine(engine, workers))
        stack.enter_context(shared_fits())
        for model in models:
            run(model)
    stamps = [future_stamps(g[DS], h) for _, g in groups]
    frame = pd.DataFrame({ID: np.repeat(ids, h), DS: np.concatenate([np.asarray(s) for s in stamps]),
                          "step": np.tile(np.arange(1, h + 1), len(ids))})
    if K:
        warn_flat_then_moving(ids, ys, cuts, season_length, h)
        truth = np.stack([np.stack([y[c: c + h] if c >= 1 else np.full(h, np.nan) for c in cc])
                          for y, cc in zip(ys, ccuts)])                                         # (S, K, h)
        scale = np.array([[mase_scale(y[:c], season_length) if c > season_length else np.nan
                           for c in np.concatenate([cc, cs])] for y, cc, cs in zip(ys, ccuts, cuts)])   # (S, K + 1)
    fitted, seconds = {}, {}
    for model in models:
        preds, calib, own, fit, secs = run(model)
        frame[model.alias] = preds.reshape(-1)
        seconds[model.alias] = secs
        if fit is not None:
            fitted[model.alias] = fit
        if K:
            with np.errstate(invalid="ignore"):        # no calibration window or no scale: no score
                scores = np.abs(truth - calib) / scale[:, :K, None]
            lo, hi = conformal_bounds(preds, scale[:, K:], scores, [K], levels)
            for i, lv in enumerate(levels):
                frame[f"{model.alias}-lo-{lv:g}"], frame[f"{model.alias}-hi-{lv:g}"] = \
                    lo[..., i].reshape(-1), hi[..., i].reshape(-1)
        if own is not None:
            for i, lv in enumerate(levels):
                frame[f"{model.alias}/own-lo-{lv:g}"], frame[f"{model.alias}/own-hi-{lv:g}"] = \
                    own[0][..., i].reshape(-1), own[1][..., i].reshape(-1)
    last = {u: (g[DS].iloc[-1].isoformat() if isinstance(g[DS].iloc[-1], pd.Timestamp) else int(g[DS].iloc[-1]))
            for u, (_, g) in zip(ids, groups)}
    choices = {m.alias: m.choice_ for m, _ in done if getattr(m, "choice_", None) is not None}
    keep_choices(given_models, models)
    return Forecast(frame, aliases, h, season_length, levels, K, global_calibration if K else None,
                    K_net if K_net < K and any(_holds_network(m) for m in models) else None, last, fitted,
                    seconds, prep.input_size, record, prep.lengths, choices,
                    network_calibrated=[m.alias for m in models if K_net < K and _holds_network(m)])
