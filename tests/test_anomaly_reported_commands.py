"""Defects of the anomaly commands found in a first-use trial: review's predictions tied to the model and the image
contents, concurrent updates, int8 decisions, a moved weights file, audit's options, ties of --select auto, and
export anomaly into its own earlier export."""
import csv
import json
import shutil
import threading

import pytest

from frozenvit.backbone.suite.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, synth_model):
    """The synthetic weave set, model/ (tiny test ViT, rebuilt by name from w.safetensors) and model_b/, another
    model on the same backbone (another coreset ratio and seed: other scores and threshold)."""
    tmp = synth_model(tmp_path_factory.mktemp("reported_commands"))
    assert main(["anomaly", "fit", "--data", str(tmp / "data" / "weave"), "--out", str(tmp / "model_b"),
                 "--backbone", "test_vit", "--weights", str(tmp / "w.safetensors"), "--image-size", "64",
                 "--coreset-ratio", "0.5", "--seed", "3", "--threads", "1"]) == 0
    return tmp


def _rows(pred):
    with open(pred / "scores.csv", newline="") as f:
        return {r["image"]: r for r in csv.DictReader(f)}


def _review(ws, model, images, out, *extra):      # ws: the workspace the paths come from
    return main(["anomaly", "review", "--model", str(model), "--images", str(images), "--out", str(out),
                 "--threads", "1", *extra])


@pytest.fixture
def no_server(monkeypatch):
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)


def _threshold(model):
    return json.loads((model / "config.json").read_text())["threshold"]


# ---- 1. review's predictions: which model, which image contents ------------------------------------------

def test_review_scores_again_predictions_another_model_wrote(ws, tmp_path, no_server, capsys):
    images = ws / "data" / "weave" / "test"
    assert _threshold(ws / "model") != pytest.approx(_threshold(ws / "model_b"))
    assert main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(images),
                 "--out", str(tmp_path / "rv"), "--no-overlays"]) == 0
    capsys.readouterr()
    assert _review(ws, ws / "model_b", images, tmp_path / "rv") == 0
    assert "another model" in capsys.readouterr().out
    rows = _rows(tmp_path / "rv")
    assert [float(r["threshold"]) for r in rows.values()] == [pytest.approx(_threshold(ws / "model_b"), abs=1e-6)] * len(rows)
    assert main(["anomaly", "predict", "--model", str(ws / "model_b"), "--images", str(images),
                 "--out", str(tmp_path / "ref"), "--no-overlays"]) == 0
    assert {k: r["score"] for k, r in rows.items()} == {k: r["score"] for k, r in _rows(tmp_path / "ref").items()}


def test_review_scores_again_an_image_replaced_under_the_same_name(ws, tmp_path, no_server, capsys):
    images = tmp_path / "camera"
    images.mkdir()
    shutil.copy(ws / "data/weave/test/good/000.png", images / "img1.png")
    shutil.copy(ws / "data/weave/test/good/001.png", images / "img2.png")
    assert _review(ws, ws / "model", images, tmp_path / "rv") == 0
    before = _rows(tmp_path / "rv")["img1.png"]["score"]
    defect = next(p for p in (ws / "data/weave/test").rglob("*.png") if p.parent.name != "good")
    shutil.copy(defect, images / "img1.png")                  # a new photo under the old name
    capsys.readouterr()
    assert _review(ws, ws / "model", images, tmp_path / "rv") == 0
    assert "img1.png" in capsys.readouterr().out               # says why it scored again
    assert main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(images),
                 "--out", str(tmp_path / "ref"), "--no-overlays"]) == 0
    after = _rows(tmp_path / "rv")["img1.png"]["score"]
    assert after != before and after == _rows(tmp_path / "ref")["img1.png"]["score"]


def test_review_scores_again_predictions_without_a_record_of_their_model(ws, tmp_path, no_server, capsys):
    images = ws / "data" / "weave" / "test"
    assert main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(images),
                 "--out", str(tmp_path / "rv")]) == 0
    (tmp_path / "rv" / "provenance.json").unlink(missing_ok=True)      # as an older frozenvit wrote them
    first = (tmp_path / "rv" / "scores.csv").stat().st_mtime_ns
    capsys.readouterr()
    assert _review(ws, ws / "model", images, tmp_path / "rv") == 0
    assert (tmp_path / "rv" / "scores.csv").stat().st_mtime_ns > first
    assert "without a record" in capsys.readouterr().out


