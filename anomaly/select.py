"""PatchCore's configuration chosen per dataset without defect labels: `PatchCoreSearch`, a scikit-learn estimator.

    search = PatchCoreSearch().fit(normals)    # the candidates of defaults.SEARCH_GRID, ranked on planted defects
    search.results_                            # one row per candidate, best first: planted-defect AUROC, ...
    search.best_params_                        # the winner's name and its members' settings
    out = search.predict(images)               # the winner, refitted on all normals (best_estimator_)
    search.save("model/")                      # the winner's artifact; its config.json records the table

How a candidate is judged: the normals are split as `PatchCore.fit` splits them (same seed and holdout, so the
held-out images are the ones the winner's threshold is later calibrated on and never enter a bank); at most
`search_images` of the bank side build each candidate's search-time bank (a `coreset_ratio` coreset), and at most
`search_holdout` held-out normals are scored clean and with planted defects (anomaly/planted.py: one CutPaste
rectangle and one texture blob each, cut from the bank-side normals). A candidate's score is the image AUROC of
planted against clean (image score: the largest patch distance outside the border rings, over the image's tiles).
Only training normals are read: no test image and no label reaches the search.

Work is shared: each (backbone, tiling) is run once over the images, keeping the grids of every block any candidate
uses; the cheap knobs (blocks, aggregation, channel pooling) are applied to those grids per candidate, and an
ensemble candidate reuses its members' scores (standardised by the clean held-out scores, as `PatchCoreEnsemble`).
"""
from __future__ import annotations

import os
import time
import warnings
from itertools import islice
from numbers import Integral, Real
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.metrics import roc_auc_score
from sklearn.utils._param_validation import Interval

from frozenvit.backbone.suite.errors import ParameterError, ParameterErrorMixin

from . import defaults as D
from .coreset import coreset_bank
from .ensemble import PatchCoreEnsemble, standardiser
from .errors import DatasetError
from .features import PatchFeatures
from .images import image_list
from .patchcore import AnomalyPrediction, PatchCore
from .planted import KINDS, plant_defects
from .scoring import inner
from .search import knn_exact
from .threshold import holdout_size


#: planted-defect AUROCs this close are a tie; a tie goes to the earlier candidate (`candidates` order)
TIE_TOL = 1e-9
TIE_BREAK = "the earliest of the tied candidates in the candidate list (anomaly/defaults.py SEARCH_GRID order)"


def default_candidates(progress: bool | None = None) -> list[tuple[str, PatchCore | PatchCoreEnsemble]]:
    """`defaults.SEARCH_GRID` as unfitted estimators, each backbone loaded once and shared."""
    loaded: dict = {}

    def member(name: str | None, kw: dict) -> PatchCore:
        if name not in loaded:
            loaded[name] = D.ensemble_backbone(name)
        return PatchCore(loaded[name], progress=progress, **kw)

    out = []
    for cand, members in D.SEARCH_GRID:
        ms = [member(n, kw) for n, kw in members]
        out.append((cand, ms[0] if len(ms) == 1 else PatchCoreEnsemble(ms, progress=progress)))
    return out


def _members(est: Any) -> list[PatchCore]:
    if isinstance(est, PatchCore):
        return [est]
    if isinstance(est, PatchCoreEnsemble) and est.members:
        return list(est.members)
    raise ParameterError(f"a PatchCoreSearch candidate is a PatchCore or a PatchCoreEnsemble with members, got {est!r}")


def settings(m: PatchCore) -> dict:
    """A fitted-or-set-up member's settings as the selection table records them."""
    return {"backbone": m.backbone_.name, "image_size": list(m.backbone_.config.img_size), "blocks": list(m.blocks_),
            "tile": m.tile, "aggregation": m.aggregation_size(), "reduce_dim": m.reduce_dim,
            "score_border": m.border_rings()}


