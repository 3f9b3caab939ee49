"""Which rule should `auto` use: per-series selection, per-series inverse-error weights, or one global choice?

One set of candidate forecasts per development set (the CLI's auto candidates: Theta, ETS, DLinear,
PatchTST, the look-back chosen as the CLI chooses it), one window at the end of each series, the
validation window just before it; each rule of `AutoForecaster.weights` applied to the same forecasts
and validation errors, scored by MASE (season-lag scale of each series' history) on the test window.
Also each candidate alone (over the series it can forecast; a neural candidate on a short series is
scored by the statistical forecast auto falls back to, as the CLI's default policy would).

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


def run_set(name: str, max_series: int | None, etth2_rows: int | None, seed: int, dump: Path | None) -> dict:
    from frozenvit.forecasting import DLinear, ETS, PatchTST, Theta, fitting_input_size, mase_scale
    from frozenvit.forecasting.auto import HOW, AutoForecaster, combine_validated
    from frozenvit.forecasting.defaults import LOOKBACK

    h, m = SETS[name]
    df = load(name, etth2_rows)
    ids = df["unique_id"].unique()
    if max_series and ids.size > max_series:
        df = df[df["unique_id"].isin(np.random.default_rng(seed).choice(ids, max_series, replace=False))]
    ys = [g["y"].to_numpy(float) for _, g in df.groupby("unique_id", sort=False)]
    cuts = np.array([[y.size - h] for y in ys])                                        # (S, 1)
    size = max(16, fitting_input_size(int(np.median([y.size for y in ys])), h, 1, h, LOOKBACK))
    cands = [Theta(m), ETS(m), DLinear(h=h, input_size=size, progress=False),
             PatchTST(h=h, input_size=size, progress=False)]
    t0 = time.perf_counter()
    preds, errors = AutoForecaster(cands).candidate_forecasts(ys, cuts, h, progress=False)     # (C, S, 1, h), (C, S)
    truth = np.stack([y[-h:] for y in ys])
    scale = np.array([mase_scale(y[:-h], m) for y in ys])

    def mase(p: np.ndarray) -> float:
        return float(np.nanmean(np.abs(p[:, 0] - truth).mean(axis=1) / scale))

    stat = combine_validated(preds[:2], AutoForecaster(cands[:2]).weights(errors[:2]))   # the fallback
    names = [c.alias for c in cands] + ["median"]                                       # the last row: their median
    alone = {n: mase(np.where(np.isnan(preds[i]), stat, preds[i])) for i, n in enumerate(names)}
    if dump:
        np.savez(dump / f"auto_rules_{name}.npz", preds=preds, errors=errors, truth=truth, scale=scale)
    rules = {how: mase(combine_validated(preds, AutoForecaster(cands, how=how).weights(errors))) for how in HOW}
    rules.update({f"{how}, no median": mase(combine_validated(preds[:-1], AutoForecaster(cands, how=how)
                                                              .weights(errors[:-1]))) for how in HOW})
    best = min(alone, key=alone.get)
    return {"set": name, "h": h, "season": m, "series": len(ys), "input_size": size,
            "subsample": {"max_series": max_series, "seed": seed} if max_series and ids.size > max_series else None,
            "validated_series": {n: int(np.isfinite(errors[i]).sum()) for i, n in enumerate(names)},
            "candidates": alone, "rules": rules, "best_candidate": best,
            "rules_over_best": {k: v / alone[best] for k, v in rules.items()}, "seconds": time.perf_counter() - t0}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--max-series", default="", help="SET=N,...: keep N series of SET (seeded)")
    ap.add_argument("--etth2-rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the neural candidates")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--dump", type=Path, default=None, help="folder for each set's forecasts and errors (.npz)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    most = {k: int(v) for k, v in (p.split("=") for p in args.max_series.split(",") if p)}
    rows = []
    for name in args.sets.split(","):
        rows.append(run_set(name, most.get(name), args.etth2_rows, args.seed, args.dump))
        print(name, rows[-1]["candidates"], rows[-1]["rules"], flush=True)
    print_table([{"set": r["set"], **r["candidates"], **{k: v for k, v in r["rules"].items() if "no" not in k}}
                 for r in rows])
    write_result("forecast_auto_rules", {"rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
