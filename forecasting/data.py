"""Series in long format (`unique_id`, `ds`, `y`), loaders from CSV and validation.

Long format is the one statsforecast and neuralforecast use: one row per (series, timestamp).
`ds` may be datetimes or integers, at any regular step. Validation never silently repairs data:
unsorted rows, duplicates, irregular spacing, NaN and gaps raise `SeriesError` naming the series
and the timestamp, unless the caller asks for a sort or a fill explicitly (`sort=True`,
`fill="ffill"`; on the command line `--sort`, `--fill ffill`). Empty fields and the standard missing
markers (NA, n/a, null, #N/A, NaN, ...) are missing values, and the error for them names the marker and
its line; other text where a number or a timestamp belongs is never taken for a missing value: the readers
name its line in the file. The readers drop what can only be a series' span in a wide file (the empty
values before each series' first value and after its last), with a warning.
"""
from __future__ import annotations

import calendar
import csv
import re
import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from .defaults import BACKTEST_COMMAND, CALENDAR_DEFAULTS, CSV_SEP, DS, ID, SUB_DAILY_WEEK, Y
from .errors import SeriesError

Fill = Literal["ffill", "interpolate", "zero"]

# What to do about unsorted rows and missing values, in Python and on the command line: backtest() and forecast()
# check a frame but never repair it, so the cure is the readers' and validate()'s argument, or the command's flag.
_SORT_CURE = ("in Python validate(df, sort=True) (or sort=True to read_long_csv / read_wide_csv) before "
              "backtest() or forecast(); on the command line --sort")
