"""The anomaly section of `frozenvit demo`: the seeded synthetic set, with what `anomaly fit` uses with no options
(the default ensemble of anomaly/defaults.py)."""
from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def run_category(members: list, root: Path, category: str, sizes: dict) -> tuple[dict, Any, Any]:
    """Fit the ensemble of `members` on train/good, evaluate on test/: a metrics row, the detector and the dataset."""
    from .ensemble import PatchCoreEnsemble
    from .evaluation import evaluate_dataset
    from .datasets import read_mvtec
    from .synthetic import make_synthetic_mvtec

    path = root / category
    if not path.is_dir():
        make_synthetic_mvtec(root, category, **sizes)
    ds = read_mvtec(path)
    t0 = time.perf_counter()
    with warnings.catch_warnings():   # a demo-sized holdout cannot certify 1%: the table shows the bound instead
        warnings.simplefilter("ignore")
        det = PatchCoreEnsemble(members, progress=False).fit(ds.train)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    metrics, _ = evaluate_dataset(det, ds)
    eval_s = time.perf_counter() - t0
    row = {"category": category, "image AUROC": metrics["image_auroc"], "pixel AUROC": metrics.get("pixel_auroc"),
           "AUPRO@0.3": metrics.get("aupro"), "false alarms": metrics["false_alarm_rate"],
           "FA bound": 1 / (len(det.calibration_scores_) + 1) if det.threshold_ is not None else "uncalibrated",
           "detected": metrics["detection_rate"],
           "banks": " + ".join(f"{m.bank_.shape[0]}x{m.bank_.shape[1]}" for m in det.members_),
           "fit s": fit_s, "eval s": eval_s}
    return row, det, ds


