"""An output the user changed after frozenvit wrote it is never overwritten or removed by a re-run: a folder
filled file by file (`output_dir`), an artifact replaced as a whole (`atomic_dir`) and a single JSON file
(`write_json(..., sealed=True)`) are each refused with OutputConflict before any work, naming what changed.
Unchanged, or deleted, earlier outputs are replaced as before; caches and checkpoints are replaced even when
changed."""
import json
import os

import numpy as np
import pytest

from frozenvit.backbone.errors import OutputConflict
from frozenvit.backbone.suite import artifacts
from frozenvit.backbone.suite.artifacts import (MARKER, atomic_dir, atomic_write_text, changed_files,
                                                check_artifact_dir, check_output_dir, check_output_file, output_dir,
                                                record_output, write_json)
from frozenvit.backbone.suite.cli import main


def _marker(folder):
    return json.loads((folder / MARKER).read_text())


# ---- folders filled file by file -------------------------------------------------------------------------------

def test_an_output_folder_records_what_it_wrote_and_refuses_an_edited_file(tmp_path):
    out = output_dir(tmp_path / "run", "test.run")
    atomic_write_text(out / "forecasts.csv", "a,1\n")
    write_json(out / "plots" / "summary.json", {"x": 1})
    files = _marker(out)["files"]
    assert set(files) == {"forecasts.csv", "plots/summary.json"} and MARKER not in files
    check_output_dir(out, "test.run")                                # nothing changed: a re-run may go on
    (out / "forecasts.csv").write_text("a,1\nmy note\n")
    with pytest.raises(OutputConflict, match=r"forecasts\.csv changed after frozenvit wrote it.*never overwrites "
                                             r"a user's changes"):
        check_output_dir(out, "test.run")
    with pytest.raises(OutputConflict):
        output_dir(out, "test.run")
    assert (out / "forecasts.csv").read_text() == "a,1\nmy note\n"


def test_a_deleted_output_file_and_a_users_own_file_do_not_block_a_rerun(tmp_path):
    out = output_dir(tmp_path / "run", "test.run")
    atomic_write_text(out / "a.csv", "1\n")
    (out / "a.csv").unlink()                                         # nothing of the user's to keep
    (out / "notes.txt").write_text("mine")                           # never written by us, never replaced by us
    check_output_dir(out, "test.run")
    assert "notes.txt" not in _marker(out)["files"]


def test_files_of_nested_artifacts_and_temporaries_are_not_recorded_in_the_outer_folder(tmp_path):
    out = output_dir(tmp_path / "run", "test.run")
    with atomic_dir(out / "models" / "m", "test.model") as tmp:
        write_json(tmp / "config.json", {"a": 1})                    # inside a hidden temporary
    write_json(out / "models" / "m" / "extra.json", {"b": 2})       # inside a folder with a marker of its own
    assert _marker(out)["files"] == {}
    assert "config.json" in _marker(out / "models" / "m")["files"]


def test_an_unchanged_file_is_not_read_and_a_copied_one_is_hashed(tmp_path, monkeypatch):
    out = output_dir(tmp_path / "run", "test.run")
    atomic_write_text(out / "a.csv", "1\n")
    calls = []
    real = artifacts.sha256_file
    monkeypatch.setattr(artifacts, "sha256_file", lambda p, *a: calls.append(p) or real(p, *a))
    assert changed_files(out) == [] and calls == []                  # size and mtime as recorded
    os.utime(out / "a.csv", ns=(1, 1))                               # same bytes, another mtime (a plain copy)
    assert changed_files(out) == [] and len(calls) == 1