_FILL_CURE = ("fill them: in Python validate(df, fill='ffill') (or 'interpolate', 'zero'; read_long_csv and "
              "read_wide_csv take fill= too) before backtest() or forecast(); on the command line --fill ffill, "
              "interpolate or zero")


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

    Header names are stripped of spaces. Series ids are text as written (0123 and 123 are two series).
    Timestamps of whole years (1960, 1961, ...) are read as yearly dates, integers written like dates (20210103
    YYYYMMDD, 202101 YYYYMM) as those dates (`_int_dates`); dates like 31.01.2020 day-first where only that
    reading is regular (an ambiguous column is a SeriesError). In a file not separated by commas, values written
    with a decimal comma (100,25) are read as numbers (a warning says so), and values that may hold a thousands
    point (1.125 beside 965) are a SeriesError (`_refuse_thousands_points`). The standard missing markers (NA,
    n/a, null, #N/A, NaN, ...) and empty fields are missing values; any other text in `y` is an error naming
    its line.

    Returns a DataFrame with columns `unique_id` (str), `ds` (datetime64[ns] or int64), `y` (float64).
    Raises SeriesError for a file that is missing, empty, not a CSV or without data rows, for
    absent columns, and, naming the line, for an empty id or timestamp and for text in `y`.
    """
    raw = _read_csv(path, sep, text=(id_col,))
    comma = _sep(sep) != ","
    values = list(raw.columns) if len(raw.columns) == 2 else [c for c in raw.columns if c == target_col]
    written = _as_written(path, sep, raw, values) if comma else {}
    missing = [c for c in (id_col, time_col, target_col) if c not in raw.columns]
    cols = list(raw.columns)
    if id_col == ID and len(cols) == 2 and ID not in cols and missing != [id_col]:    # date,co2: time and value
        t = time_col if time_col in cols else next(c for c in cols if c != target_col)
        v = next(c for c in cols if c != t)
        try:
            ds = _parse_ds(raw[t], path, calendar=True)
        except SeriesError:
            if raw[t].map(lambda v: isinstance(v, str) and re.fullmatch(_DAY_MONTH, v) is not None).all():
                raise                                    # dates, ambiguous or unreadable: say so
            ds = None                                    # not a time and a value column: the error below
        if ds is not None:
            try:
                df = pd.DataFrame({ID: v if v != Y else Path(path).stem, DS: ds, Y: _parse_values(raw[v], path, comma, written.get(v))})
            except SeriesError:
                if pd.to_numeric(raw[v], errors="coerce").notna().mean() >= 0.5:
                    raise                                # a value column with some text in it: name the text
                df = None
            if df is not None:
                return _with_form(_validate(df, sort, fill, min_length, _origin(raw[v]), path), raw[t])
    if missing == [id_col] and id_col == ID:     # one series: ds,y (an id column named otherwise must exist)
        if raw[time_col].duplicated().any():
            raise SeriesError(f"{path}: no {id_col!r} column and its timestamps repeat, so it holds several series; "
                              f"name their id column with --id-col (have {_names(raw.columns)})")
        raw = raw.assign(**{id_col: Path(path).stem})
    elif missing:
        raise SeriesError(f"{path}: columns {missing} not found (have {_names(raw.columns)}); " + (
            _m4_hint(raw.columns) or "name them with --id-col/--time-col/--target-col, or pass --wide for a wide file"))
    ids = raw[id_col]
    if ids.isna().any():
        raise SeriesError(f"{_where(path, int(np.flatnonzero(ids.isna())[0]))}: the {id_col} field is empty; "
                          "every row needs a series id")
    df = pd.DataFrame({ID: ids.astype(str), DS: _parse_ds(raw[time_col], path, calendar=True),
                       Y: _parse_values(raw[target_col], path, comma, written.get(target_col))})
    return _with_form(_validate(df, sort, fill, min_length, _origin(raw[target_col]), path), raw[time_col])


def read_wide_csv(path: str | Path, time_col: str | None = None, columns: list[str] | None = None, *,
                  sort: bool = False, fill: Fill | None = None, min_length: int | None = None,
                  sep: str = CSV_SEP) -> pd.DataFrame:
    """Read a wide CSV (a time column, then one column per series, like the ETT files) as long format.

    `time_col` defaults to the first column; `columns` selects series (default: all others). A series'
    leading and trailing empty values (series that start or end at other times than the file) are dropped,
    as M4 and statsforecast tooling does, and a warning says so; empty values between its first and last
    value are missing values, as in a long file. Series ids are the column names as written (0123 stays 0123),
    as `read_long_csv` keeps ids. Raises SeriesError as `read_long_csv` does.
    """
    raw = _read_csv(path, sep)
    comma = _sep(sep) != ","
    named = time_col is not None
    time_col = time_col or raw.columns[0]
    if time_col not in raw.columns:
        raise SeriesError(f"{path}: time column {time_col!r} not found (have {_names(raw.columns)}); "
                          "name it with --time-col")
    cols = columns or [c for c in raw.columns if c != time_col]
    written = _as_written(path, sep, raw, [c for c in cols if c in raw.columns]) if comma else {}
    if not cols:
        raise SeriesError(f"{path} has no series columns beside the time column {time_col!r}; a wide CSV has a "
                          "time column, then one column per series (or pass a long CSV without --wide)")
    absent = [c for c in cols if c not in raw.columns]
    if absent:
        raise SeriesError(f"{path}: series columns {_names(absent)} not found (have {_names(raw.columns)}); "
                          "check --columns")
    try:
        ds = _parse_ds(raw[time_col], path, calendar=True)
    except SeriesError as e:
        hint = _m4_hint(raw.columns) or ("" if named else f"a wide file's first column ({time_col!r}) is its "
                                          "time column, unless --time-col names another")
        raise SeriesError(f"{e}; {hint}" if hint else str(e)) from None
    order = np.argsort(ds.to_numpy(), kind="stable") if sort else np.arange(len(ds))
    parts, trimmed = [], []
    for c in cols:
        y = _parse_values(raw[c], path, comma, written.get(c)).to_numpy()[order]
        have = np.flatnonzero(~np.isnan(y))
        if not have.size:
            raise SeriesError(f"{path}: series column {c!r} holds no value at all; drop it, or leave it out of "
                              "--columns")
        keep = order[have[0]: have[-1] + 1]
        before, after = int(have[0]), len(order) - 1 - int(have[-1])
        if before or after:
            trimmed.append(f"{c!r} " + " and ".join(
                ([f"{before} before its first value ({ds.iloc[keep[0]]})"]
                 if before else []) + ([f"{after} after its last"] if after else [])))
        parts.append((pd.DataFrame({ID: str(c), DS: ds.to_numpy()[keep], Y: y[have[0]: have[-1] + 1]}),
                      _origin(raw[c]).iloc[keep]))
    if trimmed:
        more = f" and {len(trimmed) - 5} more series" if len(trimmed) > 5 else ""
        warnings.warn(f"{path}: series that start or end at other times than the file: their empty values before "
                      f"their first value and after their last dropped: {'; '.join(trimmed[:5])}{more}", stacklevel=2)
    long = pd.concat([p for p, _ in parts], ignore_index=True)
    origin = pd.concat([o for _, o in parts], ignore_index=True)
    return _with_form(_validate(long, sort, fill, min_length, origin, path), raw[time_col])


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
# the markers pandas reads as missing by default (and empty fields): missing values, named where they stop a run
NA_MARKERS = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                        "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})
_SHOWN_GAPS = 10              # a message lists this many missing timestamps
_SHOWN_COLUMNS = 8            # a message lists this many of a file's columns, then their count


def _sep(sep: str) -> str:
    """The separator: the two characters backslash-t (as a shell passes --sep '\\t') are a tab."""
    return "\t" if sep == "\\t" else sep


def _names(cols) -> str:
    """A list of column names for a message: the first few, then how many there are in all."""
    cols = [str(c) for c in cols]
    if len(cols) <= _SHOWN_COLUMNS:
        return repr(cols)
    head = ", ".join(repr(c) for c in cols[:_SHOWN_COLUMNS - 2])
    return f"[{head}, ..., {cols[-1]!r}] ({len(cols)} columns)"


def _m4_hint(cols) -> str:
    """For a file laid out as M4's training files (columns V1, V2, ...: an id, then values): how to read it."""
    cols = [str(c) for c in cols]
    if len(cols) >= 3 and cols == [f"V{i}" for i in range(1, len(cols) + 1)]:
        return ("it looks like an M4 file (one row per series: V1 the id, then its values), which the "
                "command does not read: in Python, frozenvit.forecasting.read_m4(train_csv, test_csv) reads "
                "it as long format (write that to a CSV to pass it here)")
    return ""


def _plain(v) -> object:
    """A value as a message shows it: numpy scalars as the Python number or text they hold."""
    return v.item() if isinstance(v, np.generic) else v


def _origin(col: pd.Series) -> pd.DataFrame:
    """Each row's data row number in the file and its raw field: where a missing value came from."""
    return pd.DataFrame({"row": np.arange(len(col)), "raw": col.to_numpy(dtype=object)})


def _header_line(path: Path) -> str:
    """The file's first line, as text ('' where it cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().rstrip("\r\n")
    except OSError:
        return ""


def _refuse_other_separator(path: Path, sep: str, header: str) -> None:
    """SeriesError naming --sep (sep=) where the header is one field holding another separator: a semicolon
    file, with or without decimal commas (1,5), read with commas."""
    other = [c for c in SEPARATORS if c != sep and c in header] if sep not in header else []
    if other:
        shown = "'\\t'" if other[0] == "\t" else repr(other[0])
        raise SeriesError(f"{path}: the file looks {SEPARATORS[other[0]]}-separated; its header is one field "
                          f"{header!r}: pass --sep {shown} (sep={other[0]!r}), or save it with commas")


def _read_csv(path: str | Path, sep: str = CSV_SEP, text: tuple[str, ...] = ()) -> pd.DataFrame:
    """The CSV's rows as pandas reads them, fields separated by `sep`; every way of not being a CSV with data is
    a SeriesError (a file whose header holds one field with another separator in it: named as such).
    Header names are stripped of spaces; the columns named in `text` (the id column) are read as text as written
    (0123, not 123); only empty fields are NaN (missing markers stay text: `_parse_values` reads them as missing
    and can name them)."""
    path, sep = Path(path), _sep(sep)
    if not path.exists():
        raise SeriesError(f"{path} not found; pass the path of a CSV file with --csv")
    if path.is_dir():
        raise SeriesError(f"{path} is a folder; pass the path of a CSV file with --csv")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            dtype = None
            if text:
                header = pd.read_csv(path, index_col=False, sep=sep, nrows=0, skipinitialspace=True).columns
                dtype = {c: str for c in header if str(c).strip() in text}
            raw = pd.read_csv(path, index_col=False, sep=sep,   # never the first column as an index (a shift)
                              keep_default_na=False, na_values=[""], skipinitialspace=True, dtype=dtype)
    except pd.errors.ParserWarning:
        _refuse_other_separator(path, sep, _header_line(path))
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
    if len(raw.columns) == 1:
        _refuse_other_separator(path, sep, str(raw.columns[0]))
    stripped = [c.strip() if isinstance(c, str) else c for c in raw.columns]
    if len(set(stripped)) < len(stripped):
        twice = next(c for c in stripped if stripped.count(c) > 1)
        raise SeriesError(f"{path}: the header names column {twice!r} twice ({_names(raw.columns)}); "
                          "give every column its own name")
    raw.columns = stripped
    if raw.empty:
        raise SeriesError(f"{path} has no data rows below its header line {_names(raw.columns)}")
    return raw


def _as_written(path: str | Path, sep: str, raw: pd.DataFrame, cols: list) -> dict[str, pd.Series]:
    """The text of those of `cols` that pandas read as decimal numbers, as the file writes it (1.125, not 1.125 the
    number): where a point may be a thousands separator (`_refuse_thousands_points`)."""
    floats = {str(c) for c in cols if pd.api.types.is_float_dtype(raw[c])}
    if not floats:
        return {}
    text = pd.read_csv(Path(path), index_col=False, sep=_sep(sep), keep_default_na=False, na_values=[""],
                       skipinitialspace=True, dtype=str, usecols=lambda c: str(c).strip() in floats)
    return {str(c).strip(): text[c].rename(str(c).strip()) for c in text.columns}


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


_DECIMAL_COMMA = r"[+-]?\d*,\d+(?:[eE][+-]?\d+)?"       # 100,25 -,5 (a number written with a decimal comma)
_THOUSANDS_POINT = r"[+-]?[1-9]\d{0,2}\.\d{3}"          # 1.125: 1125 with a thousands point, or 1.125
_WHOLE = r"[+-]?\d+"
_DAY_MONTH = r"\s*\d{1,2}([./-])\d{1,2}\1\d{2,4}(?:[\sT].*)?"   # 31.01.2020, 01/02/20 10:00: day or month first


def _parse_values(col: pd.Series, source: str | Path, comma: bool = False, text: pd.Series | None = None) -> pd.Series:
    """A value column as float64. Empty fields and the standard missing markers (NA_MARKERS: NA, n/a, null, NaN,
    #N/A, ...) are NaN (missing, for --fill); other text is a SeriesError. With `comma` (a file not separated by
    commas), a column whose numbers are written with a decimal comma (100,25) is read so, with a warning, and one
    whose points may be thousands separators is a SeriesError (`_refuse_thousands_points`, on the column's `text`
    as the file writes it where pandas has read it as numbers)."""
    if comma:
        _refuse_thousands_points(col if text is None else text, source)
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return col.astype(float)
    is_bool = col.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
    text = col.map(lambda v: v.strip() if isinstance(v, str) else v)
    marker = text.map(lambda v: isinstance(v, str) and v in NA_MARKERS).to_numpy(dtype=bool)
    vals = text.where(~is_bool & ~marker)
    num = pd.to_numeric(vals, errors="coerce").astype(float)
    bad = col.notna().to_numpy() & ~marker & num.isna().to_numpy()
    if bad.any() and comma:
        strs = vals[vals.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)]
        decimal = strs.str.fullmatch(_DECIMAL_COMMA)
        if decimal.any() and (decimal | ~strs.str.contains(r"[.,]")).all():
            num = pd.to_numeric(vals.where(~is_bool & ~marker).map(
                lambda v: v.replace(",", ".") if isinstance(v, str) else v), errors="coerce").astype(float)
            bad = col.notna().to_numpy() & ~marker & num.isna().to_numpy()
            if not bad.any():
                warnings.warn(f"{source}: {col.name} values such as {strs[decimal].iloc[0]!r} read with a decimal "
                              f"comma ({strs[decimal].iloc[0].replace(',', '.')})", stacklevel=3)
        elif decimal.any():
            i = int(np.flatnonzero((~decimal & strs.str.contains(r"[.,]")).to_numpy())[0])
            raise SeriesError(f"{source}: the {col.name} column mixes numbers written with a decimal comma "
                              f"({strs[decimal].iloc[0]!r}) and with a point or separators ({strs.iloc[i]!r}); "
                              "write them all one way (a point, no thousands separators)")
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SeriesError(f"{_where(source, i)}: {col.name} value {_plain(col.iloc[i])!r} is not a number "
                          f"({int(bad.sum())} such value(s)); correct it, or leave the field empty to mark it "
                          "missing for --fill")
    return num


def _refuse_thousands_points(text: pd.Series, source: str | Path) -> None:
    """SeriesError, naming the line, for a value column of a file not separated by commas (where decimal commas and
    thousands points are the custom) that may hold thousands points: every value with a point has one to three
    digits (not a leading 0) before it and exactly three after (1.125, -12.500), and other values are whole numbers
    (965): 1.125 is then 1125 or 1.125. A value with a point written otherwise (12.5, 0.125, 1.5, 965.0) shows the
    point is a decimal point, and a column with a comma in it is left to the decimal comma rules."""
    strs = text.map(lambda v: v.strip() if isinstance(v, str) else None)
    strs = strs.where(strs.map(lambda v: v is not None and v not in NA_MARKERS)).dropna().astype(str)
    if strs.empty or strs.str.contains(",", regex=False).any():
        return
    dotted = strs.str.contains(".", regex=False)
    whole = strs.str.fullmatch(_WHOLE)
    if not dotted.any() or not whole.any() or not strs[dotted].str.fullmatch(_THOUSANDS_POINT).all():
        return
    v, w = strs[dotted].iloc[0], strs[whole].iloc[0]
    row = int(text.index.get_loc(strs[dotted].index[0]))
    raise SeriesError(f"{_where(source, row)}: {text.name} value {v!r} beside whole numbers such as {w!r} may be "
                      f"{v.replace('.', '')} written with a thousands point or {v} with a decimal point; write the "
                      f"numbers without thousands separators ({v.replace('.', '')}), or, where {v} is meant, the "
                      f"whole numbers with their decimals ({w}.0) or all with a decimal comma ({v.replace('.', ',')})")


def _to_datetime(col: pd.Series, dayfirst: bool = False) -> pd.Series:
    """pandas' reading of a column of dates (mixed UTC offsets: as UTC, or as the local wall times written where
    those are daily or coarser: `_local_or_utc`); unreadable ones NaT."""
    parsed = pd.to_datetime(col, errors="coerce", dayfirst=dayfirst)
    if not pd.api.types.is_datetime64_any_dtype(parsed):      # mixed UTC offsets (a DST change)
        wall = pd.to_datetime(parsed.map(lambda t: t.tz_localize(None) if isinstance(t, pd.Timestamp) else pd.NaT),
                              errors="coerce")
        parsed = _local_or_utc(pd.to_datetime(col, errors="coerce", utc=True, dayfirst=dayfirst), wall)
    return parsed


def _one_time_of_day(wall: pd.Series) -> bool:
    """Whether the (naive) timestamps all fall at one time of day: a daily or coarser step in their own clock."""
    w = pd.DatetimeIndex(wall.dropna())
    return bool(len(w)) and bool(((w - w.normalize()) == (w[0] - w[0].normalize())).all())


def _local_or_utc(aware: pd.Series, wall: pd.Series) -> pd.Series:
    """Time-zone-aware timestamps as naive ones: their local wall times `wall` (as written, offsets dropped) where
    those all fall at one time of day (a daily or coarser step, judged in local time: a DST change makes no 23- or
    25-hour step), else UTC (sub-daily steps, whose local clock repeats or skips an hour)."""
    if _one_time_of_day(wall):
        return wall.astype("datetime64[ns]")
    return aware.dt.tz_convert("UTC").dt.tz_localize(None)


def _regular_share(ts: pd.Series) -> float:
    """The share of a regular grid (a fixed step, or a calendar one) the distinct timestamps fill; 0 for none."""
    idx = pd.DatetimeIndex(ts.dropna().unique()).sort_values()
    if idx.tz is not None:
        idx = idx.tz_convert("UTC").tz_localize(None)
    if len(idx) < 3 or pd.infer_freq(idx) is not None:
        return 1.0
    t = idx.asi8
    d = np.diff(t)
    vals, counts = np.unique(d, return_counts=True)
    step = int(vals[np.argmax(counts)])
    if not (d % step).any():
        return len(t) / ((int(t[-1]) - int(t[0])) // step + 1)
    grid = _calendar_grid(idx)
    return len(idx) / len(grid) if grid is not None else 0.0


def _day_or_month_first(col: pd.Series, source: str | Path) -> pd.Series:
    """Dates like 01.02.2020 (day or month first): the reading whose timestamps are regular; SeriesError when
    both are (or neither is) and they differ."""
    us, eu = _to_datetime(col), _to_datetime(col, dayfirst=True)
    if eu.isna().sum() != us.isna().sum():
        return eu if eu.isna().sum() < us.isna().sum() else us      # 13.01.2020 is day-first, 01/13/2020 not
    if us.isna().any() or us.equals(eu):
        return us
    r_us, r_eu = _regular_share(us), _regular_share(eu)
    if r_eu >= 0.5 > r_us:
        return eu
    if r_us >= 0.5 > r_eu:
        return us
    i = int(np.flatnonzero((us != eu).to_numpy())[0])
    raise SeriesError(f"{_where(source, i)}: timestamp {col.iloc[i]!r} reads as {eu.iloc[i].date()} day-first and "
                      f"{us.iloc[i].date()} month-first, and the {col.name} column is "
                      f"{'regular' if r_us >= 0.5 else 'irregular'} either way; write the dates as YYYY-MM-DD")


_MONTH_YEAR = r"^\s*([A-Za-z]{3,9})[-/ ](\d{2})\s*$"     # Excel's mmm-yy: Jan-19, Sep-21
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name} | \
    {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name} | {"sept": 9}
# what a timestamp may look like, for the error about one that is none of them
_TIME_FORMS = ("dates as 2019-01-31 (YYYY-MM-DD, with a time if any: 2019-01-31 13:00), months as 2019-01, Jan 2019 "
               "or Jan-19, quarters as 2019Q1, years as 2019, or integer steps 1, 2, 3")


def _month_years(col: pd.Series) -> pd.Series | None:
    """Month names with a two-digit year (Excel's mmm-yy: Jan-19, Feb-19, ...; 'September-21') as the months' first
    days (19 is 2019, as %y reads it: 00-68 are 20xx, 69-99 19xx); None for a column that is not all such. A date
    has a year, so Jan-19 is never the 19th of January."""
    parts = col.astype(str).str.extract(_MONTH_YEAR)
    if not len(parts) or parts.isna().any().any():
        return None
    month = parts[0].str.lower().map(_MONTHS)
    if month.isna().any():
        return None
    stamps = pd.to_datetime(parts[1] + "-" + month.astype(int).astype(str), format="%y-%m", errors="coerce")
    return None if stamps.isna().any() else stamps.rename(col.name)


_CLOCK_WITH_OFFSET = re.compile(r".*[T ]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*(Z|[+-]\d{2}:?\d{2})")
_OFFSET_AT_END = re.compile(r"\s*(Z|[+-]\d{2}:?\d{2})\s*$")
_ZERO_OFFSET = re.compile(r".*(Z|[+-]00:?00)\s*")
_QUARTER = re.compile(r"\d{4}\s*-?\s*Q[1-4]", re.IGNORECASE)


def time_form(col: pd.Series) -> dict:
    """How a CSV's time column writes its timestamps, where forecasts should write theirs alike: {"period": "Y"}
    for whole years, {"int_date": "%Y%m%d"} or {"int_date": "%Y%m"} for integers written like dates (`_int_dates`),
    {"period": "Q"} for quarters written like 2014Q4, {"utc": True} for times with UTC offsets
    read as UTC (sub-daily ones, or all at offset zero); {} otherwise (daily or coarser times with local offsets are
    read in local wall time: `_local_or_utc`, and written so, without an offset). The readers keep it in the frame's `attrs["time_form"]`."""
    if _years(col) is not None:
        return {"period": "Y"}
    dates = _int_dates(col)
    if dates is not None:
        return {"int_date": dates[1]}
    if pd.api.types.is_numeric_dtype(col):
        return {}
    text = col.dropna().astype(str).str.strip()
    if not len(text):
        return {}
    if text.str.fullmatch(_QUARTER).all():
        return {"period": "Q"}
    if _month_years(text) is not None:
        return {"strftime": "%b-%y"}
    if text.str.fullmatch(_CLOCK_WITH_OFFSET).any():
        wall = pd.to_datetime(text.str.replace(_OFFSET_AT_END, "", regex=True), errors="coerce", format="mixed")
        if _one_time_of_day(wall) and not text.str.fullmatch(_ZERO_OFFSET).all():
            return {}           # daily or coarser: read in local wall time (`_local_or_utc`), written so, no offset
        return {"utc": True}
    return {}


def _with_form(df: pd.DataFrame, col: pd.Series) -> pd.DataFrame:
    df.attrs["time_form"] = time_form(col)
    return df


def written_times(ds: pd.Series, form: dict | None) -> pd.Series:
    """Timestamps as a file read with `time_form` `form` wrote them: years as 2021, quarters as 2021Q1, integer
    dates as 20210103 or 202101, times read from UTC offsets with their +00:00 (so none reads as local time);
    anything else unchanged."""
    if not form or not pd.api.types.is_datetime64_any_dtype(ds):
        return ds
    if form.get("period") == "Y":
        return ds.dt.year
    if form.get("period") == "Q":
        return ds.dt.to_period("Q").astype(str)
    if form.get("int_date"):
        return pd.to_numeric(ds.dt.strftime(form["int_date"])).astype("Int64")
    if form.get("strftime"):
        return ds.dt.strftime(form["strftime"])
    if form.get("utc") and ds.dt.tz is None:
        return ds.dt.tz_localize("UTC")
    return ds


def _years(col: pd.Series) -> pd.Series | None:
    """Whole years (1960, 1961, ...: all in 1000..2999, the commonest step between distinct values 1) as yearly
    timestamps (January 1st); None for a column that is not such."""
    if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
        return None
    v = col.to_numpy()
    if not (np.all(v == np.round(v)) and v.min() >= 1000 and v.max() <= 2999):
        return None
    u = np.unique(v.astype(np.int64))
    if len(u) < 2:
        return None
    steps, counts = np.unique(np.diff(u), return_counts=True)
    if steps[np.argmax(counts)] != 1:
        return None
    return pd.Series((v.astype(np.int64) - 1970).astype("datetime64[Y]").astype("datetime64[ns]"),
                     index=col.index, name=col.name)


_INT_DATES = ((8, "%Y%m%d"), (6, "%Y%m"))     # integers written like dates: 20210103, 202101


def _int_dates(col: pd.Series) -> tuple[pd.Series, str] | None:
    """Integers written like dates, as those dates and their format: YYYYMMDD (20210103: every value eight digits,
    a valid date of a year 1000..2999) or YYYYMM (202101: six digits, month 1-12, read as the month's first day);
    None for a column that is not such (integer steps: 1, 2, ...; 202153 is no month)."""
    if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_integer_dtype(col) or col.nunique() < 2:
        return None
    for digits, fmt in _INT_DATES:
        scale = 10 ** (digits - 4)
        if col.min() >= 1000 * scale and col.max() < 3000 * scale:
            parsed = pd.to_datetime(col.astype(str), format=fmt, errors="coerce")
            if parsed.notna().all():
                return parsed.astype("datetime64[ns]"), fmt
    return None


def _warn_year_weeks(col: pd.Series, source: str | Path) -> None:
    """A warning for integers that look like ISO year-weeks (YYYYWW: 202301 ... 202352, some week past 12, none past
    53): read as integer steps, they run on to weeks that do not exist (202353, 202360) and jump at a new year."""
    if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_integer_dtype(col):
        return
    week = col % 100
    if col.min() >= 100_000 and col.max() < 300_000 and week.min() >= 1 and week.max() <= 53 and week.max() > 12:
        warnings.warn(f"{source}: the {col.name} values look like ISO year-weeks (YYYYWW: {_plain(col.iloc[0])}, ...), "
                      f"which are read as integer steps: forecasts run on past a year's last week to weeks that do not "
                      f"exist ({_plain(col.max()) + 1}, ...), and a new year is an irregular step; write each week as "
                      "its date (YYYY-MM-DD, e.g. its Monday) to forecast by the calendar", stacklevel=3)


def _parse_ds(col: pd.Series, source: str | Path, calendar: bool = False) -> pd.Series:
    """A time column as int64 steps or datetime64[ns] (time zones converted to UTC, or for daily or coarser
    timestamps kept in local wall time: `_local_or_utc`); SeriesError otherwise.
    Dates written day or month first (01.02.2020) are read the way that makes them regular (`_day_or_month_first`);
    with `calendar` (a CSV's column), whole years 1000..2999 a step apart are yearly dates (`_years`), integers
    written like dates (20210103, 202101) those dates (`_int_dates`), and integers that look like year-weeks
    (202301) integer steps with a warning (`_warn_year_weeks`)."""
    name = col.name
    marker = col.map(lambda v: isinstance(v, str) and v.strip() in NA_MARKERS).to_numpy(dtype=bool)
    empty = np.flatnonzero(col.isna().to_numpy() | marker)
    if empty.size:
        i = int(empty[0])
        raise SeriesError(f"{_where(source, i)}: the {name} field is "
                          f"{f'{col.iloc[i]!r} (missing)' if marker[i] else 'empty'}; every row needs a timestamp")
    years = _years(col) if calendar else None
    if years is not None:
        return years
    dates = _int_dates(col) if calendar else None
    if dates is not None:
        return dates[0]
    if calendar:
        _warn_year_weeks(col, source)
    if pd.api.types.is_integer_dtype(col):
        return col.astype(np.int64)
    if pd.api.types.is_float_dtype(col):
        whole = (col == np.round(col)) & (col.abs() < 2.0 ** 62)
        if not whole.all():
            i = int(np.flatnonzero(~whole.to_numpy())[0])
            raise SeriesError(f"{_where(source, i)}: timestamp {_plain(col.iloc[i])!r} is neither an integer step "
                              "nor a date")
        return col.astype(np.int64)
    if pd.api.types.is_datetime64_any_dtype(col):
        parsed = col
    else:
        if pd.api.types.is_bool_dtype(col) or col.map(lambda v: isinstance(v, (bool, np.bool_))).any():
            raise SeriesError(f"{source}: the {name} column holds true/false values; timestamps are integer "
                              "steps or dates")
        months = _month_years(col) if col.map(lambda v: isinstance(v, str)).all() else None
        if months is not None:
            return months.astype("datetime64[ns]")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if col.map(lambda v: isinstance(v, str) and re.fullmatch(_DAY_MONTH, v) is not None).all():
                    parsed = _day_or_month_first(col, source)
                else:
                    parsed = _to_datetime(col)
            except (ValueError, TypeError, OverflowError) as e:
                raise SeriesError(f"{source}: the {name} column is neither integers nor dates ({e})") from None
        bad = parsed.isna().to_numpy()
        if bad.any():
            i, ok = int(np.flatnonzero(bad)[0]), np.flatnonzero(~bad)
            if ok.size:
                raise SeriesError(f"{_where(source, i)}: timestamp {_plain(col.iloc[i])!r} is not a date written like "
                                  f"{col.iloc[int(ok[0])]!r} ({int(bad.sum())} such value(s)); write every timestamp "
                                  "the same way")
            raise SeriesError(f"{_where(source, i)}: timestamp {_plain(col.iloc[i])!r} is not an integer step or a "
                              f"date that can be read ({int(bad.sum())} such value(s)); write the {name} column as "
                              f"{_TIME_FORMS} (in a spreadsheet: give the column the date format yyyy-mm-dd before "
                              "saving the CSV)")
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = _local_or_utc(parsed, parsed.dt.tz_localize(None))
    return parsed.astype("datetime64[ns]")


def _refuse_colliding_ids(ids: pd.Series) -> None:
    """SeriesError where two different ids become the same text (1 and "1"), which would merge two series."""
    if ids.dtype != object:
        return                          # one type: distinct values stay distinct as text
    uniq = pd.unique(ids)
    text = pd.Series(uniq).astype(str)
    if text.nunique() == len(uniq):
        return
    dup = text[text.duplicated(keep=False)]
    first = dup.iloc[0]
    same = [uniq[i] for i in dup.index if text[i] == first]
    raise SeriesError(f"unique_id values {' and '.join(repr(_plain(v)) for v in same)} are different ids (of types "
                      f"{', '.join(type(_plain(v)).__name__ for v in same)}) but the same text {first!r}, so their rows "
                      "would be read as one series; make the ids one type, e.g. df['unique_id'] = "
                      "df['unique_id'].astype(str) if they are one series, or rename one of them")


def validate(df: pd.DataFrame, *, sort: bool = False, fill: Fill | None = None,
             min_length: int | None = None) -> pd.DataFrame:
    """Check a long frame and return a clean copy (grouped by series in first-seen order, float `y`).

    `ds` holds integers or datetimes (time zones are converted to UTC, or, for timestamps all at one time of day
    (daily or coarser), dropped to keep the local wall time, so a DST change is no 23- or 25-hour step); `y` numbers, or NaN where a
    value is missing. Raises SeriesError for: missing columns, no rows, empty timestamps, text in
    `y`, unsorted timestamps (unless `sort`), duplicates, irregular spacing, gaps and NaN (unless
    `fill`), series shorter than `min_length`. With `fill`, the result's `attrs["filled"]` says what was filled:
    {"how", "values" (filled in all), "missing_timestamps" (of those, rows that were absent), "series" (id -> values
    filled, for the series with any)}; the readers' results carry it too.
    """
    return _validate(df, sort, fill, min_length)


def _validate(df: pd.DataFrame, sort: bool, fill: Fill | None, min_length: int | None,
              origin: pd.DataFrame | None = None, source: str | Path | None = None) -> pd.DataFrame:
    """`validate`; `origin` (a reader's: each row's data row in the file `source` and its raw value field)
    lets the error for a missing value name its line and marker."""
    missing = [c for c in (ID, DS, Y) if c not in df.columns]
    if missing:
        raise SeriesError(f"columns {missing} missing; long format needs unique_id, ds, y{_wide_hint(df)}")
    if fill not in (None, "ffill", "interpolate", "zero"):
        raise SeriesError(f"unknown fill {fill!r}; use fill='ffill', 'interpolate' or 'zero' (on the command line "
                          "--fill ffill, interpolate or zero)")
    if df.empty:
        raise SeriesError("the series frame has no rows")
    df = df[[ID, DS, Y]].reset_index(drop=True)
    _refuse_colliding_ids(df[ID])
    df = pd.DataFrame({ID: df[ID].astype(str), DS: _parse_ds(df[DS], "frame"), Y: _parse_values(df[Y], "frame")})
    if origin is not None:
        df["_row"], df["_raw"] = origin["row"].to_numpy(), origin["raw"].to_numpy()
    out, filled, gaps = [], {}, 0
    for uid, g in df.groupby(ID, sort=False):
        if sort:
            g = g.sort_values(DS, kind="stable")
        one, n_filled, n_gaps = _check_one(uid, g, fill, min_length, source)
        out.append(one)
        gaps += n_gaps
        if n_filled:
            filled[str(uid)] = n_filled
    result = pd.concat(out, ignore_index=True)
    if fill is not None:        # what the fill did: the readers' callers report it (the command prints it)
        result.attrs["filled"] = {"how": fill, "values": int(sum(filled.values())), "missing_timestamps": gaps,
                                  "series": filled}
    return result


def _wide_hint(df: pd.DataFrame) -> str:
    """For a frame that lacks long format's columns: how to make long format of it, were it wide (one column per
    series), with `wide_to_long`, which takes the time as a column (reset_index() makes one of a time index)."""
    if not len(df.columns):
        return ""
    if isinstance(df.index, pd.DatetimeIndex) or not isinstance(df.index, pd.RangeIndex):
        time = str(df.index.name) if df.index.name is not None else "index"
        return (f". This frame looks wide (its time in the index, one column per series): make it long with "
                f"wide_to_long(df.reset_index(), time_col={time!r}, columns=list(df.columns)); wide_to_long takes "
                "the time as a column, and reset_index() makes one of the index")
    return (". A wide frame (a time column and one column per series) becomes long with wide_to_long(df, "
            "time_col='<the time column>', columns=[<the series' columns>])")


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
    freqs = [_infer_freq(pd.DatetimeIndex(g)) for _, g in df.groupby(ID, sort=False)[DS] if len(g) >= 3]
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


def _infer_freq(idx: pd.DatetimeIndex) -> str | None:
    """pandas' inferred frequency, else one day of every k-th month (`_month_step`) as 'MS', 'QS', 'YS', ..."""
    month = _month_step(idx) if len(idx) >= 3 else None
    if month is not None and _month_step_rules(idx):
        return _month_freq(month[0])
    return pd.infer_freq(idx)


def _month_step_rules(idx: pd.DatetimeIndex) -> bool:
    """Whether a `_month_step` of `idx` decides its step rather than pandas' inference: where pandas infers none, or
    only a fixed number of days (365D for 15 February of three years, one of them not a leap year)."""
    freq = pd.infer_freq(idx) if len(idx) >= 3 else None
    return freq is None or isinstance(pd.tseries.frequencies.to_offset(freq), pd.offsets.Tick)


def _check_one(uid: str, g: pd.DataFrame, fill: Fill | None, min_length: int | None,
               source: str | Path | None = None) -> tuple[pd.DataFrame, int, int]:
    """One series checked (and filled, with `fill`): its frame, the values filled, the missing timestamps among them."""
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
                          f"position {i}); sort the rows by (unique_id, ds): {_SORT_CURE}")
    grid = pd.Index(_regular_grid(uid, ds))       # every timestamp the series should have
    off_grid = ~pd.Index(ds).isin(grid)
    if off_grid.any():                            # never: a grid that would drop a real value is a bug
        raise SeriesError(f"series {uid!r}: timestamp {ds[off_grid].iloc[0]} is off the series' regular grid; "
                          "resample to a regular frequency first")
    missing = ~grid.isin(ds)
    n_gaps = int(missing.sum())
    if missing.any():
        n_missing, first = int(missing.sum()), grid[missing][0]
        if n_missing > len(ds):                   # filling would invent most of the series
            raise SeriesError(f"series {uid!r}: {n_missing} of the {len(grid)} timestamps of its regular grid are "
                              f"missing, first {first}: more than it has, so filling would invent most of it; the "
                              "timestamps are probably misread (day-first dates read month-first, another column "
                              "taken for the time?): check them, or resample to a coarser step")
        if fill is None:
            days = isinstance(grid, pd.DatetimeIndex) and len(grid) >= 3 and pd.infer_freq(grid) == "B"
            shown = [str(t.date()) if days or (isinstance(t, pd.Timestamp) and t == t.normalize()) else str(t)
                     for t in grid[missing][:_SHOWN_GAPS]]
            listed = (f" ({', '.join(shown)}{', ...' if n_missing > len(shown) else ''})" if n_missing > 1 else "")
            raise SeriesError(f"series {uid!r}: {n_missing} missing timestamp(s) (gaps)"
                              f"{' of its business days (weekends are no gaps)' if days else ''}, first {first}{listed}; "
                              f"{_FILL_CURE}")
        y_full = pd.Series(g[Y].to_numpy(dtype=float), index=pd.Index(ds)).reindex(grid).to_numpy()
        g = pd.DataFrame({DS: grid, Y: y_full})
    y = g[Y].to_numpy(dtype=float)
    nan = np.flatnonzero(~np.isfinite(y))
    if nan.size:
        if fill is None:
            raise SeriesError(_missing_message(uid, g, nan, source))
        y = _fill(y, fill, uid)
    if min_length is not None and len(y) < min_length:
        raise SeriesError(f"series {uid!r} has {len(y)} values but needs at least {min_length} "
                          "(look-back + horizon [+ windows]); use a smaller --h or --input-size, or drop it")
    return pd.DataFrame({ID: uid, DS: g[DS].to_numpy(), Y: y}), int(nan.size), n_gaps


