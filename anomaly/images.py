"""Reading images and masks with the checks the readers rely on.

Every image comes back as uint8 RGB (H, W, 3): gray is replicated, alpha and palettes are
flattened, 16-bit samples are scaled to 8 bits by their real bit depth (a PNG's sBIT chunk, else
the depth their largest sample needs, with a warning; `backbone.preprocess.integer_to_uint8`).
A file that cannot be decoded raises `ImageFormatError` naming it. Masks come back as bool (H, W), binarised at > 127
on the 8-bit scale, and must match their image's size.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from frozenvit.backbone.commands import IMAGE_SUFFIXES
from frozenvit.backbone.errors import ImageFormatError
from frozenvit.backbone.preprocess import integer_to_uint8, png_significant_bits

from .errors import DatasetError



def list_images(folder: str | os.PathLike, *, what: str = "images") -> list[Path]:
    """Image files directly in `folder`, sorted by name, by the rule every command reads inputs by
    (`backbone.commands.image_files`: no hidden files, nothing frozenvit wrote). Raises DatasetError if none."""
    from frozenvit.backbone.commands import image_files

    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{what} folder {folder} does not exist or is not a folder")
    files = image_files([folder], recursive=False)
    if not files:
        raise DatasetError(f"{what} folder {folder} holds no image files ({', '.join(IMAGE_SUFFIXES)}); "
                           "point to the folder that contains the images")
    return files


def subfolders(folder: str | os.PathLike) -> list[Path]:
    """Folders directly in `folder`, sorted, but hidden ones and those frozenvit wrote (never read as input)."""
    from frozenvit.backbone.commands import is_ours

    return sorted(p for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith(".") and not is_ours(p))


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(H, W) from the file header, without decoding the pixels."""
    try:
        with Image.open(path) as im:
            w, h = im.size
    except Exception as e:   # Pillow's plugins raise many types on malformed files
        raise ImageFormatError(f"cannot read image {path} ({type(e).__name__}: {e}); replace or remove the file") from e
    return h, w


def _decode(path: str | os.PathLike) -> np.ndarray:
    """Pixels of an image file: uint8 (H, W) or (H, W, 3); 16-bit samples scaled by their bit depth."""
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in ("I;16", "I;16B", "I;16L", "I", "1", "L", "RGB"):
                a = np.asarray(im)
            elif im.mode == "F":
                raise ImageFormatError(f"{path}: floating-point samples are ambiguous; save it as an 8- or 16-bit PNG")
            else:   # P, PA, LA, RGBA, CMYK, YCbCr, ...: let Pillow flatten to RGB
                a = np.asarray(im.convert("RGB"))
            bits = png_significant_bits(path) if im.format == "PNG" and a.dtype != np.uint8 else None
    except ImageFormatError:
        raise
    except Exception as e:   # UnidentifiedImageError, OSError, SyntaxError, DecompressionBombError, struct.error, ...
        raise ImageFormatError(f"cannot read image {path} ({type(e).__name__}: {e}); replace or remove the file") from e
    if a.dtype == bool:
        return a.astype(np.uint8) * 255
    if a.dtype == np.uint8:
        return a
    return integer_to_uint8(a, str(path), bits)


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


def image_list(images: Any, what: str = "images") -> list:
    """The images a detector was given, as a list, read the way the backbone's `preprocess` reads them.

    One image is a path, a PIL image or a numpy array (H, W) (gray), (H, W, 1), (H, W, 3) or (H, W, 4): it becomes
    [image], never a batch of its rows. A numpy array (B, H, W, C) is a batch of B images. Anything else iterable
    (a list or tuple of images, a generator) is listed as it is. Raises ImageFormatError for an array of any other
    shape (channels first, or a (B, H, W) stack of gray images, which reads as neither) and for a torch tensor (the
    detector maps defects onto the original pixels: pass the uint8 images).
    """
    if isinstance(images, (str, os.PathLike, Image.Image)):
        return [images]
    if isinstance(images, np.ndarray):
        shape = images.shape
        if images.ndim == 4:
            return list(images)                                     # (B, H, W, C) -> B images
        if images.ndim == 2 or (images.ndim == 3 and shape[2] in (1, 3, 4)):
            return [images]                                         # one image
        raise ImageFormatError(
            f"{what}: a numpy array of shape {shape} is neither one image ((H, W), or (H, W, C) with C = 1, 3 or 4) "
            "nor a batch (B, H, W, C). Channels first? pass np.transpose(a, (1, 2, 0)); several gray images? pass a "
            "list of (H, W) arrays or a (B, H, W, 1) array")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(images, torch.Tensor):
        raise ImageFormatError(f"{what}: a torch tensor; pass the uint8 images themselves: numpy arrays (one (H, W, 3) "
                               "image or a (B, H, W, 3) batch), PIL images or paths")
    try:
        return list(images)
    except TypeError as e:
        raise ImageFormatError(f"{what}: {type(images).__name__} is not an image or a list of images; pass paths, "
                               "PIL images or uint8 numpy arrays") from e
