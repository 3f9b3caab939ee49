"""auto's rules scored on the forecasts of the CLI's own run, as the defaults stand.

For each set, `frozenvit forecast backtest` runs in this process with only --h and --season-length (as
benchmarks/forecast_defaults.py runs it: every default, --stat-history auto and the short-series policy
included) while every AutoForecaster call records what its rule is given: each candidate's test forecasts
and validation errors (`AutoForecaster.candidate_forecasts`). Each rule of forecast_auto_rules.RULES then
weights the recorded candidates of the call that forecasts auto's column, and its MASE on the test windows
is set against the best candidate's and the better of ETS and Theta's, both as the command reported them.
RIVALS are scored beside them but take no part in the choice: "networks only in the medians" ranks DLinear and
PatchTST last, so that they enter auto's forecast through the medians alone (a network's validation error comes
from a second training, another draw than the network that forecasts the test; the medians damp that draw).
The default rule re-scored must give the command's own auto MASE (`shipped_matches`), which checks the
recording. The `choice` is made as forecast_auto_rules.py makes it: over the sets the default was chosen
on (CHOOSE_ON), the rule of the least mean ratio to the best candidate among those at most the better of
ETS and Theta on each of them.

`noise` asks how much of the 2 % bar the set's own series and windows leave to chance, from the command's
per-series MASE: over random halves of the series, the candidate best on one half (chosen with the test
windows' own errors) scored on the other over that half's best, and auto on a half over that half's best;
auto over the best candidate on bootstrap resamples of the series; and where the command rolled two or more
test windows, the candidate best on one of them, or on half of them, scored on the others.

Needs what forecast_defaults.py needs. Writes benchmarks/results/forecast_auto_rules_cli.json (or --out;
one file per set beside it while running); `--merge` joins earlier files. `--keep DIR` also writes each
set's recording (.npz, nothing pickled), and `--from-kept` scores recordings without running the command.
`--seed S` runs the command with the networks trained from seed S (every row records its seed); merged,
rows of other seeds stay beside each other (benchmarks/results/forecast_auto_rules_cli_seeds.json: the
runs where the default takes a network on its own, seed by seed), and the choice is made on the seed-0 rows.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import latest_rows, merged_from, print_table, write_result  # noqa: E402
from forecast_auto_rules import CHOOSE_ON, RULES  # noqa: E402
from forecast_defaults import COLUMNS, HELD_OUT, SETS, load, row_of  # noqa: E402

import numpy as np  # noqa: E402

from frozenvit.forecasting.defaults import AUTO_CANDIDATES  # noqa: E402

DEFAULT = "global, top 2 within 20 %"
NETWORKS = ("DLinear", "PatchTST")
RIVALS = {"top 2 within 20 %, networks only in the medians": dict(how="global", top=2, tolerance=0.2,
                                                                   only_in_medians=NETWORKS)}


def recorded_run(name: str, etth2_rows: int | None, threads: int, extra: list[str]) -> tuple[dict, dict, list, int]:
    """Run the command on set `name`; return its summary, the recording of the AutoForecaster call that
    forecast auto's column (the one of the most candidates: the short-series fallback's calls have only the
    statistical ones) with the command's per-series MASE of every model (`per_series`), the command's
    arguments and the number of series in the file."""
    import importlib

    from frozenvit.backbone.suite.cli import main
    from frozenvit.forecasting import auto

    backtest_module = importlib.import_module("frozenvit.forecasting.backtest")  # the package exports the function

    h, season = SETS[name]
    calls, results = [], []
    original = auto.AutoForecaster.candidate_forecasts
    original_backtest = backtest_module.backtest

    def capturing(*args, **kw):
        results.append(original_backtest(*args, **kw))
        return results[-1]

    validated = []
    original_validate = auto.AutoForecaster._validate

    def validating(*args, **kw):
        validated.append(original_validate(*args, **kw))
        return validated[-1]

    def recording(self, series, cutoffs, h, **kw):
        start = len(validated)
        preds, errors = original(self, series, cutoffs, h, **kw)
        calls.append(dict(model=self, series=[np.asarray(y, float) for y in series], cutoffs=np.asarray(cutoffs),
                          preds=preds, errors=errors, validation=np.stack(validated[start:])))
        return preds, errors

    auto.AutoForecaster.candidate_forecasts = recording
    auto.AutoForecaster._validate = staticmethod(validating)
    backtest_module.backtest = capturing
    try:
        with tempfile.TemporaryDirectory() as tmp:
            csv, out = Path(tmp) / f"{name}.csv", Path(tmp) / "out"
            df = load(name, etth2_rows)
            df.to_csv(csv, index=False)
            argv = ["forecast", "backtest", "--csv", str(csv), "--h", str(h), "--season-length", str(season),
                    "--threads", str(threads), *extra, "--out", str(out)]
            code = main(argv)
            if code != 0:
                raise SystemExit(f"the backtest of {name} exited {code}")
            summary = json.loads((out / "summary.json").read_text())
    finally:
        auto.AutoForecaster.candidate_forecasts = original
        auto.AutoForecaster._validate = staticmethod(original_validate)
        backtest_module.backtest = original_backtest
    call = max(calls, key=lambda c: len(c["model"].candidates))
    call["per_series"] = results[-1].per_series("mase")
    return summary, call, argv, int(df["unique_id"].nunique())


def forecast_mase(call: dict, f: np.ndarray, season: int) -> float:
    """MASE of forecasts `f` (S, W, h) of the recording's series and windows: per series over its windows,
    then over the series, as the command scores."""
    from frozenvit.forecasting.metrics import mase

    return float(np.mean([np.mean([mase(y[c: c + f.shape[2]], fw, y[:c], season) for c, fw in zip(cs, fs)])
                          for y, cs, fs in zip(call["series"], call["cutoffs"], f)]))


def rule_weights(call: dict, only_in_medians: tuple = (), **rule) -> np.ndarray:
    """auto's weights (C, S) under `rule` on the recording; the candidates named in `only_in_medians` rank last
    wherever validated (the groups stay as they are), so they weigh in only through the medians."""
    from sklearn.base import clone

    preds, errors = call["preds"], call["errors"].copy()
    for i, m in enumerate(call["model"].candidates):
        if getattr(m, "alias", None) in only_in_medians:
            errors[i] = np.where(np.isfinite(errors[i]), np.finfo(float).max, np.nan)
    return clone(call["model"]).set_params(**rule).weights(errors, np.isfinite(preds).all(axis=(2, 3)))


def rule_mase(call: dict, season: int, **rule) -> float:
    """MASE of auto's forecasts under `rule` (`rule_weights`' arguments)."""
    from frozenvit.forecasting.auto import combine_validated

    return forecast_mase(call, combine_validated(call["preds"], rule_weights(call, **rule)), season)


def keep(path: Path, call: dict, season: int, wall: float) -> None:
    """Write the recording to `path` (.npz, atomically, nothing pickled): what `rule_mase` and `noise` need, and
    the candidates' validation forecasts (C, S, V, h), for rules that combine them otherwise."""
    import os

    if path.exists() and not is_recording(path):
        raise SystemExit(f"{path} exists and is not a recording this benchmark wrote; move it, or pass another "
                         "--keep folder")
    params = {k: v for k, v in call["model"].get_params(deep=False).items() if k != "candidates"}
    ps = call["per_series"]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, preds=call["preds"], errors=call["errors"], validation=call["validation"],
                            cutoffs=call["cutoffs"], h=call["preds"].shape[3],
                            values=np.concatenate(call["series"]), lengths=[len(y) for y in call["series"]],
                            candidates=len(call["model"].candidates), params=json.dumps(params), season=season,
                            aliases=np.array([m.alias for m in call["model"].candidates], dtype=str),
                            models=np.array(ps.columns, dtype=str), ids=np.array(ps.index, dtype=str),
                            per_series=ps.to_numpy(float), wall_seconds=wall)
    os.replace(tmp, path)


