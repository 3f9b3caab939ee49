"""Meta-World v3 tasks seen through a camera: seeded configurations, fast headless rendering.

Three things about Meta-World v3 that this module settles once:

* **Configurations.** `env.reset(seed=...)` does not move objects or goals in v3. Positions come
  from a "random vector" drawn in `reset_model` through `_get_state_rand_vec()`; with
  `seeded_rand_vec=True` and `_freeze_rand_vec=False` it is drawn from `env.np_random`, which
  `env.seed(s)` re-seeds. We draw it once per configuration seed and freeze it, so configuration
  `s` is the same scene on every machine. Training and held-out seeds come from disjoint ranges
  (`config_seeds`), optionally split by region as well (object x < 0 vs x > 0).
* **Rendering.** Meta-World's default visuals (shadows, reflections, 4x multisampling) render
  ~5-7 frames/s at 224 px with Mesa's CPU rasteriser; with shadows and reflections off and
  `model.vis.quality.offsamples = 0` set *before* the GL context is created it renders ~55-60
  frames/s (measured on the 2-core build machine). What is left is mostly geometry: the Sawyer
  arm's ~68k mesh triangles, whatever the frame size. `RenderSettings.simplified()` draws meshes
  of more than 3 x 800 triangles simplified to ~800 (`control.meshes`: a render-only copy of the
  model, the physics keeps the full meshes), ~11k triangles in all: frames within ~30 dB PSNR of
  the full-mesh ones, rendered ~2x faster. Opt-in: what it does to the default encoder's
  policies is not measured (README). `RenderSettings.metaworld()` restores Meta-World's look.
  Demos record the settings they were rendered with, and policies are evaluated with those of
  their demos.
* **Orientation.** The corner cameras are defined with their "up" axis pointing down in the
  world, so their frames come out upside down. A frame is rotated by 180 degrees whenever the
  camera's up axis points below the horizon (`camera_is_upside_down`), so every camera shows
  the table at the bottom.
* **Composite cameras.** A camera name like "corner+topview" puts the named cameras' views side by
  side, left to right in the order given, each rendered at S x S and made upright on its own: a
  (S, k*S, 3) frame for k views (`camera_names`, `camera_count`). The encoder reading it is built at
  (S, k*S) (`frame_size`), so it costs k times the tokens of one view at the same size.

Headless rendering uses EGL unless `MUJOCO_GL` says otherwise (`osmesa` is the fallback).
"""
from __future__ import annotations

import atexit
import os
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .errors import RenderUnavailable, TaskError

# Must precede the first `import mujoco` anywhere in the process; a value set by the user wins.
os.environ.setdefault("MUJOCO_GL", "egl")

HELDOUT_OFFSET = 1_000_000      # held-out configuration seeds start here; training seeds stay below
PROPRIO_DIM = 4                 # hand xyz (m) + gripper opening (0..1)
ACTION_DIM = 4                  # hand dxyz + gripper effort, each in [-1, 1]
DEFAULT_CAMERA = "corner"
LOD_FACES = 800                 # RenderSettings.simplified(): triangles per simplified mesh


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
        close = [n for n in envs if name.split("-v")[0] in n]
        raise TaskError(f"unknown Meta-World task {name!r}; did you mean one of {close or sorted(envs)[:6]}?")


