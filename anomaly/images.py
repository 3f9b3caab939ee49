"""Reading images and masks with the checks the readers rely on.

Every image comes back as uint8 RGB (H, W, 3): gray is replicated, alpha and palettes are
flattened, 16-bit samples are scaled to 8 bits by their real bit depth (a PNG's sBIT chunk, else
the depth their largest sample needs, with a warning; `backbone.preprocess.integer_to_uint8`). 16-bit
colour PNGs are read at 16 bits too, although Pillow alone would keep only each sample's high byte.
An EXIF Orientation tag is applied (`PIL.ImageOps.exif_transpose`), so images, masks and `image_size` are
in the orientation a viewer shows; PIL images given in memory are turned the same way (`as_image`). A file
of several pages or frames (multi-page TIFF, animated GIF) is read by its first, with a warning naming it.
A file that cannot be decoded raises `ImageFormatError` naming it. A file larger than Pillow's decompression-bomb
limit (`PIL.Image.MAX_IMAGE_PIXELS`) is read with a `LargeImage` warning naming it and its size, in place of
Pillow's own; one past twice that limit, which Pillow refuses, is an ImageFormatError saying so.
Masks come back as bool (H, W) by a rule that follows their own scale (`binarize_mask`: 0/1, 0/255 and
0/65535 masks all read as drawn) and their transparency (`read_mask`), and must match their image's size.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from frozenvit.backbone.commands import IMAGE_SUFFIXES
from frozenvit.backbone.errors import ImageFormatError
from frozenvit.backbone.preprocess import integer_to_uint8, png_significant_bits

from .errors import DatasetError, LargeImage


def list_images(folder: str | os.PathLike, *, what: str = "images", recursive: bool = False) -> list[Path]:
    """Image files in `folder` (with `recursive`, in its subfolders too), sorted by name, by the rule every command
    reads inputs by (`backbone.commands.image_files`: no hidden files, nothing frozenvit wrote). Raises
    DatasetError if none."""
    from frozenvit.backbone.commands import image_files

    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{what} folder {folder} does not exist or is not a folder")
    files = image_files([folder], recursive=recursive)
    if not files:
        raise DatasetError(f"{what} folder {folder} holds no image files ({', '.join(IMAGE_SUFFIXES)})"
                           f"{' in it or its subfolders' if recursive else ''}; point to the folder that contains "
                           "the images")
    return files


def subfolders(folder: str | os.PathLike) -> list[Path]:
    """Folders directly in `folder`, sorted, but hidden ones and those frozenvit wrote (never read as input)."""
    from frozenvit.backbone.commands import is_ours

    return sorted(p for p in Path(folder).iterdir() if p.is_dir() and not p.name.startswith(".") and not is_ours(p))


#: EXIF Orientation values that swap height and width (a quarter turn, possibly mirrored)
_QUARTER_TURNS = (5, 6, 7, 8)


def _orientation(im: Image.Image) -> int:
    """The EXIF Orientation of an opened image (1: as stored): the backbone's rule (`exif_orientation`)."""
    from frozenvit.backbone.preprocess import exif_orientation

    return exif_orientation(im)