def test_review_scores_again_predictions_decided_at_another_threshold(ws, tmp_path, no_server):
    images = ws / "data" / "weave" / "test"
    assert main(["anomaly", "predict", "--model", str(ws / "model"), "--images", str(images),
                 "--out", str(tmp_path / "rv"), "--threshold", "0"]) == 0
    assert _review(ws, ws / "model", images, tmp_path / "rv") == 0
    rows = _rows(tmp_path / "rv")
    assert [float(r["threshold"]) for r in rows.values()] == [pytest.approx(_threshold(ws / "model"), abs=1e-6)] * len(rows)


def test_review_reuses_its_predictions_while_model_and_images_are_unchanged(ws, tmp_path, no_server):
    images = ws / "data" / "weave" / "test"
    shutil.copytree(ws / "model", tmp_path / "copy")                   # a copy is the same model
    assert _review(ws, ws / "model", images, tmp_path / "rv") == 0
    first = (tmp_path / "rv" / "scores.csv").stat().st_mtime_ns
    assert _review(ws, tmp_path / "copy", images, tmp_path / "rv") == 0
    assert (tmp_path / "rv" / "scores.csv").stat().st_mtime_ns == first
    record = json.loads((tmp_path / "rv" / "provenance.json").read_text())
    assert set(record["images"]) == set(_rows(tmp_path / "rv"))


# ---- 2. two updates of one model at once --------------------------------------------------------------