def test_a_write_killed_between_the_marker_and_the_rename_reads_as_ours(tmp_path, monkeypatch):
    out = output_dir(tmp_path / "run", "test.run")
    atomic_write_text(out / "a.csv", "old\n")

    def killed(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(artifacts.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(out / "a.csv", "new\n")                    # the marker already names the new content
    monkeypatch.undo()
    assert (out / "a.csv").read_text() == "old\n"
    check_output_dir(out, "test.run")                                # the old content is still ours
    atomic_write_text(out / "a.csv", "new\n")
    assert "a.csv" not in _marker(out)["previous"]


def test_a_file_frozenvit_appends_to_is_recorded_again_after_the_append(tmp_path):
    out = output_dir(tmp_path / "run", "test.run")
    atomic_write_text(out / "log.jsonl", "{}\n")
    with open(out / "log.jsonl", "a") as f:
        f.write("{}\n")
    record_output(out / "log.jsonl")
    check_output_dir(out, "test.run")


# ---- artifacts replaced as a whole -----------------------------------------------------------------------------

def _artifact(path, text="1"):
    with atomic_dir(path, "test.model") as tmp:
        (tmp / "config.json").write_text(text)


def test_an_edited_artifact_is_refused_and_a_cache_is_replaced(tmp_path):
    path = tmp_path / "model"
    _artifact(path)
    _artifact(path, "2")                                             # unchanged since written: replaced
    (path / "config.json").write_text("edited")
    with pytest.raises(OutputConflict, match="config.json changed after frozenvit wrote it"):
        _artifact(path, "3")
    assert (path / "config.json").read_text() == "edited"
    with pytest.raises(OutputConflict):
        check_artifact_dir(path, "test.model")
    with atomic_dir(path, "test.model", keep_edits=False) as tmp:    # a cache or checkpoint: only we read it
        (tmp / "config.json").write_text("4")
    assert (path / "config.json").read_text() == "4"


# ---- single JSON files -------------------------------------------------------------------------------------------

def test_a_sealed_json_output_is_refused_once_edited(tmp_path):
    path = tmp_path / "eval.json"
    write_json(path, {"metrics": {"auroc": np.float32(0.5), "nan": float("nan")}}, kind="test.eval", sealed=True)
    check_output_file(path, "test.eval")                             # as written: a re-run may replace it
    obj = json.loads(path.read_text())
    obj["metrics"]["auroc"] = 0.99
    path.write_text(json.dumps(obj))
    with pytest.raises(OutputConflict, match="changed after frozenvit wrote it"):
        check_output_file(path, "test.eval")
    write_json(path, {"metrics": {}}, kind="test.eval")              # an unsealed stamped file: the kind decides
    check_output_file(path, "test.eval")


# ---- through the commands ----------------------------------------------------------------------------------------

def _series(path):
    rows = ["unique_id,ds,y"] + [f"s{k},{t},{10 + k + (t % 4) * 2 + 0.1 * t}" for k in range(2) for t in range(60)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_forecast_backtest_rerun_keeps_an_edited_forecasts_csv(tmp_path, tree_snapshot, capsys):
    csv = _series(tmp_path / "s.csv")
    out = tmp_path / "bt"
    argv = ["forecast", "backtest", "--csv", str(csv), "--h", "4", "--season-length", "4", "--models", "snaive",
            "--windows", "2", "--out", str(out)]
    assert main(argv) == 0
    assert main(argv) == 0                                           # unchanged: the run is replaced
    with open(out / "forecasts.csv", "a") as f:
        f.write("my,own,row\n")
    before = tree_snapshot(out)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error (OutputConflict)" in err and "forecasts.csv changed after frozenvit wrote it" in err
    assert tree_snapshot(out) == before


def test_anomaly_synth_rerun_keeps_a_retouched_image(tmp_path, capsys):
    out = tmp_path / "syn"
    argv = ["anomaly", "synth", "--out", str(out)]
    assert main(argv) == 0
    png = sorted(out.rglob("*.png"))[0]
    assert png.relative_to(out).as_posix() in _marker(out)["files"]
    png.write_bytes(png.read_bytes() + b"\0")
    assert main(argv) == 2
    assert png.relative_to(out).as_posix() in capsys.readouterr().err


def test_a_single_json_output_under_any_name_is_replaced_by_its_own_rerun(tmp_path):
    path = tmp_path / "metrics.txt"                                  # --out ev/metrics.txt: JSON by content
    write_json(path, {"auroc": 0.5}, kind="test.eval", sealed=True)
    check_output_file(path, "test.eval")
    path.write_text(path.read_text().replace("0.5", "0.9"))
    with pytest.raises(OutputConflict, match="changed after frozenvit wrote it"):
        check_output_file(path, "test.eval")
    (tmp_path / "notes.txt").write_text("my notes")
    with pytest.raises(OutputConflict, match="not written by this frozenvit command"):
        check_output_file(tmp_path / "notes.txt", "test.eval")


@pytest.mark.parametrize("how", ["edit", "own file"])
def test_a_forecast_rerun_refuses_before_training_an_earlier_model_folder_with_a_users_change(tmp_path, capsys, how,
                                                                                             tree_snapshot):
    csv = _series(tmp_path / "s.csv")
    out = tmp_path / "bt"
    argv = ["forecast", "backtest", "--csv", str(csv), "--h", "4", "--season-length", "4", "--models",
            "snaive,dlinear", "--max-epochs", "1", "--input-size", "8", "--windows", "1", "--out", str(out)]
    assert main(argv) == 0
    model = out / "models" / "DLinear"
    if how == "edit":
        (model / "config.json").write_text((model / "config.json").read_text().replace("{", '{"mine": 1, ', 1))
    else:
        (model / "notes.txt").write_text("mine")
    before = tree_snapshot(out)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error (OutputConflict)" in err and ("config.json" if how == "edit" else "notes.txt") in err
    assert tree_snapshot(out) == before


def test_anomaly_update_refuses_a_model_folder_with_a_users_file_before_any_work(synth_model, tmp_path, capsys,
                                                                                 tree_snapshot, monkeypatch):
    import shutil

    from frozenvit.anomaly.patchcore import PatchCore

    ws = synth_model(tmp_path)
    normals = tmp_path / "normals"
    shutil.copytree(ws / "data" / "weave" / "test" / "good", normals)
    (ws / "model" / "notes.txt").write_text("mine")
    before = tree_snapshot(ws / "model")
    monkeypatch.setattr(PatchCore, "partial_fit", lambda *a, **k: pytest.fail("refused only after the work"))
    assert main(["anomaly", "update", "--model", str(ws / "model"), "--normals", str(normals), "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "OutputConflict" in err and "--model" in err and "notes.txt" in err and "--out" not in err
    assert tree_snapshot(ws / "model") == before


def test_every_file_of_an_artifact_has_the_usual_permissions(tmp_path):
    from safetensors.numpy import save_file

    with atomic_dir(tmp_path / "m", "test.model") as tmp:
        save_file({"bank": np.zeros((2, 2), np.float32)}, str(tmp / "bank.safetensors"))   # safetensors: 0600
        (tmp / "config.json").write_text("{}")
    mask = os.umask(0)
    os.umask(mask)
    assert {oct((tmp_path / "m" / f).stat().st_mode & 0o777) for f in ("bank.safetensors", "config.json")} == \
        {oct(0o666 & ~mask)}
