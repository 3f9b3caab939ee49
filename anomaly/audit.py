"""Contamination audit: which "normal" training images look least normal?

A bank built from images that quietly contain defects teaches the detector that those defects
are normal. The audit splits the normals into k folds, builds a bank (same hyperparameters)
from k - 1 folds and scores the held-out fold, so every image is scored by a bank that never
saw it. Outliers by a robust z-score (median / MAD) are flagged for a human to look at.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from frozenvit.backbone.suite.errors import ParameterError

from .coreset import greedy_coreset
from .defaults import AUDIT_FOLDS
from .errors import DatasetError
from .images import image_list
from .search import build_index, knn


@dataclass
class AuditResult:
    scores: np.ndarray            # (N,) image score of each training image against a bank without it
    robust_z: np.ndarray          # (N,) (score - median) / (1.4826 * MAD)
    flagged: np.ndarray           # (N,) bool, robust_z > z_threshold
    names: list[str]

    def ranking(self, top: int | None = None) -> list[dict[str, Any]]:
        """Rows sorted from most to least anomalous."""
        order = np.argsort(-self.scores)[:top]
        return [{"rank": r + 1, "image": self.names[i], "score": float(self.scores[i]),
                 "robust_z": float(self.robust_z[i]), "flagged": bool(self.flagged[i])}
                for r, i in enumerate(order)]


def contamination_audit(detector: Any, images: Sequence[Any], n_splits: int = AUDIT_FOLDS,
                        names: Sequence[str] | None = None, z_threshold: float = 3.5) -> AuditResult:
    """Score every image with a bank built without it (k-fold), using `detector`'s hyperparameters.

    `detector` is an (unfitted or fitted) PatchCore; it is not modified. Features are extracted
    once; each fold costs one coreset and one index.
    """
    images = image_list(images, "contamination_audit")
    n = len(images)
    if n < 2:
        raise DatasetError(f"the audit needs at least 2 normal images (each is scored by a bank of the others), got {n}")
    if n_splits < 2:
        raise ParameterError(f"the audit needs n_splits >= 2 folds, got {n_splits}")
    k = min(n_splits, n)
    det = detector.unfitted_copy(tile=None, augment=None)       # whole images, as the features the audit compares
    det._validate_params()
    det._setup_backbone()
    fx = det.feature_extractor()
    feats = np.concatenate([fx.rows(f).reshape(len(f), -1, f.shape[1])
                            for f, _, _ in fx.batches(images, "audit features")])         # (n, N, D)
    fold = np.random.default_rng(det.seed).permutation(n) % k                             # (n,)
    scores = np.empty(n, np.float32)
    for f in range(k):
        train = feats[fold != f].reshape(-1, feats.shape[2])                              # (n_tr*N, D)
        det.bank_ = np.ascontiguousarray(train[greedy_coreset(train, det.coreset_ratio, proj_dim=det.proj_dim,
                                                              seed=det.seed)])
        det.index_ = build_index(det.bank_, det.index_kind(len(det.bank_)), nprobe=det.nprobe, seed=det.seed)
        test = feats[fold == f]                                                            # (n_te, N, D)
        dist, nn = knn(det.index_, test.reshape(-1, test.shape[2]), 1)
        scores[fold == f] = det.image_scores_from(dist.reshape(len(test), -1), nn.reshape(len(test), -1), test)
    med = float(np.median(scores))
    mad = float(np.median(np.abs(scores - med))) * 1.4826
    z = (scores - med) / (mad if mad > 0 else (np.std(scores) or 1.0))
    names = [str(x) for x in names] if names is not None else [
        str(x) if isinstance(x, (str, bytes)) or hasattr(x, "__fspath__") else f"image {i}" for i, x in enumerate(images)]
    return AuditResult(scores, z.astype(np.float32), z > z_threshold, names)
