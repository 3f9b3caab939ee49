"""Reading images and masks with the checks the readers rely on.

Every image comes back as uint8 RGB (H, W, 3): gray is replicated, alpha and palettes are
flattened, 16-bit samples are scaled to 8 bits (value / 257, rounded). A file that cannot be
decoded raises `ImageFormatError` naming it. Masks come back as bool (H, W), binarised at > 127
on the 8-bit scale, and must match their image's size.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from frozenvit.backbone.errors import ImageFormatError

from .errors import DatasetError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


def is_image_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def list_images(folder: str | os.PathLike, *, what: str = "images") -> list[Path]:
    """Image files directly in `folder`, sorted by name. Raises DatasetError if none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{what} folder {folder} does not exist or is not a folder")
    files = sorted(p for p in folder.iterdir() if is_image_file(p))
    if not files:
        raise DatasetError(f"{what} folder {folder} holds no image files ({', '.join(IMAGE_SUFFIXES)}); "
                           "point to the folder that contains the images")
    return files


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(H, W) from the file header, without decoding the pixels."""
    try:
        with Image.open(path) as im:
            w, h = im.size
    except (UnidentifiedImageError, OSError) as e:
        raise ImageFormatError(f"cannot read image {path}: {e}; replace or remove the file") from e
    return h, w


def _to_uint8(a: np.ndarray, path: str | os.PathLike) -> np.ndarray:
    if a.dtype == np.uint8:
        return a
    if a.dtype == bool:
        return a.astype(np.uint8) * 255
    if a.dtype.kind in "iu" and a.size and (a.min() < 0 or a.max() > 65535):
        raise ImageFormatError(f"{path}: integer samples outside 0..65535 (dtype {a.dtype}); "
                               "save it as an 8- or 16-bit image")
    if a.dtype.kind in "iu":   # 16-bit (I;16, I;16B, I) -> 8-bit
        return np.round(a.astype(np.float64) / 257.0).astype(np.uint8)
    raise ImageFormatError(f"{path}: floating-point samples (dtype {a.dtype}) are ambiguous; "
                           "save it as an 8- or 16-bit PNG")


def _decode(path: str | os.PathLike) -> np.ndarray:
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("I;16", "I;16B", "I;16L", "I", "1", "L", "RGB"):
                a = np.asarray(im)
            elif im.mode == "F":
                a = np.asarray(im)
            else:   # P, PA, LA, RGBA, CMYK, YCbCr, ...: let Pillow flatten to RGB
                a = np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise ImageFormatError(f"cannot read image {path}: {e}; replace or remove the file") from e
    return _to_uint8(a, path)


def read_image(path: str | os.PathLike) -> np.ndarray:
    """Decode an image file to uint8 RGB (H, W, 3). Raises ImageFormatError naming the file."""
    a = _decode(path)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)       # (H, W, 3)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ImageFormatError(f"{path}: unsupported layout {a.shape}; expected gray or RGB")
    return np.ascontiguousarray(a)


def read_mask(path: str | os.PathLike, size: tuple[int, int] | None = None,
              image_path: str | os.PathLike | None = None) -> np.ndarray:
    """Decode a mask to bool (H, W), > 127 on the 8-bit scale; check it against `size` = (H, W)."""
    a = _decode(path)
    if a.ndim == 3:
        a = a.max(axis=2)
    m = a > 127
    if size is not None and m.shape != tuple(size):
        of = f" of {image_path}" if image_path else ""
        raise DatasetError(f"mask {path} is {m.shape[0]}x{m.shape[1]} (HxW) but the image{of} is "
                           f"{size[0]}x{size[1]}; a mask must have its image's size")
    return m


def as_image(x: object) -> object:
    """Pass arrays and PIL images through; decode paths."""
    if isinstance(x, (str, os.PathLike)):
        return read_image(x)
    return x
