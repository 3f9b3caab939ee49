"""Scripted-expert demonstrations recorded to disk: compressed, resumable, successful episodes only.

Layout of a demo directory:

    manifest.json                 kind "control.demos", task, camera, image_size, ... and the list
                                  of recorded episodes and of configurations whose expert failed
    episodes/cfg_0000012.npz      one compressed file per successful episode:
        frames  (T, S, S, 3) uint8   the frame seen *before* action t
        proprio (T, 4) float32       hand xyz, gripper opening
        actions (T, 4) float32       the expert's action at that state, clipped to [-1, 1]
        config  () int64             configuration seed;   rand_vec (K,) float64 its frozen vector

Every file is written to a temporary sibling and renamed, and the manifest is rewritten after
each episode, so an interrupted collection resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from frozenvit.backbone.suite.artifacts import (atomic_write_bytes, changed_files, check_output_dir, output_dir,
                                                read_marker, sha256_file, write_json)
from frozenvit.backbone.suite.errors import OutputConflict
from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.backbone.suite.progress import progress_bar

from .defaults import (DEFAULT_CAMERA, DEFAULT_EXPERT, DEFAULT_HOLD_STEPS, DEFAULT_MAX_STEPS, MAX_IMAGE_SIZE,
                       MIN_IMAGE_SIZE)
from .env import HELDOUT_OFFSET, MetaWorldTask, check_count, check_task, is_count
from .errors import DemoError
from .experts import expert_name
from .render import RenderSettings

KIND = "control.demos"
FORMAT_VERSION = 2
_SETTINGS = ("task", "camera", "image_size", "max_steps", "hold_steps", "render", "expert")
_FLAGS = {k: f" (--{k.replace('_', '-')})" for k in _SETTINGS if k != "render"}   # collect's option of each setting
# what to do about an episode file that cannot be read: collect drops the entry of a missing file and records
# that configuration again (editing manifest.json by hand instead makes the folder an edited output, refused)
_DAMAGED_CURE = ("delete it (the .npz alone, not its manifest entry) and run the same `control collect` again: it "
                 "records that configuration again")


@dataclass
class Episode:
    """One recorded demonstration."""
    frames: np.ndarray     # (T, S, S, 3) uint8
    proprio: np.ndarray    # (T, 4) float32
    actions: np.ndarray    # (T, 4) float32
    config: int
    rand_vec: np.ndarray   # (K,) float64

    def __len__(self) -> int:
        return int(self.actions.shape[0])


def collect_demos(task: str, out_dir: str | Path, n_episodes: int, *, camera: str = DEFAULT_CAMERA,
                  image_size: int = 224, max_steps: int = DEFAULT_MAX_STEPS, hold_steps: int = DEFAULT_HOLD_STEPS,
                  first_config: int = 0, expert: str = DEFAULT_EXPERT,
                  render: RenderSettings = RenderSettings(), max_failures: int | None = None,
                  progress: bool | None = None, flag: str = "out_dir") -> Path:
    """Record `n_episodes` successful expert episodes of `task` on training configurations.

    Configurations are tried in order from `first_config` (training seeds, below HELDOUT_OFFSET);
    those where the expert fails within `max_steps` are skipped and listed in the manifest.
    expert: "default" (each task's default demonstrator, control.experts.expert_name) or "metaworld"
    (Meta-World's for every task); the manifest records who demonstrated, and demos of one are never resumed
    with the other.
    With hold_steps=K the expert goes on for K steps after its first success (K more frames per
    episode), so the demos show what to do *at* the goal and not only on the way there; without
    them the last recorded state is the last one short of success.
    Re-running with the same settings resumes; other settings on an existing directory raise
    DemoError, and so do more than `max_failures` failed configurations in one call (default
    10 * n_episodes + 10: the cap is probably too short for this task). Returns the directory.
    `out_dir` is claimed as `control collect --out` claims it: absent, empty, or a demo folder frozenvit wrote;
    any other folder (a user's files, another command's output) is refused with OutputConflict before any
    episode is rolled out (`flag` names it in the message), and so is one holding an episode file that changed
    after it was written (damaged: the message says to delete it and run the same collect again). A value out of
    range (image_size outside MIN_IMAGE_SIZE..MAX_IMAGE_SIZE, an unknown expert) is a ParameterError.
    """
    for name, value, low in (("n_episodes", n_episodes, 1), ("hold_steps", hold_steps, 0),
                             ("max_steps", max_steps, 1)):
        check_count(name, value, low)
    if not is_count(first_config, 0) or first_config >= HELDOUT_OFFSET:
        raise ParameterError(f"first_config must be a training configuration, 0 to {HELDOUT_OFFSET - 1}, "
                             f"got {first_config!r}")
    if not is_count(image_size, MIN_IMAGE_SIZE) or image_size > MAX_IMAGE_SIZE:
        raise ParameterError(f"image_size must be an integer from {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} (pixels of "
                             f"each square frame), got {image_size!r}")
    expert_name(task, expert)                          # ParameterError for an unknown expert, before any work
    out = Path(out_dir)
    check_task(task)
    check_demo_dir(out, flag)                          # a folder frozenvit does not own is refused before any work
    settings = dict(task=task, camera=camera, image_size=int(image_size), max_steps=int(max_steps),
                    hold_steps=int(hold_steps), render=render.as_dict(), expert=expert_name(task, expert))
    fresh = not (out / "manifest.json").is_file()     # nothing collected here before this call
    before = set(out.iterdir()) if out.is_dir() else None
    manifest = _open_manifest(out, settings)
    done = {e["config"] for e in manifest["episodes"]}
    failed = set(manifest["failed_configs"])
    if len(done) >= n_episodes:
        return out
    try:
        _collect(out, manifest, done, failed, task, n_episodes, camera, image_size, max_steps, hold_steps,
                 first_config, expert, render, max_failures, progress, flag)
    except DemoError:
        if fresh and not done:                        # a refusal of a fresh folder leaves nothing behind
            _remove_new(out, before)
        raise
    return out


def _remove_new(out: Path, before: set[Path] | None) -> None:
    """Remove what this call wrote into `out` (the files its marker lists, the marker) and `out` itself where this
    call made it; a folder the user made stays, and so does anything in it frozenvit did not write."""
    from frozenvit.backbone.suite.artifacts import remove_artifact

    remove_artifact(out)
    if before is not None:
        out.mkdir(exist_ok=True)


def _collect(out: Path, manifest: dict, done: set, failed: set, task: str, n_episodes: int, camera: str,
             image_size: int, max_steps: int, hold_steps: int, first_config: int, expert: str,
             render: RenderSettings, max_failures: int | None, progress: bool | None, flag: str) -> None:
    """`collect_demos`'s recording loop, on a manifest opened with its settings."""
    max_failures = 10 * n_episodes + 10 if max_failures is None else max_failures
    new_failures = 0
    with MetaWorldTask(task, camera=camera, image_size=image_size, max_steps=max_steps, render=render,
                       stop_on_success=hold_steps == 0, expert=expert) as env, \
            progress_bar(total=n_episodes, initial=len(done), desc=f"demos {task}", unit="ep",
                 disable=None if progress is None else not progress) as bar:
        output_dir(out, KIND, flag)                    # claimed once the task, camera and renderer are good
        config = first_config
        while len(done) < n_episodes:
            if config >= HELDOUT_OFFSET:
                raise DemoError(_ran_out(task, first_config, len(done), n_episodes, new_failures))
            if config in done or config in failed:
                config += 1
                continue
            ep = record_episode(env, config, hold_steps=hold_steps)
            if ep is None:
                failed.add(config)
                new_failures += 1
                if new_failures > max_failures:
                    write_json(out / "manifest.json", {**manifest, "failed_configs": sorted(failed)})
                    raise DemoError(f"the {task} expert failed on {new_failures} configurations within "
                                    f"{max_steps} steps; raise the episode cap (--max-steps; in Python "
                                    "max_steps=) and run again" + (
                                        "" if not done else f", into another folder: {out} holds {len(done)} "
                                        "episodes of this cap (the same command again tries further "
                                        "configurations)"))
                manifest["failed_configs"] = sorted(failed)
            else:
                name = f"episodes/cfg_{config:07d}.npz"
                _write_episode(out / name, ep)
                done.add(config)
                manifest["episodes"].append({"config": config, "file": name, "steps": len(ep)})
                bar.update(1)
            write_json(out / "manifest.json", manifest)
            config += 1


def check_demo_dir(out: str | Path, flag: str = "--out") -> None:
    """Refuse, writing nothing, a folder `collect_demos` would refuse (`check_output_dir`); an earlier demo folder
    whose episode files changed since collect wrote them (cut short or damaged) is refused naming them and the cure
    that works: delete them and run the same collect again, which records those configurations again."""
    out = Path(out)
    marker = read_marker(out)
    if marker is not None and marker.get("kind") == KIND:
        damaged = [f for f in changed_files(out, marker) if f.startswith("episodes/") and f.endswith(".npz")]
        if damaged:
            many = len(damaged) > 1
            shown = ", ".join(str(out / f) for f in damaged[:5]) + (f" and {len(damaged) - 5} more"
                                                                     if len(damaged) > 5 else "")
            raise OutputConflict(f"{flag} {out} holds {'episode files' if many else 'an episode file'} that changed "
                                 f"after collect wrote {'them' if many else 'it'} (damaged or cut short?): {shown}; "
                                 f"delete {'them' if many else 'it'} (only the .npz, not the manifest entry) and run "
                                 "the same `control collect` again: it records "
                                 f"{'those configurations' if many else 'that configuration'} again")
    check_output_dir(out, KIND, flag)


def demos_digest(demo_dir: str | Path, manifest: dict | None = None) -> str:
    """sha256 naming what a demo folder holds: its settings (task, camera, frame size, expert, ...) and, episode by
    episode, its configuration, length and file's sha256. Demos re-collected by another expert, or with other
    frames, get another digest even with the same frame count. DemoError for an episode file that is missing."""
    m = load_manifest(demo_dir) if manifest is None else manifest
    h = hashlib.sha256(json.dumps({k: m.get(k) for k in _SETTINGS}, sort_keys=True).encode())
    for e in m["episodes"]:
        path = Path(demo_dir) / e["file"]
        try:
            digest = sha256_file(path)
        except OSError as err:
            raise DemoError(f"cannot read episode {path} ({type(err).__name__}: {err}); {_DAMAGED_CURE}") from err
        h.update(f"{e['config']}:{e['steps']}:{digest}\n".encode())
    return h.hexdigest()


def _ran_out(task: str, first_config: int, recorded: int, wanted: int, failures: int) -> str:
    """Why `collect_demos` stopped at the last training configuration, and what to do."""
    failed = f" (the expert failed on {failures} configuration{'s' * (failures != 1)} of this run)" if failures else ""
    return (f"the training configurations of {task} ran out at {HELDOUT_OFFSET - 1}, tried from {first_config}, with "
            f"{recorded} of the {wanted} episodes recorded{failed}; start from a lower first configuration "
            f"(--first-config; training configurations are 0 to {HELDOUT_OFFSET - 1})")


def record_episode(env: MetaWorldTask, config: int, *, hold_steps: int = 0) -> Episode | None:
    """Run the scripted expert once on `config`; the Episode if it succeeded, else None.

    It ends at the first success, or `hold_steps` steps later (the task must then be made with
    stop_on_success=False)."""
    if hold_steps > 0 and env.stop_on_success:
        raise ValueError("hold_steps > 0 needs a MetaWorldTask made with stop_on_success=False")
    state = env.reset(config)
    frames, proprio, actions = [], [], []
    first_success = None
    while not state.done:
        frames.append(env.render())
        proprio.append(state.proprio)
        a = np.clip(env.expert_action(state), -1.0, 1.0)                     # (4,)
        actions.append(a)
        state = env.step(a)
        if state.success and first_success is None:
            first_success = state.steps
        if first_success is not None and state.steps - first_success >= hold_steps:
            break
    if first_success is None:
        return None
    return Episode(np.stack(frames), np.stack(proprio).astype(np.float32), np.stack(actions).astype(np.float32),
                   int(config), env.config_vector())


def load_manifest(demo_dir: str | Path) -> dict:
    path = Path(demo_dir) / "manifest.json"
    if not path.is_file():
        raise DemoError(f"{demo_dir} holds no demos (manifest.json missing); run `frozenvit control collect` first")
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DemoError(f"{path} cannot be read ({e}); re-collect the demos") from e
    if not isinstance(m, dict) or m.get("kind") != KIND or m.get("format_version") != FORMAT_VERSION:
        raise DemoError(f"{path} is not a format-{FORMAT_VERSION} demo manifest; re-collect the demos")
    missing = [k for k in (*_SETTINGS, "episodes", "failed_configs") if k not in m]
    if missing:
        raise DemoError(f"{path} lacks {', '.join(missing)}; re-collect the demos")
    return m


def iter_episodes(demo_dir: str | Path) -> Iterator[Episode]:
    """Episodes of a demo directory in recording order (each file read when reached)."""
    m = load_manifest(demo_dir)
    if not m["episodes"]:
        raise DemoError(f"{demo_dir} has no successful episodes yet")
    for e in m["episodes"]:
        yield read_episode(Path(demo_dir) / e["file"])


# what np.load raises on a missing, truncated or damaged .npz: no file, not a zip, a bad CRC, a cut-short member
_UNREADABLE = (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def read_episode(path: str | Path) -> Episode:
    """The episode stored at `path`; DemoError for a file that is missing, truncated, damaged or not an episode,
    saying to delete the file and run the same collect again (which records that configuration again)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            ep = Episode(z["frames"], z["proprio"], z["actions"], int(z["config"]), z["rand_vec"])
    except _UNREADABLE as e:
        raise DemoError(f"cannot read episode {path} ({type(e).__name__}: {e}); {_DAMAGED_CURE}") from e
    f, p, a = ep.frames, ep.proprio, ep.actions
    if not (f.ndim == 4 and f.dtype == np.uint8 and p.ndim == 2 and a.ndim == 2 and len(f) == len(p) == len(a)):
        raise DemoError(f"cannot read episode {path} (frames {ep.frames.shape} {ep.frames.dtype}, proprio "
                        f"{ep.proprio.shape}, actions {ep.actions.shape} do not make one episode); {_DAMAGED_CURE}")
    return ep


def _write_episode(path: Path, ep: Episode) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, frames=ep.frames, proprio=ep.proprio, actions=ep.actions,
                        config=np.int64(ep.config), rand_vec=ep.rand_vec)
    atomic_write_bytes(path, buf.getvalue())


def _open_manifest(out: Path, settings: dict) -> dict:
    if (out / "manifest.json").is_file():
        m = load_manifest(out)
        diff = {k: (m.get(k), settings[k]) for k in _SETTINGS if m.get(k) != settings[k]}
        if diff and not any((out / e["file"]).is_file() for e in m["episodes"]):
            # no episode recorded yet (e.g. the expert failed within a too short cap): the folder takes the new
            # settings, and the configurations that failed under the old ones are tried again
            return dict(kind=KIND, format_version=FORMAT_VERSION, **settings, episodes=[], failed_configs=[])
        if diff:
            shown = "; ".join(f"{k}{_FLAGS.get(k, '')} {old!r} stored, {new!r} asked"
                              for k, (old, new) in diff.items())
            raise DemoError(f"{out} was collected with other settings ({shown}); "
                            "use another directory or the same settings to resume")
        # drop entries whose file vanished (e.g. deleted because it was corrupt)
        m["episodes"] = [e for e in m["episodes"] if (out / e["file"]).is_file()]
        return m
    return dict(kind=KIND, format_version=FORMAT_VERSION, **settings, episodes=[], failed_configs=[])
