"""DLinear (Zeng et al., AAAI 2023): moving-average decomposition, one linear map per part.

    x (B, C, L) -> [RevIN] -> trend = moving average (kernel 25, edge replication), seasonal = x - trend
      -> Linear_L->h(seasonal) + Linear_L->h(trend) (shared by all channels) -> (B, C, h)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .defaults import LOOKBACK
from .defaults import NEURAL_TRAINING as _T
from .layers import RevIN, moving_average
from .training import TRAINING_CONSTRAINTS, NeuralForecaster, at_least


@dataclass(frozen=True)
class DLinearConfig:
    """DLinear's network: look-back L, horizon h, the trend's moving-average kernel, RevIN or not."""
    input_size: int
    h: int
    kernel_size: int = 25
    revin: bool = True


class DLinearNet(nn.Module):
    def __init__(self, cfg: DLinearConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.revin = RevIN(affine=False) if cfg.revin else None
        self.seasonal = nn.Linear(cfg.input_size, cfg.h)
        self.trend = nn.Linear(cfg.input_size, cfg.h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, L) -> forecasts (B, C, h)."""
        if self.revin is not None:
            x, stats = self.revin.normalize(x)                         # (B, C, L)
        trend = moving_average(x, self.cfg.kernel_size)                # (B, C, L)
        y = self.seasonal(x - trend) + self.trend(trend)               # (B, C, h)
        return self.revin.denormalize(y, stats) if self.revin is not None else y


class DLinear(NeuralForecaster):
    """DLinear forecaster with the same training loop as PatchTST.

    `revin` normalises each window (needed when series have very different levels, as in M4);
    the paper's DLinear runs on globally standardised data without it (`revin=False`). Training
    defaults: `forecasting.defaults.NEURAL_TRAINING`; the loop and its options: `NeuralForecaster`.
    """

    config_class, net_class = DLinearConfig, DLinearNet
    _parameter_constraints = {**TRAINING_CONSTRAINTS, "kernel_size": at_least(1), "revin": ["boolean"]}

    def __init__(self, h: int, input_size: int = LOOKBACK, kernel_size: int = 25, revin: bool = True,
                 loss: str = _T["loss"], normalize_loss: bool = _T["normalize_loss"], lr: float = _T["lr"],
                 lr_decay: float = 0.9, lr_decay_after: int = 3, lr_schedule: str = "step", pct_start: float = 0.3,
                 max_epochs: int = _T["max_epochs"], patience: int = _T["patience"],
                 batch_size: int = _T["batch_size"], windows_per_epoch: int | None = _T["windows_per_epoch"],
                 val_size: int | None = None, seed: int = _T["seed"], progress: bool | None = None,
                 device: str = "cpu", checkpoint_dir: str | None = None, resume: bool = False,
                 alias: str | None = None) -> None:
        self.h, self.input_size, self.kernel_size, self.revin = h, input_size, kernel_size, revin
        self.loss, self.lr, self.lr_decay, self.lr_decay_after = loss, lr, lr_decay, lr_decay_after
        self.lr_schedule, self.pct_start, self.normalize_loss = lr_schedule, pct_start, normalize_loss
        self.max_epochs, self.patience, self.batch_size = max_epochs, patience, batch_size
        self.windows_per_epoch, self.val_size, self.seed = windows_per_epoch, val_size, seed
        self.progress, self.device = progress, device
        self.checkpoint_dir, self.resume, self.alias = checkpoint_dir, resume, alias
