"""`frozenvit export backbone | policy | anomaly`: deployable graphs of a backbone's patch-grid forward.

    frozenvit export backbone --blocks 2,5,11 --format onnx --out deploy/vit
    frozenvit export policy   --policy runs/policies/reach --format openvino --out deploy/reach
    frozenvit export anomaly  --model runs/anomaly/bottle --out deploy/bottle

Each writes an artifact of backbone/export.py: the patch-grid forward of the blocks the backbone, policy or
anomaly model reads, at its input size, with the source weights' fingerprint and preprocessing (an anomaly
ensemble: one folder per member). Registered through the entry-point group `frozenvit.commands`; the
applications add the export of their artifacts through the group `frozenvit.export` (`register_export(sub,
common)` in their CLI modules, calling `add_export`), so the backbone imports none of them.
"""
from __future__ import annotations

import argparse
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from .runtimes import CALIBRATION_IMAGES, FORMATS
from .suite.cli import add_backbone_args, add_threads_arg, number


def _cmd_backbone(args: argparse.Namespace) -> int:
    from .commands import backbone_from_args
    from .export import export_backbone
    from .suite.artifacts import check_artifact_dir

    check_artifact_dir(args.out, "backbone.export")
    calibration = _calibration(args)
    bb = backbone_from_args(args)
    check_blocks(args.blocks, bb)
    report(export_backbone(bb, args.out, args.blocks, format=args.format, int8=args.int8, calibration=calibration))
    return 0


def check_blocks(blocks: tuple[int, ...] | None, backbone: Any, option: str = "--blocks") -> None:
    """UsageError naming `option` for a block `backbone` does not have (None: its default, always there)."""
    from .suite.errors import UsageError

    depth = backbone.config.depth
    bad = [b for b in blocks or () if not 0 <= b < depth]
    if bad:
        raise UsageError(f"{option} {bad[0]} is out of range for {backbone.name}, a {depth}-block backbone: "
                         f"pick blocks 0..{depth - 1}")


def add_export(sub: Any, common: Any, name: str, help: str, option: str, option_help: str,
               sources: Callable[[argparse.Namespace], list[tuple[str, Any, Any]]]) -> None:
    """An application's `frozenvit export NAME OPTION DIR`: `sources(args)` gives [(subfolder, backbone, blocks)],
    each exported to --out/subfolder ("": --out itself); every folder is checked before the first is written."""
    q = sub.add_parser(name, help=help)
    q.add_argument(option, required=True, help=option_help)
    common(q)
    q.set_defaults(func=lambda args: _export_sources(args, sources))


def _export_sources(args: argparse.Namespace, get: Callable[[argparse.Namespace], list[tuple[str, Any, Any]]]) -> int:
    from .export import KIND, export_backbone
    from .suite.artifacts import check_artifact_dir, check_output_dir, output_dir

    calibration = _calibration(args)
    sources = get(args)
    outs = [Path(args.out) / sub if sub else Path(args.out) for sub, _, _ in sources]
    nested = any(sub for sub, _, _ in sources)
    if nested:                                   # --out holds one export per member: a folder of ours, or refused
        check_output_dir(args.out, SET_KIND)
    for out in outs:
        check_artifact_dir(out, KIND)
    if nested:
        output_dir(args.out, SET_KIND)
    for out, (_, bb, blocks) in zip(outs, sources):
        report(export_backbone(bb, out, blocks, format=args.format, int8=args.int8, calibration=calibration))
    return 0


SET_KIND = "backbone.export.members"   # the --out folder of an export that writes one subfolder per member


def _calibration(args: argparse.Namespace) -> list | None:
    """The --calibration images of an --int8 export (UsageError when one goes without the other)."""
    from .commands import calibration_from_args

    return calibration_from_args(args, bool(args.int8), "--int8")


def report(path: Path) -> None:
    """Print one line about an export written to `path`."""
    import json

    cfg = json.loads((path / "config.json").read_text())
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"exported {cfg['source']['name']} blocks {','.join(map(str, cfg['blocks']))} at "
          f"{'x'.join(map(str, cfg['preprocessing']['img_size']))} px as {cfg['format']} ({size / 2**20:.1f} MiB) "
          f"to {path}")
    if cfg.get("int8"):
        q = cfg["int8"]
        err = ", ".join(f"block {b}: {e:.1e}" for b, e in q["grid_rel_error_on_calibration_images"].items())
        print(f"int8: patch grids differ from torch's by max |diff| / max |torch| = {err} (on the "
              f"{q['calibration_images']} calibration images); measure the application's own metric before using it")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="deployable graphs (ONNX, OpenVINO IR) of a backbone, policy or "
                                             "anomaly model's feature extractor",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="export_cmd", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        """--format, --out and --threads, the same in every export subcommand."""
        q.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                       help="onnx: one .onnx file (onnxruntime, or OpenVINO); openvino: OpenVINO IR (.xml + .bin)")
        q.add_argument("--out", required=True, metavar="DIR",
                       help="artifact folder: new, empty, or an earlier export, which is replaced")
        q.add_argument("--int8", action="store_true",
                       help="int8 static quantisation (onnxruntime, calibrated on --calibration); the grids' error "
                            "against torch is measured, recorded in config.json and printed")
        q.add_argument("--calibration", nargs="+", default=None, metavar="PATH",
                       help="--int8: image files or folders like those the graph will see")
        q.add_argument("--calibration-images", type=number(int, min=1), default=CALIBRATION_IMAGES, metavar="N",
                       help="--int8: use at most this many calibration images")
        add_threads_arg(q)

    q = sub.add_parser("backbone", help="a backbone's patch grids of --blocks at its input size")
    add_backbone_args(q, blocks_help="blocks whose grids the graph returns (without it: the last)")
    q.add_argument("--random-weights", action="store_true", help="random initialisation (baselines only)")
    common(q)
    q.set_defaults(func=_cmd_backbone)

    for ep in sorted(entry_points(group="frozenvit.export"), key=lambda e: e.name):
        ep.load()(sub, common)             # an application adds the export of its own artifact