def _missing_message(uid: str, g: pd.DataFrame, nan: np.ndarray, source: str | Path | None) -> str:
    """The error for a series' missing values (positions `nan`): where the first is (its line and marker when
    the frame came from a file), and what to do: --fill for those between values, never for those before its
    first value or after its last (filling them would invent history or a last value: drop those rows)."""
    n, ts = len(g), g[DS].reset_index(drop=True)

    def origin(i: int) -> str:
        if "_row" not in g.columns or source is None:
            return ""
        raw = _plain(g["_raw"].iloc[i])
        empty = raw is None or (isinstance(raw, float) and np.isnan(raw))
        what = "an empty field" if empty else f"{str(raw).strip()!r}, read as a missing value"
        return f" ({_where(source, int(g['_row'].iloc[i]))}: {what})"

    lead = int(np.argmax(np.isfinite(g[Y].to_numpy(dtype=float)))) if len(nan) < n else n
    trail = n - 1 - int(np.flatnonzero(np.isfinite(g[Y].to_numpy(dtype=float)))[-1]) if len(nan) < n else 0
    if lead == n:
        return f"series {uid!r} has no value at all, {n} missing{origin(0)}; drop it"
    if lead or trail:
        k, i, end = (lead, 0, "first") if lead else (trail, n - trail, "last")
        return (f"series {uid!r}: its {end} {k} value(s) are missing, from {ts.iloc[i]}{origin(i)}; drop those rows "
                f"(the series {'starts later' if lead else 'ends earlier'}): --fill would invent "
                f"{'its history' if lead else 'its last values'}")
    i = int(nan[0])
    return (f"series {uid!r}: {nan.size} missing/non-finite value(s), first at {ts.iloc[i]}{origin(i)}; "
            f"{_FILL_CURE}")


