"""Meta-World v3 tasks seen through a camera: seeded configurations, an episode cap, a scripted expert.

**Configurations.** `env.reset(seed=...)` does not move objects or goals in v3. Positions come from a
"random vector" drawn in `reset_model` through `_get_state_rand_vec()`; with `seeded_rand_vec=True` and
`_freeze_rand_vec=False` it is drawn from `env.np_random`, which `env.seed(s)` re-seeds. We draw it once
per configuration seed and freeze it, so configuration `s` is the same scene on every machine. Training
and held-out seeds come from disjoint ranges (`config_seeds`), optionally split by region as well
(object x < 0 vs x > 0).

Frames come from `control.render` (fast settings, upright), expert actions from `control.experts`.
"""
from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Sequence

import numpy as np

from frozenvit.backbone.suite.errors import ParameterError

from .defaults import DEFAULT_CAMERA, DEFAULT_EXPERT, DEFAULT_MAX_STEPS, HELDOUT_OFFSET
from .errors import TaskError
from .experts import expert_name, make_expert
from .render import FrameRenderer, RenderSettings, camera_names

PROPRIO_DIM = 4                 # hand xyz (m) + gripper opening (0..1)
ACTION_DIM = 4                  # hand dxyz + gripper effort, each in [-1, 1]


def _metaworld() -> Any:
    try:
        import metaworld.env_dict  # noqa: F401
        import metaworld.policies  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the install
        raise TaskError("Meta-World is not installed: pip install 'frozenvit[control]'") from e
    import metaworld
    return metaworld


def task_names() -> list[str]:
    """The 50 Meta-World v3 task names, e.g. 'reach-v3', 'push-v3', 'drawer-open-v3'."""
    return sorted(_metaworld().env_dict.ALL_V3_ENVIRONMENTS)


def check_task(name: str) -> None:
    """Raise TaskError (naming close matches) unless `name` is a Meta-World v3 task."""
    envs = _metaworld().env_dict.ALL_V3_ENVIRONMENTS
    if name not in envs:
        raise TaskError(f"unknown Meta-World task {name!r}; {_suggest(name, sorted(envs))}")


def _suggest(name: str, names: list[str]) -> str:
    """'did you mean ...?' with the names closest to `name` regardless of case (difflib), else where to look."""
    lower = {n.lower(): n for n in names}
    close = ([lower[name.lower()]] if name.lower() in lower      # only the case differs: that one alone
             else [lower[n] for n in difflib.get_close_matches(name.lower(), list(lower), n=3, cutoff=0.6)])
    if len(close) == 1:
        return f"did you mean {close[0]!r}?"
    if close:
        return f"did you mean one of {close}?"
    return f"the {len(names)} v3 tasks are listed by `frozenvit.control.env.task_names()`, e.g. {names[:3]}"


def check_camera(task: str, camera: str) -> None:
    """Raise TaskError (naming the scene's cameras) unless `task`'s scene has a camera called `camera`.

    Builds the task's scene without a renderer (about half a second), so a command can refuse a camera
    before it writes anything."""
    check_task(task)
    env = _metaworld().env_dict.ALL_V3_ENVIRONMENTS[task]()
    try:
        names = camera_names(env.model)
    finally:
        env.close()
    if camera not in names:
        raise TaskError(f"no camera named {camera!r} in {task}; this scene has {names}")


def is_count(value: Any, low: int) -> bool:
    """Whether `value` is an integer (not a bool) of at least `low`."""
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= low


def check_count(name: str, value: Any, low: int, what: str = "") -> None:
    """ParameterError unless `value` is an integer >= `low`; `what` says what it counts, in the message."""
    if not is_count(value, low):
        raise ParameterError(f"{name} must be an integer >= {low}{f' ({what})' if what else ''}, got {value!r}")


