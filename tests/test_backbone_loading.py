import collections
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from frozenvit.backbone import BackboneUnavailable, GridMismatch, load_backbone
from frozenvit.backbone.weights import resample_pos_embed


def _images(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (40 + 7 * i, 50 + 5 * i, 3), dtype=np.uint8) for i in range(n)]


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_local_checkpoint_round_trip_gives_identical_grids(make_tiny_vit, tmp_path, suffix):
    bb = make_tiny_vit()
    path = tmp_path / f"w{suffix}"
    sd = {k: v.contiguous() for k, v in bb.model.state_dict().items()}
    save_file(sd, str(path)) if suffix == ".safetensors" else torch.save(sd, path)
    bb2 = load_backbone("vit_tiny_patch16_224", weights=path, img_size=64, depth=4, embed_dim=48, num_heads=3)
    imgs = _images()
    a, b = bb.patch_grids(imgs, blocks=(1, 3)), bb2.patch_grids(imgs, blocks=(1, 3))
    for k in (1, 3):
        torch.testing.assert_close(a[k], b[k])
    assert bb2.weights_sha256 and len(bb2.weights_sha256) == 64


def test_pth_with_pickled_code_is_refused(tmp_path):
    path = tmp_path / "evil.pth"
    # a module-level class forces the pickle to carry a code reference that weights_only refuses
    torch.save({"pos_embed": torch.zeros(1), "x": collections.OrderedDict, "f": subprocess.Popen}, path)
    with pytest.raises(BackboneUnavailable, match="weights_only"):
        load_backbone("vit_tiny_patch16_224", weights=path, img_size=64, depth=4, embed_dim=48, num_heads=3)


def test_pos_embed_interpolation_is_identity_at_same_size():
    pos = torch.randn(1, 1 + 16, 8)
    assert resample_pos_embed(pos, (4, 4), num_prefix=1) is pos


def test_pos_embed_interpolation_keeps_prefix_and_resizes_grid():
    pos = torch.randn(1, 5 + 16, 8)
    out = resample_pos_embed(pos, (6, 3), num_prefix=5)
    assert out.shape == (1, 5 + 18, 8)
    torch.testing.assert_close(out[:, :5], pos[:, :5])


def test_loading_at_new_img_size_resamples_and_changes_grid(make_tiny_vit, tmp_path):
    bb = make_tiny_vit(img_size=64)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in bb.model.state_dict().items()}, str(path))
    big = load_backbone("vit_tiny_patch16_224", weights=path, img_size=96, depth=4, embed_dim=48, num_heads=3)
    assert big.config.grid == (6, 6)
    g = big.patch_grids(_images(2))
    assert g[3].shape == (2, 48, 6, 6)


def test_grid_mismatch_when_interpolation_not_allowed(make_tiny_vit, tmp_path):
    bb = make_tiny_vit(img_size=64)
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in bb.model.state_dict().items()}, str(path))
    with pytest.raises(GridMismatch, match="4x4 grid"):
        load_backbone("vit_tiny_patch16_224", weights=path, img_size=96, allow_interpolation=False,
                      depth=4, embed_dim=48, num_heads=3)


def test_img_size_not_divisible_by_patch_raises_grid_mismatch(make_tiny_vit):
    with pytest.raises(GridMismatch, match="multiple of 16"):
        make_tiny_vit(img_size=70)


