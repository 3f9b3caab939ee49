"""Who demonstrates reach-v3: Meta-World's scripted expert moves the hand's body onto the goal, 4.5 cm above the
point the task scores (the fingertips), so its demos stop 4.4 cm from the goal, just inside the 5 cm radius. The
library's default demonstrator for reach-v3 brings the fingertips there (control.experts.expert_name); expert=
"metaworld" keeps Meta-World's own. The manifest records who demonstrated, and demos of one never resume the other."""
import json

import numpy as np
import pytest

pytest.importorskip("metaworld")
pytest.importorskip("mujoco")

from frozenvit.control import (DemoError, MetaWorldTask, RenderUnavailable, collect_demos,  # noqa: E402
                               expert_name, load_manifest)


def _gaps_after(task, steps=60):
    s = task.reset(7)
    for _ in range(steps):
        s = task.step(task.expert_action(s))
    goal = s.full[-3:]
    return np.linalg.norm(task.env.tcp_center - goal), np.linalg.norm(s.full[:3] - goal)


def test_default_reach_expert_brings_the_fingertips_onto_the_goal_metaworlds_the_hand_body():
    with MetaWorldTask("reach-v3", render=None, stop_on_success=False) as ours, \
            MetaWorldTask("reach-v3", render=None, stop_on_success=False, expert="metaworld") as theirs:
        assert (ours.expert, theirs.expert) == ("fingertips", "metaworld")
        s = ours.reset(7)
        want = np.clip(5.0 * (s.full[-3:] - ours.env.tcp_center), -1, 1)      # the reach expert's gain, on the tips
        a = ours.expert_action(s)
        assert np.allclose(a[:3], want, atol=1e-6) and a[3] == 0.0 and a.dtype == np.float32
        tip_gap, _ = _gaps_after(ours)
        mw_tip_gap, mw_body_gap = _gaps_after(theirs)
    assert tip_gap < 0.01
    assert mw_body_gap < 0.01 and 0.04 < mw_tip_gap < 0.05


def test_default_pick_place_expert_carries_the_object_onto_the_goal_metaworlds_the_hand_body():
    """Meta-World's pick-place expert, last phase aimed at the object: the object ends within 1.5 cm of the goal
    where Meta-World's stops 3-5 cm away (the hand's body is on the goal), at about the same step."""
    ends, firsts = {}, {}
    for expert in ("default", "metaworld"):
        with MetaWorldTask("pick-place-v3", render=None, stop_on_success=False, expert=expert) as t:
            s, first = t.reset(3), None
            for k in range(150):
                s = t.step(t.expert_action(s))
                first = first or (k + 1 if s.success else None)
            ends[t.expert], firsts[t.expert] = np.linalg.norm(s.full[4:7] - s.full[-3:]), first
            if t.expert == "carry":
                assert np.linalg.norm(s.full[:3] - s.full[-3:]) > 0.03       # the hand's body is not on the goal
    assert ends["carry"] < 0.015 and 0.03 < ends["metaworld"] < 0.05
    assert firsts["carry"] is not None and firsts["metaworld"] is not None and abs(firsts["carry"] - firsts["metaworld"]) < 15
    with MetaWorldTask("pick-place-v3", render=None) as ours, \
            MetaWorldTask("pick-place-v3", render=None, expert="metaworld") as theirs:
        assert np.array_equal(ours.expert_action(ours.reset(3)), theirs.expert_action(theirs.reset(3)))   # grasp alike


def test_other_tasks_keep_metaworlds_experts_and_bad_names_are_refused():
    assert expert_name("push-v3") == expert_name("push-v3", "metaworld") == "metaworld"
    assert expert_name("reach-v3") == "fingertips" and expert_name("reach-v3", "metaworld") == "metaworld"
    assert expert_name("pick-place-v3") == "carry" and expert_name("pick-place-v3", "metaworld") == "metaworld"
    assert expert_name("peg-insert-side-v3") == "held"
    with MetaWorldTask("push-v3", render=None) as a, MetaWorldTask("push-v3", render=None, expert="metaworld") as b:
        assert np.array_equal(a.expert_action(a.reset(3)), b.expert_action(b.reset(3)))
    with pytest.raises(ValueError, match="expert must be one of"):
        expert_name("reach-v3", "fingertip")


def test_every_default_demonstrator_is_in_the_registry_and_made_by_name():
    from frozenvit.control.experts import DEMONSTRATORS, TASK_DEMONSTRATORS, CarryExpert, make_expert

    assert set(TASK_DEMONSTRATORS.values()) <= set(DEMONSTRATORS) and "metaworld" in DEMONSTRATORS
    assert type(make_expert("pick-place-v3")) is CarryExpert is DEMONSTRATORS["carry"]
    assert type(make_expert("pick-place-v3", "metaworld")) is DEMONSTRATORS["metaworld"]


def test_manifest_records_the_expert_and_refuses_to_resume_with_another(tmp_path):
    try:
        d = collect_demos("reach-v3", tmp_path / "d", 1, image_size=32, max_steps=100, hold_steps=0, progress=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    assert load_manifest(d)["expert"] == "fingertips"
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
