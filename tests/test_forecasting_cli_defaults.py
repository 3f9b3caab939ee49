"""`frozenvit forecast backtest` with no options beyond data, horizon and season trains the neural
models exactly as benchmarks/forecast_m4_hourly.py does (the settings that beat seasonal naive on
M4 Hourly, docs/forecasting.md); this pins the two together without running M4."""
from __future__ import annotations

from pathlib import Path

import pytest

from frozenvit.forecasting.cli import NEURAL_TRAINING, make_models

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["dlinear", "patchtst"])
def test_cli_defaults_are_the_m4_benchmark_settings(name, load_benchmark):
    bench = load_benchmark("forecast_m4_hourly")
    args = bench.parser().parse_args([])
    want = bench.build(name, args).get_params()
    got = make_models([name], h=48, season_length=24, input_size=args.input_size, max_epochs=args.max_epochs,
                      seed=args.seed)[0].get_params()
    assert got == want


def test_cli_parser_defaults_match_the_benchmark(load_benchmark):
    """The parsed defaults of `forecast backtest` (epochs, seed) feed make_models as the benchmark's do."""
    from frozenvit.backbone.suite.cli import build_parser

    bench = load_benchmark("forecast_m4_hourly").parser().parse_args([])
    cli = build_parser().parse_args(["forecast", "backtest", "--csv", "x.csv"])
    assert (cli.max_epochs, cli.seed) == (bench.max_epochs, bench.seed)
    assert NEURAL_TRAINING["loss"] == "mae" and NEURAL_TRAINING["normalize_loss"]


M4 = ROOT.parent / "shared" / "data" / "m4_hourly"


@pytest.mark.skipif(not (M4 / "Hourly-train.csv").is_file(), reason="M4 Hourly is not in ../shared/data")
def test_m4_hourly_dlinear_beats_seasonal_naive_with_no_options_beyond_data_horizon_and_season(tmp_path, capsys):
    """The README's claim through the CLI, for DLinear (seconds; PatchTST's 40 s run is in docs)."""
    import json

    from frozenvit.backbone.suite.cli import main
    from frozenvit.forecasting import read_m4

    read_m4(M4 / "Hourly-train.csv", M4 / "Hourly-test.csv").to_csv(tmp_path / "m4h.csv", index=False)
    assert main(["forecast", "backtest", "--csv", str(tmp_path / "m4h.csv"), "--h", "48", "--season-length", "24",
                 "--windows", "1", "--models", "snaive,dlinear", "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    mase = {row["model"]: row["MASE"] for row in summary["summary"]}
    assert mase["SeasonalNaive"] == pytest.approx(1.193, abs=5e-4)
    assert mase["DLinear"] < mase["SeasonalNaive"]
    assert summary["input_size"] == 336 and summary["short_series"]["ids"] == []


@pytest.mark.parametrize("name", ["dlinear", "patchtst"])
def test_python_defaults_are_the_cli_defaults(name):
    """DLinear(h)/PatchTST(h) with no other argument train as the CLI does: one source, forecasting.defaults."""
    from frozenvit.forecasting import DLinear, PatchTST
    from frozenvit.forecasting.cli import PATCHTST_SHAPE

    model = {"dlinear": DLinear, "patchtst": PatchTST}[name](h=48)
    want = {**NEURAL_TRAINING, **(PATCHTST_SHAPE if name == "patchtst" else {})}
    assert {k: model.get_params()[k] for k in want} == want
    assert make_models([name], h=48, season_length=24, input_size=336)[0].get_params() == model.get_params()
