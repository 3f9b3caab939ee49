"""Run every benchmark script in this folder, one after the other (`make bench`).

Each writes its JSON under benchmarks/results/. Scripts that need ../shared/data skip with a note
when it is absent. Long ones (forecast_paper_etth2, control_success) take tens of minutes.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIP = {"common.py", "run_all.py"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="script stems to run")
    args = ap.parse_args()
    failed = []
    for script in sorted(HERE.glob("*.py")):
        if script.name in SKIP or script.name.startswith("_") or (args.only and script.stem not in args.only):
            continue
        t0 = time.perf_counter()
        print(f"=== {script.name} (--threads {args.threads})", flush=True)
        rc = subprocess.call([sys.executable, str(script), "--threads", str(args.threads)])
        print(f"=== {script.name}: exit {rc} in {time.perf_counter() - t0:.0f} s", flush=True)
        if rc:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
