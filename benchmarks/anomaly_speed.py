"""PatchCore speed: coreset time and peak memory (200,000 x 384 at 10%), fit time, predict throughput
relative to bare `patch_grids`, bank size.

    python benchmarks/anomaly_speed.py --threads 2                                  # the embedded ViT
    python benchmarks/anomaly_speed.py --threads 2 --backbone default --skip-coreset --tiled 1250x500
    python benchmarks/anomaly_speed.py --threads 2 --backbone ensemble --tiled 1250x500       # anomaly fit's default

Targets (issue 4): coreset < 60 s on 2 cores; predict img/s / patch_grids img/s >= 0.85.
The coreset input is seeded Gaussian noise: no cluster structure, the worst case for k-center.
Backbone: --backbone embedded (the default of this script: the embedded ViT when shipped, else a random-init
ViT-Tiny/16 at 224, speed only), default (anomaly/defaults.py's, with its tiling; writes
anomaly_speed_<name>_t<threads>.json) or a load_backbone name. --tiled HxW adds tiled predict on HxW images
against bare patch_grids on exactly their tiles (issue 17: tiling should cost no more than its backbone passes).
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from common import add_repeats_arg, median, positive_int, print_table, write_result


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: KiB


def bench_coreset(n: int, d: int, ratio: float, chunk: int) -> list[dict]:
    from frozenvit.anomaly.coreset import chunked_coreset, greedy_coreset

    x = np.random.default_rng(0).standard_normal((n, d), dtype=np.float32)   # (N, D), no float64 temporary
    rows = []
    before = rss_mb()
    t0 = time.perf_counter()
    idx = greedy_coreset(x, ratio)
    rows.append({"what": "coreset", "variant": "exact greedy", "n": n, "d": d, "selected": len(idx),
                 "seconds": time.perf_counter() - t0, "peak_extra_mb": rss_mb() - before,
                 "input_mb": x.nbytes / 1e6})
    t0 = time.perf_counter()
    bank = chunked_coreset((x[i:i + chunk] for i in range(0, n, chunk)), ratio)
    rows.append({"what": "coreset", "variant": f"chunked ({chunk} rows)", "n": n, "d": d, "selected": len(bank),
                 "seconds": time.perf_counter() - t0, "input_mb": x.nbytes / 1e6})
    return rows


def get_backbone(name: str):
    from frozenvit.anomaly.defaults import BACKBONE, load_default_backbone
    from frozenvit.backbone import load_backbone
    from frozenvit.backbone.errors import BackboneUnavailable

    if name == "default":
        return load_default_backbone(), f"anomaly default ({BACKBONE or 'embedded ViT'})"
    if name != "embedded":
        return load_backbone(name), name
    try:
        return load_backbone(), "embedded default"
    except BackboneUnavailable:
        return load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=224), "stand-in (random ViT-Ti/16)"


def timed_rounds(variants: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of every variant in each of `repeats` rounds after a warm-up round. Interleaved: on a shared machine
    the load drifts, so each round times every variant once."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats + 1):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            if r:                                                    # round 0 is the warm-up
                times[k].append(time.perf_counter() - t0)
    return times


def member_inputs(member, images: list) -> list:
    """What a fitted PatchCore's backbone reads for `images` (all of one size): its tiles, or the images whole."""
    tiling = member.tiling_of(images[0].shape[:2])
    return images if tiling is None else [c for img in images for c in tiling.crops(img)]


