"""control.experts.GoalServo: any scripted expert, made to end where the task scores success. It finds the point the
task scores from the task's own `obj_to_target`, passes the expert through where no point matches, and servoes the
point onto the goal once the expert has succeeded or stalls while the hand carries it."""
import numpy as np
import pytest

from frozenvit.control.experts import (ATTACHED_STEPS, SERVO_RATE, STALL_STEPS, GoalServo, MetaWorldExpert,
                                       make_expert)


class FakeEnv:
    """A hand moved by actions (1 cm per unit, as Meta-World's), an object that moves with it or stays, a goal."""
    action_scale = 0.01

    def __init__(self, carried: bool, radius: float = 0.01) -> None:
        self.carried, self.radius = carried, radius
        self.hand, self.obj, self.goal = np.zeros(3), np.array([0.0, 0.0, -0.02]), np.array([0.1, 0.05, 0.0])
        self.curr_path_length = 0

    @property
    def tcp_center(self) -> np.ndarray:
        return self.hand + np.array([0.0, 0.0, -0.045])

    def obs(self) -> np.ndarray:
        full = np.zeros(39)
        full[:3], full[4:7], full[-3:] = self.hand, self.obj, self.goal
        return full

    def evaluate_state(self, obs, action):
        d = float(np.linalg.norm(obs[4:7] - obs[-3:]))
        return 0.0, {"obj_to_target": d, "success": float(d <= self.radius)}

    def step(self, action) -> np.ndarray:
        move = np.clip(action[:3], -1, 1) * self.action_scale
        self.hand = self.hand + move
        if self.carried:
            self.obj = self.obj + move
        self.curr_path_length += 1
        return self.obs()


def carry_then_stop(full, env):
    """An expert that carries the object 3 cm along x, then stops short of the goal."""
    return np.array([1.0 if full[0] < 0.03 else 0.0, 0.0, 0.0, -1.0], dtype=np.float32)


def _run(servo, env, steps):
    full, actions = env.obs(), []
    for _ in range(steps):
        a = servo(full, env)
        actions.append(a)
        full = env.step(a)
    return np.stack(actions)


def test_the_scored_point_is_the_candidate_whose_distance_to_the_goal_is_the_tasks():
    servo = GoalServo(carry_then_stop)
    _run(servo, FakeEnv(carried=True), 3)
    assert servo.scored_[0] == ("object", "xyz")


def test_a_stalled_expert_carrying_the_point_is_replaced_by_the_servo_on_the_scored_axes():
    env, servo = FakeEnv(carried=True), GoalServo(carry_then_stop)
    actions = _run(servo, env, 5 + STALL_STEPS + ATTACHED_STEPS)
    assert servo.servoing_
    full = env.obs()
    want = SERVO_RATE / env.action_scale * (env.goal - env.obj)
    assert np.allclose(servo(full, env)[:3], want, atol=1e-6)
    assert (actions[:3, 3] == -1.0).all() and servo(full, env)[3] == -1.0          # the gripper stays the expert's
    _run(servo, env, 200)
    assert np.linalg.norm(env.obj - env.goal) < 1e-3                                 # onto the goal, not short of it


def test_a_point_the_hand_does_not_carry_is_left_to_the_expert():
    env, servo = FakeEnv(carried=False), GoalServo(carry_then_stop)
    actions = _run(servo, env, 60)
    assert servo.scored_[0] == ("object", "xyz") and not servo.servoing_
    env2 = FakeEnv(carried=False)
    assert np.array_equal(actions, _run(carry_then_stop, env2, 60))


def test_a_new_episode_forgets_the_last_ones_progress():
    env, servo = FakeEnv(carried=True), GoalServo(carry_then_stop)
    _run(servo, env, 5 + STALL_STEPS + ATTACHED_STEPS)
    assert servo.servoing_
    fresh = FakeEnv(carried=True)
    assert np.array_equal(servo(fresh.obs(), fresh), carry_then_stop(fresh.obs(), fresh)) and not servo.servoing_


@pytest.fixture
def metaworld():
    pytest.importorskip("metaworld")
    pytest.importorskip("mujoco")
    from frozenvit.control import MetaWorldTask

    return MetaWorldTask


def _episode(task, expert, config, steps):
    s, actions, first = task.reset(config), [], None
    for k in range(steps):
        a = np.clip(expert(s.full, task.env), -1, 1)
        actions.append(a)
        s = task.step(a)
        first = first or (k + 1 if s.success else None)
    return s, np.stack(actions), first


@pytest.mark.parametrize("name,scored", [("reach-v3", ("fingertips", "xyz")), ("pick-place-v3", ("object", "xyz")),
                                         ("sweep-into-v3", ("object", "xy"))])
def test_meta_worlds_scored_points_are_found_from_the_tasks_own_distance(metaworld, name, scored):
    with metaworld(name, render=None, stop_on_success=False, expert="metaworld") as task:
        servo = GoalServo(MetaWorldExpert(name))
        _episode(task, servo, 3, 40)
    assert servo.scored_[0] == scored


def test_a_task_whose_target_is_no_point_of_the_state_gets_metaworlds_expert_unchanged(metaworld):
    with metaworld("door-open-v3", render=None, stop_on_success=False, expert="metaworld") as task:
        servo = make_expert("door-open-v3", "servo")
        _, ours, _ = _episode(task, servo, 3, 120)
        _, theirs, _ = _episode(task, MetaWorldExpert("door-open-v3"), 3, 120)
    assert servo.scored_ == [] and np.array_equal(ours, theirs)


def test_reach_demos_under_the_servo_end_with_the_fingertips_on_the_goal(metaworld):
    """Meta-World's reach expert brings the hand's body onto the goal, its fingertips (what reach-v3 scores) stop
    4-5 cm away, inside the 5 cm radius by millimetres; after the same first success the servo brings them on."""
    gaps, firsts = {}, {}
    for name in ("metaworld", "servo"):
        with metaworld("reach-v3", render=None, stop_on_success=False, expert="metaworld") as task:
            s, _, firsts[name] = _episode(task, make_expert("reach-v3", name), 7, 80)
            gaps[name] = np.linalg.norm(task.env.tcp_center - s.full[-3:])
    assert firsts["servo"] == firsts["metaworld"] is not None
    assert 0.04 < gaps["metaworld"] < 0.05 and gaps["servo"] < 0.01
