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
fits, patch 16/8, kernel 25; `--neural-validation retrain` has the networks forecast the validation window
from a second training on the history before it, as auto does). Without it, each candidate alone and the
rules of `AutoForecaster.weights` (one validation window, the window auto uses) are scored by MASE on the
test windows (a neural candidate on a series too short for it: auto over the statistical ones, as the
CLI's default policy): with `--retrain-cache` (a `--rule --neural-validation retrain --neural-only` cache,
the statistical candidates taken from --cache) as auto ran with one validation window ("shipped"), beside
the former rule (mean absolute errors, networks judged on their early-stopping tail, from `--rule-cache`);
the rule of the least mean ratio to the best candidate over CHOOSE_ON is the `choice`. With `--rolling-cache`
(a `--rule --neural-validation rolling` cache: each network trained once before the earliest of
--val-windows validation windows, forecasting them all; the statistical ones refitted per window, from
--cache) the rules of `WINDOW_RULES` on 1, 2, 4 and all of them, as auto runs now ("rolling"), and the
one of the least mean ratio over CHOOSE_ON of those at most the better of ETS and Theta on each of them
(`windows_chosen`). `--rule-cache` also scores the neural
candidates of the look-back rule against the constant's.

Writes benchmarks/results/forecast_auto_rules.json (or --out).
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import merged_from, print_table, set_counts, write_result  # noqa: E402
from forecast_defaults import SETS, load  # noqa: E402

import numpy as np  # noqa: E402

NAMES = ("SeasonalNaive", "Theta", "ETS", "DLinear", "PatchTST")
LOCAL = 3                                  # the first LOCAL candidates are statistical


def compute(name: str, max_series: int | None, etth2_rows: int | None, seed: int, val_windows: int,
            cache: Path, rule: bool = False, neural_only: bool = False, val_tail: int = 1,
            neural_validation: str = "holdout") -> None:
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
    rolling = np.full((C - LOCAL, S, val_windows, h), np.nan)        # networks: one training, V windows
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
        if idx.size and neural_validation in ("retrain", "rolling"):     # a second network, trained before
            preds[i, idx] = model.forecast_cutoffs([ys[s] for s in idx], cuts[idx], h, progress=False)[0]
            idx = np.flatnonzero(vcuts[:, 0] >= model.min_history())
            if idx.size:                                               # the window (one, as auto had it)
                vals[i, idx, 0] = model.forecast_cutoffs([ys[s] for s in idx], vcuts[idx, :1], h,
                                                         progress=False)[0][:, 0]
            n = (vcuts >= model.min_history()).sum(axis=1)             # windows a network can validate
            idx = np.flatnonzero(n)
            if idx.size and neural_validation == "rolling":            # one network before each series'
                early = vcuts[idx[:, None], np.minimum(np.arange(val_windows)[None], n[idx, None] - 1)]  # earliest of
                f = model.forecast_cutoffs([ys[s] for s in idx], early[:, ::-1], h, progress=False)[0][:, ::-1]
                rolling[i - LOCAL, idx] = np.where(np.arange(val_windows)[None, :, None] < n[idx, None, None],
                                                   f, np.nan)          # its windows, forecasting them all
        elif idx.size:
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
             rolling=rolling, lengths=lengths, input_size=input_size, seconds=time.perf_counter() - t0,
             series_in_file=ids.size, rule=rule)


RULES = {"global, top 1 (a plain choice)": dict(how="global", top=1),
         "global, top 2 within 10 %": dict(how="global", top=2, tolerance=0.1),
         "global, top 2 within 20 %": dict(how="global", top=2, tolerance=0.2),
         "global, top 3 within 10 %": dict(how="global", top=3, tolerance=0.1),
         "global, top 3 within 20 %": dict(how="global", top=3, tolerance=0.2),
         "global, top 4 within 20 %": dict(how="global", top=4, tolerance=0.2),
         "global_weights": dict(how="global_weights"), "select": dict(how="select"),
         "weights": dict(how="weights")}
FORMER = "former: top 3 within 20 % of the mean absolute error, networks judged on their early-stopping tail"
WINDOW_RULES = {"top 1": dict(how="global", top=1), "top 2 within 20 %": dict(how="global", top=2, tolerance=0.2),
                "top 3 within 20 %": dict(how="global", top=3, tolerance=0.2), "select": dict(how="select")}