def _open(path: str | os.PathLike) -> Image.Image:
    """`Image.open(path)`, with Pillow's DecompressionBombWarning replaced by a LargeImage warning that names the file
    and its size (once per file and size in a process); Pillow's DecompressionBombError past twice the limit raised as
    an ImageFormatError saying what to do."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(path)
        except Image.DecompressionBombError as e:
            raise ImageFormatError(f"cannot read image {path}: {e} Pillow refuses images past twice its limit "
                                   "(PIL.Image.MAX_IMAGE_PIXELS); downscale the image or cut it into parts") from e
    limit = Image.MAX_IMAGE_PIXELS
    w, h = im.size
    if limit and w * h > limit and (os.path.realpath(path), w, h) not in _WARNED_LARGE:
        _WARNED_LARGE.add((os.path.realpath(path), w, h))    # its size is read, then its pixels: one warning
        warnings.warn(f"{path} is {w}x{h} pixels ({w * h / 1e6:.0f} MP), past Pillow's decompression-bomb limit of "
                      f"{limit / 1e6:.0f} MP: it is read, but its pixels and its full-size defect map take gigabytes "
                      "of memory; downscale it if its defects stay visible at a smaller size", LargeImage, stacklevel=3)
    return im


#: (real path, width, height) of the large files warned about in this process (`_open`)
_WARNED_LARGE: set[tuple[str, int, int]] = set()


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """(H, W) as `read_image` returns it (EXIF orientation applied), from the file header, without decoding the
    pixels."""
    try:
        with _open(path) as im:
            w, h = im.size
            if _orientation(im) in _QUARTER_TURNS:
                w, h = h, w
    except ImageFormatError:
        raise
    except Exception as e:   # Pillow's plugins raise many types on malformed files
        raise ImageFormatError(f"cannot read image {path} ({type(e).__name__}: {e}); replace or remove the file") from e
    return h, w


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: 16-bit PNG colour types that Pillow decodes to their high byte, and the raw modes that read both bytes through
#: Pillow's own decoder: the high bytes, then the low ones; gray with alpha (4) as its 4 bytes a pixel at once
_PNG16_RAW_MODES = {2: ("RGB;16B", "RGB;16L"), 6: ("RGBA;16B", "RGBA;16L"), 4: ("RGBA",)}

#: formats whose later pages or frames are other pictures (MPO's extra frames are previews of the first: not warned)
_PAGED_FORMATS = {"TIFF": "pages", "GIF": "frames", "PNG": "frames", "WEBP": "frames"}


def _png_header(path: str | os.PathLike) -> tuple[int, int] | None:
    """(bit depth, colour type) of a PNG from its IHDR chunk (bytes 24 and 25 of the file); None for another file."""
    try:
        with open(path, "rb") as f:
            head = f.read(26)
    except OSError:
        return None
    if len(head) < 26 or head[:8] != _PNG_SIGNATURE or head[12:16] != b"IHDR":
        return None
    return head[24], head[25]


def _decode_as(path: str | os.PathLike, rawmode: str, turned: bool) -> np.ndarray:
    """A PNG's pixels decoded by Pillow with another raw mode of the same bits per pixel (so its row filters undo
    alike), EXIF orientation applied when `turned`."""
    with _open(path) as im:
        im.tile = [t._replace(args=rawmode) if hasattr(t, "_replace") else (*t[:3], rawmode) for t in im.tile]
        im.load()
        if turned:
            im = ImageOps.exif_transpose(im)
        return np.asarray(im)


def _png16_colour(path: str | os.PathLike, colour_type: int, turned: bool,
                  key: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The 16-bit samples of a colour or gray-alpha PNG: uint16 (H, W, 3) or (H, W), and its alpha uint16 (H, W)
    (None when it has none; from a tRNS colour key when it has one)."""
    if colour_type == 4:
        b = _decode_as(path, "RGBA", turned).astype(np.uint16)         # (H, W, 4): gray high, low, alpha high, low
        return b[..., 0] << 8 | b[..., 1], b[..., 2] << 8 | b[..., 3]
    hi, lo = (_decode_as(path, r, turned).astype(np.uint16) for r in _PNG16_RAW_MODES[colour_type])
    a = hi << 8 | lo                                                    # (H, W, 3 or 4)
    if colour_type == 6:
        return a[..., :3], a[..., 3]
    if isinstance(key, tuple) and len(key) == 3:                        # tRNS: one colour stands for transparent
        return a, np.where((a == np.array(key, np.uint16)).all(axis=2), 0, 65535).astype(np.uint16)
    return a, None


def _alpha(im: Image.Image) -> np.ndarray | None:
    """The alpha channel of an 8-bit image (H, W) uint8, palette and colour-key transparency included; None when
    it has none."""
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
            "transparency" in im.info and im.mode in ("1", "L", "P", "RGB")):
        return np.asarray(im.convert("RGBA"))[..., 3]
    return None


