"""frozenvit.control.compare: the exact McNemar test against scipy's binomial test, pairing runs on the episodes they
share (and refusing other episodes), merging runs that split the tasks, seeds or poolings."""
import pytest
from scipy.stats import binomtest

from frozenvit.control import RunMismatch, compare_runs, mcnemar, merge_runs
from frozenvit.control.compare import paired_test, summarize


@pytest.mark.parametrize("a_only,b_only", [(0, 1), (1, 0), (3, 1), (2, 2), (0, 7), (12, 48), (27, 1), (47, 8),
                                           (100, 80), (5, 0)])
def test_mcnemar_p_is_scipys_two_sided_binomial_test_of_the_discordant_pairs(a_only, b_only):
    both, neither = 4, 3                                       # concordant pairs: they do not count
    a = [1] * a_only + [0] * b_only + [1] * both + [0] * neither
    b = [0] * a_only + [1] * b_only + [1] * both + [0] * neither
    t = mcnemar(a, b)
    assert (t.a_only, t.b_only) == (a_only, b_only)
    assert t.p == pytest.approx(binomtest(a_only, a_only + b_only).pvalue, rel=1e-12)


def test_mcnemar_without_discordant_pairs_is_p_one():
    assert mcnemar([1, 0, 1], [1, 0, 1]).p == 1.0 and mcnemar([], []).p == 1.0


def test_mcnemar_refuses_outcomes_of_other_lengths():
    with pytest.raises(ValueError, match="same episodes"):
        mcnemar([1, 0], [1])


def test_paired_test_pairs_episodes_within_a_task_and_seed_only():
    rows = [dict(task="t", pooling="a", seed=0, per_config=[1, 1]), dict(task="t", pooling="b", seed=0, per_config=[0, 0]),
            dict(task="t", pooling="a", seed=1, per_config=[0, 0]), dict(task="t", pooling="b", seed=1, per_config=[0, 1]),
            dict(task="u", pooling="a", seed=0, per_config=[1, 1])]        # no b head on u: left out
    t = paired_test(rows, "a", "b")
    assert (t.a_only, t.b_only) == (2, 1)


def test_summarize_averages_over_tasks_and_seeds_and_per_seed():
    rows = [dict(task="t", pooling="a", seed=0, success_rate=1.0), dict(task="t", pooling="b", seed=0, success_rate=0.0),
            dict(task="t", pooling="a", seed=1, success_rate=0.0), dict(task="t", pooling="b", seed=1, success_rate=0.5)]
    s = summarize(rows, ["a", "b", "c"])
    assert s["by_pooling"] == [dict(pooling="a", runs=2, mean_success=0.5), dict(pooling="b", runs=2, mean_success=0.25)]
    assert s["by_seed"] == [dict(seed=0, a=1.0, b=0.0), dict(seed=1, a=0.0, b=0.5)]


def _run(rows, **settings):
    episodes = {**dict(configs=2, heldout_seeds=[1000000, 1000001], max_steps=500, hold_steps=20), **settings}
    return dict(settings=episodes, results=[dict(task=t, pooling=p, seed=s, success_rate=sum(w) / len(w), per_config=w)
                                            for t, p, s, w in rows])


def test_compare_runs_pairs_heads_on_the_tasks_and_seeds_every_run_has():
    long = _run([("t", "attention", 0, [1, 1]), ("t", "attention", 1, [1, 0]), ("u", "attention", 0, [0, 0])])
    short = _run([("t", "cls", 0, [0, 0]), ("t", "cls", 1, [0, 1]), ("t", "attention", 0, [0, 0])])
    c = compare_runs({"long": (long, "attention"), "short": (short, "cls")})
    assert c["tasks"] == ["t"] and c["seeds"] == [0, 1]                       # u is in one run only
    assert {r["pooling"]: r["mean_success"] for r in c["by_pooling"]} == {"long": 0.75, "short": 0.25}
    assert c["paired"]["short"] == dict(a_only=3, b_only=1, p=pytest.approx(0.625))
    assert c["paired_by_task"]["t"]["short"]["a_only"] == 3


def test_compare_runs_refuses_runs_rolled_out_on_other_episodes():
    a = _run([("t", "attention", 0, [1, 0])])
    with pytest.raises(RunMismatch, match="max_steps"):
        compare_runs({"a": (a, "attention"), "b": (_run([("t", "attention", 0, [1, 1])], max_steps=200), "attention")})


