"""frozenvit.anomaly: PatchCore defect maps on frozen ViT patch grids.

    from frozenvit.anomaly import PatchCore, read_mvtec, anomaly_metrics
    ds = read_mvtec("mvtec/bottle")
    det = PatchCore(backbone=bb, coreset_ratio=0.1).fit(ds.train)       # paths, arrays or PIL images
    out = det.predict([s.path for s in ds.test])  # out.scores (B,), out.maps [(H_i, W_i)], out.is_defect (B,)
    det.save("model/"); det = PatchCore.load("model/", backbone=bb)

Names are imported on first use (PEP 562), so `frozenvit --help` does not pay for scikit-learn or faiss.
"""
from __future__ import annotations

from frozenvit.backbone.suite.lazy import lazy_exports

_API = {
    "patchcore": ("PatchCore", "AnomalyPrediction"),
    "features": ("PatchFeatures", "default_blocks", "local_aggregate", "center_tokens", "fuse_blocks"),
    "anomaly_map": ("anomaly_maps", "canvas_maps", "original_maps"),
    "threshold": ("conformal_threshold", "threshold_at", "min_held_out", "OPERATING_FPRS"),
    "select": ("PatchCoreSearch", "default_candidates"),
    "planted": ("plant_defects", "plant_cutpaste", "plant_texture"),
    "ensemble": ("PatchCoreEnsemble", "load_detector", "default_members"),
    "audit": ("contamination_audit", "AuditResult"),
    "datasets": ("read_mvtec", "read_folders", "read_dataset", "load_images", "AnomalyDataset", "TestSample"),
    "errors": ("DatasetError", "LargeImage"),
    "images": ("read_image", "read_mask"),
    "metrics": ("anomaly_metrics", "aupro", "pro_curve", "image_auroc", "pixel_auroc", "f1_max"),
    "evaluation": ("evaluate_dataset",),
    "coreset": ("coreset_bank", "greedy_coreset", "chunked_coreset", "greedy_kcenter", "random_projection"),
    "search": ("build_index", "knn"),
    "scoring": ("reweighted_max", "topk_mean"),
    "tiling": ("Tiling",),
    "synthetic": ("make_synthetic_mvtec", "render_sample", "CATEGORIES", "DEFECTS"),
    "viz": ("overlay",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _API, globals())
