"""M4 Hourly: conformal intervals (coverage vs nominal, MSIS) and forecast combinations (MASE, DM tests).

One window, the official 48-step test. Every model gets conformal intervals calibrated on K windows
of 48 inside each series' training part before the test (`backtest(levels=, calibration_windows=K)`,
see forecasting/intervals.py); the neural models forecast them with the model trained for the test,
on the validation tail it held out (--global-calibration holdout, the default) or with a second
training before them (retrain); ETS also reports AutoETS' own intervals. The median and the mean of
ETS, DLinear and PatchTST reuse their members' forecasts and are tested against each (Diebold-Mariano
across series). Models and training settings are those of benchmarks/forecast_m4_hourly.py (the
CLI's defaults). Writes benchmarks/results/forecast_m4_hourly_intervals.json (or --out).

    python benchmarks/forecast_m4_hourly_intervals.py --threads 1
    python benchmarks/forecast_m4_hourly_intervals.py --models snaive --calibration-windows 1 --out /tmp/int.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_result  # noqa: E402
from forecast_m4_hourly import build, load  # noqa: E402   the same data and models as the point benchmark
from forecast_m4_hourly import parser as point_parser  # noqa: E402

from frozenvit.forecasting import backtest  # noqa: E402
from frozenvit.forecasting.defaults import CONFORMAL, GLOBAL_CALIBRATIONS  # noqa: E402
from frozenvit.forecasting.ensemble import assemble, parse_models  # noqa: E402

MODELS = ("snaive", "naive", "ets", "dlinear", "patchtst")     # forecast_m4_hourly.build's names
NOMINAL_TOLERANCE = 2.0          # percentage points: the target for coverage


def parser() -> argparse.ArgumentParser:
    """The point benchmark's options (data, models, training, threads, out) plus the intervals'."""
    ap = point_parser()
    ap.description = __doc__
    ap.set_defaults(models="snaive,ets,dlinear,patchtst,median(ets,dlinear,patchtst),mean(ets,dlinear,patchtst)")
    ap.add_argument("--levels", default="80,95", help="comma-separated nominal coverages in percent (default: 80,95)")
    ap.add_argument("--calibration-windows", type=int, default=CONFORMAL["calibration_windows"],
                    help="conformal calibration windows of 48 before the test (default: the library's, "
                         "forecasting.defaults.CONFORMAL)")
    ap.add_argument("--global-calibration", choices=GLOBAL_CALIBRATIONS, default=CONFORMAL["global_calibration"],
                    help="where the neural models' calibration forecasts come from (forecasting.defaults)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    df = load(args)
    if df is None:
        return 0
    specs = parse_models(args.models, MODELS)
    members = dict.fromkeys(n for sp in specs for n in ([sp] if isinstance(sp, str) else sp[1]))   # each model once
    models = assemble(specs, {n: build(n, args) for n in members})
    levels = [float(v) for v in args.levels.split(",")]
    t0 = time.perf_counter()
    res = backtest(df, models, h=48, n_windows=1, season_length=24, levels=levels,
                   calibration_windows=args.calibration_windows, global_calibration=args.global_calibration)
    summary = res.summary()
    print_table([{"model": m, **{k: float(v) for k, v in summary.loc[m].items()}} for m in res.models])
    iv = res.interval_summary().reset_index()
    print("\nintervals (coverage in %, MSIS and width over MASE's scale):")
    print_table([{**r, "coverage": 100 * r["coverage"], "off": 100 * r["coverage"] - r["level"]}
                 for r in iv.to_dict(orient="records")])
    if res.members:
        print("\nDiebold-Mariano, ensemble vs member (negative: the ensemble is better):")
        print_table(res.dm_vs_members().reset_index().to_dict(orient="records"), floatfmt="{:.4g}")
    off = {f"{r['interval']} @ {r['level']:g}": 100 * r["coverage"] - r["level"] for r in iv.to_dict(orient="records")}
    write_result("forecast_m4_hourly_intervals",
                 {"threads": args.threads, "wall_seconds": time.perf_counter() - t0,
                  "coverage_minus_nominal_points": off, "tolerance_points": NOMINAL_TOLERANCE,
                  "neural": {a: {"epochs": len(m.history_), "best_val_loss": m.best_val_loss_}
                             for a, m in res.fitted.items()}, **res.to_dict()}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
