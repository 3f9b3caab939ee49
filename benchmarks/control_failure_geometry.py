"""Which held-out configurations do the heads of a finished success run fail on? (issue 21: a diagnosis)

For each task of a `control_success.py` result JSON, the held-out configurations are split into those
most heads solved (success in >= half of the seeds) and the rest, and the two groups are compared
(Mann-Whitney U) on where the goal and the object are: the distance to the nearest goal (object) among
the training demos, the distance to the demos' mean goal, and the offset along the ray on which the
default `corner` camera cannot tell goal positions apart (control/RESULTS.md, "Can the encoder see the
goal?"). A head that interpolates fails where no demo was close; one that cannot see depth fails along
the ray. Only resets are simulated (nothing is rendered or encoded): seconds per task.

    .venv/bin/python benchmarks/control_failure_geometry.py \
        --run benchmarks/results/control_success_views4.json:reach-v3:WORK/demos/reach-v3_corner_224px_hold20
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from common import print_table, write_result

CORNER_RAY = (0.64, 0.73, -0.25)   # null direction of the corner camera's image Jacobian (reach-v3 in control_goal_geometry.json)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", nargs="+", required=True, metavar="RESULT_JSON:TASK:DEMO_DIR",
                    help="a control_success.py result, one of its tasks, and the demo folder its heads trained on")
    ap.add_argument("--pooling", default="attention")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/control_failure_geometry.json)")
    args = ap.parse_args(argv)
    rows = [analyse(*spec.split(":"), pooling=args.pooling) for spec in args.run]
    print_table([{k: v for k, v in r.items() if not isinstance(v, dict)} | flat(r) for r in rows], floatfmt="{:.3g}")
    write_result("control_failure_geometry", dict(runs=args.run, pooling=args.pooling, corner_ray=CORNER_RAY,
                                                  results=rows), args.out)
    return 0


def analyse(result_json: str, task: str, demo_dir: str, *, pooling: str = "attention") -> dict:
    from scipy.stats import mannwhitneyu

    from frozenvit.control import MetaWorldTask, config_seeds
    from frozenvit.control.demos import load_manifest
    from frozenvit.control.env import HELDOUT_OFFSET

    run = json.loads(Path(result_json).read_text())
    heads = [r for r in run["results"] if r["task"] == task and r["pooling"] == pooling]
    if not heads:
        raise SystemExit(f"{result_json} holds no {pooling} heads of {task}")
    first, last = run["settings"]["heldout_seeds"]
    held = config_seeds("heldout", len(heads[0]["per_config"]), start=first - HELDOUT_OFFSET)
    if held[-1] != last:
        raise SystemExit(f"{result_json}: held-out configurations {first}..{last} are not consecutive")
    solved = np.mean([h["per_config"] for h in heads], 0) >= 0.5                       # (configs,)
    demos = [e["config"] for e in load_manifest(demo_dir)["episodes"]]
    with MetaWorldTask(task, render=None, max_steps=10) as env:
        def where(configs: list[int]) -> tuple[np.ndarray, np.ndarray]:
            full = np.array([env.reset(c).full for c in configs])
            return full[:, -3:], full[:, 4:7]                                            # goal, object (x, y, z)
        goal_tr, obj_tr = where(demos)
        goal_te, obj_te = where(held)
    ray = np.asarray(CORNER_RAY) / np.linalg.norm(CORNER_RAY)
    centre = goal_tr.mean(0)
    measures = {
        "goal: nearest demo goal (cm)": _nearest(goal_te, goal_tr),
        "goal: mean demo goal (cm)": np.linalg.norm(goal_te - centre, axis=1) * 100,
        "goal: |offset along corner ray| (cm)": np.abs((goal_te - centre) @ ray) * 100,
        "object: nearest demo object (cm)": _nearest(obj_te, obj_tr),
    }
    out = dict(task=task, result=result_json, heads=len(heads), configs=len(held), solved=int(solved.sum()))
    for name, x in measures.items():
        both = solved.any() and (~solved).any()
        out[name] = dict(solved=float(x[solved].mean()) if solved.any() else None,
                         failed=float(x[~solved].mean()) if (~solved).any() else None,
                         p=float(mannwhitneyu(x[solved], x[~solved]).pvalue) if both else None)
    return out


def _nearest(test: np.ndarray, train: np.ndarray) -> np.ndarray:
    return np.min(np.linalg.norm(test[:, None] - train[None], axis=2), 1) * 100


def flat(r: dict) -> dict:
    return {k.split(" (")[0]: f"{v['solved']:.1f} / {v['failed']:.1f} (p {v['p']:.2g})" for k, v in r.items()
            if isinstance(v, dict) and v["p"] is not None}


if __name__ == "__main__":
    sys.exit(main())
