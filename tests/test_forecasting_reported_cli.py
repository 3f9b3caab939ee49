"""`frozenvit forecast` defects a new user's trial found: each test fails on the code before its fix."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite import cli as suite_cli
from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.forecasting import DLinear, SeasonalNaive, Theta, backtest, diebold_mariano, forecast
from frozenvit.forecasting.auto import AutoForecaster
from frozenvit.forecasting.intervals import check_levels
from frozenvit.forecasting.lookback import auto_windows


def _frame(lengths=(120,), freq="D", seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    parts = []
    for i, n in enumerate(lengths):
        t = np.arange(n)
        y = 10 + i + np.sin(2 * np.pi * t / 7) + 0.02 * t + 0.1 * rng.normal(size=n)
        parts.append(pd.DataFrame({"unique_id": f"s{i}", "ds": pd.date_range("2021-01-01", periods=n, freq=freq),
                                   "y": y}))
    return pd.concat(parts, ignore_index=True)


def _csv(path: Path, lengths=(120,), freq="D") -> Path:
    _frame(lengths, freq).to_csv(path, index=False)
    return path


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


# 1 -------------------------------------------------------------------------------------------------------------
def test_a_closed_stdout_ends_quietly_after_the_results_are_written(tmp_path):
    csv, out = _csv(tmp_path / "d.csv", (200, 200, 200)), tmp_path / "s7"
    exe = Path(sys.executable).parent / "frozenvit"
    proc = subprocess.Popen([str(exe), "forecast", "backtest", "--csv", str(csv), "--models", "snaive",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()              # `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == suite_cli.CLOSED_OUTPUT_STATUS == 141
    assert "bug" not in err and "Traceback" not in err and "BrokenPipe" not in err
    assert (out / "summary.json").is_file() and (out / "forecasts.csv").is_file()


def test_a_broken_pipe_in_any_command_is_no_crash_and_no_log(monkeypatch, capsys):
    import argparse

    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args",
                        lambda self, argv=None, namespace=None: (argparse.Namespace(verbose=False, func=closed), []))
    monkeypatch.setattr(suite_cli, "_write_crash_log", lambda argv: pytest.fail("a closed output is no crash"))
    monkeypatch.setattr(suite_cli, "_stdout_closed", lambda: True)
    assert main(["demo"]) == 141
    assert capsys.readouterr().err == ""


def test_a_broken_pipe_that_is_not_stdout_is_a_bug(monkeypatch, capsys, tmp_path):
    import argparse

    def worker_gone(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args",
                        lambda self, argv=None, namespace=None: (argparse.Namespace(verbose=False, func=worker_gone), []))
    monkeypatch.setattr(suite_cli, "_write_crash_log", lambda argv: tmp_path / "crash.log")
    assert main(["demo"]) == 1                        # stdout is open: the pipe that broke was another one
    assert "error: unexpected BrokenPipeError" in capsys.readouterr().err


# 2 -------------------------------------------------------------------------------------------------------------
def test_levels_that_look_like_fractions_are_refused_with_the_percentages_meant(tmp_path, capsys):
    csv = _csv(tmp_path / "d.csv")
    with pytest.raises(SystemExit) as exit_:
        main(["forecast", "backtest", "--csv", str(csv), "--models", "snaive", "--levels", "0.8,0.95",
              "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "UsageError" in err and "--levels 80,95" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(ParameterError, match="80,95"):
        check_levels([0.8, 0.95])
    with pytest.raises(ParameterError, match="percent"):
        backtest(_frame(), [SeasonalNaive(7)], h=7, season_length=7, levels=(0.9,))
    assert check_levels([95, 80]) == (80.0, 95.0)


# 3 -------------------------------------------------------------------------------------------------------------
def test_diebold_mariano_that_cannot_be_computed_is_nan_with_a_reason_never_a_p_value_of_1(tmp_path, capsys):
    d = np.random.default_rng(0).normal(size=14)
    r = diebold_mariano(d, lag=13)                       # one window of h = 14 of one series
    assert np.isnan(r.statistic) and np.isnan(r.p_value) and "Harvey" in r.reason
    assert np.isfinite(diebold_mariano(d, lag=1).p_value) and diebold_mariano(d, lag=1).reason == ""
    csv, out = _csv(tmp_path / "d.csv"), tmp_path / "o"
    assert main(["forecast", "backtest", "--csv", str(csv), "--models", "snaive,naive", "--windows", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not computed" in text
    summary = _summary(out)
    naive = next(r for r in summary["summary"] if r["model"] == "Naive")
    assert naive["p_value"] is None or np.isnan(naive["p_value"])
    assert "Naive" in summary["dm_not_computed"]


# 4 -------------------------------------------------------------------------------------------------------------
def test_only_the_derived_values_are_named_as_derived(tmp_path, capsys):
    csv = _csv(tmp_path / "d.csv")
    assert main(["forecast", "backtest", "--csv", str(csv), "--models", "snaive", "--season-length", "5",
                 "--out", str(tmp_path / "a")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("--h 14: daily timestamps") and "season-length" not in first
    assert _summary(tmp_path / "a")["defaults_from"] == {"from": "daily timestamps", "h": 14}
    assert main(["forecast", "backtest", "--csv", str(csv), "--models", "snaive", "--h", "7",
                 "--out", str(tmp_path / "b")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("--season-length 7: daily timestamps") and "--h" not in first
    assert _summary(tmp_path / "b")["defaults_from"] == {"from": "daily timestamps", "season_length": 7}


# 5 -------------------------------------------------------------------------------------------------------------
def test_auto_does_not_claim_a_validation_that_did_not_happen(tmp_path, capsys):
    short = [np.arange(10.0) + i for i in range(3)]
    auto = AutoForecaster([SeasonalNaive(7), Theta(7)], median=False)
    auto.forecast_cutoffs(short, np.array([[10]] * 3), 7)
    note = auto.choice_.validation_note("before each series' last 7 values")
    assert "too short to validate" in note and "not validated" in note and "SeasonalNaive" in note
    assert not note.startswith("validated")
    assert auto.choice_.to_dict()["series_not_validated"] == 3
    csv = _csv(tmp_path / "s.csv", (10, 10, 10))
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "auto", "--max-epochs", "1",
                 "--out", str(tmp_path / "o")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Auto forecast with"))
    assert "too short to validate" in line and "(validated before" not in line


# 6 -------------------------------------------------------------------------------------------------------------
def test_the_automatic_window_count_leaves_room_for_the_calibration_windows(tmp_path):
    assert auto_windows([96], 18, 18, 12) == 3 and auto_windows([96], 18, 18, 12, calibration_windows=2) == 1
    csv, out = _csv(tmp_path / "m.csv", (96,), freq="MS"), tmp_path / "o"
    assert main(["forecast", "backtest", "--csv", str(csv), "--levels", "80,95", "--models", "snaive",
                 "--calibration-windows", "2", "--out", str(out)]) == 0
    assert _summary(out)["n_windows"] == 1


# 7 -------------------------------------------------------------------------------------------------------------
def test_skipped_series_do_not_cap_the_windows_of_the_series_kept():
    with pytest.warns(UserWarning, match="skip"):
        res = backtest(_frame((200, 200, 30)), [SeasonalNaive(7), DLinear(h=14, max_epochs=1)], h=14,
                       season_length=7, n_windows="auto", input_size="auto", short_series="skip")
    assert res.short_series["ids"] == ["s2"] and res.n_windows == 8


# 8 -------------------------------------------------------------------------------------------------------------
def test_predict_says_and_records_what_stat_history_auto_chose(tmp_path, capsys):
    csv, out = _csv(tmp_path / "d.csv"), tmp_path / "o"
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "snaive,theta", "--out", str(out)]) == 0
    assert "statistical models fitted on: Theta" in capsys.readouterr().out
    recorded = _summary(out)["stat_history"]
    assert recorded["asked"] == "auto" and "Theta" in recorded["used"]


# 9 -------------------------------------------------------------------------------------------------------------
def test_each_epoch_line_counts_its_own_epoch_after_an_early_stop(capsys):
    y = np.random.default_rng(0).normal(size=400)       # noise: the validation loss soon stops falling
    model = DLinear(h=8, input_size=32, max_epochs=30, patience=1, lr=0.5, progress=None)
    model.fit([y])
    assert len(model.history_) < 30                      # it stopped early
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("DLinear:")]
    counts = [int(x.split()[1].split("/")[0]) for x in lines]
    assert counts == list(range(1, len(model.history_) + 1))
    vals = [x.rsplit("val=", 1)[1] for x in lines]
    assert vals == [f"{h['val_loss']:.4f}" for h in model.history_]


# 10 ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["backtest", "predict"])
def test_an_unknown_option_points_to_the_subcommands_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["forecast", command, "--csv", "x.csv", "--horizon", "12"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--horizon 12" in err and f"see `frozenvit forecast {command} --help`" in err


# 11 ------------------------------------------------------------------------------------------------------------
def test_the_networks_calibration_is_named_only_when_networks_run(tmp_path, capsys):
    csv = _csv(tmp_path / "d.csv", (150, 150))
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "snaive,ets", "--levels", "80,95",
                 "--calibration-windows", "3", "--out", str(tmp_path / "o")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("intervals:"))
    assert "networks" not in line


# 12 ------------------------------------------------------------------------------------------------------------
def test_a_rerun_removes_the_folders_the_earlier_runs_files_leave_empty(tmp_path):
    csv, out = _csv(tmp_path / "d.csv", (150, 150)), tmp_path / "o"
    argv = ["forecast", "backtest", "--csv", str(csv), "--h", "7", "--season-length", "7", "--windows", "1",
            "--max-epochs", "1", "--out", str(out), "--models"]
    assert main(argv + ["snaive,dlinear"]) == 0
    assert (out / "models").is_dir() and (out / "checkpoints").is_dir()
    (out / "mine").mkdir()                               # a user's empty folder stays
    assert main(argv + ["snaive"]) == 0
    assert not (out / "models").exists() and not (out / "checkpoints").exists()
    assert (out / "mine").is_dir() and (out / "summary.json").is_file()


# 13, 14 --------------------------------------------------------------------------------------------------------
def test_no_models_is_a_parameter_error():
    df = _frame()
    with pytest.raises(ParameterError, match="models"):
        backtest(df, [], h=7, season_length=7)
    with pytest.raises(ParameterError, match="models"):
        forecast(df, [], h=7, season_length=7)


def test_several_seasons_are_taken_as_the_command_takes_them():
    df = _frame()
    one = backtest(df, [SeasonalNaive(7)], h=7, season_length=7, n_windows=2)
    two = backtest(df, [SeasonalNaive(7)], h=7, season_length=(14, 7), n_windows=2)
    assert two.season_length == 7 and two.mase_season == 7
    pd.testing.assert_frame_equal(one.forecasts, two.forecasts)
    assert forecast(df, [SeasonalNaive(7)], h=7, season_length=(7, 14)).season_length == 7
    with pytest.raises(ParameterError, match="season_length"):
        backtest(df, [SeasonalNaive(7)], h=7, season_length=(7, 0))