def test_offline_hub_name_fails_fast_with_a_local_file_hint(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(BackboneUnavailable, match="weights="):
        load_backbone("vit_tiny_patch16_224")
    assert time.perf_counter() - t0 < 5.0  # generous bound; the design target is about a second


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(BackboneUnavailable, match="no model named"):
        load_backbone("vit_does_not_exist", pretrained=False)


def test_backbone_is_frozen_and_stays_frozen(make_tiny_vit):
    bb = make_tiny_vit()
    bb.train()
    assert not bb.model.training
    assert not any(p.requires_grad for p in bb.parameters())


def test_patch_grids_match_timm_forward_features_last_block_with_norm(make_tiny_vit):
    bb = make_tiny_vit()
    pixels = bb.preprocess(_images(2)).pixels
    ours = bb.patch_grids(pixels, blocks=-1, norm=True)[3]
    ref = bb.model.forward_features(pixels)[:, bb.config.num_prefix_tokens:]     # (B, hw, C)
    torch.testing.assert_close(ours.flatten(2).transpose(1, 2), ref)


def test_patch_grids_are_deterministic_and_batching_invariant(make_tiny_vit):
    bb = make_tiny_vit()
    imgs = _images(5)
    a = bb.patch_grids(imgs, blocks=2, batch_size=2)[2]
    b = bb.patch_grids(imgs, blocks=2, batch_size=5)[2]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_blocks_asked_in_any_order_get_their_own_grids(make_tiny_vit):
    # timm hands intermediates back in block order; blocks (3, 1) once came back labelled the other way round
    bb = make_tiny_vit()
    pixels = bb.preprocess(_images(2)).pixels
    one, three = bb.patch_grids(pixels, blocks=1)[1], bb.patch_grids(pixels, blocks=3)[3]
    for order in ((3, 1), (1, 3)):
        g, prefix = bb.forward_pixels(pixels, list(order))
        torch.testing.assert_close(g[1], one)
        torch.testing.assert_close(g[3], three)
        assert not torch.equal(g[1], g[3])
    torch.testing.assert_close(bb.patch_grids(pixels, blocks=(3, 1))[1], one)


@pytest.mark.parametrize("name,kw,cls,regs,dist", [
    ("vit_tiny_patch16_224", {}, True, 0, False),
    ("vit_small_patch14_reg4_dinov2", {"img_size": 56}, True, 4, False),
    ("deit_tiny_distilled_patch16_224", {}, True, 0, True),
])
def test_prefix_tokens_are_split_from_the_grid(name, kw, cls, regs, dist):
    kw = {"img_size": 64, "depth": 2, "embed_dim": 48, "num_heads": 3, **kw}
    bb = load_backbone(name, pretrained=False, **kw)
    g = bb.patch_grids(_images(2), blocks=1)
    h, w = bb.config.grid
    assert g[1].shape == (2, 48, h, w)
    assert g.prefix[1].shape == (2, int(cls) + regs + int(dist), 48)
    assert bb.config.num_registers == regs and bb.config.has_dist_token == dist
    assert (g.registers(1) is not None) == bool(regs)
    assert (g.dist(1) is not None) == dist
    # the prefix tokens are the model's own, in timm's order: compare with forward_features
    normed = bb.patch_grids(_images(2), blocks=1, norm=True)
    ref = bb.model.forward_features(bb.preprocess(_images(2)).pixels)              # (B, P + hw, C)
    torch.testing.assert_close(normed.prefix[1], ref[:, :bb.config.num_prefix_tokens])


def test_cnn_backbone_hands_out_grids_with_the_same_interface():
    bb = load_backbone("resnet18", pretrained=False, img_size=64)
    g = bb.patch_grids(_images(2), blocks=(2, -1))
    assert g[2].shape == (2, 128, 8, 8) and g[4].shape == (2, 512, 2, 2)
    assert g.cls(2) is None and bb.config.kind == "cnn"


@pytest.mark.parametrize("size", [1, 31])
def test_a_convnet_input_smaller_than_its_coarsest_stride_is_a_grid_mismatch(size):
    with pytest.raises(GridMismatch, match="coarsest feature stride .32 px.*at least 32"):
        load_backbone("resnet18", pretrained=False, img_size=size)
    assert load_backbone("resnet18", pretrained=False, img_size=32).config.grid == (1, 1)


def test_info_cli_reports_reg4_dinov2_contract(capsys):
    from frozenvit.backbone.suite.cli import main

    assert main(["backbone", "info", "--backbone", "vit_small_patch14_reg4_dinov2", "--image-size", "224"]) == 0
    out = capsys.readouterr().out
    assert "16x16 tokens" in out
    assert "5 (1 CLS + 4 register)" in out
    assert "(0.485, 0.456, 0.406)" in out and "(0.229, 0.224, 0.225)" in out


def test_cli_lists_backbone_subcommands_and_distill():
    run = lambda *a: subprocess.run([sys.executable, "-m", "frozenvit.backbone.suite.cli", *a],  # noqa: E731
                                    capture_output=True, text=True, check=True).stdout
    out = run("backbone", "--help")
    assert "info" in out and "inspect" in out
    assert "--teacher" in run("distill", "--help")


def test_cli_error_is_named_and_exit_code_2(capsys):
    from frozenvit.backbone.suite.cli import main

    assert main(["backbone", "info", "--backbone", "vit_does_not_exist"]) == 2
    assert "BackboneUnavailable" in capsys.readouterr().err


def test_dinov2_reg4_checkpoint_at_518_loads_at_224_with_its_own_contract(tmp_path):
    src = load_backbone("vit_small_patch14_reg4_dinov2", pretrained=False, depth=1)    # built at 518 (37x37)
    assert src.config.grid == (37, 37)
    path = tmp_path / "dinov2.safetensors"
    save_file({k: v.contiguous() for k, v in src.model.state_dict().items()}, str(path))
    bb = load_backbone("vit_small_patch14_reg4_dinov2", weights=path, img_size=224, depth=1)
    c = bb.config
    assert c.img_size == (224, 224) and c.grid == (16, 16)          # not the 518 the pretrained cfg reports
    assert c.num_prefix_tokens == 5 and c.num_registers == 4
    assert bb.model.pos_embed.shape == (1, 256, 384)                # no_embed_class: registers carry no pos
    g = bb.patch_grids([np.zeros((300, 200, 3), np.uint8)], blocks=0)
    assert g[0].shape == (1, 384, 16, 16) and g.registers(0).shape == (1, 4, 384)


def test_negative_block_indices_address_the_same_grids_as_positive_ones(make_tiny_vit):
    bb = make_tiny_vit()
    g = bb.patch_grids(_images(2), blocks=(-1, 1))
    assert g.blocks == [3, 1]
    assert g[-1] is g[3] and torch.equal(g.cls(-1), g.cls(3))


def test_a_shallower_checkpoint_builds_the_architecture_at_its_depth(tmp_path):
    import timm
    student = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=112, num_classes=0, depth=3)
    save_file({k: v.contiguous() for k, v in student.state_dict().items()}, tmp_path / "s.safetensors")
    bb = load_backbone("vit_tiny_patch16_224", weights=tmp_path / "s.safetensors", img_size=112)
    assert bb.config.depth == 3 and bb.config.grid == (7, 7)
    x = torch.zeros(1, 3, 112, 112)
    with torch.no_grad():
        assert torch.allclose(bb.model.forward_features(x), student.forward_features(x), atol=1e-6)


