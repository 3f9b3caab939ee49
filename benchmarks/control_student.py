"""A faster encoder for the control loop: distil a shallow ViT at low resolution from the embedded default.

Recipe (issue 6, "a faster encoder from the backbone distillation command"):
  1. export the frames of the recorded expert demos (training configurations only) as PNG files;
  2. `frozenvit distill --teacher default` on them: a ViT-Tiny with 4 blocks instead of 12,
     at 112 px (7x7 tokens) instead of 224 (14x14), started from the default's first 4 blocks
     (`--init default`) and trained to regress the default's block-5 and block-11 patch tokens at the
     same input size.
The student then goes through benchmarks/control_latency.py (--fast-backbone/--fast-weights) and
benchmarks/control_success.py (--backbone/--weights/--size) beside the default.

    .venv/bin/python benchmarks/control_student.py --demos runs/control_success/demos --out runs/control_student
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import common  # noqa: F401  (puts the repo root on sys.path)
from common import ROOT


def export_frames(demo_dirs: list[Path], out: Path, every: int = 1) -> int:
    """Write every `every`-th frame of each demo episode as out/<demo dir>/<episode>_<t>.png; returns the count."""
    from PIL import Image
    from tqdm.auto import tqdm

    from frozenvit.control.demos import iter_episodes, load_manifest

    n = 0
    for d in demo_dirs:
        target = out / d.name
        target.mkdir(parents=True, exist_ok=True)
        episodes = load_manifest(d)["episodes"]
        for e, ep in enumerate(tqdm(iter_episodes(d), total=len(episodes), desc=f"frames {d.name}")):
            for t in range(0, len(ep.frames), every):
                f = target / f"cfg{ep.config:07d}_{t:03d}.png"
                if not f.is_file():
                    Image.fromarray(ep.frames[t]).save(f)
                n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demos", type=Path, default=ROOT / "runs" / "control_success" / "demos",
                    help="folder of demo directories (from control_success.py or `frozenvit control collect`)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "control_student")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--img-size", type=int, default=112)
    ap.add_argument("--epochs", type=float, default=12)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()

    demo_dirs = sorted(p for p in args.demos.iterdir() if (p / "manifest.json").is_file())
    if not demo_dirs:
        print(f"no demo directories under {args.demos}: run benchmarks/control_success.py first", file=sys.stderr)
        return 2
    n = export_frames(demo_dirs, args.out / "frames")
    print(f"{n} frames from {len(demo_dirs)} tasks: {', '.join(d.name for d in demo_dirs)}", flush=True)
    from frozenvit.backbone.suite.cli import main as cli

    argv = ["backbone", "distill", "--teacher", "default", "--init", "default",
            "--student", "vit_tiny_patch16_224", "--student-kwargs", json.dumps({"depth": args.depth}),
            "--data", str(args.out / "frames"), "--img-size", str(args.img_size), "--epochs", str(args.epochs),
            "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--warmup-steps", "100",
            "--w-kd", "0", "--min-scale", "0.6", "--mix-prob", "0", "--out", str(args.out / "run"),
            "--threads", str(args.threads)] + (["--resume"] if args.resume else [])
    print("frozenvit " + " ".join(argv), flush=True)
    return cli(argv)


if __name__ == "__main__":
    sys.exit(main())
