"""Why did `auto` lose, and which validated rule does not? Candidate forecasts computed once, rules scored offline.

Per development set (as benchmarks/forecast_defaults.py runs it: the CLI's windows), each of auto's
candidates (seasonal naive, Theta, ETS, DLinear, PatchTST) forecasts
  - the test windows (the backtest's rolling cutoffs), and
  - validation windows inside each series' history before its first cutoff: the statistical ones up to
    --val-windows windows of h rolling back from the first cutoff (each refitted on the history before
    it, where that holds more than max(m, h, 4) values); the neural ones the validation tail of h that
    the model trained for the first cutoff held out.
`--compute` writes them to --cache (one .npz per set; `--rule` gives the neural candidates the lengths of
forecasting.lookback.neural_lengths, else the constant look-back 336 capped by what the median series
fits, patch 16/8, kernel 25). Without it, the rules of `AutoForecaster.weights` (one validation window,
the window auto uses) and each candidate alone are scored by MASE on the test windows (a neural
candidate on a series too short for it: auto over the statistical ones, as the CLI's default policy);
`--rule-cache` also scores the neural candidates of a `--rule` cache against the constant's.

Writes benchmarks/results/forecast_auto_rules.json (or --out).
"""
from __future__ import annotations

import argparse
import sys
import warnings
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_result  # noqa: E402
from forecast_defaults import SETS, load  # noqa: E402

import numpy as np  # noqa: E402

NAMES = ("SeasonalNaive", "Theta", "ETS", "DLinear", "PatchTST")
LOCAL = 3                                  # the first LOCAL candidates are statistical


def compute(name: str, max_series: int | None, etth2_rows: int | None, seed: int, val_windows: int,
            cache: Path, rule: bool = False, neural_only: bool = False, val_tail: int = 1) -> None:
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
    tail = dict(val_size=val_tail * h)                 # the validation tail: val_tail windows of h
    for i, model in enumerate([DLinear(h=h, input_size=input_size, progress=False, **dl, **tail),
                               PatchTST(h=h, input_size=input_size, progress=False, **pt, **tail)], start=LOCAL):
        idx = np.flatnonzero(cuts[:, 0] >= model.min_history())
        if idx.size:
            p, v, _ = model.forecast_with_calibration([ys[s] for s in idx], cuts[idx], vcuts[idx, :val_tail][:, ::-1],
                                                      h, progress=False, global_calibration="holdout")
            preds[i, idx], vals[i, idx, :val_tail] = p, v[:, ::-1]
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


RULES = {"global, top 1 (a plain choice)": dict(how="global", top=1),
         "global, top 2 within 10 %": dict(how="global", top=2, tolerance=0.1),
         "global, top 3 within 10 %": dict(how="global", top=3, tolerance=0.1),
         "global, top 2 within 20 %": dict(how="global", top=2, tolerance=0.2),
         "global, top 3 within 20 % (default)": dict(how="global", top=3, tolerance=0.2),
         "global, top 6 within 20 %": dict(how="global", top=6, tolerance=0.2),
         "global_weights": dict(how="global_weights"), "select": dict(how="select"),
         "weights": dict(how="weights")}


