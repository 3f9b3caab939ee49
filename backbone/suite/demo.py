"""`frozenvit demo`: every section registered in the entry-point group `frozenvit.demo`, one HTML report."""
from __future__ import annotations

import datetime
import logging
import shlex
import subprocess
import time
import traceback
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import Sequence

from .artifacts import output_dir
from .errors import UsageError
from .report import DemoContext, Section, write_report

log = logging.getLogger("frozenvit.demo")
DEMO_GROUP = "frozenvit.demo"


def git_commit() -> str | None:
    """The short commit of the checkout this package runs from; None when it is not a git checkout (an installed
    wheel) or git is absent."""
    try:
        got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (got.stdout.strip() or None) if got.returncode == 0 else None


def report_header(command: str, now: datetime.datetime | None = None) -> str:
    """The report's provenance line: when it was written, by which frozenvit (and commit), with which command."""
    now = now or datetime.datetime.now().astimezone()
    try:
        ver = version("frozenvit")
    except PackageNotFoundError:
        ver = "(version unknown: not installed)"
    commit = git_commit()
    stamp = f"{now:%Y-%m-%d %H:%M %Z}".strip()           # no zone name for a naive time
    return (f"Written {stamp} by frozenvit {ver}{f' (git commit {commit})' if commit else ''} "
            f"with: {command}")


def demo_command(out: Path, threads: int, quick: bool, only: Sequence[str] | None) -> str:
    """The `frozenvit demo` command line that makes this report."""
    argv = ["frozenvit", "demo", "--out", str(out), "--threads", str(threads)]
    argv += ["--quick"] if quick else []
    argv += ["--only", *only] if only else []
    return shlex.join(argv)


def run_demo(out: Path, threads: int = 2, quick: bool = False, only: Sequence[str] | None = None
             ) -> tuple[Path, list[str]]:
    """Run every `frozenvit.demo` entry point (the backbone's and each application's) into one HTML report:
    its path, and the names of the sections that failed.

    A failing section does not stop the others: its traceback is in the page, and the command exits 1.
    `out` must be new, empty or an earlier report.
    """
    ctx = DemoContext(out_dir=Path(out), threads=threads, quick=quick)
    makers = sorted(entry_points(group=DEMO_GROUP), key=lambda e: e.name)
    unknown = sorted(set(only or ()) - {m.name for m in makers})
    if unknown:
        raise UsageError(f"--only {' '.join(unknown)}: no such demo section; choose from "
                         f"{', '.join(m.name for m in makers)}")
    output_dir(ctx.out_dir, "demo-report")
    sections, failed = [], []
    for maker in makers:
        name = maker.name
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        print(f"[demo] {name} ...", flush=True)
        try:
            sec = maker.load()(ctx)
        except Exception as e:
            log.error("demo section %s failed: %s", name, e)
            failed.append(name)
            sec = Section(f"{name}: failed", order=90).pre("".join(traceback.format_exception(e))[-3000:])
        sec.text(f"(section computed in {time.perf_counter() - t0:.1f} s with {threads} threads)")
        sections.append(sec)
        print(f"[demo] {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    sections.sort(key=lambda s: s.order)
    header = report_header(demo_command(out, threads, quick, only))
    return write_report(ctx.out_dir / "index.html", "frozenvit demo", sections, header=header), failed
