"""Few-shot PatchCore on the real development sets: image AUROC after fitting on K normals.

    nice python benchmarks/anomaly_fewshot.py --threads 1                                   # MPDD metal_plate
    nice python benchmarks/anomaly_fewshot.py --threads 1 --dataset kolektorsdd --tile 1 --augment none flips

For each K (--shots) and each of --draws random draws of K training normals (seeded by the draw
number), PatchCore with the embedded default backbone and CLI defaults otherwise is fitted on exactly
those K images (holdout=0: all go into the bank, the threshold is uncalibrated, which image AUROC does
not need) with each --augment setting, then scores every test image of the set. The table gives the mean
image AUROC over the draws (and its spread); the JSON keeps every draw. Writes
benchmarks/results/anomaly_fewshot_<dataset>[_tile<scale>].json (or --out).

The backbone's features of a batch are memoised by the batch's pixel content for the run (--no-memo
turns it off): the test set goes through the same batches after every fit, so only the first fit pays
for its backbone passes (tiled KolektorSDD: thousands of tiles per pass). The features, hence every
score, are the same either way (a batch's features depend only on its pixels); "score s" of the first
row is the full cost, later rows are search and scoring only.
"""
from __future__ import annotations

import argparse
import hashlib
import time
import warnings

import numpy as np
import torch

from frozenvit.anomaly.cli import aggregation_arg

from common import SHARED_DATA, print_table, write_result


def memoised(cls: type) -> type:
    """A subclass of PatchCore whose backbone features are memoised by the pixels of the whole batch."""
    memo: dict[bytes, tuple] = {}

    class Memoised(cls):
        def _features(self, batch: list) -> tuple:
            h = hashlib.blake2b(digest_size=32)
            h.update(repr((id(self.backbone_), self.blocks_)).encode())   # ensemble members: one memo, no clashes
            for v in batch:
                a = np.ascontiguousarray(np.asarray(v))
                h.update(str(a.shape).encode() + a.tobytes())
            key = h.digest()
            if key not in memo:
                memo[key] = super()._features(batch)
            return memo[key]

    Memoised.__name__ = cls.__name__
    return Memoised


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset", default="mpdd_metal_plate", help="a folder of ../shared/data/defects")
    ap.add_argument("--shots", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--augment", nargs="+", default=["none", "flips", "rot90", "all"])
    ap.add_argument("--tile", type=float, default=None, help="PatchCore tile scale (None: whole images)")
    ap.add_argument("--coreset-ratio", type=float, default=0.1)
    ap.add_argument("--aggregation", default="auto", type=aggregation_arg,
                    help="PatchCore(aggregation=...): 'auto' (none on the embedded ViT) or an odd size (3: the paper's)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-memo", action="store_true", help="recompute the backbone features of every batch")
    ap.add_argument("--ensemble", action="store_true",
                    help="anomaly fit's default ensemble (defaults.ENSEMBLE, each member's own settings) instead of "
                         "PatchCore on the embedded ViT; --tile, --coreset-ratio and --aggregation then do not apply")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)

    from frozenvit.anomaly import PatchCore, image_auroc, read_image, read_mvtec

    if not args.no_memo:
        PatchCore = memoised(PatchCore)  # noqa: N806
    from frozenvit.backbone import load_backbone

    root = SHARED_DATA / "defects" / args.dataset
    ds = read_mvtec(root)
    test = [s for s in ds.test if s.label >= 0]
    labels = np.array([s.label for s in test])
    test_images = [read_image(s.path) for s in test]
    bb = load_backbone()
    if args.ensemble:
        from frozenvit.anomaly import PatchCoreEnsemble, defaults

        members_bb = [defaults.ensemble_backbone(name) for name, _ in defaults.ENSEMBLE]
    print(f"{args.dataset}: {len(ds.train)} train normals, test {int((labels == 0).sum())} good / "
          f"{int((labels == 1).sum())} defective; {bb.name} at {bb.config.img_size}, tile {args.tile}, "
          f"{args.threads} thread(s)")

    runs, rows = [], []
    for k in args.shots:
        for aug in args.augment:
            aurocs, fit_s, score_s, bank = [], [], [], []
            for d in range(args.draws):
                pick = np.sort(np.random.default_rng(d).choice(len(ds.train), k, replace=False))
                if args.ensemble:
                    det = PatchCoreEnsemble([PatchCore(members_bb[i], augment=None if aug == "none" else aug,
                                                       progress=False, **own)
                                             for i, (_, own) in enumerate(defaults.ENSEMBLE)], holdout=0.0)
                else:
                    det = PatchCore(bb, holdout=0.0, augment=None if aug == "none" else aug, tile=args.tile,
                                    coreset_ratio=args.coreset_ratio, aggregation=args.aggregation, progress=False)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")          # "threshold is not calibrated": AUROC needs none
                    det.fit([ds.train[i] for i in pick])
                t1 = time.perf_counter()
                scores = det.decision_function(test_images)
                t2 = time.perf_counter()
                auc = image_auroc(labels, scores)
                aurocs.append(auc)
                fit_s.append(t1 - t0)
                score_s.append(t2 - t1)
                banks = [m.bank_ for m in det.members_] if args.ensemble else [det.bank_]
                bank.append(int(sum(b.shape[0] for b in banks)))
                runs.append({"shots": k, "augment": aug, "draw": d, "train": [ds.train[i].name for i in pick],
                             "image_auroc": auc, "fit_s": t1 - t0, "score_s": t2 - t1,
                             "bank": [list(b.shape) for b in banks] if args.ensemble else list(det.bank_.shape),
                             "n_train_patches": int(det.n_train_patches_)})
                print(f"  K={k} augment={aug} draw {d}: image AUROC {auc:.3f} (fit {t1 - t0:.1f} s, "
                      f"score {t2 - t1:.1f} s, bank {bank[-1]})", flush=True)
            rows.append({"K": k, "augment": aug, "image AUROC": float(np.mean(aurocs)),
                         "min": float(np.min(aurocs)), "max": float(np.max(aurocs)),
                         "bank": int(np.mean(bank)), "fit s": float(np.mean(fit_s)),
                         "score s": float(np.mean(score_s))})
    print_table(rows)
    name = f"anomaly_fewshot_{args.dataset}" + ("_ensemble" if args.ensemble else f"_tile{args.tile:g}" if args.tile else "")
    write_result(name, {"dataset": args.dataset, "ensemble": repr(defaults.ENSEMBLE) if args.ensemble else None,
                        "backbone": bb.name, "weights_sha256": getattr(bb, "weights_sha256", None),
                        "img_size": list(bb.config.img_size), "aggregation": args.aggregation,
                        "tile": args.tile, "coreset_ratio": args.coreset_ratio, "draws": args.draws,
                        "n_test_good": int((labels == 0).sum()), "n_test_defective": int((labels == 1).sum()),
                        "threads": args.threads, "features_memoised": not args.no_memo, "table": rows, "runs": runs},
                 args.out)


if __name__ == "__main__":
    main()