CHOOSE_ON = ("m4_hourly", "m3_quarterly", "m3_yearly")     # the sets the default rule was chosen on


def absolute_weights(errors: np.ndarray, forecasts: np.ndarray, top: int = 3, tolerance: float = 0.2) -> np.ndarray:
    """The former "global" rule, for comparison: per group of series validated for the same candidates, the
    mean of the `top` of the least mean (absolute) validation error within `tolerance` of the least; a series
    without any error: the same over the series validated for every candidate it has forecasts of."""
    has = np.isfinite(errors)

    def group(e: np.ndarray, pattern: np.ndarray) -> np.ndarray:
        mean = np.where(pattern, np.nanmean(np.where(pattern[:, None], e, 0.0), axis=1), np.inf)
        order = np.argsort(mean, kind="stable")[:top]
        keep = order[mean[order] <= mean[order[0]] * (1 + tolerance)]
        w = np.zeros(e.shape[0])
        w[keep] = 1.0 / keep.size
        return w

    w = np.zeros_like(errors)
    for s in range(errors.shape[1]):
        pattern = has[:, s] if has[:, s].any() else forecasts[:, s]
        cols = np.flatnonzero((has[pattern].all(axis=0)) & ((has == pattern[:, None]).all(axis=0) | ~has[:, s].any()))
        if len(cols):
            w[:, s] = group(errors[:, cols], pattern)
    return w


