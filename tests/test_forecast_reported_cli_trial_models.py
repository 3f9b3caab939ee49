"""Defects a new user of `frozenvit forecast` reported (trial items 5, 6, 7, 9): a series shorter than a season
no longer blocks `predict`, the cures of a refusal name only what helps, more calibration windows say when they
change the networks' look-back, and a network no series is long enough for is refused, not reported under its
name; identical forecasts get no Diebold-Mariano p-value."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import ETS, DLinear, Naive, SeasonalNaive, SeriesError, backtest, forecast


def _frame(lengths: dict, season: int = 12, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for i, (uid, n) in enumerate(lengths.items()):
        t = np.arange(n)
        parts.append(pd.DataFrame({"unique_id": uid, "ds": t,
                                   "y": 20 + i + 3 * np.sin(2 * np.pi * t / season) + rng.normal(0, 0.3, n)}))
    return pd.concat(parts, ignore_index=True)


LONG_AND_NEW = {"a": 60, "b": 60, "c": 60, "d": 60, "e": 60, "new": 8}


# 5: a new product shorter than a season ------------------------------------------------------------------------

def test_predict_forecasts_a_series_shorter_than_a_season_with_every_statistical_model(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    _frame(LONG_AND_NEW).to_csv(csv, index=False)
    code = main(["forecast", "predict", "--csv", str(csv), "--h", "4", "--season-length", "12",
                 "--models", "naive,snaive,ets", "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    f = pd.read_csv(tmp_path / "out" / "forecasts.csv")
    new = f[f["unique_id"] == "new"]
    assert len(new) == 4 and np.isfinite(new[["Naive", "SeasonalNaive", "ETS"]].to_numpy()).all()
    assert (new["SeasonalNaive"] == new["Naive"]).all()            # less than a season: its last value
    assert "SeasonalNaive: 1 of 6 series hold less than one season" in capsys.readouterr().err


def test_a_series_without_calibration_windows_gets_no_interval_instead_of_a_refusal():
    df = _frame(LONG_AND_NEW)
    fc = forecast(df, [Naive(), SeasonalNaive(12)], h=4, season_length=12, levels=(80,), calibration_windows=2)
    f = fc.frame
    new, old = f[f["unique_id"] == "new"], f[f["unique_id"] != "new"]
    assert np.isfinite(new[["Naive", "SeasonalNaive"]].to_numpy()).all()
    assert new["Naive-lo-80"].isna().all() and new["SeasonalNaive-hi-80"].isna().all()
    assert np.isfinite(old[["Naive-lo-80", "Naive-hi-80", "SeasonalNaive-lo-80"]].to_numpy()).all()


def test_the_long_series_forecasts_do_not_change_with_a_short_one_beside_them():
    df = _frame(LONG_AND_NEW)
    with_new = forecast(df, [ETS(12)], h=4, season_length=12).frame
    alone = forecast(df[df["unique_id"] != "new"], [ETS(12)], h=4, season_length=12).frame
    assert np.allclose(with_new[with_new["unique_id"] != "new"]["ETS"].to_numpy(), alone["ETS"].to_numpy())


def test_a_refusal_for_a_network_names_no_season_cure():
    df = _frame({"a": 60, "b": 60, "c": 20})
    with pytest.raises(SeriesError) as e:
        forecast(df, [Naive(), DLinear(h=4, input_size=24, max_epochs=1)], h=4, season_length=12)
    text = str(e.value)
    assert "'c' has 20 values; a forecast by DLinear needs 32" in text and "--short-series" in text
    assert "season-length" not in text


# 6: calibration windows that change the look-back say so --------------------------------------------------------

def test_calibration_windows_that_shorten_the_look_back_say_so_in_one_line():
    df = _frame({"a": 60, "b": 60, "c": 60})
    net = DLinear(h=6, max_epochs=1, batch_size=32, progress=False)
    with pytest.warns(UserWarning, match=r"3 --calibration-windows of --h 6: the networks get a look-back of 24, "
                                         r"not 48 as without --levels .*point forecasts differ"):
        fc = forecast(df, [net], h=6, season_length=12, levels=(80,), calibration_windows=3,
                      global_calibration="retrain", input_size="auto")
    assert fc.input_size == 24


# 7: cures of a backtest too long for the series ----------------------------------------------------------------

def test_a_horizon_longer_than_the_series_names_h_and_no_impossible_cure():
    df = _frame({"a": 40, "b": 40})
    with pytest.raises(SeriesError) as e:
        backtest(df, [SeasonalNaive(1)], h=100, n_windows=1, season_length=1)
    text = str(e.value)
    assert "use a smaller --h (h=)" in text
    assert "--windows (" not in text and "--step-size (" not in text and "--season-length (" not in text


def test_a_long_season_that_does_not_fit_with_a_long_horizon_names_h_only():
    df = _frame({"a": 160, "b": 160}, season=52)
    with pytest.raises(SeriesError) as e:
        backtest(df, [SeasonalNaive(52)], h=500, season_length=52)
    text = str(e.value)
    assert "use a smaller --h (h=), or drop" in text and "season-length (" not in text


# 9: a network no series is long enough for ---------------------------------------------------------------------

def test_a_network_no_series_is_long_enough_for_is_refused_not_scored_under_its_name(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    _frame({"a": 60, "b": 60}).to_csv(csv, index=False)
    code = main(["forecast", "backtest", "--csv", str(csv), "--h", "4", "--season-length", "12", "--windows", "1",
                 "--models", "snaive,dlinear", "--input-size", "10000", "--max-epochs", "1",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "not one series is long enough for DLinear" in err and "--input-size" in err
    assert not (tmp_path / "out").exists()                  # a refusal leaves nothing behind
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")      # a folder that was not fresh: the user's file stays
    assert main(["forecast", "backtest", "--csv", str(csv), "--h", "4", "--season-length", "12", "--windows", "1",
                 "--models", "snaive,dlinear", "--input-size", "10000", "--max-epochs", "1",
                 "--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_identical_forecasts_get_no_diebold_mariano_p_value(tmp_path, capsys):
    df = _frame({"a": 60, "b": 60, "c": 60})
    res = backtest(df, [SeasonalNaive(12), SeasonalNaive(12, alias="Again")], h=4, n_windows=2, season_length=12)
    s = res.summary()
    assert np.isnan(s.loc["Again", "p_value"]) and np.isnan(s.loc["Again", "dm_stat"])
    assert "forecasts are SeasonalNaive's" in res.dm_not_computed()["Again"]
    assert json.loads(json.dumps(res.to_dict()))["dm_not_computed"]["Again"].startswith("not computed")


@pytest.mark.parametrize("level", [50, 80, 90, 95, 99])
def test_errors_needed_is_the_fewest_scores_a_conformal_quantile_takes(level):
    from frozenvit.forecasting.intervals import conformal_quantile, errors_needed

    n = errors_needed(level)
    assert np.isfinite(conformal_quantile(np.arange(n, dtype=float), level))
    assert n == 1 or np.isnan(conformal_quantile(np.arange(n - 1, dtype=float), level))