def config_seeds(split: str, n: int, start: int = 0) -> list[int]:
    """Configuration seeds of a split: 'train' -> [start, start+n), 'heldout' -> HELDOUT_OFFSET + same.

    The two ranges never overlap, so a policy is never evaluated on a scene it was trained on.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    if n < 0 or start < 0:
        raise ValueError(f"n and start must be >= 0, got n={n}, start={start}")
    if split == "train":
        if start + n > HELDOUT_OFFSET:
            raise ValueError(f"training seeds must stay below {HELDOUT_OFFSET}; ask for fewer")
        return list(range(start, start + n))
    return list(range(HELDOUT_OFFSET + start, HELDOUT_OFFSET + start + n))


@dataclass(frozen=True)
class RenderSettings:
    """Visual quality knobs that dominate CPU rendering time. The defaults are the fast ones."""
    shadows: bool = False
    reflections: bool = False
    offsamples: int = 0          # multisample anti-aliasing of the offscreen buffer (MuJoCo's default: 4)
    mesh_faces: int | None = None  # draw big meshes simplified to ~this many triangles (None: full meshes)

    def __post_init__(self) -> None:
        if self.mesh_faces is not None and int(self.mesh_faces) < 4:
            raise ValueError(f"mesh_faces must be None or >= 4, got {self.mesh_faces}")

    @classmethod
    def metaworld(cls) -> "RenderSettings":
        """Meta-World's own look (slow on a CPU rasteriser)."""
        return cls(shadows=True, reflections=True, offsamples=4, mesh_faces=None)

    @classmethod
    def simplified(cls, mesh_faces: int = LOD_FACES) -> "RenderSettings":
        """The fast defaults with big meshes simplified (`control.meshes`): ~2x faster frames."""
        return cls(mesh_faces=mesh_faces)

    def as_dict(self) -> dict:
        return dict(shadows=bool(self.shadows), reflections=bool(self.reflections),
                    offsamples=int(self.offsamples),
                    mesh_faces=None if self.mesh_faces is None else int(self.mesh_faces))

    @classmethod
    def from_dict(cls, d: dict) -> "RenderSettings":
        return cls(**{k: d[k] for k in ("shadows", "reflections", "offsamples", "mesh_faces") if k in d})


def camera_is_upside_down(cam_xmat: np.ndarray) -> bool:
    """True when the camera's image-up axis (its local y) points below the horizon.

    cam_xmat: (9,) or (3, 3) camera orientation in world coordinates (MuJoCo `data.cam_xmat[i]`),
    columns = camera x, y, z axes. Such a camera is rolled by more than 90 degrees, and its frame
    shows the world upside down.
    """
    R = np.asarray(cam_xmat, dtype=np.float64).reshape(3, 3)
    return bool(R[2, 1] < 0.0)


def _preload_triton() -> None:
    """Load triton's bundled LLVM before Mesa's llvmpipe loads its own.

    In the other order (a GL context first, then anything that imports torch._dynamo, e.g.
    torchvision or timm) the process segfaults inside triton's native library. torch imports
    triton lazily, so we do it here, once, before the first offscreen context exists.
    """
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        try:
            import triton  # noqa: F401
        except Exception:  # pragma: no cover - a broken triton is torch's problem, not ours
            pass


_LIVE: "weakref.WeakSet[FrameRenderer]" = weakref.WeakSet()
_AT_EXIT: list[bool] = []


def _close_live_renderers() -> None:
    # Registered after mujoco's EGL module so it runs before EGL is torn down: a GL context
    # freed during interpreter teardown, after EGL itself, prints EGLError noise.
    for r in list(_LIVE):
        try:
            r.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


