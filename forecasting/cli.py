"""`frozenvit forecast backtest|paper`: rolling backtests and the paper protocol from the shell.

This module parses arguments, calls the library (`forecasting.backtest`, `forecasting.paper`), prints
and writes. A value out of range is a UsageError, a file that cannot serve as series a SeriesError, a
model setting no model can use a ParameterError (each exit status 2). Progress goes to stderr: a bar on
a terminal, plain lines with rate and ETA in a log file.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path
from typing import Iterator

from frozenvit.backbone.suite.cli import add_threads_arg, number
from frozenvit.backbone.suite.engine import add_engine_args
from frozenvit.backbone.suite.errors import UsageError

from .defaults import NEURAL_TRAINING, PATCHTST_SHAPE  # noqa: F401   the models' defaults, re-exported
from .defaults import (AUTO_CANDIDATES, AUTO_COMBINE, AUTO_MEDIAN_OF, BACKTEST_COMMAND, CONFORMAL, MOST_WINDOWS, CSV_SEP, DS, GLOBAL_CALIBRATIONS, ID, LOOKBACK,
                       HISTORY_LADDER, LOOKBACK_HORIZONS, PAPER_HORIZONS, PATCH_LEN, SHORT_SERIES, VIT_DEPTH, Y)
from .errors import SeriesError

MODEL_NAMES = ("snaive", "naive", "ets", "theta", "arima", "dlinear", "patchtst", "vit", "auto")
NEURAL = ("dlinear", "patchtst", "vit")           # vit: FrozenViTForecaster, the embedded default ViT
PAPER_MODELS = ("patchtst", "dlinear", "vit")
PAPER_DATASETS = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")
_D = BACKTEST_COMMAND



def _auto_windows(n: int) -> str:
    """How `auto`'s help names its validation windows."""
    if n == 1:
        return ("window (the --h values before each series' first cutoff, forecast from a fit before it: for a "
                "network, a second training)")
    return (f"windows (up to {n} windows of --h before each series' first cutoff, as many as its history allows, "
            "each forecast from a fit before it: for a network, a second training before the earliest)")

