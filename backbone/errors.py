"""Named errors. Each says what went wrong and what to do about it."""
from __future__ import annotations


class FrozenVitError(Exception):
    """Base class of every error this suite raises on purpose."""


class GridMismatch(FrozenVitError, ValueError):
    """Position embeddings or image size do not fit the model's token grid."""


class PreprocessingMismatch(FrozenVitError, ValueError):
    """Input does not look like the checkpoint's preprocessing (0-255 floats, normalised twice, ...)."""


class ImageFormatError(FrozenVitError, ValueError):
    """An image cannot be read or has an unsupported layout (channels, dtype, dimensions)."""


class ArtifactError(FrozenVitError, RuntimeError):
    """A saved artifact is missing, corrupt, of another format version, or built on another backbone."""


class BackboneUnavailable(FrozenVitError, RuntimeError):
    """Weights cannot be obtained (offline, no local file, no embedded default)."""


class OutputConflict(FrozenVitError, FileExistsError):
    """An output path holds something frozenvit did not write (or another kind of artifact): it is left untouched."""