def test_two_updates_of_one_model_at_once_both_land(ws, tmp_path, monkeypatch):
    from frozenvit.anomaly.patchcore import PatchCore

    model = tmp_path / "model"
    shutil.copytree(ws / "model", model)
    good = sorted((ws / "data/weave/test/good").glob("*.png"))
    other = sorted(p for p in (ws / "data/weave/test").rglob("*.png") if p.parent.name != "good")
    folders = {"a": good[:2], "b": good[2:] + other[:1]}
    for name, files in folders.items():
        (tmp_path / name).mkdir()
        for f in files:
            shutil.copy(f, tmp_path / name / f"{f.parent.name}_{f.name}")
    barrier = threading.Barrier(2, timeout=3)                       # both inside partial_fit at once, if they can
    original = PatchCore.partial_fit

    def meeting(self, *a, **kw):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        return original(self, *a, **kw)

    monkeypatch.setattr(PatchCore, "partial_fit", meeting)
    codes = {}

    def update(name):
        codes[name] = main(["anomaly", "update", "--model", str(model), "--normals", str(tmp_path / name),
                            "--threads", "1"])

    threads = [threading.Thread(target=update, args=(n,)) for n in folders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert codes == {"a": 0, "b": 0}
    cfg = json.loads((model / "config.json").read_text())
    used = {p.rsplit("/", 2)[-2] for u in cfg["updates"] for p in u["added_to_bank"] + u["held_out"]}
    assert len(cfg["updates"]) == 2 and used == {"a", "b"}
    assert cfg["updates"][1]["threshold_before"] == pytest.approx(cfg["updates"][0]["threshold_after"])


def test_the_model_lock_lets_a_second_holder_in_only_after_the_first(tmp_path):
    from frozenvit.anomaly.updates import model_lock

    (tmp_path / "m").mkdir()
    order, waited = [], threading.Event()

    def second():
        with model_lock(tmp_path / "m", waited.set):
            order.append("second")

    with model_lock(tmp_path / "m"):
        t = threading.Thread(target=second)
        t.start()
        assert waited.wait(5)                                     # told to wait, and waiting
        order.append("first")
    t.join(5)
    assert order == ["first", "second"]


# ---- 3. int8 scores are not decided at the float32 threshold ------------------------------------------

def _int8(ws):
    return ["--runtime", "onnxruntime", "--precision", "int8", "--calibration", str(ws / "data/weave/train/good"),
            "--calibration-images", "2", "--threads", "1"]


def test_predict_in_int8_decides_only_at_a_threshold_given_and_says_why(ws, tmp_path, capsys):
    argv = ["anomaly", "predict", "--model", str(ws / "model"), "--images", str(ws / "data/weave/test"),
            "--no-overlays", *_int8(ws)]
    assert main([*argv, "--out", str(tmp_path / "p")]) == 0
    rows = _rows(tmp_path / "p").values()
    assert {r["is_defect"] for r in rows} == {""} and {r["threshold"] for r in rows} == {"withheld (int8)"}
    out = capsys.readouterr().out
    assert "no decisions" in out and "float32" in out and "--threshold" in out
    assert main([*argv, "--out", str(tmp_path / "q"), "--threshold", "0.5"]) == 0      # the user's own threshold
    assert {r["is_defect"] for r in _rows(tmp_path / "q").values()} <= {"0", "1"}


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_target_fpr_in_int8_is_refused_saying_why(ws, tmp_path, command, capsys):
    where = ["--images", str(ws / "data/weave/test"), "--out", str(tmp_path / "p")] if command == "predict" else [
        "--data", str(ws / "data/weave")]
    assert main(["anomaly", command, "--model", str(ws / "model"), *where, "--target-fpr", "0.5", *_int8(ws)]) == 2
    err = capsys.readouterr().err
    assert "UsageError" in err and "float32" in err and not (tmp_path / "p").exists()


def test_evaluate_in_int8_reports_no_rates_at_float32_thresholds(ws, tmp_path, capsys):
    out = tmp_path / "e.json"
    assert main(["anomaly", "evaluate", "--model", str(ws / "model"), "--data", str(ws / "data/weave"),
                 "--out", str(out), *_int8(ws)]) == 0
    got = json.loads(out.read_text())
    assert got["threshold"] is None and got["metrics"]["false_alarm_rate"] is None
    assert all(v is None for k, v in got["metrics"].items() if "@" in k)
    assert 0 <= got["metrics"]["image_auroc"] <= 1 and "not valid for int8" in capsys.readouterr().out


# ---- 4. a weights file that moved -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def moved(ws, tmp_path_factory):
    """A model fitted with --weights FILE, whose FILE was then moved to moved.safetensors."""
    tmp = tmp_path_factory.mktemp("moved_weights")
    shutil.copy(ws / "w.safetensors", tmp / "w.safetensors")
    assert main(["anomaly", "fit", "--data", str(ws / "data" / "weave"), "--out", str(tmp / "model"),
                 "--backbone", "test_vit", "--weights", str(tmp / "w.safetensors"), "--image-size", "64",
                 "--threads", "1"]) == 0
    (tmp / "w.safetensors").rename(tmp / "moved.safetensors")
    return tmp


def test_a_moved_weights_file_is_an_error_that_names_the_weights_option(moved, ws, tmp_path, capsys):
    assert main(["anomaly", "predict", "--model", str(moved / "model"), "--images", str(ws / "data/weave/test"),
                 "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "ArtifactError" in err and "--weights NEW_PATH" in err


@pytest.mark.parametrize("command", ["predict", "evaluate", "review", "update", "export"])
def test_every_command_that_loads_a_model_takes_the_weights_at_their_new_place(moved, ws, tmp_path, command,
                                                                                no_server):
    model = tmp_path / "model"
    shutil.copytree(moved / "model", model)
    w = ["--weights", str(moved / "moved.safetensors")]
    test = str(ws / "data/weave/test")
    argv = {"predict": ["anomaly", "predict", "--model", str(model), "--images", test, "--out", str(tmp_path / "o")],
            "evaluate": ["anomaly", "evaluate", "--model", str(model), "--data", str(ws / "data/weave")],
            "review": ["anomaly", "review", "--model", str(model), "--images", test, "--out", str(tmp_path / "o")],
            "update": ["anomaly", "update", "--model", str(model), "--normals", str(ws / "data/weave/test/good")],
            "export": ["export", "anomaly", "--model", str(model), "--out", str(tmp_path / "o")]}[command]
    assert main([*argv, *w, "--threads", "1"]) == 0
    if command == "update":                                     # the new place is recorded: no --weights needed now
        assert main(["anomaly", "predict", "--model", str(model), "--images", test, "--out",
                     str(tmp_path / "after")]) == 0


def test_weights_of_another_file_are_refused_naming_both_digests(moved, ws, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    from frozenvit.backbone.suite.artifacts import sha256_file

    tensors = load_file(str(moved / "moved.safetensors"))
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] + 1                                # the same model with other weights
    other = tmp_path / "other.safetensors"
    save_file(tensors, str(other))
    assert main(["anomaly", "predict", "--model", str(moved / "model"), "--images", str(ws / "data/weave/test"),
                 "--out", str(tmp_path / "p"), "--weights", str(other)]) == 2
    err = capsys.readouterr().err
    assert "ArtifactError" in err and sha256_file(other) in err
    assert sha256_file(moved / "moved.safetensors") in err and not (tmp_path / "p").exists()


# ---- 5. audit takes no threshold options ---------------------------------------------------------------

@pytest.mark.parametrize("option", [["--holdout", "0.9"], ["--target-fpr", "0.5"]])
def test_audit_refuses_the_threshold_options_it_would_ignore(ws, option, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["anomaly", "audit", "--data", str(ws / "data" / "weave"), *option])
    assert exited.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


# ---- 6. fit --select auto says when the best candidates are tied -------------------------------------------

def test_select_auto_reports_a_tie_and_how_it_was_broken(tmp_path, monkeypatch, capsys):
    from frozenvit.anomaly import defaults, make_synthetic_mvtec

    data = make_synthetic_mvtec(tmp_path, "weave", n_train=12, n_test_good=1, n_test_defect=1, size=(96, 96), seed=0)
    monkeypatch.setattr(defaults, "SEARCH_GRID", (("first", ((None, {}),)), ("twin", ((None, {}),))))   # the same
    assert main(["anomaly", "fit", "--data", str(data), "--out", str(tmp_path / "m"), "--select", "auto",
                 "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "tie" in out and "first, twin" in out and "earliest" in out
    sel = json.loads((tmp_path / "m" / "config.json").read_text())["selection"]
    assert sel["chosen"] == "first" and sel["tied_at_best"] == ["first", "twin"] and "earliest" in sel["tie_break"]


# ---- 7. export anomaly replaces its own earlier export of either shape --------------------------------------

@pytest.fixture(scope="module")
def ensemble(ws):
    """A two-member ensemble on the tiny test ViT, its backbone rebuilt by name from w.safetensors."""
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
    from frozenvit.backbone import load_backbone

    w = ws / "w.safetensors"
    bb = load_backbone("test_vit", weights=str(w), img_size=64)
    normals = sorted((ws / "data/weave/train/good").glob("*.png"))
    det = PatchCoreEnsemble([PatchCore(bb), PatchCore(bb, reduce_dim=None)]).fit(normals)
    source = {"name": "test_vit", "weights": str(w), "img_size": 64}
    return det.save(ws / "ensemble", backbone_sources=[source, source])


@pytest.mark.parametrize("first, then", [("ensemble", "single"), ("single", "ensemble")])
def test_export_anomaly_replaces_its_own_earlier_export_of_the_other_shape(ws, ensemble, tmp_path, first, then):
    model = {"ensemble": ensemble, "single": ws / "model"}
    out = tmp_path / "dep"
    assert main(["export", "anomaly", "--model", str(model[first]), "--out", str(out), "--threads", "1"]) == 0
    assert main(["export", "anomaly", "--model", str(model[then]), "--out", str(out), "--threads", "1"]) == 0
    members = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert members == (["member0", "member1"] if then == "ensemble" else [])
    assert (out / "config.json").is_file() == (then == "single")


def test_export_anomaly_keeps_a_users_file_beside_its_earlier_export(ws, ensemble, tmp_path, capsys):
    out = tmp_path / "dep"
    assert main(["export", "anomaly", "--model", str(ensemble), "--out", str(out), "--threads", "1"]) == 0
    (out / "notes.txt").write_text("mine")
    assert main(["export", "anomaly", "--model", str(ws / "model"), "--out", str(out), "--threads", "1"]) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"
    assert (out / "member0" / "config.json").is_file()


# ---- 8. an exported anomaly model runs: the model folder with its exported backbones ---------------------------

def test_an_exported_ensemble_runs_with_load_detector_and_its_member_exports(ws, ensemble, tmp_path):
    import numpy as np

    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import load_exported

    assert main(["export", "anomaly", "--model", str(ensemble), "--out", str(tmp_path / "dep"), "--threads", "1"]) == 0
    det = load_detector(ensemble, backbones=[load_exported(tmp_path / "dep" / f"member{i}") for i in range(2)])
    images = sorted((ws / "data/weave/test").rglob("*.png"))
    assert np.allclose(det.decision_function(images), load_detector(ensemble).decision_function(images),
                       rtol=1e-3, atol=1e-4)
