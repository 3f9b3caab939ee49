"""M4 Hourly: why conformal intervals of the neural models missed nominal coverage with a second training.

For seasonal naive, DLinear (seeds 0-2 by default) and PatchTST (seed 0) it forecasts, with the models
and settings of forecast_m4_hourly.py, the test window c_0 (the official 48) and earlier windows:
- "test net": the model trained on every series' history before c_0 (as the backtest trains it), on c_0
  and on its held-out validation tail c_0 - 48 (the holdout calibration window);
- "retrain": a second model trained before c_0 - 48, on c_0 - 48 (K = 1), and one trained before
  c_0 - 144 on c_0 - 144, c_0 - 96, c_0 - 48 (K = 3, one training), plus one trained before c_0 - 96
  (K = 3 refit at each calibration origin: with the other two);
- "dense": a model trained before c_0 - 95 on the 48 origins c_0 - 95 ... c_0 - 48 (stride 1).
Then conformal coverage at 80/95 of each calibration variant with three scales of the scores: MASE's
scale of the full history (the default), or a local one, the mean absolute seasonal difference over
the last 1, 3 or 7 days before each window's origin; and the score distributions of test vs calibration
windows. Forecasts are cached (--cache) so that the analysis reruns in seconds.
Writes benchmarks/results/forecast_m4_hourly_intervals_diagnosis.json.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, write_result  # noqa: E402
from forecast_m4_hourly import build  # noqa: E402
from forecast_m4_hourly import parser as point_parser  # noqa: E402

H, M = 48, 24


def forecasts(name: str, seed: int, ys: list, c0: np.ndarray) -> dict[str, np.ndarray]:
    """name's forecasts at the windows above (each (S, n, H)); keys: test (offsets 144, 96, 48, 0 from c_0)
    and, for a neural model, cal1, cal2, cal3 (offsets 144, 96, 48) and dense (offsets 95 ... 48)."""
    from sklearn.base import clone
    m = build(name, point_parser().parse_args(["--seed", str(seed)]))

    def at(model, offsets):
        if name == "snaive":
            return model.forecast_cutoffs(ys, np.stack([c0 - o for o in offsets], 1), H)[0]
        L = model.input_size
        return np.stack([model.predict(np.stack([y[c - o - L: c - o] for y, c in zip(ys, c0)])) for o in offsets], 1)

    if name == "snaive":
        return {"test": at(m, [144, 96, 48, 0])}
    fit = lambda back: clone(m).fit([y[: c - back] for y, c in zip(ys, c0)])  # noqa: E731   history only
    back = [144, 96, 48]
    return {"test": at(fit(0), back + [0]), "cal1": at(fit(48), back), "cal2": at(fit(96), back),
            "cal3": at(fit(144), back), "dense": at(fit(95), list(range(95, 47, -1)))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SHARED_DATA / "m4_hourly")
    ap.add_argument("--runs", default="snaive:0,dlinear:0,dlinear:1,dlinear:2,patchtst:0")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/frozenvit-m4-intervals-diagnosis"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if not (args.data / "Hourly-train.csv").is_file():
        print(f"skipped: {args.data} has no Hourly-train.csv")
        return 0
    import torch

    from frozenvit.forecasting import read_m4
    from frozenvit.forecasting.metrics import mase_scale
    torch.set_num_threads(args.threads)
    df = read_m4(args.data / "Hourly-train.csv", args.data / "Hourly-test.csv")
    ys = [g["y"].to_numpy(float) for _, g in df.groupby("unique_id", sort=False)]
    c0 = np.array([len(y) - H for y in ys])
    truth = lambda off: np.stack([y[c - off: c - off + H] for y, c in zip(ys, c0)])  # noqa: E731
    scales = {"full": lambda off: np.array([mase_scale(y[: c - off], M) for y, c in zip(ys, c0)])}
    for days in (1, 3, 7):
        scales[f"local{days}d"] = (lambda d: lambda off: np.array(
            [mase_scale(y[c - off - (d + 1) * M: c - off], M) for y, c in zip(ys, c0)]))(days)

    def quantile(s, lv):
        s = np.sort(s[np.isfinite(s)])
        return s[math.ceil((s.size + 1) * lv / 100 - 1e-9) - 1]

    def cover(cal, offs, test, scale, lv):
        sc = np.concatenate([np.abs(truth(o) - cal[:, i]) / scale(o)[:, None] for i, o in enumerate(offs)])
        q = np.array([quantile(sc[:, k], lv) for k in range(H)])
        return float(100 * (np.abs(truth(0) - test) <= q[None] * scale(0)[:, None]).mean())

    def dist(pred, off):
        e = np.abs(truth(off) - pred) / scales["full"](off)[:, None]
        return {"mean": float(e.mean()), "q80": float(np.quantile(e, .8)), "q95": float(np.quantile(e, .95)),
                "mean_steps_1_3": [float(v) for v in e.mean(0)[:3]]}

    t0 = time.perf_counter()
    rows, scores = [], []
    for run in args.runs.split(","):
        name, seed = run.split(":")
        path = args.cache / f"{name}_s{seed}.npz"
        if path.is_file():
            f = dict(np.load(path))
        else:
            f = forecasts(name, int(seed), ys, c0)
            args.cache.mkdir(parents=True, exist_ok=True)
            np.savez(path, **f)
        T = f["test"]
        if name == "snaive":
            variants = {"K=1 (refit)": (T[:, 2:3], [48]), "K=3 (refit)": (T[:, :3], [144, 96, 48])}
        else:
            variants = {"retrain K=1": (f["cal1"][:, 2:3], [48]),
                        "retrain K=3, one training": (f["cal3"], [144, 96, 48]),
                        "retrain K=3, a training per origin": (
                            np.stack([f["cal3"][:, 0], f["cal2"][:, 1], f["cal1"][:, 2]], 1), [144, 96, 48]),
                        "retrain dense: 48 origins, stride 1": (f["dense"], list(range(95, 47, -1))),
                        "holdout (test net on its validation tail)": (T[:, 2:3], [48])}
        for v, (cal, offs) in variants.items():
            rows.append({"model": name, "seed": int(seed), "calibration": v,
                         **{f"cover{lv}_{s}": cover(cal, offs, T[:, 3], sf, lv) for s, sf in scales.items()
                            for lv in (80, 95)}})
        scores.append({"model": name, "seed": int(seed), "test": dist(T[:, 3], 0),
                       "retrain_K1": dist(f["cal1"][:, 2] if "cal1" in f else T[:, 2], 48),
                       "holdout": dist(T[:, 2], 48) if name != "snaive" else None})
    for r in rows:
        print(f"{r['model']:8s} s{r['seed']} {r['calibration']:42s} " + "  ".join(
            f"{s}: {r[f'cover80_{s}']:.1f}/{r[f'cover95_{s}']:.1f}" for s in scales))
    write_result("forecast_m4_hourly_intervals_diagnosis",
                 {"threads": args.threads, "wall_seconds": time.perf_counter() - t0, "coverage": rows,
                  "scaled_error_distributions": scores,
                  "note": "coverage in % of the 414 x 48 test values; scales: MASE's over the full history, or "
                          "the mean absolute lag-24 difference over the last 1, 3, 7 days before each origin"},
                 args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
