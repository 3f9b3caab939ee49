"""benchmarks/control_success.py --expert fingertips: reach-v3's demos recorded by a controller that moves the
fingertips (the point reach-v3 scores) onto the goal, where Meta-World's expert moves the hand's body there.
A screen of the demonstrator (control/RESULTS.md)."""
import numpy as np
import pytest

pytest.importorskip("metaworld")
pytest.importorskip("mujoco")

from frozenvit.control import MetaWorldTask  # noqa: E402


def _run(task, steps=60):
    s = task.reset(7)
    for _ in range(steps):
        s = task.step(task.expert_action(s))
    return s


def test_fingertip_expert_brings_the_scored_point_onto_the_goal_and_is_undone_after(load_benchmark):
    cs = load_benchmark("control_success")
    plain = MetaWorldTask.expert_action
    with MetaWorldTask("reach-v3", render=None, max_steps=500, stop_on_success=False) as task:
        s = _run(task)
        metaworld_gap = np.linalg.norm(task.env.tcp_center - s.full[-3:])
        body_gap = np.linalg.norm(s.full[:3] - s.full[-3:])
        with cs._fingertip_expert(True):
            s = task.reset(7)
            a = task.expert_action(s)
            want = np.clip(5.0 * (s.full[-3:] - task.env.tcp_center), -1, 1)
            assert np.allclose(a[:3], want, atol=1e-6) and a[3] == 0.0
            s = _run(task)
            tip_gap = np.linalg.norm(task.env.tcp_center - s.full[-3:])
        assert MetaWorldTask.expert_action is plain
    # Meta-World's expert parks the hand's body on the goal, the fingertips ~4.5 cm away (inside the 5 cm radius)
    assert body_gap < 0.01 and 0.04 < metaworld_gap < 0.05
    assert tip_gap < 0.01


def test_fingertip_expert_leaves_other_tasks_to_metaworld(load_benchmark):
    cs = load_benchmark("control_success")
    with MetaWorldTask("push-v3", render=None) as task:
        s = task.reset(3)
        plain = task.expert_action(s)
        with cs._fingertip_expert(True):
            assert np.array_equal(task.expert_action(s), plain)