def overlay_figure(det: Any, ds: Any, n: int = 6):
    import matplotlib.pyplot as plt

    from .images import read_image
    from .viz import overlay

    bad = [s for s in ds.test if s.label == 1]
    good = [s for s in ds.test if s.label == 0]
    picks = (bad[:: max(1, len(bad) // (n - 1))][: n - 1] + good[:1])[:n]
    images = [read_image(s.path) for s in picks]
    pred = det.predict(images)
    fig, axes = plt.subplots(2, len(picks), figsize=(2.3 * len(picks), 4.6))
    axes = np.atleast_2d(axes).reshape(2, -1)
    flags = [None] * len(picks) if pred.is_defect is None else pred.is_defect     # None: uncalibrated, no decision
    for j, (s, img, amap, score, flag) in enumerate(zip(picks, images, pred.maps, pred.scores, flags)):
        axes[0, j].imshow(img)
        axes[0, j].set_title(s.defect_type, fontsize=9)
        axes[1, j].imshow(overlay(img, amap, *det.map_range_, mask=s.load_mask(img.shape[:2])))
        axes[1, j].set_title(f"{score:.2f} {'uncalibrated' if flag is None else 'DEFECT' if flag else 'ok'}", fontsize=9,
                             color="crimson" if flag else "black")
        for ax in axes[:, j]:
            ax.axis("off")
    fig.tight_layout()
    return fig


def review_screenshot(det: Any, ds: Any, out: Path) -> bytes | None:
    """A screenshot of `anomaly review` over the test images of `ds` (predictions and overlays written to `out`),
    the top-scored one open; None without chromium and playwright (review.screenshot)."""
    from frozenvit.backbone.suite.artifacts import atomic_write_bytes

    from .review import Labels, ReviewData, chromium, labels_path, screenshot
    from .stream import iter_scored
    from .viz import overlay_file_names

    if chromium() is None:
        return None
    root = Path(ds.test[0].path).parent.parent                                # the category's test/ folder
    names = [str(Path(s.path).relative_to(root)) for s in ds.test]
    (out / "overlays").mkdir(parents=True, exist_ok=True)
    rows = []
    for name, ov, got in zip(names, overlay_file_names(names), iter_scored(det, [s.path for s in ds.test])):
        atomic_write_bytes(out / "overlays" / ov, got.overlay_png)
        rows.append({"name": name, "score": got.score, "type": Path(name).parent.name, "overlay": ov})
    rows.sort(key=lambda r: -r["score"])
    data = ReviewData(out, root.resolve(), rows, det.decision_threshold(), Labels(labels_path(out), root))
    return screenshot(data)


def section(ctx: Any) -> Any:
    from frozenvit.backbone.errors import BackboneUnavailable
    from frozenvit.backbone.suite.report import Section

    sec = Section("Anomaly: PatchCore defect maps", order=20)
    try:
        from .ensemble import default_members

        members = default_members(progress=False)                  # what `anomaly fit` uses with no options
    except BackboneUnavailable as e:
        return sec.text(f"Skipped: a default ensemble member's backbone cannot be loaded here ({e}). "
                        "Run `frozenvit anomaly synth --out synth` and `frozenvit anomaly fit --data synth/weave "
                        "--backbone NAME --weights FILE --out model` with a local checkpoint instead.")
    if ctx.quick:
        cats, sizes = ["weave"], dict(n_train=8, n_test_good=2, n_test_defect=1, size=(96, 112))
    else:
        cats, sizes = ["weave", "washer"], dict(n_train=30, n_test_good=8, n_test_defect=3, size=(192, 224))
    from .patchcore import default_blocks

    def described(m: Any) -> str:
        bb = m.backbone
        blocks = default_blocks(bb.config.depth, bb.config.strides)
        grid = max((tuple(bb.config.grid_of(b)) for b in blocks), key=lambda g: g[0] * g[1])
        tiles = "" if m.tile == "auto" else f", tiles x{m.tile:g}"
        return f"{bb.name} ({bb.config.img_size[0]} px; blocks {blocks} fused on their {grid[0]}x{grid[1]} grid{tiles})"

    root = Path(ctx.out_dir) / "anomaly-synthetic" if ctx.out_dir else Path(tempfile.mkdtemp())
    sec.text(f"Seeded synthetic set in MVTec AD layout ({', '.join(cats)}; {sizes['n_train']} normal training images, "
             f"{sizes['n_test_good']} good and {sizes['n_test_defect']} per defect type (scratch, hole, crack, stain) "
             f"at test, {sizes['size'][0]}x{sizes['size'][1]} px, exact masks). What `frozenvit anomaly fit` uses with no "
             f"options: the mean of {len(members)} PatchCores' scores and maps, each standardised by its held-out "
             "normals, on " + ", on ".join(described(m) for m in members) + "; "
             "10% coreset, threshold calibrated on held-out normals to a 1% false-alarm target. With a demo-sized "
             "holdout the threshold is the largest held-out score, which bounds the expected false-alarm rate by "
             "1/(n+1) ('FA bound'), not 1%: certifying 1% needs >= 99 held-out normals.")
    rows, first = [], None
    for c in cats:
        row, det, ds = run_category(members, root, c, sizes)
        rows.append(row)
        first = first or (det, ds)
    sec.table(rows)
    sec.text("For the same pipeline on a random-initialised ViT of the same shape, and with centring off, "
             "see benchmarks/anomaly_quality.py (README, anomaly section).")
    sec.figure(overlay_figure(*first, n=4 if ctx.quick else 6),
               f"{cats[0]}: test images (top) and defect maps at original size (bottom; ground truth outlined "
               "in green, transparent up to the median held-out normal patch score, red from the largest one). Titles: image score "
               "and the decision at the calibrated threshold.")
    png = review_screenshot(*first, root / "review")
    if png is not None:
        sec.figure(png, f"`frozenvit anomaly review` over the {cats[0]} test images: the list by score, the photo and its "
                        "defect map side by side (map opacity adjustable), the threshold slider with the flagged count "
                        "(the red tick is the calibrated threshold), defect-type filters and the normal/defect marks.")
    return sec
