"""The `frozenvit` command. Everything it runs plugs in through the entry-point group `frozenvit.commands`.

Each entry point is `register(subparsers)` adding one parser; leaves set `func(args) -> int`.
This module imports no command: the backbone's, the trainer's and each application's register themselves.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import FrozenVitError

COMMANDS_GROUP = "frozenvit.commands"
LOG_DIR = Path(tempfile.gettempdir()) / "frozenvit-logs"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; every option's help ends with its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.help is argparse.SUPPRESS or "%(default)" in text or "(default" in text or not action.option_strings:
            return text
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
        self.print_usage(sys.stderr)
        print(f"error (UsageError): {message}; see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)


def number(kind: Callable[[str], Any] = int, min: float | None = None, max: float | None = None,
           min_open: bool = False) -> Callable[[str], Any]:
    """argparse `type=` for a number in a range: `number(int, min=1)`, `number(float, min=0, max=1)`.

    A value outside is refused (exit 2, the flag named), never reinterpreted.
    """
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}")
        if min is not None and (v < min or (min_open and v == min)):
            raise argparse.ArgumentTypeError(f"must be {'>' if min_open else '>='} {min:g}, got {text}")
        if max is not None and v > max:
            raise argparse.ArgumentTypeError(f"must be <= {max:g}, got {text}")
        return v

    parse.__name__ = kind.__name__          # argparse names the type in its messages
    return parse


def add_threads_arg(parser: argparse.ArgumentParser, default: int | None = None) -> None:
    """--threads N: torch intra-op threads for this command (main() applies it)."""
    parser.add_argument("--threads", type=number(int, min=1), default=default,
                        help="torch threads (default: %(default)s = torch's choice when None); "
                             "1 is steadiest on a busy 2-core machine")


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    path = run_demo(Path(args.out), threads=args.threads or 2, quick=args.quick, only=args.only)
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="frozenvit", description="Downstream applications on frozen ViT backbones")
    p.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
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
    except FrozenVitError as e:              # the user's mistake: one line that says what to do
        print(f"error ({type(e).__name__}): {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:                   # our bug: one line, the traceback in a log file
        log = _write_crash_log(argv)
        print(f"error: unexpected {type(e).__name__}: {e}. This is a bug in frozenvit, not your input; "
              f"the traceback is in {log}", file=sys.stderr)
        return 1


def _write_crash_log(argv: Sequence[str] | None) -> Path:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    path = LOG_DIR / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{id(argv) % 100000:05d}.log"
    cmd = " ".join(sys.argv[:1] + list(argv if argv is not None else sys.argv[1:]))
    path.write_text(f"command: {cmd}\n\n{traceback.format_exc()}")
    return path


if __name__ == "__main__":
    sys.exit(main())
