"""One training loop for the neural forecasters (PatchTST, DLinear).

A neural forecaster is global: one network, trained on sliding windows drawn from every series
(and every channel: the networks are channel-independent). Windows are (C, L + h) slices of a
series array (T, C); the first L values are the input, the last h the target.
Training: Adam, a per-epoch learning-rate decay, early stopping on validation windows (the tail
of each training series, or explicit validation arrays), the best weights restored at the end.
Seeded: the same data and seed give the same weights, without touching the global RNG.
"""
from __future__ import annotations

import copy
import hashlib
import os
import time
from dataclasses import fields
from numbers import Integral, Real
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from sklearn.base import clone
from sklearn.utils._param_validation import Interval, StrOptions
from torch import nn

from frozenvit.backbone.suite.artifacts import (atomic_dir, check_tensor_metadata, read_config,
                                                 sort_tensor_metadata, tensor_metadata, write_json)
from frozenvit.backbone.suite.errors import ArtifactError, NotFittedError, ParameterError
from frozenvit.backbone.suite.progress import progress_bar

from .base import Forecaster
from .defaults import CONFORMAL, GLOBAL_CALIBRATIONS
from .errors import SeriesError
from .reuse import once

FORMAT_VERSION = 1
_REGISTRY: dict[str, type["NeuralForecaster"]] = {}


def at_least(low: float, kind: type = Integral) -> list:
    """A `_parameter_constraints` entry: a number >= low."""
    return [Interval(kind, low, None, closed="left")]


def share(closed: str = "left") -> list:
    """A `_parameter_constraints` entry: a number in [0, 1) (a dropout), or as `closed` says."""
    return [Interval(Real, 0, 1, closed=closed)]


# the training loop's hyperparameters, shared by every NeuralForecaster (each adds its network's)
TRAINING_CONSTRAINTS = {
    "h": at_least(1), "input_size": at_least(1), "loss": [StrOptions({"mse", "mae"})],
    "normalize_loss": ["boolean"], "lr": [Interval(Real, 0, None, closed="neither")], "lr_decay": share("right"),
    "lr_decay_after": at_least(0), "lr_schedule": [StrOptions({"step", "onecycle"})], "pct_start": share("neither"),
    "max_epochs": at_least(1), "patience": at_least(1), "batch_size": at_least(1),
    "windows_per_epoch": at_least(1) + [None], "val_size": at_least(0) + [None], "seed": at_least(0),
    "progress": ["boolean", None], "device": [str], "checkpoint_dir": [str, os.PathLike, None],
    "resume": ["boolean"]}


def as_2d(a: np.ndarray, what: str = "series", dtype: type = np.float32) -> np.ndarray:
    """(T,) or (T, C) -> (T, C) of `dtype`; raises SeriesError on NaN/inf or bad rank."""
    a = np.asarray(a, dtype=dtype)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise SeriesError(f"{what} must be (T,) or (T, C), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise SeriesError(f"{what} contains NaN/inf; fill the gaps first, e.g. validate(df, fill='ffill') or "
                          "read_long_csv(path, fill='ffill')")
    return a


