"""How `anomaly` reads labels, masks and image files it used to read wrongly without a word: defects a new-user trial
reported.

Plain folders take their labels from the masks alone, so the images read as good for want of a mask are named; a
mask's transparency decides which pixels are drawn; 16-bit colour PNGs keep their low byte; a PIL image is turned by
its EXIF orientation as its path is; linked folders, GIFs and multi-page files are read or named, never skipped
silently; MVTec masks that read empty or sit in ground_truth/good are named, defect folders match ground_truth in any
case; the ensemble's threshold is calibrated on out-of-sample scores; a test set of one class says so once.
"""
import json
import os
import shutil
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
from frozenvit.anomaly.datasets import read_folders, read_mvtec
from frozenvit.anomaly.errors import DatasetError
from frozenvit.anomaly.evaluation import evaluate_dataset
from frozenvit.anomaly.images import as_image, read_image, read_mask
from frozenvit.anomaly.synthetic import make_synthetic_mvtec
from frozenvit.backbone.commands import image_files
from frozenvit.backbone.suite.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")

ORIENTATION = 0x0112


def _square(h=16, w=24, on=255, dtype=np.uint8):
    m = np.zeros((h, w), dtype)
    m[4:9, 6:11] = on
    return m


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png16(path, a, colour_type, filters=(0, 1, 2, 3, 4), sbit=None, exif=None):
    """A 16-bit PNG of samples `a` (H, W[, C]) written by hand (Pillow cannot write 16-bit colour), each row with
    the next of `filters` (0 none, 1 Sub, 2 Up, 3 Average, 4 Paeth), so that the reader must undo them all."""
    h, w = a.shape[:2]
    c = a.reshape(h, w, -1).shape[2]
    bpp = 2 * c
    rows = [np.frombuffer(np.ascontiguousarray(a[i]).astype(">u2").tobytes(), np.uint8).astype(np.int64)
            for i in range(h)]
    raw, prev = b"", np.zeros_like(rows[0])
    for i, r in enumerate(rows):
        kind = filters[i % len(filters)]
        left = np.concatenate([np.zeros(bpp, np.int64), r[:-bpp]])
        up_left = np.concatenate([np.zeros(bpp, np.int64), prev[:-bpp]])
        if kind == 4:
            p = left + prev - up_left
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - up_left)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, up_left))
        else:
            pred = {0: 0 * r, 1: left, 2: prev, 3: (left + prev) // 2}[kind]
        raw += bytes([kind]) + ((r - pred) % 256).astype(np.uint8).tobytes()
        prev = r
    body = _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, 0))
    if sbit is not None:
        body += _chunk(b"sBIT", bytes([sbit] * c))
    if exif is not None:
        body += _chunk(b"eXIf", exif)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + body + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))
    return path


def _photo(h=24, w=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (h, w, 3)).astype(np.uint8)


# ---- 1. plain folders: a test image without a mask is read as good, and named ----------------------------------

def _plain(tmp_path, good_masks=False):
    """test/a.png, b.png (defective: masks), c.png, d.png (good); masks for a and b, and empty ones for c and d
    with `good_masks`."""
    (tmp_path / "test").mkdir()
    (tmp_path / "masks").mkdir()
    for name in "abcd":
        Image.fromarray(np.full((16, 24, 3), 90, np.uint8)).save(tmp_path / "test" / f"{name}.png")
    for name in "ab":
        Image.fromarray(_square()).save(tmp_path / "masks" / f"{name}_mask.png")
    for name in "cd" if good_masks else "":
        Image.fromarray(_square(on=0)).save(tmp_path / "masks" / f"{name}_mask.png")
    return tmp_path / "test", tmp_path / "masks"


