"""frozenvit.anomaly: PatchCore defect maps on frozen ViT patch grids.

    from anomaly import PatchCore, read_mvtec, anomaly_metrics
    ds = read_mvtec("mvtec/bottle")
    det = PatchCore(backbone=bb, coreset_ratio=0.1).fit(ds.train)       # paths, arrays or PIL images
    out = det.predict([s.path for s in ds.test])  # out.scores (B,), out.maps [(H_i, W_i)], out.is_defect (B,)
    det.save("model/"); det = PatchCore.load("model/", backbone=bb)
"""
from .audit import AuditResult, contamination_audit
from .coreset import chunked_coreset, greedy_coreset, greedy_kcenter, random_projection
from .datasets import AnomalyDataset, TestSample, load_images, read_dataset, read_folders, read_mvtec
from .errors import DatasetError
from .images import read_image, read_mask
from .metrics import anomaly_metrics, aupro, f1_max, image_auroc, pixel_auroc, pro_curve
from .patchcore import AnomalyPrediction, PatchCore, conformal_threshold, default_blocks
from .scoring import fuse_blocks, local_aggregate, reweighted_max, smooth, topk_mean
from .search import build_index, knn
from .synthetic import CATEGORIES, DEFECTS, make_synthetic_mvtec, render_sample
from .viz import overlay

__all__ = [
    "PatchCore", "AnomalyPrediction", "conformal_threshold", "default_blocks", "contamination_audit", "AuditResult",
    "read_mvtec", "read_folders", "read_dataset", "load_images", "AnomalyDataset", "TestSample", "DatasetError",
    "read_image", "read_mask", "anomaly_metrics", "aupro", "pro_curve", "image_auroc", "pixel_auroc", "f1_max",
    "greedy_coreset", "chunked_coreset", "greedy_kcenter", "random_projection", "build_index", "knn",
    "local_aggregate", "fuse_blocks", "reweighted_max", "topk_mean", "smooth", "make_synthetic_mvtec",
    "render_sample", "CATEGORIES", "DEFECTS", "overlay",
]
