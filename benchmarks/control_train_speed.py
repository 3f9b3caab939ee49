"""A new Meta-World task in minutes: wall time per stage of `collect` + `train` (+ a short evaluation), and
held-out success paired episode by episode against a finished run of the earlier recipe.

Per task: the library's demonstrator records --demos successful episodes (stage "collect": rendering and the
expert), the frozen encoder's tokens of every frame and of its augmented views are cached ("encode"), a head is
trained by behaviour cloning ("train") and rolled out on the first --configs held-out configurations
("evaluate"). Recipe "default" is the library's defaults; "earlier" the earlier recipe's: the encoder and the
pooling's products in float32 and 200 epochs.

    python benchmarks/control_train_speed.py --tasks reach-v3 pick-place-v3 --configs 20 \\
        --baseline reach-v3=benchmarks/results/control_success_fingertips_2026-12-05_reach.json \\
        --baseline pick-place-v3=benchmarks/results/control_success_carry_2026-12-05_pick_place.json
    python benchmarks/control_train_speed.py --tasks hammer-v3 --threads 2 --configs 0      # a new task's stages
    python benchmarks/control_train_speed.py --tasks hammer-v3 --threads 2 --configs 0 \\
        --recipes default earlier --sample-demos 3 --sample-epochs 2                   # both recipes, sampled

With --sample-demos N and --sample-epochs E the encode and train stages are timed on the first N demos and E
epochs and scaled to all demos and the recipe's optimizer steps (marked "scaled"): the earlier recipe's full
stages take half an hour. Each stage's wall seconds and this process's CPU seconds are recorded (the CPU
seconds change less with other work on the machine). A baseline pairs when it was rolled out on the same held-out configurations (its
first --configs), cap, demos (task, demonstrator, demo count, hold steps) and encoder weights; the exact McNemar
test is frozenvit.control.compare's.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import RESULTS, ROOT, print_table, write_result

EARLIER_EPOCHS = 200                 # the earlier recipe's fixed number of epochs


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["reach-v3"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--demos", type=int, default=25, help="successful demos per task")
    ap.add_argument("--configs", type=int, default=20, help="held-out configurations rolled out (0: no evaluation)")
    ap.add_argument("--max-steps", type=int, default=500, help="episode cap at evaluation")
    ap.add_argument("--seed", type=int, default=0, help="training seed of the head")
    ap.add_argument("--recipes", nargs="+", choices=["default", "earlier"], default=["default"],
                    help="earlier: the encoder and the pooling's products in float32, 200 epochs")
    ap.add_argument("--sample-demos", type=int, default=None, help="earlier recipe: time encoding on this many demos")
    ap.add_argument("--sample-epochs", type=int, default=None, help="earlier recipe: time this many epochs")
    ap.add_argument("--baseline", action="append", default=[], metavar="TASK=RUN_JSON",
                    help="a control_success.py run of TASK to pair with (its attention head of --seed)")
    ap.add_argument("--work-dir", default=str(ROOT / "runs" / "control_train_speed"),
                    help="folder for the demos, token caches, trained heads and journals, kept for a later run "
                         "(default: runs/control_train_speed in the repository, which .gitignore leaves out; the JSON goes "
                         "to --out)")
    ap.add_argument("--out", default=None, help=f"JSON path (default: {RESULTS}/control_train_speed.json)")
    return ap


def paired(task: str, run: dict, seed: int, mine: list[bool], settings: dict) -> dict:
    """McNemar of this head against the baseline run's head of `seed` on the configurations both rolled out."""
    from frozenvit.control import mcnemar

    s = run["settings"]
    theirs = next(r for r in run["results"] if r["task"] == task and r["pooling"] == "attention" and r["seed"] == seed)
    who = s.get("demonstrators", {}).get(task, s.get("expert"))
    same = dict(first_config=(s["heldout_seeds"][0], settings["heldout_seeds"][0]),
                max_steps=(s["max_steps"], settings["max_steps"]), demos=(s["demos"], settings["demos"]),
                hold_steps=(s["hold_steps"], settings["hold_steps"]), demonstrator=(who, settings["demonstrator"]),
                weights=(s["weights_sha256"], settings["weights_sha256"]), encoder=(s["encoder"], settings["encoder"]))
    differ = [k for k, (a, b) in same.items() if a != b]
    if differ:
        raise SystemExit(f"the {task} baseline was rolled out on other episodes ({', '.join(differ)} differ)")
    base = theirs["per_config"][:len(mine)]
    t = mcnemar(base, mine)
    return dict(baseline_success=sum(base) / len(base), success=sum(mine) / len(mine), baseline_only=t.a_only,
                this_only=t.b_only, p=t.p, episodes=len(mine))


