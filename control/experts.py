"""Scripted demonstrators of Meta-World tasks, by name (`DEMONSTRATORS`).

An expert is called as `expert(full, env)`: the (39,) Meta-World state (hand, gripper, objects, goal) and the
Meta-World environment -> a (4,) float32 action (hand dxyz, gripper effort; the caller clips it to [-1, 1]).

Who demonstrates a task (`expert_name`): with expert="default" the task's entry of `TASK_DEMONSTRATORS`, else
DEFAULT_DEMONSTRATOR: Meta-World's scripted policy under `GoalServo`, which servoes the point the task scores
onto the goal once the expert has succeeded or stalls (Meta-World's experts bring the hand's *body* where the
task is scored at another point); expert="metaworld" is Meta-World's own on every task, expert="servo" GoalServo's
on every task. peg-insert-side-v3 keeps a correction of its own, `HeldPegExpert`: its expert's trouble comes
before success (lab/control-results.md, "Demos that do not put the peg back down", "Demos that end where the task
scores success").
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

# The choices of `expert=`: each task's default demonstrator, Meta-World's, or Meta-World's under GoalServo on every task.
EXPERTS = ("default", "metaworld", "servo")

PEG_GAIN = 25.0           # peg-insert-side-v3's policy: move(hand, to_xyz=..., p=25.0), kept by HeldPegExpert
# When the peg counts as held (HeldPegExpert).
HELD_OPENING = 0.5        # gripper opening (0 closed .. 1 open) below which the fingers are closed
HELD_ACROSS = 0.04        # m: the hand is within this of the peg horizontally ...
HELD_ABOVE = 0.05         # m: ... and vertically
# Where Meta-World's peg-insert-side policy takes a held peg: onto the hole's line, then into the hole.
HOLE_X = -0.35            # m: x of the hole's far end (the policy's target x)
HOLE_Z = 0.16             # m: height of the hole
LINE_UP_X = 0.4           # m: the peg first goes to this far in front of the hole along x ...
ON_LINE = 0.03            # m: ... until it is within this of the hole's line (y, z); then into the hole


# GoalServo: which point the task scores, when the expert has stopped bringing it closer, how hard to servo it.
SCORED_TOL = 1e-6         # m: a candidate point is the scored one if its distance to the goal is info's within this
STALL_STEPS = 5           # steps without the scored distance shrinking by STALL_PROGRESS: the expert has stalled
STALL_PROGRESS = 1e-3     # m
CARRIED = 0.01            # m: a point that has moved this far from where it started has been carried ...
ATTACHED = 0.005          # m: ... and is attached to the hand while its offset from the hand changed less than
ATTACHED_STEPS = 5        # this over the last ATTACHED_STEPS steps
SERVO_RATE = 0.1          # fraction of the remaining error the arm is commanded to close per step


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


class GoalServo:
    """Any expert, made to end where the task scores success: once the expert has reached success, or has stalled
    short of it, the point the task scores is servoed onto the goal (the arm; the gripper stays the expert's).

    Which point: Meta-World's `env.evaluate_state(full, action)` reports `obj_to_target`, and the scored point is
    the first of the fingertips (`env.tcp_center`), the hand, the first and the second object of the state whose
    distance to the goal (`full[-3:]`), in 3-D or horizontally, has equalled it (within SCORED_TOL) at every step
    of the episode so far. Where none does (a door's angle; a peg's head, not in the state, weighted by axis) the
    expert passes through unchanged.
    When: only while the hand holds the point (it has moved CARRIED from its start and its offset from the hand
    has stayed within ATTACHED over ATTACHED_STEPS steps), from the step the task first reports success, or from a
    stall: STALL_STEPS steps of holding it without the scored distance shrinking by STALL_PROGRESS.
    How: on the scored axes gain * (goal - point), gain = SERVO_RATE / env.action_scale (the arm is commanded to
    close SERVO_RATE of the error per step), clipped by the caller to [-1, 1]; an axis the distance ignores keeps
    the expert's command. A call with `env.curr_path_length == 0` starts a new episode.
    """

    CANDIDATES = ("fingertips", "hand", "object", "object2")
    METRICS = {"xyz": slice(0, 3), "xy": slice(0, 2)}

    def __init__(self, expert: Callable[[np.ndarray, Any], np.ndarray]) -> None:
        self.expert = expert
        self._reset()

    def _reset(self) -> None:
        self.scored_: list[tuple[str, str]] = [(c, m) for c in self.CANDIDATES for m in self.METRICS]
        self.best_ = np.inf                   # smallest scored distance so far
        self.since_best_ = 0                  # steps since it shrank by STALL_PROGRESS
        self.engaged_ = False                 # the expert has succeeded or stalled: the servo's turn from now on
        self.start_: dict[str, np.ndarray] = {}   # each candidate point at the episode's first step
        self.offsets_: list[np.ndarray] = []  # scored point - hand, per step
        self.servoing_ = False                # whether the last action was the servo's

    @staticmethod
    def _point(name: str, full: np.ndarray, env: Any) -> np.ndarray:
        if name == "fingertips":
            return np.asarray(env.tcp_center, dtype=np.float64)
        return np.asarray({"hand": full[:3], "object": full[4:7], "object2": full[11:14]}[name], dtype=np.float64)

    def __call__(self, full: np.ndarray, env: Any) -> np.ndarray:
        action = np.asarray(self.expert(full, env), dtype=np.float32).copy()     # (4,)
        if env.curr_path_length == 0:         # a new episode
            self._reset()
            self.start_ = {c: self._point(c, full, env) for c in self.CANDIDATES}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, info = env.evaluate_state(full, action)
        distance, goal = float(info.get("obj_to_target", np.nan)), np.asarray(full[-3:], dtype=np.float64)
        self.scored_ = [(c, m) for c, m in self.scored_ if abs(np.linalg.norm(
            (goal - self._point(c, full, env))[self.METRICS[m]]) - distance) <= SCORED_TOL]
        self.servoing_ = False
        if not self.scored_:
            return action
        name, metric = self.scored_[0]
        point = self._point(name, full, env)
        self.offsets_.append(point - np.asarray(full[:3], dtype=np.float64))
        carried = np.linalg.norm(point - self.start_[name]) >= CARRIED
        recent = self.offsets_[-ATTACHED_STEPS - 1:]
        held = (carried and len(recent) > ATTACHED_STEPS
                and max(np.linalg.norm(o - recent[-1]) for o in recent) < ATTACHED)
        if not held or distance < self.best_ - STALL_PROGRESS:   # a stall counts while the hand holds the point
            self.best_, self.since_best_ = distance, 0
        else:
            self.since_best_ += 1
        self.engaged_ |= bool(info.get("success", 0.0) > 0.5) or self.since_best_ >= STALL_STEPS
        if held and self.engaged_:
            axes = self.METRICS[metric]
            action[axes] = SERVO_RATE / env.action_scale * (goal - point)[axes]
            self.servoing_ = True
        return action


def servo_expert(task: str) -> GoalServo:
    """Meta-World's expert of `task` under GoalServo."""
    return GoalServo(MetaWorldExpert(task))


DEMONSTRATORS: dict[str, Callable[[str], Any]] = {
    "metaworld": MetaWorldExpert,
    "servo": servo_expert,
    "held": HeldPegExpert,
}
DEFAULT_DEMONSTRATOR = "servo"
# The default demonstrator of these tasks; every other task's is DEFAULT_DEMONSTRATOR.
TASK_DEMONSTRATORS = {"peg-insert-side-v3": "held"}


def expert_name(task: str, expert: str = "default") -> str:
    """Who demonstrates `task` (a key of DEMONSTRATORS): expert="default" -> TASK_DEMONSTRATORS' entry or
    DEFAULT_DEMONSTRATOR; "metaworld" or "servo" -> itself. ParameterError (a ValueError) for another `expert`."""
    if not isinstance(expert, str) or expert not in EXPERTS:
        from frozenvit.backbone.suite.errors import ParameterError

        raise ParameterError(f"expert must be one of {', '.join(EXPERTS)}, got {expert!r}")
    return TASK_DEMONSTRATORS.get(task, DEFAULT_DEMONSTRATOR) if expert == "default" else expert


def make_expert(task: str, expert: str = "default") -> Any:
    """The demonstrator `expert_name(task, expert)` of `task`, ready to call as expert(full, env)."""
    return DEMONSTRATORS[expert_name(task, expert)](task)
