"""What a researcher's trial of the backbone found: float-resampling overshoot taken for other statistics, EXIF
orientation ignored, negative blocks refused by `prefix`/`grids`, inference tensors a head cannot train on, a
random-weights warning from `backbone info`, a square-only `--image-size`, no `forward`, a numpy array in a .pth
described as code, and pixels that do not follow the model's device.

Every model here is a tiny random timm model (one to four blocks, a few tokens).
"""
import copy
import pickle
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps
from PIL.PngImagePlugin import PngInfo

from frozenvit.backbone import load_backbone
from frozenvit.backbone.errors import BackboneUnavailable, PreprocessingMismatch

TINY = dict(depth=1, embed_dim=32, num_heads=2)
ORIENTATION = 0x0112
CLIP_MEAN, CLIP_STD = (0.4815, 0.4578, 0.4082), (0.2686, 0.2613, 0.2758)


def _photo(h: int = 48, w: int = 80, seed: int = 0) -> np.ndarray:
    """A smooth, natural-looking test image (gradients + noise), uint8 RGB."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([yy, xx, 0.5 * (yy + xx)], -1) * 200 + rng.normal(0, 10, (h, w, 3)) + 20
    return img.clip(0, 255).astype(np.uint8)


def _normalise(unit: torch.Tensor, mean, std) -> torch.Tensor:
    return (unit - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def _undone(x: torch.Tensor, bb) -> torch.Tensor:
    return x * torch.tensor(bb.config.std).view(1, 3, 1, 1) + torch.tensor(bb.config.mean).view(1, 3, 1, 1)


@pytest.fixture(scope="module")
def bb_imagenet():
    return load_backbone("vit_small_patch14_dinov2", pretrained=False, img_size=56, **TINY)   # ImageNet mean/std


# 1. resampling overshoot is not other statistics ------------------------------------------------------------------

def test_a_bicubic_float_resize_of_a_binary_image_passes_with_an_overshoot_warning(bb_imagenet):
    binary = (np.random.default_rng(0).random((24, 24)) > 0.5).astype(np.float32)
    unit = torch.from_numpy(binary)[None, None].repeat(1, 3, 1, 1)                   # (1, 3, 24, 24) in {0, 1}
    resized = F.interpolate(unit, size=(56, 56), mode="bicubic", antialias=True, align_corners=False)
    x = _normalise(resized, bb_imagenet.config.mean, bb_imagenet.config.std)
    raw = _undone(x, bb_imagenet)
    assert float(raw.min()) < -0.2 and float(raw.max()) > 1.2                       # beyond the old tolerance
    with pytest.warns(UserWarning, match=r"overshoot of a resize in float.*check=False"):
        g = bb_imagenet.patch_grids(x, blocks=0)
    assert g[0].shape[0] == 1


def test_other_statistics_are_still_refused_and_the_refusal_names_resampling_overshoot(make_tiny_vit):
    bb = make_tiny_vit()                                                             # mean = std = 0.5
    unit = torch.from_numpy(_photo(64, 64)).permute(2, 0, 1)[None].float() / 255
    with pytest.raises(PreprocessingMismatch, match=r"normalised twice or with other statistics.*overshoot.*"
                                                    r"uint8 or PIL image.*bilinear.*check=False"):
        bb.patch_grids(_normalise(unit, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))


def test_whole_areas_outside_0_1_are_refused_even_within_the_overshoot_bound(make_tiny_vit):
    bb = make_tiny_vit()                                                             # mean = std = 0.5
    unit = torch.from_numpy(_photo(64, 64)).permute(2, 0, 1)[None].float() / 255 * 0.8 + 0.1    # [0.1, 0.9]
    unit[..., :16], unit[..., -16:] = 0.1, 0.9                                       # a dark and a light area
    x = _normalise(unit, CLIP_MEAN, CLIP_STD)                                        # CLIP's statistics
    raw = _undone(x, bb)
    assert -0.45 < float(raw.min()) < -0.12 and 1.12 < float(raw.max()) < 1.45      # inside the overshoot bound
    with pytest.raises(PreprocessingMismatch, match="other statistics"):
        bb.patch_grids(x)


# 2. EXIF orientation ------------------------------------------------------------------------------------------------

def _turned_jpeg(path, h: int = 40, w: int = 72):
    """A JPEG stored h x w with EXIF Orientation 6 (shown turned a quarter right: w x h)."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    stored = _photo(h, w)
    stored[:12, :20] = 255                                                           # a bright corner, as stored
    Image.fromarray(stored).save(path, exif=exif.tobytes(), quality=95)
    with Image.open(path) as im:
        upright = np.asarray(ImageOps.exif_transpose(im))
    assert upright.shape[:2] == (w, h)
    return path, upright


