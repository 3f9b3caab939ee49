"""Why does `auto` lose, and which validated rule does not? Candidate forecasts computed once, rules compared offline.

Per development set (as benchmarks/forecast_defaults.py runs it: the CLI's windows and look-back), each of
auto's candidates (seasonal naive, Theta, ETS, DLinear, PatchTST) forecasts
  - the test windows (the backtest's rolling cutoffs), and
  - validation windows inside each series' history before its first cutoff: the statistical ones up to
    --val-windows windows of h, rolling back from the first cutoff (each refitted on the history before
    it); the neural ones the validation tail of h that the model trained for the first cutoff held out.
`--compute` writes them to --cache (one .npz per set); without it the rules are scored from the cache.

Writes benchmarks/results/forecast_auto_rules.json (or --out).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_result  # noqa: E402
from forecast_defaults import SETS, load  # noqa: E402

import numpy as np  # noqa: E402

NAMES = ("SeasonalNaive", "Theta", "ETS", "DLinear", "PatchTST")
LOCAL = 3                                  # the first LOCAL candidates are statistical


def compute(name: str, max_series: int | None, etth2_rows: int | None, seed: int, val_windows: int,
            cache: Path, rule: bool = False, neural_only: bool = False) -> None:
    from frozenvit.forecasting import DLinear, ETS, PatchTST, SeasonalNaive, Theta, mase_scale
    from frozenvit.forecasting.defaults import LOOKBACK
    from frozenvit.forecasting.lookback import auto_windows, fitting_input_size, neural_lengths

    h, m = SETS[name]
    df = load(name, etth2_rows)
    ids = df["unique_id"].unique()
    if max_series and ids.size > max_series:
        df = df[df["unique_id"].isin(np.random.default_rng(seed).choice(ids, max_series, replace=False))]
    ys = [g["y"].to_numpy(float) for _, g in df.groupby("unique_id", sort=False)]
    lengths = np.array([y.size for y in ys])
    W = auto_windows(lengths, h, h, m)
    cuts = np.array([[y.size - h - (W - 1 - w) * h for w in range(W)] for y in ys])          # (S, W)
    if rule:                                         # every length from h, m and the lengths (lookback.py)
        lengths_rule = neural_lengths(lengths, h, m, W, h, shortest=True)
        input_size = lengths_rule.input_size
        dl = dict(kernel_size=lengths_rule.kernel_size)
        pt = dict(patch_len=lengths_rule.patch_len, stride=lengths_rule.stride)
    else:                                            # the constant look-back, capped by the median series
        fit = fitting_input_size(int(np.median(lengths)), h, W, h, LOOKBACK)
        input_size, dl, pt = (fit if fit >= 16 else 16), {}, {}
    S, C = len(ys), len(NAMES)
    preds = np.full((C, S, W, h), np.nan)
    vals = np.full((C, S, val_windows, h), np.nan)
    vcuts = cuts[:, :1] - h * np.arange(1, val_windows + 1)[None]                              # (S, V)
    t0 = time.perf_counter()
    local = [SeasonalNaive(m), Theta(m), ETS(m)]
    for i, model in enumerate([] if neural_only else local):
        preds[i] = model.forecast_cutoffs(ys, cuts, h, progress=False)[0]
        for v in range(val_windows):
            idx = np.flatnonzero(vcuts[:, v] >= max(m, h, 4) + 1)
            if idx.size:
                vals[i, idx, v] = model.forecast_cutoffs([ys[s] for s in idx], vcuts[idx, v:v + 1], h,
                                                         progress=False)[0][:, 0]
        print(name, model.alias, f"{time.perf_counter() - t0:.0f} s", flush=True)
    for i, model in enumerate([DLinear(h=h, input_size=input_size, progress=False, **dl),
                               PatchTST(h=h, input_size=input_size, progress=False, **pt)], start=LOCAL):
        idx = np.flatnonzero(cuts[:, 0] >= model.min_history())
        if idx.size:
            p, v, _ = model.forecast_with_calibration([ys[s] for s in idx], cuts[idx], vcuts[idx, :1], h,
                                                      progress=False, global_calibration="holdout")
            preds[i, idx], vals[i, idx, 0] = p, v[:, 0]
        print(name, model.alias, f"{time.perf_counter() - t0:.0f} s", flush=True)
    truth = np.stack([np.stack([y[c: c + h] for c in cs]) for y, cs in zip(ys, cuts)])     # (S, W, h)
    vtruth = np.stack([np.stack([y[c: c + h] if c >= 0 else np.full(h, np.nan) for c in cs])
                       for y, cs in zip(ys, vcuts)])                                         # (S, V, h)
    scale = np.array([[mase_scale(y[:c], m) for c in cs] for y, cs in zip(ys, cuts)])      # (S, W)
    vscale = np.array([[np.mean(np.abs(np.diff(y[:c]))) if c > 2 else np.nan for c in cs]
                       for y, cs in zip(ys, vcuts)])                                         # (S, V): one-step
    np.savez(cache / f"{name}.npz", preds=preds, vals=vals, truth=truth, vtruth=vtruth, scale=scale, vscale=vscale,
             lengths=lengths, input_size=input_size, seconds=time.perf_counter() - t0,
             series_in_file=ids.size, rule=rule)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--max-series", default="", help="SET=N,...: keep N series of SET (seeded)")
    ap.add_argument("--etth2-rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-windows", type=int, default=6)
    ap.add_argument("--rule", action="store_true", help="neural lengths by forecasting.lookback.neural_lengths, "
                    "else the constant look-back 336 capped by what the median series fits (patch 16/8, kernel 25)")
    ap.add_argument("--neural-only", action="store_true", help="compute the neural candidates only")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the neural candidates")
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--compute", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    most = {k: int(v) for k, v in (p.split("=") for p in args.max_series.split(",") if p)}
    args.cache.mkdir(parents=True, exist_ok=True)
    for name in args.sets.split(","):
        if args.compute:
            compute(name, most.get(name), args.etth2_rows, args.seed, args.val_windows, args.cache, args.rule,
                    args.neural_only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
