"""Where in the episode do a head's failures go wrong? (issue 21: a diagnosis of the grasping tasks)

Replays held-out configurations that one head of a finished `control_success.py` run failed, with that head,
and follows the object: was it ever lifted (more than --lift m above where it started), was it dropped (lifted,
then back within 1 cm of its start height at the end), or carried to the wrong place (still up at the end, how
far from the goal)? It also records the head's gripper command while the hand is near the object and while
the object is up, against the scripted expert's on the same states. Episodes are replayed one at a time;
the evaluation's lockstep gives the same episodes (control.evaluate acts row by row), and the script checks
that each replay fails as it did in the run. Heads of the embedded default encoder only (another encoder's head is refused
by the agent's backbone check).

    .venv/bin/python benchmarks/control_failure_phases.py --threads 1 --episodes 8 \\
        --run benchmarks/results/control_success_eight_new4_v3.json:pick-place-v3:0:WORK/policies/pick-place-v3_..._s0_...
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from common import print_table, write_result

OBJECT, GOAL = slice(4, 7), slice(36, 39)       # Meta-World v3 state: the first object's xyz, the goal's xyz
NEAR = 0.07                                     # hand-object distance (m) at which the experts grip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", nargs="+", required=True, metavar="RESULT_JSON:TASK:SEED:POLICY_DIR",
                    help="a control_success.py result, one of its tasks, a seed, and the folder of that seed's head")
    ap.add_argument("--episodes", type=int, default=8, help="failed configurations replayed per head (the first ones)")
    ap.add_argument("--lift", type=float, default=0.02, help="metres above its start that count as lifted")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/control_failure_phases.json)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    for spec in args.run:
        if len(spec.split(":", 3)) != 4:
            raise SystemExit(f"--run {spec!r}: give RESULT_JSON:TASK:SEED:POLICY_DIR")
    results = [replay(*spec.split(":", 3), episodes=args.episodes, lift=args.lift) for spec in args.run]
    print_table([{k: v for k, v in r.items() if k != "episodes"} for r in results], floatfmt="{:.3g}")
    write_result("control_failure_phases", dict(runs=args.run, lift_m=args.lift, near_m=NEAR, results=results), args.out)
    return 0


def replay(result_json: str, task: str, seed: str, policy_dir: str, *, episodes: int, lift: float) -> dict:
    from frozenvit.backbone import load_backbone
    from frozenvit.control import MetaWorldTask, PatchTokenPolicy, VisuomotorAgent, config_seeds
    from frozenvit.control.env import HELDOUT_OFFSET

    run = json.loads(Path(result_json).read_text())
    head = [r for r in run["results"] if r["task"] == task and r.get("seed", 0) == int(seed)
            and r["pooling"] == "attention"]
    if not head:
        raise SystemExit(f"{result_json} holds no attention head of {task} at seed {seed}")
    first = run["settings"]["heldout_seeds"][0]
    held = config_seeds("heldout", len(head[0]["per_config"]), start=first - HELDOUT_OFFSET)
    failed = [c for c, ok in zip(held, head[0]["per_config"]) if not ok][:episodes]
    pol = PatchTokenPolicy.load(policy_dir)
    if pol.meta_.get("task") != task:
        raise SystemExit(f"{policy_dir} is a head of {pol.meta_.get('task')}, not {task}")
    agent = VisuomotorAgent(pol, load_backbone(None))
    rows = []
    with MetaWorldTask(task, max_steps=int(run["settings"]["max_steps"])) as env:
        for config in failed:
            s = env.reset(config)
            agent.reset()
            z0, obj, hand, goal, ours, expert = s.full[6], [], [], [], [], []
            while not s.done:
                a = agent.act([env.render()], s.proprio[None])[0]
                obj.append(s.full[OBJECT]), hand.append(s.full[:3]), goal.append(s.full[GOAL])
                ours.append(a[-1]), expert.append(env.expert_action(s)[-1])
                s = env.step(a)
            obj, hand, goal, ours, expert = map(np.asarray, (obj, hand, goal, ours, expert))
            up = obj[:, 2] > z0 + lift                                                  # (T,)
            near = np.linalg.norm(hand - obj, axis=1) < NEAR
            lifted = bool(up.any())
            phase = ("never lifted" if not lifted else "dropped" if obj[-1, 2] < z0 + 0.01
                     else "carried, missed the goal")
            rows.append(dict(config=config, replay_failed=not s.success, phase=phase,
                             max_lift_m=float(obj[:, 2].max() - z0),
                             closest_hand_object_m=float(np.linalg.norm(hand - obj, axis=1).min()),
                             object_goal_end_m=float(np.linalg.norm(obj[-1] - goal[-1])),
                             hand_goal_end_m=float(np.linalg.norm(hand[-1] - goal[-1])),
                             grip_near_head=float(ours[near].mean()) if near.any() else None,
                             grip_near_expert=float(expert[near].mean()) if near.any() else None,
                             grip_lifted_head=float(ours[up].mean()) if lifted else None))
            print(json.dumps(rows[-1]), flush=True)
    phases = [r["phase"] for r in rows]
    return dict(task=task, seed=int(seed), replayed=len(rows),
                replays_that_failed=sum(r["replay_failed"] for r in rows),
                never_lifted=phases.count("never lifted"), dropped=phases.count("dropped"),
                carried_missed=phases.count("carried, missed the goal"), episodes=rows)


if __name__ == "__main__":
    raise SystemExit(main())