def _warn_pages(im: Image.Image, path: str | os.PathLike) -> None:
    """A warning naming a file whose later pages or frames `read_image` does not read."""
    what = _PAGED_FORMATS.get(im.format or "")
    n = getattr(im, "n_frames", 1) if what else 1
    if isinstance(n, int) and n > 1:
        warnings.warn(f"{path} holds {n} {what}; only the first is read. Save each {what[:-1]} you want inspected as "
                      "its own file", stacklevel=4)


def _samples(path: str | os.PathLike, with_alpha: bool = False
             ) -> tuple[np.ndarray, np.ndarray | None, str, int | None]:
    """The samples of an image file as stored, turned by its EXIF orientation: (H, W) or (H, W, 3) of bool, uint8,
    uint16 or int32 (palettes, alpha, CMYK flattened to RGB; 16-bit colour PNGs at their 16 bits); with
    `with_alpha`, its alpha channel (H, W) of uint8 or uint16 (None when it has none, and without `with_alpha`); the
    file's format ("PNG", "JPEG", ...); for a PNG of more than 8 bits, its recorded significant bits (None when it
    records none). The first page or frame of a file of several, with a warning (`_warn_pages`)."""
    alpha = None
    try:
        with _open(path) as im:
            turned = _orientation(im) != 1
            fmt = im.format or ""
            _warn_pages(im, path)
            png = _png_header(path) if fmt == "PNG" else None
            if png is not None and png[0] == 16 and png[1] in _PNG16_RAW_MODES:
                a, alpha = _png16_colour(path, png[1], turned, im.info.get("transparency"))
            else:
                im.load()
                if turned:
                    im = ImageOps.exif_transpose(im)
                if with_alpha:
                    alpha = _alpha(im)
                if im.mode in ("I;16", "I;16B", "I;16L", "I", "1", "L", "RGB"):
                    a = np.asarray(im)
                elif im.mode == "F":
                    raise ImageFormatError(f"{path}: floating-point samples are ambiguous; save it as an 8- or 16-bit "
                                           "PNG")
                else:   # P, PA, LA, RGBA, CMYK, YCbCr, ...: let Pillow flatten to RGB
                    a = np.asarray(im.convert("RGB"))
        bits = png_significant_bits(path) if fmt == "PNG" and a.dtype not in (np.uint8, bool) else None
    except ImageFormatError:
        raise
    except Exception as e:   # UnidentifiedImageError, OSError, SyntaxError, DecompressionBombError, struct.error, ...
        raise ImageFormatError(f"cannot read image {path} ({type(e).__name__}: {e}); replace or remove the file") from e
    return a, alpha if with_alpha else None, fmt, bits


def _decode(path: str | os.PathLike) -> np.ndarray:
    """Pixels of an image file: uint8 (H, W) or (H, W, 3); 16-bit samples scaled by their bit depth."""
    a, _, _, bits = _samples(path)
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


#: formats whose compression adds noise: their masks are always cut at half their scale
LOSSY_FORMATS = ("JPEG", "MPO", "JPEG2000")


def binarize_mask(a: np.ndarray, full: int, lossy: bool = False) -> np.ndarray:
    """Defect pixels of a mask's samples `a` (H, W) whose scale tops out at `full` (1, 255, 65535, 4095, ...): bool.

    A mask that reaches the upper half of its scale (0/255, 0/65535, antialiased edges), and any mask of a lossy
    file (JPEG: near-zero noise is no defect), is cut at half the scale, > full / 2. A lossless mask whose samples all
    stay in the lower half was drawn on a smaller scale (0/1 in 8 or 16 bits, class ids 0/1/2): every sample above 0
    is a defect. An all-zero mask is empty either way.
    """
    top = int(a.max()) if a.size else 0
    if lossy or 2 * top > full:
        return a > full / 2
    return a > 0


