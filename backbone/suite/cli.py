"""The `frozenvit` command. Everything it runs plugs in through the entry-point group `frozenvit.commands`.

Each entry point is `register(subparsers)` adding one parser; leaves set `func(args) -> int`.
This module imports no command: the backbone's, the trainer's and each application's register themselves.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import FrozenVitError, InvalidParameterError, NotFittedError, UsageError

COMMANDS_GROUP = "frozenvit.commands"
LOG_DIR = Path(tempfile.gettempdir()) / "frozenvit-logs"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; every option's help ends with its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.help is argparse.SUPPRESS or "%(default)" in text or "(default" in text or not action.option_strings:
            return text
        if action.required or action.default is None or action.default is argparse.SUPPRESS:
            return text                                   # nothing to show: the help says what happens without it
        if isinstance(action, (argparse._StoreConstAction, argparse._HelpAction, argparse._VersionAction)):
            return text                                   # flags: their presence is the value
        return f"{text} (default: %(default)s)".lstrip()


class Parser(argparse.ArgumentParser):
    """The suite's parser: defaults in --help, and a usage mistake is a named error with exit status 2.

    Sub-parsers made by `add_subparsers().add_parser(...)` are of this class too (argparse passes it on).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("formatter_class") in (None, argparse.HelpFormatter, argparse.RawDescriptionHelpFormatter):
            kwargs["formatter_class"] = HelpFormatter
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:   # type: ignore[override]
        # one line, as every other error of the user's (docs/errors.md): no usage block; --help shows it
        print(f"error (UsageError): {message}; see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def number(kind: Callable[[str], Any] = int, min: float | None = None, max: float | None = None,
           min_open: bool = False, max_open: bool = False) -> Callable[[str], Any]:
    """argparse `type=` for a number in a range: `number(int, min=1)`, `number(float, min=0, max=1)`.

    `min_open` / `max_open` leave that end out of the range: `number(float, min=0, max=1, min_open=True,
    max_open=True)` is (0, 1). A value outside is refused (exit 2, the flag named), never reinterpreted; so are
    nan and infinities.
    """
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}")
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if min is not None and (v < min or (min_open and v == min)):
            raise argparse.ArgumentTypeError(f"must be {'>' if min_open else '>='} {min:g}, got {text}")
        if max is not None and (v > max or (max_open and v == max)):
            raise argparse.ArgumentTypeError(f"must be {'<' if max_open else '<='} {max:g}, got {text}")
        return v

    parse.__name__ = kind.__name__          # argparse names the type in its messages
    return parse


def int_list(text: str) -> tuple[int, ...]:
    """argparse `type=` for a comma-separated list of non-negative integers: `--blocks 2,5,11`."""
    try:
        values = tuple(int(t) for t in text.replace(" ", "").split(",") if t != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 2,5,11, got {text!r}")
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0 such as 2,5,11, got {text!r}")
    return values


int_list.__name__ = "list of integers"


def add_threads_arg(parser: argparse.ArgumentParser, default: int | None = None) -> None:
    """--threads N: torch intra-op threads for this command (main() applies it)."""
    shown = "torch's choice" if default is None else str(default)
    parser.add_argument("--threads", type=number(int, min=1), default=default,
                        help=f"torch threads for this command (default: {shown}); 1 is steadiest on a busy machine")


def image_size(text: str) -> int | tuple[int, int]:
    """argparse `type=` for an input size: `224` (square) -> 224, or height and width `224,320` / `224x320` ->
    (224, 320), as load_backbone's img_size takes them (a square pair, `224,224`, is 224). Each a positive integer;
    anything else is refused (exit 2, the flag named)."""
    parts = [t.strip() for t in text.strip().lower().replace("x", ",").split(",")]
    how = "give one size in pixels (224) or height and width (224,320 or 224x320), positive integers"
    if len(parts) not in (1, 2) or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{how}, got {text!r}")
    values = tuple(int(p) for p in parts)
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"{how}, got {text!r}")
    if len(values) == 1 or values[0] == values[1]:
        return values[0]
    return values


