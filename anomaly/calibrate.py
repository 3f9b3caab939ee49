"""A fitted detector's threshold calibrated again, on normal images it never saw, scored as it runs now.

    det = load_detector("model/", backbones=[load_exported("deploy/")])   # an int8 export: decisions withheld
    det.calibrate(new_normals, target_fpr=0.05)     # threshold set on their int8 scores; decisions again

The model's own threshold was calibrated on its held-out normals' float32 scores; another runtime or precision
(int8 above all) moves every score, and a model stores no normals to score again. `calibrate` scores normals that
the bank never held with the backbone the detector runs now and sets the conformal threshold of those scores
(`threshold.conformal_threshold`): for n exchangeable normals, a new normal like them scores above it with
probability at most target_fpr when (n + 1) * target_fpr >= 1, else at most 1 / (n + 1) (the threshold is then
their maximum, and a warning says so). It sets `threshold` as `set_params(threshold=T)` does, so the decisions
that `withhold_int8_decisions` withheld are made at T.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from frozenvit.backbone.suite.errors import ParameterError

from .errors import DatasetError
from .images import image_list
from .threshold import conformal_threshold, min_held_out
from .updates import SHOWN, bank_images, names_of


def false_alarm_bound(n: int, target_fpr: float) -> float:
    """The false-alarm rate the conformal threshold of n normal scores at `target_fpr` guarantees for a new normal
    exchangeable with them: target_fpr when (n + 1) * target_fpr >= 1, else 1 / (n + 1)."""
    return target_fpr if n >= min_held_out(target_fpr) else 1 / (n + 1)


def calibrate(det: Any, images: Any, target_fpr: float | None, names: Sequence[str] | None, who: str) -> Any:
    """`det.calibrate(...)` of a PatchCore or PatchCoreEnsemble (`who` names the call in errors); returns det.

    Sets det.threshold to the conformal threshold at `target_fpr` (None: det.target_fpr) of the image scores
    (`decision_function`) of `images`, and det.calibrated_on_ to what it was calibrated on: {"n_normals",
    "target_fpr", "threshold", "false_alarm_bound"}. Warns when the normals are too few for the target (the bound is
    then 1 / (n + 1)). Raises DatasetError for no images, or for images an update added to the bank (the sha256 of
    their pixels is recorded; the normals of the original fit are not, so they cannot be recognised), and
    ParameterError for a target_fpr outside (0, 1)."""
    import warnings

    det._check_fitted()
    rate = float(det.target_fpr if target_fpr is None else target_fpr)
    if not 0 < rate < 1:
        raise ParameterError(f"{who}: target_fpr must be in (0, 1), got {target_fpr!r}")
    images = image_list(images, who)
    if not images:
        raise DatasetError(f"{who} got no images: give normal images the model never saw, like those it will judge")
    names = names_of(images, names, who)
    held = bank_images(images, names, det.updates_)
    if held:
        shown = ", ".join(held[:SHOWN]) + (f" and {len(held) - SHOWN} more" if len(held) > SHOWN else "")
        raise DatasetError(f"{who}: {len(held)} of the {len(images)} images are in the model's bank ({shown}): a "
                           "normal the bank holds scores lower than a new one, and would pull the threshold down. "
                           "Calibrate on normals the model never saw")
    scores = np.asarray(det.decision_function(images), np.float32)          # (n,) as predict scores them now
    n = len(scores)
    threshold = conformal_threshold(scores, rate)
    bound = false_alarm_bound(n, rate)
    if bound > rate:
        warnings.warn(f"only {n} normal{'s' * (n > 1)}: the threshold is their maximum score and bounds the "
                      f"false-alarm rate by 1/{n + 1}, not the target {rate:g}; give at least {min_held_out(rate)} "
                      "normals for the target to hold", stacklevel=3)
    det.set_params(threshold=threshold)
    det.calibrated_on_ = {"n_normals": n, "target_fpr": rate, "threshold": threshold, "false_alarm_bound": bound}
    return det
