"""No command deletes or overwrites what frozenvit did not write: every `--out` (and --checkpoint, and the
--out FILE of commands that write one file) that points at a user's folder or file is refused with exit 2
before any work."""
import pytest

from frozenvit.backbone.errors import ArtifactError, OutputConflict

from frozenvit.backbone.suite.cli import main

# (argv with {out} for the user's path, the kind of path: "dir" or "file")
COMMANDS = {
    "anomaly fit": ("anomaly fit --data {data} --out {out}", "dir"),
    "anomaly predict": ("anomaly predict --model {data} --images {data} --out {out}", "dir"),
    "anomaly evaluate": ("anomaly evaluate --model {data} --data {data} --out {out}", "file"),
    "anomaly audit": ("anomaly audit --data {data} --out {out}", "file"),
    "anomaly synth": ("anomaly synth --out {out}", "dir"),
    "control collect": ("control collect --task reach-v3 --out {out}", "dir"),
    "control train": ("control train --demos {data} --out {out}", "dir"),
    "control train --checkpoint": ("control train --demos {data} --out {fresh} --checkpoint {out}", "dir"),
    "control evaluate": ("control evaluate --policy {data} --out {out}", "dir"),
    "control evaluate --gifs": ("control evaluate --policy {data} --out {out} --gifs 1", "dir"),
    "control latency": ("control latency --out {out}", "dir"),
    "control latency --budget-ms": ("control latency --out {out} --budget-ms 1", "dir"),
    "forecast backtest": ("forecast backtest --csv {data}/series.csv --h 4 --out {out}", "dir"),
    "forecast paper": ("forecast paper --csv {data}/series.csv --out {out}", "file"),
    "backbone inspect": ("backbone inspect --images {data} --out {out}", "dir"),
    "distill": ("distill --data {data} --out {out}", "dir"),
    "demo": ("demo --quick --out {out}", "dir"),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
@pytest.mark.parametrize("where", ["beside", "inside"])
def test_a_users_files_survive_every_command(tree_snapshot, name, where, tmp_path, capsys):
    argv, kind = COMMANDS[name]
    data = tmp_path / "data"
    data.mkdir()
    (data / "series.csv").write_text("unique_id,ds,y\na,1,1.0\n")
    (data / "thesis.tex").write_text("years of work")
    if kind == "file":
        out = tmp_path / "results.json" if "--hist" not in argv else tmp_path / "figure.png"
        out.write_bytes(b"the user's own file")
    elif where == "inside":
        out = data                                 # --out pointing at the data itself
    else:
        out = tmp_path / "thesis"
        out.mkdir()
        (out / "chapter1.tex").write_text("more work")
    before = tree_snapshot(tmp_path)
    code = main(argv.format(data=data, out=out, fresh=tmp_path / "fresh").split())
    err = capsys.readouterr().err
    assert code == 2, err
    assert "OutputConflict" in err and "never deletes or overwrites" in err
    assert tree_snapshot(tmp_path) == before            # nothing removed, changed or added


def _png(path):
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(path)


def test_a_model_folder_without_our_marker_is_a_users_folder_and_fit_refuses_it(tree_snapshot, tmp_path, capsys):
    """A model folder copied by a tool that drops dotfiles: config.json says patchcore, but the notes are the user's."""
    _png(tmp_path / "data" / "good.png")
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text('{"kind": "anomaly.patchcore", "format_version": 1}')
    (out / "notes.txt").write_text("what I saw on line 3")
    (out / "myplots").mkdir()
    (out / "myplots" / "roc.png").write_bytes(b"png")
    before = tree_snapshot(tmp_path)
    code = main(["anomaly", "fit", "--data", str(tmp_path / "data"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "OutputConflict" in err and ".frozenvit.json" in err, err
    assert tree_snapshot(tmp_path) == before


def _thing(path, version):
    from frozenvit.backbone.suite.artifacts import atomic_dir, write_json

    with atomic_dir(path, "thing") as tmp:
        write_json(tmp / "config.json", {"kind": "thing", "format_version": version})


@pytest.mark.parametrize("lookalike", [".model.old-keep", ".model.tmp-x", ".model.tmp-abc123"])
def test_folders_named_like_our_temporaries_are_never_removed(tree_snapshot, tmp_path, lookalike):
    user = tmp_path / lookalike
    user.mkdir()
    (user / ".frozenvit.json").write_text('{"kind": "thing"}')     # even one that copies our marker
    (user / "keep.txt").write_text("mine")
    _thing(tmp_path / "model", 1)
    _thing(tmp_path / "model", 2)                                  # a replace cleans our stale temporaries only
    assert (user / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", lookalike])


def test_a_users_lookalike_folder_is_never_recovered_into_a_missing_artifact(tree_snapshot, tmp_path):
    from frozenvit.backbone.suite.artifacts import read_config

    user = tmp_path / ".model.old-keep"
    user.mkdir()
    (user / ".frozenvit.json").write_text('{"kind": "thing", "files": {}}')
    (user / "config.json").write_text('{"kind": "thing", "format_version": 1}')
    before = tree_snapshot(tmp_path)
    with pytest.raises(ArtifactError, match="does not exist"):
        read_config(tmp_path / "model", "thing", 1)
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("victim", ["bank.bin", "config.json", "member/0/config.json"])
def test_a_changed_file_of_an_artifact_is_refused_on_load(tmp_path, victim):
    from frozenvit.backbone.suite.artifacts import atomic_dir, read_config, write_json

    with atomic_dir(tmp_path / "m", "thing") as tmp:
        write_json(tmp / "config.json", {"kind": "thing", "format_version": 1, "threshold": 0.5})
        (tmp / "bank.bin").write_bytes(bytes(range(256)))
        write_json(tmp / "member" / "0" / "config.json", {"threshold": 0.1})
    assert read_config(tmp_path / "m", "thing", 1)["threshold"] == 0.5
    f = tmp_path / "m" / victim
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01                                   # one flipped bit
    f.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="changed after it was written|not valid JSON"):
        read_config(tmp_path / "m", "thing", 1)


@pytest.mark.parametrize("how", ["file-as-parent", "read-only-parent"])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(tmp_path, how):
    import os

    from frozenvit.backbone.suite.artifacts import check_artifact_dir, check_output_dir

    if how == "file-as-parent":
        (tmp_path / "a").write_text("a file")
        out = tmp_path / "a" / "model"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        (tmp_path / "ro").mkdir(mode=0o555)
        out = tmp_path / "ro" / "model"
    for check in (check_artifact_dir, check_output_dir):
        with pytest.raises(OutputConflict, match="cannot be written"):
            check(out, "thing")
