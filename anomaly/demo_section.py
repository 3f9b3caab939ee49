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


def shown_images(ds: Any, n: int = 6) -> list:
    """The test samples the defect-map figure shows: n - 1 defect images evenly spaced through the defect list
    (so several defect types appear), then the first good one (what a normal image's map looks like)."""
    bad = [s for s in ds.test if s.label == 1]
    good = [s for s in ds.test if s.label == 0]
    return (bad[:: max(1, len(bad) // (n - 1))][: n - 1] + good[:1])[:n]


def _add_map_scale(fig: Any, lo: float, hi: float, alpha: float = 0.6) -> None:
    """A colour bar under the maps: the overlay's 'jet' colours with its alpha ramp over a grey background,
    transparent at `lo`, fully coloured (alpha) from `hi` (anomaly.viz.overlay's scale)."""
    from matplotlib import colormaps

    t = np.linspace(0, 1, 256)
    rgb = colormaps["jet"](t)[:, :3]                                          # (256, 3)
    a = alpha * t[:, None]
    strip = (1 - a) * 0.8 + a * rgb                                           # over light grey, as on a photo
    ax = fig.add_axes([0.3, 0.06, 0.4, 0.03])                               # under the rect tight_layout left
    ax.imshow(strip[None], aspect="auto", extent=(lo, hi, 0, 1))
    ax.set_yticks([])
    ax.set_xticks([lo, hi], [f"{lo:.2f}\nmedian normal", f"{hi:.2f}\nlargest normal"], fontsize=8)
    ax.set_title("defect map: patch score (standardised by the held-out normals)", fontsize=8)


def overlay_figure(det: Any, ds: Any, n: int = 6):
    import matplotlib.pyplot as plt

    from .images import read_image
    from .viz import overlay

    picks = shown_images(ds, n)
    images = [read_image(s.path) for s in picks]
    pred = det.predict(images)
    fig, axes = plt.subplots(2, len(picks), figsize=(2.3 * len(picks), 5.4))
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
    fig.tight_layout(rect=(0, 0.14, 1, 1))                                    # room for the colour scale
    _add_map_scale(fig, *det.map_range_)
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


def false_alarm_note(rows: list[dict], counts: list[tuple[str, int, int]]) -> str:
    """What the observed false-alarm rate of a small test set says next to the calibration bound."""
    parts = []
    for row, (cat, n_good, n_held) in zip(rows, counts):
        fa = row["false alarms"]
        if isinstance(fa, float) and fa == fa and isinstance(row["FA bound"], float):
            parts.append(f"{cat}: {round(fa * n_good)} false alarm{'s' if round(fa * n_good) != 1 else ''} "
                         f"among {n_good} good test images (rate {fa:.2f}), bound {row['FA bound']:.4f} from "
                         f"{n_held} held-out normals")
    if not parts:
        return ""
    step = 1 / max(n for _, n, _ in counts)
    return ("; ".join(parts) + ". The FA bound 1/(n+1) limits the false-alarm rate expected on average over "
            "random draws of the n held-out calibration images, not the rate on one small test set: with so few "
            f"good test images each false alarm moves the observed rate by {step:.3g}, so an observed rate above "
            "the bound here does not contradict it; checking the bound itself takes many more good images.")


def columns_note(out_dir: Path) -> str:
    """The table's column names in plain words, with a link (relative to the report in `out_dir`) to the glossary
    when the docs are beside the code (a checkout)."""
    import html
    import os

    glossary = Path(__file__).resolve().parent.parent / "docs" / "glossary.md"
    where = "docs/glossary.md"
    try:
        link = f"<a href='{html.escape(Path(os.path.relpath(glossary, Path(out_dir).resolve())).as_posix())}'>{where}</a>"
    except ValueError:     # another drive (Windows)
        link = where
    text = ("Columns: image/pixel AUROC, how well the image score / the map separates defective from good "
            "(1 = perfectly); AUPRO@0.3, the mean overlap of the map with each defect region, up to a 30% "
            "false-positive rate of normal pixels; false alarms, the share of good test images flagged; FA bound, "
            "the bound on that rate explained above; detected, the share of defective test images flagged; banks, "
            "each member's memory bank as patches x channels; fit s / eval s, seconds to fit and to evaluate.")
    return f"<p>{html.escape(text)} Definitions: {link if glossary.is_file() else where}.</p>"


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
    rows, first, counts = [], None, []
    for c in cats:
        row, det, ds = run_category(members, root, c, sizes)
        rows.append(row)
        counts.append((c, sum(s.label == 0 for s in ds.test), len(det.calibration_scores_)))
        first = first or (det, ds)
    sec.table(rows)
    sec.text(false_alarm_note(rows, counts))
    sec.html(columns_note(ctx.out_dir or root))
    sec.text("The same pipeline on a random-initialised ViT of the same shape, and with centring off, is measured "
             "by benchmarks/anomaly_quality.py (its latest results: benchmarks/results/anomaly_quality.json); the "
             "default ensemble on real defect sets is in docs/results.md, section 'anomaly'.")
    n = 4 if ctx.quick else 6
    det, ds = first
    shown = ", ".join(f"{Path(s.path).parent.name}/{Path(s.path).name}" for s in shown_images(ds, n))
    lo, hi = det.map_range_
    sec.figure(overlay_figure(det, ds, n=n),
               f"{cats[0]}: {n - 1} of the defective test images, evenly spaced through the list so that several "
               f"defect types appear, and the first good one for comparison ({shown}). Top: the image; bottom: its "
               "defect map at original size, ground truth outlined in green. Map colours (scale under the figure) "
               "are patch scores on the ensemble's scale (each member's score standardised by its held-out normals, "
               f"then averaged): transparent at or below {lo:.2f}, the median held-out normal patch, then blue, "
               f"green and yellow, fully red at or above {hi:.2f}, the largest held-out normal patch. Titles: image "
               "score and the decision at the calibrated threshold.",
               alt=f"{cats[0]} test images ({shown}) with their defect maps overlaid")
    png = review_screenshot(*first, root / "review")
    if png is not None:
        sec.figure(png, f"`frozenvit anomaly review` over the {cats[0]} test images: the list by score, the photo and its "
                        "defect map side by side (map opacity adjustable), the threshold slider with the flagged count "
                        "(the red tick is the calibrated threshold), defect-type filters and the normal/defect marks.")
    return sec
