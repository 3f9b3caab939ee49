"""Run every benchmark script in this folder, one after the other (`make bench`).

Each script is called with `--threads N` and writes its JSON under benchmarks/results/. Scripts that need
../shared/data skip with a note when it is absent. Long ones (forecast_paper_etth2, control_success) take tens of
minutes. --dry-run runs none: it checks that every script's parser() accepts the arguments it would be given.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
SKIP = {"common.py", "run_all.py"}


def scripts(only: list[str] | None = None) -> list[Path]:
    """The benchmark scripts, in name order (`only`: those stems)."""
    return [p for p in sorted(HERE.glob("*.py"))
            if p.name not in SKIP and not p.name.startswith("_") and (not only or p.stem in only)]


def script_args(threads: int) -> list[str]:
    """What each script is given."""
    return ["--threads", str(threads)]


def load(script: Path) -> ModuleType:
    """A script as a module (its neighbour common.py importable), without running its main()."""
    sys.path.insert(0, str(HERE))
    try:
        spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(HERE))
    return module


def rejects(script: Path, argv: list[str]) -> str | None:
    """Why `script`'s parser() refuses `argv` (None: it accepts them)."""
    module = load(script)
    if not hasattr(module, "parser"):
        return "no parser() to check"
    try:
        module.parser().parse_args(argv)
    except SystemExit as e:
        return f"exit {e.code}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="script stems to run")
    ap.add_argument("--dry-run", action="store_true", help="run nothing; check that every script accepts its arguments")
    args = ap.parse_args()
    argv = script_args(args.threads)
    failed = []
    for script in scripts(args.only):
        if args.dry_run:
            why = rejects(script, argv)
            print(f"{script.name}: {why or 'accepts'} {' '.join(argv)}", flush=True)
            failed += [script.name] if why else []
            continue
        t0 = time.perf_counter()
        print(f"=== {script.name} ({' '.join(argv)})", flush=True)
        rc = subprocess.call([sys.executable, str(script), *argv])
        print(f"=== {script.name}: exit {rc} in {time.perf_counter() - t0:.0f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