def test_compare_runs_lets_a_named_setting_differ_only_when_asked():
    v1 = _run([("t", "attention", 0, [1, 0])], weights_sha256="a" * 64)
    v2 = _run([("t", "attention", 0, [1, 1])], weights_sha256="b" * 64)
    with pytest.raises(RunMismatch, match="weights_sha256"):
        compare_runs({"v1": (v1, "attention"), "v2": (v2, "attention")})
    c = compare_runs({"v1": (v1, "attention"), "v2": (v2, "attention")}, may_differ=("weights_sha256",))
    assert c["paired"]["v2"] == dict(a_only=0, b_only=1, p=1.0)


def test_compare_runs_refuses_a_shared_task_demonstrated_by_another_expert():
    meta = _run([("reach-v3", "attention", 0, [0, 1])], demonstrators={"reach-v3": "metaworld"})
    tip = _run([("reach-v3", "attention", 0, [1, 1])], demonstrators={"reach-v3": "fingertips"})
    with pytest.raises(RunMismatch, match="reach-v3's demos"):
        compare_runs({"meta": (meta, "attention"), "tip": (tip, "attention")})


def test_compare_runs_pairs_other_demonstrators_when_asked():
    meta = _run([("reach-v3", "attention", 0, [0, 1])], demonstrators={"reach-v3": "metaworld"})
    servo = _run([("reach-v3", "attention", 0, [1, 1])], demonstrators={"reach-v3": "servo"})
    c = compare_runs({"meta": (meta, "attention"), "servo": (servo, "attention")}, may_differ=("demonstrators",))
    assert c["paired"]["servo"] == dict(a_only=0, b_only=1, p=1.0)


def test_compare_runs_refuses_runs_without_a_shared_head():
    a, b = _run([("t", "attention", 0, [1])]), _run([("u", "attention", 0, [1])])
    with pytest.raises(RunMismatch, match="share no"):
        compare_runs({"a": (a, "attention"), "b": (b, "attention")})


def _part(tasks, seeds, poolings=("attention",), **settings):
    rows = [(t, p, s, [1, 0]) for t in tasks for p in poolings for s in seeds]
    return _run(rows, tasks=list(tasks), seeds=list(seeds), poolings=list(poolings), **settings)


def test_merge_runs_joins_parts_that_split_the_tasks_or_the_seeds():
    m = merge_runs([_part(["t1"], [0, 1]), _part(["t1"], [2]), _part(["t2"], [0, 1, 2])])
    assert m["settings"]["tasks"] == ["t1", "t2"] and m["settings"]["seeds"] == [0, 1, 2]
    assert len(m["results"]) == 6 and m["complete"] is True


def test_merge_runs_joins_parts_that_split_the_poolings_and_keeps_their_order():
    m = merge_runs([_part(["t1"], [0, 1]), _part(["t1"], [0], poolings=("cls",))])
    assert m["settings"]["poolings"] == ["attention", "cls"] and len(m["results"]) == 3
    assert m["complete"] is False                                    # no cls head of seed 1


def test_merge_runs_is_incomplete_when_a_task_misses_a_seed_another_has():
    m = merge_runs([_part(["t1"], [0, 1]), _part(["t2"], [0, 1, 2])])
    assert m["settings"]["seeds"] == [0, 1, 2] and m["complete"] is False


def test_merge_runs_refuses_parts_of_other_settings_and_overlapping_parts():
    with pytest.raises(RunMismatch, match="epochs"):
        merge_runs([_part(["t1"], [0], epochs=60), _part(["t2"], [0], epochs=30)])
    with pytest.raises(RunMismatch, match=r"overlap.*'t1', 'attention', 1"):
        merge_runs([_part(["t1"], [0, 1]), _part(["t1"], [1, 2])])


def test_merge_runs_keeps_every_parts_demonstrators():
    m = merge_runs([_part(["t1"], [0], demonstrators={"t1": "carry"}), _part(["t2"], [0], demonstrators={"t2": "held"})])
    assert m["settings"]["demonstrators"] == {"t1": "carry", "t2": "held"}


def test_compare_runs_pairs_runs_of_other_lengths_on_the_configurations_they_share():
    full = _run([("t", "attention", 0, [1, 1, 0, 0])], configs=4, heldout_seeds=[1000000, 1000003])
    half = _run([("t", "attention", 0, [0, 1])])                                   # the first 2 of them
    c = compare_runs({"full": (full, "attention"), "half": (half, "attention")})
    assert c["configs"] == 2 and c["heldout_seeds"] == [1000000, 1000001]
    assert c["by_task"] == [dict(task="t", seed=0, full=2, half=1)]
    assert {r["pooling"]: r["mean_success"] for r in c["by_pooling"]} == {"full": 1.0, "half": 0.5}
    assert c["paired"]["half"] == dict(a_only=1, b_only=0, p=1.0)