def score(name: str, cache: Path, rule_cache: Path | None, tail_cache: Path | None = None) -> dict:
    """MASE on the test windows of each candidate alone and of each rule, from a set's cached forecasts."""
    from frozenvit.forecasting import SeasonalNaive
    from frozenvit.forecasting.auto import AutoForecaster, combine_validated
    from frozenvit.forecasting.lookback import neural_lengths

    d = dict(np.load(cache / f"{name}.npz"))
    preds, vals = d["preds"], d["vals"][:, :, :1]                                 # (C, S, W, h), (C, S, 1, h)
    truth = d["truth"]

    def mase(p: np.ndarray) -> float:                                              # M4's: per series, then mean
        return float(np.mean((np.abs(p - truth).mean(axis=2) / d["scale"]).mean(axis=1)))

    def auto(p: np.ndarray, v: np.ndarray, median: bool = True, rows: np.ndarray | None = None, **kw) -> np.ndarray:
        """auto's forecasts (S, W, h) from candidates' forecasts and validation forecasts (and their median), of
        the series `rows` (default: all)."""
        rows = np.arange(p.shape[1]) if rows is None else rows
        p, v = p[:, rows], v[:, rows]
        with warnings.catch_warnings():                    # all-NaN medians: series no candidate forecasts
            warnings.simplefilter("ignore", RuntimeWarning)
            validated = np.isfinite(v[:, :, 0]).all(axis=2)                                        # (C, S)
            if median:
                p = np.concatenate([p, np.nanmedian(p, axis=0, keepdims=True)])
                v = np.concatenate([v, np.where(validated.all(axis=0)[None, :, None, None],
                                                np.nanmedian(v, axis=0, keepdims=True), np.nan)])
        errors = np.abs(v[:, :, 0] - d["vtruth"][None, rows, 0]).mean(axis=2) / d["vscale"][None, rows, 0]
        rule = AutoForecaster([SeasonalNaive(i + 1) for i in range(p.shape[0])], **kw)   # aliases only
        return combine_validated(p, rule.weights(errors, np.isfinite(p).all(axis=(2, 3))))

    short = np.flatnonzero(np.isnan(preds[LOCAL]).all(axis=(1, 2)))               # too short for the networks
    fallback = np.full(truth.shape, np.nan)                                        # the CLI's policy for them:
    if short.size:                                                                 # auto over the statistical
        fallback[short] = auto(preds[:LOCAL], vals[:LOCAL], median=False, rows=short)   # ones, on them alone
    alone = {n: mase(np.where(np.isnan(preds[i]), fallback, preds[i])) for i, n in enumerate(NAMES)}
    rules = {k: mase(auto(preds, vals, **kw)) for k, kw in RULES.items()}
    best = min(alone, key=alone.get)
    ets_theta = min(alone["ETS"], alone["Theta"])
    row = {"set": name, "series": int(preds.shape[1]), "series_in_file": int(d["series_in_file"]),
           "windows": int(preds.shape[2]), "input_size": int(d["input_size"]),
           "short_for_neural": int(np.isnan(preds[LOCAL]).all(axis=(1, 2)).sum()),
           "candidates": alone, "best_candidate": best, "rules": rules,
           "rules_over_best": {k: v / alone[best] for k, v in rules.items()},
           "rules_over_ets_theta": {k: v / ets_theta for k, v in rules.items()}}
    h, m = SETS[name]
    rule = neural_lengths(d["lengths"], h, m, preds.shape[2], h, shortest=True).__dict__
    constant = dict(input_size=int(d["input_size"]), patch_len=16, stride=8, kernel_size=25, val_size=h)
    row["lengths"] = {"rule": rule, "constant": constant}
    if rule == constant:                                                           # the same networks
        row["lengths_rule"] = {"same_as_constant": True}
    elif rule_cache is not None and (rule_cache / f"{name}.npz").is_file():       # the look-back rule's networks
        r = dict(np.load(rule_cache / f"{name}.npz"))
        p, v = preds.copy(), vals.copy()
        p[LOCAL:], v[LOCAL:] = r["preds"][LOCAL:], r["vals"][LOCAL:, :, :1]
        row["lengths_rule"] = {"input_size": int(r["input_size"]),
                               "short_for_neural": int(np.isnan(p[LOCAL]).all(axis=(1, 2)).sum()),
                               "candidates": {n: mase(np.where(np.isnan(p[i]), fallback, p[i]))
                                              for i, n in enumerate(NAMES) if i >= LOCAL},
                               "auto": mase(auto(p, v))}
    if tail_cache is not None and (tail_cache / f"{name}.npz").is_file():    # a validation tail of 4 h instead of h
        t = dict(np.load(tail_cache / f"{name}.npz"))
        row["val_tail"] = {"windows": 4, "candidates": {n: mase(np.where(np.isnan(t["preds"][i]), fallback, t["preds"][i]))
                                                        for i, n in enumerate(NAMES) if i >= LOCAL}}
    return row


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
    ap.add_argument("--val-tail", type=int, default=1, help="the neural candidates' validation tail, in windows of h")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the neural candidates")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "frozenvit" / "forecast_auto_rules",
                    help="folder of the candidates' cached forecasts, one .npz per set (written with --compute)")
    ap.add_argument("--compute", action="store_true", help="compute the candidates' forecasts into --cache first")
    ap.add_argument("--rule-cache", type=Path, default=None, help="a --rule cache whose neural candidates to score")
    ap.add_argument("--tail-cache", type=Path, default=None, help="a --val-tail 4 cache whose neural candidates to score")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    most = {k: int(v) for k, v in (p.split("=") for p in args.max_series.split(",") if p)}
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.sets.split(","):
        if args.compute:
            compute(name, most.get(name), args.etth2_rows, args.seed, args.val_windows, args.cache, args.rule,
                    args.neural_only, args.val_tail)
        else:
            rows.append(score(name, args.cache, args.rule_cache, args.tail_cache))
    if rows:
        print_table([{"set": r["set"], **r["candidates"], **{k.split(" (")[0]: v for k, v in r["rules"].items()}}
                     for r in rows])
        write_result("forecast_auto_rules", {"rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
