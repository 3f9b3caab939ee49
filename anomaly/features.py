"""Patch features: backbone grids -> fused patch features, and the model inputs each image becomes.

    fx = PatchFeatures(backbone, blocks=(7, 10), aggregation=1, reduce_dim=0.25)
    for feats, mappings, owners in fx.batches(images):   # feats (b, D, h, w), one GridMapping and owner per input
        rows = fx.rows(feats)                              # (b*h*w, D)

Per block: tokens minus a robust image-wide token (`center_tokens`), a local mean over a neighbourhood of patches
(`local_aggregate`); the blocks are then fused on the finest grid and pooled along channels (`fuse_blocks`).
The tiling hook: with `tile`, an image reaches the backbone as its overlapping tiles (anomaly/tiling.py) rather
than resized whole; with `augment` (bank only), every input is followed by its symmetric copies.
"""
from __future__ import annotations

import os
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from frozenvit.backbone.preprocess import to_rgb_uint8
from frozenvit.backbone.suite.progress import progress_bar

from .defaults import AUTO_TILE_ASPECT
from .images import as_image
from .tiling import Tiling

# the copies of each bank image that `augment` adds (the identity first): flips, quarter turns, or all 8 symmetries
AUGMENTS = {
    "flips": (lambda a: a, lambda a: a[:, ::-1], lambda a: a[::-1], lambda a: a[::-1, ::-1]),
    "rot90": tuple((lambda a, k=k: np.rot90(a, k)) for k in range(4)),
}
AUGMENTS["all"] = AUGMENTS["rot90"] + tuple((lambda a, k=k: np.rot90(a[:, ::-1], k)) for k in range(4))
_IMAGE_NAME = re.compile(r"^(a tile of )?image (\d+)\b")   # how an input is named in the backbone's warnings


def default_blocks(depth: int, strides: Sequence[int] = ()) -> tuple[int, ...]:
    """Two intermediate blocks, never the last.

    ViT (no `strides`): (7, 10) for 12 blocks, (1, 2) for 4. ConvNet (`strides`, each stage's stride in
    pixels): the paper's stride-8 and stride-16 stages (a ResNet's layer2 and layer3), or, for a ConvNet
    without them, the two stages before the last.
    """
    if strides:
        paper = tuple(strides.index(s) for s in (8, 16) if s in strides)
        if len(paper) == 2:
            return paper
        return tuple(range(max(0, len(strides) - 3), max(1, len(strides) - 1)))
    if depth <= 2:
        return (0,)
    b2 = depth - 2
    b1 = min(round(0.6 * depth), b2 - 1)
    return (max(0, b1), b2)


def local_aggregate(grid: torch.Tensor, size: int = 3) -> torch.Tensor:
    """Mean over each token's size x size neighbourhood: (B, C, h, w) -> (B, C, h, w).

    Border tokens average over the neighbours that exist (no zero padding), so a border
    patch is not pulled towards zero; equals avg_pool2d(count_include_pad=False). Computed as a
    separable box sum of shifted views, ~4x faster than avg_pool2d on CPU. size 1 is the identity.
    """
    if size <= 1:
        return grid
    if size % 2 == 0:
        raise ValueError(f"aggregation size must be odd, got {size}")
    r = size // 2
    h, w = grid.shape[-2:]
    p = F.pad(grid, (r, r, r, r))                                    # (B, C, h + 2r, w + 2r)
    s = sum(p[..., :, i:i + w] for i in range(size))                 # (B, C, h + 2r, w) row sums
    s = sum(s[..., i:i + h, :] for i in range(size))                 # (B, C, h, w) box sums
    ones = F.pad(grid.new_ones(1, 1, h, w), (r, r, r, r))
    count = F.avg_pool2d(ones, size, stride=1) * size * size         # (1, 1, h, w) neighbours inside
    return s / count


def center_tokens(grid: torch.Tensor) -> torch.Tensor:
    """Subtract a robust image-wide reference token: (B, C, h, w) -> (B, C, h, w).

    The reference is the mean of the half of the tokens nearest to the plain mean (a trimmed mean):
    a defect covering less than half of the image does not move it, unlike the plain mean, and it
    costs a few elementwise passes where a per-channel median needs a sort (~20x slower on CPU).
    """
    t = grid.flatten(2)                                              # (B, C, N)
    d = (t - t.mean(2, keepdim=True)).square_().sum(1)               # (B, N) squared distance to the mean
    k = t.shape[2] // 2 + 1
    near = (d <= d.kthvalue(k, dim=1, keepdim=True).values).to(t.dtype)   # (B, N) the nearer half
    ref = (t * near[:, None]).sum(2) / near.sum(1, keepdim=True)     # (B, C)
    return grid - ref[..., None, None]


