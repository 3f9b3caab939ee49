"""`frozenvit forecast` defects a new user's trial on their own data found: each test fails on the code before its fix."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import ETS, Naive, SeasonalNaive, Theta, backtest, forecast
from frozenvit.forecasting.baselines import StatsForecastModel
from test_forecasting_reported_cli import _csv, _frame, _summary


# 1: the history recorded is the one the forecasts used -----------------------------------------------------------
def _choose_by_first_cutoff(monkeypatch, at: int, n: int = 30) -> None:
    """history="auto" chooses the last n values where the first cutoff is at `at` or later, else all: so the test
    cutoffs (first at `at`) and the calibration cutoffs (earlier) choose differently."""
    def choose(self, series, cutoffs, h, progress=None):
        return n if int(np.asarray(cutoffs)[:, 0].min()) >= at else None
    monkeypatch.setattr(StatsForecastModel, "choose_history", choose)


def test_backtest_with_levels_records_the_history_its_forecasts_used(monkeypatch):
    df = _frame((80, 80))
    _choose_by_first_cutoff(monkeypatch, at=68)             # cutoffs 68, 74; calibration cutoffs 56, 62
    model = Theta(7, history="auto")
    res = backtest(df, [model], h=6, n_windows=2, season_length=7, levels=(80,), calibration_windows=2)
    assert model.history_ == 30                             # the test cutoffs' choice, not the calibration's (all)
    plain = backtest(df, [Theta(7, history=30)], h=6, n_windows=2, season_length=7)
    np.testing.assert_allclose(res.forecasts["Theta"], plain.forecasts["Theta"])


def test_forecast_with_levels_records_the_history_its_forecasts_used(monkeypatch):
    df = _frame((80, 80))
    _choose_by_first_cutoff(monkeypatch, at=80)             # the forecast's cutoff: after the last value
    model = Theta(7, history="auto")
    fc = forecast(df, [model], h=6, season_length=7, levels=(80,), calibration_windows=2)
    assert model.history_ == 30
    plain = forecast(df, [Theta(7, history=30)], h=6, season_length=7)
    np.testing.assert_allclose(fc.frame["Theta"], plain.frame["Theta"])


# 2: season_forms and the message say the seasons fitted ----------------------------------------------------------
def test_a_season_no_history_holds_twice_is_not_reported_as_fitted_and_a_warning_names_it(tmp_path, capsys):
    csv, out = _csv(tmp_path / "d.csv", (60, 60)), tmp_path / "out"
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "ets", "--season-length", "7,40",
                 "--out", str(out)]) == 0
    got = capsys.readouterr()
    assert _summary(out)["season_forms"] == {"ETS": "own"}           # the week alone, AutoETS' own season
    assert "STL takes them out together" not in got.out
    assert "ETS: the season of 40 steps is left out of every fit" in got.err
    assert "holds it twice over (80 values)" in got.err


def test_a_season_some_histories_hold_is_fitted_where_they_do_and_named_where_not(capsys):
    import argparse

    from frozenvit.forecasting.backtest import SeasonWarning
    from frozenvit.forecasting.cli import _season_forms

    args = argparse.Namespace(models=["ets"], short_series="statistical", seasons=(7, 40), season_length=7)
    with pytest.warns(SeasonWarning, match="left out of 1 of its 2 fits, on histories shorter than 80"):
        assert _season_forms(args, [60, 100], {"ETS": None}) == {"ETS": "stl"}
    assert "ETS: seasons of 7 and 40 steps: STL takes them out together" in capsys.readouterr().out


# 3: predict's advice for a missing interval is one that gives it -------------------------------------------------
def test_predict_names_the_calibration_windows_that_give_a_networks_interval(tmp_path, capsys):
    csv = _csv(tmp_path / "one.csv", (180,))        # 12 calibration windows, the last 3 for the network
    argv = ["forecast", "predict", "--csv", str(csv), "--h", "14", "--season-length", "7", "--models", "snaive,dlinear",
            "--max-epochs", "1", "--levels", "80"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    frame = pd.read_csv(tmp_path / "a" / "forecasts.csv")
    assert frame["DLinear-lo-80"].isna().all() and frame["SeasonalNaive-lo-80"].notna().all()
    assert "DLinear has 3 calibration error(s) per step" in printed and "80 % needs 4" in printed
    assert "--calibration-windows 4 gives it" in printed
    assert main([*argv, "--calibration-windows", "4", "--out", str(tmp_path / "b")]) == 0
    assert pd.read_csv(tmp_path / "b" / "forecasts.csv")["DLinear-lo-80"].notna().all()      # the advice was true


# 4: a run stopped while writing says it is unfinished -----------------------------------------------------------
def test_a_backtest_stopped_while_writing_says_it_is_unfinished_until_resumed(tmp_path, monkeypatch, capsys):
    from frozenvit.forecasting import plots

    out = tmp_path / "out"
    argv = ["forecast", "backtest", "--csv", str(_csv(tmp_path / "d.csv", (90, 90))), "--models", "snaive,naive",
            "--windows", "2", "--h", "7", "--season-length", "7", "--out", str(out)]
    save = plots.save_png
    calls = []

    def save_then_stop(fig, path, **kw):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        save(fig, path, **kw)

    with monkeypatch.context() as m:
        m.setattr(plots, "save_png", save_then_stop)
        assert main(argv) == 130
    err = capsys.readouterr().err
    assert f"{out} is unfinished" in err and "--resume" in err
    from frozenvit.forecasting.run_folder import run_state

    assert run_state(out) == "unfinished" and not (out / "summary.json").exists()
    assert json.loads((out / "run.json").read_text())["complete"] is False
    assert main([*argv, "--resume"]) == 0
    assert run_state(out) == "complete" and (out / "mase_by_horizon.png").is_file()
    calls.clear()
    with monkeypatch.context() as m:
        m.setattr(plots, "save_png", save_then_stop)
        assert main(argv) == 130
    capsys.readouterr()
    assert main(argv) == 0                                   # started afresh, saying what it replaces
    assert "holds a run that stopped before all its results were written" in capsys.readouterr().err


# 5: Excel's month-year dates -------------------------------------------------------------------------------------
def test_excel_month_year_dates_are_read_as_months_and_written_back_alike(tmp_path):
    from frozenvit.forecasting.data import read_long_csv

    months = pd.date_range("2019-01-01", periods=30, freq="MS")
    csv = tmp_path / "sales.csv"
    pd.DataFrame({"month": months.strftime("%b-%y"), "sales": np.arange(30.0) % 12 + 100}).to_csv(csv, index=False)
    df = read_long_csv(csv, time_col="month", target_col="sales")
    assert (df["ds"] == months).all()
    out = tmp_path / "out"
    assert main(["forecast", "predict", "--csv", str(csv), "--time-col", "month", "--target-col", "sales",
                 "--models", "snaive", "--out", str(out)]) == 0
    assert pd.read_csv(out / "forecasts.csv")["month"].iloc[0] == "Jul-21"


def test_an_unreadable_date_says_which_forms_are_read():
    from frozenvit.forecasting.errors import SeriesError
    from frozenvit.forecasting.data import validate

    df = pd.DataFrame({"unique_id": "a", "ds": ["1er janv.", "2 janv.", "3 janv."], "y": [1.0, 2.0, 3.0]})
    with pytest.raises(SeriesError, match=r"is not an integer step or a date .*2019-01-31 \(YYYY-MM-DD.*yyyy-mm-dd"):
        validate(df)


# 6: --fill says what it filled -----------------------------------------------------------------------------------
def test_fill_says_how_many_values_it_filled_and_records_it(tmp_path, capsys):
    df = _frame((60, 60, 60))
    df.loc[5, "y"] = np.nan                                   # an empty value in s0
    df = df.drop(index=[70, 71, 130])                         # two missing days in s1, one in s2
    csv, out = tmp_path / "gaps.csv", tmp_path / "out"
    df.to_csv(csv, index=False)
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "snaive", "--fill", "interpolate",
                 "--out", str(out)]) == 0
    assert ("filled 4 missing values (3 missing timestamps and 1 empty value) in 3 series with --fill interpolate: "
            "s1 2, s0 1, s2 1") in capsys.readouterr().out
    assert _summary(out)["filled"] == {"how": "interpolate", "values": 4, "missing_timestamps": 3,
                                       "series": {"s0": 1, "s1": 2, "s2": 1}}


# 7: legends hide no data -----------------------------------------------------------------------------------------
def test_plot_legends_lie_outside_every_axes():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from frozenvit.forecasting.plots import plot_coverage, plot_forecasts, plot_future, plot_mase_by_horizon

    df = _frame((60, 60))
    res = backtest(df, [SeasonalNaive(7), Naive()], h=7, n_windows=3, season_length=7, levels=(80,),
                   calibration_windows=1)
    fc = forecast(df, [SeasonalNaive(7), Naive()], h=7, season_length=7)
    for fig in (plot_forecasts(res, df), plot_mase_by_horizon(res), plot_coverage(res), plot_future(fc, df)):
        FigureCanvasAgg(fig).draw()
        renderer = fig.canvas.get_renderer()
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert legends
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)


# 8: the footnote names the levels asked --------------------------------------------------------------------------
def test_the_backtest_footnote_names_the_levels_asked_and_what_each_needs(tmp_path, capsys):
    argv = ["forecast", "backtest", "--csv", str(_csv(tmp_path / "d.csv", (90,))), "--models", "snaive",
            "--windows", "3", "--h", "7", "--season-length", "7", "--levels", "80", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "share < 1" in printed and "80 % needs 4 per step" in printed and "95 %" not in printed


# 9: a history flat for most of it gives intervals too narrow: said ---------------------------------------------
def _intermittent() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    ds = pd.date_range("2024-01-01", periods=150, freq="D")
    new = np.zeros(150)
    new[-5:] = [1, 0, 2, 0, 1]                                 # sold nothing until late
    parts = [pd.DataFrame({"unique_id": f"part{i}", "ds": ds, "y": rng.poisson(0.3, 150) * rng.integers(1, 5, 150)})
             for i in range(3)]
    return pd.concat(parts + [pd.DataFrame({"unique_id": "new_item", "ds": ds, "y": new})], ignore_index=True)


def test_a_series_flat_until_lately_is_named_as_too_narrow_an_interval():
    from frozenvit.forecasting.intervals import FlatHistoryWarning

    with pytest.warns(FlatHistoryWarning, match=r"of 1 series \(new_item\).*20 times as much"):
        fc = forecast(_intermittent(), [SeasonalNaive(7)], h=7, season_length=7, levels=(80,))
    assert fc.frame["SeasonalNaive-lo-80"].notna().all()                  # the intervals are left as they are


def test_ordinary_series_raise_no_flat_history_warning(shared_data):
    from frozenvit.forecasting.intervals import FlatHistoryWarning, flat_then_moving

    ett = pd.read_csv(shared_data / "ett" / "ETTh2.csv")
    for col in ett.columns[1:]:                                        # each at its end, and 8 backtest windows
        y = ett[col].to_numpy(dtype=float)
        assert all(flat_then_moving(y[:c], 24, 48) is None for c in y.size - 48 * np.arange(9))
    m4 = pd.read_csv(shared_data / "m4_hourly" / "Hourly-train.csv").set_index("V1")
    assert all(flat_then_moving(row.dropna().to_numpy(dtype=float), 24, 48) is None for _, row in m4.iterrows())
    parts = _intermittent()
    df = parts[parts["unique_id"] != "new_item"]                        # intermittent, but so all along
    with warnings.catch_warnings():
        warnings.simplefilter("error", FlatHistoryWarning)
        forecast(df, [SeasonalNaive(7)], h=7, season_length=7, levels=(80,))
        backtest(_frame((120, 120)), [SeasonalNaive(7), ETS(7)], h=7, n_windows=2, season_length=7, levels=(80,))
