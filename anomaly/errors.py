"""Errors of the anomaly package. Each names the file or setting at fault and says what to do."""
from __future__ import annotations

from frozenvit.backbone.errors import FrozenVitError


class DatasetError(FrozenVitError, ValueError):
    """A folder or dataset layout cannot be used: empty folder, mask of another size, mask without image."""


class LargeImage(UserWarning):
    """An image file past Pillow's decompression-bomb limit (`PIL.Image.MAX_IMAGE_PIXELS`): read, but its pixels and
    its full-size defect map take much memory."""
