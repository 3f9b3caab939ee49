"""`frozenvit export ...` and `--runtime` on the commands, end to end on timm's tiny test ViT (local weights)."""
import csv
import json

import numpy as np
import pytest
from PIL import Image

from frozenvit.backbone.suite.cli import main

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, synth_model):
    return synth_model(tmp_path_factory.mktemp("export_cli"))


def backbone_args(ws):
    return ["--backbone", "test_vit", "--weights", str(ws / "w.safetensors"), "--image-size", "64"]


def test_export_backbone_writes_the_blocks_asked_at_the_size_asked(workspace, capsys):
    out = workspace / "exported"
    assert main(["export", "backbone", *backbone_args(workspace), "--blocks", "0,2", "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["blocks"] == [0, 2] and cfg["preprocessing"]["img_size"] == [64, 64] and (out / "model.onnx").is_file()
    assert "exported test_vit blocks 0,2 at 64x64 px as onnx" in capsys.readouterr().out


def test_export_anomaly_exports_the_models_blocks(workspace):
    from frozenvit.anomaly.ensemble import load_detector

    out = workspace / "exported_model"
    assert main(["export", "anomaly", "--model", str(workspace / "model"), "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["blocks"] == list(load_detector(workspace / "model").blocks_)


def scores(path):
    return {r["image"]: float(r["score"]) for r in csv.DictReader(open(path / "scores.csv"))}


def test_anomaly_predict_with_onnxruntime_scores_as_torch(workspace):
    test_dir = workspace / "data" / "weave" / "test"
    for rt in ("torch", "onnxruntime"):
        assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir),
                     "--out", str(workspace / f"pred_{rt}"), "--no-overlays", "--runtime", rt]) == 0
    ref, got = scores(workspace / "pred_torch"), scores(workspace / "pred_onnxruntime")
    assert ref.keys() == got.keys()
    np.testing.assert_allclose([got[k] for k in ref], list(ref.values()), rtol=1e-3)


def test_anomaly_evaluate_with_onnxruntime_gives_torchs_image_auroc(workspace):
    got = {}
    for rt in ("torch", "onnxruntime"):
        out = workspace / f"eval_{rt}.json"
        assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data",
                     str(workspace / "data" / "weave"), "--out", str(out), "--runtime", rt]) == 0
        got[rt] = json.loads(out.read_text())["metrics"]["image_auroc"]
    assert got["onnxruntime"] == pytest.approx(got["torch"], abs=1e-6)


def test_anomaly_evaluate_records_the_runtime_and_int8_precision_it_ran(workspace):
    out = workspace / "eval_int8.json"
    assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data", str(workspace / "data" / "weave"),
                 "--out", str(out), "--runtime", "onnxruntime", "--precision", "int8", "--calibration",
                 str(workspace / "data" / "weave" / "train" / "good"), "--calibration-images", "4"]) == 0
    got = json.loads(out.read_text())
    assert (got["runtime"], got["precision"]) == ("onnxruntime", "int8") and 0 <= got["metrics"]["image_auroc"] <= 1


@pytest.mark.parametrize("extra, says", [(["--runtime", "onnxruntime", "--precision", "int8"], "--calibration"),
                                         (["--runtime", "onnxruntime", "--precision", "bfloat16"], "openvino")])
def test_anomaly_evaluate_refuses_a_precision_it_cannot_run_as_asked(workspace, extra, says, capsys):
    out = workspace / "eval_refused.json"
    assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data",
                 str(workspace / "data" / "weave"), "--out", str(out), *extra]) == 2
    assert says in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("given", ["float16", "float32,", "bfloat16,fp8"])
def test_precision_takes_known_names_one_or_comma_separated(given, capsys):
    with pytest.raises(SystemExit) as e:
        main(["anomaly", "evaluate", "--model", "m", "--data", "d", "--precision", given])
    assert e.value.code == 2 and "--precision" in capsys.readouterr().err


