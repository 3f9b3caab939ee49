"""Regular calendars the readers once refused as irregular: monthly (quarterly, yearly) timestamps on one day of
the month other than the 1st or the last (the 15th), and daily timestamps with local UTC offsets across a DST
change, judged in local wall time."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import SeriesError, future_stamps, read_long_csv, validate
from frozenvit.forecasting.data import calendar_defaults


def _mid_month_csv(path, n: int = 36, day: int = 15):
    path.write_text("date,value\n" + "".join(f"{2018 + i // 12}-{i % 12 + 1:02d}-{day:02d},{100 + i % 12 + 0.1 * i}\n"
                                             for i in range(n)))
    return path


def test_monthly_timestamps_on_the_15th_read_as_monthly_and_forecast_on_the_15th(tmp_path):
    df = read_long_csv(_mid_month_csv(tmp_path / "m15.csv"))
    assert len(df) == 36 and (df["ds"].dt.day == 15).all()
    h, seasons, why = calendar_defaults(df)
    assert (h, seasons) == (18, (12,)) and why.startswith("monthly")
    after = future_stamps(df["ds"], 3)
    assert [str(t.date()) for t in after] == ["2021-01-15", "2021-02-15", "2021-03-15"]


def test_a_gap_in_mid_month_data_is_a_gap_on_the_same_day_and_fills_there():
    ds = pd.to_datetime(["2020-01-15", "2020-02-15", "2020-04-15", "2020-05-15", "2020-06-15"])
    df = pd.DataFrame({"unique_id": "a", "ds": ds, "y": [1.0, 2, 4, 5, 6]})
    with pytest.raises(SeriesError, match="missing timestamp.*2020-03-15"):
        validate(df)
    out = validate(df, fill="interpolate")
    assert [str(t.date()) for t in out["ds"]] == ["2020-01-15", "2020-02-15", "2020-03-15", "2020-04-15", "2020-05-15",
                                                  "2020-06-15"]
    np.testing.assert_allclose(out["y"], [1, 2, 3, 4, 5, 6])


@pytest.mark.parametrize("stamps, kind, after", [
    (["2018-02-15", "2018-05-15", "2018-08-15", "2018-11-15", "2019-02-15"], "quarterly", "2019-05-15"),
    (["2017-02-15", "2018-02-15", "2019-02-15", "2020-02-15"], "yearly", "2021-02-15"),
    (["2018-02-15", "2019-02-15", "2020-02-15"], "yearly", "2021-02-15"),        # 365D by pandas' inference
])
def test_quarterly_and_yearly_timestamps_on_a_fixed_day_keep_their_day(stamps, kind, after):
    out = validate(pd.DataFrame({"unique_id": "a", "ds": pd.to_datetime(stamps), "y": np.arange(float(len(stamps)))}))
    assert calendar_defaults(out)[2].startswith(kind)
    assert str(future_stamps(out["ds"], 1)[0].date()) == after


def test_a_day_some_months_lack_falls_on_their_last_day_and_an_inconsistent_one_is_refused():
    # the 30th: February has none, so its last day; the forecasts keep the 30th
    ds = pd.to_datetime(["2019-01-30", "2019-02-28", "2019-03-30", "2019-04-30", "2019-05-30"])
    out = validate(pd.DataFrame({"unique_id": "a", "ds": ds, "y": np.arange(5.0)}))
    assert calendar_defaults(out)[2].startswith("monthly")
    assert [str(t.date()) for t in future_stamps(out["ds"], 10)][-2:] == ["2020-02-29", "2020-03-30"]
    # the 28th after the 30th is no day of the month
    bad = pd.to_datetime(["2019-01-30", "2019-02-28", "2019-03-28", "2019-04-30", "2019-05-30", "2019-06-28"])
    with pytest.raises(SeriesError):
        validate(pd.DataFrame({"unique_id": "a", "ds": bad, "y": np.arange(6.0)}))


def _berlin_csv(path):
    lines = ["ds,y"]
    for i in range(20):
        d = dt.date(2021, 3, 20) + dt.timedelta(days=i)
        lines.append(f"{d.isoformat()}T00:00:00{'+02:00' if d >= dt.date(2021, 3, 28) else '+01:00'},{i % 7 + 1}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_daily_timestamps_with_local_offsets_across_a_dst_change_are_daily_in_local_time(tmp_path):
    df = read_long_csv(_berlin_csv(tmp_path / "berlin.csv"))
    assert [str(t.date()) for t in df["ds"].iloc[6:9]] == ["2021-03-26", "2021-03-27", "2021-03-28"]
    assert (df["ds"] == df["ds"].dt.normalize()).all() and df["ds"].dt.tz is None   # local midnights
    assert calendar_defaults(df)[2].startswith("daily")
    assert df.attrs["time_form"] == {}          # written back as local dates: no +00:00 that would shift them


def test_a_tz_aware_daily_frame_across_a_dst_change_validates_on_local_days():
    ds = pd.date_range("2021-03-01", periods=60, freq="D", tz="Europe/Berlin")
    out = validate(pd.DataFrame({"unique_id": "a", "ds": ds, "y": np.arange(60.0) % 7}))
    assert list(out["ds"]) == list(ds.tz_localize(None))
    hourly = pd.date_range("2021-03-27", periods=60, freq="h", tz="Europe/Berlin")     # sub-daily: still UTC
    out = validate(pd.DataFrame({"unique_id": "a", "ds": hourly, "y": np.arange(60.0)}))
    assert list(out["ds"]) == list(hourly.tz_convert("UTC").tz_localize(None))


def test_predict_writes_mid_month_forecasts_on_the_15th(tmp_path, capsys):
    csv, out = _mid_month_csv(tmp_path / "m15.csv"), tmp_path / "out"
    assert main(["forecast", "predict", "--csv", str(csv), "--models", "snaive", "--out", str(out)]) == 0
    fc = pd.read_csv(out / "forecasts.csv")
    assert len(fc) == 18
    assert fc["ds"].tolist()[:2] == ["2021-01-15", "2021-02-15"] and fc["ds"].str.endswith("-15").all()
