"""Success rate of a visuomotor policy on held-out Meta-World configurations.

Several environments run in lockstep so that the frozen encoder sees one batch per step; each
finished episode's slot takes the next configuration. An episode succeeds when the task's own
success flag is raised within `max_steps` steps. With a journal every finished episode is on
disk at once, and a stopped evaluation resumes where it stopped; an evaluation of more or fewer
configurations (the same policy, task, cap, camera, frame size and rendering) reuses the episodes
the journal holds and keeps those it does not ask for.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from frozenvit.backbone.suite.artifacts import atomic_write_bytes, atomic_write_text
from frozenvit.backbone.suite.errors import OutputConflict, ParameterError
from frozenvit.backbone.suite.progress import progress_bar

from .agent import StageTimer, VisuomotorAgent
from .defaults import (DEFAULT_CAMERA, DEFAULT_MAX_STEPS, DEFAULT_PARALLEL, HELDOUT_OFFSET, MAX_IMAGE_SIZE,
                       MIN_IMAGE_SIZE)
from .env import MetaWorldTask, State, check_configs, check_count, check_max_steps, check_task, is_count
from .errors import TaskError
from .policy import PatchTokenPolicy, policy_digest
from .render import RenderSettings

JOURNAL_KIND = "control.evaluate.episodes"


@dataclass
class TaskResult:
    """Per-configuration outcomes of one task."""
    task: str
    configs: list[int]
    successes: list[bool]
    steps: list[int]                      # steps taken (== max_steps for failures)
    max_steps: int
    gifs: list[str] = field(default_factory=list)    # GIF files of these episodes, in the order of configs
    policy: str | None = None             # policy_digest of the policy evaluated
    policy_task: str | None = None        # the task the policy was trained on
    trained_configs: list[int] = field(default_factory=list)   # configurations among the policy's training ones
    # episodes of these configurations taken from the journal (rolled out by an earlier run): their number, the
    # seconds their lines record, summed, and how many of them record none (journals written before the times); this
    # call's own time is the caller's to measure (`control evaluate` writes seconds = earlier_seconds +
    # seconds_this_run). Episodes of other configurations the journal holds are not counted here.
    earlier_episodes: int = 0
    earlier_seconds: float = 0.0
    untimed_episodes: int = 0

    @property
    def success_rate(self) -> float:
        return float(np.mean(self.successes)) if self.successes else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["success_rate"] = self.success_rate
        return d


def evaluate(policy: PatchTokenPolicy, backbone: Any, configs: Sequence[int], *, task: str | None = None,
             camera: str | None = None, image_size: int | None = None, max_steps: int = DEFAULT_MAX_STEPS,
             parallel: int = DEFAULT_PARALLEL, gif_dir: str | Path | None = None, gif_episodes: int = 0,
             render: RenderSettings | None = None, journal: str | Path | None = None,
             progress: bool | None = None, engine: str = "local", workers: int | None = None,
             worker_threads: int = 1, on_new_journal: Callable[[], Any] | None = None) -> TaskResult:
    """Roll the policy out once per configuration seed (use held-out seeds: `config_seeds('heldout', n)`).

    task/camera/image_size/render default to those of the policy's training demos (image_size: the frames'
    size in pixels, MIN_IMAGE_SIZE to MAX_IMAGE_SIZE; the encoder resizes them). `parallel` environments run in
    lockstep. With gif_dir and gif_episodes > 0 the episodes of the first gif_episodes configurations are saved
    as animated GIFs, gif_dir/<task>_cfg<config>.gif. No configurations, or arguments out of range, are a
    ParameterError. A UserWarning says when the task is not the one the policy was trained on, and when
    configurations are among the policy's training configurations (`meta_["train_configs"]`; for a policy that
    does not record them, configurations below HELDOUT_OFFSET); the result lists the latter (`trained_configs`).

    journal: a JSON-lines file that receives every episode as it ends. Where it already exists, the episodes
    it holds of these configurations are taken as done and not rolled out again: a stopped run resumes, and an
    evaluation of more or fewer configurations reuses those it shares with the earlier ones, since an episode
    depends only on its configuration and what the journal's header records (policy digest, task, camera, frame
    size, cap and rendering). The journal keeps the episodes (and GIF lines) of configurations not asked now, for
    a later call; the result counts only `configs`. A journal whose header records another policy, task, camera,
    frame size, cap or rendering holds other episodes: it is replaced by this evaluation's, with a warning naming
    what differs (then and now) and how many episodes it drops, and a file that is no journal is an
    OutputConflict. With a reopened journal and gif_dir, the GIFs an earlier run of the same evaluation saved
    there are kept and listed in the result (those of `configs`: `TaskResult.gifs`, also with gif_episodes=0),
    and an asked GIF of an episode the journal already holds is made by rolling that configuration out again;
    its outcome in the result stays the journal's. The journal lists every GIF the evaluation writes, and only
    the GIFs it lists (and that are there) count as this evaluation's: another evaluation's GIFs left in gif_dir
    are never taken for its own. Each episode line records wall-clock seconds: the time since the run's previous
    episodes ended (or its rollouts began), split evenly among the episodes that ended together (on the same
    lockstep step; with engine "ray", those of one chunk, which arrive together), so that the lines of a stopped
    and resumed evaluation add up to the time its episodes took; the result's `earlier_seconds` sums those of the
    episodes an earlier run rolled out, and `untimed_episodes` counts those whose line records no time.
    on_new_journal: called once, before any rollout, when `journal` starts afresh (new, or replacing another
    evaluation's), so that a caller can remove what an earlier evaluation left beside it (its results).

    engine: "local" (this process) or "ray": the episodes run on `workers` Ray actors (None: one per
    CPU of the cluster, see backbone.suite.engine.ray_session), each holding its own `parallel`
    environments, the policy and the encoder (torch at `worker_threads` threads), fed at most `parallel`
    configurations at a time, fewer as the queue drains (guided_chunk). An actor that dies is restarted and its configurations run again.
    """
    from frozenvit.backbone.suite.engine import check_engine

    check_engine(engine)
    check_max_steps(max_steps)
    check_count("parallel", parallel, 1, "environments stepped together")
    configs = list(configs)
    check_configs(configs)
    if not configs:
        raise ParameterError("no configurations to evaluate on: pass at least one seed, e.g. config_seeds('heldout', "
                             "50)")
    if image_size is not None and (not is_count(image_size, MIN_IMAGE_SIZE) or image_size > MAX_IMAGE_SIZE):
        raise ParameterError(f"image_size must be an integer from {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} (pixels of "
                             f"the rendered frames), or None for the size of the policy's demos; got {image_size!r}")
    meta = policy.meta_
    task = task or meta.get("task")
    camera = camera or meta.get("camera", DEFAULT_CAMERA)
    image_size = int(image_size or meta.get("demo_image_size") or meta["img_size"][0])
    if render is None:
        render = RenderSettings.from_dict(meta["render"]) if "render" in meta else RenderSettings()
    if not task:
        raise TaskError("the policy does not say which task it was trained on: pass task=")
    check_task(task)
    configs = [int(c) for c in configs]
    trained = held_out_check(policy, task, configs)
    agent = VisuomotorAgent(policy, backbone)
    digest = policy_digest(policy)
    outcome: dict[int, tuple[bool, int]] = {}
    log = None
    earlier_episodes, earlier_seconds, untimed = 0, 0.0, 0
    if journal is not None:                           # what determines an episode, besides its configuration
        run = dict(policy=digest, task=task, camera=camera, image_size=image_size, max_steps=max_steps,
                   render=render.as_dict())
        log = EpisodeJournal(journal, run)
        asked = set(configs)
        outcome.update((c, v) for c, v in log.done.items() if c in asked)    # the others stay in the journal
        earlier_episodes = len(outcome)
        earlier_seconds = sum(log.seconds.get(c, 0.0) for c in outcome)
        untimed = sum(c not in log.seconds for c in outcome)
        if not log.reopened and on_new_journal is not None:
            on_new_journal()

    def gif(config: int) -> Path:
        return Path(gif_dir) / f"{task}_cfg{config}.gif"

    earlier = log is not None and log.reopened and gif_dir is not None
    kept = {c for c in outcome if earlier and log.gifs.get(c) == gif(c).name and gif(c).is_file()}   # this one's
    record = set(configs[:gif_episodes]) - kept if gif_dir else set()
    replay = [c for c in configs if c in record and c in outcome]                    # finished, GIF asked now
    queue = [c for c in configs if c not in outcome] + replay
    movies: dict[int, list[np.ndarray]] = {}
    # the bar counts configurations; GIF re-rolls of finished episodes are counted apart (gif_rerolls=done/asked)
    bar = progress_bar(total=len(configs), initial=len(outcome), desc=f"eval {task}", unit="ep",
                       disable=None if progress is None else not progress)
    stepped, rerolled, running_now = 0, 0, 0
    last = [time.monotonic()]                         # when the previous episodes of this run ended
    ended: list[tuple[int, bool, int]] = []           # episodes ended together whose lines are not written yet

    def postfix(running: int) -> None:
        extra = dict(gif_rerolls=f"{rerolled}/{len(replay)}") if replay else {}
        bar.set_postfix(steps=stepped, running=running, **extra, refresh=False)

    written: set[int] = set()

    def done(config: int, success: bool, steps: int) -> None:
        nonlocal rerolled
        if config in movies:                          # its GIF now, not at the end: a stopped run keeps it
            save_gif(movies.pop(config), gif(config))
            written.add(config)
            if log is not None:
                log.append_gif(config, gif(config).name)
        if config not in outcome:                     # else rolled out again for its GIF: the journal's outcome stands
            outcome[config] = (success, steps)
            if log is not None:
                ended.append((config, success, steps))    # its line once every episode of its step has ended
            bar.update(1)
        else:
            rerolled += 1
            postfix(running_now)
            bar.update(0)

    def write_ended() -> None:
        """The journal lines of the episodes that ended together, the time since the previous ones split evenly
        (episodes that end on the same step shared its time; a GIF re-roll's time goes to the next episodes)."""
        if not ended:
            return
        now = time.monotonic()
        share, last[0] = (now - last[0]) / len(ended), now
        while ended:
            log.append(*ended.pop(0), share)

    def step(running: int) -> None:                   # a line also between episodes, which take minutes
        nonlocal stepped, running_now
        write_ended()                                 # lockstep calls it after the `done` calls of the step
        stepped += running
        running_now = running
        postfix(running)
        bar.update(0)

    env_args = dict(name=task, camera=camera, image_size=image_size, max_steps=max_steps, render=render)
    try:
        if engine == "ray":
            _rollouts_ray(policy, backbone, queue, env_args, parallel, record, movies, done, workers, worker_threads,
                          write_ended)
        else:
            envs = [MetaWorldTask(**env_args) for _ in range(min(max(1, parallel), len(queue)))]
            try:
                lockstep(agent, envs, queue, record, movies, done, step)
            finally:
                for e in envs:
                    e.close()
    finally:                                          # episodes that ended before a stop are on disk
        write_ended()
    postfix(0)                                        # finished: no environment runs any more
    bar.close()
    gifs = [str(gif(c)) for c in configs if c in written or c in kept]
    return TaskResult(task, configs, [outcome[c][0] for c in configs], [outcome[c][1] for c in configs],
                      max_steps, gifs, policy=digest, policy_task=policy.meta_.get("task"), trained_configs=trained,
                      earlier_episodes=earlier_episodes, earlier_seconds=round(earlier_seconds, 3),
                      untimed_episodes=untimed)


def held_out_check(policy: Any, task: str, configs: Sequence[int]) -> list[int]:
    """Warn (UserWarning) when `task` is not the one the policy was trained on, and when `configs` hold some of
    the policy's training configurations (`meta_["train_configs"]`; a policy that does not record them: any
    below HELDOUT_OFFSET); returns those configurations."""
    meta = getattr(policy, "meta_", {}) or {}
    trained_task = meta.get("task")
    if trained_task and task != trained_task:
        warnings.warn(f"the policy was trained on {trained_task}, and it is evaluated on {task}: the success rate "
                      "measures transfer to another task, not the policy on its own task", stacklevel=3)
        return []
    train = meta.get("train_configs")
    seen = sorted(set(configs) & set(train)) if train is not None else [c for c in configs if c < HELDOUT_OFFSET]
    if seen:
        shown = ", ".join(map(str, seen[:5])) + (f" and {len(seen) - 5} more" if len(seen) > 5 else "")
        whose = ("the policy's training configurations (its demos)" if train is not None else
                 f"training configurations (below {HELDOUT_OFFSET})")
        warnings.warn(f"{len(seen)} of the {len(configs)} configurations evaluated ({shown}) are among {whose}: "
                      "their success is not held-out success; evaluate on held-out ones, config_seeds('heldout', n)",
                      stacklevel=3)
    return seen


def lockstep(agent: VisuomotorAgent, envs: Sequence[MetaWorldTask], configs: Sequence[int], record: set[int],
             movies: dict[int, list[np.ndarray]], done: Callable[[int, bool, int], None],
             step: Callable[[int], None] | None = None) -> None:
    """Roll out every configuration once on `envs` stepped in lockstep (one encoder batch per step); each
    finished episode's slot takes the next configuration. Frames of configurations in `record` go to
    `movies`; `done(config, success, steps)` is called as each episode ends, and `step(running)` after each
    lockstep step (`running` environments stepped), after the `done` calls of the episodes that ended on it."""
    queue = list(configs)
    n_env = min(len(envs), len(queue))
    slot_cfg: list[int | None] = [None] * n_env
    states: list[State | None] = [None] * n_env

    def assign(s: int) -> None:
        slot_cfg[s] = queue.pop(0) if queue else None
        states[s] = envs[s].reset(slot_cfg[s]) if slot_cfg[s] is not None else None
        agent.reset([s])                                                            # a new episode in slot s

    for s in range(n_env):
        assign(s)
    while any(c is not None for c in slot_cfg):
        live = [s for s in range(n_env) if slot_cfg[s] is not None]
        frames = [envs[s].render() for s in live]
        for s, f in zip(live, frames):
            if slot_cfg[s] in record:
                movies.setdefault(slot_cfg[s], []).append(f)
        proprio = np.stack([states[s].proprio for s in live])                      # (B, 4)
        actions = agent.act(frames, proprio, slots=live)                           # (B, 4)
        for s, a in zip(live, actions):
            st = envs[s].step(a)
            states[s] = st
            if st.done:
                done(slot_cfg[s], bool(st.success), int(st.steps))
                assign(s)
        if step is not None:
            step(len(live))


class EvalWorker:
    """One Ray actor of evaluations: its environments, policy and encoder, kept between calls.

    The actor outlives one evaluation (see _actor_pool), so a second evaluation on the same Ray
    session pays neither the process start nor the imports (~5 s on a 2-core machine: torch,
    torchvision, scikit-learn, MuJoCo). It rebuilds its agent when handed another policy and its
    environments when handed another task, camera or rendering.
    """

    def __init__(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        # Mesa's software renderer (llvmpipe) starts one thread per core of the machine in every
        # process; an actor holds `threads` CPUs, so its renderer gets as many (read at the first
        # GL context, which this actor has not made yet). An explicit LP_NUM_THREADS wins.
        os.environ.setdefault("LP_NUM_THREADS", str(threads))
        self.agent: VisuomotorAgent | None = None
        self.agent_key: str | None = None
        self.env_args: dict | None = None
        self.envs: list[MetaWorldTask] = []

    def ping(self) -> int:
        return os.getpid()

    def run(self, models: list, env_args: dict, parallel: int, configs: list[int],
            record: set[int]) -> tuple[list[tuple[int, bool, int]], dict]:
        """Roll out `configs` with the policy and backbone behind `models` = [policy_ref, backbone_ref]
        (refs inside a list, so that Ray hands them over unresolved and they are fetched only when
        this actor has not seen them yet)."""
        import ray

        key = models[0].hex() + models[1].hex()
        if key != self.agent_key:
            self.agent, self.agent_key = VisuomotorAgent(*ray.get(models)), key
        if env_args != self.env_args:
            for e in self.envs:
                e.close()
            self.envs, self.env_args = [], env_args
        while len(self.envs) < min(parallel, len(configs)):
            self.envs.append(MetaWorldTask(**env_args))
        results: list[tuple[int, bool, int]] = []
        movies: dict[int, list[np.ndarray]] = {}
        lockstep(self.agent, self.envs, configs, record, movies, lambda c, s, n: results.append((c, s, n)))
        return results, movies


def guided_chunk(remaining: int, workers: int, parallel: int) -> int:
    """Configurations for the next call on a free actor: a share of what is left that shrinks as the
    queue drains (guided self-scheduling), at most `parallel`, at least 1. Big chunks keep the encoder
    batched while there is plenty of work; small ones at the end leave no actor idle while another
    still runs a full chunk."""
    return max(1, min(parallel, -(-remaining // (2 * max(1, workers)))))


_POOL: dict[tuple, list] = {}       # (driver's node, job, threads) -> EvalWorker actors alive on it


def _actor_pool(ray: Any, n: int, threads: int) -> list:
    """`n` EvalWorker actors of `threads` CPUs on the connected cluster, reusing those a previous
    evaluation of this driver left alive (a new Ray session gets new ones)."""
    ctx = ray.get_runtime_context()
    key = (ctx.get_node_id(), ctx.get_job_id(), threads)                  # a node id is new with each cluster
    for k in [k for k in _POOL if k[:2] != key[:2]]:                     # actors of a session gone
        del _POOL[k]
    pool = _POOL.setdefault(key, [])
    actor = ray.remote(num_cpus=threads, max_restarts=3, max_task_retries=3)(EvalWorker)
    pool.extend(actor.remote(threads) for _ in range(n - len(pool)))
    return pool[:n]


def release_workers(ray: Any = None) -> None:
    """Kill the Ray actors that `evaluate(..., engine="ray")` keeps for the next evaluation on the same cluster.

    Called after a failed evaluation (its actors may still be running its chunks); call it yourself to free
    their CPUs or to time an evaluation that starts its actors afresh. Does nothing when none are kept.
    """
    if not _POOL:
        return
    if ray is None:
        import ray
    for actors in _POOL.values():
        for a in actors:
            ray.kill(a)
    _POOL.clear()


def _rollouts_ray(policy: Any, backbone: Any, queue: list[int], env_args: dict, parallel: int, record: set[int],
                  movies: dict, done: Callable[[int, bool, int], None], workers: int | None, threads: int,
                  chunk_done: Callable[[], None] = lambda: None) -> None:
    """The episodes of `queue` on Ray actors (kept for the next evaluation of this Ray session), in
    guided chunks (guided_chunk), results as they come: `done` for each episode of a chunk, then `chunk_done()`."""
    from frozenvit.backbone.suite.engine import cluster_cpus, ray_session

    if not queue:
        return
    with ray_session(num_cpus=workers) as ray:
        n = min(workers or cluster_cpus(ray), len(queue))
        pool = _actor_pool(ray, n, threads)
        models = [ray.put(policy), ray.put(backbone)]
        left = list(queue)
        pending = {}

        def send(a: Any) -> None:
            k = guided_chunk(len(left), n, parallel)
            chunk, left[:k] = left[:k], []
            pending[a.run.remote(models, env_args, parallel, chunk, record & set(chunk))] = a

        for a in pool:
            send(a)
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                a = pending.pop(ready[0])
                results, got = ray.get(ready[0])
                movies.update(got)                    # before `done`, which writes each episode's GIF
                for c, s, k in results:
                    done(c, s, k)
                chunk_done()
                if left:
                    send(a)
        except BaseException:
            release_workers(ray)
            raise


class EpisodeJournal:
    """Finished episodes of one evaluation, one JSON line each after a header line naming the run.

    The run (`run`, the header's) is what determines an episode besides its configuration: policy digest, task,
    camera, frame size, cap, rendering. The configurations are not part of it (a "configs" key, which journals
    written before this recorded, is not compared): one journal holds the episodes of any configurations of the
    same run, so that evaluations of more or fewer configurations share them. Each line is appended and flushed
    to disk as its episode ends, so a killed evaluation loses at most the episodes in flight; a line cut short by
    the kill is dropped when the journal is reopened. Each line carries a check that chains it to the header and
    the lines before it, so a journal changed by hand (an outcome flipped, a line removed or moved) is an
    OutputConflict rather than episodes taken as done. A journal of another run (its header records another
    policy, task, ...) is replaced by a new one, with a warning naming what differs, its values there and now, and
    how many episodes go (`replaced` lists the keys); a file that is no journal is an OutputConflict and left
    alone. A line {"gif": config, "file": name, "check": ...} records a GIF the evaluation wrote (chained like the
    episodes'); `gifs` maps each configuration to its GIF's file name. An episode line may carry "seconds"
    (wall-clock seconds since the previous episodes of its run ended, split evenly among the episodes that ended
    together, covered by its check); `seconds` maps each configuration whose line has one to it (lines written
    before the times have none, and stay readable).
    """

    def __init__(self, path: str | Path, run: dict[str, Any]) -> None:
        self.path = Path(path)
        self.done: dict[int, tuple[bool, int]] = {}
        self.gifs: dict[int, str] = {}               # configuration -> file name of the GIF this evaluation wrote
        self.seconds: dict[int, float] = {}           # configuration -> seconds its episode line records
        self.replaced: list[str] = []                 # what differed in the other evaluation whose journal this replaced
        self.reopened = self.path.exists()            # a journal an earlier run of this evaluation wrote
        self._check = ""                              # the last line's check, which the next line's extends
        if not self.reopened:
            self._start(run)
            return
        raw = self.path.read_bytes()
        *lines, partial = raw.split(b"\n")            # after the last newline: a line a kill cut short
        try:
            head = json.loads(lines[0]) if lines else None
            records = [json.loads(ln) for ln in lines[1:]]
            done = {int(r["config"]): (bool(r["success"]), int(r["steps"])) for r in records if "gif" not in r}
            gifs = {int(r["gif"]): str(r["file"]) for r in records if "gif" in r}
            seconds = {int(r["config"]): float(r["seconds"]) for r in records if "gif" not in r and "seconds" in r}
        except (ValueError, KeyError, TypeError, AttributeError):
            head = None
        if not isinstance(head, dict) or head.get("frozenvit") != JOURNAL_KIND:
            raise OutputConflict(f"{self.path} exists and is not an episode journal of `frozenvit control evaluate`; "
                                 "choose another --out")
        old = head.get("run") if isinstance(head.get("run"), dict) else {}
        if _episode_run(old) != _episode_run(run):    # another run's episodes: this one replaces them
            now, then = _episode_run(run), _episode_run(old)
            diff = sorted(k for k in now.keys() | then.keys() if then.get(k) != now.get(k)) or ["run"]
            values = "; ".join(f"{k} {_shown(k, then.get(k))} there, {_shown(k, now.get(k))} now" for k in diff
                               if k != "run")
            n = len(done)
            self.replaced = diff
            self.reopened = False
            self._start(run)
            warnings.warn(f"{self.path} held the episodes of another evaluation ({', '.join(diff)} "
                          f"{'differs' if len(diff) == 1 else 'differ'}); they were replaced by this one's"
                          f"{f' ({values})' if values else ''}: its {n} episode{'s' * (n != 1)} "
                          f"{'were' if n != 1 else 'was'} dropped, and every configuration asked is rolled out "
                          "anew; to keep both evaluations, give each its own folder", stacklevel=2)
            return
        if not head.get("chained"):                   # GIF lines came with the checks: an older journal lists none
            gifs = {}
        if head.get("chained"):                       # journals written before the checks have none to verify
            check = _link("", lines[0].decode())
            for n, r in enumerate(records, start=2):
                check = _link(check, _gif_line(r) if "gif" in r else _episode_line(r))
                if r.get("check") != check:
                    raise OutputConflict(
                        f"{self.path} was changed after frozenvit wrote it (line {n} does not match its check): "
                        "restore it, delete it to roll every episode out again, or choose another --out")
            self._check = check
        if partial:
            with open(self.path, "r+b") as f:
                f.truncate(len(raw) - len(partial))
        self.done = done
        self.gifs = gifs
        self.seconds = seconds

    def _start(self, run: dict[str, Any]) -> None:
        """A new journal holding only the header (an existing file is replaced atomically)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        head = json.dumps({"frozenvit": JOURNAL_KIND, "run": run, "chained": True})
        self._check = _link("", head)
        atomic_write_text(self.path, head + "\n", record=False)  # appended to

    def append(self, config: int, success: bool, steps: int, seconds: float | None = None) -> None:
        """Record a finished episode; `seconds`: the wall-clock time it took this run (see the class)."""
        episode = dict(config=int(config), success=bool(success), steps=int(steps))
        if seconds is not None:
            episode["seconds"] = round(float(seconds), 3)
            self.seconds[int(config)] = episode["seconds"]
        self._write(episode, _episode_line(episode))
        self.done[int(config)] = (bool(success), int(steps))

    def append_gif(self, config: int, name: str) -> None:
        """Record that this evaluation wrote the GIF `name` (a file name in its GIF folder) of `config`."""
        record = {"gif": int(config), "file": str(name)}
        self._write(record, _gif_line(record))
        self.gifs[int(config)] = str(name)

    def _write(self, record: dict[str, Any], covered: str) -> None:
        check = _link(self._check, covered)
        line = json.dumps(dict(record, check=check)) + "\n"
        with open(self.path, "ab") as f:
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())
        self._check = check


def _episode_run(run: dict[str, Any]) -> dict[str, Any]:
    """The part of a journal's run that determines its episodes: all of it but the configurations."""
    return {k: v for k, v in run.items() if k != "configs"}


def _shown(key: str, value: Any) -> str:
    """A run's value as the replacement warning shows it: a policy digest by its first 12 hex digits."""
    if value is None:
        return "not recorded"
    if key == "policy" and isinstance(value, str):
        return value[:12]
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def journal_listing(path: str | Path) -> tuple[list[int], dict[int, str]]:
    """The configurations whose episodes the journal `path` holds, and the GIF file name it lists for each
    configuration that has one; ([], {}) for no journal. Reads what `evaluate` checked (it does not check the
    lines itself): `control evaluate` keeps the GIFs of configurations not asked this time."""
    path = Path(path)
    if not path.is_file():
        return [], {}
    episodes, gifs = [], {}
    for line in path.read_bytes().split(b"\n")[1:]:
        try:
            r = json.loads(line)
            if "gif" in r:
                gifs[int(r["gif"])] = str(r["file"])
            else:
                episodes.append(int(r["config"]))
        except (ValueError, KeyError, TypeError):
            continue                                  # a line cut short, or the empty one after the last newline
    return episodes, gifs


def _episode_line(record: dict[str, Any]) -> str:
    """The part of a journal line its check covers: the episode as written (its seconds where it has them: a line
    written before the times is covered as it was)."""
    keys = ("config", "success", "steps") + (("seconds",) if "seconds" in record else ())
    return json.dumps({k: record.get(k) for k in keys})


def _gif_line(record: dict[str, Any]) -> str:
    """The part of a GIF line its check covers: the configuration and the file name."""
    return json.dumps({k: record.get(k) for k in ("gif", "file")})


def _link(previous: str, text: str) -> str:
    """A line's check: the previous check and this line's text, hashed (16 hex digits)."""
    return hashlib.sha256(f"{previous}\n{text}".encode()).hexdigest()[:16]


def save_gif(frames: Sequence[np.ndarray], path: str | Path, fps: int = 20, every: int = 2) -> Path:
    """Write frames (H, W, 3) uint8 as an animated GIF (every `every`-th frame)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ims = [Image.fromarray(f) for f in frames[::every]] or [Image.fromarray(frames[-1])]
    buf = io.BytesIO()
    ims[0].save(buf, format="GIF", save_all=True, append_images=ims[1:], duration=int(1000 * every / fps), loop=0)
    atomic_write_bytes(path, buf.getvalue())
    return path


def rollout_timed(agent: VisuomotorAgent, env: MetaWorldTask, config: int, timer: StageTimer,
                  max_steps: int | None = None) -> State:
    """One episode with every stage of the loop timed: render, preprocess, encode, head, step."""
    state = env.reset(config)
    agent.reset()
    limit = max_steps or env.max_steps
    while not state.done and state.steps < limit:
        with timer("total"):
            with timer("render"):
                frame = env.render()
            action = agent.act([frame], state.proprio[None], timer=timer)[0]
            with timer("step"):
                state = env.step(action)
    return state
