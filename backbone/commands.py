"""`frozenvit backbone info | inspect`, and the one rule every command lists its input images by (`image_files`).

Registered through the entry-point group `frozenvit.commands` like every application.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from .config import EMBEDDED_NAME as EMBEDDED   # --backbone embedded: the embedded ViT, as without --backbone
from .runtimes import add_runtime_arg
from .suite.cli import add_backbone_args, add_threads_arg, number
from .suite.errors import UsageError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif")
#: images of formats frozenvit does not read: a folder's files of these suffixes are skipped with a warning naming them
UNREAD_IMAGE_SUFFIXES = (".avif", ".heic", ".heif", ".jp2", ".j2k", ".jxl", ".ppm", ".pgm", ".pbm", ".pnm", ".tga",
                         ".psd", ".exr", ".hdr", ".dng", ".cr2", ".nef", ".arw", ".raw", ".ico", ".svg")


def backbone_name(args: argparse.Namespace) -> str | None:
    """The load_backbone name of --backbone (None: the embedded ViT)."""
    return None if args.backbone in (None, EMBEDDED) else args.backbone


def backbone_from_args(args: argparse.Namespace):
    """The backbone of the options `add_backbone_args` (and --random-weights) added; UsageError for options that
    contradict each other."""
    from .loading import load_backbone
    from .suite.cli import check_backbone_args

    check_backbone_args(args)
    return load_backbone(backbone_name(args), weights=args.weights, img_size=args.image_size,
                         pretrained=not getattr(args, "random_weights", False))


def is_ours(folder: Path) -> bool:
    """True for a folder frozenvit wrote (its marker) or one of its temporaries (their tag); a user's file of the
    same name that is not one of them does not count."""
    import json

    from .suite.artifacts import MARKER, TEMP_MARKER

    for name, key in ((MARKER, "kind"), (TEMP_MARKER, "token")):
        try:
            tag = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(tag, dict) and key in tag:
            return True
    return False


def image_files(paths: Sequence[str | Path], *, recursive: bool = True, exclude: Sequence[str | Path] = ()) -> list[Path]:
    """The image files that `paths` (files or folders) name, in order, each once: the one rule every command
    reads its inputs by.

    A file is taken as named. A folder gives its files with an image suffix (IMAGE_SUFFIXES; a GIF is read by its
    first frame), sorted, those in its subfolders too with `recursive`, linked subfolders included (each real folder
    is walked once, so a link back up the tree ends there); hidden names (".*": macOS `._x.png`,
    `.ipynb_checkpoints/`, our temporaries and their look-alikes) are skipped, and so are folders frozenvit wrote
    (outputs, artifacts: they hold `.frozenvit.json`) and the `exclude` paths (a command's own --out), so outputs are
    never read back as inputs. Images of a format frozenvit does not read (UNREAD_IMAGE_SUFFIXES: HEIC, RAW, ...)
    are skipped with a warning naming them; other files (notes, .DS_Store) are not images and are passed over.
    Raises UsageError for a path that does not exist.
    """
    import warnings

    skip = {Path(e).resolve() for e in exclude}
    out: list[Path] = []
    seen: set[Path] = set()
    walked: set[Path] = set()
    unread: list[Path] = []

    def walk(folder: Path) -> Iterator[Path]:
        real = folder.resolve()
        if real in skip or real in walked or is_ours(folder):
            return
        walked.add(real)
        for f in folder.iterdir():
            if f.name.startswith(".") or f.resolve() in skip:
                continue
            if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES:
                yield f
            elif f.is_file() and f.suffix.lower() in UNREAD_IMAGE_SUFFIXES:
                unread.append(f)
            elif recursive and f.is_dir():
                yield from walk(f)

    for p in map(Path, paths):
        if not p.exists():
            raise UsageError(f"{p} does not exist; pass image files or folders of images")
        for f in sorted(walk(p)) if p.is_dir() else [p]:
            if f.resolve() not in seen:
                seen.add(f.resolve())
                out.append(f)
    if unread:
        shown = ", ".join(map(str, sorted(unread)[:5])) + (f" and {len(unread) - 5} more" if len(unread) > 5 else "")
        warnings.warn(f"skipped {len(unread)} image file{'s' * (len(unread) > 1)} of a format frozenvit does not read "
                      f"({shown}); convert {'them' if len(unread) > 1 else 'it'} to PNG ({', '.join(IMAGE_SUFFIXES)} "
                      "are read) to include them", stacklevel=2)
    return out


def list_images(paths: Sequence[str], exclude: Sequence[str | Path] = ()) -> list[Path]:
    """`image_files(paths)` (folders searched recursively); UsageError when there are none."""
    out = image_files(paths, exclude=exclude)
    if not out:
        raise UsageError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {', '.join(map(str, paths))} (hidden "
                         "files and folders frozenvit wrote are skipped)")
    return out


def read_images(files: Sequence[Path]) -> list:
    """PIL images of `files`, each checked by decoding it; ImageFormatError naming a file that is not one.

    They keep their EXIF Orientation tag: `preprocess` (`to_rgb_uint8`) turns them as viewers and `anomaly`'s
    readers show them, after reading a 16-bit PNG's recorded bit depth from its file."""
    from PIL import Image

    from .errors import ImageFormatError

    out = []
    for f in files:
        try:
            im = Image.open(f)
            im.load()
        except Exception as e:   # Pillow's plugins raise many types on malformed files
            raise ImageFormatError(f"cannot read image {f} ({type(e).__name__}: {e}); replace or remove the file") from e
        out.append(im)
    return out


def calibration_from_args(args: argparse.Namespace, int8: bool, option: str) -> list | None:
    """The --calibration images (at most --calibration-images) when `int8`, else None; UsageError when `option`
    (the int8 switch) and --calibration go one without the other."""
    if int8 != bool(args.calibration):
        raise UsageError(f"{option} and --calibration go together: int8 quantisation is calibrated on images")
    return read_images(list_images(args.calibration)[:args.calibration_images]) if int8 else None


def _cmd_info(args: argparse.Namespace) -> int:
    from .loading import load_backbone

    name = backbone_name(args)
    kwargs = {}
    architecture_only = name is not None and args.weights is None
    if architecture_only:
        kwargs["pretrained"] = False  # the contract does not depend on the weights: no download for `info`
    log = logging.getLogger("frozenvit.backbone")
    notes = _Notes()
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)                      # the loader's notes are kept, not printed as they come:
    log.propagate = False                           # `info` prints the contract, with what the load changed
    log.addHandler(notes)
    try:
        bb = load_backbone(name, weights=args.weights, img_size=args.image_size, **kwargs)
    finally:
        log.removeHandler(notes)
        log.setLevel(level)
        log.propagate = propagate
    for r in notes.records:
        # the loader's "building ... with RANDOM weights" is no news when `info` built the architecture alone on
        # purpose: the contract says "architecture only; weights not loaded"
        if r.levelno >= logging.WARNING and not (architecture_only and _is_random_weights_note(r)):
            print(f"warning: {r.getMessage()}", file=sys.stderr)
    text = bb.config.describe()
    if architecture_only:
        text = text.replace("   (RANDOM weights)", "   (architecture only; weights not loaded)")
    lines = [text, f"mean/std from   {_stats_source(bb, name)}"]
    for r in notes.records:
        if r.msg.startswith("position embeddings resampled") and len(r.args) >= 4:
            h0, w0, h1, w1 = r.args[:4]
            lines.append(f"pos. embedding  resampled from the checkpoint's {h0}x{w0} grid to {h1}x{w1} tokens "
                         f"({r.args[4] if len(r.args) > 4 else 'bicubic'})")
    print("\n".join(lines))
    return 0