def is_recording(path: Path) -> bool:
    """Whether `path` is an .npz that `keep` wrote (the arrays `kept` reads)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return {"preds", "errors", "validation", "per_series", "params"} <= set(z.files)
    except (OSError, ValueError, EOFError):
        return False


class _Named:
    """A recorded candidate: its alias only (what auto's `weights` and `medians` read)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias


def kept(path: Path) -> tuple[dict, int, float | None]:
    """A recording written by `keep`, as `recorded_run` returns it (the model: an AutoForecaster of the same
    rule and number of candidates, enough for its `weights`), its MASE season and the run's wall seconds."""
    import pandas as pd

    from frozenvit.forecasting.auto import AutoForecaster

    if not is_recording(path):
        raise SystemExit(f"{path} is not a recording written by --keep; run the benchmark with --keep DIR first")
    with np.load(path, allow_pickle=False) as z:
        series = np.split(z["values"], np.cumsum(z["lengths"])[:-1])
        model = AutoForecaster([_Named(str(a)) for a in z["aliases"]] if "aliases" in z.files
                               else [None] * int(z["candidates"]), **json.loads(str(z["params"])))
        per_series = pd.DataFrame(z["per_series"], index=z["ids"], columns=z["models"])
        return dict(model=model, series=series, cutoffs=z["cutoffs"], preds=z["preds"], errors=z["errors"],
                    validation=z["validation"], per_series=per_series), int(z["season"]), \
            (float(z["wall_seconds"]) if "wall_seconds" in z.files else None)


def _stats(v) -> dict:
    v = np.asarray(v, dtype=float)
    return {"median": float(np.median(v)), "p05": float(np.quantile(v, 0.05)), "p95": float(np.quantile(v, 0.95)),
            "within_2pct": float(np.mean(v <= 1.02))}


def window_mase(call: dict, season: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-window MASE (K, S', W) of the columns of COLUMNS but auto, from the recording, on the S' series that
    every candidate forecast (a median column: the median of its members' forecasts), and which series."""
    from frozenvit.forecasting.metrics import mase

    preds = call["preds"][: len(AUTO_CANDIDATES)]
    rows = {k: preds[AUTO_CANDIDATES.index(k)] for k in AUTO_CANDIDATES}
    key = {alias: k for k, alias in COLUMNS.items()}
    for k, alias in COLUMNS.items():                        # "median(Theta,ETS,...)": of its members' forecasts
        if alias.startswith("median("):
            rows[k] = np.median(np.stack([rows[key[a]] for a in alias[len("median("):-1].split(",")]), axis=0)
    cols = [k for k in COLUMNS if k != "auto"]
    ok = np.flatnonzero(np.isfinite(preds).all(axis=(0, 2, 3)))
    out = np.array([[[mase(y[c: c + preds.shape[3]], rows[k][s, w], y[:c], season)
                      for w, c in enumerate(call["cutoffs"][s])] for s, y in ((s, call["series"][s]) for s in ok)]
                    for k in cols]).reshape(len(cols), len(ok), preds.shape[2])
    return out, ok


def noise(per_series, draws: int = 400, seed: int = 0, windows: np.ndarray | None = None) -> dict:
    """How much of a 2 % bar the set's own series and windows leave to chance. From the command's per-series
    MASE, over `draws` random halves A | B of the series: (a) the candidate of the least MASE on A (a choice
    made with the test windows' own errors, on the other half of the same set) scored on B, over B's best
    candidate, and (b) auto on B over B's best; and auto over the best candidate on resamples of the series
    (bootstrap). With `windows` (K, S, W; `window_mase`) of two or more test windows, the same choice made
    on half of the windows (every split, at most `draws`) or on one window, scored on the others."""
    cands = [COLUMNS[k] for k in COLUMNS if k != "auto"]
    x, a = per_series[cands].to_numpy(float), per_series[COLUMNS["auto"]].to_numpy(float)
    rng = np.random.default_rng(seed)
    S = len(a)
    oracle, auto_half, boot = [], [], []
    for _ in range(draws):
        perm = rng.permutation(S)
        A, B = perm[: S // 2], perm[S // 2:]
        mb = x[B].mean(axis=0)
        oracle.append(mb[np.argmin(x[A].mean(axis=0))] / mb.min())
        auto_half.append(a[B].mean() / mb.min())
        r = rng.integers(0, S, S)
        boot.append(a[r].mean() / x[r].mean(axis=0).min())
    out = {"draws": draws, "half_split_oracle": _stats(oracle), "half_split_auto": _stats(auto_half),
           "bootstrap_auto": _stats(boot)}
    if windows is not None and windows.shape[2] >= 2 and windows.shape[1]:
        from itertools import combinations, islice

        m = windows.mean(axis=1)                                                        # (K, W)
        W = m.shape[1]

        def chosen_on(A):
            B = [w for w in range(W) if w not in A]
            mb = m[:, B].mean(axis=1)
            return mb[np.argmin(m[:, list(A)].mean(axis=1))] / mb.min()
        out["window_split_oracle"] = {"windows": W, "series": int(windows.shape[1]),
                                      "half": _stats([chosen_on(A) for A in islice(combinations(range(W), W // 2), draws)]),
                                      "one": _stats([chosen_on((w,)) for w in range(W)])}
    return out


def score(name: str, etth2_rows: int | None, call: dict, season: int, extra: list[str], wall: float) -> dict:
    """The row of set `name` from its recording."""
    reported = {k: float(call["per_series"][v].mean()) for k, v in COLUMNS.items()}
    best = min(v for k, v in reported.items() if k != "auto")
    better = min(reported["ets"], reported["theta"])
    rules = {}
    for rule, params in {**RULES, **RIVALS}.items():
        m = rule_mase(call, season, **params)
        rules[rule] = {"mase": m, "over_best": m / best, "over_ets_theta": m / better}
    return {"set": name, "etth2_rows": etth2_rows if name == "etth2" else None, "held_out": name in HELD_OUT,
            "h": SETS[name][0], "season": season,
            "series": len(call["series"]), "command_extra": list(extra), "reported": reported,
            "best_candidate": min((k for k in reported if k != "auto"), key=reported.get), "rules": rules,
            "shipped_matches": bool(np.isclose(rules[DEFAULT]["mase"], reported["auto"], rtol=1e-9)),
            "noise": noise(call["per_series"], windows=window_mase(call, season)[0]), "wall_seconds": wall}


def run_set(name: str, etth2_rows: int | None, threads: int, extra: list[str] = (), keep_dir: Path | None = None
            ) -> tuple[dict, dict]:
    """The set's row, and its row of forecast_defaults.py's table from the same run."""
    t0 = time.perf_counter()
    summary, call, argv, total = recorded_run(name, etth2_rows, threads, list(extra))
    season = int(summary.get("mase_season") or SETS[name][1])
    for r in summary["summary"]:          # the per-series MASE captured is the one the command reported
        if r["model"] in call["per_series"]:
            assert np.isclose(call["per_series"][r["model"]].mean(), r["MASE"], rtol=1e-9), r["model"]
    wall = time.perf_counter() - t0
    if keep_dir is not None:
        keep_dir.mkdir(parents=True, exist_ok=True)
        keep(keep_dir / f"{name}{'' if etth2_rows is None else f'_{etth2_rows}rows'}.npz", call, season, wall)
    return (score(name, etth2_rows, call, season, list(extra), wall),
            row_of(name, *SETS[name], summary, argv, total, total, None, 0, etth2_rows, wall))


def seed_of(row: dict) -> int:
    """The networks' seed of a row's run: its `seed`, else the command's --seed, else the command's default 0."""
    if "seed" in row:
        return int(row["seed"])
    extra = row.get("command_extra", [])
    return int(extra[extra.index("--seed") + 1]) if "--seed" in extra else 0


def merged(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """The results at `paths` and their rows, one per set, ETTh2 cut and seed (a later file's replacing an
    earlier one's), in SETS' order, then by seed; each marked `held_out` and with its `seed`."""
    parts = [json.loads(p.read_text()) for p in paths]
    rows = latest_rows(parts, key=lambda r: (r["set"], r.get("etth2_rows"), seed_of(r)))
    for r in rows:
        r["held_out"], r["seed"] = r["set"] in HELD_OUT, seed_of(r)
    return parts, sorted(rows, key=lambda r: (list(SETS).index(r["set"]), r.get("etth2_rows") or 0, r["seed"]))


def choose(rows: list[dict]) -> dict:
    """forecast_auto_rules.py's choice on these rows: over CHOOSE_ON (the seed-0 rows), the least mean ratio to
    the best candidate among the rules at most the better of ETS and Theta on each."""
    on = [r for r in rows if r["set"] in CHOOSE_ON and seed_of(r) == 0]
    if not on:
        return {"sets": [], "chosen": None}
    mean = {k: float(np.mean([r["rules"][k]["over_best"] for r in on])) for k in RULES}
    keep = [k for k in RULES if all(r["rules"][k]["over_ets_theta"] <= 1 for r in on)]
    return {"sets": [r["set"] for r in on], "mean_over_best": mean, "at_most_ets_theta": keep,
            "chosen": min(keep, key=mean.get) if keep else None}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, out of {','.join(SETS)}")
    ap.add_argument("--etth2-rows", type=int, default=None, help="ETTh2: keep the last this many rows")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-epochs", type=int, default=None, help="the networks' epochs (default: the command's)")
    ap.add_argument("--seed", type=int, default=0,
                    help="the networks' training seed (the command's --seed); with --from-kept, the seed the "
                         "recordings were made with")
    ap.add_argument("--keep", type=Path, default=None,
                    help="also write each set's recording (an .npz of its candidates' forecasts, validation errors "
                         "and per-series MASE) to this folder")
    ap.add_argument("--from-kept", type=Path, nargs="+", default=None,
                    help="run nothing: score the rules on recordings written by --keep (<set>.npz; ETTh2 cut: etth2_<n>rows.npz)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--defaults-out", type=Path, default=None,
                    help="also write the runs' rows of forecast_defaults.py's table here (the same command, so one "
                         "run serves both; join them with forecast_defaults.py --merge)")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="run nothing: join the rows of these earlier JSON files (a set in a later file replaces "
                         "its row of an earlier one)")
    return ap


def table(rows: list[dict]) -> list[dict]:
    """The printed table: per set, each rule's MASE over the best candidate's / over the better of ETS and Theta."""
    return [{"set": r["set"] + (f" ({r['etth2_rows']} rows)" if r.get("etth2_rows") else ""),
             "best": f"{r['best_candidate']} {r['reported'][r['best_candidate']]:.3f}",
             **{k.replace("global, ", ""): f"{v['over_best']:.3f}/{v['over_ets_theta']:.3f}"
                for k, v in r["rules"].items()}, "matches": r["shipped_matches"]} for r in rows]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.merge:
        parts, rows = merged(args.merge)
    elif args.from_kept:
        rows = []
        for path in args.from_kept:
            name, _, n = path.stem.rpartition("_") if path.stem.endswith("rows") else (path.stem, "", "")
            call, season, wall = kept(path)
            extra = ["--seed", str(args.seed)] if args.seed else []
            rows.append({**score(name, int(n[:-4]) if n else None, call, season, extra, wall), "seed": args.seed})
    else:
        import torch

        torch.set_num_threads(args.threads)
        rows, defaults = [], []
        for name in args.sets.split(","):
            extra = ([] if args.max_epochs is None else ["--max-epochs", str(args.max_epochs)]) + \
                (["--seed", str(args.seed)] if args.seed else [])
            row, default_row = run_set(name, args.etth2_rows, args.threads, extra, args.keep)
            rows.append({**row, "seed": args.seed})
            defaults.append(default_row)
            write_result(f"forecast_auto_rules_cli_{name}", {"threads": args.threads, "rows": [rows[-1]]},
                         None if args.out is None else args.out.with_name(f"{args.out.stem}_{name}.json"))
            if args.defaults_out:
                write_result("forecast_defaults", {"threads": args.threads, "rows": defaults}, args.defaults_out)
    print_table(table(rows))
    extra = {"merged_from": merged_from(args.merge, parts)} if args.merge else \
        {"from_kept": [p.name for p in args.from_kept]} if args.from_kept else {}
    write_result("forecast_auto_rules_cli", {"threads": parts[0]["threads"] if args.merge else args.threads,
                                             **extra, "rows": rows, "choice": choose(rows)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
