"""Several PatchCores on different backbones, one detector: the PatchCore paper's ensemble, calibrated on held-out
normals instead of the test set.

    from frozenvit.anomaly import PatchCoreEnsemble
    det = PatchCoreEnsemble().fit(normals)          # the default members: Lite0, Lite2 and the embedded ViT
    out = det.predict(images)                        # as PatchCore.predict: scores, maps, is_defect, threshold
    det.save("model/"); det = load_detector("model/")

Each member is fitted on the same normals with the same holdout split. Its image scores and maps are put on one
scale by its own held-out normals (`standardiser`): (x - mean) / std of their image scores. The ensemble's image
score is the mean of its members' standardised scores, its map the mean of their standardised maps (all maps lie
on the original pixels, so they add up pixel for pixel), and its threshold is calibrated on the held-out normals'
ensemble scores exactly as a PatchCore's is on its own. Why it is `anomaly fit`'s default: lab/anomaly-notes.md, "The
default ensemble".
"""
from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.errors import ParameterError, ParameterErrorMixin

from . import defaults as D
from .artifact import KIND as PATCHCORE_KIND, SAVE_FLAG
from .errors import DatasetError
from .images import image_list
from .patchcore import AnomalyPrediction, PatchCore
from .threshold import calibration_warning, conformal_threshold, holdout_size, min_held_out, threshold_at
from .updates import new_normals

KIND = "anomaly.ensemble"
FORMAT_VERSION = 1
MIN_STD = 1e-6          # a member whose held-out scores do not spread is scaled as if they spread this much
STRIP_PIXELS = 1 << 22  # map pixels combined at a time (`_combine_map`): bounds the float64 copies of a large image


def default_members(progress: bool | None = None) -> list[PatchCore]:
    """`anomaly fit`'s default members (`defaults.ENSEMBLE`): each a PatchCore with its own settings."""
    from . import defaults

    return [PatchCore(defaults.ensemble_backbone(name), progress=progress, **kw) for name, kw in defaults.ENSEMBLE]


def standardiser(holdout_scores: np.ndarray, map_range: tuple[float, float]) -> tuple[float, float]:
    """(location, scale) that put one member's scores and maps on the ensemble's common scale.

    The mean and standard deviation of its held-out normals' image scores; with fewer than 2 held-out normals
    (few-shot) the median and the spread (max - median) of its normal patch scores (`map_range_`), the only
    normal statistics such a member has."""
    s = np.asarray(holdout_scores, np.float64)
    if len(s) >= 2:
        return float(s.mean()), float(max(s.std(), MIN_STD))
    lo, hi = map_range
    return float(lo), float(max(hi - lo, MIN_STD))