def _is_random_weights_note(record: logging.LogRecord) -> bool:
    """Whether a log record is load_backbone's warning that it builds random weights (pretrained=False)."""
    return str(record.msg).startswith("building %s with RANDOM weights")


class _Notes(logging.Handler):
    """Keeps the log records of one load, for `info` to print what matters among them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _stats_source(bb: Any, name: str | None) -> str:
    """Where a backbone's mean/std came from, and how to give others: timm's pretrained config of the architecture
    (the tag named, or its default tag: a weights file records no statistics), or the embedded default's spec."""
    from .named import NAMED

    if name is None or name.startswith("frozenvit-default"):
        return "the embedded default's spec (backbone/assets)"
    cfg = getattr(bb.model, "pretrained_cfg", None) or {}
    arch, tag = cfg.get("architecture") or name.split(".")[0], cfg.get("tag") or ""
    full = f"{arch}.{tag}" if tag else arch
    if name in NAMED:
        return f"timm's pretrained config of {full}, the one its packaged weights were trained with"
    if "." in name:
        return f"timm's pretrained config of {full}, the tag named"
    try:
        import timm

        others = [n for n in timm.list_pretrained(f"{arch}.*") if n != full]
    except Exception:  # noqa: BLE001 - only the example is lost
        others = []
    return (f"timm's pretrained config of {full}, the architecture's default tag (a weights file records no "
            f"mean/std). For weights trained with other statistics, name their tag (--backbone "
            f"{others[0] if others else arch + '.TAG'}) or, in Python, pass pretrained_cfg_overlay=dict(mean=..., "
            "std=...) to load_backbone")


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .diagnostics import inspect_backbone, plot_inspection
    from .suite.artifacts import check_output_dir, output_dir, write_json

    check_output_dir(args.out, "backbone.inspect")
    images = read_images(list_images(args.images, exclude=[args.out])[: args.max_images])
    bb = backbone_from_args(args)
    if bb.config.kind != "vit":
        raise UsageError(f"backbone inspect needs a ViT (it reads attention maps); {bb.name} is a CNN: pass a ViT "
                         "with --backbone NAME, or drop --backbone for the embedded ViT")
    from .diagnostics import reads_attention

    if not reads_attention(bb):
        raise UsageError(f"backbone inspect recomputes plain ViT attention; {bb.name}'s blocks "
                         f"({type(bb.model.blocks[0].attn).__name__}) add RoPE or relative position bias, which it "
                         "does not model: pass a plain ViT (vit_*, deit_*, DINOv2) with --backbone NAME, or drop "
                         "--backbone for the embedded ViT")
    out = output_dir(args.out, "backbone.inspect")
    rep = inspect_backbone(bb, images, batch_size=args.batch_size)
    print(rep.table())
    body = rep.as_dict()
    if args.runtime != "torch":
        from .export import compare_grids, runtime_backbone

        every = list(range(bb.config.depth))
        body["runtime"] = cmp = compare_grids(bb, runtime_backbone(bb, args.runtime, every), images, every,
                                              batch_size=args.batch_size)
        worst = max(cmp["grid_rel_diff"].values())
        print(f"{args.runtime} vs torch on {cmp['images']} images, blocks 0..{every[-1]}: patch grids within "
              f"{worst:.1e} relative (worst block); {cmp['seconds']['runtime']:.2f} s vs {cmp['seconds']['torch']:.2f} s "
              f"({cmp['speedup']:.2f}x)")
    plot_inspection(rep, out / "inspect.png")
    write_json(out / "inspect.json", body)
    print(f"wrote {out / 'inspect.png'} and {out / 'inspect.json'}")
    return 0


