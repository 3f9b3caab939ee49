"""Defects a docs trial found in `frozenvit distill` and `python -m frozenvit.backbone.distill ship`.

Tiny students (--student-kwargs), a few PNGs made here, 1-4 steps, and a copy-free --assets under tmp_path.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

timm = pytest.importorskip("timm")

from frozenvit.backbone.distill.cli import cli_main  # noqa: E402
from frozenvit.backbone.suite.artifacts import sha256_file  # noqa: E402

KW = '{"depth": 2, "embed_dim": 32, "num_heads": 2}'
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)


def _pngs(root: Path, n: int) -> Path:
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(root / f"{i}.png")
    return root


def _distill(tmp_path: Path, out: str, *extra: str, n: int = 8) -> int:
    data = tmp_path / "imgs" if n == 8 else tmp_path / f"imgs{n}"
    if not data.is_dir():
        _pngs(data, n)
    return cli_main(["distill", "--data", str(data), "--image-size", "32", "--epochs", "1", "--batch-size", "4",
                     "--student-kwargs", KW, "--out", str(tmp_path / out), *extra])


def _ship(*args: str) -> int:
    return cli_main(["ship", *args])


def _one_error_line(capsys, name: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error ({name}): "), err
    return err[0]


# ----------------------------------------------------------------------------- 1: ship reads the run's record
def _vit_teacher_file(tmp_path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    m = timm.create_model("deit_tiny_patch16_224", pretrained=False)
    path = tmp_path / "deit_tiny.safetensors"
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, path)
    return path


def test_ship_writes_the_runs_normalisation_arch_kwargs_and_size(tmp_path, capsys):
    teacher = _vit_teacher_file(tmp_path)
    assert _distill(tmp_path, "run", "--teacher", f"timm:deit_tiny_patch16_224:{teacher}", "--image-size", "48",
                    "--student", "deit_tiny_patch16_224") == 0
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert np.allclose(cfg["mean"], IMAGENET_MEAN) and np.allclose(cfg["std"], IMAGENET_STD)
    assert cfg["student"] == "deit_tiny_patch16_224" and cfg["img_size"] == 48
    # no --train-image-size: the size comes from the run (the old default 128 was refused for a 48-px run)
    assert _ship("--student", str(tmp_path / "run" / "student.safetensors"), "--name", "taught",
                 "--assets", str(tmp_path / "assets")) == 0
    spec = json.loads((tmp_path / "assets" / "default.json").read_text())
    assert np.allclose(spec["mean"], IMAGENET_MEAN) and np.allclose(spec["std"], IMAGENET_STD)
    assert spec["arch"] == "deit_tiny_patch16_224" and spec["train_img_size"] == 48 and spec["train_grid"] == [3, 3]
    assert spec["model_kwargs"] == {"num_classes": 0, "depth": 2, "embed_dim": 32, "num_heads": 2}
    from frozenvit.backbone import load_backbone

    kw = {k: v for k, v in spec["model_kwargs"].items()}
    bb = load_backbone(spec["arch"], weights=tmp_path / "assets" / spec["file"], img_size=48, **kw)
    assert bb.config.grid == (3, 3)
    capsys.readouterr()
    # a --train-image-size that contradicts the run is refused, not believed
    assert _ship("--student", str(tmp_path / "run" / "student.safetensors"), "--name", "taught2",
                 "--assets", str(tmp_path / "assets"), "--train-image-size", "64") == 2
    assert "--train-image-size 64" in _one_error_line(capsys, "UsageError")


def test_ship_refuses_a_student_without_its_run_config_unless_mean_and_std_are_given(tmp_path, capsys):
    assert _distill(tmp_path, "run") == 0
    lone = tmp_path / "lone" / "student.safetensors"
    lone.parent.mkdir()
    lone.write_bytes((tmp_path / "run" / "student.safetensors").read_bytes())
    assets = tmp_path / "assets"
    capsys.readouterr()
    assert _ship("--student", str(lone), "--name", "lone", "--assets", str(assets)) == 2
    assert "--mean and --std" in _one_error_line(capsys, "UsageError")
    assert not assets.exists()
    assert _ship("--student", str(lone), "--name", "lone", "--assets", str(assets),
                 "--mean", "0.1", "0.2", "0.3", "--std", "0.4", "0.5", "0.6") == 2       # kwargs unknown: grid/shape
    line = _one_error_line(capsys, "UsageError")                                           # check names it
    assert "tensors differ" in line and not assets.exists()


# ----------------------------------------------------------------------------- 2: no overwrite of shipped weights
def test_ship_never_overwrites_weights_of_another_content(tmp_path, capsys):
    assert _distill(tmp_path, "run") == 0
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "taken.safetensors").write_bytes(b"earlier default's weights")
    before = {p.name: p.read_bytes() for p in assets.iterdir()}
    capsys.readouterr()
    student = str(tmp_path / "run" / "student.safetensors")
    assert _ship("--student", student, "--name", "taken", "--assets", str(assets)) == 2
    assert "taken.safetensors" in _one_error_line(capsys, "OutputConflict")
    assert {p.name: p.read_bytes() for p in assets.iterdir()} == before                     # nothing copied
    assert _ship("--student", student, "--name", "mine", "--assets", str(assets), "--version", "5") == 0
    assert _ship("--student", student, "--name", "mine", "--assets", str(assets), "--version", "5") == 0   # same bytes
    assert sha256_file(assets / "mine.safetensors") == sha256_file(student)


# ----------------------------------------------------------------------------- 3: a stopped or finished run is kept
def test_a_stopped_run_is_not_started_over_without_resume_and_a_fresh_run_has_a_fresh_log(tmp_path, capsys):
    assert _distill(tmp_path, "run", "--epochs", "2", "--max-steps", "1") == 0
    ckpt = (tmp_path / "run" / "ckpt" / "model.safetensors").read_bytes()
    log = (tmp_path / "run" / "log.jsonl").read_text()
    capsys.readouterr()
    assert _distill(tmp_path, "run", "--epochs", "2", "--max-steps", "1") == 2
    line = _one_error_line(capsys, "UsageError")
    assert "holds a stopped distill run (step 1 of 4): add --resume to continue, or choose a new --out" in line
    assert (tmp_path / "run" / "ckpt" / "model.safetensors").read_bytes() == ckpt
    assert (tmp_path / "run" / "log.jsonl").read_text() == log
    assert _distill(tmp_path, "run", "--epochs", "2", "--lr", "1e-3", "--resume") == 2        # other settings
    assert "other settings" in _one_error_line(capsys, "UsageError")
    assert _distill(tmp_path, "run", "--epochs", "2", "--resume") == 0
    assert [json.loads(s)["step"] for s in (tmp_path / "run" / "log.jsonl").read_text().splitlines()] == [1, 4]
    student = (tmp_path / "run" / "student.safetensors").read_bytes()
    capsys.readouterr()
    assert _distill(tmp_path, "run", "--epochs", "2", "--image-size", "64") == 2              # finished: kept
    assert "finished distill run" in _one_error_line(capsys, "UsageError")
    assert (tmp_path / "run" / "student.safetensors").read_bytes() == student


def test_a_run_that_stopped_before_its_first_checkpoint_starts_a_fresh_log(tmp_path):
    assert _distill(tmp_path, "run", "--max-steps", "1") == 0
    import shutil

    shutil.rmtree(tmp_path / "run" / "ckpt")                                                   # killed before it
    assert _distill(tmp_path, "run") == 0
    assert [json.loads(s)["step"] for s in (tmp_path / "run" / "log.jsonl").read_text().splitlines()] == [2]


# ----------------------------------------------------------------------------- 4: python -m ... ship: named errors
def test_python_m_ship_reports_a_mistake_in_one_line_with_exit_2(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "frozenvit.backbone.distill", "ship", "--student",
                        str(tmp_path / "nope.safetensors"), "--name", "x", "--assets", str(tmp_path / "assets")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("error (UsageError): --student")
    assert not (tmp_path / "assets").exists()


def test_ship_version_taken_is_a_named_error(tmp_path, capsys):
    assert _distill(tmp_path, "run") == 0
    assets = tmp_path / "assets"
    assets.mkdir()
    for v in (3, 4):
        (assets / f"default_v{v}.json").write_text(json.dumps({"sha256": "f" * 64}))
    capsys.readouterr()
    assert _ship("--student", str(tmp_path / "run" / "student.safetensors"), "--name", "x", "--assets", str(assets),
                 "--version", "3") == 2
    line = _one_error_line(capsys, "UsageError")
    assert "version 3 is taken" in line and "--version 5" in line          # the lowest free one, not a taken 4


# ----------------------------------------------------------------------------- 5, 6, 7: checked before any output
@pytest.mark.parametrize("extra, name, words", [
    (["--student", "resnet18"], "UsageError", "--student resnet18"),
    (["--student", "no_such_model"], "UsageError", "--student no_such_model"),
    (["--student-kwargs", '{"depth": 0}'], "UsageError", "--student-kwargs"),
    (["--student-kwargs", '{"depth": 2, "embed_dim": 30, "num_heads": 4}'], "UsageError", "--student-kwargs"),
    (["--batch-size", "64"], "UsageError", "--batch-size 64 is more than the 8 images"),
    (["--dense-blocks", "99"], "UsageError", "--dense-blocks 99"),
    (["--init", "nope.safetensors"], "UsageError", "--init nope.safetensors"),
    (["--image-size", "70", "--student-kwargs", '{"depth": 1, "embed_dim": 32, "num_heads": 2}'], "GridMismatch",
     "70 px does not divide into the student's 16 px patches; use e.g. 64"),
])
def test_a_bad_input_is_a_named_error_and_nothing_is_written(tmp_path, capsys, extra, name, words):
    assert _distill(tmp_path, "out", *extra) == 2
    assert words in _one_error_line(capsys, name)
    assert not (tmp_path / "out").exists()


def test_init_from_a_run_of_another_student_is_refused_before_any_output(tmp_path, capsys):
    assert _distill(tmp_path, "run", "--max-steps", "1") == 0
    capsys.readouterr()
    assert _distill(tmp_path, "out", "--init", str(tmp_path / "run"),
                    "--student-kwargs", '{"depth": 2, "embed_dim": 48, "num_heads": 2}') == 2
    assert "its student differs from this one" in _one_error_line(capsys, "UsageError")
    assert not (tmp_path / "out").exists()


def test_a_one_block_student_trains(tmp_path):
    assert _distill(tmp_path, "run", "--student-kwargs", '{"depth": 1, "embed_dim": 32, "num_heads": 2}',
                    "--max-steps", "1") == 0


# ----------------------------------------------------------------------------- 11: ship --help
def test_ship_help_explains_name_and_assets_and_shows_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["ship", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "file stem of the shipped weights" in text and "refused if that file exists with other content" in text
    assert "folder to write into (default: this installation's backbone/assets" in text
    assert "--train-image-size PX the run's --image-size (default: read from the run's config.json" in text
