"""The backbone's section of `frozenvit demo`: the embedded default's contract and diagnostics on real photos."""
from __future__ import annotations

import numpy as np

from .suite.report import DemoContext, Section
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


def section(ctx: DemoContext) -> Section:
    from .diagnostics import inspect_backbone, plot_inspection
    from .loading import load_backbone

    sec = Section("Backbone: the embedded default", order=10)
    bb = load_backbone()
    sec.pre(bb.config.describe())
    photos = sample_photos(2 if ctx.quick else 6)
    rep = inspect_backbone(bb, photos)
    sec.text(f"Diagnostics on {len(photos)} real photos shipped with installed packages.")
    sec.pre(rep.table())
    sec.figure(plot_inspection(rep), "Attention entropy per block and head, mean attention distance per head, "
                                     "and last-block patch-token norms of one photo.")
    return sec
