"""ViT families beyond timm's VisionTransformer, ViTs without prefix tokens, and checkpoint layouts/grids.

Every model is a tiny random timm model (2 blocks, width 32), compared with timm itself: hooks on its blocks at
the native size, timm's dynamic_img_size or timm's own loader (pretrained_cfg_overlay=dict(file=...)) elsewhere.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import save_file

from frozenvit.backbone import load_backbone
from frozenvit.backbone.errors import BackboneUnavailable, GridMismatch, PreprocessingMismatch
from frozenvit.backbone.suite.errors import UsageError

TINY = dict(depth=2, embed_dim=32, num_heads=2)


def _timm(name: str, seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = timm.create_model(name, pretrained=False, **{**TINY, **kw}).eval()
    with torch.no_grad():                         # random, not zero, position/prefix parameters: a mix-up shows
        for k in ("pos_embed", "cls_token", "reg_token"):
            if getattr(m, k, None) is not None:
                getattr(m, k).normal_(0, 0.5)
    return m


def _save(m: torch.nn.Module, path, metadata: dict | None = None) -> str:
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(path), metadata=metadata)
    return str(path)


def _block_outputs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Each block's output (B, N, C) of timm's forward, through hooks."""
    outs: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda m, a, o: outs.append(o)) for b in model.blocks]
    try:
        with torch.no_grad():
            model.forward_features(x)
    finally:
        for h in hooks:
            h.remove()
    return outs


def _as_grid(tokens: torch.Tensor, prefix: int, hw: tuple[int, int]) -> torch.Tensor:
    return tokens[:, prefix:].reshape(tokens.shape[0], *hw, -1).permute(0, 3, 1, 2)     # (B, C, h, w)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _pixels(n: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(-1.5, 1.5, (n, 3, h, w)).astype("float32"))


# 1. no prefix tokens ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_vit_without_prefix_tokens_gives_each_images_grid(n):
    bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=32, class_token=False,
                       global_pool="avg", **TINY)
    assert bb.config.num_prefix_tokens == 0
    x = _pixels(n, 32, 32)
    ref = [_as_grid(t, 0, (2, 2)) for t in _block_outputs(bb.model, x)]
    g = bb.patch_grids(x, blocks=[0, 1], check=False)
    for b in (0, 1):
        assert g[b].shape == (n, 32, 2, 2)
        assert g.prefix[b].shape == (n, 0, 32)
        assert _rel(g[b], ref[b]) < 1e-5
    split = bb.patch_grids(x, blocks=[1], batch_size=2, check=False)
    assert split[1].shape == (n, 32, 2, 2) and _rel(split[1], ref[1]) < 1e-5


def test_gap_vit_without_prefix_tokens_exports_grids_only():
    from frozenvit.backbone.export import PatchGridGraph

    bb = load_backbone("vit_medium_patch16_gap_240", pretrained=False, img_size=32, **TINY)
    assert bb.config.num_prefix_tokens == 0
    x = _pixels(3, 32, 32)
    out = PatchGridGraph(bb, [0, 1]).eval()(x)
    g, _ = bb.forward_pixels(x, [0, 1])
    assert len(out) == 2 and all(torch.equal(o, g[b]) for o, b in zip(out, (0, 1)))


