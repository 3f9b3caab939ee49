"""Held-out success of patch-token policies on Meta-World: tasks x training seeds, paired against a baseline run.

Per task the library's demonstrator records --demos successful episodes on training configurations and the frozen
encoder's tokens are cached once; per seed and pooling a head is trained by behaviour cloning and rolled out on the
same --configs held-out configurations (seeds >= 1,000,000, never trained on). Everything under --work-dir is
reused on a re-run (demos resume, caches and heads load, evaluations resume from a journal beside each head), and
the JSON is rewritten after every head, so a stopped run keeps what it measured.

--runtime changes only what runs the encoder while the heads are rolled out: the backbone exported (fp32) and run
by onnxruntime or OpenVINO, as `control evaluate --runtime` does; with --int8 an int8 export calibrated on each
task's demo frames. Caching and training stay torch: such a run evaluates the heads a torch run of the same
--work-dir trained (and refuses to train one), on the same episodes, so --compare pairs it with that run.

    python benchmarks/control_success.py --threads 2 --tasks reach-v3 push-v3 --seeds 0 --out s0.json
    python benchmarks/control_success.py --merge s0.json s1.json s2.json --out all.json     # one run per process
    python benchmarks/control_success.py --compare old.json:attention all.json:attention --out cmp.json
    python benchmarks/control_success.py --threads 2 --tasks reach-v3 push-v3 --runtime openvino --out ov.json

Two runs pair episode by episode (exact McNemar, frozenvit.control.compare) when they share the held-out
configurations, the cap, the demos and the encoder's input.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, ROOT, merged_from, print_table, write_result
from frozenvit.backbone.runtimes import add_runtime_arg

DEFAULT_TASKS = ["reach-v3", "push-v3", "button-press-v3", "drawer-open-v3"]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds of each head")
    ap.add_argument("--poolings", nargs="+", default=["attention"], help="one head per pooling; the first is the "
                    "reference of the paired tests")
    ap.add_argument("--demos", type=int, default=25, help="successful demos per task")
    ap.add_argument("--configs", type=int, default=50, help="held-out configurations per task")
    ap.add_argument("--heldout-start", type=int, default=0, help="first held-out configuration (e.g. 500: a "
                    "validation set disjoint from the test set)")
    ap.add_argument("--max-steps", type=int, default=500, help="episode cap at evaluation")
    ap.add_argument("--epochs", type=int, default=None,
                    help="behaviour-cloning epochs (default: the library's step budget, control.bc_epochs)")
    ap.add_argument("--blocks", type=lambda s: [int(b) for b in s.split(",")], default=None,
                    help="comma-separated encoder blocks, e.g. 2,5,11 (default: control.default_blocks)")
    ap.add_argument("--backbone", default=None, help="timm name (default: the embedded default ViT)")
    ap.add_argument("--weights", default=None, help="local weights for --backbone")
    ap.add_argument("--expert", default="default", help="who records the demos (collect_demos(expert=))")
    ap.add_argument("--parallel", type=int, default=4, help="environments rolled out in lockstep")
    ap.add_argument("--work-dir", default=str(ROOT / "runs" / "control_success"),
                    help="folder for the demos, token caches, trained heads and journals, kept for a later run "
                         "(default: runs/control_success in the repository, which .gitignore leaves out; the JSON goes "
                         "to --out)")
    add_runtime_arg(ap)
    ap.add_argument("--int8", action="store_true", help="with --runtime onnxruntime or openvino: the encoder exported "
                    "with int8 static quantisation, calibrated on --calibration-frames frames of each task's demos")
    ap.add_argument("--calibration-frames", type=int, default=32,
                    help="--int8: demo frames the quantisation is calibrated on, evenly spread over the demos")
    ap.add_argument("--baseline", default=None, metavar="RUN_JSON:POOLING",
                    help="pair this run's first pooling with a finished run's heads on the episodes they share")
    ap.add_argument("--merge", nargs="+", default=None, metavar="PART_JSON",
                    help="merge runs that split --tasks, --seeds or --poolings into --out, then exit")
    ap.add_argument("--compare", nargs="+", default=None, metavar="RUN_JSON:POOLING",
                    help="pair finished runs on the episodes they share (McNemar against the first) into --out, then exit")
    ap.add_argument("--across-weights", action="store_true",
                    help="with --compare or --baseline: pair runs whose encoders differ in their weights only")
    ap.add_argument("--across-demonstrators", action="store_true",
                    help="with --compare or --baseline: pair runs whose demos of a task were recorded by other "
                    "demonstrators (control.experts)")
    ap.add_argument("--out", default=None, help=f"JSON path (default: {RESULTS}/control_success.json; a new path "
                    "with --merge and --compare)")
    return ap


def read_run(spec: str) -> tuple[str, tuple[dict, str]]:
    """'RUN_JSON:POOLING' -> (label, (run, pooling)); the label is the file's stem and the pooling."""
    path, _, pooling = spec.rpartition(":")
    if not path:
        raise SystemExit(f"{spec!r}: give RUN_JSON:POOLING, e.g. results.json:attention")
    return f"{Path(path).stem}:{pooling}", (json.loads(Path(path).read_text()), pooling)