image_size.__name__ = "image size"


def add_backbone_args(parser: argparse.ArgumentParser, *, default_help: str = "the embedded default ViT",
                      blocks_help: str | None = None, non_square: bool = False) -> None:
    """The same backbone options in every command: --backbone, --weights, --image-size (and --blocks).

    --backbone NAME: a timm model name, a name `load_backbone` knows ("embedded", ...), or what the
    application adds; --weights FILE: local .safetensors/.pth weights for it; --image-size PX: input size;
    --blocks 2,5,11: which blocks' patch grids to read (only when `blocks_help` is given).
    non_square: --image-size also takes height and width, `224,320` or `224x320` (`image_size`), and
    args.image_size is then an int or an (H, W) tuple, as load_backbone's img_size; without it, one positive int
    (for a command whose frames or tiles are square, or that compares the size with numbers).
    """
    parser.add_argument("--backbone", default=None, metavar="NAME",
                        help=f"timm model name or a named backbone (default: {default_help})")
    parser.add_argument("--weights", default=None, metavar="FILE",
                        help="local .safetensors/.pth weights for --backbone (no download)")
    # any positive size here: whether it divides into patches depends on the model, which load_backbone checks
    # (GridMismatch) once it is known (a 14 px DINOv2 takes 14; a 16 px ViT does not)
    if non_square:
        parser.add_argument("--image-size", type=image_size, default=None, metavar="PX|H,W",
                            help="input size in pixels, one side (224) or height and width (224,320 or 224x320), "
                                 "multiples of the model's patch size (default: the backbone's own)")
    else:
        parser.add_argument("--image-size", type=number(int, min=1), default=None, metavar="PX",
                            help="input size in pixels, a multiple of the model's patch size (default: the "
                                 "backbone's own)")
    if blocks_help is not None:
        parser.add_argument("--blocks", type=int_list, default=None, metavar="B,B,...", help=blocks_help)


