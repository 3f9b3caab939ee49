"""`forecast` and `frozenvit forecast predict`: the next h values of each series, made as a backtest's last
window would be, on the series' own calendar, with intervals calibrated before the end."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import (ETS, AutoForecaster, DLinear, Ensemble, Naive, SeasonalNaive, SeriesError, Theta,
                                   ShortSeriesWarning, backtest, forecast, future_stamps, validate)
from frozenvit.forecasting.data import calendar_defaults
from frozenvit.forecasting.future import auto_calibration_windows


def _monthly(n: int = 96, n_series: int = 3, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = pd.date_range("2012-01-01", periods=n, freq="MS")
    return pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t,
                                    "y": 20 + i + 3 * np.sin(2 * np.pi * np.arange(n) / 12 + i) + 0.05 * np.arange(n)
                                    + rng.normal(0, 0.3, n)}) for i in range(n_series)], ignore_index=True)


def _tiny_dlinear() -> DLinear:
    return DLinear(h=6, input_size=24, max_epochs=2, batch_size=32, progress=False)


def test_the_future_forecast_is_the_backtests_last_window_made_from_the_same_history():
    df, h = _monthly(), 6
    models = [SeasonalNaive(12), ETS(12), _tiny_dlinear(), Ensemble([SeasonalNaive(12), ETS(12)], how="median")]
    res = backtest(df, models, h=h, n_windows=1, season_length=12)
    past = df[df.groupby("unique_id").cumcount(ascending=False) >= h]                  # the backtest's history
    fc = forecast(past, models, h=h, season_length=12)
    for m in res.models:
        np.testing.assert_allclose(fc.frame[m].to_numpy(), res.forecasts[m].to_numpy(), rtol=1e-6, err_msg=m)
    assert (fc.frame["ds"].to_numpy() == res.forecasts["ds"].to_numpy()).all()           # the next timestamps
    assert fc.last == {f"s{i}": "2019-06-01T00:00:00" for i in range(3)}


def test_future_values_do_not_exist_for_the_forecast():
    df, h = _monthly(), 6
    fc = forecast(df, [ETS(12)], h=h, season_length=12)
    changed = df.copy()
    changed.loc[changed.groupby("unique_id").cumcount() < 12, "y"] += 1000.0     # only the distant past moves
    assert not np.allclose(forecast(changed, [ETS(12)], h=h, season_length=12).frame["ETS"], fc.frame["ETS"])
    assert fc.frame["ds"].min() == pd.Timestamp("2020-01-01") and len(fc.frame) == 3 * h


@pytest.mark.parametrize("freq", ["MS", "QE", "D", "h", "W-SUN", "B"])
def test_future_timestamps_follow_the_calendar(freq):
    t = pd.date_range("2020-01-31", periods=10, freq=freq)
    out = future_stamps(pd.Series(t), 3)
    assert list(out) == list(pd.date_range(t[-1], periods=4, freq=freq)[1:])


def test_integer_timestamps_step_on():
    assert list(future_stamps(pd.Series([10, 15, 20, 25]), 3)) == [30, 35, 40]


def test_intervals_are_calibrated_on_enough_windows_and_cover_a_plain_series():
    rng = np.random.default_rng(1)
    n, h = 400, 4
    df = pd.DataFrame({"unique_id": "a", "ds": np.arange(n), "y": 50 + rng.normal(0, 1, n)})
    assert auto_calibration_windows([n], h, 1) == 19                            # one series: 19 errors a step
    assert auto_calibration_windows([n] * 2, h, 1) == 10
    assert auto_calibration_windows([n] * 40, h, 1) == 1                        # 40 series: one is enough
    assert auto_calibration_windows([12], 4, 1) == 2                            # what the shortest holds
    fc = forecast(df, [SeasonalNaive(1), ETS(1)], h=h, season_length=1, levels=(80,))
    assert fc.calibration_windows == 19 and fc.global_calibration == "retrain"
    f = fc.frame
    assert {"SeasonalNaive-lo-80", "ETS-hi-80", "ETS/own-lo-80"} <= set(f.columns)
    assert fc.interval_share()["ETS"] == {"80": 1.0}
    assert (f["ETS-lo-80"] < f["ETS"]).all() and (f["ETS"] < f["ETS-hi-80"]).all()
    width = (f["SeasonalNaive-hi-80"] - f["SeasonalNaive-lo-80"]).mean()
    assert 1.0 < width < 8.0                                                    # noise sd 1: naive's error sd 1.4


def test_a_series_shorter_than_a_season_falls_back_to_naive_unless_skipped():
    df = _monthly()
    tiny = pd.DataFrame({"unique_id": "tiny", "ds": pd.date_range("2019-01-01", periods=8, freq="MS"), "y": 1.0})
    both = pd.concat([df, tiny], ignore_index=True)
    with pytest.warns(UserWarning, match=r"SeasonalNaive: 1 of 4 series hold less than one season .*tiny \(8\)"):
        fc = forecast(both, [SeasonalNaive(12)], h=6, season_length=12)
    assert (fc.frame.loc[fc.frame["unique_id"] == "tiny", "SeasonalNaive"] == 1.0).all()
    with pytest.warns(ShortSeriesWarning, match=r"1 of 4 series .*: tiny; left out of the forecast"):
        fc = forecast(both, [SeasonalNaive(12)], h=6, season_length=12, short_series="skip")
    assert set(fc.frame["unique_id"]) == {"s0", "s1", "s2"} and fc.short_series["ids"] == ["tiny"]


def test_auto_chooses_inside_the_history_and_reports_its_choice():
    df = _monthly(n=72)
    auto = AutoForecaster([SeasonalNaive(12), Theta(12), ETS(12)])
    fc = forecast(df, [auto], h=6, season_length=12)
    w = fc.auto_weights()
    assert list(w["unique_id"]) == ["s0", "s1", "s2"] and np.allclose(w.drop(columns=["model", "unique_id"]).sum(1), 1)
    assert "auto_choices" in fc.to_dict() and np.isfinite(fc.frame["Auto"]).all()


def test_predict_writes_forecasts_a_picture_and_a_summary(tmp_path, capsys):
    csv, out = tmp_path / "m.csv", tmp_path / "pred"
    _monthly().to_csv(csv, index=False)
    argv = ["forecast", "predict", "--csv", str(csv), "--models", "snaive,ets", "--levels", "80", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "--h 18 and --season-length 12: monthly timestamps" in printed
    assert "forecasts of the next 18 values" in printed
    f = pd.read_csv(out / "forecasts.csv", parse_dates=["ds"])
    assert len(f) == 3 * 18 and f["ds"].min() == pd.Timestamp("2020-01-01")
    assert {"SeasonalNaive", "ETS", "ETS-lo-80", "ETS/own-hi-80"} <= set(f.columns)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["h"] == 18 and summary["calibration_windows"] == 4 and summary["interval_share"]["ETS"]["80"] == 1
    assert (out / "forecasts.png").read_bytes()[:4] == b"\x89PNG"
    (out / "mine.txt").write_text("keep")
    assert main(argv) == 0 and (out / "mine.txt").read_text() == "keep"        # a rerun replaces only its own


def test_predict_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    csv, out = tmp_path / "m.csv", tmp_path / "theirs"
    _monthly().to_csv(csv, index=False)
    out.mkdir()
    (out / "report.docx").write_text("theirs")
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "snaive", "--out", str(out)]) == 2
    assert "OutputConflict" in capsys.readouterr().err and sorted(p.name for p in out.iterdir()) == ["report.docx"]


def test_asking_for_intervals_never_changes_a_point_forecast():
    df = _monthly(n=80)                 # 7 windows wanted; more than 3 would shorten the look-back (48 -> 40)
    models = [SeasonalNaive(12), DLinear(h=6, max_epochs=2, batch_size=32, progress=False)]
    plain = forecast(df, models, h=6, season_length=12, input_size="auto")
    with_iv = forecast(df, models, h=6, season_length=12, input_size="auto", levels=(80,))
    assert with_iv.input_size == plain.input_size == 48
    assert with_iv.calibration_windows == 7 and with_iv.network_calibration_windows == 3
    alone = forecast(df, models[:1], h=6, season_length=12, levels=(80,))                  # no network
    assert alone.calibration_windows == 7 and alone.network_calibration_windows is None
    np.testing.assert_array_equal(with_iv.frame["DLinear"], plain.frame["DLinear"])
    assert np.isfinite(with_iv.frame["DLinear-lo-80"]).all()
    # the statistical model is calibrated on all 7 windows, as without the network
    np.testing.assert_allclose(with_iv.frame["SeasonalNaive-lo-80"], alone.frame["SeasonalNaive-lo-80"])


def test_few_series_get_a_95_interval_from_the_statistical_models_though_the_networks_keep_one_window():
    """8 series, 1 window for the networks (more would shorten their look-back): 8 errors a step, fewer than the
    19 a 95 % interval needs; the statistical models take as many windows as give 19."""
    df = _monthly(n=60, n_series=8)
    models = [SeasonalNaive(12), DLinear(h=6, max_epochs=1, batch_size=32, progress=False)]
    fc = forecast(df, models, h=6, season_length=12, levels=(80, 95), input_size="auto")
    assert fc.calibration_windows == 3 and fc.network_calibration_windows == 1
    share = fc.interval_share()
    assert share["SeasonalNaive"] == {"80": 1.0, "95": 1.0}
    assert share["DLinear"] == {"80": 1.0, "95": 0.0}
    one = forecast(df, models, h=6, season_length=12, levels=(80, 95), input_size="auto", calibration_windows=1)
    for col in ("DLinear", "DLinear-lo-80", "DLinear-hi-80"):    # the networks: as with one window for every model
        np.testing.assert_array_equal(fc.frame[col], one.frame[col])
    assert one.interval_share()["SeasonalNaive"]["95"] == 0.0


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(freq=st.sampled_from(["YS", "QE", "MS", "W-SUN", "D", "B", "h", "15min", "2MS", None]),
       lengths=st.lists(st.integers(1, 160), min_size=1, max_size=4), flat=st.booleans(),
       levels=st.sampled_from([(), (80,), (50, 95)]))
def test_fuzz_any_valid_frame_is_forecast_on_its_calendar_or_refused_by_name(freq, lengths, flat, levels):
    parts = []
    for i, n in enumerate(lengths):
        ds = np.arange(100, 100 + 3 * n, 3) if freq is None else pd.date_range("2001-01-01", periods=n, freq=freq)
        y = np.full(n, 2.0) if flat else np.sin(np.arange(n) + i) * 5 + 10
        parts.append(pd.DataFrame({"unique_id": f"s{i}", "ds": ds, "y": y}))
    df = validate(pd.concat(parts, ignore_index=True))
    h, (m, *_), _ = calendar_defaults(df)
    try:
        fc = forecast(df, [SeasonalNaive(m), Naive()], h=h, season_length=m, levels=levels)
    except SeriesError as e:
        event("refused")
        assert re.search(r"has \d+ values.*; a forecast needs \d+", str(e)) or "step of a series" in str(e)
        return
    event("forecast" + (" with intervals" if levels and fc.frame.filter(like="-lo-").notna().any().any() else ""))
    f = fc.frame
    assert len(f) == len(lengths) * h and np.isfinite(f[["SeasonalNaive", "Naive"]]).all().all()
    for uid, g in f.groupby("unique_id"):
        last = df.loc[df["unique_id"] == uid, "ds"].iloc[-1]
        assert (g["ds"] > last).all() and g["ds"].is_monotonic_increasing and g["ds"].is_unique
    for lv in levels:                     # an interval, where there is one, holds its forecast
        lo, hi = f[f"Naive-lo-{lv:g}"], f[f"Naive-hi-{lv:g}"]
        has = lo.notna()
        assert (lo[has] <= f["Naive"][has] + 1e-9).all() and (f["Naive"][has] <= hi[has] + 1e-9).all()


def test_series_too_short_for_the_networks_are_refused_in_the_forecasts_own_terms():
    df = _monthly(n=30)
    with pytest.raises(SeriesError, match=r"typical series \(30 values, the median length\) is too short for neural "
                                          r"models with --h 12; .*a smaller --h or --short-series statistical"):
        forecast(df, [_tiny_dlinear().set_params(h=12)], h=12, season_length=12, input_size="auto",
                 short_series="skip")


def test_a_model_has_one_colour_in_every_figure_whatever_the_models_beside_it():
    from matplotlib.colors import to_hex

    from frozenvit.forecasting.backtest import backtest
    from frozenvit.forecasting.plots import colours, plot_forecasts, plot_future, plot_mase_by_horizon

    df = _monthly(n=60, n_series=1)
    res = backtest(df, [SeasonalNaive(12), Naive(), ETS(12)], h=6, season_length=12)
    fc = forecast(df, [SeasonalNaive(12), ETS(12)], h=6, season_length=12)

    def line_colours(fig):
        return {ln.get_label(): to_hex(ln.get_color()) for ln in fig.axes[0].get_lines()
                if not ln.get_label().startswith("_")}

    back, future = line_colours(plot_forecasts(res, df)), line_colours(plot_future(fc, df))
    assert back["ETS"] == future["ETS"] and back["SeasonalNaive"] == future["SeasonalNaive"]
    mase = {k.split(" (")[0]: v for k, v in line_colours(plot_mase_by_horizon(res)).items()}
    assert mase["ETS"] == back["ETS"] and len(set(back.values())) == len(back)        # history, actual and 3 models
    c = colours(["mine", "ETS", "yours", "ETS/own"])               # names of the user's: colours no named model takes
    assert c["ETS"] == c["ETS/own"] == "C1" and len({c["mine"], c["yours"], "C1"}) == 3
