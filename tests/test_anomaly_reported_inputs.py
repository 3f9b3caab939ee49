"""How `anomaly` reads images, masks and dataset folders: defects a first-use trial reported.

Masks are binarised on their own scale (0/1 masks are not empty); an EXIF orientation is applied as viewers apply it;
MVTec masks named `<stem>.png` are matched and a set with no mask at all is said to have none; normals in subfolders
are read, as `predict` reads them, while test images and masks in subfolders are refused rather than skipped;
`test/Good` is the good folder, and a test set without one says that image AUROC is undefined.
"""
import json
import re
import shutil
import warnings

import numpy as np
import pytest
from PIL import Image

from frozenvit.anomaly.datasets import read_dataset, read_folders, read_mvtec
from frozenvit.anomaly.errors import DatasetError
from frozenvit.anomaly.images import image_size, read_image, read_mask
from frozenvit.anomaly.synthetic import make_synthetic_mvtec
from frozenvit.backbone.suite.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")

ORIENTATION = 0x0112


def _square(h=16, w=24, top=4, left=6, side=5, on=255, dtype=np.uint8):
    m = np.zeros((h, w), dtype)
    m[top:top + side, left:left + side] = on
    return m


def _plain(tmp_path, mask):
    """test/a.png (defective by `mask`), test/b.png (no mask), masks/a<...>: the folders of `read_folders`."""
    (tmp_path / "test").mkdir()
    (tmp_path / "masks").mkdir()
    img = np.full((*mask.shape, 3), 90, np.uint8)
    for name in ("a", "b"):
        Image.fromarray(img).save(tmp_path / "test" / f"{name}.png")
    Image.fromarray(mask).save(tmp_path / "masks" / "a_mask.png")
    return tmp_path / "test", tmp_path / "masks"


def _mvtec(tmp_path):
    return make_synthetic_mvtec(tmp_path, "weave", n_train=3, n_test_good=2, n_test_defect=1,
                                defects=("hole", "crack"), size=(32, 40))


# ---- 1. masks are cut at half their own scale -------------------------------------------------------------------

@pytest.mark.parametrize("on, dtype", [(1, np.uint8), (1, np.uint16), (255, np.uint16)],
                         ids=["0/1 8-bit", "0/1 16-bit", "0/255 16-bit"])
