"""`forecast backtest --short-series {statistical,skip,baseline,error}`: series too short for the neural models'
look-back are handled per series, named in a warning and recorded in summary.json; a few short
series no longer shrink every series' look-back."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import SeasonalNaive, SeriesError, ShortSeriesWarning, backtest

LONG, SHORT = ("a", "b", "c"), ("tiny1", "tiny2")


@pytest.fixture
def ragged_csv(tmp_path):
    parts = []
    for i, (uid, n) in enumerate([(u, 300) for u in LONG] + [(u, 60) for u in SHORT]):
        t = np.arange(n)
        parts.append(pd.DataFrame({"unique_id": uid, "ds": t, "y": 5 + i + np.sin(2 * np.pi * t / 24) + 0.01 * t}))
    path = tmp_path / "ragged.csv"
    pd.concat(parts).to_csv(path, index=False)
    return path


def _run(csv, out, *extra):
    return main(["forecast", "backtest", "--csv", str(csv), "--h", "12", "--windows", "1", "--season-length", "24",
                 "--models", "snaive,dlinear", "--max-epochs", "1", "--out", str(out), *extra])


def test_default_scores_every_series_forecasting_the_short_ones_statistically(ragged_csv, tmp_path, capsys):
    assert _run(ragged_csv, tmp_path / "out", "--models", "snaive,ets,dlinear") == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "tiny1, tiny2" in warning[0] and "--short-series statistical" in warning[0]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    record = summary["short_series"]
    assert (record["policy"], record["ids"]) == ("statistical", ["tiny1", "tiny2"]) and "124 values" in record["reason"]
    assert summary["n_series"] == 5 and summary["input_size"] == 88
    f = pd.read_csv(tmp_path / "out" / "forecasts.csv")
    short = f["unique_id"].isin(SHORT)
    for uid in SHORT:                           # each short series: the forecasts of one statistical model
        g = f[f["unique_id"] == uid]
        assert any(np.allclose(g["DLinear"], g[m]) for m in ("SeasonalNaive", "ETS"))
    assert not np.allclose(f.loc[~short, "DLinear"], f.loc[~short, "SeasonalNaive"])


def test_skip_leaves_the_short_series_out_and_names_them(ragged_csv, tmp_path, capsys):
    assert _run(ragged_csv, tmp_path / "out", "--short-series", "skip") == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "tiny1, tiny2" in warning[0] and "--short-series skip" in warning[0]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["short_series"]["policy"], summary["short_series"]["ids"]) == ("skip", ["tiny1", "tiny2"])
    assert summary["n_series"] == 3 and sorted(summary["cutoffs"]) == list(LONG)
    assert summary["input_size"] == 88           # 7 horizons of 12, rounded to 8: not shrunk for the short ones


def test_baseline_forecasts_the_short_series_with_seasonal_naive(ragged_csv, tmp_path, capsys):
    assert _run(ragged_csv, tmp_path / "out", "--short-series", "baseline") == 0
    assert "tiny1, tiny2" in capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["short_series"]["policy"], summary["short_series"]["ids"]) == ("baseline", ["tiny1", "tiny2"])
    assert summary["n_series"] == 5
    f = pd.read_csv(tmp_path / "out" / "forecasts.csv")
    short = f["unique_id"].isin(SHORT)
    np.testing.assert_array_equal(f.loc[short, "DLinear"], f.loc[short, "SeasonalNaive"])
    assert not np.allclose(f.loc[~short, "DLinear"], f.loc[~short, "SeasonalNaive"])
    assert (tmp_path / "out" / "models" / "DLinear" / "config.json").is_file()


def test_error_refuses_and_names_the_short_series(ragged_csv, tmp_path, capsys):
    assert _run(ragged_csv, tmp_path / "out", "--short-series", "error") == 2
    err = capsys.readouterr().err
    assert "SeriesError" in err and "tiny1, tiny2" in err and "--short-series" in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_error_policy_raises_series_error(ragged_csv, tmp_path):
    from frozenvit.backbone.suite.cli import build_parser
    from frozenvit.forecasting import SeriesError

    args = build_parser().parse_args(["forecast", "backtest", "--csv", str(ragged_csv), "--h", "12", "--windows", "1",
                                      "--models", "snaive,dlinear", "--short-series", "error",
                                      "--out", str(tmp_path / "out")])
    with pytest.raises(SeriesError, match="tiny1, tiny2"):
        args.func(args)


def test_no_warning_when_every_series_is_long_enough(ragged_csv, tmp_path, capsys):
    df = pd.read_csv(ragged_csv)
    df[df["unique_id"].isin(LONG)].to_csv(tmp_path / "long.csv", index=False)
    assert _run(tmp_path / "long.csv", tmp_path / "out") == 0
    assert "warning:" not in capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["short_series"] == {"policy": "statistical", "ids": []}


def test_the_library_chooses_the_look_back_and_applies_the_policy_without_changing_the_models(ragged_csv):
    from frozenvit.forecasting import DLinear, SeasonalNaive, backtest

    net = DLinear(h=12, max_epochs=1, progress=False)
    with pytest.warns(UserWarning, match="tiny1, tiny2"):
        res = backtest(pd.read_csv(ragged_csv), [SeasonalNaive(24), net], h=12, season_length=24,
                       input_size="auto", short_series="skip")
    assert (res.input_size, res.short_series["policy"], res.short_series["ids"]) == (88, "skip", ["tiny1", "tiny2"])
    assert res.fitted["DLinear"].input_size == 88 and net.input_size == 336       # a clone got the look-back
    assert sorted(res.forecasts["unique_id"].unique()) == list(LONG)


def test_the_look_back_rule_gives_the_hourly_constants_at_hourly_h_and_season():
    from frozenvit.forecasting.lookback import NeuralLengths, neural_lengths

    assert neural_lengths([1000], h=48, season_length=24, windows=8, step=48) == \
        NeuralLengths(input_size=336, patch_len=16, stride=8, kernel_size=25, val_size=48)


def test_the_look_back_rule_follows_h_season_and_the_median_length():
    from frozenvit.forecasting.lookback import neural_lengths

    monthly = neural_lengths([1000], h=18, season_length=12, windows=1, step=18)      # 7 x 18 = 126 -> 128
    assert (monthly.input_size, monthly.patch_len, monthly.stride, monthly.kernel_size) == (128, 16, 8, 13)
    short = neural_lengths([40, 116, 300], h=18, season_length=12, windows=1, step=18)   # 116 - 3 x 18 = 62 -> 56
    assert (short.input_size, short.patch_len, short.stride, short.val_size) == (56, 7, 3, 18)


def test_auto_look_back_sets_patch_and_kernel_of_each_neural_model(ragged_csv):
    from frozenvit.forecasting import DLinear, PatchTST, SeasonalNaive, backtest

    with pytest.warns(UserWarning, match="tiny1, tiny2"):
        res = backtest(pd.read_csv(ragged_csv), [SeasonalNaive(24), DLinear(h=12, max_epochs=1, progress=False),
                                                 PatchTST(h=12, max_epochs=1, progress=False)],
                       h=12, season_length=24, input_size="auto", short_series="statistical")
    pt, dl = res.fitted["PatchTST"], res.fitted["DLinear"]
    assert (pt.input_size, pt.patch_len, pt.stride, dl.kernel_size) == (88, 11, 5, 25)
    assert res.neural_lengths["input_size"] == 88


def test_the_command_says_and_writes_what_auto_forecast_each_series_with(ragged_csv, tmp_path, capsys):
    assert _run(ragged_csv, tmp_path / "out", "--models", "ets,auto") == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("Auto forecast with")]
    assert len(line) == 1 and "of 5 series" in line[0]
    w = pd.read_csv(tmp_path / "out" / "auto_weights.csv")
    assert list(w["unique_id"]) == list(LONG + SHORT) and (w["model"] == "Auto").all()
    cands = w.drop(columns=["model", "unique_id"])
    np.testing.assert_allclose(cands.sum(axis=1), 1)
    short = w["unique_id"].isin(SHORT)          # too short for the networks' look-back: statistical candidates only
    assert (cands.loc[short, ["DLinear", "PatchTST", "median of candidates"]] == 0).all().all()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert sum(c["series"] for c in summary["auto_choices"]["Auto"]["combinations"]) == 5


def test_without_statistical_models_the_fallback_fits_on_the_stat_history_asked(ragged_csv, tmp_path):
    from frozenvit.forecasting import ETS, AutoForecaster, Theta

    assert _run(ragged_csv, tmp_path / "out", "--models", "dlinear", "--stat-history", "36") == 0
    f = pd.read_csv(tmp_path / "out" / "forecasts.csv")
    df = pd.read_csv(ragged_csv)
    ys = [df.loc[df["unique_id"] == u, "y"].to_numpy() for u in SHORT]
    cut = np.array([[y.size - 12] for y in ys])
    for history, same in ((36, True), (None, False)):     # the window asked, not all of each history
        auto = AutoForecaster([Theta(24, history=history), ETS(24, history=history)], median=False)
        want = auto.forecast_cutoffs(ys, cut, 12)[0][:, 0]
        got = np.stack([f.loc[f["unique_id"] == u, "DLinear"].to_numpy() for u in SHORT])
        assert np.allclose(got, want) == same


def test_skip_also_leaves_out_series_too_short_for_the_statistical_backtest_and_records_them():
    t = np.arange(200)
    long = [pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": 10 + np.sin(2 * np.pi * t / 24 + i)}) for i in range(2)]
    tiny = pd.DataFrame({"unique_id": "tiny", "ds": np.arange(30), "y": np.arange(30.0)})
    df = pd.concat(long + [tiny], ignore_index=True)
    with pytest.raises(SeriesError, match=r"'tiny' has 30 values; this backtest needs 49.*--short-series skip \(short_series='skip'\), or"):
        backtest(df, [SeasonalNaive(24)], h=24, season_length=24)                 # nothing asked: refused
    with pytest.warns(ShortSeriesWarning, match=r"1 of 3 series have fewer than the 49 values .*: tiny; left out"):
        res = backtest(df, [SeasonalNaive(24)], h=24, season_length=24, short_series="skip")
    assert set(res.forecasts["unique_id"]) == {"s0", "s1"}
    assert res.short_series["ids"] == ["tiny"] and res.short_series["policy"] == "skip"
    with pytest.raises(SeriesError, match=r"'tiny' has 30 values"):                   # none would remain
        backtest(tiny, [SeasonalNaive(24)], h=24, season_length=24, short_series="skip")