def test_patch_grids_of_an_exif_turned_file_are_those_of_the_image_as_shown(tmp_path, make_tiny_vit):
    bb = make_tiny_vit(img_size=(64, 32))
    path, upright = _turned_jpeg(tmp_path / "t.jpg")
    with Image.open(path) as im:
        g = bb.patch_grids(im, blocks=0)
    ref = bb.patch_grids(upright, blocks=0)
    assert g.mappings[0].orig_size == upright.shape[:2] == (72, 40)
    assert torch.equal(g[0], ref[0])


def test_a_16_bit_png_with_an_orientation_and_a_recorded_depth_reads_as_anomaly_reads_it(tmp_path):
    from frozenvit.anomaly.images import read_image
    from frozenvit.backbone.preprocess import to_rgb_uint8

    stored = (np.arange(30 * 50).reshape(30, 50) % 1000).astype(np.uint16)   # 12-bit samples that fit 10 bits
    info = PngInfo()
    info.add(b"sBIT", bytes([12]))
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    path = tmp_path / "deep.png"
    Image.fromarray(stored).save(path, pnginfo=info, exif=exif.tobytes())
    with Image.open(path) as im:
        assert im.mode.startswith("I")
        got = to_rgb_uint8(im)
    np.testing.assert_array_equal(got, read_image(path))
    assert got.max() == round(999 * 255 / 4095)                                     # scaled as 12-bit, as recorded
    assert got.shape == (50, 30, 3)


def test_backbone_inspect_reads_an_exif_turned_file_as_shown(tmp_path, make_tiny_vit):
    from frozenvit.backbone.commands import read_images
    from frozenvit.backbone.diagnostics import inspect_backbone

    bb = make_tiny_vit(img_size=(64, 32))
    path, upright = _turned_jpeg(tmp_path / "t.jpg")
    got = inspect_backbone(bb, read_images([path]))
    ref = inspect_backbone(bb, [upright])
    np.testing.assert_allclose(got.last_norms, ref.last_norms, rtol=1e-6)
    np.testing.assert_allclose(got.entropy, ref.entropy, rtol=1e-6)