def score(name: str, cache: Path, rule_cache: Path | None, tail_cache: Path | None = None,
          retrain_cache: Path | None = None, rolling_cache: Path | None = None) -> dict:
    """MASE on the test windows of each candidate alone and of each rule, from a set's cached forecasts: the
    look-back constant's networks of `cache`, the look-back rule's of `rule_cache`, and with `retrain_cache`
    (the rule's networks, validated by a second training: what auto does) the rules as shipped ("shipped")."""
    from frozenvit.forecasting import SeasonalNaive
    from frozenvit.forecasting.auto import AutoForecaster, combine_validated
    from frozenvit.forecasting.lookback import neural_lengths

    d = dict(np.load(cache / f"{name}.npz"))
    preds, vals = d["preds"], d["vals"][:, :, :1]                                 # (C, S, W, h), (C, S, 1, h)
    truth = d["truth"]

    def mase(p: np.ndarray) -> float:                                              # M4's: per series, then mean
        return float(np.mean((np.abs(p - truth).mean(axis=2) / d["scale"]).mean(axis=1)))

    def auto(p: np.ndarray, v: np.ndarray, median: bool = True, rows: np.ndarray | None = None, former: bool = False,
             **kw) -> np.ndarray:
        """auto's forecasts (S, W, h) from candidates' forecasts and validation forecasts (and their median), of
        the series `rows` (default: all)."""
        rows = np.arange(p.shape[1]) if rows is None else rows
        p, v = p[:, rows], v[:, rows]
        V = v.shape[2]
        lead = np.isfinite(v).all(axis=3).cumprod(axis=2).sum(axis=2)          # (C, S) windows validated
        shared = np.where(lead > 0, lead, V).min(axis=0)                       # as auto: the windows every
        v = np.where(np.arange(V)[None, None, :, None] < shared[None, :, None, None], v, np.nan)   # one has
        with warnings.catch_warnings():                    # all-NaN medians: series no candidate forecasts
            warnings.simplefilter("ignore", RuntimeWarning)
            validated = np.isfinite(v).all(axis=3)                                                 # (C, S, V)
            if median:
                p = np.concatenate([p, np.nanmedian(p, axis=0, keepdims=True)])
                v = np.concatenate([v, np.where(validated.all(axis=0)[None, :, :, None],
                                                np.nanmedian(v, axis=0, keepdims=True), np.nan)])
        errors = np.abs(v - d["vtruth"][None, rows, :V]).mean(axis=3) / d["vscale"][None, rows, :1]  # (C, S, V)
        forecasts = np.isfinite(p).all(axis=(2, 3))
        if former:
            return combine_validated(p, absolute_weights(errors[:, :, 0], forecasts))
        rule = AutoForecaster([SeasonalNaive(i + 1) for i in range(p.shape[0])], **kw)   # aliases only
        return combine_validated(p, rule.weights(errors, forecasts))

    short = np.flatnonzero(np.isnan(preds[LOCAL]).all(axis=(1, 2)))               # too short for the networks
    fallback = np.full(truth.shape, np.nan)                                        # the CLI's policy for them:
    if short.size:                                                                 # auto over the statistical
        fallback[short] = auto(preds[:LOCAL], vals[:LOCAL], median=False, rows=short)   # ones, on them alone
    alone = {n: mase(np.where(np.isnan(preds[i]), fallback, preds[i])) for i, n in enumerate(NAMES)}
    best = min(alone, key=alone.get)
    row = {"set": name, "series": int(preds.shape[1]), "series_in_file": int(d["series_in_file"]),
           "longest": int(d["lengths"].max()),
           "windows": int(preds.shape[2]), "input_size": int(d["input_size"]),
           "short_for_neural": int(np.isnan(preds[LOCAL]).all(axis=(1, 2)).sum()),
           "candidates": alone, "best_candidate": best}
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
                                              for i, n in enumerate(NAMES) if i >= LOCAL}}
    if tail_cache is not None and (tail_cache / f"{name}.npz").is_file():    # a validation tail of 4 h instead of h
        t = dict(np.load(tail_cache / f"{name}.npz"))
        row["val_tail"] = {"windows": 4, "candidates": {n: mase(np.where(np.isnan(t["preds"][i]), fallback, t["preds"][i]))
                                                        for i, n in enumerate(NAMES) if i >= LOCAL}}
    if retrain_cache is not None and (retrain_cache / f"{name}.npz").is_file():
        r = dict(np.load(retrain_cache / f"{name}.npz"))
        p, v = preds.copy(), vals.copy()                       # the statistical candidates as they are
        p[LOCAL:], v[LOCAL:] = r["preds"][LOCAL:], r["vals"][LOCAL:, :, :1]
        holdout = vals.copy()                                 # the former validation: the early-stopping tail
        if rule_cache is not None and (rule_cache / f"{name}.npz").is_file() and rule != constant:
            holdout[LOCAL:] = dict(np.load(rule_cache / f"{name}.npz"))["vals"][LOCAL:, :, :1]
        fb, few = np.full(truth.shape, np.nan), np.flatnonzero(np.isnan(p[LOCAL]).all(axis=(1, 2)))
        if few.size:
            fb[few] = auto(p[:LOCAL], v[:LOCAL], median=False, rows=few)
        cands = {n: mase(np.where(np.isnan(p[i]), fb, p[i])) for i, n in enumerate(NAMES)}
        shipped = {k: mase(auto(p, v, **kw)) for k, kw in RULES.items()}
        shipped[FORMER] = mase(auto(p, holdout, former=True))
        shipped["former rule, networks judged by a second training"] = mase(auto(p, v, former=True))
        top = min(cands, key=cands.get)
        et = min(cands["ETS"], cands["Theta"])
        row["shipped"] = {"candidates": cands, "best_candidate": top, "rules": shipped,
                          "rules_over_best": {k: x / cands[top] for k, x in shipped.items()},
                          "rules_over_ets_theta": {k: x / et for k, x in shipped.items()},
                          "neural_validated": int(np.isfinite(r["vals"][LOCAL, :, 0]).all(axis=1).sum())}
    if rolling_cache is not None and (rolling_cache / f"{name}.npz").is_file() and "shipped" in row:
        r = dict(np.load(rolling_cache / f"{name}.npz"))
        p, v = preds.copy(), d["vals"].copy()                  # the statistical candidates: a fit per window
        p[LOCAL:] = r["preds"][LOCAL:]
        V = min(v.shape[2], r["rolling"].shape[2])
        v = v[:, :, :V]
        v[LOCAL:] = r["rolling"][:, :, :V]                     # the networks: one training, every window
        cands, top = row["shipped"]["candidates"], row["shipped"]["best_candidate"]
        et = min(cands["ETS"], cands["Theta"])
        out = {}
        for k in sorted({1, 2, 4, V} - {0} - set(range(V + 1, 5))):
            vk = v[:, :, :k] if k > 1 else np.concatenate([v[:LOCAL, :, :1], r["vals"][LOCAL:, :, :1]])
            for rule, kw in WINDOW_RULES.items():
                x = mase(auto(p, vk, **kw))
                out[f"{'all' if k == V else k} windows, {rule}"] = {"mase": x, "over_best": x / cands[top],
                                                                     "over_ets_theta": x / et}
        row["rolling"] = {"validation_windows": V, "rules": out,
                          "neural_validated": int(np.isfinite(r["rolling"][0, :, 0, 0]).sum())}
    return row


