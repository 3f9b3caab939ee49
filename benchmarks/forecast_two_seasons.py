"""ETS and ARIMA with two seasons at once (`--season-length 24,168`: the day and the week, taken out by STL
together, statsforecast's MSTL) against the day alone, on sets with both cycles:

    m4_hourly   M4 Hourly (414 series), h 48, seasons 24 and 168, the M4 test window
    etth2       ETTh2's seven columns, h 48, seasons 24 and 168, 8 rolling windows
    taylor      half-hourly electricity demand of England and Wales, June-August 2000 (pmdarima's copy of R's
                forecast::taylor), h 48, seasons 48 and 336, 8 windows

Columns: seasonal naive on the day and on the week, Theta on the day (it takes one season), ETS on the day
(AutoETS' own season up to 24 steps, STL above), ETS and ARIMA on both seasons. MASE is scaled by the day.
The statistical models are fitted as the command fits them (`--stat-history auto`). Seconds are each model's
fit-and-forecast time in the run; compare them within a row. `--max-series N` (N >= 1) keeps a seeded N series
of M4 Hourly.

Needs ../shared/data for M4 Hourly and ETTh2, pmdarima (bench extra) for taylor.
Writes benchmarks/results/forecast_two_seasons.json (or --out).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import merge_results, print_table, sets_parser, write_result  # noqa: E402
from forecast_long_season import load  # noqa: E402

import numpy as np  # noqa: E402

SETS = {"m4_hourly": dict(h=48, seasons=(24, 168), windows=1),
        "etth2": dict(h=48, seasons=(24, 168), windows=8),
        "taylor": dict(h=48, seasons=(48, 336), windows=8)}
COLUMNS = ("seasonal naive, day", "seasonal naive, week", "Theta, day", "ETS, day", "ETS, day + week",
           "ARIMA, day + week")


def run_set(name: str, max_series: int | None, seed: int) -> dict:
    from frozenvit.forecasting import ARIMA, ETS, SeasonalNaive, Theta, backtest
    from frozenvit.forecasting.data import ID

    cfg = SETS[name]
    df = load(name)
    total = int(df[ID].nunique())
    if max_series and total > max_series:
        keep = np.random.default_rng(seed).choice(df[ID].unique(), max_series, replace=False)
        df = df[df[ID].isin(keep)]
    day, week = cfg["seasons"]
    runs = {"seasonal naive, day": SeasonalNaive(day), "seasonal naive, week": SeasonalNaive(week),
            "Theta, day": Theta(day, history="auto"), "ETS, day": ETS(day, history="auto"),
            "ETS, day + week": ETS((day, week), history="auto"), "ARIMA, day + week": ARIMA((day, week), history="auto")}
    mase, seconds, per_window = {}, {}, {}
    for label, model in runs.items():
        t0 = time.perf_counter()
        res = backtest(df, [model], h=cfg["h"], season_length=day, n_windows=cfg["windows"])
        print(f"{name}: {label} run in {time.perf_counter() - t0:.0f} s", flush=True)
        mase[label] = float(res.overall("mase")[model.alias])
        seconds[label] = float(res.seconds[model.alias])
        per_window[label] = res.errors("mase").groupby([ID, "cutoff"], sort=False)[model.alias].mean()
    both, one = per_window["ETS, day + week"], per_window["ETS, day"]
    ok = both.notna() & one.notna()
    return {"set": name, "h": cfg["h"], "seasons": list(cfg["seasons"]), "windows": cfg["windows"],
            "series_in_file": total, "series_run": int(df[ID].nunique()),
            "subsample": {"max_series": max_series, "seed": seed} if max_series and total > max_series else None,
            "mase": mase, "seconds": seconds, "windows_scored": int(ok.sum()),
            "two_seasons_better_windows": float((both[ok] < one[ok]).mean()),
            "two_seasons_over_day": mase["ETS, day + week"] / mase["ETS, day"]}


def parser():
    return sets_parser(__doc__, SETS)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.merge:
        rows, extra = merge_results(args.merge, lambda r: r["set"], lambda r: list(SETS).index(r["set"]))
    else:
        rows = [run_set(s.strip(), args.max_series, args.seed) for s in args.sets.split(",") if s.strip()]
        extra = {"threads": args.threads}
    print_table([{"set": r["set"], **{c: r["mase"][c] for c in COLUMNS},
                  "day + week / day (ETS)": r["two_seasons_over_day"],
                  "windows better": r["two_seasons_better_windows"]} for r in rows])
    write_result("forecast_two_seasons", {**extra, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