class _Member:
    """One member's search-time model: its features from a group's grids, a small bank, image scores."""

    def __init__(self, m: PatchCore, ratio: float, seed: int) -> None:
        self.m = m.unfitted_copy()
        self.m._setup_backbone()                                       # resolves blocks_, grid_, "auto" settings
        self.fx = PatchFeatures(self.m.backbone_, self.m.blocks_, center=self.m.center,
                                aggregation=self.m.aggregation_size(), reduce_dim=self.m.reduce_dim)
        self.rings, self.ratio, self.seed = self.m.border_rings(), ratio, seed
        self.group = (id(self.m.backbone_), self.m.tile, self.m.tile_overlap)
        self.key = (*self.group, self.m.blocks_, self.m.center, self.fx.aggregation, self.m.reduce_dim,
                    self.m.proj_dim, self.rings)

    def fit(self, batches: list) -> None:
        rows = (self.fx.rows(self.fx.from_grids(g)) for g, _ in batches)             # (b*h*w, D) each
        self.bank, _ = coreset_bank(rows, self.ratio, proj_dim=self.m.proj_dim, seed=self.seed)   # (M, D)

    def scores(self, batches: list, n_images: int) -> np.ndarray:
        """Image scores (n_images,): the largest inner patch distance over each image's inputs."""
        out = np.full(n_images, -np.inf, np.float32)
        for g, owners in batches:
            f = self.fx.from_grids(g)                                    # (b, D, h, w)
            b, _, h, w = f.shape
            dist = knn_exact(self.bank, self.fx.rows(f), 1)[0].reshape(b, h, w)   # (b, h, w)
            per_input = inner(dist, self.rings).reshape(b, -1).max(axis=1)        # (b,)
            np.maximum.at(out, np.asarray(owners), per_input)
        return out


def _grids(bb: Any, blocks: tuple[int, ...], tile: Any, overlap: float, images: Sequence[Any],
           batch_size: int) -> list[tuple[dict, list[int]]]:
    """Per batch of model inputs: {block: (b, C, h, w)} of `blocks` and the image number of each input."""
    fx = PatchFeatures(bb, blocks, tile=tile, tile_overlap=overlap, batch_size=batch_size)
    views, out = fx.views(images), []
    while batch := list(islice(views, batch_size)):
        g = bb.patch_grids([v for _, _, v, _ in batch], blocks=blocks, batch_size=batch_size, progress=False)
        out.append(({b: g[b] for b in blocks}, [i for i, _, _, _ in batch]))
    return out