def test_a_mask_saved_as_0_1_or_16_bit_labels_its_image_defective(tmp_path, on, dtype):
    test, masks = _plain(tmp_path, _square(on=on, dtype=dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # no bit-depth guess, no "all masks empty"
        warnings.filterwarnings("ignore", message=r"1 of the 2 test images has no mask")   # b.png: named as good
        ds = read_folders(None, test, masks)
    assert ds.labels.tolist() == [1, 0]
    assert (ds.test[0].load_mask() == _square(on=True, dtype=bool)).all()


def test_a_mask_is_cut_at_half_its_own_scale_and_jpeg_noise_is_no_defect(tmp_path):
    edge = _square(on=255)
    edge[4:9, 5] = 100                                              # an antialiased rim: below half of 255
    edge[4:9, 11] = 200                                             # above half
    Image.fromarray(edge).save(tmp_path / "aa.png")
    want = _square(on=True, dtype=bool)
    want[4:9, 11] = True
    assert (read_mask(tmp_path / "aa.png") == want).all()
    Image.fromarray(_square(on=1)).save(tmp_path / "01.png")
    assert (read_mask(tmp_path / "01.png") == _square(on=True, dtype=bool)).all()
    Image.fromarray(_square(on=65535, dtype=np.uint16)).save(tmp_path / "16.png")
    assert (read_mask(tmp_path / "16.png") == _square(on=True, dtype=bool)).all()
    Image.fromarray(_square(on=1).astype(bool)).save(tmp_path / "bilevel.png")      # mode "1"
    assert read_mask(tmp_path / "bilevel.png").sum() == 25
    Image.fromarray(_square(on=255)).save(tmp_path / "drawn.jpg", quality=75)       # JPEG 0/255: noise near 0 and 255
    assert (read_mask(tmp_path / "drawn.jpg") == _square(on=True, dtype=bool)).all()
    noise = np.random.default_rng(0).integers(0, 4, (16, 24)).astype(np.uint8)    # a good image's mask, near zero
    Image.fromarray(noise).save(tmp_path / "empty.jpg", quality=95)
    assert np.asarray(Image.open(tmp_path / "empty.jpg")).max() > 0
    assert not read_mask(tmp_path / "empty.jpg").any()
    Image.fromarray(np.zeros((16, 24), np.uint8)).save(tmp_path / "zero.png")
    assert not read_mask(tmp_path / "zero.png").any()


def test_masks_that_all_read_empty_are_said_to_leave_every_image_good(tmp_path):
    test, masks = _plain(tmp_path, _square(on=0))
    with pytest.warns(UserWarning, match=r"all 1 masks in .*masks are empty"):
        assert read_folders(None, test, masks).labels.tolist() == [0, 0]


@pytest.fixture(scope="module")
def ws(synth_model, tmp_path_factory):
    return synth_model(tmp_path_factory.mktemp("reported_inputs"))


def test_evaluate_counts_mvtec_masks_saved_as_0_1(ws, tmp_path):
    data = tmp_path / "weave01"
    shutil.copytree(ws / "data" / "weave", data)
    for f in (data / "ground_truth").rglob("*.png"):
        Image.fromarray((np.asarray(Image.open(f)) > 127).astype(np.uint8)).save(f)
    assert main(["anomaly", "evaluate", "--model", str(ws / "model"), "--data", str(data),
                 "--out", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())["metrics"]
    assert {"pixel_auroc", "aupro"} <= set(metrics) and np.isfinite(metrics["image_auroc"])


# ---- 2. EXIF orientation ------------------------------------------------------------------------------------------

def _rotated_jpeg(path, stored):
    """Save `stored` (H, W, 3) as a JPEG tagged Orientation 6 (a viewer turns it a quarter clockwise)."""
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    Image.fromarray(stored).save(path, exif=exif.tobytes(), quality=95)


def test_an_exif_orientation_is_applied_to_the_pixels_and_the_size(tmp_path):
    stored = np.zeros((16, 24, 3), np.uint8)                        # H 16, W 24 as stored
    stored[:, :8] = 255                                             # a bright left band
    _rotated_jpeg(tmp_path / "cam.jpg", stored)
    img = read_image(tmp_path / "cam.jpg")
    assert img.shape == (24, 16, 3) and image_size(tmp_path / "cam.jpg") == (24, 16)
    assert img[:8].mean() > 200 and img[-8:].mean() < 50          # the left band is on top, as viewers show it
    exif = Image.Exif()
    exif[ORIENTATION] = 8
    Image.fromarray(stored[:, :, 0]).save(tmp_path / "mask.png", exif=exif.tobytes())
    assert read_mask(tmp_path / "mask.png").shape == (24, 16) == image_size(tmp_path / "mask.png")


def test_a_mask_drawn_on_the_shown_photo_fits_a_rotated_camera_jpeg(tmp_path):
    (tmp_path / "test").mkdir()
    (tmp_path / "masks").mkdir()
    _rotated_jpeg(tmp_path / "test" / "cam.jpg", np.full((16, 24, 3), 90, np.uint8))
    shown = _square(h=24, w=16, top=2, left=3)                      # drawn on the 16 x 24 (W x H) photo a viewer shows
    Image.fromarray(shown).save(tmp_path / "masks" / "cam_mask.png")
    ds = read_folders(None, tmp_path / "test", tmp_path / "masks")
    assert ds.labels.tolist() == [1]
    assert (ds.test[0].load_mask() == shown.astype(bool)).all()


def test_predict_maps_a_camera_jpeg_in_the_orientation_a_viewer_shows(ws, tmp_path):
    (tmp_path / "cam").mkdir()
    stored = np.asarray(Image.open(ws / "data" / "weave" / "test" / "good" / "000.png").convert("RGB"))  # 80 x 96
    _rotated_jpeg(tmp_path / "cam" / "photo.jpg", stored)
    assert main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(tmp_path / "cam"),
                 "--out", str(tmp_path / "pred")]) == 0
    assert Image.open(tmp_path / "pred" / "overlays" / "photo.png").size == (80, 96)   # (W, H) as shown


# ---- 3. MVTec masks named <stem>.png; a set without masks says so -----------------------------------------------

def test_mvtec_masks_named_by_the_image_stem_are_matched(tmp_path):
    root = _mvtec(tmp_path)
    for f in (root / "ground_truth").rglob("*_mask.png"):
        f.rename(f.with_name(f.name.replace("_mask", "")))
    ds = read_mvtec(root)
    assert ds.has_masks and all(s.load_mask().any() for s in ds.test if s.label == 1)


def test_two_masks_of_one_image_are_fine_when_equal_and_refused_naming_both_when_they_differ(tmp_path):
    root = _mvtec(tmp_path)
    gt = root / "ground_truth" / "hole"
    shutil.copy(gt / "000_mask.png", gt / "000.png")
    assert read_mvtec(root).has_masks
    Image.fromarray(np.zeros((32, 40), np.uint8)).save(gt / "000.png")
    with pytest.raises(DatasetError, match=r"two masks that differ.*000_mask\.png and .*000\.png|"
                                           r"two masks that differ.*000\.png and .*000_mask\.png"):
        read_mvtec(root)


def test_a_test_set_whose_defective_images_have_no_mask_at_all_is_said_to_have_none(tmp_path):
    root = _mvtec(tmp_path)
    shutil.rmtree(root / "ground_truth")
    with pytest.warns(UserWarning, match=r"no mask for any of the 2 defective test images.*pixel AUROC"):
        ds = read_mvtec(root)
    assert not ds.has_masks
    with warnings.catch_warnings():
        warnings.simplefilter("error")                              # fit reads the normals: nothing to say there
        assert len(read_dataset(root).train) == 3


# ---- 4. normals in subfolders are read; test images and masks in subfolders are refused --------------------------

def _pngs(folder, n, start=0):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + n):
        Image.fromarray(np.full((8, 8, 3), i, np.uint8)).save(folder / f"{i:03d}.png")


