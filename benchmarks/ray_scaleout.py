"""The same jobs on Ray (engine="ray") against one local process, on this machine, in one run.

Parts (--parts):
  start     the fixed cost of Ray: starting a local instance, and the first call on fresh actors
  control   held-out evaluation of --configs configurations: local (1 process, 1 thread; and at
            --threads) vs --workers single-thread Ray actors, each holding its environments and the
            encoder: fresh actors, and the actors a previous evaluation of the session left alive.
            --control-repeat rounds, run in turn, medians. Checks every configuration's (success, steps).
  forecast  AutoETS backtest on M4 Hourly (../shared/data): local vs --workers Ray tasks; checks
            that the forecasts are equal to the last digit.
  anomaly   scoring a folder of images with a fitted PatchCore: one single-thread process vs
            --workers single-thread Ray actors (Ray Data map_batches); checks scores agree.

Every Ray row gives two times: `wall_s` on a Ray instance that is already up (started once, before
the parts; the actors of a job are still created inside its time) and `wall_incl_start_s`, which
adds that start. Part `start` measures the start on its own.

Targets (issue 19, 2 workers on this 2-core machine, nothing else running): forecast >= 1.8x,
anomaly >= 1.7x, control >= 1.7x. Mesa's llvmpipe renders with one thread per core in every process
unless LP_NUM_THREADS says otherwise: run with LP_NUM_THREADS=1 for a single-core local process (the
Ray actors render with one thread each either way).

    .venv/bin/python benchmarks/ray_scaleout.py --parts start,control --workers 2
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import common  # noqa: F401  (puts the repo root on sys.path)
from common import SHARED_DATA, print_table, write_result

WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "frozenvit-bench-ray"


RAY_START_S = 0.0      # the time main() took to start the shared Ray instance


def _ray_row(row: dict[str, Any], base_s: float) -> dict[str, Any]:
    """A Ray row's speedup over `base_s`, on the running instance and counting its start."""
    row["wall_incl_start_s"] = round(row["wall_s"] + RAY_START_S, 1)
    row["speedup"] = round(base_s / row["wall_s"], 2)
    row["speedup_incl_start"] = round(base_s / row["wall_incl_start_s"], 2)
    return row


