"""Where the image scores of the default come from on KolektorSDD (issue 17): a diagnosis, not a configuration table.

    nice -n 5 python benchmarks/anomaly_real_diagnosis.py --threads 1                # fit, score, analyse (~10 min)
    python benchmarks/anomaly_real_diagnosis.py --scores /tmp/kolektor_scores.pkl    # analyse saved patch scores

Fits Lite0 with tiles auto and every patch in the image score (`score_border=0`, exact search: the
`lite0_tileauto` and `lite0_s1_tileauto` rows of benchmarks/anomaly_real.py), two stages and the stride-16
stage alone, keeps the patch scores of every test image's tiles, then asks of them: where does each
image's worst patch sit (a tile's outer ring of patches? the image's edge? on the crack?), how do normal
patch scores depend on the position in the tile, and what image AUROC would other image scores give
(the worst patch with 1-3 edge rings left out, only the internal tile borders left out, top-k means,
the stitched map's maximum). Writes benchmarks/results/anomaly_real_kolektorsdd_diagnosis.json.
"""
from __future__ import annotations

import argparse
import pickle
import warnings
from pathlib import Path

import numpy as np
import torch
from scipy import ndimage
from sklearn.metrics import roc_auc_score

from anomaly_real import Grids, detector_class, load
from common import SHARED_DATA, write_result

STAGES = {"two stages (stride 8+16)": (2, 3), "one stage (stride 16)": (3,)}


