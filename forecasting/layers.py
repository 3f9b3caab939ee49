"""Building blocks of PatchTST and DLinear: RevIN, patching, residual attention, encoder.

Tensors are channel-first: a batch of windows is (B, C, L). Channels are independent: every
block below treats the C channels of a window as separate series with shared weights.
"""
from __future__ import annotations

import torch
from torch import nn

from frozenvit.backbone.suite.errors import ParameterError


class RevIN(nn.Module):
    """Reversible instance normalisation (Kim et al., 2022) over the look-back axis.

    `normalize` stores each series' mean (or last value, with `subtract_last`) and population
    std over the last axis; `denormalize` undoes it on the forecast. The optional affine
    weight and bias are scalars shared by all channels, so the block stays channel-independent
    (the paper keeps one pair per channel; sharing lets one model serve any number of series).

    Scale-free: the std has no absolute epsilon added (the paper's sqrt(var + 1e-5) swamps the
    signal of any series whose values are below about 1e-2, so that the forecasts depended on the
    data's units). A look-back of zero variance is left at z = 0 and forecast as its level exactly
    (its std, 0, multiplies the network's output). `eps` only keeps the affine weight off zero.
    """

    def __init__(self, affine: bool = True, subtract_last: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        self.affine, self.subtract_last, self.eps = affine, subtract_last, eps
        if affine:
            self.weight = nn.Parameter(torch.ones(1))
            self.bias = nn.Parameter(torch.zeros(1))

    def normalize(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x (..., L) -> (normalised (..., L), stats to pass to `denormalize`)."""
        center = x[..., -1:] if self.subtract_last else x.mean(dim=-1, keepdim=True)     # (..., 1)
        std = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False))                     # (..., 1)
        z = (x - center) / torch.where(std > 0, std, torch.ones_like(std))               # flat: z = x - center = 0
        if self.affine:
            z = z * self.weight + self.bias
        return z, (center.detach(), std.detach())

    def denormalize(self, z: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """z (..., H) on the normalised scale -> (..., H) on the original scale."""
        center, std = stats
        if self.affine:
            z = (z - self.bias) / (self.weight + self.eps * self.eps)
        return z * std + center


class FastDropout(nn.Dropout):
    """nn.Dropout with a cheaper mask on CPU: one 64-bit draw gives 7 random bytes (torch's
    bernoulli_ draws a number per element), so the drop probability is rounded to a multiple of
    1/256 (0.3 -> 77/256 = 0.3008). Seeded by torch's global generator like nn.Dropout."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p >= 1.0:
            return torch.zeros_like(x)
        n = x.numel()
        rows = -(-n // 7)
        draws = torch.empty(rows, dtype=torch.int64, device=x.device).random_()       # 63 random bits each
        keep = draws.view(torch.uint8).view(rows, 8)[:, :7].reshape(-1)[:n] >= round(self.p * 256)
        return x * keep.view(x.shape).to(x.dtype) * (256.0 / (256 - round(self.p * 256)))


def patch_count(input_size: int, patch_len: int, stride: int, pad_end: bool = True) -> int:
    """Number of patches: (L - P) // S + 1, plus one when `stride` values are padded at the end."""
    if input_size < patch_len:
        raise ParameterError(f"look-back {input_size} is shorter than one patch ({patch_len}); use an input_size "
                             f">= {patch_len}")
    return (input_size - patch_len) // stride + 1 + int(pad_end)


def patchify(x: torch.Tensor, patch_len: int, stride: int, pad_end: bool = True) -> torch.Tensor:
    """x (B, C, L) -> patches (B, C, N, P); with `pad_end` the last value is repeated `stride` times."""
    if pad_end:
        x = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], stride)], dim=-1)   # (B, C, L + S)
    return x.unfold(-1, patch_len, stride)                                      # (B, C, N, P)


class ResidualAttention(nn.Module):
    """Multi-head self-attention that can add the previous layer's pre-softmax scores
    (RealFormer-style residual attention, as PatchTST does). Returns (out, scores)."""

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0, proj_dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q, self.k, self.v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)
        self.attn_dropout, self.proj_dropout = FastDropout(attn_dropout), FastDropout(proj_dropout)
        self.scale = self.d_head ** -0.5

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        B, N, _ = x.shape
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, N, self.n_heads, self.d_head).transpose(1, 2)     # (B, nh, N, dh)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = (q @ k.transpose(-2, -1)) * self.scale                           # (B, nh, N, N)
        if prev is not None:
            scores = scores + prev
        attn = self.attn_dropout(torch.softmax(scores, dim=-1))
        y = (attn @ v).transpose(1, 2).reshape(B, N, -1)                          # (B, N, d)
        return self.proj_dropout(self.out(y)), scores


class _BatchNormTokens(nn.Module):
    """BatchNorm1d over d_model for (B, N, d) tokens (PatchTST's default norm)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x.transpose(1, 2)).transpose(1, 2)                         # (B, N, d)


def make_norm(kind: str, d_model: int) -> nn.Module:
    if kind == "batch":
        return _BatchNormTokens(d_model)
    if kind == "layer":
        return nn.LayerNorm(d_model)
    raise ValueError(f"norm must be 'batch' or 'layer', got {kind!r}")


class EncoderLayer(nn.Module):
    """Post-norm Transformer encoder layer: attention + FFN (GELU), dropout on each residual.
    Like the official PatchTST code, the attention output projection has its own dropout too."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, attn_dropout: float,
                 norm: str) -> None:
        super().__init__()
        self.attn = ResidualAttention(d_model, n_heads, attn_dropout, proj_dropout=dropout)   # as the paper's code
        self.drop1, self.norm1 = FastDropout(dropout), make_norm(norm, d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), FastDropout(dropout), nn.Linear(d_ff, d_model))
        self.drop2, self.norm2 = FastDropout(dropout), make_norm(norm, d_model)

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        a, scores = self.attn(x, prev)
        x = self.norm1(x + self.drop1(a))                                         # (B, N, d)
        x = self.norm2(x + self.drop2(self.ff(x)))                                # (B, N, d)
        return x, scores


class Encoder(nn.Module):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 attn_dropout: float = 0.0, norm: str = "batch", residual_attention: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads, d_ff, dropout, attn_dropout, norm)
                                    for _ in range(n_layers))
        self.residual_attention = residual_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = None
        for layer in self.layers:
            x, s = layer(x, scores)
            scores = s if self.residual_attention else None
        return x


def moving_average(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """Centred moving average over the last axis with edge replication: (..., L) -> (..., L)."""
    left, right = (kernel - 1) // 2, kernel // 2
    xp = torch.cat([x[..., :1].expand(*x.shape[:-1], left), x, x[..., -1:].expand(*x.shape[:-1], right)], dim=-1)
    return xp.unfold(-1, kernel, 1).mean(dim=-1)


def init_uniform_pos(n: int, d: int) -> nn.Parameter:
    """Learnable positional encoding, initialised like PatchTST (uniform in +-0.02)."""
    return nn.Parameter(torch.empty(n, d).uniform_(-0.02, 0.02))

