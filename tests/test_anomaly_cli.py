"""`frozenvit anomaly ...` end to end on a small synthetic set, with a local weights file."""
import csv
import json

import numpy as np
import pytest
import torch
from PIL import Image

from frozenvit.backbone.suite.cli import main

# the workspace fits on 8 normals on purpose; the small-holdout warning has its own test
pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    from safetensors.torch import save_file

    from frozenvit.backbone import load_backbone

    tmp = tmp_path_factory.mktemp("anomaly_cli")
    torch.manual_seed(0)
    bb = load_backbone("test_vit", pretrained=False, img_size=64)   # timm's tiny test ViT: rebuildable by name
    save_file({k: v.contiguous() for k, v in bb.model.state_dict().items()}, str(tmp / "w.safetensors"))
    assert main(["anomaly", "synth", "--out", str(tmp / "data"), "--n-train", "8", "--n-test-good", "2",
                 "--n-test-defect", "1", "--height", "80", "--width", "96"]) == 0
    fit = ["anomaly", "fit", "--data", str(tmp / "data" / "weave"), "--out", str(tmp / "model"),
           "--backbone", "test_vit", "--weights", str(tmp / "w.safetensors"), "--image-size", "64",
           "--threads", "1"]
    assert main(fit) == 0
    return tmp


def test_predict_writes_scores_csv_and_overlays_at_original_size(workspace):
    test_dir = workspace / "data" / "weave" / "test"
    out = workspace / "pred"
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir),
                 "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "scores.csv")))
    assert len(rows) == 6 and {r["image"] for r in rows} >= {"good/000.png", "hole/000.png"}
    ov = Image.open(out / "overlays" / "hole__000.png")
    assert ov.size == (96, 80)


def test_evaluate_prints_and_writes_metrics(workspace, capsys):
    assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data",
                 str(workspace / "data" / "weave"), "--out", str(workspace / "m.json")]) == 0
    res = json.loads((workspace / "m.json").read_text())
    assert {"image_auroc", "pixel_auroc", "aupro", "false_alarm_rate"} <= set(res["metrics"])
    assert 0 <= res["metrics"]["aupro"] <= 1 and len(res["per_defect_type"]) == 4
    assert "aupro" in capsys.readouterr().out


def test_audit_lists_training_images(workspace, capsys):
    assert main(["anomaly", "audit", "--data", str(workspace / "data" / "weave"), "--folds", "2", "--top", "3",
                 "--backbone", "test_vit", "--weights", str(workspace / "w.safetensors"),
                 "--image-size", "64"]) == 0
    out = capsys.readouterr().out
    assert out.count("train/good/") == 3 and "training images flagged" in out


def test_fit_on_an_empty_folder_fails_with_a_clear_message(workspace, capsys):
    (workspace / "empty").mkdir()
    rc = main(["anomaly", "fit", "--data", str(workspace / "empty"), "--out", str(workspace / "m2"),
               "--backbone", "test_vit", "--weights", str(workspace / "w.safetensors"), "--image-size", "64"])
    assert rc == 2 and "neither an MVTec AD category" in capsys.readouterr().err


def test_random_weights_without_a_backbone_are_the_defaults_shape_random_and_recorded(workspace, capsys):
    from frozenvit.anomaly.defaults import load_default_backbone

    out = workspace / "random_model"
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(out),
                 "--random-weights", "--image-size", "64", "--threads", "1"]) == 0
    assert "cannot be rebuilt" in capsys.readouterr().err
    rec = json.loads((out / "config.json").read_text())
    default = load_default_backbone(img_size=64)
    assert rec["backbone"]["pretrained"] is False and rec["backbone"]["weights_sha256"] is None
    assert rec["backbone"]["name"] == default.config.name and rec["backbone"]["depth"] == default.config.depth
    assert rec["backbone"]["fingerprint"].startswith("params:") and rec["backbone_source"] is None
    assert main(["anomaly", "predict", "--model", str(out), "--images", str(workspace / "data" / "weave" / "test"),
                 "--out", str(workspace / "random_pred")]) == 2
    assert "ArtifactError" in capsys.readouterr().err and not (workspace / "random_pred").exists()


