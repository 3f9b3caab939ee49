"""Bad input to the backbone's, the trainer's and the demo's commands: exit 2, a named error, nothing written."""
import pytest

from frozenvit.backbone.suite.cli import main


CASES = [
    # (id, argv with {tmp}, error class)
    ("unknown model name", "backbone info --backbone vit_does_not_exist", "BackboneUnavailable"),
    ("weights without a model name", "backbone info --weights {tmp}/w.safetensors", "UsageError"),
    ("image-size not divisible by the patch", "backbone info --backbone vit_tiny_patch16_224 --image-size 70", "GridMismatch"),
    ("image-size 0", "backbone info --backbone vit_tiny_patch16_224 --image-size 0", "UsageError"),
    ("inspect: images that do not exist", "backbone inspect --images {tmp}/nothing --out {tmp}/o", "UsageError"),
    ("inspect: a folder without images", "backbone inspect --images {tmp}/empty --out {tmp}/o", "UsageError"),
    ("inspect: --max-images 0", "backbone inspect --images {tmp}/empty --max-images 0 --out {tmp}/o", "UsageError"),
    ("inspect: --batch-size -1", "backbone inspect --images {tmp}/empty --batch-size -1 --out {tmp}/o", "UsageError"),
    ("--threads 0", "backbone inspect --images {tmp}/empty --threads 0 --out {tmp}/o", "UsageError"),
    ("distill: --data that does not exist", "distill --data {tmp}/nothing --out {tmp}/o", "UsageError"),
    ("distill: --data without images", "distill --data {tmp}/empty --out {tmp}/o", "UsageError"),
    ("distill: --epochs 0", "distill --data {tmp}/empty --epochs 0 --out {tmp}/o", "UsageError"),
    ("distill: --student-kwargs not JSON", "distill --data {tmp}/empty --student-kwargs {{depth --out {tmp}/o",
     "UsageError"),
    ("distill: unknown teacher", "distill --data {tmp}/imgs --teacher resnet9000 --out {tmp}/o", "UsageError"),
    ("inspect: --out under a file", "backbone inspect --images {tmp}/imgs --out {tmp}/w.safetensors/o",
     "OutputConflict"),
    ("inspect: a text file named .png", "backbone inspect --images {tmp}/text --out {tmp}/o", "ImageFormatError"),
    ("distill: --data holding a text file named .png", "distill --data {tmp}/text --out {tmp}/o", "ImageFormatError"),
    ("demo: unknown section", "demo --only nosuchsection --out {tmp}/o", "UsageError"),
    ("demo: --threads -2", "demo --threads -2 --out {tmp}/o", "UsageError"),
]


@pytest.mark.parametrize("argv,error", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_named_error_with_exit_2_and_writes_nothing(tree_snapshot, argv, error, tmp_path,
                                                                    capsys):
    from PIL import Image

    (tmp_path / "empty").mkdir()
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (32, 32)).save(tmp_path / "imgs" / "a.png")
    (tmp_path / "w.safetensors").write_bytes(b"not really")
    (tmp_path / "text").mkdir()
    Image.new("RGB", (32, 32)).save(tmp_path / "text" / "a.png")
    (tmp_path / "text" / "notes.png").write_text("a text file with an image's suffix")
    before = tree_snapshot(tmp_path)
    try:
        code = main(argv.format(tmp=tmp_path).split())
    except SystemExit as e:                     # argparse's range checks
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error ({error})" in err
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("argv", ["backbone inspect --backbone efficientnet_lite0 --images {tmp}/imgs --out {tmp}/o",
                                  "anomaly fit --backbone efficientnet_lite0 --data {tmp}/imgs --out {tmp}/o"])
def test_a_named_backbone_without_its_weights_package_names_the_pip_extra(tree_snapshot, argv, tmp_path, capsys,
                                                                           monkeypatch):
    import sys

    from PIL import Image

    from frozenvit.backbone.named import NAMED

    monkeypatch.setitem(sys.modules, NAMED["efficientnet_lite0"].module, None)     # as if not installed
    (tmp_path / "imgs").mkdir()
    for i in range(3):
        Image.new("RGB", (32, 32)).save(tmp_path / "imgs" / f"{i}.png")
    before = tree_snapshot(tmp_path)
    assert main(argv.format(tmp=tmp_path).split()) == 2
    err = capsys.readouterr().err
    assert "error (WeightsPackageMissing)" in err and "frozenvit[convnets]" in err
    assert tree_snapshot(tmp_path) == before


def test_distill_cache_of_an_image_that_fails_to_decode_is_a_named_error_and_leaves_no_temporary(tmp_path):
    from PIL import Image

    from frozenvit.backbone.distill.data import build_cache
    from frozenvit.backbone.errors import ImageFormatError

    (tmp_path / "data").mkdir()
    Image.new("RGB", (40, 40), (9, 9, 9)).save(tmp_path / "data" / "a.png")
    good = (tmp_path / "data" / "a.png").read_bytes()
    (tmp_path / "data" / "b.png").write_bytes(good[: len(good) // 2])   # a header that reads, pixels that do not
    with pytest.raises(ImageFormatError, match="b.png"):
        build_cache(tmp_path / "data", tmp_path / "cache", 16, progress=False)
    assert not list((tmp_path / "cache").glob("*.tmp"))