def bench_ensemble(args) -> None:
    """--backbone ensemble: `anomaly fit`'s default (defaults.ENSEMBLE, every setting the shipped one's) against bare
    `patch_grids` of every member on exactly the inputs it sees (whole images or its tiles), in interleaved rounds;
    and, in the same run and rounds, Lite0 alone (`PatchCore()`, `--backbone efficientnet_lite0`) fitted on the
    same images, so that what the ensemble costs over it is measured under the same load."""
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble, render_sample

    size = (args.size, args.size)
    train = [render_sample("weave", None, 1, i, size)[0] for i in range(args.n_train)]
    sets = {f"{args.size}px": [render_sample("weave", "hole" if i % 2 else None, 2, i, size)[0]
                               for i in range(args.batch_size)]}
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    ens = PatchCoreEnsemble(progress=False).fit(train)
    rows = [{"what": "fit", "variant": f"{args.n_train} images {args.size}px", "seconds": time.perf_counter() - t0,
             "bank": " + ".join(f"{m.bank_.shape[0]}x{m.bank_.shape[1]} {m.index_kind(len(m.bank_))}"
                                for m in ens.members_)}]
    t0 = time.perf_counter()
    alone = {f"{args.size}px": PatchCore(progress=False).fit(train)}
    secs = time.perf_counter() - t0
    rows.append({"what": "Lite0 alone: fit", "variant": f"{args.n_train} images {args.size}px", "seconds": secs,
                 "fit_share_of_ensemble": secs / rows[0]["seconds"]})
    fitted = {f"{args.size}px": ens}
    if args.tiled:
        th, tw = (int(v) for v in args.tiled.lower().split("x"))
        sets[args.tiled] = [render_sample("weave", "hole" if i % 2 else None, 2, i, (th, tw))[0] for i in range(4)]
        # n_train / (the first member's tiles per image) normals, as the single default's run: its bank about as large
        # as untiled (search cost grows with it)
        first = ens.members_[0]
        n_fit = max(2, args.n_train // len(first.tiling_of((th, tw)) or [None]))
        tiled_train = [render_sample("weave", None, 1, i, (th, tw))[0] for i in range(n_fit)]
        fitted[args.tiled] = PatchCoreEnsemble(progress=False).fit(tiled_train)
        alone[args.tiled] = PatchCore(progress=False).fit(tiled_train)
    variants = {}
    for name, imgs in sets.items():
        e = fitted[name]
        inputs = [(m.backbone_, m.blocks_, member_inputs(m, imgs)) for m in e.members_]
        variants[f"bare {name}"] = (lambda inputs=inputs: [bb.patch_grids(x, blocks=b, batch_size=args.batch_size,
                                                                          progress=False) for bb, b, x in inputs])
        variants[f"predict {name}"] = (lambda e=e, imgs=imgs: e.predict(imgs))
        variants[f"scores {name}"] = (lambda e=e, imgs=imgs: e.decision_function(imgs))
        variants[f"alone {name}"] = (lambda m=alone[name], imgs=imgs: m.predict(imgs))
        rows.append({"what": "inputs", "variant": name, "per_image": " + ".join(
            f"{len(x) // len(imgs)} {bb.name}" for bb, _, x in inputs)})
    times = timed_rounds(variants, args.repeats)
    for name, imgs in sets.items():
        bare = len(imgs) / median(times[f"bare {name}"])
        rows.append({"what": "bare patch_grids (members)", "variant": name, "img_s": bare})
        for kind in ("predict", "scores"):
            ips = len(imgs) / median(times[f"{kind} {name}"])
            rows.append({"what": "predict (maps)" if kind == "predict" else "scores only", "variant": name,
                         "img_s": ips, "ratio_to_patch_grids": ips / bare,
                         "ratio_per_round_median": median([b / p for b, p in zip(times[f"bare {name}"],
                                                                                times[f"{kind} {name}"])])})
        rows.append({"what": "Lite0 alone: predict (maps)", "variant": name,
                     "img_s": len(imgs) / median(times[f"alone {name}"]),
                     "time_share_of_ensemble_per_round_median": median(
                         [a / p for a, p in zip(times[f"alone {name}"], times[f"predict {name}"])])})
    for name, e in fitted.items():
        rows.append({"what": "banks", "variant": name, "bank": " + ".join(
            f"{m.bank_.shape[0]}x{m.bank_.shape[1]} {m.index_kind(len(m.bank_))}" for m in e.members_)})
    print(f"anomaly fit's default ensemble: {ens.describe()}; threads {args.threads}")
    print_table(rows, "{:.3f}")
    write_result(f"anomaly_speed_ensemble_t{args.threads}",
                 {"members": ens.describe(), "rows": rows, "repeats": args.repeats, "threads": args.threads,
                  "settings": {k: v for k, v in vars(args).items() if k != "out"},
                  "targets": {"predict_ratio": 0.85}}, args.out)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch and faiss threads")
    ap.add_argument("--n", type=int, default=200_000, help="coreset input rows")
    ap.add_argument("--d", type=int, default=384, help="coreset input width")
    ap.add_argument("--ratio", type=float, default=0.1, help="coreset: the fraction of the input rows kept (default: 0.1)")
    ap.add_argument("--chunk", type=positive_int, default=50_000,
                    help="coreset: rows per distance-update chunk, which bounds its peak memory (default: 50000)")
    ap.add_argument("--n-train", type=positive_int, default=200, help="training normals for fit (MVTec-like)")
    ap.add_argument("--size", type=int, default=512, help="side of the original test images")
    ap.add_argument("--batch-size", type=positive_int, default=16, help="test images per timed predict (default: 16)")
    add_repeats_arg(ap, 5, what="timed rounds after one warm-up round, every variant once per round; medians reported")
    ap.add_argument("--skip-coreset", action="store_true", help="leave out the coreset timing (--n, --d, --ratio, --chunk)")
    ap.add_argument("--backbone", default="embedded",
                    help="'embedded' (the embedded ViT), 'default' (anomaly/defaults.py's, with its tiling), 'ensemble' "
                         "(anomaly fit's default ensemble, the coreset skipped) or a name")
    ap.add_argument("--tiled", default=None, metavar="HxW",
                    help="also time tiled predict (the default's tiling, else tile='auto') on images of HxW px against "
                         "bare patch_grids on the same tiles, e.g. 1250x500")
    ap.add_argument("--out", default=None,
                    help="the JSON to write (default: benchmarks/results/anomaly_speed[_<name>]_t<threads>.json)")
    return ap


def main() -> None:
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    from frozenvit.anomaly import PatchCore, render_sample

    if args.backbone == "ensemble":
        return bench_ensemble(args)
    rows = [] if args.skip_coreset else bench_coreset(args.n, args.d, args.ratio, args.chunk)
    bb, which = get_backbone(args.backbone)
    size = (args.size, args.size)
    train = [render_sample("weave", None, 1, i, size)[0] for i in range(args.n_train)]
    test = [render_sample("weave", "hole" if i % 2 else None, 2, i, size)[0] for i in range(args.batch_size)]
    warnings.simplefilter("ignore")   # small calibration split: irrelevant to speed
    t0 = time.perf_counter()
    det = PatchCore(bb, index="flat", progress=False).fit(train)     # exact; the default ("auto") picks by bank size
    fit_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        det.save(Path(tmp) / "m")
        index_mb = (Path(tmp) / "m" / "index.faiss").stat().st_size / 1e6
    rows.append({"what": "fit", "variant": f"{args.n_train} images {args.size}px", "seconds": fit_s,
                 "bank": f"{det.bank_.shape[0]}x{det.bank_.shape[1]}", "bank_mb": det.bank_.nbytes / 1e6,
                 "index_mb": index_mb})
    blocks = det.blocks_
    ivf = PatchCore(bb, index="ivf", progress=False).fit(train)
    # interleaved rounds: on a shared machine the load drifts, so each round times every variant once
    variants = {
        "patch_grids": lambda: bb.patch_grids(test, blocks=blocks, batch_size=args.batch_size, progress=False),
        "predict flat": lambda: det.predict(test), "scores flat": lambda: det.decision_function(test),
        "predict ivf": lambda: ivf.predict(test), "scores ivf": lambda: ivf.decision_function(test),
    }
    if args.tiled:   # tiled predict against the bare backbone on exactly the tiles it needs
        th, tw = (int(v) for v in args.tiled.lower().split("x"))
        big = [render_sample("weave", "hole" if i % 2 else None, 2, i, (th, tw))[0] for i in range(4)]
        # n_train / (tiles per image) normals: a bank about as large as the untiled one's (search cost grows with it)
        normals = [render_sample("weave", None, 1, i, (th, tw))[0] for i in range(2)]
        probe = PatchCore(bb, tile=det.tile or "auto", progress=False).fit(normals)     # only to count its tiles
        per_image = len(probe.tiling_of((th, tw)) or [None])
        tdet = PatchCore(bb, tile=det.tile or "auto", progress=False).fit(
            [render_sample("weave", None, 1, i, (th, tw))[0] for i in range(max(2, args.n_train // per_image))])
        crops = [c for img in big for c in tdet.tiling_of(img.shape[:2]).crops(img)]
        n_tiles = len(crops) // len(big)
        variants["patch_grids tiles"] = lambda: bb.patch_grids(crops, blocks=blocks, batch_size=args.batch_size,
                                                                progress=False)
        variants["predict tiled"] = lambda: tdet.predict(big)
    times = timed_rounds(variants, args.repeats)
    bare = args.batch_size / median(times["patch_grids"])
    rows.append({"what": "patch_grids", "variant": f"blocks {blocks}", "img_s": bare, "batch": args.batch_size})
    for k in [k for k in list(variants)[1:] if "tile" not in k]:
        what, kind = k.split()
        ips = args.batch_size / median(times[k])
        rows.append({"what": "predict (maps)" if what == "predict" else "scores only",
                     "variant": f"{kind} index" + (f", maps at {args.size}px" if what == "predict" else ""),
                     "img_s": ips, "ratio_to_patch_grids": ips / bare,
                     "ratio_per_round_median": median([b / p for b, p in zip(times["patch_grids"], times[k])]),
                     "batch": args.batch_size})
    if args.tiled:
        bare_t = len(big) / median(times["patch_grids tiles"])
        ips = len(big) / median(times["predict tiled"])
        rows.append({"what": "predict tiled (maps)", "variant": f"{args.tiled} px, tile {tdet.tile}, {n_tiles} tiles/img, "
                     f"bank {tdet.bank_.shape[0]}x{tdet.bank_.shape[1]} (untiled {det.bank_.shape[0]}), "
                     f"{tdet.index_kind(len(tdet.bank_))} index (the default's)",
                     "img_s": ips, "ratio_to_patch_grids": ips / bare_t,
                     "ratio_per_round_median": median([b / p for b, p in zip(times["patch_grids tiles"],
                                                                             times["predict tiled"])]),
                     "patch_grids_tiles_img_s": bare_t, "batch": args.batch_size})
    print(f"backbone: {bb.name} ({which}), {bb.config.img_size[0]} px, grid {bb.config.grid}, threads {args.threads}")
    print_table(rows, "{:.3f}")
    name = "anomaly_speed" + ("" if args.backbone == "embedded" else f"_{bb.name}") + f"_t{args.threads}"
    default_index = PatchCore(bb).index_kind(len(det.bank_))         # what PatchCore() builds over this bank
    print(f"the default index over a {len(det.bank_)}-entry bank: {default_index}")
    write_result(name, {"backbone": bb.name, "backbone_kind": which, "blocks": list(blocks), "tile": det.tile,
                        "default_index": default_index, "rows": rows, "repeats": args.repeats, "threads": args.threads,
                        "settings": {k: v for k, v in vars(args).items() if k != "out"},
                        "targets": {"coreset_s": 60, "predict_ratio": 0.85}}, args.out)


if __name__ == "__main__":
    main()
