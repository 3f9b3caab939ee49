"""Control-loop latency: render + preprocess + encode + attention head + env step, per step.

Two encoders with the library's default head shape (untrained: the time does not depend on the weights): the
default encoder and control's shipped fast encoder (4 blocks, 112 px). Each at 1 thread and at --threads; the two
take turns over --rounds rounds, so drift in the machine's load hits both alike. Targets (quiet machine, 2
threads): the default's p50 <= 60 ms and p99 <= 90 ms; the fast encoder's p50 <= half the default's.

    python benchmarks/control_latency.py --threads 2 --steps 300
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import RESULTS, machine, positive_int, print_table, write_result

TARGET_P50_MS, TARGET_P99_MS = 60.0, 90.0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="the larger thread count (1 is always measured too)")
    ap.add_argument("--steps", type=positive_int, default=200, help="timed steps per encoder and thread count")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before each round")
    ap.add_argument("--rounds", type=positive_int, default=3,
                    help="rounds the steps are split into, the encoders taking turns (at least 1)")
    ap.add_argument("--task", default="reach-v3", help="Meta-World task")
    ap.add_argument("--backbone", default=None, help="timm name (default: the embedded default ViT)")
    ap.add_argument("--weights", default=None, help="local weights for --backbone")
    ap.add_argument("--out", default=None, help=f"JSON path (default: {RESULTS}/control_latency.json; the "
                    "histogram beside it)")
    return ap


def main() -> int:
    args = parser().parse_args()

    import numpy as np
    import torch

    from frozenvit.backbone import load_backbone
    from frozenvit.control import LatencyReport, MetaWorldTask, UntrainedHead, VisuomotorAgent, load_fast_encoder, \
        measure_latency

    default = load_backbone(args.backbone, weights=args.weights)
    encoders = [(args.backbone or "embedded default", default), ("fast encoder", load_fast_encoder())]
    rows, runs, reports = [], [], {}
    for threads in sorted({1, args.threads}):
        torch.set_num_threads(threads)
        envs = [MetaWorldTask(args.task, image_size=bb.config.img_size[0]) for _, bb in encoders]
        agents = [VisuomotorAgent(UntrainedHead(bb), bb) for _, bb in encoders]
        parts: list[list] = [[] for _ in encoders]
        try:
            for r in range(args.rounds):
                n = args.steps // args.rounds + (1 if r < args.steps % args.rounds else 0)
                for k in range(len(encoders)):
                    parts[k].append(measure_latency(agents[k], envs[k], steps=n, warmup=args.warmup))
        finally:
            for env in envs:
                env.close()
        for (label, bb), reps, agent in zip(encoders, parts, agents):
            rep = LatencyReport.concat(reps)
            s = rep.summary()
            rows.append(dict(encoder=label, size=bb.config.img_size[0], blocks=",".join(map(str, agent.blocks)),
                             threads=threads, min=s["min"], p50=s["p50"], p95=s["p95"], p99=s["p99"],
                             **{f"{k}_p50": v for k, v in s["stage_p50_ms"].items()}))
            runs.append(dict(encoder=label, backbone=bb.config.name, img_size=bb.config.img_size[0], blocks=agent.blocks,
                             threads=threads, round_p50=[float(np.median(x.total)) for x in reps], **rep.to_dict()))
            reports[(label, threads)] = rep
    print_table(rows, floatfmt="{:.1f}")

    d, f = [r for r in rows if r["threads"] == args.threads]
    verdicts = dict(default_p50_ok=d["p50"] <= TARGET_P50_MS, default_p99_ok=d["p99"] <= TARGET_P99_MS,
                    fast_over_default_p50=f["p50"] / d["p50"], fast_p50_half_of_default=f["p50"] <= 0.5 * d["p50"])
    print(f"at {args.threads} threads: default p50 {d['p50']:.1f} ms (target {TARGET_P50_MS:g}), p99 {d['p99']:.1f} ms "
          f"(target {TARGET_P99_MS:g}); fast p50 / default p50 = {verdicts['fast_over_default_p50']:.2f} (target 0.5)")
    m = machine()
    if m["loadavg_1min"] and m["loadavg_1min"] > 0.5 * (m["cpu_count"] or 2):
        print(f"note: load average {m['loadavg_1min']:.1f} on {m['cpu_count']} cores: latencies are inflated")
    png = Path(args.out).with_suffix(".png") if args.out else RESULTS / "control_latency.png"
    png.parent.mkdir(parents=True, exist_ok=True)
    reports[(d["encoder"], args.threads)].histogram(TARGET_P99_MS, title=f"{d['encoder']}, {args.threads} threads") \
        .savefig(png, dpi=90)
    write_result("control_latency", dict(task=args.task, threads=args.threads, steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                         targets=dict(p50_ms=TARGET_P50_MS, p99_ms=TARGET_P99_MS), rows=rows,
                                         verdicts=verdicts, runs=runs, histogram=str(png)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
