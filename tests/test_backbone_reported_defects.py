"""The backbone's, export's and trainer's answers to inputs a user got wrong, and the lines they print.

Each CLI case checks the named error, exit status 2 and that nothing was written; each Python case checks the
error class (and that it stays a ValueError where callers caught one before).
"""
import re

import numpy as np
import pytest
from PIL import Image

from frozenvit.backbone.errors import ImageFormatError, PreprocessingMismatch
from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import ParameterError, UsageError


@pytest.fixture
def folder(tmp_path, saved_test_vit):
    """tmp_path with imgs/ (three small PNGs) and w.safetensors (timm's test_vit, loadable with --weights)."""
    (tmp_path / "imgs").mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(tmp_path / "imgs" / f"{i}.png")
    saved_test_vit(tmp_path)
    return tmp_path


def _run(argv: str, tmp_path, capsys) -> tuple[int, str]:
    try:
        code = main(argv.format(tmp=tmp_path).split())
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


# ---- blocks out of range -------------------------------------------------------------------------------

def test_a_block_out_of_range_is_a_parameter_error_that_stays_a_value_error(tiny_vit):
    x = np.zeros((64, 64, 3), dtype=np.uint8)
    with pytest.raises(ParameterError, match=r"block 4 is out of range .* 0\.\.3"):
        tiny_vit.patch_grids([x], blocks=4)
    with pytest.raises(ValueError):
        tiny_vit.resolve_blocks([-5])


def test_export_backbone_with_blocks_out_of_range_is_a_usage_error_and_writes_nothing(folder, capsys,
                                                                                     tree_snapshot):
    before = tree_snapshot(folder)
    code, err = _run("export backbone --backbone test_vit --random-weights --image-size 64 --blocks 0,40 "
                     "--out {tmp}/e1", folder, capsys)
    assert code == 2, err
    assert "error (UsageError): --blocks 40 is out of range" in err
    assert tree_snapshot(folder) == before


# ---- inspect on a ConvNet ------------------------------------------------------------------------------

def test_inspect_of_a_convnet_is_a_usage_error_and_writes_nothing(folder, capsys, tree_snapshot):
    before = tree_snapshot(folder)
    code, err = _run("backbone inspect --backbone test_efficientnet --random-weights --image-size 64 "
                     "--images {tmp}/imgs --out {tmp}/o", folder, capsys)
    assert code == 2, err
    assert "error (UsageError)" in err and "needs a ViT" in err and "--backbone" in err
    assert tree_snapshot(folder) == before


def test_inspect_backbone_in_python_refuses_a_convnet_with_a_parameter_error(make_tiny_convnet):
    from frozenvit.backbone.diagnostics import inspect_backbone

    with pytest.raises(ParameterError, match="needs a ViT"):
        inspect_backbone(make_tiny_convnet(), [np.zeros((64, 64, 3), dtype=np.uint8)])


# ---- --random-weights with --weights -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    "backbone inspect --backbone test_vit --weights {tmp}/w.safetensors --random-weights --image-size 64 "
    "--images {tmp}/imgs --out {tmp}/o",
    "export backbone --backbone test_vit --weights {tmp}/w.safetensors --random-weights --image-size 64 "
    "--out {tmp}/o",
    "anomaly fit --backbone test_vit --weights {tmp}/w.safetensors --random-weights --image-size 64 "
    "--data {tmp}/imgs --out {tmp}/o",
], ids=["backbone inspect", "export backbone", "anomaly fit"])
def test_random_weights_with_weights_is_refused_by_every_command_with_a_backbone(argv, folder, capsys,
                                                                                  tree_snapshot):
    before = tree_snapshot(folder)
    code, err = _run(argv, folder, capsys)
    assert code == 2, err
    assert "error (UsageError)" in err and "--random-weights" in err and "--weights" in err
    assert tree_snapshot(folder) == before


def test_load_backbone_refuses_weights_with_random_weights(folder):
    from frozenvit.backbone import load_backbone

    with pytest.raises(UsageError, match="drop one"):
        load_backbone("test_vit", weights=folder / "w.safetensors", pretrained=False, img_size=64)


# ---- images --------------------------------------------------------------------------------------------

