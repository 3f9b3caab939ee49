"""Who demonstrates a task: Meta-World's scripted experts under GoalServo by default, which ends their demos where
the task scores success (the fingertips on reach-v3, the object on pick-place-v3, both 4-5 cm from the goal in
Meta-World's demos); peg-insert-side-v3 keeps its own correction; expert="metaworld" keeps Meta-World's own. The
manifest records who demonstrated, and demos of one never resume the other."""
import json

import numpy as np
import pytest

pytest.importorskip("metaworld")
pytest.importorskip("mujoco")

from frozenvit.control import (DemoError, MetaWorldTask, RenderUnavailable, collect_demos,  # noqa: E402
                               expert_name, load_manifest)


def test_default_pick_place_demos_end_with_the_object_on_the_goal_metaworlds_with_the_hand_body_there():
    """The first success comes at the same step (the servo takes over after it); the object then ends within
    1.5 cm of the goal where Meta-World's stops 3-5 cm away."""
    ends, firsts = {}, {}
    for expert in ("default", "metaworld"):
        with MetaWorldTask("pick-place-v3", render=None, stop_on_success=False, expert=expert) as t:
            s, first = t.reset(3), None
            for k in range(150):
                s = t.step(t.expert_action(s))
                first = first or (k + 1 if s.success else None)
            ends[t.expert], firsts[t.expert] = np.linalg.norm(s.full[4:7] - s.full[-3:]), first
    assert ends["servo"] < 0.015 and 0.03 < ends["metaworld"] < 0.05
    assert firsts["servo"] == firsts["metaworld"] is not None


def test_who_demonstrates_by_default_and_bad_names_are_refused():
    assert expert_name("push-v3") == expert_name("reach-v3") == expert_name("pick-place-v3") == "servo"
    assert expert_name("peg-insert-side-v3") == "held"
    assert {expert_name(t, "metaworld") for t in ("reach-v3", "peg-insert-side-v3")} == {"metaworld"}
    assert expert_name("peg-insert-side-v3", "servo") == "servo"
    with pytest.raises(ValueError, match="expert must be one of"):
        expert_name("reach-v3", "fingertips")


def test_every_default_demonstrator_is_in_the_registry_and_made_by_name():
    from frozenvit.control.experts import (DEFAULT_DEMONSTRATOR, DEMONSTRATORS, TASK_DEMONSTRATORS, GoalServo,
                                           HeldPegExpert, MetaWorldExpert, make_expert)

    assert set(TASK_DEMONSTRATORS.values()) | {DEFAULT_DEMONSTRATOR, "metaworld"} <= set(DEMONSTRATORS)
    assert type(make_expert("pick-place-v3")) is GoalServo and type(make_expert("pick-place-v3").expert) is MetaWorldExpert
    assert type(make_expert("peg-insert-side-v3")) is HeldPegExpert
    assert type(make_expert("pick-place-v3", "metaworld")) is MetaWorldExpert


def test_manifest_records_the_expert_and_refuses_to_resume_with_another(tmp_path):
    try:
        d = collect_demos("reach-v3", tmp_path / "d", 1, image_size=32, max_steps=100, hold_steps=0, progress=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    assert load_manifest(d)["expert"] == "servo"
    with pytest.raises(DemoError, match="other settings"):
        collect_demos("reach-v3", d, 2, image_size=32, max_steps=100, hold_steps=0, expert="metaworld", progress=False)
    m = load_manifest(d)
    assert len(m["episodes"]) == 1                                    # nothing recorded by the refused call
    raw = json.loads((d / "manifest.json").read_text())
    del raw["expert"]
    (d / "manifest.json").write_text(json.dumps(raw))                   # a manifest that does not say who demonstrated
    with pytest.raises(DemoError, match="lacks expert.*re-collect"):
        load_manifest(d)


def test_default_peg_expert_does_not_go_back_down_to_a_peg_it_holds():
    """Meta-World's peg-insert expert holds the peg at the threshold of its 'go down to the peg' phase and dithers
    between pressing it onto the table and lifting it; 'held' skips that phase while its fingers are closed on it."""
    firsts = {}
    for expert in ("default", "metaworld"):
        with MetaWorldTask("peg-insert-side-v3", render=None, expert=expert) as t:
            s, first = t.reset(4), None                    # a configuration where Meta-World's expert dithers long
            a0 = t.expert_action(s)
            while not s.done:
                s = t.step(t.expert_action(s))
            firsts[t.expert] = s.steps if s.success else None
            if expert == "default":
                ours_a0 = a0
            else:
                assert np.array_equal(ours_a0, a0)             # before the grasp the two are the same expert
    assert firsts["held"] is not None and firsts["metaworld"] is not None
    assert firsts["held"] < 120 < 200 < firsts["metaworld"]


def test_servo_leaves_peg_insert_to_metaworlds_expert_whose_scored_point_is_not_in_the_state():
    """peg-insert-side-v3 scores the peg's head (not in the state) with its y and z counted twice: GoalServo finds no
    point and its demos are Meta-World's, dithering included, which is why 'held' stays the default there."""
    from frozenvit.control.experts import make_expert

    actions, servo = {}, make_expert("peg-insert-side-v3", "servo")
    with MetaWorldTask("peg-insert-side-v3", render=None, stop_on_success=False, expert="metaworld") as t:
        for name, expert in (("servo", servo), ("metaworld", make_expert("peg-insert-side-v3", "metaworld"))):
            s, acts = t.reset(4), []
            for _ in range(120):
                acts.append(expert(s.full, t.env))
                s = t.step(acts[-1])
            actions[name] = np.stack(acts)
    assert servo.scored_ == [] and np.array_equal(actions["servo"], actions["metaworld"])


def test_the_demo_keeps_each_default_demonstrators_demos_apart(tmp_path, monkeypatch):
    """A demo report written before a task's default demonstrator changed is not resumed with the new one."""
    from frozenvit.control import experts
    from frozenvit.control.demo_section import demo_directory

    before = demo_directory(tmp_path, "reach-v3", 64)
    monkeypatch.setitem(experts.TASK_DEMONSTRATORS, "reach-v3", "metaworld")
    after = demo_directory(tmp_path, "reach-v3", 64)
    assert before != after and after == tmp_path / "control" / "demos_reach-v3_64px_metaworld"
