"""`forecast backtest` on the command line (issue 57): an output folder holds one run's results, a stopped
run is pointed out, and a mistake is blamed on the option or the file that causes it."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main


def _csv(path, n: int = 200, n_series: int = 2, sep: str = ","):
    t = np.arange(n)
    pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": 5 + i + np.sin(2 * np.pi * t / 24) + 0.01 * t})
               for i in range(n_series)]).to_csv(path, index=False, sep=sep)
    return path


def _argv(csv, out, models: str, *extra: str) -> list[str]:
    return ["forecast", "backtest", "--csv", str(csv), "--h", "12", "--windows", "1", "--season-length", "24",
            "--models", models, "--max-epochs", "1", "--out", str(out), *extra]


def _last_error(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_rerun_with_fewer_models_keeps_nothing_of_the_models_it_drops(tmp_path):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out, "snaive,dlinear")) == 0
    assert (out / "models" / "DLinear").is_dir() and (out / "checkpoints" / "DLinear").is_dir()
    assert main(_argv(csv, out, "snaive")) == 0
    assert not (out / "models" / "DLinear").exists() and not (out / "checkpoints" / "DLinear").exists()
    assert json.loads((out / "summary.json").read_text())["models"] == ["SeasonalNaive"]


def test_a_rerun_leaves_files_it_did_not_write_alone(tmp_path):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out, "snaive,dlinear")) == 0
    (out / "notes.txt").write_text("mine")
    assert main(_argv(csv, out, "snaive")) == 0
    assert (out / "notes.txt").read_text() == "mine"


def test_a_users_file_inside_a_dropped_model_folder_survives_the_rerun(tmp_path):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out, "snaive,dlinear")) == 0
    (out / "models" / "DLinear" / "my_plot.png").write_bytes(b"mine")
    assert main(_argv(csv, out, "snaive")) == 0
    assert (out / "models" / "DLinear" / "my_plot.png").read_bytes() == b"mine"
    assert sorted(p.name for p in (out / "models" / "DLinear").iterdir()) == ["my_plot.png"]   # ours gone


def _stop_after_the_first_epoch(monkeypatch):
    from frozenvit.forecasting import checkpoint

    save = checkpoint.save

    def save_then_stop(*args, **kw):
        save(*args, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_stop)


def test_rerunning_a_stopped_backtest_without_resume_says_it_can_be_resumed(tmp_path, monkeypatch, capsys):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    argv = _argv(csv, out, "snaive,dlinear", "--max-epochs", "2")
    with monkeypatch.context() as m:
        _stop_after_the_first_epoch(m)
        assert main(argv) == 130
    capsys.readouterr()
    assert main(argv) == 2
    last = _last_error(capsys)
    assert "stopped" in last and "--resume" in last
    assert (out / "checkpoints" / "DLinear").is_dir()              # nothing of the stopped run was removed
    assert main(argv + ["--resume"]) == 0                           # and --resume goes on from it
    assert (out / "models" / "DLinear").is_dir()


def test_a_season_length_longer_than_the_series_allow_is_blamed_on_season_length(tmp_path, capsys):
    csv = _csv(tmp_path / "s.csv", n=100)
    assert main(_argv(csv, tmp_path / "out", "snaive", "--season-length", "168")) == 2
    last = _last_error(capsys)
    assert "SeriesError" in last and "--season-length" in last and "a smaller --h" not in last


def test_a_semicolon_separated_csv_is_named_as_such(tmp_path, capsys):
    csv = _csv(tmp_path / "s.csv", sep=";")
    assert main(_argv(csv, tmp_path / "out", "snaive")) == 2
    assert "the file looks semicolon-separated" in _last_error(capsys)


def test_a_semicolon_separated_csv_is_read_with_sep(tmp_path):
    csv = _csv(tmp_path / "s.csv", sep=";")
    assert main(_argv(csv, tmp_path / "out", "snaive", "--sep", ";")) == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["n_series"] == 2


@pytest.mark.parametrize("wide", [False, True], ids=["long", "wide"])
def test_the_separator_hint_holds_for_both_layouts(tmp_path, capsys, wide):
    path = tmp_path / "w.csv"
    if wide:
        t = pd.date_range("2021-01-01", periods=200, freq="h")
        pd.DataFrame({"date": t, "A": np.sin(np.arange(200) / 3) + 2}).to_csv(path, index=False, sep=";")
    else:
        _csv(path, sep=";")
    assert main(_argv(path, tmp_path / "out", "snaive", *(["--wide"] if wide else []))) == 2
    assert "semicolon-separated" in _last_error(capsys)


def test_a_file_with_flat_series_is_backtested_and_says_which_windows_have_no_mase(tmp_path, capsys):
    csv, out = tmp_path / "retail.csv", tmp_path / "out"
    t = np.arange(200)
    pd.concat([pd.DataFrame({"unique_id": "moves", "ds": t, "y": 5 + np.sin(2 * np.pi * t / 24) + 0.01 * t}),
               pd.DataFrame({"unique_id": "moves2", "ds": t, "y": 3 + np.cos(2 * np.pi * t / 24)}),
               pd.DataFrame({"unique_id": "zeros", "ds": t, "y": 0.0})]).to_csv(csv, index=False)
    assert main(_argv(csv, out, "snaive,ets,auto", "--levels", "80")) == 0
    printed = capsys.readouterr()
    assert "warning: MASE is undefined for 1 of the 3 windows, of 1 of the 3 series (zeros)" in printed.err
    assert "flat histories: MASE is undefined" in printed.out and "a flat history gives no MASE scale" in printed.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mase_undefined"]["ids"] == ["zeros"] and summary["n_series"] == 3
    rows = {r["model"]: r for r in summary["summary"]}
    assert all(np.isfinite(rows[m]["MASE"]) and np.isfinite(rows[m]["MAE"]) for m in rows)
    forecasts = pd.read_csv(out / "forecasts.csv")
    assert set(forecasts["unique_id"]) == {"moves", "moves2", "zeros"}
    assert (forecasts.loc[forecasts["unique_id"] == "zeros", ["SeasonalNaive", "ETS", "Auto"]] == 0).all().all()


def test_monthly_data_without_h_or_season_gets_monthly_ones_and_says_so(tmp_path, capsys):
    csv, out = tmp_path / "monthly.csv", tmp_path / "out"
    t = pd.date_range("2010-01-01", periods=96, freq="MS")
    pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": 10 + i + np.sin(2 * np.pi * np.arange(96) / 12)})
               for i in range(2)]).to_csv(csv, index=False)
    assert main(["forecast", "backtest", "--csv", str(csv), "--models", "snaive", "--out", str(out)]) == 0
    assert "--h 18 and --season-length 12: monthly timestamps" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["h"], summary["season_length"]) == (18, 12)
    assert summary["defaults_from"] == {"from": "monthly timestamps", "h": 18, "season_length": 12}
    assert main(["forecast", "backtest", "--csv", str(csv), "--models", "snaive", "--h", "6", "--out",
                 str(out)]) == 0                                           # one given: the other still inferred
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["h"], summary["season_length"]) == (6, 12)
