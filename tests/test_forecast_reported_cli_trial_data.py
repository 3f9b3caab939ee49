"""Reading CSVs for `frozenvit forecast`: defects a command-line user's trial found (ids, thousands points,
business days with holidays, integer dates). Each test fails on the code before its fix."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting.data import read_long_csv, read_wide_csv, validate
from frozenvit.forecasting.errors import SeriesError


def _weeks(n: int, start: str = "2021-01-03") -> list[str]:
    return list(pd.date_range(start, periods=n, freq="W-SUN").strftime("%Y-%m-%d"))


def _predict(csv: Path, out: Path, *extra: str) -> pd.DataFrame:
    assert main(["forecast", "predict", "--models", "snaive", "--csv", str(csv), "--out", str(out), *extra]) == 0
    return pd.read_csv(out / "forecasts.csv", dtype={"unique_id": str})


# 1 ids are text as written ------------------------------------------------------------------------------------

def test_numeric_looking_ids_keep_their_leading_zeros_and_stay_apart(tmp_path):
    w = _weeks(24)
    rows = ([("0123", d, 10.0) for d in w[:12]] + [("123", d, 500.0) for d in w[12:]]
            + [("0456", d, 20.0 + i % 4) for i, d in enumerate(w)])
    csv = tmp_path / "ids.csv"
    pd.DataFrame(rows, columns=["unique_id", "ds", "y"]).to_csv(csv, index=False)
    df = read_long_csv(csv)
    assert df.groupby("unique_id", sort=False).size().to_dict() == {"0123": 12, "123": 12, "0456": 24}
    assert df.loc[df.unique_id == "123", "y"].eq(500.0).all()


def test_ids_that_are_the_same_number_written_otherwise_are_different_series(tmp_path):
    w = _weeks(10)
    csv = tmp_path / "same_weeks.csv"
    pd.DataFrame([(sid, d, float(k)) for k, sid in enumerate(["00123", "0123", "123.0", "1e3"]) for d in w],
                 columns=["unique_id", "ds", "y"]).to_csv(csv, index=False)
    assert list(dict.fromkeys(read_long_csv(csv).unique_id)) == ["00123", "0123", "123.0", "1e3"]


def test_forecasts_csv_writes_store_codes_back_as_read(tmp_path):
    w = _weeks(16)
    csv = tmp_path / "stores.csv"
    pd.DataFrame([(sid, d, 50.0 + k + i % 4) for k, sid in enumerate(["001", "002", "010", "100"])
                  for i, d in enumerate(w)], columns=["unique_id", "ds", "y"]).to_csv(csv, index=False)
    fc = _predict(csv, tmp_path / "out", "--h", "4", "--season-length", "4")
    assert list(dict.fromkeys(fc.unique_id)) == ["001", "002", "010", "100"]
    assert (tmp_path / "out" / "forecasts.csv").read_text().splitlines()[1].startswith("001,")


def test_wide_headers_and_python_frames_keep_the_same_ids(tmp_path):
    csv = tmp_path / "wide.csv"
    pd.DataFrame({"ds": _weeks(8), "0123": np.arange(8.0), "123": np.arange(8.0) + 100}).to_csv(csv, index=False)
    assert list(dict.fromkeys(read_wide_csv(csv).unique_id)) == ["0123", "123"]
    frame = pd.DataFrame({"unique_id": ["0123"] * 4 + ["123"] * 4, "ds": list(range(4)) * 2, "y": np.arange(8.0)})
    assert list(dict.fromkeys(validate(frame).unique_id)) == ["0123", "123"]
    mixed = frame.assign(unique_id=[1] * 4 + ["1"] * 4)
    with pytest.raises(SeriesError, match="different ids"):
        validate(mixed)


# 2 a thousands point in a ';' file ------------------------------------------------------------------------------

def _semicolon(path: Path, values: list[str]) -> Path:
    dates = pd.date_range("2021-01-03", periods=len(values), freq="W-SUN").strftime("%d.%m.%Y")
    path.write_text("unique_id;ds;y\n" + "".join(f"SKU_A;{d};{v}\n" for d, v in zip(dates, values)))
    return path


def test_a_thousands_point_beside_whole_numbers_is_refused_naming_its_line(tmp_path):
    csv = _semicolon(tmp_path / "euro.csv", ["1.125", "1.115", "1.040", "965", "920", "905", "1.005", "990"])
    with pytest.raises(SeriesError, match=r"euro\.csv line 2: y value '1\.125' beside whole numbers such as '965' "
                                          r"may be 1125 written with a thousands point"):
        read_long_csv(csv, sep=";")


def test_the_command_refuses_the_trials_thousands_file(tmp_path, capsys):
    csv = _semicolon(tmp_path / "euro.csv", ["1.125", "1.115", "1.040", "965", "920", "905", "1.005", "990"] * 3)
    assert main(["forecast", "predict", "--models", "snaive", "--csv", str(csv), "--sep", ";", "--h", "2",
                 "--season-length", "2", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "SeriesError" in err and "thousands point" in err and "line 2" in err
    assert not (tmp_path / "out" / "forecasts.csv").exists()


def test_a_thousands_point_is_refused_in_a_wide_semicolon_file_too(tmp_path):
    csv = tmp_path / "wide.csv"
    csv.write_text("ds;a;b\n2021-01-03;1.200;5\n2021-01-10;980;6\n2021-01-17;1.010;7\n")
    with pytest.raises(SeriesError, match=r"line 2: a value '1\.200'"):
        read_wide_csv(csv, sep=";")


@pytest.mark.parametrize("values, expect", [
    (["12.5", "0.125", "1.5", "3"], [12.5, 0.125, 1.5, 3.0]),            # ordinary decimal points
    (["1.125", "965.0", "1.040"], [1.125, 965.0, 1.04]),                  # a point written otherwise: decimals
    (["1.125", "2.250", "0.500"], [1.125, 2.25, 0.5]),                     # no whole number beside them
    (["965", "920", "1005"], [965.0, 920.0, 1005.0]),                      # whole numbers only
    (["1,125", "965", "2,5"], [1.125, 965.0, 2.5]),                         # decimal commas
    (["1.125", "NA", "1.5", "965"], [1.125, np.nan, 1.5, 965.0]),         # a missing marker, a decimal point
])
def test_semicolon_files_with_decimal_points_or_commas_still_read(tmp_path, values, expect):
    csv = _semicolon(tmp_path / "ok.csv", values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = read_long_csv(csv, sep=";", fill="ffill" if "NA" in values else None)
    want = pd.Series(expect).ffill().to_numpy()
    np.testing.assert_allclose(df.y.to_numpy(), want)


def test_a_comma_separated_file_keeps_its_decimal_points(tmp_path):
    csv = tmp_path / "points.csv"
    csv.write_text("ds,y\n2021-01-03,1.125\n2021-01-10,965\n2021-01-17,1.005\n")
    np.testing.assert_allclose(read_long_csv(csv).y.to_numpy(), [1.125, 965.0, 1.005])


# 3 business days with holidays ---------------------------------------------------------------------------------

_HOLIDAYS = ["2023-01-16", "2023-02-20", "2023-05-29", "2023-07-04", "2023-09-04", "2023-11-23", "2023-12-25"]


def _bdays(path: Path) -> Path:
    bd = pd.bdate_range("2023-01-02", periods=300)
    bd = bd[~bd.isin(pd.to_datetime(_HOLIDAYS))]
    t = np.arange(len(bd))
    pd.DataFrame({"unique_id": "store1", "ds": bd.strftime("%Y-%m-%d"),
                  "y": 100 + 10 * np.sin(2 * np.pi * t / 5) + (t % 3)}).to_csv(path, index=False)
    return path


def test_business_days_with_holidays_have_only_the_holidays_as_gaps(tmp_path):
    csv = _bdays(tmp_path / "bday.csv")
    with pytest.raises(SeriesError, match=r"7 missing timestamp\(s\) \(gaps\) of its business days") as e:
        read_long_csv(csv)
    assert all(day in str(e.value) for day in _HOLIDAYS)
    filled = read_long_csv(csv, fill="ffill")
    assert len(filled) == 300 and (filled.ds.dt.dayofweek < 5).all()


def test_the_filled_business_days_are_forecast_on_business_days(tmp_path, capsys):
    fc = _predict(_bdays(tmp_path / "bday.csv"), tmp_path / "out", "--fill", "ffill")
    assert "business daily timestamps" in capsys.readouterr().out
    days = pd.to_datetime(fc.ds)
    assert len(days) > 5 and (days.dt.dayofweek < 5).all()
    assert days.iloc[0] == pd.Timestamp("2024-02-26")          # the business day after Friday 2024-02-23


def test_daily_data_with_weekends_stays_daily(tmp_path):
    days = pd.date_range("2023-01-02", periods=60, freq="D")
    csv = tmp_path / "daily.csv"
    pd.DataFrame({"ds": days.delete([10, 30]).strftime("%Y-%m-%d"), "y": np.arange(58.0)}).to_csv(csv, index=False)
    with pytest.raises(SeriesError, match=r"2 missing timestamp\(s\) \(gaps\), first 2023-01-12"):
        read_long_csv(csv)
    assert len(read_long_csv(csv, fill="ffill")) == 60


# 4 integer dates ---------------------------------------------------------------------------------------------

def test_yyyymmdd_integers_are_dates_and_written_back_so(tmp_path, capsys):
    csv = tmp_path / "weekly_int.csv"
    w = pd.date_range("2021-01-03", periods=60, freq="W-SUN")
    pd.DataFrame({"unique_id": "SKU_A", "ds": w.strftime("%Y%m%d").astype(int),
                  "y": 50 + np.arange(60) % 4}).to_csv(csv, index=False)
    df = read_long_csv(csv)
    assert df.ds.iloc[0] == pd.Timestamp("2021-01-03") and df.attrs["time_form"] == {"int_date": "%Y%m%d"}
    fc = _predict(csv, tmp_path / "out", "--h", "3", "--season-length", "4")
    assert "irregular" not in capsys.readouterr().err
    assert fc.ds.tolist() == [20220227, 20220306, 20220313]


def test_yyyymm_integers_are_months_and_written_back_so(tmp_path):
    csv = tmp_path / "monthly_int.csv"
    months = pd.date_range("2015-01-01", periods=30, freq="MS")
    pd.DataFrame({"unique_id": "p1", "ds": months.strftime("%Y%m").astype(int),
                  "y": 100 + np.arange(30) % 12}).to_csv(csv, index=False)
    df = read_long_csv(csv)
    assert df.ds.iloc[12] == pd.Timestamp("2016-01-01")
    fc = _predict(csv, tmp_path / "out", "--h", "3", "--season-length", "12")
    assert fc.ds.tolist() == [201707, 201708, 201709]


def test_integer_steps_stay_integer_steps(tmp_path):
    csv = tmp_path / "steps.csv"
    pd.DataFrame({"ds": np.arange(1, 41), "y": np.arange(40.0)}).to_csv(csv, index=False)
    assert read_long_csv(csv).ds.dtype == np.int64
    not_months = tmp_path / "not_months.csv"            # 201513 is no month: integer steps
    pd.DataFrame({"ds": np.arange(201501, 201521), "y": np.arange(20.0)}).to_csv(not_months, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_long_csv(not_months).ds.dtype == np.int64


def test_iso_year_weeks_warn_that_they_run_on_to_weeks_that_do_not_exist(tmp_path):
    csv = tmp_path / "yearweeks.csv"
    pd.DataFrame({"ds": np.arange(202301, 202341), "y": np.arange(40.0)}).to_csv(csv, index=False)
    with pytest.warns(UserWarning, match=r"look like ISO year-weeks \(YYYYWW: 202301.*202341.*YYYY-MM-DD"):
        read_long_csv(csv)


def test_forecasts_csv_names_the_id_and_time_columns_as_the_users_file_did(tmp_path):
    """--id-col sku --time-col week: forecasts.csv has sku and week columns (to join back), the ids as written."""
    w = _weeks(30)
    rows = [(sku, d, 10.0 + i % 4 + k) for k, sku in enumerate(["001", "002"]) for i, d in enumerate(w)]
    csv = tmp_path / "sales.csv"
    pd.DataFrame(rows, columns=["sku", "week", "units"]).to_csv(csv, index=False)
    assert main(["forecast", "predict", "--models", "snaive", "--csv", str(csv), "--id-col", "sku", "--time-col",
                 "week", "--target-col", "units", "--h", "4", "--season-length", "4", "--out", str(tmp_path / "p")]) == 0
    got = pd.read_csv(tmp_path / "p" / "forecasts.csv", dtype={"sku": str})
    assert list(got.columns[:2]) == ["sku", "week"] and sorted(got.sku.unique()) == ["001", "002"]
    assert "unique_id" not in got.columns and "ds" not in got.columns
