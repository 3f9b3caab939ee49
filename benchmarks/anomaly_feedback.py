"""False alarms fed back into the model: before/after `PatchCore.partial_fit` on a development set.

    nice -n 10 python benchmarks/anomaly_feedback.py --threads 1          # MPDD metal_plate, k = 1, 5, 10

Protocol. Fit on train/good (the library's defaults, 20% held out to calibrate the threshold). Split the good test
images, seeded, into a feedback half and a scoring half. Score the feedback half: its images above the calibrated
threshold are the false alarms a reviewer would see; mark the top k of them (highest scores first; fewer when
there are fewer) "normal" and add them with `partial_fit` (threshold re-calibrated on the stored held-out scores
plus the new held-out ones). Before/after figures (false-alarm rate, detection rate, image AUROC) are measured on
the scoring half and every defective test image only; no scored image is among the images added (checked).
Writes benchmarks/results/anomaly_feedback_<set>.json.
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np

from common import RESULTS, SHARED_DATA, print_table, write_result


def rates(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    from frozenvit.anomaly.metrics import image_auroc

    flagged = scores > threshold
    return {"false_alarm_rate": float(flagged[labels == 0].mean()), "false_alarms": int(flagged[labels == 0].sum()),
            "detection_rate": float(flagged[labels == 1].mean()), "image_auroc": float(image_auroc(labels, scores)),
            "threshold": float(threshold)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="mpdd_metal_plate")
    ap.add_argument("--backbone", default="efficientnet_lite0")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 5, 10])
    ap.add_argument("--seed", type=int, default=0, help="seed of the feedback/scoring split")
    ap.add_argument("--n-train", type=int, default=None,
                    help="fit on this many train/good images (a seeded subset: a model early in use); default all")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-root", type=Path, default=SHARED_DATA / "defects")
    args = ap.parse_args()

    import faiss
    import torch

    from frozenvit.anomaly import PatchCore, read_mvtec
    from frozenvit.backbone import load_backbone

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    ds = read_mvtec(args.data_root / args.set)
    good = [str(s.path) for s in ds.test if s.label == 0]
    bad = [str(s.path) for s in ds.test if s.label == 1]
    perm = np.random.default_rng(args.seed).permutation(len(good))
    feedback = [good[i] for i in sorted(perm[: len(good) // 2])]
    scoring = [good[i] for i in sorted(perm[len(good) // 2:])]
    scored = scoring + bad
    labels = np.array([0] * len(scoring) + [1] * len(bad))
    train = list(ds.train)
    if args.n_train:
        train = [train[i] for i in sorted(np.random.default_rng(args.seed).permutation(len(train))[:args.n_train])]
    bb = load_backbone(args.backbone)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                    # the holdout's 1% bound: reported as measured
        det = PatchCore(bb, progress=False).fit(train)
    t0 = det.decision_threshold()
    before = rates(det.decision_function(scored), labels, t0)
    fb_scores = det.decision_function(feedback)
    order = np.argsort(-fb_scores)
    false_alarms = [feedback[i] for i in order if fb_scores[i] > t0]
    print(f"{args.set}: {len(train)} train normals; feedback half {len(feedback)} good ({len(false_alarms)} false "
          f"alarms at {t0:.4f}); scoring half {len(scoring)} good + {len(bad)} defective", flush=True)
    rows, runs = [{"k": 0, "marked": 0, **before, "bank": len(det.bank_)}], []
    with tempfile.TemporaryDirectory() as tmp:
        det.save(Path(tmp) / "model")
        for k in args.k:
            marked = false_alarms[:k]
            assert not set(marked) & set(scored), "an image used to score was added"
            if not marked:
                continue
            upd = PatchCore.load(Path(tmp) / "model", backbone=bb)
            upd.progress = False
            upd.partial_fit(marked)
            after = rates(upd.decision_function(scored), labels, upd.decision_threshold())
            rows.append({"k": k, "marked": len(marked), **after, "bank": len(upd.bank_)})
            runs.append({"k": k, "marked": [Path(m).name for m in marked], "update": upd.updates_[-1] | {
                "added_to_bank": [Path(m).name for m in upd.updates_[-1]["added_to_bank"]],
                "held_out": [Path(m).name for m in upd.updates_[-1]["held_out"]]}, "after": after})
            print_table(rows[-1:])
    print_table(rows)
    write_result(f"anomaly_feedback_{args.set}", {
        "set": args.set, "backbone": args.backbone, "split_seed": args.seed, "threads": args.threads,
        "n_train": len(train), "n_feedback_good": len(feedback), "n_scoring_good": len(scoring),
        "n_defective": len(bad), "false_alarms_in_feedback_half": len(false_alarms),
        "feedback_images": [Path(f).name for f in feedback], "scoring_images": [Path(f).name for f in scoring],
        "before": before, "table": rows, "runs": runs}, RESULTS / f"anomaly_feedback_{args.set}{f'_n{args.n_train}' if args.n_train else ''}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
