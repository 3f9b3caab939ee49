"""Success rate of a visuomotor policy on held-out Meta-World configurations.

Several environments run in lockstep so that the frozen encoder sees one batch per step; each
finished episode's slot takes the next configuration. An episode succeeds when the task's own
success flag is raised within `max_steps` steps.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image
from frozenvit.backbone.suite.progress import progress_bar

from .agent import StageTimer, VisuomotorAgent
from .env import MetaWorldTask, RenderSettings, State
from .policy import PatchTokenPolicy, PolicyEnsemble


@dataclass
class TaskResult:
    """Per-configuration outcomes of one task."""
    task: str
    configs: list[int]
    successes: list[bool]
    steps: list[int]                      # steps taken (== max_steps for failures)
    max_steps: int
    gifs: list[str] = field(default_factory=list)

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes)) if self.successes else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["success_rate"] = self.success_rate
        return d


def evaluate(policy: PatchTokenPolicy | PolicyEnsemble, backbone: Any, configs: Sequence[int], *, task: str | None = None,
             camera: str | None = None, image_size: int | None = None, max_steps: int = 500,
             parallel: int = 4, gif_dir: str | Path | None = None, gif_episodes: int = 0,
             render: RenderSettings | None = None, progress: bool | None = None) -> TaskResult:
    """Roll the policy out once per configuration seed (use held-out seeds: `config_seeds('heldout', n)`).

    task/camera/image_size/render default to those of the policy's training demos. `parallel`
    environments run in lockstep. With gif_dir and gif_episodes > 0 the first episodes are saved
    as animated GIFs.
    """
    meta = policy.meta_
    task = task or meta.get("task")
    camera = camera or meta.get("camera", "corner")
    image_size = int(image_size or meta.get("demo_image_size") or meta["img_size"][0])
    if render is None:
        render = RenderSettings.from_dict(meta["render"]) if "render" in meta else RenderSettings()
    if not task:
        raise ValueError("the policy does not say which task it was trained on: pass task=")
    configs = [int(c) for c in configs]
    agent = VisuomotorAgent(policy, backbone)
    n_env = max(1, min(parallel, len(configs)))
    envs = [MetaWorldTask(task, camera=camera, image_size=image_size, max_steps=max_steps, render=render)
            for _ in range(n_env)]
    outcome: dict[int, tuple[bool, int]] = {}
    gifs: list[str] = []
    record = set(configs[:gif_episodes]) if gif_dir else set()
    try:
        queue = list(configs)
        slot_cfg: list[int | None] = [None] * n_env
        states: list[State | None] = [None] * n_env
        movies: dict[int, list[np.ndarray]] = {}

        def assign(s: int) -> None:
            agent.reset([s])
            slot_cfg[s] = queue.pop(0) if queue else None
            states[s] = envs[s].reset(slot_cfg[s]) if slot_cfg[s] is not None else None

        for s in range(n_env):
            assign(s)
        bar = progress_bar(total=len(configs), desc=f"eval {task}", unit="ep",
                   disable=None if progress is None else not progress)
        while any(c is not None for c in slot_cfg):
            live = [s for s in range(n_env) if slot_cfg[s] is not None]
            frames = [envs[s].render() for s in live]
            for s, f in zip(live, frames):
                if slot_cfg[s] in record:
                    movies.setdefault(slot_cfg[s], []).append(f)
            proprio = np.stack([states[s].proprio for s in live])                  # (B, 4)
            actions = agent.act(frames, proprio, slots=live)                       # (B, 4)
            for s, a in zip(live, actions):
                st = envs[s].step(a)
                states[s] = st
                if st.done:
                    outcome[slot_cfg[s]] = (st.success, st.steps)
                    bar.update(1)
                    assign(s)
        bar.close()
        if gif_dir:
            for c, fr in movies.items():
                gifs.append(str(save_gif(fr, Path(gif_dir) / f"{task}_cfg{c}.gif")))
    finally:
        for e in envs:
            e.close()
    return TaskResult(task, configs, [outcome[c][0] for c in configs], [outcome[c][1] for c in configs],
                      max_steps, gifs)


def save_gif(frames: Sequence[np.ndarray], path: str | Path, fps: int = 20, every: int = 2) -> Path:
    """Write frames (H, W, 3) uint8 as an animated GIF (every `every`-th frame)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ims = [Image.fromarray(f) for f in frames[::every]] or [Image.fromarray(frames[-1])]
    ims[0].save(path, save_all=True, append_images=ims[1:], duration=int(1000 * every / fps), loop=0)
    return path


def rollout_timed(agent: VisuomotorAgent, env: MetaWorldTask, config: int, timer: StageTimer,
                  max_steps: int | None = None) -> State:
    """One episode with every stage of the loop timed: render, preprocess, encode, head, step."""
    agent.reset()
    state = env.reset(config)
    limit = max_steps or env.max_steps
    while not state.done and state.steps < limit:
        with timer("total"):
            with timer("render"):
                frame = env.render()
            action = agent.act([frame], state.proprio[None], slots=[0], timer=timer)[0]
            with timer("step"):
                state = env.step(action)
    return state
