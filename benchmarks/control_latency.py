"""Control-loop latency: render + preprocess + encode + attention head + env step, per step.

Encoders: the embedded default at 224 px, and a faster one: control's shipped fast encoder (4
blocks, 112 px; the default), the default's weights at --fast-size (--fast default), or a
distilled student given by --fast-backbone/--fast-weights. Each at 1 thread and at --threads; the
two encoders take turns over --rounds rounds. The loop renders with the default RenderSettings
(full meshes) or, with --mesh-faces N, simplified meshes; the JSON also records the render rates
of both and the PSNR of simplified frames against full-mesh ones; --fast-mesh-faces gives the
faster encoder's loop its own meshes (e.g. simplified for it, full for the default). Targets (quiet machine, 2 threads): default p50 <= 60 ms and p99 <= 90 ms; the fast
encoder's p50 <= half the default's.

    .venv/bin/python benchmarks/control_latency.py --threads 2 --steps 300

A composite --camera (corner+topview: k views side by side) times encoders built at (S, k*S), S = --size
or --fast-size per view; the shipped fast encoder (112 x 112 only) refuses it: use --fast default.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import common  # noqa: F401  (puts the repo root on sys.path)
from common import RESULTS, machine, print_table, write_result
from frozenvit.control.defaults import DEFAULT_CHUNK, DEFAULT_CHUNK_DECAY

TARGET_P50_MS, TARGET_P99_MS = 60.0, 90.0


def load_encoders(args: argparse.Namespace) -> list[tuple[str, object, bool]]:
    """(label, backbone, pretrained?) for the default at 224 and the faster encoder, each built for the frames
    of args.camera: (S, k*S) for a composite camera of k views."""
    from frozenvit.backbone import load_backbone
    from frozenvit.backbone.errors import BackboneUnavailable
    from frozenvit.control import frame_size

    size, fast_size = frame_size(args.size, args.camera), frame_size(args.fast_size, args.camera)
    try:
        default = load_backbone(args.backbone, weights=args.weights, img_size=size)
        name, real = ("embedded default" if args.backbone is None else args.backbone), True
    except BackboneUnavailable as e:
        print(f"no embedded default ({e}); timing a RANDOM-weight {args.stand_in} stand-in instead "
              "(latency does not depend on weights)", file=sys.stderr)
        default = load_backbone(args.stand_in, pretrained=False, img_size=size)
        name, real = f"{args.stand_in} (random stand-in)", False
    out = [(f"{name} @{args.size}", default, real)]
    if args.fast_backbone:
        fast = load_backbone(args.fast_backbone, weights=args.fast_weights, img_size=fast_size,
                             pretrained=args.fast_weights is not None)
        out.append((f"{args.fast_backbone} ({fast.config.depth} blocks) @{fast.config.img_size[0]}", fast,
                    args.fast_weights is not None))
    elif args.fast == "shipped":
        from frozenvit.control import load_fast_encoder

        fast = load_fast_encoder()
        out.append((f"fast encoder ({fast.config.depth} blocks) @{fast.config.img_size[0]}", fast, True))
    else:
        fast = (load_backbone(args.backbone, weights=args.weights, img_size=fast_size) if real
                else load_backbone(args.stand_in, pretrained=False, img_size=fast_size))
        out.append((f"{name} @{args.fast_size}", fast, real))
    return out


def render_fps(settings, size: int, task: str, n: int = 30) -> float:
    """Frames per second of the offscreen renderer alone (after 3 warm-up frames)."""
    import time

    from frozenvit.control import MetaWorldTask

    with MetaWorldTask(task, image_size=size, render=settings) as env:
        env.reset(0)
        for _ in range(3):
            env.render()
        t0 = time.perf_counter()
        for _ in range(n):
            env.render()
        return n / (time.perf_counter() - t0)


def lod_psnr(size: int, task: str, configs: int = 5) -> float:
    """PSNR (dB) of frames drawn with RenderSettings.simplified() against full-mesh frames."""
    import numpy as np

    from frozenvit.control import MetaWorldTask, RenderSettings, config_seeds

    err = []
    with MetaWorldTask(task, image_size=size, render=RenderSettings()) as full, \
            MetaWorldTask(task, image_size=size, render=RenderSettings.simplified()) as lod:
        for c in config_seeds("heldout", configs):
            full.reset(c), lod.reset(c)
            err.append(np.mean((full.render().astype(np.float64) - lod.render()) ** 2))
    return float(10 * np.log10(255.0 ** 2 / np.mean(err)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="the larger thread count (1 is always measured too)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before each round")
    ap.add_argument("--rounds", type=int, default=3, help="the encoders take turns, steps split over rounds")
    ap.add_argument("--task", default="reach-v3")
    ap.add_argument("--camera", default=None, help="camera of the timed loops, or several joined by '+' (default: "
                                                    "control's DEFAULT_CAMERA; the render rates and PSNR keep the "
                                                    "default camera)")
    ap.add_argument("--size", type=int, default=224, help="input size of the default encoder (of one view)")
    ap.add_argument("--fast", choices=("shipped", "default"), default="shipped",
                    help="the faster encoder: control's shipped fast encoder (its own size), or the default at --fast-size")
    ap.add_argument("--fast-size", type=int, default=112, help="input size of --fast default / --fast-backbone")
    ap.add_argument("--fast-backbone", default=None, help="timm name of a distilled student (with --fast-weights)")
    ap.add_argument("--fast-weights", default=None)
    ap.add_argument("--stand-in", default="vit_tiny_patch16_224", help="architecture timed if no default ships")
    ap.add_argument("--backbone", default=None, help="time this timm model instead of the embedded default")
    ap.add_argument("--weights", default=None, help="local weights for --backbone")
    ap.add_argument("--block", type=int, nargs="+", default=None,
                    help="block(s) the default encoder's attention head reads (default: control.default_blocks, "
                         "2, 5 and 11 for a 12-block encoder; -1 = the last; several: their tokens side by side). Until "
                         "2026-12-02 it applied to both encoders")
    ap.add_argument("--fast-block", type=int, nargs="+", default=None,
                    help="block(s) the faster encoder's head reads (default: control.default_blocks, the last "
                         "of the 4-block fast encoder); with --fast default --fast-size 224 --fast-block 11, the "
                         "default two-block head and a one-block head take turns on the same encoder")
    ap.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="K",
                    help="both heads predict K actions per frame and act by their temporal ensemble (default: the "
                         "library's, 8 since 2026-12-04; 1: one action)")
    ap.add_argument("--mesh-faces", default=None, metavar="N|none",
                    help="the loop renders big meshes simplified to ~N triangles (default: full meshes)")
    ap.add_argument("--fast-mesh-faces", default=None, metavar="N|none",
                    help="the faster encoder's loop renders with these meshes instead (default: as --mesh-faces); "
                         "its policies must then be trained on demos rendered the same way")
    ap.add_argument("--out", default=None, help=f"JSON path (default {RESULTS}/control_latency.json)")
    args = ap.parse_args()
    if args.chunk < 1:
        ap.error(f"--chunk must be >= 1, got {args.chunk}")

    import torch

    import numpy as np

    from frozenvit.control import (DEFAULT_CAMERA, LatencyReport, MetaWorldTask, RenderSettings, UntrainedHead,
                                   VisuomotorAgent, camera_count, measure_latency)

    from frozenvit.control.cli import parse_mesh_faces, render_settings
    from frozenvit.control.features import block_label

    loop_render = render_settings(args)
    args.camera = args.camera or DEFAULT_CAMERA
    if camera_count(args.camera) > 1 and args.fast == "shipped" and not args.fast_backbone:
        raise SystemExit(f"the shipped fast encoder reads one 112 x 112 view; --camera {args.camera} has "
                         f"{camera_count(args.camera)} views side by side: pass --fast default (or --fast-backbone)")
    fast_render = parse_mesh_faces(args.fast_mesh_faces) if args.fast_mesh_faces is not None else loop_render
    render = dict(metaworld_default_fps=render_fps(RenderSettings.metaworld(), args.size, args.task),
                  fast_fps=render_fps(RenderSettings(), args.size, args.task),
                  simplified_fps=render_fps(RenderSettings.simplified(), args.size, args.task),
                  loop_render=loop_render.as_dict(), fast_loop_render=fast_render.as_dict(),
                  simplified_psnr_db={s: lod_psnr(s, args.task) for s in sorted({args.size, args.fast_size})})
    print(f"rendering {args.size}px: Meta-World's visuals {render['metaworld_default_fps']:.1f} frames/s, "
          f"fast defaults {render['fast_fps']:.1f} frames/s, with simplified meshes {render['simplified_fps']:.1f} "
          f"(PSNR vs full meshes {render['simplified_psnr_db']} dB); the loop renders with {loop_render}"
          + ("" if fast_render == loop_render else f", the faster encoder's with {fast_render}"), flush=True)
    encoders = load_encoders(args)
    renders = [loop_render, fast_render][:len(encoders)]
    if fast_render != loop_render and len(encoders) == 2:
        label, bb, real = encoders[1]
        encoders[1] = (f"{label}, meshes {fast_render.mesh_faces or 'full'}", bb, real)
    rows, runs, figs, round_ratios = [], [], [], {}
    for threads in sorted({1, args.threads}):
        torch.set_num_threads(threads)
        # Encoders take turns in rounds, so drift in the machine's load hits both alike.
        envs = [MetaWorldTask(args.task, camera=args.camera, image_size=bb.config.img_size[0], render=r)
                for (_, bb, _), r in zip(encoders, renders)]
        agents = [VisuomotorAgent(UntrainedHead(bb, block=b, chunk=args.chunk), bb)
                  for (_, bb, _), b in zip(encoders, (args.block, args.fast_block))]
        parts: list[list] = [[] for _ in encoders]
        try:
            for r in range(args.rounds):
                n = args.steps // args.rounds + (1 if r < args.steps % args.rounds else 0)
                for k in range(len(encoders)):
                    parts[k].append(measure_latency(agents[k], envs[k], steps=n, warmup=args.warmup))
        finally:
            for env in envs:
                env.close()
        if len(encoders) == 2:
            round_ratios[threads] = [float(np.median(f.total) / np.median(d.total)) for d, f in zip(*parts)]
        for (label, bb, real), reps, agent in zip(encoders, parts, agents):
            rep = LatencyReport.concat(reps)
            size = bb.config.img_size[0]
            s = rep.summary()
            row = dict(encoder=label, blocks=block_label(agent.policy.meta_),
                       tokens=bb.config.grid[0] * bb.config.grid[1], threads=threads,
                       min=s["min"], p50=s["p50"], p95=s["p95"], p99=s["p99"],
                       **{f"{k}_p50": v for k, v in s["stage_p50_ms"].items()},
                       encode_min=float(rep.stages["encode"].min()), render_min=float(rep.stages["render"].min()))
            rows.append(row)
            runs.append(dict(encoder=label, blocks=agent.blocks, pretrained=real, backbone=bb.config.name, img_size=size,
                             threads=threads, round_p50=[float(np.median(x.total)) for x in reps], **rep.to_dict()))
            if threads == args.threads:
                figs.append((label, rep))
            print(f"  {label}, block {row['blocks']}, {threads} thread(s): p50 {s['p50']:.1f} ms, p99 {s['p99']:.1f} ms", flush=True)
    print_table(rows, floatfmt="{:.1f}")

    verdicts = {}
    top = [r for r in rows if r["threads"] == args.threads]
    if len(top) == 2:
        d, f = top
        verdicts = dict(default_p50_ok=d["p50"] <= TARGET_P50_MS, default_p99_ok=d["p99"] <= TARGET_P99_MS,
                        fast_p50_half_of_default=f["p50"] <= 0.5 * d["p50"],
                        fast_over_default_p50=f["p50"] / d["p50"],
                        fast_over_default_p50_by_round=round_ratios.get(args.threads, []))
        print(f"targets at {args.threads} threads: default p50 {d['p50']:.1f} <= {TARGET_P50_MS}: "
              f"{verdicts['default_p50_ok']}; p99 {d['p99']:.1f} <= {TARGET_P99_MS}: {verdicts['default_p99_ok']}; "
              f"fast p50 / default p50 = {verdicts['fast_over_default_p50']:.2f} (target <= 0.5; by round "
              f"{', '.join(f'{x:.2f}' for x in verdicts['fast_over_default_p50_by_round'])})")
    m = machine()
    if m.get("loadavg_1min") and m["loadavg_1min"] > 0.5 * (m.get("cpu_count") or 2):
        print(f"note: load average {m['loadavg_1min']:.1f} on {m['cpu_count']} cores: the machine was busy, "
              "latencies are inflated", flush=True)
    png = Path(args.out).with_suffix(".png") if args.out else RESULTS / "control_latency.png"
    if figs:
        fig = figs[0][1].histogram(TARGET_P99_MS, title=f"{figs[0][0]}, {args.threads} threads")
        png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(png, dpi=90)
    # velocity: dropped from control (control/RESULTS.md), at the value every run since has had, as the JSONs
    # written while it existed record it; the decay does not change the time
    write_result("control_latency", dict(task=args.task, camera=args.camera, steps=args.steps, warmup=args.warmup,
                                         chunk=args.chunk, chunk_decay=DEFAULT_CHUNK_DECAY, velocity=False,
                                         targets=dict(p50_ms=TARGET_P50_MS, p99_ms=TARGET_P99_MS), render=render,
                                         rows=rows, verdicts=verdicts, runs=runs, histogram=str(png)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
