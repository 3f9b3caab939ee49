"""benchmarks/control_success.py: --compare and --merge of finished runs go through control.compare and write only to a
new --out."""
import json

import pytest


def _run(path, rows, **settings):
    path.write_text(json.dumps(dict(
        settings={**dict(tasks=sorted({t for t, _, _, _ in rows}), seeds=sorted({s for _, _, s, _ in rows}),
                         poolings=["attention"], configs=2, heldout_seeds=[1000000, 1000001], max_steps=500),
                  **settings},
        results=[dict(task=t, pooling=p, seed=s, success_rate=sum(w) / len(w), per_config=w) for t, p, s, w in rows])))
    return str(path)


def test_compare_writes_the_paired_test_of_two_runs(tmp_path, load_benchmark, monkeypatch):
    cs = load_benchmark("control_success")
    old = _run(tmp_path / "old.json", [("t", "attention", 0, [0, 0])])
    new = _run(tmp_path / "new.json", [("t", "attention", 0, [1, 1])])
    out = tmp_path / "cmp.json"
    monkeypatch.setattr("sys.argv", ["control_success.py", "--compare", f"{old}:attention", f"{new}:attention",
                                     "--out", str(out)])
    assert cs.main() == 0
    paired = json.loads(out.read_text())["paired"]["new:attention"]
    assert (paired["a_only"], paired["b_only"]) == (0, 2)


def test_merge_joins_per_seed_runs_into_one(tmp_path, load_benchmark, monkeypatch):
    cs = load_benchmark("control_success")
    s0 = _run(tmp_path / "s0.json", [("t", "attention", 0, [1, 0])])
    s1 = _run(tmp_path / "s1.json", [("t", "attention", 1, [1, 1])])
    out = tmp_path / "all.json"
    monkeypatch.setattr("sys.argv", ["control_success.py", "--merge", s0, s1, "--out", str(out)])
    assert cs.main() == 0
    merged = json.loads(out.read_text())
    assert merged["settings"]["seeds"] == [0, 1] and merged["complete"] is True
    assert merged["summary"]["by_pooling"] == [dict(pooling="attention", runs=2, mean_success=0.75)]


def test_merge_pairs_the_poolings_of_parts_that_split_them(tmp_path, load_benchmark, monkeypatch):
    cs = load_benchmark("control_success")
    att = _run(tmp_path / "att.json", [("t", "attention", 0, [1, 1]), ("t", "attention", 1, [1, 0])])
    cls = _run(tmp_path / "cls.json", [("t", "cls", 0, [0, 1])], poolings=["cls"])
    out = tmp_path / "all.json"
    monkeypatch.setattr("sys.argv", ["control_success.py", "--merge", att, cls, "--out", str(out)])
    assert cs.main() == 0
    merged = json.loads(out.read_text())
    assert merged["settings"]["poolings"] == ["attention", "cls"]
    assert merged["summary"]["paired"]["cls"] == dict(a_only=1, b_only=0, p=1.0)      # seed 0, the one both have
    assert merged["summary"]["paired_by_task"] == {"t": {"cls": dict(a_only=1, b_only=0, p=1.0)}}


@pytest.mark.parametrize("flag", ["--merge", "--compare"])
def test_merge_and_compare_refuse_to_write_without_a_new_out(tmp_path, load_benchmark, monkeypatch, flag):
    cs = load_benchmark("control_success")
    a = _run(tmp_path / "a.json", [("t", "attention", 0, [1, 0])])
    b = _run(tmp_path / "b.json", [("t", "attention", 1, [1, 1])])
    specs = [a, b] if flag == "--merge" else [f"{a}:attention", f"{b}:attention"]
    before = (tmp_path / "a.json").read_text()
    for out in ([], ["--out", a]):                                  # no --out; an --out that is one of the inputs
        monkeypatch.setattr("sys.argv", ["control_success.py", flag, *specs, *out])
        with pytest.raises(SystemExit, match="a new path"):
            cs.main()
    assert (tmp_path / "a.json").read_text() == before


def test_an_evaluation_through_another_runtime_keeps_a_journal_of_its_own(load_benchmark):
    cs = load_benchmark("control_success")
    names = {cs.journal_name("h", "abc", [1000000, 1000001], 500, rt, q)
             for rt, q in [("torch", False), ("openvino", False), ("openvino", True), ("onnxruntime", False)]}
    assert len(names) == 4
    assert cs.journal_name("h", "abc", [1000000, 1000001], 500, "torch", False) == "h_abc_cfg1000000x2_cap500.jsonl"


def test_int8_without_an_exported_runtime_is_refused(load_benchmark, monkeypatch):
    cs = load_benchmark("control_success")
    monkeypatch.setattr("sys.argv", ["control_success.py", "--int8"])
    with pytest.raises(SystemExit, match="--runtime onnxruntime or openvino"):
        cs.main()


def test_calibration_frames_are_spread_over_every_demo(load_benchmark):
    import numpy as np

    cs = load_benchmark("control_success")
    demos = [np.full((t, 2, 2, 3), i, dtype=np.uint8) for i, t in enumerate([40, 3, 25])]
    frames = cs.calibration_frames(demos, 6)
    assert len(frames) == 6 and frames[0].shape == (2, 2, 3)
    assert {int(f[0, 0, 0]) for f in frames} == {0, 1, 2}


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_the_evaluation_encoder_is_the_backbone_exported_for_the_runtime(load_benchmark, tiny_vit, runtime):
    from frozenvit.backbone.weights import weights_fingerprint

    pytest.importorskip(runtime)
    cs = load_benchmark("control_success")
    assert cs.eval_encoder(tiny_vit, "torch", [1, 3]) is tiny_vit
    ebb = cs.eval_encoder(tiny_vit, runtime, [1, 3])
    assert ebb.runtime == runtime and ebb.export_config["source"]["fingerprint"] == weights_fingerprint(tiny_vit)
    assert ebb.export_config["int8"] is None


def test_the_int8_evaluation_encoder_records_its_measured_error(load_benchmark, tiny_vit):
    import numpy as np

    pytest.importorskip("openvino")
    cs = load_benchmark("control_success")
    frames = list(np.random.default_rng(0).integers(0, 256, (8, 64, 64, 3), dtype=np.uint8))
    ebb = cs.eval_encoder(tiny_vit, "openvino", [1, 3], frames)
    assert ebb.runtime == "openvino"
    assert set(ebb.export_config["int8"]["grid_rel_error_on_calibration_images"]) == {"1", "3"}
