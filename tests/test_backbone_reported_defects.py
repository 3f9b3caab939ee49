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
