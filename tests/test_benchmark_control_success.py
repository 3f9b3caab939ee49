"""benchmarks/control_success.py: --compare and --merge of finished runs go through control.compare and write only to a
new --out."""
import json

import pytest


def _run(path, rows, **settings):
    path.write_text(json.dumps(dict(
        settings=dict(tasks=sorted({t for t, _, _, _ in rows}), seeds=sorted({s for _, _, s, _ in rows}),
                      poolings=["attention"], configs=2, max_steps=500, **settings),
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
