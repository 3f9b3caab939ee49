"""PatchCore on the real development sets, full protocol, one table per set (issue 17, part 5).

    nice -n 5 python benchmarks/anomaly_real.py --threads 1                       # both sets, every config
    nice -n 5 python benchmarks/anomaly_real.py --sets kolektorsdd --configs lite0 vit_tile2

For each set in ../shared/data/defects (MVTec layout) and each configuration: PatchCore with the CLI's
defaults otherwise (10% coreset, channels pooled to a quarter, 20% of train/good held out to calibrate the
threshold at a 1% false-alarm target), except that a configuration that does not name them counts every
patch in the image score (score_border=0), searches exactly (index="flat") and averages 3x3 neighbourhoods
(aggregation=3), as every row did before those options existed. Each is fitted on train/good and evaluated
on test/ with `anomaly.evaluation.evaluate_dataset`: image AUROC, pixel AUROC, AUPRO@0.3, the detection rate
(and the false-alarm rate) at the calibrated threshold, fit time (s per training image) and predict time (s
per test image: `predict` itself, images already decoded; maps at the original size included). "backbone
share" is the part of predict spent in the backbone's `patch_grids` (predict throughput over bare
backbone throughput, as anomaly_speed.py's ratio). "inputs" is the backbone passes per image (tiles).

Writes benchmarks/results/anomaly_real_<set>.json after every configuration (a stopped run keeps what
it measured; --keep keeps the configurations of an earlier file that this run does not redo, so two runs
of disjoint --configs may fill one file). Reuse: configurations that see the same backbone inputs (one and two stages of a ConvNet,
at the same size and tiling) share the backbone's grids of a batch, computed once for the union of
their blocks and keyed by the batch's pixels; a configuration that reused grids is charged the backbone
seconds they took when first computed ("reused_backbone_s" in the JSON), so its times are comparable.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from common import RESULTS, SHARED_DATA, print_table, write_result

SETS = ("mpdd_metal_plate", "kolektorsdd")
# name -> (what the table calls it, load_backbone kwargs, PatchCore kwargs)
CONFIGS = {
    "vit": ("embedded ViT, stretch", {}, {}),
    "vit_pad": ("embedded ViT, pad", {"resize": "pad"}, {}),
    "vit_tile1": ("embedded ViT, tiles x1", {}, {"tile": 1.0}),
    "vit_tile2": ("embedded ViT, tiles x2", {}, {"tile": 2.0}),
    "lite0_s1": ("Lite0, 1 stage (stride 16)", {"name": "efficientnet_lite0"}, {"blocks": (3,)}),
    "lite0": ("Lite0, 2 stages (stride 8+16)", {"name": "efficientnet_lite0"}, {}),
    "lite0_tile2": ("Lite0, 2 stages, tiles x2", {"name": "efficientnet_lite0"}, {"tile": 2.0}),
    "vit_tileauto": ("embedded ViT, tiles auto", {}, {"tile": "auto"}),
    "lite0_tileauto": ("Lite0, 2 stages, tiles auto", {"name": "efficientnet_lite0"}, {"tile": "auto"}),
    "lite0_s1_tileauto": ("Lite0, 1 stage, tiles auto", {"name": "efficientnet_lite0"}, {"blocks": (3,), "tile": "auto"}),
    "lite0_s1_tile2": ("Lite0, 1 stage, tiles x2", {"name": "efficientnet_lite0"}, {"blocks": (3,), "tile": 2.0}),
    "lite2_s1": ("Lite2, 1 stage (stride 16)", {"name": "efficientnet_lite2"}, {"blocks": (3,)}),
    "lite2": ("Lite2, 2 stages (stride 8+16)", {"name": "efficientnet_lite2"}, {}),
    "lite2_tileauto": ("Lite2, 2 stages, tiles auto", {"name": "efficientnet_lite2"}, {"tile": "auto"}),
    "lite2_tile2": ("Lite2, 2 stages, tiles x2", {"name": "efficientnet_lite2"}, {"tile": 2.0}),
    "random": ("random ViT (default's shape)", {"pretrained": False}, {}),
    # score_border 1: each input's outermost ring of patches left out of the image score (issue 17, the diagnosis
    # in docs/anomaly.md); _ivf: approximate search (index="ivf") instead of the exact one
    "lite0_tileauto_b1": ("Lite0, 2 stages, tiles auto, border 1", {"name": "efficientnet_lite0"},
                          {"tile": "auto", "score_border": 1}),
    "lite0_tileauto_b1_ivf": ("Lite0, 2 stages, tiles auto, border 1, IVF", {"name": "efficientnet_lite0"},
                              {"tile": "auto", "score_border": 1, "index": "ivf"}),
    "lite0_tileauto_ivf": ("Lite0, 2 stages, tiles auto, IVF", {"name": "efficientnet_lite0"},
                           {"tile": "auto", "index": "ivf"}),
    "lite0_s1_tileauto_b1": ("Lite0, 1 stage, tiles auto, border 1", {"name": "efficientnet_lite0"},
                             {"blocks": (3,), "tile": "auto", "score_border": 1}),
    "lite0_tile2_b1": ("Lite0, 2 stages, tiles x2, border 1", {"name": "efficientnet_lite0"},
                       {"tile": 2.0, "score_border": 1}),
    "lite0_tile2_b1_ivf": ("Lite0, 2 stages, tiles x2, border 1, IVF", {"name": "efficientnet_lite0"},
                           {"tile": 2.0, "score_border": 1, "index": "ivf"}),
    "vit_b1": ("embedded ViT, stretch, border 1", {}, {"score_border": 1}),
    "vit_tileauto_b1": ("embedded ViT, tiles auto, border 1", {}, {"tile": "auto", "score_border": 1}),
    "vit_tile2_b1": ("embedded ViT, tiles x2, border 1", {}, {"tile": 2.0, "score_border": 1}),
    "lite2_tileauto_b1": ("Lite2, 2 stages, tiles auto, border 1", {"name": "efficientnet_lite2"},
                          {"tile": "auto", "score_border": 1}),
    # feature width, coreset size and map smoothing on the two best KolektorSDD rows (issue 17's last gap): "full"
    # keeps every channel (reduce_dim=None) instead of pooling to a quarter, "cs25" keeps 25% of the patches in the
    # coreset instead of 10%, "s2" smooths maps with sigma 2 instead of 4, "agg1" skips the 3x3 neighbourhood mean
    "lite2_tileauto_b1_ivf": ("Lite2, 2 stages, tiles auto, border 1, IVF", {"name": "efficientnet_lite2"},
                              {"tile": "auto", "score_border": 1, "index": "ivf"}),
    "lite2_tileauto_b1_ivf_full": ("Lite2, 2 stages, tiles auto, border 1, IVF, every channel",
                                   {"name": "efficientnet_lite2"},
                                   {"tile": "auto", "score_border": 1, "index": "ivf", "reduce_dim": None}),
    "lite2_tileauto_b1_ivf_cs25": ("Lite2, 2 stages, tiles auto, border 1, IVF, coreset 25%",
                                   {"name": "efficientnet_lite2"},
                                   {"tile": "auto", "score_border": 1, "index": "ivf", "coreset_ratio": 0.25}),
    "lite2_tileauto_b1_ivf_s2": ("Lite2, 2 stages, tiles auto, border 1, IVF, sigma 2", {"name": "efficientnet_lite2"},
                                 {"tile": "auto", "score_border": 1, "index": "ivf", "sigma": 2.0}),
    "lite2_tileauto_b1_ivf_agg1": ("Lite2, 2 stages, tiles auto, border 1, IVF, no 3x3 mean",
                                   {"name": "efficientnet_lite2"},
                                   {"tile": "auto", "score_border": 1, "index": "ivf", "aggregation": 1}),
    "lite0_tileauto_b1_agg1": ("Lite0, 2 stages, tiles auto, border 1, no 3x3 mean", {"name": "efficientnet_lite0"},
                               {"tile": "auto", "score_border": 1, "aggregation": 1}),
    "lite2_tileauto_b1_agg1": ("Lite2, 2 stages, tiles auto, border 1, no 3x3 mean", {"name": "efficientnet_lite2"},
                               {"tile": "auto", "score_border": 1, "aggregation": 1}),
    "vit_agg1": ("embedded ViT, stretch, no 3x3 mean", {}, {"aggregation": 1}),
    "vit_tile15_b1_ivf": ("embedded ViT, tiles x1.5, border 1, IVF", {}, {"tile": 1.5, "score_border": 1, "index": "ivf"}),
    "vit_tile15_b1_ivf_agg1": ("embedded ViT, tiles x1.5, border 1, IVF, no 3x3 mean", {},
                               {"tile": 1.5, "score_border": 1, "index": "ivf", "aggregation": 1}),
    "vit_tileauto_ivf_agg1": ("embedded ViT, tiles auto, IVF, no 3x3 mean", {},
                              {"tile": "auto", "index": "ivf", "aggregation": 1}),
    "vit_tileauto_ivf": ("embedded ViT, tiles auto, IVF", {}, {"tile": "auto", "index": "ivf"}),
    "lite2_tile15_b1_ivf_agg1": ("Lite2, 2 stages, tiles x1.5, border 1, IVF, no 3x3 mean", {"name": "efficientnet_lite2"},
                                 {"tile": 1.5, "score_border": 1, "index": "ivf", "aggregation": 1}),
    "vit_tile2_b1_ivf": ("embedded ViT, tiles x2, border 1, IVF", {}, {"tile": 2.0, "score_border": 1, "index": "ivf"}),
    "vit_tile2_b1_ivf_full": ("embedded ViT, tiles x2, border 1, IVF, every channel", {},
                              {"tile": 2.0, "score_border": 1, "index": "ivf", "reduce_dim": None}),
    "vit_tile2_b1_ivf_cs25": ("embedded ViT, tiles x2, border 1, IVF, coreset 25%", {},
                              {"tile": 2.0, "score_border": 1, "index": "ivf", "coreset_ratio": 0.25}),
    "vit_tile2_b1_ivf_s2": ("embedded ViT, tiles x2, border 1, IVF, sigma 2", {},
                            {"tile": 2.0, "score_border": 1, "index": "ivf", "sigma": 2.0}),
    "vit_tile2_b1_ivf_agg1": ("embedded ViT, tiles x2, border 1, IVF, no 3x3 mean", {},
                              {"tile": 2.0, "score_border": 1, "index": "ivf", "aggregation": 1}),
    "vit_tile2_b1_agg1": ("embedded ViT, tiles x2, border 1, no 3x3 mean", {},
                          {"tile": 2.0, "score_border": 1, "aggregation": 1}),
    "vit_tile2_b1_ivf_agg1_cs25": ("embedded ViT, tiles x2, border 1, IVF, no 3x3 mean, coreset 25%", {},
                                   {"tile": 2.0, "score_border": 1, "index": "ivf", "aggregation": 1,
                                    "coreset_ratio": 0.25}),
    "vit_tile2_b1_ivf_agg1_max": ("embedded ViT, tiles x2, border 1, IVF, no 3x3 mean, max score", {},
                                  {"tile": 2.0, "score_border": 1, "index": "ivf", "aggregation": 1,
                                   "image_score": "max"}),
    "vit_tile2_b1_ivf_agg1_topk": ("embedded ViT, tiles x2, border 1, IVF, no 3x3 mean, top-1% score", {},
                                   {"tile": 2.0, "score_border": 1, "index": "ivf", "aggregation": 1,
                                    "image_score": "topk"}),
    "vit_tile2_b1_ivf_agg1_bl47": ("embedded ViT blocks 4 and 7, tiles x2, border 1, IVF, no 3x3 mean", {},
                                    {"blocks": (4, 7), "tile": 2.0, "score_border": 1, "index": "ivf",
                                     "aggregation": 1}),
    "vit_tile2_b1_ivf_agg1_bl58": ("embedded ViT blocks 5 and 8, tiles x2, border 1, IVF, no 3x3 mean", {},
                                    {"blocks": (5, 8), "tile": 2.0, "score_border": 1, "index": "ivf",
                                     "aggregation": 1}),
    "vit_tile2_b1_ivf_agg1_bl69": ("embedded ViT blocks 6 and 9, tiles x2, border 1, IVF, no 3x3 mean", {},
                                    {"blocks": (6, 9), "tile": 2.0, "score_border": 1, "index": "ivf",
                                     "aggregation": 1}),
    "lite0_s1_agg1": ("Lite0, 1 stage (stride 16), no 3x3 mean", {"name": "efficientnet_lite0"},
                      {"blocks": (3,), "aggregation": 1}),
    "vit_agg1_bl47": ("embedded ViT blocks 4 and 7, stretch, no 3x3 mean", {}, {"blocks": (4, 7), "aggregation": 1}),
    # the bank enriched with flipped / quarter-turned copies of every normal tile (AnomalyDINO's few-shot trick, here
    # full-shot): does more of the normals' variation in the bank stop normal regions outscoring faint cracks?
    "vit_tile2_b1_ivf_agg1_flips": ("embedded ViT, tiles x2, border 1, IVF, no 3x3 mean, bank + flips", {},
                                    {"tile": 2.0, "score_border": 1, "index": "ivf", "aggregation": 1,
                                     "augment": "flips"}),
    "vit_tile2_b1_ivf_agg1_rot90": ("embedded ViT, tiles x2, border 1, IVF, no 3x3 mean, bank + quarter turns", {},
                                    {"tile": 2.0, "score_border": 1, "index": "ivf", "aggregation": 1,
                                     "augment": "rot90"}),
    "lite0_tileauto_b1_ivf_flips": ("Lite0, 2 stages, tiles auto, border 1, IVF, bank + flips", {"name": "efficientnet_lite0"},
                                    {"tile": "auto", "score_border": 1, "index": "ivf", "augment": "flips"}),
    "vit_tile2_b1_ivf_agg1_ov50": ("embedded ViT, tiles x2 overlapping by half, border 1, IVF, no 3x3 mean", {},
                                   {"tile": 2.0, "tile_overlap": 0.5, "score_border": 1, "index": "ivf",
                                    "aggregation": 1}),
    # `anomaly fit`'s default since 2026-12-02: the ensemble of defaults.ENSEMBLE (Lite0 with two stages, tiles auto;
    # the embedded ViT with tiles x2 and the edge ring out), every setting the shipped default's (nothing pinned)
    "ensemble": ("default ensemble: Lite0 + embedded ViT tiles x2", {"ensemble": True}, {}),
}
# the order decides what is measured first when a run is stopped: the candidates for the defaults first
DEFAULT_CONFIGS = {
    "mpdd_metal_plate": ["vit", "lite0", "lite0_s1", "lite0_tileauto", "lite0_tile2", "lite2", "lite2_s1", "vit_tile2", "vit_pad",
                         "random"],
    "kolektorsdd": ["lite0", "lite0_s1", "lite0_tileauto", "vit", "vit_tileauto", "vit_tile2", "lite2", "lite2_s1", "lite2_tileauto",
                    "lite0_tile2", "vit_pad", "random", "lite0_s1_tile2", "lite2_tile2"],
}


class Grids:
    """Backbone grids of a batch, memoised by (backbone inputs, pixels) for configurations that share them."""

    def __init__(self) -> None:
        self.source, self.memo = None, {}
        self.computed_s = self.reused_s = 0.0

    def use(self, source: tuple) -> None:
        if source != self.source:                   # another backbone or tiling: nothing left to share
            self.source, self.memo = source, {}
        self.computed_s = self.reused_s = 0.0

    def get(self, bb, batch: list, blocks: tuple, batch_size: int):
        h = hashlib.blake2b(digest_size=32)
        for v in batch:
            a = np.ascontiguousarray(np.asarray(v))
            h.update(str(a.shape).encode() + a.tobytes())
        key = h.digest()
        if key in self.memo:
            g, s = self.memo[key]
            self.reused_s += s
            return g
        t0 = time.perf_counter()
        g = bb.patch_grids(batch, blocks=blocks, batch_size=batch_size, progress=False)
        s = time.perf_counter() - t0
        self.computed_s += s
        self.memo[key] = (g, s)
        return g


def detector_class(grids: Grids, union_blocks: tuple | None):
    from frozenvit.anomaly import PatchCore

    class Benchmarked(PatchCore):
        def _features(self, batch: list) -> tuple:
            blocks = union_blocks if union_blocks is not None else self.blocks_
            g = grids.get(self.backbone_, batch, blocks, self.batch_size)
            return self.features_from(g), g.mappings

    Benchmarked.__name__ = "PatchCore"
    return Benchmarked


class TimedPredict:
    """What evaluate_dataset needs of a detector, with predict timed and its backbone share counted."""

    def __init__(self, det, grids: Grids) -> None:
        self.det, self.grids, self.seconds, self.backbone_s, self.n = det, grids, 0.0, 0.0, 0

    def predict(self, images: list):
        before = self.grids.computed_s + self.grids.reused_s
        t0 = time.perf_counter()
        out = self.det.predict(images)
        self.seconds += time.perf_counter() - t0
        self.backbone_s += self.grids.computed_s + self.grids.reused_s - before
        self.n += len(images)
        return out

    def decision_threshold(self):
        return self.det.decision_threshold()


class GridsSum:
    """The backbone seconds of several Grids (one per ensemble member), as TimedPredict reads them."""

    def __init__(self, parts: list) -> None:
        self.parts = parts

    computed_s = property(lambda self: sum(g.computed_s for g in self.parts))
    reused_s = property(lambda self: sum(g.reused_s for g in self.parts))


def ensemble_detector(vit_weights: str | None):
    """The default ensemble, each member's backbone grids timed by its own Grids (no pinned settings)."""
    from frozenvit.anomaly import PatchCoreEnsemble, defaults

    members, parts = [], []
    for name, own in defaults.ENSEMBLE:
        g = Grids()
        g.use((name,))
        bb = load({"name": name} if name else {}, vit_weights)
        members.append(detector_class(g, None)(bb, progress=False, **own))
        parts.append(g)
    return PatchCoreEnsemble(members), GridsSum(parts)


