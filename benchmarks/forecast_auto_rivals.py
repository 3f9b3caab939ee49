"""Rivals of auto's rule, scored offline on the rolling caches of benchmarks/forecast_auto_rules.py.

auto (forecasting/auto.py) ranks its candidates (seasonal naive, Theta, ETS, DLinear, PatchTST and their
median) by their mean relative error on up to `windows` validation windows and combines the best 2 within
20 %. Each rival below turns the same validation errors (or forecasts) into weights per series, and is
scored by MASE on the test windows, over the best candidate alone and over the better of ETS and Theta
(the two bars auto is held to: at most 1.02 and at most 1). The rivals, each for a reason of its own:

  top k within t     other k and tolerances; "no median": the median left out of the candidates (a
                     combination of combinations counts its members twice); the median of the others
                     than seasonal naive (as the CLI's median column)
  softmax T          weights exp(-log(score / best) / T): a smooth choice, no cliff at the tolerance
  inverse            weights 1 / score (FFORMA-like, without the meta-learner)
  geometric          the geometric mean of the relative errors (AvgRelMAE), not the arithmetic one
  pooled, rank       the sum of the errors over the sum of the least (each window weighs its size), or
                     the mean rank per series and window (only the order counts)
  recency r          window v (0 nearest the cutoff) weighs r^v: the newest windows say more
  near networks      the networks' nearest window from a training just before it, not 8 windows earlier
  median of top 3    the median, not the mean, of the three best
  confidence z       every candidate whose paired difference to the best (per series, or per window
                     averaged over the series: series seen at the same time share its shocks) is at most
                     z standard errors: combine what the validation cannot tell apart
  leave-one-window   k of top k chosen by leave-one-window-out: ranked on the other windows, the top-k
                     combination scored on the one left out
  stacking           the weights (>= 0, sum 1) of the least scaled absolute error of the combination on the
                     validation values (a linear program per group)

The caches, per group of sets: the statistical candidates' (forecasts and per-window validation forecasts)
and the networks' (`--rule --neural-validation rolling`, its `vals` window 0 from a second training just
before the nearest window); one folder may hold both. Writes benchmarks/results/forecast_auto_rivals.json
(or --out).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_result  # noqa: E402

import numpy as np  # noqa: E402

NAMES = ("SeasonalNaive", "Theta", "ETS", "DLinear", "PatchTST")
LOCAL = 3                                  # the first LOCAL candidates are statistical
SHIPPED = "top 2 within 20 % (auto's default)"


def load_set(name: str, cache: Path, rolling_cache: Path) -> dict:
    """Test forecasts p (C, S, W, h), validation forecasts v (C, S, V, h) (statistical: a fit per window;
    networks: one training before the earliest), the networks' nearest window from a training just before it
    `near` (2, S, h), and the truths and scales."""
    b, r = dict(np.load(cache / f"{name}.npz")), dict(np.load(rolling_cache / f"{name}.npz"))
    p = b["preds"].copy()
    p[LOCAL:] = r["preds"][LOCAL:]
    V = min(b["vals"].shape[2], r["rolling"].shape[2])
    v = b["vals"][:, :, :V].copy()
    v[LOCAL:] = r["rolling"][:, :, :V]
    return dict(p=p, v=v, near=r["vals"][LOCAL:, :, 0], truth=b["truth"], vtruth=b["vtruth"][:, :V],
                scale=b["scale"], vscale=b["vscale"][:, :V], lengths=b["lengths"],
                series_in_file=int(b["series_in_file"]))


def mase(d: dict, p: np.ndarray) -> float:
    """M4's MASE of forecasts (S, W, h): per series, then the mean."""
    return float(np.mean((np.abs(p - d["truth"]).mean(axis=2) / d["scale"]).mean(axis=1)))


