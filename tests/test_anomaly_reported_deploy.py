"""Defects of the anomaly application found in a production engineer's deployment trial: int8 decisions at a threshold
given, what an --export run names and records, calibrating a threshold on int8 scores, large images, and the export
of a model (its --out checked first, its progress).

Tiny random-weight backbones (timm's test_vit at 64 px, rebuilt by name from saved weights); the tests that export
need the optional extra frozenvit[deploy] and skip without onnx / onnxruntime."""
import csv
import hashlib
import json
import warnings

import numpy as np
import pytest

from frozenvit.backbone.suite.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


def _deploy():
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, synth_model):
    """data/weave, model/ (a PatchCore fitted through the CLI) and ensemble/ (two PatchCores on the same test ViT)."""
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
    from frozenvit.backbone import load_backbone

    tmp = synth_model(tmp_path_factory.mktemp("reported_deploy"))
    w = tmp / "w.safetensors"
    bb = load_backbone("test_vit", weights=str(w), img_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCoreEnsemble([PatchCore(bb, progress=False), PatchCore(bb, progress=False)]).fit(_normals(tmp))
    source = {"name": "test_vit", "weights": str(w), "img_size": 64}
    det.save(tmp / "ensemble", backbone_sources=[source, source])
    return tmp


def _normals(ws):
    return sorted((ws / "data/weave/train/good").glob("*.png"))


def _good(ws):
    return sorted((ws / "data/weave/test/good").glob("*.png"))


def _export(ws, model, out, *extra):
    return main(["export", "anomaly", "--model", str(ws / model), "--out", str(out), "--threads", "1", *extra])


@pytest.fixture(scope="module")
def int8_export(ws):
    """An int8 export of model/ (calibrated on 2 normals)."""
    _deploy()
    out = ws / "dep_int8"
    if not out.exists():
        assert _export(ws, "model", out, "--int8", "--calibration", str(ws / "data/weave/train/good"),
                       "--calibration-images", "2") == 0
    return out


@pytest.fixture(scope="module")
def ensemble_export(ws):
    _deploy()
    out = ws / "dep_ensemble"
    if not out.exists():
        assert _export(ws, "ensemble", out) == 0
    return out


def _run(argv):
    """main(argv) and the warnings it raised (each recorded, none shown)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(argv)
    return rc, caught


def _predict(ws, out, *extra):
    return ["anomaly", "predict", "--model", str(ws / "model"), "--images", str(ws / "data/weave/test"),
            "--out", str(out), "--no-overlays", "--threads", "1", *extra]


def _rows(folder):
    with open(folder / "scores.csv", newline="") as f:
        return list(csv.DictReader(f))


# ---- 1. a threshold given with an int8 export decides at it, without the withheld warning ---------------------------

def test_an_int8_export_with_a_threshold_given_decides_at_it_without_the_withheld_warning(ws, int8_export, tmp_path,
                                                                                          capsys):
    from frozenvit.backbone.export import DecisionsWithheld

    rc, caught = _run(_predict(ws, tmp_path / "p", "--export", str(int8_export), "--threshold", "0.5"))
    assert rc == 0
    assert not [w for w in caught if issubclass(w.category, DecisionsWithheld)]
    err = capsys.readouterr().err
    assert "int8 scores, decided at the --threshold 0.5 given" in err and "withheld" not in err
    assert {r["threshold"] for r in _rows(tmp_path / "p")} == {"0.500000"}
    rc, caught = _run(["anomaly", "evaluate", "--model", str(ws / "model"), "--data", str(ws / "data/weave"),
                       "--export", str(int8_export), "--threshold", "0.5", "--threads", "1"])
    assert rc == 0 and not [w for w in caught if issubclass(w.category, DecisionsWithheld)]


def test_an_int8_export_without_a_threshold_still_withholds_and_says_how_to_calibrate(ws, int8_export, tmp_path,
                                                                                      capsys):
    from frozenvit.backbone.export import DecisionsWithheld

    rc, caught = _run(_predict(ws, tmp_path / "p", "--export", str(int8_export)))
    assert rc == 0 and [w for w in caught if issubclass(w.category, DecisionsWithheld)]
    assert "anomaly calibrate" in capsys.readouterr().out


# ---- 2. --target-fpr with an int8 export names --export, which the user gave ---------------------------------------

def test_target_fpr_with_an_int8_export_names_the_export_not_precision(ws, int8_export, tmp_path, capsys):
    assert main(_predict(ws, tmp_path / "p", "--export", str(int8_export), "--target-fpr", "0.2")) == 2
    err = capsys.readouterr().err
    assert f"--target-fpr with --export {int8_export} (an int8 export)" in err and "--precision" not in err
    assert not (tmp_path / "p").exists()


# ---- 3. an export of another model is an ArtifactError, as one of other weights ------------------------------------

def test_an_export_with_another_number_of_graphs_is_an_artifact_error(ws, ensemble_export, tmp_path, capsys):
    assert main(_predict(ws, tmp_path / "p", "--export", str(ensemble_export))) == 2
    err = capsys.readouterr().err
    assert "error (ArtifactError)" in err and "it is the export of another model" in err


# ---- 4. calibrating a threshold on int8 scores of normals the model never saw ----------------------------------------

def test_calibrate_sets_the_conformal_threshold_of_the_normals_scores_as_the_detector_runs_now(ws, int8_export):
    from frozenvit.anomaly import load_detector
    from frozenvit.anomaly.threshold import conformal_threshold
    from frozenvit.backbone.export import load_exported

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                      # withheld: the point of calibrating
        det = load_detector(ws / "model", backbones=[load_exported(int8_export)])
    assert det.decision_threshold() is None
    normals = _good(ws)
    int8_scores = det.decision_function(normals)
    with pytest.warns(UserWarning, match=r"only 3 normals.*1/4, not the target 0.01"):
        assert det.calibrate(normals) is det                                 # the model's own target_fpr
    assert det.decision_threshold() == conformal_threshold(int8_scores, 0.01) == pytest.approx(int8_scores.max())
    assert det.calibrated_on_ == {"n_normals": 3, "target_fpr": 0.01, "threshold": det.threshold,
                                  "false_alarm_bound": 0.25}
    assert det.predict(normals).is_defect.tolist() == [False] * 3           # decisions again, at int8's own scale


def test_calibrate_of_an_ensemble_uses_its_ensemble_scores(ws):
    from frozenvit.anomaly import load_detector
    from frozenvit.anomaly.threshold import conformal_threshold

    det = load_detector(ws / "ensemble")
    normals = _good(ws) + _normals(ws)[:1]
    scores = det.decision_function(normals)
    det.calibrate(normals, target_fpr=0.5)
    assert det.decision_threshold() == conformal_threshold(scores, 0.5) and det.calibrated_on_["false_alarm_bound"] == 0.5


def test_calibrate_refuses_images_an_update_added_to_the_bank(ws, tmp_path):
    import shutil

    from frozenvit.anomaly import load_detector
    from frozenvit.anomaly.errors import DatasetError

    det = load_detector(ws / "model")
    added = _good(ws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det.set_params(holdout=0.0).partial_fit(added[:2])
    copy = tmp_path / "copy.png"
    shutil.copy(added[1], copy)                                              # the same pixels under another name
    with pytest.raises(DatasetError, match=r"2 of the 3 images are in the model's bank.*copy.png \(update 1 added it "
                                           r"as .*Calibrate on normals the model never saw"):
        det.calibrate([added[0], copy, added[2]])
    assert det.threshold is None


def test_the_calibrate_command_prints_a_threshold_that_predict_decides_at(ws, int8_export, tmp_path, capsys):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import load_exported

    out = tmp_path / "calibration.json"
    rc, caught = _run(["anomaly", "calibrate", "--model", str(ws / "model"), "--export", str(int8_export),
                       "--normals", str(ws / "data/weave/test/good"), "--target-fpr", "0.5", "--out", str(out),
                       "--threads", "1"])
    assert rc == 0 and not [w for w in caught if "withheld" in str(w.message)]
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    t = record["threshold"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = load_detector(ws / "model", backbones=[load_exported(int8_export)])
    assert t == pytest.approx(float(np.sort(det.decision_function(_good(ws)))[1]))     # ceil(4 * 0.5) = 2nd of 3
    assert f"--threshold {t!r}" in printed and "at most 0.5" in printed
    assert record["export"]["path"] == str(int8_export.resolve()) and len(record["normals"]) == 3
    assert main(_predict(ws, tmp_path / "p", "--export", str(int8_export), "--threshold", repr(t))) == 0
    assert {r["is_defect"] for r in _rows(tmp_path / "p")} <= {"0", "1"}


# ---- 5. predictions and evaluations record the export that ran --------------------------------------------------------

def test_predict_and_evaluate_record_the_export_folder_and_its_digest(ws, ensemble_export, tmp_path):
    from frozenvit.backbone.suite.artifacts import read_marker

    files = read_marker(ensemble_export)["files"]
    want = {"path": str(ensemble_export.resolve()),
            "sha256": hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(),
            "graphs": {"member0/model.onnx": files["member0/model.onnx"],
                       "member1/model.onnx": files["member1/model.onnx"]}}
    argv = ["anomaly", "predict", "--model", str(ws / "ensemble"), "--images", str(ws / "data/weave/test/good"),
            "--out", str(tmp_path / "p"), "--no-overlays", "--export", str(ensemble_export), "--threads", "1"]
    assert main(argv) == 0
    assert json.loads((tmp_path / "p" / "provenance.json").read_text())["decided"]["export"] == want
    assert main(["anomaly", "evaluate", "--model", str(ws / "ensemble"), "--data", str(ws / "data/weave"),
                 "--export", str(ensemble_export), "--out", str(tmp_path / "e.json"), "--threads", "1"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["export"] == want


# ---- 6. large images: a warning of ours, and batches bounded in pixels --------------------------------------------------

def test_a_large_image_warns_once_by_name_and_size_instead_of_pillows_bomb_warning(tmp_path, monkeypatch):
    from PIL import Image

    from frozenvit.anomaly.errors import LargeImage
    from frozenvit.anomaly.images import image_size, read_image

    path = tmp_path / "frame.png"
    Image.fromarray(np.zeros((40, 60, 3), np.uint8)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert image_size(path) == (40, 60) and read_image(path).shape == (40, 60, 3)
    assert [w.category for w in caught] == [LargeImage]
    assert f"{path} is 60x40 pixels" in str(caught[0].message)


def test_an_image_past_twice_pillows_limit_is_an_image_format_error_saying_what_to_do(tmp_path, monkeypatch):
    from PIL import Image

    from frozenvit.anomaly.images import read_image
    from frozenvit.backbone.errors import ImageFormatError

    path = tmp_path / "huge.png"
    Image.fromarray(np.zeros((40, 60, 3), np.uint8)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ImageFormatError, match=r"huge.png.*downscale the image or cut it into parts"):
        read_image(path)


def test_batches_hold_at_most_the_pixel_budget_and_a_larger_image_alone():
    from frozenvit.anomaly.stream import BATCH, BATCH_PIXELS, batch_bounds

    assert batch_bounds([(512, 512)] * 130) == [(0, BATCH), (BATCH, 2 * BATCH), (2 * BATCH, 130)]
    assert batch_bounds([(3000, 4000)] * 3) == [(0, 1), (1, 2), (2, 3)]     # each camera frame on its own
    assert batch_bounds([(100, 100), (100, 100), (300, 300), (100, 100)], max_pixels=30000) == [(0, 2), (2, 3), (3, 4)]
    assert 3000 * 4000 <= BATCH_PIXELS < 2 * 3000 * 4000 and batch_bounds([]) == []


def test_predict_scores_large_images_a_few_at_a_time(ws, tmp_path, monkeypatch):
    from PIL import Image

    import frozenvit.anomaly.stream as stream
    from frozenvit.anomaly import load_detector

    for i in range(3):
        Image.fromarray(np.full((96, 120, 3), 60 * i, np.uint8)).save(tmp_path / f"{i}.png")
    real, sizes = stream.score_batch, []
    monkeypatch.setattr(stream, "score_batch", lambda det, paths, overlays: sizes.append(len(paths)) or
                        real(det, paths, overlays))
    got = list(stream.iter_scored(load_detector(ws / "model"), sorted(tmp_path.glob("*.png")), overlays=True,
                                  batch_pixels=2 * 96 * 120))
    assert sizes == [2, 1] and [g.path for g in got] == [str(tmp_path / f"{i}.png") for i in range(3)]


def test_an_overlay_blended_in_strips_is_the_overlay_blended_at_once(monkeypatch):
    import frozenvit.anomaly.viz as viz

    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (37, 23, 3), dtype=np.uint8)
    amap = rng.normal(size=(37, 23)).astype(np.float32)
    mask = np.zeros((37, 23), bool)
    mask[5:20, 4:15] = True
    whole = viz.overlay(img, amap, -0.5, 1.5, mask)
    monkeypatch.setattr(viz, "STRIP_PIXELS", 23 * 4)                        # 4 rows at a time, the last strip short
    np.testing.assert_array_equal(viz.overlay(img, amap, -0.5, 1.5, mask), whole)


def test_an_ensembles_maps_combined_in_strips_are_its_maps_combined_at_once(ws, monkeypatch):
    import frozenvit.anomaly.ensemble as ensemble
    from frozenvit.anomaly import load_detector

    det = load_detector(ws / "ensemble")
    whole = det.predict(_good(ws)[:2]).maps
    monkeypatch.setattr(ensemble, "STRIP_PIXELS", 96 * 7)                  # 7 rows of the 80 x 96 images at a time
    for got, want in zip(det.predict(_good(ws)[:2]).maps, whole):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


# ---- 7. export anomaly: --out checked before the model is loaded; progress while it writes ----------------------------

def test_export_refuses_a_users_out_folder_before_loading_the_model(ws, tmp_path, monkeypatch, capsys):
    import frozenvit.anomaly.ensemble as ensemble

    def never(*a, **kw):
        raise AssertionError("the model was loaded before --out was checked")
    monkeypatch.setattr(ensemble, "load_detector", never)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for model in ("model", "ensemble"):
        assert main(["export", "anomaly", "--model", str(ws / model), "--out", str(mine)]) == 2
        assert "error (OutputConflict)" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_the_kinds_export_checks_its_out_by_are_the_artifacts_own():
    from frozenvit.anomaly import cli, ensemble
    from frozenvit.backbone import export

    assert (cli.ENSEMBLE_KIND, cli.EXPORT_KIND) == (ensemble.KIND, export.KIND)


def test_export_shows_progress_while_it_writes(ws, tmp_path, monkeypatch, capsys):
    _deploy()
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")                  # a log line at every update
    assert _export(ws, "ensemble", tmp_path / "dep") == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("export anomaly:")]
    assert lines and lines[-1].startswith("export anomaly: 2/2 graph")


def test_ticking_progress_shows_the_time_of_a_step_that_reports_nothing(monkeypatch, capsys):
    import time

    from frozenvit.anomaly.cli import ticking_progress

    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    with ticking_progress(interval=0.05, total=1, desc="step", unit="graph"):
        time.sleep(0.4)
    lines = capsys.readouterr().err.splitlines()
    assert len([line for line in lines if line.startswith("step: 0/1 graph")]) >= 2
    assert lines[-1].startswith("step: 1/1 graph")
    with pytest.raises(RuntimeError), ticking_progress(interval=0.05, total=1, desc="failed", unit="graph"):
        raise RuntimeError("the step failed")
    assert "failed: 1/1" not in capsys.readouterr().err
