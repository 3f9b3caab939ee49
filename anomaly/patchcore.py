"""PatchCore on frozen ViT (or ConvNet) patch grids (Roth et al., "Towards Total Recall in Industrial Anomaly Detection").

    det = PatchCore(backbone=bb, blocks=(7, 10), coreset_ratio=0.1).fit(normal_images)
    out = det.predict(test_images)   # out.scores (B,), out.maps [(H_i, W_i)], out.is_defect (B,)

fit:     normals -> patch features (features.py; tiles and augmented copies there) -> coreset bank (coreset.py)
         -> faiss index (search.py); a held-out split of the normals is scored to calibrate the threshold
         (threshold.py).
partial_fit: more normals (false alarms marked normal) -> their coreset appended to the bank; the threshold
         re-calibrated on the earlier and the new held-out normals.
predict: patch score = distance to the nearest bank entry -> image score (scoring.py) and the defect map at the
         original image size (anomaly_map.py) -> decision at the threshold.
calibrate: normals the model never saw, scored as it runs now (an int8 graph, say) -> the threshold set on their
         scores (calibrate.py).
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions

from frozenvit.backbone.suite.errors import ParameterError, ParameterErrorMixin

from . import defaults as D
from .anomaly_map import anomaly_maps
from .coreset import coreset_bank
from .errors import DatasetError
from .features import AUGMENTS, PatchFeatures, default_blocks, tiling_of
from .images import image_list
from .scoring import IMAGE_SCORES, image_score_of_inputs, inner_indices, reweighted_max, topk_mean
from .search import INDEX_KINDS, build_index, knn
from .threshold import calibration_warning, conformal_threshold, holdout_size, threshold_at
from .tiling import Tiling
from .updates import new_normals

_POSITIVE = Interval(Integral, 1, None, closed="left")
_FRACTION = Interval(Real, 0, 1, closed="right")          # (0, 1]
_FROM_ZERO = Interval(Real, 0, 1, closed="left")          # [0, 1)


@dataclass
class AnomalyPrediction:
    scores: np.ndarray            # (B,) image scores, higher = more anomalous
    maps: list[np.ndarray]        # (H_i, W_i) float32 defect maps at each image's original size
    is_defect: np.ndarray | None  # (B,) bool, scores > threshold; None when the model has no threshold (uncalibrated)
    threshold: float | None       # None: uncalibrated (too few normals to hold any out, and none given)
    patch_scores: np.ndarray | list[np.ndarray]   # (B, h, w) distances to the nearest normal patch; [(T_i, h, w)]
                                                  # when any image was tiled


class PatchCore(ParameterErrorMixin, BaseEstimator):
    """Anomaly detector on a frozen backbone, a scikit-learn estimator.

    The constructor stores hyperparameters and does nothing else (`get_params`, `set_params`,
    `sklearn.base.clone` and the repr come from `BaseEstimator`); `fit` checks them (`_parameter_constraints`).
    `fit` learns from normal images only and returns self; learned state ends with `_`; `predict`,
    `decision_function` and `save` never change it.

    backbone: a `backbone.FrozenBackbone`; None loads the anomaly default at fit time (`defaults.BACKBONE`:
        EfficientNet-Lite0, ImageNet weights from a core dependency; lab/anomaly-notes.md says why).
    blocks: backbone blocks to fuse (negative: from the end); None: two intermediate blocks (`default_blocks`:
        for a ConvNet, its stride-8 and stride-16 stages). Grids of different sizes are fused on the finest.
    coreset_ratio: bank size as a fraction of training patches, in (0, 1] (greedy k-center).
    coreset: "exact" (`defaults.CORESET`): the greedy k-center selection of coreset_ratio x all training patches,
        covering every patch. "auto": the same up to `defaults.CORESET_KNEE` patches; past it the bank grows as the
        square root of the patches (coreset_ratio x sqrt(knee x N)), and its centres are chosen to cover a seeded
        random sample of `defaults.CORESET_COVER` x the bank's size rather than all N (`coreset.greedy_coreset`),
        so fit time grows about linearly with the training set instead of quadratically.
    proj_dim: random-projection width used only inside the coreset selection; None: no projection.
    reduce_dim: channel pooling of the fused features (`features.reduced_width`): a fraction of the
        fused width (0.25: 384 -> 96 channels for two ViT-Ti blocks), an absolute channel count, or
        None to keep all. Pooling shrinks the bank and the exact search by the same factor.
    center: subtract a robust image-wide reference token (`features.center_tokens`, per block) before
        aggregation. Trained ViT tokens carry an image-wide component that attention spreads from a
        defect to every patch; removing it keeps the map local. The trimmed mean it uses, unlike the
        mean, is not moved by a defect covering less than half the image. It also hides anomalies
        that only shift the whole image.
    aggregation: odd neighbourhood size averaged on the grid; 1 disables. "auto" (`defaults.AGGREGATION`): 1 on
        a ViT, whose 16-px tokens a 3x3 mean would spread over 48 px, and 3 (the paper's) on a ConvNet;
        `aggregation_size()` says what a fitted model uses.
    image_score: "reweighted" (paper, b = num_neighbors), "max", or "topk" (mean of top topk_frac).
    score_border: rings of patches along each model input's edges (the fused grid's outermost rows and
        columns, per side) left out of the image score; the maps keep them. A ConvNet's border patches see
        its zero padding and average fewer neighbours, so normal ones lie farther from the bank. 0: every
        patch counts. "auto" (`defaults.SCORE_BORDER`): 1 for a ConvNet backbone (one with stage strides) whose
        grid has a patch left inside the ring, else 0 (ViTs: no padding); `border_rings()` says what a fitted
        model uses.
    index: "flat" (exact), "ivf" or "ivfpq" (approximate, large banks); nprobe for the IVF ones. "auto"
        (`defaults.INDEX`): "flat" for a bank under `defaults.IVF_MIN_BANK` entries, "ivf" from there on
        (`index_kind()`); the model stores the index it built.
    target_fpr: false-alarm rate in (0, 1) the threshold is calibrated to on held-out normals.
    holdout: fraction in [0, 1) of the training normals held out for that calibration: round(holdout * n)
        images, at least 1 left for the bank. When that rounds to 0 (1 or 2 images at the default 0.2, or
        holdout=0: every image goes into the bank) the threshold is NOT calibrated: `fit` warns,
        `threshold_` is None and predictions carry no decision (`is_defect` None), unless `threshold` is given.
    threshold: an explicit decision threshold on image scores; None: calibrated on the held-out normals.
        Given, it wins over the calibrated one, at fit time and at predict time (`set_params(threshold=...)`
        on a fitted model takes effect without refitting).
    tile: None (the whole image is resized to the model input), "auto" (`defaults.TILE`: an image within 1.5x
        of the input's aspect is resized whole; a longer one is cut into tiles as large as its short side, so
        nothing is stretched; `tiling_of`) or the tile scale: images are cut into overlapping tiles of the
        model input's aspect, `tile` x its size in original pixels (1.0: one image pixel per model pixel),
        each scored against one bank built from the normals' tiles; the maps are stitched back onto the
        original pixels, overlaps averaged, then smoothed once (sigma x the tile's original pixels per model
        pixel). An image's score is the same rule as untiled, over the patches of all its tiles
        (reweighted/max: the score of the tile holding the worst patch; topk: the top fraction of all its
        tile patches). For images much larger than the model input, e.g. thin cracks.
    tile_overlap: least overlap of neighbouring tiles, a fraction of a tile in [0, 1) (`tiling.Tiling`).
    augment: None, or copies of every bank image (or tile) added to the bank, as in AnomalyDINO's
        few-shot setting: "flips" (horizontal, vertical, both: 4x), "rot90" (quarter turns: 4x) or "all"
        (the 8 symmetries of a square). For parts that are upright-agnostic; rotating a non-square input
        also changes how it is stretched to the model input. Test images are never augmented.
    sigma: Gaussian smoothing of maps in model-canvas pixels (0: none).
    batch_size: images (or tiles) per backbone forward pass.
    coreset_chunk: if set, features are reduced chunk by chunk (about this many patches per
        chunk) so all training features never sit in memory at once.
    seed: seeds the holdout split, the projection and the coreset start; equal seeds, equal models.
    progress: progress bars; None: only on a terminal.

    `fit` raises ParameterError (also scikit-learn's InvalidParameterError, a ValueError) for a hyperparameter
    outside its range or one that does not fit the backbone, and DatasetError for no normal images.
    """

    _parameter_constraints: dict = {
        "backbone": "no_validation",
        "blocks": [None, "array-like"],
        "coreset_ratio": [_FRACTION],
        "coreset": [StrOptions({"auto", "exact"})],
        "proj_dim": [None, _POSITIVE],
        "reduce_dim": [None, _POSITIVE, Interval(RealNotInt, 0, 1, closed="right")],
        "center": ["boolean"],
        "aggregation": [StrOptions({"auto"}), _POSITIVE],                # odd: checked in `_setup_backbone`
        "image_score": [StrOptions(set(IMAGE_SCORES))],
        "num_neighbors": [_POSITIVE],
        "topk_frac": [_FRACTION],
        "score_border": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        "index": [StrOptions({"auto", *INDEX_KINDS})],
        "nprobe": [_POSITIVE],
        "target_fpr": [Interval(Real, 0, 1, closed="neither")],
        "holdout": [_FROM_ZERO],
        "threshold": [None, Interval(Real, -math.inf, math.inf, closed="neither")],
        "tile": [None, StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "tile_overlap": [_FROM_ZERO],
        "augment": [None, StrOptions(set(AUGMENTS))],
        "sigma": [Interval(Real, 0, None, closed="left")],
        "batch_size": [_POSITIVE],
        "coreset_chunk": [None, _POSITIVE],
        "seed": [Interval(Integral, 0, None, closed="left")],
        "progress": [None, "boolean"],
    }

    def __init__(self, backbone: Any = None, blocks: Sequence[int] | None = None, coreset_ratio: float = D.CORESET_RATIO,
                 coreset: str = D.CORESET, proj_dim: int | None = 128, reduce_dim: int | float | None = D.REDUCE_DIM, center: bool = True,
                 aggregation: int | str = D.AGGREGATION,
                 image_score: str = D.IMAGE_SCORE, num_neighbors: int = 9, topk_frac: float = D.TOPK_FRAC,
                 score_border: int | str = D.SCORE_BORDER,
                 index: str = D.INDEX, nprobe: int = 8, target_fpr: float = D.TARGET_FPR, holdout: float = D.HOLDOUT,
                 threshold: float | None = None, tile: float | str | None = D.TILE,
                 tile_overlap: float = D.TILE_OVERLAP, augment: str | None = D.AUGMENT, sigma: float = 4.0,
                 batch_size: int = D.BATCH_SIZE, coreset_chunk: int | None = D.CORESET_CHUNK, seed: int = D.SEED,
                 progress: bool | None = None) -> None:
        self.backbone = backbone
        self.blocks = blocks
        self.coreset_ratio = coreset_ratio
        self.coreset = coreset
        self.proj_dim = proj_dim
        self.reduce_dim = reduce_dim
        self.center = center
        self.aggregation = aggregation
        self.image_score = image_score
        self.num_neighbors = num_neighbors
        self.topk_frac = topk_frac
        self.score_border = score_border
        self.index = index
        self.nprobe = nprobe
        self.target_fpr = target_fpr
        self.holdout = holdout
        self.threshold = threshold
        self.tile = tile
        self.tile_overlap = tile_overlap
        self.augment = augment
        self.sigma = sigma
        self.batch_size = batch_size
        self.coreset_chunk = coreset_chunk
        self.seed = seed
        self.progress = progress

    def unfitted_copy(self, **overrides: Any) -> "PatchCore":
        """A new, unfitted PatchCore with these hyperparameters (`overrides` replacing some) that shares the frozen
        backbone object: `sklearn.base.clone` would deep-copy it."""
        return type(self)(**{**self.get_params(deep=False), **overrides})

    # ---- fit ---------------------------------------------------------------------------------
    def fit(self, images: Sequence[Any], y: Any = None) -> "PatchCore":
        """Learn from normal images only (a list of uint8 arrays, PIL images or paths, or a (B, H, W, C) array;
        one (H, W, C) array is one image, `image_list`); returns self.

        round(holdout * n) images are held out to calibrate the threshold, the rest build the bank. With
        none to hold out (few-shot: 1 or 2 images at the default holdout) every image builds the bank and the
        threshold is not calibrated (a warning; `threshold_` None unless `threshold` is given).
        """
        self._validate_params()
        images = image_list(images, "PatchCore.fit")
        if not images:
            raise DatasetError("PatchCore.fit got no normal images: give at least 1 (the bank is built from them)")
        self._setup_backbone()
        n = len(images)
        n_hold = holdout_size(n, self.holdout)                          # 0: none to hold out
        perm = np.random.default_rng(self.seed).permutation(n)
        self.holdout_indices_ = np.sort(perm[:n_hold])
        train = [images[i] for i in np.sort(perm[n_hold:])]
        self.n_train_images_ = len(train)

        fx = self.feature_extractor()
        rows = (fx.rows(f) for f, _, _ in fx.batches(train, "features", augment=True))   # (b*h*w, D) each
        self.bank_, self.n_train_patches_ = coreset_bank(rows, self.coreset_ratio, proj_dim=self.proj_dim,
                                                         seed=self.seed, chunk=self.coreset_chunk,
                                                         **self._coreset_rule(), progress=self.progress)  # (M, D)
        self.index_ = build_index(self.bank_, self.index_kind(len(self.bank_)), nprobe=self.nprobe, seed=self.seed)

        if n_hold:
            patch, scores, _ = self._score([images[i] for i in self.holdout_indices_], "calibrate")
            calibrated = conformal_threshold(scores, self.target_fpr)
        else:   # the overlay scale then comes from (up to 16 of) the bank images: an underestimate of normal spread
            patch, scores, _ = self._score(train[:16], "overlay scale")
            scores, calibrated = scores[:0], None
        self.calibration_scores_ = scores                               # (n_hold,)
        self.updates_ = []                                              # partial_fit appends what it adds
        self.threshold_ = float(self.threshold) if self.threshold is not None else calibrated
        # overlay scale: transparent at the typical normal patch, saturated past the worst normal patch
        flat = np.concatenate([np.ravel(p) for p in patch])
        self.map_range_ = (float(np.median(flat)), float(flat.max()))
        message = None if self.threshold is not None else calibration_warning(n, n_hold, self.holdout, self.target_fpr)
        if message:
            warnings.warn(message, stacklevel=2)
        return self

    def partial_fit(self, images: Sequence[Any], y: Any = None, names: Sequence[str] | None = None,
                    calibration_images: Sequence[Any] | None = None) -> "PatchCore":
        """Add normal images to a fitted model (e.g. false alarms a reviewer marked normal); returns self.

        As in `fit`, round(holdout * n) of the n new images (seeded) are held out for calibration and the rest
        add their coreset, `coreset_ratio` of their patches, to the bank: the bank stays that fraction of the
        patches it has seen, and no earlier entry is dropped. The threshold (unless `threshold` is given) is
        re-calibrated at `target_fpr` on the earlier held-out normals plus the new held-out ones, all scored
        against the grown bank: `calibration_images`, the earlier held-out normals themselves, when given; else
        their stored scores (the bank only grew, so their nearest-patch distances can only be smaller or equal). What
        was added is appended to `updates_` (saved with the model): the images' `names` (default: their paths, "#k"
        for images in memory) and the sha256 of their pixels.

        Each image is added once: one that an earlier update used (the same path, or the same pixels under any
        name, `anomaly.updates`) or that is given twice is skipped with a warning, and with nothing new the model
        is left as it was (a warning says so; `updates_` does not grow). Raises NotFittedError before `fit`,
        DatasetError for no images, ParameterError while the backbone runs an int8 graph (`refuse_on_int8`).
        """
        self._check_fitted()
        from frozenvit.backbone.export import refuse_on_int8
        refuse_on_int8(self, "partial_fit")
        images, names, digests = new_normals(images, names, self.updates_, "PatchCore.partial_fit")
        if images:
            self._add_normals(images, names, digests, calibration_images)
        return self

    def _add_normals(self, images: list, names: list[str], digests: list[str],
                     calibration_images: Sequence[Any] | None) -> None:
        """`partial_fit` of images known to be new (`names` and pixel `digests` recorded)."""
        n_hold = holdout_size(len(images), self.holdout)
        perm = np.random.default_rng(self.seed + len(self.updates_) + 1).permutation(len(images))
        hold, add = np.sort(perm[:n_hold]), np.sort(perm[n_hold:])
        fx = self.feature_extractor()
        rows = (fx.rows(f) for f, _, _ in fx.batches([images[i] for i in add], "features", augment=True))
        new_bank, n_patches = coreset_bank(rows, self.coreset_ratio, proj_dim=self.proj_dim, seed=self.seed,
                                           chunk=self.coreset_chunk, **self._coreset_rule(),
                                           progress=self.progress)                             # (M', D)
        before = self.threshold_
        self.bank_ = np.ascontiguousarray(np.concatenate([self.bank_, new_bank]), np.float32)   # (M + M', D)
        self.index_ = build_index(self.bank_, self.index_kind(len(self.bank_)), nprobe=self.nprobe, seed=self.seed)
        self.n_train_images_ += len(add)
        self.n_train_patches_ += n_patches
        old = (self._score(image_list(calibration_images), "calibrate")[1] if calibration_images is not None
               else np.asarray(self.calibration_scores_, np.float32))
        new = self._score([images[i] for i in hold], "calibrate")[1] if n_hold else np.zeros(0, np.float32)
        self.calibration_scores_ = np.concatenate([old, new]).astype(np.float32)              # (n_hold + n_new,)
        if self.threshold is not None:
            self.threshold_ = float(self.threshold)
        elif len(self.calibration_scores_):
            self.threshold_ = conformal_threshold(self.calibration_scores_, self.target_fpr)
        self.updates_ = [*self.updates_, {
            "added_to_bank": [names[i] for i in add], "held_out": [names[i] for i in hold],
            "added_to_bank_sha256": [digests[i] for i in add], "held_out_sha256": [digests[i] for i in hold],
            "bank_entries_added": int(len(new_bank)), "threshold_before": before, "threshold_after": self.threshold_}]

    def _setup_backbone(self) -> None:
        """Set backbone_ (the given one, or the default of anomaly/defaults.py), blocks_ (0-based) and grid_ (the
        finest grid of those blocks, where the bank lives). Raises ParameterError for blocks the backbone lacks,
        an even aggregation, or a score_border that leaves no patch of the grid."""
        if self.aggregation != "auto" and self.aggregation % 2 == 0:
            raise ParameterError(f"PatchCore aggregation must be 'auto' or an odd positive int, got {self.aggregation!r}")
        self.backbone_ = self.backbone if self.backbone is not None else D.load_default_backbone()
        config = self.backbone_.config
        default = default_blocks(config.depth, config.strides)
        try:
            self.blocks_ = tuple(self.backbone_.resolve_blocks(self.blocks if self.blocks is not None else default))
        except (ValueError, TypeError) as e:
            how = "" if isinstance(e, ParameterError) else (f"; pick 0-based indices below {config.depth} "
                                                             "(negatives count from the end)")
            raise ParameterError(f"PatchCore blocks={self.blocks!r}: {e}{how}; or None for {default}") from e
        self.grid_ = max((tuple(config.grid_of(b)) for b in self.blocks_), key=math.prod)
        if self.score_border != "auto" and 2 * self.score_border >= min(self.grid_):
            raise ParameterError(f"PatchCore score_border={self.score_border} leaves no patch of the {self.grid_[0]}x"
                                 f"{self.grid_[1]} grid to score; use at most {(min(self.grid_) - 1) // 2}")

    # ---- predict -------------------------------------------------------------------------------
    def predict(self, images: Sequence[Any]) -> AnomalyPrediction:
        """Scores, maps at original size and decisions for a list of images (arrays, PIL or paths), a (B, H, W, C)
        array, or one image: a path, a PIL image or one (H, W[, C]) array (`image_list`; ImageFormatError for an
        array that is neither). Decisions (`is_defect`) are None when the model has no threshold (uncalibrated,
        none given)."""
        patch, scores, where = self._score(image_list(images, "PatchCore.predict"), "predict")
        maps = anomaly_maps(patch, where, self.sigma)
        t = self.decision_threshold()
        return AnomalyPrediction(scores, maps, None if t is None else scores > t, t, patch)

    def decision_function(self, images: Sequence[Any]) -> np.ndarray:
        """Image scores (B,), no maps (cheaper than predict); `images` as `predict`'s."""
        return self._score(image_list(images, "PatchCore.decision_function"))[1]

    def decision_threshold(self) -> float | None:
        """The threshold decisions use: `threshold` if given, else the calibrated `threshold_` (None: none).
        Raises NotFittedError before `fit`."""
        self._check_fitted()
        return float(self.threshold) if self.threshold is not None else self.threshold_

    def threshold_at(self, target_fpr: float) -> float:
        """The threshold calibrated at another false-alarm rate on the stored held-out normals' scores
        (`calibration_scores_`), without refitting: `set_params(threshold=det.threshold_at(0.05))` decides at it.
        Raises ParameterError when the model has no held-out normals or too few for `target_fpr` (`threshold_at`),
        or reads its grids from an int8 graph (`refuse_on_int8`: the stored scores are float32 ones)."""
        self._check_fitted()
        from frozenvit.backbone.export import refuse_on_int8
        refuse_on_int8(self, "threshold_at")
        return threshold_at(self.calibration_scores_, target_fpr)

    def calibrate(self, images: Sequence[Any], target_fpr: float | None = None,
                  names: Sequence[str] | None = None) -> "PatchCore":
        """Decide at the threshold calibrated on `images`, normals the model never saw, scored as `predict` scores
        them now (through the backbone in use: an int8 graph of `load_exported` or `use_runtime` included); returns
        self. The threshold is their conformal one at `target_fpr` (None: the model's): a new normal like them
        scores above it with probability at most target_fpr given at least `min_held_out(target_fpr)` of them,
        else at most 1/(n + 1) (a warning says so). Sets `threshold` (as `set_params(threshold=T)`) and
        `calibrated_on_` ({"n_normals", "target_fpr", "threshold", "false_alarm_bound"}); `anomaly/calibrate.py`.
        Raises NotFittedError before `fit`, DatasetError for no images or images an update added to the bank (by
        the sha256 of their pixels; the original fit's normals are not recorded: never pass them)."""
        from .calibrate import calibrate

        return calibrate(self, images, target_fpr, names, "PatchCore.calibrate")

    def _score(self, images: Sequence[Any], desc: str = "score") -> tuple[Any, np.ndarray, list]:
        """Patch scores ((B, h, w) untiled, [(T_i, h, w)] tiled), image scores (B,), and where each image lies:
        its GridMapping untiled, (Tiling, tile GridMapping) tiled."""
        patches, scores, where = [], [], []
        for d, s, w in self._scored(image_list(images), desc):
            patches.append(d)
            scores.append(s)
            where.append(w)
        if patches and not any(isinstance(w, tuple) for w in where):   # no image was tiled: as untiled
            patches = np.concatenate(patches)                           # (B, h, w)
        return patches, np.asarray(scores, np.float32), where

    def _scored(self, images: Sequence[Any], desc: str) -> Iterator[tuple[np.ndarray, float, Any]]:
        """Per image, in order: patch scores (T, h, w) of its T inputs (1 untiled), image score, where it lies."""
        self._check_fitted()
        fx, rings = self.feature_extractor(), self.border_rings()
        pending: list = []                                              # [(image no, dist (h, w), score, where)]

        def finish() -> tuple[np.ndarray, float, Any]:
            d = np.stack([p[1] for p in pending])                       # (T, h, w)
            score = image_score_of_inputs(d, [p[2] for p in pending], self.image_score, rings, self.topk_frac)
            return d, score, pending[0][3]

        for feats, mappings, owners in fx.batches(images, desc):
            b, d, h, w = feats.shape
            q = fx.rows(feats)                                          # (b*h*w, D)
            dist, nn = knn(self.index_, q, 1)                           # (b*h*w, 1)
            dist, nn = dist.reshape(b, h * w), nn.reshape(b, h * w)
            scores = self.image_scores_from(dist, nn, q.reshape(b, h * w, d))   # (b,) per input
            for (i, tiling), m, dd, s in zip(owners, mappings, dist, scores):
                if pending and pending[0][0] != i:
                    yield finish()
                    pending = []
                pending.append((i, dd.reshape(h, w), float(s), m if tiling is None else (tiling, m)))
        if pending:
            yield finish()

    def image_scores_from(self, dist: np.ndarray, nn: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Image scores (B,) from nearest-bank distances dist (B, N), indices nn (B, N), features (B, N, D), N
        patches row-major on `grid_`; only the patches inside `border_rings()` count."""
        keep = inner_indices(self.grid_, self.border_rings())
        if keep is not None and dist.shape[1] != math.prod(self.grid_):
            raise ValueError(f"score_border needs patch scores on the {self.grid_} grid, got {dist.shape[1]} patches")
        scored = dist if keep is None else dist[:, keep]                # (B, N') the patches that count
        if self.image_score == "max":
            return scored.max(axis=1)
        if self.image_score == "topk":
            return topk_mean(scored, self.topk_frac)
        b = np.arange(len(dist))
        j = scored.argmax(axis=1)                                       # (B,) most anomalous patch
        j = j if keep is None else keep[j]                              # its index among all N
        m_star = nn[b, j]                                               # (B,) its nearest bank entry
        k = min(self.num_neighbors, len(self.bank_))
        _, nb = knn(self.index_, self.bank_[m_star], k)                 # (B, k) neighbours of m* in the bank
        d_nb = np.linalg.norm(self.bank_[nb] - queries[b, j][:, None, :], axis=2)   # (B, k)
        return reweighted_max(dist[b, j], d_nb)

    # ---- settings resolved for the fitted backbone ------------------------------------------------
    def feature_extractor(self) -> PatchFeatures:
        """How this model turns images into patch features (once fitted)."""
        return PatchFeatures(self.backbone_, self.blocks_, center=self.center, aggregation=self.aggregation_size(),
                             reduce_dim=self.reduce_dim, tile=self.tile, tile_overlap=self.tile_overlap,
                             augment=self.augment, batch_size=self.batch_size, progress=self.progress)

    def tiling_of(self, image_size: tuple[int, int]) -> Tiling | None:
        """The tiles an image of `image_size` (H0, W0) is cut into (`features.tiling_of`), or None: it goes whole."""
        return tiling_of(image_size, tuple(self.backbone_.config.img_size), self.tile, self.tile_overlap)

    def tiles_of(self, image_size: tuple[int, int]) -> Tiling | None:
        """As `tiling_of`, but None also for one window that is the image itself: what the model really reads
        (`PatchFeatures.tiles_of`)."""
        return self.feature_extractor().tiles_of(image_size)

    def _coreset_rule(self) -> dict:
        """`coreset_bank`'s knee and cover for `coreset` (both None: the exact selection)."""
        if self.coreset == "exact":
            return {"knee": None, "cover": None}
        return {"knee": D.CORESET_KNEE, "cover": D.CORESET_COVER}

    def aggregation_size(self) -> int:
        """Neighbourhood averaged on the grid: `aggregation`, with "auto" resolved for the backbone (3 for a ConvNet,
        one with stage strides; 1 for a ViT)."""
        if self.aggregation != "auto":
            return int(self.aggregation)
        return 3 if self.backbone_.config.strides else 1

    def border_rings(self) -> int:
        """Rings of edge patches left out of image scores: `score_border`, with "auto" resolved for the backbone
        (1 for a ConvNet with a grid of at least 3x3, else 0)."""
        if self.score_border != "auto":
            return int(self.score_border)
        return int(bool(self.backbone_.config.strides) and min(self.grid_) >= 3)

    def index_kind(self, bank_size: int) -> str:
        """The index built over a bank of `bank_size` entries: `index`, with "auto" resolved ("flat" under
        `defaults.IVF_MIN_BANK` entries, else "ivf")."""
        if self.index != "auto":
            return self.index
        return "ivf" if bank_size >= D.IVF_MIN_BANK else "flat"

    def _check_fitted(self) -> None:
        if not hasattr(self, "index_"):
            raise NotFittedError("this PatchCore is not fitted yet: call fit(normal_images) or PatchCore.load(dir)")

    # ---- persistence (see anomaly/artifact.py) --------------------------------------------------
    def save(self, path: str | os.PathLike, backbone_source: dict | None = None, selection: dict | None = None) -> Path:
        """Write an atomic artifact directory (config.json, bank.safetensors, index.faiss); returns its Path.
        `selection`: how the configuration was chosen (`PatchCoreSearch.selection()`), kept in config.json.
        Raises NotFittedError before writing anything when the model is not fitted."""
        from .artifact import save_patchcore

        self._check_fitted()
        save_patchcore(self, path, backbone_source, selection)
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike, backbone: Any = None, weights: str | os.PathLike | None = None) -> "PatchCore":
        """Read an artifact; `backbone` must be the one it was fitted on (checked), None rebuilds it. `weights`: for
        a model fitted with a weights file that has moved, the file's new path (ArtifactError unless its sha256 is
        the one the model recorded; UsageError for a model fitted without a weights file)."""
        from .artifact import load_patchcore

        return load_patchcore(cls, path, backbone, weights)