def _mask_scale(a: np.ndarray, bits: int | None, path: str | os.PathLike) -> int:
    """The largest value samples of dtype a.dtype can hold as recorded: 1 (bilevel), 255, 2**bits - 1 (a PNG's
    sBIT) or 65535."""
    if a.dtype == bool:
        return 1
    if a.dtype == np.uint8:
        return 255
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    if lo < 0 or hi > 65535:
        raise ImageFormatError(f"mask {path}: integer samples {lo}..{hi} (dtype {a.dtype}) lie outside 0..65535; "
                               "save the mask as an 8- or 16-bit PNG")
    if bits is not None and 1 <= bits <= 16 and hi < 2 ** bits:
        return 2 ** bits - 1
    return 65535 if (a.dtype.kind == "u" and a.dtype.itemsize == 2) or hi > 255 else 255


def _visible(a: np.ndarray, full: int, alpha: np.ndarray) -> tuple[np.ndarray, int]:
    """A mask's samples (H, W) on scale `full` as seen through its `alpha` (H, W), and their scale: the colour alone
    when nothing is transparent; the alpha when every visible pixel (alpha > 0) has one value (a defect painted in
    one colour on a transparent layer, whatever that colour is); else the colour composited on black."""
    top = 255 if alpha.dtype == np.uint8 else 65535
    if alpha.min() >= top:
        return a, full
    shown = a[alpha > 0]
    if shown.size == 0 or (shown == shown[0]).all():
        return alpha, top
    return np.round(a.astype(np.float64) * (alpha.astype(np.float64) / top)), full


def read_mask(path: str | os.PathLike, size: tuple[int, int] | None = None,
              image_path: str | os.PathLike | None = None) -> np.ndarray:
    """Decode a mask to bool (H, W) by `binarize_mask` on its own scale (colour: the largest channel), EXIF
    orientation applied; DatasetError when it is not `size` = (H, W).

    A mask with transparency (RGBA, LA, a palette or colour key with transparent entries) marks a defect only where
    it is visible: when every visible pixel (alpha > 0) has one value, as a defect painted in one colour on a
    transparent layer, the alpha channel is the mask (> half of its scale); otherwise the colour composited on black,
    colour x alpha / full alpha, is read as an opaque mask is. A mask with no transparent pixel reads by its colour
    alone, whatever its alpha channel."""
    a, alpha, fmt, bits = _samples(path, with_alpha=True)
    full = _mask_scale(a, bits, path)
    if a.ndim == 3:
        a = a.max(axis=2)                                 # (H, W): a defect drawn in any colour
    if alpha is not None:
        a, full = _visible(a, full, alpha)
    m = binarize_mask(a, full, lossy=fmt in LOSSY_FORMATS)
    if size is not None and m.shape != tuple(size):
        of = f" of {image_path}" if image_path else ""
        raise DatasetError(f"mask {path} is {m.shape[0]}x{m.shape[1]} (HxW) but the image{of} is "
                           f"{size[0]}x{size[1]}; a mask must have its image's size")
    return m


def as_image(x: object) -> object:
    """Decode paths (`read_image`); turn PIL images by their EXIF orientation, as a path to the same file is turned,
    so that a PIL image and its path give the same map; pass arrays, and PIL images without an orientation, through.
    A 16-bit PIL image opened from a PNG and turned comes back as uint8 (H, W), scaled by the file's sBIT depth (the
    turned copy no longer knows its file)."""
    if isinstance(x, (str, os.PathLike)):
        return read_image(x)
    if isinstance(x, Image.Image) and _orientation(x) != 1:
        turned = ImageOps.exif_transpose(x)
        filename = getattr(x, "filename", "")
        if x.mode in ("I;16", "I;16B", "I;16L", "I") and x.format == "PNG" and filename:
            return integer_to_uint8(np.asarray(turned), str(filename), png_significant_bits(filename))
        return turned
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