def config_seeds(split: str, n: int, start: int = 0) -> list[int]:
    """Configuration seeds of a split: 'train' -> [start, start+n), 'heldout' -> HELDOUT_OFFSET + same.

    The two ranges never overlap, so a policy is never evaluated on a scene it was trained on. ParameterError for
    an unknown split, or n outside 0 to HELDOUT_OFFSET (a million configurations, far more than any evaluation runs).
    """
    if split not in ("train", "heldout"):
        raise ParameterError(f"split must be 'train' or 'heldout', got {split!r}")
    check_count("n", n, 0)
    if n > HELDOUT_OFFSET:
        raise ParameterError(f"n must be at most {HELDOUT_OFFSET} configurations, got {n}")
    check_count("start", start, 0)
    if split == "train":
        if start + n > HELDOUT_OFFSET:
            raise ParameterError(f"training seeds must stay below {HELDOUT_OFFSET} (start + n <= {HELDOUT_OFFSET}), "
                                 f"got start={start}, n={n}; ask for fewer")
        return list(range(start, start + n))
    return list(range(HELDOUT_OFFSET + start, HELDOUT_OFFSET + start + n))


def check_max_steps(max_steps: Any) -> None:
    """ParameterError unless `max_steps` (an episode's step cap) is an integer >= 1."""
    check_count("max_steps", max_steps, 1, "the episode's step cap")


def check_configs(configs: Sequence[Any]) -> None:
    """ParameterError unless every configuration seed is an integer >= 0 (`config_seeds`)."""
    bad = [c for c in configs if not is_count(c, 0)]
    if bad:
        raise ParameterError(f"configuration seeds must be integers >= 0 (training 0 to {HELDOUT_OFFSET - 1}, "
                             f"held-out from {HELDOUT_OFFSET}: config_seeds), got {bad[:5]}")


@dataclass
class State:
    """What the environment says after a reset or a step."""
    proprio: np.ndarray     # (4,) float32: hand xyz, gripper opening
    full: np.ndarray        # (39,) float64 Meta-World state incl. object and goal (for the scripted expert only)
    success: bool           # the task's success flag at this step
    steps: int              # steps taken since reset
    done: bool              # success, or the episode cap reached