def load(cfg_bb: dict, vit_weights: str | None = None):
    """The configuration's backbone; `vit_weights` (--vit-weights) stands in for the embedded default's weights
    in the "embedded ViT" rows, so a candidate default is judged with exactly the same settings."""
    from frozenvit.backbone import load_backbone

    kw = dict(cfg_bb)
    name = kw.pop("name", None)
    if not kw.get("pretrained", True):
        torch.manual_seed(0)                                    # the same random twin on every run
    elif name is None and vit_weights is not None:
        name, kw["weights"] = "vit_tiny_patch16_224", vit_weights
    return load_backbone(name, **kw)


def merged(path: Path, rows: list, runs: list, keep: bool) -> tuple[list, list]:
    """This run's rows and runs, after those of the results file already at `path` that it does not redo
    (`keep`: --keep; the file is re-read at every write, so runs of other configurations may go on in parallel)."""
    import json

    mine = {r["config"] for r in rows}
    old_rows, old_runs = [], []
    if keep and path.is_file():
        old = json.loads(path.read_text())
        for r, u in zip(old.get("table", []), old.get("runs", [])):
            if r["config"] not in mine:
                old_rows.append(r)
                old_runs.append(u)
    return old_rows + rows, old_runs + runs


def write_rows(set_name: str, ds, first, threads: int, out: str | None, keep: bool, rows: list, runs: list,
               n_good: int, n_bad: int) -> None:
    path = Path(f"{out}_{set_name}.json") if out else RESULTS / f"anomaly_real_{set_name}.json"
    table, kept = merged(path, rows, runs, keep)
    write_result(f"anomaly_real_{set_name}",
                 {"set": set_name, "n_train": len(ds.train), "n_test_good": n_good, "n_test_defective": n_bad,
                  "image_size": list(first.shape[:2]), "threads": threads, "table": table, "runs": kept}, path)