_CALENDAR = ("YS", "YE", "QS", "QE", "MS", "ME", "B")   # coarsest first: a gappy quarterly series is not monthly
_DAY_NS = pd.Timedelta(days=1).value
_MAX_GRID = 10_000            # a grid may be this long, or 10x the series, before gaps count as too sparse


def _month_step(idx: pd.DatetimeIndex) -> tuple[int, int] | None:
    """(k, day) where the (sorted, naive) timestamps fall on one day of every k-th month (2018-01-15, 2018-02-15,
    ...: day 15), at one time of day; None otherwise. The day is the latest day of the month they fall on; in a
    month too short for it they fall on its last day (the 30th: 28 or 29 February), as pandas' DateOffset(months=k)
    counts, so month ends (day 31) are such a step too. k is the coarsest step holding every timestamp (gaps
    allowed): 1 monthly, 3 quarterly, 12 yearly."""
    if len(idx) < 2 or idx.tz is not None or idx.hasnans or not _one_time_of_day(pd.Series(idx)):
        return None
    day = int(idx.day.max())
    if not (idx.day == np.minimum(day, idx.days_in_month)).all():
        return None
    months = np.diff(np.asarray(idx.year * 12 + idx.month, dtype=np.int64))
    if (months <= 0).any():
        return None
    return int(np.gcd.reduce(months)), day


