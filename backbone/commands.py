"""`frozenvit backbone info | inspect`, and the command-line helpers the applications share for naming a backbone.

Registered through the entry-point group `frozenvit.commands` like every application.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, Sequence

from .suite.cli import add_threads_arg, number
from .suite.errors import UsageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def add_backbone_args(parser: argparse.ArgumentParser) -> None:
    """--backbone NAME --weights FILE --img-size N (no name: the embedded default)."""
    parser.add_argument("--backbone", default=None,
                        help="timm model name, or efficientnet_lite0/1/2 (ImageNet weights from frozenvit[convnets]); "
                             "default: the embedded default")
    parser.add_argument("--weights", default=None, help="local .safetensors/.pth weights for --backbone")
    parser.add_argument("--img-size", type=number(int, min=1), default=None,
                        help="input size in pixels (None: the model's); position embeddings are resampled")
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
            raise UsageError(f"{p} does not exist; pass image files or folders of images")
    if not out:
        raise UsageError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {', '.join(paths)}")
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

    from .diagnostics import inspect_backbone, plot_inspection
    from .suite.artifacts import check_output_dir, output_dir, write_json

    check_output_dir(args.out, "backbone.inspect")
    bb = backbone_from_args(args)
    files = list_images(args.images)[: args.max_images]
    out = output_dir(args.out, "backbone.inspect")
    images = [Image.open(f) for f in files]
    rep = inspect_backbone(bb, images, batch_size=args.batch_size)
    print(rep.table())
    plot_inspection(rep, out / "inspect.png")
    write_json(out / "inspect.json", rep.as_dict())
    print(f"wrote {out / 'inspect.png'} and {out / 'inspect.json'}")
    return 0


def register(subparsers: Any) -> None:
    bbp = subparsers.add_parser("backbone", help="describe and inspect backbones")
    bsub = bbp.add_subparsers(dest="backbone_command", required=True)
    q = bsub.add_parser("info", help="print the preprocessing and grid contract of a backbone")
    q.add_argument("name", nargs="?", default=None,
                   help="timm model name or efficientnet_lite0/1/2 (default: the embedded default)")
    q.add_argument("--weights", default=None, help="local .safetensors/.pth weights for NAME")
    q.add_argument("--img-size", type=number(int, min=1), default=None, help="input size (None: the model's)")
    q.set_defaults(func=_cmd_info)
    q = bsub.add_parser("inspect", help="attention entropy/distance and token-norm outliers on given images")
    add_backbone_args(q)
    add_threads_arg(q)
    q.add_argument("--images", nargs="+", required=True, help="image files or folders")
    q.add_argument("--max-images", type=number(int, min=1), default=32, help="use at most this many images")
    q.add_argument("--batch-size", type=number(int, min=1), default=8, help="images per forward pass")
    q.add_argument("--out", default="inspect-out",
                   help="folder for inspect.png and inspect.json: new, empty, or an earlier inspect output")
    q.set_defaults(func=_cmd_inspect)
