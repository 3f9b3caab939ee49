"""FrozenBackbone: a timm model kept frozen that hands out grids of patch tokens."""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import nn
from frozenvit.backbone.suite.progress import progress_bar

from .config import BackboneConfig
from .errors import GridMismatch, ImageFormatError
from .preprocess import Batch, GridMapping, Preprocess
from .suite.errors import ParameterError


class BlockDict(dict):
    """{block: tensor} that also takes a negative block, counted from the end of a `depth`-block backbone, as
    `PatchGrids[...]` does. Iterating, `keys()`, `items()` and `==` are a plain dict's: the keys are the 0-based
    blocks held. A block not held raises KeyError naming the blocks that are."""

    def __init__(self, data: Any = (), depth: int = 0) -> None:
        super().__init__(data)
        self.depth = depth

    def key(self, block: Any) -> Any:
        """The 0-based key of `block` (a negative one counted from the end; anything else as it is)."""
        if _is_int(block) and int(block) < 0 and self.depth:
            return int(block) + self.depth
        return block

    def __getitem__(self, block: Any) -> torch.Tensor:
        key = self.key(block)
        if not dict.__contains__(self, key):
            shown = f"block {block}" + (f" (block {key} of {self.depth})" if key != block else "")
            raise KeyError(f"{shown} was not computed: these grids hold blocks {list(self)}; ask for it with "
                           f"patch_grids(images, blocks=[...])")
        return dict.__getitem__(self, key)

    def __contains__(self, block: object) -> bool:
        return dict.__contains__(self, self.key(block))

    def get(self, block: Any, default: Any = None) -> Any:
        return dict.get(self, self.key(block), default)

    def __reduce__(self) -> tuple:
        return type(self), (dict(self), self.depth)


@dataclass
class PatchGrids:
    """Patch tokens of chosen blocks as image-like grids, prefix tokens kept apart.

    `g[b]`, `g.grids[b]` and `g.prefix[b]` take the same block indices: 0-based, or negative from the end
    (`g[-1]` is the last block of the backbone, when it was computed). `grids` and `prefix` iterate as dicts
    keyed by 0-based blocks."""
    grids: dict[int, torch.Tensor]                          # block -> (B, C, h, w)
    prefix: dict[int, torch.Tensor] = field(default_factory=dict)  # block -> (B, P, C)
    mappings: list[GridMapping] | None = None              # one per image, None when pixels were given
    num_registers: int = 0
    has_cls: bool = True
    has_dist_token: bool = False
    depth: int = 0                                          # of the backbone: resolves negative blocks

    def __post_init__(self) -> None:
        self.grids = BlockDict(self.grids, self.depth)
        self.prefix = BlockDict(self.prefix, self.depth)

    def _key(self, block: int) -> int:
        return block + self.depth if block < 0 and self.depth else block

    def __getitem__(self, block: int) -> torch.Tensor:
        return self.grids[block]

    @property
    def blocks(self) -> list[int]:
        return list(self.grids)

    def cls(self, block: int) -> torch.Tensor | None:
        """(B, C) CLS token at `block`, or None for models without one."""
        block = self._key(block)
        if not self.has_cls or block not in self.prefix:
            return None
        return self.prefix[block][:, 0]

    def registers(self, block: int) -> torch.Tensor | None:
        """(B, R, C) register tokens, or None."""
        block = self._key(block)
        if not self.num_registers or block not in self.prefix:
            return None
        start = int(self.has_cls) + int(self.has_dist_token)   # timm order: cls, dist, registers
        return self.prefix[block][:, start:start + self.num_registers]

    def dist(self, block: int) -> torch.Tensor | None:
        """(B, C) distillation token (DeiT distilled models), or None."""
        block = self._key(block)
        if not self.has_dist_token or block not in self.prefix:
            return None
        return self.prefix[block][:, int(self.has_cls)]