@pytest.fixture(scope="module")
def imgs(workspace):
    folder = workspace / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (70, 90, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def test_export_int8_prints_its_measured_error(workspace, imgs, capsys):
    out = workspace / "int8"
    assert main(["export", "backbone", *backbone_args(workspace), "--blocks", "2", "--out", str(out), "--int8",
                 "--calibration", str(imgs)]) == 0
    assert json.loads((out / "config.json").read_text())["int8"]["calibration_images"] == 2
    assert "int8: patch grids differ from torch's" in capsys.readouterr().out


def test_int8_without_calibration_is_refused_before_any_work(workspace, capsys):
    assert main(["export", "backbone", *backbone_args(workspace), "--out", str(workspace / "int8_none"),
                 "--int8"]) == 2
    assert "--calibration" in capsys.readouterr().err and not (workspace / "int8_none").exists()


def test_backbone_inspect_with_a_runtime_reports_its_parity_with_torch(workspace, imgs, capsys):
    out = workspace / "inspect"
    assert main(["backbone", "inspect", *backbone_args(workspace), "--images", str(imgs), "--out", str(out),
                 "--runtime", "onnxruntime"]) == 0
    rep = json.loads((out / "inspect.json").read_text())["runtime"]
    assert rep["runtime"] == "onnxruntime" and max(rep["grid_rel_diff"].values()) < 1e-4
    assert "onnxruntime vs torch on 2 images" in capsys.readouterr().out


@pytest.mark.parametrize("given", ["torch,tensorrt", "torch,torch", ""])
def test_latency_runtime_list_takes_distinct_known_names(given, capsys):
    with pytest.raises(SystemExit) as e:
        main(["control", "latency", "--runtime", given])
    assert e.value.code == 2 and "--runtime" in capsys.readouterr().err


def test_comparison_rows_hold_every_runtime_and_stage():
    from frozenvit.control.latency import LatencyReport, comparison_rows

    reps = {rt: LatencyReport(np.full(4, ms), {"encode": np.full(4, ms / 2)}) for rt, ms in
            (("torch", 30.0), ("openvino", 20.0))}
    rows = comparison_rows(reps)
    assert [(r["runtime"], r["stage"]) for r in rows] == [("torch", "loop"), ("torch", "encode"),
                                                          ("openvino", "loop"), ("openvino", "encode")]
    assert rows[2]["p50"] == 20.0 and set(rows[0]) == {"runtime", "stage", "p50", "p95", "p99"}


@pytest.mark.parametrize("argv", [["control", "evaluate", "--policy", "nowhere"],
                                  ["anomaly", "predict", "--model", "nowhere", "--images", ".", "--out", "nowhere_out"]])
def test_a_runtime_with_ray_is_refused_before_any_work(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--ray", "--runtime", "onnxruntime"]) == 2
    assert "runs in this process only" in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_latency_times_torch_alone_without_runtime():
    from frozenvit.backbone.suite.cli import build_parser

    assert build_parser().parse_args(["control", "latency"]).runtime == ("torch",)


def _two_member_ensemble(workspace, path, seed):
    """An ensemble of two PatchCores on the workspace's test ViT, fitted on seeded noise and saved at `path`."""
    from frozenvit.anomaly import PatchCore
    from frozenvit.anomaly.ensemble import PatchCoreEnsemble
    from frozenvit.backbone import load_backbone

    source = json.loads((workspace / "model" / "config.json").read_text())["backbone_source"]
    bb = load_backbone("test_vit", weights=str(workspace / "w.safetensors"), img_size=64)
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(8)]
    PatchCoreEnsemble([PatchCore(bb, progress=False), PatchCore(bb, progress=False)],
                      progress=False).fit(imgs).save(path, backbone_sources=[source, source])


def test_export_of_an_ensemble_refuses_a_users_folder_and_replaces_its_own(workspace, tmp_path, capsys):
    _two_member_ensemble(workspace, tmp_path / "ens", seed=0)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "important.txt").write_text("years of work")
    assert main(["export", "anomaly", "--model", str(tmp_path / "ens"), "--out", str(mine)]) == 2
    assert "OutputConflict" in capsys.readouterr().err and sorted(p.name for p in mine.iterdir()) == ["important.txt"]
    out = tmp_path / "exported"
    for _ in range(2):                                               # a re-run replaces its own export
        assert main(["export", "anomaly", "--model", str(tmp_path / "ens"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["member0", "member1", "members.json"]


def test_predict_and_evaluate_read_an_export_instead_of_exporting_again(workspace, capsys):
    """--export DIR: the export's own graphs score as --runtime onnxruntime does (one graph, and an ensemble's
    member set); the runtime it ran is recorded; flags that contradict it are refused before any work."""
    test_dir = workspace / "data" / "weave" / "test"
    exported = workspace / "exported_for_predict"
    assert main(["export", "anomaly", "--model", str(workspace / "model"), "--out", str(exported)]) == 0
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir), "--out",
                 str(workspace / "pred_export"), "--no-overlays", "--export", str(exported)]) == 0
    assert "backbone run by onnxruntime in float32" in capsys.readouterr().out
    if not (workspace / "pred_onnxruntime").exists():
        assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir),
                     "--out", str(workspace / "pred_onnxruntime"), "--no-overlays", "--runtime", "onnxruntime"]) == 0
    ref, got = scores(workspace / "pred_onnxruntime"), scores(workspace / "pred_export")
    assert ref.keys() == got.keys()
    np.testing.assert_allclose([got[k] for k in ref], list(ref.values()), rtol=1e-5)
    out = workspace / "eval_export.json"
    assert main(["anomaly", "evaluate", "--model", str(workspace / "model"), "--data", str(workspace / "data" / "weave"),
                 "--out", str(out), "--export", str(exported)]) == 0
    assert (json.loads(out.read_text())["runtime"], json.loads(out.read_text())["precision"]) == ("onnxruntime",
                                                                                                  "float32")
    capsys.readouterr()
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir), "--out",
                 str(workspace / "pred_export2"), "--export", str(exported), "--runtime", "openvino"]) == 2
    assert "drop --runtime" in capsys.readouterr().err and not (workspace / "pred_export2").exists()
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir), "--out",
                 str(workspace / "pred_export3"), "--export", str(workspace)]) == 2
    assert "ArtifactError" in capsys.readouterr().err and not (workspace / "pred_export3").exists()


def test_predict_reads_an_ensembles_export_member_by_member(workspace, tmp_path, capsys):
    _two_member_ensemble(workspace, tmp_path / "ens", seed=1)
    assert main(["export", "anomaly", "--model", str(tmp_path / "ens"), "--out", str(tmp_path / "exp")]) == 0
    test_dir = workspace / "data" / "weave" / "test"
    for flag in (["--runtime", "onnxruntime"], ["--export", str(tmp_path / "exp")]):
        assert main(["anomaly", "predict", "--model", str(tmp_path / "ens"), "--images", str(test_dir), "--out",
                     str(tmp_path / flag[0].strip("-")), "--no-overlays", *flag]) == 0
    ref, got = scores(tmp_path / "runtime"), scores(tmp_path / "export")
    np.testing.assert_allclose([got[k] for k in ref], list(ref.values()), rtol=1e-5)
    assert main(["anomaly", "predict", "--model", str(workspace / "model"), "--images", str(test_dir), "--out",
                 str(tmp_path / "wrong"), "--export", str(tmp_path / "exp")]) == 2      # another model's export
    assert "it is the export of another model" in capsys.readouterr().err and not (tmp_path / "wrong").exists()