def check_backbone_args(args: argparse.Namespace) -> None:
    """UsageError for backbone options that contradict each other: --random-weights with --weights.

    `main` runs it before every command, so each command with a backbone refuses them alike, before any work."""
    if getattr(args, "random_weights", False) and getattr(args, "weights", None):
        raise UsageError("--random-weights and --weights contradict each other: drop one (--weights FILE loads "
                         "those weights; --random-weights builds the architecture with random ones)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("frozenvit")
    except PackageNotFoundError:
        return "unknown"


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    path, failed = run_demo(Path(args.out), threads=args.threads or 2, quick=args.quick, only=args.only)
    print(f"wrote {path}")
    if failed:
        print(f"error: demo section{'s' if len(failed) > 1 else ''} {', '.join(failed)} failed; the traceback is in "
              f"{path} (rerun one with --only NAME)", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="frozenvit", description="Downstream applications on frozen ViT backbones")
    p.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    p.add_argument("--version", action="version", version=f"frozenvit {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("demo", help="run every application's demo on the embedded default; write an HTML report")
    q.add_argument("--out", default="demo-report",
                   help="report folder (default: %(default)s): new, empty, or an earlier demo report")
    q.add_argument("--quick", action="store_true", help="tiny workloads (smoke test)")
    q.add_argument("--only", nargs="*", default=None, metavar="SECTION",
                   help="run only these sections (backbone, anomaly, control, forecasting; none given: all)")
    add_threads_arg(q, default=2)
    q.set_defaults(func=_cmd_demo)

    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as e:  # one broken plugin must not take the whole CLI down
            print(f"warning: command plugin {ep.name!r} failed to load: {e}", file=sys.stderr)
    _name_subcommands(p)
    return p


def _name_subcommands(parser: argparse.ArgumentParser) -> None:
    """A missing sub-command is named by its choices ({fit,predict,...}), never by an internal `dest`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if action.metavar is None:
                action.metavar = "{" + ",".join(action.choices) + "}"
            for child in action.choices.values():
                _name_subcommands(child)


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The deepest sub-command's parser that `args` went through (`frozenvit forecast backtest`'s for
    `frozenvit forecast backtest ...`), found by each sub-parsers action's dest; `parser` where none was."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(getattr(args, action.dest, None) or "")
            if child is not None:
                return _chosen_parser(child, args)
    return parser


# A reader that closed our output early (`frozenvit ... | head -1`): no traceback, no crash log, no more
# output, and the status the shell gives a tool that SIGPIPE ends (`yes | head -1`: 128 + 13). Not 0: part of
# the output never reached the reader (`set -o pipefail` tells it); not 1 or 2, which mean our bug or the
# user's mistake.
CLOSED_OUTPUT_STATUS = 141


def main(argv: Sequence[str] | None = None, parser: Callable[[], argparse.ArgumentParser] | None = None) -> int:
    """The `frozenvit` command: `argv` parsed by `parser()` (default: every registered command's), a user's mistake
    one line `error (Name): ...` and exit 2, any other exception a bug (exit 1, its traceback in a crash log).
    Another entry point (`python -m frozenvit.backbone.distill`) passes its own parser to get the same manners."""
    try:
        try:
            return _main(argv, parser or build_parser)
        finally:
            sys.stdout.flush()          # the last buffered lines: a reader gone shows here, not at the exit
    except BrokenPipeError:
        _drop_stdout()
        return CLOSED_OUTPUT_STATUS


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader is gone (another broken pipe, to a worker, is a bug of ours)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return True
    except (OSError, ValueError):
        pass
    try:
        import select

        fd = sys.stdout.fileno()
        poll = select.poll()               # a pipe whose reader is gone polls as an error at the writing end
        poll.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):     # no descriptor (a captured stdout) or no poll()
        return False


def _drop_stdout() -> None:
    """Send what stdout still holds to /dev/null, so that Python's flush at exit finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):     # no file descriptor (a captured stdout): nothing to flush
        pass


def _main(argv: Sequence[str] | None, make_parser: Callable[[], argparse.ArgumentParser]) -> int:
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:                           # named by the sub-command that got them, whose --help lists its options
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    threads = getattr(args, "threads", None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    shown = warnings.formatwarning      # warnings shown as one line; a caller recording them (pytest.warns) still does
    warnings.formatwarning = _warning_line
    try:
        check_backbone_args(args)
        return int(args.func(args) or 0)
    except (FrozenVitError, InvalidParameterError, NotFittedError) as e:   # the user's mistake: one line, what to do
        print(f"error ({type(e).__name__}): {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:                   # our bug: one line, the traceback in a log file
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            raise                            # the reader closed our output: `main` ends quietly
        log = _write_crash_log(argv)
        where = f"the traceback is in {log}" if log else "run with -v to see the traceback (no log could be written)"
        print(f"error: unexpected {type(e).__name__}: {e}. This is a bug in frozenvit, not your input; {where}",
              file=sys.stderr)
        return 1
    finally:
        warnings.formatwarning = shown


def _warning_line(message, *_, **__) -> str:
    """A warning as one `warning: ...` line, without Python's file, line number and source line."""
    return f"warning: {message}\n"


def _write_crash_log(argv: Sequence[str] | None) -> Path | None:
    """Write the traceback to a log file; None when no log can be written (the caller still prints one line)."""
    try:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        path = LOG_DIR / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        cmd = " ".join(sys.argv[:1] + list(argv if argv is not None else sys.argv[1:]))
        with open(path, "x") as f:
            f.write(f"command: {cmd}\n\n{traceback.format_exc()}")
        return path
    except Exception:                        # a log folder of another user, a full disk: never a second traceback
        if logging.getLogger().isEnabledFor(logging.INFO):
            traceback.print_exc()
        return None


if __name__ == "__main__":
    sys.exit(main())