def register(subparsers: Any) -> None:
    bbp = subparsers.add_parser("backbone", help="describe and inspect backbones")
    bsub = bbp.add_subparsers(dest="backbone_command", required=True)
    q = bsub.add_parser("info", help="print the preprocessing and grid contract of a backbone")
    add_backbone_args(q, non_square=True)
    q.set_defaults(func=_cmd_info)
    q = bsub.add_parser("inspect", help="attention entropy/distance and token-norm outliers on given images; with "
                                        "--runtime, the runtime's patch grids against torch's (parity, speed)")
    add_backbone_args(q, non_square=True)
    q.add_argument("--random-weights", action="store_true", help="random initialisation (baselines only)")
    add_runtime_arg(q)
    add_threads_arg(q)
    q.add_argument("--images", nargs="+", required=True,
                   help="image files or folders (searched recursively; hidden files and folders frozenvit wrote, "
                        "--out included, are skipped)")
    q.add_argument("--max-images", type=number(int, min=1), default=32, help="use at most this many images")
    q.add_argument("--batch-size", type=number(int, min=1), default=8, help="images per forward pass")
    q.add_argument("--out", default="inspect-out", metavar="DIR",
                   help="folder for inspect.png and inspect.json: new, empty, or an earlier inspect output")
    q.set_defaults(func=_cmd_inspect)

