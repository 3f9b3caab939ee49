"""Helpers shared by the benchmark scripts: timing medians after warm-up, tables, JSON out."""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHARED_DATA = ROOT.parent / "shared" / "data"


def positive_int(text: str) -> int:
    """argparse `type=` for a count that must be at least 1 (--repeats, --rounds, --max-series, ...)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def set_counts(text: str) -> dict[str, int]:
    """argparse `type=` of `--max-series SET=N,...` (every N at least 1; "" gives {}: every set whole)."""
    import argparse

    out = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, n = part.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"{part!r} is not SET=N")
        out[name] = positive_int(n)
    return out


def add_repeats_arg(ap: Any, default: int = 5, flag: str = "--repeats",
                    what: str = "timed calls per measurement, after the warm-up; the median is reported") -> None:
    """The shared `--repeats N` option (N >= 1: a median of no timings does not exist)."""
    ap.add_argument(flag, type=positive_int, default=default, help=f"{what} (at least 1; default: {default})")


def data_arg(ap: Any, flag: str, default: Path, what: str, **kwargs: Any) -> None:
    """A data path option whose default (under ../shared/data) may be absent: argparse's default is None, so that
    `resolve_data` can tell a path the user gave (absent: an error) from the default (absent: skip)."""
    ap.add_argument(flag, type=Path, default=None,
                    help=f"{what} (default: {default}; when the default is absent the benchmark is skipped with exit "
                         "0, when a path given here is absent it exits 2)", **kwargs)


def resolve_data(given: Path | None, default: Path, need: str | None = None, what: str = "") -> Path | None:
    """The data path to use: `given` (the option's value, None when not given) or `default`. When it (or its `need`,
    a file or folder inside it) is absent: None after a "skipped" line if it was the default (`make bench` runs
    without ../shared/data), else exit 2 with the message (the user named a path that is not there)."""
    path = default if given is None else Path(given)
    target = path / need if need else path
    if target.exists():
        return path
    msg = f"{target} not found{f' ({what})' if what else ''}"
    if given is None:
        print(f"skipped: {msg}")
        return None
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def time_call(fn: Callable[[], Any], repeats: int = 7, warmup: int = 2) -> list[float]:
    """Wall seconds of `repeats` (>= 1) calls after `warmup` untimed calls."""
    if repeats < 1:
        raise ValueError(f"time_call: repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def int_or_auto(text: str) -> int | str:
    """argparse `type=` for 'auto' or an integer (the estimator checks the value itself)."""
    return "auto" if text.lower() == "auto" else int(text)


def median(xs: Sequence[float]) -> float:
    xs = list(xs)
    if not xs:
        raise ValueError("median of no timings: give --repeats (or --rounds) of at least 1")
    return float(statistics.median(xs))


# distributions whose version a figure may depend on, recorded when installed (read from metadata, none imported)
PACKAGES = ("frozenvit", "numpy", "scikit-learn", "faiss-cpu", "faiss-gpu", "faiss", "statsforecast", "onnxruntime",
            "openvino", "mujoco", "metaworld", "timm")


def versions(names: Sequence[str] = PACKAGES) -> dict[str, str]:
    """The installed version of each distribution in `names` (those not installed are left out)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
        except Exception:  # noqa: BLE001 - a broken install's metadata must not stop a benchmark
            continue
    return out


def git_state(root: Path = ROOT) -> dict[str, Any]:
    """{"commit": HEAD's hash or None, "dirty": whether tracked files differ from it, or None}; never raises."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except Exception:  # noqa: BLE001 - no git, not a checkout, a timeout: recorded as unknown
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit or None, "dirty": None if status is None else bool(status)}


def now() -> str:
    """Local time, ISO 8601 with its UTC offset (e.g. 2026-12-06T10:11:12+01:00); its first 10 characters are the date."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def machine() -> dict[str, Any]:
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "loadavg_1min": load, "platform": platform.platform(),
            "versions": versions(), "git": git_state()}


def print_table(rows: Sequence[dict[str, Any]], floatfmt: str = "{:.3f}") -> None:
    if not rows:
        return
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    cell = lambda v: floatfmt.format(v) if isinstance(v, float) else str(v)  # noqa: E731
    widths = {c: max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(c.rjust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(cell(r.get(c, "")).rjust(widths[c]) for c in cols))


def write_result(name: str, payload: dict[str, Any], out: str | Path | None = None) -> Path:
    from frozenvit.backbone.suite.artifacts import write_json

    path = Path(out) if out else RESULTS / f"{name}.json"
    write_json(path, {"benchmark": name, "machine": machine(), "when": now(), "argv": list(sys.argv), **payload})
    print(f"wrote {path}")
    return path


def merged_from(paths: Sequence[str | Path], parts: Sequence[dict[str, Any]]) -> list[str]:
    """The files a `--merge` of `parts` (read from `paths`) was made from: a part that was itself merged
    names its own sources, so that merging a merged result again keeps every file its rows came from."""
    names: list[str] = []
    for path, part in zip(paths, parts):
        for name in part.get("merged_from") or [Path(path).name]:
            if name not in names:
                names.append(name)
    return names


def latest_rows(parts: Sequence[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """The rows of `parts` (each a result with "rows"), one per `key(row)`: a row of a later part replaces an
    earlier part's row of the same key, in its place, so that merging a re-run into a result updates it."""
    rows: dict[Any, dict[str, Any]] = {}
    for part in parts:
        for r in part["rows"]:
            rows[key(r)] = r
    return list(rows.values())


def add_merge_arg(ap: Any) -> None:
    """`--merge FILE ...` of a benchmark whose result is rows keyed by set (`merge_results`)."""
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="run nothing: write one table of the rows of these earlier JSON files (a set in a later "
                         "file replaces its row of an earlier one)")


def merge_results(paths: Sequence[str | Path], key: Callable[[dict[str, Any]], Any],
                  order: Callable[[dict[str, Any]], Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of earlier results (`latest_rows` by `key`, sorted by `order`) and what the merged result records
    besides them: the files it was made from and the threads of the last."""
    import json

    parts = [json.loads(Path(p).read_text()) for p in paths]
    rows = sorted(latest_rows(parts, key), key=order)
    return rows, {"merged_from": merged_from(paths, parts), "threads": parts[-1]["threads"]}


def sets_parser(doc: str | None, sets: Sequence[str]) -> Any:
    """The options of a benchmark over named sets whose result is rows keyed by set: --sets, --max-series (a
    seeded subsample of the larger sets), --seed, --threads, --out and --merge."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(sets), help=f"comma-separated, out of {','.join(sets)}")
    ap.add_argument("--max-series", type=positive_int, default=None,
                    help="M4 Hourly: keep a seeded this many series (at least 1; default: all)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --max-series subsample")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="the JSON to write (default: benchmarks/results/<name>.json)")
    add_merge_arg(ap)
    return ap
