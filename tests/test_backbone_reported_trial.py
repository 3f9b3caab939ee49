"""What a new user's trial of the backbone found: checkpoint grids, families, the preprocessing check, checkpoint
files (pickled code, wrappers, corrupted bytes), the frozen state and what `backbone info` says.

Every model here is a tiny random timm model (one or two blocks, 32 channels, a few tokens).
"""
import logging
import os
import warnings

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import save_file

from frozenvit.backbone import load_backbone
from frozenvit.backbone.errors import BackboneUnavailable, GridMismatch, PreprocessingMismatch

TINY = dict(depth=1, embed_dim=32, num_heads=2)


def _timm(name: str, seed: int = 0, **kw) -> torch.nn.Module:
    """A random timm model whose position embedding and prefix tokens are random too (a mix-up shows)."""
    torch.manual_seed(seed)
    m = timm.create_model(name, pretrained=False, **{**TINY, **kw}).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n in ("pos_embed", "cls_token", "reg_token", "dist_token"):
                p.normal_(0, 0.5)
    return m


def _sd(m: torch.nn.Module) -> dict:
    return {k: v.contiguous().clone() for k, v in m.state_dict().items()}


def _save(m: torch.nn.Module, path, **kw):
    save_file(_sd(m), str(path), **kw)
    return path


def _pixels(h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(seed)).clamp(-1, 1)


def _last_block_grid(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """timm's own tokens after the last block, as a (B, C, h, w) grid."""
    with torch.no_grad():
        tokens = m.blocks(m.norm_pre(m._pos_embed(m.patch_embed(x))))           # (B, P + h*w, C)
    h, w = m.patch_embed.dynamic_feat_size(x.shape[-2:]) if m.dynamic_img_size else m.patch_embed.grid_size
    return tokens[:, m.num_prefix_tokens:].reshape(x.shape[0], h, w, -1).permute(0, 3, 1, 2)


# 1. a non-square checkpoint whose token count is a square number ---------------------------------------------------

def test_nonsquare_checkpoint_with_a_square_token_count_loads_at_its_own_size(tmp_path, caplog):
    m = _timm("vit_tiny_patch16_224", img_size=(64, 16))                 # a 4x1 grid: 4 tokens, also 2x2
    w = _save(m, tmp_path / "w.safetensors")
    with caplog.at_level(logging.WARNING, logger="frozenvit.backbone"):
        bb = load_backbone("vit_tiny_patch16_224", weights=w, img_size=(64, 16), **TINY)
    assert torch.equal(bb.model.pos_embed, m.pos_embed)                  # taken as it is, not resampled from 2x2
    x = _pixels(64, 16)
    torch.testing.assert_close(bb.patch_grids(x, blocks=0, check=False)[0], _last_block_grid(m, x))
    assert "taking them as 4x1" in caplog.text and "weights_img_size=(32, 32)" in caplog.text


def test_square_checkpoint_loaded_at_a_grid_of_its_token_count_resamples_when_its_size_is_stated(tmp_path):
    m = _timm("vit_tiny_patch16_224", img_size=32)                       # 2x2
    w = _save(m, tmp_path / "w.safetensors")
    bb = load_backbone("vit_tiny_patch16_224", weights=w, img_size=(64, 16), weights_img_size=(32, 32), **TINY)
    dyn = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, dynamic_img_size=True, **TINY)
    dyn.load_state_dict(m.state_dict())
    x = _pixels(64, 16)
    torch.testing.assert_close(bb.patch_grids(x, blocks=0, check=False)[0], _last_block_grid(dyn.eval(), x))


# 2. single-scale models outside the supported families ------------------------------------------------------------

@pytest.mark.parametrize("name, kw", [
    ("convit_tiny", dict(depth=3, local_up_to_layer=1)), ("mixer_s16_224", {}), ("volo_d1_224", {}),
    ("gemma4_vit_167m", {}), ("deepseek_vit_412m", {}), ("qwen3_vit_88m", {}), ("convmixer_768_32", {}),
])
def test_single_scale_models_are_refused_rather_than_built_as_convnets(name, kw):
    with pytest.raises(BackboneUnavailable, match=r"not a ConvNet pyramid.*does not support.*Supported: plain ViTs"):
        load_backbone(name, pretrained=False, **kw)


@pytest.mark.parametrize("name, size, kw", [
    ("test_efficientnet", 64, {}), ("resnet18", 64, dict(output_stride=8)),             # strides 2, 4, 8, 8, 8
    ("sequencer2d_s", 56, dict(layers=(1,) * 4, embed_dims=(8,) * 4, hidden_sizes=(4,) * 4)),   # 7, 14, 14
    ("hiera_tiny_224", 224, dict(embed_dim=8, num_heads=1, stages=(1, 1, 1, 1))),          # a transformer pyramid
])
def test_pyramids_are_still_built_features_only(name, size, kw):
    assert load_backbone(name, pretrained=False, img_size=size, **kw).config.kind == "cnn"


