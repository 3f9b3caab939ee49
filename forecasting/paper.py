"""The PatchTST paper's protocol on the ETT files, so numbers compare with its table.

Rows are split 12/4/4 months (ETTh: [0, 8640), [8640, 11520), [11520, 14400); ETTm, at 15-minute
rows, four times those); each dataset runs with its official scripts' hyperparameters and is
compared with its own published rows (`ETT`), an unrecognised file with none; a StandardScaler
is fitted on the training rows only; validation and test windows take their look-back from the
rows before their segment; every test window is counted (the paper's code dropped the last
partial batch); MSE and MAE are computed on the standardised scale and averaged over windows,
horizon steps and channels.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from .dlinear import DLinear
from .errors import SeriesError
from .patchtst import PatchTST
from .training import NeuralForecaster

ETTH_BORDERS = (12 * 30 * 24, 16 * 30 * 24, 20 * 30 * 24)     # 12, 4, 4 months of hours: 8640, 11520, 14400
ETTM_BORDERS = tuple(4 * b for b in ETTH_BORDERS)             # of quarter-hours: 34560, 46080, 57600


@dataclass(frozen=True)
class EttDataset:
    """One ETT file as the official scripts run it: its split, its hyperparameters, its published rows.

    Hyperparameters: PatchTST from yuqinie98/PatchTST PatchTST_supervised/scripts/PatchTST/<name>.sh (the
    flags the script sets; the rest are run_longExp.py's defaults), DLinear from cure-lab/LTSF-Linear
    scripts/EXP-LongForecasting/Linear/<name>.sh (model DLinear; run_longExp.py: 10 epochs, patience 3,
    lr halved every epoch from the 3rd). Published MSE/MAE at look-back 336: PatchTST/42 and DLinear of Table 3 of
    the PatchTST paper (Nie et al., ICLR 2023), read from the FITS paper's table, which repeats that table's rows,
    and the DLinear rows checked against the TSMixer paper's; the two differ only in DLinear's ETTm2 h=96 MAE
    (FITS 0.262, TSMixer 0.260: 0.260 kept).
    """
    name: str
    minutely: bool                                  # 15-minute rows (ETTm) or hourly (ETTh)
    patchtst: dict                                  # the script's PatchTST settings that differ by dataset
    dlinear_batch: int
    dlinear_lr: dict[int, float]                    # horizon -> learning rate (ETTm2's script changes it at 336)
    published: dict[str, dict[int, tuple[float, float]]]   # model -> horizon -> (MSE, MAE)

    @property
    def borders(self) -> tuple[int, int, int]:
        return ETTM_BORDERS if self.minutely else ETTH_BORDERS


_ETTH_PATCHTST = dict(d_model=16, n_heads=4, d_ff=128, dropout=0.3, patience=100, lr_schedule="step")
_ETTM_PATCHTST = dict(d_model=128, n_heads=16, d_ff=256, dropout=0.2, patience=20, lr_schedule="onecycle",
                      pct_start=0.4)
ETT = {d.name: d for d in (
    EttDataset("ETTh1", False, _ETTH_PATCHTST, 32, dict.fromkeys((96, 192, 336, 720), 0.005), {
        "PatchTST": {96: (0.375, 0.399), 192: (0.414, 0.421), 336: (0.431, 0.436), 720: (0.449, 0.466)},
        "DLinear": {96: (0.375, 0.399), 192: (0.405, 0.416), 336: (0.439, 0.443), 720: (0.472, 0.490)}}),
    EttDataset("ETTh2", False, _ETTH_PATCHTST, 32, dict.fromkeys((96, 192, 336, 720), 0.05), {
        "PatchTST": {96: (0.274, 0.336), 192: (0.339, 0.379), 336: (0.331, 0.380), 720: (0.379, 0.422)},
        "DLinear": {96: (0.289, 0.353), 192: (0.383, 0.418), 336: (0.448, 0.465), 720: (0.605, 0.551)}}),
    EttDataset("ETTm1", True, _ETTM_PATCHTST, 8, dict.fromkeys((96, 192, 336, 720), 1e-4), {
        "PatchTST": {96: (0.290, 0.342), 192: (0.332, 0.369), 336: (0.366, 0.392), 720: (0.420, 0.424)},
        "DLinear": {96: (0.299, 0.343), 192: (0.335, 0.365), 336: (0.369, 0.386), 720: (0.425, 0.421)}}),
    EttDataset("ETTm2", True, _ETTM_PATCHTST, 32, {96: 0.001, 192: 0.001, 336: 0.01, 720: 0.01}, {
        "PatchTST": {96: (0.165, 0.255), 192: (0.220, 0.292), 336: (0.278, 0.329), 720: (0.367, 0.385)},
        "DLinear": {96: (0.167, 0.260), 192: (0.224, 0.303), 336: (0.281, 0.342), 720: (0.397, 0.421)}}),
)}
# ETTh2 only: PatchTST/42 re-run counting every test window (the published rows dropped the last partial batch).
PATCHTST_ALL_WINDOWS_MSE = {"ETTh2": {96: 0.274, 192: 0.338, 336: 0.367, 720: 0.391}}


def recognise(path: str | Path) -> str | None:
    """The ETT dataset a file name names ('ETTh1.csv', 'my_ettm2_copy.csv' -> 'ETTm2'), else None."""
    found = {name for name in ETT if name.lower() in Path(path).name.lower()}
    return found.pop() if len(found) == 1 else None


def paper_config(model: str, h: int, dataset: str | None, input_size: int = 336, minutely: bool = False,
                 **overrides) -> NeuralForecaster:
    """The official scripts' hyperparameters for `dataset` (one of ETT); `overrides` win.

    `dataset=None` (a file that is no ETT file we know): ETTh1's settings, or ETTm1's when `minutely`.
    DLinear's learning rate on a horizon the scripts do not run is that of the nearest one they do.
    """
    spec = ETT["ETTm1" if minutely else "ETTh1"] if dataset is None else ETT[dataset]
    if model.lower() == "patchtst":
        kw = dict(input_size=input_size, patch_len=16, stride=8, n_layers=3, head_dropout=0.0, norm="batch",
                  residual_attention=True, revin=True, revin_affine=False, subtract_last=False, lr=1e-4,
                  lr_decay=0.9, lr_decay_after=3, max_epochs=100, batch_size=128, loss="mse",
                  normalize_loss=False, windows_per_epoch=None, **spec.patchtst)
        return PatchTST(h=h, **{**kw, **overrides})
    if model.lower() == "dlinear":
        lr = spec.dlinear_lr[min(spec.dlinear_lr, key=lambda k: abs(k - h))]
        kw = dict(input_size=input_size, kernel_size=25, revin=False, lr=lr, lr_decay=0.5, lr_decay_after=1,
                  max_epochs=10, patience=3, batch_size=spec.dlinear_batch, loss="mse", normalize_loss=False,
                  windows_per_epoch=None, lr_schedule="step")
        return DLinear(h=h, **{**kw, **overrides})
    if model.lower() == "vit":     # no official script: PatchTST's pipeline and training, the frozen ViT inside
        from .frozen_vit import FrozenViTForecaster

        train = {k: v for k, v in spec.patchtst.items() if k not in ("d_model", "n_heads", "d_ff")}
        kw = dict(input_size=input_size, patch_len=16, stride=8, head_dropout=0.0, revin=True, revin_affine=False,
                  subtract_last=False, lr=1e-4, lr_decay=0.9, lr_decay_after=3, max_epochs=100, batch_size=128,
                  loss="mse", normalize_loss=False, windows_per_epoch=None, **train)
        return FrozenViTForecaster(h=h, **{**kw, **overrides})
    raise ValueError(f"unknown paper model {model!r}; use 'patchtst', 'dlinear' or 'vit'")


@dataclass
class PaperScore:
    model: str
    h: int
    mse: float
    mae: float
    n_test_windows: int
    epochs: int
    best_epoch: int
    seconds_per_epoch: float
    seconds_total: float


def split_scale(values: np.ndarray, input_size: int, borders: Sequence[int] = ETTH_BORDERS
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """values (T, C) -> standardised (train, val, test) arrays; val and test include the
    `input_size` rows before their segment as look-back. The scaler sees training rows only."""
    from sklearn.preprocessing import StandardScaler

    b1, b2, b3 = borders
    if values.shape[0] < b3:
        raise SeriesError(f"the paper protocol needs {b3} rows, the data has {values.shape[0]}")
    if b1 < input_size:
        raise SeriesError(f"look-back {input_size} is longer than the training segment ({b1} rows)")
    scaler = StandardScaler().fit(values[:b1])
    z = scaler.transform(values[:b3]).astype(np.float32)               # (b3, C)
    return z[:b1], z[b1 - input_size: b2], z[b2 - input_size: b3]


def window_pairs(test: np.ndarray, input_size: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window of the test array: contexts (N, L, C) and truths (N, h, C), N = len - L - h + 1."""
    n = test.shape[0] - input_size - h + 1
    if n < 1:
        raise SeriesError(f"test segment too short for look-back {input_size} + horizon {h}")
    idx = np.arange(n)[:, None]
    ctx = test[idx + np.arange(input_size)]                             # (N, L, C)
    truth = test[idx + input_size + np.arange(h)]                       # (N, h, C)
    return ctx, truth


def paper_protocol(values: np.ndarray | pd.DataFrame, horizons: Sequence[int] = (96, 192, 336, 720),
                   models: Sequence[str] = ("patchtst", "dlinear"), input_size: int = 336,
                   borders: Sequence[int] = ETTH_BORDERS,
                   make_model: Callable[[str, int], object] | None = None,
                   on_result: Callable[[PaperScore], None] | None = None) -> list[PaperScore]:
    """Train and score each model at each horizon under the paper protocol.

    values: (T, C) array, or a wide DataFrame (a date column is dropped). `make_model(name, h)`
    builds an estimator (default `paper_config`); it needs `fit(series, val=...)`, `predict`,
    and may expose `history_`. `on_result` is called after each (model, horizon).
    """
    if isinstance(values, pd.DataFrame):
        values = values.select_dtypes("number").to_numpy(dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or not np.isfinite(values).all():
        raise SeriesError("paper protocol needs a finite (T, C) array")
    train, val, test = split_scale(values, input_size, borders)
    make_model = make_model or (lambda name, h: paper_config(name, h, input_size))
    out = []
    for name in models:
        for h in horizons:
            model = make_model(name, h)
            t0 = time.perf_counter()
            model.fit([train], val=[val])
            total = time.perf_counter() - t0
            ctx, truth = window_pairs(test, input_size, h)
            pred = model.predict(ctx)                                   # (N, h, C)
            err = pred - truth
            hist = getattr(model, "history_", [])
            best = int(np.nanargmin([r["val_loss"] for r in hist])) if hist else -1
            score = PaperScore(getattr(model, "alias", name), h, float(np.mean(err ** 2)), float(np.mean(np.abs(err))),
                               int(ctx.shape[0]), len(hist), best,
                               float(np.median([r["seconds"] for r in hist])) if hist else float("nan"), total)
            out.append(score)
            if on_result is not None:
                on_result(score)
    return out


def scores_table(scores: Sequence[PaperScore], dataset: str | None) -> list[dict]:
    """Rows for printing/JSON, with `dataset`'s published figures beside ours (none when it is None)."""
    published = ETT[dataset].published if dataset is not None else {}
    all_windows = PATCHTST_ALL_WINDOWS_MSE.get(dataset or "", {})
    rows = []
    for s in scores:
        ref = published.get(s.model, {}).get(s.h)
        row = asdict(s)
        if ref:
            row.update(paper_mse=ref[0], paper_mae=ref[1], mse_vs_paper=s.mse / ref[0] - 1)
        if s.model == "PatchTST" and s.h in all_windows:
            row["all_windows_mse"] = all_windows[s.h]
        rows.append(row)
    return rows