def test_an_anomaly_map_of_an_exif_turned_file_is_turned_once(tmp_path, make_tiny_vit):
    """anomaly turns files and PIL images itself and hands the backbone the turned copy (which has no Orientation
    left): the map is that of the image as shown, from a path, a PIL image or the upright pixels alike."""
    from frozenvit.anomaly import PatchCore

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCore(make_tiny_vit(), coreset_ratio=0.5, holdout=0.3, progress=False).fit(
            [_photo(48, 64, seed=i) for i in range(4)])
    path, upright = _turned_jpeg(tmp_path / "t.jpg")
    from_path = det.predict(path)
    with Image.open(path) as im:
        from_pil = det.predict(im)
    from_array = det.predict(upright)
    assert from_path.maps[0].shape == from_pil.maps[0].shape == (72, 40)
    np.testing.assert_allclose(from_path.maps[0], from_array.maps[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(from_pil.maps[0], from_array.maps[0], rtol=1e-5, atol=1e-6)


# 3. prefix and grids take the blocks g[...] takes ------------------------------------------------------------------

def test_prefix_and_grids_take_negative_blocks_and_still_iterate_as_dicts(tiny_vit):
    g = tiny_vit.patch_grids(_photo(), blocks=[1, -1])                               # 4 blocks: 1 and 3
    assert torch.equal(g.prefix[-1], g.prefix[3]) and torch.equal(g.grids[-1], g[3])
    assert torch.equal(g.grids[-3], g[1]) and -1 in g.prefix and g.grids.get(-1) is g.grids[3]
    assert list(g.grids) == list(g.prefix) == [1, 3] == g.blocks
    assert dict(g.prefix).keys() == {1, 3} and {**g.grids}.keys() == {1, 3}
    back = pickle.loads(pickle.dumps(g))
    assert torch.equal(back.prefix[-1], g.prefix[3]) and list(back.grids) == [1, 3]
    assert torch.equal(copy.deepcopy(g).grids[-1], g[3])


def test_a_block_not_computed_is_a_key_error_naming_the_blocks_held(tiny_vit):
    g = tiny_vit.patch_grids(_photo(), blocks=[1, 3])
    with pytest.raises(KeyError, match=r"block 0 was not computed: these grids hold blocks \[1, 3\]"):
        g.prefix[0]
    with pytest.raises(KeyError, match=r"block -2 \(block 2 of 4\) was not computed"):
        g.grids[-2]


# 4. forward_pixels gives tensors a head can train on ---------------------------------------------------------------

def test_a_head_trains_on_forward_pixels_outputs(tiny_vit):
    pixels = tiny_vit.preprocess([_photo(), _photo(seed=1)]).pixels
    grids, prefix = tiny_vit.forward_pixels(pixels, [3])
    assert not grids[3].is_inference() and not prefix[3].is_inference() and not grids[3].requires_grad
    head = torch.nn.Conv2d(grids[3].shape[1], 2, 1)
    (head(grids[3]).mean() + prefix[3].sum() * 0).backward()
    assert head.weight.grad is not None and float(head.weight.grad.abs().sum()) > 0


def test_an_exported_backbone_forward_pixels_gives_tensors_a_head_can_train_on_too(tiny_vit):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from frozenvit.backbone.export import runtime_backbone

    exported = runtime_backbone(tiny_vit, "onnxruntime", (3,))
    grids, _ = exported.forward_pixels(tiny_vit.preprocess([_photo()]).pixels, [3])
    assert not grids[3].is_inference()
    head = torch.nn.Conv2d(grids[3].shape[1], 2, 1)
    head(grids[3]).mean().backward()
    assert head.weight.grad is not None


# 5. `backbone info` of an architecture warns of no random weights -------------------------------------------------

def test_info_of_an_architecture_without_weights_prints_no_random_weights_warning(capsys):
    from frozenvit.backbone.suite.cli import main

    assert main(["backbone", "info", "--backbone", "test_vit"]) == 0
    out, err = capsys.readouterr()
    assert "(architecture only; weights not loaded)" in out
    assert "RANDOM" not in err and "RANDOM" not in out


# 6. --image-size H,W -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["32,48", "32x48", "32X48", " 32 , 48 "])
def test_backbone_info_takes_a_height_and_width(text, capsys):
    from frozenvit.backbone.suite.cli import main

    assert main(["backbone", "info", "--backbone", "test_vit", "--image-size", text]) == 0
    out = capsys.readouterr().out
    assert "input           32x48 px" in out and "grid            2x3 tokens" in out


def test_export_backbone_and_inspect_read_a_height_and_width():
    from frozenvit.backbone.suite.cli import build_parser

    p = build_parser()
    assert p.parse_args(["export", "backbone", "--image-size", "224,320", "--out", "x"]).image_size == (224, 320)
    assert p.parse_args(["backbone", "inspect", "--images", "a", "--image-size", "224x224"]).image_size == 224
    assert p.parse_args(["backbone", "info", "--image-size", "224"]).image_size == 224


@pytest.mark.parametrize("text", ["32,", "0,32", "32,48,64", "a", "-32", "32.5", "32;48"])
def test_a_bad_image_size_is_a_usage_error_naming_the_flag_and_the_forms(text, capsys):
    from frozenvit.backbone.suite.cli import main

    with pytest.raises(SystemExit) as e:
        main(["backbone", "info", "--image-size", text])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error (UsageError)" in err and "--image-size" in err
    assert "224,320" in err and "Traceback" not in err


# 7. calling the backbone ------------------------------------------------------------------------------------------

def test_calling_the_backbone_gives_its_patch_grids(tiny_vit):
    pixels = tiny_vit.preprocess([_photo()]).pixels
    g = tiny_vit(pixels, blocks=[1, 3])
    ref = tiny_vit.patch_grids(pixels, blocks=[1, 3])
    assert g.blocks == [1, 3] and torch.equal(g[3], ref[3]) and torch.equal(g.prefix[1], ref.prefix[1])
    assert tiny_vit([_photo()], 3).mappings == tiny_vit.patch_grids([_photo()], 3).mappings


# 8. a numpy array in a .pth -----------------------------------------------------------------------------------------

def test_a_pth_holding_a_numpy_array_says_it_holds_a_numpy_array(tmp_path):
    import timm

    m = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, **TINY)
    path = tmp_path / "x.pth"
    torch.save({"model": m.state_dict(), "arr": np.zeros(3)}, path)
    with pytest.raises(BackboneUnavailable, match=r"a numpy array \(pickled as numpy\..*only tensors, numbers"):
        load_backbone("vit_tiny_patch16_224", weights=path, img_size=32, **TINY)


# 9. pixels follow the model's device and dtype ---------------------------------------------------------------------

def test_images_and_batches_follow_the_models_device(tiny_vit):
    """A model moved to the meta device (shapes, no data) stands in for a GPU: CPU pixels must be moved to it."""
    meta = copy.deepcopy(tiny_vit).to("meta")
    image = Image.fromarray(_photo())
    for given in (image, tiny_vit.preprocess([image]).pixels):
        g = meta.patch_grids(given, blocks=[1, 3])
        assert g[3].device.type == "meta" and g.prefix[1].device.type == "meta"
        assert g[3].shape == tiny_vit.patch_grids(given, blocks=3)[3].shape


def test_a_bfloat16_model_takes_images_and_float64_batches(tiny_vit):
    b16 = copy.deepcopy(tiny_vit).to(torch.bfloat16)
    image = _photo()
    ref = tiny_vit.patch_grids(image, blocks=3)[3]
    for given in (image, tiny_vit.preprocess([image]).pixels.double()):
        got = b16.patch_grids(given, blocks=3)[3]
        assert got.dtype == torch.float32
        assert float((got - ref).norm() / ref.norm()) < 0.05
