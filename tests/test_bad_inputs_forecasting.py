"""`frozenvit forecast ...` given bad input: exit status 2, a named error that says what to do in the
command's own terms, and nothing written. One row per kind of mistake."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main


def _long(path: Path, n: int = 120, y=None) -> Path:
    t = np.arange(n)
    ys = 5 + np.sin(2 * np.pi * t / 24) + 0.01 * t if y is None else y
    pd.DataFrame({"unique_id": "a", "ds": t, "y": ys}).to_csv(path, index=False)
    return path


def _text(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _wide(path: Path, n: int = 120) -> Path:
    t = np.arange(n)
    pd.DataFrame({"date": pd.date_range("2021-01-01", periods=n, freq="h").astype(str),
                  "A": 5 + np.sin(t / 4), "B": 3 + np.cos(t / 4)}).to_csv(path, index=False)
    return path


def _foreign_out(tmp: Path) -> Path:
    (tmp / "mine").mkdir()
    (tmp / "mine" / "notes.txt").write_text("not frozenvit's")
    return tmp / "mine"


def _stopped_run_then_other_data(d: Path) -> list[str]:
    """A backtest that left its checkpoints in d/out, then its CSV rewritten: the argv of its --resume."""
    argv = ["forecast", "backtest", "--csv", str(_long(d / "l.csv", n=200)), "--models", "dlinear", "--h", "12",
            "--windows", "1", "--max-epochs", "1", "--out", str(d / "out")]
    assert main(argv) == 0
    _long(d / "l.csv", n=200, y=np.arange(200.0))
    return argv + ["--resume"]


BT = ["forecast", "backtest", "--models", "snaive"]
PAPER = ["forecast", "paper", "--models", "dlinear"]

# id: (argv from tmp_path, error class, fragments the message must hold, fragments it must not hold)
CASES = {
    "missing csv": (lambda d: BT + ["--csv", str(d / "nope.csv")], "SeriesError", ["not found", "--csv"], []),
    "empty file": (lambda d: BT + ["--csv", str(_text(d / "e.csv", ""))], "SeriesError", ["is empty"], []),
    "header-only csv": (lambda d: BT + ["--csv", str(_text(d / "h.csv", "unique_id,ds,y\n"))], "SeriesError",
                        ["no data rows"], []),
    "csv without the named columns": (lambda d: BT + ["--csv", str(_text(d / "c.csv", "a,b,c\n1,2,3\n"))],
                                      "SeriesError", ["not found", "--id-col", "--wide"], ["id_col="]),
    "a folder as --csv": (lambda d: BT + ["--csv", str(d)], "SeriesError", ["is a folder"], []),
    "binary garbage": (lambda d: BT + ["--csv", str(_text(d / "b.csv", bytes(range(256)) * 3))], "SeriesError",
                       ["UTF-8"], []),
    "rows wider than the header": (lambda d: BT + ["--csv", str(_text(d / "w.csv", "unique_id,ds,y\na,0,1,7\n"))],
                                   "SeriesError", ["more fields than the header"], []),
    "text in y, even with --fill ffill": (
        lambda d: BT + ["--csv", str(_text(d / "t.csv", "unique_id,ds,y\na,0,1\na,1,2\na,2,n/a!\na,3,4\n")),
                        "--fill", "ffill"], "SeriesError", ["line 4", "'n/a!'", "not a number"], ["fill="]),
    "text in a timestamp": (lambda d: BT + ["--csv", str(_text(d / "d.csv", "date,A\n2021-01-01 00:00,1\n"
                                                               "2021-01-01 01:00,2\nsoon,3\n")), "--wide"],
                            "SeriesError", ["line 4", "'soon'"], []),
    "gap without --fill": (lambda d: BT + ["--csv", str(_text(d / "g.csv", "unique_id,ds,y\na,0,1\na,1,2\na,3,4\n"))],
                           "SeriesError", ["gaps", "--fill ffill", "validate(df, fill='ffill')"], []),
    "unsorted timestamps": (lambda d: BT + ["--csv", str(_text(d / "u.csv", "unique_id,ds,y\na,0,1\na,2,2\na,1,4\n"))],
                            "SeriesError", ["not sorted", "--sort", "validate(df, sort=True)"], []),
    "series too short for the windows": (lambda d: BT + ["--csv", str(_long(d / "s.csv", 60)), "--h", "24", "--windows", "3"],
                                         "SeriesError", ["this backtest needs", "--windows"], []),
    "constant series (MASE undefined)": (lambda d: BT + ["--csv", str(_long(d / "k.csv", 300, y=np.ones(300))), "--windows", "1"],
                                         "SeriesError", ["MASE is undefined", "--season-length"], ["season_length="]),
    "--columns naming no column": (lambda d: BT + ["--csv", str(_wide(d / "w.csv")), "--wide", "--columns", "Z"],
                                   "SeriesError", ["['Z'] not found", "--columns"], []),
    "--columns without --wide": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--columns", "A"],
                                 "UsageError", ["--wide"], []),
    "--season-length 0": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--season-length", "0"],
                          "UsageError", ["--season-length", ">= 1"], []),
    "--step-size 0": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--step-size", "0"], "UsageError",
                      ["--step-size", ">= 1"], []),
    "--h 0": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--h", "0"], "UsageError", ["--h"], []),
    "--windows 0": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--windows", "0"], "UsageError",
                    ["--windows"], []),
    "--h -24": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--h", "-24"], "UsageError", ["--h"], []),
    "--season-length 2.5": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--season-length", "2.5"],
                            "UsageError", ["integer"], []),
    "--max-epochs 0": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--max-epochs", "0"], "UsageError",
                       ["--max-epochs"], []),
    "--seed -1": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--seed", "-1"], "UsageError", ["--seed"], []),
    "unknown model": (lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "snaive,prophet"],
                      "UsageError", ["prophet", "snaive,naive,ets,theta,arima,dlinear,patchtst"], []),
    "a model named twice": (lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models",
                                       "snaive,ets,snaive"], "UsageError", ["twice"], []),
    "--levels 100": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--levels", "80,100"], "UsageError",
                     ["--levels", "between 0 and 100"], []),
    "--levels text": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--levels", "80,high"], "UsageError",
                      ["--levels", "a number"], []),
    "--levels twice the same": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--levels", "80,80"], "UsageError",
                                ["--levels", "distinct"], []),
    "--calibration-windows without --levels": (
        lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--calibration-windows", "2"], "UsageError",
        ["--levels"], []),
    "--calibration-windows -1": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--levels", "80",
                                                 "--calibration-windows", "-1"], "UsageError",
                                 ["--calibration-windows", ">= 0"], []),
    "--global-calibration without --levels": (
        lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--global-calibration", "retrain"], "UsageError",
        ["--global-calibration", "--levels"], []),
    "holdout calibration of a neural model with 2 windows": (
        lambda d: ["forecast", "backtest", "--models", "snaive,dlinear", "--csv", str(_long(d / "l.csv", n=400)),
                   "--h", "24", "--windows", "1", "--input-size", "48", "--levels", "80",
                   "--calibration-windows", "2"], "UsageError",
        ["--calibration-windows 2", "dlinear", "--global-calibration retrain"], []),
    "too short for the calibration windows": (
        lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--h", "24", "--windows", "1", "--levels", "80",
                        "--calibration-windows", "4"], "SeriesError", ["--calibration-windows"], []),
    "an ensemble of one model": (lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models",
                                            "snaive,median(ets)"], "UsageError", ["median(ets)", "two or more"], []),
    "an unknown combination": (lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models",
                                          "vote(ets,snaive)"], "UsageError", ["'vote'", "use mean or median"], []),
    "an unknown ensemble member": (lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models",
                                              "mean(ets,prophet)"], "UsageError", ["prophet"], []),
    "--input-size shorter than a patch": (
        lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "patchtst",
                   "--input-size", "8"], "UsageError", ["--input-size 16"], []),
    "--input-size shorter than a vit patch": (
        lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "snaive,vit",
                   "--input-size", "8"], "UsageError", ["vit patch", "--input-size 16"], []),
    "--depth without vit in --models": (
        lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "snaive",
                   "--depth", "3"], "UsageError", ["--depth", "add vit to --models"], []),
    "--weights without --backbone": (
        lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "snaive,vit",
                   "--weights", str(d / "w.pth")], "UsageError", ["--backbone NAME"], []),
    "--backbone a ConvNet": (
        lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "snaive,vit",
                   "--backbone", "efficientnet_lite0"], "NotAViT", ["ConvNet", "vit_"], []),
    "--depth beyond the ViT's": (
        lambda d: ["forecast", "backtest", "--csv", str(_long(d / "l.csv")), "--models", "snaive,vit",
                   "--depth", "13"], "NotAViT", ["n_blocks <= 12"], []),
    "paper: --depth without vit": (
        lambda d: PAPER + ["--csv", str(_wide(d / "w.csv")), "--models", "patchtst", "--depth", "2"],
        "UsageError", ["--depth", "add vit to --models"], []),
    "--out is someone else's folder": (lambda d: BT + ["--csv", str(_long(d / "l.csv")), "--out", str(_foreign_out(d))],
                                       "OutputConflict", ["--out"], []),
    "paper: missing csv": (lambda d: PAPER + ["--csv", str(d / "ETTh2.csv")], "SeriesError", ["not found"], []),
    "paper: too few rows": (lambda d: PAPER + ["--csv", str(_wide(d / "w.csv"))], "SeriesError",
                            ["needs 14400"], []),
    "paper: --horizons 0": (lambda d: PAPER + ["--csv", str(_wide(d / "w.csv")), "--horizons", "96,0"],
                            "UsageError", ["--horizons"], []),
    "paper: --horizons text": (lambda d: PAPER + ["--csv", str(_wide(d / "w.csv")), "--horizons", "96,long"],
                               "UsageError", ["--horizons"], []),
    "paper: unknown model": (lambda d: ["forecast", "paper", "--csv", str(_wide(d / "w.csv")), "--models", "arima"],
                             "UsageError", ["arima"], []),
    "paper: --out is someone else's file": (
        lambda d: PAPER + ["--csv", str(_wide(d / "w.csv")), "--out", str(_text(d / "results.json", "{}"))],
        "OutputConflict", ["--out"], []),
    "--resume with other data": (_stopped_run_then_other_data, "CheckpointMismatch",
                                 ["other data", "--resume"], []),
    "paper: --minutely on an hourly dataset": (
        lambda d: PAPER + ["--csv", str(_wide(d / "ETTh1.csv")), "--minutely"], "UsageError",
        ["--minutely", "ETTh1", "--dataset ETTm1"], []),
    "paper: unknown --dataset": (lambda d: PAPER + ["--csv", str(_wide(d / "w.csv")), "--dataset", "ETTh3"],
                                 "UsageError", ["--dataset", "ETTh3"], []),
    "paper: --windows-per-epoch 0": (lambda d: PAPER + ["--csv", str(_wide(d / "w.csv")), "--windows-per-epoch", "0"],
                                     "UsageError", ["--windows-per-epoch"], []),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_a_named_error_with_exit_2_and_writes_nothing(tree_snapshot, case, tmp_path, capsys):
    make_argv, error, must, must_not = CASES[case]
    argv = make_argv(tmp_path)
    if "--out" not in argv:      # an output inside tmp_path, so that anything written would show
        argv += ["--out", str(tmp_path / "out" / ("scores.json" if argv[1] == "paper" else "run"))]
    before = tree_snapshot(tmp_path)
    try:
        code = main(argv)
    except SystemExit as e:      # argparse's usage errors leave through SystemExit
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error ({error}): "), err
    for text in must:
        assert text in last, (text, last)
    for text in must_not:
        assert text not in last, (text, last)
    assert "Traceback" not in err
    assert tree_snapshot(tmp_path) == before, "the command wrote something"
