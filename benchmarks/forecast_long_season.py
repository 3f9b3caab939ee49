"""ETS on seasons longer than 24 steps: STL then ETS (`ETS(long_season="stl")`, the default) against
AutoETS' own seasonal search (`long_season="own"`), beside seasonal naive and Theta on the same season;
with `--arima-history N`, ARIMA the same two ways, fitted on the last N values.

R's ets refuses a season above 24 steps (forecast::stlf is its answer); statsforecast's AutoETS tries
one, a seasonal state of m - 1 free initial values, and often rejects it for a non-seasonal model.
Sets, each of real series with a long cycle:

    m4_hourly   M4 Hourly (414 series), h 48, season 168 (the week in hours), the M4 test window
    etth2       ETTh2's seven columns, h 48, season 168, 8 rolling windows
    co2_weekly  Mauna Loa CO2 (statsmodels), weekly means, h 13 (M4's weekly horizon), season 52, 8 windows
    taylor      half-hourly electricity demand of England and Wales, June-August 2000 (pmdarima's copy of R's
                forecast::taylor), h 48, season 48 (the day), 8 windows

MASE is scaled by the set's shortest natural cycle (24 hours, 52 weeks, 48 half-hours), so that a row's
columns share one scale. On the hourly sets the same models with the daily season (24), which AutoETS
fits itself, are run too, as the reference a user had. The statistical models are fitted as the command
fits them (`--stat-history auto`). `--max-series N` (N >= 1) keeps a seeded N series of M4 Hourly.

Needs ../shared/data for M4 Hourly and ETTh2, statsmodels (forecast extra) and pmdarima (bench extra).
Writes benchmarks/results/forecast_long_season.json (or --out).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, merge_results, print_table, sets_parser, write_result  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SETS = {"m4_hourly": dict(h=48, season=168, windows=1, mase_season=24, daily=24),
        "etth2": dict(h=48, season=168, windows=8, mase_season=24, daily=24),
        "co2_weekly": dict(h=13, season=52, windows=8, mase_season=52, daily=None),
        "taylor": dict(h=48, season=48, windows=8, mase_season=48, daily=None)}


def load(name: str) -> pd.DataFrame:
    """A long frame (unique_id, ds, y) of one set, every series whole."""
    if name == "m4_hourly":
        from frozenvit.forecasting import read_m4

        return read_m4(SHARED_DATA / "m4_hourly" / "Hourly-train.csv", SHARED_DATA / "m4_hourly" / "Hourly-test.csv")
    if name == "etth2":
        from frozenvit.forecasting import read_wide_csv

        return read_wide_csv(SHARED_DATA / "ett" / "ETTh2.csv")
    if name == "co2_weekly":                # weekly means of the Saturday readings; 59 missing weeks interpolated
        import statsmodels.api as sm

        y = sm.datasets.co2.load_pandas().data["co2"].resample("W").mean().interpolate()
        return pd.DataFrame({"unique_id": "co2", "ds": y.index, "y": y.to_numpy()})
    if name == "taylor":
        try:
            from pmdarima.datasets import load_taylor
        except ImportError as e:
            raise SystemExit("taylor needs pmdarima: pip install -e '.[bench]'") from e
        y = np.asarray(load_taylor(), float)
        return pd.DataFrame({"unique_id": "taylor", "ds": np.arange(y.size), "y": y})
    raise SystemExit(f"unknown set {name!r}; choose from {', '.join(SETS)}")


def run_set(name: str, max_series: int | None, seed: int) -> dict:
    from frozenvit.forecasting import ETS, SeasonalNaive, Theta, backtest
    from frozenvit.forecasting.data import ID

    cfg = SETS[name]
    df = load(name)
    total = int(df["unique_id"].nunique())
    if max_series and total > max_series:
        keep = np.random.default_rng(seed).choice(df["unique_id"].unique(), max_series, replace=False)
        df = df[df["unique_id"].isin(keep)]
    h, m, common = cfg["h"], cfg["season"], dict(n_windows=cfg["windows"], mase_season=cfg["mase_season"])
    runs = {"SeasonalNaive": [SeasonalNaive(m), Theta(m, history="auto"), ETS(m, history="auto", long_season="own")],
            "ETS + STL": [ETS(m, history="auto", long_season="stl")]}
    if cfg["daily"]:
        d = cfg["daily"]
        runs[f"season {d}"] = [SeasonalNaive(d), Theta(d, history="auto"), ETS(d, history="auto")]
    cols, per_series, seconds = {}, {}, {}
    for key, models in runs.items():
        t0 = time.perf_counter()
        res = backtest(df, models, h=h, season_length=m if not key.startswith("season") else cfg["daily"], **common)
        print(f"{name}: {', '.join(type(mod).__name__ for mod in models)} (run {key!r}) fitted and forecast in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        suffix = f" (season {cfg['daily']})" if key.startswith("season") else ""
        names = {"ETS": "ETS, AutoETS' season" if key == "SeasonalNaive" else
                 ("ETS + STL" if key == "ETS + STL" else "ETS")}
        for alias, v in res.overall("mase").items():
            label = names.get(alias, alias) + suffix
            cols[label] = float(v)
            per_series[label] = res.errors("mase").groupby([ID, "cutoff"], sort=False)[alias].mean()
            seconds[label] = float(res.seconds[alias])
    stl, drop = per_series["ETS + STL"], per_series["ETS, AutoETS' season"]
    both = stl.notna() & drop.notna()
    return {"set": name, "h": h, "season": m, "mase_season": cfg["mase_season"], "windows": cfg["windows"],
            "series_in_file": total, "series_run": int(df["unique_id"].nunique()),
            "subsample": {"max_series": max_series, "seed": seed} if max_series and total > max_series else None,
            "mase": cols, "seconds": seconds,
            "stl_better_windows": float((stl[both] < drop[both]).mean()), "windows_scored": int(both.sum()),
            "stl_over_autoets": cols["ETS + STL"] / cols["ETS, AutoETS' season"]}


def run_arima(name: str, history: int) -> dict:
    """ARIMA with STL against AutoARIMA's own seasonal search, both fitted on the last `history` values before
    each cutoff (AutoARIMA's own season takes minutes a fit on a long history)."""
    from frozenvit.forecasting import ARIMA, backtest

    cfg = SETS[name]
    df = load(name)
    h, m = cfg["h"], cfg["season"]
    mase, seconds = {}, {}
    for form in ("own", "stl"):
        t0 = time.perf_counter()
        res = backtest(df, [ARIMA(m, history=history, long_season=form)], h=h, season_length=m,
                       n_windows=cfg["windows"], mase_season=cfg["mase_season"])
        print(f"{name}: ARIMA ({form}) run in {time.perf_counter() - t0:.0f} s", flush=True)
        mase[form] = float(res.overall("mase")["ARIMA"])
        seconds[form] = float(res.seconds["ARIMA"]) / (cfg["windows"] * int(df["unique_id"].nunique()))
    return {"set": name, "kind": "arima", "h": h, "season": m, "mase_season": cfg["mase_season"],
            "windows": cfg["windows"], "history": history, "mase": mase, "seconds_per_fit": seconds}


def parser() -> argparse.ArgumentParser:
    ap = sets_parser(__doc__, SETS)
    ap.add_argument("--arima-history", type=int, default=None, metavar="N",
                    help="run ARIMA instead, with STL and with AutoARIMA's own season, each fitted on the last N "
                         "values before a cutoff")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.merge:
        rows, extra = merge_results(args.merge, lambda r: (r["set"], r.get("kind", "ets")),
                                    lambda r: (r.get("kind", "ets"), list(SETS).index(r["set"])))
    else:
        sets = [s.strip() for s in args.sets.split(",") if s.strip()]
        rows = [run_arima(s, args.arima_history) if args.arima_history else run_set(s, args.max_series, args.seed)
                for s in sets]
        extra = {"threads": args.threads}
    for r in (r for r in rows if r.get("kind") == "arima"):
        print(f"{r['set']}: ARIMA on the last {r['history']} values, MASE own {r['mase']['own']:.3f}, STL "
              f"{r['mase']['stl']:.3f}; seconds a fit {r['seconds_per_fit']['own']:.1f} / "
              f"{r['seconds_per_fit']['stl']:.2f}")
    rows_ets = [r for r in rows if r.get("kind", "ets") == "ets"]
    order = ["SeasonalNaive", "Theta", "ETS, AutoETS' season", "ETS + STL"]
    print_table([{"set": r["set"], "season": r["season"],
                  **{k: r["mase"][k] for k in sorted(r["mase"], key=lambda k: (k not in order, order.index(k)
                                                                               if k in order else k))},
                  "STL / AutoETS'": r["stl_over_autoets"], "windows STL better": r["stl_better_windows"]}
                 for r in rows_ets])
    write_result("forecast_long_season", {**extra, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