# 3. the preprocessing check on light, low-contrast images ---------------------------------------------------------

@pytest.mark.parametrize("name, low, high", [("vit_small_patch14_dinov2", 125, 161),      # ImageNet mean/std
                                             ("vit_tiny_patch16_224", 128, 256)])        # mean = std = 0.5
def test_a_batch_made_by_preprocess_is_accepted_silently_even_when_all_values_lie_in_0_1(name, low, high):
    bb = load_backbone(name, pretrained=False, img_size=56 if "14" in name else 64, **TINY)   # >= 3 x 32 x 32 values
    size = bb.config.img_size[0]
    img = np.random.default_rng(0).integers(low, high, (size, size, 3), dtype=np.uint8)    # not resized: no overshoot
    pixels = bb.preprocess([img]).pixels
    assert float(pixels.min()) >= 0 and float(pixels.max()) <= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(bb.patch_grids(pixels, blocks=0)[0], bb.patch_grids([img], blocks=0)[0])


def test_a_unit_range_batch_resampled_in_float_is_accepted_with_a_warning():
    bb = load_backbone("vit_small_patch14_dinov2", pretrained=False, img_size=56, **TINY)
    img = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (1, 60, 60, 3), dtype=np.uint8))
    unit = torch.nn.functional.interpolate(img.permute(0, 3, 1, 2).float() / 255, size=(56, 56), mode="bilinear")
    with pytest.warns(UserWarning, match=r"cannot tell.*bb\.preprocess.*check=False"):
        bb.patch_grids(unit, blocks=0)
    with pytest.raises(PreprocessingMismatch, match="multiples of 1/255"):             # 8-bit values: it can tell
        bb.patch_grids(img.permute(0, 3, 1, 2)[:, :, :56, :56].float() / 255, blocks=0)


# 4. a non-square checkpoint whose rows are a square with another prefix count ------------------------------------

def test_nonsquare_checkpoint_is_a_grid_mismatch_not_another_variant(tmp_path):
    m = _timm("vit_tiny_patch16_224", img_size=(48, 80))                 # 1 CLS + 3x5 = 16 rows = 4x4 with no CLS
    w = _save(m, tmp_path / "w.safetensors")
    with pytest.raises(GridMismatch, match=r"weights_img_size=\(H, W\).*\(48, 80\) for a 3x5 grid"):
        load_backbone("vit_tiny_patch16_224", weights=w, **TINY)
    bb = load_backbone("vit_tiny_patch16_224", weights=w, img_size=(48, 80), weights_img_size=(48, 80), **TINY)
    assert torch.equal(bb.model.pos_embed, m.pos_embed)


def test_weights_that_keep_no_class_row_at_the_native_grid_are_still_another_variant(tmp_path):
    w = _save(_timm("deit3_small_patch16_224"), tmp_path / "w.safetensors")          # 14x14 rows, no CLS row
    with pytest.raises(BackboneUnavailable, match="another variant"):
        load_backbone("vit_small_patch16_224", weights=w, **TINY)


# 5. pickled code -------------------------------------------------------------------------------------------------

def test_pth_with_pickled_code_is_said_to_hold_code_not_to_be_truncated(tmp_path):
    path = tmp_path / "code.pth"
    torch.save({"model": _sd(_timm("vit_tiny_patch16_224", img_size=32)), "hook": os.system}, path)
    with pytest.raises(BackboneUnavailable, match=r"pickled Python objects or code, which is not loaded.*safetensors") \
            as e:
        load_backbone("vit_tiny_patch16_224", weights=path, img_size=32, **TINY)
    assert "truncated" not in str(e.value)


# 6. key prefixes of training wrappers ----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["model.", "backbone.", "lightning", "dino"])
def test_a_common_key_prefix_is_removed_when_the_keys_then_fit(tmp_path, layout, caplog):
    m = _timm("vit_tiny_patch16_224", img_size=32)
    sd = _sd(m)
    if layout in ("model.", "backbone."):
        path = tmp_path / "w.safetensors"
        save_file({layout + k: v for k, v in sd.items()}, str(path))
    elif layout == "lightning":
        path = tmp_path / "w.ckpt"
        torch.save({"state_dict": {**{"model." + k: v for k, v in sd.items()}, "loss.weight": torch.ones(3)},
                    "epoch": 3}, path)
    else:
        path = tmp_path / "checkpoint.pth"
        torch.save({"teacher": {**{"backbone." + k: v for k, v in sd.items()}, "head.mlp.0.weight": torch.ones(4, 2)},
                    "student": {"module.backbone." + k: v * 0 for k, v in sd.items()}, "epoch": 100}, path)
    with caplog.at_level(logging.INFO, logger="frozenvit.backbone"):
        bb = load_backbone("vit_tiny_patch16_224", weights=path, img_size=32, **TINY)
    assert all(torch.equal(bb.model.state_dict()[k], v) for k, v in sd.items())
    assert "removed the key prefix" in caplog.text