# 2. families ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, size, prefix, registers", [
    ("eva02_tiny_patch14_224", 28, 1, 0),             # abs pos embed + RoPE, CLS
    ("vit_small_patch16_dinov3", 32, 5, 4),           # DINOv3 (timm's eva module): RoPE only, CLS + 4 registers
])
def test_eva_family_is_a_vit_matching_timm_at_native_and_other_sizes(tmp_path, name, size, prefix, registers):
    m = _timm(name, img_size=size)
    w = _save(m, tmp_path / "w.safetensors")
    bb = load_backbone(name, weights=w, img_size=size, **TINY)
    c = bb.config
    assert (c.kind, c.depth, c.num_prefix_tokens, c.num_registers, c.has_cls) == ("vit", 2, prefix, registers, True)
    p = c.patch_size
    x = _pixels(2, size, size)
    ref = _block_outputs(m, x)
    g = bb.patch_grids(x, blocks=[0, 1], check=False)
    for b in (0, 1):
        assert _rel(g[b], _as_grid(ref[b], prefix, (size // p, size // p))) < 1e-5
        assert _rel(g.prefix[b], ref[b][:, :prefix]) < 1e-5
    # another, non-square size: equal to timm's own dynamic_img_size (position embedding and RoPE follow the grid)
    H, W = 2 * p, 3 * p
    bb2 = load_backbone(name, weights=w, img_size=(H, W), **TINY)
    dyn = timm.create_model(name, pretrained=False, img_size=size, dynamic_img_size=True, **TINY).eval()
    dyn.load_state_dict(m.state_dict())
    x2 = _pixels(2, H, W, seed=1)
    ref2 = _block_outputs(dyn, x2)
    g2 = bb2.patch_grids(x2, blocks=[1], check=False)
    assert g2[1].shape == (2, 32, 2, 3)
    assert _rel(g2[1], _as_grid(ref2[1], prefix, (2, 3))) < 1e-4


def test_relpos_vit_matches_timm_and_timms_loader_at_another_size(tmp_path):
    name = "vit_relpos_small_patch16_224"
    m = _timm(name, img_size=32)
    w = _save(m, tmp_path / "w.safetensors")
    bb = load_backbone(name, weights=w, img_size=32, **TINY)
    assert (bb.config.kind, bb.config.depth) == ("vit", 2)
    x = _pixels(2, 32, 32)
    ref = _block_outputs(m, x)
    g = bb.patch_grids(x, blocks=[0], check=False)
    assert _rel(g[0], _as_grid(ref[0], 0, (2, 2))) < 1e-5
    bb2 = load_backbone(name, weights=w, img_size=48, **TINY)
    theirs = timm.create_model(name, pretrained=True, img_size=48, pretrained_cfg_overlay=dict(file=w), **TINY).eval()
    x2 = _pixels(1, 48, 48)
    assert _rel(bb2.patch_grids(x2, blocks=[1], check=False)[1], _as_grid(_block_outputs(theirs, x2)[1], 0, (3, 3))) < 1e-5


@pytest.mark.parametrize("name", ["beitv2_base_patch16_224", "samvit_base_patch16", "vit_tiny_r_s16_p8_224"])
def test_unsupported_vit_family_is_refused_by_name(name):
    with pytest.raises(BackboneUnavailable, match="does not support.*Supported: plain ViTs"):
        load_backbone(name, pretrained=False, **TINY)


def test_fixed_size_features_model_at_another_size_is_a_grid_mismatch():
    with pytest.raises(GridMismatch, match="fixed input size"):
        load_backbone("swin_tiny_patch4_window7_224", pretrained=False, img_size=64, depths=(1, 1, 1, 1),
                      embed_dim=32, num_heads=(1, 1, 1, 1))


def test_info_reports_eva_as_a_vit_and_inspect_refuses_it(tmp_path, capsys):
    from frozenvit.backbone.suite.cli import main

    w = _save(_timm("eva02_tiny_patch14_224", img_size=28), tmp_path / "eva.safetensors")
    # TINY kwargs cannot go through the CLI: the tiny file is refused as another model, but never as "a CNN"
    assert main(["backbone", "info", "--backbone", "eva02_tiny_patch14_224"]) == 0
    out = capsys.readouterr().out
    assert "kind            vit" in out and "blocks          12" in out and "1 CLS" in out
    from frozenvit.backbone.diagnostics import inspect_backbone
    from frozenvit.backbone.suite.errors import ParameterError

    bb = load_backbone("eva02_tiny_patch14_224", weights=w, img_size=28, **TINY)
    with pytest.raises(ParameterError, match="RoPE"):
        inspect_backbone(bb, [np.zeros((28, 28, 3), np.uint8)])


# 3. the facebookresearch DINOv2-with-registers layout ---------------------------------------------------------

def test_original_dinov2_register_layout_loads_as_timm_loads_it(tmp_path):
    name = "vit_small_patch14_reg4_dinov2"
    m = _timm(name, img_size=56)
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    pos0 = torch.randn(1, 1, 32)
    orig = {k: v for k, v in sd.items() if k not in ("cls_token", "reg_token", "pos_embed")}
    orig.update(cls_token=sd["cls_token"] - pos0, pos_embed=torch.cat([pos0, sd["pos_embed"]], 1),
                register_tokens=sd["reg_token"], mask_token=torch.zeros(1, 32))
    w = str(tmp_path / "dinov2_vits14_reg4_pretrain.pth")
    torch.save(orig, w)
    for size in (56, 28):
        bb = load_backbone(name, weights=w, img_size=size, **TINY)
        theirs = timm.create_model(name, pretrained=True, img_size=size, pretrained_cfg_overlay=dict(file=w),
                                   **TINY).eval()
        x = _pixels(1, size, size)
        s = size // 14
        assert _rel(bb.patch_grids(x, blocks=[1], check=False)[1], _as_grid(_block_outputs(theirs, x)[1], 5, (s, s))) < 1e-5


# 4. weights of another width that carry layer scale ------------------------------------------------------------

def test_layer_scale_weights_of_another_width_are_backbone_unavailable(tmp_path):
    w = _save(_timm("vit_small_patch14_reg4_dinov2", img_size=56), tmp_path / "w.safetensors")   # ls1.gamma keys
    with pytest.raises(BackboneUnavailable, match="right model name"):
        load_backbone("vit_small_patch14_dinov2", weights=w, img_size=28, depth=2, embed_dim=64, num_heads=2)


# 5. mean 0 / std 1 checkpoints -------------------------------------------------------------------------------

def test_mean0_std1_checkpoint_accepts_its_own_preprocessed_batch():
    bb = load_backbone("vit_base_patch16_224_miil", pretrained=False, img_size=32, **TINY)
    assert bb.config.mean == (0.0, 0.0, 0.0) and bb.config.std == (1.0, 1.0, 1.0)
    img = np.random.default_rng(0).integers(0, 256, (40, 40, 3), dtype=np.uint8)
    pixels = bb.preprocess([img]).pixels
    assert torch.equal(bb.patch_grids(pixels, blocks=1)[1], bb.patch_grids([img], blocks=1)[1])


# 6. non-square checkpoints -------------------------------------------------------------------------------------

def _nonsquare(tmp_path, **meta):
    m = _timm("vit_tiny_patch16_224", img_size=(96, 160))                 # a 6x10 grid
    return m, _save(m, tmp_path / "ns.safetensors", metadata=meta or None)


def test_nonsquare_checkpoint_of_unknown_shape_is_refused_with_the_cure(tmp_path):
    _, w = _nonsquare(tmp_path)
    with pytest.raises(GridMismatch, match=r"weights_img_size=\(H, W\).*\(96, 160\) for a 6x10 grid"):
        load_backbone("vit_tiny_patch16_224", weights=w, img_size=64, **TINY)


@pytest.mark.parametrize("how", ["argument", "metadata"])
def test_nonsquare_checkpoint_with_stated_size_matches_timm_dynamic_size(tmp_path, how):
    m, w = _nonsquare(tmp_path, **({"img_size": "96,160"} if how == "metadata" else {}))
    kw = {"weights_img_size": (96, 160)} if how == "argument" else {}
    dyn = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=(96, 160), dynamic_img_size=True,
                            **TINY).eval()
    dyn.load_state_dict(m.state_dict())
    for size in ((160, 96), (64, 64)):                  # the transposed grid (same token count) and another one
        bb = load_backbone("vit_tiny_patch16_224", weights=w, img_size=size, **kw, **TINY)
        x = _pixels(1, *size)
        hw = (size[0] // 16, size[1] // 16)
        assert _rel(bb.patch_grids(x, blocks=[1], check=False)[1], _as_grid(_block_outputs(dyn, x)[1], 1, hw)) < 1e-5


def test_nonsquare_checkpoint_taken_as_the_built_grid_says_so(tmp_path, caplog):
    _, w = _nonsquare(tmp_path)
    with caplog.at_level(logging.WARNING, logger="frozenvit.backbone"):
        load_backbone("vit_tiny_patch16_224", weights=w, img_size=(160, 96), allow_interpolation=False, **TINY)
    assert "weights_img_size" in caplog.text


# 7. FlexiViT resampling -----------------------------------------------------------------------------------------

def test_flexivit_position_embeddings_resampled_as_timms_loader(tmp_path):
    w = _save(_timm("flexivit_small", img_size=48), tmp_path / "flexi.safetensors")
    bb = load_backbone("flexivit_small", weights=w, img_size=80, **TINY)
    theirs = timm.create_model("flexivit_small", pretrained=True, img_size=80, pretrained_cfg_overlay=dict(file=w),
                               **TINY)
    assert torch.equal(bb.model.pos_embed, theirs.pos_embed)


# 8. messages ---------------------------------------------------------------------------------------------------

def test_weights_naming_a_folder_says_it_is_a_folder(tmp_path):
    with pytest.raises(BackboneUnavailable, match="is a folder"):
        load_backbone("vit_tiny_patch16_224", weights=tmp_path)


def test_embedded_backbone_with_weights_says_it_has_its_own():
    with pytest.raises(UsageError, match="has its own weights.*drop weights.*timm architecture"):
        load_backbone("embedded", weights="w.safetensors")


def test_tensor_of_a_size_off_the_patches_is_told_a_size_that_divides():
    bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=32, **TINY)
    with pytest.raises(GridMismatch, match=r"img_size=\(48, 48\)") as e:
        bb.patch_grids(torch.zeros(1, 3, 50, 50), check=False)
    load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=(48, 48), **TINY)   # the advice works
    assert "(50, 50)" not in str(e.value)


def test_image_size_of_one_14px_patch_is_accepted_on_the_command_line(capsys):
    from frozenvit.backbone.suite.cli import main

    assert main(["backbone", "info", "--backbone", "vit_small_patch14_dinov2", "--image-size", "14"]) == 0
    assert "1x1 tokens" in capsys.readouterr().out


def test_pth_with_numpy_scalars_loads(tmp_path):
    m = _timm("vit_tiny_patch16_224", img_size=32)
    w = tmp_path / "ckpt.pth"
    torch.save({"model": m.state_dict(), "best_acc1": np.float64(81.5), "epoch": np.int64(3)}, w)
    bb = load_backbone("vit_tiny_patch16_224", weights=w, img_size=32, **TINY)
    assert torch.equal(bb.model.pos_embed, m.pos_embed)


def test_pth_with_pickled_objects_is_refused_truthfully(tmp_path):
    w = tmp_path / "ckpt.pth"
    torch.save({"model": {"x": torch.zeros(1)}, "args": np.array([1, 2], dtype=object)}, w)
    with pytest.raises(BackboneUnavailable, match="pickled Python objects.*safetensors"):
        load_backbone("vit_tiny_patch16_224", weights=w)


# 9. what the preprocessing check catches, and what it cannot -------------------------------------------------

def test_preprocessing_check_catches_scale_errors_but_not_other_statistics_in_range():
    bb = load_backbone("vit_small_patch14_dinov2", pretrained=False, img_size=42, **TINY)   # ImageNet statistics
    img = np.random.default_rng(0).integers(0, 256, (1, 42, 42, 3), dtype=np.uint8)
    raw = torch.from_numpy(img).permute(0, 3, 1, 2).float()                                  # 0..255
    good = bb.preprocess(list(img)).pixels
    for bad in (raw, raw / 255, (good - bb.preprocess.mean) / bb.preprocess.std):           # 0-255, [0, 1], twice
        with pytest.raises(PreprocessingMismatch):
            bb.patch_grids(bad)
    # documented as NOT caught: mean = std = 0.5 lands inside the range that ImageNet statistics allow
    bb.patch_grids((raw / 255 - 0.5) / 0.5)