def _month_grid(start: pd.Timestamp, n: int, k: int, day: int) -> pd.DatetimeIndex:
    """n timestamps every k months from `start`, on `day` of the month (a shorter month's last day where it has no
    such day), at `start`'s time of day: `_month_step`'s grid."""
    m = start.year * 12 + start.month - 1 + k * np.arange(n, dtype=np.int64)
    firsts = pd.DatetimeIndex((m - (1970 * 12)).astype("datetime64[M]").astype("datetime64[ns]"))
    days = np.minimum(day, np.asarray(firsts.days_in_month)) - 1
    return firsts + pd.to_timedelta(days, unit="D") + (start - start.normalize())


def month_stamps_after(idx: pd.DatetimeIndex, h: int) -> pd.DatetimeIndex | None:
    """The h timestamps after the last of `idx` on its `_month_step` grid (the same day of the month: 2018-03-15,
    2018-04-15, ...), or None where `idx` has no such step or pandas infers a calendar step of its own (`MS`, `ME`,
    `QE-DEC`, ...: `_month_step_rules`)."""
    idx = pd.DatetimeIndex(idx)
    step = _month_step(idx)
    if step is None or not _month_step_rules(idx):
        return None
    k, day = step
    n = _months_between(idx[0], idx[-1]) // k + 1
    return _month_grid(idx[0], n + h, k, day)[n:]


