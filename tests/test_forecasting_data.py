"""Loading and validating series: long and wide CSV, named errors that say where."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from frozenvit.forecasting import SeriesError, long_to_wide, read_long_csv, read_wide_csv, validate


def _long(n: int = 10, uid: str = "a") -> pd.DataFrame:
    return pd.DataFrame({"unique_id": uid, "ds": pd.date_range("2020-01-01", periods=n, freq="h"),
                         "y": np.arange(n, dtype=float)})


def test_wide_csv_reads_as_long_with_one_series_per_column(tmp_path):
    p = tmp_path / "w.csv"
    pd.DataFrame({"date": pd.date_range("2020-01-01", periods=5, freq="h").astype(str),
                  "A": np.arange(5.0), "B": np.arange(5.0) * 2}).to_csv(p, index=False)
    df = read_wide_csv(p)
    assert list(df.columns) == ["unique_id", "ds", "y"]
    assert df["unique_id"].tolist() == ["A"] * 5 + ["B"] * 5
    assert pd.api.types.is_datetime64_any_dtype(df["ds"])
    np.testing.assert_array_equal(long_to_wide(df)["B"].to_numpy(), np.arange(5.0) * 2)


def test_long_csv_roundtrip_keeps_values_and_series_order(tmp_path):
    df = pd.concat([_long(6, "z"), _long(4, "a")], ignore_index=True)
    p = tmp_path / "l.csv"
    df.to_csv(p, index=False)
    back = read_long_csv(p)
    assert back["unique_id"].unique().tolist() == ["z", "a"]
    np.testing.assert_array_equal(back["y"].to_numpy(), df["y"].to_numpy())


def test_unsorted_timestamps_raise_with_series_and_position():
    df = _long(6)
    df.loc[[2, 3], "ds"] = df.loc[[3, 2], "ds"].to_numpy()
    with pytest.raises(SeriesError, match=r"'a'.*not sorted.*position 3"):
        validate(df)
    assert validate(df, sort=True)["ds"].is_monotonic_increasing


def test_duplicate_timestamp_raises():
    df = _long(5)
    df.loc[3, "ds"] = df.loc[2, "ds"]
    with pytest.raises(SeriesError, match="duplicate timestamp"):
        validate(df)


def test_irregular_spacing_raises():
    df = _long(6)
    df.loc[3:, "ds"] = df.loc[3:, "ds"] + pd.Timedelta(minutes=30)
    with pytest.raises(SeriesError, match="irregular spacing at 2020-01-01 03:30"):
        validate(df)


def test_gap_raises_unless_fill_is_explicit():
    df = _long(8).drop(index=[3, 4]).reset_index(drop=True)
    with pytest.raises(SeriesError, match=r"2 missing timestamp\(s\) \(gaps\), first 2020-01-01 03:00:00"):
        validate(df)
    filled = validate(df, fill="interpolate")
    np.testing.assert_allclose(filled["y"].to_numpy(), np.arange(8.0))
    assert validate(df, fill="ffill")["y"].tolist()[2:6] == [2.0, 2.0, 2.0, 5.0]


def test_nan_raises_with_timestamp_or_is_filled():
    df = _long(5)
    df.loc[2, "y"] = np.nan
    with pytest.raises(SeriesError, match="first at 2020-01-01 02:00"):
        validate(df)
    assert validate(df, fill="zero")["y"].tolist() == [0.0, 1.0, 0.0, 3.0, 4.0]


def test_too_short_series_says_needed_length():
    with pytest.raises(SeriesError, match="has 5 values but needs at least 384"):
        validate(_long(5), min_length=384)


def test_integer_timestamps_are_accepted():
    df = pd.DataFrame({"unique_id": "s", "ds": np.arange(0, 20, 2), "y": np.ones(10)})
    assert len(validate(df)) == 10


def test_monthly_calendar_series_is_regular_and_its_gaps_are_found():
    ds = pd.date_range("2000-01-01", periods=30, freq="MS")
    df = pd.DataFrame({"unique_id": "m", "ds": ds, "y": np.arange(30.0)})
    assert len(validate(df)) == 30
    with pytest.raises(SeriesError, match="first 2000-06-01"):
        validate(df.drop(index=5))
    np.testing.assert_allclose(validate(df.drop(index=5), fill="interpolate")["y"], np.arange(30.0))


@pytest.mark.parametrize("freq, n", [("QS", 40), ("QE", 40), ("YS", 30), ("YE", 30), ("ME", 30)])
def test_a_gap_in_a_quarterly_or_yearly_series_is_one_step_of_its_own_calendar(freq, n):
    ds = pd.date_range("1990-01-01", periods=n, freq=freq)
    df = pd.DataFrame({"unique_id": "q", "ds": ds, "y": np.arange(float(n))})
    with pytest.raises(SeriesError, match=f"1 missing timestamp\\(s\\) \\(gaps\\), first {ds[7].date()}"):
        validate(df.drop(index=7))
    filled = validate(df.drop(index=7), fill="interpolate")
    assert filled["ds"].tolist() == ds.tolist()
    np.testing.assert_allclose(filled["y"], np.arange(float(n)))


def test_a_file_of_time_and_target_only_is_one_series_named_by_the_file(tmp_path):
    p = tmp_path / "airline.csv"
    pd.DataFrame({"ds": pd.date_range("1949-01-01", periods=24, freq="MS").astype(str),
                  "y": np.arange(24.0)}).to_csv(p, index=False)
    df = read_long_csv(p)
    assert df["unique_id"].unique().tolist() == ["airline"] and df["y"].tolist() == list(np.arange(24.0))
    with pytest.raises(SeriesError, match=r"columns \['series'\] not found"):      # a named id column must exist
        read_long_csv(p, id_col="series")


def test_a_file_without_its_id_column_whose_timestamps_repeat_asks_for_the_id_column(tmp_path):
    p = tmp_path / "several.csv"
    several = pd.DataFrame({"series": ["a"] * 5 + ["b"] * 5, "ds": list(range(5)) * 2, "y": np.arange(10.0)})
    several.to_csv(p, index=False)
    with pytest.raises(SeriesError, match="no 'unique_id' column and its timestamps repeat.*--id-col"):
        read_long_csv(p)
    assert read_long_csv(p, id_col="series")["unique_id"].unique().tolist() == ["a", "b"]
    q = tmp_path / "no_time.csv"
    pd.DataFrame({"unique_id": ["a"] * 3, "y": np.arange(3.0)}).to_csv(q, index=False)
    with pytest.raises(SeriesError, match=r"columns \['ds'\] not found"):
        read_long_csv(q)


def test_text_in_a_value_column_names_its_line_and_is_never_filled(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("unique_id,ds,y\na,0,1\n\na,1,2\na,2,oops\na,3,4\n")      # a blank line: line numbers still hold
    for fill in (None, "ffill"):
        with pytest.raises(SeriesError, match=r"l\.csv line 5: y value 'oops' is not a number"):
            read_long_csv(p, fill=fill)


def test_empty_fields_are_missing_values_that_fill_may_fill(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("unique_id,ds,y\na,0,1\na,1,\na,2,3\n")
    with pytest.raises(SeriesError, match="--fill ffill"):
        read_long_csv(p)
    assert read_long_csv(p, fill="ffill")["y"].tolist() == [1.0, 1.0, 3.0]


def test_an_empty_last_field_on_every_row_does_not_shift_the_columns(tmp_path):
    p = tmp_path / "l.csv"
    p.write_text("unique_id,ds,y\na,0,1,\na,1,2,\n")                      # spreadsheet exports do this
    assert read_long_csv(p)["y"].tolist() == [1.0, 2.0]


def test_timestamps_with_utc_offsets_become_utc(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("date,A\n2021-01-01T01:00+01:00,1\n2021-01-01T03:00+02:00,2\n2021-01-01T02:00+00:00,3\n")
    df = read_wide_csv(p)
    assert df["ds"].dt.hour.tolist() == [0, 1, 2] and df["ds"].dt.tz is None


@pytest.mark.parametrize("freq, h, seasons", [("YS", 6, (1,)), ("YE-DEC", 6, (1,)), ("QS-OCT", 8, (4,)),
                                              ("QE", 8, (4,)), ("MS", 18, (12,)), ("ME", 18, (12,)),
                                              ("W-SUN", 13, (52,)), ("D", 14, (7,)), ("B", 10, (5,)),
                                              ("h", 48, (24, 168)), ("2h", 24, (12, 84)), ("15min", 96, (96, 672)),
                                              ("2MS", 9, (6,)), ("3D", 48, (24,))])
def test_the_horizon_and_season_come_from_the_calendar_step(freq, h, seasons):
    """Hourly and finer steps: the day, and the week as a second season (ETS and ARIMA take both)."""
    from frozenvit.forecasting.data import calendar_defaults

    t = pd.date_range("2015-01-01", periods=40, freq=freq)
    df = validate(pd.DataFrame({"unique_id": "a", "ds": t, "y": np.arange(40.0)}))
    assert calendar_defaults(df)[:2] == (h, seasons)


def test_integer_timestamps_keep_the_hourly_defaults_and_say_so():
    from frozenvit.forecasting.data import calendar_defaults

    df = validate(pd.DataFrame({"unique_id": "a", "ds": np.arange(40), "y": np.arange(40.0)}))
    assert calendar_defaults(df) == (48, (24,), "integer timestamps have no calendar: M4 Hourly's")


@pytest.mark.parametrize("header, name", [("date,co2", "co2"), ("ds,co2", "co2"), ("week,y", "weekly")])
def test_a_file_of_a_time_and_a_value_column_of_any_names_is_one_series(tmp_path, header, name):
    p = tmp_path / "weekly.csv"
    t = pd.date_range("2001-01-07", periods=30, freq="W").astype(str)
    p.write_text(header + "\n" + "".join(f"{d},{300 + i / 10}\n" for i, d in enumerate(t)))
    df = read_long_csv(p)
    assert df["unique_id"].unique().tolist() == [name] and len(df) == 30
    assert df["ds"].iloc[0] == pd.Timestamp("2001-01-07") and df["y"].iloc[-1] == pytest.approx(302.9)


def test_two_columns_that_are_not_a_time_and_a_value_still_name_the_missing_ones(tmp_path):
    p = tmp_path / "ids.csv"
    pd.DataFrame({"series": ["a", "b", "c"], "value": [1.0, 2.0, 3.0]}).to_csv(p, index=False)
    with pytest.raises(SeriesError, match=r"columns \['unique_id', 'ds', 'y'\] not found"):
        read_long_csv(p)
