"""Detection and segmentation metrics for anomaly maps.

image AUROC and F1-max: scikit-learn on image scores.
pixel AUROC: scikit-learn on all pixels of all test images pooled.
AUPRO (Bergmann et al., MVTec AD): ground-truth regions are the 8-connected components of
the masks, pooled over the whole test set; at each threshold, PRO is the mean over regions of
the fraction of the region above threshold (each region weighs the same, whatever its size);
FPR is the fraction of defect-free pixels above threshold. The PRO-vs-FPR curve is integrated
with the trapezoid rule up to FPR 0.3, interpolating linearly at 0.3, and divided by 0.3.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
from scipy import ndimage
from sklearn.metrics import precision_recall_curve, roc_auc_score

EIGHT_CONNECTED = np.ones((3, 3), dtype=int)
_trapezoid = getattr(np, "trapezoid", None) or np.trapz   # numpy < 2 names it trapz


def _both_classes(y: np.ndarray, what: str) -> bool:
    if y.min() == y.max():
        warnings.warn(f"{what} is undefined: the test set has only {'defective' if y.min() else 'good'} "
                      "samples; add both kinds", stacklevel=3)
        return False
    return True


def image_auroc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """labels (N,) 0 good / 1 defective, scores (N,) higher = more anomalous. NaN if one class only."""
    y = np.asarray(labels).astype(int)
    return float(roc_auc_score(y, np.asarray(scores))) if _both_classes(y, "image AUROC") else float("nan")


def f1_max(labels: np.ndarray, scores: np.ndarray) -> float:
    """Best F1 over all thresholds. labels (N,) bool/int, scores (N,)."""
    y = np.asarray(labels).astype(int).ravel()
    if not _both_classes(y, "F1-max"):
        return float("nan")
    p, r, _ = precision_recall_curve(y, np.asarray(scores).ravel())
    f1 = np.divide(2 * p * r, p + r, out=np.zeros_like(p), where=(p + r) > 0)
    return float(f1.max())


def _pool(masks: Sequence[np.ndarray], maps: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if len(masks) != len(maps):
        raise ValueError(f"{len(masks)} masks but {len(maps)} maps")
    for i, (m, a) in enumerate(zip(masks, maps)):
        if np.shape(m) != np.shape(a):
            raise ValueError(f"mask {i} has shape {np.shape(m)} but its map has {np.shape(a)}")
    y = np.concatenate([np.asarray(m, bool).ravel() for m in masks])
    s = np.concatenate([np.asarray(a, np.float32).ravel() for a in maps])
    return y, s


def pixel_auroc(masks: Sequence[np.ndarray], maps: Sequence[np.ndarray]) -> float:
    """masks: bool (H_i, W_i) per image; maps: float (H_i, W_i) per image; all pixels pooled."""
    y, s = _pool(masks, maps)
    return float(roc_auc_score(y, s)) if _both_classes(y.astype(int), "pixel AUROC") else float("nan")


def pixel_f1_max(masks: Sequence[np.ndarray], maps: Sequence[np.ndarray]) -> float:
    y, s = _pool(masks, maps)
    return f1_max(y, s)


def pro_curve(masks: Sequence[np.ndarray], maps: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, pro), both ascending from (0, 0) to (1, 1), one point per distinct score value.

    Exact and O(P log P) in the number of pixels P: every pixel carries an FP increment (1 if it
    is defect-free) and a PRO increment (1 / (size of its region * number of regions)); sorting
    by score and taking cumulative sums gives both curves at every threshold at once.
    """
    fp_inc, pro_inc, scores = [], [], []
    n_regions = 0
    for m, a in zip(masks, maps):
        if np.shape(m) != np.shape(a):
            raise ValueError(f"mask shape {np.shape(m)} differs from map shape {np.shape(a)}")
        lab, n = ndimage.label(np.asarray(m, bool), structure=EIGHT_CONNECTED)   # (H, W) int
        sizes = np.bincount(lab.ravel(), minlength=n + 1).astype(np.float64)      # (n + 1,)
        inv = np.zeros(n + 1)
        inv[1:] = 1.0 / sizes[1:]
        fp_inc.append((lab == 0).ravel())
        pro_inc.append(inv[lab].ravel())
        scores.append(np.asarray(a, np.float64).ravel())
        n_regions += n
    fp = np.concatenate(fp_inc)
    pro = np.concatenate(pro_inc)
    s = np.concatenate(scores)
    n_ok = int(fp.sum())
    if n_regions == 0 or n_ok == 0:
        raise ValueError("PRO needs at least one defect region and one defect-free pixel")
    order = np.argsort(-s, kind="stable")                    # descending score
    s = s[order]
    fprs = np.cumsum(fp[order]) / n_ok
    pros = np.cumsum(pro[order]) / n_regions
    last_of_tie = np.append(np.diff(s) != 0, True)           # a threshold admits all equal scores at once
    fprs, pros = np.clip(fprs[last_of_tie], 0, 1), np.clip(pros[last_of_tie], 0, 1)
    return np.concatenate(([0.0], fprs, [1.0])), np.concatenate(([0.0], pros, [1.0]))


def area_up_to(x: np.ndarray, y: np.ndarray, x_max: float) -> float:
    """Trapezoid area under y(x) for x in [0, x_max]; x ascending; y interpolated linearly at x_max."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    inside = x <= x_max
    xs, ys = x[inside], y[inside]
    if xs[-1] < x_max:
        j = int(np.searchsorted(x, x_max, side="right"))   # first point beyond x_max
        x0, x1, y0, y1 = x[j - 1], x[j], y[j - 1], y[j]
        y_at = y0 + (y1 - y0) * (x_max - x0) / (x1 - x0)
        xs, ys = np.append(xs, x_max), np.append(ys, y_at)
    return float(_trapezoid(ys, xs))


def aupro(masks: Sequence[np.ndarray], maps: Sequence[np.ndarray], fpr_limit: float = 0.3) -> float:
    """Area under the PRO curve up to `fpr_limit`, divided by `fpr_limit` (1.0 is perfect)."""
    fpr, pro = pro_curve(masks, maps)
    return area_up_to(fpr, pro, fpr_limit) / fpr_limit


def anomaly_metrics(labels: Sequence[int], scores: Sequence[float], masks: Sequence[np.ndarray] | None = None,
                    maps: Sequence[np.ndarray] | None = None, fpr_limit: float = 0.3) -> dict[str, float]:
    """All metrics in one dict; pixel metrics only when masks and maps are given."""
    out = {"image_auroc": image_auroc(labels, scores), "image_f1_max": f1_max(np.asarray(labels), np.asarray(scores))}
    if masks is not None and maps is not None:
        y, _ = _pool(masks, maps)
        if y.any() and not y.all():
            out["pixel_auroc"] = pixel_auroc(masks, maps)
            out["aupro"] = aupro(masks, maps, fpr_limit)
            out["pixel_f1_max"] = pixel_f1_max(masks, maps)
        else:
            warnings.warn("pixel metrics are undefined without both defect and defect-free pixels", stacklevel=2)
    return out
