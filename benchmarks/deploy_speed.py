"""Deployment runtimes against torch eager, in one run: the control loop's compute and anomaly predict with maps.

    python benchmarks/deploy_speed.py --threads 2                      # encoder + anomaly
    python benchmarks/deploy_speed.py --threads 2 --part loop --steps 150   # the whole loop, Meta-World rendering

Parts (each times every runtime in interleaved rounds after a warm-up, so a machine whose load drifts slows
them alike; ratios are within one run):

- encoder: one control step's compute at batch 1 on Meta-World renders, with the default policy's encoder (the
  embedded ViT at its input size, blocks `default_blocks`) and an untrained head of the default shape:
  preprocess, encode, head (ms, medians and p95 over --steps steps, in 3 rounds of a block per runtime, each
  step after a 20 ms pause standing for the render: without it, the thread pools of the runtimes loaded beside
  the one timed compete with it on a busy 2-core machine); --int8 adds int8 exports (their grid
  error against torch, as recorded by the export, in the row).
- loop: `control.latency.compare_runtimes` on Meta-World (render, preprocess, encode, head, step; p50/p95/p99).
- anomaly: `anomaly fit`'s default ensemble fitted on synthetic --size px normals, then predict with maps on the
  synthetic test set through each runtime in each of --precisions that it runs (`use_runtime(..., precision=)`;
  int8 calibrated on the training normals): images/s (median over rounds) and image AUROC of each.

Writes benchmarks/results/deploy_speed_t<threads>[_<tag>].json (or --out).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from common import median, positive_int, print_table, write_result

RUNTIMES = ("torch", "onnxruntime", "openvino")
# anomaly part: "a+b+c" runs the ensemble's members in a, b and c in their order (`--precision a,b,c` on the command
# line): "float32+float32+bfloat16" is the default ensemble's ConvNets in float32 and its ViT in bfloat16
PRECISIONS = ("float32", "bfloat16", "int8", "float32+float32+bfloat16")
ROUNDS = 3
PAUSE_S = 0.02       # encoder part: untimed pause before each step (the loop renders there, ~10-20 ms)


def rounds_of(variants: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds of every variant in each round, after one warm-up round; each round times every variant once."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(rounds + 1):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            if r:
                out[k].append(time.perf_counter() - t0)
    return out


def metaworld_frames(size: int, n: int) -> list[np.ndarray]:
    """n renders of Meta-World's latency task at `size` px (start of n training configurations)."""
    from frozenvit.control.defaults import DEFAULT_CAMERA, LATENCY_TASK
    from frozenvit.control.env import MetaWorldTask, config_seeds

    with MetaWorldTask(LATENCY_TASK, camera=DEFAULT_CAMERA, image_size=size) as env:
        out = []
        for c in config_seeds("train", n):
            env.reset(c)
            out.append(env.render())
    return out


def int8_backbones(bb, blocks, frames, runtimes) -> dict:
    """{"<runtime>-int8": backbone} for the ONNX runtimes asked, calibrated on `frames`, and their recorded error."""
    from frozenvit.backbone.export import export_backbone, load_exported

    out, errors = {}, {}
    for rt in (r for r in runtimes if r != "torch"):
        path = export_backbone(bb, Path(tempfile.mkdtemp(prefix="deploy-int8-")) / "q", blocks, int8=True,
                               calibration=frames, format="onnx" if rt == "onnxruntime" else "openvino")
        out[f"{rt}-int8"] = load_exported(path, rt, source=bb)
        errors[f"{rt}-int8"] = max(out[f"{rt}-int8"].export_config["int8"]["grid_rel_error_on_calibration_images"].values())
    return out, errors