def main() -> int:
    args = parser().parse_args()
    import torch

    from frozenvit.backbone import load_backbone
    from frozenvit.control import collect_demos, load_manifest, native_bfloat16

    torch.set_num_threads(args.threads)
    baselines = {t: json.loads(Path(p).read_text()) for t, _, p in (b.partition("=") for b in args.baseline)}
    bb = load_backbone()
    work = Path(args.work_dir)
    out = Path(args.out) if args.out else RESULTS / "control_train_speed.json"
    settings = dict(tasks=args.tasks, threads=args.threads, demos=args.demos, configs=args.configs,
                    max_steps=args.max_steps, seed=args.seed, recipes=args.recipes, sample_demos=args.sample_demos,
                    sample_epochs=args.sample_epochs, native_bfloat16=native_bfloat16(),
                    baselines={t: Path(p).name for t, _, p in (b.partition("=") for b in args.baseline)})
    rows, results = [], []
    for task in args.tasks:
        demo_dir = work / "demos" / f"{task}_{args.demos}"
        reused = (demo_dir / "manifest.json").is_file()          # a re-run: the stage is not timed again
        collect = Clock()
        collect_demos(task, demo_dir, args.demos, progress=False)
        collect.stop()
        t_collect = None if reused else collect.wall
        for recipe in args.recipes:
            result = run_recipe(args, bb, task, recipe, demo_dir, t_collect, baselines.get(task))
            rows.append({k: v for k, v in result.items() if k in ROW})
            results.append(result)
            print_table(rows[-1:])
            write_result("control_train_speed", dict(settings=settings, results=results, complete=False), out)
    print_table(rows)
    body = dict(settings=settings, results=results, complete=True)
    if any("paired" in r for r in results):
        from frozenvit.control import mcnemar
        base = [b for r in results if "paired" in r for b in _baseline_outcomes(r, baselines, args.seed)]
        mine = [x for r in results if "paired" in r for x in r["per_config"]]
        t = mcnemar(base, mine)
        body["paired_all"] = dict(baseline_only=t.a_only, this_only=t.b_only, p=t.p, episodes=len(mine))
        print(f"all tasks: only baseline {t.a_only}, only this {t.b_only}, exact McNemar p = {t.p:.3g}")
    write_result("control_train_speed", body, out)
    return 0


ROW = ("task", "recipe", "frames", "epochs", "collect_s", "encode_s", "train_s", "collect_train_s", "encode_cpu_s",
       "train_cpu_s", "scaled", "evaluate_s", "success")


def run_recipe(args: argparse.Namespace, bb, task: str, recipe: str, demo_dir: Path, t_collect: float | None,
               baseline: dict | None) -> dict:
    """Encode, train and (with --configs) evaluate one recipe on one task's demos; the stages' seconds."""
    from frozenvit.control import (PatchTokenPolicy, bc_epochs, cache_features, collect_demos, config_seeds,
                                   evaluate, load_manifest)

    earlier = recipe == "earlier"
    precision = "float32" if earlier else "auto"
    m = load_manifest(demo_dir)
    frames = sum(e["steps"] for e in m["episodes"])
    enc_dir = demo_dir
    if args.sample_demos is not None:              # a demo folder of the first N demos, encoded and timed alone
        enc_dir = demo_dir.with_name(f"{demo_dir.name}_first{args.sample_demos}")
        collect_demos(task, enc_dir, args.sample_demos, progress=False)
    cache_dir = demo_dir.parent.parent / "features" / f"{enc_dir.name}_{recipe}"
    reused = (cache_dir / "config.json").is_file()
    encode = Clock()
    cache = cache_features(enc_dir, bb, precision=precision, progress=False, cache_dir=cache_dir)
    encode.stop(frames / len(cache))
    epochs = EARLIER_EPOCHS if earlier else bc_epochs(frames)
    fit_epochs = args.sample_epochs or epochs
    train = Clock()
    pol = PatchTokenPolicy(epochs=fit_epochs, seed=args.seed, precision=precision).fit(cache, progress=False)
    steps = lambda e, n: e * -(-n // pol.batch_size)              # noqa: E731  optimizer steps; a step costs the same
    train.stop(steps(epochs, frames) / steps(fit_epochs, len(cache)))
    result = dict(task=task, recipe=recipe, frames=frames, epochs=epochs, collect_s=t_collect,
                  encode_s=None if reused else encode.wall, train_s=train.wall,
                  scaled=bool(encode.scale != 1 or train.scale != 1), encode_cpu_s=None if reused else encode.cpu,
                  train_cpu_s=train.cpu, final_bc_loss=float(pol.history_[-1]), encode_frames=len(cache),
                  fit_epochs=fit_epochs, demonstrator=m["expert"], precision=cache.meta["precision"])
    if None not in (t_collect, result["encode_s"]):
        result["collect_train_s"] = round(t_collect + result["encode_s"] + result["train_s"], 1)
    if not args.configs:
        return result
    heldout = config_seeds("heldout", args.configs)
    t0 = time.perf_counter()
    res = evaluate(pol, bb, heldout, max_steps=args.max_steps, parallel=4, progress=False)
    result.update(evaluate_s=round(time.perf_counter() - t0, 1), success=res.success_rate,
                  per_config=res.successes, heldout_seeds=[heldout[0], heldout[-1]])
    if baseline is not None:
        settings = dict(heldout_seeds=[heldout[0], heldout[-1]], max_steps=args.max_steps, demos=args.demos,
                        hold_steps=m["hold_steps"], demonstrator=m["expert"], weights_sha256=bb.weights_sha256,
                        encoder=f"{bb.config.name}@{bb.config.img_size[0]}")
        result["paired"] = t = paired(task, baseline, args.seed, res.successes, settings)
        print(f"{task} {recipe}: baseline {t['baseline_success']:.2f}, this {t['success']:.2f}; only baseline "
              f"{t['baseline_only']}, only this {t['this_only']}, exact McNemar p = {t['p']:.3g}", flush=True)
    return result


class Clock:
    """Wall and process CPU seconds of a stage (this process's threads together), scaled by `stop(scale)`."""

    def __init__(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def stop(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.wall = round((time.perf_counter() - self.t0) * scale, 1)
        self.cpu = round((time.process_time() - self.c0) * scale, 1)


def _baseline_outcomes(result: dict, baselines: dict, seed: int) -> list[bool]:
    run = baselines[result["task"]]
    r = next(r for r in run["results"] if r["task"] == result["task"] and r["pooling"] == "attention"
             and r["seed"] == seed)
    return r["per_config"][:len(result["per_config"])]


if __name__ == "__main__":
    raise SystemExit(main())
