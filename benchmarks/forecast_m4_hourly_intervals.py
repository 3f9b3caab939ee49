"""M4 Hourly: conformal intervals (coverage vs nominal, MSIS) and forecast combinations (MASE, DM tests).

One window, the official 48-step test. Every model gets conformal intervals calibrated on K windows
of 48 inside each series' training part before the test (`backtest(levels=, calibration_windows=K)`,
see forecasting/intervals.py); ETS also reports AutoETS' own intervals. The median and the mean of
ETS, DLinear and PatchTST reuse their members' forecasts and are tested against each (Diebold-Mariano
across series). Models and training settings are those of benchmarks/forecast_m4_hourly.py (the
CLI's defaults). Writes benchmarks/results/forecast_m4_hourly_intervals.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, print_table, write_result  # noqa: E402
from forecast_m4_hourly import build  # noqa: E402   the same models as the point benchmark

import torch  # noqa: E402

from frozenvit.forecasting import backtest, read_m4  # noqa: E402
from frozenvit.forecasting.cli import NEURAL_TRAINING, MODEL_NAMES  # noqa: E402
from frozenvit.forecasting.ensemble import Ensemble, parse_models  # noqa: E402

NOMINAL_TOLERANCE = 2.0          # percentage points: the target for coverage


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SHARED_DATA / "m4_hourly")
    ap.add_argument("--models", default="snaive,ets,dlinear,patchtst,median(ets,dlinear,patchtst),"
                                        "mean(ets,dlinear,patchtst)")
    ap.add_argument("--levels", default="80,95")
    ap.add_argument("--calibration-windows", type=int, default=1)
    ap.add_argument("--input-size", type=int, default=336)
    ap.add_argument("--max-epochs", type=int, default=20)
    ap.add_argument("--patience", type=int, default=NEURAL_TRAINING["patience"])
    ap.add_argument("--windows-per-epoch", type=int, default=NEURAL_TRAINING["windows_per_epoch"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.data / "Hourly-train.csv").is_file():
        print(f"skipped: {args.data} has no Hourly-train.csv")
        return 0
    torch.set_num_threads(args.threads)
    df = read_m4(args.data / "Hourly-train.csv", args.data / "Hourly-test.csv")
    built: dict = {}
    models = []
    for spec in parse_models(args.models, MODEL_NAMES):
        names = [spec] if isinstance(spec, str) else list(spec[1])
        for n in names:
            built.setdefault(n, build(n, args))
        models.append(built[spec] if isinstance(spec, str) else Ensemble([built[n] for n in names], spec[0]))
    levels = [float(v) for v in args.levels.split(",")]
    t0 = time.perf_counter()
    res = backtest(df, models, h=48, n_windows=1, season_length=24, levels=levels,
                   calibration_windows=args.calibration_windows)
    summary = res.summary()
    print_table([{"model": m, **{k: float(v) for k, v in summary.loc[m].items()}} for m in res.models])
    iv = res.interval_summary().reset_index()
    print("\nintervals (coverage in %, MSIS and width over MASE's scale):")
    print_table([{**r, "coverage": 100 * r["coverage"], "off": 100 * r["coverage"] - r["level"]}
                 for r in iv.to_dict(orient="records")])
    if res.members:
        print("\nDiebold-Mariano, ensemble vs member (negative: the ensemble is better):")
        print_table(res.dm_vs_members().reset_index().to_dict(orient="records"), floatfmt="{:.4g}")
    worst = {f"{r['interval']} @ {r['level']:g}": 100 * r["coverage"] - r["level"] for r in iv.to_dict(orient="records")}
    write_result("forecast_m4_hourly_intervals",
                 {"threads": args.threads, "wall_seconds": time.perf_counter() - t0,
                  "coverage_minus_nominal_points": worst, "tolerance_points": NOMINAL_TOLERANCE,
                  "neural": {a: {"epochs": len(m.history_), "best_val_loss": m.best_val_loss_}
                             for a, m in res.fitted.items()}, **res.to_dict()}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
