"""Series in long format (`unique_id`, `ds`, `y`), loaders from CSV and validation.

Long format is the one statsforecast and neuralforecast use: one row per (series, timestamp).
`ds` may be datetimes or integers (integer steps of 1). Validation never silently repairs
data: unsorted rows, duplicates, irregular spacing, NaN and gaps raise `SeriesError` naming the
series and the timestamp, unless the caller asks for a fill explicitly.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .errors import SeriesError

Fill = Literal["ffill", "interpolate", "zero"]
ID, DS, Y = "unique_id", "ds", "y"


def read_long_csv(path: str | Path, id_col: str = ID, time_col: str = DS, target_col: str = Y, *,
                  sort: bool = False, fill: Fill | None = None, min_length: int | None = None) -> pd.DataFrame:
    """Read a long CSV (one row per series and timestamp) and validate it.

    Returns a DataFrame with columns `unique_id` (str), `ds` (datetime64 or int64), `y` (float64).
    """
    raw = pd.read_csv(path)
    missing = [c for c in (id_col, time_col, target_col) if c not in raw.columns]
    if missing:
        raise SeriesError(f"{path}: columns {missing} not found (have {list(raw.columns)}); "
                          "name them with id_col/time_col/target_col, or pass --wide for a wide file")
    df = pd.DataFrame({ID: raw[id_col].astype(str), DS: _parse_ds(raw[time_col], path),
                       Y: pd.to_numeric(raw[target_col], errors="coerce")})
    return validate(df, sort=sort, fill=fill, min_length=min_length)


def read_wide_csv(path: str | Path, time_col: str | None = None, columns: list[str] | None = None, *,
                  sort: bool = False, fill: Fill | None = None, min_length: int | None = None) -> pd.DataFrame:
    """Read a wide CSV (a time column, then one column per series, like the ETT files) as long format.

    `time_col` defaults to the first column; `columns` selects series (default: all others).
    """
    raw = pd.read_csv(path)
    time_col = time_col or raw.columns[0]
    if time_col not in raw.columns:
        raise SeriesError(f"{path}: time column {time_col!r} not found (have {list(raw.columns)})")
    cols = columns or [c for c in raw.columns if c != time_col]
    absent = [c for c in cols if c not in raw.columns]
    if absent:
        raise SeriesError(f"{path}: series columns {absent} not found")
    return validate(wide_to_long(raw, time_col, cols, source=str(path)), sort=sort, fill=fill,
                    min_length=min_length)


def wide_to_long(wide: pd.DataFrame, time_col: str, columns: list[str], source: str = "frame") -> pd.DataFrame:
    ds = _parse_ds(wide[time_col], source)
    parts = [pd.DataFrame({ID: str(c), DS: ds.to_numpy(), Y: pd.to_numeric(wide[c], errors="coerce").to_numpy()})
             for c in columns]
    return pd.concat(parts, ignore_index=True)


def long_to_wide(df: pd.DataFrame) -> pd.DataFrame:
    """Pivot long format to a (T, n_series) frame indexed by `ds`, columns in first-seen order."""
    order = list(dict.fromkeys(df[ID]))
    return df.pivot(index=DS, columns=ID, values=Y)[order]


def read_m4(train_csv: str | Path, test_csv: str | Path | None = None) -> pd.DataFrame:
    """Read the M4 layout (one row per series: id, then values, NaN-padded) as long format with
    integer `ds`. With `test_csv` the test values are appended after each series' training values."""
    def rows(path: str | Path) -> dict[str, np.ndarray]:
        frame = pd.read_csv(path, index_col=0)
        return {str(i): r[~np.isnan(r)] for i, r in zip(frame.index, frame.to_numpy(dtype=float))}
    train = rows(train_csv)
    test = rows(test_csv) if test_csv is not None else {}
    parts = []
    for sid, y in train.items():
        y = np.concatenate([y, test.get(sid, np.empty(0))])
        parts.append(pd.DataFrame({ID: sid, DS: np.arange(len(y), dtype=np.int64), Y: y}))
    return pd.concat(parts, ignore_index=True)


def _parse_ds(col: pd.Series, source: str | Path) -> pd.Series:
    if pd.api.types.is_integer_dtype(col):
        return col.astype(np.int64)
    try:
        return pd.to_datetime(col)
    except (ValueError, TypeError) as e:
        raise SeriesError(f"{source}: time column is neither integers nor parseable dates ({e})") from e


def validate(df: pd.DataFrame, *, sort: bool = False, fill: Fill | None = None,
             min_length: int | None = None) -> pd.DataFrame:
    """Check a long frame and return a clean copy (sorted by series then time, float `y`).

    Raises SeriesError for: missing columns, unsorted timestamps (unless `sort`), duplicates,
    irregular spacing, gaps and NaN (unless `fill` is given), series shorter than `min_length`.
    """
    missing = [c for c in (ID, DS, Y) if c not in df.columns]
    if missing:
        raise SeriesError(f"columns {missing} missing; long format needs unique_id, ds, y")
    df = df[[ID, DS, Y]].copy()
    df[ID] = df[ID].astype(str)
    df[Y] = pd.to_numeric(df[Y], errors="coerce").astype(float)
    out = []
    for uid, g in df.groupby(ID, sort=False):
        if sort:
            g = g.sort_values(DS, kind="stable")
        out.append(_check_one(uid, g, fill, min_length))
    return pd.concat(out, ignore_index=True)


