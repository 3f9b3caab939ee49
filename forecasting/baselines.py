"""Statistical baselines, fitted per series on history only.

Every model here is local: `fit(y)` on one series' history (T,), `predict(h)` -> (h,).
In a backtest a fresh copy is fitted at every cutoff.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from sklearn.base import clone

from frozenvit.backbone.suite.progress import progress_bar

from .base import Forecaster
from .errors import SeriesError


class LocalModel(Forecaster):
    """Base of per-series models. Subclasses implement `_fit(y)` (setting `n_obs_`) and `_predict(h)`."""

    def fit(self, y: np.ndarray) -> "LocalModel":
        y = np.asarray(y, dtype=float)
        if y.ndim != 1 or y.size == 0:
            raise SeriesError(f"{self.alias}.fit expects a non-empty 1-D history, got shape {y.shape}")
        if not np.isfinite(y).all():
            raise SeriesError(f"{self.alias}.fit: the history contains NaN/inf; fill it first (--fill)")
        self._fit(y)
        return self

    def predict(self, h: int) -> np.ndarray:
        """The next h values after the fitted history, (h,) float64."""
        if not hasattr(self, "n_obs_"):
            raise SeriesError(f"{self.alias} is not fitted; call fit(history) first")
        if h < 1:
            raise SeriesError(f"horizon h must be >= 1, got {h}")
        return self._predict(int(h))

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None) -> tuple[np.ndarray, None]:
        """A fresh copy fitted on `y[:c]` at every cutoff c (see `Forecaster.forecast_cutoffs`)."""
        out = np.empty((len(series), cutoffs.shape[1], h))
        bar = progress_bar(series, desc=self.alias, unit="series", leave=False,
                           disable=None if progress is None else not progress)
        for s, y in enumerate(bar):
            for w, c in enumerate(cutoffs[s]):
                out[s, w] = np.asarray(clone(self).fit(y[:c]).predict(h), dtype=float).reshape(h)
        return out, None

    def _fit(self, y: np.ndarray) -> None:
        raise NotImplementedError

    def _predict(self, h: int) -> np.ndarray:
        raise NotImplementedError


class Naive(LocalModel):
    """Last value carried forward."""

    def _fit(self, y: np.ndarray) -> None:
        self.last_ = float(y[-1])
        self.n_obs_ = y.size

    def _predict(self, h: int) -> np.ndarray:
        return np.full(h, self.last_)


class SeasonalNaive(LocalModel):
    """The value one season earlier: f_{T+k} = y_{T+k-m*ceil(k/m)}."""

    def __init__(self, season_length: int = 24) -> None:
        self.season_length = season_length

    def min_history(self) -> int:
        return int(self.season_length)

    def _fit(self, y: np.ndarray) -> None:
        m = int(self.season_length)
        if m < 1:
            raise SeriesError(f"season_length must be >= 1, got {m}")
        if y.size < m:
            raise SeriesError(f"SeasonalNaive needs at least one season ({m} values) of history, got {y.size}")
        self.last_season_ = y[-m:].copy()
        self.n_obs_ = y.size

    def _predict(self, h: int) -> np.ndarray:
        m = self.last_season_.size
        return np.resize(self.last_season_, h) if h > m else self.last_season_[:h].copy()


class ETS(LocalModel):
    """Automatic exponential smoothing (error/trend/season chosen by AICc): statsforecast's AutoETS.

    AutoETS searches the model space within bounded, admissible parameters and stays numerically
    stable on long hourly series, where statsmodels' ETSModel optimiser can diverge or return NaN.
    Seasonality is dropped when the history holds fewer than two seasons, as AutoETS requires.
    `model` is AutoETS' "ZZZ"-style spec.
    """

    def __init__(self, season_length: int = 24, model: str = "ZZZ", damped: bool | None = None) -> None:
        self.season_length = season_length
        self.model = model
        self.damped = damped

    def _fit(self, y: np.ndarray) -> None:
        try:
            from statsforecast.models import AutoETS
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("ETS needs statsforecast: pip install 'frozenvit[forecast]'") from e
        m = int(self.season_length) if y.size >= 2 * int(self.season_length) else 1
        model = self.model if m > 1 else self.model[:2] + "N"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.model_ = AutoETS(season_length=m, model=model, damped=self.damped).fit(y)
        self.n_obs_ = y.size

    def _predict(self, h: int) -> np.ndarray:
        return np.asarray(self.model_.predict(h=h)["mean"], dtype=float)