class FrozenBackbone(nn.Module):
    """A timm ViT (or CNN, features_only) in eval mode with gradients off.

    Use `load_backbone` to build one. `patch_grids` is the one call applications need; calling the backbone,
    `bb(images, blocks)`, is the same call. It follows `.to(device)` and `.to(dtype)`: pixels are moved to it.
    """

    def __init__(self, model: nn.Module, config: BackboneConfig, resize: str = "stretch") -> None:
        super().__init__()
        self.model = model.requires_grad_(False)
        self.config = config
        self.preprocess = Preprocess(config, resize=resize)
        self.train(False)

    # nn.Module.train() must not unfreeze the backbone by accident; `forward_pixels` puts the inner model back in
    # eval mode too, should `bb.model.train()` have been called on it directly
    def train(self, mode: bool = True) -> "FrozenBackbone":
        return super().train(False)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def weights_sha256(self) -> str | None:
        return self.config.weights_sha256

    def __repr__(self) -> str:
        return f"FrozenBackbone({self.config.name!r}, grid={self.config.grid}, dim={self.config.embed_dim})"

    def resolve_blocks(self, blocks: int | Iterable[int] | None) -> list[int]:
        """0-based block indices, negatives from the end; default: the last block.

        Raises ParameterError (a ValueError) for a block the backbone does not have, for no blocks at all
        (`[]`), and for anything that is not an int or a list of ints (`"7"`, `[1.5]`)."""
        depth = self.config.depth
        how = f"give at least one block index as an int or a list of ints, e.g. blocks=[{depth - 1}] (0..{depth - 1})"
        if blocks is None:
            blocks = [depth - 1]
        elif _is_int(blocks):
            blocks = [blocks]
        elif isinstance(blocks, (str, bytes)) or not isinstance(blocks, Iterable):
            raise ParameterError(f"blocks={blocks!r} is not a block index: {how}")
        blocks = list(blocks)
        if not blocks:
            raise ParameterError(f"blocks is empty: {how}")
        bad = [b for b in blocks if not _is_int(b)]
        if bad:
            raise ParameterError(f"blocks={blocks!r} holds {bad[0]!r}, not an int: {how}")
        out = []
        for b in (int(b) for b in blocks):
            i = b + depth if b < 0 else b
            if not 0 <= i < depth:
                raise ParameterError(f"block {b} is out of range for {self.config.name}, a {depth}-block backbone "
                                     f"(blocks 0..{depth - 1}, or -{depth}..-1 from the end)")
            if i not in out:
                out.append(i)
        return out

    def forward(self, images: Any, blocks: int | Iterable[int] | None = None, **kwargs: Any) -> PatchGrids:
        """`bb(images, blocks)` is `bb.patch_grids(images, blocks, ...)`: the same arguments, the same PatchGrids
        (images, or a normalised (B, 3, H, W) tensor, which is checked). For the raw ({block: grid}, {block: prefix})
        dicts of one normalised batch, call `forward_pixels`."""
        return self.patch_grids(images, blocks, **kwargs)

    @torch.no_grad()
    def forward_pixels(self, pixels: torch.Tensor, blocks: Sequence[int], norm: bool = False
                       ) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """Normalised (B, 3, H, W) -> ({block: (B, C, h, w)}, {block: (B, P, C)}); stops after the last block asked.
        Keys are 0-based block indices (a negative block asked is keyed by its index from the start). The model
        runs in eval mode, always.

        The pixels are moved to the model's device and, when floating point, cast to its dtype (`bb.cuda()`,
        `bb.to(torch.bfloat16)`: CPU float32 batches and images follow); the outputs are float32 on that device.
        They are ordinary tensors without gradient (computed under torch.no_grad, not inference_mode), so a head
        trained on them can keep them for its backward pass."""
        H, W = pixels.shape[-2:]
        self.model.eval()                      # frozen means eval: no dropout, whatever train() was called on
        pixels = _to_model(pixels, self.model)   # device always; the model's dtype for float batches
        if (H, W) != tuple(self.config.img_size):
            p = self.config.patch_size
            fits = self.config.kind != "vit" or (H % p == 0 and W % p == 0)
            size = (H, W) if fits else (max(p, round(H / p) * p), max(p, round(W / p) * p))
            raise GridMismatch(f"pixels are {H}x{W}, the backbone is built for {self.config.img_size[0]}x"
                               f"{self.config.img_size[1]}"
                               + ("" if fits else f" and {H}x{W} does not divide into {p} px patches") +
                               f"; resize the batch to {self.config.img_size[0]}x{self.config.img_size[1]} (or pass "
                               f"the images through bb.preprocess), or rebuild with load_backbone(..., "
                               f"img_size={size}) and resize to that")
        if self.config.kind == "cnn":
            feats = self.model(pixels)
            grids = {b: feats[b].float() for b in blocks}
            return grids, {b: pixels.new_zeros(pixels.shape[0], 0, feats[b].shape[1]) for b in blocks}
        order = sorted(self.resolve_blocks(list(blocks)))   # timm returns intermediates in block order, whatever was asked
        has_prefix = self.config.num_prefix_tokens > 0
        # with no prefix tokens timm returns plain (B, C, h, w) tensors, not (grid, prefix) pairs (and EVA's
        # return_prefix_tokens=True fails outright), so the pairs are asked for only when there are prefix tokens
        outs = self.model.forward_intermediates(pixels, indices=order, return_prefix_tokens=has_prefix,
                                                norm=norm, stop_early=True, output_fmt="NCHW",
                                                intermediates_only=True)
        grids, prefix = {}, {}
        for b, out in zip(order, outs):
            grid, pre = out if has_prefix else (out, None)
            grids[b] = grid.float()            # (B, C, h, w)
            prefix[b] = pre.float() if pre is not None else grid.new_zeros(grid.shape[0], 0, grid.shape[1]).float()  # (B, P, C)
        return grids, prefix

    def patch_grids(self, images: Any, blocks: int | Iterable[int] | None = None, norm: bool = False,
                    batch_size: int = 32, progress: bool | None = None, check: bool = True) -> PatchGrids:
        """Patch-token grids of `blocks` for a list of images or a normalised (B, 3, H, W) tensor.

        Images (PIL or uint8 numpy, any size/layout) go through `self.preprocess`; a tensor is
        checked to look normalised with this checkpoint's statistics and to hold finite values only
        (`check=False` skips that); a float tensor of any dtype (float64, float16) is cast to the model's dtype.
        A numpy array (B, H, W, C) is a batch of B images, as `preprocess` reads it; one (H, W[, C]) array is one image.
        Deterministic; batched; a progress bar shows for long lists (progress=None: when > 4 batches).
        Raises ParameterError for a block the backbone does not have or a batch_size that is not a positive int,
        ImageFormatError for no images.
        """
        idx = self.resolve_blocks(blocks)
        if not _is_int(batch_size) or int(batch_size) < 1:
            raise ParameterError(f"batch_size={batch_size!r} is not a batch size: pass a positive int "
                                 "(images per forward pass), e.g. batch_size=32")
        batch_size = int(batch_size)
        mappings: list[GridMapping] | None = None
        if isinstance(images, torch.Tensor):
            if check:
                self.preprocess.check(images)
            n = images.shape[0]
            def get(i: int, j: int) -> torch.Tensor:
                return images[i:j]
        else:
            if isinstance(images, np.ndarray) and images.ndim == 4:
                images = list(images)                       # (B, H, W, C): B images, as preprocess reads it
            elif not isinstance(images, (list, tuple)):
                images = [images]
            n = len(images)
            mappings = []
            def get(i: int, j: int) -> torch.Tensor:
                batch: Batch = self.preprocess(images[i:j])
                mappings.extend(batch.mappings)
                return batch.pixels
        if n == 0:
            raise ImageFormatError("no images given: pass at least one image (or a batch of at least one)")
        starts = range(0, n, batch_size)
        show = progress if progress is not None else len(starts) > 4
        parts_g: dict[int, list[torch.Tensor]] = {b: [] for b in idx}
        parts_p: dict[int, list[torch.Tensor]] = {b: [] for b in idx}
        for i in progress_bar(starts, desc="patch grids", unit="batch", disable=not show, leave=False):
            g, p = self.forward_pixels(get(i, min(i + batch_size, n)), idx, norm=norm)
            for b in idx:
                parts_g[b].append(g[b])
                parts_p[b].append(p[b])
        c = self.config
        return PatchGrids({b: torch.cat(parts_g[b]) for b in idx}, {b: torch.cat(parts_p[b]) for b in idx},
                          mappings, c.num_registers, c.has_cls, c.has_dist_token, c.depth)