def test_a_convnet_checkpoint_with_a_model_prefix_loads(tmp_path):
    torch.manual_seed(0)
    full = timm.create_model("test_efficientnet", pretrained=False)
    save_file({"model." + k: v.contiguous() for k, v in full.state_dict().items()}, str(tmp_path / "w.safetensors"))
    bb = load_backbone("test_efficientnet", weights=tmp_path / "w.safetensors", img_size=64)
    assert torch.equal(bb.model.state_dict()["conv_stem.weight"], full.state_dict()["conv_stem.weight"])


# 7. corrupted tensor bytes ---------------------------------------------------------------------------------------

def test_weights_whose_bytes_were_overwritten_are_refused_naming_the_tensor(tmp_path):
    m = _timm("vit_tiny_patch16_224", img_size=32, embed_dim=64)
    w = _save(m, tmp_path / "w.safetensors")
    data = bytearray(w.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 4096] = b"\xff" * 4096                                 # 0xffffffff is a float32 NaN
    w.write_bytes(bytes(data))
    with pytest.raises(BackboneUnavailable, match=r"tensor '.*' .* NaN or inf.*corrupted.*again"):
        load_backbone("vit_tiny_patch16_224", weights=w, img_size=32, **{**TINY, "embed_dim": 64})


# 8. the frozen state ---------------------------------------------------------------------------------------------

def test_backbone_is_in_eval_mode_after_load_and_grids_stay_eval_after_model_train():
    bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=32, drop_rate=0.5, proj_drop_rate=0.5,
                       attn_drop_rate=0.5, **TINY)
    assert not bb.training and not any(m.training for m in bb.modules())
    x = _pixels(32, 32)
    before = bb.patch_grids(x, blocks=0)[0]
    bb.model.train()                                                      # dropout on, by hand
    assert torch.equal(bb.patch_grids(x, blocks=0)[0], before)
    assert not any(m.training for m in bb.modules())


# 9. checkpoint dicts ---------------------------------------------------------------------------------------------

def test_ema_weights_are_preferred_as_timm_does_and_the_choice_is_said(tmp_path, caplog):
    m = _timm("vit_tiny_patch16_224", img_size=32)
    sd = _sd(m)
    path = tmp_path / "train.pth"
    torch.save({"state_dict": {k: v * 0 for k, v in sd.items()}, "state_dict_ema": sd, "epoch": 3}, path)
    with caplog.at_level(logging.WARNING, logger="frozenvit.backbone"):
        bb = load_backbone("vit_tiny_patch16_224", weights=path, img_size=32, **TINY)
    assert torch.equal(bb.model.pos_embed, m.pos_embed)
    assert "loading 'state_dict_ema'" in caplog.text and "'state_dict'" in caplog.text


def test_model_ema_alone_and_an_upper_case_suffix_load(tmp_path):
    m = _timm("vit_tiny_patch16_224", img_size=32)
    torch.save({"model_ema": _sd(m), "epoch": 1}, tmp_path / "ema.PTH")
    bb = load_backbone("vit_tiny_patch16_224", weights=tmp_path / "ema.PTH", img_size=32, **TINY)
    assert torch.equal(bb.model.pos_embed, m.pos_embed)


def test_a_checkpoint_dict_without_weights_names_its_keys(tmp_path):
    torch.save({"epoch": 3, "weights": {"x": [1, 2]}}, tmp_path / "c.pth")
    with pytest.raises(BackboneUnavailable, match=r"top-level keys: 'epoch', 'weights'"):
        load_backbone("vit_tiny_patch16_224", weights=tmp_path / "c.pth", img_size=32, **TINY)


# 10-11. what `backbone info` says --------------------------------------------------------------------------------

def test_info_says_where_mean_std_come_from_and_that_position_embeddings_were_resampled(tmp_path, capsys,
                                                                                      saved_test_vit):
    from frozenvit.backbone.suite.cli import main

    w = saved_test_vit(tmp_path, img_size=64)                              # a 4x4 grid
    assert main(["backbone", "info", "--backbone", "test_vit", "--weights", str(w), "--image-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "resampled from the checkpoint's 4x4 grid to 2x2 tokens" in out
    assert "mean/std from   timm's pretrained config of test_vit" in out and "pretrained_cfg_overlay" in out
