"""Fuzzing the image readers: whatever a file or array holds, the answer is a valid image or a named error.

Files: random bytes, and valid PNG/JPEG/BMP/TIFF encodings of random images in many modes (gray, RGB,
RGBA, palette, 1-bit, 16-bit) that are then truncated or have bytes overwritten, all named .png or .jpg,
go through `anomaly.images.read_image`. Arrays of random dtypes (ints, floats with NaN/inf, bool,
complex, dates, strings) and shapes (0-d to 4-d, empty sides) go through the backbone's preprocessing.
Allowed outcomes: a valid result (uint8 (H, W, 3) image; a finite (B, 3, H, W) batch with one mapping
per image), or a FrozenVitError. Anything else (a raw Pillow/numpy exception) is a bug. Warnings (tiny
images, guessed bit depths) are allowed. `pytest -s` prints how many cases ran and how they ended.
"""
from __future__ import annotations

import io
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from frozenvit.anomaly.images import read_image
from frozenvit.backbone.suite.errors import FrozenVitError

CASES = Counter()                      # (test, outcome) -> count, over the whole module
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
MODES = ("L", "RGB", "RGBA", "P", "1", "LA", "I;16", "I")


@st.composite
def encoded_image(draw) -> bytes:
    """A valid encoding of a small random image."""
    mode = draw(st.sampled_from(MODES))
    h, w = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    if mode in ("I;16", "I"):
        top = draw(st.sampled_from([255, 4095, 65535]))
        img = Image.fromarray(rng.integers(0, top + 1, (h, w)).astype(np.uint16 if mode == "I;16" else np.int32))
    else:
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)
    fmt = draw(st.sampled_from(["PNG", "JPEG", "BMP", "TIFF"])) if mode != "I" else "TIFF"   # 32-bit: TIFF only
    if fmt == "JPEG" and mode not in ("L", "RGB"):
        img = img.convert("RGB") if mode not in ("I;16", "I") else img.convert("L")
    if fmt == "BMP" and mode in ("I;16", "I", "LA"):
        img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


@st.composite
def damaged(draw) -> bytes:
    """A valid encoding, truncated and/or with some bytes overwritten."""
    data = bytearray(draw(encoded_image()))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    for _ in range(draw(st.integers(0, 6))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


file_bytes = st.one_of(st.binary(max_size=512), encoded_image(), damaged(), damaged(),
                       st.binary(max_size=256).map(lambda b: b"\x89PNG\r\n\x1a\n" + b))


def test_read_image_returns_an_rgb_image_or_a_named_error():
    with tempfile.TemporaryDirectory() as tmp:
        n = Counter()

        @FUZZ
        @given(data=file_bytes, suffix=st.sampled_from([".png", ".jpg"]))
        def check(data: bytes, suffix: str) -> None:
            path = Path(tmp) / f"fuzz{suffix}"
            path.write_bytes(data)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    img = read_image(path)
            except FrozenVitError as e:
                outcome = f"error {type(e).__name__}"
            else:
                assert isinstance(img, np.ndarray) and img.dtype == np.uint8
                assert img.ndim == 3 and img.shape[2] == 3 and min(img.shape[:2]) >= 1
                outcome = "image"
            _seen(n, outcome)

        check()
    _tally("read_image", n, valid="image")


_dtypes = st.one_of(hnp.scalar_dtypes(), hnp.unicode_string_dtypes(max_len=3), hnp.byte_string_dtypes(max_len=3),
                    st.sampled_from([np.dtype(t) for t in ("uint8", "uint16", ">u2", "int32", "bool")]))
_likely_images = hnp.arrays(st.sampled_from([np.dtype(t) for t in ("uint8", "uint16", "int64", "bool")]),
                            st.tuples(st.integers(1, 40), st.integers(1, 40)).flatmap(
                                lambda hw: st.sampled_from([hw, (*hw, 1), (*hw, 3), (*hw, 4), (2, *hw, 3)])))
arrays = st.one_of(hnp.arrays(_dtypes, hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=12)),
                   _likely_images, _likely_images)


@pytest.fixture(scope="module")
def bb(make_tiny_vit):
    return make_tiny_vit(img_size=32)


def test_preprocessing_an_array_gives_a_finite_batch_or_a_named_error(bb):
    n = Counter()

    @FUZZ
    @given(a=arrays, as_list=st.booleans())
    def check(a: np.ndarray, as_list: bool) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                batch = bb.preprocess([a] if as_list else a)
        except FrozenVitError as e:
            outcome = f"error {type(e).__name__}"
        else:
            B = batch.pixels.shape[0]
            assert batch.pixels.shape == (B, 3, *bb.config.img_size) and B >= 1
            assert batch.pixels.isfinite().all() and len(batch.mappings) == B
            outcome = "batch"
        _seen(n, outcome)

    check()
    _tally("preprocess", n, valid="batch")


def _seen(n: Counter, outcome: str) -> None:
    event(outcome)
    n[outcome] += 1


def _tally(what: str, n: Counter, valid: str) -> None:
    """Record the outcomes; both kinds must occur, or the strategy is not exploring."""
    CASES.update({f"{what}: {k}": v for k, v in n.items()})
    assert n[valid] > 0 and sum(v for k, v in n.items() if k.startswith("error")) > 0


def teardown_module(module) -> None:
    print(f"\nimage fuzzing: {sum(CASES.values())} cases")
    for k, v in sorted(CASES.items()):
        print(f"  {v:4d}  {k}")