def test_plain_test_images_without_a_mask_are_read_as_good_with_a_warning_naming_them(tmp_path):
    test, masks = _plain(tmp_path)
    (masks / "b_mask.png").unlink()                                  # a defective image whose mask went missing
    with pytest.warns(UserWarning, match=r"3 of the 4 test images have no mask .* read as good \(.*b\.png, .*c\.png, "
                                         r".*d\.png\).*masks are the only labels"):
        ds = read_folders(None, test, masks)
    assert ds.labels.tolist() == [1, 0, 0, 0]
    assert [p.name for p in ds.good_without_mask] == ["b.png", "c.png", "d.png"]


def test_with_empty_masks_for_the_good_images_only_the_image_whose_mask_is_missing_is_named(tmp_path):
    test, masks = _plain(tmp_path, good_masks=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                               # every label explicit: nothing to say
        assert read_folders(None, test, masks).labels.tolist() == [1, 1, 0, 0]
    (masks / "b_mask.png").unlink()
    with pytest.warns(UserWarning, match=r"1 of the 4 test images has no mask .*\(.*b\.png\)") as said:
        read_folders(None, test, masks)
    assert "c.png" not in str(said[0].message)


# ---- 2. a mask's transparency decides which pixels are drawn ----------------------------------------------------

def _rgba(colour, alpha):
    return Image.fromarray(np.dstack([colour, alpha]).astype(np.uint8), "RGBA")


@pytest.mark.parametrize("case", ["red on transparent white", "red on transparent black", "black on transparent white",
                                  "white on opaque black, transparent border"])
def test_a_mask_with_alpha_marks_a_defect_only_where_it_is_visible_and_coloured(tmp_path, case):
    want = _square(on=True, dtype=bool)
    colour = np.zeros((16, 24, 3), np.uint8)
    alpha = np.where(want, 255, 0)
    if case == "red on transparent white":
        colour[:] = 255
        colour[want] = (255, 0, 0)
    elif case == "red on transparent black":
        colour[want] = (255, 0, 0)
    elif case == "black on transparent white":
        colour[~want] = 255
    else:                                                            # two visible colours: composited on black
        colour[want] = 255
        alpha = np.full((16, 24), 255)
        alpha[:, :3] = 0
        colour[:, :3] = 255                                          # a transparent border holding white
    _rgba(colour, alpha).save(tmp_path / "m.png")
    assert (read_mask(tmp_path / "m.png") == want).all()


def test_an_alpha_only_mask_and_an_opaque_rgba_mask_read_as_drawn(tmp_path):
    want = _square(on=True, dtype=bool)
    Image.fromarray(np.dstack([np.full((16, 24), 255), np.where(want, 255, 0)]).astype(np.uint8), "LA").save(
        tmp_path / "la.png")
    assert (read_mask(tmp_path / "la.png") == want).all()
    _rgba(np.zeros((16, 24, 3)), np.full((16, 24), 255)).save(tmp_path / "opaque_empty.png")   # opaque black: empty
    assert not read_mask(tmp_path / "opaque_empty.png").any()
    p = Image.fromarray(want.astype(np.uint8), "L").convert("P")
    p.putpalette([255, 255, 255, 0, 0, 0] + [0] * 762)               # index 0 white, index 1 black
    p.info["transparency"] = 0                                       # ... and transparent: black on a clear layer
    p.save(tmp_path / "palette.png", transparency=0)
    assert (read_mask(tmp_path / "palette.png") == want).all()


def test_a_16_bit_rgba_mask_reads_its_alpha_at_16_bits(tmp_path):
    want = _square(on=True, dtype=bool)
    a = np.zeros((16, 24, 4), np.uint16)
    a[..., :3] = 65535
    a[..., 3] = np.where(want, 65535, 0)
    assert (read_mask(_png16(tmp_path / "m16.png", a, colour_type=6)) == want).all()


# ---- 3. 16-bit colour PNGs are read at 16 bits ------------------------------------------------------------------

def test_12_bit_data_in_a_16_bit_rgb_png_is_read_at_its_depth_with_the_grey_paths_warning(tmp_path):
    ref = _photo()
    path = _png16(tmp_path / "rgb12.png", ref.astype(np.uint16) * 16, colour_type=2)
    with pytest.warns(UserWarning, match="fits 12 bits"):
        got = read_image(path)
    assert np.abs(got.astype(int) - ref).max() <= 1                  # / 4095 * 255, not the high byte (16x darker)


def test_a_16_bit_rgb_png_with_sbit_and_16_bit_gray_alpha_and_rgba_pngs_keep_their_low_byte(tmp_path):
    ref = _photo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")                               # sBIT recorded: no guess to warn about
        got = read_image(_png16(tmp_path / "sbit.png", ref.astype(np.uint16) * 16, colour_type=2, sbit=12))
    assert np.abs(got.astype(int) - ref).max() <= 1
    rgba = np.dstack([ref.astype(np.uint16) * 257, np.full(ref.shape[:2], 65535, np.uint16)])
    assert np.array_equal(read_image(_png16(tmp_path / "rgba.png", rgba, colour_type=6)), ref)
    gray = ref[..., 0].astype(np.uint16) * 16
    la = np.dstack([gray, np.full(gray.shape, 65535, np.uint16)])
    with pytest.warns(UserWarning, match="fits 12 bits"):
        got = read_image(_png16(tmp_path / "la.png", la, colour_type=4))
    assert np.abs(got[..., 0].astype(int) - ref[..., 0]).max() <= 1


def test_a_16_bit_rgb_png_with_an_exif_orientation_is_turned(tmp_path):
    ref = _photo()
    exif = Image.Exif()
    exif[ORIENTATION] = 6                                            # stored turned left, shown turned right
    stored = np.ascontiguousarray(np.rot90(ref, 1)).astype(np.uint16) * 16            # 12-bit data, sBIT 12
    got = read_image(_png16(tmp_path / "turned.png", stored, colour_type=2, sbit=12, exif=exif.tobytes()[6:]))
    assert got.shape == ref.shape and np.abs(got.astype(int) - ref).max() <= 1


# ---- 5. a PIL image is turned by its EXIF orientation, as its path is -------------------------------------------

@pytest.fixture(scope="module")
def tiny_patchcore(make_tiny_vit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PatchCore(make_tiny_vit(), coreset_ratio=0.5, holdout=0.3, progress=False).fit(
            [_photo(48, 64, seed=i) for i in range(4)])


def test_a_pil_image_with_an_exif_orientation_gives_the_map_of_its_path(tmp_path, tiny_patchcore):
    ref = _photo(24, 40)
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    Image.fromarray(np.ascontiguousarray(np.rot90(ref, 1))).save(tmp_path / "t.png", exif=exif.tobytes())
    with Image.open(tmp_path / "t.png") as im:
        assert np.array_equal(np.asarray(as_image(im)), read_image(tmp_path / "t.png"))
        from_pil = tiny_patchcore.predict(im)
    from_path = tiny_patchcore.predict(tmp_path / "t.png")
    assert from_pil.maps[0].shape == from_path.maps[0].shape == (24, 40)
    np.testing.assert_allclose(from_pil.maps[0], from_path.maps[0], rtol=1e-5, atol=1e-6)
    assert from_pil.scores[0] == pytest.approx(from_path.scores[0], rel=1e-5)


# ---- 6. linked folders, GIFs and multi-page files are read, or named ---------------------------------------------

def test_a_linked_subfolder_is_read_and_a_link_back_up_the_tree_ends(tmp_path):
    root, outside = tmp_path / "images", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    Image.fromarray(_photo()).save(root / "a.png")
    Image.fromarray(_photo()).save(outside / "b.png")
    os.symlink(outside, root / "linked")
    os.symlink(root, outside / "back")                                # a loop
    assert sorted(p.name for p in image_files([root])) == ["a.png", "b.png"]


def test_a_gif_is_read_and_an_image_of_a_format_not_read_is_named(tmp_path):
    Image.fromarray(_photo()).save(tmp_path / "a.png")
    Image.fromarray(_photo()).save(tmp_path / "b.gif")
    (tmp_path / "c.heic").write_bytes(b"\x00" * 64)
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.warns(UserWarning, match=r"skipped 1 image file .*c\.heic"):
        files = image_files([tmp_path])
    assert [p.name for p in files] == ["a.png", "b.gif"]
    assert read_image(tmp_path / "b.gif").shape == (24, 40, 3)


@pytest.mark.parametrize("suffix, what", [(".tif", "pages"), (".gif", "frames")])
def test_a_file_of_several_pages_is_read_by_its_first_with_a_warning_naming_it(tmp_path, suffix, what):
    first, second = Image.fromarray(_photo(seed=1)), Image.fromarray(_photo(seed=2))
    first.save(tmp_path / f"many{suffix}", save_all=True, append_images=[second])
    with pytest.warns(UserWarning, match=rf"many{suffix} holds 2 {what}; only the first is read"):
        got = read_image(tmp_path / f"many{suffix}")
    if suffix == ".tif":
        assert np.array_equal(got, _photo(seed=1))


# ---- 7, 8, 10. MVTec masks that read empty or mark good images, defect folders in another case, one warning -----

def _mvtec(tmp_path):
    return make_synthetic_mvtec(tmp_path, "weave", n_train=4, n_test_good=2, n_test_defect=2,
                                defects=("hole",), size=(48, 64))


@pytest.fixture(scope="module")
def mvtec_patchcore(make_tiny_vit, tmp_path_factory):
    root = _mvtec(tmp_path_factory.mktemp("fit"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PatchCore(make_tiny_vit(), coreset_ratio=0.5, holdout=0.3, progress=False).fit(read_mvtec(root).train)


def test_a_defect_mask_that_reads_empty_is_named_and_left_out_of_the_pixel_metrics(tmp_path, mvtec_patchcore):
    root = _mvtec(tmp_path)
    empty = root / "ground_truth" / "hole" / "000_mask.png"
    Image.fromarray(np.zeros((48, 64), np.uint8)).save(empty)
    with pytest.warns(UserWarning, match=r"1 mask of defective test images read empty \(.*000_mask\.png\).*leave the "
                                         r"image out"):
        metrics, _ = evaluate_dataset(mvtec_patchcore, read_mvtec(root))
    assert np.isfinite(metrics["pixel_auroc"])
    Image.fromarray(np.zeros((48, 64), np.uint8)).save(root / "ground_truth" / "hole" / "001_mask.png")
    with pytest.warns(UserWarning, match=r"every mask of the 2 defective test images with one reads empty"):
        metrics, _ = evaluate_dataset(mvtec_patchcore, read_mvtec(root))
    assert "pixel_auroc" not in metrics


def test_a_mask_marking_defect_pixels_in_ground_truth_good_is_named(tmp_path):
    root = _mvtec(tmp_path)
    (root / "ground_truth" / "good").mkdir()
    Image.fromarray(np.zeros((48, 64), np.uint8)).save(root / "ground_truth" / "good" / "000_mask.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                               # an empty mask of a good image is fine
        read_mvtec(root)
    Image.fromarray(np.full((48, 64), 255, np.uint8)).save(root / "ground_truth" / "good" / "001_mask.png")
    with pytest.warns(UserWarning, match=r"1 mask in .*good marks defect pixels \(.*001_mask\.png\): ignored"):
        read_mvtec(root)


def test_a_defect_folder_matches_its_ground_truth_folder_in_another_case(tmp_path):
    root = _mvtec(tmp_path)
    (root / "test" / "hole").rename(root / "test" / "Hole")
    ds = read_mvtec(root)
    assert ds.has_masks and {s.defect_type for s in ds.test if s.label == 1} == {"Hole"}


def test_a_mask_whose_image_is_in_another_defect_folder_says_where_to_move_it(tmp_path):
    root = make_synthetic_mvtec(tmp_path, "weave", n_train=3, n_test_good=1, n_test_defect=1, defects=("hole",),
                                size=(48, 64))
    (root / "test" / "crack").mkdir()
    (root / "test" / "hole" / "000.png").rename(root / "test" / "crack" / "000.png")
    Image.fromarray(np.full((48, 64, 3), 90, np.uint8)).save(root / "test" / "hole" / "001.png")
    with pytest.raises(DatasetError, match=r"no image test/hole/000\.\*; but test/crack/000\.png exists: move the mask "
                                           r"to ground_truth/crack/"):
        read_mvtec(root)


def test_a_test_set_without_good_images_says_image_auroc_is_undefined_once(tmp_path, mvtec_patchcore):
    root = _mvtec(tmp_path)
    shutil.rmtree(root / "test" / "good")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics, per_type = evaluate_dataset(mvtec_patchcore, read_mvtec(root))
    said = [str(w.message) for w in caught if "AUROC" in str(w.message) and "undefined" in str(w.message)]
    assert len(said) == 1 and "has no good folder" in said[0]
    assert np.isnan(metrics["image_auroc"]) and np.isnan(per_type[0]["image_auroc"])


# ---- 4. with 2 held-out normals the ensemble's threshold bounds nothing ----------------------------------------

def _normals(n, seed):
    rng = np.random.default_rng(seed)
    return [(rng.normal(128, 20, (48, 64, 3))).clip(0, 255).astype(np.uint8) for _ in range(n)]


def test_two_held_out_normals_are_said_to_bound_no_false_alarm_rate_for_the_ensemble(make_tiny_vit, make_tiny_convnet):
    """Standardised by the mean and spread of their own two scores, every member's held-out z-scores are -1 and +1,
    so the threshold can only be 1/3 or 1 whatever the data: the members' "by 1/3" does not hold for it."""
    members = [PatchCore(make_tiny_vit(), coreset_ratio=0.5, progress=False),
               PatchCore(make_tiny_convnet(), coreset_ratio=0.5, progress=False)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det = PatchCoreEnsemble(members, progress=False).fit(_normals(10, 1))        # holdout 0.2: 2 held out
    said = [str(w.message) for w in caught if "held-out normals" in str(w.message)]
    assert len(said) == 1 and "bounds no false-alarm rate" in said[0] and "by 1/3" in said[0]
    assert det.threshold_ in (pytest.approx(1 / 3), pytest.approx(1.0))


# ---- 1. (command line) evaluate --test --masks lists the images read as good --------------------------------------

@pytest.fixture(scope="module")
def ws(synth_model, tmp_path_factory):
    return synth_model(tmp_path_factory.mktemp("reported_formats"))


def test_evaluate_with_plain_folders_lists_the_images_read_as_good_for_want_of_a_mask(ws, tmp_path):
    data = ws / "data" / "weave"
    test, masks = tmp_path / "test", tmp_path / "masks"
    test.mkdir()
    masks.mkdir()
    for d in sorted((data / "test").iterdir()):
        for p in sorted(d.iterdir()):
            shutil.copy(p, test / f"{d.name}_{p.name}")
            m = data / "ground_truth" / d.name / f"{p.stem}_mask.png"
            if m.exists():
                shutil.copy(m, masks / f"{d.name}_{p.stem}_mask.png")
    gone = sorted(masks.iterdir())[0]
    gone.unlink()
    with pytest.warns(UserWarning, match=rf"no mask in .* read as good \(.*{gone.name[:-9]}\.png"):
        assert main(["anomaly", "evaluate", "--model", str(ws / "model"), "--test", str(test), "--masks", str(masks),
                     "--out", str(tmp_path / "m.json")]) == 0
    listed = json.loads((tmp_path / "m.json").read_text())["read_as_good_without_mask"]
    good = [str(p) for p in sorted(test.glob("good_*.png"))]
    assert sorted(listed) == sorted(good + [str(test / f"{gone.name[:-9]}.png")])
