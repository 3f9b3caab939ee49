"""A model that hands the series too short for it to another one (`--short-series baseline`).

`WithFallback(PatchTST(h=48), SeasonalNaive(24))` forecasts, under PatchTST's name, every series
whose history before its first cutoff is at least `PatchTST.min_history()` with PatchTST (trained
on those series only) and every other series with seasonal naive. `short_ids_` is not kept: which
series fell back is decided per call and said by `short_series`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .base import Forecaster
from .defaults import CONFORMAL


def short_series(model: Forecaster, cutoffs: np.ndarray) -> np.ndarray:
    """Boolean (S,): the series whose first cutoff leaves `model` less history than it needs."""
    return np.asarray(cutoffs)[:, 0] < model.min_history()


class WithFallback(Forecaster):
    """`model` where a series has history enough for it, `fallback` elsewhere (see the module doc)."""

    _parameter_constraints = {"model": [Forecaster], "fallback": [Forecaster]}

    def __init__(self, model: Forecaster, fallback: Forecaster) -> None:
        self.model, self.fallback = model, fallback

    def check_params(self) -> "WithFallback":
        super().check_params()
        self.model.check_params()
        self.fallback.check_params()
        return self

    def _default_alias(self) -> str:
        return self.model.alias

    def min_history(self) -> int:
        return self.fallback.min_history()

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None
                         ) -> tuple[np.ndarray, Forecaster | None]:
        cutoffs = np.asarray(cutoffs)
        short = short_series(self.model, cutoffs)
        out = np.empty((len(series), cutoffs.shape[1], h))
        fitted = None
        for mask, model in ((~short, self.model), (short, self.fallback)):
            idx = np.flatnonzero(mask)
            if idx.size:
                preds, last = model.forecast_cutoffs([series[i] for i in idx], cutoffs[idx], h,
                                                     refit_every=refit_every, progress=progress)
                out[idx] = preds
                fitted = last if model is self.model else fitted
        return out, fitted

    def calibration_problem(self, cutoffs: np.ndarray, calib_cutoffs: np.ndarray, h: int,
                            global_calibration: str) -> str | None:
        long = ~short_series(self.model, cutoffs)
        return (self.model.calibration_problem(np.asarray(cutoffs)[long], np.asarray(calib_cutoffs)[long], h,
                                               global_calibration) if long.any() else None)

    def forecast_with_calibration(self, series: Sequence[np.ndarray], cutoffs: np.ndarray,
                                  calib_cutoffs: np.ndarray, h: int, *, refit_every: int | None = None,
                                  progress: bool | None = None,
                                  global_calibration: str = CONFORMAL["global_calibration"]
                                  ) -> tuple[np.ndarray, np.ndarray, Forecaster | None]:
        """As `forecast_cutoffs`, each part calibrated its own way (`Forecaster.forecast_with_calibration`)."""
        cutoffs, calib_cutoffs = np.asarray(cutoffs), np.asarray(calib_cutoffs)
        short = short_series(self.model, cutoffs)
        out = np.empty((len(series), cutoffs.shape[1], h))
        calib = np.empty((len(series), calib_cutoffs.shape[1], h))
        fitted = None
        for mask, model in ((~short, self.model), (short, self.fallback)):
            idx = np.flatnonzero(mask)
            if idx.size:
                preds, cal, last = model.forecast_with_calibration(
                    [series[i] for i in idx], cutoffs[idx], calib_cutoffs[idx], h, refit_every=refit_every,
                    progress=progress, global_calibration=global_calibration)
                out[idx], calib[idx] = preds, cal
                fitted = last if model is self.model else fitted
        return out, calib, fitted


def season_dropped(models: Sequence[Forecaster], shortest: int) -> tuple[list[Forecaster], list[str]]:
    """`models` with every seasonal naive whose season is longer than `shortest` (the shortest series'
    length) wrapped as `WithFallback(it, Naive())`: a series holding less than one season is forecast by
    its last value in seasonal naive's column, as ETS and Theta drop a season a history does not hold
    twice (forecasting.baselines). At any depth but inside `auto`, which leaves a candidate out of a series
    it cannot forecast on its own; each object replaced once (a member also named alone stays one model).
    Also the aliases of the models wrapped."""
    from .auto import AutoForecaster
    from .baselines import Naive, SeasonalNaive
    from .ensemble import Ensemble

    done: dict[int, Forecaster] = {}
    wrapped: list[str] = []

    def swap(m: Forecaster) -> Forecaster:
        if id(m) in done:
            return done[id(m)]
        out = m
        if isinstance(m, Ensemble):
            members = [swap(x) for x in m.members]
            if any(a is not b for a, b in zip(members, m.members)):
                out = Ensemble(members, m.how, m.__dict__.get("_alias"))
        elif isinstance(m, WithFallback):
            fb = swap(m.fallback)
            out = m if fb is m.fallback else WithFallback(m.model, fb)
        elif isinstance(m, SeasonalNaive) and not isinstance(m, AutoForecaster) and m.min_history() > shortest:
            out = WithFallback(m, Naive())
            wrapped.append(m.alias)
        done[id(m)] = out
        return out

    return [swap(m) for m in models], list(dict.fromkeys(wrapped))
