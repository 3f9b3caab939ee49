"""The neural models' defaults, in one place: the settings that beat seasonal naive on M4 Hourly.

`DLinear(h)` and `PatchTST(h)` take these as their constructor defaults, `frozenvit forecast backtest`
trains with them, and benchmarks/forecast_m4_hourly.py uses them (docs/forecasting.md has the figures).
An MAE loss on each window's own scale, not an MSE on the data's scale: with the MSE both models lost to
seasonal naive on M4 Hourly. The paper protocol sets every value itself (`forecasting.paper.paper_config`).
Imports nothing, so that the CLI can read it without loading torch.
"""
from __future__ import annotations

NEURAL_TRAINING = dict(loss="mae", normalize_loss=True, lr=1e-3, patience=4, batch_size=128,
                       windows_per_epoch=8192)
PATCHTST_SHAPE = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1)   # sized for a 2-core CPU

# Conformal intervals (forecasting.intervals): K calibration windows before the first cutoff, and where a
# global (neural) model gets their forecasts: "holdout", from the very model trained for the first cutoff,
# on the validation tail it held out of training (the windows must lie inside it: K h <= val_size);
# "retrain", from a second training on the history before the first calibration window (the first
# method, measured worse on M4 Hourly: a second network's errors are not the first one's).
CONFORMAL = dict(calibration_windows=1, global_calibration="holdout")
GLOBAL_CALIBRATIONS = ("holdout", "retrain")
