"""The global (neural) models' lengths derived from the data, and what becomes of series too short for them.

    backtest(df, models, h=48, n_windows=8, input_size="auto", short_series="statistical")

`input_size="auto"` sets every length-like setting of the neural models by one rule (`neural_lengths`),
from the horizon h, the season m and the series' lengths:

    look-back L     7 h (at least 2 m), a multiple of 8, at most what the median-length series fits
                    (`fitting_input_size`): a few short series do not shrink every series' look-back;
                    at least 8
    patch, stride   PatchTST's (and the frozen ViT's) patch an eighth of L, between 2 and PATCH_LEN (16);
                    stride half a patch
    trend kernel    DLinear's moving average over m + 1 steps (m when m is odd), at least 3: one season
    validation      the last h values before each training's cutoff (one horizon; `auto` validates on
                    windows of h before the first cutoff, with networks trained before them)
    windows/epoch   8192 (NEURAL_TRAINING), or all the training windows where there are fewer

At h 48 and m 24 (hourly) it gives the settings these models were tuned with on M4 Hourly (L 336,
patch 16, stride 8, kernel 25); elsewhere they follow h and m.
An integer `input_size` sets the look-back alone; None keeps each model's own settings.

A series shorter than the global models need is then handled by `short_series`:

    "statistical"  forecast under the global models' names by `auto` over the statistical models (the
                   run's, else Theta and ETS), validated on the short series' validation windows, the default
    "skip"         left out of the backtest, for every model
    "baseline"     forecast by seasonal naive under the global models' names (`fallback.WithFallback`)
    "error"        refused (SeriesError naming the series)

`auto` (forecasting.auto) needs no policy: a series too short for its neural candidates is forecast by
its statistical ones. The record in the result names the short series in any case.

Statistical models need no look-back and are not concerned. `prepare` applies both and says what it did.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from numbers import Integral
from typing import Sequence

import numpy as np
import pandas as pd
from sklearn.base import clone

from frozenvit.backbone.suite.errors import ParameterError

from .base import Forecaster
from .data import ID
from .defaults import LOOKBACK_HORIZONS, MOST_WINDOWS, PATCH_LEN, SHORT_SERIES
from .ensemble import Ensemble
from .errors import SeriesError

MULTIPLE = 8                       # a chosen look-back is a multiple of this many steps
SHORTEST = 8                       # the shortest look-back chosen: four patches of 2
PATCHES = 8                        # a patch is 1/PATCHES of the look-back


class ShortSeriesWarning(UserWarning):
    """Series too short for the global models' look-back were skipped or forecast by a baseline."""


def fitting_input_size(length: int, h: int, windows: int, step: int, cap: int) -> int:
    """The longest look-back (<= cap, a multiple of 8) that leaves one training window and a
    validation tail of h before the first cutoff of a series of `length` values (may be < 16)."""
    avail = length - h - (windows - 1) * step - 2 * h
    return min(cap, avail) // MULTIPLE * MULTIPLE


def auto_input_size(lengths: Sequence[int], h: int, windows: int, step: int, cap: int) -> int:
    """The look-back that fits the median-length series (`fitting_input_size`); SeriesError when that
    is shorter than SHORTEST."""
    typical = int(np.median(np.asarray(lengths)))
    size = fitting_input_size(typical, h, windows, step, cap)
    if size < SHORTEST:
        raise SeriesError(f"the typical series ({typical} values, the median length) is too short for neural "
                          f"models with --h {h} and --windows {windows}; drop dlinear/patchtst/vit from --models, or "
                          "use fewer --windows or a smaller --h")
    return size


