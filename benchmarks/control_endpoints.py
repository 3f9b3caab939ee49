"""Where failing reach rollouts end: do the policies read the goal from the frame, or fall back to one place?

Rolls saved policies out on held-out reach configurations and records, per episode, the goal,
the hand's start, closest approach and final position (hand = proprioception; Meta-World judges
success at the gripper centre, a few cm away). If the failures of a policy end near one point for
many different goals, it is not locating the goal in the image.

    .venv/bin/python benchmarks/control_endpoints.py --policies runs/control_success/policies/reach-v3_..._s0 ...
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from common import RESULTS, print_table, write_result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", nargs="+", required=True, help="saved reach policy folders")
    ap.add_argument("--configs", type=int, default=8)
    ap.add_argument("--heldout-start", type=int, default=500, help="default: the validation configurations")
    ap.add_argument("--max-steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help=f"JSON path (default {RESULTS}/control_endpoints.json)")
    args = ap.parse_args()

    import torch

    from backbone import load_backbone
    from control import MetaWorldTask, VisuomotorAgent, config_seeds, load_policy

    torch.set_num_threads(args.threads)
    bb = None
    runs, rows = [], []
    for path in args.policies:
        pol = load_policy(path)
        if bb is None or list(bb.config.img_size) != pol.meta_["img_size"]:
            bb = load_backbone(img_size=pol.meta_["img_size"][0])
        agent = VisuomotorAgent(pol, bb)
        episodes = []
        with MetaWorldTask(pol.meta_["task"], camera=pol.meta_.get("camera", "corner"),
                           image_size=int(pol.meta_.get("demo_image_size") or pol.meta_["img_size"][0]),
                           max_steps=args.max_steps) as env:
            for c in config_seeds("heldout", args.configs, start=args.heldout_start):
                agent.reset()
                st = env.reset(c)
                goal = st.full[-3:].copy()                                          # reach: goal xyz ends the state
                start, closest = st.proprio[:3].copy(), np.inf
                while not st.done:
                    st = env.step(agent.act([env.render()], st.proprio[None])[0])
                    closest = min(closest, float(np.linalg.norm(st.proprio[:3] - goal)))
                episodes.append(dict(config=c, success=st.success, steps=st.steps, goal=goal.tolist(),
                                     start=start.tolist(), end=st.proprio[:3].tolist(), closest=closest,
                                     end_distance=float(np.linalg.norm(st.proprio[:3] - goal))))
        fails = np.array([e["end"] for e in episodes if not e["success"]])                   # (F, 3)
        spread = float(np.linalg.norm(fails - fails.mean(0), axis=1).mean()) if len(fails) else float("nan")
        goals = np.array([e["goal"] for e in episodes if not e["success"]])
        goal_spread = float(np.linalg.norm(goals - goals.mean(0), axis=1).mean()) if len(goals) else float("nan")
        rows.append(dict(policy=Path(path).name[-40:], successes=sum(e["success"] for e in episodes),
                         episodes=len(episodes), failure_end_spread_cm=100 * spread,
                         failure_goal_spread_cm=100 * goal_spread,
                         failures_passing_within_5cm=sum(e["closest"] < 0.05 for e in episodes if not e["success"])))
        runs.append(dict(policy=str(path), episodes=episodes))
    print_table(rows)
    write_result("control_endpoints", dict(settings=vars(args), summary=rows, runs=runs), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
