"""Dense targets at the teacher's stride-8 and stride-16 maps, read from chosen student blocks.

A ViT-Ti/16 at 224 px has a 14x14 token grid: the teacher's stride-16 map has the same grid, its
stride-8 map twice the resolution (28x28 at 224 px). Each (student block, teacher stride) target gets a
small projector on that block's patch tokens -- training scaffolding, dropped at export:

    stride == patch:      LayerNorm -> Linear(D, C)                                 (B, C, h, w)
    stride == patch / 2:  LayerNorm -> bilinear 2x upsample of the token grid -> 3x3 conv (D -> C)
                                                                                    (B, C, 2h, 2w)

The 3x3 conv after the upsample lets the projector place sub-patch detail from a token and its
neighbours, which a bilinear resample alone cannot do; it is kept small so that the capacity to match
the teacher has to sit in the ViT's tokens, the thing that is kept.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from frozenvit.backbone.suite.errors import UsageError

STRIDES = (8, 16)


@dataclass(frozen=True)
class DenseTarget:
    """One dense target: the student block whose tokens predict the teacher map of this stride."""
    block: int      # student block index, >= 0 (resolved from -1 = last)
    stride: int     # teacher map stride in input pixels
    weight: float   # weight of its loss in the sum

    @property
    def key(self) -> str:
        return f"b{self.block}_s{self.stride}"


def dense_targets(blocks: Sequence[int], depth: int, w_s8: float, w_s16: float) -> list[DenseTarget]:
    """Targets for every block in `blocks` (negative counts from the end: -1 is the last) at strides 8 and 16.

    A stride whose weight is 0 is left out. Raises UsageError for a block outside the student.
    """
    out = []
    for b in blocks:
        bb = int(b) + depth if int(b) < 0 else int(b)
        if not 0 <= bb < depth:
            raise UsageError(f"--dense-blocks {b} is not a block of a {depth}-block student: use 0..{depth - 1} or -1 (last)")
        for stride, w in ((8, w_s8), (16, w_s16)):
            t = DenseTarget(bb, stride, float(w))
            if w > 0 and t not in out:
                out.append(t)
    return out


class Projector(nn.Module):
    """Patch tokens (B, N, D) on an (h, w) grid -> a map (B, C, up*h, up*w) of the teacher's channels."""

    def __init__(self, dim: int, channels: int, up: int) -> None:
        super().__init__()
        self.up = up
        self.norm = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, channels) if up == 1 else nn.Conv2d(dim, channels, 3, padding=1)

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        B, N, D = tokens.shape
        z = self.norm(tokens)  # (B, N, D)
        if self.up == 1:
            return self.proj(z).transpose(1, 2).reshape(B, -1, *grid)  # (B, C, h, w)
        z = z.transpose(1, 2).reshape(B, D, *grid)  # (B, D, h, w)
        z = F.interpolate(z, scale_factor=self.up, mode="bilinear", align_corners=False)  # (B, D, up*h, up*w)
        return self.proj(z)  # (B, C, up*h, up*w)


class DenseHeads(nn.Module):
    """One Projector per DenseTarget; `channels` maps a teacher stride to its channel count."""

    def __init__(self, targets: Sequence[DenseTarget], dim: int, patch: int, channels: dict[int, int]) -> None:
        super().__init__()
        self.targets = list(targets)
        missing = sorted({t.stride for t in targets} - set(channels))
        if missing:
            raise UsageError(f"the teacher has no map at stride {missing} (it has {sorted(channels)}): "
                             "use an EfficientNet-Lite teacher for stride-8/16 targets, or set their weight to 0")
        self.heads = nn.ModuleDict({t.key: Projector(dim, channels[t.stride], max(1, patch // t.stride))
                                    for t in self.targets})

    @property
    def blocks(self) -> list[int]:
        return sorted({t.block for t in self.targets})

    def forward(self, tokens: dict[int, torch.Tensor], prefix: int, grid: tuple[int, int]) -> dict[str, torch.Tensor]:
        """tokens: {block: (B, P+N, D)} -> {target key: (B, C, h', w')}."""
        return {t.key: self.heads[t.key](tokens[t.block][:, prefix:], grid) for t in self.targets}

    def losses(self, preds: dict[str, torch.Tensor], maps: dict[int, torch.Tensor]) -> dict[str, torch.Tensor]:
        """{target key: loss} against the teacher maps {stride: (B, C, H/s, W/s)}."""
        return {t.key: cosine_dense_loss(preds[t.key], maps[t.stride]) for t in self.targets}


def cosine_dense_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over locations of 1 - cos(pred, LN(target)), per location across channels.

    pred (B, C, h, w); target (B, C, h', w'), resampled bilinearly to (h, w) when it differs.
    Why cosine on a per-location LayerNorm'ed target rather than smooth-L1: LayerNorm centres and scales
    each location's teacher vector, after which squared distances between locations (what PatchCore's
    nearest neighbours compare) are a function of their cosine alone; the cosine then asks the student to
    get exactly that geometry right and nothing else. It is also scale-free, so the 40-, 112- and
    1280-channel targets give losses in the same range (0 = aligned, 1 = orthogonal) and the weights
    mean what they say, where the element-mean smooth-L1 of the earlier recipe needed a weight of 200.
    """
    if tuple(target.shape[-2:]) != tuple(pred.shape[-2:]):
        target = F.interpolate(target.float(), size=pred.shape[-2:], mode="bilinear", align_corners=False)
    t = F.layer_norm(target.float().permute(0, 2, 3, 1), target.shape[1:2])  # (B, h, w, C)
    p = pred.float().permute(0, 2, 3, 1)  # (B, h, w, C)
    return (1 - F.cosine_similarity(p, t, dim=-1, eps=1e-6)).mean()
