"""The one contract every forecaster keeps, so that `backtest` treats all models alike.

A forecaster is a scikit-learn estimator (hyperparameters in `__init__`; `get_params`,
`set_params`, `clone` and `repr` come from `BaseEstimator`) that forecasts the h values after
given cutoffs of given series, using only the values before each cutoff:

    preds, fitted = model.forecast_cutoffs(series, cutoffs, h)      # preds (S, W, h)

Local models (`baselines.LocalModel`) refit one series' history at each cutoff; global models
(`training.NeuralForecaster`) learn from every series' history at once and then forecast each
window from its own look-back. Each class implements the contract its own way.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.base import BaseEstimator

from frozenvit.backbone.suite.errors import ParameterError, ParameterErrorMixin

from .defaults import CONFORMAL


class Forecaster(ParameterErrorMixin, BaseEstimator):
    """Base of every model `backtest` accepts.

    Hyperparameters are checked by `check_params` (sklearn's `_parameter_constraints`, and each model's own checks
    of combinations), at `fit` and before a backtest's work. A bad one is a ParameterError, also scikit-learn's
    InvalidParameterError.
    """

    _parameter_constraints: dict = {}

    def check_params(self) -> "Forecaster":
        """Raise ParameterError for a hyperparameter no fit can use; return self."""
        self._validate_params()
        given = self.__dict__.get("_alias")
        if given is not None and (not isinstance(given, str) or not given.strip()):
            raise ParameterError(f"{type(self).__name__}: alias must be a non-empty string (the model's column "
                                 f"name) or None (its default, {self._default_alias()!r}), got {given!r}")
        return self

    @property
    def alias(self) -> str:
        """The model's column name in a backtest's forecasts: the `alias=` hyperparameter where a model takes
        one and it is given (to run two settings of one model side by side), else `_default_alias()`."""
        given = self.__dict__.get("_alias")
        return given if given else self._default_alias()

    @alias.setter
    def alias(self, value: str | None) -> None:            # the hyperparameter, as __init__ and set_params store it
        self.__dict__["_alias"] = value

    def _default_alias(self) -> str:
        """The column name when no `alias=` is given: the class name."""
        return type(self).__name__

    def get_params(self, deep: bool = True) -> dict:
        """scikit-learn's, with `alias` as given (None: the default name), not the name it resolves to."""
        params = super().get_params(deep)
        if "alias" in params:
            params["alias"] = self.__dict__.get("_alias")
        return params

    def min_history(self) -> int:
        """Values a series needs before its first cutoff for this model to forecast it."""
        return 1

    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None
                         ) -> tuple[np.ndarray, "Forecaster | None"]:
        """Forecast h steps after each cutoff, from the values before it only.

        series: S one-dimensional float arrays. cutoffs: (S, W) ints, increasing along W; the
        history of window w of series s is `series[s][:cutoffs[s, w]]`. `refit_every=k` lets a
        global model retrain every k windows (default: once, before the first window); local models
        refit at every cutoff anyway. `progress` None shows progress where someone can see it.

        Returns the forecasts (S, W, h) and the model fitted last when it outlives a window
        (a global model, to be saved), else None. `self` is not changed, but for the one attribute a model
        records of what it chose for these series: the statistical models' `history_`, an auto's `choice_`.
        """
        raise NotImplementedError

    def horizon_problem(self, h: int, task: str = "backtest") -> str | None:
        """Why this model cannot forecast the h steps a `task` ("backtest", "forecast") asks for (a network built
        for another horizon), checked before any model of it runs; None (here) where it can."""
        return None

    def series_problem(self, ids: Sequence[str], series: Sequence[np.ndarray], cutoffs: np.ndarray) -> str | None:
        """Why this model cannot be fitted to the histories before `cutoffs` (S, W) of `series` (named by `ids`),
        where that is found without fitting (ETS with a multiplicative part on values <= 0); checked before any
        model of a backtest or forecast runs. None (here) where nothing is found."""
        return None

    def calibration_problem(self, cutoffs: np.ndarray, calib_cutoffs: np.ndarray, h: int,
                            global_calibration: str) -> str | None:
        """Why this model cannot forecast the calibration windows at `calib_cutoffs` the way
        `global_calibration` asks (checked before any work), or None. Local models always can."""
        return None

    def forecast_with_calibration(self, series: Sequence[np.ndarray], cutoffs: np.ndarray,
                                  calib_cutoffs: np.ndarray, h: int, *, refit_every: int | None = None,
                                  progress: bool | None = None,
                                  global_calibration: str = CONFORMAL["global_calibration"]
                                  ) -> tuple[np.ndarray, np.ndarray, "Forecaster | None"]:
        """`forecast_cutoffs` at `cutoffs`, and forecasts of the conformal calibration windows at
        `calib_cutoffs` (S, K), each before every series' first cutoff and ending by it: preds (S, W, h),
        calib (S, K, h), fitted. Here (local models) the calibration windows are forecast as the
        backtest's are, from a fit on the history before each; `global_calibration` is for global
        models (`training.NeuralForecaster`), which forecast them with the model of the first cutoff."""
        preds, fitted = self.forecast_cutoffs(series, cutoffs, h, refit_every=refit_every, progress=progress)
        calib = (self.forecast_cutoffs(series, calib_cutoffs, h, refit_every=refit_every, progress=progress)[0]
                 if np.asarray(calib_cutoffs).shape[1] else np.empty((len(series), 0, h)))
        return preds, calib, fitted

    def has_own_intervals(self) -> bool:
        """Whether `forecast_intervals` gives this model's own intervals (False here: conformal ones only)."""
        return False

    def forecast_intervals(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int,
                           levels: Sequence[float], *, progress: bool | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """`forecast_cutoffs`' forecasts with the model's own central intervals at `levels` (percent):
        forecasts (S, W, h), lo and hi (S, W, h, L). None (the default) for a model without its own
        intervals: `backtest` then gives it conformal ones only (forecasting.intervals)."""
        return None
