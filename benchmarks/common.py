"""Helpers shared by the benchmark scripts: timing medians after warm-up, tables, JSON out."""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHARED_DATA = ROOT.parent / "shared" / "data"


def time_call(fn: Callable[[], Any], repeats: int = 7, warmup: int = 2) -> list[float]:
    """Wall seconds of `repeats` calls after `warmup` untimed calls."""
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
    return float(statistics.median(xs))


def machine() -> dict[str, Any]:
    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "loadavg_1min": load, "platform": platform.platform()}


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
    write_json(path, {"benchmark": name, "machine": machine(), "when": time.strftime("%Y-%m-%dT%H:%M:%S"), **payload})
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
    ap.add_argument("--max-series", type=int, default=None, help="M4 Hourly: keep a seeded this many series")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    add_merge_arg(ap)
    return ap
