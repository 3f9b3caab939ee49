"""Defects a user trial of `anomaly` reported, each pinned by the behaviour a user relies on.

One image given alone is one image; an update adds each image once; a bad hyperparameter of any estimator is a
ParameterError; a predict output the user edited is never overwritten; `--target-fpr 1` is refused as the options
are read; a tiny-image warning comes once per image; `fit` says whether tiling happened.
"""
import argparse
import json
import shutil
import warnings

import numpy as np
import pytest
from PIL import Image

from frozenvit.anomaly import PatchCore, PatchCoreEnsemble, PatchCoreSearch, contamination_audit
from frozenvit.backbone.errors import ImageFormatError
from frozenvit.backbone.suite.cli import main, number
from frozenvit.backbone.suite.errors import ParameterError, ParameterErrorMixin

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


def images(n, seed=0, size=(64, 64)):
    """n textured uint8 RGB images (H, W, 3)."""
    rng = np.random.default_rng(seed)
    x = np.arange(size[1])[None, :, None]
    return [(rng.normal(128, 12, (*size, 3)) + 40 * np.sin(x / 3.0)).clip(0, 255).astype(np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def det(tiny_vit):
    return PatchCore(tiny_vit, coreset_ratio=0.5, holdout=0.25, progress=False).fit(images(8))


# ---- one image given alone is one image ----------------------------------------------------------------------------

def test_one_hwc_array_given_alone_is_one_image_not_a_batch_of_its_rows(det):
    arr = images(1, seed=3, size=(48, 80))[0]                       # (48, 80, 3)
    alone, listed = det.predict(arr), det.predict([arr])
    assert len(alone.scores) == 1 and [m.shape for m in alone.maps] == [(48, 80)]
    np.testing.assert_array_equal(alone.scores, listed.scores)
    np.testing.assert_array_equal(alone.maps[0], listed.maps[0])


def test_a_few_rows_of_an_image_are_one_short_image(det):
    arr = images(1, seed=3)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                             # 3 px tall: smaller than a patch, and said so
        out = det.predict(arr[:3])
    assert len(out.scores) == 1 and out.maps[0].shape == (3, 64)


@pytest.mark.parametrize("layout", ["gray (H, W)", "(H, W, 1)", "rgba (H, W, 4)"])
def test_gray_and_rgba_arrays_given_alone_are_one_image(det, layout):
    arr = images(1, seed=4)[0]
    x = {"gray (H, W)": arr[..., 0], "(H, W, 1)": arr[..., :1],
         "rgba (H, W, 4)": np.dstack([arr, arr[..., :1]])}[layout]
    assert len(det.predict(x).scores) == 1 and len(det.decision_function(x)) == 1


def test_a_list_of_gray_arrays_and_a_batch_array_are_one_image_each(det):
    gray = [a[..., 0] for a in images(3, seed=5)]
    assert len(det.predict(gray).scores) == 3
    batch = np.stack(images(2, seed=6))                              # (2, H, W, 3)
    np.testing.assert_allclose(det.predict(batch).scores, det.predict(list(batch)).scores)


def test_a_path_given_alone_is_one_image(det, tmp_path):
    Image.fromarray(images(1, seed=7)[0]).save(tmp_path / "a.png")
    assert len(det.predict(str(tmp_path / "a.png")).scores) == 1
    assert len(det.predict(tmp_path / "a.png").scores) == 1


@pytest.mark.parametrize("shape,says", [((5, 64, 64), "list of (H, W) arrays"), ((3, 64, 64), "np.transpose"),
                                        ((64,), "neither one image"), ((1, 2, 64, 64, 3), "neither one image")])
def test_an_array_that_is_neither_one_image_nor_a_batch_is_refused_saying_what_to_pass(det, shape, says):
    with pytest.raises(ImageFormatError, match=says.replace("(", r"\(").replace(")", r"\)")):
        det.predict(np.zeros(shape, np.uint8))


def test_a_torch_tensor_is_refused_saying_to_pass_the_uint8_images(det):
    import torch

    with pytest.raises(ImageFormatError, match="uint8 images"):
        det.predict(torch.zeros(2, 3, 64, 64))


def test_fit_reads_one_array_as_one_normal_image(tiny_vit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                             # one normal: uncalibrated, and said so
        one = PatchCore(tiny_vit, progress=False).fit(images(1)[0])
    assert one.n_train_images_ == 1


def test_the_ensemble_reads_one_array_as_one_image(tiny_vit, make_tiny_convnet):
    members = [PatchCore(tiny_vit, coreset_ratio=0.5, progress=False),
               PatchCore(make_tiny_convnet(), coreset_ratio=0.5, progress=False)]
    ens = PatchCoreEnsemble(members, holdout=0.25).fit(np.stack(images(8)))   # a (B, H, W, C) batch of 8
    assert ens.n_train_images_ == 6
    arr = images(1, seed=9, size=(48, 80))[0]
    out = ens.predict(arr)
    assert len(out.scores) == 1 and out.maps[0].shape == (48, 80) and len(ens.decision_function(arr)) == 1


def test_the_search_and_the_audit_read_a_batch_array_as_its_images(tiny_vit):
    batch = np.stack(images(10))
    search = PatchCoreSearch([("a", PatchCore(tiny_vit, progress=False))], refit=False, search_holdout=2).fit(batch)
    assert [len(s) for s in search.candidate_scores(images(1, seed=2)[0])] == [1]
    assert len(contamination_audit(PatchCore(tiny_vit, progress=False), batch, n_splits=2).scores) == 10


# ---- an update adds each image once --------------------------------------------------------------------------------

@pytest.fixture
def fitted(tiny_vit):
    return PatchCore(tiny_vit, coreset_ratio=0.5, holdout=0.25, progress=False).fit(images(8))


def _files(folder, arrays):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, a in enumerate(arrays):
        Image.fromarray(a).save(folder / f"{i:03d}.png")
        paths.append(folder / f"{i:03d}.png")
    return paths


def test_the_same_images_given_twice_change_nothing_the_second_time(fitted, tmp_path):
    new = _files(tmp_path / "new", images(4, seed=11))
    fitted.partial_fit(new)
    bank, scores, updates = fitted.bank_.copy(), fitted.calibration_scores_.copy(), list(fitted.updates_)
    with pytest.warns(UserWarning, match="nothing new to add: all 4 images were given before"):
        assert fitted.partial_fit(new) is fitted
    assert np.array_equal(fitted.bank_, bank) and np.array_equal(fitted.calibration_scores_, scores)
    assert fitted.updates_ == updates and len(updates) == 1


def test_an_update_skips_the_images_it_has_seen_and_adds_the_others(fitted, tmp_path):
    first = _files(tmp_path / "a", images(4, seed=12))
    fitted.partial_fit(first)
    later = _files(tmp_path / "b", images(3, seed=13))
    with pytest.warns(UserWarning, match=r"2 of 5 images were given before and are skipped") as w:
        fitted.partial_fit([first[0], *later, first[3]])
    assert str(first[0]) in str(w[0].message)
    u = fitted.updates_[-1]
    assert sorted(u["added_to_bank"] + u["held_out"]) == sorted(str(p) for p in later)
    seen = [str(p) for x in fitted.updates_ for p in x["added_to_bank"] + x["held_out"]]
    assert len(seen) == len(set(seen)) == 7                          # no image counted twice


def test_the_same_pixels_under_another_path_or_in_memory_are_the_same_image(fitted, tmp_path):
    arrays = images(2, seed=14)
    fitted.partial_fit(_files(tmp_path / "a", arrays))
    copies = _files(tmp_path / "copy", arrays)
    n = len(fitted.updates_)
    with pytest.warns(UserWarning, match="nothing new"):
        fitted.partial_fit([copies[0], arrays[1]])
    assert len(fitted.updates_) == n


def test_an_image_given_twice_in_one_update_is_added_once(fitted):
    a, b = images(2, seed=15)
    with pytest.warns(UserWarning, match=r"1 of 3 images were given before .*#2 \(the same pixels as #0"):
        fitted.partial_fit([a, b, a.copy()])
    u = fitted.updates_[-1]
    assert sorted(u["added_to_bank"] + u["held_out"]) == ["#0", "#1"]


def test_an_update_records_the_sha256_of_each_image_it_used(fitted):
    import hashlib

    a = images(1, seed=16)[0]
    u = fitted.partial_fit([a]).updates_[-1]
    assert u["added_to_bank_sha256"] == [hashlib.sha256(repr(a.shape).encode() + a.tobytes()).hexdigest()]
    assert u["held_out_sha256"] == []


def test_records_written_without_digests_are_matched_by_path(fitted, tmp_path):
    paths = _files(tmp_path / "old", images(2, seed=17))
    fitted.updates_ = [{"added_to_bank": [str(paths[0])], "held_out": [], "bank_entries_added": 1,
                        "threshold_before": None, "threshold_after": None}]   # as an earlier version saved it
    with pytest.warns(UserWarning, match="1 of 2 images were given before"):
        fitted.partial_fit(paths)
    assert fitted.updates_[-1]["added_to_bank"] + fitted.updates_[-1]["held_out"] == [str(paths[1])]


def test_the_ensemble_adds_each_image_once_too(tiny_vit, make_tiny_convnet, tmp_path):
    members = [PatchCore(tiny_vit, coreset_ratio=0.5, progress=False),
               PatchCore(make_tiny_convnet(), coreset_ratio=0.5, progress=False)]
    ens = PatchCoreEnsemble(members, holdout=0.25).fit(images(8))
    new = _files(tmp_path / "new", images(4, seed=18))
    ens.partial_fit(new)
    banks = [len(m.bank_) for m in ens.members_]
    with pytest.warns(UserWarning, match="nothing new"):
        ens.partial_fit(new)
    assert [len(m.bank_) for m in ens.members_] == banks and len(ens.updates_) == 1
    assert all(len(m.updates_) == 1 for m in ens.members_)
    assert len(ens.updates_[0]["added_to_bank_sha256"]) == len(ens.updates_[0]["added_to_bank"])


def test_update_run_twice_with_the_same_normals_leaves_the_model_as_it_was(synth_model, tmp_path, tree_snapshot,
                                                                          capsys):
    ws = synth_model(tmp_path)
    normals = tmp_path / "normals"
    shutil.copytree(ws / "data" / "weave" / "test" / "good", normals)
    argv = ["anomaly", "update", "--model", str(ws / "model"), "--normals", str(normals), "--threads", "1"]
    assert main(argv) == 0
    first = json.loads((ws / "model" / "config.json").read_text())["updates"]
    assert len(first) == 1 and "added" in capsys.readouterr().out
    before = tree_snapshot(ws / "model")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nothing new to add: the 3 normal images" in out and "is unchanged" in out
    assert tree_snapshot(ws / "model") == before


def test_update_with_some_images_seen_before_adds_only_the_new_ones(synth_model, tmp_path, capsys):
    ws = synth_model(tmp_path)
    good = sorted((ws / "data" / "weave" / "test" / "good").iterdir())
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    for f in good[:2]:
        shutil.copy(f, tmp_path / "first" / f.name)
    for f in good:                                                   # the first two again, under other paths
        shutil.copy(f, tmp_path / "second" / f.name)
    argv = ["anomaly", "update", "--model", str(ws / "model"), "--threads", "1", "--normals"]
    assert main(argv + [str(tmp_path / "first")]) == 0
    with pytest.warns(UserWarning, match="2 of 3 images were given before and are skipped"):
        assert main(argv + [str(tmp_path / "second")]) == 0
    assert "added 1 images to the bank" in capsys.readouterr().out
    updates = json.loads((ws / "model" / "config.json").read_text())["updates"]
    assert [len(u["added_to_bank"]) + len(u["held_out"]) for u in updates] == [2, 1]


# ---- a bad hyperparameter of any estimator is a ParameterError -----------------------------------------------------

@pytest.mark.parametrize("bad", [dict(coreset_ratio=0), dict(coreset_ratio=1.5), dict(target_fpr=1.0),
                                 dict(holdout=1.0), dict(image_score="foo"), dict(tile=-1), dict(tile_overlap=1.0),
                                 dict(reduce_dim=0), dict(index="hnsw")])
def test_a_patchcore_hyperparameter_out_of_range_is_a_parameter_error(tiny_vit, bad):
    with pytest.raises(ParameterError, match=f"'{next(iter(bad))}' parameter of PatchCore"):
        PatchCore(tiny_vit, progress=False, **bad).fit(images(3))


def test_the_ensembles_and_the_searchs_hyperparameters_are_parameter_errors(tiny_vit):
    with pytest.raises(ParameterError, match="'target_fpr' parameter of PatchCoreEnsemble"):
        PatchCoreEnsemble([PatchCore(tiny_vit)], target_fpr=0).fit(images(3))
    with pytest.raises(ParameterError, match="'coreset_ratio' parameter of PatchCore"):
        PatchCoreEnsemble([PatchCore(tiny_vit, coreset_ratio=0)]).fit(images(3))
    with pytest.raises(ParameterError, match="'search_holdout' parameter of PatchCoreSearch"):
        PatchCoreSearch([("a", PatchCore(tiny_vit))], search_holdout=1).fit(images(3))


def test_a_forecasters_hyperparameter_out_of_range_is_a_parameter_error():
    from frozenvit.forecasting import Forecaster, SeasonalNaive

    assert issubclass(Forecaster, ParameterErrorMixin)
    with pytest.raises(ParameterError, match="'season_length' parameter of SeasonalNaive"):
        SeasonalNaive(season_length=0).check_params()


def test_every_estimator_gets_the_parameter_error_from_the_one_shared_mixin():
    from frozenvit.control.policy import PatchTokenPolicy
    from frozenvit.forecasting import Forecaster

    for cls in (PatchCore, PatchCoreEnsemble, PatchCoreSearch, Forecaster, PatchTokenPolicy):
        assert issubclass(cls, ParameterErrorMixin) and "_validate_params" not in vars(cls), cls


# ---- a predict output the user edited is never overwritten ---------------------------------------------------------

@pytest.fixture(scope="module")
def ws(synth_model, tmp_path_factory):
    return synth_model(tmp_path_factory.mktemp("reported"))


def _predict(ws, out, *extra):
    return main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(ws / "data" / "weave" / "test"),
                 "--out", str(out), *extra])


@pytest.mark.parametrize("edit", ["scores.csv", "overlays/good__000.png"])
def test_predict_refuses_an_earlier_output_whose_files_were_edited(ws, tmp_path, edit, tree_snapshot, capsys):
    out = tmp_path / "pred"
    assert _predict(ws, out) == 0
    f = out / edit
    f.write_bytes(f.read_bytes() + b"\n")                            # a note added by hand
    before = tree_snapshot(out)
    assert _predict(ws, out) == 2
    err = capsys.readouterr().err
    assert "error (OutputConflict)" in err and edit in err and "never overwrites" in err
    assert tree_snapshot(out) == before


def test_predict_still_replaces_an_earlier_output_nobody_changed(ws, tmp_path):
    out = tmp_path / "pred"
    assert _predict(ws, out) == 0
    (out / "overlays" / "good__000.png").unlink()                    # deleted: nothing of the user's to keep
    assert _predict(ws, out, "--no-overlays") == 0
    assert not (out / "overlays").exists() and (out / "scores.csv").is_file()


def test_review_refuses_to_rescore_into_edited_predictions(ws, tmp_path):
    from frozenvit.anomaly.cli import PREDICT_KIND
    from frozenvit.backbone.suite.artifacts import check_artifact_dir
    from frozenvit.backbone.suite.errors import OutputConflict

    out = tmp_path / "pred"
    assert _predict(ws, out, "--no-overlays") == 0
    (out / "scores.csv").write_text("image,score\nmine,0\n")
    with pytest.raises(OutputConflict, match="scores.csv changed after frozenvit wrote it"):
        check_artifact_dir(out, PREDICT_KIND)          # what review calls before it scores again


# ---- --target-fpr 1 is refused as the options are read ------------------------------------------------------------

@pytest.mark.parametrize("command", ["fit", "predict", "evaluate"])
@pytest.mark.parametrize("value", ["1", "1.0"])
def test_target_fpr_outside_the_open_interval_is_a_usage_error_before_any_work(ws, tmp_path, command, value,
                                                                               tree_snapshot, capsys):
    where = {"fit": ["--data", str(ws / "data" / "weave"), "--out", str(tmp_path / "m"), "--backbone", "test_vit",
                     "--weights", str(ws / "w.safetensors")],
             "predict": ["--model", str(ws / "model"), "--images", str(ws / "data"), "--out", str(tmp_path / "p")],
             "evaluate": ["--model", str(ws / "model"), "--data", str(ws / "data" / "weave")]}[command]
    before = tree_snapshot(ws)
    with pytest.raises(SystemExit) as e:
        main(["anomaly", command, *where, "--target-fpr", value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error (UsageError): argument --target-fpr: must be" in err
    assert "ParameterError" not in err and tree_snapshot(ws) == before and not list(tmp_path.iterdir())


def test_number_with_max_open_leaves_the_upper_end_out_and_stays_closed_by_default():
    rate = number(float, min=0, max=1, min_open=True, max_open=True)
    assert rate("0.999") == 0.999
    for text in ("1", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            rate(text)
    with pytest.raises(argparse.ArgumentTypeError, match="must be < 1"):
        rate("1")
    assert number(float, min=0, max=1)("1") == 1.0


# ---- a tiny-image warning comes once per image ---------------------------------------------------------------------

def test_the_smaller_than_a_patch_warning_comes_once_per_image_whatever_its_tiles(tiny_vit):
    det = PatchCore(tiny_vit, coreset_ratio=0.5, tile="auto", batch_size=2, progress=False).fit(images(4))
    strips = [images(1, seed=20, size=(8, 300))[0], images(1, seed=21, size=(6, 200))[0]]   # 50 and 45 tiles
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det.predict(strips)
    tiny = [str(w.message) for w in caught if "smaller than one" in str(w.message)]
    assert len(tiny) == 2, tiny
    assert tiny[0].startswith("a tile of image 0 is 8x8 px") and tiny[1].startswith("a tile of image 1 is 6x6 px")


# ---- fit says whether tiling happened ------------------------------------------------------------------------------

def _fit(ws, tmp_path, size, *extra):
    from frozenvit.anomaly.synthetic import make_synthetic_mvtec

    data = make_synthetic_mvtec(tmp_path / f"data{size[0]}x{size[1]}", "weave", n_train=5, n_test_good=0,
                                n_test_defect=0, size=size)
    return main(["anomaly", "fit", "--data", str(data), "--out", str(tmp_path / "m"), "--backbone", "test_vit",
                 "--weights", str(ws / "w.safetensors"), "--image-size", "64", "--threads", "1", *extra])


def test_fit_says_no_tiles_were_needed_when_every_image_is_near_the_inputs_aspect(ws, tmp_path, capsys):
    assert _fit(ws, tmp_path, (64, 80)) == 0
    out = capsys.readouterr().out
    assert "tiles auto: none needed, every image is within 1.5x of the 64x64 input's aspect" in out
    assert "tiles at scale" not in out


def test_fit_counts_the_images_it_cut_into_tiles(ws, tmp_path, capsys):
    assert _fit(ws, tmp_path, (64, 200)) == 0
    out = capsys.readouterr().out
    assert "tiles auto (as large as each image's short side), overlap >= 0.25: 5 of 5 normal images cut into 20 tiles" \
        in out