def _to_model(pixels: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """`pixels` on the device of `model`'s parameters, float batches in their dtype (float64/float16 batches: the
    values were checked, the model's dtype decides); `pixels` itself when both already match."""
    p = next(model.parameters(), None)
    if p is None:
        return pixels
    dtype = p.dtype if pixels.is_floating_point() and p.is_floating_point() else pixels.dtype
    return pixels.to(device=p.device, dtype=dtype)


def _is_int(b: Any) -> bool:
    """An int-like block index (int, numpy or 0-d torch integer), not a bool."""
    if isinstance(b, bool):
        return False
    if isinstance(b, torch.Tensor):
        return b.ndim == 0 and not b.is_floating_point() and not b.is_complex() and b.dtype != torch.bool
    return isinstance(b, numbers.Integral)


def vit_tokens(vit: nn.Module, x: torch.Tensor, blocks: Sequence[int]) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """A timm ViT's forward with gradients, for training on its tokens (distillation), via forward_intermediates.

    x: (B, 3, H, W). Returns the final normed tokens (B, P+N, D) and {block: (B, P+N, D)} before the norm.
    """
    blocks = sorted({int(b) for b in blocks})
    P = vit.num_prefix_tokens
    final, inter = vit.forward_intermediates(x, indices=blocks, return_prefix_tokens=P > 0, output_fmt="NLC")
    if P:
        inter = [torch.cat([pre, tok], dim=1) for tok, pre in inter]      # (B, P+N, D)
    return final, dict(zip(blocks, inter))
