"""ETS and ARIMA on seasons above 24 steps: STL, then the model on the seasonally adjusted series (R's
stlf), where AutoETS fits m - 1 seasonal states poorly or rejects them and AutoARIMA takes minutes a fit."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from frozenvit.forecasting import ARIMA, ETS, SeasonalNaive, backtest
from frozenvit.forecasting.baselines import MOST_SEASON

pytest.importorskip("statsforecast")


def weekly(n: int = 520, m: int = 52, seed: int = 0) -> np.ndarray:
    """Ten years of weeks: a trend, a yearly cycle of two harmonics, noise."""
    t = np.arange(n)
    rng = np.random.default_rng(seed)
    return (300 + 0.03 * t + 3 * np.sin(2 * np.pi * t / m) + 1.5 * np.cos(4 * np.pi * t / m)
            + rng.normal(0, 0.3, n))


@pytest.mark.parametrize("m, kw, form", [(24, {}, "own"), (25, {}, "stl"), (52, {}, "stl"), (168, {}, "stl"),
                                         (52, {"long_season": "own"}, "own"), (1, {}, "none"),
                                         (52, {"model": "ZZN"}, "none"), (12, {"model": "ZZN"}, "none")])
def test_the_season_form_follows_the_season_length_and_the_spec(m, kw, form):
    assert ETS(m, **kw).seasonal_form() == form
    if "model" not in kw:
        assert ARIMA(m, **kw).seasonal_form() == form
    assert MOST_SEASON == 24


def test_a_yearly_cycle_of_weeks_is_forecast_close_to_the_noise():
    y = weekly()
    train, test = y[:-52], y[-52:]
    stl = np.abs(ETS(52).fit(train).predict(52) - test).mean()
    snaive = np.abs(SeasonalNaive(52).fit(train).predict(52) - test).mean()
    assert stl < 0.6 * snaive and stl < 0.3                     # the noise alone: MAE 0.3 x 0.8 = 0.24


def test_weekly_co2_keeps_its_yearly_cycle_where_autoets_rejects_it():
    sm = pytest.importorskip("statsmodels.api")
    y = sm.datasets.co2.load_pandas().data["co2"].resample("W").mean().interpolate().to_numpy()
    train, test = y[:-104], y[-104:]
    own = ETS(52, long_season="own").fit(train)
    assert own.model_.model_["method"] == "ETS(A,Ad,N)"       # AutoETS' choice: no season
    stl = np.abs(ETS(52).fit(train).predict(104) - test).mean()
    assert stl < 0.3 * np.abs(own.predict(104) - test).mean()


def test_stl_is_statsforecasts_mstl_with_an_ets_trend_and_own_its_autoets():
    from statsforecast.models import MSTL, AutoETS

    y = weekly()[:400]
    want = MSTL(season_length=52, trend_forecaster=AutoETS(model="ZZN")).fit(y).predict(20)["mean"]
    np.testing.assert_allclose(ETS(52).fit(y).predict(20), want, rtol=1e-10)
    want = AutoETS(season_length=52).fit(y).predict(20)["mean"]
    np.testing.assert_allclose(ETS(52, long_season="own").fit(y).predict(20), want, rtol=1e-10)


def test_seasons_up_to_24_keep_autoets_own_seasonal_state():
    from statsforecast.models import AutoETS

    t = np.arange(240)
    y = 20 + 3 * np.sin(2 * np.pi * t / 24) + np.random.default_rng(1).normal(0, 0.2, t.size)
    model = ETS(24).fit(y)
    assert type(model.model_).__name__ == "AutoETS"
    np.testing.assert_allclose(model.predict(24), AutoETS(season_length=24).fit(y).predict(24)["mean"], rtol=1e-10)


def test_a_history_under_two_long_seasons_is_fitted_without_one():
    y = weekly(90)                                   # fewer than 2 x 52 values: no season to decompose
    model = ETS(52).fit(y)
    assert type(model.model_).__name__ == "AutoETS"
    assert np.isfinite(model.predict(13)).all()


def test_own_intervals_bracket_the_forecast_with_a_long_season():
    res = backtest(_frame(), [ETS(52)], h=13, n_windows=2, season_length=52, levels=(80, 95),
                   calibration_windows=0)
    f = res.forecasts_with_intervals()
    lo80, hi80, lo95, hi95 = (f[f"ETS/own-{s}-{lv}"] for lv in (80, 95) for s in ("lo", "hi"))
    assert (lo95 <= lo80).all() and (lo80 <= f["ETS"]).all() and (f["ETS"] <= hi80).all() and (hi80 <= hi95).all()
    assert (hi80 > lo80).all()


@pytest.mark.parametrize("cls", [ETS, ARIMA])
def test_long_season_is_checked(cls):
    with pytest.raises(InvalidParameterError, match="long_season"):
        cls(52, long_season="fourier").fit(weekly())


def test_arima_takes_a_long_season_out_by_stl():
    from statsforecast.models import MSTL, AutoARIMA

    y = weekly()[:400]
    model = ARIMA(52).fit(y)
    assert type(model.model_).__name__ == "MSTL"
    want = MSTL(season_length=52, trend_forecaster=AutoARIMA()).fit(y).predict(13)["mean"]
    np.testing.assert_allclose(model.predict(13), want, rtol=1e-10)
    assert type(ARIMA(12).fit(y).model_).__name__ == "AutoARIMA"                # a short season: its own


def _frame():
    import pandas as pd

    return pd.DataFrame({"unique_id": "w", "ds": pd.date_range("2010-01-03", periods=400, freq="W"),
                         "y": weekly(400)})


def test_weekly_data_on_the_command_line_gets_stl_and_says_so(tmp_path, capsys):
    import json

    from frozenvit.backbone.suite.cli import main

    csv, out = tmp_path / "weekly.csv", tmp_path / "out"
    _frame().to_csv(csv, index=False)
    argv = ["forecast", "backtest", "--csv", str(csv), "--models", "snaive,ets", "--windows", "2", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "--h 13 and --season-length 52: weekly timestamps" in printed
    assert "ETS: a season of 52 steps, above the 24 it models itself: STL takes the season out" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["season_forms"] == {"ETS": "stl"}
    mase = {r["model"]: r["MASE"] for r in summary["summary"]}
    assert mase["ETS"] < 0.8 * mase["SeasonalNaive"]
    assert main([*argv[:-4], "--models", "snaive,ets", "--season-length", "12", "--out", str(out)]) == 0
    assert "ETS: a season" not in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["season_forms"] == {"ETS": "own"}
    assert main([*argv[:-4], "--models", "snaive", "--out", str(out)]) == 0
    assert "season_forms" not in json.loads((out / "summary.json").read_text())
    assert main([*argv[:-4], "--models", "ets,arima", "--out", str(out)]) == 0
    assert "ETS and ARIMA: a season of 52 steps, above the 24 they model themselves" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["season_forms"] == {"ETS": "stl", "ARIMA": "stl"}


def hourly(n: int = 24 * 7 * 8, seed: int = 0) -> np.ndarray:
    """Eight weeks of hours: a daily and a weekly cycle (weekends lower), noise."""
    t = np.arange(n)
    rng = np.random.default_rng(seed)
    return (50 + 8 * np.sin(2 * np.pi * t / 24) - 6 * (t % 168 >= 120) + rng.normal(0, 0.5, n))


def test_two_seasons_are_statsforecasts_mstl_of_both_with_an_ets_or_arima_trend():
    from statsforecast.models import MSTL, AutoARIMA, AutoETS

    y = hourly()
    for given in ((24, 168), [168, 24], (24, 168, 24)):                # any order, each once
        model = ETS(given).fit(y)
        assert model.seasons() == (24, 168) and model.seasonal_form() == "stl"
        want = MSTL(season_length=[24, 168], trend_forecaster=AutoETS(model="ZZN")).fit(y).predict(48)["mean"]
        np.testing.assert_allclose(model.predict(48), want, rtol=1e-10)
    want = MSTL(season_length=[24, 168], trend_forecaster=AutoARIMA()).fit(y).predict(48)["mean"]
    np.testing.assert_allclose(ARIMA((24, 168)).fit(y).predict(48), want, rtol=1e-10)


def test_the_week_of_hourly_data_is_what_the_day_alone_misses():
    y = hourly()
    train, test = y[:-168], y[-168:]
    both = np.abs(ETS((24, 168)).fit(train).predict(168) - test).mean()
    day = np.abs(ETS(24).fit(train).predict(168) - test).mean()
    assert both < 0.8 and day > 2 * both                                # the noise alone: MAE 0.5 x 0.8 = 0.4


def test_a_season_the_history_does_not_hold_twice_is_dropped():
    y = hourly(24 * 10)                                                 # 10 days: the day twice, not the week
    model = ETS((24, 168))
    assert model.fitted_seasons(y.size) == 24 and model.fitted_seasons(47) == 1
    assert model.fitted_seasons(336) == (24, 168)
    assert type(model.fit(y).model_).__name__ == "AutoETS"              # the day alone: AutoETS' own season
    assert np.isfinite(model.predict(48)).all()


@pytest.mark.parametrize("bad, match", [((), "whole number"), ((0, 24), "whole number"), ((24, 2.5), "whole number")])
def test_seasons_are_checked(bad, match):
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match=match):
        ETS(bad).check_params()
    with pytest.raises(ParameterError, match="long_season='own' models one season"):
        ARIMA((24, 168), long_season="own").fit(hourly())


def test_theta_and_seasonal_naive_take_one_season():
    from frozenvit.forecasting import Theta

    with pytest.raises(InvalidParameterError, match="season_length"):
        Theta((24, 168)).fit(hourly())


def test_two_seasons_on_the_command_line(tmp_path, capsys):
    import json

    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    csv, out = tmp_path / "hourly.csv", tmp_path / "out"
    y = hourly()
    pd.DataFrame({"ds": pd.date_range("2020-01-06", periods=y.size, freq="h"), "load": y}).to_csv(csv, index=False)
    argv = ["forecast", "backtest", "--csv", str(csv), "--h", "24", "--windows", "2", "--out", str(out)]
    assert main([*argv, "--models", "snaive,theta,ets,arima", "--season-length", "168,24"]) == 0
    printed = capsys.readouterr().out
    assert ("ETS and ARIMA: seasons of 24 and 168 steps: STL takes them out together, they forecast the rest "
            "(as R's mstl)") in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["season_length"] == 24 and summary["seasons"] == [24, 168]      # snaive, Theta, MASE: the day
    assert summary["season_forms"] == {"ETS": "stl", "ARIMA": "stl"}
    mase = {r["model"]: r["MASE"] for r in summary["summary"]}
    assert mase["ETS"] < 0.8 * mase["Theta"]
    assert main([*argv, "--models", "snaive,ets", "--season-length", "24"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "seasons" not in summary and summary["season_forms"] == {"ETS": "own"}
    with pytest.raises(SystemExit) as stop:                                          # distinct, or a typo
        main([*argv, "--models", "ets", "--season-length", "24,24"])
    assert stop.value.code == 2 and "distinct comma-separated" in capsys.readouterr().err


def test_hourly_timestamps_give_the_day_and_the_week_by_default(tmp_path, capsys):
    import json

    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    csv, out = tmp_path / "hourly.csv", tmp_path / "out"
    y = hourly()
    pd.DataFrame({"ds": pd.date_range("2020-01-06", periods=y.size, freq="h"), "load": y}).to_csv(csv, index=False)
    assert main(["forecast", "predict", "--csv", str(csv), "--h", "24", "--models", "snaive,ets", "--out",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert "--season-length 24,168: hourly timestamps (pass --season-length to choose)" in printed
    assert "ETS: seasons of 24 and 168 steps: STL takes them out together" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seasons"] == [24, 168] and summary["season_length"] == 24
    assert summary["defaults_from"]["season_length"] == 24


def test_networks_alone_on_hourly_data_say_nothing_of_two_seasons(tmp_path, capsys):
    """The networks' statistical fallback for short series takes the shortest season: no STL line for it."""
    import argparse

    from frozenvit.forecasting.cli import _season_forms

    args = argparse.Namespace(models=["dlinear"], short_series="statistical", seasons=(24, 168), season_length=24)
    assert _season_forms(args) == {"ETS": "own"}
    assert "STL" not in capsys.readouterr().out
    args.models = ["dlinear", "arima"]
    assert _season_forms(args) == {"ARIMA": "stl"}
    assert "ARIMA: seasons of 24 and 168 steps: STL takes them out together, it forecasts" in capsys.readouterr().out
