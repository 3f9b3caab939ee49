"""Series in long format (`unique_id`, `ds`, `y`), loaders from CSV and validation.

Long format is the one statsforecast and neuralforecast use: one row per (series, timestamp).
`ds` may be datetimes or integers, at any regular step. Validation never silently repairs data:
unsorted rows, duplicates, irregular spacing, NaN and gaps raise `SeriesError` naming the series
and the timestamp, unless the caller asks for a sort or a fill explicitly (`sort=True`,
`fill="ffill"`; on the command line `--sort`, `--fill ffill`). Text where a number or a
timestamp belongs is never taken for a missing value: the readers name its line in the file.
"""
from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .defaults import BACKTEST_COMMAND, CALENDAR_DEFAULTS, CSV_SEP, DS, ID, SUB_DAILY_WEEK, Y
from .errors import SeriesError

Fill = Literal["ffill", "interpolate", "zero"]


def read_long_csv(path: str | Path, id_col: str = ID, time_col: str = DS, target_col: str = Y, *,
                  sort: bool = False, fill: Fill | None = None, min_length: int | None = None,
                  sep: str = CSV_SEP) -> pd.DataFrame:
    """Read a long CSV (one row per series and timestamp) and validate it.

    A file without a `unique_id` column (the default `id_col`) but with the time and target columns is
    one series, named by the file's stem (`airline.csv` -> 'airline'), unless its timestamps repeat (then
    it is several series whose id column has another name); an `id_col` named otherwise must exist. So is
    a file of two columns alone, a time and a value column of other names (`date,co2`): the time column is
    `time_col` where the file has it, else the one that is not `target_col`, else the first; the series is
    named by the value column.

    Returns a DataFrame with columns `unique_id` (str), `ds` (datetime64[ns] or int64), `y` (float64).
    Raises SeriesError for a file that is missing, empty, not a CSV or without data rows, for
    absent columns, and, naming the line, for an empty id or timestamp and for text in `y`.
    """
    raw = _read_csv(path, sep)
    missing = [c for c in (id_col, time_col, target_col) if c not in raw.columns]
    cols = list(raw.columns)
    if id_col == ID and len(cols) == 2 and ID not in cols and missing != [id_col]:    # date,co2: time and value
        t = time_col if time_col in cols else next(c for c in cols if c != target_col)
        v = next(c for c in cols if c != t)
        try:
            df = pd.DataFrame({ID: v if v != Y else Path(path).stem, DS: _parse_ds(raw[t], path),
                               Y: _parse_values(raw[v], path)})
        except SeriesError:
            df = None                                    # not a time and a value column: the error below
        if df is not None:
            return validate(df, sort=sort, fill=fill, min_length=min_length)
    if missing == [id_col] and id_col == ID:     # one series: ds,y (an id column named otherwise must exist)
        if raw[time_col].duplicated().any():
            raise SeriesError(f"{path}: no {id_col!r} column and its timestamps repeat, so it holds several series; "
                              f"name their id column with --id-col (have {list(raw.columns)})")
        raw = raw.assign(**{id_col: Path(path).stem})
    elif missing:
        raise SeriesError(f"{path}: columns {missing} not found (have {list(raw.columns)}); name them with "
                          "--id-col/--time-col/--target-col, or pass --wide for a wide file")
    ids = raw[id_col]
    if ids.isna().any():
        raise SeriesError(f"{_where(path, int(np.flatnonzero(ids.isna())[0]))}: the {id_col} field is empty; "
                          "every row needs a series id")
    df = pd.DataFrame({ID: ids.astype(str), DS: _parse_ds(raw[time_col], path),
                       Y: _parse_values(raw[target_col], path)})
    return validate(df, sort=sort, fill=fill, min_length=min_length)


def read_wide_csv(path: str | Path, time_col: str | None = None, columns: list[str] | None = None, *,
                  sort: bool = False, fill: Fill | None = None, min_length: int | None = None,
                  sep: str = CSV_SEP) -> pd.DataFrame:
    """Read a wide CSV (a time column, then one column per series, like the ETT files) as long format.

    `time_col` defaults to the first column; `columns` selects series (default: all others).
    Raises SeriesError as `read_long_csv` does.
    """
    raw = _read_csv(path, sep)
    time_col = time_col or raw.columns[0]
    if time_col not in raw.columns:
        raise SeriesError(f"{path}: time column {time_col!r} not found (have {list(raw.columns)}); "
                          "name it with --time-col")
    cols = columns or [c for c in raw.columns if c != time_col]
    if not cols:
        raise SeriesError(f"{path} has no series columns beside the time column {time_col!r}; a wide CSV has a "
                          "time column, then one column per series (or pass a long CSV without --wide)")
    absent = [c for c in cols if c not in raw.columns]
    if absent:
        raise SeriesError(f"{path}: series columns {absent} not found (have {list(raw.columns)}); "
                          "check --columns")
    ds = _parse_ds(raw[time_col], path)
    long = pd.concat([pd.DataFrame({ID: str(c), DS: ds.to_numpy(), Y: _parse_values(raw[c], path).to_numpy()})
                      for c in cols], ignore_index=True)
    return validate(long, sort=sort, fill=fill, min_length=min_length)