def test_a_model_of_the_default_fitted_at_another_img_size_is_rebuilt_at_it_by_every_command(workspace, capsys):
    model = workspace / "default64"
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(model),
                 "--image-size", "64", "--threads", "1"]) == 0
    from frozenvit.anomaly import defaults

    rec = json.loads((model / "config.json").read_text())
    assert rec["backbone"]["img_size"] == [64, 64] and rec["backbone_source"] == defaults.default_source(64)
    assert rec["backbone"]["name"] == (defaults.BACKBONE or rec["backbone"]["name"])
    test_dir = workspace / "data" / "weave" / "test"
    assert main(["anomaly", "predict", "--model", str(model), "--images", str(test_dir),
                 "--out", str(workspace / "pred64"), "--no-overlays"]) == 0
    assert main(["anomaly", "evaluate", "--model", str(model), "--data", str(workspace / "data" / "weave")]) == 0
    assert "image_auroc" in capsys.readouterr().out


def test_a_model_fitted_by_name_at_another_img_size_is_rebuilt_at_it(workspace, capsys):
    from frozenvit.anomaly import PatchCore

    model = workspace / "named48"
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(model),
                 "--backbone", "test_vit", "--weights", str(workspace / "w.safetensors"), "--image-size", "48"]) == 0
    assert PatchCore.load(model).backbone_.config.img_size == (48, 48)
    assert main(["anomaly", "evaluate", "--model", str(model), "--data", str(workspace / "data" / "weave")]) == 0


# ---- few-shot and tiling through the CLI (issue 17) ---------------------------------------------------

def _fit_one_normal(ws, out, *extra):
    """`anomaly fit` on a folder holding a single normal image of the workspace."""
    import shutil

    one = ws / "one_normal"
    if not one.is_dir():
        one.mkdir()
        shutil.copy(ws / "data" / "weave" / "train" / "good" / "000.png", one / "000.png")
    return main(["anomaly", "fit", "--data", str(one), "--out", str(ws / out), "--backbone", "test_vit",
                 "--weights", str(ws / "w.safetensors"), "--image-size", "64", "--threads", "1", *extra])


def test_fit_on_one_image_says_the_threshold_is_uncalibrated(workspace, capsys):
    with pytest.warns(UserWarning, match="not calibrated"):
        assert _fit_one_normal(workspace, "one_shot", "--augment", "flips") == 0
    assert "threshold uncalibrated" in capsys.readouterr().out
    cfg = json.loads((workspace / "one_shot" / "config.json").read_text())
    assert cfg["threshold"] is None and cfg["params"]["augment"] == "flips"


def test_predict_and_evaluate_say_uncalibrated_and_take_a_threshold(workspace, capsys):
    if not (workspace / "one_shot").is_dir():
        with pytest.warns(UserWarning, match="not calibrated"):
            assert _fit_one_normal(workspace, "one_shot") == 0
    test, model = workspace / "data" / "weave" / "test", str(workspace / "one_shot")
    capsys.readouterr()
    assert main(["anomaly", "predict", "--model", model, "--images", str(test), "--out", str(workspace / "pred1")]) == 0
    assert "no decisions" in capsys.readouterr().out
    rows = list(csv.DictReader(open(workspace / "pred1" / "scores.csv")))
    assert len(rows) == 6 and all(r["threshold"] == "uncalibrated" and r["is_defect"] == "" for r in rows)
    assert len(list((workspace / "pred1" / "overlays").iterdir())) == 6
    assert main(["anomaly", "predict", "--model", model, "--images", str(test), "--out", str(workspace / "pred1"),
                 "--threshold", "0", "--no-overlays"]) == 0
    rows = list(csv.DictReader(open(workspace / "pred1" / "scores.csv")))
    assert all(r["is_defect"] == "1" and r["threshold"] == "0.000000" for r in rows)
    assert main(["anomaly", "evaluate", "--model", model, "--data", str(workspace / "data" / "weave"),
                 "--out", str(workspace / "metrics1.json")]) == 0
    assert "detection_rate     uncalibrated" in capsys.readouterr().out
    m = json.loads((workspace / "metrics1.json").read_text())
    assert m["threshold"] is None and m["metrics"]["detection_rate"] is None and 0 <= m["metrics"]["image_auroc"] <= 1


def test_fit_stores_tile_and_threshold_and_predict_uses_them(workspace, capsys):
    assert _fit_one_normal(workspace, "tiled", "--image-size", "32", "--tile", "--threshold", "0.5") == 0
    out = capsys.readouterr().out
    assert "threshold 0.5000 (given" in out and "tiles at scale 1" in out
    cfg = json.loads((workspace / "tiled" / "config.json").read_text())
    assert cfg["params"]["tile"] == 1.0 and cfg["threshold"] == 0.5 and cfg["n_train_patches"] == 12 * 4
    assert main(["anomaly", "predict", "--model", str(workspace / "tiled"), "--images",
                 str(workspace / "data" / "weave" / "test"), "--out", str(workspace / "pred_tiled")]) == 0
    rows = list(csv.DictReader(open(workspace / "pred_tiled" / "scores.csv")))
    assert len(rows) == 6 and all(r["threshold"] == "0.500000" and r["is_defect"] in ("0", "1") for r in rows)