def journal_name(name: str, head: str, heldout: list[int], max_steps: int, runtime: str, int8: bool) -> str:
    """The evaluation journal of head `name` (weights digest `head`): one per configurations, cap and runtime, so
    that an evaluation through another runtime never resumes from torch's episodes."""
    rt = "" if runtime == "torch" else f"_{runtime}{'-int8' if int8 else ''}"
    return f"{name}_{head}_cfg{heldout[0]}x{len(heldout)}_cap{max_steps}{rt}.jsonl"


def calibration_frames(episodes, n: int) -> list:
    """`n` frames (H, W, 3) uint8 evenly spread over `episodes` (each a (T, H, W, 3) array of one demo's frames):
    up to n from each demo, then n of those, so that every demo and every phase of a demo is represented."""
    import numpy as np

    def spread(x):
        return x[np.linspace(0, len(x) - 1, min(n, len(x))).round().astype(int)]

    pool = np.concatenate([spread(frames) for frames in episodes])                # (<= episodes * n, H, W, 3)
    return list(spread(pool))


def eval_encoder(bb, runtime: str, blocks: list[int], calibration: list | None = None):
    """What runs the encoder during the rollouts: `bb` itself for "torch", else `bb` exported fp32 and run by
    `runtime` (runtime_backbone, the path of `control evaluate --runtime`); with `calibration` frames an int8
    export calibrated on them (its grids' measured error is in the returned backbone's export_config["int8"])."""
    from frozenvit.backbone.export import export_backbone, load_exported, runtime_backbone
    from frozenvit.backbone.runtimes import FORMAT_OF

    if calibration is None:
        return runtime_backbone(bb, runtime, blocks)
    with tempfile.TemporaryDirectory(prefix="control-success-int8-") as tmp:
        path = export_backbone(bb, Path(tmp) / "graph", blocks, format=FORMAT_OF[runtime], int8=True,
                               calibration=calibration)
        return load_exported(path, runtime, source=bb)


def summary_of(results: list[dict], poolings: list[str]) -> dict:
    """Mean success per pooling and per seed, and each other pooling paired with the first on the episodes they
    share (exact McNemar), over all tasks ("paired") and per task ("paired_by_task")."""
    from frozenvit.control.compare import paired_test, summarize

    summary = summarize(results, poolings)
    summary["paired"] = {p: paired_test(results, poolings[0], p).as_dict() for p in poolings[1:]}
    tasks = dict.fromkeys(r["task"] for r in results)
    summary["paired_by_task"] = {t: {p: paired_test([r for r in results if r["task"] == t], poolings[0], p).as_dict()
                                     for p in poolings[1:]} for t in tasks}
    return summary


