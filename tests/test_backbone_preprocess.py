import numpy as np
import pytest
import torch
from PIL import Image

from frozenvit.backbone import ImageFormatError, PreprocessingMismatch, load_backbone
from frozenvit.backbone.diagnostics import _attention_probs, inspect_backbone


def _photo(h=48, w=80, seed=0):
    """A smooth, natural-looking test image (gradients + blobs), uint8 RGB."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([yy, xx, 0.5 * (yy + xx)], -1) * 200 + rng.normal(0, 10, (h, w, 3)) + 20
    return img.clip(0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def bb(make_tiny_vit):
    return make_tiny_vit()   # ViT-Tiny preprocessing: mean = std = 0.5


@pytest.fixture(scope="module")
def bb_imagenet():
    return load_backbone("vit_small_patch14_dinov2", pretrained=False, img_size=56, depth=1)


def test_correctly_normalised_batch_passes_the_check(bb_imagenet):
    pixels = bb_imagenet.preprocess([_photo(), _photo(seed=1)]).pixels
    bb_imagenet.preprocess.check(pixels)   # must not raise


def test_float_0_255_batch_is_caught(bb_imagenet):
    raw = torch.from_numpy(np.stack([_photo(56, 56)])).permute(0, 3, 1, 2).float()   # 0..255
    with pytest.raises(PreprocessingMismatch, match="0-255"):
        bb_imagenet.patch_grids(raw)


def test_double_normalised_batch_is_caught(bb_imagenet):
    once = bb_imagenet.preprocess([_photo(56, 56)]).pixels
    mean = torch.tensor(bb_imagenet.config.mean).view(1, 3, 1, 1)
    std = torch.tensor(bb_imagenet.config.std).view(1, 3, 1, 1)
    with pytest.raises(PreprocessingMismatch, match="normalised twice"):
        bb_imagenet.patch_grids((once - mean) / std)


def test_unnormalised_unit_range_batch_is_caught(bb_imagenet):
    unit = torch.from_numpy(np.stack([_photo(56, 56)])).permute(0, 3, 1, 2).float() / 255
    with pytest.raises(PreprocessingMismatch):
        bb_imagenet.patch_grids(unit)


def test_batch_normalised_with_other_statistics_is_caught(bb):
    # ImageNet-normalised input fed to a mean=std=0.5 checkpoint
    imnet = load_backbone("vit_small_patch14_dinov2", pretrained=False, img_size=64, depth=1, patch_size=16)
    dark = np.zeros((64, 64, 3), np.uint8)
    dark[:32] = 255
    with pytest.raises(PreprocessingMismatch, match="other statistics"):
        bb.patch_grids(imnet.preprocess([dark]).pixels)


def test_float_image_is_refused_with_a_conversion_hint(bb):
    with pytest.raises(PreprocessingMismatch, match=r"\* 255"):
        bb.preprocess([_photo().astype(np.float32) / 255])


def test_wrong_channel_layouts_raise_image_format_error(bb):
    with pytest.raises(ImageFormatError, match="channels-first"):
        bb.preprocess([np.zeros((3, 40, 40), np.uint8)])
    with pytest.raises(ImageFormatError):
        bb.preprocess([np.zeros((40, 40, 2), np.uint8)])
    with pytest.raises(ImageFormatError, match="3 channels"):
        bb.patch_grids(torch.zeros(1, 4, 64, 64))


def test_gray_rgba_and_16bit_inputs_are_converted_like_rgb(bb):
    rgb = _photo()
    gray = rgb.mean(-1).astype(np.uint8)
    as_rgb = bb.preprocess([np.repeat(gray[..., None], 3, -1)]).pixels
    torch.testing.assert_close(bb.preprocess([gray]).pixels, as_rgb)
    torch.testing.assert_close(bb.preprocess([Image.fromarray(gray)]).pixels, as_rgb)
    rgba = np.concatenate([rgb, np.full(rgb.shape[:2] + (1,), 255, np.uint8)], -1)
    torch.testing.assert_close(bb.preprocess([rgba]).pixels, bb.preprocess([rgb]).pixels)
    g16 = gray.astype(np.uint16) * 257
    torch.testing.assert_close(bb.preprocess([g16]).pixels, as_rgb)


def test_stretch_mapping_returns_token_maps_at_original_size(bb):
    batch = bb.preprocess([_photo(100, 30)])
    m = batch.mappings[0]
    assert m.orig_size == (100, 30) and m.content_box == (0, 0, 64, 64)
    tokens = np.arange(16, dtype=np.float32).reshape(4, 4)
    up = m.to_original(tokens)
    assert up.shape == (100, 30)
    assert up[0, 0] == tokens[0, 0] and up[-1, -1] == tokens[-1, -1]   # corners land on corner tokens


def test_pad_mapping_puts_content_back_where_it_was(make_tiny_vit):
    bb = make_tiny_vit(img_size=64)
    bbp = type(bb)(bb.model, bb.config, resize="pad")
    img = np.zeros((32, 64), np.uint8)
    img[:, 40:] = 255                                                   # right part bright
    batch = bbp.preprocess([img])
    m = batch.mappings[0]
    assert m.content_box == (16, 0, 32, 64)                             # letterboxed vertically
    canvas = batch.pixels[0, 0].numpy()                                 # (64, 64) normalised red channel
    back = m.to_original(canvas)                                        # (32, 64)
    assert back.shape == (32, 64)
    assert back[:, :36].max() < -0.9 and back[:, 44:].min() > 0.9       # dark stays dark, bright stays bright
    assert not m.canvas_mask()[:16].any() and m.canvas_mask()[16:48].all()


def test_attention_probabilities_reproduce_the_module_output(make_tiny_vit):
    bb = make_tiny_vit()
    blk = bb.model.blocks[0]
    x = torch.randn(2, 17, 48)
    p = _attention_probs(blk.attn, x)                                   # (2, 3, 17, 17)
    torch.testing.assert_close(p.sum(-1), torch.ones(2, 3, 17))
    v = blk.attn.qkv(x).reshape(2, 17, 3, 3, 16).permute(2, 0, 3, 1, 4)[2]
    ref = blk.attn.proj((p @ v).transpose(1, 2).reshape(2, 17, 48))
    torch.testing.assert_close(blk.attn(x), ref, atol=1e-5, rtol=1e-4)


def test_inspect_reports_entropy_within_bounds_per_block_and_head(make_tiny_vit):
    bb = make_tiny_vit()
    rep = inspect_backbone(bb, [_photo(seed=i) for i in range(3)])
    assert rep.entropy.shape == (4, 3) and rep.distance.shape == (4, 3)
    assert (rep.entropy > 0).all() and (rep.entropy <= rep.entropy_max + 1e-5).all()
    assert (rep.norm_ratio >= 1).all()


def _gray_ramp(depth, h=16, w=24):
    """uint16 gray content that uses `depth` bits (values up to about 2**depth - 1), and its 8-bit version."""
    v8 = np.linspace(0, 255, h * w).reshape(h, w).round().astype(np.uint8)
    full = 2 ** depth - 1
    return np.round(v8.astype(np.float64) / 255 * full).astype(np.uint16), v8


@pytest.mark.parametrize("depth", [8, 12, 16])
def test_uint16_arrays_are_scaled_by_the_bit_depth_their_values_need(depth):
    import warnings

    from frozenvit.backbone.preprocess import to_rgb_uint8

    a16, v8 = _gray_ramp(depth)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = to_rgb_uint8(a16)
    assert np.abs(out[..., 0].astype(int) - v8).max() <= 1         # full brightness, not divided by 257
    said = [str(w.message) for w in caught]
    assert (any(f"scaled as {depth}-bit data" in m for m in said)) == (depth < 16)


def test_a_recorded_bit_depth_wins_over_the_data_and_left_aligned_samples_are_understood():
    from frozenvit.backbone.preprocess import integer_to_uint8

    a12, v8 = _gray_ramp(12)
    dark = v8.astype(np.uint16)                                       # a dark 12-bit image: samples below 256
    with pytest.warns(UserWarning, match="scaled as 8-bit"):
        assert (integer_to_uint8(dark) == v8).all()                   # no record: the data's depth is a guess
    assert np.abs(integer_to_uint8(dark, bits=12).astype(int) - np.round(v8 / 4095 * 255)).max() <= 1   # stays dark
    left = (a12 << 4).astype(np.uint16)                              # PNG's way: 12 bits scaled up to 16
    assert np.abs(integer_to_uint8(left, bits=12).astype(int) - v8).max() <= 1


def test_integer_samples_outside_sixteen_bits_are_refused():
    with pytest.raises(ImageFormatError, match="outside 0..65535"):
        from frozenvit.backbone.preprocess import to_rgb_uint8
        to_rgb_uint8(np.full((8, 8), 70000, np.int64))


@pytest.mark.parametrize("size", [(1, 1), (3, 200), (200, 15)])
def test_an_image_smaller_than_one_patch_is_accepted_with_a_warning(bb, size):
    with pytest.warns(UserWarning, match=rf"is {size[0]}x{size[1]} px, smaller than one 16x16 px patch"):
        batch = bb.preprocess([np.full(size + (3,), 128, np.uint8)])
    assert batch.pixels.shape == (1, 3, 64, 64) and batch.mappings[0].orig_size == size


def test_an_image_of_one_patch_or_more_says_nothing(bb):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bb.preprocess([np.full((16, 16, 3), 128, np.uint8)])


def test_an_unknown_resize_policy_is_a_parameter_error_naming_both():
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match="'stretch'.*'pad'"):
        load_backbone("vit_tiny_patch16_224", pretrained=False, resize="crop")
