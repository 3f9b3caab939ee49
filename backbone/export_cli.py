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

from .runtimes import CALIBRATION_IMAGES, FORMATS, SET_FILE, SET_KIND
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
               sources: Callable[[argparse.Namespace], list[tuple]]) -> None:
    """An application's `frozenvit export NAME OPTION DIR`: `sources(args)` gives [(subfolder, backbone, blocks)]
    or [(subfolder, backbone, blocks, estimator)], each exported to --out/subfolder ("": --out itself). An
    `estimator` (e.g. a PatchCore member) is what --int8 calibrates on: its own inputs of the --calibration images
    (`calibration_inputs`: its tiles, when it tiles), as `use_runtime` does. Subfolders are written as one artifact
    (`SET_KIND`, one temporary folder renamed once): --out holds all members of one export or its earlier content."""
    q = sub.add_parser(name, help=help)
    q.add_argument(option, required=True, help=option_help)
    common(q)
    q.set_defaults(func=lambda args: _export_sources(args, sources))


def _export_sources(args: argparse.Namespace, get: Callable[[argparse.Namespace], list[tuple]]) -> int:
    from .export import KIND, SET_FORMAT_VERSION, calibration_inputs, export_backbone
    from .suite.artifacts import atomic_dir, check_artifact_dir, write_json

    calibration = _calibration(args)
    sources = [(s[0], s[1], s[2], s[3] if len(s) > 3 else None) for s in get(args)]
    out = Path(args.out)
    nested = any(sub for sub, *_ in sources)
    if _earlier_export(out, KIND) == "members" and not _lists_its_members(out):
        _clean_member_temporaries(out)           # an older frozenvit's export, one member at a time (maybe cut short)
        _check_earlier_export(out, KIND)         # ours, unchanged, nothing else inside
        _adopt_earlier_members(out)              # so that it is replaced as a whole below, like any export of ours
    kind, other = (SET_KIND, KIND) if nested else (KIND, SET_KIND)
    check_artifact_dir(out, kind, replaces=(other,))     # an export replaces its own earlier one of either shape
    cal = lambda member: calibration_inputs(member, calibration) if args.int8 else None
    if not nested:
        (_, bb, blocks, member), = sources
        report(export_backbone(bb, out, blocks, format=args.format, int8=args.int8, calibration=cal(member),
                               replaces=(SET_KIND,)))
        return 0
    with atomic_dir(out, SET_KIND, replaces=(KIND,)) as tmp:    # every member, then one rename: never half a set
        for sub, bb, blocks, member in sources:
            export_backbone(bb, tmp / sub, blocks, format=args.format, int8=args.int8, calibration=cal(member))
        write_json(tmp / SET_FILE, {"kind": SET_KIND, "format_version": SET_FORMAT_VERSION, "format": args.format,
                                    "int8": bool(args.int8),
                                    "members": [{"folder": sub, "name": bb.config.name} for sub, bb, *_ in sources]})
    for sub, *_ in sources:
        report(out / sub)
    return 0


def _marker_kind(folder: Path) -> str | None:
    from .suite.artifacts import read_marker

    return (read_marker(folder) or {}).get("kind")


def _earlier_export(out: Path, kind: str) -> str | None:
    """"single" or "members" when `out` holds an earlier export of ours of that shape (one graph, or one per
    member), else None (absent, empty, or anything else: the usual checks refuse or accept it)."""
    if out.is_symlink() or not out.is_dir():
        return None
    have = _marker_kind(out)
    return "single" if have == kind else "members" if have == SET_KIND else None


def _lists_its_members(out: Path) -> bool:
    """Whether the marker of an export of one graph per member lists its member files (written as one artifact);
    an older frozenvit marked the folder first and wrote each member on its own."""
    from .suite.artifacts import read_marker

    return SET_FILE in ((read_marker(out) or {}).get("files") or {})


def _clean_member_temporaries(out: Path) -> None:
    """Remove the temporaries of ours (tagged as such) that an interrupted member write of an older export left."""
    from .suite.artifacts import _clean_stale

    for tmp in [p for p in out.iterdir() if p.name.startswith(".") and (".tmp-" in p.name or ".old-" in p.name)]:
        _clean_stale(out / tmp.name[1:].rsplit(".", 1)[0])


def _adopt_earlier_members(out: Path) -> None:
    """List in the marker of an older export of one graph per member (checked: every file is one of its members',
    unchanged) all their files, so that `atomic_dir` replaces it as a whole."""
    from .suite.artifacts import MARKER, TEMP_MARKER, read_marker, sha256_file, write_json

    files = sorted(f for f in out.rglob("*") if f.is_file() and f.name != TEMP_MARKER and f != out / MARKER)
    marker = read_marker(out) or {"kind": SET_KIND}
    marker["files"] = {str(f.relative_to(out)): sha256_file(f) for f in files}
    marker["stats"] = {str(f.relative_to(out)): [f.stat().st_size, f.stat().st_mtime_ns] for f in files}
    write_json(out / MARKER, marker)


def _check_earlier_export(out: Path, kind: str) -> None:
    """Refuse (OutputConflict, before any work) an earlier export in `out` of the other shape that holds a file
    frozenvit did not write or one changed since: an export replaces its own earlier output of either shape (a
    single model's into an ensemble's, and back), never a user's file."""
    from .suite.artifacts import check_artifact_dir, check_output_dir, foreign_files
    from .suite.errors import OutputConflict

    if _marker_kind(out) == kind:                # one graph: an artifact whose every file is listed and unchanged
        check_artifact_dir(out, kind)
        return
    check_output_dir(out, SET_KIND)              # one folder per member, each an export of ours
    members = [d for d in out.iterdir() if d.is_dir() and not d.is_symlink() and _marker_kind(d) == kind]
    for d in members:
        check_artifact_dir(d, kind)
    inside = {str(f.relative_to(out)) for d in members for f in d.rglob("*")}
    foreign = sorted(set(foreign_files(out)) - inside)
    if foreign:
        raise OutputConflict(f"--out {out} holds an earlier export with files frozenvit did not write beside it "
                             f"({', '.join(foreign[:5])}); frozenvit never deletes or overwrites what it did not "
                             "write. Choose a new --out path (or an empty folder), or move those files away")


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
    add_backbone_args(q, blocks_help="blocks whose grids the graph returns (without it: the last)",
                      non_square=True)
    q.add_argument("--random-weights", action="store_true", help="random initialisation (baselines only)")
    common(q)
    q.set_defaults(func=_cmd_backbone)

    for ep in sorted(entry_points(group="frozenvit.export"), key=lambda e: e.name):
        ep.load()(sub, common)             # an application adds the export of its own artifact