def test_compare_runs_refuses_runs_without_a_shared_configuration():
    a = _run([("t", "attention", 0, [1, 0])])
    b = _run([("t", "attention", 0, [1, 1])], heldout_seeds=[1000002, 1000003])
    with pytest.raises(RunMismatch, match="share no held-out configuration"):
        compare_runs({"a": (a, "attention"), "b": (b, "attention")})


def test_merge_runs_of_other_caps_keeps_each_tasks_cap_and_compare_checks_it():
    m = merge_runs([_part(["t1"], [0]), _part(["t2"], [0], max_steps=200)])
    assert m["settings"]["max_steps"] == {"t1": 500, "t2": 200}
    same = merge_runs([_part(["t2"], [0], max_steps=200), _part(["t1"], [0])])
    assert compare_runs({"m": (m, "attention"), "same": (same, "attention")})["tasks"] == ["t1", "t2"]
    with pytest.raises(RunMismatch, match="t2's episodes were capped"):
        compare_runs({"m": (m, "attention"), "500": (_part(["t1", "t2"], [0]), "attention")})


def test_merge_runs_refuses_a_task_at_two_caps():
    with pytest.raises(RunMismatch, match="t1 is capped"):
        merge_runs([_part(["t1"], [0]), _part(["t1"], [1], max_steps=200)])


# ---- `control evaluate` results: compare_evaluations and `frozenvit control compare` --------------------------------
def _evaluation(successes, configs=None, task="reach-v3", max_steps=150, policy="p"):
    configs = list(range(1000, 1000 + len(successes))) if configs is None else configs
    return dict(frozenvit="control.evaluate", task=task, configs=configs, successes=[bool(s) for s in successes],
                steps=[10] * len(successes), max_steps=max_steps, policy=policy,
                success_rate=sum(map(bool, successes)) / len(successes))


def test_compare_evaluations_pairs_the_shared_configurations_by_seed_not_by_position():
    from frozenvit.control import compare_evaluations

    a = _evaluation([1, 1, 0, 1], configs=[1000, 1001, 1002, 1003])
    b = _evaluation([0, 1, 1], configs=[1003, 1001, 1000])      # the same seeds, another order, one fewer
    c = compare_evaluations({"a": a, "b": b})
    assert c["configs"] == 3 and c["config_seeds"] == [1000, 1003]
    assert [(r["label"], r["successes"], r["episodes"]) for r in c["by_label"]] == [("a", 3, 3), ("b", 2, 3)]
    # seed 1000: a 1, b 1; 1001: 1, 1; 1003: a 1, b 0 -> a alone once, b alone never
    assert (c["paired"]["b"]["a_only"], c["paired"]["b"]["b_only"]) == (1, 0)
    assert c["paired"]["b"]["p"] == pytest.approx(binomtest(1, 1).pvalue)


@pytest.mark.parametrize("b, words", [
    (_evaluation([1, 0], task="push-v3"), "other tasks"),
    (_evaluation([1, 0], max_steps=500), "other episode caps"),
    (_evaluation([1, 0], configs=[5, 6]), "share no held-out configuration"),
    ({"settings": {}, "results": []}, "not a `control evaluate` results.json"),
])
def test_compare_evaluations_refuses_other_episodes(b, words):
    from frozenvit.control import compare_evaluations

    with pytest.raises(RunMismatch, match=words):
        compare_evaluations({"a": _evaluation([1, 0]), "b": b})


def test_control_compare_prints_each_success_and_the_paired_test(tmp_path, capsys):
    import json

    from frozenvit.backbone.suite.cli import main

    for name, won in (("big", [1] * 9 + [0]), ("small", [1, 0] * 5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(_evaluation(won)))
    assert main(["control", "compare", str(tmp_path / "big"), str(tmp_path / "small" / "results.json")]) == 0
    out = capsys.readouterr().out
    assert "reach-v3: 10 held-out configurations every evaluation ran (seeds 1000 to 1009), cap 150 steps" in out
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert rows == [["big", "9/10", "0.90"], ["small", "5/10", "0.50"]]
    assert f"small against big: big alone succeeded in 4, small alone in 0 episodes; exact McNemar p = " \
           f"{binomtest(4, 4).pvalue:.3g}" in out
    assert main(["control", "compare", str(tmp_path / "big"), str(tmp_path / "nope")]) == 2
    assert "nope: no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["control", "compare", str(tmp_path / "big"), str(tmp_path / "empty")]) == 2
    assert "empty: no results.json there" in capsys.readouterr().err
    assert main(["control", "compare", str(tmp_path / "big"), str(tmp_path / "small"), "--labels", "x"]) == 2
    assert "--labels names 1 evaluations, 2 were given" in capsys.readouterr().err