def _got(x: object) -> str:
    """How a wrong argument reads in an error: its type and, for an array, its shape."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return f"{type(x).__name__} of shape {tuple(shape)}"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of {len(x)} items"
    return f"{type(x).__name__} {x!r}"[:80]


def series_list(series: object, alias: str) -> list:
    """`fit`'s series as a list of arrays; SeriesError, with the call to write, where one series (a 1-D or 2-D
    array, a list of numbers) or a number is given instead of a list of series."""
    cure = (f"{alias}.fit takes a list of series, each (T,) or (T, C), and trains one network on all of them: "
            f"write {alias}.fit([y]) for one series, {alias}.fit([y1, y2]) for several")
    if isinstance(series, np.ndarray) and series.ndim == 2:
        raise SeriesError(f"{cure} (a 2-D array is ambiguous: {alias}.fit([a]) takes it as one series of shape "
                          f"(T, C), {alias}.fit(list(a)) its rows as series); got {_got(series)}")
    if isinstance(series, (str, bytes)) or not np.iterable(series):
        raise SeriesError(f"{cure}; got {_got(series)}")
    out = list(series)
    if any(np.ndim(a) == 0 for a in out):
        raise SeriesError(f"{cure}; got {_got(series)}, whose items are single values, not series")
    return out


def check_device(device: str, alias: str) -> None:
    """ParameterError for a `device` torch cannot parse, or a CUDA or MPS device this machine lacks."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError(f"{alias}: device={device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:1' or "
                             "'mps'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"{alias}: device={device!r}, but torch sees no CUDA device here; use device='cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ParameterError(f"{alias}: device={device!r}, but torch sees {torch.cuda.device_count()} CUDA "
                             f"device(s) here (cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ParameterError(f"{alias}: device={device!r}, but torch sees no MPS device here; use device='cpu'")


# float32, the networks' precision, holds about 7 significant digits: a meter around 1e8 that counts by 10 moves
# by about one float32 step. Where float32 would round a series by more than this share of its mean absolute step,
# the windows are centred in float64 first (`loses_precision`, `WindowSet`).
F32_STEP_SHARE = 1e-3


def loses_precision(arrays: Sequence[np.ndarray]) -> bool:
    """Whether float32 would round the values of some array ((T,) or (T, C)) by more than
    F32_STEP_SHARE of its mean absolute step: a series whose level is large next to its movements. A constant
    one loses nothing that matters (at most ~6e-8 of its level)."""
    for a in arrays:
        a = np.asarray(a, dtype=np.float64)
        if len(a) < 2:
            continue
        level = np.abs(a).max(axis=0)                                           # per channel
        step = np.abs(np.diff(a, axis=0)).mean(axis=0)
        if ((step > 0) & (level * 2.0 ** -24 > F32_STEP_SHARE * step)).any():
            return True
    return False


# The normalised loss divides each window by its look-back's std, floored at this share of its series' std
# (over the array it was drawn from): a flat look-back before a change weighs at most 1 / LOSS_FLOOR times
# a typical window, in any units (an absolute floor, as sqrt(var + 1e-5), is not scale-free).
LOSS_FLOOR = 1e-3


class WindowSet:
    """All (series, start) windows of length L + h over a list of (T_i, C) arrays, gathered lazily.

    `starts` (one array per series) are the windows' first positions; see `NeuralForecaster.fit`.
    Each window also carries its series' loss floor: LOSS_FLOOR times that array's population std
    per channel, so that the normalised loss is the same in any units.

    With `centre` (float64 arrays), each window less its last look-back value before the cast to float32,
    so that a series around 1e8 that moves by 10 keeps its steps. Exact for a network that normalises each
    window itself (RevIN), whose forecast then moves with its input; the loss, on forecast minus target and
    the look-back's spread, is unchanged. Without it, the windows are the float32 arrays' values.
    """

    def __init__(self, arrays: Sequence[np.ndarray], input_size: int, h: int,
                 starts: Sequence[np.ndarray], centre: bool = False) -> None:
        self.L, self.h, self.centre = input_size, h, centre
        self.buffer = torch.from_numpy(np.concatenate(arrays, axis=0))               # (sum T, C)
        offsets = np.cumsum([0] + [len(a) for a in arrays[:-1]])
        self.rows = np.concatenate([o + s for o, s in zip(offsets, starts)]).astype(np.int64)  # (n,)
        floors = np.stack([LOSS_FLOOR * a.std(axis=0, dtype=np.float64) if len(a) else np.zeros(a.shape[1])
                           for a in arrays])                                                    # (S, C)
        which = np.repeat(np.arange(len(arrays)), [len(s) for s in starts])                     # (n,)
        self.floors = torch.from_numpy(floors[which].astype(np.float32))                        # (n, C)

    def __len__(self) -> int:
        return int(self.rows.size)

    def batch(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """idx (B,) -> inputs (B, C, L), targets (B, C, h)."""
        r = torch.from_numpy(self.rows[idx])[:, None] + torch.arange(self.L + self.h)   # (B, L + h)
        w = self.buffer[r].transpose(1, 2)                                              # (B, C, L + h)
        if self.centre:
            w = (w - w[..., self.L - 1: self.L]).float()                                # in float64, then cast
        return w[..., : self.L], w[..., self.L:]

    def floor(self, idx: np.ndarray) -> torch.Tensor:
        """idx (B,) -> the windows' loss floors (B, C, 1), in the data's units."""
        return self.floors[torch.from_numpy(np.asarray(idx, dtype=np.int64))][..., None]


def _starts(T: int, L: int, h: int, lo: int, hi: int) -> np.ndarray:
    """Window starts s whose targets [s + L, s + L + h) lie inside [lo, hi)."""
    first, last = max(lo - L, 0), hi - L - h
    return np.arange(first, last + 1) if last >= first else np.empty(0, dtype=np.int64)


class NeuralForecaster(Forecaster):
    """Base of the neural forecasters: training, prediction, backtest windows, save/load.

    A subclass defines `__init__` (hyperparameters only, stored under their own names) and two
    class attributes: `config_class`, a frozen dataclass of the network's shape whose fields are
    taken from the hyperparameters of the same name, and `net_class`, the nn.Module built from it,
    mapping (B, C, L) -> (B, C, h).
    """

    config_class: type
    net_class: type[nn.Module]
    _parameter_constraints = TRAINING_CONSTRAINTS

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        _REGISTRY[cls.__name__] = cls

    @property
    def net_config(self):
        """The network's configuration (a `config_class` instance) from these hyperparameters."""
        params = self.get_params()
        return self.config_class(**{f.name: params[f.name] for f in fields(self.config_class) if f.name in params})

    def _build(self) -> nn.Module:
        return self.net_class(self.net_config)

    def check_params(self) -> "NeuralForecaster":
        """Each hyperparameter (`_parameter_constraints`), then the network's shape (`config_class` raises
        ParameterError) and the validation tail, which must hold a whole horizon or be 0."""
        super().check_params()
        self.net_config
        vs = self.val_size
        if vs is not None and 0 < int(vs) < int(self.h):
            raise ParameterError(f"val_size={vs} is shorter than the horizon h={self.h}; use >= h or 0")
        check_device(self.device, self.alias)
        return self

    def horizon_problem(self, h: int, task: str = "backtest") -> str | None:
        """A network forecasts the h it was built with, and no other."""
        if int(h) != int(self.h):
            return (f"{self.alias} forecasts h={self.h} steps but the {task} asks for h={h}; build the model with "
                    f"the {task}'s horizon: {type(self).__name__}(h={h}, ...)")
        return None

    def _centres(self, arrays: Sequence[np.ndarray]) -> bool:
        """Whether windows of `arrays` are centred on their last look-back value in float64 before the float32
        cast (`WindowSet`): where float32 would lose their steps (`loses_precision`) and the network normalises
        each window itself (RevIN), which makes centring exact. Elsewhere the float32 values are used as they are."""
        return bool(getattr(self.net_config, "revin", False)) and loses_precision(arrays)

    def min_history(self) -> int:
        """Values a series needs to give one training window and its validation tail."""
        tail = int(self.h) if self.val_size is None else int(self.val_size)
        return int(self.input_size) + int(self.h) + tail

    # -- training -----------------------------------------------------------------------
    def fit(self, series: Sequence[np.ndarray], val: Sequence[np.ndarray] | None = None) -> "NeuralForecaster":
        """Train on windows of `series` (each (T,) or (T, C), same C for all).

        Without `val`, the last `val_size` steps (default h; 0 disables early stopping) of every
        series hold the validation targets and training targets end before them. With `val`,
        every window of those arrays validates and every window of `series` trains.

        With `checkpoint_dir`, the whole training state is written there (atomically) after every
        epoch; with `resume` too, a checkpoint found there is continued, to the same weights an
        uninterrupted run reaches (`forecasting.checkpoint`).
        """
        self.check_params()
        L, h = int(self.input_size), int(self.h)
        arrays = [as_2d(a, dtype=np.float64) for a in series_list(series, self.alias)]
        if not arrays:
            raise SeriesError(f"{self.alias}.fit needs at least one series")
        if len({a.shape[1] for a in arrays}) > 1:
            raise SeriesError("all training arrays must have the same number of channels")
        given_val = None if val is None else [as_2d(a, "validation array", np.float64)
                                              for a in series_list(val, self.alias)]
        centre = self._centres(arrays + (given_val or []))
        if not centre:                  # the network's float32 values (float64 only to centre them: WindowSet)
            arrays = [a.astype(np.float32) for a in arrays]
            given_val = None if val is None else [a.astype(np.float32) for a in given_val]
        if val is None:
            vs = h if self.val_size is None else int(self.val_size)
            tr_starts = [_starts(len(a), L, h, 0, len(a) - vs) for a in arrays]
            va_arrays = arrays
            va_starts = [_starts(len(a), L, h, len(a) - vs, len(a)) if vs else np.empty(0, int) for a in arrays]
        else:
            va_arrays = given_val
            tr_starts = [_starts(len(a), L, h, 0, len(a)) for a in arrays]
            va_starts = [_starts(len(a), L, h, 0, len(a)) for a in va_arrays]
        train = WindowSet(arrays, L, h, tr_starts, centre)
        valid = WindowSet(va_arrays, L, h, va_starts, centre)
        if len(train) == 0:
            need = L + h + (0 if val is not None else (h if self.val_size is None else int(self.val_size)))
            raise SeriesError(f"no training window: every series needs at least {need} values "
                              f"(look-back {L} + horizon {h} + validation tail); the longest has "
                              f"{max(len(a) for a in arrays)}")
        stamp = None
        if self.checkpoint_dir:
            from .checkpoint import fingerprint
            stamp = fingerprint(self.recorded_params(), arrays + ([] if val is None else va_arrays))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.seed))
            self._train(train, valid, stamp)
        return self

    def _loss(self) -> nn.Module:
        return nn.MSELoss() if self.loss == "mse" else nn.L1Loss()

    def _window_loss(self, crit: nn.Module, pred: torch.Tensor, y: torch.Tensor, x: torch.Tensor,
                     floor: torch.Tensor | None = None) -> torch.Tensor:
        """The loss on each window's own scale when `normalize_loss` (forecast and target divided by
        the look-back's population std, floored at `floor` (B, C, 1): its series' scale times LOSS_FLOOR),
        so series of very different magnitudes weigh alike, and the loss is the same in any units;
        otherwise on the data's scale (the paper's choice, on globally standardised data). A window of a
        constant series (std and floor 0) is divided by 1: its error is 0 where the forecast is that constant."""
        if self.normalize_loss:
            var = x.var(dim=-1, keepdim=True, unbiased=False)                       # (B, C, 1)
            s = torch.sqrt(var if floor is None else var + floor * floor)          # (B, C, 1)
            s = torch.where(s > 0, s, torch.ones_like(s))
            return crit(pred / s, y / s)
        return crit(pred, y)

    def _scheduler(self, opt: torch.optim.Optimizer, steps_per_epoch: int):
        """None for the per-epoch decay ("step"); torch's OneCycleLR, stepped per batch, for "onecycle":
        the PatchTST paper's schedule (its scripts' `--lradj TST`, which build this very OneCycleLR: warm-up
        over `pct_start` of all steps, then cosine annealing, with OneCycleLR's div_factor and final floor),
        kept as the scripts have it so that the paper protocol reproduces the paper."""
        if self.lr_schedule == "step":
            return None
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, epochs=int(self.max_epochs),
                                                   steps_per_epoch=steps_per_epoch, pct_start=self.pct_start)

    def _train(self, train: WindowSet, valid: WindowSet, stamp: dict) -> None:
        from . import checkpoint

        dev = torch.device(self.device)
        net = self._build().to(dev)
        crit = self._loss()
        opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=self.lr)   # not frozen ones
        rng = np.random.default_rng(int(self.seed))
        n_per_epoch = len(train) if not self.windows_per_epoch else min(len(train), int(self.windows_per_epoch))
        sched = self._scheduler(opt, -(-n_per_epoch // int(self.batch_size)))
        ckpt = Path(self.checkpoint_dir) if self.checkpoint_dir else None
        if ckpt is not None and self.resume and (ckpt / "state.json").is_file():
            st = checkpoint.load(ckpt, net, opt, sched, rng, stamp)
        else:
            st = checkpoint.TrainingState()
        self.history_: list[dict] = st.history
        epochs = range(st.epoch, 0 if st.stopped else int(self.max_epochs))
        # counted by hand once each epoch's losses are set, so that every line shows one epoch's count and losses
        bar = progress_bar(None, initial=st.epoch, total=int(self.max_epochs), desc=self.alias, unit="epoch",
                           leave=False, mininterval=0,        # in a log file: a line after every epoch
                           disable=None if self.progress is None else not self.progress)
        with bar:
            self._epochs(epochs, bar, net, crit, opt, sched, rng, train, valid, n_per_epoch, st, ckpt, stamp, dev)
        if st.best_state is not None:
            net.load_state_dict(st.best_state)
        self.best_val_loss_ = st.best if st.best_state is not None else float("nan")
        self.net_ = net.eval().cpu()

    def _epochs(self, epochs: range, bar, net: nn.Module, crit: nn.Module, opt: torch.optim.Optimizer, sched, rng,
                train: WindowSet, valid: WindowSet, n_per_epoch: int, st, ckpt: Path | None, stamp: dict,
                dev: torch.device) -> None:
        """The epochs of `_train`, each counted on `bar` once its losses are shown; stops early on `st.stopped`."""
        from . import checkpoint

        for epoch in epochs:
            lr = self.lr * self.lr_decay ** max(0, epoch - self.lr_decay_after)
            if sched is None:
                for g in opt.param_groups:
                    g["lr"] = lr
            else:
                lr = opt.param_groups[0]["lr"]
            t0 = time.perf_counter()
            net.train()
            order = rng.permutation(len(train))[:n_per_epoch]
            total, count = 0.0, 0
            for i in range(0, n_per_epoch, int(self.batch_size)):
                idx = order[i: i + int(self.batch_size)]
                x, y = train.batch(idx)
                x, y = x.to(dev), y.to(dev)                                   # (B, C, L), (B, C, h)
                loss = self._window_loss(crit, net(x), y, x, train.floor(idx).to(dev))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if sched is not None:
                    sched.step()
                total, count = total + float(loss.detach()) * x.shape[0], count + x.shape[0]
            seconds = time.perf_counter() - t0
            vloss = self._evaluate(net, valid, crit) if len(valid) else float("nan")
            self.history_.append({"epoch": epoch, "lr": lr, "train_loss": total / max(count, 1),
                                  "val_loss": vloss, "seconds": seconds})
            bar.set_postfix(train=f"{total / max(count, 1):.4f}", val=f"{vloss:.4f}", refresh=False)
            if len(valid):
                if vloss < st.best:
                    st.best, st.best_state, st.bad = vloss, copy.deepcopy(net.state_dict()), 0
                else:
                    st.bad += 1
                    st.stopped = st.bad >= int(self.patience)
            st.epoch = epoch + 1
            if ckpt is not None:
                checkpoint.save(ckpt, net, opt, sched, rng, st, stamp)
            bar.update(1)                       # this epoch's count, with its losses
            if st.stopped:
                break

    @torch.no_grad()
    def _evaluate(self, net: nn.Module, data: WindowSet, crit: nn.Module) -> float:
        net.eval()
        dev = next(net.parameters()).device
        total = 0.0
        for i in range(0, len(data), 1024):
            idx = np.arange(i, min(i + 1024, len(data)))
            x, y = data.batch(idx)
            x, y = x.to(dev), y.to(dev)
            total += float(self._window_loss(crit, net(x), y, x, data.floor(idx).to(dev))) * x.shape[0]
        return total / len(data)

    # -- prediction ---------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, contexts: np.ndarray | Sequence[np.ndarray], batch_size: int = 1024) -> np.ndarray:
        """Forecast the next h steps after each context.

        contexts: (N, T) or (N, T, C) array, or a list of N series (T_i,) with T, T_i >= input_size;
        only the last input_size values are used. Returns (N, h) or (N, h, C), float64. SeriesError for one
        series given alone (a 1-D array: write predict([y])) or a number (the local models' predict(h)).
        """
        if not hasattr(self, "net_"):
            raise NotFittedError(f"{self.alias} is not fitted; call fit(series) first")
        L, given = int(self.input_size), contexts
        if isinstance(contexts, np.ndarray) and contexts.ndim in (2, 3):
            squeeze = contexts.ndim == 2
            short = contexts.shape[1]
            ctx = contexts[:, -L:] if short >= L else None
        else:
            single = isinstance(contexts, (str, bytes, np.ndarray)) or not np.iterable(contexts)
            contexts = [] if single else list(contexts)
            if single or any(np.ndim(c) == 0 for c in contexts):
                raise SeriesError(f"{self.alias}.predict takes contexts, one per series to forecast, and forecasts "
                                  f"the h={self.h} steps after each (h is set when the model is built): write "
                                  f"{self.alias}.predict([y]) for one series, {self.alias}.predict([y1, y2]) or an "
                                  f"(N, T) array for several (the last input_size={L} values of each are used); "
                                  f"got {_got(given)}")
            squeeze = True
            lens = [len(c) for c in contexts]
            short = min(lens) if lens else L
            ctx = np.stack([np.asarray(c)[-L:] for c in contexts]) if short >= L else None
        if ctx is None:
            raise SeriesError(f"{self.alias} needs contexts of at least input_size={L} values, got {short}")
        ctx = np.asarray(ctx, dtype=np.float64)
        if not np.isfinite(ctx).all():
            raise SeriesError("contexts contain NaN/inf; fill the gaps first, e.g. validate(df, fill='ffill') or "
                              "read_long_csv(path, fill='ffill')")
        ctx = ctx if ctx.ndim == 3 else ctx[..., None]                                   # (N, L, C)
        centre = ctx[:, -1:] if self._centres(ctx) else np.zeros_like(ctx[:, -1:])   # (N, 1, C): as WindowSet
        x = torch.from_numpy((ctx - centre).astype(np.float32)).transpose(1, 2)          # (N, C, L)
        outs = [self.net_(x[i: i + batch_size]) for i in range(0, x.shape[0], batch_size)]
        y = torch.cat(outs).transpose(1, 2).double().numpy() + centre                    # (N, h, C)
        return y[..., 0] if squeeze else y

    # -- backtest windows ---------------------------------------------------------------
    def forecast_cutoffs(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, *,
                         refit_every: int | None = None, progress: bool | None = None
                         ) -> tuple[np.ndarray, "NeuralForecaster"]:
        """Train a fresh copy on every series' history before the first cutoff (again every
        `refit_every` windows, on the history before that window), then forecast each window from
        the input_size values before its cutoff (see `Forecaster.forecast_cutoffs`). With
        `checkpoint_dir`, each training checkpoints in its own subfolder, named by its cutoffs."""
        preds, _, fitted = self._forecast(series, cutoffs, h, refit_every, progress)
        return preds, fitted

    def calibration_problem(self, cutoffs: np.ndarray, calib_cutoffs: np.ndarray, h: int,
                            global_calibration: str) -> str | None:
        """"holdout" needs every calibration window inside the validation tail that the model of the
        first cutoff c_0 holds out of training: targets in [c_0 - val_size, c_0)."""
        calib_cutoffs, cutoffs = np.asarray(calib_cutoffs), np.asarray(cutoffs)
        if global_calibration != "holdout" or calib_cutoffs.shape[1] == 0:
            return None
        tail = int(self.h) if self.val_size is None else int(self.val_size)
        first = cutoffs[:, :1]
        if (calib_cutoffs < first - tail).any() or (calib_cutoffs + int(h) > first).any():
            K = calib_cutoffs.shape[1]
            return (f"{self.alias}: holdout calibration forecasts the {K} calibration window(s) of h={h} with the "
                    f"model of the first cutoff, so they must lie inside the validation tail it holds out of "
                    f"training (val_size={tail} steps; {K} x {h} do not fit): use --calibration-windows "
                    f"{tail // int(h)} (calibration_windows=), a val_size >= {K * int(h)}, or "
                    "--global-calibration retrain (global_calibration='retrain')")
        return None

    def forecast_with_calibration(self, series: Sequence[np.ndarray], cutoffs: np.ndarray,
                                  calib_cutoffs: np.ndarray, h: int, *, refit_every: int | None = None,
                                  progress: bool | None = None,
                                  global_calibration: str = CONFORMAL["global_calibration"]
                                  ) -> tuple[np.ndarray, np.ndarray, "NeuralForecaster"]:
        """See `Forecaster.forecast_with_calibration`. "holdout": the model trained for the first cutoff
        c_0 also forecasts the calibration windows, which must lie inside the validation tail it held out
        of training (targets in [c_0 - val_size, c_0): never a gradient step's target, only early
        stopping's); so the calibration errors are this network's, not a second training's, and no
        second training is run. "retrain": the calibration windows are forecast as a backtest of their
        own, by a model trained on the history before the first of them."""
        if global_calibration not in GLOBAL_CALIBRATIONS:
            raise ParameterError(f"global_calibration must be one of {GLOBAL_CALIBRATIONS}, "
                                 f"got {global_calibration!r}")
        calib_cutoffs, cutoffs = np.asarray(calib_cutoffs), np.asarray(cutoffs)
        if global_calibration == "retrain" or calib_cutoffs.shape[1] == 0:
            return super().forecast_with_calibration(series, cutoffs, calib_cutoffs, h, refit_every=refit_every,
                                                     progress=progress, global_calibration=global_calibration)
        problem = self.calibration_problem(cutoffs, calib_cutoffs, h, global_calibration)
        if problem:
            raise SeriesError(problem)
        return self._forecast(series, cutoffs, h, refit_every, progress, calib_cutoffs)

    def _forecast(self, series: Sequence[np.ndarray], cutoffs: np.ndarray, h: int, refit_every: int | None,
                  progress: bool | None, calib_cutoffs: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray | None, "NeuralForecaster"]:
        """forecast_cutoffs' forecasts and model; with `calib_cutoffs`, the first training's model
        forecasts those windows too (S, K, h)."""
        problem = self.horizon_problem(h)
        if problem:
            raise SeriesError(problem)
        L, n_windows = int(self.input_size), cutoffs.shape[1]
        every = refit_every or n_windows
        out = np.empty((len(series), n_windows, h))
        calib = None
        fitted = self

        def look_back(cuts: np.ndarray, w: int) -> np.ndarray:
            return np.stack([y[c[w] - L: c[w]] for y, c in zip(series, cuts)])            # (S, L)

        for w0 in range(0, n_windows, every):
            history = [y[: c[w0]] for y, c in zip(series, cutoffs)]                        # history only
            fitted = once(self, "fit", history, lambda: self._fresh(progress, cutoffs[:, w0]).fit(history))
            for w in range(w0, min(w0 + every, n_windows)):
                out[:, w] = fitted.predict(look_back(cutoffs, w))                             # (S, h)
            if w0 == 0 and calib_cutoffs is not None:
                calib = np.stack([fitted.predict(look_back(calib_cutoffs, k))
                                  for k in range(calib_cutoffs.shape[1])], axis=1)            # (S, K, h)
        return out, calib, fitted

    def _fresh(self, progress: bool | None, cutoffs: np.ndarray) -> "NeuralForecaster":
        """An unfitted copy for the training that stops at `cutoffs` (S,); with `checkpoint_dir`, its
        checkpoints in a subfolder of its own, named by those cutoffs."""
        fresh = clone(self) if progress is None else clone(self).set_params(progress=progress)
        if self.checkpoint_dir:
            key = hashlib.sha256(np.ascontiguousarray(cutoffs, dtype=np.int64).tobytes()).hexdigest()
            fresh.set_params(checkpoint_dir=str(Path(self.checkpoint_dir) / f"cutoffs-{key[:12]}"))
        return fresh

    # -- artifacts ----------------------------------------------------------------------
    def recorded_params(self) -> dict:
        """The hyperparameters as saved with the model and fingerprinted by checkpoints (JSON values)."""
        return {k: v for k, v in self.get_params().items()
                if k not in ("checkpoint_dir", "resume") and not (k == "alias" and v is None)}

    @classmethod
    def _from_params(cls, params: dict, path: Path, **kw) -> "NeuralForecaster":
        """The unfitted model a saved `params` describes; `kw` are `load`'s extra arguments."""
        return cls(**params, **kw)

    def save(self, path: str | Path) -> Path:
        """Write a directory: config.json (hyperparameters, history) + model.safetensors."""
        from safetensors.torch import save_file

        if not hasattr(self, "net_"):
            raise NotFittedError(f"{self.alias} is not fitted; nothing to save")
        with atomic_dir(path, f"forecasting.{type(self).__name__}", flag="output") as tmp:
            cfg = {"kind": f"forecasting.{type(self).__name__}", "format_version": FORMAT_VERSION,
                   "class": type(self).__name__, "history": self.history_,
                   "params": self.recorded_params()}
            save_file({k: v.contiguous() for k, v in self.net_.state_dict().items()}, str(tmp / "model.safetensors"),
                      metadata=tensor_metadata(cfg))
            sort_tensor_metadata(tmp / "model.safetensors")
            write_json(tmp / "config.json", cfg)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path, **kw) -> "NeuralForecaster":
        """Load a saved forecaster (of this class, or any when called on the base class); `kw` go to the
        class's `_from_params` (FrozenViTForecaster: `backbone=`)."""
        import json

        from safetensors.torch import load_file

        if Path(path).is_file():
            raise ArtifactError(f"{path} is a file; pass the folder that save() wrote: "
                                f"{cls.__name__}.load({str(Path(path).parent)!r})")
        try:
            raw = json.loads((Path(path) / "config.json").read_text())
        except (OSError, ValueError):     # read_config below says what is wrong
            raw = {}
        name = raw.get("class", "") if isinstance(raw, dict) else ""
        klass = _REGISTRY.get(name, cls) if cls is NeuralForecaster else cls
        cfg = read_config(path, f"forecasting.{klass.__name__}", FORMAT_VERSION)
        check_tensor_metadata(Path(path) / "model.safetensors", cfg)
        try:
            model = klass._from_params(dict(cfg["params"]), Path(path), **kw)
        except (KeyError, TypeError) as e:
            raise ArtifactError(f"{path}/config.json has no valid {klass.__name__} parameters ({e}); "
                                "the artifact is corrupt, write it again") from e
        net = model._build()
        net.load_state_dict(load_file(str(Path(path) / "model.safetensors")))
        model.net_, model.history_ = net.eval(), cfg.get("history", [])
        return model
