"""Which way do reach heads miss the goal: along the corner camera's ray, or across it? (issue 21: a diagnosis)

One corner camera cannot tell where along its ray a floating goal is (control/RESULTS.md, "Can the encoder see
the goal?"). If that is what limits reach-v3, a head's misses lie along the ray through the goal, and no head
reading that one view can do better than a policy that goes straight to the most likely point of the ray.
This script measures both:

* the ceiling: for each held-out goal, the stretch of the ray from the camera through the goal that lies in
  the task's goal box (every goal on it looks the same from the camera) is L long; a policy that goes to
  the middle of that stretch and stops succeeds with probability min(1, 2 r / L), r the success radius (5 cm).
  A policy that searched along the ray would not be bound by it; the scripted expert, and so its imitators,
  go straight to the goal. Only resets are simulated: seconds.
* the misses (with --run): one head of a finished `control_success.py` run replays held-out configurations
  (the same episodes as in the run: control.evaluate acts row by row, and each replay's outcome is checked
  against the run's) and the hand's offset from the goal where it came closest is split into its part along
  the ray and its part across it.
* whether the head reads the puck (with --run and --puck centre): reach-v3's scene also holds a puck, placed
  at random and irrelevant to the task, a small red shape like the goal. The replays put it at the middle of
  its range after each reset; the episodes' outcomes are paired with the run's (exact McNemar). A head that
  reads only the goal keeps its outcomes.

    .venv/bin/python benchmarks/control_reach_error.py --threads 1 \\
        --run benchmarks/results/control_success_X.json:0:WORK/policies/reach-v3_..._s0_...
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from common import print_table, write_result

TASK = "reach-v3"
GOAL = slice(36, 39)          # Meta-World v3 state: the goal's xyz
RADIUS = 0.05                 # reach-v3 succeeds with the hand within 5 cm of the goal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default=None, metavar="RESULT_JSON:SEED:POLICY_DIR",
                    help="a control_success.py result with reach-v3, a seed, and the folder of that seed's head")
    ap.add_argument("--camera", default="corner")
    ap.add_argument("--configs", type=int, default=50, help="held-out configurations for the ceiling (from the first)")
    ap.add_argument("--episodes", type=int, default=50, help="held-out configurations replayed with the head")
    ap.add_argument("--puck", choices=("keep", "centre"), default="keep",
                    help="with --run: 'centre' moves reach-v3's puck to the middle of its range after each reset")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/control_reach_error.json)")
    args = ap.parse_args(argv)
    if args.run and len(args.run.split(":", 2)) != 3:
        raise SystemExit(f"--run {args.run!r}: give RESULT_JSON:SEED:POLICY_DIR")
    out = dict(task=TASK, camera=args.camera, radius_m=RADIUS, ceiling=ceiling(args.camera, args.configs))
    c = out["ceiling"]
    print(f"ceiling over {c['configs']} held-out goals: {c['straight_policy_success']:.3f} "
          f"(stretch of the ray in the goal box: median {100 * c['stretch_median_m']:.1f} cm)", flush=True)
    if args.run:
        import torch

        torch.set_num_threads(args.threads)
        out["misses"] = replay(*args.run.split(":", 2), camera=args.camera, episodes=args.episodes, puck=args.puck)
        print_table(out["misses"]["summary"], floatfmt="{:.3g}")
        m = out["misses"]
        print(f"puck {args.puck}: {m['successes']} / {m['replayed']} succeed (the run: {m['run_successes']}); "
              f"only in the run {m['only_run']}, only in the replay {m['only_replay']}, p = {m['mcnemar_p']:.3g}")
    write_result("control_reach_error", dict(run=args.run, **out), args.out)
    return 0


def camera_position(env, camera: str) -> np.ndarray:
    import mujoco

    cam = mujoco.mj_name2id(env.env.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    if cam < 0:
        raise SystemExit(f"no camera named {camera!r} in {TASK}")
    return np.array(env.env.data.cam_xpos[cam], dtype=np.float64)


def stretch_in_box(origin: np.ndarray, through: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """Length of the line from `origin` through `through` that lies inside the box [lo, hi] (slab method)."""
    d = through - origin
    d = d / np.linalg.norm(d)
    t0, t1 = -np.inf, np.inf
    for k in range(3):
        if abs(d[k]) < 1e-12:
            if not lo[k] <= origin[k] <= hi[k]:
                return 0.0
            continue
        a, b = (lo[k] - origin[k]) / d[k], (hi[k] - origin[k]) / d[k]
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
    return float(max(0.0, t1 - t0))


def ceiling(camera: str, n: int) -> dict:
    from frozenvit.control import MetaWorldTask, config_seeds

    with MetaWorldTask(TASK, render=None) as env:
        goals = []
        for config in config_seeds("heldout", n):
            s = env.reset(config)
            goals.append(np.array(s.full[GOAL], dtype=np.float64))
        cam = camera_position(env, camera)
        space = env.env._random_reset_space                    # object xyz, then goal xyz
        lo, hi = np.asarray(space.low[3:], np.float64), np.asarray(space.high[3:], np.float64)
    stretch = np.array([stretch_in_box(cam, g, lo, hi) for g in goals])
    p = np.minimum(1.0, 2 * RADIUS / np.maximum(stretch, 1e-9))
    return dict(configs=n, camera_position=cam.tolist(), goal_box=[lo.tolist(), hi.tolist()],
                straight_policy_success=float(p.mean()), stretch_median_m=float(np.median(stretch)),
                stretch_min_m=float(stretch.min()), stretch_max_m=float(stretch.max()),
                per_config_stretch_m=stretch.round(4).tolist())


def replay(result_json: str, seed: str, policy_dir: str, *, camera: str, episodes: int, puck: str = "keep") -> dict:
    import mujoco
    from scipy.stats import binomtest

    from frozenvit.backbone import load_backbone
    from frozenvit.control import MetaWorldTask, PatchTokenPolicy, VisuomotorAgent, config_seeds
    from frozenvit.control.env import HELDOUT_OFFSET

    run = json.loads(Path(result_json).read_text())
    head = [r for r in run["results"] if r["task"] == TASK and r.get("seed", 0) == int(seed)
            and r["pooling"] == "attention"]
    if not head:
        raise SystemExit(f"{result_json} holds no attention head of {TASK} at seed {seed}")
    first = run["settings"]["heldout_seeds"][0]
    held = config_seeds("heldout", len(head[0]["per_config"]), start=first - HELDOUT_OFFSET)[:episodes]
    pol = PatchTokenPolicy.load(policy_dir)
    if pol.meta_.get("task") != TASK or pol.meta_.get("camera", "corner") != camera:
        raise SystemExit(f"{policy_dir} is a head of {pol.meta_.get('task')} on {pol.meta_.get('camera')}, "
                         f"not {TASK} on {camera}")
    agent = VisuomotorAgent(pol, load_backbone(None))
    rows = []
    with MetaWorldTask(TASK, camera=camera, max_steps=int(run["settings"]["max_steps"])) as env:
        for config, ok in zip(held, head[0]["per_config"]):
            s = env.reset(config)
            if puck == "centre":
                space = env.env._random_reset_space
                env.env._set_obj_xyz((np.asarray(space.low[:3]) + np.asarray(space.high[:3])) / 2)
                mujoco.mj_forward(env.env.model, env.env.data)
            agent.reset()
            cam, goal = camera_position(env, camera), np.array(s.full[GOAL], dtype=np.float64)
            ray = (goal - cam) / np.linalg.norm(goal - cam)
            hand = []                 # the point reach-v3 scores: between the fingertips (the state's xyz is the hand's body)
            while not s.done:
                a = agent.act([env.render()], s.proprio[None])[0]
                s = env.step(a)
                hand.append(np.array(env.env.tcp_center, dtype=np.float64))
            off = np.asarray(hand) - goal                                        # (T, 3)
            i = int(np.argmin(np.linalg.norm(off, axis=1)))
            along = float(off[i] @ ray)
            rows.append(dict(config=config, success=bool(s.success), run_success=bool(ok),
                             closest_m=float(np.linalg.norm(off[i])), along_m=along,
                             across_m=float(np.linalg.norm(off[i] - along * ray)), steps=int(s.steps)))
            print(json.dumps(rows[-1]), flush=True)
    summary = []
    for label, keep in (("failed", [not r["success"] for r in rows]), ("succeeded", [r["success"] for r in rows])):
        sel = [r for r, k in zip(rows, keep) if k]
        if sel:
            summary.append(dict(episodes=label, n=len(sel),
                                closest_cm=100 * float(np.median([r["closest_m"] for r in sel])),
                                along_abs_cm=100 * float(np.median([abs(r["along_m"]) for r in sel])),
                                across_cm=100 * float(np.median([r["across_m"] for r in sel])),
                                along_larger=int(sum(abs(r["along_m"]) > r["across_m"] for r in sel))))
    only_run = sum(r["run_success"] and not r["success"] for r in rows)
    only_replay = sum(r["success"] and not r["run_success"] for r in rows)
    p = binomtest(only_run, only_run + only_replay).pvalue if only_run + only_replay else 1.0
    return dict(seed=int(seed), policy=policy_dir, puck=puck, replayed=len(rows),
                successes=int(sum(r["success"] for r in rows)), run_successes=int(sum(r["run_success"] for r in rows)),
                replays_as_in_run=int(sum(r["success"] == r["run_success"] for r in rows)),
                only_run=int(only_run), only_replay=int(only_replay), mcnemar_p=float(p),
                summary=summary, episodes=rows)


if __name__ == "__main__":
    raise SystemExit(main())
