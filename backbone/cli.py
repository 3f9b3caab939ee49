"""The `frozenvit` command. Applications plug in through the entry-point group `frozenvit.commands`.

Each entry point is `register(subparsers)` adding one parser; leaves set `func(args) -> int`.
The backbone never imports an application.
"""
from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Sequence

from .errors import FrozenVitError

COMMANDS_GROUP = "frozenvit.commands"
DEMO_GROUP = "frozenvit.demo"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def add_threads_arg(parser: argparse.ArgumentParser, default: int | None = None) -> None:
    """--threads N: torch intra-op threads for this command (main() applies it)."""
    parser.add_argument("--threads", type=int, default=default,
                        help="torch threads (default: torch's choice); 1 is steadiest on a busy 2-core machine")


def add_backbone_args(parser: argparse.ArgumentParser) -> None:
    """--backbone NAME --weights FILE --img-size N (no name: the embedded default)."""
    parser.add_argument("--backbone", default=None, help="timm model name (default: the embedded default)")
    parser.add_argument("--weights", default=None, help="local .safetensors/.pth weights for --backbone")
    parser.add_argument("--img-size", type=int, default=None, help="input size; position embeddings are resampled")
    parser.add_argument("--random-weights", action="store_true", help="random initialisation (baselines only)")


def backbone_from_args(args: argparse.Namespace):
    from .loading import load_backbone

    return load_backbone(args.backbone, weights=args.weights, img_size=args.img_size,
                         pretrained=not getattr(args, "random_weights", False))


def list_images(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
        elif p.is_file():
            out.append(p)
        else:
            raise FrozenVitError(f"{p} does not exist")
    if not out:
        raise FrozenVitError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {', '.join(paths)}")
    return out


def _cmd_info(args: argparse.Namespace) -> int:
    from .loading import load_backbone

    name = args.name
    kwargs = {}
    if name is not None and args.weights is None:
        kwargs["pretrained"] = False  # the contract does not depend on the weights: no download for `info`
    logging.getLogger("frozenvit.backbone").setLevel(logging.ERROR)
    bb = load_backbone(name, weights=args.weights, img_size=args.img_size, **kwargs)
    text = bb.config.describe()
    if name is not None and args.weights is None:
        text = text.replace("   (RANDOM weights)", "   (architecture only; weights not loaded)")
    print(text)
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from PIL import Image

    from .inspect import inspect_backbone, plot_inspection

    from .artifacts import output_dir, write_json

    out = output_dir(args.out, "backbone.inspect")
    bb = backbone_from_args(args)
    files = list_images(args.images)[: args.max_images]
    images = [Image.open(f) for f in files]
    rep = inspect_backbone(bb, images, batch_size=args.batch_size)
    print(rep.table())
    plot_inspection(rep, out / "inspect.png")
    write_json(out / "inspect.json", rep.as_dict())
    print(f"wrote {out / 'inspect.png'} and {out / 'inspect.json'}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    path = run_demo(Path(args.out), threads=args.threads or 2, quick=args.quick, only=args.only)
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="frozenvit", description="Downstream applications on frozen ViT backbones")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    bbp = sub.add_parser("backbone", help="inspect, describe and distil backbones")
    bsub = bbp.add_subparsers(dest="backbone_command", required=True)
    q = bsub.add_parser("info", help="print the preprocessing and grid contract of a backbone")
    q.add_argument("name", nargs="?", default=None, help="timm model name (default: the embedded default)")
    q.add_argument("--weights", default=None)
    q.add_argument("--img-size", type=int, default=None)
    q.set_defaults(func=_cmd_info)
    q = bsub.add_parser("inspect", help="attention entropy/distance and token-norm outliers on given images")
    add_backbone_args(q)
    add_threads_arg(q)
    q.add_argument("--images", nargs="+", required=True, help="image files or folders")
    q.add_argument("--max-images", type=int, default=32)
    q.add_argument("--batch-size", type=int, default=8)
    q.add_argument("--out", default="inspect-out")
    q.set_defaults(func=_cmd_inspect)
    from . import distill_cli

    distill_cli.register(bsub)

    q = sub.add_parser("demo", help="run every application's demo on the embedded default; write an HTML report")
    q.add_argument("--out", default="demo-report")
    q.add_argument("--quick", action="store_true", help="tiny workloads (smoke test)")
    q.add_argument("--only", nargs="*", default=None, help="section names to run (default: all)")
    add_threads_arg(q, default=2)
    q.set_defaults(func=_cmd_demo)

    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as e:  # one broken plugin must not take the whole CLI down
            print(f"warning: command plugin {ep.name!r} failed to load: {e}", file=sys.stderr)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    threads = getattr(args, "threads", None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        return int(args.func(args) or 0)
    except FrozenVitError as e:
        print(f"error ({type(e).__name__}): {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
