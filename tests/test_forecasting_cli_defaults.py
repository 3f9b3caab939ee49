"""`frozenvit forecast backtest` with no options beyond data, horizon and season trains the neural
models exactly as benchmarks/forecast_m4_hourly.py does (the settings that beat seasonal naive on
M4 Hourly, docs/forecasting.md); this pins the two together without running M4."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from frozenvit.forecasting.cli import NEURAL_TRAINING, make_models

ROOT = Path(__file__).resolve().parents[1]


def _benchmark():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("forecast_m4_hourly", ROOT / "benchmarks" / "forecast_m4_hourly.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return mod


@pytest.mark.parametrize("name", ["dlinear", "patchtst"])
def test_cli_defaults_are_the_m4_benchmark_settings(name):
    bench = _benchmark()
    args = bench.parser().parse_args([])
    want = bench.build(name, args).get_params()
    got = make_models([name], h=48, season_length=24, input_size=args.input_size, max_epochs=args.max_epochs,
                      seed=args.seed)[0].get_params()
    assert got == want


def test_cli_parser_defaults_match_the_benchmark():
    """The parsed defaults of `forecast backtest` (epochs, seed) feed make_models as the benchmark's do."""
    from frozenvit.backbone.suite.cli import build_parser

    bench = _benchmark().parser().parse_args([])
    cli = build_parser().parse_args(["forecast", "backtest", "--csv", "x.csv"])
    assert (cli.max_epochs, cli.seed) == (bench.max_epochs, bench.seed)
    assert NEURAL_TRAINING["loss"] == "mae" and NEURAL_TRAINING["normalize_loss"]