def choose(rows: list[dict]) -> dict:
    """The rule of the least mean MASE ratio to the best candidate over the CHOOSE_ON sets (of those run): of
    the one-window rules (`RULES`), and with a rolling cache, of the rules on every validation window."""
    on = [r for r in rows if r["set"] in CHOOSE_ON and "shipped" in r]
    mean = {k: float(np.mean([r["shipped"]["rules_over_best"][k] for r in on])) for k in RULES} if on else {}
    out = {"sets": [r["set"] for r in on], "mean_over_best": mean, "chosen": min(mean, key=mean.get) if mean else None}
    if on and all("rolling" in r for r in on):           # of those at most the better of ETS and Theta on each
        keys = [k for k in on[0]["rolling"]["rules"] if k.startswith("all windows")]
        windows = {k: float(np.mean([r["rolling"]["rules"][k]["over_best"] for r in on])) for k in keys}
        keep = [k for k in keys if all(r["rolling"]["rules"][k]["over_ets_theta"] <= 1 for r in on)]
        out.update(windows_mean_over_best=windows, windows_at_most_ets_theta=keep,
                   windows_chosen=min(keep, key=windows.get) if keep else None)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--max-series", type=set_counts, default="",
                    help="SET=N,...: keep N (at least 1) series of SET (seeded); default: all")
    ap.add_argument("--etth2-rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--val-windows", type=int, default=6)
    ap.add_argument("--rule", action="store_true", help="neural lengths by forecasting.lookback.neural_lengths, "
                    "else the constant look-back 336 capped by what the median series fits (patch 16/8, kernel 25)")
    ap.add_argument("--neural-only", action="store_true", help="compute the neural candidates only")
    ap.add_argument("--val-tail", type=int, default=1, help="the neural candidates' validation tail, in windows of h")
    ap.add_argument("--neural-validation", choices=("holdout", "retrain", "rolling"), default="holdout",
                    help="the neural candidates' validation forecasts: from the network of the first cutoff on the "
                    "tail it held out (early stopping's), or from a second network trained before the window; "
                    "'rolling': "
                    "that, and one more network trained before the earliest of --val-windows windows forecasts them "
                    "all (stored as `rolling`)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the neural candidates")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "frozenvit" / "forecast_auto_rules",
                    help="folder of the candidates' cached forecasts, one .npz per set (written with --compute)")
    ap.add_argument("--compute", action="store_true", help="compute the candidates' forecasts into --cache first")
    ap.add_argument("--rule-cache", type=Path, default=None, help="a --rule cache whose neural candidates to score")
    ap.add_argument("--tail-cache", type=Path, default=None, help="a --val-tail 4 cache whose neural candidates to score")
    ap.add_argument("--retrain-cache", type=Path, default=None,
                    help="a --rule --neural-validation retrain cache (neural candidates only): the rules as shipped")
    ap.add_argument("--rolling-cache", type=Path, default=None,
                    help="a --rule --neural-validation rolling cache: the rules on 1, 2, 4 and all its validation "
                    "windows")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="run nothing: one result of the rows of these earlier JSON files (runs of other caches), "
                    "the choice made again over them")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.merge:
        parts = [json.loads(f.read_text()) for f in args.merge]
        rows = [r for d in parts for r in d["rows"]]
        write_result("forecast_auto_rules", {"rows": rows, "choice": choose(rows),
                                             "merged_from": merged_from(args.merge, parts)}, args.out)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    most = dict(args.max_series)
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.sets.split(","):
        if args.compute:
            compute(name, most.get(name), args.etth2_rows, args.seed, args.val_windows, args.cache, args.rule,
                    args.neural_only, args.val_tail, args.neural_validation)
        else:
            rows.append(score(name, args.cache, args.rule_cache, args.tail_cache, args.retrain_cache,
                              args.rolling_cache))
    if rows:
        print_table([{"set": r["set"], **r["shipped"]["candidates"],
                      **{k.split(":")[0].replace("global, ", ""): v for k, v in r["shipped"]["rules"].items()}}
                     for r in rows if "shipped" in r])
        chosen = choose(rows)
        for k, x in chosen["mean_over_best"].items():
            print(f"{k}: {x:.4f} of the best candidate on average over {','.join(chosen['sets'])}")
        write_result("forecast_auto_rules", {"rows": rows, "choice": chosen}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
