"""Defects a new-user trial of `frozenvit forecast` found in how CSV data is read (forecasting.data)."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from frozenvit.forecasting import SeriesError, read_long_csv, read_wide_csv, validate
from frozenvit.forecasting.data import _regular_grid, calendar_defaults


def _write_long(path, ds, y=None, uid="s0"):
    y = np.arange(len(ds), dtype=float) if y is None else y
    pd.DataFrame({"unique_id": uid, "ds": [str(d) for d in ds], "y": y}).to_csv(path, index=False)
    return path


# 1. gaps in daily and weekly data, and --fill keeping the last value

@pytest.mark.parametrize("freq", ["D", "W-SUN", "h"])
def test_the_grid_of_a_gappy_series_ends_at_its_last_timestamp(freq):
    for n in range(4, 140):
        ds = pd.Series(pd.date_range("2021-01-01", periods=n, freq=freq)).drop(index=1).reset_index(drop=True)
        grid = _regular_grid("s", ds)
        assert len(grid) == n and grid[-1] == ds.iloc[-1], n


def test_one_missing_day_is_a_gap(tmp_path):
    ds = pd.date_range("2021-01-01", periods=200, freq="D")
    p = _write_long(tmp_path / "d.csv", ds.delete(20))
    with pytest.raises(SeriesError, match=r"1 missing timestamp\(s\) \(gaps\), first 2021-01-21"):
        read_long_csv(p)


def test_fill_over_two_gaps_keeps_the_last_value(tmp_path):
    ds = pd.date_range("2021-01-01", periods=200, freq="D")
    p = _write_long(tmp_path / "d.csv", ds.delete([20, 50]), y=np.arange(198.0))
    df = read_long_csv(p, fill="ffill")
    assert len(df) == 200 and df["ds"].iloc[-1] == ds[-1] and df["y"].iloc[-1] == 197.0


def test_one_missing_week_is_a_gap_and_filled_weekly_data_keeps_weekly_defaults(tmp_path):
    ds = pd.date_range("2018-01-07", periods=160, freq="W-SUN").delete(30)
    p = tmp_path / "w.csv"
    pd.DataFrame({"week": ds.strftime("%Y-%m-%d"), "a": np.arange(159.0)}).to_csv(p, index=False)
    with pytest.raises(SeriesError, match=r"1 missing timestamp\(s\) \(gaps\)"):
        read_wide_csv(p)
    df = read_wide_csv(p, fill="interpolate")
    assert len(df) == 160 and calendar_defaults(df)[:2] == (13, (52,))


# 2. wide files whose series start or end at other times

def test_a_wide_series_that_starts_later_is_trimmed_with_a_warning(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("date,a,b\n" + "".join(f"2021-01-{d:02d},{d},{'' if d <= 3 or d == 10 else d * 2}\n"
                                        for d in range(1, 11)))
    with pytest.warns(UserWarning, match=r"'b' 3 before its first value.*1 after its last"):
        df = read_wide_csv(p)
    b = df[df["unique_id"] == "b"]
    assert b["ds"].iloc[0] == pd.Timestamp("2021-01-04") and b["y"].tolist() == [8.0, 10, 12, 14, 16, 18]
    assert len(df[df["unique_id"] == "a"]) == 10


def test_an_interior_blank_of_a_wide_series_is_still_an_error(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("date,a\n" + "".join(f"2021-01-{d:02d},{'' if d in (1, 5) else d}\n" for d in range(1, 11)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SeriesError, match=r"first at 2021-01-05.*line 6: an empty field.*--fill"):
            read_wide_csv(p)


def test_leading_blanks_of_a_long_series_are_never_advised_to_be_filled(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("unique_id,ds,y\n" + "".join(f"a,{t},{'' if t < 3 else t}\n" for t in range(10)))
    with pytest.raises(SeriesError, match=r"first 3 value\(s\) are missing.*drop those rows") as e:
        read_long_csv(p)
    assert "--fill ffill" not in str(e.value)


# 3. day-first dates

def test_day_first_dates_are_read_day_first_where_only_that_is_regular(tmp_path):
    p = tmp_path / "de.csv"
    ds = pd.date_range("2010-01-01", periods=96, freq="MS")
    p.write_text("date;sales\n" + "".join(f"{d:%d.%m.%Y};{i}.5\n" for i, d in enumerate(ds)))
    df = read_long_csv(p, sep=";")
    assert df["ds"].tolist() == ds.tolist() and calendar_defaults(df)[:2] == (18, (12,))


def test_dates_regular_both_day_and_month_first_are_refused(tmp_path):
    p = tmp_path / "amb.csv"
    p.write_text("date,y\n01.02.2010,1\n02.02.2010,2\n")
    with pytest.raises(SeriesError, match="day-first and .* month-first.*YYYY-MM-DD"):
        read_long_csv(p)


def test_mostly_missing_timestamps_say_misread_and_never_advise_fill():
    ds = pd.to_datetime([f"2010-{m:02d}-{d:02d}" for m in range(1, 7) for d in range(1, 13)])     # misread months
    df = pd.DataFrame({"unique_id": "a", "ds": ds, "y": np.arange(len(ds), dtype=float)})
    for fill in (None, "ffill"):
        with pytest.raises(SeriesError, match="probably misread") as e:
            validate(df, fill=fill)
        assert "--fill" not in str(e.value)


# 4. whole years

@pytest.mark.parametrize("year", ["{}", "{}.0", '"{}"'])
def test_whole_years_are_yearly_timestamps(tmp_path, year):
    p = tmp_path / "gdp.csv"
    p.write_text("year,gdp\n" + "".join(f"{year.format(y)},{100 + y - 1960}\n" for y in range(1960, 2021)))
    df = read_long_csv(p)
    assert df["ds"].iloc[0] == pd.Timestamp("1960-01-01") and df["ds"].iloc[-1] == pd.Timestamp("2020-01-01")
    assert calendar_defaults(df)[:2] == (6, (1,)) and "yearly" in calendar_defaults(df)[2]


def test_a_missing_year_is_a_gap(tmp_path):
    p = tmp_path / "gdp.csv"
    p.write_text("year,gdp\n" + "".join(f"{y},{y}\n" for y in range(1960, 2021) if y != 1980))
    with pytest.raises(SeriesError, match="1 missing timestamp.*first 1980-01-01"):
        read_long_csv(p)


def test_integer_steps_outside_years_stay_integers(tmp_path):
    p = _write_long(tmp_path / "i.csv", range(0, 50))
    assert pd.api.types.is_integer_dtype(read_long_csv(p)["ds"])


# 5. --sep '\t' as two characters

def test_a_backslash_t_separator_is_a_tab(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("unique_id\tds\ty\n" + "".join(f"a\t2021-01-{d:02d}\t{d}\n" for d in range(1, 11)))
    assert read_long_csv(p, sep="\\t")["y"].tolist() == list(np.arange(1.0, 11))


# 6. decimal commas

def test_decimal_commas_in_a_semicolon_file_are_read_with_a_warning(tmp_path):
    p = tmp_path / "de.csv"
    p.write_text("date;sales\n" + "".join(f"2010-{m:02d}-01;{m},25\n" for m in range(1, 13)) + "2011-01-01;7\n")
    with pytest.warns(UserWarning, match="decimal comma"):
        df = read_long_csv(p, sep=";")
    assert df["y"].tolist() == [m + 0.25 for m in range(1, 13)] + [7.0]


def test_decimal_commas_mixed_with_points_are_refused(tmp_path):
    p = tmp_path / "de.csv"
    p.write_text("unique_id;ds;y\n" + "a;0;1,5\na;1;2.5\na;2;3\n")
    with pytest.raises(SeriesError, match="decimal comma"):
        read_long_csv(p, sep=";")


# 7. spaces in the header

def test_spaces_around_header_names_are_stripped(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("unique_id, ds, y \n" + "".join(f"a, 2021-01-{d:02d}, {d}\n" for d in range(1, 6)))
    df = read_long_csv(p)
    assert df["unique_id"].unique().tolist() == ["a"] and df["y"].tolist() == [1.0, 2, 3, 4, 5]


# 8. numbers in messages

def test_a_non_integer_timestamp_is_shown_as_a_plain_number(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("a,b\n19.7,1\n21.4,2\n")
    with pytest.raises(SeriesError, match=r"timestamp 19\.7 is neither") as e:
        read_wide_csv(p)
    assert "np." not in str(e.value)


# 9. M4 training files

def test_an_m4_training_file_gets_a_short_message_naming_read_m4(tmp_path):
    p = tmp_path / "Hourly-train.csv"
    cols = [f"V{i}" for i in range(1, 962)]
    p.write_text(",".join(cols) + "\n" + '"H1",' + ",".join(["1.0"] * 960) + "\n")
    with pytest.raises(SeriesError) as e:
        read_long_csv(p)
    msg = str(e.value)
    assert len(msg) < 800 and "961 columns" in msg and "read_m4" in msg and "V500" not in msg


# 10. missing markers

@pytest.mark.parametrize("marker", ["NA", "n/a", "null", "#N/A", "NaN"])
def test_a_missing_marker_is_missing_and_its_error_names_it_and_its_line(tmp_path, marker):
    p = tmp_path / "l.csv"
    p.write_text("unique_id,ds,y\n" + "".join(f"a,{t},{marker if t == 4 else t}\n" for t in range(10)))
    with pytest.raises(SeriesError, match=f"l\\.csv line 6: '{marker}', read as a missing value.*--fill"):
        read_long_csv(p)
    assert read_long_csv(p, fill="ffill")["y"].tolist()[3:6] == [3.0, 3.0, 5.0]


# ---- forecasts.csv writes timestamps as the input wrote them ---------------------------------------------------

@pytest.mark.parametrize("rows, first", [
    ([f"{2000 + i // 4}Q{i % 4 + 1},{10 + i % 4 + 0.1 * i}" for i in range(40)], "2010Q1"),     # quarters
    ([f"{1960 + i},{100 + 0.5 * i}" for i in range(40)], "2000"),                               # whole years
    ([f"2023-01-02T{i // 4:02d}:{15 * (i % 4):02d}:00+01:00,{(i % 4) * 0.1}" for i in range(96)],
     "2023-01-02 23:00:00+00:00"),                                                              # UTC offsets
])
def test_forecast_timestamps_are_written_as_the_input_wrote_them(tmp_path, rows, first):
    from frozenvit.backbone.suite.cli import main

    csv = tmp_path / "s.csv"
    csv.write_text("t,v\n" + "\n".join(rows) + "\n")
    out = tmp_path / "o"
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "snaive", "--h", "4",
                 "--season-length", "4", "--out", str(out)]) == 0
    written = pd.read_csv(out / "forecasts.csv", dtype=str)
    assert written["ds"].iloc[0] == first


def test_plain_dates_and_integer_steps_are_written_unchanged(tmp_path):
    from frozenvit.forecasting.data import time_form, written_times

    assert time_form(pd.Series(["2021-01-05", "2021-01-06"])) == {}
    assert time_form(pd.Series([1, 2, 3])) == {}
    ds = pd.Series(pd.to_datetime(["2021-01-05"]))
    assert written_times(ds, {}).equals(ds)
