"""Distillation loop on tiny models: loss goes down, resume is exact, CLI parser wires up."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")

from frozenvit.backbone.distill.cli import register  # noqa: E402
from frozenvit.backbone.distill.data import AugmentConfig, augment  # noqa: E402
from frozenvit.backbone.distill.train import DistillConfig, distill  # noqa: E402
from frozenvit.backbone.distill.teacher import ViTTeacher  # noqa: E402

TINY = {"depth": 2, "embed_dim": 32, "num_heads": 2, "patch_size": 8}


def _teacher() -> ViTTeacher:
    torch.manual_seed(123)
    m = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=10, **TINY)
    return ViTTeacher(m, spec="tiny")


def _images(n: int = 16, size: int = 36) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _cfg(**kw) -> DistillConfig:
    base = dict(student_kwargs=TINY, img_size=32, epochs=4, batch_size=8, lr=3e-3, warmup_steps=1, w_dense=20.0, w_kd=1.0,
                precision="fp32", log_every=1, ckpt_every_s=1e9,
                augment=AugmentConfig(scale=(1.0, 1.0), flip=False, jitter=0.0, mix_prob=0.0))
    return DistillConfig(**{**base, **kw})


def _log(path) -> list[dict]:
    return [json.loads(line) for line in open(path / "log.jsonl")]


@pytest.mark.slow
def test_distillation_reduces_loss_on_a_few_images(tmp_path):
    torch.set_num_threads(1)
    distill(_teacher(), _images(), _cfg(epochs=6), tmp_path, progress=False)
    log = _log(tmp_path)
    assert len(log) == 12
    assert np.mean([r["loss"] for r in log[-2:]]) < 0.85 * np.mean([r["loss"] for r in log[:2]])
    assert {"kd", "dense0", "dense1"} <= set(log[0])
    assert (tmp_path / "student.safetensors").is_file()


@pytest.mark.slow
def test_resume_continues_from_checkpoint_exactly(tmp_path):
    torch.set_num_threads(1)
    cfg = _cfg(augment=AugmentConfig(mix_prob=0.5))
    straight = distill(_teacher(), _images(), cfg, tmp_path / "a", progress=False)
    distill(_teacher(), _images(), cfg, tmp_path / "b", max_steps=3, progress=False)
    state = json.loads((tmp_path / "b" / "ckpt" / "state.json").read_text())
    assert state["step"] == 3 and not (tmp_path / "b" / "student.safetensors").exists()
    resumed = distill(_teacher(), _images(), cfg, tmp_path / "b", resume=True, progress=False)
    for (k, v), w in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(v, w, msg=k)
    assert [r["step"] for r in _log(tmp_path / "b")] == list(range(1, 9))


def test_exported_student_is_the_bare_vit(tmp_path):
    from safetensors.torch import load_file

    distill(_teacher(), _images(), _cfg(epochs=1), tmp_path, progress=False)
    sd = load_file(tmp_path / "student.safetensors")
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=0, **TINY)
    vit.load_state_dict(sd, strict=True)
    assert all(v.dtype == torch.float16 for v in sd.values())


def test_augment_is_a_pure_function_of_the_generator():
    u8 = torch.from_numpy(_images(4, 40))
    a = augment(u8, 32, AugmentConfig(), torch.Generator().manual_seed(5))  # (4, 3, 32, 32)
    b = augment(u8, 32, AugmentConfig(), torch.Generator().manual_seed(5))
    assert a.shape == (4, 3, 32, 32) and torch.equal(a, b)
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0


def test_identity_augment_reproduces_the_image():
    u8 = torch.from_numpy(_images(2, 32))
    x = augment(u8, 32, AugmentConfig(scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False, jitter=0.0, mix_prob=0.0),
                torch.Generator().manual_seed(0))
    torch.testing.assert_close(x, u8.permute(0, 3, 1, 2).float() / 255, atol=1e-5, rtol=0)


def test_register_adds_a_distill_parser():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["distill", "--data", "d", "--out", "o", "--resume", "--epochs", "2"])
    assert args.cmd == "distill" and args.resume and args.epochs == 2.0 and callable(args.func)


def test_ship_writes_a_spec_that_load_backbone_reads(tmp_path):
    from frozenvit.backbone import load_backbone
    from frozenvit.backbone.suite.artifacts import sha256_file
    from frozenvit.backbone.distill.train import ship_student

    distill(_teacher(), _images(), _cfg(epochs=1), tmp_path / "run", progress=False)
    spec = ship_student(tmp_path / "run" / "student.safetensors", tmp_path / "assets", "tiny", train_img_size=32,
                        img_size=64, model_kwargs=TINY)
    saved = json.loads((tmp_path / "assets" / "default.json").read_text())
    assert saved == spec and spec["sha256"] == sha256_file(tmp_path / "assets" / "tiny.safetensors")
    kw = {k: v for k, v in spec["model_kwargs"].items()}
    bb = load_backbone(spec["arch"], weights=tmp_path / "assets" / spec["file"], img_size=64, **kw)
    assert bb.config.grid == (8, 8)


def test_ship_with_a_version_makes_the_default_loadable_by_name_and_never_reuses_a_version(tmp_path):
    from frozenvit.backbone.errors import FrozenVitError
    from frozenvit.backbone.loading import embedded_names
    from frozenvit.backbone.distill.train import ship_student

    distill(_teacher(), _images(), _cfg(epochs=1), tmp_path / "run", progress=False)
    student, assets = tmp_path / "run" / "student.safetensors", tmp_path / "assets"
    spec = ship_student(student, assets, "tiny", train_img_size=32, img_size=64, model_kwargs=TINY, version=4)
    assert json.loads((assets / "default_v4.json").read_text()) == spec
    assert embedded_names(assets) == {"frozenvit-default-v4": "default_v4.json"}
    ship_student(student, assets, "tiny", train_img_size=32, img_size=64, model_kwargs=TINY, version=4)  # same weights
    (assets / "default_v10.json").write_text(json.dumps({**spec, "sha256": "f" * 64}))
    before = {p.name: p.read_bytes() for p in assets.iterdir()}
    with pytest.raises(FrozenVitError, match="version 10 is taken"):
        ship_student(student, assets, "other", train_img_size=32, img_size=64, model_kwargs=TINY, version=10)
    assert {p.name: p.read_bytes() for p in assets.iterdir()} == before       # nothing copied or rewritten
    assert list(embedded_names(assets)) == ["frozenvit-default-v4", "frozenvit-default-v10"]   # by number


def test_student_initialised_from_a_deeper_vits_first_blocks(tmp_path):
    import timm
    from safetensors.torch import save_file

    from frozenvit.backbone.distill.train import init_student_from, make_student

    deep = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=0, depth=4)
    save_file({k: v.contiguous() for k, v in deep.state_dict().items()}, tmp_path / "deep.safetensors")
    student = make_student("vit_tiny_patch16_224", 32, depth=2)            # shallower, 2x2 grid instead of 4x4
    counts = init_student_from(student, tmp_path / "deep.safetensors")
    assert counts["copied"] == counts["student_tensors"]                     # every student tensor came from `deep`
    for k in ("blocks.0.attn.qkv.weight", "blocks.1.mlp.fc2.bias", "patch_embed.proj.weight", "cls_token", "norm.weight"):
        assert torch.equal(student.state_dict()[k], deep.state_dict()[k]), k
    assert student.pos_embed.shape == (1, 1 + 4, 192)
    assert torch.equal(student.pos_embed[:, :1], deep.pos_embed[:, :1])      # CLS row kept, grid rows resampled


def test_default_vit_teacher_is_built_at_the_training_size():
    from frozenvit.backbone.distill.teacher import make_teacher

    t = make_teacher("default", img_size=112)
    maps, logits = t.maps_and_logits(torch.zeros(1, 3, 112, 112))
    assert [tuple(m.shape) for m in maps] == [(1, 192, 7, 7), (1, 192, 7, 7)] and logits is None
    assert t.default_pairs(4) == {1: (0,), 3: (1,)}


def test_init_from_a_run_folder_continues_student_and_training_heads(tmp_path):
    """--init RUN_DIR starts a new schedule from that run's last checkpoint, heads included (a shipped student
    alone would restart the logit head and projectors from random); a folder without a checkpoint is refused."""
    from safetensors.torch import load_file

    from frozenvit.backbone.errors import FrozenVitError

    torch.set_num_threads(1)
    distill(_teacher(), _images(), _cfg(epochs=1), tmp_path / "first", progress=False)
    before = load_file(tmp_path / "first" / "ckpt" / "model.safetensors")
    cont = distill(_teacher(), _images(), _cfg(epochs=1, lr=0.0, min_lr=0.0, init=str(tmp_path / "first")), tmp_path / "second",
                   progress=False)
    after = cont.state_dict()
    assert any(k.startswith("logits.") for k in before) and set(before) == set(after)
    for k, v in before.items():            # lr 0: nothing moved, so every tensor is the first run's
        torch.testing.assert_close(after[k], v, msg=k)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FrozenVitError, match="distill run with a checkpoint"):
        distill(_teacher(), _images(), _cfg(epochs=1, init=str(tmp_path / "empty")), tmp_path / "third", progress=False)
