"""A frozen ViT as a forecaster (FrozenViTForecaster) against PatchTST trained from scratch.

ETTh2 under the paper protocol (forecasting.paper: split, scaler, every test window, MSE/MAE on the
standardised scale) and M4 Hourly (M4's one test window, MASE and sMAPE), each with all training
windows and with the last 10 % of them (`--fractions 1,0.1`: of every series, the windows whose
targets end last, so the low-data model sees the most recent history, as One Fits All's `percent`
keeps the end of the training split). Reports trainable parameters and seconds per epoch.

The CPU budget caps are flags and land in the JSON: epochs, sampled windows per epoch, validation
windows (ETTh2), batch size and learning rate (one value for both datasets: the paper's 1e-4 needs the
paper's 100 epochs). Both models get the same caps and the same training settings; M4 keeps the suite's
MAE loss on each window's scale, ETTh2 the paper's MSE.

    nice -n 5 python benchmarks/forecast_frozen_vit.py --datasets m4 --threads 1
    nice -n 5 python benchmarks/forecast_frozen_vit.py --datasets m4 --fractions 0.1 --models vit \
        --n-blocks 3,12 --tag blocks            # which k pays
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, data_arg, print_table, resolve_data, write_result  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from frozenvit.forecasting import PatchTST, read_m4  # noqa: E402
from frozenvit.forecasting.defaults import NEURAL_TRAINING, PATCHTST_SHAPE  # noqa: E402
from frozenvit.forecasting.frozen_vit import FrozenViTForecaster, trainable_parameters  # noqa: E402
from frozenvit.forecasting.metrics import mase, smape  # noqa: E402
from frozenvit.forecasting.paper import paper_config, split_scale, window_pairs  # noqa: E402

L = 336
# One Fits All (Zhou et al., NeurIPS 2023), Table 3 / 4 as we were able to read them: see docs/forecasting.md
PUBLISHED = {"ETTh1 H=96 OFA MSE (issue 23)": 0.376}


def last_fraction(y: np.ndarray, fraction: float, h: int, tail: int) -> np.ndarray:
    """The end of a training series that holds the last `fraction` of its training windows (at least one),
    plus the validation tail `tail` that `fit` keeps out of training."""
    n = len(y) - L - h - tail + 1                                   # training windows of the whole series
    keep = max(1, int(round(fraction * n)))
    return y[-(keep + L + h - 1 + tail):]


def run_etth2(name: str, fraction: float, args: argparse.Namespace, extra: dict) -> dict:
    values = pd.read_csv(args.ett).select_dtypes("number").to_numpy(dtype=np.float64)
    train, val, test = split_scale(values, L)
    h = 96
    if fraction < 1:
        train = last_fraction(train, fraction, h, 0)
    if args.val_windows:
        val = val[: L + h - 1 + args.val_windows]                   # the first V validation windows
    caps = dict(max_epochs=args.max_epochs, patience=args.patience, windows_per_epoch=args.windows_per_epoch,
                batch_size=args.batch_size, lr=args.lr, seed=args.seed, progress=False)
    model = paper_config(name, h, "ETTh2", **caps, **extra)
    t0 = time.perf_counter()
    model.fit([train], val=[val])
    fit_s = time.perf_counter() - t0
    ctx, truth = window_pairs(test, L, h)
    err = model.predict(ctx) - truth                                # (N, h, C)
    return {"mse": float(np.mean(err ** 2)), "mae": float(np.mean(np.abs(err))), "n_test_windows": len(ctx),
            "train_rows": len(train), "fit_seconds": fit_s, **_training(model)}


def run_m4(name: str, fraction: float, args: argparse.Namespace, extra: dict) -> dict:
    df = read_m4(args.m4 / "Hourly-train.csv", args.m4 / "Hourly-test.csv")
    h = 48
    series = [g["y"].to_numpy() for _, g in df.groupby("unique_id", sort=False)]
    train = [y[:-h] for y in series]
    fit_on = [last_fraction(y, fraction, h, h) if fraction < 1 else y for y in train]
    kw = dict(NEURAL_TRAINING, h=h, input_size=L, max_epochs=args.max_epochs, patience=args.patience,
              windows_per_epoch=args.windows_per_epoch, seed=args.seed, progress=False)
    kw.update(batch_size=args.batch_size, lr=args.lr)
    model = PatchTST(**PATCHTST_SHAPE, **kw) if name == "patchtst" else FrozenViTForecaster(**kw, **extra)
    t0 = time.perf_counter()
    model.fit(fit_on)
    fit_s = time.perf_counter() - t0
    pred = model.predict(np.stack([y[-L:] for y in train]))        # (S, h)
    truth = [y[-h:] for y in series]
    return {"mase": float(np.mean([mase(t, p, y, 24) for t, p, y in zip(truth, pred, train)])),
            "smape": float(np.mean([smape(t, p) for t, p in zip(truth, pred)])),
            "train_values": int(sum(len(y) for y in fit_on)), "fit_seconds": fit_s, **_training(model)}


def _training(model) -> dict:
    hist = model.history_
    return {"trainable_params": trainable_parameters(model.net_), "epochs": len(hist),
            "best_epoch": int(np.nanargmin([r["val_loss"] for r in hist])),
            "seconds_per_epoch": float(np.median([r["seconds"] for r in hist])),
            "params": {k: v for k, v in model.recorded_params().items()}}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="etth2,m4", help="comma-separated, out of etth2,m4 (default: both)")
    ap.add_argument("--models", default="patchtst,vit", help="comma-separated, out of patchtst,vit (default: both)")
    ap.add_argument("--fractions", default="1,0.1",
                    help="comma-separated fractions of the training windows kept (the last ones; default: 1,0.1)")
    ap.add_argument("--n-blocks", default="6", help="vit: comma-separated k (the first k frozen blocks)")
    ap.add_argument("--no-train-norm", action="store_true", help="vit: LayerNorm affine pairs frozen too")
    ap.add_argument("--no-train-pos", action="store_true", help="vit: no position embedding")
    ap.add_argument("--max-epochs", type=int, default=6, help="cap on epochs (default: 6)")
    ap.add_argument("--patience", type=int, default=3, help="early-stopping patience in epochs (default: 3)")
    ap.add_argument("--windows-per-epoch", type=int, default=256, help="training windows sampled per epoch")
    ap.add_argument("--batch-size", type=int, default=32, help="training batch size")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    ap.add_argument("--val-windows", type=int, default=200, help="ETTh2: the first V validation windows (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    data_arg(ap, "--ett", SHARED_DATA / "ett" / "ETTh2.csv", "the ETTh2 CSV")
    data_arg(ap, "--m4", SHARED_DATA / "m4_hourly", "folder holding M4's Hourly-train.csv and Hourly-test.csv")
    ap.add_argument("--tag", default="", help="suffix of the JSON's name")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    ett = resolve_data(args.ett, SHARED_DATA / "ett" / "ETTh2.csv")
    m4 = resolve_data(args.m4, SHARED_DATA / "m4_hourly", "Hourly-train.csv")
    if ett is None or m4 is None:
        return 0
    args.ett, args.m4 = ett, m4
    torch.set_num_threads(args.threads)
    rows: list[dict] = []
    started = time.perf_counter()
    name = "forecast_frozen_vit" + (f"_{args.tag}" if args.tag else "")
    for ds in args.datasets.split(","):
        for fraction in (float(f) for f in args.fractions.split(",")):
            for model in args.models.split(","):
                variants = [{}] if model != "vit" else [
                    {"n_blocks": int(k), "train_norm": not args.no_train_norm, "train_pos": not args.no_train_pos}
                    for k in args.n_blocks.split(",")]
                for extra in variants:
                    run = run_etth2 if ds == "etth2" else run_m4
                    r = {"dataset": ds, "fraction": fraction, "model": model, **extra, **run(model, fraction, args, extra)}
                    rows.append(r)
                    print_table([{k: v for k, v in r.items() if k != "params"}])
                    write_result(name, {"threads": args.threads, "caps": {
                        "max_epochs": args.max_epochs, "patience": args.patience,
                        "windows_per_epoch": args.windows_per_epoch, "batch_size": args.batch_size,
                        "lr": args.lr, "etth2_val_windows": args.val_windows},
                        "wall_seconds": time.perf_counter() - started, "published": PUBLISHED, "results": rows},
                        args.out)
    print_table([{k: v for k, v in r.items() if k != "params"} for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