def test_a_folder_of_normals_is_read_with_its_subfolders_as_predict_reads_it(tmp_path):
    _pngs(tmp_path / "nest", 3)
    _pngs(tmp_path / "nest" / "day2", 4, start=3)
    _pngs(tmp_path / "only_days" / "day1", 2)
    assert len(read_dataset(tmp_path / "nest").train) == 7
    assert len(read_dataset(tmp_path / "only_days").train) == 2


def test_fit_counts_the_normals_in_subfolders(ws, tmp_path, capsys):
    train = sorted((ws / "data" / "weave" / "train" / "good").glob("*.png"))
    (tmp_path / "nest" / "day2").mkdir(parents=True)
    for f in train[:2]:
        shutil.copy(f, tmp_path / "nest" / f.name)
    for f in train[2:]:
        shutil.copy(f, tmp_path / "nest" / "day2" / f.name)
    assert main(["anomaly", "fit", "--data", str(tmp_path / "nest"), "--out", str(tmp_path / "m"), "--backbone",
                 "test_vit", "--weights", str(ws / "w.safetensors"), "--image-size", "64", "--threads", "1"]) == 0
    fitted = int(re.search(r"fitted on (\d+) normal images", capsys.readouterr().out).group(1))
    assert fitted > 2                                               # the 6 in day2/ count (some are held out)


@pytest.mark.parametrize("parts", [("normal", "test", "masks"), ("good", "scratch"), ("test", "ground_truth")])
def test_a_labelled_dataset_is_never_read_as_a_folder_of_normals(tmp_path, parts):
    for i, part in enumerate(parts):
        _pngs(tmp_path / "data" / part, 2, start=2 * i)
    with pytest.raises(DatasetError, match=r"labelled dataset, not a folder of normal images"):
        read_dataset(tmp_path / "data")


def test_test_images_and_masks_in_subfolders_are_refused_naming_the_subfolder(tmp_path):
    _pngs(tmp_path / "test", 2)
    _pngs(tmp_path / "test" / "day2", 2, start=2)
    with pytest.raises(DatasetError, match=r"test images folder .*test has images in subfolders \(day2\)"):
        read_folders(None, tmp_path / "test")
    root = _mvtec(tmp_path / "cat")
    _pngs(root / "test" / "hole" / "extra", 1, start=9)
    with pytest.raises(DatasetError, match=r"hole has images in subfolders \(extra\)"):
        read_mvtec(root)


# ---- 5. test/Good; a test set without good images ---------------------------------------------------------------

def test_test_Good_is_read_as_the_good_folder(tmp_path):
    root = _mvtec(tmp_path)
    (root / "test" / "good").rename(root / "test" / "Good")
    ds = read_mvtec(root)
    assert sorted(ds.labels.tolist()) == [0, 0, 1, 1]
    assert {s.defect_type for s in ds.test if s.label == 0} == {"good"}


def test_good_and_Good_side_by_side_are_refused_saying_test_good_is_expected(tmp_path):
    root = _mvtec(tmp_path)
    shutil.copytree(root / "test" / "good", root / "test" / "Good")
    with pytest.raises(DatasetError, match=r"holds Good and good|holds good and Good"):
        read_mvtec(root)


def test_a_test_set_without_a_good_folder_says_image_auroc_is_undefined(tmp_path):
    root = _mvtec(tmp_path)
    shutil.rmtree(root / "test" / "good")
    with pytest.warns(UserWarning, match=r"has no good folder \(found: crack, hole\).*image AUROC"):
        read_mvtec(root)


def test_evaluate_scores_a_test_Good_folder_as_good(ws, tmp_path):
    data = tmp_path / "weaveGood"
    shutil.copytree(ws / "data" / "weave", data)
    (data / "test" / "good").rename(data / "test" / "Good")
    assert main(["anomaly", "evaluate", "--model", str(ws / "model"), "--data", str(data),
                 "--out", str(tmp_path / "m.json")]) == 0
    res = json.loads((tmp_path / "m.json").read_text())
    assert np.isfinite(res["metrics"]["image_auroc"]) and "Good" not in {r["defect"] for r in res["per_defect_type"]}