def prepare(d: dict, p: np.ndarray, v: np.ndarray, median: bool = True, rows: np.ndarray | None = None,
            median_from: int = 0):
    """As auto: each series validated on the windows every candidate validating its nearest one has; the
    median (of the candidates from `median_from` on) one more candidate. -> forecasts (C, S, W, h),
    validation forecasts (C, S, V, h), errors (C, S, V)."""
    rows = np.arange(p.shape[1]) if rows is None else rows
    p, v = p[:, rows], v[:, rows]
    V = v.shape[2]
    lead = np.isfinite(v).all(axis=3).cumprod(axis=2).sum(axis=2)                       # (C, S)
    shared = np.where(lead > 0, lead, V).min(axis=0)
    v = np.where(np.arange(V)[None, None, :, None] < shared[None, :, None, None], v, np.nan)
    if median:
        validated = np.isfinite(v).all(axis=3).all(axis=0)
        p = np.concatenate([p, np.nanmedian(p[median_from:], axis=0, keepdims=True)])
        v = np.concatenate([v, np.where(validated[None, :, :, None], np.nanmedian(v[median_from:], axis=0, keepdims=True),
                                        np.nan)])
    errors = np.abs(v - d["vtruth"][None, rows, :V]).mean(axis=3) / d["vscale"][None, rows, :1]
    return p, v, errors


