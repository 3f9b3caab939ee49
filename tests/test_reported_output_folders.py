"""Reported by a new user's trial of `forecast` (items 4 and 10): a user's own file in an earlier output folder,
under a name the earlier run did not write, was overwritten by a later run that writes that name; and a usage
mistake printed argparse's whole usage block before its one error line."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite import artifacts
from frozenvit.backbone.suite.artifacts import (MARKER, atomic_write_text, check_output_dir, output_dir,
                                                remove_outputs, unlisted_files)
from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import OutputConflict


# --- the artifacts functions -------------------------------------------------------------------------------------

def _folder(tmp_path, kind="test.out"):
    out = output_dir(tmp_path / "out", kind)
    atomic_write_text(out / "a.csv", "ours\n")
    return out


def test_a_users_file_under_a_name_the_run_writes_is_refused_before_any_work(tmp_path):
    out = _folder(tmp_path)
    (out / "b.csv").write_text("mine\n")                      # not written by frozenvit: not in the marker
    assert unlisted_files(out, ["a.csv", "b.csv", "c.csv"]) == ["b.csv"]
    with pytest.raises(OutputConflict, match="b.csv"):
        check_output_dir(out, "test.out", names=["a.csv", "b.csv"])
    with pytest.raises(OutputConflict, match="b.csv"):
        output_dir(out, "test.out", names=["b.csv"])
    assert (out / "b.csv").read_text() == "mine\n"
    check_output_dir(out, "test.out", names=["a.csv", "c.csv"])     # ours, and a new name: accepted
    assert output_dir(out, "test.out", names=["a.csv"]) == out
    check_output_dir(out, "test.out")                          # a user's file beside ours does not block
    assert (out / "b.csv").read_text() == "mine\n"


def test_a_link_or_a_folder_under_a_name_the_run_writes_is_refused(tmp_path):
    out = _folder(tmp_path)
    (out / "plots.png").mkdir()
    (out / "link.csv").symlink_to(out / "a.csv")
    with pytest.raises(OutputConflict, match="link.csv, plots.png"):
        check_output_dir(out, "test.out", names=["plots.png", "link.csv"])


def test_the_writer_never_overwrites_a_file_the_marker_does_not_list(tmp_path):
    out = _folder(tmp_path)
    (out / "b.csv").write_text("mine\n")
    with pytest.raises(OutputConflict, match="b.csv"):
        atomic_write_text(out / "b.csv", "ours\n")               # the last guard, at write time
    assert (out / "b.csv").read_text() == "mine\n"
    assert "b.csv" not in json.loads((out / MARKER).read_text())["files"]
    atomic_write_text(out / "a.csv", "ours again\n")            # our own file is written again
    atomic_write_text(out / "sub" / "c.csv", "new\n")           # and a new one
    assert (out / "a.csv").read_text() == "ours again\n"


def test_the_writer_never_overwrites_a_listed_file_changed_since(tmp_path):
    out = _folder(tmp_path)
    (out / "a.csv").unlink()                                   # deleted and made again by the user
    (out / "a.csv").write_text("the user's own a.csv, longer\n")
    with pytest.raises(OutputConflict, match="a.csv"):
        atomic_write_text(out / "a.csv", "ours\n")
    with pytest.raises(OutputConflict, match="a.csv"):
        check_output_dir(out, "test.out", names=["a.csv"])
    assert (out / "a.csv").read_text() == "the user's own a.csv, longer\n"


def test_a_removed_output_leaves_the_marker_so_a_file_put_there_later_is_the_users(tmp_path):
    out = _folder(tmp_path)
    assert remove_outputs(out, ["a.csv"]) == ["a.csv"]
    assert "a.csv" not in json.loads((out / MARKER).read_text())["files"]
    (out / "a.csv").write_text("mine\n")
    check_output_dir(out, "test.out")                          # not taken for an edit of ours: no block
    with pytest.raises(OutputConflict, match="did not write"):
        check_output_dir(out, "test.out", names=["a.csv"])    # but never overwritten


def test_writes_outside_a_claimed_folder_are_unchanged(tmp_path):
    f = tmp_path / "free.txt"
    f.write_text("x")
    atomic_write_text(f, "y")                                  # no output folder: a plain atomic write
    assert f.read_text() == "y"
    assert not artifacts._claiming_folder(f)


# --- `forecast backtest` / `predict` ------------------------------------------------------------------------------

def _csv(path, n: int = 120):
    t = np.arange(n)
    pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": 5 + i + np.sin(2 * np.pi * t / 12)})
               for i in range(2)]).to_csv(path, index=False)
    return path


def _argv(csv, out, models="snaive", *extra, command="backtest"):
    return ["forecast", command, "--csv", str(csv), "--h", "6", "--season-length", "12", "--models", models,
            "--max-epochs", "1", "--out", str(out), *(["--windows", "1"] if command == "backtest" else []), *extra]


def _state(out):
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name, extra, models", [("coverage_by_horizon.png", ("--levels", "80"), "snaive"),
                                                  ("auto_weights.csv", (), "snaive,auto")])
def test_backtest_refuses_a_users_file_under_a_name_the_first_run_did_not_write(tmp_path, capsys, name, extra,
                                                                                 models):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out)) == 0
    (out / name).write_bytes(b"MY OWN FILE\n")
    before = _state(out)
    assert main(_argv(csv, out, models, *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "OutputConflict" in err and name in err
    assert _state(out) == before                               # nothing written: refused before any work


def test_backtest_keeps_a_users_file_it_does_not_write(tmp_path):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out)) == 0
    (out / "coverage_by_horizon.png").write_bytes(b"MY OWN FILE\n")
    assert main(_argv(csv, out)) == 0                          # no --levels: that name is not written
    assert (out / "coverage_by_horizon.png").read_bytes() == b"MY OWN FILE\n"


def test_a_file_an_earlier_run_dropped_and_the_user_made_again_is_the_users(tmp_path, capsys):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out, "snaive", "--levels", "80")) == 0
    assert main(_argv(csv, out)) == 0                          # drops its coverage_by_horizon.png
    assert not (out / "coverage_by_horizon.png").exists()
    (out / "coverage_by_horizon.png").write_bytes(b"MY OWN FILE\n")
    assert main(_argv(csv, out)) == 0                          # no longer blamed as an edit of ours
    capsys.readouterr()
    assert main(_argv(csv, out, "snaive", "--levels", "80")) == 2
    err = capsys.readouterr().err
    assert "OutputConflict" in err and "coverage_by_horizon.png" in err
    assert (out / "coverage_by_horizon.png").read_bytes() == b"MY OWN FILE\n"


def test_predict_refuses_a_users_auto_weights(tmp_path, capsys):
    csv, out = _csv(tmp_path / "s.csv"), tmp_path / "out"
    assert main(_argv(csv, out, "snaive", command="predict")) == 0
    (out / "auto_weights.csv").write_text("sku,weight\nSKU_A,0.7\n")
    before = _state(out)
    assert main(_argv(csv, out, "snaive,auto", command="predict")) == 2
    err = capsys.readouterr().err
    assert "OutputConflict" in err and "auto_weights.csv" in err
    assert _state(out) == before


# --- usage mistakes: one line --------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["forecast", "backtest", "--csv", "x.csv", "--h", "0", "--out", "x"],
                                  ["forecast", "backtest", "--no-such-flag"],
                                  ["forecast"],
                                  ["no-such-command"]])
def test_a_usage_mistake_is_one_line_on_stderr(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error (UsageError): ") and "--help" in lines[0] and "usage:" not in err
    assert not (tmp_path / "x").exists()


# --- the same defect in `anomaly synth` ----------------------------------------------------------------------------

def test_anomaly_synth_refuses_a_users_image_under_a_name_it_writes(tmp_path, capsys):
    out = tmp_path / "data"
    def argv(n_train):
        return ["anomaly", "synth", "--out", str(out), "--n-train", str(n_train), "--n-test-good", "1",
                "--n-test-defect", "1", "--height", "64", "--width", "64"]
    assert main(argv(2)) == 0
    mine = out / "weave" / "train" / "good" / "002.png"         # a name the first run did not write
    mine.write_bytes(b"MY OWN IMAGE")
    before = _state(out)
    assert main(argv(3)) == 2
    err = capsys.readouterr().err
    assert "OutputConflict" in err and "weave/train/good/002.png" in err
    assert _state(out) == before


def test_an_existing_output_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    """An immutable (or read-only) earlier output: refused by check_writable, not a PermissionError after the work."""
    import shutil
    import subprocess

    from frozenvit.backbone.suite.artifacts import atomic_dir, check_artifact_dir, write_json
    from frozenvit.backbone.suite.errors import OutputConflict

    with atomic_dir(tmp_path / "m", "thing") as tmp:
        write_json(tmp / "config.json", {"kind": "thing"})
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(tmp_path / "m")],
                                                        capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (not root, or the filesystem has no immutable flag)")
    try:
        with pytest.raises(OutputConflict, match="cannot be written.*make that folder writable"):
            check_artifact_dir(tmp_path / "m", "thing")
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "m")], capture_output=True)
    check_artifact_dir(tmp_path / "m", "thing")          # writable again: accepted
