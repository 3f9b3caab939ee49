"""benchmarks/control_success.py: --merge combines runs that split the tasks or seeds (others are refused); the summary
over seeds; --compare pairs heads of different runs on the same episodes."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import control_success  # noqa: E402


def _part(path, tasks, wins, epochs=60):
    results = [dict(task=t, pooling=p, success_rate=sum(w) / len(w), per_config=w)
               for t in tasks for p, w in wins.items()]
    path.write_text(json.dumps(dict(settings=dict(tasks=tasks, poolings=list(wins), epochs=epochs),
                                    results=results, complete=True)))
    return str(path)


def test_merge_recomputes_the_summary_and_refuses_mismatched_parts(tmp_path):
    a = _part(tmp_path / "a.json", ["t1"], {"attention": [True, True], "cls": [False, True]})
    b = _part(tmp_path / "b.json", ["t2"], {"attention": [True, False], "cls": [False, False]})
    out = tmp_path / "m.json"
    assert control_success.merge_parts([a, b], str(out)) == 0
    m = json.loads(out.read_text())
    assert m["settings"]["tasks"] == ["t1", "t2"] and m["merged_from"] == ["a.json", "b.json"]
    means = {r["pooling"]: r["mean_success"] for r in m["summary"]["by_pooling"]}
    assert means == {"attention": 0.75, "cls": 0.25}
    assert m["summary"]["verdict"]["paired"]["cls"] == {"attention_only": 2, "cls_only": 0, "p_two_sided": 0.5}
    c = _part(tmp_path / "c.json", ["t3"], {"attention": [True], "cls": [True]}, epochs=30)
    with pytest.raises(SystemExit, match="differ"):
        control_success.merge_parts([a, c], str(out))
    with pytest.raises(SystemExit, match="overlap"):
        control_success.merge_parts([a, a], str(out))


def _seeded_part(path, task, seeds, planned=None, complete=True):
    results = [dict(task=task, pooling="attention", seed=s, success_rate=0.5, per_config=[True, False]) for s in seeds]
    path.write_text(json.dumps(dict(settings=dict(tasks=[task], poolings=["attention"], seeds=planned or seeds,
                                                  epochs=60), results=results, complete=complete)))
    return str(path)


def test_merge_joins_runs_that_split_the_seeds_and_a_stopped_part(tmp_path):
    stopped = _seeded_part(tmp_path / "a.json", "t1", [0, 1], planned=[0, 1, 2], complete=False)  # killed after seed 1
    rest = _seeded_part(tmp_path / "b.json", "t1", [2])
    other = _seeded_part(tmp_path / "c.json", "t2", [0, 1, 2])
    out = tmp_path / "m.json"
    assert control_success.merge_parts([stopped, rest, other], str(out)) == 0
    m = json.loads(out.read_text())
    assert m["settings"]["tasks"] == ["t1", "t2"] and m["settings"]["seeds"] == [0, 1, 2]
    assert m["complete"] is True and len(m["results"]) == 6
    assert control_success.merge_parts([stopped, other], str(out)) == 0      # t1 seed 2 is missing
    m = json.loads(out.read_text())
    assert m["complete"] is False and m["settings"]["seeds"] == [0, 1, 2]
    with pytest.raises(SystemExit, match=r"overlap.*'t1', 'attention', 1"):
        control_success.merge_parts([stopped, _seeded_part(tmp_path / "d.json", "t1", [1, 2])], str(out))


def test_summary_averages_over_seeds_and_pairs_episodes_within_a_seed():
    rows = [dict(task="t", pooling="attention", seed=0, success_rate=1.0, per_config=[1, 1]),
            dict(task="t", pooling="cls", seed=0, success_rate=0.0, per_config=[0, 0]),
            dict(task="t", pooling="attention", seed=1, success_rate=0.0, per_config=[0, 0]),
            dict(task="t", pooling="cls", seed=1, success_rate=0.5, per_config=[0, 1])]
    s = control_success._summary(rows, ["attention", "cls"])
    assert {r["pooling"]: r["mean_success"] for r in s["by_pooling"]} == {"attention": 0.5, "cls": 0.25}
    assert s["by_seed"] == [dict(seed=0, attention=1.0, cls=0.0), dict(seed=1, attention=0.0, cls=0.5)]
    assert s["verdict"]["attention_minus_cls_by_seed"] == [1.0, -0.5]
    assert s["verdict"]["paired"]["cls"]["attention_only"] == 2 and s["verdict"]["paired"]["cls"]["cls_only"] == 1


def test_resume_keeps_a_pooling_whose_own_settings_match():
    old = dict(tasks=["t1", "t2"], poolings=["attention", "cls"], blocks={"attention": 2, "cls": 11},
               seeds=[0, 1], token_dropout=0.0, epochs=60, heldout_seeds=[1000000, 1000049])
    new = dict(old, tasks=["t1"], poolings=["attention", "cls"], blocks={"attention": 5, "cls": 11},
               seeds=[0], token_dropout=0.3)
    ps = control_success._pooling_settings
    assert ps(old, "cls") == ps(new, "cls")                     # another pooling's block and dropout do not matter
    assert ps(old, "attention") != ps(new, "attention")
    assert ps(old, "attention") != ps(dict(old, token_dropout=0.3), "attention")
    assert ps(old, "cls") != ps(dict(old, heldout_seeds=[1000500, 1000524]), "cls")   # validation vs test set
    assert ps(old, "attention") != ps(dict(old, num_queries=1), "attention")
    assert ps(old, "cls") == ps(dict(old, num_queries=1), "cls")
    assert ps(old, "cls") == ps(dict(old, ensemble=1), "cls")         # runs from before --ensemble: one head
    assert ps(old, "cls") != ps(dict(old, ensemble=3), "cls")
    assert ps(old, "attention") != ps(dict(old, keypoints=True), "attention")
    assert ps(old, "cls") == ps(dict(old, keypoints=True), "cls") and ps(old, "attention") == ps(dict(old, keypoints=False), "attention")
    for opt, value in [("pos_code", "sincos"), ("query_diversity", 0.1), ("with_cls", True)]:
        assert ps(old, "attention") != ps(dict(old, **{opt: value}), "attention"), opt
        assert ps(old, "cls") == ps(dict(old, **{opt: value}), "cls"), opt
    assert ps(old, "attention") == ps(dict(old, pos_code="learned", query_diversity=0.0, with_cls=False), "attention")


def test_policy_folder_suffix_names_every_non_default_attention_option():
    from argparse import Namespace

    base = dict(token_dropout=0.0, num_queries=4, keypoints=False, pos_code="learned", query_diversity=0.0,
                with_cls=False)

    def sfx(pooling="attention", **kw):
        return control_success._attention_suffix(Namespace(**dict(base, **kw)), pooling)

    assert sfx() == "" and sfx("cls", token_dropout=0.3, keypoints=True, with_cls=True) == ""
    assert sfx(token_dropout=0.3) == "_td0.3" and sfx(num_queries=1) == "_q1" and sfx(keypoints=True) == "_kp"
    assert sfx(pos_code="sincos", query_diversity=0.05, with_cls=True) == "_sincos_div0.05_cls"


def _run(path, rows, **settings):
    episodes = {**dict(configs=2, heldout_seeds=[1000000, 1000001], max_steps=200, hold_steps=20), **settings}
    path.write_text(json.dumps(dict(settings=episodes, results=[
        dict(task=t, pooling=p, seed=s, success_rate=sum(w) / len(w), per_config=w) for t, p, s, w in rows])))
    return str(path)


def test_compare_pairs_heads_of_two_runs_on_their_shared_episodes_and_refuses_other_episodes(tmp_path):
    a = _run(tmp_path / "long.json", [("t", "attention", 0, [1, 1]), ("t", "attention", 1, [1, 0]),
                                      ("u", "attention", 0, [0, 0])])
    b = _run(tmp_path / "short.json", [("t", "cls", 0, [0, 0]), ("t", "cls", 1, [0, 1]),
                                       ("t", "attention", 0, [0, 0])])
    out = tmp_path / "cmp.json"
    assert control_success.compare_runs([f"{a}:attention", f"{b}:cls"], str(out)) == 0
    c = json.loads(out.read_text())
    assert c["tasks"] == ["t"] and c["seeds"] == [0, 1]                  # task u is only in one run: left out
    assert {r["pooling"]: r["mean_success"] for r in c["by_pooling"]} == {"long:attention": 0.75, "short:cls": 0.25}
    assert c["paired"]["short:cls"] == {"long:attention_only": 3, "short:cls_only": 1, "p_two_sided": 0.625}
    d = _run(tmp_path / "other.json", [("t", "cls", 0, [0, 0])], max_steps=150)
    with pytest.raises(SystemExit, match="max_steps"):
        control_success.compare_runs([f"{a}:attention", f"{d}:cls"], str(out))
    with pytest.raises(SystemExit, match="RUN_JSON:POOLING"):
        control_success.compare_runs([a], str(out))


def test_compare_across_weights_pairs_two_encoders_only_when_asked_and_only_in_their_weights(tmp_path):
    rows = [("t", "attention", 0, [1, 0])]
    v1 = _run(tmp_path / "v1.json", rows, encoder="vit@224", weights_sha256="a" * 64)
    v2 = _run(tmp_path / "v2.json", [("t", "attention", 0, [1, 1])], encoder="vit@224", weights_sha256="b" * 64)
    out = tmp_path / "cmp.json"
    with pytest.raises(SystemExit, match="weights_sha256"):
        control_success.compare_runs([f"{v1}:attention", f"{v2}:attention"], str(out))
    assert control_success.compare_runs([f"{v1}:attention", f"{v2}:attention"], str(out), across_weights=True) == 0
    c = json.loads(out.read_text())
    assert c["across_weights"] is True
    assert c["paired"]["v2:attention"] == {"v1:attention_only": 0, "v2:attention_only": 1, "p_two_sided": 1.0}
    other = _run(tmp_path / "v3.json", rows, encoder="vit@128", weights_sha256="b" * 64)
    with pytest.raises(SystemExit, match="encoder"):         # another input size is still other episodes
        control_success.compare_runs([f"{v1}:attention", f"{other}:attention"], str(out), across_weights=True)


def test_compare_across_inputs_pairs_two_cameras_on_the_same_simulated_episodes_only(tmp_path):
    one = _run(tmp_path / "corner.json", [("t", "attention", 0, [0, 1]), ("u", "attention", 0, [1, 1])],
               encoder="vit@224", camera="corner",
               demo_size=224, weights_sha256="a" * 64)
    two = _run(tmp_path / "two.json", [("t", "attention", 0, [1, 1]), ("u", "attention", 0, [0, 1])],
               encoder="vit@160x320",
               camera="corner+corner4", demo_size=160, weights_sha256="a" * 64)
    out = tmp_path / "cmp.json"
    with pytest.raises(SystemExit, match="camera"):                   # not without asking
        control_success.compare_runs([f"{one}:attention", f"{two}:attention"], str(out))
    assert control_success.compare_runs([f"{one}:attention", f"{two}:attention"], str(out), across_inputs=True) == 0
    c = json.loads(out.read_text())
    assert c["across_inputs"] is True and c["inputs"]["two:attention"]["camera"] == "corner+corner4"
    assert c["paired"]["two:attention"] == {"corner:attention_only": 1, "two:attention_only": 1, "p_two_sided": 1.0}
    by_task = {t: (v["two:attention"]["corner:attention_only"], v["two:attention"]["two:attention_only"])
               for t, v in c["paired_by_task"].items()}
    assert by_task == {"t": (0, 1), "u": (1, 0)}
    held = _run(tmp_path / "held.json", [("t", "attention", 0, [1, 1])], camera="corner+corner4", hold_steps=0)
    with pytest.raises(SystemExit, match="hold_steps"):               # other demos: other episodes still refused
        control_success.compare_runs([f"{one}:attention", f"{held}:attention"], str(out), across_inputs=True)


def test_merge_and_compare_write_only_to_a_new_out(tmp_path, monkeypatch):
    """Without --out they used to replace the committed benchmarks/results JSON; an --out that is one of the
    inputs would overwrite that input. Both are refused before anything is read or written."""
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(control_success, "RESULTS", results)
    a = _part(tmp_path / "a.json", ["t1"], {"attention": [True, False]})
    b = _part(tmp_path / "b.json", ["t2"], {"attention": [True, True]})
    before = Path(a).read_text()
    with pytest.raises(SystemExit, match="--merge needs --out"):
        control_success.merge_parts([a, b], None)
    with pytest.raises(SystemExit, match="--compare needs --out"):
        control_success.compare_runs([f"{a}:attention", f"{b}:attention"], None)
    with pytest.raises(SystemExit, match="one of the --merge inputs"):
        control_success.merge_parts([a, b], a)
    with pytest.raises(SystemExit, match="one of the --compare inputs"):
        control_success.compare_runs([f"{a}:attention", f"{b}:attention"], a)
    assert Path(a).read_text() == before and not list(results.iterdir())


def test_compare_pairs_runs_whose_shared_tasks_had_the_same_demonstrator_only(tmp_path):
    """Runs before --expert recorded none (Meta-World's experts); the library's default changed who demonstrates
    reach-v3, pick-place-v3 and peg-insert-side-v3 only, so an old push run pairs with a new one and an old pick-place run does not."""
    old = _run(tmp_path / "old.json", [("push-v3", "attention", 0, [1, 0]), ("pick-place-v3", "attention", 0, [0, 0])],
               tasks=["push-v3", "pick-place-v3"])
    new = _run(tmp_path / "new.json", [("push-v3", "attention", 0, [1, 1])], tasks=["push-v3"], expert="default",
               demonstrators={"push-v3": "metaworld"})
    out = tmp_path / "cmp.json"
    assert control_success.compare_runs([f"{old}:attention", f"{new}:attention"], str(out)) == 0
    assert json.loads(out.read_text())["tasks"] == ["push-v3"]
    carry = _run(tmp_path / "carry.json", [("pick-place-v3", "attention", 0, [1, 1])], tasks=["pick-place-v3"],
                 expert="default", demonstrators={"pick-place-v3": "carry"})
    with pytest.raises(SystemExit, match="pick-place-v3's demos were recorded by other experts"):
        control_success.compare_runs([f"{old}:attention", f"{carry}:attention"], str(out))
    screen = _run(tmp_path / "screen.json", [("reach-v3", "attention", 0, [1, 1])], tasks=["reach-v3"],
                  expert="fingertips")                       # the reach screen's JSON, before demonstrators were named
    assert control_success._demonstrators(json.loads(Path(screen).read_text())["settings"]) == {"reach-v3": "fingertips"}
    assert control_success._demonstrators(json.loads(Path(old).read_text())["settings"]) == {
        "push-v3": "metaworld", "pick-place-v3": "metaworld"}
