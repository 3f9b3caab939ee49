"""Evaluate a fitted detector on a labelled test set (MVTec layout or plain folders with masks)."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.backbone.suite.progress import progress_bar

from .errors import DatasetError
from .features import named_images
from .images import image_size, read_image
from .metrics import anomaly_metrics, image_auroc
from .stream import batch_bounds, inner_bars_off
from .threshold import OPERATING_FPRS, threshold_at


def at_fpr(key: str, fpr: float) -> str:
    """The metrics key of `key` at the operating point calibrated to false-alarm rate `fpr`: "detection_rate@5%"."""
    return f"{key}@{fpr * 100:g}%"


def evaluate_dataset(det: Any, ds: Any, fprs: tuple[float, ...] = OPERATING_FPRS
                     ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Overall metrics and per-defect-type image AUROC (each type against the good test images).

    The false-alarm and detection rates are at the detector's `decision_threshold()`; NaN when it has none
    (an uncalibrated few-shot model): the AUROCs and AUPRO need no threshold. For each rate f in `fprs` they are
    also given at the threshold calibrated to f on the model's own held-out normals (`threshold_at`; no test label
    moves it): keys `at_fpr("threshold", f)`, `at_fpr("false_alarm_rate", f)`, `at_fpr("detection_rate", f)`, NaN
    where the model holds too few held-out normals for f; "held_out_normals" is how many it holds. The pixel
    metrics (pixel AUROC, AUPRO, pixel F1-max) are computed on the images whose masks are known: the good ones and
    the defective ones with a mask that marks defect pixels. A warning names the defective images they leave out:
    those without a mask, and those whose mask reads empty (a defect image cannot be all defect-free); with no
    usable mask at all there are no pixel metrics. A test set of one class only has NaN image AUROC and F1-max;
    the dataset readers say so (`read_mvtec`, `read_folders`), so it is not warned again here."""
    samples = [s for s in ds.test if s.label >= 0]
    if not samples:
        raise DatasetError(f"{ds.root}: no labelled test images (need test/good and test/<defect>, or masks)")
    unmasked = [s for s in samples if s.label == 1 and s.mask_path is None]
    pixel = any(s.label == 1 and s.mask_path is not None for s in samples)
    if pixel and unmasked:
        warnings.warn(f"{len(unmasked)} defective test image{'s' * (len(unmasked) > 1)} without a mask "
                      f"({_shown([s.path for s in unmasked])}): pixel AUROC, AUPRO and pixel F1-max leave them out; "
                      "add their masks to count them", stacklevel=2)
    scores, masks, maps, empty = [], [], [], []
    shown = getattr(det, "progress", None)
    with progress_bar(total=len(samples), desc="evaluate", unit="image",
                      disable=None if shown is None else not shown) as bar:   # one bar, not one per member and batch
        for start, stop in batch_bounds([image_size(s.path) for s in samples]):   # a few large images at a time
            chunk = samples[start:stop]
            images = [read_image(s.path) for s in chunk]
            with named_images([str(s.path) for s in chunk]), inner_bars_off(det):
                pred = det.predict(images)
            scores.append(pred.scores)
            for s, img, amap in zip(chunk, images, pred.maps):
                if pixel and (s.label == 0 or s.mask_path is not None):
                    mask = s.load_mask(img.shape[:2])
                    if s.label == 1 and not mask.any():
                        empty.append(s)
                        continue
                    masks.append(mask)
                    maps.append(amap)
            bar.update(len(chunk))
    with_mask = [s for s in samples if s.label == 1 and s.mask_path is not None]
    if empty and len(empty) == len(with_mask):
        pixel = False
        warnings.warn(f"every mask of the {len(empty)} defective test images with one reads empty "
                      f"({_shown([s.mask_path for s in empty])}): no pixel metrics. A pixel is a defect when above "
                      "half the mask's scale (127 of 255), or above 0 in a lossless mask that stays below that (0/1); "
                      "check that the masks are the right files", stacklevel=2)
    elif empty:
        warnings.warn(f"{len(empty)} mask{'s' * (len(empty) > 1)} of defective test images read empty "
                      f"({_shown([s.mask_path for s in empty])}): pixel AUROC, AUPRO and pixel F1-max leave "
                      f"{'those images' if len(empty) > 1 else 'the image'} out, as for a missing mask; check that "
                      f"{'they are' if len(empty) > 1 else 'it is'} the right file", stacklevel=2)
    scores = np.concatenate(scores)
    labels = np.array([s.label for s in samples])
    with warnings.catch_warnings():   # one class only: the reader has said so, once
        warnings.filterwarnings("ignore", message=r"(image AUROC|F1-max) is undefined")
        metrics = anomaly_metrics(labels, scores, masks if pixel else None, maps if pixel else None)
    thr = det.decision_threshold()

    def rate(sel: np.ndarray, t: float | None = thr) -> float:
        return float((scores[sel] > t).mean()) if t is not None and not np.isnan(t) and sel.any() else float("nan")

    metrics["false_alarm_rate"] = rate(labels == 0)
    metrics["detection_rate"] = rate(labels == 1)
    metrics["held_out_normals"] = len(det.calibration_scores_)
    for f in fprs:
        try:
            t = threshold_at(det.calibration_scores_, f)
        except ParameterError:                                   # too few held-out normals for f
            t = float("nan")
        metrics[at_fpr("threshold", f)] = t
        metrics[at_fpr("false_alarm_rate", f)] = rate(labels == 0, t)
        metrics[at_fpr("detection_rate", f)] = rate(labels == 1, t)
    per_type = []
    good = labels == 0
    for t in sorted({s.defect_type for s in samples if s.label == 1}):
        sel = np.array([s.defect_type == t for s in samples])
        per_type.append({"defect": t, "n": int(sel.sum()),
                         "image_auroc": image_auroc(labels[good | sel], scores[good | sel]) if good.any()
                         else float("nan"),
                         "detected": rate(sel)})
    return metrics, per_type


def _shown(paths: list, n: int = 5) -> str:
    return ", ".join(map(str, paths[:n])) + (f" and {len(paths) - n} more" if len(paths) > n else "")
