"""Synthetic generator and readers, including the bad inputs the issue lists."""
import numpy as np
import pytest
from PIL import Image

from frozenvit.anomaly.datasets import read_dataset, read_folders, read_mvtec
from frozenvit.anomaly.errors import DatasetError
from frozenvit.anomaly.images import read_image, read_mask
from frozenvit.anomaly.synthetic import CATEGORIES, DEFECTS, make_synthetic_mvtec, render_sample
from frozenvit.backbone.errors import ImageFormatError


@pytest.mark.parametrize("category", CATEGORIES)
@pytest.mark.parametrize("defect", DEFECTS)
def test_synthetic_mask_is_exactly_where_the_defect_painted(category, defect):
    # same seed/index with and without defect share the background up to the defect's RNG draws,
    # so compare against the painted image itself: outside the mask nothing was touched
    img, mask = render_sample(category, defect, seed=0, index=2, size=(64, 80))
    again, _ = render_sample(category, defect, seed=0, index=2, size=(64, 80))
    assert (img == again).all()                       # deterministic
    assert img.shape == (64, 80, 3) and mask.shape == (64, 80) and mask.sum() >= 6
    from frozenvit.anomaly.synthetic import _rng, _u8, render_normal
    clean, _ = render_normal(category, _rng(0, CATEGORIES.index(category), 1 + DEFECTS.index(defect), 2), (64, 80))
    changed = np.abs(img.astype(int) - _u8(clean).astype(int)).max(axis=2) > 0
    assert not (changed & ~mask).any()                  # nothing outside the mask changed
    assert changed[mask].mean() > 0.5                   # and the mask is mostly visibly changed


def test_synthetic_set_has_mvtec_layout_and_reads_back(tmp_path):
    root = make_synthetic_mvtec(tmp_path, "washer", n_train=4, n_test_good=2, n_test_defect=1, size=(48, 56))
    ds = read_mvtec(root)
    assert len(ds.train) == 4 and len(ds.test) == 2 + len(DEFECTS)
    assert ds.has_masks and ds.labels.sum() == len(DEFECTS)
    s = next(t for t in ds.test if t.label == 1)
    assert s.load_mask().any() and s.load_mask().shape == (48, 56)
    assert not next(t for t in ds.test if t.label == 0).load_mask().any()
    assert read_dataset(root).root == root


def test_sixteen_bit_and_gray_pngs_read_as_eight_bit_rgb(tmp_path):
    a16 = (np.arange(20 * 30, dtype=np.uint16).reshape(20, 30) * 100)
    Image.fromarray(a16).save(tmp_path / "g16.png")
    img = read_image(tmp_path / "g16.png")
    assert img.dtype == np.uint8 and img.shape == (20, 30, 3)
    assert (img[..., 0] == np.round(a16 / 257).astype(np.uint8)).all()
    Image.fromarray(np.full((5, 6), 7, np.uint8)).save(tmp_path / "g8.png")
    assert (read_image(tmp_path / "g8.png") == 7).all()


