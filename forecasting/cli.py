"""`frozenvit forecast backtest|paper`: rolling backtests and the paper protocol from the shell."""
from __future__ import annotations

import argparse
from pathlib import Path

from frozenvit.backbone.suite.cli import add_threads_arg

from .errors import SeriesError

MODEL_NAMES = ("snaive", "naive", "ets", "dlinear", "patchtst")


def register(subparsers) -> None:
    p = subparsers.add_parser("forecast", help="PatchTST, DLinear and baselines: backtests with MASE per horizon")
    sub = p.add_subparsers(dest="forecast_command", required=True)

    q = sub.add_parser("backtest", help="rolling-origin backtest of several models on a CSV")
    q.add_argument("--csv", required=True, type=Path, help="long (unique_id,ds,y) or, with --wide, wide CSV")
    q.add_argument("--wide", action="store_true", help="a date column then one column per series (ETT layout)")
    q.add_argument("--columns", default=None, help="comma-separated series columns of a wide CSV (default: all)")
    q.add_argument("--id-col", default="unique_id")
    q.add_argument("--time-col", default=None, help="default: 'ds' (long) or the first column (wide)")
    q.add_argument("--target-col", default="y")
    q.add_argument("--fill", choices=("ffill", "interpolate", "zero"), default=None, help="fill gaps and NaN")
    q.add_argument("--h", type=int, default=48, help="forecast horizon (steps)")
    q.add_argument("--season-length", type=int, default=24)
    q.add_argument("--windows", type=int, default=8, help="number of rolling cutoffs")
    q.add_argument("--step-size", type=int, default=None, help="steps between cutoffs (default: h)")
    q.add_argument("--models", default="snaive,ets,dlinear,patchtst", help=f"comma-separated: {','.join(MODEL_NAMES)}")
    q.add_argument("--input-size", type=int, default=None,
                   help="look-back of the neural models (default: 336, or less when the series are short)")
    q.add_argument("--max-epochs", type=int, default=20)
    q.add_argument("--refit-every", type=int, default=None, help="retrain neural models every k cutoffs")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--plot-series", type=int, default=3, help="series in the forecast plot")
    q.add_argument("--out", type=Path, default=Path("forecast-out"))
    add_threads_arg(q)
    q.set_defaults(func=_cmd_backtest)

    q = sub.add_parser("paper", help="the PatchTST paper protocol on an ETT file (MSE/MAE on the standardised scale)")
    q.add_argument("--csv", required=True, type=Path)
    q.add_argument("--horizons", default="96,192,336,720")
    q.add_argument("--models", default="patchtst,dlinear")
    q.add_argument("--minutely", action="store_true", help="ETTm borders (4x the hourly rows)")
    q.add_argument("--max-epochs", type=int, default=None, help="cap epochs (default: the paper's schedule)")
    q.add_argument("--patience", type=int, default=None)
    q.add_argument("--windows-per-epoch", type=int, default=None,
                   help="PatchTST: sample this many training windows per epoch (CPU budget)")
    q.add_argument("--out", type=Path, default=None, help="JSON file for the scores")
    add_threads_arg(q)
    q.set_defaults(func=_cmd_paper)


def auto_input_size(min_len: int, h: int, windows: int, step: int, cap: int = 336) -> int:
    """The longest look-back (<= cap, a multiple of 8) that leaves one training window and a
    validation tail of h before the first cutoff of the shortest series."""
    avail = min_len - h - (windows - 1) * step - 2 * h
    size = min(cap, avail) // 8 * 8
    if size < 16:
        raise SeriesError(f"the shortest series ({min_len} values) is too short for neural models with h={h} and "
                          f"{windows} windows; drop dlinear/patchtst, or use fewer windows or a smaller h")
    return size


def make_models(names: list[str], h: int, season_length: int, input_size: int, max_epochs: int = 20,
                seed: int = 0) -> list:
    from .baselines import ETS, Naive, SeasonalNaive
    from .dlinear import DLinear
    from .patchtst import PatchTST

    common = dict(h=h, input_size=input_size, max_epochs=max_epochs, seed=seed, windows_per_epoch=8192)
    factories = {"snaive": lambda: SeasonalNaive(season_length), "naive": Naive, "ets": lambda: ETS(season_length),
                 "dlinear": lambda: DLinear(**common),
                 "patchtst": lambda: PatchTST(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1, **common)}
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise SeriesError(f"unknown model(s) {unknown}; choose from {','.join(MODEL_NAMES)}")
    return [factories[n]() for n in names]


