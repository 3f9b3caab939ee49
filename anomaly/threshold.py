"""The decision threshold: calibrated on held-out normals' image scores at a target false-alarm rate.

    t = conformal_threshold(held_out_scores, target_fpr=0.01)   # P(new normal > t) <= 0.01 for enough normals

With too few held-out normals the guarantee weakens (`calibration_warning` says by how much), and with none the
threshold stays uncalibrated: scores and maps, but no decisions, unless a threshold is given.

A fitted model keeps its held-out normals' scores, so another operating point is chosen later without refitting:

    t = threshold_at(held_out_scores, 0.05)   # ParameterError when fewer than min_held_out(0.05) = 19 normals
"""
from __future__ import annotations

import math

import numpy as np

from frozenvit.backbone.suite.errors import ParameterError

OPERATING_FPRS = (0.01, 0.05, 0.10)     # the false-alarm rates evaluate reports detection at


def conformal_threshold(normal_scores: np.ndarray, target_fpr: float) -> float:
    """The ceil((n + 1)(1 - a))-th smallest normal score: P(new normal > t) <= a for exchangeable
    scores. With too few held-out images (n + 1 < 1 / a) this is the largest score, and the
    guaranteed rate is 1 / (n + 1) instead of a."""
    s = np.sort(np.asarray(normal_scores, np.float64))
    k = math.ceil((len(s) + 1) * (1 - target_fpr))
    return float(s[min(k, len(s)) - 1])


def min_held_out(target_fpr: float) -> int:
    """Held-out normals needed for `conformal_threshold` to bound the false-alarm rate by `target_fpr`:
    the least n with (n + 1) * target_fpr >= 1."""
    return math.ceil(1 / target_fpr) - 1


def threshold_at(normal_scores: np.ndarray, target_fpr: float) -> float:
    """`conformal_threshold` of held-out normal scores (n,) at `target_fpr` in (0, 1), refusing what it cannot bound.

    Raises ParameterError when target_fpr is outside (0, 1), when there are no scores (a model fitted without
    held-out normals) or fewer than `min_held_out(target_fpr)`, naming how many are needed."""
    if not 0 < target_fpr < 1:
        raise ParameterError(f"target_fpr must be in (0, 1), got {target_fpr!r}")
    n, need = len(normal_scores), min_held_out(target_fpr)
    if n == 0:
        raise ParameterError(f"the model has no held-out normal scores to choose a threshold at false-alarm rate "
                             f"{target_fpr:g}: refit it with at least {need} held-out normals (more images or a "
                             "larger holdout), or give a threshold")
    if (n + 1) * target_fpr < 1:
        raise ParameterError(f"{n} held-out normals cannot calibrate a false-alarm rate of {target_fpr:g}: it needs "
                             f"at least {need} (refit with more images or a larger holdout), or choose a rate of at "
                             f"least {1 / (n + 1):.3g}")
    return conformal_threshold(normal_scores, target_fpr)


def holdout_size(n_images: int, holdout: float) -> int:
    """Images held out of `n_images` normals for calibration: round(holdout * n) (half up), leaving >= 1 for the bank."""
    return min(n_images - 1, math.floor(holdout * n_images + 0.5))


def calibration_warning(n_images: int, n_held_out: int, holdout: float, target_fpr: float) -> str | None:
    """What a fit without a given threshold should warn about its calibration, or None: nothing.

    No held-out normal: the threshold is not calibrated. Fewer than 1 / target_fpr - 1: the threshold is their
    maximum, and the false-alarm rate is bounded by 1 / (n + 1) rather than the target."""
    if not n_held_out:
        need = max(2, math.ceil(0.5 / holdout)) if holdout > 0 else None
        return (f"{n_images} normal image{'s' * (n_images > 1)} and none held out (holdout={holdout:g}): the threshold "
                "is not calibrated, so predictions carry scores and maps but no decision (is_defect None); pass "
                "threshold=... (CLI --threshold)" + (f", or give at least {need} images so that one is held out"
                                                     if need else ""))
    if (n_held_out + 1) * target_fpr < 1:
        return (f"only {n_held_out} held-out normals: the threshold is their maximum score and bounds the false-alarm "
                f"rate by 1/{n_held_out + 1}, not the target {target_fpr:g}; give at least "
                f"{math.ceil(1 / target_fpr) - 1} held-out normals (more images or a larger holdout) for the target "
                "to hold")
    return None
