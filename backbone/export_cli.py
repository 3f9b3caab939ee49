"""`frozenvit export backbone | policy | anomaly`, and the `--runtime` option every command that encodes takes.

    frozenvit export backbone --blocks 2,5,11 --format onnx --out deploy/vit
    frozenvit export policy   --policy runs/policies/reach --format openvino --out deploy/reach
    frozenvit export anomaly  --model runs/anomaly/bottle --out deploy/bottle

Each writes an artifact of backbone/export.py: the patch-grid forward of the blocks the backbone, policy or
anomaly model reads, at its input size, with the source weights' fingerprint and preprocessing (an anomaly
ensemble: one folder per member). Registered through the entry-point group `frozenvit.commands`.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .runtimes import DEFAULT_RUNTIME, FORMATS, RUNTIMES
from .suite.cli import add_backbone_args, add_threads_arg


def add_runtime_arg(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """--runtime: what runs the backbone's forward; the rest of the command is the same Python code."""
    if several:
        parser.add_argument("--runtime", type=runtime_list, default=(DEFAULT_RUNTIME,), metavar="NAMES",
                            help=f"comma-separated runtimes to compare in one run, each timed in turn "
                                 f"({', '.join(RUNTIMES)}); onnxruntime and openvino run the backbone exported at its "
                                 f"input size (pip install 'frozenvit[deploy]'); without it: {DEFAULT_RUNTIME}")
        return
    parser.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME,
                        help="what runs the backbone: torch eager, or the backbone exported to ONNX and run by "
                             "onnxruntime, or to OpenVINO IR and run by OpenVINO (pip install 'frozenvit[deploy]')")


def runtime_list(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in RUNTIMES]
    if not names or bad or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names among {', '.join(RUNTIMES)} separated by commas, "
                                         f"got {text!r}")
    return names


def _cmd_backbone(args: argparse.Namespace) -> int:
    from .commands import backbone_from_args
    from .export import export_backbone
    from .suite.artifacts import check_artifact_dir

    check_artifact_dir(args.out, "backbone.export")
    bb = backbone_from_args(args)
    path = export_backbone(bb, args.out, args.blocks, format=args.format)
    _report(path)
    return 0


def _cmd_policy(args: argparse.Namespace) -> int:
    from frozenvit.control.encoders import encoder_for_policy
    from frozenvit.control.features import token_blocks
    from frozenvit.control.policy import PatchTokenPolicy

    from .export import export_backbone
    from .suite.artifacts import check_artifact_dir

    check_artifact_dir(args.out, "backbone.export")
    pol = PatchTokenPolicy.load(args.policy)
    bb = encoder_for_policy(pol, pretrained=pol.meta_.get("pretrained", True))
    _report(export_backbone(bb, args.out, token_blocks(pol.meta_), format=args.format))
    return 0


def _cmd_anomaly(args: argparse.Namespace) -> int:
    from frozenvit.anomaly.ensemble import load_detector

    from .export import export_backbone
    from .suite.artifacts import check_artifact_dir

    det = load_detector(args.model)
    members = getattr(det, "members_", None)
    outs = [Path(args.out) / f"member{i}" for i in range(len(members))] if members else [Path(args.out)]
    for out in outs:
        check_artifact_dir(out, "backbone.export")
    for m, out in zip(members or [det], outs):
        _report(export_backbone(m.backbone_, out, m.blocks_, format=args.format))
    return 0


def _report(path: Path) -> None:
    import json

    cfg = json.loads((path / "config.json").read_text())
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"exported {cfg['source']['name']} blocks {','.join(map(str, cfg['blocks']))} at "
          f"{'x'.join(map(str, cfg['preprocessing']['img_size']))} px as {cfg['format']} ({size / 2**20:.1f} MiB) "
          f"to {path}")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="deployable graphs (ONNX, OpenVINO IR) of a backbone, policy or "
                                             "anomaly model's feature extractor",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="export_cmd", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                       help="onnx: one .onnx file (onnxruntime, or OpenVINO); openvino: OpenVINO IR (.xml + .bin)")
        q.add_argument("--out", required=True, metavar="DIR",
                       help="artifact folder: new, empty, or an earlier export, which is replaced")
        add_threads_arg(q)

    q = sub.add_parser("backbone", help="a backbone's patch grids of --blocks at its input size")
    add_backbone_args(q, blocks_help="blocks whose grids the graph returns (without it: the last)")
    q.add_argument("--random-weights", action="store_true", help="random initialisation (baselines only)")
    common(q)
    q.set_defaults(func=_cmd_backbone)

    q = sub.add_parser("policy", help="the encoder of a control policy: its blocks at its input size")
    q.add_argument("--policy", required=True, help="policy folder from `control train`")
    common(q)
    q.set_defaults(func=_cmd_policy)

    q = sub.add_parser("anomaly", help="the feature extractor of an anomaly model (an ensemble: OUT/member<i>)")
    q.add_argument("--model", required=True, help="model folder written by `anomaly fit`")
    common(q)
    q.set_defaults(func=_cmd_anomaly)
