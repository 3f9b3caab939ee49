"""No command deletes or overwrites what frozenvit did not write: every `--out` (and --json, --hist,
--gif-dir, --checkpoint) that points at a user's folder or file is refused with exit 2 before any work."""
import pytest

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
    "control evaluate --json": ("control evaluate --policy {data} --json {out}", "file"),
    "control evaluate --gif-dir": ("control evaluate --policy {data} --gif-dir {out} --gifs 1", "dir"),
    "control latency --json": ("control latency --json {out}", "file"),
    "control latency --hist": ("control latency --hist {out}", "file"),
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
