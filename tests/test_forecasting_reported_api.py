"""Defects a first-use trial of the forecasting Python API reported, each pinned by the behaviour that fixes it."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.errors import ParameterError
import frozenvit.forecasting as fc
from frozenvit.forecasting import (ETS, DLinear, Ensemble, PatchTST, SeasonalNaive, SeriesError, Theta, backtest,
                                   forecast, read_long_csv, validate)

NET = dict(input_size=48, max_epochs=2, progress=False, seed=0)


def _panel(n: int = 3, length: int = 200, period: int = 12) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    t = np.arange(length)
    return pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t,
                                    "y": 50 + 10 * i + 8 * np.sin(2 * np.pi * t / period + i)
                                    + rng.normal(0, 1.5, length) + 0.05 * t}) for i in range(n)],
                     ignore_index=True)


def _daily_weekly(days: int = 140) -> pd.DataFrame:
    t = np.arange(days)
    y = 100 + 20 * np.array([0, 3, 5, 4, 2, -8, -9])[t % 7] + np.random.default_rng(1).normal(0, 1, days)
    return pd.DataFrame({"unique_id": "a", "ds": pd.date_range("2020-01-01", periods=days, freq="D"), "y": y})


# 1. the networks are scale-free --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda: DLinear(h=12, **NET),
                                  lambda: PatchTST(h=12, d_model=16, n_heads=2, d_ff=32, n_layers=1, **NET)],
                         ids=["DLinear", "PatchTST"])
def test_network_forecasts_do_not_depend_on_the_data_units(make):
    df = _panel()
    runs = {c: backtest(df.assign(y=df.y * c), [make()], h=12, n_windows=2, season_length=12)
            for c in (1e-9, 1.0, 1e6)}
    name = make().alias
    for c, r in runs.items():
        assert r.mase()[name] == pytest.approx(runs[1.0].mase()[name], rel=1e-3)
        np.testing.assert_allclose(r.forecasts[name].to_numpy() / c, runs[1.0].forecasts[name].to_numpy(),
                                   rtol=1e-3)


def test_dlinear_forecasts_a_constant_series_as_that_constant():
    y = np.full(150, 5.0)
    m = DLinear(h=6, **NET).fit([y])
    np.testing.assert_array_equal(m.predict([y]), np.full((1, 6), 5.0))


# 2. a model without a season takes the caller's ----------------------------------------------------------------
def test_models_without_a_season_take_the_backtests_season():
    df = _daily_weekly()
    with warnings.catch_warnings():
        warnings.simplefilter("error", fc.SeasonWarning)
        left = backtest(df, [SeasonalNaive(), Theta()], h=14, n_windows=2, season_length=7).mase()
    given = backtest(df, [SeasonalNaive(7), Theta(7)], h=14, n_windows=2, season_length=7).mase()
    pd.testing.assert_series_equal(left, given)


def test_forecast_gives_a_model_without_a_season_the_calls_season():
    df = _daily_weekly()
    got = forecast(df, [SeasonalNaive()], h=7, season_length=7).frame["SeasonalNaive"].to_numpy()
    np.testing.assert_array_equal(got, df.y.to_numpy()[-7:])


def test_repr_shows_the_season_even_when_left_to_the_caller():
    assert repr(SeasonalNaive()) == "SeasonalNaive(season_length=None)"
    assert "season_length=None" in repr(ETS()) and "season_length=7" in repr(Theta(7))


def test_a_models_own_season_other_than_the_backtests_is_warned():
    df = _daily_weekly()
    with pytest.warns(fc.SeasonWarning, match=r"SeasonalNaive\(season_length=24\).*season_length=7"):
        backtest(df, [SeasonalNaive(24)], h=14, n_windows=2, season_length=7)
    with pytest.warns(fc.SeasonWarning, match="not given"):
        backtest(df, [SeasonalNaive(7)], h=14, n_windows=2)


def test_a_model_without_a_season_fitted_alone_names_the_cure():
    with pytest.raises(ParameterError, match=r"SeasonalNaive\(24\)"):
        SeasonalNaive().fit(np.arange(50.0))


# 3. ETS's model spec is checked with the other hyperparameters --------------------------------------------------
@pytest.mark.parametrize("spec", ["XYZ", "AN", "ZZZZ", "", "AMN"])
def test_ets_model_spec_outside_autoets_grammar_is_a_parameter_error(spec):
    with pytest.raises(ParameterError, match="model="):
        ETS(24, model=spec).check_params()
    for valid in ("ZZZ", "AAN", "MAM", "ZZN", "MNM"):     # and nothing AutoETS fits is refused
        ETS(24, model=valid).check_params()


# 4. alias= names a model's column -------------------------------------------------------------------------------
def test_two_settings_of_one_model_run_side_by_side_under_their_aliases():
    df = _daily_weekly()
    with pytest.warns(fc.SeasonWarning):           # SNaive14's own season is not the backtest's
        r = backtest(df, [SeasonalNaive(7), SeasonalNaive(14, alias="SNaive14")], h=14, n_windows=2,
                     season_length=7)
    assert r.models == ["SeasonalNaive", "SNaive14"]
    assert r.mase()["SNaive14"] != r.mase()["SeasonalNaive"]


def test_duplicate_model_names_are_a_parameter_error_naming_alias():
    df = _daily_weekly()
    with pytest.raises(ParameterError, match="alias="), pytest.warns(fc.SeasonWarning):
        backtest(df, [SeasonalNaive(7), SeasonalNaive(14)], h=14, season_length=7)


def test_alias_survives_clone_and_stays_out_of_the_default_repr():
    from sklearn.base import clone

    m = DLinear(h=4, alias="DL-short")
    assert clone(m).alias == "DL-short" and m.get_params()["alias"] == "DL-short"
    assert DLinear(h=4).alias == "DLinear" and "alias" not in repr(DLinear(h=4))
    assert Ensemble([ETS(7), Theta(7)], alias="combo").alias == "combo"


# 5. a semicolon CSV with decimal commas gets the sep hint -------------------------------------------------------
def test_semicolon_csv_with_decimal_commas_suggests_sep(tmp_path):
    p = tmp_path / "semi.csv"
    p.write_text("ds;y\n2020-01-01;1,5\n2020-01-02;2,5\n2020-01-03;3,5\n")
    with pytest.raises(SeriesError, match=r"--sep ';' \(sep=';'\)"):
        read_long_csv(p)


# 6. ids that differ only by type are refused ---------------------------------------------------------------------
def test_int_and_str_ids_with_the_same_text_are_refused():
    a = pd.DataFrame({"unique_id": 1, "ds": pd.date_range("2020-01-01", periods=10), "y": np.arange(10.0)})
    b = a.assign(unique_id="1")
    with pytest.raises(SeriesError, match=r"1 and '1'"):
        validate(pd.concat([a, b]))


# 8. errors raised from Python name the Python parameter beside the flag ----------------------------------------
def test_too_short_series_message_names_the_python_parameters():
    df = _daily_weekly(40)
    with pytest.raises(SeriesError, match=r"fewer --windows \(n_windows=\)"):
        backtest(df, [SeasonalNaive()], h=14, n_windows=5, season_length=7)

