"""Where scripted demos end: each demonstrator's success, first-success step and final scored distance, per task.

Per task and demonstrator (control.experts.make_expert: "metaworld", "default", "servo") the scripted expert is
rolled out, without rendering, on the configurations a demo collection tries first (training seeds 0..N-1), the
way `collect_demos` records a demo: until its first success and --hold-steps steps more, or the task's cap. Per
rollout: success, first-success step, the scored distance (the task's own `obj_to_target`) at the last step, the
steps where GoalServo commanded the arm, and whether the actions equal Meta-World's expert's bit for bit (then the
demos, and any policy trained on them, are the same; None when --experts leaves out "metaworld").

    python benchmarks/control_expert_goal.py --out benchmarks/results/control_expert_goal.json
"""
from __future__ import annotations

import argparse
import statistics
import warnings

import numpy as np

from common import RESULTS, print_table, write_result

EIGHT = ["reach-v3", "push-v3", "pick-place-v3", "peg-insert-side-v3", "sweep-into-v3", "button-press-v3",
         "drawer-open-v3", "door-open-v3"]
CAPS = {"button-press-v3": 200, "drawer-open-v3": 200}      # the eight-task benchmark's caps; 500 elsewhere


def rollout(task, expert, config: int, hold_steps: int) -> dict:
    """One scripted episode as collect_demos records it; `task` a MetaWorldTask, `expert` called as expert(full, env)."""
    s = task.reset(config)
    actions, first, servo_steps, distance = [], None, 0, float("nan")
    while not s.done:
        a = np.clip(expert(s.full, task.env), -1.0, 1.0)                            # (4,)
        actions.append(a)
        servo_steps += bool(getattr(expert, "servoing_", False))
        s = task.step(a)
        if s.success and first is None:
            first = s.steps
        if first is not None and s.steps - first >= hold_steps:
            break
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        distance = float(task.env.evaluate_state(s.full, a)[1]["obj_to_target"])
    scored = getattr(expert, "scored_", None)
    return dict(config=config, success=first is not None, first_success=first, steps=s.steps,
                final_distance=distance, servo_steps=servo_steps, actions=np.stack(actions),
                scored_point=None if scored is None else "/".join(scored[0]) if scored else "none")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1,
                    help="taken as by every benchmark (run_all.py); the scripted rollouts are single-threaded MuJoCo")
    ap.add_argument("--tasks", nargs="+", default=EIGHT, help="Meta-World task names (default: the eight-task benchmark's)")
    ap.add_argument("--experts", nargs="+", default=["metaworld", "default", "servo"],
                    help="demonstrators (control.experts.make_expert); same_as_metaworld is None without \"metaworld\"")
    ap.add_argument("--configs", type=int, default=25, help="training configurations 0..N-1")
    ap.add_argument("--hold-steps", type=int, default=None, help="steps past the first success (default: the "
                    "library's, control.defaults.DEFAULT_HOLD_STEPS)")
    ap.add_argument("--out", default=str(RESULTS / "control_expert_goal.json"))
    return ap


def main() -> int:
    args = parser().parse_args()
    from frozenvit.control import MetaWorldTask
    from frozenvit.control.defaults import DEFAULT_HOLD_STEPS
    from frozenvit.control.experts import expert_name, make_expert

    hold = DEFAULT_HOLD_STEPS if args.hold_steps is None else args.hold_steps
    rows, per_config = [], {}
    for name in args.tasks:
        cap = CAPS.get(name, 500)
        runs = {}
        with MetaWorldTask(name, render=None, stop_on_success=False, max_steps=cap, expert="metaworld") as task:
            for ex in args.experts:
                expert = make_expert(name, ex)
                runs[ex] = [rollout(task, expert, c, hold) for c in range(args.configs)]
        for ex, eps in runs.items():
            ok = [e for e in eps if e["success"]]
            # None when Meta-World's expert was not rolled out (--experts without "metaworld"): nothing to compare
            same = None if "metaworld" not in runs else sum(
                len(e["actions"]) == len(m["actions"]) and np.array_equal(e["actions"], m["actions"])
                for e, m in zip(eps, runs["metaworld"]))
            rows.append(dict(task=name, expert=ex, demonstrator=expert_name(name, ex), cap=cap,
                             success=f"{len(ok)}/{len(eps)}",
                             first_median=statistics.median(e["first_success"] for e in ok) if ok else None,
                             first_max=max(e["first_success"] for e in ok) if ok else None,
                             final_median_cm=round(100 * statistics.median(e["final_distance"] for e in ok), 2) if ok else None,
                             final_max_cm=round(100 * max(e["final_distance"] for e in ok), 2) if ok else None,
                             servo_episodes=sum(e["servo_steps"] > 0 for e in eps),
                             same_as_metaworld=same,
                             scored_point=",".join(sorted({str(e["scored_point"]) for e in eps}))))
            per_config[f"{name}:{ex}"] = [{k: v for k, v in e.items() if k != "actions"} for e in eps]
        print_table(rows[-len(runs):])
    print_table(rows)
    write_result("control_expert_goal", dict(settings=dict(tasks=args.tasks, experts=args.experts,
                                                            configs=args.configs, hold_steps=hold, caps=CAPS),
                                             rows=rows, per_config=per_config), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
