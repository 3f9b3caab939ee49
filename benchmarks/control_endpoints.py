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
    ap.add_argument("--png", default=None,
                    help="also draw where each query of the first attention policy looks on the first frame of "
                         "3 configurations (default: beside the JSON)")
    args = ap.parse_args()

    import torch

    from frozenvit.backbone import load_backbone
    from frozenvit.control import MetaWorldTask, PatchTokenPolicy, VisuomotorAgent, config_seeds

    torch.set_num_threads(args.threads)
    bb = None
    runs, rows, first_attention = [], [], None
    for path in args.policies:
        pol = PatchTokenPolicy.load(path)
        if bb is None or list(bb.config.img_size) != pol.meta_["img_size"]:
            bb = load_backbone(img_size=pol.meta_["img_size"][0])
        agent = VisuomotorAgent(pol, bb)
        if pol.pooling == "attention" and first_attention is None:
            first_attention = (pol, bb)
        episodes = []
        with MetaWorldTask(pol.meta_["task"], camera=pol.meta_.get("camera", "corner"),
                           image_size=int(pol.meta_.get("demo_image_size") or pol.meta_["img_size"][0]),
                           max_steps=args.max_steps) as env:
            for c in config_seeds("heldout", args.configs, start=args.heldout_start):
                st = env.reset(c)
                agent.reset()
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
    path = write_result("control_endpoints", dict(settings=vars(args), summary=rows, runs=runs), args.out)
    if first_attention is not None:
        png = Path(args.png) if args.png else path.with_suffix(".png")
        query_maps(*first_attention, config_seeds("heldout", 3, start=args.heldout_start), png)
        print("attention maps:", png)
    return 0


def query_maps(pol, bb, configs: list[int], png: Path) -> None:
    """One row per configuration: its first frame, then each query's attention (mean over heads)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from frozenvit.control import MetaWorldTask, VisuomotorAgent

    head = pol.head_
    h, w = bb.config.grid
    Q = head.pool.num_queries
    fig, axes = plt.subplots(len(configs), Q + 1, figsize=(2.2 * (Q + 1), 2.3 * len(configs)), squeeze=False)
    with MetaWorldTask(pol.meta_["task"], camera=pol.meta_.get("camera", "corner"),
                       image_size=bb.config.img_size[0]) as env:
        for row, c in enumerate(configs):
            env.reset(c)
            frame = env.render()
            tokens, _ = VisuomotorAgent(pol, bb).encode([frame])                     # (1, N, C)
            att = head.query_attention(tokens)                                       # (1, H, Q, N)
            axes[row, 0].imshow(frame)
            axes[row, 0].set_title(f"config {c}", fontsize=8)
            for q in range(Q):
                a = att[0, :, q].mean(0).reshape(h, w).numpy()
                up = Image.fromarray((a / a.max() * 255).astype(np.uint8)).resize(frame.shape[:2][::-1], Image.BILINEAR)
                axes[row, q + 1].imshow(frame)
                axes[row, q + 1].imshow(np.asarray(up), cmap="magma", alpha=0.6)
                axes[row, q + 1].set_title(f"query {q}", fontsize=8)
    for a in axes.flat:
        a.axis("off")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)


if __name__ == "__main__":
    sys.exit(main())
