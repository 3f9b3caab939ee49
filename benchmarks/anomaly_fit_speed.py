"""PatchCore fit time per stage, and what coreset="auto" saves in time and costs in quality against the exact one.

    nice -n 10 python benchmarks/anomaly_fit_speed.py --threads 2                    # everything (~1 h on a busy machine)
    nice -n 10 python benchmarks/anomaly_fit_speed.py --threads 1 --skip-761 --detectors lite0 --sets kolektorsdd

Both parts fit each of --detectors (default both): "lite0", the single backbone (PatchCore(),
`--backbone efficientnet_lite0`), and "ensemble", `anomaly fit`'s default ensemble; each with the exact coreset
(the library's default, anomaly/defaults.py CORESET) and with coreset="auto".
Part 1, issue 58's fit-in-minutes case: a --n-train-image stand-in (761 by default) of --size px (250 by default;
`anomaly synth`, grain, no test set), fit times only. Targets: single < 180 s, ensemble < 300 s at 2 threads.
Part 2, on each development set (MVTec layout under ../shared/data/defects): each detector fitted with the exact greedy coreset (coreset="exact" in every member: ratio x all rows, the
textbook selection) and with coreset="auto", then evaluated (`evaluate_dataset`): image AUROC, pixel AUROC,
AUPRO@0.3 side by side, bank size, fit seconds.

Every fit is profiled (cProfile) and its wall time split into stages: the backbone's forward passes
(`patch_grids`: bank features and held-out calibration), the coreset selection (`greedy_kcenter`), the index
build and the kNN searches; "rest" is everything else (tiling, pooling, image decoding, scoring). The machine is
shared: the 1-minute load average is recorded before and after each fit, and only ratios within one run compare.
Writes benchmarks/results/anomaly_fit_speed_t<threads>.json (or --out).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
import warnings

from common import SHARED_DATA, data_arg, print_table, resolve_data, write_result

SETS = ("mpdd_metal_plate", "kolektorsdd")
# stage -> (module file suffix, function name) whose cumulative time the profile attributes to it
STAGES = {"backbone": ("backbone/model.py", "patch_grids"), "coreset": ("anomaly/coreset.py", "greedy_kcenter"),
          "index": ("anomaly/search.py", "build_index"), "knn": ("anomaly/search.py", "knn")}


def profiled_fit(det, images) -> dict:
    """Fit `det` on `images` under cProfile: wall seconds, per-stage seconds, the load average around it."""
    load = os.getloadavg()[0]
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                      # small holdouts warn about their bound: reported as is
        prof.runcall(det.fit, images)
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats                         # {(file, line, name): (cc, nc, tt, ct, callers)}
    stages = {k: sum(v[3] for (f, _, name), v in stats.items() if f.endswith(suffix) and name == fn)
              for k, (suffix, fn) in STAGES.items()}
    return {"fit_s": wall, **{f"{k}_s": s for k, s in stages.items()}, "rest_s": wall - sum(stages.values()),
            "load_before": load, "load_after": os.getloadavg()[0]}


def banks(det) -> str:
    members = getattr(det, "members_", None) or [det]
    return " + ".join(f"{m.bank_.shape[0]}x{m.bank_.shape[1]} of {m.n_train_patches_}" for m in members)


def detector(kind: str, coreset: str):
    """An unfitted `kind` ("lite0": PatchCore(), "ensemble": PatchCoreEnsemble()) with every member's coreset set to
    `coreset`, the rest as shipped."""
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble, default_members

    if kind == "lite0":
        return PatchCore(coreset=coreset, progress=False)
    return PatchCoreEnsemble([m.set_params(coreset=coreset) for m in default_members(progress=False)])


def dev_sets(args, rows: list[dict], save) -> None:
    from frozenvit.anomaly import evaluate_dataset, read_mvtec

    for kind in args.detectors:
        for name in args.sets:
            root = resolve_data(args.data_root, SHARED_DATA / "defects", name)
            if root is None:
                continue
            ds = read_mvtec(root / name)
            for coreset in ("exact", "auto"):
                det = detector(kind, coreset)
                r = {"set": name, "detector": kind, "coreset": coreset,
                     **profiled_fit(det, ds.train)}
                metrics, _ = evaluate_dataset(det, ds)
                r.update({"bank": banks(det), "image_auroc": metrics["image_auroc"],
                          "pixel_auroc": metrics.get("pixel_auroc", float("nan")),
                          "aupro": metrics.get("aupro", float("nan"))})
                rows.append(r)
                print_table(rows[-1:])
                save()


def stand_in(args, rows: list[dict], save) -> None:
    from frozenvit.anomaly import PatchCore, make_synthetic_mvtec, read_mvtec
    from frozenvit.backbone import load_backbone

    with tempfile.TemporaryDirectory() as tmp:
        root = make_synthetic_mvtec(tmp, "grain", n_train=args.n_train, n_test_good=0, n_test_defect=0,
                                    size=(args.size, args.size))
        train = read_mvtec(root).train
        fits = {}
        if "lite0" in args.detectors:
            lite0 = load_backbone("efficientnet_lite0")
            fits["efficientnet_lite0, exact coreset"] = lambda: PatchCore(lite0, coreset="exact", progress=False)
            fits["efficientnet_lite0, auto coreset"] = lambda: PatchCore(lite0, coreset="auto", progress=False)
        if "ensemble" in args.detectors:
            fits["default ensemble, exact coreset (the default)"] = lambda: detector("ensemble", "exact")
            fits["default ensemble, auto coreset"] = lambda: detector("ensemble", "auto")
        for what, build in fits.items():
            det = build()
            rows.append({"set": f"{len(train)} x {args.size}x{args.size} grain", "detector": what,
                         **profiled_fit(det, train), "bank": banks(det)})
            print_table(rows[-1:])
            save()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch and faiss threads")
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS, help="part 2's development sets")
    ap.add_argument("--detectors", nargs="+", default=["lite0", "ensemble"], choices=("lite0", "ensemble"),
                    help="what both parts fit, each with the exact and the auto coreset: lite0 (PatchCore(), "
                         "Lite0) and/or ensemble (anomaly fit's default ensemble); default: both")
    data_arg(ap, "--data-root", SHARED_DATA / "defects", "folder holding the sets")
    ap.add_argument("--skip-dev", action="store_true", help="only part 1, the stand-in")
    ap.add_argument("--skip-761", action="store_true", help="only part 2, the development sets")
    ap.add_argument("--n-train", type=int, default=761, help="normals of the stand-in")
    ap.add_argument("--size", type=int, default=250, help="side of the stand-in's images in pixels")
    ap.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/anomaly_fit_speed_t<threads>)")
    return ap


def main() -> int:
    args = parser().parse_args()

    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    dev: list[dict] = []
    big: list[dict] = []

    def save() -> None:                                      # after every fit: a long run keeps what it measured
        write_result(f"anomaly_fit_speed_t{args.threads}",
                     {"threads": args.threads, "dev_sets": dev, "stand_in": big,
                      "targets": {"single_fit_s": 180, "ensemble_fit_s": 300, "image_auroc_gap": 0.005}}, args.out)

    if not args.skip_761:
        stand_in(args, big, save)
    if not args.skip_dev:
        dev_sets(args, dev, save)
    for title, rows in (("development sets: exact vs auto coreset", dev),
                        (f"{args.n_train}-image stand-in, fit seconds by stage", big)):
        if rows:
            print(f"\n{title} (threads {args.threads})")
            print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