def _tiny_vit_weights(make_tiny_vit, path):
    sd = {k: v.contiguous() for k, v in make_tiny_vit().model.state_dict().items()}
    save_file(sd, str(path)) if path.suffix == ".safetensors" else torch.save(sd, path)
    return path.read_bytes()


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_weights_file_is_a_named_error_that_says_what_to_do(make_tiny_vit, tmp_path, suffix, damage):
    path = tmp_path / f"w{suffix}"
    data = _tiny_vit_weights(make_tiny_vit, path)
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x00\xffnot weights" * 7, "empty": b""}[damage])
    with pytest.raises(BackboneUnavailable, match=rf"w\{suffix} \(\d+ bytes\) cannot be read.*Download or copy it again"):
        load_backbone("vit_tiny_patch16_224", weights=path, img_size=64, depth=4, embed_dim=48, num_heads=3)


def _classification_checkpoint(name, path, **kw):
    import timm

    torch.manual_seed(0)
    full = timm.create_model(name, pretrained=False, **kw).eval()
    save_file({k: v.contiguous() for k, v in full.state_dict().items()}, str(path))
    return full


@pytest.mark.parametrize("name", ["tf_efficientnet_lite0", "convnext_atto"])
def test_a_convnets_full_classification_checkpoint_loads_as_a_features_only_backbone(tmp_path, name):
    """timm drops the head (EfficientNet: conv_head, bn2, classifier) and renames for some wrappers (ConvNeXt)."""
    full = _classification_checkpoint(name, tmp_path / "full.safetensors")
    bb = load_backbone(name, weights=tmp_path / "full.safetensors", img_size=64)
    assert bb.config.kind == "cnn" and bb.config.pretrained and bb.weights_sha256
    x = bb.preprocess(_images(2)).pixels
    with torch.no_grad():
        want = full.forward_intermediates(x, intermediates_only=True)          # the classification model's stages
    got = bb.model(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_a_features_only_state_dict_still_loads_as_it_is(tmp_path):
    import timm

    feat = timm.create_model("tf_efficientnet_lite0", pretrained=False, features_only=True)
    save_file({k: v.contiguous() for k, v in feat.state_dict().items()}, str(tmp_path / "f.safetensors"))
    bb = load_backbone("tf_efficientnet_lite0", weights=tmp_path / "f.safetensors", img_size=64)
    for k, v in feat.state_dict().items():
        assert torch.equal(bb.model.state_dict()[k], v), k


def test_a_convnet_checkpoint_whose_body_does_not_fit_is_refused(tmp_path):
    from safetensors.torch import load_file

    _classification_checkpoint("resnet18", tmp_path / "resnet.safetensors")
    with pytest.raises(BackboneUnavailable, match="does not fit.*classification checkpoint"):
        load_backbone("tf_efficientnet_lite0", weights=tmp_path / "resnet.safetensors", img_size=64)
    _classification_checkpoint("tf_efficientnet_lite0", tmp_path / "full.safetensors")
    sd = load_file(str(tmp_path / "full.safetensors"))
    del sd["blocks.3.0.conv_pw.weight"]                                          # a body layer, not the head
    save_file(sd, str(tmp_path / "holed.safetensors"))
    with pytest.raises(BackboneUnavailable, match=r"missing \['blocks.3.0.conv_pw.weight'\]"):
        load_backbone("tf_efficientnet_lite0", weights=tmp_path / "holed.safetensors", img_size=64)


@pytest.mark.parametrize("name", ["test_efficientnet", "test_resnet"])
def test_a_tiny_convnets_full_checkpoint_loads_features_only_with_its_head_dropped(tmp_path, name):
    """EfficientNet's head is conv_head + bn2 + classifier, a ResNet's is fc: neither is a feature stage."""
    full = _classification_checkpoint(name, tmp_path / "full.safetensors")
    torch.save(full.state_dict(), tmp_path / "full.pth")                  # the .pth a training script writes
    bb = load_backbone(name, weights=tmp_path / "full.pth", img_size=64)
    assert bb.config.pretrained and not any(k.startswith(("fc.", "classifier.", "conv_head.", "bn2."))
                                            for k in bb.model.state_dict())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = full.forward_intermediates(x, intermediates_only=True)
        got = bb.model(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("name,key", [("test_efficientnet", "blocks.2.0.conv_exp.weight"),
                                      ("test_resnet", "layer2.0.conv1.weight")])
def test_a_misshaped_body_key_in_a_full_checkpoint_is_still_refused(tmp_path, name, key):
    from safetensors.torch import load_file

    _classification_checkpoint(name, tmp_path / "full.safetensors")
    sd = load_file(str(tmp_path / "full.safetensors"))
    sd[key] = sd[key][:1].contiguous()                                     # one output channel instead of many
    save_file(sd, str(tmp_path / "bad.safetensors"))
    with pytest.raises(BackboneUnavailable, match=rf"{key} has shape"):
        load_backbone(name, weights=tmp_path / "bad.safetensors", img_size=64)
    del sd[key]
    save_file(sd, str(tmp_path / "holed.safetensors"))
    with pytest.raises(BackboneUnavailable, match=rf"missing \['{key}'\]"):
        load_backbone(name, weights=tmp_path / "holed.safetensors", img_size=64)
