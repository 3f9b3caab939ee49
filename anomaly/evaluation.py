"""Evaluate a fitted detector on a labelled test set (MVTec layout or plain folders with masks)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DatasetError
from .images import read_image
from .metrics import anomaly_metrics, image_auroc

CHUNK = 64   # images per predict call: bounds the memory held by full-size maps


def evaluate_dataset(det: Any, ds: Any) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Overall metrics and per-defect-type image AUROC (each type against the good test images).

    The false-alarm and detection rates are at the detector's `decision_threshold()`; NaN when it has none
    (an uncalibrated few-shot model): the AUROCs and AUPRO need no threshold."""
    samples = [s for s in ds.test if s.label >= 0]
    if not samples:
        raise DatasetError(f"{ds.root}: no labelled test images (need test/good and test/<defect>, or masks)")
    scores, masks, maps = [], [], []
    pixel = ds.has_masks
    for i in range(0, len(samples), CHUNK):
        chunk = samples[i:i + CHUNK]
        images = [read_image(s.path) for s in chunk]
        pred = det.predict(images)
        scores.append(pred.scores)
        if pixel:
            masks += [s.load_mask(img.shape[:2]) for s, img in zip(chunk, images)]
            maps += pred.maps
    scores = np.concatenate(scores)
    labels = np.array([s.label for s in samples])
    metrics = anomaly_metrics(labels, scores, masks if pixel else None, maps if pixel else None)
    thr = det.decision_threshold()

    def rate(sel: np.ndarray) -> float:
        return float((scores[sel] > thr).mean()) if thr is not None and sel.any() else float("nan")

    metrics["false_alarm_rate"] = rate(labels == 0)
    metrics["detection_rate"] = rate(labels == 1)
    per_type = []
    good = labels == 0
    for t in sorted({s.defect_type for s in samples if s.label == 1}):
        sel = np.array([s.defect_type == t for s in samples])
        per_type.append({"defect": t, "n": int(sel.sum()),
                         "image_auroc": image_auroc(labels[good | sel], scores[good | sel]),
                         "detected": rate(sel)})
    return metrics, per_type
