"""PatchCore on frozen ViT (or ConvNet) patch grids (Roth et al., "Towards Total Recall in Industrial Anomaly Detection").

    det = PatchCore(backbone=bb, blocks=(7, 10), coreset_ratio=0.1).fit(normal_images)
    out = det.predict(test_images)   # out.scores (B,), out.maps [(H_i, W_i)], out.is_defect (B,)

fit: features of the training normals (tokens minus a robust image-wide token, a 3x3 local mean per block on a
ConvNet (none on a ViT: `aggregation`), blocks fused on the finest grid) -> greedy k-center coreset -> faiss
index; a held-out split of the normals is scored to calibrate the decision threshold at `target_fpr`.
predict: patch score = distance to the nearest bank entry; image score = reweighted maximum (or top-1% mean);
map = patch scores on the model canvas, Gaussian(sigma) there, then resampled onto the ORIGINAL image by the
backbone's GridMapping. With `tile`, the backbone sees overlapping windows of each image instead
(anomaly/tiling.py) and the windows' maps are stitched back; with too few normals to hold any out, the
threshold stays uncalibrated.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from itertools import islice
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from frozenvit.backbone.preprocess import to_rgb_uint8
from frozenvit.backbone.suite.errors import UsageError
from frozenvit.backbone.suite.progress import progress_bar

from .coreset import chunked_coreset, greedy_coreset
from .defaults import AGGREGATION, INDEX, IVF_MIN_BANK, SCORE_BORDER, TILE
from .errors import DatasetError
from .images import as_image
from .scoring import (center_tokens, fuse_blocks, local_aggregate, original_maps, reduced_width, reweighted_max,
                      tiled_original_map, topk_mean)
from .search import INDEX_KINDS, build_index, knn
from .tiling import Tiling

IMAGE_SCORES = ("reweighted", "max", "topk")
# the copies of each bank image that `augment` adds (the identity first): flips, quarter turns, or all 8 symmetries
AUGMENTS = {
    "flips": (lambda a: a, lambda a: a[:, ::-1], lambda a: a[::-1], lambda a: a[::-1, ::-1]),
    "rot90": tuple((lambda a, k=k: np.rot90(a, k)) for k in range(4)),
}
# tile="auto" leaves an image whole (resized as untiled) when its aspect is within this factor of the model input's
AUTO_TILE_ASPECT = 1.5
AUGMENTS["all"] = AUGMENTS["rot90"] + tuple((lambda a, k=k: np.rot90(a[:, ::-1], k)) for k in range(4))


def default_blocks(depth: int, strides: Sequence[int] = ()) -> tuple[int, ...]:
    """Two intermediate blocks, never the last.

    ViT (no `strides`): (7, 10) for 12 blocks, (1, 2) for 4. ConvNet (`strides`, each stage's stride in
    pixels): the paper's stride-8 and stride-16 stages (a ResNet's layer2 and layer3), or, for a ConvNet
    without them, the two stages before the last.
    """
    if strides:
        paper = tuple(strides.index(s) for s in (8, 16) if s in strides)
        if len(paper) == 2:
            return paper
        return tuple(range(max(0, len(strides) - 3), max(1, len(strides) - 1)))
    if depth <= 2:
        return (0,)
    b2 = depth - 2
    b1 = min(round(0.6 * depth), b2 - 1)
    return (max(0, b1), b2)


@dataclass
class AnomalyPrediction:
    scores: np.ndarray            # (B,) image scores, higher = more anomalous
    maps: list[np.ndarray]        # (H_i, W_i) float32 defect maps at each image's original size
    is_defect: np.ndarray | None  # (B,) bool, scores > threshold; None when the model has no threshold (uncalibrated)
    threshold: float | None       # None: uncalibrated (too few normals to hold any out, and none given)
    patch_scores: np.ndarray | list[np.ndarray]   # (B, h, w) distances to the nearest normal patch; [(T_i, h, w)]
                                                  # when any image was tiled


class PatchCore(BaseEstimator):
    """Anomaly detector on a frozen backbone, a scikit-learn estimator.

    The constructor stores hyperparameters and does nothing else (`get_params`, `set_params`,
    `sklearn.base.clone` and the repr come from `BaseEstimator`); they are checked by `fit`. `fit`
    learns from normal images only and returns self; learned state ends with `_`; `predict`,
    `decision_function` and `anomaly_maps` never change it.

    backbone: a `backbone.FrozenBackbone`; None loads the anomaly default at fit time (`defaults.BACKBONE`:
        EfficientNet-Lite0, ImageNet weights from a core dependency; docs/anomaly.md says why).
    blocks: backbone blocks to fuse (negative: from the end); None: two intermediate blocks (`default_blocks`:
        for a ConvNet, its stride-8 and stride-16 stages). Grids of different sizes are fused on the finest.
    coreset_ratio: bank size as a fraction of training patches, in (0, 1] (greedy k-center).
    proj_dim: random-projection width used only inside the coreset selection; None: no projection.
    reduce_dim: channel pooling of the fused features (`scoring.reduced_width`): a fraction of the
        fused width (0.25: 384 -> 96 channels for two ViT-Ti blocks), an absolute channel count, or
        None to keep all. Pooling shrinks the bank and the exact search by the same factor.
    center: subtract a robust image-wide reference token (`center_tokens`, per block) before
        aggregation. Trained ViT tokens carry an image-wide component that attention spreads from a
        defect to every patch; removing it keeps the map local. The trimmed mean it uses, unlike the
        mean, is not moved by a defect covering less than half the image. It also hides anomalies
        that only shift the whole image.
    aggregation: odd neighbourhood size averaged on the grid; 1 disables. "auto" (the default,
        `defaults.AGGREGATION`): 1 on a ViT, whose 16-px tokens a 3x3 mean would spread over 48 px, and 3 (the
        paper's) on a ConvNet; `aggregation_()` says what a fitted model uses. Models saved with a number keep it.
    image_score: "reweighted" (paper, b = num_neighbors), "max", or "topk" (mean of top topk_frac).
    score_border: rings of patches along each model input's edges (the fused grid's outermost rows and
        columns, per side) left out of the image score; the maps keep them. A ConvNet's border patches see
        its zero padding and average fewer neighbours, so normal ones lie farther from the bank: on tiled
        KolektorSDD the worst patch of every good test image sat on a tile's outer ring (docs/anomaly.md).
        0: every patch counts (models saved before this option load with 0). "auto" (the default,
        `defaults.SCORE_BORDER`): 1 for a ConvNet backbone (one with stage strides) whose grid has a patch
        left inside the ring, else 0 (ViTs: no padding). `border_()` says what a fitted model uses.
    index: "flat" (exact), "ivf" or "ivfpq" (approximate, large banks); nprobe for the IVF ones. "auto" (the
        default, `defaults.INDEX`): "flat" for a bank under `defaults.IVF_MIN_BANK` (10,000) entries, "ivf" from
        there on (`index_kind()`); the model stores the index it built.
    target_fpr: false-alarm rate in (0, 1) the threshold is calibrated to on held-out normals.
    holdout: fraction in [0, 1) of the training normals held out for that calibration: round(holdout * n)
        images, at least 1 left for the bank. When that rounds to 0 (1 or 2 images at the default 0.2, or
        holdout=0: every image goes into the bank) the threshold is NOT calibrated: `fit` warns,
        `threshold_` is None and predictions carry no decision (`is_defect` None), unless `threshold` is given.
    threshold: an explicit decision threshold on image scores; None: calibrated on the held-out normals.
        Given, it wins over the calibrated one, at fit time and at predict time (`set_params(threshold=...)`
        on a fitted model takes effect without refitting).
    tile: None (the whole image is resized to the model input), "auto" (the default, `defaults.TILE`: an image
        within 1.5x of the input's aspect is resized whole; a longer one is cut into tiles as large as its short
        side, so nothing is stretched; `tiling_of`) or the tile scale: images are cut into
        overlapping tiles of the model input's aspect, `tile` x its size in original pixels (1.0: one image
        pixel per model pixel), each scored against one bank built from the normals' tiles; the maps are
        stitched back onto the original pixels, overlaps averaged, then smoothed once (sigma x the tile's
        original pixels per model pixel). An image's score is the same rule as untiled, over the patches
        of all its tiles (reweighted/max: the score of the tile holding the worst patch; topk: the top
        fraction of all its tile patches). For images much larger than the model input, e.g. thin cracks.
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

    Raises UsageError (a ValueError) from `fit` for a hyperparameter outside its range and
    DatasetError for no normal images.
    """

    def __init__(self, backbone: Any = None, blocks: Sequence[int] | None = None, coreset_ratio: float = 0.1,
                 proj_dim: int | None = 128, reduce_dim: int | float | None = 0.25, center: bool = True,
                 aggregation: int | str = AGGREGATION,
                 image_score: str = "reweighted", num_neighbors: int = 9, topk_frac: float = 0.01,
                 score_border: int | str = SCORE_BORDER,
                 index: str = INDEX, nprobe: int = 8, target_fpr: float = 0.01, holdout: float = 0.2,
                 threshold: float | None = None, tile: float | str | None = TILE, tile_overlap: float = 0.25,
                 augment: str | None = None, sigma: float = 4.0, batch_size: int = 16,
                 coreset_chunk: int | None = None, seed: int = 0, progress: bool | None = None) -> None:
        self.backbone = backbone
        self.blocks = blocks
        self.coreset_ratio = coreset_ratio
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

    # ---- features ---------------------------------------------------------------------------
    def _check_params(self) -> None:
        def whole(v: Any, lo: int) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo

        def real(v: Any) -> bool:
            return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)

        checks = [   # (parameter, acceptable, what it must be)
            ("coreset_ratio", real(self.coreset_ratio) and 0 < self.coreset_ratio <= 1, "a fraction in (0, 1]"),
            ("proj_dim", self.proj_dim is None or whole(self.proj_dim, 1), "None or a positive int"),
            ("aggregation", self.aggregation == "auto" or (whole(self.aggregation, 1) and self.aggregation % 2 == 1),
             "'auto' or an odd positive int"),
            ("image_score", self.image_score in IMAGE_SCORES, f"one of {IMAGE_SCORES}"),
            ("num_neighbors", whole(self.num_neighbors, 1), "a positive int"),
            ("topk_frac", real(self.topk_frac) and 0 < self.topk_frac <= 1, "a fraction in (0, 1]"),
            ("score_border", self.score_border == "auto" or whole(self.score_border, 0), "'auto' or an int >= 0"),
            ("index", self.index == "auto" or self.index in INDEX_KINDS, f"'auto' or one of {INDEX_KINDS}"),
            ("nprobe", whole(self.nprobe, 1), "a positive int"),
            ("target_fpr", real(self.target_fpr) and 0 < self.target_fpr < 1, "a rate in (0, 1)"),
            ("holdout", real(self.holdout) and 0 <= self.holdout < 1, "a fraction in [0, 1)"),
            ("threshold", self.threshold is None or real(self.threshold), "None or a finite number"),
            ("tile", self.tile is None or self.tile == "auto" or (real(self.tile) and self.tile > 0),
             "None, 'auto' or a scale > 0"),
            ("tile_overlap", real(self.tile_overlap) and 0 <= self.tile_overlap < 1, "a fraction in [0, 1)"),
            ("augment", self.augment is None or self.augment in AUGMENTS, f"None or one of {tuple(AUGMENTS)}"),
            ("sigma", real(self.sigma) and self.sigma >= 0, "a number >= 0"),
            ("batch_size", whole(self.batch_size, 1), "a positive int"),
            ("coreset_chunk", self.coreset_chunk is None or whole(self.coreset_chunk, 1), "None or a positive int"),
        ]
        bad = [f"{name} must be {what}, got {getattr(self, name)!r}" for name, ok, what in checks if not ok]
        try:
            reduced_width(1, self.reduce_dim)                           # validates the type and range
        except ValueError as e:
            bad.append(str(e))
        if bad:
            raise UsageError("PatchCore: " + "; ".join(bad))

    def _setup_backbone(self) -> None:
        """backbone_ (the given one, or the default of anomaly/defaults.py) and blocks_ (0-based, checked)."""
        if self.backbone is not None:
            self.backbone_ = self.backbone
        else:
            from .defaults import load_default_backbone

            self.backbone_ = load_default_backbone()
        config = self.backbone_.config
        default = default_blocks(config.depth, config.strides)
        try:
            self.blocks_ = tuple(self.backbone_.resolve_blocks(self.blocks if self.blocks is not None else default))
        except (ValueError, TypeError) as e:
            raise UsageError(f"PatchCore blocks={self.blocks!r}: {e}; pick 0-based indices below {config.depth} "
                             f"(negatives count from the end), or None for {default}") from e
        # the bank lives on the finest grid of the chosen blocks: `fuse_blocks` resamples the coarser ones to it
        self.grid_ = max((tuple(config.grid_of(b)) for b in self.blocks_), key=math.prod)
        if self.score_border != "auto" and 2 * self.score_border >= min(self.grid_):
            raise UsageError(f"PatchCore score_border={self.score_border} leaves no patch of the {self.grid_[0]}x"
                             f"{self.grid_[1]} grid to score; use at most {(min(self.grid_) - 1) // 2}")

    def _batches(self, images: Sequence[Any], desc: str) -> Iterator[tuple[torch.Tensor, list]]:
        """Yield fused features (b, D, h, w) and GridMappings per batch; paths are read lazily."""
        n = len(images)
        for i in progress_bar(range(0, n, self.batch_size), desc=desc, unit="batch", leave=False,
                      disable=None if self.progress is None else not self.progress):
            yield self._features([as_image(x) for x in images[i:i + self.batch_size]])

    def _features(self, batch: list) -> tuple[torch.Tensor, list]:
        """One batch of images -> fused features (b, D, h, w) and their GridMappings."""
        g = self.backbone_.patch_grids(batch, blocks=self.blocks_, batch_size=self.batch_size, progress=False)
        return self.features_from(g), g.mappings

    def features_from(self, grids: Any) -> torch.Tensor:
        """PatchGrids -> fused patch features (B, D, h, w): centre, aggregate, concatenate, reduce."""
        per_block = []
        for b in self.blocks_:
            x = grids[b]                                                # (B, C, h, w)
            if self.center:
                x = center_tokens(x)                                   # drop the image-wide component
            per_block.append(local_aggregate(x, self.aggregation_()))
        return fuse_blocks(per_block, self.reduce_dim)                  # (B, D, h, w)

    @staticmethod
    def _rows(feats: torch.Tensor) -> np.ndarray:
        """(B, D, h, w) -> (B*h*w, D) float32, image-major then row-major tokens."""
        return feats.permute(0, 2, 3, 1).reshape(-1, feats.shape[1]).numpy()

    # ---- fit --------------------------------------------------------------------------------
    def fit(self, images: Sequence[Any], y: Any = None) -> "PatchCore":
        """Learn from normal images only (list of uint8 arrays, PIL images or paths); returns self.

        round(holdout * n) images are held out to calibrate the threshold, the rest build the bank. With
        none to hold out (few-shot: 1 or 2 images at the default holdout) every image builds the bank and the
        threshold is not calibrated (a warning; `threshold_` None unless `threshold` is given).
        Raises UsageError for a hyperparameter out of range, DatasetError for no images.
        """
        self._check_params()
        images = list(images)
        if not images:
            raise DatasetError("PatchCore.fit got no normal images: give at least 1 (the bank is built from them)")
        self._setup_backbone()
        n = len(images)
        n_hold = min(n - 1, math.floor(self.holdout * n + 0.5))         # round half up; 0: none to hold out
        perm = np.random.default_rng(self.seed).permutation(n)
        self.holdout_indices_ = np.sort(perm[:n_hold])
        train = [images[i] for i in np.sort(perm[n_hold:])]
        self.n_train_images_ = len(train)
        self.bank_, self.n_train_patches_ = self._build_bank(train)    # (M, D), patches it was chosen from
        self.index_ = build_index(self.bank_, self.index_kind(len(self.bank_)), nprobe=self.nprobe, seed=self.seed)
        if n_hold:
            patch, scores, _ = self._score([images[i] for i in self.holdout_indices_], "calibrate")
            calibrated = conformal_threshold(scores, self.target_fpr)
        else:   # the overlay scale then comes from (up to 16 of) the bank images: an underestimate of normal spread
            patch, scores, _ = self._score(train[:16], "overlay scale")
            scores, calibrated = scores[:0], None
        self.calibration_scores_ = scores                               # (n_hold,)
        self.threshold_ = float(self.threshold) if self.threshold is not None else calibrated
        # overlay scale: transparent at the typical normal patch, saturated past the worst normal patch
        flat = np.concatenate([np.ravel(p) for p in patch])
        self.map_range_ = (float(np.median(flat)), float(flat.max()))
        if self.threshold is not None:
            pass
        elif not n_hold:
            need = max(2, math.ceil(0.5 / self.holdout)) if self.holdout > 0 else None
            warnings.warn(f"{n} normal image{'s' * (n > 1)} and none held out (holdout={self.holdout:g}): the threshold is "
                          "not calibrated, so predictions carry scores and maps but no decision (is_defect None); "
                          "pass threshold=... (CLI --threshold)" + (f", or give at least {need} images so that one is "
                          "held out" if need else ""), stacklevel=2)
        elif (len(scores) + 1) * self.target_fpr < 1:
            warnings.warn(f"only {len(scores)} held-out normals: the threshold is their maximum score and bounds the "
                          f"false-alarm rate by 1/{len(scores) + 1}, not the target {self.target_fpr:g}; give at "
                          f"least {math.ceil(1 / self.target_fpr) - 1} held-out normals (more images or a larger "
                          "holdout) for the target to hold", stacklevel=2)
        return self

    def _build_bank(self, images: Sequence[Any]) -> tuple[np.ndarray, int]:
        """Coreset of the training patches' features (tiles and augmented copies included), (M, D) float32
        C-contiguous, and the number of patches it was chosen from."""
        n_rows = 0

        def rows() -> Iterator[np.ndarray]:
            nonlocal n_rows
            for feats, _, _ in self._view_batches(images, "features", augment=True):
                r = self._rows(feats)                                   # (b*h*w, D)
                n_rows += len(r)
                yield r

        if self.coreset_chunk:
            def chunks() -> Iterator[np.ndarray]:
                buf, n = [], 0
                for r in rows():
                    buf.append(r)
                    n += len(r)
                    if n >= self.coreset_chunk:
                        yield np.concatenate(buf)
                        buf, n = [], 0
                if buf:
                    yield np.concatenate(buf)
            bank = chunked_coreset(chunks(), self.coreset_ratio, proj_dim=self.proj_dim, seed=self.seed,
                                   progress=self.progress)
        else:
            x = np.concatenate(list(rows()))                            # (N, D)
            bank = x[greedy_coreset(x, self.coreset_ratio, proj_dim=self.proj_dim, seed=self.seed,
                                    progress=self.progress)]
        return np.ascontiguousarray(bank, np.float32), n_rows

    # ---- model inputs: whole images, or their tiles, and augmented copies ------------------------
    def _views(self, images: Iterable[Any], augment: bool = False) -> Iterator[tuple[int, Any, Tiling | None]]:
        """(image number, model input, its image's Tiling or None) for every input the backbone sees, image
        by image (each image read once, when its turn comes): the image itself, or its tiles in row-major
        order (an image that is its own one tile goes as the image, Tiling None, so it scores and maps exactly
        as untiled); with `augment`, each followed by its `AUGMENTS[self.augment]` copies."""
        copies = AUGMENTS[self.augment][1:] if augment and self.augment else ()
        for i, x in enumerate(images):
            x = as_image(x)
            if self.tile is None and not copies:
                yield i, x, None                                        # as before: the backbone reads it
                continue
            img = to_rgb_uint8(x, f"image {i}")                         # (H0, W0, 3)
            tiling = self.tiling_of(img.shape[:2])
            if tiling is not None and len(tiling) == 1 and tiling.tile_size == img.shape[:2]:
                tiling = None                   # one window, the image itself ("auto" on the input's aspect): untiled
            for v in (tiling.crops(img) if tiling else [img]):
                yield i, v, tiling
                for t in copies:
                    yield i, np.ascontiguousarray(t(v)), tiling

    def tiling_of(self, image_size: tuple[int, int]) -> Tiling | None:
        """The tiles of an image of `image_size` (H0, W0) at `tile`, or None: the whole image goes to the model.
        "auto": None when the image's aspect is within AUTO_TILE_ASPECT (1.5x) of the model input's (it is
        resized whole, as untiled); farther, the largest windows of the input's aspect that fit the image
        (scale = min(H0 / H, W0 / W)): the short side is covered whole and the windows slide along the long side."""
        model = tuple(self.backbone_.config.img_size)
        if self.tile is None:
            return None
        if self.tile == "auto":
            ratio = (image_size[0] / image_size[1]) / (model[0] / model[1])
            if max(ratio, 1 / ratio) <= AUTO_TILE_ASPECT:
                return None
            scale = min(image_size[0] / model[0], image_size[1] / model[1])
        else:
            scale = float(self.tile)
        return Tiling.plan(tuple(image_size), model, scale, float(self.tile_overlap))

    def _view_batches(self, images: Sequence[Any], desc: str,
                      augment: bool = False) -> Iterator[tuple[torch.Tensor, list, list]]:
        """Fused features (b, D, h, w), GridMappings and [(image number, Tiling or None)] per batch of
        `batch_size` model inputs (`_views`); memory holds one batch and the image being cut."""
        views = self._views(progress_bar(images, desc=desc, unit="image", leave=False,
                                         disable=None if self.progress is None else not self.progress), augment)
        while batch := list(islice(views, self.batch_size)):
            feats, mappings = self._features([v for _, v, _ in batch])
            yield feats, mappings, [(i, t) for i, _, t in batch]

    # ---- scoring ----------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "index_"):
            raise NotFittedError("this PatchCore is not fitted yet: call fit(normal_images) or PatchCore.load(dir)")

    def index_kind(self, bank_size: int) -> str:
        """The index built over a bank of `bank_size` entries: `index`, with "auto" resolved ("flat" under
        `defaults.IVF_MIN_BANK` entries, else "ivf")."""
        if self.index != "auto":
            return self.index
        return "ivf" if bank_size >= IVF_MIN_BANK else "flat"

    def aggregation_(self) -> int:
        """Neighbourhood averaged on the grid: `aggregation`, with "auto" resolved for the backbone (3 for a ConvNet,
        one with stage strides; 1 for a ViT)."""
        if self.aggregation != "auto":
            return int(self.aggregation)
        return 3 if self.backbone_.config.strides else 1

    def border_(self) -> int:
        """Rings of edge patches left out of image scores: `score_border`, with "auto" resolved for the backbone
        (1 for a ConvNet with a grid of at least 3x3, else 0)."""
        if self.score_border != "auto":
            return int(self.score_border)
        return int(bool(self.backbone_.config.strides) and min(self.grid_) >= 3)

    def scored_patches(self) -> np.ndarray | None:
        """Flat indices (row-major on `grid_`) of the patches that count in image scores, None: all of them
        (`border_()` 0)."""
        r = self.border_()
        if not r:
            return None
        h, w = self.grid_
        return np.arange(h * w).reshape(h, w)[r:h - r, r:w - r].ravel()

    def _inner(self, d: np.ndarray) -> np.ndarray:
        """(..., h, w) patch scores -> the part that counts in image scores (`score_border` rings dropped)."""
        r = self.border_()
        return d[..., r:d.shape[-2] - r, r:d.shape[-1] - r] if r else d

    def image_scores_from(self, dist: np.ndarray, nn: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """Image scores (B,) from nearest-bank distances dist (B, N), indices nn (B, N), features (B, N, D), N
        patches row-major on `grid_`; only the `scored_patches` count."""
        keep = self.scored_patches()
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

    def _scored(self, images: Sequence[Any], desc: str) -> Iterator[tuple[np.ndarray, float, Any]]:
        """Per image, in order: patch scores (T, h, w) of its T inputs (1 untiled), image score, and where it
        lies: its GridMapping untiled, (Tiling, tile GridMapping) tiled."""
        self._check_fitted()
        pending: list = []                                              # [(image no, dist (h, w), score, where)]

        def finish() -> tuple[np.ndarray, float, Any]:
            d = np.stack([p[1] for p in pending])                       # (T, h, w)
            inner = self._inner(d)                                      # the patches that count
            if self.image_score == "topk" and len(d) > 1:
                score = float(topk_mean(inner.reshape(1, -1), self.topk_frac)[0])
            else:   # reweighted / max: the score of the input holding the worst patch (the untiled rule over all)
                score = pending[int(inner.reshape(len(d), -1).max(axis=1).argmax())][2]
            return d, score, pending[0][3]

        for feats, mappings, owners in self._view_batches(images, desc):
            b, d, h, w = feats.shape
            q = self._rows(feats)                                       # (b*h*w, D)
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

    def _score(self, images: Sequence[Any], desc: str = "score") -> tuple[Any, np.ndarray, list]:
        """Patch scores ((B, h, w) untiled, [(T_i, h, w)] tiled), image scores (B,), and where each image lies."""
        patches, scores, where = [], [], []
        for d, s, w in self._scored(list(images), desc):
            patches.append(d)
            scores.append(s)
            where.append(w)
        if patches and not any(isinstance(w, tuple) for w in where):   # no image was tiled: as untiled
            patches = np.concatenate(patches)                           # (B, h, w)
        return patches, np.asarray(scores, np.float32), where

    def decision_function(self, images: Sequence[Any]) -> np.ndarray:
        """Image scores (B,), no maps (cheaper than predict)."""
        return self._score(images)[1]

    def anomaly_maps(self, patch_scores: Any, mappings: Sequence[Any]) -> list[np.ndarray]:
        """Token maps -> defect maps [(H_orig_i, W_orig_i)]. Untiled, (B, h, w) with GridMappings: bilinear to
        the model canvas, Gaussian(sigma) there, then resampled onto each original image through its
        GridMapping (stretch or pad alike, so the map lines up with the original pixels). Tiled,
        [(T_i, h, w)] with (Tiling, tile GridMapping): each tile bilinear onto its window, stitched (overlaps
        averaged), then Gaussian(sigma x the tile's original pixels per model pixel) once over the image; an image
        that was its own one tile (its entry a GridMapping) is mapped as untiled."""
        if isinstance(patch_scores, np.ndarray):                        # untiled (or no image needed tiles)
            return original_maps(patch_scores, mappings, self.sigma)
        out = []
        for p, where in zip(patch_scores, mappings):
            if not isinstance(where, tuple):    # an image that was its own single tile: scored and mapped untiled
                out.append(original_maps(p, [where], self.sigma)[0])
                continue
            tiling, m = where
            # one product through cached operators, equal to stitching the tiles' maps and then smoothing
            out.append(tiled_original_map(p, tiling, m, self.sigma * tiling.tile_size[0] / m.model_size[0]))   # (H0, W0)
        return out

    def decision_threshold(self) -> float | None:
        """The threshold decisions use: `threshold` if given, else the calibrated `threshold_` (None: none)."""
        return float(self.threshold) if self.threshold is not None else self.threshold_

    def predict(self, images: Sequence[Any]) -> AnomalyPrediction:
        """Scores, maps at original size and decisions for a list of images (arrays, PIL or paths).
        Decisions (`is_defect`) are None when the model has no threshold (uncalibrated, none given)."""
        patch, scores, where = self._score(images, "predict")
        maps = self.anomaly_maps(patch, where)
        t = self.decision_threshold()
        return AnomalyPrediction(scores, maps, None if t is None else scores > t, t, patch)

    # ---- persistence (see anomaly/artifact.py) --------------------------------------------------
    def save(self, path: Any, backbone_source: dict | None = None) -> None:
        """Write an atomic artifact directory (config.json, bank.safetensors, index.faiss)."""
        from .artifact import save_patchcore

        self._check_fitted()
        save_patchcore(self, path, backbone_source)

    @classmethod
    def load(cls, path: Any, backbone: Any = None) -> "PatchCore":
        """Read an artifact; `backbone` must be the one it was fitted on (checked), None rebuilds it."""
        from .artifact import load_patchcore

        return load_patchcore(cls, path, backbone)


def conformal_threshold(normal_scores: np.ndarray, target_fpr: float) -> float:
    """The ceil((n + 1)(1 - a))-th smallest normal score: P(new normal > t) <= a for exchangeable
    scores. With too few held-out images (n + 1 < 1 / a) this is the largest score, and the
    guaranteed rate is 1 / (n + 1) instead of a."""
    s = np.sort(np.asarray(normal_scores, np.float64))
    k = math.ceil((len(s) + 1) * (1 - target_fpr))
    return float(s[min(k, len(s)) - 1])