def auto_windows(lengths: Sequence[int], h: int, step: int, season_length: int, most: int = MOST_WINDOWS,
                 calibration_windows: int = 0) -> int:
    """The most rolling windows (1..`most`) that leave the shortest series a history of more than two
    seasons and two horizons before its first cutoff: max(2 m, 2 h) + 1 values, and before them the
    `calibration_windows` windows of h that calibrate the intervals (one window when even one leaves less)."""
    keep = max(2 * season_length, 2 * h) + 1 + int(calibration_windows) * h
    return int(np.clip((int(np.min(lengths)) - keep - h) // step + 1, 1, most))


def kept_for_windows(df: pd.DataFrame, models: Sequence[Forecaster], h: int, step: int, season_length: int,
                     calibration_windows: int, input_size: int | str | None, short_series: str | None,
                     fallback_history: int | str | None = None) -> np.ndarray:
    """The lengths of the series an automatic window count is made over: every series', but with
    `short_series="skip"` only those kept with one window (long enough for the neural models' look-back,
    `prepare`, and for a window after two seasons and two horizons, `auto_windows`), where any is: the series
    left out must not cap the windows of the rest."""
    lengths = df.groupby(ID, sort=False).size()
    if short_series != "skip":
        return lengths.to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            short = set(prepare(df, models, h, 1, step, season_length, calibration_windows, input_size, "skip",
                                fallback_history).short_series.get("ids", []))
        except SeriesError:            # none kept: the backtest says so with the windows counted over all
            return lengths.to_numpy()
    keep = max(2 * season_length, 2 * h) + 1 + int(calibration_windows) * h + h
    kept = lengths[~lengths.index.astype(str).isin(short) & (lengths.to_numpy() >= keep)]
    return kept.to_numpy() if len(kept) else lengths.to_numpy()


@dataclass(frozen=True)
class NeuralLengths:
    """Every length-like setting of the neural models in one backtest, derived once (`neural_lengths`)."""
    input_size: int                # L, the look-back
    patch_len: int                 # PatchTST / frozen ViT
    stride: int
    kernel_size: int               # DLinear's trend
    val_size: int                  # the validation tail of each training

    def params_for(self, model: Forecaster) -> dict:
        """The settings `model` has (by hyperparameter name)."""
        own = model.get_params(deep=False)
        return {k: v for k, v in self.__dict__.items() if k in own}


def neural_lengths(lengths: Sequence[int], h: int, season_length: int, windows: int, step: int,
                   shortest: bool = False) -> NeuralLengths:
    """The rule of the module doc: look-back, patch, stride, trend kernel and validation tail from h, the
    season and the series' lengths (each series' values before any calibration window). When the
    median-length series fits no look-back of SHORTEST: SHORTEST with `shortest` (most series then fall
    back to a statistical model), else SeriesError."""
    m = int(season_length)
    wanted = -(-max(LOOKBACK_HORIZONS * h, 2 * m) // MULTIPLE) * MULTIPLE
    fits = fitting_input_size(int(np.median(np.asarray(lengths))), h, windows, step, wanted)
    size = SHORTEST if shortest and fits < SHORTEST else auto_input_size(lengths, h, windows, step, wanted)
    patch = int(np.clip(size // PATCHES, 2, PATCH_LEN))
    return NeuralLengths(input_size=size, patch_len=patch, stride=max(1, patch // 2),
                         kernel_size=max(3, m + 1 - m % 2), val_size=int(h))


def skipped(record: dict, short: Sequence[tuple], n_series: int, need: int, why: str, task: str) -> dict:
    """`short_series="skip"` applied to series too short for the `task` ("backtest", "forecast") itself:
    warn, naming them, and return `record` with them added. short: (id, length) pairs; why: what the `need`
    values are made of."""
    gone = [str(u) for u, _ in short]
    what = (f"{len(gone)} of {n_series} series have fewer than the {need} values this {task} needs ({why}): "
            f"{', '.join(gone[:10])}{' and more' if len(gone) > 10 else ''}")
    done = f"left out of the {task} for every model"
    warnings.warn(f"{what}; {done} (--short-series skip)", ShortSeriesWarning, stacklevel=3)
    return {**record, "ids": record.get("ids", []) + gone,
            "reason": "; ".join(filter(None, [record.get("reason"), what])), "what": done}


def _name_ids(ids: Sequence[str], most: int = 10) -> str:
    shown = ", ".join(ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


@dataclass
class Prepared:
    """What `prepare` hands to the backtest, and what it decided."""
    df: pd.DataFrame
    models: list[Forecaster]
    input_size: int | None                  # the global models' look-back; None: there is none to choose
    short_series: dict = field(default_factory=dict)     # {"policy": ..., "ids": [...]}
    lengths: dict = field(default_factory=dict)          # input_size="auto": `NeuralLengths` as a dict


def _is_global(model: Forecaster) -> bool:
    from .remote import trains_globally

    return not isinstance(model, Ensemble) and trains_globally(model) and "input_size" in model.get_params()


def _rebuild(models: Sequence[Forecaster], replace, into_auto: bool = True) -> list[Forecaster]:
    """`models` with every global model (ensemble members and, with `into_auto`, auto's candidates
    included) replaced by `replace(model)`, each object replaced once, so that a member also named
    alone stays one model."""
    from .auto import AutoForecaster

    done: dict[int, Forecaster] = {}

    def swap(m: Forecaster) -> Forecaster:
        if isinstance(m, Ensemble):
            return Ensemble([swap(x) for x in m.members], m.how)
        if isinstance(m, AutoForecaster):
            return clone(m, safe=False).set_params(candidates=[swap(x) for x in m.candidates]) if into_auto else m
        if _is_global(m) and id(m) not in done:
            done[id(m)] = replace(m)
        return done.get(id(m), m)

    return [swap(m) for m in models]


def _leaves(models: Sequence[Forecaster]) -> list[Forecaster]:
    from .auto import AutoForecaster

    return [x for m in models for x in (_leaves(m.members) if isinstance(m, Ensemble) else
                                        _leaves(m.candidates) if isinstance(m, AutoForecaster) else [m])]


def _outside_auto(models: Sequence[Forecaster]) -> list[Forecaster]:
    """The global models named alone or in an ensemble (not as auto's candidates), each once."""
    from .auto import AutoForecaster

    out: dict[int, Forecaster] = {}
    for m in models:
        for x in (m.members if isinstance(m, Ensemble) else [m]):
            if not isinstance(x, AutoForecaster) and _is_global(x):
                out.setdefault(id(x), x)
    return list(out.values())


def statistical_fallback(models: Sequence[Forecaster], season_length: int,
                         history: int | str | None = None) -> Forecaster:
    """What forecasts a series too short for the neural models (`short_series="statistical"`): `auto` over
    the statistical models among `models` (when there are none, Theta and ETS fitted on `history`:
    forecasting.baselines), validated on the short series' validation windows before their first cutoffs
    (forecasting.auto's default rule)."""
    from .auto import AutoForecaster
    from .baselines import ETS, LocalModel, Theta

    local = list({m.alias: m for m in _leaves(models) if isinstance(m, LocalModel)}.values())
    return AutoForecaster(local or [Theta(season_length, history=history), ETS(season_length, history=history)],
                          median=False)


def prepare(df: pd.DataFrame, models: Sequence[Forecaster], h: int, n_windows: int, step_size: int,
            season_length: int, calibration_windows: int, input_size: int | str | None,
            short_series: str | None, fallback_history: int | str | None = None, future: bool = False) -> Prepared:
    """Set the global models' look-back (`input_size`: None keeps each model's own, an int sets it, "auto"
    chooses it from the data, at most the models' own) and apply `short_series` (see the module doc; None:
    none, the backtest's length check refuses a short series). `calibration_windows` K: each series'
    K h values before the first cutoff are no look-back's history. `fallback_history`: the history of the
    Theta and ETS that `short_series="statistical"` builds where `models` hold no statistical model.
    `future`: the one window forecast lies after each series' last value (forecasting.future), so the series
    hold no horizon's values."""
    if short_series is not None and short_series not in SHORT_SERIES:
        raise ParameterError(f"short_series must be one of {SHORT_SERIES}, got {short_series!r}")
    if input_size not in (None, "auto") and not (isinstance(input_size, Integral) and input_size >= 1):
        raise ParameterError(f"input_size must be None, 'auto' or an integer >= 1, got {input_size!r}")
    lengths = df.groupby(ID, sort=False).size()
    ahead = h if future else 0                  # the horizon's values, which a future forecast does not hold
    glob = [m for m in _leaves(models) if _is_global(m)]
    record = {"policy": short_series, "ids": []} if short_series else {}
    if not glob:
        return Prepared(df, list(models), None if input_size == "auto" else input_size, record)
    size, chosen = input_size, {}
    if input_size == "auto":
        try:
            rule = neural_lengths(lengths.to_numpy() + ahead - calibration_windows * h, h, season_length, n_windows,
                                  step_size, shortest=short_series in ("statistical", "baseline"))
        except SeriesError:
            if not future:
                raise
            K = calibration_windows
            raise SeriesError(f"the typical series ({int(lengths.median())} values, the median length) is too short "
                              f"for neural models with --h {h}{f' and {K} --calibration-windows' if K else ''}; drop "
                              f"dlinear/patchtst/vit from --models, or use a smaller --h"
                              f"{', fewer --calibration-windows' if K else ''} or --short-series statistical") from None
        size, chosen = rule.input_size, dict(rule.__dict__)
        models = _rebuild(models, lambda m: clone(m).set_params(**rule.params_for(m)))
    elif size is not None:
        models = _rebuild(models, lambda m: clone(m).set_params(input_size=int(size)))
    look = int(size) if size is not None else max(int(m.input_size) for m in glob)
    need = max(m.min_history() for m in _leaves(models) if _is_global(m)) + h + (n_windows - 1) * step_size \
        + calibration_windows * h - ahead                               # values a series needs for them
    short = [str(u) for u in lengths.index[lengths.to_numpy() < need]]
    out = Prepared(df, list(models), None if size is None else int(size), record and {**record, "ids": short},
                   chosen)
    if not short or short_series is None:
        return out
    parts = f"look-back {look} + a training target {h} + validation {h}" + (
        "" if future else f" + --h {h} + {n_windows - 1} more --windows of --step-size {step_size}")
    what = (f"{len(short)} of {len(lengths)} series have fewer than the {need} values the neural models need "
            f"({parts}): {_name_ids(short)}")
    if short_series == "error":
        fits = fitting_input_size(int(lengths.min()) + ahead, h, n_windows, step_size, look)
        hint = f"--input-size {fits}, " if fits >= SHORTEST else ""
        raise SeriesError(f"{what}; pass {hint}--short-series skip or --short-series baseline, or drop those series")
    if short_series == "skip" and len(short) == len(lengths):
        raise SeriesError(f"{what}: --short-series skip leaves no series; use a shorter --input-size, fewer "
                          "--windows or --short-series baseline")
    named = _outside_auto(out.models)
    if len(short) == len(lengths) and named:       # not one forecast of theirs: refuse, not a fallback under their names
        fits = fitting_input_size(int(lengths.max()) + ahead, h, n_windows, step_size, look)
        raise SeriesError(f"{what}: not one series is long enough for {'/'.join(m.alias for m in named)}, so "
                          f"--short-series {short_series} would report another model's forecasts under "
                          f"{'its name' if len(named) == 1 else 'their names'}; use "
                          + (f"--input-size {fits} (the longest series fits it) or " if fits >= SHORTEST else "")
                          + f"a shorter --input-size, drop {'/'.join(m.alias.lower() for m in named)} from --models, "
                          "or let auto choose among the models (it leaves a network out of a series too short for it)")
    fallback = statistical_fallback(models, season_length, fallback_history) if short_series == "statistical" else None
    done = {"skip": f"left out of the {'forecast' if future else 'backtest'} for every model",
            "baseline": "forecast by seasonal naive in the neural models' columns",
            "statistical": f"forecast in the neural models' columns by auto over the statistical models, validated "
                           f"on their validation windows where they hold one "
                           f"({'/'.join(m.alias for m in fallback.candidates)})"
            if fallback else ""}[short_series]
    out.short_series = {**out.short_series, "reason": what, "what": done}
    warnings.warn(f"{what}; {done} (--short-series {short_series})", ShortSeriesWarning, stacklevel=3)
    if short_series == "skip":
        out.df = df[~df[ID].astype(str).isin(short)].reset_index(drop=True)
    else:
        from .baselines import SeasonalNaive
        from .fallback import WithFallback

        other = fallback or SeasonalNaive(season_length)
        out.models = _rebuild(out.models, lambda m: WithFallback(m, other), into_auto=False)
    return out