def _months_between(a: pd.Timestamp, b: pd.Timestamp) -> int:
    return b.year * 12 + b.month - a.year * 12 - a.month


def _calendar_grid(idx: pd.DatetimeIndex) -> pd.DatetimeIndex | None:
    """The coarsest calendar grid (_CALENDAR by name, then one day of every k-th month, `_month_step`, before
    business days) from the first to the last of the sorted timestamps `idx` that holds them all; None for none."""
    for off in _CALENDAR:
        if off == "B":
            month = _month_step(idx)              # a day of the month other than the 1st or the last: the 15th
            if month is not None:
                return _month_grid(idx[0], _months_between(idx[0], idx[-1]) // month[0] + 1, *month)
        grid = pd.date_range(idx[0], idx[-1], freq=off)
        if len(grid) and grid[0] == idx[0] and idx.isin(grid).all():
            return grid
    return None


def _month_freq(k: int) -> str:
    """A `_month_step` of k months as a pandas alias for its kind: 'MS', '2MS', 'QS', 'YS', ..."""
    n, alias = (k // 12, "YS") if k % 12 == 0 else (k // 3, "QS") if k % 3 == 0 else (k, "MS")
    return f"{n if n > 1 else ''}{alias}"


def _regular_grid(uid: str, ds: pd.Series) -> pd.Index | np.ndarray:
    """The regular grid from the first to the last timestamp; raises SeriesError when the
    timestamps fit no grid, or leave over 90 % of a long grid empty. Fixed steps (integers, hours,
    days, weeks) use the most common difference; calendar steps (years, quarters, months, business
    days) are tried by name, coarsest first, then one day of every k-th month (the 15th: `_month_step`) before
    business days: the coarsest grid that holds every timestamp. Timestamps a day apart (the commonest step)
    that all fall on weekdays are business days (`B`), whose gaps are the weekdays missing (holidays), not the
    weekends."""
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
    if not is_int and step == _DAY_NS:
        idx = pd.DatetimeIndex(ds)
        if (idx.dayofweek < 5).all():
            grid = pd.date_range(idx[0], idx[-1], freq="B")
            if idx.isin(grid).all():
                return grid
    if not bad.size:
        n = (int(t[-1]) - int(t[0])) // step + 1
        if n > max(10 * len(t), _MAX_GRID):
            i = int(np.flatnonzero(d > step)[0])
            first = t[i] + step if is_int else pd.Timestamp(int(t[i]) + step)
            raise SeriesError(f"series {uid!r}: {n - len(t)} of {n} timestamps are missing (gaps), first {first}; "
                              "too sparse to fill: resample it to a coarser step, or drop it")
        full = int(t[0]) + step * np.arange(n, dtype=np.int64)      # exact: no float steps, the last point kept
        return full if is_int else pd.DatetimeIndex(full.astype("datetime64[ns]"))
    if not is_int:
        grid = _calendar_grid(pd.DatetimeIndex(ds))
        if grid is not None:
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