def part_start(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
    t_init = time.perf_counter() - t0

    @ray.remote(num_cpus=1)
    class Probe:
        def ping(self) -> int:
            import torch  # noqa: F401  (what our actors import first)

            return os.getpid()

    t0 = time.perf_counter()
    actors = [Probe.remote() for _ in range(args.workers)]
    ray.get([a.ping.remote() for a in actors])
    t_actors = time.perf_counter() - t0
    for a in actors:                                                    # they hold the CPUs
        ray.kill(a)

    @ray.remote(num_cpus=1)
    def noop(x: int) -> int:
        return x

    ray.get([noop.remote(i) for i in range(100)])                      # workers up
    t0 = time.perf_counter()
    ray.get([noop.remote(i) for i in range(2000)])
    per_task_ms = (time.perf_counter() - t0) / 2000 * 1e3
    ray.shutdown()
    row = {"part": "start", "ray_init_s": round(t_init, 2), "first_call_on_fresh_actors_s": round(t_actors, 2),
           "empty_task_round_trip_ms": round(per_task_ms, 3)}   # the driver's cost per task: its throughput bound
    print_table([row])
    return row


def _control_policy(args: argparse.Namespace) -> tuple[Any, Any]:
    """A trained attention policy for --task on the embedded default (made once under WORK, then reused)."""
    from frozenvit.backbone import load_backbone
    from frozenvit.control import PatchTokenPolicy, cache_features, collect_demos

    bb = load_backbone()
    pol_dir = WORK / f"policy_{args.task}"
    if (pol_dir / "config.json").exists():
        return PatchTokenPolicy.load(pol_dir), bb
    demos = WORK / f"demos_{args.task}"
    collect_demos(args.task, demos, 25)
    pol = PatchTokenPolicy("attention").fit(cache_features(demos, bb))
    pol.save(pol_dir)
    return pol, bb


def part_control(args: argparse.Namespace) -> dict[str, Any]:
    import statistics

    import ray
    import torch

    from frozenvit.control import config_seeds, evaluate, release_workers

    pol, bb = _control_policy(args)
    configs = config_seeds("heldout", args.configs)
    fresh, warm = f"ray, {args.workers} x 1 thread, fresh actors", f"ray, {args.workers} x 1 thread, actors kept from the previous call"
    runs_def = [("local, 1 thread", "local", 1), (f"local, {args.threads} threads", "local", args.threads),
                (fresh, "ray", 1), (warm, "ray", 1)]
    walls: dict[str, list[float]] = {}
    runs = {}
    for rep in range(args.control_repeat):                         # interleaved, so that drift hits every row
        for label, engine, threads in runs_def:
            if label == fresh:
                release_workers(ray)                                # new actors: process start and imports inside
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            res = evaluate(pol, bb, configs, max_steps=args.max_steps, parallel=args.parallel, progress=False,
                           engine=engine, workers=args.workers if engine == "ray" else None)
            walls.setdefault(label, []).append(round(time.perf_counter() - t0, 1))
            runs[label] = res
            print(f"  rep {rep}: {label}: {walls[label][-1]} s", flush=True)
    rows = [{"run": label, "wall_s": statistics.median(walls[label]), "walls_s": walls[label],
             "success": runs[label].success_rate} for label, _, _ in runs_def]
    base = rows[0]["wall_s"]
    for r in rows:
        r["speedup_vs_local_1_thread"] = round(base / r["wall_s"], 2)
    for r in rows[2:]:
        _ray_row(r, base)
    first = runs[rows[0]["run"]]
    same = {r["run"]: (runs[r["run"]].successes, runs[r["run"]].steps) == (first.successes, first.steps) for r in rows}
    print_table([{k: v for k, v in r.items() if k != "walls_s"} for r in rows])
    print(f"every configuration's (success, steps) equal to the local 1-thread run: {same}")
    return {"part": "control", "task": args.task, "configs": args.configs, "parallel": args.parallel,
            "repeats": args.control_repeat,
            "LP_NUM_THREADS": os.environ.get("LP_NUM_THREADS", "unset (llvmpipe: one render thread per core)"),
            "max_steps": args.max_steps, "rows": rows, "identical_outcomes": same,
            "actor_start_s": round(rows[2]["wall_s"] - rows[3]["wall_s"], 1),
            "per_config": {r["run"]: list(zip(runs[r["run"]].successes, runs[r["run"]].steps)) for r in rows},
            "per_episode_s_local_1_thread": round(base / args.configs, 2),
            "note": "wall_s: median over the repeats, run in turn. Ray rows on a running Ray instance: 'fresh "
                    "actors' creates them inside its time (process start, imports, model load); 'actors kept' "
                    "reuses those of the previous call, as a second evaluation in one Ray session does. "
                    "wall_incl_start_s adds the instance's start; actor_start_s = fresh - kept"}


def part_forecast(args: argparse.Namespace) -> dict[str, Any]:
    import pandas as pd
    import torch

    from frozenvit.forecasting import ETS, backtest
    from frozenvit.forecasting.data import read_m4

    data = SHARED_DATA / "m4_hourly"
    if not (data / "Hourly-train.csv").is_file():
        print(f"forecast: skipped, {data} has no M4 Hourly")
        return {"part": "forecast", "skipped": f"no {data}"}
    torch.set_num_threads(1)
    df = read_m4(data / "Hourly-train.csv", data / "Hourly-test.csv")
    ids = df["unique_id"].unique()[:args.series] if args.series else df["unique_id"].unique()
    df = df[df["unique_id"].isin(ids)]
    rows, res = [], {}
    for label, engine in [("local, 1 process", "local"), (f"ray, {args.workers} workers", "ray")]:
        t0 = time.perf_counter()
        res[label] = backtest(df, [ETS(24)], h=48, season_length=24, progress=False, engine=engine,
                              workers=args.workers if engine == "ray" else None)
        rows.append({"run": label, "wall_s": round(time.perf_counter() - t0, 1),
                     "mase": float(res[label].mase().iloc[0])})
    _ray_row(rows[1], rows[0]["wall_s"])
    a, b = (r.forecasts for r in res.values())
    same = bool(pd.DataFrame.equals(a, b))
    print_table(rows)
    print(f"forecasts equal to the last digit: {same}")
    return {"part": "forecast", "model": "AutoETS(24)", "n_series": int(len(ids)), "h": 48, "windows": 1,
            "rows": rows, "identical_forecasts": same, **_forecast_task_bytes(df, args.workers),
            "per_fit_s_local": round(rows[0]["wall_s"] / len(ids), 3),
            "note": "Ray rows: wall_s on a running Ray instance; wall_incl_start_s adds its start"}


def _forecast_task_bytes(df: Any, workers: int) -> dict[str, Any]:
    """What one Ray task of the backtest ships: a chunk of series in, its forecasts out (pickled bytes)."""
    import pickle

    import numpy as np

    from frozenvit.forecasting.baselines import RAY_CHUNKS_PER_WORKER

    ys = [g["y"].to_numpy(float) for _, g in df.groupby("unique_id", sort=False)]
    size = -(-len(ys) // (workers * RAY_CHUNKS_PER_WORKER))
    return {"series_per_task": size, "task_bytes_in": len(pickle.dumps(ys[:size])),
            "task_bytes_out": len(pickle.dumps([np.zeros(48) for _ in range(size)]))}


def part_anomaly(args: argparse.Namespace) -> dict[str, Any]:
    import pickle

    import faiss
    import numpy as np
    import torch

    from frozenvit.anomaly import PatchCore
    from frozenvit.anomaly.stream import iter_scored

    root = SHARED_DATA / "defects" / "mpdd_metal_plate"
    if not root.is_dir():
        print(f"anomaly: skipped, no {root}")
        return {"part": "anomaly", "skipped": f"no {root}"}
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    model = WORK / "patchcore_mpdd"
    if not (model / "config.json").exists():
        PatchCore().fit(sorted((root / "train" / "good").glob("*"))).save(model)
    det = PatchCore.load(model)
    files = sorted(p for p in (root / "test").rglob("*") if p.is_file()) * args.anomaly_repeat
    rows, got = [], {}
    for label, engine in [("local, 1 thread", "local"), (f"ray, {args.workers} x 1 thread", "ray")]:
        t0 = time.perf_counter()
        scored = list(iter_scored(det, files, engine=engine, model_dir=model,
                                  workers=args.workers if engine == "ray" else None))
        got[label] = [s.score for s in scored]
        png_sizes = [len(s.overlay_png) for s in scored]
        rows.append({"run": label, "wall_s": round(time.perf_counter() - t0, 1),
                     "images_per_s": round(len(files) / (time.perf_counter() - t0), 2)})
    _ray_row(rows[1], rows[0]["wall_s"])
    a, b = (np.array(v) for v in got.values())
    diff = float(np.max(np.abs(a - b)))
    print_table(rows)
    print(f"largest score difference Ray vs local: {diff:.2e}")
    return {"part": "anomaly", "data": f"mpdd_metal_plate test x {args.anomaly_repeat}", "n_images": len(files),
            "overlays": True,
            "rows": rows, "max_abs_score_diff": diff, "per_image_s_local": round(rows[0]["wall_s"] / len(files), 4),
            "bank_bytes": sum(f.stat().st_size for f in model.iterdir()),
            "backbone_pickled_bytes": len(pickle.dumps(det.backbone_)),
            "overlay_png_bytes_mean": round(float(np.mean(png_sizes)), 0),
            "note": "Ray rows: wall_s on a running Ray instance, each actor loading the model inside it; "
                    "wall_incl_start_s adds the start"}


PARTS = {"start": part_start, "control": part_control, "forecast": part_forecast, "anomaly": part_anomaly}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="start,control", help=f"comma-separated, of {sorted(PARTS)}")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="threads of the multi-threaded local run")
    ap.add_argument("--task", default="button-press-v3")
    ap.add_argument("--configs", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=500)
    ap.add_argument("--control-repeat", type=int, default=3, help="control: rounds of the four runs, in turn (medians)")
    ap.add_argument("--anomaly-repeat", type=int, default=5,
                    help="anomaly: score the MPDD test folder this many times over (a larger folder)")
    ap.add_argument("--series", type=int, default=0, help="forecast: the first N M4 Hourly series (0: all 414)")
    ap.add_argument("--out", default=None)
    return ap


def main() -> None:
    args = parser().parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    WORK.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    results = {}
    if "start" in parts:
        results["start"] = part_start(args)
    if set(parts) - {"start"}:
        import ray

        global RAY_START_S
        t0 = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
        RAY_START_S = time.perf_counter() - t0
    for p in parts:
        if p != "start":
            results[p] = PARTS[p](args)
    write_result("ray_scaleout", {"args": vars(args), "shared_data": str(SHARED_DATA),
                                  "ray_start_s_shared_instance": round(RAY_START_S, 2), **results}, args.out)


if __name__ == "__main__":
    main()
