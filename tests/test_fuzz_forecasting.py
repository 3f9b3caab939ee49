"""Fuzzing the CSV readers: whatever the file holds, the answer is a valid frame or a named error.

Random bytes and random CSV-like text (ragged rows, text among numbers, dates in several
formats, empty fields, quotes, blank lines) go through `read_long_csv` and `read_wide_csv`, with
and without `fill` and `sort`. Allowed outcomes: a frame that `validate` returns unchanged, or a
FrozenVitError. Anything else (a raw pandas/numpy exception, a frame that fails validation) is a
bug. `pytest --hypothesis-show-statistics` prints how many cases ran and how they ended.
"""
from __future__ import annotations

import string
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from frozenvit.backbone.suite.errors import FrozenVitError
from frozenvit.forecasting import read_long_csv, read_wide_csv, validate

CASES = Counter()                      # outcome -> count, over the whole module
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_text = st.text(alphabet=string.ascii_letters + string.digits + " -_.:/+\"'é\t", max_size=8)
_dates = st.datetimes(min_value=pd.Timestamp("1900-01-01").to_pydatetime(),
                      max_value=pd.Timestamp("2200-01-01").to_pydatetime())
_cell = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "NaN", "nan", "NA", "null", "inf", "-inf", "True", "1e309", "0x10", " 3 ", "1,5"]),
    st.tuples(_dates, st.sampled_from(["%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%d/%m/%Y", "%Y-%m-%dT%H:%M%z"]))
    .map(lambda p: p[0].strftime(p[1])),
    _text,
    _text.map(lambda t: f'"{t},\n{t}"'),
)
_header = st.lists(st.sampled_from(["unique_id", "ds", "y", "date", "A", "B", "OT", "", "y"]) | _text,
                   min_size=1, max_size=5)


@st.composite
def csv_like(draw) -> str:
    """Free-form CSV-ish text: a header, then ragged rows of mixed cells, sometimes blank lines."""
    header = draw(_header)
    rows = draw(st.lists(st.lists(_cell, min_size=0, max_size=len(header) + 1), max_size=30))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    lines = [",".join(header)] + [",".join(r) for r in rows]
    return newline.join(lines) + draw(st.sampled_from(["", newline, newline * 3]))


@st.composite
def near_valid_long(draw) -> str:
    """A long CSV that is mostly right: a few series on a regular grid, then a few corruptions."""
    n_series = draw(st.integers(1, 3))
    n = draw(st.integers(1, 40))
    step = draw(st.sampled_from([1, 2, 7]))
    dated = draw(st.booleans())
    rows = []
    for s in range(n_series):
        for t in range(n):
            ds = str(pd.Timestamp("2021-03-01") + pd.Timedelta(hours=t * step)) if dated else str(t * step)
            rows.append([f"s{s}", ds, repr(float(np.sin(t) + s))])
    for _ in range(draw(st.integers(0, 4))):                 # corruptions: drop, swap, or overwrite a cell
        if not rows:
            break
        i = draw(st.integers(0, len(rows) - 1))
        kind = draw(st.sampled_from(["drop", "swap", "cell"]))
        if kind == "drop":
            rows.pop(i)
        elif kind == "swap":
            j = draw(st.integers(0, len(rows) - 1))
            rows[i], rows[j] = rows[j], rows[i]
        else:
            rows[i][draw(st.integers(0, 2))] = draw(_cell)
    return "\n".join(["unique_id,ds,y"] + [",".join(r) for r in rows]) + "\n"


@st.composite
def near_valid_wide(draw) -> str:
    """A wide CSV (date column, one column per series) that is mostly right, then a few corruptions."""
    n = draw(st.integers(1, 40))
    cols = draw(st.lists(st.sampled_from(["A", "B", "C", "OT"]), min_size=1, max_size=3, unique=True))
    rows = [[str(pd.Timestamp("2021-03-01") + pd.Timedelta(hours=t))] + [repr(float(t + k)) for k in range(len(cols))]
            for t in range(n)]
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(rows) - 1))
        rows[i][draw(st.integers(0, len(cols)))] = draw(_cell)
    return "\n".join([",".join(["date", *cols])] + [",".join(r) for r in rows]) + "\n"


def _check(read, path, **kw) -> str:
    """Run one reader; return the outcome's name, or fail on anything but a valid frame or a named error."""
    try:
        df = read(path, **kw)
    except FrozenVitError as e:
        outcome = f"named error ({type(e).__name__})"
    else:
        assert list(df.columns) == ["unique_id", "ds", "y"]
        assert df["y"].dtype == np.float64 and np.isfinite(df["y"]).all()
        pd.testing.assert_frame_equal(validate(df), df)
        outcome = "valid frame"
    event(outcome)
    CASES[outcome] += 1
    return outcome


def _write(tmp_path_factory, data: bytes | str):
    path = tmp_path_factory.mktemp("fuzz") / "f.csv"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


@FUZZ
@given(data=st.binary(max_size=600))
def test_random_bytes_give_a_frame_or_a_named_error(tmp_path_factory, data):
    path = _write(tmp_path_factory, data)
    _check(read_long_csv, path)
    _check(read_wide_csv, path, fill="ffill")


@FUZZ
@given(text=csv_like(), fill=st.sampled_from([None, "ffill", "interpolate", "zero"]), sort=st.booleans())
def test_random_csv_text_gives_a_frame_or_a_named_error(tmp_path_factory, text, fill, sort):
    path = _write(tmp_path_factory, text)
    _check(read_long_csv, path, fill=fill, sort=sort)
    _check(read_wide_csv, path, fill=fill, sort=sort)


@FUZZ
@given(text=near_valid_long(), fill=st.sampled_from([None, "ffill", "interpolate"]), sort=st.booleans())
def test_nearly_valid_long_csv_gives_a_frame_or_a_named_error(tmp_path_factory, text, fill, sort):
    _check(read_long_csv, _write(tmp_path_factory, text), fill=fill, sort=sort)


@FUZZ
@given(text=near_valid_wide(), fill=st.sampled_from([None, "ffill", "zero"]))
def test_nearly_valid_wide_csv_gives_a_frame_or_a_named_error(tmp_path_factory, text, fill):
    _check(read_wide_csv, _write(tmp_path_factory, text), fill=fill)


@pytest.fixture(scope="module", autouse=True)
def _both_outcomes_were_reached():
    """A fuzzer that only ever sees errors (or only frames) tests little: both must occur."""
    yield
    if sum(CASES.values()) >= 200:
        assert CASES["valid frame"] > 0 and any(k.startswith("named error") for k in CASES), dict(CASES)
