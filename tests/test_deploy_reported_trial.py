"""Defects of deployment found in a new-user trial (train -> export -> run on the line PC): int8 decisions in Python,
the atomicity of an ensemble's export, the calibration of a tiling member by `export anomaly --int8`, and messages.

Tiny random-weight backbones (timm's test_vit at 64 px, rebuilt by name from saved weights); the runtimes are the
optional extra frozenvit[deploy], so every test skips without onnx / onnxruntime."""
import csv
import json
import logging
import warnings

import numpy as np
import pytest

from frozenvit.backbone.suite.cli import main

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def ws(tmp_path_factory, synth_model):
    """data/weave, model/ (a PatchCore fitted through the CLI) and ensemble/: two members on the test ViT, the second
    tiling its images (64 px tiles of the 80 x 96 images), both rebuilt by name from w.safetensors."""
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
    from frozenvit.backbone import load_backbone

    tmp = synth_model(tmp_path_factory.mktemp("deploy_trial"))
    w = tmp / "w.safetensors"
    bb = load_backbone("test_vit", weights=str(w), img_size=64)
    normals = sorted((tmp / "data/weave/train/good").glob("*.png"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCoreEnsemble([PatchCore(bb, progress=False), PatchCore(bb, tile=1.0, progress=False)]).fit(normals)
    source = {"name": "test_vit", "weights": str(w), "img_size": 64}
    det.save(tmp / "ensemble", backbone_sources=[source, source])
    return tmp


def _normals(ws):
    return sorted((ws / "data/weave/train/good").glob("*.png"))


def _tests(ws):
    return sorted((ws / "data/weave/test").rglob("*.png"))


def _export(ws, model, out, *extra):
    return main(["export", "anomaly", "--model", str(ws / model), "--out", str(out), "--threads", "1", *extra])


def _int8(ws, n=2):
    return ["--int8", "--calibration", str(ws / "data/weave/train/good"), "--calibration-images", str(n)]


# ---- 4. int8 in Python decides nothing at the float32 threshold ----------------------------------------------

def test_load_detector_with_int8_member_exports_withholds_decisions_and_says_why(ws, tmp_path):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import DecisionsWithheld, load_exported

    assert _export(ws, "ensemble", tmp_path / "dep", *_int8(ws)) == 0
    float32 = load_detector(ws / "ensemble").decision_threshold()
    with pytest.warns(DecisionsWithheld, match=r"int8.*withheld.*float32.*set_params\(threshold=T\).*--threshold"):
        det = load_detector(ws / "ensemble", backbones=[load_exported(tmp_path / "dep" / f"member{i}") for i in range(2)])
    out = det.predict(_tests(ws))
    assert det.decision_threshold() is None and out.is_defect is None and out.threshold is None
    assert np.isfinite(out.scores).all()                                     # scores and maps are still given
    det.set_params(threshold=float(np.median(out.scores)))                   # the user's own, on int8 scores
    assert det.predict(_tests(ws)).is_defect is not None
    assert float32 is not None                                               # the model itself is unchanged


def test_load_detector_of_a_single_model_with_an_int8_export_withholds_decisions(ws, tmp_path):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import DecisionsWithheld, load_exported

    assert _export(ws, "model", tmp_path / "dep", *_int8(ws)) == 0
    with pytest.warns(DecisionsWithheld):
        det = load_detector(ws / "model", backbones=[load_exported(tmp_path / "dep")])
    assert det.decision_threshold() is None and det.predict(_tests(ws)).is_defect is None


@pytest.mark.parametrize("model", ["model", "ensemble"])
def test_use_runtime_int8_withholds_decisions_and_float32_keeps_them(ws, model):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import DecisionsWithheld, use_runtime

    ref = load_detector(ws / model).decision_threshold()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecisionsWithheld)                   # float32: no warning, same threshold
        det = use_runtime(load_detector(ws / model), "onnxruntime", precision="float32")
    assert det.decision_threshold() == pytest.approx(ref) and det.predict(_tests(ws)).is_defect is not None
    with pytest.warns(DecisionsWithheld, match="withheld"):
        det = use_runtime(load_detector(ws / model), "onnxruntime", precision="int8", calibration=_normals(ws)[:2])
    assert det.decision_threshold() is None and det.predict(_tests(ws)).is_defect is None


def test_one_int8_member_withholds_the_ensembles_decisions(ws):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import DecisionsWithheld, use_runtime

    with pytest.warns(DecisionsWithheld, match="member 1 of 2"):
        det = use_runtime(load_detector(ws / "ensemble"), "onnxruntime", precision=("float32", "int8"),
                          calibration=_normals(ws)[:2])
    assert det.predict(_tests(ws)).is_defect is None


@pytest.mark.parametrize("model", ["model", "ensemble"])
def test_threshold_at_and_partial_fit_refuse_an_int8_model(ws, model):
    """Both work on the float32 scores the model stores: threshold_at would hand out a float32 threshold for int8
    scores, partial_fit would calibrate on a mix and put int8 features into the bank."""
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import use_runtime
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.warns(UserWarning, match="withheld"):
        det = use_runtime(load_detector(ws / model), "onnxruntime", precision="int8", calibration=_normals(ws)[:2])
    bank = [len(m.bank_) for m in getattr(det, "members_", [det])]
    with pytest.raises(ParameterError, match=r"threshold_at.*int8.*set_params\(threshold=T\)"):
        det.threshold_at(0.1)
    with pytest.raises(ParameterError, match=r"partial_fit.*int8.*float32 model"):
        det.partial_fit(_tests(ws)[:2])
    assert [len(m.bank_) for m in getattr(det, "members_", [det])] == bank and det.updates_ == []
    assert load_detector(ws / model).threshold_at(0.5) is not None          # float32: as before


def test_a_threshold_set_before_int8_still_decides_without_a_warning(ws):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import DecisionsWithheld, use_runtime

    det = load_detector(ws / "model").set_params(threshold=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecisionsWithheld)
        use_runtime(det, "onnxruntime", precision="int8", calibration=_normals(ws)[:2])
    assert det.decision_threshold() == 1.0 and det.predict(_tests(ws)).is_defect is not None


def test_saving_a_detector_whose_decisions_are_withheld_keeps_its_own_threshold(ws, tmp_path):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import use_runtime

    ref = json.loads((ws / "model" / "config.json").read_text())["threshold"]
    with pytest.warns(UserWarning, match="withheld"):
        det = use_runtime(load_detector(ws / "model"), "onnxruntime", precision="int8", calibration=_normals(ws)[:2])
    det.backbone_ = load_detector(ws / "model").backbone_                  # back to torch for the save
    det.save(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["threshold"] == pytest.approx(ref)


def test_cli_int8_writes_the_threshold_as_withheld_not_uncalibrated(ws, tmp_path, capsys):
    argv = ["anomaly", "predict", "--model", str(ws / "model"), "--images", str(ws / "data/weave/test"),
            "--out", str(tmp_path / "p"), "--no-overlays", "--runtime", "onnxruntime", "--precision", "int8",
            "--calibration", str(ws / "data/weave/train/good"), "--calibration-images", "2", "--threads", "1"]
    assert main(argv) == 0
    with open(tmp_path / "p" / "scores.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["threshold"] for r in rows} == {"withheld (int8)"} and {r["is_defect"] for r in rows} == {""}


# ---- 5. an ensemble's export is one atomic artifact ------------------------------------------------------------

def _fail_after_first_member(monkeypatch):
    import frozenvit.backbone.export as export

    real, calls = export.export_backbone, []

    def flaky(*a, **kw):
        calls.append(a[1])
        if len(calls) > 1:
            raise RuntimeError("killed mid-export")
        return real(*a, **kw)
    monkeypatch.setattr(export, "export_backbone", flaky)


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def test_an_ensemble_export_that_fails_midway_leaves_the_earlier_export_whole(ws, tmp_path, monkeypatch):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import load_exported

    out = tmp_path / "dep"
    assert _export(ws, "ensemble", out, "--format", "onnx") == 0
    before = _tree(out)
    _fail_after_first_member(monkeypatch)
    assert _export(ws, "ensemble", out, *_int8(ws)) == 1                   # an unexpected error, after member0
    monkeypatch.undo()
    assert _tree(out) == before                                              # not one member of the new export
    assert [p.name for p in tmp_path.iterdir()] == ["dep"]                   # no half set beside it
    bbs = [load_exported(out / f"member{i}") for i in range(2)]
    assert {b.precision for b in bbs} == {"float32"}
    load_detector(ws / "ensemble", backbones=bbs).predict(_tests(ws)[:1])


def test_a_first_ensemble_export_that_fails_midway_leaves_nothing(ws, tmp_path, monkeypatch):
    _fail_after_first_member(monkeypatch)
    assert _export(ws, "ensemble", tmp_path / "dep") == 1
    assert list(tmp_path.iterdir()) == []


def test_the_export_of_an_ensemble_lists_its_members_in_one_marker(ws, tmp_path):
    from frozenvit.backbone.suite.artifacts import read_marker

    assert _export(ws, "ensemble", tmp_path / "dep") == 0
    files = read_marker(tmp_path / "dep")["files"]
    assert "members.json" in files and "member0/config.json" in files and "member1/model.onnx" in files
    assert [m["folder"] for m in json.loads((tmp_path / "dep" / "members.json").read_text())["members"]] == [
        "member0", "member1"]


def _old_style_set(ws, out):
    """An export as the earlier code wrote it: the folder marked first, then each member in its own atomic_dir."""
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import export_backbone
    from frozenvit.backbone.suite.artifacts import output_dir

    det = load_detector(ws / "ensemble")
    output_dir(out, "backbone.export.members")
    for i, m in enumerate(det.members_):
        export_backbone(m.backbone_, out / f"member{i}", m.blocks_)


def test_a_member_of_a_set_whose_marker_does_not_list_it_is_refused(ws, tmp_path):
    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.backbone.export import load_exported

    _old_style_set(ws, tmp_path / "dep")
    with pytest.raises(ArtifactError, match="not one complete export of all members.*export anomaly"):
        load_exported(tmp_path / "dep" / "member0")


def test_a_member_swapped_in_from_another_export_is_refused(ws, tmp_path):
    import shutil

    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.backbone.export import load_exported

    assert _export(ws, "ensemble", tmp_path / "a") == 0
    assert _export(ws, "model", tmp_path / "single") == 0
    shutil.rmtree(tmp_path / "a" / "member1")
    shutil.copytree(tmp_path / "single", tmp_path / "a" / "member1")         # same kind, not this set's member
    with pytest.raises(ArtifactError, match="not one complete export"):
        load_exported(tmp_path / "a" / "member1")


def test_an_older_export_of_ours_is_replaced_as_a_whole(ws, tmp_path):
    from frozenvit.backbone.export import load_exported

    _old_style_set(ws, tmp_path / "dep")
    assert _export(ws, "ensemble", tmp_path / "dep") == 0
    assert [load_exported(tmp_path / "dep" / f"member{i}").precision for i in range(2)] == ["float32"] * 2


def test_a_users_file_inside_an_ensemble_export_is_refused(ws, tmp_path, capsys):
    out = tmp_path / "dep"
    assert _export(ws, "ensemble", out) == 0
    (out / "member0" / "notes.txt").write_text("mine")
    assert _export(ws, "ensemble", out) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "member0" / "notes.txt").read_text() == "mine"


# ---- 11. export --int8 calibrates each member on its own inputs, as use_runtime does --------------------------------

def test_export_int8_calibrates_a_tiling_member_on_its_tiles_as_use_runtime(ws, tmp_path):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import use_runtime

    assert _export(ws, "ensemble", tmp_path / "dep", *_int8(ws, 2)) == 0
    exported = [json.loads((tmp_path / "dep" / f"member{i}" / "config.json").read_text())["int8"]["calibration_images"]
                for i in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                      # decisions withheld: said elsewhere
        det = use_runtime(load_detector(ws / "ensemble"), "onnxruntime", precision="int8", calibration=_normals(ws)[:2])
    assert exported == [m.backbone_.export_config["int8"]["calibration_images"] for m in det.members_]
    assert exported[0] == 2 and exported[1] > 2                              # the tiling member: its tiles


# ---- 12. messages ---------------------------------------------------------------------------------------------------

def test_int8_warnings_name_the_member_not_a_temporary_folder(ws, caplog):
    from frozenvit.anomaly import load_detector
    from frozenvit.backbone.export import use_runtime

    with caplog.at_level(logging.WARNING), pytest.warns(UserWarning, match="withheld"):
        use_runtime(load_detector(ws / "ensemble"), "onnxruntime", precision="int8", calibration=_normals(ws)[:2])
    quantised = [r.getMessage() for r in caplog.records if "int8-quantised" in r.getMessage()]
    assert len(quantised) == 2 and all("frozenvit-export-" not in m for m in quantised)
    assert "member 0 (test_vit" in quantised[0] and "member 1 (test_vit" in quantised[1]


def test_onnxruntimes_preprocessing_advice_does_not_leak(ws, tmp_path, caplog, capfd):
    with caplog.at_level(logging.WARNING):
        assert _export(ws, "model", tmp_path / "dep", *_int8(ws)) == 0
    captured = capfd.readouterr()
    assert "pre-processing before quantization" not in caplog.text + captured.out + captured.err
    assert not [h for h in logging.getLogger().handlers if type(h) is logging.NullHandler]      # put back


def test_loading_the_folder_of_an_ensemble_export_names_its_member_folders(ws, tmp_path):
    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.backbone.export import load_exported

    assert _export(ws, "ensemble", tmp_path / "dep") == 0
    with pytest.raises(ArtifactError, match=r"one export per member.*member0, member1.*/member<i>.*load_detector"):
        load_exported(tmp_path / "dep")