class PatchCoreSearch(ParameterErrorMixin, BaseEstimator):
    """Fits a small grid of candidate configurations and keeps the one that best separates planted defects from
    clean held-out normals (see the module docstring); a scikit-learn estimator in the manner of GridSearchCV.

    candidates: [(name, unfitted PatchCore or PatchCoreEnsemble)]; None: `default_candidates()`
        (`defaults.SEARCH_GRID`). Ties go to the earlier candidate.
    search_images: at most this many bank-side normals build each search-time bank.
    search_holdout: at most this many held-out normals are scored, clean and with planted defects.
    coreset_ratio: the search-time banks' coreset ratio (the refitted winner keeps its own).
    refit: fit the winner on all the normals (`best_estimator_`), as PatchCore.fit does; False: rank only.
    target_fpr, holdout, threshold, seed: as PatchCore's, given to the winner; holdout and seed also fix the split
        the search holds out.
    progress: progress bars of the refit; None: only on a terminal.

    Learned: results_ (rows best first: name, planted-defect AUROC overall and per kind, members' settings),
    best_index_ (the winner's position in `candidates`), best_params_ ({"name", "members"}), tied_ (the names of
    the candidates whose planted-defect AUROC equals the winner's, the winner first: a tie goes to the earliest in
    `candidates`), best_estimator_,
    search_s_ and refit_s_ (seconds), holdout_indices_ (the normals scored clean and planted: among the
    winner's own held-out normals); search_models_, candidate_keys_ and standardisers_: the search-time models
    `candidate_scores` uses. `fit` raises DatasetError when the split leaves fewer than 2 held-out or
    no bank-side normals, ParameterError for a candidate that is not a PatchCore or an ensemble of them.
    """

    _parameter_constraints: dict = {
        "candidates": [None, list, tuple],
        "search_images": [Interval(Integral, 1, None, closed="left")],
        "search_holdout": [Interval(Integral, 2, None, closed="left")],
        "coreset_ratio": [Interval(Real, 0, 1, closed="right")],
        "refit": ["boolean"],
        "planted_kinds": [list, tuple],
        **{k: PatchCore._parameter_constraints[k] for k in ("target_fpr", "holdout", "threshold", "seed", "progress")},
    }

    def __init__(self, candidates: Sequence[tuple[str, Any]] | None = None, search_images: int = D.SEARCH_IMAGES,
                 search_holdout: int = D.SEARCH_HOLDOUT, coreset_ratio: float = D.SEARCH_CORESET_RATIO,
                 refit: bool = True, planted_kinds: Sequence[str] = D.PLANTED_KINDS, target_fpr: float = D.TARGET_FPR, holdout: float = D.HOLDOUT,
                 threshold: float | None = None, seed: int = D.SEED, progress: bool | None = None) -> None:
        self.candidates = candidates
        self.search_images = search_images
        self.search_holdout = search_holdout
        self.coreset_ratio = coreset_ratio
        self.refit = refit
        self.planted_kinds = planted_kinds
        self.target_fpr = target_fpr
        self.holdout = holdout
        self.threshold = threshold
        self.seed = seed
        self.progress = progress

    # ---- fit ---------------------------------------------------------------------------------
    def fit(self, images: Sequence[Any], y: Any = None) -> "PatchCoreSearch":
        """Rank the candidates on planted defects in held-out normals, then refit the winner; returns self."""
        self._validate_params()
        images = image_list(images, "PatchCoreSearch.fit")
        cands = list(self.candidates) if self.candidates is not None else default_candidates(self.progress)
        if not cands:
            raise ParameterError("PatchCoreSearch needs at least one candidate")
        n = len(images)
        n_hold = holdout_size(n, self.holdout) if n else 0
        if n_hold < 2 or n - n_hold < 1:
            raise DatasetError(f"PatchCoreSearch needs at least 2 held-out normals to plant defects in: {n} images at "
                               f"holdout {self.holdout:g} hold out {n_hold}; give more normals or a larger holdout")
        t0 = time.perf_counter()
        perm = np.random.default_rng(self.seed).permutation(n)         # PatchCore.fit's split
        self.holdout_indices_ = np.sort(perm[:n_hold][:self.search_holdout])   # planted into, never in a bank
        held = [images[i] for i in self.holdout_indices_]
        bank = [images[i] for i in np.sort(perm[n_hold:][:self.search_images])]
        kinds = tuple(self.planted_kinds)
        if not kinds or set(kinds) - set(KINDS):
            raise ParameterError(f"planted_kinds must name some of {KINDS}, got {kinds!r}")
        planted = [img for img, _ in plant_defects(held, bank, seed=self.seed, kinds=kinds)]   # image-major
        evals = held + planted
        labels = np.r_[np.zeros(len(held)), np.ones(len(planted))]
        kind_of = np.r_[np.full(len(held), -1), np.tile(np.arange(len(kinds)), len(held))]

        self.search_models_: dict = {}                                  # member key -> _Member (search-time)
        self.candidate_keys_ = []                                       # per candidate: its members' keys
        for _, est in cands:
            keys = []
            for m in _members(est):
                mm = _Member(m, self.coreset_ratio, self.seed)
                self.search_models_.setdefault(mm.key, mm)
                keys.append(mm.key)
            self.candidate_keys_.append(keys)
        member_scores = self._score_members(evals, fit_banks=bank)     # key -> (n_eval,)
        clean = {k: s[:len(held)] for k, s in member_scores.items()}
        self.standardisers_ = {k: standardiser(c, (0.0, 1.0)) for k, c in clean.items()}

        rows = []
        for i, ((name, _), keys) in enumerate(zip(cands, self.candidate_keys_)):
            s = self._combine(keys, member_scores)
            row = {"name": name, "synthetic_auroc": float(roc_auc_score(labels, s))}
            for k, kind in enumerate(kinds):
                pick = (kind_of == -1) | (kind_of == k)
                row[f"{kind}_auroc"] = float(roc_auc_score(labels[pick], s[pick]))
            row["members"] = [settings(self.search_models_[k].m) for k in keys]
            rows.append((i, row))
        order = sorted(rows, key=lambda r: (-r[1]["synthetic_auroc"], r[0]))   # stable: ties to the earlier
        self.results_ = [{"rank": r + 1, **row} for r, (_, row) in enumerate(order)]
        self.best_index_ = order[0][0]
        top = order[0][1]["synthetic_auroc"]
        self.tied_ = [row["name"] for _, row in order if abs(row["synthetic_auroc"] - top) <= TIE_TOL]
        name, est = cands[self.best_index_]
        self.best_params_ = {"name": name, "members": order[0][1]["members"]}
        self.search_s_ = time.perf_counter() - t0

        t0 = time.perf_counter()
        if self.refit:
            with warnings.catch_warnings(record=True) as caught:        # the winner's calibration warning, as ours
                warnings.simplefilter("always")
                self.best_estimator_ = self._winner(est).fit(images)
            for w in {str(w.message): w for w in caught}.values():
                warnings.warn(w.message, w.category, stacklevel=2)
        self.refit_s_ = time.perf_counter() - t0
        return self

    def _winner(self, est: Any) -> PatchCore | PatchCoreEnsemble:
        common = dict(target_fpr=self.target_fpr, holdout=self.holdout, seed=self.seed, threshold=self.threshold)
        if isinstance(est, PatchCore):
            return est.unfitted_copy(**common, progress=self.progress)
        return PatchCoreEnsemble([m.unfitted_copy() for m in est.members], progress=self.progress, **common)

    def _score_members(self, images: Sequence[Any], fit_banks: Sequence[Any] | None = None) -> dict:
        """Every search-time member's image scores (len(images),): one backbone pass per (backbone, tiling) over
        the union of its members' blocks; with `fit_banks`, each member's bank is built from those images first."""
        groups: dict = {}
        for mm in self.search_models_.values():
            groups.setdefault(mm.group, []).append(mm)
        out = {}
        for members in groups.values():
            m0 = members[0].m
            blocks = tuple(sorted({b for mm in members for b in mm.m.blocks_}))
            args = (m0.backbone_, blocks, m0.tile, m0.tile_overlap)
            if fit_banks is not None:
                batches = _grids(*args, fit_banks, m0.batch_size)
                for mm in members:
                    mm.fit(batches)
                del batches
            batches = _grids(*args, images, m0.batch_size)
            for mm in members:
                out[mm.key] = mm.scores(batches, len(images))
        return out

    def _combine(self, keys: list, member_scores: dict) -> np.ndarray:
        """A candidate's image scores: its one member's, or its members' standardised mean."""
        if len(keys) == 1:
            return member_scores[keys[0]]
        return sum((member_scores[k] - loc) / scale for k in keys
                   for loc, scale in [self.standardisers_[k]]) / len(keys)

    # ---- the search-time models, on any images (benchmarks: the grid's test AUROC) ---------------
    def candidate_scores(self, images: Sequence[Any]) -> list[np.ndarray]:
        """Image scores (len(images),) of every candidate's search-time model, in `candidates` order. For
        measuring the search (benchmarks/anomaly_select.py); the fitted winner is `best_estimator_`."""
        self._check_searched()
        scores = self._score_members(image_list(images))
        return [self._combine(keys, scores) for keys in self.candidate_keys_]

    # ---- the winner ----------------------------------------------------------------------------
    def _check_searched(self) -> None:
        if not hasattr(self, "results_"):
            raise NotFittedError("this PatchCoreSearch is not fitted yet: call fit(normal_images)")

    def _best(self) -> PatchCore | PatchCoreEnsemble:
        self._check_searched()
        if not hasattr(self, "best_estimator_"):
            raise NotFittedError("this PatchCoreSearch ranked its candidates without refitting (refit=False): "
                                 "there is no model to predict with or save")
        return self.best_estimator_

    def predict(self, images: Sequence[Any]) -> AnomalyPrediction:
        """The winner's `predict`."""
        return self._best().predict(images)

    def decision_function(self, images: Sequence[Any]) -> np.ndarray:
        """The winner's image scores (B,)."""
        return self._best().decision_function(images)

    def decision_threshold(self) -> float | None:
        return self._best().decision_threshold()

    def selection(self) -> dict:
        """What the winner's artifact records about how it was chosen."""
        self._check_searched()
        return {"chosen": self.best_params_["name"], "by": "image AUROC of planted defects vs clean held-out normals",
                "tied_at_best": list(self.tied_), "tie_break": TIE_BREAK if len(self.tied_) > 1 else None,
                "planted_kinds": list(self.planted_kinds),
                "search_images": self.search_images, "search_holdout": self.search_holdout,
                "coreset_ratio": self.coreset_ratio, "seed": self.seed, "search_s": round(self.search_s_, 3),
                "table": self.results_}

    def save(self, path: str | os.PathLike) -> Path:
        """The winner's artifact (PatchCore or ensemble), its config.json recording `selection()`; returns its Path."""
        return self._best().save(path, selection=self.selection())
