"""The `frozenvit` command. Everything it runs plugs in through the entry-point group `frozenvit.commands`.

Each entry point is `register(subparsers)` adding one parser; leaves set `func(args) -> int`.
This module imports no command: the backbone's, the trainer's and each application's register themselves.
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


def add_threads_arg(parser: argparse.ArgumentParser, default: int | None = None) -> None:
    """--threads N: torch intra-op threads for this command (main() applies it)."""
    parser.add_argument("--threads", type=int, default=default,
                        help="torch threads (default: %(default)s = torch's choice when None); "
                             "1 is steadiest on a busy 2-core machine")


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    path = run_demo(Path(args.out), threads=args.threads or 2, quick=args.quick, only=args.only)
    print(f"wrote {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="frozenvit", description="Downstream applications on frozen ViT backbones")
    p.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("demo", help="run every application's demo on the embedded default; write an HTML report")
    q.add_argument("--out", default="demo-report",
                   help="report folder (default: %(default)s): new, empty, or an earlier demo report")
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
