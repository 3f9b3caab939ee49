"""PatchTST (Nie et al., ICLR 2023): a series cut into patches is a sequence of tokens.

    x (B, C, L) -> RevIN -> patches (B, C, N, P), N = (L - P) // S + 2 with end padding
      -> linear patch embedding + learnable position (B*C, N, d)   [channels share all weights]
      -> Transformer encoder (BatchNorm or LayerNorm, optional residual attention)
      -> flatten head (B, C, d*N) -> (B, C, h) -> RevIN^-1
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from sklearn.utils._param_validation import StrOptions
from torch import nn

from frozenvit.backbone.suite.errors import ParameterError

from .defaults import LOOKBACK, PATCH_LEN
from .defaults import NEURAL_TRAINING as _T
from .defaults import PATCHTST_SHAPE as _S
from .layers import Encoder, FastDropout, RevIN, init_uniform_pos, patch_count, patchify
from .training import TRAINING_CONSTRAINTS, NeuralForecaster, at_least, share


@dataclass(frozen=True)
class PatchTSTConfig:
    """PatchTST's network, checked and derived once (the patch count), handed whole to PatchTSTNet."""
    input_size: int                    # look-back L
    h: int                             # horizon
    patch_len: int = PATCH_LEN         # P
    stride: int = 8                    # S
    d_model: int = _S["d_model"]
    n_heads: int = _S["n_heads"]
    d_ff: int = _S["d_ff"]
    n_layers: int = _S["n_layers"]
    dropout: float = _S["dropout"]
    attn_dropout: float = 0.0
    head_dropout: float = 0.0
    norm: str = "batch"                # "batch" or "layer"
    residual_attention: bool = True
    revin: bool = True
    revin_affine: bool = True
    subtract_last: bool = False
    pad_end: bool = True               # repeat the last value `stride` times: one more patch

    def __post_init__(self) -> None:
        patch_count(self.input_size, self.patch_len, self.stride, self.pad_end)   # raises if L < P
        if self.d_model % self.n_heads:
            raise ParameterError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")

    @property
    def n_patches(self) -> int:
        return patch_count(self.input_size, self.patch_len, self.stride, self.pad_end)


class PatchTSTNet(nn.Module):
    def __init__(self, cfg: PatchTSTConfig) -> None:
        super().__init__()
        self.cfg, self.n_patches = cfg, cfg.n_patches
        self.revin = RevIN(cfg.revin_affine, cfg.subtract_last) if cfg.revin else None
        self.embed = nn.Linear(cfg.patch_len, cfg.d_model)
        self.pos = init_uniform_pos(self.n_patches, cfg.d_model)
        self.drop = FastDropout(cfg.dropout)
        self.encoder = Encoder(cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attn_dropout,
                               cfg.norm, cfg.residual_attention)
        self.head = nn.Sequential(nn.Flatten(start_dim=-2), nn.Linear(cfg.d_model * self.n_patches, cfg.h),
                                  FastDropout(cfg.head_dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, L) -> forecasts (B, C, h)."""
        B, C, _ = x.shape
        if self.revin is not None:
            x, stats = self.revin.normalize(x)                                     # (B, C, L)
        p = patchify(x, self.cfg.patch_len, self.cfg.stride, self.cfg.pad_end)     # (B, C, N, P)
        z = self.embed(p).reshape(B * C, self.n_patches, -1)                       # (B*C, N, d)
        z = self.encoder(self.drop(z + self.pos))                                  # (B*C, N, d)
        z = z.reshape(B, C, self.n_patches, -1).transpose(-1, -2)                  # (B, C, d, N)
        y = self.head(z)                                                           # (B, C, h)
        if self.revin is not None:
            y = self.revin.denormalize(y, stats)
        return y


class PatchTST(NeuralForecaster):
    """PatchTST forecaster: channel-independent patch Transformer emitting all h steps at once.

    Defaults are the paper's patching (P = 16, S = 8, end padding) with a model sized for a 2-core CPU
    (`forecasting.defaults`); the official scripts' per-dataset configurations are
    `paper_config('patchtst', h, dataset)` in `forecasting.paper`.
    """

    config_class, net_class = PatchTSTConfig, PatchTSTNet
    _parameter_constraints = {
        **TRAINING_CONSTRAINTS, "patch_len": at_least(1), "stride": at_least(1), "d_model": at_least(1),
        "n_heads": at_least(1), "d_ff": at_least(1), "n_layers": at_least(1), "dropout": share(),
        "attn_dropout": share(), "head_dropout": share(), "norm": [StrOptions({"batch", "layer"})],
        **dict.fromkeys(("residual_attention", "revin", "revin_affine", "subtract_last"), ["boolean"])}

    def __init__(self, h: int, input_size: int = LOOKBACK, patch_len: int = PATCH_LEN, stride: int = 8,
                 d_model: int = _S["d_model"], n_heads: int = _S["n_heads"], d_ff: int = _S["d_ff"],
                 n_layers: int = _S["n_layers"], dropout: float = _S["dropout"], attn_dropout: float = 0.0,
                 head_dropout: float = 0.0, norm: str = "batch", residual_attention: bool = True, revin: bool = True,
                 revin_affine: bool = True, subtract_last: bool = False, loss: str = _T["loss"],
                 normalize_loss: bool = _T["normalize_loss"], lr: float = _T["lr"], lr_decay: float = 0.9,
                 lr_decay_after: int = 3, lr_schedule: str = "step", pct_start: float = 0.3,
                 max_epochs: int = _T["max_epochs"], patience: int = _T["patience"], batch_size: int = _T["batch_size"],
                 windows_per_epoch: int | None = _T["windows_per_epoch"], val_size: int | None = None,
                 seed: int = _T["seed"], progress: bool | None = None, device: str = "cpu",
                 checkpoint_dir: str | None = None, resume: bool = False, alias: str | None = None) -> None:
        self.h, self.input_size, self.patch_len, self.stride = h, input_size, patch_len, stride
        self.d_model, self.n_heads, self.d_ff, self.n_layers = d_model, n_heads, d_ff, n_layers
        self.dropout, self.attn_dropout, self.head_dropout, self.norm = dropout, attn_dropout, head_dropout, norm
        self.residual_attention, self.revin, self.revin_affine = residual_attention, revin, revin_affine
        self.subtract_last, self.loss, self.lr, self.lr_decay = subtract_last, loss, lr, lr_decay
        self.normalize_loss, self.lr_schedule, self.pct_start = normalize_loss, lr_schedule, pct_start
        self.lr_decay_after, self.max_epochs, self.patience = lr_decay_after, max_epochs, patience
        self.batch_size, self.windows_per_epoch, self.val_size = batch_size, windows_per_epoch, val_size
        self.seed, self.progress, self.device = seed, progress, device
        self.checkpoint_dir, self.resume, self.alias = checkpoint_dir, resume, alias
