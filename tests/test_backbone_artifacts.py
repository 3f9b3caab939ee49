import json
import os

import pytest

from frozenvit.backbone.suite import artifacts
from frozenvit.backbone.suite.artifacts import (atomic_dir, check_output_file, check_tensor_metadata, output_dir, read_config,
                                tensor_metadata, write_json)
from frozenvit.backbone.errors import ArtifactError, OutputConflict
from frozenvit.backbone.suite.report import Section, write_report


def _write(path, version=1, fail=False):
    with atomic_dir(path, "thing") as tmp:
        write_json(tmp / "config.json", {"kind": "thing", "format_version": version})
        (tmp / "data.bin").write_bytes(b"x" * 100)
        if fail:
            raise RuntimeError("crash while writing")


def test_atomic_dir_crash_leaves_the_old_artifact_untouched(tmp_path):
    _write(tmp_path / "a", version=1)
    with pytest.raises(RuntimeError):
        _write(tmp_path / "a", version=2, fail=True)
    assert read_config(tmp_path / "a", "thing", 1)["format_version"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]          # no temporary left behind


def test_atomic_dir_replaces_an_existing_artifact(tmp_path):
    _write(tmp_path / "a", version=1)
    _write(tmp_path / "a", version=2)
    assert read_config(tmp_path / "a", "thing", 2)["format_version"] == 2


def test_read_config_names_version_and_kind_mismatches(tmp_path):
    _write(tmp_path / "a", version=1)
    with pytest.raises(ArtifactError, match="format version 1"):
        read_config(tmp_path / "a", "thing", 2)
    with pytest.raises(ArtifactError, match="expected 'other'"):
        read_config(tmp_path / "a", "other", 1)
    with pytest.raises(ArtifactError, match="does not exist"):
        read_config(tmp_path / "nothing", "thing", 1)
    (tmp_path / "a" / "config.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt"):
        read_config(tmp_path / "a", "thing", 1)


def test_report_is_self_contained_html_with_inline_figures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    sec = Section("S <1>").text("a & b").table([{"x": 1.23456, "y": "z"}]).figure(fig, "cap")
    path = write_report(tmp_path / "r" / "index.html", "t", [sec])
    html = path.read_text()
    assert "data:image/png;base64," in html and "S &lt;1&gt;" in html and "a &amp; b" in html
    assert "src=\"http" not in html and "1.235" in html


def test_artifacts_get_normal_permissions_not_private_temp_ones(tmp_path):
    import os

    _write(tmp_path / "a")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o777 & ~mask
    assert (tmp_path / "a" / "config.json").stat().st_mode & 0o777 == 0o666 & ~mask


class Killed(BaseException):
    """Stands for kill -9 at one step: nothing after it runs, not even `except Exception` handlers."""


def _kill_at(monkeypatch, point):
    """Make the replace die at `point`, as kill -9 would: the first rename, the second, or the old one's removal."""
    real_rename, calls = os.rename, []

    def rename(src, dst):
        calls.append(dst)
        if (point == "before_hide_old" and len(calls) == 1) or (point == "between_renames" and len(calls) == 2):
            raise Killed
        real_rename(src, dst)

    def rmtree(path, ignore_errors=False):
        raise Killed

    monkeypatch.setattr(artifacts.os, "rename", rename)
    if point == "before_remove_old":
        monkeypatch.setattr(artifacts.shutil, "rmtree", rmtree)


@pytest.mark.parametrize("point", ["before_hide_old", "between_renames", "before_remove_old"])
def test_a_kill_at_any_step_of_a_replace_leaves_a_complete_artifact_or_recovers_it(tmp_path, monkeypatch, point):
    _write(tmp_path / "a", version=1)
    with monkeypatch.context() as m:
        _kill_at(m, point)
        with pytest.raises(Killed):
            _write(tmp_path / "a", version=2)
    version = read_config(tmp_path / "a", "thing", read_config_version(tmp_path / "a"))["format_version"]
    assert version == (1 if point == "before_hide_old" else 2)      # the new one once it is complete on disk
    assert (tmp_path / "a" / "data.bin").read_bytes() == b"x" * 100
    _write(tmp_path / "a", version=3)                                # the next write cleans what the kill left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def read_config_version(path):
    artifacts.recover(path)
    return json.loads((path / "config.json").read_text())["format_version"]


