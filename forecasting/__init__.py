"""forecasting: PatchTST and DLinear beside honest baselines, evaluated by rolling-origin
backtests with MASE per horizon step. Imports no vision code.

    from forecasting import read_wide_csv, backtest, SeasonalNaive, ETS, DLinear, PatchTST
    df = read_wide_csv("ETTh2.csv")                                   # long: unique_id, ds, y
    res = backtest(df, [SeasonalNaive(24), ETS(24), DLinear(h=48), PatchTST(h=48)],
                   h=48, n_windows=8, season_length=24)
    res.mase_by_horizon()                                             # model x step
"""
from .backtest import BacktestResult, backtest
from .baselines import ETS, LocalModel, Naive, SeasonalNaive
from .data import long_to_wide, read_long_csv, read_m4, read_wide_csv, validate, wide_to_long
from .dlinear import DLinear, DLinearNet
from .errors import SeriesError
from .layers import RevIN, patch_count, patchify
from .metrics import DMResult, diebold_mariano, mase, mase_scale, smape
from .paper import paper_config, paper_protocol
from .patchtst import PatchTST, PatchTSTNet
from .training import NeuralForecaster

__all__ = [
    "BacktestResult", "backtest", "ETS", "LocalModel", "Naive", "SeasonalNaive", "long_to_wide", "read_long_csv",
    "read_m4", "read_wide_csv", "validate", "wide_to_long", "DLinear", "DLinearNet", "SeriesError", "RevIN",
    "patch_count", "patchify", "DMResult", "diebold_mariano", "mase", "mase_scale", "smape", "PatchTST",
    "PatchTSTNet", "NeuralForecaster", "paper_config", "paper_protocol",
]