class MetaWorldTask:
    """One Meta-World v3 task with a camera, seeded configurations and an episode cap.

        task = MetaWorldTask("reach-v3", camera="corner", image_size=224)
        s = task.reset(config=HELDOUT_OFFSET + 3)   # the same scene on every machine
        frame = task.render()                       # (224, 224, 3) uint8, upright
        s = task.step(action)                       # action (4,) in [-1, 1]
        task.close()

    The goal is observable in `State.full` (the scripted experts need it); the visual policy
    sees only `render()` frames and `State.proprio`. Episodes end on success or after
    `max_steps` steps (with stop_on_success=False only after `max_steps`: demos that go on
    past the first success).
    """

    def __init__(self, name: str, *, camera: str = DEFAULT_CAMERA, image_size: int = 224,
                 max_steps: int = DEFAULT_MAX_STEPS, render: RenderSettings | None = RenderSettings(),
                 stop_on_success: bool = True, expert: str = DEFAULT_EXPERT) -> None:
        mw = _metaworld()
        check_task(name)
        envs = mw.env_dict.ALL_V3_ENVIRONMENTS
        check_max_steps(max_steps)
        self.name, self.camera, self.image_size, self.max_steps = name, camera, int(image_size), int(max_steps)
        self.stop_on_success = bool(stop_on_success)
        env = envs[name]()
        # What metaworld's goal-observable classes do, without touching the global numpy RNG.
        env._partially_observable = False
        env.__dict__.pop("sawyer_observation_space", None)     # cached property: recompute goal bounds
        env._set_task_called = True
        env.max_path_length = self.max_steps
        self.env = env
        self.expert = expert_name(name, expert)          # who expert_action() is (control.experts)
        self._expert = make_expert(name, expert)
        try:
            self._renderer = (FrameRenderer(env.model, env.data, camera, self.image_size, render)
                              if render is not None else None)
        except BaseException:                            # a bad camera, no GL, Ctrl-C: the scene is not left open
            env.close()
            raise
        self._state: State | None = None
        self.config: int | None = None

    # -- configurations -------------------------------------------------------------------------
    def reset(self, config: int) -> State:
        """Reset to configuration `config` (a seed): object/goal positions drawn once and frozen."""
        check_configs([config])
        env = self.env
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        env.seed(int(config))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full, _ = env.reset()
        env._freeze_rand_vec = True          # later resets (and metaworld internals) keep this scene
        # Meta-World moves the goal site (model.site_pos) after its last forward pass of the reset, so the
        # site's world position in `data` - what the renderer draws - was stale until the first step: frame 0
        # showed the goal somewhere else (measured by a probe script kept in git history, lab/control-results.md). Recompute it; the
        # physics state (qpos, qvel) is untouched.
        import mujoco

        mujoco.mj_forward(env.model, env.data)
        self.config = int(config)
        self._state = State(_proprio(full), full, False, 0, False)
        return self._state

    def config_vector(self) -> np.ndarray:
        """The frozen random vector of the current configuration (object and/or goal positions)."""
        if self.env._last_rand_vec is None:
            raise TaskError("reset the task with a configuration first")
        return np.array(self.env._last_rand_vec, dtype=np.float64)

    def configs(self, split: str, n: int, region: str | None = None) -> list[int]:
        """n configuration seeds of `split`; region 'left'/'right' keeps those with x < 0 / x > 0.

        x is the first coordinate of the configuration vector (the object's, or the goal's for
        tasks without an object). Costs one reset per candidate seed when a region is given.
        """
        if region is None:
            return config_seeds(split, n)
        if region not in ("left", "right"):
            raise ValueError(f"region must be None, 'left' or 'right', got {region!r}")
        out: list[int] = []
        for seed in config_seeds(split, 20 * n + 100):
            self.reset(seed)
            if (self.config_vector()[0] < 0) == (region == "left"):
                out.append(seed)
                if len(out) == n:
                    return out
        raise TaskError(f"only {len(out)} {split} configurations of {self.name} fall in region {region!r}; "
                        "this task may not vary x; use region=None")

    # -- stepping -------------------------------------------------------------------------------
    def step(self, action: Sequence[float] | np.ndarray) -> State:
        """Apply a (4,) action (clipped to [-1, 1]); returns the new State."""
        if self._state is None:
            raise TaskError("call reset(config) before step()")
        if self._state.done:
            raise TaskError("the episode is over (success or step cap): reset first")
        a = np.asarray(action, dtype=np.float32).reshape(-1)
        if a.shape != (ACTION_DIM,):
            raise ValueError(f"action must have {ACTION_DIM} values, got shape {np.shape(action)}")
        if not np.isfinite(a).all():                 # MuJoCo would warn "Nan, Inf or huge value in CTRL" and log it
            raise ParameterError(f"action must be {ACTION_DIM} finite numbers in [-1, 1], got {a.tolist()}")
        a = np.clip(a, -1.0, 1.0)
        full, _r, _term, trunc, info = self.env.step(a)
        steps = self._state.steps + 1
        success = bool(info.get("success", 0.0) > 0.5)
        done = (success and self.stop_on_success) or trunc or steps >= self.max_steps
        self._state = State(_proprio(full), full, success, steps, bool(done))
        return self._state

    def render(self) -> np.ndarray:
        """(S, S, 3) uint8 upright frame of the current state, S = image_size."""
        if self._renderer is None:
            raise TaskError("this task was made with render=None; pass RenderSettings() to get frames")
        return self._renderer.render()

    def expert_action(self, state: State | None = None) -> np.ndarray:
        """The scripted expert's (4,) float32 action for `state` (default: the current one), before clipping:
        `control.experts.expert_name(task, expert)`. Some experts read the environment (the scored point) and follow
        the episode step by step (GoalServo), so call it once per step, with the current state."""
        state = state or self._state
        if state is None:
            raise TaskError("call reset(config) first")
        return self._expert(state.full, self.env)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.env.close()

    def __enter__(self) -> "MetaWorldTask":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"MetaWorldTask({self.name!r}, camera={self.camera!r}, image_size={self.image_size}, "
                f"max_steps={self.max_steps})")


def _proprio(full: np.ndarray) -> np.ndarray:
    return np.asarray(full[:PROPRIO_DIM], dtype=np.float32)     # (4,) hand xyz, gripper