def names_of(choices: tuple[str, ...]):
    """argparse `type=` for a comma-separated list of distinct names out of `choices`."""
    def parse(text: str) -> list[str]:
        names = [n.strip().lower() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown model(s) {unknown}; choose from {','.join(choices)}")
        if not names:
            raise argparse.ArgumentTypeError(f"name at least one model out of {','.join(choices)}")
        if len(set(names)) < len(names):
            raise argparse.ArgumentTypeError(f"a model is named twice in {text!r}")
        return names

    parse.__name__ = "model list"
    return parse


def model_specs(choices: tuple[str, ...]):
    """argparse `type=` for --models of `forecast backtest`: names out of `choices` and ensembles of
    them, `snaive,ets,median(ets,dlinear,patchtst)` (forecasting.ensemble.parse_models)."""
    def parse(text: str) -> list:
        from .ensemble import parse_models

        try:
            return parse_models(text, choices)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = "model list"
    return parse


def number_list(kind=int, **limits):
    """argparse `type=` for comma-separated distinct numbers, each checked by `number(kind, **limits)`."""
    part = number(kind, **limits)

    def parse(text: str) -> list:
        values = [part(v) for v in text.split(",") if v.strip()]
        if not values or len(set(values)) < len(values):
            raise argparse.ArgumentTypeError(f"expected distinct comma-separated numbers, got {text!r}")
        return values

    parse.__name__ = "list of numbers"
    return parse


def percent_levels(text: str) -> list[float]:
    """argparse `type=` for --levels: comma-separated distinct percentages strictly between 0 and 100."""
    from .intervals import fractions_note

    values = number_list(float, min=0, max=100, min_open=True)(text)
    if 100 in values:
        raise argparse.ArgumentTypeError(f"expected percentages between 0 and 100 (not 100), got {text!r}; e.g. 80,95")
    note = fractions_note(values)           # 0.8,0.95: meant as 80 % and 95 %, never as 0.8 % and 0.95 %
    if note:
        raise argparse.ArgumentTypeError(f"levels are percentages, got {text!r} ({note[0]}); use --levels {note[1]}")
    return sorted(values)


def flat_names(specs: list) -> list[str]:
    """Every model name in parsed --models, ensemble members included, each once, in order."""
    return list(dict.fromkeys(n for s in specs for n in ([s] if isinstance(s, str) else s[1])))


def register(subparsers) -> None:
    p = subparsers.add_parser("forecast", help="PatchTST, DLinear and baselines: backtests with MASE per horizon, "
                                               "and forecasts of the future")
    sub = p.add_subparsers(dest="forecast_command", required=True)

    q = sub.add_parser("backtest", help="rolling-origin backtest of several models on a CSV")
    _add_run_args(q, _D["models"])
    q.add_argument("--mase-season", type=number(int, min=1), default=None,
                   help="lag of the MASE scale (mean absolute difference over this many steps of each window's "
                        "history); when not given: --season-length. summary.json says which was used")
    q.add_argument("--windows", type=number(int, min=1), default=None,
                   help="number of rolling cutoffs per series; when not given: as many as the shortest series "
                        "allows (a history of max(2 seasons, 2 --h) + 1 before the first, and the "
                        "--calibration-windows before it; with --short-series skip the shortest series kept), at most "
                        f"{MOST_WINDOWS}")
    q.add_argument("--step-size", type=number(int, min=1), default=None,
                   help="steps between cutoffs; when not given: the horizon --h")
    q.add_argument("--refit-every", type=number(int, min=1), default=None,
                   help="retrain the neural models every k cutoffs; when not given: once, before the first")
    _add_out_and_engine(q, "backtest")
    q.set_defaults(func=_cmd_backtest)

    q = sub.add_parser("predict", help="forecast the next --h values of every series of a CSV (default: auto)")
    _add_run_args(q, "auto", predict=True)
    _add_out_and_engine(q, "predict")
    q.set_defaults(func=_cmd_predict)

    q = sub.add_parser("paper", help="the PatchTST paper protocol on an ETT file (MSE/MAE on the standardised scale)")
    q.add_argument("--csv", required=True, type=Path,
                   help="an ETT CSV: a date column, then one column per variable (ETTh1/2, ETTm1/2)")
    q.add_argument("--horizons", type=number_list(int, min=1), default=",".join(map(str, PAPER_HORIZONS)),
                   help="comma-separated horizons")
    q.add_argument("--models", type=names_of(PAPER_MODELS), default="patchtst,dlinear",
                   help=f"comma-separated, out of {','.join(PAPER_MODELS)}")
    q.add_argument("--dataset", choices=PAPER_DATASETS, default=None,
                   help="which ETT file this is: its official scripts' hyperparameters and its published rows; "
                        "when not given: recognised from the file name, else none is assumed and no published "
                        "reference is shown")
    q.add_argument("--minutely", action="store_true",
                   help="ETTm borders (4x the hourly rows) for a file that is not recognised; an ETTm dataset "
                        "has them anyway")
    q.add_argument("--max-epochs", type=number(int, min=1), default=None,
                   help="cap on epochs; when not given: the paper's schedule")
    q.add_argument("--patience", type=number(int, min=1), default=None,
                   help="early-stopping patience in epochs; when not given: the paper's")
    q.add_argument("--windows-per-epoch", type=number(int, min=1), default=None,
                   help="PatchTST and vit: sample this many training windows per epoch (CPU budget); when not "
                        "given: all")
    q.add_argument("--out", type=Path, default=None,
                   help="JSON file for the scores (an existing file is replaced only if this command wrote it); "
                        "when not given: printed only")
    q.add_argument("--resume", action="store_true",
                   help="continue a stopped run: its training checkpoints are in OUT.ckpt/ beside --out (written "
                        "after every epoch whenever --out is given); finished (model, horizon) pairs are not "
                        "trained again, the one that was stopped continues from its last epoch")
    add_vit_args(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_paper)


def _add_out_and_engine(q: argparse.ArgumentParser, command: str) -> None:
    """--out (default: forecast-out for a backtest, forecast-predict for a forecast) and --ray/--workers."""
    q.add_argument("--out", type=Path, default=Path("forecast-out" if command == "backtest" else f"forecast-{command}"),
                   help=f"output folder: new, empty, or an earlier forecast {command}'s, whose results this run "
                        "replaces (files frozenvit did not write stay); a stopped run there continues with --resume")
    add_engine_args(q)


def _add_run_args(q: argparse.ArgumentParser, models: str, predict: bool = False) -> None:
    """The options `backtest` and `predict` share: the data, the horizon and season, the models and their
    training, the intervals, the short series."""
    q.add_argument("--csv", required=True, type=Path, help="long (unique_id,ds,y) or, with --wide, wide CSV")
    q.add_argument("--wide", action="store_true", help="a date column then one column per series (ETT layout)")
    q.add_argument("--columns", default=None,
                   help="comma-separated series columns of a wide CSV; when not given: every column but the time")
    q.add_argument("--id-col", default=ID, help="series id column of a long CSV; a file of time and target "
                                               "columns alone (no unique_id) is one series, named by the file")
    q.add_argument("--time-col", default=None,
                   help=f"time column; when not given: {DS!r} in a long CSV, the first column in a wide one")
    q.add_argument("--target-col", default=Y, help="value column of a long CSV")
    q.add_argument("--sep", default=CSV_SEP, metavar="CHAR",
                   help="the field separator of --csv, e.g. ';' for a semicolon-separated file (where values "
                        "written with a decimal comma, 100,25, are read so), '\\t' for a tab")
    q.add_argument("--sort", action="store_true",
                   help="sort each series' rows by time (else unsorted rows are refused)")
    q.add_argument("--fill", choices=("ffill", "interpolate", "zero"), default=None,
                   help="fill missing timestamps and empty values this way (the command says how many it filled, in "
                        "which series, and summary.json records it under 'filled'); when not given they are refused")
    q.add_argument("--h", type=number(int, min=1), default=None,
                   help="forecast horizon in steps; when not given: from the timestamps' step, M4's horizons (yearly "
                        "6, quarterly 8, monthly 18, weekly 13, daily 14, hourly 48; integer timestamps: "
                        f"{_D['h']}); the command prints which it used")
    q.add_argument("--season-length", type=number_list(int, min=1), default=None,
                   help="season in steps: for seasonal naive, Theta, ETS, ARIMA (above 24 steps they take it out by "
                        "STL first) and (unless --mase-season) the MASE scale; several, comma-separated (24,168: the "
                        "day and the week of hourly data): ETS and ARIMA take them all out by STL together (MSTL), "
                        "the others take the shortest; when not given: the timestamps' cycle (12 months, 4 quarters, 52 weeks, 7 days; "
                        "hourly and finer: the day and the week, 24,168 for hours; yearly: 1; "
                        f"integer timestamps: {_D['season_length']})")
    q.add_argument("--models", type=model_specs(MODEL_NAMES), default=models,
                   help=f"comma-separated, out of {','.join(MODEL_NAMES)}, and combinations of them: "
                        "median(ets,dlinear,patchtst) or mean(...) (members fitted once, tested against the "
                        f"combination); auto: out of {','.join(AUTO_CANDIDATES)}, their median and the median of "
                        f"{' and of '.join(','.join(m) for m in AUTO_MEDIAN_OF)}, the one of the "
                        f"least error on the validation {_auto_windows(AUTO_COMBINE['windows'])} relative to each "
                        "series' least, on average over the series, or the mean of the best "
                        f"{AUTO_COMBINE['top']} where they lie within "
                        f"{AUTO_COMBINE['tolerance'] * 100:g} %% of it (forecasting/auto.py); a candidate also named alone "
                        "is fitted once")
    q.add_argument("--levels", type=percent_levels, default=None,
                   help="prediction intervals at these levels in percent, e.g. 80,95: conformal for every model, "
                        "and statsforecast's own for ETS, Theta and ARIMA; reports coverage per step and MSIS; when not given: none")
    q.add_argument("--calibration-windows", type=number(int, min=0), default=None,
                   help="with --levels: windows of --h inside each series' history before the first cutoff that "
                        "calibrate the conformal intervals (each series needs that many --h more values); "
                        + ("when not given: enough for 19 errors per step over the series (a 95 %% interval's "
                           "least), as many as the shortest series holds" if predict else
                           f"when not given: {CONFORMAL['calibration_windows']}"))
    q.add_argument("--global-calibration", choices=GLOBAL_CALIBRATIONS, default=None,
                   help="with --levels: where the neural models' calibration forecasts come from: 'holdout', the "
                        "model trained for the first cutoff, on the validation tail it held out of training "
                        "(needs --calibration-windows 1); 'retrain', a second training before the calibration "
                        + ("windows; when not given: holdout for one window, retrain for more" if predict else
                           f"windows; when not given: {CONFORMAL['global_calibration']}"))
    q.add_argument("--input-size", type=number(int, min=1), default=None,
                   help=f"look-back of the neural models (PatchTST: at least {PATCH_LEN}); when not given: derived "
                        f"with their patch, trend kernel and validation tail from --h, --season-length and the series' "
                        f"lengths ({LOOKBACK_HORIZONS} horizons, at most what the median-length series fits; "
                        "forecasting/lookback.py)")
    q.add_argument("--short-series", choices=SHORT_SERIES, default=_D["short_series"],
                   help="series too short for the neural models' look-back: 'statistical' forecasts them under "
                        "the neural models' names with auto over the statistical models of --models (else theta, ets), "
                        "validated on their validation windows, 'skip' leaves them out "
                        "(every model), 'baseline' forecasts them with seasonal naive under the neural models' "
                        "names, 'error' refuses them; a warning names them, the printed table and summary.json "
                        "record them (default: %(default)s)")
    q.add_argument("--stat-history", type=stat_history, default=_D["stat_history"], metavar="N|auto|all",
                   help="how much of each history ets, theta and arima (alone, in combinations and in auto) are "
                        "fitted on: the last N values, all of it, or 'auto': all of it unless a recent window of "
                        f"{'/'.join(map(str, HISTORY_LADDER))} x max(--season-length, --h) values forecasts the --h "
                        "values before the first cutoffs better by more than one standard error (over the series); "
                        "the command prints what each used (default: %(default)s)")
    q.add_argument("--max-epochs", type=number(int, min=1), default=NEURAL_TRAINING["max_epochs"],
                   help="training epochs of the neural models")
    q.add_argument("--seed", type=number(int, min=0), default=NEURAL_TRAINING["seed"],
                   help="seed of the neural models' training")
    q.add_argument("--resume", action="store_true",
                   help="continue the neural models' training (auto's included) from the checkpoints a stopped run "
                        "with this --out left in OUT/checkpoints/ (written after every epoch); finished trainings "
                        "are not repeated")
    q.add_argument("--plot-series", type=number(int, min=1), default=_D["plot_series"],
                   help="series shown in forecasts.png")
    add_vit_args(q)
    add_threads_arg(q)


def add_vit_args(q: argparse.ArgumentParser) -> None:
    """--backbone, --weights, --depth: which frozen ViT the `vit` model borrows its first blocks from.
    (`add_backbone_args` would add --image-size too, which means nothing to a series' patches.)"""
    q.add_argument("--backbone", default=None, metavar="NAME",
                   help="vit: the timm ViT or named backbone whose frozen blocks it uses (e.g. "
                        "vit_small_patch16_224, with --weights for its weights offline); when not given: the "
                        "embedded default ViT")
    q.add_argument("--weights", type=Path, default=None, metavar="FILE",
                   help="vit: local .safetensors/.pth weights for --backbone (never unpickled)")
    q.add_argument("--depth", type=number(int, min=1), default=None, metavar="N",
                   help=f"vit: how many of the ViT's first blocks it uses; when not given: {VIT_DEPTH}")


def vit_options(args: argparse.Namespace, names: list[str]) -> dict:
    """FrozenViTForecaster's backbone and n_blocks from --backbone/--weights/--depth, the backbone loaded
    here (once); {} when none is given. These options without `vit` in --models are refused."""
    given = {k: getattr(args, k) for k in ("backbone", "weights", "depth") if getattr(args, k) is not None}
    if not given:
        return {}
    if "vit" not in names:
        flags = ", ".join("--" + k for k in given)
        raise UsageError(f"{flags}: only the vit model uses {'it' if len(given) == 1 else 'them'}, and vit is not "
                         f"in --models; add vit to --models or drop {flags}")
    if args.weights is not None and args.backbone is None:
        raise UsageError("--weights needs --backbone NAME (the timm architecture the weights are for)")
    from .frozen_vit import load_vit

    depth = args.depth or VIT_DEPTH
    return {"backbone": load_vit(args.backbone, args.weights, depth), "n_blocks": depth}


def make_models(names: list[str], h: int, season_length: int, input_size: int = LOOKBACK,
                max_epochs: int = NEURAL_TRAINING["max_epochs"], seed: int = NEURAL_TRAINING["seed"],
                vit: dict | None = None, stat_history: int | None = None, seasons: tuple[int, ...] = ()) -> list:
    """The command's models by short name (see MODEL_NAMES); the neural ones with their constructors'
    defaults (NEURAL_TRAINING, PatchTST's PATCHTST_SHAPE: `forecasting.defaults`); ETS, Theta and ARIMA
    fitted on the last `stat_history` values (None: all). `seasons`: more than one, ETS and ARIMA take them
    all (MSTL), the others `season_length`."""
    from .baselines import ARIMA, ETS, Naive, SeasonalNaive, Theta
    from .dlinear import DLinear
    from .frozen_vit import FrozenViTForecaster
    from .patchtst import PatchTST

    common = dict(h=h, input_size=input_size, max_epochs=max_epochs, seed=seed)     # the rest: the models' defaults
    stat = dict(history=stat_history)
    several = tuple(seasons) if len(seasons) > 1 else season_length
    factories = {"snaive": lambda: SeasonalNaive(season_length), "naive": Naive,
                 "ets": lambda: ETS(several, **stat), "theta": lambda: Theta(season_length, **stat),
                 "arima": lambda: ARIMA(several, **stat),
                 "dlinear": lambda: DLinear(**common), "patchtst": lambda: PatchTST(**common),
                 "vit": lambda: FrozenViTForecaster(**common, **(vit or {}))}

    def auto():
        from .auto import AutoForecaster

        cands = [factories[n]() for n in AUTO_CANDIDATES]                    # its own objects: its own fits
        alias = {n: m.alias for n, m in zip(AUTO_CANDIDATES, cands)}
        return AutoForecaster(cands, median_of=[tuple(alias[n] for n in members) for members in AUTO_MEDIAN_OF])

    factories["auto"] = auto
    return [factories[n]() for n in names]


def _check_backtest_args(args: argparse.Namespace, predict: bool = False) -> None:
    """Refuse combinations that cannot be meant, before any file is read (`predict`: `forecast predict`'s,
    which retrains for more than one calibration window unless told otherwise)."""
    if args.columns is not None and not args.wide:
        raise UsageError("--columns selects the series of a wide CSV; pass --wide too, or drop --columns")
    if args.wide and (args.id_col != ID or args.target_col != Y):
        raise UsageError("--id-col and --target-col name columns of a long CSV; a wide CSV (--wide) has one "
                         "column per series: select them with --columns")
    for flag, value in (("--calibration-windows", args.calibration_windows),
                        ("--global-calibration", args.global_calibration)):
        if value is not None and args.levels is None:
            raise UsageError(f"{flag} calibrates intervals; pass --levels too, e.g. --levels 80,95")
    neural = sorted(set(NEURAL) & set(flat_names(args.models))) if args.levels else []
    windows = CONFORMAL["calibration_windows"] if args.calibration_windows is None else args.calibration_windows
    if neural and windows > 1 and (args.global_calibration or ("retrain" if predict else
                                                               CONFORMAL["global_calibration"])) == "holdout":
        raise UsageError(f"--calibration-windows {windows} with {'/'.join(neural)}: holdout "
                         "calibration forecasts the calibration windows with the model of the first cutoff, inside "
                         "the validation tail of --h it holds out of training, so it takes 1 window; use "
                         "--calibration-windows 1 or --global-calibration retrain")
    patched = sorted({"patchtst", "vit"} & set(flat_names(args.models)))
    if args.input_size is not None and patched and args.input_size < PATCH_LEN:
        raise UsageError(f"--input-size {args.input_size} is shorter than one {'/'.join(patched)} patch "
                         f"({PATCH_LEN} steps); use --input-size {PATCH_LEN} or more")


def stat_history(text: str) -> int | str | None:
    """--stat-history: 'auto', 'all' (None) or a number of values, at least 2."""
    if text in ("auto", "all"):
        return None if text == "all" else text
    return number(int, min=2)(text)


def shown_steps(h: int, most: int = 8) -> list[int]:
    """The horizon steps the printed MASE table shows: all of them up to `most`, else the first, every
    ceil(h / most)-th and the last (48 -> 1, 6, 12, ..., 48); the file and the picture keep every step."""
    stride = -(-h // most)
    return sorted({1, h, *range(stride, h + 1, stride)})


@contextlib.contextmanager
def _warnings_as_lines():
    """The library's warnings (e.g. series skipped as too short) as one `warning: ...` line each on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *_, **__: print(f"warning: {message}", file=sys.stderr)
        yield


def _read_series(args: argparse.Namespace):
    """The CSV as a long frame, and {from, h, season_length} where --h or --season-length came from the
    timestamps, naming only the one(s) derived (args set to them; None where both were given)."""
    from .data import calendar_defaults, read_long_csv, read_wide_csv

    if args.wide:
        cols = [c.strip() for c in args.columns.split(",")] if args.columns else None
        df = read_wide_csv(args.csv, args.time_col, cols, sort=args.sort, fill=args.fill, sep=args.sep)
    else:
        df = read_long_csv(args.csv, args.id_col, args.time_col or DS, args.target_col, sort=args.sort,
                           fill=args.fill, sep=args.sep)
    inferred = None
    if args.h is None or args.season_length is None:    # from the timestamps' calendar step
        h, m, why = calendar_defaults(df)
        derived = {}                                    # only the values the user did not give
        if args.h is None:
            args.h = derived["h"] = h
        if args.season_length is None:
            args.season_length = list(m)
            derived["season_length"] = min(m)
        inferred = {"from": why, **derived}
        flags = [f"--h {args.h}" if "h" in derived else None,
                 f"--season-length {','.join(map(str, args.season_length))}" if "season_length" in derived else None]
        names = " and ".join(f.split()[0] for f in flags if f)
        print(f"{' and '.join(f for f in flags if f)}: {why} (pass {names} to choose)")
    args.time_form = df.attrs.get("time_form", {})       # forecasts.csv writes its timestamps alike
    args.filled = df.attrs.get("filled")
    if args.filled:
        print(_filled_line(args.filled))
    args.seasons = tuple(sorted(args.season_length))    # ETS and ARIMA take them all, the rest the shortest
    args.season_length = args.seasons[0]
    return df, inferred


def _filled_line(filled: dict) -> str:
    """What --fill did, in one line: how many values in how many series, the series with the most first."""
    n, per = filled["values"], filled["series"]
    if not n:
        return f"--fill {filled['how']}: no value was missing, none filled"
    gaps, empty = filled["missing_timestamps"], n - filled["missing_timestamps"]
    parts = [f"{gaps} missing timestamp{'s' if gaps != 1 else ''}"] * bool(gaps) + \
        [f"{empty} empty value{'s' if empty != 1 else ''}"] * bool(empty)
    most = sorted(per.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{u} {k}" for u, k in most[:5]) + (f", and {len(most) - 5} more series" if len(most) > 5 else "")
    return (f"filled {n} missing value{'s' if n != 1 else ''} ({' and '.join(parts)}) in {len(per)} series with "
            f"--fill {filled['how']}: {shown} (summary.json: filled)")


def _as_read(frame, args: argparse.Namespace):
    """A frame of forecasts as the CSV wrote its own: timestamps in its form (`data.written_times`), and the id and
    time columns under the names --id-col and --time-col gave them (when given, and free in the frame)."""
    from .data import written_times

    form = getattr(args, "time_form", None)
    cols = [c for c in (DS, "cutoff") if c in frame.columns]
    frame = frame.assign(**{c: written_times(frame[c], form) for c in cols}) if form and cols else frame
    names = {ID: getattr(args, "id_col", ID) if not getattr(args, "wide", False) else ID,
             DS: getattr(args, "time_col", None) or DS}
    names = {k: v for k, v in names.items() if k in frame.columns and v != k and v not in frame.columns}
    return frame.rename(columns=names) if len(set(names.values())) == len(names) else frame


def _say_unfinished(folder, args: argparse.Namespace) -> None:
    """A line on stderr where --out holds a run that stopped before its last file (its run record says so)."""
    from .run_folder import RECORD

    if folder.unfinished and not args.resume:
        print(f"warning: --out {args.out} holds a run that stopped before all its results were written (its {RECORD} "
              "says so); this run starts afresh and replaces it (--resume completes that run instead, keeping its "
              "finished trainings)", file=sys.stderr)


def _filled_record(args: argparse.Namespace) -> dict:
    """summary.json's "filled" where --fill was given: how many values it filled, in which series."""
    filled = getattr(args, "filled", None)
    return {"filled": filled} if filled else {}


def _seasons_record(args: argparse.Namespace) -> dict:
    """summary.json's "seasons" where --season-length gave several (season_length is the shortest)."""
    return {"seasons": list(args.seasons)} if len(args.seasons) > 1 else {}


def _checkpointed(built: dict, out: Path, resume: bool) -> list[str]:
    """Every neural model of the run, named alone or as one of auto's candidates, checkpoints each of its
    trainings after every epoch in OUT/checkpoints/<alias>/ (a subfolder per training), continued with
    `resume`; the folders, relative to OUT."""
    rels = []
    for model in built.values():
        for net in [model, *getattr(model, "candidates", ())]:
            if "checkpoint_dir" in net.get_params(deep=False):
                rel = f"checkpoints/{net.alias}"
                net.set_params(checkpoint_dir=str(out / rel), resume=resume)
                rels += [rel] if rel not in rels else []
    return rels


def _season_forms(args: argparse.Namespace, lengths: list[int] | None = None,
                  caps: dict | None = None) -> dict[str, str]:
    """How ETS and ARIMA (alone, in a combination, in auto, or for the short series) modelled --season-length:
    {"ETS": "stl"|"own"|"none", ...} for those the run uses; a season they take out by STL (above 24
    steps, or several) is said in one printed line.

    `lengths`: the lengths of the histories the forecasts were fitted on (each series', at each cutoff of a
    backtest). With them, the forms are those of the seasons fitted: a season a history does not hold twice over
    is left out of that history's fit (`fitted_seasons`), and a SeasonWarning names it and why; the form is that
    of the fits that kept the most seasons. `caps`: class name -> the most values of a history it was fitted on
    (--stat-history N, or the N auto chose; None: all). Without `lengths` (or for the short series' fallback
    alone): the seasons asked."""
    from .backtest import SeasonWarning
    from .baselines import ARIMA, ETS, MOST_SEASON

    names = set(flat_names(args.models))
    fallback = names & set(NEURAL) and args.short_series == "statistical" and not names - set(NEURAL)
    several = len(args.seasons) > 1
    # the models named (auto's ETS among them) take every season; the short series' fallback (Theta, ETS) the shortest
    used = [(m, args.seasons if several and named else args.season_length, bool(named))
            for m, named, wanted in ((ETS, names & {"ets", "auto"}, names & {"ets", "auto"} or fallback),
                                     (ARIMA, "arima" in names, "arima" in names)) if wanted]
    forms, fitted = {}, {}
    for m, given, named in used:
        model, name = m(given), m.__name__
        asked = tuple(s for s in model.seasons() if s > 1)
        if lengths is None or not named or not len(lengths):
            fitted[name] = asked
        else:
            cap = (caps or {}).get(name)
            fits = [_as_seasons(model.fitted_seasons(n if cap is None else min(n, int(cap)))) for n in lengths]
            fitted[name] = max(fits, key=len)
            for season in asked:
                short = sum(season not in f for f in fits)
                if short:
                    _warn_season_left_out(name, season, short, len(fits), lengths, cap, fitted[name], SeasonWarning)
        forms[name] = model.seasonal_form(fitted[name])
    stl: dict[tuple, list[str]] = {}
    for name, form in forms.items():
        if form == "stl":
            stl.setdefault(fitted[name], []).append(name)
    for seasons, who in stl.items():
        one, both = len(who) == 1, len(seasons) > 1
        what = (f"seasons of {' and '.join(map(str, seasons))} steps: STL takes them out together"
                if both else f"a season of {seasons[0]} steps, above the {MOST_SEASON} "
                f"{'it models itself' if one else 'they model themselves'}: STL takes the season out")
        print(f"{' and '.join(who)}: {what}, {'it forecasts' if one else 'they forecast'} the rest (as R's "
              f"{'mstl' if both else 'stlf'})")
    return forms


def _as_seasons(fitted) -> tuple[int, ...]:
    """`fitted_seasons`' answer (an int, a tuple, 1 for none) as the tuple of the seasons fitted."""
    return tuple(fitted) if isinstance(fitted, tuple) else () if int(fitted) <= 1 else (int(fitted),)


def _warn_season_left_out(name: str, season: int, short: int, fits: int, lengths: list[int], cap, kept: tuple,
                          category) -> None:
    """The SeasonWarning for a season of --season-length that `short` of a model's `fits` left out."""
    held = f"the last {int(cap)} values of each history" if cap is not None and int(cap) < max(lengths) else \
        f"histories of {min(lengths)}{f' to {max(lengths)}' if max(lengths) > min(lengths) else ''} values"
    rest = (f"it fitted the season{'s' if len(kept) > 1 else ''} of {' and '.join(map(str, kept))} alone" if kept
            else "it fitted no season")
    where = (f"every fit ({rest}, as --season-length {','.join(map(str, kept)) or 1} would)" if short == fits
             else f"{short} of its {fits} fits, on histories shorter than {2 * season} values")
    warnings.warn(f"{name}: the season of {season} steps is left out of {where}: it was fitted on {held}, and a "
                  f"season is fitted only where a history holds it twice over ({2 * season} values); a longer "
                  f"history gives it{', or a larger --stat-history' if cap is not None else ''}", category,
                  stacklevel=2)


def _files_written(args: argparse.Namespace, command: str) -> list[str]:
    """The files `forecast <command>` writes into --out besides the model and checkpoint folders (those are
    checked by `RunFolder.check_models`): known before any work, so that a user's file of one of these names
    is refused before the run starts rather than overwritten (`check_output_dir(..., names=)`)."""
    from .run_folder import RECORD

    names = ["summary.json", "forecasts.csv", "forecasts.png", RECORD]
    if command == "backtest":
        names += ["mase_by_horizon.csv", "mase_by_horizon.png"] + (["coverage_by_horizon.png"] if args.levels else [])
    return names + (["auto_weights.csv"] if "auto" in flat_names(args.models) else [])


def _fresh(out) -> bool:
    """Whether --out is absent or an empty folder (a run that claims it and fails before training unclaims it)."""
    out = Path(out)
    return not out.exists() or (out.is_dir() and not any(out.iterdir()))


@contextlib.contextmanager
def _unclaimed_on_refusal(out, fresh: bool) -> Iterator[None]:
    """Around a run that claimed --out before training (for its checkpoints): a refusal (a FrozenVitError) raised
    before any checkpoint was written removes what the claim wrote, when --out was fresh, so that a mistake leaves
    nothing behind; after a checkpoint, the folder stays for --resume."""
    from frozenvit.backbone.suite.artifacts import MARKER, TEMP_MARKER, remove_artifact
    from frozenvit.backbone.suite.errors import FrozenVitError

    try:
        yield
    except FrozenVitError:
        ckpt = Path(out) / "checkpoints"
        if fresh and Path(out).is_dir() and not any(f.is_file() and f.name not in (MARKER, TEMP_MARKER)
                                                    for f in ckpt.rglob("*")):
            remove_artifact(out)
        raise


def _cmd_predict(args: argparse.Namespace) -> int:
    import pandas as pd

    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir
    from frozenvit.backbone.suite.engine import engine_from_args, engine_session

    from .ensemble import assemble
    from .future import forecast
    from .run_folder import RunFolder

    _check_backtest_args(args, predict=True)
    vit = vit_options(args, flat_names(args.models))
    engine_from_args(args)                          # --workers without --ray fails before any work
    check_output_dir(args.out, "forecast.predict", names=_files_written(args, "predict"))   # a user's file too
    folder = RunFolder(args.out, args.resume, "predict")     # a stopped run there is continued with --resume only
    _say_unfinished(folder, args)
    df, inferred = _read_series(args)
    names = flat_names(args.models)
    built = dict(zip(names, make_models(names, args.h, args.season_length, args.input_size or LOOKBACK,
                                        args.max_epochs, args.seed, vit=vit, stat_history=args.stat_history,
                                        seasons=args.seasons)))
    folder.check_models(f"models/{m.alias}" for m in built.values())     # before any work
    checkpoints = _checkpointed(built, args.out, args.resume)     # after every epoch, for --resume
    fresh = _fresh(args.out)
    if checkpoints:
        output_dir(args.out, "forecast.predict", names=_files_written(args, "predict"))   # before training: its
        # checkpoints go inside
        folder.start(checkpoints)
    with _unclaimed_on_refusal(args.out, fresh), engine_session(args) as engine, _warnings_as_lines():
        fc = forecast(df, assemble(args.models, built), h=args.h, season_length=args.season_length,
                      engine=engine, workers=args.workers,
                      levels=args.levels or (),
                      calibration_windows="auto" if args.calibration_windows is None else args.calibration_windows,
                      global_calibration=args.global_calibration,
                      input_size=args.input_size or _D["input_size"], short_series=args.short_series,
                      fallback_history=args.stat_history, progress=None)
    used = _stat_history_used(built)
    sizes = df.groupby(ID, sort=False).size()
    with _warnings_as_lines():
        season_forms = _season_forms(args, [int(n) for u, n in sizes.items() if str(u) in fc.last],
                                     _history_caps(args, used))
    written = _write_predict(args, fc, df, used, season_forms, inferred, checkpoints, folder)
    pd.set_option("display.width", 160)
    first = list(fc.last)[: args.plot_series]
    shown = fc.frame[fc.frame[ID].isin(first)].pivot(index="step", columns=ID, values=fc.models)
    shown = shown.reorder_levels([1, 0], axis=1)[[(u, m) for u in first for m in fc.models]]
    print(f"forecasts of the next {args.h} values (rows: step, columns: series and model; {len(first)} of "
          f"{len(fc.last)} series shown, every one in forecasts.csv with its timestamps)")
    print(shown.to_string(float_format=lambda v: f"{v:.4g}"))
    where = f"before each series' last {args.h} values"
    _print_stat_history(used, args.stat_history, where)
    for alias, choice in fc.choices.items():
        print(f"{alias} forecast with ({choice.validation_note(where)}): {choice.describe()}")
    if fc.short_series.get("ids"):
        print(f"short series ({fc.short_series['policy']}): {fc.short_series['reason']}; {fc.short_series['what']}")
    if fc.levels:
        own = ", and statsforecast's own for ETS, Theta and ARIMA" if any("/own" in k for k in fc.interval_share()) else ""
        few = fc.network_calibration_windows
        nets = (f" ({f'the last {few} for the networks, to keep their look-back; ' if few else ''}"
                f"{fc.global_calibration} for the networks)" if set(names) & {*NEURAL, "auto"} else "")
        print(f"intervals: conformal, sized by the errors of {fc.calibration_windows} window(s) of --h before each "
              f"series' end{nets}{own}" if fc.calibration_windows else
              f"intervals: no conformal ones (--calibration-windows 0){own}")
    missing = {(lab, float(lv)): s for lab, by in fc.interval_share().items() for lv, s in by.items() if s < 1}
    if missing:
        print(_missing_intervals_note(fc, df, args, missing))
    print(f"\nwrote in {args.out}: {', '.join(written)}")
    return 0


def _missing_intervals_note(fc, df, args: argparse.Namespace, missing: dict) -> str:
    """Why some forecasts have no interval, and, where the calibration errors are too few, what gives them: each
    level asked needs `errors_needed` errors per step over the series; a label calibrated on fewer windows (the
    networks, to keep their look-back) gets them from --calibration-windows, as far as the series hold windows."""
    from .intervals import errors_needed, windows_needed

    S = len(fc.last)
    lengths = df[df[ID].astype(str).isin(list(fc.last))].groupby(ID, sort=False).size()
    holds = max(0, (int(lengths.min()) - fc.season_length - 1) // fc.h) if len(lengths) else 0
    cures = []
    for (lab, lv), _ in missing.items():
        got = fc.network_calibration_windows if lab in fc.network_calibrated else fc.calibration_windows
        need, wanted = errors_needed(lv), windows_needed(lv, S)
        if got is None or got >= wanted:
            continue                        # enough windows: a flat history or a short series left it none
        few = f"{lab} has {got * S} calibration error(s) per step ({got} window(s) x {S} series), {lv:g} % needs {need}"
        if wanted <= holds:
            cures.append(f"{few}: --calibration-windows {wanted} gives it (every model then calibrates on "
                         f"{wanted} window(s)"
                         + ("; the networks' look-back may shorten: a warning then says so" if lab in
                            fc.network_calibrated else "") + ")")
        else:
            cures.append(f"{few}: {wanted} window(s) of each of the {S} series, more than the shortest holds "
                         f"({holds}); more series give it")
    shown = ", ".join(f"{lab} {lv:g}: {100 * (1 - v):.0f} %" for (lab, lv), v in missing.items())
    other = "a flat history, or a series shorter than its calibration windows or a season, leaves a series none"
    return f"no interval on some rows ({shown}): " + (f"{'; '.join(cures)} ({other} too)" if cures else other)


def _write_predict(args, fc, df, used: dict, season_forms: dict, inferred, checkpoints: list[str],
                   folder) -> list[str]:
    """Every file of a forecast in --out, before anything is printed (see `_write_backtest`); the names written."""
    from frozenvit.backbone.suite.artifacts import atomic_write_text, output_dir, write_json

    from .plots import plot_future, save_png

    out = output_dir(args.out, "forecast.predict", names=_files_written(args, "predict"))
    written = ["summary.json", "forecasts.csv", "forecasts.png"] + (["auto_weights.csv"] if fc.choices else []) \
        + [f"models/{alias}" for alias in fc.fitted]
    with _unfinished_on_interrupt(out, folder, written + checkpoints):
        atomic_write_text(out / "forecasts.csv", _as_read(fc.frame, args).to_csv(index=False))
        save_png(plot_future(fc, df, n_series=args.plot_series), out / "forecasts.png")
        if fc.choices:
            atomic_write_text(out / "auto_weights.csv", fc.auto_weights().to_csv(index=False))
        for alias, model in fc.fitted.items():
            model.save(out / "models" / alias)
        write_json(out / "summary.json", {"csv": str(args.csv),
                                          "stat_history": {"asked": args.stat_history, "used": used},
                                          **({"season_forms": season_forms} if season_forms else {}),
                                          **_seasons_record(args), **_filled_record(args),
                                          **({"defaults_from": inferred} if inferred else {}), **fc.to_dict()})
        folder.finish(written + checkpoints)        # nothing of an earlier run is left beside these
    return written


@contextlib.contextmanager
def _unfinished_on_interrupt(out: Path, folder, planned: list[str]) -> Iterator[None]:
    """Around the writing of a run's results: the folder's run record says it is unfinished until the last file is
    written (`RunFolder.writing`, `finish`), and a Ctrl-C meanwhile says so on stderr and how to complete it."""
    from .run_folder import RECORD

    folder.writing(planned)
    try:
        yield
    except KeyboardInterrupt:
        print(f"interrupted while writing the results: {out} is unfinished (its {RECORD} says so; its files may be "
              "partly this run's and partly an earlier one's); run the same command with --resume to complete it",
              file=sys.stderr)
        raise


def _cmd_backtest(args: argparse.Namespace) -> int:
    import pandas as pd

    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir
    from frozenvit.backbone.suite.engine import engine_from_args, engine_session

    from .backtest import backtest
    from .ensemble import assemble
    from .run_folder import RunFolder

    _check_backtest_args(args)
    vit = vit_options(args, flat_names(args.models))          # flags checked, the ViT loaded, before the data
    engine_from_args(args)                          # --workers without --ray fails before any work
    check_output_dir(args.out, "forecast.backtest", names=_files_written(args, "backtest"))   # a user's file too
    folder = RunFolder(args.out, args.resume)       # a stopped run there is continued with --resume only
    _say_unfinished(folder, args)
    df, inferred = _read_series(args)
    names = flat_names(args.models)
    calib = (CONFORMAL["calibration_windows"] if args.calibration_windows is None else args.calibration_windows) \
        if args.levels else 0
    built = dict(zip(names, make_models(names, args.h, args.season_length, args.input_size or LOOKBACK,
                                        args.max_epochs, args.seed, vit=vit, stat_history=args.stat_history,
                                        seasons=args.seasons)))
    folder.check_models(f"models/{m.alias}" for m in built.values())     # before any work
    checkpoints = _checkpointed(built, args.out, args.resume)     # after every epoch, for --resume
    fresh = _fresh(args.out)
    if checkpoints:
        output_dir(args.out, "forecast.backtest", names=_files_written(args, "backtest"))   # before training: its
        # checkpoints go inside
        folder.start(checkpoints)
    with _unclaimed_on_refusal(args.out, fresh), engine_session(args) as engine, _warnings_as_lines():
        res = backtest(df, assemble(args.models, built), h=args.h, n_windows=args.windows or _D["windows"],
                       step_size=args.step_size, season_length=args.season_length, refit_every=args.refit_every,
                       progress=None, mase_season=args.mase_season,   # None: a bar on a terminal, lines in a log
                       levels=args.levels or (), calibration_windows=calib,
                       global_calibration=args.global_calibration or CONFORMAL["global_calibration"],
                       engine=engine, workers=args.workers, input_size=args.input_size or _D["input_size"],
                       short_series=args.short_series, fallback_history=args.stat_history)
    hz = res.mase_by_horizon()
    used = _stat_history_used(built)
    with _warnings_as_lines():
        season_forms = _season_forms(args, _history_lengths(df, res.cutoffs()), _history_caps(args, used))
    written = _write_backtest(args, res, df, hz, used, season_forms, inferred, checkpoints, folder)
    pd.set_option("display.width", 160)
    steps = shown_steps(args.h)
    print("MASE by horizon step (rows: step, columns: model)"
          + ("" if len(steps) == args.h else f"; {len(steps)} of {args.h} steps, every one in mase_by_horizon.csv"))
    print(hz.T.loc[steps].to_string(float_format=lambda v: f"{v:.3f}"))
    print()
    print(res.summary().to_string(float_format=lambda v: f"{v:.4g}", na_rep="-"))
    for model, reason in res.dm_not_computed().items():     # "-", never a p-value of 1 that reads "no difference"
        print(f"{model}: dm_stat and p_value (Diebold-Mariano against {res.default_baseline}) {reason}")
    _print_stat_history(used, args.stat_history, "before the first cutoffs")
    first_cutoff = "before each series' first cutoff"
    for alias, choice in res.choices.items():
        print(f"{alias} forecast with ({choice.validation_note(first_cutoff)}): {choice.describe()}")
    if res.short_series.get("ids"):
        print(f"short series ({res.short_series['policy']}): {res.short_series['reason']}; {res.short_series['what']}")
    if res.mase_undefined:
        print(f"flat histories: {res.mase_undefined['reason']}; MASE and MSIS are over the other windows, "
              "sMAPE, MAE and MSE over all")
    if res.levels:
        print(f"\nintervals (conformal: calibrated on {calib} window(s) before the first cutoff and on earlier "
              "cutoffs; '/own': the model's own). width and MSIS over MASE's scale")
        iv = res.interval_summary()
        print(iv.to_string(float_format=lambda v: f"{v:.4g}"))
        if (iv["share"] < 1).any():
            from .intervals import errors_needed

            short = sorted({lv for (_, lv), share in iv["share"].items() if share < 1})
            needs = ", ".join(f"{lv:g} % needs {errors_needed(lv)}" for lv in short)
            print("share < 1: some windows have no interval: "
                  + ("a flat history gives no MASE scale to size one, or " if res.mase_undefined else "")
                  + f"too few calibration errors for that level ({needs} per step, over all series and the "
                  "windows before); more series, --windows or --calibration-windows give them")
    if res.members:
        print("\nDiebold-Mariano, each combination against its members (negative: the combination is better)")
        print(res.dm_vs_members().to_string(float_format=lambda v: f"{v:.4g}"))
    print(f"\nwrote in {args.out}: {', '.join(written)}")
    return 0


def _stat_history_used(built: dict) -> dict:
    """alias -> how much of each history the statistical models named in --models were fitted on (None: all),
    as their fits set it (`history_`; auto's candidates keep their own)."""
    return {m.alias: m.history_ for m in built.values() if hasattr(m, "history_")}


def _history_caps(args: argparse.Namespace, used: dict) -> dict:
    """ETS's and ARIMA's most values of a history fitted (None: all): what the named model used, else (auto's
    candidate) --stat-history N."""
    asked = args.stat_history if isinstance(args.stat_history, int) else None
    return {name: used.get(name, asked) for name in ("ETS", "ARIMA")}


def _history_lengths(df, cutoffs: dict) -> list[int]:
    """The length of each series' history at each of its cutoffs (`BacktestResult.cutoffs()`)."""
    import numpy as np

    out = []
    for uid, g in df.groupby(ID, sort=False):
        cs = cutoffs.get(str(uid))
        if cs:
            t = g[DS].to_numpy()
            out += np.searchsorted(t, np.asarray(cs, dtype=t.dtype), side="right").tolist()
    return out


def _print_stat_history(used: dict, asked, where: str) -> None:
    """The line saying what ETS, Theta and ARIMA were fitted on, and how --stat-history auto chose it."""
    if used:
        print("statistical models fitted on: " + ", ".join(
            f"{a} {'all of each history' if n is None else f'the last {n} values'}" for a, n in used.items())
            + (f" (--stat-history auto: validated {where})" if asked == "auto" else ""))


def _write_backtest(args, res, df, hz, used: dict, season_forms: dict, inferred, checkpoints: list[str],
                    folder) -> list[str]:
    """Every file of a backtest in --out, before anything is printed (a reader that closes the output early,
    `| head -1`, still leaves the results); the names written. summary.json comes last, and the folder's run record
    says the run is unfinished until then (`_unfinished_on_interrupt`)."""
    from frozenvit.backbone.suite.artifacts import atomic_write_text, output_dir, write_json

    from .plots import plot_coverage, plot_forecasts, plot_mase_by_horizon, save_png

    out = output_dir(args.out, "forecast.backtest", names=_files_written(args, "backtest"))
    written = ["summary.json", "forecasts.csv", "mase_by_horizon.csv", "forecasts.png", "mase_by_horizon.png"] \
        + (["auto_weights.csv"] if res.choices else []) + (["coverage_by_horizon.png"] if res.levels else []) \
        + [f"models/{alias}" for alias in res.fitted]
    with _unfinished_on_interrupt(out, folder, written + checkpoints):
        atomic_write_text(out / "forecasts.csv", _as_read(res.forecasts_with_intervals(), args).to_csv(index=False))
        atomic_write_text(out / "mase_by_horizon.csv", hz.to_csv())
        save_png(plot_forecasts(res, df, n_series=args.plot_series), out / "forecasts.png")
        save_png(plot_mase_by_horizon(res), out / "mase_by_horizon.png")
        if res.choices:
            atomic_write_text(out / "auto_weights.csv", res.auto_weights().to_csv(index=False))
        if res.levels:
            save_png(plot_coverage(res), out / "coverage_by_horizon.png")
        for alias, model in res.fitted.items():
            model.save(out / "models" / alias)
        write_json(out / "summary.json", {"csv": str(args.csv), "input_size": res.input_size,
                                          "stat_history": {"asked": args.stat_history, "used": used},
                                          "neural_lengths": res.neural_lengths,
                                          "short_series": res.short_series,
                                          **({"season_forms": season_forms} if season_forms else {}),
                                          **_seasons_record(args), **_filled_record(args),
                                          **({"defaults_from": inferred} if inferred else {}), **res.to_dict()})
        folder.finish(written + checkpoints)        # nothing of an earlier run is left beside these
    return written


def _paper_dataset(args: argparse.Namespace) -> tuple[str | None, str]:
    """(dataset or None, how it was found) from --dataset or the file name; refuses --minutely against ETTh."""
    from .paper import ETT, recognise

    dataset, source = (args.dataset, "--dataset") if args.dataset else (recognise(args.csv), "the file name")
    if dataset is not None and args.minutely and not ETT[dataset].minutely:
        raise UsageError(f"--minutely asks for ETTm borders but the dataset is {dataset} (from {source}), an hourly "
                         "file; drop --minutely, or pass --dataset ETTm1/ETTm2 if the file is one")
    return dataset, source


def _cmd_paper(args: argparse.Namespace) -> int:
    import pandas as pd

    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .data import long_to_wide, read_wide_csv
    from .paper import ETT, ETTH_BORDERS, ETTM_BORDERS, paper_config, paper_protocol, scores_table

    vit = vit_options(args, list(args.models))                 # flags checked, the ViT loaded, before the data
    if args.resume and args.out is None:
        raise UsageError("--resume continues from the checkpoints beside --out; pass the stopped run's --out")
    dataset, source = _paper_dataset(args)
    minutely = ETT[dataset].minutely if dataset else args.minutely
    borders = ETTM_BORDERS if minutely else ETTH_BORDERS
    if args.out is not None and args.out.parent.is_dir():
        check_output_file(args.out, "forecast.paper")     # a user's file is refused before any work
    values = long_to_wide(read_wide_csv(args.csv)).to_numpy(dtype=float)          # (T, C)
    if values.shape[0] < borders[2]:
        raise SeriesError(f"{args.csv} has {values.shape[0]} rows; the paper protocol needs {borders[2]} "
                          f"(train, validation and test end at rows {borders}); pass a full ETT file")
    check_output_file(args.out, "forecast.paper")         # now, as the data is fine: may create its folder
    if dataset:
        print(f"dataset {dataset} (from {source}): the official {dataset} scripts' hyperparameters, its published "
              f"rows beside ours; rows {borders}")
    else:
        print(f"dataset not recognised from the file name {args.csv.name!r}: no published reference is shown "
              f"(pass --dataset {'|'.join(PAPER_DATASETS)} if it is one); hyperparameters of the "
              f"{'ETTm1' if minutely else 'ETTh1'} scripts; rows {borders}")
    overrides = {k: v for k, v in (("max_epochs", args.max_epochs), ("patience", args.patience)) if v is not None}
    sub = {"windows_per_epoch": args.windows_per_epoch} if args.windows_per_epoch else {}
    used: dict[str, dict] = {}

    ckpt = None if args.out is None else args.out.parent / (args.out.name + ".ckpt")

    def make_model(name: str, h: int):
        model = paper_config(name, h, dataset, minutely=minutely, **overrides,
                             **(sub if name in ("patchtst", "vit") else {}), **(vit if name == "vit" else {}))
        used[f"{model.alias} H={h}"] = {k: v for k, v in model.recorded_params().items()
                                        if k not in ("progress", "device")}
        if ckpt is not None:
            model.set_params(checkpoint_dir=str(ckpt / f"{model.alias}_H{h}"), resume=args.resume)
        return model

    def report(s) -> None:
        print(f"{s.model:9s} H={s.h:4d}  MSE {s.mse:.3f}  MAE {s.mae:.3f}  ({s.n_test_windows} test windows, "
              f"{s.epochs} epochs, {s.seconds_per_epoch:.1f} s/epoch)", flush=True)

    scores = paper_protocol(values, args.horizons, args.models, borders=borders, make_model=make_model,
                            on_result=report)
    rows = scores_table(scores, dataset)
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out:
        write_json(args.out, {"csv": str(args.csv), "dataset": dataset, "dataset_from": source if dataset else None,
                              "borders": list(borders), "overrides": overrides, "hyperparameters": used,
                              "results": rows}, kind="forecast.paper", sealed=True)
    return 0