def test_patchcore_without_a_backbone_and_fit_without_options_use_one_default(workspace, tmp_path):
    """PatchCore(backbone=None) and `anomaly fit` with no backbone options both take anomaly/defaults.py's
    backbone and tiling; a Python-fitted default model records its source, so it loads without a backbone."""
    import warnings

    from frozenvit.anomaly import PatchCore, defaults, read_mvtec

    ds = read_mvtec(workspace / "data" / "weave")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCore(coreset_ratio=0.5, progress=False).fit(ds.train[:4])
    assert det.tile == defaults.TILE
    default = defaults.load_default_backbone()
    assert det.backbone_.config.name == default.config.name and det.backbone_.weights_sha256 == default.weights_sha256
    det.save(tmp_path / "py")
    loaded = PatchCore.load(tmp_path / "py")
    assert loaded.backbone_.weights_sha256 == default.weights_sha256
    img = [str(s.path) for s in ds.test[:2]]
    assert np.array_equal(det.decision_function(img), loaded.decision_function(img))
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(tmp_path / "cli"),
                 "--threads", "1"]) == 0
    rec = json.loads((tmp_path / "cli" / "config.json").read_text())      # no backbone option: the default ensemble
    assert rec["kind"] == "anomaly.ensemble" and rec["n_members"] == len(defaults.ENSEMBLE) == 3
    lite0, lite2, vit = [json.loads((tmp_path / "cli" / "members" / str(i) / "config.json").read_text())
                         for i in range(3)]
    assert lite0["backbone"]["weights_sha256"] == default.weights_sha256 and lite0["params"]["tile"] == defaults.TILE
    assert lite2["backbone_source"]["name"] == "efficientnet_lite2" and lite2["params"]["tile"] == defaults.TILE
    assert vit["backbone_source"] == {"default": True} and vit["params"]["tile"] == 2.0
    assert vit["params"]["score_border"] == 1 and lite0["params"]["score_border"] == defaults.SCORE_BORDER
    assert vit["params"]["index"] == "ivf" and lite0["params"]["index"] == defaults.INDEX
    assert main(["anomaly", "evaluate", "--model", str(tmp_path / "cli"), "--data", str(workspace / "data" / "weave"),
                 "--out", str(tmp_path / "cli_eval.json")]) == 0
    assert 0 <= json.loads((tmp_path / "cli_eval.json").read_text())["metrics"]["image_auroc"] <= 1
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(tmp_path / "cli"),
                 "--backbone", "efficientnet_lite0", "--threads", "1"]) == 0            # replaces the ensemble it wrote
    assert json.loads((tmp_path / "cli" / "config.json").read_text())["kind"] == "anomaly.patchcore"


def test_backbone_embedded_is_the_embedded_vit_and_is_rebuilt_by_predict(workspace, capsys):
    from frozenvit.backbone import default_spec

    model = workspace / "embedded48"
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(model),
                 "--backbone", "embedded", "--image-size", "48", "--threads", "1"]) == 0
    rec = json.loads((model / "config.json").read_text())
    assert rec["backbone_source"] == {"default": True} and rec["backbone"]["name"] == default_spec()["arch"]
    assert main(["anomaly", "predict", "--model", str(model), "--images", str(workspace / "data" / "weave" / "test"),
                 "--out", str(workspace / "pred_embedded"), "--no-overlays"]) == 0


@pytest.mark.filterwarnings("ignore:1 normal image and none held out:UserWarning")
def test_fit_takes_aggregation_auto_by_default_or_an_odd_size_and_refuses_an_even_one(workspace, capsys):
    rec = json.loads((workspace / "model" / "config.json").read_text())
    assert rec["params"]["aggregation"] == "auto"                       # the workspace's fit had no --aggregation
    assert _fit_one_normal(workspace, "agg5", "--aggregation", "5") == 0
    assert json.loads((workspace / "agg5" / "config.json").read_text())["params"]["aggregation"] == 5
    capsys.readouterr()
    assert _fit_one_normal(workspace, "agg2", "--aggregation", "2") == 2
    err = capsys.readouterr().err
    assert "error (ParameterError)" in err and "odd positive int" in err
    assert not (workspace / "agg2").exists()


