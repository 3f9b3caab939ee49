"""Exported backbones (backbone/export.py): parity with torch eager, the source check, and what runs on them.

Every test runs a tiny random model; the runtimes are the optional extra frozenvit[deploy], so the tests of a
runtime skip when it is not installed.
"""
import json
import logging
import sys

import numpy as np
import pytest
import torch

from frozenvit.backbone.errors import ArtifactError, BackboneUnavailable
from frozenvit.backbone.export import export_backbone, load_exported, runtime_backbone, use_runtime

pytest.importorskip("onnx")

ONNXRUNTIME = pytest.param("onnxruntime", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("onnxruntime") is None, reason="onnxruntime not installed"))
OPENVINO = pytest.param("openvino", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("openvino") is None, reason="openvino not installed"))
RUNTIMES = [ONNXRUNTIME, OPENVINO]


@pytest.fixture(scope="module")
def vit(make_tiny_vit):
    torch.manual_seed(0)
    return make_tiny_vit()


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (50 + 7 * i, 61, 3), dtype=np.uint8) for i in range(5)]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_exported_patch_grids_match_torch_within_1e4_relative(vit, frames, runtime):
    ref = vit.patch_grids(frames, blocks=(1, 3), batch_size=2)
    got = runtime_backbone(vit, runtime, (1, 3)).patch_grids(frames, blocks=(1, 3), batch_size=2)
    for b in (1, 3):
        assert got[b].shape == ref[b].shape and rel(got[b], ref[b]) < 1e-4
        assert rel(got.cls(b), ref.cls(b)) < 1e-4
    assert got.mappings == ref.mappings                                    # the same preprocessing code


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_exported_convnet_stages_match_torch(make_tiny_convnet, frames, runtime):
    torch.manual_seed(0)
    cnn = make_tiny_convnet()
    ref = cnn.patch_grids(frames, blocks=(1, 2))
    got = runtime_backbone(cnn, runtime, (1, 2)).patch_grids(frames, blocks=(1, 2))
    assert all(rel(got[b], ref[b]) < 1e-4 for b in (1, 2)) and got.prefix[1].shape[1] == 0


@pytest.mark.parametrize("fmt", ["onnx", pytest.param("openvino", marks=OPENVINO.marks)])
def test_export_records_source_preprocessing_and_blocks(vit, tmp_path, fmt):
    path = export_backbone(vit, tmp_path / "e", (3, 1), format=fmt)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["kind"] == "backbone.export" and cfg["format"] == fmt and cfg["blocks"] == [1, 3]
    assert cfg["preprocessing"]["img_size"] == [64, 64] and cfg["preprocessing"]["resize"] == "stretch"
    assert (path / cfg["graph"]).is_file()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_load_refuses_an_export_of_other_weights(vit, make_tiny_vit, tmp_path, runtime):
    path = export_backbone(vit, tmp_path / "e", 3)
    with pytest.raises(ArtifactError, match="exported from"):
        load_exported(path, runtime, source=make_tiny_vit(seed=1))            # random weights of another seed


def test_load_refuses_an_export_with_other_preprocessing(vit, make_tiny_vit, tmp_path):
    path = export_backbone(vit, tmp_path / "e", 3)
    torch.manual_seed(0)
    with pytest.raises(ArtifactError, match="resize"):
        load_exported(path, source=make_tiny_vit(resize="pad"))            # same weights, padded inputs


def test_a_changed_graph_file_is_refused(vit, tmp_path):
    path = export_backbone(vit, tmp_path / "e", 3)
    with open(path / "model.onnx", "r+b") as f:
        f.seek(-10, 2)
        f.write(b"\0")
    with pytest.raises(ArtifactError, match="changed after it was written"):
        load_exported(path)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_asking_for_a_block_that_was_not_exported_is_an_artifact_error(vit, frames, runtime):
    with pytest.raises(ArtifactError, match="export those blocks"):
        runtime_backbone(vit, runtime, 3).patch_grids(frames, blocks=2)