def print_paired(paired: dict, ref: str) -> None:
    for label, t in paired.items():
        print(f"{ref} vs {label}: {t['a_only']} episodes won only by {ref}, {t['b_only']} only by {label}; "
              f"exact McNemar p = {t['p']:.3g}")


def main() -> int:
    args = parser().parse_args()
    if args.int8 and args.runtime == "torch":
        raise SystemExit("--int8 quantises an exported encoder: give --runtime onnxruntime or openvino")
    from frozenvit.control.compare import RunMismatch, compare_runs, merge_runs

    may_differ = ("weights_sha256",) * args.across_weights + ("demonstrators",) * args.across_demonstrators
    if args.merge or args.compare:
        inputs = [Path(s.rpartition(":")[0] if args.compare else s).resolve() for s in args.merge or args.compare]
        if not args.out or Path(args.out).resolve() in inputs:
            raise SystemExit("--merge and --compare write to --out, a new path (not one of their inputs)")
    if args.merge:
        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        run = merge_runs(parts)
        poolings = run["settings"]["poolings"]
        summary = summary_of(run["results"], poolings)
        print_table(summary["by_pooling"])
        print_table(summary["by_seed"])
        print_paired(summary["paired"], poolings[0])
        write_result("control_success", dict(run, summary=summary, merged_from=merged_from(args.merge, parts)),
                     args.out)
        return 0
    if args.compare:
        runs = dict(read_run(s) for s in args.compare)
        cmp = compare_runs(runs, may_differ=may_differ)
        print_table(cmp["by_pooling"])
        print_table(cmp["by_seed"])
        print_paired(cmp["paired"], next(iter(runs)))
        write_result("control_success_compare", dict(runs=args.compare, **cmp), args.out)
        return 0

    import torch

    from frozenvit.backbone import load_backbone
    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.control import (DEFAULT_CAMERA, PatchTokenPolicy, bc_epochs, cache_features, collect_demos,
                                   config_seeds, default_blocks, evaluate, iter_episodes, load_manifest)

    baseline = read_run(args.baseline) if args.baseline else None           # a bad path fails now, not in hours
    torch.set_num_threads(args.threads)
    bb = load_backbone(args.backbone, weights=args.weights)
    blocks = bb.resolve_blocks(args.blocks or default_blocks(bb.config.depth))
    encoder = f"{bb.config.name}@{bb.config.img_size[0]}"
    epochs = args.epochs                                  # None: each task's cache gets the library's step budget
    heldout = config_seeds("heldout", args.configs, start=args.heldout_start)
    work = Path(args.work_dir)
    out = Path(args.out) if args.out else RESULTS / "control_success.json"

    # demos and feature caches of every task first: then seed by seed, so that a stopped run has every task at seed 0
    caches, demonstrators, manifest = {}, {}, {}
    for task in args.tasks:
        demo_dir = work / "demos" / f"{task}_{DEFAULT_CAMERA}_{args.expert}"
        collect_demos(task, demo_dir, args.demos, camera=DEFAULT_CAMERA, expert=args.expert)
        manifest = load_manifest(demo_dir)
        demonstrators[task] = manifest["expert"]
        caches[task] = cache_features(demo_dir, bb, block=blocks)
    settings = dict(tasks=args.tasks, seeds=args.seeds, poolings=args.poolings, demos=args.demos, configs=args.configs,
                    heldout_seeds=[heldout[0], heldout[-1]], max_steps=args.max_steps, epochs=epochs,
                    blocks=blocks, encoder=encoder, weights_sha256=bb.weights_sha256, camera=DEFAULT_CAMERA,
                    demo_size=manifest["image_size"], hold_steps=manifest["hold_steps"], render=manifest["render"],
                    expert=args.expert, demonstrators=demonstrators, threads=args.threads, runtime=args.runtime,
                    int8=dict(calibration_frames=args.calibration_frames) if args.int8 else None)
    runtime_bb = None if args.int8 else eval_encoder(bb, args.runtime, blocks)      # int8: one export per task

    results = []
    for seed in args.seeds:
        for task in args.tasks:
            for pooling in args.poolings:
                t0 = time.perf_counter()
                pol = PatchTokenPolicy(pooling, epochs=epochs, seed=seed)
                e = epochs or bc_epochs(len(caches[task]))
                name = f"{task}_{encoder}_{(bb.weights_sha256 or 'random')[:10]}_b{'-'.join(map(str, blocks))}_" \
                       f"{demonstrators[task]}_{pooling}_e{e}_s{seed}"
                pol_dir = work / "policies" / name
                try:
                    cached = PatchTokenPolicy.load(pol_dir) if pol_dir.is_dir() else None
                except ArtifactError:                                 # an older format: trained again
                    cached = None
                if cached is not None and cached.get_params() == pol.get_params():
                    pol = cached
                elif args.runtime != "torch":
                    raise SystemExit(f"{pol_dir}: no trained head; --runtime {args.runtime} evaluates the heads that a "
                                     "torch run of the same --work-dir trained: run that first")
                else:
                    pol.fit(caches[task], checkpoint_dir=work / "checkpoints" / name).save(pol_dir)
                t_fit = time.perf_counter() - t0
                # the journal is named by the head's weights: a head trained again never meets its predecessor's
                head = hashlib.sha256((pol_dir / "model.safetensors").read_bytes()).hexdigest()[:12]
                journal = work / "journals" / journal_name(name, head, heldout, args.max_steps, args.runtime, args.int8)
                ebb, int8 = runtime_bb, {}
                if args.int8:
                    demo_dir = work / "demos" / f"{task}_{DEFAULT_CAMERA}_{args.expert}"
                    frames = calibration_frames((ep.frames for ep in iter_episodes(demo_dir)), args.calibration_frames)
                    ebb = eval_encoder(bb, args.runtime, blocks, frames)
                    int8 = dict(int8_grid_rel_error=ebb.export_config["int8"]["grid_rel_error_on_calibration_images"])
                t_eval = time.perf_counter()
                res = evaluate(pol, ebb, heldout, max_steps=args.max_steps, parallel=args.parallel, journal=journal)
                results.append(dict(task=task, pooling=pooling, seed=seed, success_rate=res.success_rate,
                                    successes=int(sum(res.successes)), episodes=len(res.successes),
                                    final_bc_loss=float(pol.history_[-1]), fit_s=round(t_fit, 1),
                                    eval_s=round(time.perf_counter() - t_eval, 1), **int8, per_config=res.successes))
                print(f"{task} {pooling} seed {seed}: {res.success_rate:.2f} "
                      f"({sum(res.successes)}/{len(res.successes)})", flush=True)
                write_result("control_success", dict(settings=settings, results=results, complete=False), out)

    summary = summary_of(results, args.poolings)
    print_table([{k: v for k, v in r.items() if k != "per_config"} for r in results])
    print_table(summary["by_pooling"])
    print_table(summary["by_seed"])
    print_paired(summary["paired"], args.poolings[0])
    run = dict(settings=settings, results=results, summary=summary, complete=True)
    if baseline:
        label, other = baseline
        try:
            run["baseline"] = compare_runs({label: other, "this run": (run, args.poolings[0])}, may_differ=may_differ)
            print_paired(run["baseline"]["paired"], label)
        except RunMismatch as e:                                           # the run is kept all the same
            run["baseline"] = dict(refused=str(e))
            print(f"not paired with {label}: {e}")
    write_result("control_success", run, out)
    return 0


if __name__ == "__main__":
    from frozenvit.control.compare import RunMismatch

    try:
        sys.exit(main())
    except RunMismatch as e:                       # runs that cannot be merged or paired: one line, exit 2
        print(f"control_success.py: {e}", file=sys.stderr)
        sys.exit(2)
