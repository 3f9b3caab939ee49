"""`frozenvit demo`: the backbone section plus every application's section, one HTML report."""
from __future__ import annotations

import logging
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from typing import Sequence

import numpy as np

from .artifacts import output_dir
from .report import DemoContext, Section, write_report

log = logging.getLogger("frozenvit.demo")
_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left", "horse")


def sample_photos(n: int = 6) -> list[np.ndarray]:
    """A few real photos that ship with installed packages (scikit-image, else matplotlib): offline."""
    photos: list[np.ndarray] = []
    try:
        import skimage.data as skd

        for name in _PHOTOS[:n]:
            with np.errstate(all="ignore"):
                img = getattr(skd, name)()
            photos.append(img if img.ndim == 3 else np.repeat(img[..., None], 3, 2))
    except Exception:  # scikit-image is optional
        pass
    if not photos:
        from matplotlib import cbook
        from PIL import Image

        with cbook.get_sample_data("grace_hopper.jpg") as f:
            photos.append(np.asarray(Image.open(f).convert("RGB")))
    return photos


def backbone_section(ctx: DemoContext) -> Section:
    from .errors import BackboneUnavailable
    from .inspect import inspect_backbone, plot_inspection
    from .loading import load_backbone

    sec = Section("Backbone: the embedded default", order=10)
    try:
        bb = load_backbone()
    except BackboneUnavailable as e:
        return sec.text(f"No embedded default backbone in this build: {e}")
    sec.pre(bb.config.describe())
    photos = sample_photos(2 if ctx.quick else 6)
    rep = inspect_backbone(bb, photos)
    sec.text(f"Diagnostics on {len(photos)} real photos shipped with installed packages.")
    sec.pre(rep.table())
    sec.figure(plot_inspection(rep), "Attention entropy per block and head, mean attention distance per head, "
                                     "and last-block patch-token norms of one photo.")
    return sec


def run_demo(out: Path, threads: int = 2, quick: bool = False, only: Sequence[str] | None = None) -> Path:
    """Run the backbone section and every `frozenvit.demo` entry point; a failing section is reported, not fatal."""
    ctx = DemoContext(out_dir=Path(out), threads=threads, quick=quick)
    output_dir(ctx.out_dir, "demo-report")
    makers = [("backbone", backbone_section)]
    makers += [(ep.name, ep) for ep in sorted(entry_points(group="frozenvit.demo"), key=lambda e: e.name)]
    sections = []
    for name, maker in makers:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        print(f"[demo] {name} ...", flush=True)
        try:
            fn = maker.load() if hasattr(maker, "load") else maker
            sec = fn(ctx)
        except Exception as e:
            log.error("demo section %s failed: %s", name, e)
            sec = Section(f"{name}: failed", order=90).pre("".join(traceback.format_exception(e))[-3000:])
        sec.text(f"(section computed in {time.perf_counter() - t0:.1f} s with {threads} threads)")
        sections.append(sec)
        print(f"[demo] {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    sections.sort(key=lambda s: s.order)
    return write_report(ctx.out_dir / "index.html", "frozenvit demo", sections)