def reduced_width(width: int, reduce_dim: int | float | None) -> int:
    """Channels kept by `fuse_blocks`: None keeps `width`; an int is absolute (capped at width); a float
    in (0, 1] is a fraction of width (at least 1 channel)."""
    if reduce_dim is None:
        return width
    if isinstance(reduce_dim, bool) or not isinstance(reduce_dim, (int, float)) or reduce_dim <= 0:
        raise ValueError(f"reduce_dim must be None, a positive int (channels) or a fraction in (0, 1], got {reduce_dim!r}")
    if isinstance(reduce_dim, float):
        if reduce_dim > 1:
            raise ValueError(f"a fractional reduce_dim must lie in (0, 1], got {reduce_dim}; pass an int for a "
                             "channel count")
        return max(1, round(reduce_dim * width))
    return min(int(reduce_dim), width)


def fuse_blocks(grids: Sequence[torch.Tensor], reduce_dim: int | float | None = None) -> torch.Tensor:
    """Fuse per-block grids (B, C_i, h_i, w_i) into (B, sum C_i, h, w) on the finest grid (h, w).

    Grids of other sizes (ConvNet stages, ViT blocks at other resolutions) are resampled bilinearly
    (half-pixel centres) onto the finest one, the one with the most tokens, as PatchCore does; grids
    already of that size pass unchanged. With `reduce_dim` (see `reduced_width`), each token vector is
    then average-pooled along channels (PatchCore's adaptive average pooling: deterministic, nothing to
    fit or store). Raises ValueError when the grids hold different numbers of images.
    """
    if len({g.shape[0] for g in grids}) > 1:
        raise ValueError(f"grids of blocks hold different numbers of images: {[tuple(g.shape) for g in grids]}")
    h, w = max((tuple(g.shape[-2:]) for g in grids), key=lambda s: s[0] * s[1])
    grids = [g if tuple(g.shape[-2:]) == (h, w) else
             F.interpolate(g, size=(h, w), mode="bilinear", align_corners=False)   # (B, C_i, h, w)
             for g in grids]
    x = torch.cat(list(grids), dim=1)                                # (B, D, h, w)
    b, d = x.shape[:2]
    r = reduced_width(d, reduce_dim)
    if r < d:
        if d % r == 0:                                               # equal groups: same as adaptive pooling, cheaper
            x = x.reshape(b, r, d // r, h, w).mean(dim=2)            # (B, r, h, w)
        else:
            t = x.permute(0, 2, 3, 1).reshape(-1, 1, d)              # (B*h*w, 1, D)
            t = F.adaptive_avg_pool1d(t, r)                          # (B*h*w, 1, r)
            x = t.reshape(b, h, w, r).permute(0, 3, 1, 2)            # (B, r, h, w)
    return x.contiguous()


def tiling_of(image_size: tuple[int, int], model_size: tuple[int, int], tile: float | str | None,
              overlap: float = 0.25) -> Tiling | None:
    """The tiles of an image of `image_size` (H0, W0) for a model input of `model_size` (H, W) at `tile`, or None:
    the whole image goes to the model. "auto": None when the image's aspect is within AUTO_TILE_ASPECT (1.5x) of
    the model input's (it is resized whole, as untiled); farther, the largest windows of the input's aspect that
    fit the image (scale = min(H0 / H, W0 / W)): the short side is covered whole and the windows slide along the
    long side. A number: windows of `tile` x the model input in original pixels."""
    if tile is None:
        return None
    if tile == "auto":
        ratio = (image_size[0] / image_size[1]) / (model_size[0] / model_size[1])
        if max(ratio, 1 / ratio) <= AUTO_TILE_ASPECT:
            return None
        scale = min(image_size[0] / model_size[0], image_size[1] / model_size[1])
    else:
        scale = float(tile)
    return Tiling.plan(tuple(image_size), tuple(model_size), scale, float(overlap))


@dataclass(frozen=True)
class PatchFeatures:
    """How a fitted PatchCore turns images into patch features; derived from its settings and backbone.

    backbone: a `backbone.FrozenBackbone`; blocks: 0-based blocks to fuse; center, aggregation (an odd size, 1:
    none), reduce_dim: as PatchCore's (aggregation resolved); tile: None, "auto" or a scale, tile_overlap and
    augment (None or a key of AUGMENTS): the inputs each image becomes; batch_size: inputs per forward pass.
    """
    backbone: Any
    blocks: tuple[int, ...]
    center: bool = True
    aggregation: int = 1
    reduce_dim: int | float | None = None
    tile: float | str | None = None
    tile_overlap: float = 0.25
    augment: str | None = None
    batch_size: int = 16
    progress: bool | None = None

    def from_grids(self, grids: Any) -> torch.Tensor:
        """PatchGrids -> fused patch features (B, D, h, w): centre, aggregate, concatenate, reduce."""
        per_block = []
        for b in self.blocks:
            x = grids[b]                                                # (B, C, h, w)
            if self.center:
                x = center_tokens(x)                                   # drop the image-wide component
            per_block.append(local_aggregate(x, self.aggregation))
        return fuse_blocks(per_block, self.reduce_dim)                  # (B, D, h, w)

    def features(self, batch: list) -> tuple[torch.Tensor, list]:
        """One batch of model inputs (arrays, PIL images) -> fused features (b, D, h, w) and their GridMappings."""
        g = self.backbone.patch_grids(batch, blocks=self.blocks, batch_size=self.batch_size, progress=False)
        return self.from_grids(g), g.mappings

    @staticmethod
    def rows(feats: torch.Tensor) -> np.ndarray:
        """(B, D, h, w) -> (B*h*w, D) float32, image-major then row-major tokens."""
        return feats.permute(0, 2, 3, 1).reshape(-1, feats.shape[1]).numpy()

    def tiling_of(self, image_size: tuple[int, int]) -> Tiling | None:
        """The tiles of an image of `image_size` (H0, W0), or None: it goes whole (`tiling_of`)."""
        return tiling_of(image_size, tuple(self.backbone.config.img_size), self.tile, self.tile_overlap)

    def tiles_of(self, image_size: tuple[int, int]) -> Tiling | None:
        """The tiles an image of `image_size` (H0, W0) is cut into, or None when it reaches the model whole: no
        tiling, or one window that is the image itself ("auto" on the input's aspect, an image smaller than a
        tile), which scores and maps exactly as untiled."""
        tiling = self.tiling_of(image_size)
        if tiling is not None and len(tiling) == 1 and tiling.tile_size == tuple(image_size):
            return None
        return tiling

    def views(self, images: Iterable[Any], augment: bool = False) -> Iterator[tuple[int, str, Any, Tiling | None]]:
        """(image number, its name, model input, its image's Tiling or None) for every input the backbone sees,
        image by image (each image read once, when its turn comes): the image itself, or its tiles in row-major
        order (an image that is its own one tile goes as the image, Tiling None, so it scores and maps exactly
        as untiled); with `augment`, each followed by its `AUGMENTS[self.augment]` copies. The name is the
        path of an image given as one, else "image <number>"."""
        copies = AUGMENTS[self.augment][1:] if augment and self.augment else ()
        for i, x in enumerate(images):
            name = str(x) if isinstance(x, (str, os.PathLike)) else f"image {i}"
            x = as_image(x)
            if self.tile is None and not copies:
                yield i, name, x, None                                  # the backbone reads it as it is
                continue
            img = to_rgb_uint8(x, name)                                 # (H0, W0, 3)
            tiling = self.tiles_of(img.shape[:2])
            for v in (tiling.crops(img) if tiling else [img]):
                yield i, name, v, tiling
                for t in copies:
                    yield i, name, np.ascontiguousarray(t(v)), tiling

    def batches(self, images: Sequence[Any], desc: str = "features",
                augment: bool = False) -> Iterator[tuple[torch.Tensor, list, list]]:
        """Fused features (b, D, h, w), GridMappings and [(image number, Tiling or None)] per batch of
        `batch_size` model inputs (`views`); memory holds one batch and the image being cut. A warning about an
        input (a tile smaller than one patch, say) names its image, once per image however many tiles and batches
        it spans."""
        views = self.views(progress_bar(images, desc=desc, unit="image", leave=False,
                                        disable=None if self.progress is None else not self.progress), augment)
        seen: set[str] = set()                                          # warnings given so far, over all batches
        while batch := list(islice(views, self.batch_size)):
            names = [name if t is None else f"a tile of {name}" for _, name, _, t in batch]
            with named_images(names, seen):                             # the backbone names inputs by batch place
                feats, mappings = self.features([v for _, _, v, _ in batch])
            yield feats, mappings, [(i, t) for i, _, _, t in batch]


@contextmanager
def named_images(names: Sequence[str], seen: set[str] | None = None) -> Iterator[None]:
    """Warnings raised inside that name an input "image k" (its place in a batch) are re-raised naming it
    names[k] (a file, or its place in the caller's list); each message once, and not at all when it is in `seen`
    (the messages given already, which it is added to: pass one set to several batches)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    seen = set() if seen is None else seen
    for w in caught:
        def rename(m: re.Match) -> str:
            k = int(m.group(2))
            return (m.group(1) or "") + names[k] if k < len(names) else m.group(0)
        msg = _IMAGE_NAME.sub(rename, str(w.message), count=1)
        if msg not in seen:
            seen.add(msg)
            warnings.warn_explicit(msg, w.category, w.filename, w.lineno)