def score(root: Path, threads: int) -> dict:
    """Fit both configurations (the backbone's grids computed once) and keep their test outputs."""
    import faiss

    from frozenvit.anomaly import read_image, read_mvtec

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    ds = read_mvtec(root)
    test = [s for s in ds.test if s.label >= 0]
    imgs = [read_image(s.path) for s in test]
    bb = load({"name": "efficientnet_lite0"})
    grids = Grids()
    grids.use(("efficientnet_lite0", "auto"))
    out = {"labels": np.array([s.label for s in test]), "paths": [str(s.path) for s in test]}
    for name, blocks in STAGES.items():
        det = detector_class(grids, (2, 3))(bb, blocks=blocks, tile="auto", score_border=0, index="flat",
                                            progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            det.fit(ds.train)
        pred = det.predict(imgs)
        out[name] = {"scores": pred.scores, "patch": pred.patch_scores, "maps": [m.astype(np.float16) for m in pred.maps],
                     "sizes": [im.shape[:2] for im in imgs]}
    return out


def topk(a: np.ndarray, frac: float) -> float:
    a = np.sort(np.ravel(a))
    return float(a[-max(1, int(np.ceil(frac * a.size))):].mean())


def analyse(d: dict, root: Path) -> dict:
    from frozenvit.anomaly import read_mvtec
    from frozenvit.anomaly.tiling import Tiling

    y = d["labels"]
    test = [s for s in read_mvtec(root).test if s.label >= 0]
    report = {}
    for name in STAGES:
        r = d[name]
        P = r["patch"]                                                   # [(T_i, h, w)]
        h, w = P[0].shape[1:]
        maps = [m.astype(np.float32) for m in r["maps"]]

        def kept(ring: int, rows: bool = True, cols: bool = True, internal_rows_only: bool = False):
            """Max over the patches left after dropping `ring` edge rings (rows: tile tops/bottoms; cols: sides)."""
            out = []
            for p in P:
                keep = np.ones(p.shape, bool)
                if cols:
                    keep[:, :, :ring] = keep[:, :, w - ring:] = False
                if rows:
                    for t in range(len(p)):
                        if not internal_rows_only or t > 0:
                            keep[t, :ring] = False
                        if not internal_rows_only or t < len(p) - 1:
                            keep[t, h - ring:] = False
                out.append(p[keep].max())
            return roc_auc_score(y, out)

        auroc = {"stored score (reweighted, every patch)": roc_auc_score(y, r["scores"]),
                 "max, every patch": roc_auc_score(y, [p.max() for p in P]),
                 "top 1% of patches": roc_auc_score(y, [topk(p, 0.01) for p in P]),
                 "top 0.1% of patches": roc_auc_score(y, [topk(p, 0.001) for p in P]),
                 "max of the stitched map": roc_auc_score(y, [m.max() for m in maps]),
                 "top 1% of the stitched map": roc_auc_score(y, [topk(m, 0.01) for m in maps])}
        for ring in (1, 2, 3):
            auroc[f"max, {ring} edge ring(s) left out"] = kept(ring)
            auroc[f"max, {ring} ring(s) of tile tops/bottoms left out"] = kept(ring, cols=False)
            auroc[f"max, {ring} ring(s) of tile sides (the image's edges) left out"] = kept(ring, rows=False)
            auroc[f"max, {ring} ring(s) of internal tile borders only left out"] = kept(ring, cols=False,
                                                                                     internal_rows_only=True)
        ring = np.zeros((h, w), bool)
        ring[[0, -1], :] = ring[:, [0, -1]] = True
        worst = []
        for i, p in enumerate(P):
            t, rr, cc = np.unravel_index(int(p.argmax()), p.shape)
            H0, W0 = r["sizes"][i]
            til = Tiling.plan((H0, W0), (224, 224), min(H0 / 224, W0 / 224), 0.25)   # tiles auto on 224 px
            top, left = til.windows[t]
            yy, xx = top + (rr + 0.5) * til.tile_size[0] / h, left + (cc + 0.5) * til.tile_size[1] / w
            on_crack = None
            if y[i]:
                m = ndimage.binary_dilation(test[i].load_mask((H0, W0)), iterations=16)
                on_crack = bool(m[min(int(yy), H0 - 1), min(int(xx), W0 - 1)])
            worst.append({"image": Path(d["paths"][i]).name, "label": int(y[i]), "score": float(r["scores"][i]),
                          "tile": int(t), "tiles": len(til), "row": int(rr), "col": int(cc),
                          "on_ring": bool(ring[rr, cc]), "y": round(yy), "x": round(xx), "within_16px_of_crack": on_crack})
        good = np.concatenate([p for p, l in zip(P, y) if l == 0])      # (n_good_tiles, h, w)
        mean = good.mean(0)
        report[name] = {
            "grid": [int(h), int(w)], "ring_share_of_patches": float(ring.mean()),
            "image_auroc": {k: float(v) for k, v in auroc.items()},
            "worst_patch_on_a_tile_ring": {"good": float(np.mean([q["on_ring"] for q in worst if not q["label"]])),
                                           "defective": float(np.mean([q["on_ring"] for q in worst if q["label"]]))},
            "defective_worst_patch_within_16px_of_the_crack": float(np.mean([q["within_16px_of_crack"]
                                                                            for q in worst if q["label"]])),
            "good_mean_patch_score": {"corner": float(mean[0, 0]), "middle of the top row": float(mean[0, w // 2]),
                                      "middle of the side column": float(mean[h // 2, 0]),
                                      "centre": float(mean[h // 2, w // 2])},
            "good_patch_score_p99": {"outer ring": float(np.percentile(good[:, ring], 99)),
                                     "two rings in and further": float(np.percentile(good[:, 2:-2, 2:-2], 99))},
            "top_good_images": sorted([q for q in worst if not q["label"]], key=lambda q: -q["score"])[:10],
        }
        print(f"{name}: " + "; ".join(f"{k} {v:.3f}" for k, v in auroc.items()), flush=True)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", default=str(SHARED_DATA / "defects"), help="folder holding kolektorsdd")
    ap.add_argument("--scores", default=None, help="a pickle of the patch scores: read it if it exists, else write it")
    ap.add_argument("--out", default=None, help="JSON path (None: benchmarks/results/anomaly_real_kolektorsdd_diagnosis.json)")
    args = ap.parse_args()
    root = Path(args.data_root) / "kolektorsdd"
    if args.scores and Path(args.scores).is_file():
        d = pickle.loads(Path(args.scores).read_bytes())
    else:
        d = score(root, args.threads)
        if args.scores:
            Path(args.scores).write_bytes(pickle.dumps(d))
    write_result("anomaly_real_kolektorsdd_diagnosis",
                 {"set": "kolektorsdd", "backbone": "efficientnet_lite0", "tile": "auto", "score_border": 0,
                  "index": "flat", "n_test": int(len(d["labels"])), "stages": analyse(d, root)}, args.out)


if __name__ == "__main__":
    main()