def _cmd_backtest(args: argparse.Namespace) -> int:
    import pandas as pd

    from frozenvit.backbone.suite.artifacts import atomic_write_text, check_output_dir, output_dir, write_json

    from .backtest import backtest
    from .data import read_long_csv, read_wide_csv
    from .plots import plot_forecasts, plot_mase_by_horizon

    check_output_dir(args.out, "forecast.backtest")
    if args.wide:
        cols = args.columns.split(",") if args.columns else None
        df = read_wide_csv(args.csv, args.time_col, cols, fill=args.fill)
    else:
        df = read_long_csv(args.csv, args.id_col, args.time_col or "ds", args.target_col, fill=args.fill)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    step = args.step_size or args.h
    size = args.input_size
    if size is None and {"dlinear", "patchtst"} & set(names):
        size = auto_input_size(int(df.groupby("unique_id").size().min()), args.h, args.windows, step)
    models = make_models(names, args.h, args.season_length, size or 336, args.max_epochs, args.seed)
    res = backtest(df, models, h=args.h, n_windows=args.windows, step_size=step, season_length=args.season_length,
                   refit_every=args.refit_every)
    hz = res.mase_by_horizon()
    pd.set_option("display.width", 160)
    print("MASE by horizon step (rows: step, columns: model)")
    print(hz.T.to_string(float_format=lambda v: f"{v:.3f}"))
    print()
    print(res.summary().to_string(float_format=lambda v: f"{v:.4g}"))
    out = output_dir(args.out, "forecast.backtest")
    write_json(out / "summary.json", {"csv": str(args.csv), "input_size": size, **res.to_dict()})
    atomic_write_text(out / "forecasts.csv", res.forecasts.to_csv(index=False))
    atomic_write_text(out / "mase_by_horizon.csv", hz.to_csv())
    plot_forecasts(res, df, n_series=args.plot_series).savefig(out / "forecasts.png", dpi=110)
    plot_mase_by_horizon(res).savefig(out / "mase_by_horizon.png", dpi=110)
    for alias, model in res.fitted.items():
        model.save(out / "models" / alias)
    print(f"\nwrote {out}/summary.json, forecasts.csv, mase_by_horizon.csv, forecasts.png, mase_by_horizon.png")
    return 0


def _cmd_paper(args: argparse.Namespace) -> int:
    import pandas as pd

    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .paper import ETTH_BORDERS, ETTM_BORDERS, paper_config, paper_protocol, scores_table

    check_output_file(args.out, "forecast.paper")
    if not args.csv.is_file():
        raise SeriesError(f"{args.csv} not found; pass the path of an ETT csv (date,HUFL,...,OT)")
    overrides = {k: v for k, v in (("max_epochs", args.max_epochs), ("patience", args.patience)) if v is not None}
    sub = {"windows_per_epoch": args.windows_per_epoch} if args.windows_per_epoch else {}

    def report(s) -> None:
        print(f"{s.model:9s} H={s.h:4d}  MSE {s.mse:.3f}  MAE {s.mae:.3f}  ({s.n_test_windows} test windows, "
              f"{s.epochs} epochs, {s.seconds_per_epoch:.1f} s/epoch)", flush=True)

    scores = paper_protocol(pd.read_csv(args.csv), [int(h) for h in args.horizons.split(",")],
                            [m.strip() for m in args.models.split(",")],
                            borders=ETTM_BORDERS if args.minutely else ETTH_BORDERS,
                            make_model=lambda name, h: paper_config(name, h, **overrides,
                                                                    **(sub if name == "patchtst" else {})),
                            on_result=report)
    rows = scores_table(scores)
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out:
        write_json(args.out, {"csv": str(args.csv), "overrides": overrides, "results": rows}, kind="forecast.paper")
    return 0
