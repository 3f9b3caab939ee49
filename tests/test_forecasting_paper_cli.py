"""Paper protocol windows/scaling, the `frozenvit forecast` CLI and the demo section."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.forecasting.paper import paper_protocol, split_scale



class _LastValue:
    """Stand-in estimator: repeats the last look-back value (no training)."""

    alias = "LastValue"

    def __init__(self, h: int) -> None:
        self.h = h

    def fit(self, series, val=None):
        self.seen_ = (series, val)
        return self

    def predict(self, ctx: np.ndarray) -> np.ndarray:           # (N, L, C) -> (N, h, C)
        return np.repeat(ctx[:, -1:, :], self.h, axis=1)


def test_paper_protocol_scales_on_train_rows_and_counts_every_test_window():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(100, 3)) * [1, 10, 100] + [0, 5, -5]
    borders, L, h = (60, 80, 100), 8, 4
    made = []
    scores = paper_protocol(values, [h], ["x"], input_size=L, borders=borders,
                            make_model=lambda name, hh: made.append(_LastValue(hh)) or made[-1])
    mu, sd = values[:60].mean(0), values[:60].std(0)
    z = (values - mu) / sd
    # test windows: look-back from the 8 rows before row 80, targets up to row 100: 20 - 4 + 1 = 17 windows
    ref = [np.repeat(z[s - 1: s], h, 0) - z[s: s + h] for s in range(80, 100 - h + 1)]
    assert scores[0].n_test_windows == 17
    assert scores[0].mse == pytest.approx(float(np.mean(np.square(ref))), rel=1e-5)
    assert scores[0].mae == pytest.approx(float(np.mean(np.abs(ref))), rel=1e-5)
    train, val = made[0].seen_
    np.testing.assert_allclose(train[0], z[:60], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(val[0], z[52:80], rtol=1e-5, atol=1e-5)


def test_split_scale_ignores_rows_after_the_training_segment():
    values = np.arange(300.0).reshape(100, 3)
    poisoned = values.copy()
    poisoned[60:] *= 50
    a, b = split_scale(values, 8, (60, 80, 100)), split_scale(poisoned, 8, (60, 80, 100))
    np.testing.assert_array_equal(a[0], b[0])


def test_cli_backtest_writes_tables_and_pictures(tmp_path, capsys):
    from frozenvit.backbone.suite.cli import main

    t = np.arange(300)
    wide = pd.DataFrame({"date": pd.date_range("2021-01-01", periods=300, freq="h").astype(str),
                         "A": 5 + np.sin(2 * np.pi * t / 24), "B": 3 + np.cos(2 * np.pi * t / 24) + t * 0.01})
    wide.to_csv(tmp_path / "w.csv", index=False)
    out = tmp_path / "out"
    rc = main(["forecast", "backtest", "--csv", str(tmp_path / "w.csv"), "--wide", "--h", "12", "--windows", "2",
               "--season-length", "24", "--models", "snaive,naive,dlinear", "--max-epochs", "2", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "MASE by horizon step" in printed and "DLinear" in printed
    assert "7 of 12 steps, every one in mase_by_horizon.csv" in printed      # the first, every 2nd, the last
    table = printed.split("MASE by horizon step")[1].split("\n\n")[0].splitlines()[3:]
    assert [int(line.split()[0]) for line in table] == [1, 2, 4, 6, 8, 10, 12]
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["mase_by_horizon"]["SeasonalNaive"]) == 12
    assert len(pd.read_csv(out / "mase_by_horizon.csv", index_col=0).columns) == 12
    for f in ("forecasts.csv", "mase_by_horizon.csv", "forecasts.png", "mase_by_horizon.png",
              "models/DLinear/config.json"):
        assert (out / f).is_file(), f
    assert len(pd.read_csv(out / "forecasts.csv")) == 2 * 2 * 12


def test_cli_reports_bad_input_as_a_named_error(tmp_path, capsys):
    from frozenvit.backbone.suite.cli import main

    pd.DataFrame({"unique_id": ["a"] * 3, "ds": [0, 2, 1], "y": [1.0, 2, 3]}).to_csv(tmp_path / "l.csv", index=False)
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "l.csv"), "--models", "snaive"]) == 2
    assert "SeriesError" in capsys.readouterr().err


def test_demo_section_runs_offline_in_quick_mode(tmp_path):
    pytest.importorskip("statsmodels")
    from frozenvit.backbone.suite.report import DemoContext

    from frozenvit.forecasting.demo_section import section

    sec = section(DemoContext(out_dir=tmp_path, threads=1, quick=True))
    html = "\n".join(sec.blocks)
    assert sec.order == 30 and html.count("<img") == 3 and "PatchTST" in html
    assert "The next 24 months after the record ends (2002-01 on)" in sec.blocks[-1]      # the future, last


def _strict_json(path):
    """JSON as the standard defines it: NaN/Infinity are refused."""
    def refuse(name):
        raise ValueError(f"{path} holds {name}, which is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_cli_summary_reports_the_windows_asked_and_each_series_cutoffs(tmp_path, capsys):
    from frozenvit.backbone.suite.cli import main

    t = np.arange(200)
    parts = [pd.DataFrame({"unique_id": uid, "ds": pd.date_range("2021-01-01", periods=n, freq="h").astype(str),
                           "y": 5 + np.sin(2 * np.pi * t[:n] / 24) + i})
             for i, (uid, n) in enumerate((("a", 150), ("b", 200)))]
    pd.concat(parts).to_csv(tmp_path / "l.csv", index=False)
    out = tmp_path / "out"
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "l.csv"), "--models", "snaive,naive", "--h", "12",
                 "--windows", "1", "--out", str(out)]) == 0
    summary = _strict_json(out / "summary.json")
    assert summary["n_windows"] == 1 and summary["step_size"] == 12
    assert summary["cutoffs"] == {"a": ["2021-01-06T17:00:00"], "b": ["2021-01-08T19:00:00"]}


def test_cli_backtest_prints_progress_lines_per_epoch_when_stderr_is_a_log(tmp_path, capsys, monkeypatch):
    from frozenvit.backbone.suite.cli import main

    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")          # a line at every update
    t = np.arange(300)
    pd.DataFrame({"unique_id": "a", "ds": t, "y": 5 + np.sin(2 * np.pi * t / 24)}).to_csv(tmp_path / "l.csv",
                                                                                         index=False)
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "l.csv"), "--models", "snaive,dlinear", "--h", "12",
                 "--windows", "2", "--max-epochs", "3", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err                                  # captured: not a tty, as in a log file
    assert {line.split(" [")[0] for line in err.splitlines() if line.startswith("DLinear:")} == \
        {f"DLinear: {k}/3 epoch" for k in (1, 2, 3)}
    assert "SeasonalNaive: 2/2 fit" in err                           # a fit per cutoff


def test_cli_paper_prints_epoch_lines_and_writes_strict_json(tmp_path, capsys, monkeypatch):
    from frozenvit.backbone.suite.cli import main

    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    t = np.arange(14400)
    rng = np.random.default_rng(0)
    pd.DataFrame({"date": pd.date_range("2016-07-01", periods=t.size, freq="h").astype(str),
                  "HUFL": np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.1, t.size),
                  "OT": np.cos(2 * np.pi * t / 24) + rng.normal(0, 0.1, t.size)}).to_csv(tmp_path / "ett.csv",
                                                                                          index=False)
    out = tmp_path / "scores.json"
    assert main(["forecast", "paper", "--csv", str(tmp_path / "ett.csv"), "--models", "dlinear", "--horizons", "24",
                 "--max-epochs", "2", "--out", str(out), "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert "DLinear   H=  24  MSE" in captured.out
    assert {line.split(" [")[0] for line in captured.err.splitlines() if line.startswith("DLinear:")} == \
        {"DLinear: 1/2 epoch", "DLinear: 2/2 epoch"}
    rows = _strict_json(out)["results"]
    assert rows[0]["model"] == "DLinear" and rows[0]["h"] == 24 and rows[0]["n_test_windows"] == 2880 - 24 + 1
