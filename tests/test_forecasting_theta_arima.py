"""Theta and ARIMA as baselines: statsforecast's models behind the LocalModel contract."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
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


@pytest.mark.parametrize("cls", [Theta, ETS, ARIMA])
def test_history_fits_on_the_last_values_only(cls):
    y = seasonal(120)
    y[:60] += 500.0                                                    # an old level that a window leaves out
    got = cls(12, history=48).fit(y)
    want = cls(12).fit(y[-48:])
    np.testing.assert_array_equal(got.predict(6), want.predict(6))
    assert got.n_obs_ == 120                                           # the history it was given
    np.testing.assert_array_equal(cls(12, history=None).fit(y).predict(6), cls(12).fit(y).predict(6))
    assert cls(12, history=500).fit(y).predict(6).tolist() == cls(12).fit(y).predict(6).tolist()   # longer: all


@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, "all"])
def test_history_must_be_two_or_more_values(bad):
    with pytest.raises(InvalidParameterError):
        Theta(12, history=bad).fit(seasonal())


def test_the_cli_fits_every_statistical_model_on_the_stat_history(tmp_path):
    """--stat-history reaches ETS, Theta and ARIMA alone and inside auto and combinations; summary.json says it."""
    import json

    import pandas as pd

    from frozenvit.backbone.suite.cli import build_parser, main

    parse = build_parser().parse_args
    assert parse(["forecast", "backtest", "--csv", "x.csv", "--stat-history", "168"]).stat_history == 168
    assert parse(["forecast", "backtest", "--csv", "x.csv", "--stat-history", "all"]).stat_history is None
    assert parse(["forecast", "backtest", "--csv", "x.csv"]).stat_history == "auto"          # the default
    ets, theta, arima, snaive, auto = make_models(["ets", "theta", "arima", "snaive", "auto"], h=6, season_length=4,
                                                  stat_history=168)
    assert ets.history == theta.history == arima.history == 168 and not hasattr(snaive, "history")
    assert {m.alias: getattr(m, "history", None) for m in auto.candidates} == \
        {"SeasonalNaive": None, "Theta": 168, "ETS": 168, "DLinear": None, "PatchTST": None}
    df = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": np.arange(96), "y": seasonal(96, seed=i)})
                    for i in range(2)])
    df.to_csv(tmp_path / "s.csv", index=False)
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "s.csv"), "--h", "12", "--season-length", "12",
                 "--windows", "1", "--models", "theta,median(theta,ets,snaive)", "--stat-history", "40",
                 "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["stat_history"] == {"asked": 40, "used": {"Theta": 40, "ETS": 40}}
    forecasts = pd.read_csv(tmp_path / "out" / "forecasts.csv")
    y = df[df.unique_id == "s0"].y.to_numpy()
    np.testing.assert_allclose(forecasts.query("unique_id == 's0'")["Theta"], Theta(12).fit(y[44:84]).predict(12))
    with pytest.raises(SystemExit) as exit_:                              # a usage error, before any file is read
        main(["forecast", "backtest", "--csv", "x.csv", "--stat-history", "1"])
    assert exit_.value.code == 2


TINY = [ETS(1), ETS(12), ETS(1, model="AAN"), ETS(1, model="AAN", damped=True), Theta(1), Theta(4, method="auto")]


@pytest.mark.parametrize("model", TINY, ids=lambda m: f"{m.alias}-{m.get_params()}")
def test_a_tiny_history_gets_simple_exponential_smoothing_where_statsforecast_fits_nothing(model):
    from statsforecast.models import SimpleExponentialSmoothingOptimized

    tiny = model.tiny_history(1)
    y = seasonal(tiny + 1, m=4)
    with pytest.raises(NotImplementedError, match="tiny"):      # statsforecast's own limit, as the model states it
        model._make(1).fit(y[:tiny])
    for n in range(1, tiny + 1):
        fitted = model.fit(y[:n])
        assert isinstance(fitted.model_, SimpleExponentialSmoothingOptimized)
        assert np.isfinite(fitted.predict(3)).all()
    assert not isinstance(model.fit(y).model_, SimpleExponentialSmoothingOptimized)


def test_the_default_command_forecasts_series_of_a_few_values(tmp_path):
    """Yearly series of 7 values (Tourism yearly's shortest) with h 4: the statistical models' and auto's
    validation fits see 3 values, which statsforecast's ETS and Theta refuse."""
    from frozenvit.backbone.suite.cli import main

    rng = np.random.default_rng(0)
    lengths = [11, 11, 14, 40, 40, 40]
    frame = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": np.arange(n), "y": 10 + np.cumsum(rng.normal(0.3, 1, n))})
                       for i, n in enumerate(lengths)])
    frame.to_csv(tmp_path / "yearly.csv", index=False)
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "yearly.csv"), "--h", "4", "--season-length", "1",
                 "--max-epochs", "1", "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n_series"] == len(lengths)
    assert all(np.isfinite(r["MASE"]) for r in summary["summary"])
