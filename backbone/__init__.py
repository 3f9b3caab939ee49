"""frozenvit.backbone: frozen timm ViTs that hand out grids of patch tokens.

    from backbone import load_backbone
    bb = load_backbone()                                    # embedded offline default
    bb = load_backbone("vit_small_patch14_reg4_dinov2", weights="dinov2.safetensors", img_size=448)
    grids = bb.patch_grids(images, blocks=(7, 10))          # {block: (B, C, h, w)} + prefix tokens
"""
from .config import BackboneConfig, Grid
from .errors import (ArtifactError, BackboneUnavailable, FrozenVitError, GridMismatch, ImageFormatError,
                     PreprocessingMismatch)
from .loading import default_spec, load_backbone
from .model import FrozenBackbone, PatchGrids
from .preprocess import Batch, GridMapping, Preprocess, check_normalised, to_rgb_uint8
from .weights import read_state_dict, resample_pos_embed

__all__ = [
    "load_backbone", "default_spec", "FrozenBackbone", "PatchGrids", "BackboneConfig", "Grid", "Preprocess",
    "Batch", "GridMapping", "check_normalised", "to_rgb_uint8", "read_state_dict", "resample_pos_embed",
    "FrozenVitError", "GridMismatch", "PreprocessingMismatch", "ImageFormatError", "ArtifactError",
    "BackboneUnavailable",
]
