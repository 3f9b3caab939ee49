"""Dense stride-8/16 targets, data roots, v1 default by name: tiny ViT student, random EfficientNet-Lite0 teacher."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

timm = pytest.importorskip("timm")

from frozenvit.backbone.distill.data import AugmentConfig, HeldOutSplitError, build_cache, list_images  # noqa: E402
from frozenvit.backbone.distill.dense import DenseHeads, cosine_dense_loss, dense_targets  # noqa: E402
from frozenvit.backbone.distill.teacher import EfficientNetTeacher  # noqa: E402
from frozenvit.backbone.distill.train import DistillConfig, distill, make_student  # noqa: E402

TINY = {"depth": 3, "embed_dim": 32, "num_heads": 2}   # patch 16: a 4x4 grid at 64 px, like 14x14 at 224
V1_SHA = "e971feb09780f19ef2eb1f47bd054e8eb048922a44d73383b701a5b5d8a6b339"


def _teacher() -> EfficientNetTeacher:
    torch.manual_seed(7)
    return EfficientNetTeacher(model=timm.create_model("tf_efficientnet_lite0", pretrained=False))


def _images(n: int = 16, size: int = 72) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _cfg(**kw) -> DistillConfig:
    base = dict(student_kwargs=TINY, img_size=64, epochs=4, batch_size=8, lr=3e-3, warmup_steps=1, w_kd=0.1,
                precision="fp32", log_every=1, ckpt_every_s=1e9, dense_blocks=(1, -1), w_s8=1.0, w_s16=0.5,
                augment=AugmentConfig(mix_prob=0.5))
    return DistillConfig(**{**base, **kw})


def test_dense_targets_resolve_the_last_block_and_drop_zero_weights():
    ts = dense_targets([7, 10, -1], 12, w_s8=1.0, w_s16=0.0)
    assert [(t.block, t.stride) for t in ts] == [(7, 8), (10, 8), (11, 8)]
    from frozenvit.backbone.suite.errors import UsageError

    with pytest.raises(UsageError, match="not a block"):
        dense_targets([12], 12, 1.0, 1.0)


def test_projectors_predict_the_teachers_stride8_and_stride16_grids():
    teacher = _teacher()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        maps, logits = teacher.maps_and_logits(x)
    by_stride = dict(zip(teacher.map_strides, maps))
    assert tuple(by_stride[8].shape) == (2, 40, 8, 8) and tuple(by_stride[16].shape) == (2, 112, 4, 4)
    student = make_student("vit_tiny_patch16_224", 64, **TINY)
    heads = DenseHeads(dense_targets([1, -1], 3, 1.0, 1.0), 32, 16, {8: 40, 16: 112})
    from frozenvit.backbone.model import vit_tokens

    final, mids = vit_tokens(student, x, [1, 2])
    preds = heads({**mids, 2: final}, student.num_prefix_tokens, (4, 4))
    assert {k: tuple(v.shape) for k, v in preds.items()} == {
        "b1_s8": (2, 40, 8, 8), "b1_s16": (2, 112, 4, 4), "b2_s8": (2, 40, 8, 8), "b2_s16": (2, 112, 4, 4)}
    losses = heads.losses(preds, by_stride)
    assert all(0.0 < float(v.detach()) < 2.0 for v in losses.values())


def test_cosine_dense_loss_ignores_scale_and_sees_direction():
    t = torch.randn(2, 40, 8, 8)
    ln = torch.nn.functional.layer_norm(t.permute(0, 2, 3, 1), (40,)).permute(0, 3, 1, 2)   # (2, 40, 8, 8)
    assert float(cosine_dense_loss(5.0 * ln, t)) == pytest.approx(0.0, abs=1e-5)
    assert float(cosine_dense_loss(-ln, t)) == pytest.approx(2.0, abs=1e-5)
    small = torch.nn.functional.avg_pool2d(t, 2)                        # a coarser target is resampled to pred's grid
    assert cosine_dense_loss(ln, small).ndim == 0


def test_exported_student_has_no_projector_keys_and_loads_with_the_standard_loader(tmp_path):
    from safetensors.torch import load_file

    from frozenvit.backbone import load_backbone

    model = distill(_teacher(), _images(), _cfg(epochs=1), tmp_path, progress=False)
    assert any(k.startswith("strided.") for k in model.state_dict())        # the projectors were trained...
    sd = load_file(tmp_path / "student.safetensors")
    bare = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=0, **TINY)
    assert set(sd) == set(bare.state_dict())                                # ...and are not exported
    assert tuple(sd["pos_embed"].shape) == (1, 1 + 16, 32)                  # native 4x4 grid at 64 px
    bb = load_backbone("vit_tiny_patch16_224", weights=tmp_path / "student.safetensors", img_size=64, **TINY)
    assert bb.config.grid == (4, 4)
    torch.testing.assert_close(bb.model.pos_embed.detach(), sd["pos_embed"].float())   # no resampling on load
    log = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert {"b1_s8", "b1_s16", "b2_s8", "b2_s16", "kd", "dense0", "dense2"} <= set(log[0])


def test_resume_with_dense_targets_equals_an_uninterrupted_run(tmp_path):
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    cfg = _cfg()
    straight = distill(_teacher(), _images(), cfg, tmp_path / "a", progress=False)
    cfg_b = _cfg(workers=2)                                                 # read-ahead threads: same batches
    distill(_teacher(), _images(), cfg_b, tmp_path / "b", max_steps=3, progress=False)
    ckpt = tmp_path / "b" / "ckpt"
    assert json.loads((ckpt / "state.json").read_text())["step"] == 3
    saved = load_file(ckpt / "model.safetensors")
    assert any(k.startswith("strided.heads.b1_s8.") for k in saved)        # projectors in the checkpoint
    moments = load_file(ckpt / "optim.safetensors")
    n_params = sum(1 for _ in straight.parameters())
    assert len({k.split(".")[0] for k in moments}) == n_params             # AdamW state of every parameter
    resumed = distill(_teacher(), _images(), cfg_b, tmp_path / "b", resume=True, progress=False)
    a, b = straight.state_dict(), resumed.state_dict()
    assert list(a) == list(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k)
    log_a = [json.loads(line)["loss"] for line in open(tmp_path / "a" / "log.jsonl")]
    log_b = [json.loads(line)["loss"] for line in open(tmp_path / "b" / "log.jsonl")]
    assert log_a == log_b


def test_read_ahead_gives_the_batches_of_the_synchronous_reader():
    from frozenvit.backbone.distill.data import BatchReader

    images = _images(20, 8)
    sync, ahead = BatchReader(images, 6, seed=3), BatchReader(images, 6, seed=3, ahead=3)
    got = [(sync.get(s, 7), ahead.get(s, 7)) for s in range(7)]               # crosses an epoch boundary (3 per epoch)
    ahead.close()
    assert all(torch.equal(a, b) for a, b in got)
    assert not torch.equal(got[0][0], got[3][0])                             # a new permutation in epoch 1


def test_a_vit_teacher_without_stride8_maps_is_refused_by_name(tmp_path):
    from frozenvit.backbone.distill.teacher import ViTTeacher
    from frozenvit.backbone.suite.errors import UsageError

    m = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=0, **TINY)
    with pytest.raises(UsageError, match="no map at stride"):
        distill(ViTTeacher(m), _images(), _cfg(), tmp_path, max_steps=1, progress=False)


def _png_folder(root, n):
    from PIL import Image

    root.mkdir(parents=True)
    for i in range(n):
        Image.fromarray(np.full((40, 50, 3), i * 20, np.uint8)).save(root / f"{i}.png")


def test_imagenette_val_is_refused_as_training_data(tmp_path):
    _png_folder(tmp_path / "imagenette" / "train" / "n01", 2)
    _png_folder(tmp_path / "imagenette" / "val" / "n01", 2)
    assert len(list_images(tmp_path / "imagenette" / "train")) == 2
    with pytest.raises(HeldOutSplitError, match="imagenette/val"):
        list_images(tmp_path / "imagenette" / "val")
    with pytest.raises(HeldOutSplitError):
        list_images(tmp_path / "imagenette")                                 # the parent would take val/ along
    from frozenvit.backbone.distill.cli import main

    with pytest.raises(HeldOutSplitError):
        main(["distill", "--data", str(tmp_path / "imagenette" / "train"),
              "--extra-data", str(tmp_path / "imagenette" / "val" / "n01"), "--out", str(tmp_path / "run")])


def test_extra_data_folders_are_cached_after_the_main_one(tmp_path):
    _png_folder(tmp_path / "a", 3)
    _png_folder(tmp_path / "b" / "sub", 2)
    one = build_cache(tmp_path / "a", tmp_path / "c1", 16, progress=False)
    both = build_cache([tmp_path / "a", tmp_path / "b"], tmp_path / "c2", 16, progress=False)
    assert one.shape == (3, 16, 16, 3) and both.shape == (5, 16, 16, 3)
    np.testing.assert_array_equal(both[:3], one)
    meta = json.loads((tmp_path / "c2" / "images_16.json").read_text())
    assert meta["files"][-1] == "1/sub/1.png" and len(meta["roots"]) == 2


def test_init_from_the_default_gives_a_native_224_grid_that_ship_and_load_keep(tmp_path):
    from safetensors.torch import save_file

    from frozenvit.backbone import load_backbone
    from frozenvit.backbone.distill.train import init_student_from, ship_student

    student = make_student("vit_tiny_patch16_224", 224)
    counts = init_student_from(student, "default")
    assert counts["copied"] == counts["student_tensors"]
    assert tuple(student.pos_embed.shape) == (1, 1 + 14 * 14, 192)
    save_file({k: v.half().contiguous() for k, v in student.state_dict().items()}, tmp_path / "s.safetensors")
    spec = ship_student(tmp_path / "s.safetensors", tmp_path / "assets", "v2test", train_img_size=224,
                        mean=(0.5,) * 3, std=(0.5,) * 3)           # no run config.json beside it: stated
    assert spec["train_grid"] == [14, 14]
    bb = load_backbone(spec["arch"], weights=tmp_path / "assets" / spec["file"], img_size=224)
    torch.testing.assert_close(bb.model.pos_embed.detach(), student.pos_embed.detach().half().float())


def test_previous_default_loads_by_name_with_its_checksum(tmp_path, monkeypatch):
    from frozenvit.backbone import load_backbone
    from frozenvit.backbone import loading
    from frozenvit.backbone.errors import BackboneUnavailable

    spec = json.loads((loading.ASSETS / "default_v1.json").read_text())
    assert spec["file"] == "vit_tiny_lite0distill_in10_128_e78.safetensors" and spec["sha256"] == V1_SHA
    bb = load_backbone("frozenvit-default-v1")
    assert bb.config.weights_sha256 == V1_SHA and bb.config.grid == (14, 14)
    assert not any(p.requires_grad for p in bb.model.parameters())
    import shutil

    shutil.copy(loading.ASSETS / spec["file"], tmp_path / spec["file"])
    (tmp_path / "default_v1.json").write_text(json.dumps({**spec, "sha256": "0" * 64}))
    monkeypatch.setattr(loading, "ASSETS", tmp_path)
    with pytest.raises(BackboneUnavailable, match="checksum"):
        load_backbone("frozenvit-default-v1")


def test_cache_is_decoded_again_when_an_image_changes_under_its_name_or_the_cache_is_truncated(tmp_path):
    from PIL import Image

    _png_folder(tmp_path / "a", 3)
    first = np.array(build_cache(tmp_path / "a", tmp_path / "c", 16, progress=False))
    again = np.array(build_cache(tmp_path / "a", tmp_path / "c", 16, progress=False))   # unchanged: reused
    np.testing.assert_array_equal(again, first)
    Image.new("RGB", (20, 20), (255, 0, 0)).save(tmp_path / "a" / "1.png")    # same name, new pixels
    changed = np.array(build_cache(tmp_path / "a", tmp_path / "c", 16, progress=False))
    assert (changed[1] == [255, 0, 0]).all()
    np.testing.assert_array_equal(changed[0], first[0])
    data = tmp_path / "c" / "images_16.u8"
    data.write_bytes(data.read_bytes()[:100])                                 # a cache cut short
    healed = build_cache(tmp_path / "a", tmp_path / "c", 16, progress=False)
    np.testing.assert_array_equal(healed, changed)
    (tmp_path / "c" / "images_16.json").write_text("{not json")              # a damaged record
    np.testing.assert_array_equal(build_cache(tmp_path / "a", tmp_path / "c", 16, progress=False), changed)