def _check_one(uid: str, g: pd.DataFrame, fill: Fill | None, min_length: int | None) -> pd.DataFrame:
    ds = g[DS].reset_index(drop=True)
    t = ds.to_numpy().astype(np.int64)            # integers, or nanoseconds for datetimes
    d = np.diff(t)
    if (d == 0).any():
        i = int(np.flatnonzero(d == 0)[0]) + 1
        raise SeriesError(f"series {uid!r}: duplicate timestamp {ds.iloc[i]} (positions {i - 1} and {i}); "
                          "aggregate or drop duplicates first")
    if (d < 0).any():
        i = int(np.flatnonzero(d < 0)[0]) + 1
        raise SeriesError(f"series {uid!r}: timestamps not sorted ({ds.iloc[i]} after {ds.iloc[i - 1]}, "
                          f"position {i}); sort by (unique_id, ds) or pass sort=True")
    grid = _regular_grid(uid, ds)                 # every timestamp the series should have
    if len(grid) > len(ds):
        missing = ~pd.Index(grid).isin(ds)
        if fill is None:
            first = pd.Index(grid)[missing][0]
            raise SeriesError(f"series {uid!r}: {int(missing.sum())} missing timestamp(s) (gaps), first "
                              f"{first}; pass fill='ffill'|'interpolate'|'zero' to fill them")
        y_full = pd.Series(g[Y].to_numpy(dtype=float), index=pd.Index(ds)).reindex(grid).to_numpy()
        g = pd.DataFrame({DS: grid, Y: y_full})
    y = g[Y].to_numpy(dtype=float)
    nan = np.flatnonzero(~np.isfinite(y))
    if nan.size:
        if fill is None:
            raise SeriesError(f"series {uid!r}: {nan.size} missing/non-finite value(s), first at "
                              f"{g[DS].iloc[int(nan[0])]}; pass fill='ffill'|'interpolate'|'zero'")
        y = _fill(y, fill, uid)
    if min_length is not None and len(y) < min_length:
        raise SeriesError(f"series {uid!r} has {len(y)} values but needs at least {min_length} "
                          "(look-back + horizon [+ windows]); shorten the look-back/horizon or drop it")
    return pd.DataFrame({ID: uid, DS: g[DS].to_numpy(), Y: y})


_CALENDAR = ("MS", "ME", "QS", "QE", "YS", "YE", "B")


def _regular_grid(uid: str, ds: pd.Series) -> pd.Index | np.ndarray:
    """The regular grid from the first to the last timestamp; raises SeriesError when the
    timestamps fit no grid. Fixed steps (integers, hours, days, weeks) use the most common
    difference; calendar steps (months, quarters, years, business days) are tried by name."""
    if len(ds) < 2:
        return ds.to_numpy()
    is_int = pd.api.types.is_integer_dtype(ds)
    if not is_int:
        if len(ds) >= 3 and pd.infer_freq(pd.DatetimeIndex(ds)) is not None:
            return pd.DatetimeIndex(ds)
    t = ds.to_numpy().astype(np.int64)
    d = np.diff(t)
    vals, counts = np.unique(d, return_counts=True)
    step = int(vals[np.argmax(counts)])
    bad = np.flatnonzero(d % step)
    if not bad.size:
        full = np.arange(t[0], t[-1] + 1, step)
        return full if is_int else pd.DatetimeIndex(pd.to_datetime(full))
    if not is_int:
        idx = pd.DatetimeIndex(ds)
        for off in _CALENDAR:
            grid = pd.date_range(idx[0], idx[-1], freq=off)
            if len(grid) and grid[0] == idx[0] and idx.isin(grid).all():
                return grid
    i = int(bad[0]) + 1
    step_txt = str(step) if is_int else str(pd.Timedelta(step, "ns"))
    raise SeriesError(f"series {uid!r}: irregular spacing at {ds.iloc[i]} ({ds.iloc[i] - ds.iloc[i - 1]} after the "
                      f"previous timestamp; most steps are {step_txt}); resample to a regular frequency first")


def _fill(y: np.ndarray, how: Fill, uid: str) -> np.ndarray:
    s = pd.Series(y).where(np.isfinite(y))
    if how == "zero":
        return s.fillna(0.0).to_numpy()
    if how == "ffill":
        s = s.ffill().bfill()
    elif how == "interpolate":
        s = s.interpolate(limit_direction="both")
    else:
        raise SeriesError(f"unknown fill {how!r}; use 'ffill', 'interpolate' or 'zero'")
    if s.isna().any():
        raise SeriesError(f"series {uid!r} has no finite value at all; drop it")
    return s.to_numpy()


def series_arrays(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """{unique_id: y as float64 (T,)} in first-seen order (df must be validated)."""
    return {str(uid): g[Y].to_numpy(dtype=float) for uid, g in df.groupby(ID, sort=False)}
