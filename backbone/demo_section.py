"""The backbone's section of `frozenvit demo`: the embedded default's contract and diagnostics on real photos."""
from __future__ import annotations

import numpy as np

from .suite.report import DemoContext, Section
_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left", "horse")


def sample_photos(n: int = 6) -> list[np.ndarray]:
    """A few real photos that ship with installed packages (scikit-image, else matplotlib): offline."""
    return named_photos(n)[1]


def named_photos(n: int = 6) -> tuple[list[str], list[np.ndarray]]:
    """sample_photos with their names (scikit-image's data names, or matplotlib's sample file)."""
    names: list[str] = []
    photos: list[np.ndarray] = []
    try:
        import skimage.data as skd

        for name in _PHOTOS[:n]:
            with np.errstate(all="ignore"):
                img = getattr(skd, name)()
            photos.append(img if img.ndim == 3 else np.repeat(img[..., None], 3, 2))
            names.append(name)
    except Exception:  # scikit-image is optional
        names = names[:len(photos)]
    if not photos:
        from matplotlib import cbook
        from PIL import Image

        with cbook.get_sample_data("grace_hopper.jpg") as f:
            photos.append(np.asarray(Image.open(f).convert("RGB")))
        names = ["grace_hopper"]
    return names, photos


def _photo_strip(names: list[str], photos: list[np.ndarray]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(photos), figsize=(2.2 * len(photos), 2.4), squeeze=False)
    for i, (ax, name, img) in enumerate(zip(axes[0], names, photos)):
        ax.imshow(img)
        ax.set_title(f"image {i}: {name}", fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    return fig


def _readable(fig, names: list[str]):
    """plot_inspection's figure with a legend for the heads, named colour bars and the photo of the norm map."""
    entropy_ax, distance_ax, norms_ax, entropy_bar, norms_bar = fig.axes[:5]
    for i, points in enumerate(distance_ax.collections):
        points.set_label(f"head {i}")
    distance_ax.legend(fontsize=8, title="one colour per head", title_fontsize=8)
    entropy_bar.set_ylabel("attention entropy (nats)")
    norms_bar.set_ylabel("patch-token L2 norm")
    norms_ax.set_title(norms_ax.get_title().replace("image 0", f"image 0 ({names[0]})"))
    return fig


def entropy_note(rep) -> str:
    """One sentence reading the entropy table: which blocks attend nearly uniformly, which locally."""
    ent, dist = rep.entropy.mean(1), rep.distance.mean(1)                  # (depth,) each
    keys = round(float(np.exp(rep.entropy_max)))
    wide = [b for b in range(len(ent)) if ent[b] >= 0.9 * rep.entropy_max]
    note = (f"Reading the table: uniform attention over the {keys} tokens (patches and CLS) has entropy "
            f"log {keys} = {rep.entropy_max:.2f} nats; ")
    if not wide:
        return note + "no block comes within 10% of it, so every block attends selectively."
    narrow = int(np.argmin(ent))
    return note + (f"blocks {_ranges(wide)} come within 10% of it ({ent[wide].min():.2f}-{ent[wide].max():.2f} "
                   f"nats, mean distance {dist[wide].mean():.0f} px): their heads spread attention over nearly "
                   f"the whole image, while block {narrow} is the most selective ({ent[narrow]:.2f} nats, "
                   f"{dist[narrow]:.0f} px).")


def _ranges(blocks: list[int]) -> str:
    """[2, 6, 7, 8] -> '2, 6-8'."""
    out, start = [], blocks[0]
    for a, b in zip(blocks, blocks[1:] + [None]):
        if b != a + 1:
            out.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)


def section(ctx: DemoContext) -> Section:
    from .diagnostics import inspect_backbone, plot_inspection
    from .loading import load_backbone

    sec = Section("Backbone: the embedded default", order=10)
    bb = load_backbone()
    sec.pre(bb.config.describe())
    names, photos = named_photos(2 if ctx.quick else 6)
    rep = inspect_backbone(bb, photos)
    sec.text(f"Diagnostics on {len(photos)} real photos shipped with installed packages "
             f"({'scikit-image' if names[0] != 'grace_hopper' else 'matplotlib'}'s sample data, shown below).")
    sec.figure(_photo_strip(names, photos), "The photos the diagnostics run on, numbered as in the figure below.",
               alt="The sample photos: " + ", ".join(names))
    sec.pre(rep.table())
    sec.text(entropy_note(rep))
    sec.figure(_readable(plot_inspection(rep), names),
               "Left: attention entropy per block and head. Middle: mean attention distance per head (one colour "
               f"per head). Right: last-block patch-token norms of image 0 ({names[0]}), one cell per patch.",
               alt="Attention entropy and distance per block and head, and the token-norm map of " + names[0])
    return sec