class PatchCoreEnsemble(ParameterErrorMixin, BaseEstimator):
    """The mean of several PatchCores' standardised scores and maps, a scikit-learn estimator.

    members: unfitted PatchCores (each with its own backbone and settings); None: `default_members()` at fit
        time (Lite0 with two stages and the embedded ViT with tiles x2, lab/anomaly-notes.md says why). They are
        cloned with their backbones shared, so the list given is never fitted itself.
    target_fpr, holdout, seed: as PatchCore's, and given to every member, so that they all hold out the same
        images (the ensemble's threshold is calibrated on those images' ensemble scores).
    threshold: an explicit decision threshold on ensemble scores; None: calibrated.
    progress: progress bars for the default members; None: only on a terminal.

    `fit` raises ParameterError (also scikit-learn's InvalidParameterError) for a hyperparameter outside its range
    (a member's own included) and DatasetError for no normal images.
    """

    _parameter_constraints: dict = {
        "members": [None, list, tuple],
        **{k: PatchCore._parameter_constraints[k] for k in ("target_fpr", "holdout", "threshold", "seed", "progress")},
    }

    def __init__(self, members: Sequence[PatchCore] | None = None, target_fpr: float = D.TARGET_FPR,
                 holdout: float = D.HOLDOUT, threshold: float | None = None, seed: int = D.SEED,
                 progress: bool | None = None) -> None:
        self.members = members
        self.target_fpr = target_fpr
        self.holdout = holdout
        self.threshold = threshold
        self.seed = seed
        self.progress = progress

    def set_params(self, **params: Any) -> "PatchCoreEnsemble":
        """As BaseEstimator's. A member's own setting (`members__0__coreset_ratio=...`) cannot be set through the
        ensemble (`members` is a list, and None stands for the default members): ParameterError says to pass new
        members, `set_params(members=[...])`."""
        nested = sorted(k for k in params if "__" in k)
        if nested:
            raise ParameterError(
                f"PatchCoreEnsemble.set_params({nested[0]}=...): a member's setting cannot be set through the ensemble; "
                "pass the members anew, e.g. set_params(members=[m.unfitted_copy(coreset_ratio=0.2) for m in "
                "members]) with members = ens.members or default_members()")
        return super().set_params(**params)

    def _fresh_members(self) -> list[PatchCore]:
        given = default_members(self.progress) if self.members is None else list(self.members)
        if not given or not all(isinstance(m, PatchCore) for m in given):
            raise ParameterError(f"PatchCoreEnsemble members must be a non-empty list of PatchCore, got {self.members!r}")
        # every member holds out the same normals and leaves the decision to the ensemble
        return [m.unfitted_copy(target_fpr=self.target_fpr, holdout=self.holdout, seed=self.seed, threshold=None)
                for m in given]

    def fit(self, images: Sequence[Any], y: Any = None) -> "PatchCoreEnsemble":
        """Fit every member on the same normals (paths, arrays or PIL images) and calibrate; returns self."""
        self._validate_params()
        images = image_list(images, "PatchCoreEnsemble.fit")
        if not images:
            raise DatasetError("PatchCoreEnsemble.fit got no normal images: give at least 1")
        members = self._fresh_members()
        with warnings.catch_warnings(record=True) as caught:      # each member would warn alike: the ensemble once
            warnings.simplefilter("always")
            for m in members:
                m.fit(images)
        n_hold = holdout_size(len(images), self.holdout)
        members_bound = calibration_warning(len(images), n_hold, self.holdout, self.target_fpr)
        unbounded = n_hold == 2 and self.threshold is None
        for w in {str(w.message): w for w in caught}.values():
            if not (unbounded and str(w.message) == members_bound):
                warnings.warn(w.message, w.category, stacklevel=2)
        if unbounded:     # each member's two held-out z-scores are -1 and +1: the threshold is 1/3 or 1, whatever the data
            warnings.warn("only 2 held-out normals: the ensemble scales each member by the mean and spread of their "
                          "two scores, which makes them -1 and +1 whatever they are, so its threshold bounds no "
                          "false-alarm rate, where a single PatchCore's would bound it by 1/3; give at least 3 "
                          f"held-out normals (more images or a larger holdout), {min_held_out(self.target_fpr)} for "
                          f"the target {self.target_fpr:g}", stacklevel=2)
        self._set_learned(members)
        self.updates_: list[dict] = []
        return self

    def partial_fit(self, images: Sequence[Any], y: Any = None, names: Sequence[str] | None = None,
                    calibration_images: Sequence[Any] | None = None) -> "PatchCoreEnsemble":
        """Add normal images to every member (`PatchCore.partial_fit`) and re-calibrate the ensemble; returns self.

        Every member holds out the same new images (they share the seed and the update count), so the ensemble's
        standardisers and threshold are computed again from the members' grown calibration scores exactly as at
        `fit`. What was added is appended to `updates_` (saved with the model). As for a PatchCore, an image an
        earlier update used, or one given twice, is skipped with a warning, and with nothing new the ensemble is left
        as it was. Raises NotFittedError before `fit`, DatasetError for no images, ParameterError while a member
        runs an int8 graph (`refuse_on_int8`).
        """
        self._check_fitted()
        from frozenvit.backbone.export import refuse_on_int8
        refuse_on_int8(self, "partial_fit")
        images, names, digests = new_normals(images, names, self.updates_, "PatchCoreEnsemble.partial_fit")
        if not images:
            return self
        calibration = image_list(calibration_images) if calibration_images is not None else None
        before = self.threshold_
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for m in self.members_:
                m._add_normals(images, names, digests, calibration)
        for w in {str(w.message): w for w in caught}.values():
            warnings.warn(w.message, w.category, stacklevel=2)
        self._set_learned(self.members_)
        u = self.members_[0].updates_[-1]
        self.updates_ = [*self.updates_, {
            **{k: u[k] for k in ("added_to_bank", "held_out", "added_to_bank_sha256", "held_out_sha256")},
            "bank_entries_added": sum(int(m.updates_[-1]["bank_entries_added"]) for m in self.members_),
            "threshold_before": before, "threshold_after": self.threshold_}]
        return self

    def _set_learned(self, members: list[PatchCore]) -> None:
        """Learned state from fitted members that held out the same normals."""
        self.members_ = members
        self.standardisers_ = [standardiser(m.calibration_scores_, m.map_range_) for m in members]
        self.holdout_indices_ = members[0].holdout_indices_
        self.calibration_scores_ = self._combine([m.calibration_scores_ for m in members]).astype(np.float32)
        calibrated = conformal_threshold(self.calibration_scores_, self.target_fpr) if len(self.holdout_indices_) else None
        self.threshold_ = float(self.threshold) if self.threshold is not None else calibrated
        self.map_range_ = tuple(float(v) for v in self._combine([np.asarray(m.map_range_) for m in members]))
        self.n_train_images_ = members[0].n_train_images_
        self.n_train_patches_ = sum(int(m.n_train_patches_) for m in members)

    def _combine(self, per_member: Sequence[Any]) -> Any:
        """Mean of the members' standardised values (scores or maps, same shape across members)."""
        return sum((np.asarray(v, np.float64) - loc) / scale
                   for v, (loc, scale) in zip(per_member, self.standardisers_)) / len(per_member)

    def _combine_map(self, per_member: Sequence[np.ndarray]) -> np.ndarray:
        """`_combine` of the members' maps (H, W) of one image as float32 (H, W), a strip of rows at a time: a large
        image's float64 sums stay the size of a strip (`STRIP_PIXELS`)."""
        h, w = per_member[0].shape
        out = np.empty((h, w), np.float32)
        rows = max(1, STRIP_PIXELS // max(1, w))
        for r in range(0, h, rows):
            out[r:r + rows] = self._combine([m[r:r + rows] for m in per_member])
        return out

    def _check_fitted(self) -> None:
        if not hasattr(self, "members_"):
            raise NotFittedError("this PatchCoreEnsemble is not fitted yet: call fit(normal_images) or "
                                 "load_detector(dir)")

    def decision_function(self, images: Sequence[Any]) -> np.ndarray:
        """Image scores (B,), no maps."""
        self._check_fitted()
        images = image_list(images, "PatchCoreEnsemble.decision_function")
        return self._combine([m.decision_function(images) for m in self.members_]).astype(np.float32)

    def decision_threshold(self) -> float | None:
        """As `PatchCore.decision_threshold`, on ensemble scores. Raises NotFittedError before `fit`."""
        self._check_fitted()
        return float(self.threshold) if self.threshold is not None else self.threshold_

    def threshold_at(self, target_fpr: float) -> float:
        """As `PatchCore.threshold_at`, on the held-out normals' ensemble scores."""
        self._check_fitted()
        from frozenvit.backbone.export import refuse_on_int8
        refuse_on_int8(self, "threshold_at")
        return threshold_at(self.calibration_scores_, target_fpr)

    def calibrate(self, images: Sequence[Any], target_fpr: float | None = None,
                  names: Sequence[str] | None = None) -> "PatchCoreEnsemble":
        """As `PatchCore.calibrate`, on the normals' ensemble scores (each member's backbone as it runs now)."""
        from .calibrate import calibrate

        return calibrate(self, images, target_fpr, names, "PatchCoreEnsemble.calibrate")

    def predict(self, images: Sequence[Any]) -> AnomalyPrediction:
        """As PatchCore.predict (a list of images, a (B, H, W, C) array or one image); `patch_scores` holds one entry
        per member (their own grids differ)."""
        self._check_fitted()
        images = image_list(images, "PatchCoreEnsemble.predict")
        preds = [m.predict(images) for m in self.members_]
        scores = self._combine([p.scores for p in preds]).astype(np.float32)
        maps = [self._combine_map(per_image) for per_image in zip(*(p.maps for p in preds))]
        t = self.decision_threshold()
        return AnomalyPrediction(scores, maps, None if t is None else scores > t, t, [p.patch_scores for p in preds])

    # ---- what `anomaly fit` prints ------------------------------------------------------------
    def describe(self) -> str:
        self._check_fitted()
        return "; ".join(f"{m.backbone_.name} blocks {m.blocks_}, bank {m.bank_.shape[0]} x {m.bank_.shape[1]}"
                         + (f", tiles {m.tile}" if m.tile is not None else "") for m in self.members_)

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, backbone_sources: Sequence[dict | None] | None = None,
             selection: dict | None = None) -> Path:
        """An atomic artifact directory: config.json and members/0, members/1, ... (PatchCore artifacts); returns
        its Path. `selection`: how the members were chosen (`PatchCoreSearch.selection()`), kept in config.json.
        Raises NotFittedError before writing anything when the ensemble is not fitted."""
        from frozenvit.backbone.suite.artifacts import atomic_dir, write_json

        self._check_fitted()
        sources = list(backbone_sources) if backbone_sources is not None else [None] * len(self.members_)
        cfg = {"kind": KIND, "format_version": FORMAT_VERSION, "n_members": len(self.members_),
               "params": {k: v for k, v in self.get_params(deep=False).items() if k != "members"},
               # "default": members=None (default_members at fit); "given": the saved members' own settings, which
               # load turns back into unfitted members (absent, artifacts written before: as "default")
               "members": "default" if self.members is None else "given",
               # a threshold withheld for an int8 run (`withhold_int8_decisions`) is still the model's own
               "threshold": self.threshold_ if getattr(self, "threshold_withheld_", None) is None
               else self.threshold_withheld_, "standardisers": [list(s) for s in self.standardisers_]}
        if self.updates_:
            cfg["updates"] = self.updates_
        if selection:
            cfg["selection"] = selection
        with atomic_dir(path, KIND, flag=SAVE_FLAG, replaces=(PATCHCORE_KIND,)) as tmp:
            for i, (m, src) in enumerate(zip(self.members_, sources)):
                m.save(tmp / "members" / str(i), backbone_source=src)
            write_json(tmp / "config.json", cfg)
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike, weights: str | os.PathLike | None = None,
             backbones: Sequence[Any] | None = None) -> "PatchCoreEnsemble":
        """Rebuild a saved ensemble; each member's backbone from its own record (ArtifactError if one cannot be).

        weights: the new path of a weights file that moved, for the members fitted with one (`PatchCore.load`'s
            `weights`; UsageError when no member was).
        backbones: one backbone (or None: rebuilt) per member, in `members/<i>` order, each checked as
            `PatchCore.load(path, backbone=)` checks it: e.g. `load_exported("deploy/member<i>")` of
            `frozenvit export anomaly`. ParameterError for another count. When any of them runs an int8 graph, the
            ensemble's float32-calibrated decisions are withheld (`withhold_int8_decisions`: a warning, threshold None,
            is_defect None) unless a threshold is set."""
        import json

        from frozenvit.backbone.export import DecisionsWithheld, withhold_int8_decisions
        from frozenvit.backbone.suite.artifacts import read_config
        from frozenvit.backbone.suite.errors import UsageError

        from .artifact import uses_weights_file

        path = Path(path)
        cfg = read_config(path, KIND, FORMAT_VERSION)
        try:
            n = int(cfg["n_members"])
            det = cls(**cfg["params"])
            folders = [path / "members" / str(i) for i in range(n)]
            if backbones is not None and len(backbones) != n:
                raise ParameterError(f"{len(backbones)} backbones for the {n} members of {path}: give one per member "
                                     "(None: rebuilt from the artifact)")
            bbs = list(backbones) if backbones is not None else [None] * n
            with_file = [uses_weights_file(json.loads((f / "config.json").read_text())) for f in folders]
            if weights is not None and not any(with_file):
                raise UsageError(f"no member of {path} was fitted with a weights file: drop --weights")
            with warnings.catch_warnings(record=True) as caught:      # int8 members: said once, for the ensemble
                warnings.simplefilter("always")
                members = [PatchCore.load(f, backbone=bb, weights=weights if file and bb is None else None)
                           for f, bb, file in zip(folders, bbs, with_file)]
            for w in {str(w.message): w for w in caught if not issubclass(w.category, DecisionsWithheld)}.values():
                warnings.warn(w.message, w.category, stacklevel=2)
            saved = [tuple(float(v) for v in s) for s in cfg["standardisers"]]
            given = cfg.get("members", "default")
            if given not in ("default", "given"):
                raise ValueError(f"members {given!r} is neither 'default' nor 'given'")
        except (UsageError, ParameterError):          # --weights or backbones that do not fit this model
            raise
        except (KeyError, TypeError, ValueError, OSError) as e:
            raise ArtifactError(f"{path}/config.json is not a complete {KIND} config ({type(e).__name__}: {e}); "
                                "refit the model") from e
        # the members it was given, unfitted, with the settings the fitted ones have (on their backbones), so that
        # clone(det).fit(images) fits the same kind of model; None: the default members
        det.members = [m.unfitted_copy() for m in members] if given == "given" else None
        if len({tuple(m.holdout_indices_) for m in members}) != 1:
            raise ArtifactError(f"{path}: the members were calibrated on different held-out normals; the artifact "
                                "is corrupt, refit it")
        det._set_learned(members)
        if not all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) for s, t in zip(saved, det.standardisers_)
                   for a, b in zip(s, t)) or len(saved) != n:
            raise ArtifactError(f"{path}: the members' calibration scores do not give the saved standardisers; the "
                                "artifact is corrupt, refit it")
        det.updates_ = list(cfg.get("updates", []))
        withhold_int8_decisions(det)     # int8 backbones given: no decisions at the float32 threshold
        return det


def load_detector(path: str | os.PathLike, weights: str | os.PathLike | None = None,
                  backbones: Sequence[Any] | None = None) -> PatchCore | PatchCoreEnsemble:
    """A saved PatchCore or PatchCoreEnsemble, whichever `path` holds (its config.json's kind).

    weights: the new path of the weights file a model fitted with `--weights FILE` was fitted with (checked against
        its recorded sha256). backbones: one backbone per member (a PatchCore: a list of one), e.g. the
        `load_exported` graphs of `frozenvit export anomaly`; None rebuilds them from the artifact. With any int8
        graph among them the detector decides nothing at its float32 threshold (threshold None, is_defect None, a
        warning saying why) until a threshold is set: `det.set_params(threshold=T)`, T chosen on int8 scores."""
    import json

    try:
        kind = json.loads((Path(path) / "config.json").read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None                 # PatchCore.load names what is wrong with the directory
    if kind == KIND:
        return PatchCoreEnsemble.load(path, weights=weights, backbones=backbones)
    if backbones is not None and len(backbones) != 1:
        raise ParameterError(f"{len(backbones)} backbones for the single PatchCore of {path}: give one")
    return PatchCore.load(path, backbone=None if backbones is None else backbones[0], weights=weights)