class FrameRenderer:
    """Offscreen renderer of one named camera of a MuJoCo model; returns upright (S, S, 3) uint8 frames."""

    def __init__(self, model: Any, data: Any, camera: str, size: int,
                 settings: RenderSettings = RenderSettings()) -> None:
        import mujoco

        self.data = data
        self.camera = camera
        self.cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if self.cam_id < 0:
            names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
            raise TaskError(f"no camera named {camera!r}; this scene has {names}")
        # Read by MuJoCo when the GL context and its framebuffer are made: set them first.
        model.vis.quality.offsamples = int(settings.offsamples)
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), size)
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), size)
        if not _LIVE:
            _preload_triton()
        if settings.mesh_faces is not None:
            from .meshes import render_model

            model = render_model(model, settings.mesh_faces)    # a copy: the physics keeps full meshes
        try:
            self._renderer = mujoco.Renderer(model, size, size)
        except Exception as e:
            raise RenderUnavailable(
                f"cannot create a headless OpenGL context with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} ({e}). "
                "Install EGL (Debian: apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) "
                "or try MUJOCO_GL=osmesa") from e
        _LIVE.add(self)
        if not _AT_EXIT:
            atexit.register(_close_live_renderers)
            _AT_EXIT.append(True)
        flags = self._renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = settings.shadows
        flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = settings.reflections

    def render(self, upright: bool = True) -> np.ndarray:
        """(S, S, 3) uint8 frame of the current state; rotated 180 degrees if the camera is rolled over."""
        self._renderer.update_scene(self.data, camera=self.cam_id)
        img = self._renderer.render()                                   # (S, S, 3) uint8
        if upright and camera_is_upside_down(self.data.cam_xmat[self.cam_id]):
            img = np.ascontiguousarray(img[::-1, ::-1])                 # rotate 180, keeps handedness
        return img

    def close(self) -> None:
        r, self._renderer = getattr(self, "_renderer", None), None
        if r is not None:
            r.close()


class CompositeRenderer:
    """FrameRenderers of several cameras side by side: upright (S, k*S, 3) uint8 frames, the views
    left to right in the order given, each made upright on its own. TaskError for an unknown camera."""

    def __init__(self, model: Any, data: Any, cameras: Sequence[str], size: int,
                 settings: RenderSettings = RenderSettings()) -> None:
        self.renderers: list[FrameRenderer] = []
        try:
            for camera in cameras:
                self.renderers.append(FrameRenderer(model, data, camera, size, settings))
        except BaseException:
            self.close()                                  # the views made so far hold GL contexts
            raise

    def render(self, upright: bool = True) -> np.ndarray:
        """(S, k*S, 3) uint8 frame of the current state."""
        return np.concatenate([r.render(upright) for r in self.renderers], axis=1)   # (S, k*S, 3)

    def close(self) -> None:
        for r in self.renderers:
            r.close()


def camera_names(camera: str) -> list[str]:
    """The cameras of a camera name, left to right: 'corner' -> ['corner'], 'corner+topview' ->
    ['corner', 'topview']. TaskError for an empty name or an empty part ('corner+')."""
    names = str(camera).split("+")
    if not all(n.strip() for n in names):
        raise TaskError(f"camera {camera!r} has an empty name; give one camera (e.g. corner) or several joined "
                        "by '+' (e.g. corner+topview)")
    return names


def camera_count(camera: str) -> int:
    """Views in a frame of `camera`: 1 for a single camera, k for k cameras joined by '+'."""
    return len(camera_names(camera))


def frame_size(size: int, camera: str) -> tuple[int, int]:
    """(H, W) pixels of a frame of `camera` with views of `size` px: (S, k*S) for k views. An encoder
    reading these frames is built at this size (load_backbone(..., img_size=frame_size(S, camera)))."""
    return int(size), camera_count(camera) * int(size)


def make_renderer(model: Any, data: Any, camera: str, size: int,
                  settings: RenderSettings = RenderSettings()) -> FrameRenderer | CompositeRenderer:
    """A FrameRenderer for one camera, a CompositeRenderer for several joined by '+'."""
    names = camera_names(camera)
    if len(names) == 1:
        return FrameRenderer(model, data, camera, size, settings)
    return CompositeRenderer(model, data, names, size, settings)


@dataclass
class State:
    """What the environment says after a reset or a step."""
    proprio: np.ndarray     # (4,) float32: hand xyz, gripper opening
    full: np.ndarray        # (39,) float64 Meta-World state incl. object and goal (for the scripted expert only)
    success: bool           # the task's success flag at this step
    steps: int              # steps taken since reset
    done: bool              # success, or the episode cap reached


