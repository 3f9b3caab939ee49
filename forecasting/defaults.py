"""The neural models' defaults, in one place: the settings that beat seasonal naive on M4 Hourly.

`DLinear(h)` and `PatchTST(h)` take these as their constructor defaults, `frozenvit forecast backtest`
trains with them, and benchmarks/forecast_m4_hourly.py uses them (docs/results.md has the figures).
An MAE loss on each window's own scale, not an MSE on the data's scale: with the MSE both models lost to
seasonal naive on M4 Hourly. The paper protocol sets every value itself (`forecasting.paper.paper_config`).
Imports nothing, so that the CLI can read it without loading torch.
"""
from __future__ import annotations

NEURAL_TRAINING = dict(loss="mae", normalize_loss=True, lr=1e-3, patience=4, batch_size=128,
                       windows_per_epoch=8192, max_epochs=20, seed=0)
LOOKBACK = 336                     # input_size: the neural models' own look-back (7 horizons of M4 Hourly's 48)
LOOKBACK_HORIZONS = 7              # input_size="auto": the look-back wanted, in horizons (forecasting.lookback)
PATCH_LEN = 16                     # PatchTST's (and FrozenViTForecaster's) patch: the shortest look-back they take
VIT_DEPTH = 6                      # FrozenViTForecaster's n_blocks: the ViT's first 6 blocks, as One Fits All uses
PATCHTST_SHAPE = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1)   # sized for a 2-core CPU

# Conformal intervals (forecasting.intervals): K calibration windows before the first cutoff, and where a
# global (neural) model gets their forecasts: "holdout", from the very model trained for the first cutoff,
# on the validation tail it held out of training (the windows must lie inside it: K h <= val_size);
# "retrain", from a second training on the history before the first calibration window (the first
# method, measured worse on M4 Hourly: a second network's errors are not the first one's).
CONFORMAL = dict(calibration_windows=1, global_calibration="holdout")
GLOBAL_CALIBRATIONS = ("holdout", "retrain")

# `frozenvit forecast backtest` without options: the calendar's horizon and season (above; integer timestamps:
# M4 Hourly's), as many rolling windows as the
# shortest series allows (at most 8: forecasting.lookback.auto_windows), the look-back
# chosen from the data, and the series too short for it forecast by the best statistical model (forecasting.lookback)
SHORT_SERIES = ("statistical", "skip", "baseline", "error")       # what becomes of series too short for the look-back
MOST_WINDOWS = 8                                   # the most rolling windows the backtest chooses itself
# history="auto" of ETS, Theta and ARIMA (forecasting.baselines): the windows validated besides the whole history,
# in units of max(season, h): 2, 4, ... 32 of them (M4 Hourly: 96 ... 1536 hours)
HISTORY_LADDER = (2, 4, 8, 16, 32)
AUTO_CANDIDATES = ("snaive", "theta", "ets", "dlinear", "patchtst")   # the models `auto` chooses among (CLI names)
# and the medians among them: of all of them, and of these (the command's median columns; forecasting.auto)
AUTO_MEDIAN_OF = (("theta", "ets", "dlinear", "patchtst"),)
# auto: the mean of its best `top` candidates within `tolerance` of the best, judged on up to `windows`
# validation windows per series (docs/forecasting.md, "auto": one window judged M4 Hourly and M3 yearly better than
# every window a series has, and the other sets the same)
AUTO_COMBINE = dict(top=2, tolerance=0.2, windows=1)
# --h and --season-length when not given, from the timestamps' calendar step (forecasting.data.calendar_defaults):
# the M4 competition's horizons (yearly 6 ... hourly 48), and the cycle the calendar makes whole: 12 months, 4
# quarters, 7 days, 5 business days, a day of sub-daily steps, a year of weeks (52, rounded down from 52.18); a
# year has no cycle above it (1). Finer than hourly: one day of steps, at most 96, as horizon. Integer
# timestamps: M4 Hourly's 48 and 24.
CALENDAR_DEFAULTS = {"yearly": (6, 1), "quarterly": (8, 4), "monthly": (18, 12), "weekly": (13, 52),
                     "daily": (14, 7), "business daily": (10, 5), "hourly": (48, 24)}
# Hourly and finer steps also get the week (7 days of steps) as a second season: ETS and ARIMA take both out by STL
# together (MSTL), where a series holds two weeks; the rest keep the day (benchmarks/forecast_two_seasons.py).
SUB_DAILY_WEEK = True
BACKTEST_COMMAND = dict(h=48, season_length=24, windows="auto",
                        models=",".join([*AUTO_CANDIDATES, *(f"median({','.join(m)})" for m in AUTO_MEDIAN_OF),
                                         f"median({','.join(AUTO_CANDIDATES)})", "auto"]),
                        input_size="auto", short_series="statistical", stat_history="auto", plot_series=3)
PAPER_HORIZONS = (96, 192, 336, 720)               # the PatchTST paper's horizons (`forecast paper`)
CSV_SEP = ","                                      # the field separator of the CSV files read (--sep)
ID, DS, Y = "unique_id", "ds", "y"                 # the long format's columns (forecasting.data)
