"""frozenvit.backbone: frozen timm ViTs that hand out grids of patch tokens.

    from backbone import load_backbone
    bb = load_backbone()                                    # embedded offline default
    bb = load_backbone("vit_small_patch14_reg4_dinov2", weights="dinov2.safetensors", img_size=448)
    grids = bb.patch_grids(images, blocks=(7, 10))          # {block: (B, C, h, w)} + prefix tokens

Names are imported on first use, so `frozenvit --help` and the error types do not pay for torch/timm.
"""
from importlib import import_module
from typing import Any

from .errors import (ArtifactError, BackboneUnavailable, FrozenVitError, GridMismatch, ImageFormatError,
                     PreprocessingMismatch)

_LAZY = {
    "load_backbone": "loading", "default_spec": "loading",
    "FrozenBackbone": "model", "PatchGrids": "model",
    "BackboneConfig": "config", "Grid": "config",
    "Preprocess": "preprocess", "Batch": "preprocess", "GridMapping": "preprocess",
    "check_normalised": "preprocess", "to_rgb_uint8": "preprocess",
    "read_state_dict": "weights", "resample_pos_embed": "weights",
}

__all__ = [*_LAZY, "FrozenVitError", "GridMismatch", "PreprocessingMismatch", "ImageFormatError", "ArtifactError",
           "BackboneUnavailable"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'backbone' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