EXPERTS = ("default", "metaworld")
# Tasks whose demonstrator is not Meta-World's scripted policy under expert="default", and who demonstrates them.
# Meta-World's reach expert moves the hand's body onto the goal, but reach-v3 scores the point between the
# fingertips (env.tcp_center), 4.5 cm below it: its demos stop 4.4 cm from the goal, inside the 5 cm success radius
# by a few millimetres, and heads that imitate them miss by a little more (control/RESULTS.md, "Demos that bring the
# fingertips onto the goal"). Pick-place's expert likewise carries the hand's body to the goal with the object held
# below it: its demos leave the object 4.0 cm from the goal (median; 7 cm radius). 'carry' is Meta-World's
# pick-place expert with its last phase aimed at the object instead: the same gain on (goal - object), so the
# object ends within 1.1 cm ("Demos that carry the object onto the goal"). Peg-insert's expert holds the peg 2.5 cm
# below the hand, the threshold of its "go down to the peg" phase, so once it has lifted the peg it dithers between
# pressing it back onto the table and lifting it (over the demos' 25 configurations: first success at step 94
# median, 249 at worst, one never). 'held' is that expert, which skips the phase while its fingers are closed on the
# peg: 25 / 25, first success at step 81 median, 102 at worst ("Demos that do not put the peg back down").
CORRECTED_EXPERTS = {"reach-v3": "fingertips", "pick-place-v3": "carry", "peg-insert-side-v3": "held"}
_CARRY_GAIN = 10.0           # Meta-World's pick-place policy: move(hand, to_xyz=..., p=10.0)
_PEG_GAIN = 25.0             # ... and its peg-insert-side policy, p=25.0


def expert_name(task: str, expert: str = "default") -> str:
    """Who demonstrates `task`: under expert='default', 'fingertips' for reach-v3 (the same proportional controller
    as Meta-World's reach expert, gain 5, moving the fingertips onto the goal), 'carry' for pick-place-v3
    (Meta-World's expert, whose last phase brings the object, not the hand, onto the goal) and 'held' for
    peg-insert-side-v3 (Meta-World's, which does not go back down to a peg it holds); else 'metaworld'."""
    if expert not in EXPERTS:
        raise ValueError(f"expert must be one of {EXPERTS}, got {expert!r}")
    return CORRECTED_EXPERTS.get(task, "metaworld") if expert == "default" else "metaworld"


