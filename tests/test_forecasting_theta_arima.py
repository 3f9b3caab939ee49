"""Theta and ARIMA as baselines: statsforecast's models behind the LocalModel contract."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from frozenvit.forecasting import ARIMA, ETS, Theta, backtest
from frozenvit.forecasting.cli import MODEL_NAMES, make_models


def seasonal(n: int = 96, m: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 50 + 0.2 * t + 10 * np.sin(2 * np.pi * t / m) + rng.normal(0, 0.5, n)


@pytest.mark.parametrize("method, name", [("dotm", "DynamicOptimizedTheta"), ("auto", "AutoTheta")])
def test_theta_method_picks_the_statsforecast_model(method, name):
    model = Theta(12, method=method).fit(seasonal())
    assert type(model.model_).__name__ == name


def test_theta_follows_a_seasonal_trend_better_than_its_mean():
    y = seasonal(108)
    err = np.abs(Theta(12).fit(y[:96]).predict(12) - y[96:]).mean()
    assert err < 0.2 * np.abs(y[:96].mean() - y[96:]).mean()


def test_arima_forecasts_h_values_and_gives_its_own_intervals():
    model = ARIMA(12).fit(seasonal())
    mean, lo, hi = model._predict_interval(6, [80.0])
    assert mean.shape == (6,) and (lo[:, 0] < mean).all() and (mean < hi[:, 0]).all()


def test_a_history_shorter_than_two_seasons_drops_the_season():
    assert Theta(12).fit(seasonal(20)).model_.season_length == 1


def test_theta_refuses_an_unknown_method():
    with pytest.raises(InvalidParameterError):
        Theta(12, method="stm").fit(seasonal())


def test_the_cli_builds_theta_and_arima_with_the_season():
    assert {"theta", "arima"} <= set(MODEL_NAMES)
    theta, arima = make_models(["theta", "arima"], h=6, season_length=4)
    assert (type(theta), theta.season_length, type(arima), arima.season_length) == (Theta, 4, ARIMA, 4)


def test_backtest_scores_theta_beside_ets():
    import pandas as pd

    df = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": np.arange(96), "y": seasonal(96, seed=i)})
                    for i in range(3)])
    res = backtest(df, [ETS(12), Theta(12)], h=12, n_windows=2, season_length=12)
    assert set(res.mase().index) == {"ETS", "Theta"} and res.mase().notna().all()