def run_ensemble(c: str, label: str, ds, first, vit_weights: str | None, rows: list, runs: list) -> None:
    """The default ensemble's row: fitted and evaluated as the others, its backbone time summed over members."""
    from frozenvit.anomaly.evaluation import evaluate_dataset

    det, grids = ensemble_detector(vit_weights)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det.fit(ds.train)
    fit_s = time.perf_counter() - t0
    timed = TimedPredict(det, grids)
    t0 = time.perf_counter()
    metrics, per_type = evaluate_dataset(timed, ds)
    eval_s = time.perf_counter() - t0
    n_inputs = sum(len(t) if (t := m.tiling_of(first.shape[:2])) is not None else 1 for m in det.members_)
    row = {"config": c, "what": label, "input": "+".join(f"{m.backbone_.config.img_size[0]}" for m in det.members_),
           "inputs": n_inputs, "image AUROC": metrics["image_auroc"],
           "pixel AUROC": metrics.get("pixel_auroc", float("nan")), "AUPRO@0.3": metrics.get("aupro", float("nan")),
           "detected": metrics["detection_rate"], "false alarms": metrics["false_alarm_rate"],
           "fit s/img": fit_s / len(ds.train), "predict s/img": timed.seconds / timed.n,
           "backbone share": timed.backbone_s / timed.seconds if timed.seconds else float("nan")}
    rows.append(row)
    runs.append({"config": c, "label": label, "members": [
                    {"backbone": m.backbone_.name, "weights_sha256": getattr(m.backbone_, "weights_sha256", None),
                     "img_size": list(m.backbone_.config.img_size), "blocks": list(m.blocks_), "tile": m.tile,
                     "score_border": m.border_(), "aggregation": m.aggregation_(), "index": m.index_kind(len(m.bank_)),
                     "bank": list(m.bank_.shape), "standardiser": list(sd)}
                    for m, sd in zip(det.members_, det.standardisers_)],
                 "n_holdout": len(det.calibration_scores_), "threshold": det.decision_threshold(), "metrics": metrics,
                 "per_defect_type": per_type, "fit_s": fit_s, "predict_s": timed.seconds,
                 "predict_backbone_s": timed.backbone_s, "evaluate_wall_s": eval_s, "n_test": timed.n,
                 "backbone_inputs_per_image": n_inputs})
    print(f"  {c:15s} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                    for k, v in row.items() if k not in ("config", "what")), flush=True)


def run_set(set_name: str, configs: list[str], threads: int, out: str | None, data_root: str,
            keep: bool = False, vit_weights: str | None = None) -> None:
    from frozenvit.anomaly import read_image, read_mvtec
    from frozenvit.anomaly.evaluation import evaluate_dataset
    from frozenvit.anomaly.patchcore import default_blocks

    root = Path(data_root) / set_name
    ds = read_mvtec(root)
    n_good = sum(s.label == 0 for s in ds.test)
    n_bad = sum(s.label == 1 for s in ds.test)
    print(f"{set_name}: {len(ds.train)} train normals; test {n_good} good / {n_bad} defective; {threads} thread(s)",
          flush=True)
    first = read_image(ds.train[0])
    grids, rows, runs = Grids(), [], []
    backbones: dict[tuple, object] = {}
    for c in configs:
        label, cfg_bb, cfg_pc = CONFIGS[c]
        if cfg_bb.get("ensemble"):
            backbones.clear()
            run_ensemble(c, label, ds, first, vit_weights, rows, runs)
            write_rows(set_name, ds, first, threads, out, keep, rows, runs, n_good, n_bad)
            continue
        bkey = tuple(sorted(cfg_bb.items()))
        if bkey not in backbones:
            backbones.clear()                                    # one backbone in memory at a time
            backbones[bkey] = load(cfg_bb, vit_weights)
        bb = backbones[bkey]
        blocks = tuple(bb.resolve_blocks(cfg_pc.get("blocks") or default_blocks(bb.config.depth, bb.config.strides)))
        # configurations on the same backbone and inputs share grids: computed for the union of their blocks
        share = (bkey, cfg_pc.get("tile"))
        sharing = [d for d in configs if (tuple(sorted(CONFIGS[d][1].items())), CONFIGS[d][2].get("tile")) == share]
        all_blocks = set(blocks)
        for d in sharing:
            all_blocks |= set(bb.resolve_blocks(CONFIGS[d][2].get("blocks")
                                                or default_blocks(bb.config.depth, bb.config.strides)))
        grids.use(share)
        cls = detector_class(grids, tuple(sorted(all_blocks)))
        # untiled, every patch in the image score, exact search and the 3x3 neighbourhood mean, unless the
        # configuration says otherwise: the rows measured before score_border, index="auto" and aggregation="auto"
        # existed did that (the defaults are now "auto" for all three: the _b1 rows, _b1_ivf where the bank has
        # 10,000 entries or more, and _agg1 for a ViT)
        det = cls(bb, progress=False, **{"tile": None, "score_border": 0, "index": "flat", "aggregation": 3, **cfg_pc})
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                       # the holdout's 1% bound: reported as measured
            det.fit(ds.train)
        fit_wall = time.perf_counter() - t0
        fit_reused = grids.reused_s
        timed = TimedPredict(det, grids)
        t0 = time.perf_counter()
        metrics, per_type = evaluate_dataset(timed, ds)
        eval_s = time.perf_counter() - t0
        pred_reused = grids.reused_s - fit_reused
        tiling = det.tiling_of(first.shape[:2])
        n_inputs = len(tiling) if tiling is not None else 1
        fit_s = fit_wall + fit_reused
        pred_s = timed.seconds + pred_reused
        row = {"config": c, "what": label, "input": f"{bb.config.img_size[0]}x{bb.config.img_size[1]}",
               "inputs": n_inputs, "image AUROC": metrics["image_auroc"],
               "pixel AUROC": metrics.get("pixel_auroc", float("nan")), "AUPRO@0.3": metrics.get("aupro", float("nan")),
               "detected": metrics["detection_rate"], "false alarms": metrics["false_alarm_rate"],
               "fit s/img": fit_s / len(ds.train), "predict s/img": pred_s / timed.n,
               "backbone share": timed.backbone_s / pred_s if pred_s else float("nan")}
        rows.append(row)
        runs.append({"config": c, "label": label, "backbone": bb.name, "pretrained": bb.config.pretrained,
                     "weights_sha256": getattr(bb, "weights_sha256", None),
                     "img_size": list(bb.config.img_size), "resize": cfg_bb.get("resize", "stretch"),
                     "blocks": list(det.blocks_), "tile": det.tile, "tile_overlap": det.tile_overlap, "augment": det.augment,
                     "reduce_dim": det.reduce_dim, "coreset_ratio": det.coreset_ratio,
                     "image_score": det.image_score, "score_border": det.score_border, "index": det.index,
                     "bank": list(det.bank_.shape), "n_train_patches": int(det.n_train_patches_),
                     "n_fit_images": det.n_train_images_, "n_holdout": len(det.calibration_scores_),
                     "threshold": det.decision_threshold(), "metrics": metrics, "per_defect_type": per_type,
                     "fit_s": fit_s, "fit_wall_s": fit_wall, "predict_s": pred_s, "predict_wall_s": timed.seconds,
                     "predict_backbone_s": timed.backbone_s, "reused_backbone_s": fit_reused + pred_reused,
                     "evaluate_wall_s": eval_s, "n_test": timed.n, "backbone_inputs_per_image": n_inputs})
        print(f"  {c:15s} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in row.items() if k not in ("config", "what")), flush=True)
        write_rows(set_name, ds, first, threads, out, keep, rows, runs, n_good, n_bad)
        del det, timed
    print(f"\n{set_name} ({len(ds.train)} train normals, {n_good} good / {n_bad} defective test images)")
    print_table(rows)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--configs", nargs="+", default=None, choices=tuple(CONFIGS),
                    help="configurations to run, in this order (None: every one planned for the set)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the configurations of an existing results file that this run does not redo")
    ap.add_argument("--data-root", default=str(SHARED_DATA / "defects"), help="folder holding the sets")
    ap.add_argument("--out", default=None, help="JSON path prefix (None: benchmarks/results/anomaly_real)")
    ap.add_argument("--vit-weights", default=None, metavar="SAFETENSORS",
                    help="a ViT-Ti/16 student (e.g. a candidate default) in place of the embedded default's weights "
                         "in the 'vit*' rows; needs --out, so the default's own file is not overwritten")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    if args.vit_weights and not args.out:
        ap.error("--vit-weights needs --out: otherwise the student's rows would replace the embedded default's "
                 "in benchmarks/results/anomaly_real_<set>.json")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import faiss

    faiss.omp_set_num_threads(args.threads)
    for s in args.sets:
        run_set(s, args.configs or DEFAULT_CONFIGS[s], args.threads, args.out, args.data_root, args.keep,
                args.vit_weights)


if __name__ == "__main__":
    main()