class MetaWorldTask:
    """One Meta-World v3 task with a camera, seeded configurations and an episode cap.

        task = MetaWorldTask("reach-v3", camera="corner", image_size=224)
        s = task.reset(config=HELDOUT_OFFSET + 3)   # the same scene on every machine
        frame = task.render()                       # (224, 224, 3) uint8, upright ("corner+topview": (224, 448, 3))
        s = task.step(action)                       # action (4,) in [-1, 1]
        task.close()

    The goal is observable in `State.full` (the scripted experts need it); the visual policy
    sees only `render()` frames and `State.proprio`. Episodes end on success or after
    `max_steps` steps (with stop_on_success=False only after `max_steps`: demos that go on
    past the first success).
    """

    def __init__(self, name: str, *, camera: str = DEFAULT_CAMERA, image_size: int = 224,
                 max_steps: int = 500, render: RenderSettings | None = RenderSettings(),
                 stop_on_success: bool = True, expert: str = "default") -> None:
        mw = _metaworld()
        check_task(name)
        envs = mw.env_dict.ALL_V3_ENVIRONMENTS
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.name, self.camera, self.image_size, self.max_steps = name, camera, int(image_size), int(max_steps)
        self.stop_on_success = bool(stop_on_success)
        env = envs[name]()
        # What metaworld's goal-observable classes do, without touching the global numpy RNG.
        env._partially_observable = False
        env.__dict__.pop("sawyer_observation_space", None)     # cached property: recompute goal bounds
        env._set_task_called = True
        env.max_path_length = self.max_steps
        self.env = env
        self.expert = expert_name(name, expert)          # who expert_action() is: see expert_name
        self._expert = mw.policies.ENV_POLICY_MAP[name]()
        self._renderer = (make_renderer(env.model, env.data, camera, self.image_size, render)
                          if render is not None else None)
        self._state: State | None = None
        self.config: int | None = None

    # -- configurations -------------------------------------------------------------------------
    def reset(self, config: int) -> State:
        """Reset to configuration `config` (a seed): object/goal positions drawn once and frozen."""
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
        # showed the goal somewhere else (measured: benchmarks/control_goal_probe.py). Recompute it; the
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
        a = np.clip(np.asarray(action, dtype=np.float32).reshape(-1), -1.0, 1.0)
        if a.shape != (ACTION_DIM,):
            raise ValueError(f"action must have {ACTION_DIM} values, got shape {np.shape(action)}")
        full, _r, _term, trunc, info = self.env.step(a)
        steps = self._state.steps + 1
        success = bool(info.get("success", 0.0) > 0.5)
        done = (success and self.stop_on_success) or trunc or steps >= self.max_steps
        self._state = State(_proprio(full), full, success, steps, bool(done))
        return self._state

    def render(self) -> np.ndarray:
        """(S, k*S, 3) uint8 upright frame of the current state: S = image_size, k = camera_count(camera)."""
        if self._renderer is None:
            raise TaskError("this task was made with render=None; pass RenderSettings() to get frames")
        return self._renderer.render()

    def expert_action(self, state: State | None = None) -> np.ndarray:
        """The scripted expert's (4,) action for `state` (default: the current one): Meta-World's, or under
        expert='default' the corrected one of `expert_name` (reach, pick-place, peg-insert). The fingertips controller
        reads the fingertips from the environment, so it must be given the current state (as record_episode does)."""
        state = state or self._state
        if state is None:
            raise TaskError("call reset(config) first")
        full = state.full
        if self.expert == "fingertips":
            goal = np.asarray(full[-3:], dtype=np.float64)
            return np.r_[np.clip(5.0 * (goal - self.env.tcp_center), -1.0, 1.0), 0.0].astype(np.float32)
        with warnings.catch_warnings():      # metaworld warns on gains > 1 at every step
            warnings.simplefilter("ignore")
            action = np.asarray(self._expert.get_action(full), dtype=np.float64)
            if self.expert == "carry":
                parsed = self._expert._parse_obs(full)
                if np.array_equal(self._expert._desired_pos(parsed), parsed["goal_pos"]):   # its last phase
                    action[:3] = _CARRY_GAIN * (parsed["goal_pos"] - parsed["puck_pos"])
            elif self.expert == "held":
                action[:3] = _held_peg_move(full, action[:3])
        return action.astype(np.float32)

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


def _held_peg_move(full: np.ndarray, move: np.ndarray) -> np.ndarray:
    """Peg-insert's arm command under the 'held' expert: Meta-World's `move`, except while the fingers are closed on
    the peg (opening < 0.5, hand within 4 cm of it across and 5 cm above), when it goes on to the hole's line and
    into the hole as Meta-World's last two phases do, instead of back down to the peg."""
    hand, peg, goal = full[:3], full[4:7], full[-3:]
    if not (full[3] < 0.5 and np.linalg.norm(hand[:2] - peg[:2]) < 0.04 and abs(hand[2] - peg[2]) < 0.05):
        return move
    hole = np.array([-0.35, goal[1], 0.16])           # Meta-World's policy: x past the hole, z the hole's height
    target = hole + np.array([0.4, 0.0, 0.0]) if np.linalg.norm(peg[1:] - hole[1:]) > 0.03 else hole
    return _PEG_GAIN * (target - hand)


def _proprio(full: np.ndarray) -> np.ndarray:
    return np.asarray(full[:PROPRIO_DIM], dtype=np.float32)     # (4,) hand xyz, gripper
