"""Scripted demonstrators of Meta-World tasks, by name (`DEMONSTRATORS`).

An expert is called as `expert(full, env)`: the (39,) Meta-World state (hand, gripper, objects, goal) and the
Meta-World environment -> a (4,) float32 action (hand dxyz, gripper effort; the caller clips it to [-1, 1]).

Who demonstrates a task (`expert_name`): with expert="default" the task's own entry of `TASK_DEMONSTRATORS`,
else Meta-World's scripted policy; with expert="metaworld" Meta-World's on every task. Meta-World's experts
bring the hand's *body* where the task is scored at another point; the three corrected ones below aim at that
point instead (lab/control-results.md, "Demos that bring the fingertips onto the goal", "Demos that carry the
object onto the goal", "Demos that do not put the peg back down").
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

EXPERTS = ("default", "metaworld")     # the choices of `expert=`: each task's default demonstrator, or Meta-World's

# Gains of Meta-World's own proportional moves, kept by the corrected experts that replace one of them.
REACH_GAIN = 5.0          # reach-v3's policy: move(hand, to_xyz=goal, p=5.0)
CARRY_GAIN = 10.0         # pick-place-v3's policy: move(hand, to_xyz=..., p=10.0)
PEG_GAIN = 25.0           # peg-insert-side-v3's policy: move(hand, to_xyz=..., p=25.0)
# When the peg counts as held (HeldPegExpert).
HELD_OPENING = 0.5        # gripper opening (0 closed .. 1 open) below which the fingers are closed
HELD_ACROSS = 0.04        # m: the hand is within this of the peg horizontally ...
HELD_ABOVE = 0.05         # m: ... and vertically
# Where Meta-World's peg-insert-side policy takes a held peg: onto the hole's line, then into the hole.
HOLE_X = -0.35            # m: x of the hole's far end (the policy's target x)
HOLE_Z = 0.16             # m: height of the hole
LINE_UP_X = 0.4           # m: the peg first goes to this far in front of the hole along x ...
ON_LINE = 0.03            # m: ... until it is within this of the hole's line (y, z); then into the hole


class MetaWorldExpert:
    """Meta-World's scripted policy of the task."""

    def __init__(self, task: str) -> None:
        from metaworld.policies import ENV_POLICY_MAP

        self.policy = ENV_POLICY_MAP[task]()

    def __call__(self, full: np.ndarray, env: Any) -> np.ndarray:
        with warnings.catch_warnings():      # metaworld warns on gains > 1 at every step
            warnings.simplefilter("ignore")
            return self.act(full, env).astype(np.float32)

    def act(self, full: np.ndarray, env: Any) -> np.ndarray:
        """The (4,) float64 action before the cast to float32."""
        return np.asarray(self.policy.get_action(full), dtype=np.float64)


class FingertipsExpert:
    """reach-v3: Meta-World's reach controller (gain REACH_GAIN), moving the point between the fingertips
    (`env.tcp_center`, which the task scores) onto the goal instead of the hand's body, 4.5 cm above it: Meta-World's
    demos stop 4.4 cm from the goal, inside the 5 cm success radius by a few millimetres."""

    def __init__(self, task: str) -> None:
        pass

    def __call__(self, full: np.ndarray, env: Any) -> np.ndarray:
        goal = np.asarray(full[-3:], dtype=np.float64)
        return np.r_[np.clip(REACH_GAIN * (goal - env.tcp_center), -1.0, 1.0), 0.0].astype(np.float32)


class CarryExpert(MetaWorldExpert):
    """pick-place-v3: Meta-World's expert, whose last phase moves the object onto the goal (the same gain on
    goal - object) instead of the hand's body, with the object held below it. Meta-World's demos leave the object
    4.0 cm from the goal (median; 7 cm radius), these within 1.1 cm."""

    def act(self, full: np.ndarray, env: Any) -> np.ndarray:
        action = super().act(full, env)
        parsed = self.policy._parse_obs(full)
        if np.array_equal(self.policy._desired_pos(parsed), parsed["goal_pos"]):   # its last phase
            action[:3] = CARRY_GAIN * (parsed["goal_pos"] - parsed["puck_pos"])
        return action


class HeldPegExpert(MetaWorldExpert):
    """peg-insert-side-v3: Meta-World's expert, which skips its "go down to the peg" phase while its fingers are
    closed on the peg. Meta-World's holds the peg 2.5 cm below the hand, that phase's threshold, so once it has
    lifted the peg it dithers between pressing it back onto the table and lifting it (first success at step 94
    median over the demos' 25 configurations, 249 at worst, one never); this one succeeds on all 25 (81 median,
    102 at worst)."""

    def act(self, full: np.ndarray, env: Any) -> np.ndarray:
        action = super().act(full, env)
        action[:3] = held_peg_move(full, action[:3])
        return action


def held_peg_move(full: np.ndarray, move: np.ndarray) -> np.ndarray:
    """The arm command of HeldPegExpert: Meta-World's `move`, except while the peg is held (HELD_*), when it goes
    on to the hole's line and into the hole as Meta-World's last two phases do, instead of back down to the peg."""
    hand, peg, goal = full[:3], full[4:7], full[-3:]
    held = (full[3] < HELD_OPENING and np.linalg.norm(hand[:2] - peg[:2]) < HELD_ACROSS
            and abs(hand[2] - peg[2]) < HELD_ABOVE)
    if not held:
        return move
    hole = np.array([HOLE_X, goal[1], HOLE_Z])
    target = hole + np.array([LINE_UP_X, 0.0, 0.0]) if np.linalg.norm(peg[1:] - hole[1:]) > ON_LINE else hole
    return PEG_GAIN * (target - hand)


DEMONSTRATORS: dict[str, Callable[[str], Any]] = {
    "metaworld": MetaWorldExpert,
    "fingertips": FingertipsExpert,
    "carry": CarryExpert,
    "held": HeldPegExpert,
}
# The default demonstrator of these tasks; every other task's is "metaworld".
TASK_DEMONSTRATORS = {"reach-v3": "fingertips", "pick-place-v3": "carry", "peg-insert-side-v3": "held"}


def expert_name(task: str, expert: str = "default") -> str:
    """Who demonstrates `task` (a key of DEMONSTRATORS): expert="default" -> TASK_DEMONSTRATORS' entry or
    "metaworld"; expert="metaworld" -> "metaworld". ValueError for another `expert`."""
    if expert not in EXPERTS:
        raise ValueError(f"expert must be one of {EXPERTS}, got {expert!r}")
    return TASK_DEMONSTRATORS.get(task, "metaworld") if expert == "default" else "metaworld"


def make_expert(task: str, expert: str = "default") -> Any:
    """The demonstrator `expert_name(task, expert)` of `task`, ready to call as expert(full, env)."""
    return DEMONSTRATORS[expert_name(task, expert)](task)