def wide_to_long(wide: pd.DataFrame, time_col: str, columns: list[str], source: str = "frame") -> pd.DataFrame:
    """A wide frame (a time column, one column per series) as long format, not yet validated."""
    ds = _parse_ds(wide[time_col], source)
    parts = [pd.DataFrame({ID: str(c), DS: ds.to_numpy(), Y: _parse_values(wide[c], source).to_numpy()})
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


SEPARATORS = {";": "semicolon", "\t": "tab", "|": "pipe"}      # what a CSV from elsewhere may be separated by


def _read_csv(path: str | Path, sep: str = CSV_SEP) -> pd.DataFrame:
    """The CSV's rows as pandas reads them, fields separated by `sep`; every way of not being a CSV with data is
    a SeriesError (a file whose header holds one field with another separator in it: named as such)."""
    path = Path(path)
    if not path.exists():
        raise SeriesError(f"{path} not found; pass the path of a CSV file with --csv")
    if path.is_dir():
        raise SeriesError(f"{path} is a folder; pass the path of a CSV file with --csv")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            raw = pd.read_csv(path, index_col=False, sep=sep)    # never the first column as an index (a shift)
    except pd.errors.ParserWarning:
        raise SeriesError(f"{path}: rows have more fields than the header line names; a value would be "
                          "dropped: name every column in the header (an empty last field is fine)") from None
    except pd.errors.EmptyDataError:
        raise SeriesError(f"{path} is empty; a CSV needs a header line, then one line per row") from None
    except UnicodeDecodeError as e:
        raise SeriesError(f"{path} is not UTF-8 text (byte {e.start}); save it as a UTF-8 CSV") from None
    except (pd.errors.ParserError, csv.Error, ValueError) as e:
        raise SeriesError(f"{path} is not a readable CSV: {str(e).strip()}") from None
    except OSError as e:
        raise SeriesError(f"{path} cannot be read ({e.strerror or e}); check the path and its permissions") from None
    other = [c for c in SEPARATORS if c != sep and c in str(raw.columns[0])] if len(raw.columns) == 1 else []
    if other:
        raise SeriesError(f"{path}: the file looks {SEPARATORS[other[0]]}-separated; its header is one field "
                          f"{raw.columns[0]!r}: pass --sep {other[0]!r} (sep={other[0]!r}), or save it with commas")
    if raw.empty:
        raise SeriesError(f"{path} has no data rows below its header line {list(raw.columns)}")
    return raw


def _line_number(path: str | Path, row: int) -> int | None:
    """The line of the file where data row `row` (0-based, as pandas counts them) starts; None if unknown."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            reader, seen, start = csv.reader(f), -1, 1          # record -1 is the header
            for rec in reader:
                if any(field.strip() for field in rec):        # pandas skips blank lines
                    if seen == row:
                        return start
                    seen += 1
                start = reader.line_num + 1
    except (OSError, csv.Error):
        pass
    return None


def _where(source: str | Path, row: int) -> str:
    """'FILE line N' for a file that exists (a CSV), else 'SOURCE row N' (a frame, counted from 0)."""
    line = _line_number(source, row) if isinstance(source, Path) or Path(str(source)).is_file() else None
    return f"{source} line {line}" if line is not None else f"{source} row {row}"


def _parse_values(col: pd.Series, source: str | Path) -> pd.Series:
    """A value column as float64. Empty fields and NaN stay NaN (missing, for --fill); text is a SeriesError."""
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return col.astype(float)
    is_bool = col.map(lambda v: isinstance(v, (bool, np.bool_)))
    num = pd.to_numeric(col.where(~is_bool), errors="coerce").astype(float)
    bad = np.flatnonzero((col.notna() & num.isna()).to_numpy())
    if bad.size:
        i = int(bad[0])
        raise SeriesError(f"{_where(source, i)}: {col.name} value {col.iloc[i]!r} is not a number ({bad.size} such "
                          "value(s)); correct it, or leave the field empty to mark it missing for --fill")
    return num


def _parse_ds(col: pd.Series, source: str | Path) -> pd.Series:
    """A time column as int64 steps or datetime64[ns] (time zones converted to UTC); SeriesError otherwise."""
    name = col.name
    empty = np.flatnonzero(col.isna().to_numpy())
    if empty.size:
        raise SeriesError(f"{_where(source, int(empty[0]))}: the {name} field is empty; every row needs a timestamp")
    if pd.api.types.is_integer_dtype(col):
        return col.astype(np.int64)
    if pd.api.types.is_float_dtype(col):
        whole = (col == np.round(col)) & (col.abs() < 2.0 ** 62)
        if not whole.all():
            i = int(np.flatnonzero(~whole.to_numpy())[0])
            raise SeriesError(f"{_where(source, i)}: timestamp {col.iloc[i]!r} is neither an integer step nor a date")
        return col.astype(np.int64)
    if pd.api.types.is_datetime64_any_dtype(col):
        parsed = col
    else:
        if pd.api.types.is_bool_dtype(col) or col.map(lambda v: isinstance(v, (bool, np.bool_))).any():
            raise SeriesError(f"{source}: the {name} column holds true/false values; timestamps are integer "
                              "steps or dates")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                parsed = pd.to_datetime(col, errors="coerce")
                if not pd.api.types.is_datetime64_any_dtype(parsed):      # mixed UTC offsets
                    parsed = pd.to_datetime(col, errors="coerce", utc=True)
            except (ValueError, TypeError, OverflowError) as e:
                raise SeriesError(f"{source}: the {name} column is neither integers nor dates ({e})") from None
        bad = parsed.isna().to_numpy()
        if bad.any():
            i, ok = int(np.flatnonzero(bad)[0]), np.flatnonzero(~bad)
            what = f"a date written like {col.iloc[int(ok[0])]!r}" if ok.size else "an integer step or a date"
            raise SeriesError(f"{_where(source, i)}: timestamp {col.iloc[i]!r} is not {what} ({int(bad.sum())} "
                              f"such value(s)); write every timestamp the same way")
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
    return parsed.astype("datetime64[ns]")


def validate(df: pd.DataFrame, *, sort: bool = False, fill: Fill | None = None,
             min_length: int | None = None) -> pd.DataFrame:
    """Check a long frame and return a clean copy (grouped by series in first-seen order, float `y`).

    `ds` holds integers or datetimes (time zones are converted to UTC); `y` numbers, or NaN where a
    value is missing. Raises SeriesError for: missing columns, no rows, empty timestamps, text in
    `y`, unsorted timestamps (unless `sort`), duplicates, irregular spacing, gaps and NaN (unless
    `fill`), series shorter than `min_length`.
    """
    missing = [c for c in (ID, DS, Y) if c not in df.columns]
    if missing:
        raise SeriesError(f"columns {missing} missing; long format needs unique_id, ds, y")
    if fill not in (None, "ffill", "interpolate", "zero"):
        raise SeriesError(f"unknown fill {fill!r}; use --fill ffill, interpolate or zero")
    if df.empty:
        raise SeriesError("the series frame has no rows")
    df = df[[ID, DS, Y]].reset_index(drop=True)
    df = pd.DataFrame({ID: df[ID].astype(str), DS: _parse_ds(df[DS], "frame"), Y: _parse_values(df[Y], "frame")})
    out = []
    for uid, g in df.groupby(ID, sort=False):
        if sort:
            g = g.sort_values(DS, kind="stable")
        out.append(_check_one(uid, g, fill, min_length))
    return pd.concat(out, ignore_index=True)


def calendar_defaults(df: pd.DataFrame) -> tuple[int, tuple[int, ...], str]:
    """(h, seasons, why) for a validated long frame, from its timestamps' step (defaults.CALENDAR_DEFAULTS):
    the step of most series; a sub-daily step (to a minute) the seasons of a day and a week (SUB_DAILY_WEEK).
    Integer timestamps, or a step with no default, give the command's own 48 and (24,). `why` says which step
    was read, e.g. "monthly timestamps". The first season is the one seasonal naive, Theta and MASE take."""
    h, m, why, sub_daily = _calendar_step(df)
    return h, ((m, 7 * m) if SUB_DAILY_WEEK and sub_daily else (m,)), why


def _calendar_step(df: pd.DataFrame) -> tuple[int, int, str, bool]:
    """(h, season_length, why, whether the step is hourly or finer): `calendar_defaults` with one season."""
    fallback = BACKTEST_COMMAND["h"], BACKTEST_COMMAND["season_length"]
    if pd.api.types.is_integer_dtype(df[DS]):
        return (*fallback, "integer timestamps have no calendar: M4 Hourly's", False)
    freqs = [pd.infer_freq(pd.DatetimeIndex(g)) for _, g in df.groupby(ID, sort=False)[DS] if len(g) >= 3]
    freqs = [f for f in freqs if f is not None]
    if not freqs:
        return (*fallback, "no regular step read from the timestamps: M4 Hourly's", False)
    freq = max(set(freqs), key=freqs.count)
    off = pd.tseries.frequencies.to_offset(freq)
    kinds = ((pd.offsets.YearBegin, pd.offsets.YearEnd, "yearly"), (pd.offsets.QuarterBegin, pd.offsets.QuarterEnd,
             "quarterly"), (pd.offsets.MonthBegin, pd.offsets.MonthEnd, "monthly"), (pd.offsets.Week, None, "weekly"),
             (pd.offsets.BusinessDay, None, "business daily"))
    kind = next((k for a, b, k in kinds if isinstance(off, a) or (b is not None and isinstance(off, b))), None)
    if kind is None and isinstance(off, pd.offsets.Tick):
        per_day = pd.Timedelta(days=1) / pd.Timedelta(off)
        if per_day == 1:
            kind = "daily"
        elif per_day == 24:
            return (*CALENDAR_DEFAULTS["hourly"], "hourly timestamps", True)
        elif per_day == int(per_day) and 1 < per_day <= 1440:
            n = int(per_day)
            hourly_or_coarser = pd.Timedelta(off) >= pd.Timedelta(hours=1)
            return (2 * n if hourly_or_coarser else min(n, 96), n, f"{freq} timestamps, {n} a day", True)
    if kind is None:
        return (*fallback, f"{freq} timestamps have no default: M4 Hourly's", False)
    h, m = CALENDAR_DEFAULTS[kind]
    k = getattr(off, "n", 1)
    if k > 1:                           # e.g. every 2 months: a season of 6, a horizon of 9
        h, m = max(1, round(h / k)), (m // k if m % k == 0 else 1)
    return h, m, f"{kind} timestamps" + (f" ({freq})" if k > 1 else ""), False


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
                          f"position {i}); sort the rows by (unique_id, ds), or pass --sort")
    grid = _regular_grid(uid, ds)                 # every timestamp the series should have
    if len(grid) > len(ds):
        missing = ~pd.Index(grid).isin(ds)
        if fill is None:
            first = pd.Index(grid)[missing][0]
            raise SeriesError(f"series {uid!r}: {int(missing.sum())} missing timestamp(s) (gaps), first "
                              f"{first}; fill them with --fill ffill, interpolate or zero")
        y_full = pd.Series(g[Y].to_numpy(dtype=float), index=pd.Index(ds)).reindex(grid).to_numpy()
        g = pd.DataFrame({DS: grid, Y: y_full})
    y = g[Y].to_numpy(dtype=float)
    nan = np.flatnonzero(~np.isfinite(y))
    if nan.size:
        if fill is None:
            raise SeriesError(f"series {uid!r}: {nan.size} missing/non-finite value(s), first at "
                              f"{g[DS].iloc[int(nan[0])]}; fill them with --fill ffill, interpolate or zero")
        y = _fill(y, fill, uid)
    if min_length is not None and len(y) < min_length:
        raise SeriesError(f"series {uid!r} has {len(y)} values but needs at least {min_length} "
                          "(look-back + horizon [+ windows]); use a smaller --h or --input-size, or drop it")
    return pd.DataFrame({ID: uid, DS: g[DS].to_numpy(), Y: y})


_CALENDAR = ("YS", "YE", "QS", "QE", "MS", "ME", "B")   # coarsest first: a gappy quarterly series is not monthly
_MAX_GRID = 10_000            # a grid may be this long, or 10x the series, before gaps count as too sparse


def _regular_grid(uid: str, ds: pd.Series) -> pd.Index | np.ndarray:
    """The regular grid from the first to the last timestamp; raises SeriesError when the
    timestamps fit no grid, or leave over 90 % of a long grid empty. Fixed steps (integers, hours,
    days, weeks) use the most common difference; calendar steps (years, quarters, months, business
    days) are tried by name, coarsest first: the coarsest grid that holds every timestamp."""
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
        n = (int(t[-1]) - int(t[0])) // step + 1
        if n > max(10 * len(t), _MAX_GRID):
            i = int(np.flatnonzero(d > step)[0])
            first = t[i] + step if is_int else pd.Timestamp(int(t[i]) + step)
            raise SeriesError(f"series {uid!r}: {n - len(t)} of {n} timestamps are missing (gaps), first {first}; "
                              "too sparse to fill: resample it to a coarser step, or drop it")
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
    s = s.ffill().bfill() if how == "ffill" else s.interpolate(limit_direction="both")
    if s.isna().any():
        raise SeriesError(f"series {uid!r} has no finite value at all; drop it")
    return s.to_numpy()
