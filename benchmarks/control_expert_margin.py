"""How close do the scripted demonstrators bring what a task scores to its goal? (issue 21: a diagnosis)

A demo is imitated, so where its expert stops is where a good head stops. For each task, each demonstrator
(control.EXPERTS: the library's default, and Meta-World's own) runs on the training configurations the demos
use, without rendering, for `--hold-steps` steps past its first success as `control collect` records them, and
the distance the task scores (Meta-World's info["obj_to_target"]: the fingertips to the goal on reach-v3, the
object to the goal on pick-place-v3, the peg's head to the hole, weighted, on peg-insert-side-v3) is read at
the demo's last step. Seconds per task.

    .venv/bin/python benchmarks/control_expert_margin.py --tasks reach-v3 pick-place-v3 peg-insert-side-v3 \\
        --out benchmarks/results/control_expert_margin.json
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

from common import print_table, write_result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["reach-v3", "pick-place-v3", "peg-insert-side-v3"])
    ap.add_argument("--configs", type=int, default=25, help="training configurations (the demos' 0..N-1)")
    ap.add_argument("--hold-steps", type=int, default=20, help="steps past the first success, as the demos")
    ap.add_argument("--max-steps", type=int, default=500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from frozenvit.control import EXPERTS, config_seeds

    rows, episodes = [], []
    for task in args.tasks:
        for expert in EXPERTS:
            eps = [run_expert(task, expert, c, args.hold_steps, args.max_steps)
                   for c in config_seeds("train", args.configs)]
            episodes += eps
            rows.append(summarise(eps))
    print_table(rows)
    write_result("control_expert_margin", dict(settings=vars(args), summary=rows, episodes=episodes), args.out)
    return 0


def run_expert(task: str, expert: str, config: int, hold_steps: int, max_steps: int) -> dict:
    """One demo's worth of the expert on `config`: its first success, and the scored distance at its end."""
    from frozenvit.control import MetaWorldTask
    from frozenvit.control.env import State

    with MetaWorldTask(task, render=None, stop_on_success=False, max_steps=max_steps, expert=expert) as t:
        state, first, info = t.reset(config), None, {}
        for step in range(1, max_steps + 1):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                full, _r, _term, _trunc, info = t.env.step(np.clip(t.expert_action(state), -1.0, 1.0))
            success = info["success"] > 0.5
            state = State(full[:4].astype(np.float32), full, success, step, False)
            first = first or (step if success else None)
            if first is not None and step >= first + hold_steps:
                break
        return dict(task=task, expert=expert, demonstrator=t.expert, config=config, first_success=first,
                    steps=step, end_distance=float(info["obj_to_target"]), success_at_end=bool(success))


def summarise(eps: list[dict]) -> dict:
    ok = [e for e in eps if e["first_success"] is not None]
    d = np.array([e["end_distance"] for e in ok]) * 100
    first = [e["first_success"] for e in ok]
    return dict(task=eps[0]["task"], demonstrator=eps[0]["demonstrator"], succeeded=f"{len(ok)}/{len(eps)}",
                first_median=float(np.median(first)) if ok else None, first_max=max(first, default=None),
                end_cm_min=float(d.min()) if ok else None, end_cm_median=float(np.median(d)) if ok else None,
                end_cm_max=float(d.max()) if ok else None,
                success_at_end=sum(e["success_at_end"] for e in ok))


if __name__ == "__main__":
    raise SystemExit(main())