def test_a_float_pil_image_is_refused_like_a_float_array(tiny_vit):
    arr = np.full((64, 64), 0.5, dtype=np.float32)
    pil = Image.fromarray(arr)
    assert pil.mode == "F"
    with pytest.raises(PreprocessingMismatch, match="float image"):
        tiny_vit.patch_grids([pil])
    with pytest.raises(PreprocessingMismatch, match="float image"):
        tiny_vit.patch_grids([arr])


@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_sixteen_bit_and_int32_pil_images_give_the_grids_of_their_8_bit_version(tiny_vit, mode):
    rng = np.random.default_rng(1)
    u8 = rng.integers(0, 256, (64, 64), dtype=np.uint8)
    wide = Image.fromarray(u8.astype(np.uint16) * 257).convert(mode) if mode == "I" else \
        Image.fromarray(u8.astype(np.uint16) * 257)
    assert wide.mode == mode
    got = tiny_vit.patch_grids([wide])[-1]
    want = tiny_vit.patch_grids([u8])[-1]
    assert np.allclose(got.numpy(), want.numpy(), atol=1e-5)


@pytest.mark.parametrize("empty", [[], ()])
def test_patch_grids_of_no_images_is_the_named_no_images_error(tiny_vit, empty):
    with pytest.raises(ImageFormatError, match="no images given"):
        tiny_vit.patch_grids(empty)


# ---- distill -------------------------------------------------------------------------------------------

DISTILL = ("distill --teacher default --data {tmp}/imgs --image-size 32 --batch-size 2 --precision fp32 "
           "--student-kwargs {{\"depth\":1,\"embed_dim\":32,\"num_heads\":2}} --epochs 2 --out {tmp}/d1")


def test_distill_stopped_by_max_steps_names_the_checkpoint_not_a_student_it_did_not_write(folder, capsys):
    assert main((DISTILL + " --max-steps 1").format(tmp=folder).split()) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert not (folder / "d1" / "student.safetensors").exists()
    assert "student:" not in out
    assert str(folder / "d1" / "ckpt") in out and "--resume" in out and "step 1 of 2" in out
    assert main((DISTILL + " --resume").format(tmp=folder).split()) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert (folder / "d1" / "student.safetensors").is_file()
    assert out.startswith(f"student: {folder / 'd1' / 'student.safetensors'}")


def test_distill_help_shows_its_example_with_options_that_exist(capsys):
    with pytest.raises(SystemExit):
        main(["distill", "--help"])
    text = capsys.readouterr().out
    assert "--img-size" not in text and "--image-size 128" in text
    example = [line for line in text.splitlines() if line.lstrip().startswith("frozenvit distill --teacher")]
    assert example and all(not re.search(r"\S {2,}\S", line) for line in example)


def test_a_checkpoint_of_another_student_names_the_options_that_exist(tmp_path):
    import timm
    from safetensors.torch import save_file

    from frozenvit.backbone.distill.train import Distiller, init_distiller_from
    from frozenvit.backbone.errors import FrozenVitError

    def distiller(depth):
        vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=0, depth=depth,
                                embed_dim=32, num_heads=2)
        return Distiller(vit, {}, 0, None)

    save_file({k: v.contiguous() for k, v in distiller(1).state_dict().items()}, tmp_path / "model.safetensors")
    with pytest.raises(FrozenVitError, match="--image-size") as e:
        init_distiller_from(distiller(2), tmp_path / "model.safetensors")
    assert "--img-size" not in str(e.value)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_a_number_option_refuses_what_is_not_finite(text):
    import argparse

    from frozenvit.backbone.suite.cli import number

    for parse in (number(float, min=0, max=1), number(float, min=0, min_open=True), number(float)):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number"):
            parse(text)
    assert number(float, min=0, max=1)("0.5") == 0.5