def test_corrupt_image_error_names_the_file(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(ImageFormatError, match="broken.png"):
        read_image(tmp_path / "broken.png")


def test_mask_of_another_size_is_refused_naming_both_files(tmp_path):
    root = make_synthetic_mvtec(tmp_path, "weave", n_train=2, n_test_good=1, n_test_defect=1,
                                defects=("hole",), size=(32, 32))
    Image.fromarray(np.zeros((16, 16), np.uint8)).save(root / "ground_truth" / "hole" / "000_mask.png")
    with pytest.raises(DatasetError, match=r"000_mask.png.*16x16.*32x32"):
        read_mvtec(root)


def test_mask_without_image_is_refused(tmp_path):
    root = make_synthetic_mvtec(tmp_path, "weave", n_train=2, n_test_good=1, n_test_defect=1,
                                defects=("hole",), size=(32, 32))
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(root / "ground_truth" / "hole" / "007_mask.png")
    with pytest.raises(DatasetError, match="007_mask.png has no image"):
        read_mvtec(root)


def test_empty_training_folder_is_refused(tmp_path):
    (tmp_path / "cat" / "train" / "good").mkdir(parents=True)
    (tmp_path / "cat" / "train" / "good" / "notes.txt").write_text("no images")
    with pytest.raises(DatasetError, match="holds no image files"):
        read_mvtec(tmp_path / "cat")


def test_plain_folders_label_test_images_by_their_masks(tmp_path):
    for d in ("normal", "test", "masks"):
        (tmp_path / d).mkdir()
    img = np.zeros((8, 8, 3), np.uint8)
    for name in ("n0", "n1"):
        Image.fromarray(img).save(tmp_path / "normal" / f"{name}.png")
    for name in ("a", "b", "c"):
        Image.fromarray(img).save(tmp_path / "test" / f"{name}.jpg")
    m = np.zeros((8, 8), np.uint8)
    Image.fromarray(m).save(tmp_path / "masks" / "a_mask.png")             # empty mask: good
    m[2:4, 2:4] = 255
    Image.fromarray(m).save(tmp_path / "masks" / "b.png")                  # positive: defective
    ds = read_folders(tmp_path / "normal", tmp_path / "test", tmp_path / "masks")
    assert [(s.path.stem, s.label) for s in ds.test] == [("a", 0), ("b", 1), ("c", 0)]
    assert read_mask(ds.test[1].mask_path).sum() == 4
    Image.fromarray(m).save(tmp_path / "masks" / "zzz.png")
    with pytest.raises(DatasetError, match="zzz.png has no test image"):
        read_folders(tmp_path / "normal", tmp_path / "test", tmp_path / "masks")


def _save16(path, a, sbit=None):
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    if sbit is not None:
        info.add(b"sBIT", bytes([sbit]))
    Image.fromarray(a).save(path, pnginfo=info)


@pytest.mark.parametrize("depth", [8, 12, 16])
@pytest.mark.parametrize("recorded", [True, False])
def test_sixteen_bit_pngs_are_scaled_by_their_real_bit_depth(tmp_path, depth, recorded):
    import warnings

    v8 = np.linspace(0, 255, 20 * 30).reshape(20, 30).round().astype(np.uint8)
    a16 = np.round(v8 / 255 * (2 ** depth - 1)).astype(np.uint16)       # depth-bit content in a 16-bit PNG
    _save16(tmp_path / "g.png", a16, depth if recorded else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        img = read_image(tmp_path / "g.png")
    assert img.dtype == np.uint8 and img.shape == (20, 30, 3)
    assert np.abs(img[..., 0].astype(int) - v8).max() <= 1
    guessed = any("without a recorded bit depth" in str(w.message) for w in caught)
    assert guessed == (not recorded and depth < 16)


def test_a_recorded_bit_depth_keeps_a_dark_image_dark(tmp_path):
    a12 = np.full((8, 8), 200, np.uint16)                                 # dim in 12 bits
    _save16(tmp_path / "dim.png", a12, 12)
    assert (read_image(tmp_path / "dim.png") == round(200 / 4095 * 255)).all()


def test_readers_skip_what_frozenvit_wrote_and_hidden_files(tmp_path):
    from frozenvit.backbone.suite.artifacts import output_dir

    root = make_synthetic_mvtec(tmp_path, "weave", n_train=3, n_test_good=1, n_test_defect=1, size=(48, 56))
    for inside in (root / "test" / "inspect-out", root / "train" / "good" / "inspect-out"):
        Image.new("RGB", (48, 56)).save(output_dir(inside, "backbone.inspect") / "inspect.png")
    Image.new("RGB", (48, 56)).save(root / "train" / "good" / "._000.png")
    (root / "test" / ".ipynb_checkpoints").mkdir()
    Image.new("RGB", (48, 56)).save(root / "test" / ".ipynb_checkpoints" / "x.png")
    ds = read_mvtec(root)
    assert [p.name for p in ds.train] == ["000.png", "001.png", "002.png"]
    assert {s.defect_type for s in ds.test} == {"good", *DEFECTS}