def test_an_ir_export_is_not_run_by_onnxruntime(vit, tmp_path):
    pytest.importorskip("openvino")
    path = export_backbone(vit, tmp_path / "e", 3, format="openvino")
    with pytest.raises(ArtifactError, match="run it with openvino"):
        load_exported(path, "onnxruntime")


def test_a_missing_runtime_names_the_extra(vit, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)                  # import fails as when not installed
    with pytest.raises(BackboneUnavailable, match=r"frozenvit\[deploy\]"):
        runtime_backbone(vit, "onnxruntime", 3)


def test_the_torch_runtime_is_the_backbone_itself(vit):
    assert runtime_backbone(vit, "torch", 3) is vit


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_policy_actions_match_torch_within_1e4(vit, frames, runtime):
    from frozenvit.control.agent import VisuomotorAgent
    from frozenvit.control.latency import UntrainedHead

    head = UntrainedHead(vit, "attention", block=[1, 3], chunk=1)
    proprio = np.random.default_rng(1).normal(size=(len(frames), 4)).astype(np.float32)
    ref = VisuomotorAgent(head, vit).act(frames, proprio)
    got = VisuomotorAgent(head, runtime_backbone(vit, runtime, [1, 3])).act(frames, proprio)   # checks fingerprints
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)


@pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_anomaly_scores_rank_the_synthetic_set_as_torch_does(vit, runtime):
    from frozenvit.anomaly import PatchCore, render_sample

    normals = [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(10)]
    test = ([render_sample("weave", None, 0, 50 + i, size=(96, 112))[0] for i in range(4)]
            + [render_sample("weave", d, 0, i, size=(96, 112))[0] for i, d in enumerate(["hole", "scratch", "stain"])])
    det = PatchCore(vit, coreset_ratio=0.25, progress=False).fit(normals)
    ref = det.decision_function(test)
    got = use_runtime(det, runtime).decision_function(test)
    assert det.backbone_.runtime == runtime
    assert np.argsort(got).tolist() == np.argsort(ref).tolist()
    np.testing.assert_allclose(got, ref, rtol=1e-3)


def test_int8_export_records_its_measured_error_and_stays_close(vit, frames, tmp_path, caplog):
    pytest.importorskip("onnxruntime")
    caplog.set_level(logging.WARNING, logger="frozenvit.backbone")        # whatever level an earlier test left
    path = export_backbone(vit, tmp_path / "q", (1, 3), int8=True, calibration=frames)
    q = json.loads((path / "config.json").read_text())["int8"]
    err = q["grid_rel_error_on_calibration_images"]
    assert q["calibration_images"] == len(frames) and set(err) == {"1", "3"} and 0 < max(err.values()) < 0.3
    ref = vit.patch_grids(frames, blocks=3)
    assert 0 < rel(load_exported(path, source=vit).patch_grids(frames, blocks=3)[3], ref[3]) < 0.3
    assert "int8-quantised" in caplog.text                                 # never silently


def test_int8_without_calibration_images_is_a_parameter_error(vit, tmp_path):
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match="calibration"):
        export_backbone(vit, tmp_path / "q", 3, int8=True)


def test_int8_export_of_a_same_padded_convnet_keeps_torchs_grid_shapes(frames, tmp_path):
    pytest.importorskip("onnxruntime")
    from frozenvit.backbone import load_backbone

    lite0 = load_backbone("efficientnet_lite0", img_size=64)   # TF "same" padding, computed from shapes in the graph
    ref = lite0.patch_grids(frames, blocks=(2, 3))
    got = load_exported(export_backbone(lite0, tmp_path / "q", (2, 3), int8=True, calibration=frames)).patch_grids(
        frames, blocks=(2, 3))
    assert [got[b].shape for b in (2, 3)] == [ref[b].shape for b in (2, 3)]


@pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")
def test_openvino_bfloat16_ranks_the_synthetic_set_as_torch_does(vit, caplog):
    pytest.importorskip("openvino")
    from frozenvit.anomaly import PatchCore, render_sample
    caplog.set_level(logging.WARNING, logger="frozenvit.backbone")        # whatever level an earlier test left

    normals = [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(10)]
    test = ([render_sample("weave", None, 0, 50 + i, size=(96, 112))[0] for i in range(4)]
            + [render_sample("weave", d, 0, i, size=(96, 112))[0] for i, d in enumerate(["hole", "scratch", "stain"])])
    det = PatchCore(vit, coreset_ratio=0.25, progress=False).fit(normals)
    ref = det.decision_function(test)
    try:
        use_runtime(det, "openvino", precision="bfloat16")
    except BackboneUnavailable:
        pytest.skip("this CPU has no native bfloat16")
    got = det.decision_function(test)
    assert det.backbone_.precision == "bfloat16" and "runs in bfloat16" in caplog.text   # never silently
    assert np.argsort(got).tolist() == np.argsort(ref).tolist()
    np.testing.assert_allclose(got, ref, rtol=5e-2)


def test_openvino_bfloat16_grids_differ_from_float32_within_5e2_relative(vit, frames):
    pytest.importorskip("openvino")
    ref = vit.patch_grids(frames, blocks=3)
    try:
        got = runtime_backbone(vit, "openvino", 3, precision="bfloat16").patch_grids(frames, blocks=3)
    except BackboneUnavailable:
        pytest.skip("this CPU has no native bfloat16")
    assert 1e-4 < rel(got[3], ref[3]) < 5e-2           # reduced arithmetic, not float32's parity


@pytest.mark.parametrize("runtime", ["torch", ONNXRUNTIME])
def test_bfloat16_is_a_parameter_error_where_the_runtime_does_not_run_it(vit, runtime):
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match="openvino"):
        runtime_backbone(vit, runtime, 3, precision="bfloat16")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_int8_precision_quantises_the_export_it_runs(vit, frames, runtime):
    ebb = runtime_backbone(vit, runtime, 3, precision="int8", calibration=frames)
    assert ebb.precision == "int8" and ebb.export_config["int8"]["calibration_images"] == len(frames)


def test_a_float_export_is_not_run_as_int8(vit, tmp_path):
    pytest.importorskip("onnxruntime")
    path = export_backbone(vit, tmp_path / "f", 3)
    with pytest.raises(ArtifactError, match="export it with int8"):
        load_exported(path, precision="int8")


@pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")
def test_int8_of_a_tiled_model_is_calibrated_on_its_tiles(vit):
    pytest.importorskip("onnxruntime")
    from frozenvit.anomaly import PatchCore, render_sample

    normals = [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(4)]
    det = PatchCore(vit, coreset_ratio=0.25, tile=1.0, progress=False).fit(normals)    # 64 px tiles: 2 x 2 an image
    use_runtime(det, "onnxruntime", precision="int8", calibration=normals[:2])
    assert det.backbone_.export_config["int8"]["calibration_images"] == 2 * 4


@pytest.fixture(scope="module")
def ensemble(vit):
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble, render_sample

    normals = [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(6)]
    members = [PatchCore(vit, coreset_ratio=0.25, progress=False), PatchCore(vit, blocks=(3,), progress=False)]
    with pytest.warns(UserWarning, match="held-out normals"):
        return PatchCoreEnsemble(members).fit(normals), normals


def test_use_runtime_runs_each_member_in_its_own_precision(ensemble):
    pytest.importorskip("onnxruntime")
    det, normals = ensemble
    use_runtime(det, "onnxruntime", precision=("float32", "int8"), calibration=normals[:2])
    assert [m.backbone_.precision for m in det.members_] == ["float32", "int8"]


def test_a_precision_count_other_than_one_or_one_per_member_is_a_parameter_error(ensemble):
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match="3 precisions .* for 2 members"):
        use_runtime(ensemble[0], "onnxruntime", precision=("float32",) * 3)