@pytest.mark.parametrize("value,kind", [(float("nan"), "NaN"), (float("inf"), "+inf"), (float("-inf"), "-inf")])
def test_a_tensor_that_is_not_finite_is_refused_by_the_tensor_check(make_tiny_vit, value, kind):
    import torch

    bb = make_tiny_vit(depth=1)
    x = torch.zeros(1, 3, 64, 64)
    x[0, 1, 2, 3] = value
    with pytest.raises(PreprocessingMismatch, match=rf"1 of {x.numel()} values are not finite \({re.escape(kind)};"
                                                    r" the first at index \(0, 1, 2, 3\)"):
        bb.patch_grids(x)
    with pytest.raises(PreprocessingMismatch, match="not finite"):
        bb.patch_grids(torch.full((1, 3, 64, 64), float("nan")))


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_a_normalised_tensor_of_another_float_dtype_gives_the_float32_grids(make_tiny_vit, dtype):
    import torch

    bb = make_tiny_vit(depth=1)
    torch.manual_seed(0)
    x = (torch.rand(2, 3, 64, 64) - torch.tensor(bb.config.mean).view(1, 3, 1, 1)) / torch.tensor(bb.config.std).view(1, 3, 1, 1)
    x = x.to(getattr(torch, dtype))
    got = bb.patch_grids(x)[0]
    want = bb.patch_grids(x.float())[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("blocks,says", [([], "blocks is empty"), ((), "blocks is empty"),
                                         ("7", "is not a block index"), (1.5, "is not a block index"),
                                         ([0, "1"], "holds '1', not an int"), ([True], "holds True, not an int")])
def test_blocks_that_are_not_block_indices_raise_parameter_error(make_tiny_vit, blocks, says):
    bb = make_tiny_vit(depth=2)
    with pytest.raises(ParameterError, match=re.escape(says) + ".*at least one block index as an int"):
        bb.resolve_blocks(blocks)
    with pytest.raises(ParameterError, match=re.escape(says)):
        bb.patch_grids([np.zeros((64, 64, 3), np.uint8)], blocks=blocks)


def test_numpy_and_tensor_block_indices_still_count(make_tiny_vit):
    import torch

    bb = make_tiny_vit(depth=2)
    assert bb.resolve_blocks([np.int64(0), torch.tensor(-1)]) == [0, 1]
    assert bb.resolve_blocks(np.int32(1)) == [1]


def test_weights_of_another_width_are_backbone_unavailable_naming_the_model_they_fit(tmp_path):
    import timm
    from safetensors.torch import save_file

    from frozenvit.backbone import BackboneUnavailable, GridMismatch, load_backbone

    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1)
    save_file(vit.state_dict(), str(tmp_path / "tiny.safetensors"))
    with pytest.raises(BackboneUnavailable, match=r"has shape \(192,\), the model expects \(384,\).*right model name"
                                                  r".*perhaps vit_tiny_patch16_224\?") as e:
        load_backbone("vit_small_patch16_224", weights=tmp_path / "tiny.safetensors", img_size=32, depth=1)
    assert not isinstance(e.value, GridMismatch)


def test_a_dinov2_checkpoint_without_registers_is_not_called_a_grid_problem(tmp_path):
    import timm
    from safetensors.torch import save_file

    from frozenvit.backbone import BackboneUnavailable, load_backbone

    kw = dict(img_size=28, depth=1, embed_dim=32, num_heads=2)
    save_file(timm.create_model("vit_small_patch14_dinov2", pretrained=False, **kw).state_dict(),
              str(tmp_path / "plain.safetensors"))
    with pytest.raises(BackboneUnavailable, match=r"5 rows, a 2x2 grid with 1 prefix token.*right model name"):
        load_backbone("vit_small_patch14_reg4_dinov2", weights=tmp_path / "plain.safetensors", **kw)


def test_a_checkpoint_of_another_grid_is_still_resampled(tmp_path):
    import timm
    from safetensors.torch import save_file

    from frozenvit.backbone import GridMismatch, load_backbone

    kw = dict(depth=1, embed_dim=32, num_heads=2)
    save_file(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, **kw).state_dict(),
              str(tmp_path / "w.safetensors"))
    bb = load_backbone("vit_tiny_patch16_224", weights=tmp_path / "w.safetensors", img_size=64, **kw)
    assert bb.config.grid == (4, 4)
    with pytest.raises(GridMismatch, match="2x2 grid"):
        load_backbone("vit_tiny_patch16_224", weights=tmp_path / "w.safetensors", img_size=64,
                      allow_interpolation=False, **kw)


def test_an_output_of_another_command_is_refused_without_calling_it_foreign(tmp_path):
    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir
    from frozenvit.backbone.suite.errors import OutputConflict

    (output_dir(tmp_path / "out", "anomaly.predict") / "scores.csv").write_text("image,score\n")
    with pytest.raises(OutputConflict) as e:
        check_output_dir(tmp_path / "out", "control.evaluate")
    assert "holds a frozenvit 'anomaly.predict' output" in str(e.value)
    assert "replaces only an earlier output of its own" in str(e.value) and "did not write" not in str(e.value)