def bench_encoder(runtimes, steps: int, int8: bool) -> list[dict]:
    from frozenvit.backbone.export import runtime_backbone
    from frozenvit.control.agent import StageTimer, VisuomotorAgent
    from frozenvit.control.encoders import load_encoder
    from frozenvit.control.features import token_blocks
    from frozenvit.control.latency import UntrainedHead

    bb = load_encoder()
    head = UntrainedHead(bb)
    blocks = token_blocks(head.meta_)
    H, W = bb.config.img_size
    frames = metaworld_frames(H, 16)
    encoders = {rt: runtime_backbone(bb, rt, blocks) for rt in runtimes}
    errors = {}
    if int8:
        quantised, errors = int8_backbones(bb, blocks, frames[8:], runtimes)      # calibrated on frames not timed
        encoders.update(quantised)
    agents = {rt: VisuomotorAgent(head, e) for rt, e in encoders.items()}
    runtimes = list(agents)
    frames = frames[:8]
    proprio = np.zeros((1, 4), np.float32)
    timers = {rt: StageTimer() for rt in runtimes}
    quiet = StageTimer()
    for r in range(ROUNDS):               # each runtime's steps in a block (its threads alone), blocks interleaved
        for rt, a in agents.items():
            for i in range(3 + steps // ROUNDS):
                timer = timers[rt] if i >= 3 else quiet                      # 3 untimed steps start each block
                time.sleep(PAUSE_S)          # where the loop renders: other runtimes' idle threads go to sleep
                a.reset()
                t0 = time.perf_counter()
                a.act([frames[i % len(frames)]], proprio, timer)
                timer.ms["compute"].append((time.perf_counter() - t0) * 1e3)
    rows = []
    for rt in runtimes:
        ms = timers[rt].ms
        row = {"part": "encoder", "runtime": rt, "backbone": bb.config.name, "img_size": H, "blocks": ",".join(map(str, blocks))}
        for s in ("preprocess", "encode", "head", "compute"):
            row[f"{s}_p50_ms"] = float(np.percentile(ms[s], 50))
        row["compute_p95_ms"] = float(np.percentile(ms["compute"], 95))
        if rt in errors:
            row["int8_grid_rel_error"] = errors[rt]
        rows.append(row)
    base = rows[0]["encode_p50_ms"]
    for r in rows:
        r["encode_speedup"] = base / r["encode_p50_ms"]
    return rows


def bench_loop(runtimes, steps: int, warmup: int) -> list[dict]:
    from frozenvit.control.encoders import load_encoder
    from frozenvit.control.env import MetaWorldTask
    from frozenvit.control.latency import UntrainedHead, compare_runtimes
    from frozenvit.control.defaults import DEFAULT_CAMERA, LATENCY_TASK

    bb = load_encoder()
    head = UntrainedHead(bb)
    with MetaWorldTask(LATENCY_TASK, camera=DEFAULT_CAMERA, image_size=bb.config.img_size[0]) as env:
        reports = compare_runtimes(head, bb, env, runtimes, steps=steps, warmup=warmup)
    rows = []
    for rt, rep in reports.items():
        s = rep.summary()
        rows.append({"part": "loop", "runtime": rt, "task": LATENCY_TASK, "steps": s["steps"], "p50_ms": s["p50"],
                     "p95_ms": s["p95"], "p99_ms": s["p99"],
                     **{f"{k}_p50_ms": v for k, v in s["stage_p50_ms"].items()}})
    return rows


def bench_anomaly(runtimes, precisions, size: int, rounds: int, n_train: int) -> list[dict]:
    from sklearn.metrics import roc_auc_score

    from frozenvit.anomaly import PatchCoreEnsemble
    from frozenvit.anomaly.datasets import read_mvtec
    from frozenvit.anomaly.ensemble import load_detector
    from frozenvit.anomaly.synthetic import make_synthetic_mvtec
    from frozenvit.backbone.export import use_runtime
    from frozenvit.backbone.runtimes import PRECISIONS_OF
    from PIL import Image

    tmp = Path(tempfile.mkdtemp(prefix="deploy-speed-"))
    root = make_synthetic_mvtec(tmp / "data", n_train=n_train, n_test_good=6, n_test_defect=2, size=(size, size))
    ds = read_mvtec(root)
    normals = [np.asarray(Image.open(p).convert("RGB")) for p in ds.train]
    test = [np.asarray(Image.open(s.path).convert("RGB")) for s in ds.test]
    labels = [s.label for s in ds.test]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        PatchCoreEnsemble(progress=False).fit(normals).save(tmp / "model")
        fit_s = time.perf_counter() - t0
    variants = [(rt, p) for rt in runtimes for p in precisions                               # the first: baseline
                if all(q in PRECISIONS_OF[rt] for q in p.split("+"))]
    dets = {v: use_runtime(load_detector(tmp / "model"), v[0], precision=v[1].split("+"),
                           calibration=normals if "int8" in v[1] else None) for v in variants}
    preds = {}

    def run(v):
        def go():
            preds[v] = dets[v].predict(test)                       # scores and maps at original size
        return go
    secs = rounds_of({v: run(v) for v in variants}, rounds)
    rows = []
    for v in variants:
        s = median(secs[v])
        rows.append({"part": "anomaly", "runtime": v[0], "precision": v[1].replace("+", ","), "image_size": size,
                     "images": len(test),
                     "images_per_s": len(test) / s, "seconds_median": s,
                     "image_auroc": float(roc_auc_score(labels, preds[v].scores)),
                     "maps": len(preds[v].maps), "fit_seconds": fit_s, "n_train": len(normals)})
    for r in rows:
        r["speedup"] = r["images_per_s"] / rows[0]["images_per_s"]
        r["auroc_diff"] = r["image_auroc"] - rows[0]["image_auroc"]
    ref = preds[variants[0]].scores
    for r, v in zip(rows, variants):
        r["same_ranking"] = bool((np.argsort(preds[v].scores) == np.argsort(ref)).all())
    return rows


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="threads of every runtime")
    ap.add_argument("--part", choices=("all", "encoder", "loop", "anomaly"), default="all",
                    help="all: encoder and anomaly (loop needs Meta-World rendering: ask for it)")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated, the first is the baseline")
    ap.add_argument("--steps", type=positive_int, default=100, help="encoder/loop: timed steps per runtime")
    ap.add_argument("--warmup", type=int, default=10, help="loop: untimed steps per round")
    ap.add_argument("--size", type=int, default=512, help="anomaly: image side in pixels")
    ap.add_argument("--rounds", type=positive_int, default=3,
                    help="anomaly: timed rounds (after one warm-up round; at least 1)")
    ap.add_argument("--n-train", type=int, default=10, help="anomaly: synthetic normals to fit on")
    ap.add_argument("--precisions", default=",".join(PRECISIONS),
                    help="anomaly: comma-separated precisions, each timed with every runtime that runs it "
                         "(torch: float32 only; bfloat16: openvino; int8: calibrated on the training normals); "
                         "a+b+c: the ensemble's members in a, b and c, in their order")
    ap.add_argument("--int8", action="store_true",
                    help="encoder: also time int8 exports (calibrated on 8 Meta-World renders) of each ONNX runtime")
    ap.add_argument("--tag", default="", help="suffix of the JSON file name (deploy_speed_t<threads>_<tag>.json)")
    ap.add_argument("--out", default=None,
                    help="JSON path (default: benchmarks/results/deploy_speed_t<threads>[_<tag>].json)")
    return ap


def main() -> None:
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    runtimes = tuple(args.runtimes.split(","))
    load_before = round(os.getloadavg()[0], 2)                      # 1-minute load average when the run starts
    rows = []
    if args.part in ("all", "encoder"):
        rows += bench_encoder(runtimes, args.steps, args.int8)
        print_table([r for r in rows if r["part"] == "encoder"])
    if args.part == "loop":
        rows += bench_loop(runtimes, args.steps, args.warmup)
        print_table([r for r in rows if r["part"] == "loop"])
    if args.part in ("all", "anomaly"):
        rows += bench_anomaly(runtimes, tuple(args.precisions.split(",")), args.size, args.rounds, args.n_train)
        print_table([r for r in rows if r["part"] == "anomaly"])
    name = f"deploy_speed_t{args.threads}" + (f"_{args.tag}" if args.tag else "")
    write_result(name, {"threads": args.threads, "part": args.part, "runtimes": list(runtimes),
                        "precisions": args.precisions.split(","), "rows": rows,
                        "load_before": load_before,
                        "note": "ratios within this run only; the machine's load is recorded before and after"},
                 args.out)


if __name__ == "__main__":
    main()