def test_a_kill_inside_the_body_leaves_the_old_artifact_and_the_next_write_cleans_up(tmp_path):
    _write(tmp_path / "a", version=1)
    with pytest.raises(Killed):
        with atomic_dir(tmp_path / "a", "thing") as tmp:
            (tmp / "half").write_bytes(b"x")
            raise Killed
    assert read_config(tmp_path / "a", "thing", 1)
    _write(tmp_path / "a", version=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_load_after_a_kill_between_renames_restores_the_new_artifact_and_says_so(tmp_path, monkeypatch, caplog):
    _write(tmp_path / "a", version=1)
    with monkeypatch.context() as m:
        _kill_at(m, "between_renames")
        with pytest.raises(Killed):
            _write(tmp_path / "a", version=2)
    assert not (tmp_path / "a").exists()
    with caplog.at_level("WARNING"):
        assert read_config(tmp_path / "a", "thing", 2)["format_version"] == 2
    assert "recovered" in caplog.text


def test_an_artifact_never_replaces_a_folder_frozenvit_did_not_write(tmp_path):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    with pytest.raises(OutputConflict, match="did not write"):
        _write(thesis)
    assert (thesis / "chapter1.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]


def test_an_artifact_holding_a_user_file_is_not_replaced(tmp_path):
    _write(tmp_path / "a", version=1)
    (tmp_path / "a" / "notes.txt").write_text("mine")
    with pytest.raises(OutputConflict, match="notes.txt"):
        _write(tmp_path / "a", version=2)
    assert (tmp_path / "a" / "notes.txt").read_text() == "mine"
    assert read_config(tmp_path / "a", "thing", 1)


def test_an_artifact_of_another_kind_is_not_replaced(tmp_path):
    with atomic_dir(tmp_path / "a", "other") as tmp:
        (tmp / "x").write_text("x")
    with pytest.raises(OutputConflict, match="'other'"):
        _write(tmp_path / "a")


def test_output_dir_accepts_new_empty_and_own_folders_and_refuses_the_rest(tmp_path):
    assert output_dir(tmp_path / "new", "report").is_dir()
    (tmp_path / "new" / "result.csv").write_text("ours")
    assert output_dir(tmp_path / "new", "report")                # a re-run may write into its own folder
    (tmp_path / "empty").mkdir()
    assert output_dir(tmp_path / "empty", "report")
    data = tmp_path / "data"
    data.mkdir()
    (data / "img.png").write_bytes(b"p")
    with pytest.raises(OutputConflict):
        output_dir(data, "report")
    with pytest.raises(OutputConflict, match="'report'"):
        output_dir(tmp_path / "new", "other")
    assert sorted(p.name for p in data.iterdir()) == ["img.png"]
    (tmp_path / "file").write_text("f")
    with pytest.raises(OutputConflict, match="not a folder"):
        output_dir(tmp_path / "file", "report")


def test_output_files_are_replaced_only_when_frozenvit_wrote_them(tmp_path):
    mine = tmp_path / "metrics.json"
    check_output_file(mine, "anomaly.evaluate")
    write_json(mine, {"auroc": 0.9}, kind="anomaly.evaluate")
    check_output_file(mine, "anomaly.evaluate")
    with pytest.raises(OutputConflict):
        check_output_file(mine, "control.evaluate")
    (tmp_path / "user.json").write_text('{"auroc": 1}')
    with pytest.raises(OutputConflict):
        check_output_file(tmp_path / "user.json", "anomaly.evaluate")


def test_write_json_writes_nan_as_null(tmp_path):
    import numpy as np

    write_json(tmp_path / "x.json", {"a": float("nan"), "b": [np.float32("inf"), 1.0], "c": np.array([np.nan])})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": None, "b": [None, 1.0], "c": [None]}


def test_tensor_metadata_refuses_a_config_edited_by_hand(tmp_path):
    import torch
    from safetensors.torch import save_file

    cfg = {"kind": "thing", "blocks": [7, 10]}
    save_file({"x": torch.zeros(2)}, str(tmp_path / "t.safetensors"), metadata=tensor_metadata(cfg))
    check_tensor_metadata(tmp_path / "t.safetensors", cfg)
    with pytest.raises(ArtifactError, match="edited by hand"):
        check_tensor_metadata(tmp_path / "t.safetensors", {**cfg, "blocks": [3]})


def test_remove_artifact_removes_what_its_marker_lists_and_keeps_a_users_file(tmp_path):
    from frozenvit.backbone.suite.artifacts import remove_artifact

    with atomic_dir(tmp_path / "a", "thing") as tmp:
        write_json(tmp / "config.json", {"kind": "thing"})
        (tmp / "sub").mkdir()
        (tmp / "sub" / "t.bin").write_bytes(b"x")
    (tmp_path / "a" / "sub" / "mine.txt").write_text("mine")
    assert remove_artifact(tmp_path / "a") == ["sub/mine.txt"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/sub", "a/sub/mine.txt"]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.txt").write_text("not ours")
    assert remove_artifact(tmp_path / "b") == ["x.txt"] and (tmp_path / "b" / "x.txt").exists()


def test_report_tables_show_a_dash_for_a_missing_number():
    from frozenvit.backbone.suite.report import html_table

    t = html_table([{"model": "SeasonalNaive", "DM p": float("nan")}, {"model": "ETS", "DM p": 0.01234}])
    assert "<td>&ndash;</td>" in t and "<td>0.01234</td>" in t and "nan" not in t
