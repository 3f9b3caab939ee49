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
