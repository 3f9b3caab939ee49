"""Images in any common layout -> the normalised batch a checkpoint expects, with checks.

Every image keeps a `GridMapping` back to its original pixels, so a token-level map can be
drawn on the original image whatever the resize policy was.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from .config import BackboneConfig
from .errors import ImageFormatError, PreprocessingMismatch
from .suite.errors import ParameterError

_PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
RESIZE_POLICIES = ("stretch", "pad")


@dataclass(frozen=True)
class GridMapping:
    """Where one original image sits on the model canvas.

    The original region `[y0, y1) x [x0, x1)` (original pixel units; it extends beyond the
    image when the policy padded) is mapped linearly onto the model canvas `model_size`.
    """
    orig_size: tuple[int, int]                  # (H0, W0) original pixels
    model_size: tuple[int, int]                 # (H, W) model canvas pixels
    content_box: tuple[int, int, int, int]      # (top, left, height, width) of the image on the canvas
    region: tuple[float, float, float, float]   # (y0, x0, y1, x1) in original pixels covering the canvas

    def to_original(self, values: np.ndarray | torch.Tensor) -> np.ndarray:
        """Resample a map over the model canvas, (h, w) tokens or (H, W) pixels, to (H0, W0).

        Bilinear at original pixel centres (half-pixel convention), edges clamped.
        """
        arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
        if arr.ndim != 2:
            raise ValueError(f"expected a 2-D map, got shape {arr.shape}")
        arr = arr.astype(np.float32, copy=False)
        h, w = arr.shape
        H0, W0 = self.orig_size
        y0, x0, y1, x1 = self.region
        ys = ((np.arange(H0) + 0.5) - y0) / (y1 - y0) * h - 0.5   # (H0,) map coordinates
        xs = ((np.arange(W0) + 0.5) - x0) / (x1 - x0) * w - 0.5   # (W0,)
        return _interp_rows(_interp_rows(arr, ys), xs, axis=1)

    def axis_operators(self, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        """Matrices (H0, h) and (W0, w) with to_original(m) == Ry @ m @ Rx.T for any (h, w) map m:
        the resampling is linear and separable, so callers can fold it into their own operators."""
        H0, W0 = self.orig_size
        y0, x0, y1, x1 = self.region
        ys = ((np.arange(H0) + 0.5) - y0) / (y1 - y0) * h - 0.5
        xs = ((np.arange(W0) + 0.5) - x0) / (x1 - x0) * w - 0.5
        return _interp_rows(np.eye(h, dtype=np.float32), ys), _interp_rows(np.eye(w, dtype=np.float32), xs)

    def canvas_mask(self) -> np.ndarray:
        """(H, W) bool: True where the canvas shows image content (False on padding)."""
        m = np.zeros(self.model_size, dtype=bool)
        t, l, hh, ww = self.content_box
        m[t:t + hh, l:l + ww] = True
        return m


def _interp_rows(arr: np.ndarray, coords: np.ndarray, axis: int = 0) -> np.ndarray:
    """Linear interpolation of `arr` along `axis` at fractional `coords`, clamped at the edges."""
    n = arr.shape[axis]
    c = np.clip(coords, 0, n - 1)
    lo = np.floor(c).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    t = (c - lo).astype(np.float32)
    a, b = np.take(arr, lo, axis=axis), np.take(arr, hi, axis=axis)
    t = t[:, None] if axis == 0 else t[None, :]
    return a * (1 - t) + b * t


@dataclass
class Batch:
    pixels: torch.Tensor                # (B, 3, H, W) float32, normalised
    mappings: list[GridMapping]


def to_rgb_uint8(image: Any, name: str = "image", bits: int | None = None) -> np.ndarray:
    """PIL image or numpy array -> (H, W, 3) uint8. Gray, RGBA and 16-bit are converted.

    16-bit samples are scaled by their real bit depth (`integer_to_uint8`): `bits` when given, else a
    PNG's sBIT chunk for PIL images opened from a file, else the depth their largest value needs.
    A PIL image with an EXIF Orientation tag is turned the way a viewer shows it (`exif_upright`), so its size,
    pixels and maps are in the displayed orientation; numpy arrays are taken as they are.
    Raises ImageFormatError for layouts and sample types that cannot be an image and
    PreprocessingMismatch for float arrays and float PIL images (mode "F"): their scale is ambiguous, pass uint8.
    """
    if isinstance(image, Image.Image):
        if bits is None and image.mode in ("I;16", "I;16B", "I;16L", "I") and image.format == "PNG" \
                and getattr(image, "filename", ""):
            bits = png_significant_bits(image.filename)               # read before turning: the copy has no file
        try:
            image = exif_upright(image)
        except (ValueError, OSError) as e:                            # the pixels are decoded to be turned
            raise ImageFormatError(f"{name}: cannot be decoded ({type(e).__name__}: {e})") from e
        if image.mode in ("I;16", "I;16B", "I;16L", "I"):
            return to_rgb_uint8(np.array(image), name, bits)
        if image.mode == "F":                                         # float samples: refused as float arrays are
            return to_rgb_uint8(np.array(image), name)
        try:
            rgb = np.array(image.convert("RGB"))
        except (ValueError, OSError) as e:                            # e.g. a mode Pillow cannot convert
            raise ImageFormatError(f"{name}: PIL mode {image.mode!r} cannot be converted to RGB ({e})") from e
        return to_rgb_uint8(rgb, name)
    if isinstance(image, torch.Tensor):
        raise ImageFormatError(f"{name}: a torch tensor; pass a (B,3,H,W) normalised tensor to patch_grids "
                               "directly, or uint8 numpy/PIL images to preprocess")
    if not isinstance(image, np.ndarray):
        raise ImageFormatError(f"{name}: unsupported type {type(image).__name__}; pass PIL images or numpy arrays")
    a = image
    if a.dtype.kind not in "biuf":
        raise ImageFormatError(f"{name}: dtype {a.dtype} does not hold image samples; pass uint8 (or 16-bit) arrays")
    if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[2] not in (1, 3, 4):
        raise ImageFormatError(f"{name}: shape {a.shape} looks channels-first; pass (H, W, C), e.g. "
                               "np.transpose(img, (1, 2, 0))")
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (3, 4)):
        raise ImageFormatError(f"{name}: shape {a.shape} is not (H, W), (H, W, 1), (H, W, 3) or (H, W, 4)")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ImageFormatError(f"{name}: empty image of shape {a.shape}")
    if a.dtype == bool:
        a = a.astype(np.uint8) * 255
    elif a.dtype.kind == "f":
        finite = a[np.isfinite(a)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (float("nan"), float("nan"))
        hint = ("values in [0, 1]: use (img * 255).round().astype(np.uint8)" if lo >= 0 and hi <= 1 else
                "values up to 255: use img.round().astype(np.uint8)" if lo >= 0 and hi <= 255 else
                "values outside [0, 255] look normalised already: pass the raw uint8 image instead")
        raise PreprocessingMismatch(f"{name}: float image (range {lo:.3g}..{hi:.3g}); preprocessing expects "
                                    f"uint8 so that scale is unambiguous; {hint}")
    elif a.dtype != np.uint8:
        a = integer_to_uint8(a, name, bits)
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    elif a.shape[2] == 4:
        a = a[:, :, :3]  # drop alpha
    return np.ascontiguousarray(a)


def exif_orientation(image: Image.Image) -> int:
    """The EXIF Orientation of a PIL image (1: as stored; 1 too for a missing, malformed or out-of-range tag), from
    its header. A PNG's eXIf chunk is read only when it comes before the pixels (as the PNG specification asks) or
    once they are loaded: reading a later one would decode them. The rule `anomaly.images` reads files by."""
    if image.format == "PNG" and "exif" not in image.info:
        return 1
    try:
        value = image.getexif().get(0x0112, 1)
    except Exception:   # a malformed EXIF block: the pixels are still readable, as stored
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def exif_upright(image: Image.Image) -> Image.Image:
    """`image` turned by its EXIF Orientation (`PIL.ImageOps.exif_transpose`), as viewers show it; `image` itself
    when it has none. The turned copy carries no Orientation tag, so turning it again changes nothing."""
    if exif_orientation(image) == 1:
        return image
    from PIL import ImageOps

    return ImageOps.exif_transpose(image)


BIT_DEPTHS = (8, 10, 12, 14, 16)     # what sensors record; a guessed depth is the smallest that holds the data


def integer_to_uint8(a: np.ndarray, name: str = "image", bits: int | None = None) -> np.ndarray:
    """Integer samples -> uint8, scaled by the bit depth they were recorded with.

    bits: significant bits (e.g. a PNG's sBIT chunk). Samples that fit in `bits` are scaled by
        255 / (2**bits - 1); larger ones were stored left-aligned in 16 bits, as the PNG specification
        asks, and are scaled by 255 / 65535.
    None: 16-bit containers (uint16) are scaled by the smallest of 8, 10, 12, 14 or 16 bits that holds
        their largest sample, with a warning when that is less than 16 (a guess: a dark 16-bit image
        then looks brighter, and images of one sensor may be scaled differently). Other integer types
        with samples up to 255 are 8-bit values and kept; larger ones are treated like uint16.
    Raises ImageFormatError for negative samples or samples above 65535.
    """
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi > 65535:
        raise ImageFormatError(f"{name}: integer samples {lo}..{hi} (dtype {a.dtype}) lie outside 0..65535; "
                               "pass an 8- or 16-bit image")
    sixteen = a.dtype.kind == "u" and a.dtype.itemsize == 2
    if bits is not None and not 1 <= bits <= 16:
        bits = None
    if bits is None and not sixteen and hi <= 255:
        return a.astype(np.uint8)
    if bits is not None:
        full = 2 ** bits - 1 if hi < 2 ** bits else 65535
    else:
        depth = next(d for d in BIT_DEPTHS if hi < 2 ** d)
        full = 2 ** depth - 1
        if depth < 16 and hi > 0:
            warnings.warn(f"16-bit image data without a recorded bit depth (PNG sBIT): its largest sample fits "
                          f"{depth} bits, so it is scaled as {depth}-bit data (/ {full}). If the images are really "
                          "16-bit (dark ones), or come from one sensor, record the depth in an sBIT chunk or convert "
                          "them to 8-bit yourself", stacklevel=3)
    return np.round(a.astype(np.float64) / (full / 255.0)).clip(0, 255).astype(np.uint8)


def png_significant_bits(path: Any) -> int | None:
    """Significant bits of a PNG's colour samples from its sBIT chunk (the largest over channels), None
    when the file has none or is not a readable PNG. Reads only the chunks before the image data."""
    import struct

    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            color_type = None
            while True:
                head = f.read(8)
                if len(head) < 8:
                    return None
                length, kind = struct.unpack(">I4s", head)
                if kind in (b"IDAT", b"IEND") or length > 1 << 24:
                    return None
                data = f.read(length)
                f.seek(4, 1)                                          # CRC
                if kind == b"IHDR" and len(data) >= 10:
                    color_type = data[9]
                elif kind == b"sBIT" and data:
                    channels = {0: 1, 2: 3, 3: 3, 4: 1, 6: 3}.get(color_type, len(data))   # colour, not alpha
                    return max(data[:channels])
    except OSError:
        return None


class Preprocess:
    """Resize (stretch, or keep aspect and pad), scale to [0, 1], normalise with the checkpoint's stats."""

    def __init__(self, config: BackboneConfig, resize: str = "stretch") -> None:
        if resize not in RESIZE_POLICIES:
            raise ParameterError(f"resize must be one of {RESIZE_POLICIES}, got {resize!r}: 'stretch' resizes the "
                                 "whole image to the input size, 'pad' keeps its aspect and pads")
        self.config = config
        self.resize = resize
        self.size = config.img_size
        self.mean = torch.tensor(config.mean, dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(config.std, dtype=torch.float32).view(3, 1, 1)
        self.filter = _PIL_FILTERS.get(config.interpolation, Image.Resampling.BICUBIC)

    def __repr__(self) -> str:
        c = self.config
        return (f"Preprocess(size={c.img_size}, resize={self.resize!r}, interpolation={c.interpolation!r}, "
                f"mean={c.mean}, std={c.std}, patch={c.patch_size}, grid={c.grid})")

    def canvas(self, image: Any, name: str = "image") -> tuple[np.ndarray, GridMapping]:
        """One image on the model canvas, still uint8 (H, W, 3), and where it lies there."""
        rgb = to_rgb_uint8(image, name)                                   # (H0, W0, 3) uint8
        H0, W0 = rgb.shape[:2]
        H, W = self.size
        patch = self.config.patch_size
        if H0 < patch or W0 < patch:
            warnings.warn(f"{name} is {H0}x{W0} px, smaller than one {patch}x{patch} px patch: it is blown up to "
                          f"{H}x{W} and its tokens and map carry no detail; is it the image you meant?", stacklevel=2)
        if self.resize == "stretch":
            canvas = _resize(rgb, (H, W), self.filter)
            box, region = (0, 0, H, W), (0.0, 0.0, float(H0), float(W0))
        else:
            s = min(H / H0, W / W0)
            hh, ww = max(1, round(H0 * s)), max(1, round(W0 * s))
            top, left = (H - hh) // 2, (W - ww) // 2
            fill = tuple(int(round(m * 255)) for m in self.config.mean)   # pads normalise to ~0
            canvas = np.empty((H, W, 3), dtype=np.uint8)
            canvas[:] = fill
            canvas[top:top + hh, left:left + ww] = _resize(rgb, (hh, ww), self.filter)
            sy, sx = H0 / hh, W0 / ww                                     # original px per canvas px
            box = (top, left, hh, ww)
            region = (-top * sy, -left * sx, (H - top) * sy, (W - left) * sx)
        return canvas, GridMapping((H0, W0), (H, W), box, region)

    def __call__(self, images: Sequence[Any] | Any) -> Batch:
        if isinstance(images, (Image.Image, np.ndarray)) and not (isinstance(images, np.ndarray) and images.ndim == 4):
            images = [images]
        if len(images) == 0:
            raise ImageFormatError("no images given")
        canvases, maps = zip(*(self.canvas(im, f"image {i}") for i, im in enumerate(images)))
        # scaled and normalised once for the batch: per image, torch's small elementwise ops cost more in thread
        # hand-offs than in arithmetic on a busy 2-core machine (the same values either way)
        x = torch.from_numpy(np.stack(canvases)).permute(0, 3, 1, 2).contiguous().float().div_(255.0)  # (B, 3, H, W)
        x = x.sub_(self.mean).div_(self.std)
        return Batch(x, list(maps))

    def check(self, pixels: torch.Tensor) -> None:
        """Raise PreprocessingMismatch unless `pixels` look like this checkpoint's normalised input."""
        check_normalised(pixels, self.config)


def _resize(rgb: np.ndarray, size: tuple[int, int], filt: Image.Resampling) -> np.ndarray:
    if rgb.shape[:2] == tuple(size):
        return rgb
    return np.array(Image.fromarray(rgb).resize((size[1], size[0]), filt))


#: The most a resize in float can overshoot an image in [0, 1] by, in [0, 1] units: a two-dimensional bicubic
#: filter of torch's kind (a = -0.75) gives at most 1.1875**2 + 0.1875**2 - 1 (its positive lobes on the light
#: side of an edge, its negative ones on the dark side), just under this. PIL's bicubic (a = -0.5) stays well within.
RESAMPLING_OVERSHOOT = 0.45
#: The largest share of one image's values that may lie beyond the tolerance, inside RESAMPLING_OVERSHOOT, for the
#: batch to pass as resampling overshoot: ringing lies along sharp edges, while other statistics or a second
#: normalisation move whole areas (the darkest or lightest ones) out of [0, 1].
OVERSHOOT_SHARE = 0.15


def check_normalised(pixels: torch.Tensor, config: BackboneConfig, tol: float = 0.12) -> None:
    """Checks that a (B, 3, H, W) float batch is normalised exactly once with config's stats, by its value range.

    Any float dtype and device is accepted (the model casts to its own); NaN or inf anywhere raises
    PreprocessingMismatch.

    Undo the normalisation: x * std + mean must then be an image in [0, 1], up to `tol`, so 0-255 floats and
    batches normalised twice raise PreprocessingMismatch. Other statistics whose range falls inside this one
    (Normalize(.5, .5) or CLIP's on an ImageNet-statistics checkpoint) pass: the test is on the range, since a test
    on the batch's statistics would refuse legitimate low-contrast images.

    Resampling overshoot: a resize in float with a bicubic or Lanczos filter (torchvision's Resize after
    ToTensor) rings at sharp edges, and a high-contrast image (text, a binary pattern) then lies a little outside
    [0, 1] along its edges. Values beyond `tol` are accepted, with a warning, when they stay within
    RESAMPLING_OVERSHOOT of [0, 1] and make up at most OVERSHOOT_SHARE of each image's values; a batch normalised
    twice or with other statistics moves whole areas further and is refused. The refusal says how to avoid the
    overshoot (resize the uint8 image, or with a bilinear filter) or to pass check=False for a batch known good.
    Like other statistics whose range falls inside this one, an image of other statistics with little black or
    white in it (its few out-of-range values look like ringing) passes too, with the warning.

    A batch with all values in [0, 1] (mean > 0 checkpoints) is either an image scaled to [0, 1] and never
    normalised, or a light, low-contrast image normalised correctly (a grey texture: (0.6 - 0.485) / 0.229 = 0.5).
    Where its values come from 8-bit samples they tell: an unnormalised image holds multiples of 1/255, a
    normalised one (what `Preprocess` makes) values (k / 255 - mean) / std. It is refused when it fits only the
    former; accepted when it fits the latter; and where it fits neither (resampled in float, or a low-precision
    dtype), accepted with a warning that says what to pass to be sure. A flat batch (std <= 0.01) or one of fewer
    than 3 x 32 x 32 values is accepted as it is.
    """
    if not isinstance(pixels, torch.Tensor) or pixels.ndim != 4:
        raise ImageFormatError(f"expected a (B, 3, H, W) tensor, got {getattr(pixels, 'shape', type(pixels))}")
    if pixels.shape[1] != 3:
        raise ImageFormatError(f"expected 3 channels, got {pixels.shape[1]} (shape {tuple(pixels.shape)}); "
                               "convert gray/RGBA to RGB, or pass uint8 images and let preprocess do it")
    if not pixels.is_floating_point():
        raise PreprocessingMismatch(f"tensor of dtype {pixels.dtype}: pass uint8 images (numpy/PIL) to preprocess, "
                                    "or a float tensor normalised with the checkpoint's mean/std")
    x = pixels.detach().float()
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        bad = x[~finite]
        kinds = [k for k, m in (("NaN", bad.isnan()), ("+inf", bad == float("inf")), ("-inf", bad == float("-inf")))
                 if bool(m.any())]
        first = tuple(int(i) for i in (~finite).nonzero()[0])
        raise PreprocessingMismatch(
            f"{bad.numel()} of {x.numel()} values are not finite ({', '.join(kinds)}; the first at index {first} "
            "of the (B, 3, H, W) batch): a normalised image holds finite numbers only. Find where the NaN or inf "
            "came from (a division by a zero std, a broken decode), or pass uint8 images to bb.preprocess")
    hi, lo = float(x.max()), float(x.min())
    if hi > 20:
        raise PreprocessingMismatch(
            f"values up to {hi:.1f}: this looks like a 0-255 image, not a normalised batch. Pass uint8 images "
            f"to bb.preprocess, or divide by 255 and normalise with mean={config.mean}, std={config.std}")
    mean = torch.tensor(config.mean, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(config.std, device=x.device).view(1, 3, 1, 1)
    raw = x * std + mean                                              # what the image was in [0, 1]
    rlo, rhi = float(raw.min()), float(raw.max())
    if rlo < -tol or rhi > 1 + tol:
        share = ((raw < -tol) | (raw > 1 + tol)).flatten(1).float().mean(1)   # (B,) of each image's values
        worst = int(share.argmax())
        bound = RESAMPLING_OVERSHOOT
        where = (f"after undoing this checkpoint's normalisation (mean={config.mean}, std={config.std}) values span "
                 f"{rlo:.2f}..{rhi:.2f}, outside [0, 1]")
        if rlo < -bound or rhi > 1 + bound or float(share[worst]) > OVERSHOOT_SHARE:
            raise PreprocessingMismatch(
                f"{where}, beyond [{-tol:g}, {1 + tol:g}] on {float(share[worst]):.1%} of image {worst}'s values: "
                "the batch was normalised twice or with other statistics. Pass raw uint8 images to bb.preprocess "
                "instead. (A resize in float with a bicubic or Lanczos filter overshoots [0, 1] along sharp edges; "
                f"that is accepted up to {bound:g} beyond [0, 1] and on up to {OVERSHOOT_SHARE:.0%} of an image's "
                "values. If this batch was resized that way, resize the uint8 or PIL image before ToTensor, or use "
                "a bilinear filter, or pass check=False to patch_grids for a batch you know is normalised right)")
        warnings.warn(
            f"{where}, beyond [{-tol:g}, {1 + tol:g}] on {float(share[worst]):.1%} of image {worst}'s values, along "
            "its edges: taken as the overshoot of a resize in float with a bicubic or Lanczos filter (the batch is "
            "then normalised right). If it was normalised with other statistics instead, its features are wrong. "
            "Resize the uint8 or PIL image before ToTensor (or use a bilinear filter) to avoid the overshoot, or pass "
            "check=False to patch_grids for a batch you know is normalised right", stacklevel=4)
        return
    # a correctly normalised image has values below 0 only when the mean is above 0: for mean=0 checkpoints
    # (timm's MIIL ViTs: mean 0, std 1) an image in [0, 1] IS the normalised batch. A flat or tiny batch says
    # nothing either way (torch.zeros is a mean-colour image normalised, or black never normalised)
    if max(config.mean) <= 0.05 or lo < 0 or hi > 1 or x.numel() < 3 * 32 * 32 or float(x.std()) <= 0.01:
        return
    precise = pixels.dtype in (torch.float32, torch.float64)
    if precise and _is_8bit(raw):
        return                                                        # (k / 255 - mean) / std: normalised 8-bit
    if precise and _is_8bit(x):
        raise PreprocessingMismatch(
            "all values lie in [0, 1] and are multiples of 1/255: this is an 8-bit image scaled to [0, 1] but not "
            f"normalised. Normalise with mean={config.mean}, std={config.std}, or pass uint8 images to bb.preprocess")
    warnings.warn(
        f"all values of the batch lie in [0, {hi:.2f}], none below 0: it is either a light, low-contrast image "
        f"normalised with mean={config.mean}, std={config.std} (then all is well), or an image scaled to [0, 1] "
        "that was never normalised (then the features are wrong), and the values cannot tell which. Pass uint8 "
        "images to bb.preprocess (or patch_grids) to be sure, or pass check=False to patch_grids for a batch you "
        "normalised yourself", stacklevel=4)


def _is_8bit(values: torch.Tensor, atol: float = 2e-3) -> bool:
    """Whether every value is k / 255 for an integer k (up to float32 rounding, `atol` in units of 1/255)."""
    k = values * 255.0
    return bool(((k - k.round()).abs() <= atol).all())