# ---- reliability (issue 57): what predict reads and what its --out holds ---------------------------------------

def _rows(out):
    return list(csv.DictReader(open(out / "scores.csv")))


def _images_folder(ws, name, n=3):
    """A fresh folder of `n` test images of the workspace."""
    import shutil

    folder = ws / name
    folder.mkdir()
    for p in sorted((ws / "data" / "weave" / "test" / "good").iterdir())[:1] + \
            sorted((ws / "data" / "weave" / "test" / "hole").iterdir())[:1] + \
            sorted((ws / "data" / "weave" / "train" / "good").iterdir())[: n - 2]:
        shutil.copy(p, folder / f"{p.parent.parent.name}_{p.parent.name}_{p.name}")
    return folder


def test_predict_with_out_inside_images_run_twice_never_scores_its_own_overlays(workspace):
    images = _images_folder(workspace, "inside")
    argv = ["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(images),
            "--out", str(images / "pred")]
    assert main(argv) == 0 and main(argv) == 0
    assert sorted(r["image"] for r in _rows(images / "pred")) == sorted(p.name for p in images.glob("*.png"))


def test_predict_skips_hidden_files_and_folders_as_fit_does(workspace):
    images = _images_folder(workspace, "hidden")
    (images / "._test_good_000.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble metadata, not an image")
    (images / ".ipynb_checkpoints").mkdir()
    (images / ".ipynb_checkpoints" / "test_good_000-checkpoint.png").write_bytes((images / "test_good_000.png").read_bytes())
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(images),
                 "--out", str(workspace / "pred_hidden")]) == 0
    assert sorted(r["image"] for r in _rows(workspace / "pred_hidden")) == sorted(p.name for p in images.glob("[!.]*"))


def test_predict_out_holds_one_runs_results_only(workspace):
    images = _images_folder(workspace, "stale")
    out = workspace / "pred_stale"
    predict = ["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(images), "--out", str(out)]
    assert main(predict) == 0 and len(list((out / "overlays").iterdir())) == 3
    (images / "test_good_000.png").unlink()
    assert main(predict + ["--no-overlays"]) == 0
    assert not (out / "overlays").exists() and len(_rows(out)) == 2
    assert sorted(p.name for p in out.iterdir()) == [".frozenvit.json", "provenance.json", "scores.csv"]


def test_predict_gives_images_of_one_stem_distinct_overlays(workspace):
    images = _images_folder(workspace, "stems", n=2)
    Image.open(images / "test_good_000.png").save(images / "test_good_000.jpg")
    (images / "sub").mkdir()
    Image.open(images / "test_hole_000.png").save(images / "sub" / "x.png")
    Image.open(images / "test_hole_000.png").save(images / "sub__x.png")
    out = workspace / "pred_stems"
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(images),
                 "--out", str(out)]) == 0
    rows = _rows(out)
    assert len(rows) == 5 and len({r["overlay"] for r in rows}) == 5
    assert all((out / r["overlay"]).is_file() for r in rows) and len(list((out / "overlays").iterdir())) == 5


def test_a_tiny_images_warning_names_its_file(workspace):
    images = _images_folder(workspace, "tiny", n=2)
    Image.new("RGB", (1, 1), (200, 10, 10)).save(images / "speck.png")
    with pytest.warns(UserWarning, match=r"speck\.png is 1x1 px"):
        assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(images),
                     "--out", str(workspace / "pred_tiny"), "--no-overlays"]) == 0


def test_evaluate_names_defective_images_without_a_mask_and_keeps_the_pixel_metrics(workspace, capsys):
    import shutil

    data = workspace / "one_mask_missing"
    shutil.copytree(workspace / "data" / "weave", data)
    (data / "ground_truth" / "hole" / "000_mask.png").unlink()
    with pytest.warns(UserWarning, match=r"1 defective test image without a mask \(.*hole/000\.png\)"):
        assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data", str(data),
                     "--out", str(workspace / "m_missing.json")]) == 0
    res = json.loads((workspace / "m_missing.json").read_text())
    assert {"pixel_auroc", "aupro"} <= set(res["metrics"])
    assert res["defective_images_without_masks"] == [str(data / "test" / "hole" / "000.png")]


