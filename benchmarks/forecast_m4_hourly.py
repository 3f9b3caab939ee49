"""M4 Hourly (414 series, h = 48, m = 24): MASE overall and per horizon step for each model.

One window: the models see the training part of every series (M4's train file), forecast the
48 test values, and are scored with M4's MASE (scale from each series' training part) and sMAPE.
Neural models train once, globally, on windows of all series (validation: the last 48 training
values of each). Writes benchmarks/results/forecast_m4_hourly.json (or --out).

    python benchmarks/forecast_m4_hourly.py --threads 1
    python benchmarks/forecast_m4_hourly.py --models snaive,naive --out /tmp/m4.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, data_arg, print_table, resolve_data, write_result  # noqa: E402

import torch  # noqa: E402

from frozenvit.forecasting import ETS, DLinear, Naive, PatchTST, SeasonalNaive, backtest, read_m4  # noqa: E402
from frozenvit.forecasting.defaults import NEURAL_TRAINING, PATCHTST_SHAPE  # noqa: E402   the library defaults

REFERENCE = {"SeasonalNaive": 1.193, "Naive": 11.608, "M4 Naive2": 2.395, "M4 SES": 2.385, "M4 Theta": 2.455,
             "M4 winner (Smyl)": 0.893}


def build(name: str, args: argparse.Namespace):
    common = dict(NEURAL_TRAINING, h=48, input_size=args.input_size, max_epochs=args.max_epochs,
                  patience=args.patience, windows_per_epoch=args.windows_per_epoch, seed=args.seed)
    return {"snaive": lambda: SeasonalNaive(24), "naive": lambda: Naive(), "ets": lambda: ETS(24),
            "dlinear": lambda: DLinear(**common), "patchtst": lambda: PatchTST(**PATCHTST_SHAPE, **common),
            }[name]()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data_arg(ap, "--data", SHARED_DATA / "m4_hourly", "folder holding M4's Hourly-train.csv and Hourly-test.csv")
    ap.add_argument("--models", default="snaive,naive,ets,dlinear,patchtst",
                    help="comma-separated, out of snaive,naive,ets,dlinear,patchtst (default: all five)")
    ap.add_argument("--input-size", type=int, default=336, help="the neural models' look-back in steps (default: 336)")
    ap.add_argument("--max-epochs", type=int, default=20, help="the neural models' cap on epochs (default: 20)")
    ap.add_argument("--patience", type=int, default=NEURAL_TRAINING["patience"],
                    help="early-stopping patience in epochs (default: the library's, forecasting.defaults)")
    ap.add_argument("--windows-per-epoch", type=int, default=NEURAL_TRAINING["windows_per_epoch"],
                    help="training windows sampled per epoch (default: the library's, forecasting.defaults)")
    ap.add_argument("--seed", type=int, default=0, help="the neural models' seed")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON to write (default: benchmarks/results/<this script's name>.json)")
    return ap


def load(args: argparse.Namespace):
    """M4 Hourly as a long frame (torch set to --threads), or None when --data has no copy of it."""
    data = resolve_data(args.data, SHARED_DATA / "m4_hourly", "Hourly-train.csv", "M4 Hourly")
    if data is None:
        return None
    torch.set_num_threads(args.threads)
    return read_m4(data / "Hourly-train.csv", data / "Hourly-test.csv")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    df = load(args)
    if df is None:
        return 0
    models = [build(n, args) for n in args.models.split(",")]
    t0 = time.perf_counter()
    res = backtest(df, models, h=48, n_windows=1, season_length=24)
    summary = res.summary()
    by_h = res.mase_by_horizon()
    print_table([{"model": m, **{k: float(v) for k, v in summary.loc[m].items()}} for m in res.models])
    print("MASE by horizon step (1, 6, 12, 24, 25, 36, 48):")
    print_table([{"model": m, **{f"h{k}": float(by_h.loc[m, k]) for k in (1, 6, 12, 24, 25, 36, 48)}}
                 for m in res.models])
    neural = {a: {"epochs": len(m.history_), "seconds_per_epoch": float(sorted(r["seconds"] for r in m.history_)
                                                                         [len(m.history_) // 2]),
                  "best_val_loss": m.best_val_loss_, "params": {k: v for k, v in m.get_params().items()}}
              for a, m in res.fitted.items()}
    write_result("forecast_m4_hourly", {"threads": args.threads, "wall_seconds": time.perf_counter() - t0,
                                        "reference": REFERENCE, "neural": neural, **res.to_dict()}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
