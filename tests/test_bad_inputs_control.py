"""`frozenvit control ...` refuses a user's mistake with a named error, exit 2, and writes nothing."""
import importlib.util
import json
import shutil

import pytest
import torch

from frozenvit.backbone.suite.cli import main

from test_control_policy import marked_token_cache, small

HAVE_METAWORLD = importlib.util.find_spec("metaworld") is not None

# (bad input, argv with {placeholders} for the files the fixture makes, the error class the user sees)
CASES = [
    ("--configs 0", "control evaluate --policy {pol} --configs 0", "UsageError"),
    ("--configs -3", "control evaluate --policy {pol} --configs -3", "UsageError"),
    ("--max-steps 0", "control evaluate --policy {pol} --max-steps 0", "UsageError"),
    ("--episodes 0", "control collect --task reach-v3 --out {new} --episodes 0", "UsageError"),
    ("--hold-steps -1", "control collect --task reach-v3 --out {new} --hold-steps -1", "UsageError"),
    ("--epochs 0", "control train --demos {demos} --out {new} --epochs 0", "UsageError"),
    ("--lr -1", "control train --demos {demos} --out {new} --lr -1", "UsageError"),
    ("--queries 0", "control train --demos {demos} --out {new} --queries 0", "UsageError"),
    ("--queries with --pooling cls", "control train --demos {demos} --out {new} --pooling cls --queries 8",
     "UsageError"),
    ("--blocks 99", "control train --demos {demos} --out {new} --blocks 99", "UsageError"),
    ("--blocks 1,99", "control train --demos {demos} --out {new} --blocks 1,99", "UsageError"),
    ("--blocks 1,1 (the same block twice)", "control train --demos {demos} --out {new} --blocks 1,1", "UsageError"),
    ("--blocks -1", "control train --demos {demos} --out {new} --blocks -1", "UsageError"),
    ("--heads 5 (does not divide 48)", "control train --demos {demos} --out {new} --heads 5", "ParameterError"),
    ("--chunk 0", "control train --demos {demos} --out {new} --chunk 0", "UsageError"),
    ("--backbone metaworld-fast with --image-size",
     "control train --demos {demos} --out {new} --backbone metaworld-fast --image-size 64", "UsageError"),
    ("--chunk 0 (latency)", "control latency --chunk 0", "UsageError"),
    ("--steps 0", "control latency --steps 0", "UsageError"),
    ("--budget-ms 0", "control latency --budget-ms 0", "UsageError"),
    ("--demos not a demo folder", "control train --demos {notdemos} --out {new}", "DemoError"),
    ("--demos manifest not JSON", "control train --demos {badmanifest} --out {new}", "DemoError"),
    ("--policy not a policy", "control evaluate --policy {notpol}", "ArtifactError"),
    ("--policy of the old format", "control evaluate --policy {old}", "ArtifactError"),
    ("--policy config.json edited", "control latency --policy {edited}", "ArtifactError"),
    ("--gifs without --out", "control evaluate --policy {pol} --gifs 1", "UsageError"),
    ("unknown --task (collect)", "control collect --task reach-v9 --out {new}", "TaskError"),
    ("unknown --task (evaluate)", "control evaluate --policy {pol} --task pick-it-up", "TaskError"),
]


@pytest.fixture
def inputs(tmp_path, make_tiny_vit, monkeypatch):
    from frozenvit.control import encoders

    torch.manual_seed(0)
    bb = make_tiny_vit()                                               # 48-d tokens, 4 blocks
    real = encoders.load_encoder
    monkeypatch.setattr(encoders, "load_encoder",                    # the shipped encoders by name, else the tiny one
                        lambda name=None, *a, **k: real(name, *a, **k) if name in encoders.BACKBONES else bb)
    paths = {k: tmp_path / k for k in ("pol", "old", "edited", "notpol", "demos", "notdemos", "badmanifest")}
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(paths["pol"])
    for name, change in (("old", lambda c: dict(c, format_version=1)),
                         ("edited", lambda c: dict(c, meta=dict(c["meta"], block=0)))):
        shutil.copytree(paths["pol"], paths[name])
        cfg = paths[name] / "config.json"
        cfg.write_text(json.dumps(change(json.loads(cfg.read_text()))))
    for name in ("notpol", "notdemos", "badmanifest", "demos"):
        paths[name].mkdir()
    (paths["notpol"] / "notes.txt").write_text("my notes")
    (paths["notdemos"] / "a.png").write_bytes(b"not a demo")
    (paths["badmanifest"] / "manifest.json").write_text("{")
    (paths["demos"] / "manifest.json").write_text(json.dumps(dict(     # a demo folder with no episodes yet
        kind="control.demos", format_version=2, task="reach-v3", camera="corner", image_size=64, max_steps=100,
        hold_steps=0, render=dict(shadows=False, reflections=False, offsamples=0),
        expert="fingertips", episodes=[], failed_configs=[])))
    return {**{k: str(v) for k, v in paths.items()}, "new": str(tmp_path / "new")}


@pytest.mark.parametrize("label,argv,error", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_a_named_error_with_exit_2_and_nothing_written(tree_snapshot, label, argv, error, inputs,
                                                                       tmp_path, capsys):
    if "--task" in argv and "reach-v3" not in argv and not HAVE_METAWORLD:
        pytest.skip("Meta-World is not installed")
    before = tree_snapshot(tmp_path)
    try:
        code = main(argv.format(**inputs).split())
    except SystemExit as e:                                            # argparse refuses while parsing
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error ({error})" in err and len(err.strip().splitlines()[-1]) > 20, err
    assert "Traceback" not in err and "bug in frozenvit" not in err
    assert tree_snapshot(tmp_path) == before


def test_the_table_covers_every_control_command():
    assert {argv.split()[1] for _, argv, _ in CASES} == {"collect", "train", "evaluate", "latency"}
    assert len({label for label, _, _ in CASES}) == len(CASES) >= 10
