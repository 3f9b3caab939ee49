"""Fast headless frames of a MuJoCo camera, upright.

* **Speed.** Meta-World's default visuals (shadows, reflections, 4x multisampling) render ~5-7 frames/s at
  224 px with Mesa's CPU rasteriser; with shadows and reflections off and `model.vis.quality.offsamples = 0`
  set *before* the GL context is created it renders ~55-60 frames/s on a 2-core machine. `RenderSettings()`
  holds the fast settings, `RenderSettings.metaworld()` Meta-World's look. Demos record the settings they
  were rendered with, and policies are evaluated with those of their demos.
* **Orientation.** Meta-World's corner cameras are defined with their "up" axis pointing down in the world,
  so their frames come out upside down. A frame is rotated by 180 degrees whenever the camera's up axis
  points below the horizon (`camera_is_upside_down`), so every camera shows the table at the bottom.

Headless rendering uses EGL unless `MUJOCO_GL` says otherwise (`osmesa` is the fallback).
"""
from __future__ import annotations

import atexit
import os
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import RenderUnavailable, TaskError

# Must precede the first `import mujoco` anywhere in the process; a value set by the user wins.
os.environ.setdefault("MUJOCO_GL", "egl")


@dataclass(frozen=True)
class RenderSettings:
    """Visual quality knobs that dominate CPU rendering time. The defaults are the fast ones."""
    shadows: bool = False
    reflections: bool = False
    offsamples: int = 0          # multisample anti-aliasing of the offscreen buffer (MuJoCo's default: 4)

    @classmethod
    def metaworld(cls) -> "RenderSettings":
        """Meta-World's own look (slow on a CPU rasteriser)."""
        return cls(shadows=True, reflections=True, offsamples=4)

    def as_dict(self) -> dict:
        return dict(shadows=bool(self.shadows), reflections=bool(self.reflections), offsamples=int(self.offsamples))

    @classmethod
    def from_dict(cls, d: dict) -> "RenderSettings":
        return cls(**d)


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


def camera_names(model: Any) -> list[str]:
    """The names of a MuJoCo model's cameras, in the model's order."""
    import mujoco

    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]


class FrameRenderer:
    """Offscreen renderer of one named camera of a MuJoCo model; returns upright (S, S, 3) uint8 frames.

    TaskError for a camera the model does not have; RenderUnavailable when no headless GL context can be made.
    """

    def __init__(self, model: Any, data: Any, camera: str, size: int,
                 settings: RenderSettings = RenderSettings()) -> None:
        import mujoco

        self.data = data
        self.camera = camera
        self.cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if self.cam_id < 0:
            raise TaskError(f"no camera named {camera!r}; this scene has {camera_names(model)}")
        # Read by MuJoCo when the GL context and its framebuffer are made: set them first.
        model.vis.quality.offsamples = int(settings.offsamples)
        model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), size)
        model.vis.global_.offheight = max(int(model.vis.global_.offheight), size)
        if not _LIVE:
            _preload_triton()
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
