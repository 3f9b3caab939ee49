"""MASE's period is its own setting (`mase_season`, `--mase-season`), by default the season length;
summary.json says which was used."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.backbone.suite.cli import main
from frozenvit.forecasting import SeasonalNaive, backtest, mase_scale


@pytest.fixture
def frame():
    t = np.arange(24 * 12)
    rng = np.random.default_rng(0)
    return pd.concat([pd.DataFrame({"unique_id": uid, "ds": t,
                                    "y": 10 + k + np.sin(2 * np.pi * t / 24) + 0.3 * np.sin(2 * np.pi * t / 168)
                                    + 0.1 * rng.standard_normal(t.size)})
                      for k, uid in enumerate(("a", "b"))], ignore_index=True)


def test_mase_season_sets_the_scale_not_the_models(frame):
    by_season = backtest(frame, [SeasonalNaive(24)], h=12, n_windows=2, season_length=24)
    by_lag1 = backtest(frame, [SeasonalNaive(24)], h=12, n_windows=2, season_length=24, mase_season=1)
    np.testing.assert_array_equal(by_season.forecasts["SeasonalNaive"], by_lag1.forecasts["SeasonalNaive"])
    y = frame.loc[frame["unique_id"] == "a", "y"].to_numpy()
    cut = y.size - 2 * 12                                    # first window's history
    assert by_lag1.scales["scale"].iloc[0] == pytest.approx(mase_scale(y[:cut], 1))
    assert by_season.scales["scale"].iloc[0] == pytest.approx(mase_scale(y[:cut], 24))
    assert by_lag1.mase()["SeasonalNaive"] != pytest.approx(by_season.mase()["SeasonalNaive"])
    assert by_season.to_dict()["mase_season"] == 24 and by_lag1.to_dict()["mase_season"] == 1
    assert by_lag1.to_dict()["season_length"] == 24


def test_mase_season_must_be_at_least_one(frame):
    from frozenvit.forecasting import SeriesError

    with pytest.raises(SeriesError, match="mase_season"):
        backtest(frame, [SeasonalNaive(24)], h=12, season_length=24, mase_season=0)


@pytest.mark.parametrize("extra,expected", [([], 24), (["--mase-season", "168"], 168)])
def test_cli_records_the_mase_season_used(frame, tmp_path, capsys, extra, expected):
    frame.to_csv(tmp_path / "l.csv", index=False)
    out = tmp_path / "out"
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "l.csv"), "--models", "snaive,naive", "--h", "12",
                 "--windows", "1", "--season-length", "24", "--out", str(out), *extra]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["season_length"] == 24 and summary["mase_season"] == expected


def test_cli_refuses_mase_season_zero(frame, tmp_path, capsys):
    frame.to_csv(tmp_path / "l.csv", index=False)
    with pytest.raises(SystemExit) as exit_:
        main(["forecast", "backtest", "--csv", str(tmp_path / "l.csv"), "--models", "snaive",
              "--mase-season", "0", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "UsageError" in err and "--mase-season" in err