def test_fit_and_audit_defaults_are_patchcores_and_the_ensembles():
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
    from frozenvit.anomaly.features import AUGMENTS
    from frozenvit.backbone.suite.cli import build_parser

    params, ens = PatchCore().get_params(), PatchCoreEnsemble().get_params()
    for command in ("fit", "audit"):
        args = build_parser().parse_args(["anomaly", command, "--data", "d"] + ["--out", "o"] * (command == "fit"))
        shared = {k: v for k, v in vars(args).items() if k in params and k not in ("backbone", "augment")}
        assert len(shared) >= (12 if command == "fit" else 10) and shared == {k: params[k] for k in shared}, command
        calibrated = ("target_fpr", "holdout", "seed") if command == "fit" else ("seed",)   # audit has no threshold
        assert {k: getattr(args, k) for k in calibrated} == {k: ens[k] for k in calibrated}
        assert command == "fit" or not {"target_fpr", "holdout"} & set(vars(args))
    fit = next(a for a in build_parser()._subparsers._group_actions[0].choices["anomaly"]._subparsers
               ._group_actions[0].choices["fit"]._actions if a.dest == "augment")
    assert set(fit.choices) == {"none", *AUGMENTS} and fit.default == "none" and params["augment"] is None


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_a_model_folder_that_does_not_exist_is_named_as_such(workspace, command, capsys):
    where = {"predict": ["--images", str(workspace / "data" / "weave" / "test"), "--out", str(workspace / "p_none")],
             "evaluate": ["--data", str(workspace / "data" / "weave")]}[command]
    assert main(["anomaly", command, "--model", str(workspace / "no_model")] + where) == 2
    assert f"error (ArtifactError): {workspace / 'no_model'} does not exist" in capsys.readouterr().err
    assert not (workspace / "p_none").exists()


def test_predict_target_fpr_decides_at_the_threshold_calibrated_on_the_stored_held_out_normals(workspace):
    from frozenvit.anomaly import load_detector

    held = np.sort(load_detector(workspace / "model").calibration_scores_)
    assert len(held) == 2                                 # 8 normals, 2 held out: ceil(3 * 0.5) = 2nd smallest
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images",
                 str(workspace / "data" / "weave" / "test"), "--out", str(workspace / "p_fpr"), "--no-overlays",
                 "--target-fpr", "0.5"]) == 0
    rows = list(csv.DictReader(open(workspace / "p_fpr" / "scores.csv")))
    assert {r["threshold"] for r in rows} == {f"{held[1]:.6f}"}
    assert all(r["is_defect"] == str(int(float(r["score"]) > held[1])) for r in rows)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_target_fpr_beyond_what_the_held_out_normals_bound_fails_saying_how_many_are_needed(workspace, command, capsys):
    where = {"predict": ["--images", str(workspace / "data" / "weave" / "test"), "--out", str(workspace / "p_few")],
             "evaluate": ["--data", str(workspace / "data" / "weave")]}[command]
    assert main(["anomaly", command, "--model", str(workspace / "model"), "--target-fpr", "0.05"] + where) == 2
    assert "2 held-out normals cannot calibrate a false-alarm rate of 0.05: it needs at least 19" in capsys.readouterr().err
    assert not (workspace / "p_few").exists()


def test_evaluate_shows_detection_at_the_operating_points_the_held_out_normals_allow(workspace, capsys):
    assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data",
                 str(workspace / "data" / "weave"), "--out", str(workspace / "m_ops.json")]) == 0
    out = capsys.readouterr().out
    assert "operating points calibrated on the model's 2 held-out normals" in out
    assert "needs at least 99 held-out normals" in out and "needs at least 9 held-out normals" in out
    m = json.loads((workspace / "m_ops.json").read_text())["metrics"]
    assert m["held_out_normals"] == 2 and m["detection_rate@10%"] is None


def test_fit_takes_a_non_square_image_size_and_the_model_loads_at_it(workspace, capsys):
    """`anomaly fit --image-size H,W` (wide inspection images): the backbone is built at H x W, recorded, and the
    saved model predicts at it."""
    out = workspace / "wide"
    assert main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(out),
                 "--backbone", "test_vit", "--weights", str(workspace / "w.safetensors"), "--image-size", "64,80",
                 "--threads", "1"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["backbone"]["img_size"] == [64, 80] and cfg["grid"] == [4, 5]
    assert main(["anomaly", "predict", "--model", str(out), "--images", str(workspace / "data" / "weave" / "test"),
                 "--out", str(workspace / "pred_wide")]) == 0
    assert len(list(csv.DictReader(open(workspace / "pred_wide" / "scores.csv")))) == 6
    with pytest.raises(SystemExit):
        main(["anomaly", "fit", "--data", str(workspace / "data" / "weave"), "--out", str(workspace / "bad"),
              "--image-size", "64,x"])
    assert "--image-size" in capsys.readouterr().err