def relative(errors: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """Errors (C, s, V) over the least of their series and window among the candidates of `pattern`."""
    used = np.where(pattern[:, None, None], errors, np.nan)
    least = np.nanmin(np.where(np.isfinite(used), used, np.inf), axis=0)
    return used / np.where((least > 0) & np.isfinite(least), least, np.nan)[None]


def top(score: np.ndarray, k: int, tolerance: float) -> np.ndarray:
    """Equal weights on the `k` of the least score within `tolerance` (relative) of the least."""
    w = np.zeros(score.size)
    order = np.argsort(score, kind="stable")[:k]
    keep = order[score[order] <= score[order[0]] * (1 + tolerance)]
    w[keep] = 1.0 / keep.size
    return w


def mean_score(rel: np.ndarray, pattern: np.ndarray, decay: float = 1.0, geometric: bool = False) -> np.ndarray:
    """Each candidate's mean over series of its (recency-weighted) mean over windows; inf outside `pattern`."""
    x = np.log(rel) if geometric else rel
    wv = np.where(np.isfinite(x), decay ** np.arange(x.shape[2])[None, None], 0.0)
    per = (np.nan_to_num(x) * wv).sum(axis=2) / wv.sum(axis=2)
    s = np.nanmean(per, axis=1)
    s = np.exp(s) if geometric else s
    return np.where(pattern & np.isfinite(s), s, np.inf)


def pooled_score(errors: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """Each candidate's errors (C, s, V) summed over the series and windows every candidate of `pattern` has,
    over the sum of the least there; inf outside `pattern`."""
    used = np.where(pattern[:, None, None], errors, np.nan)
    ok = np.isfinite(used[pattern]).all(axis=0)
    least = np.nanmin(np.where(np.isfinite(used), used, np.inf), axis=0)
    s = np.where(ok[None], used, 0.0).sum(axis=(1, 2)) / np.where(ok, least, 0.0).sum()
    return np.where(pattern & np.isfinite(s), s, np.inf)


def rank_score(rel: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """Each candidate's mean over series of its mean rank (1 the best) over windows; inf outside `pattern`."""
    ranks = np.where(np.isfinite(rel), rel, np.inf).argsort(axis=0).argsort(axis=0) + 1.0
    return mean_score(np.where(np.isfinite(rel), ranks, np.nan), pattern)


def confidence(rel: np.ndarray, pattern: np.ndarray, z: float, unit: str) -> np.ndarray:
    """Equal weights on the candidates whose mean paired difference to the best is at most z standard errors
    (units: series, or windows averaged over the series); fewer than 2 units: the default rule."""
    score = mean_score(rel, pattern)
    units = np.nanmean(rel, axis=2) if unit == "series" else np.nanmean(rel, axis=1)
    units = units[:, np.isfinite(units[pattern]).all(axis=0)]
    if units.shape[1] < 2:
        return top(score, 2, 0.2)
    diff = units - units[int(np.argmin(score))][None]
    keep = pattern & np.isfinite(score) & (diff.mean(axis=1) <= z * diff.std(axis=1, ddof=1) / np.sqrt(units.shape[1]))
    return keep / keep.sum()


def leave_one_window(rel: np.ndarray, pattern: np.ndarray, combo_error: Callable, ks=(1, 2, 3, 4)) -> np.ndarray:
    """top k within 20 % with k of the least mean relative error of the top-k combination on each window
    left out, ranked on the others (`combo_error(keep, v, use)`: the combination's errors over the least)."""
    nwin = np.isfinite(rel[pattern]).all(axis=0).sum(axis=1)
    best_k, best = 2, np.inf
    for k in ks:
        errs = []
        for v in range(rel.shape[2]):
            use = nwin > v
            if nwin.max() < 2 or not use.any():
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                keep = np.flatnonzero(top(mean_score(np.delete(rel, v, axis=2)[:, use], pattern), k, 0.2))
            errs.append(combo_error(keep, v, use))
        mean = float(np.nanmean(np.concatenate(errs))) if errs else np.inf
        if mean < best:
            best_k, best = k, mean
    return top(mean_score(rel, pattern), best_k, 0.2)


def stacking(vv: np.ndarray, vt: np.ndarray, scale: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """Weights (>= 0, sum 1) of the least mean scaled absolute error of the combination (vv: (C, s, V, h))."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, eye, hstack, vstack

    idx = np.flatnonzero(pattern)
    ok = np.isfinite(vv[idx]).all(axis=0) & np.isfinite(vt)
    sc = np.broadcast_to(scale[:, None, None], vt.shape)[ok]
    A, y = (vv[idx][:, ok] / sc[None]).T, vt[ok] / sc                                 # (N, c), (N,)
    w = np.zeros(vv.shape[0])
    if not y.size:
        w[idx] = 1.0 / idx.size
        return w
    N, c = A.shape
    eye_n = eye(N, format="csr")
    res = linprog(np.r_[np.zeros(c), np.ones(N) / N],
                  A_ub=hstack([csr_matrix(np.vstack([A, -A])), -vstack([eye_n, eye_n])]), b_ub=np.r_[y, -y],
                  A_eq=np.r_[np.ones(c), np.zeros(N)][None], b_eq=[1], bounds=[(0, None)] * (c + N), method="highs")
    w[idx] = res.x[:c]
    return w


def group_weights(errors: np.ndarray, forecasts: np.ndarray, rule: Callable[[np.ndarray, np.ndarray], np.ndarray]
                  ) -> np.ndarray:
    """As AutoForecaster.weights' global rules: `rule(cols, pattern)` -> weights (C,) per group of series
    validated for the same candidates; a series without errors: the rule over the series validated for every
    candidate it has forecasts of."""
    has = np.isfinite(errors).any(axis=2)
    w = np.zeros(has.shape)
    groups: dict[tuple, list[int]] = {}
    for s in range(has.shape[1]):
        groups.setdefault(tuple(has[:, s]), []).append(s)
    for pattern, cols in groups.items():
        if any(pattern):
            w[:, cols] = rule(np.array(cols), np.array(pattern))[:, None]
    for s in np.flatnonzero(~has.any(axis=0)):
        cols = np.flatnonzero(has[forecasts[:, s]].all(axis=0))
        if cols.size:
            w[:, s] = rule(cols, forecasts[:, s])
    return w


def combine(p: np.ndarray, w: np.ndarray, median_of_kept: bool = False) -> np.ndarray:
    """Forecasts (C, S, W, h) weighted per series (w: (C, S)), or the median of the candidates of weight > 0."""
    from frozenvit.forecasting.auto import combine_validated

    if not median_of_kept:
        return combine_validated(p, w)
    return np.stack([np.median(p[w[:, s] > 0, s], axis=0) for s in range(p.shape[1])])


def rivals(d: dict) -> dict[str, float]:
    """MASE of every rival on a set (`load_set`)."""
    out = {}

    def score(name, how, median=True, near=False, median_of_kept=False, weights_of=None, raw=False, median_from=0):
        v = d["v"].copy()
        if near:
            v[LOCAL:, :, 0] = np.where(np.isfinite(d["near"]), d["near"], v[LOCAL:, :, 0])
        p, vv, e = prepare(d, d["p"], v, median=median, median_from=median_from)
        forecasts = np.isfinite(p).all(axis=(2, 3))
        V = vv.shape[2]

        def rule(cols, pattern):
            rel = relative(e[:, cols], pattern)
            if weights_of is not None:
                return weights_of(rel, pattern, vv[:, cols], d["vtruth"][cols, :V], d["vscale"][cols, 0])
            return how(e[:, cols] if raw else rel, pattern)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out[name] = mase(d, combine(p, group_weights(e, forecasts, rule), median_of_kept))

    def lowo(rel, pattern, vv, vt, sc):
        err = np.abs(vv - vt[None]).mean(axis=3) / sc[None, :, None]                    # (C, s, V)
        least = np.nanmin(np.where(pattern[:, None, None] & np.isfinite(err), err, np.inf), axis=0)

        def combo_error(keep, v, use):
            f = vv[keep][:, use, v].mean(axis=0)
            return np.abs(f - vt[use, v]).mean(axis=1) / sc[use] / least[use, v]
        return leave_one_window(rel, pattern, combo_error)

    for k, t in ((2, 0.2), (1, 0.2), (3, 0.2), (2, 0.1), (2, 0.3), (3, 0.1), (4, 0.2)):
        name = SHIPPED if (k, t) == (2, 0.2) else "top 1 (a plain choice)" if k == 1 else f"top {k} within {t * 100:g} %"
        score(name, lambda rel, pat, k=k, t=t: top(mean_score(rel, pat), k, t))
    for k, t in ((2, 0.2), (3, 0.2), (2, 0.3)):
        score(f"no median, top {k} within {t * 100:g} %", lambda rel, pat, k=k, t=t: top(mean_score(rel, pat), k, t),
              median=False)
    for k, t in ((2, 0.2), (3, 0.2)):
        score(f"median without seasonal naive, top {k} within {t * 100:g} %",
              lambda rel, pat, k=k, t=t: top(mean_score(rel, pat), k, t), median_from=1)
    for T in (0.05, 0.1, 0.2):
        score(f"softmax T={T:g}", lambda rel, pat, T=T: (lambda s: np.exp(-np.log(s / s.min()) / T)
                                                        / np.exp(-np.log(s / s.min()) / T).sum())(mean_score(rel, pat)))
    score("inverse mean relative error", lambda rel, pat: (lambda s: (1 / s) / (1 / s).sum())(mean_score(rel, pat)))
    score("geometric, top 2 within 20 %", lambda rel, pat: top(mean_score(rel, pat, geometric=True), 2, 0.2))
    score("geometric, top 3 within 20 %", lambda rel, pat: top(mean_score(rel, pat, geometric=True), 3, 0.2))
    score("pooled, top 2 within 20 %", lambda err, pat: top(pooled_score(err, pat), 2, 0.2), raw=True)
    score("pooled, top 3 within 20 %", lambda err, pat: top(pooled_score(err, pat), 3, 0.2), raw=True)
    score("mean rank, top 2", lambda rel, pat: top(rank_score(rel, pat), 2, np.inf))
    score("mean rank, top 3", lambda rel, pat: top(rank_score(rel, pat), 3, np.inf))
    for r in (0.8, 0.6):
        score(f"recency {r:g}, top 2 within 20 %", lambda rel, pat, r=r: top(mean_score(rel, pat, decay=r), 2, 0.2))
    score("near networks, top 2 within 20 %", lambda rel, pat: top(mean_score(rel, pat), 2, 0.2), near=True)
    score("near networks, top 3 within 20 %", lambda rel, pat: top(mean_score(rel, pat), 3, 0.2), near=True)
    score("median of top 3 within 20 %", lambda rel, pat: top(mean_score(rel, pat), 3, 0.2), median_of_kept=True)
    for z in (1.0, 1.645, 2.0):
        score(f"confidence z={z:g}, series", lambda rel, pat, z=z: confidence(rel, pat, z, "series"))
        score(f"confidence z={z:g}, windows", lambda rel, pat, z=z: confidence(rel, pat, z, "windows"))
    score("leave-one-window-out k of 1-4", None, weights_of=lowo)
    score("stacking (least validation MAE)", None, weights_of=lambda rel, pat, vv, vt, sc: stacking(vv, vt, sc, pat))
    return out


def candidates(d: dict) -> dict[str, float]:
    """Each candidate alone; a series too short for the networks: the default rule over the statistical ones."""
    p = d["p"]
    short = np.flatnonzero(np.isnan(p[LOCAL]).all(axis=(1, 2)))
    fallback = np.full(d["truth"].shape, np.nan)
    if short.size:
        pp, _, e = prepare(d, p[:LOCAL], d["v"][:LOCAL], median=False, rows=short)
        forecasts = np.isfinite(pp).all(axis=(2, 3))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            w = group_weights(e, forecasts, lambda cols, pat: top(mean_score(relative(e[:, cols], pat), pat), 2, 0.2))
        fallback[short] = combine(pp, w)
    return {n: mase(d, np.where(np.isnan(p[i]), fallback, p[i])) for i, n in enumerate(NAMES)}


def score_set(name: str, cache: Path, rolling_cache: Path) -> dict:
    d = load_set(name, cache, rolling_cache)
    cands = candidates(d)
    best = min(cands, key=cands.get)
    ets_theta = min(cands["ETS"], cands["Theta"])
    rules = {k: {"mase": x, "over_best": x / cands[best], "over_ets_theta": x / ets_theta}
             for k, x in rivals(d).items()}
    return {"set": name, "series": int(d["p"].shape[1]), "series_in_file": d["series_in_file"],
            "longest": int(d["lengths"].max()), "validation_windows": int(d["v"].shape[2]),
            "caches": [str(cache), str(rolling_cache)], "candidates": cands, "best_candidate": best, "rules": rules}


def meeting(rows: list[dict]) -> list[str]:
    """The rules at most 1.02 of the best candidate and at most the better of ETS and Theta on every row."""
    return [k for k in rows[0]["rules"] if all(r["rules"][k]["over_best"] <= 1.02 and r["rules"][k]["over_ets_theta"] <= 1
                                               for r in rows)]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", metavar="SETS=CACHE[:ROLLING_CACHE]",
                    help="comma-separated sets, the statistical candidates' cache (forecast_auto_rules.py --compute) "
                    "and the networks' (a --rule --neural-validation rolling cache; else the same folder), e.g. "
                    "m3_yearly,m3_monthly=/tmp/study:/tmp/rolling etth2=/tmp/whole; none: nothing is scored")
    ap.add_argument("--threads", type=int, default=1,
                    help="taken as by every benchmark (run_all.py); the scoring is numpy on cached forecasts")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.runs:
        print("no cache given (SETS=CACHE[:ROLLING_CACHE]): nothing to score; see --help")
        return 0
    rows = []
    for run in args.runs:
        sets, caches = run.split("=", 1)
        cache, _, rolling = caches.partition(":")
        rows += [score_set(n, Path(cache), Path(rolling or cache)) for n in sets.split(",")]
    print_table([{"rule": k, **{f"{r['set']} {r['longest']}": f"{r['rules'][k]['over_best']:.3f} / "
                                f"{r['rules'][k]['over_ets_theta']:.3f}" for r in rows}} for k in rows[0]["rules"]])
    meets = meeting(rows)
    print("meeting both bars on every set:", meets or "none")
    write_result("forecast_auto_rivals", {"rows": rows, "meeting_both": meets, "command": " ".join(args.runs)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
