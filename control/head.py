"""The policy network on top of frozen patch tokens: pool the grid, add proprioception, MLP to an action.

Pooling is the one thing the ablation varies:

* "attention": Q learned queries attend over the h*w patch tokens of a frame (multi-head
  cross-attention, the same math as `nn.MultiheadAttention` with the queries as `query` and the
  tokens as `key`/`value`), so the head can address places in the image.
* "cls": the backbone's CLS token only (a pooled summary; no spatial addressing).
* "mean": the average patch token.

Tokens are layer-normalised first (patch tokens of the last block are un-normalised). A learned
position embedding (zero at init) is added to the keys/values so the queries can address the
grid even if the backbone's own position signal has faded by the last block. With a frame stack
of F frames each frame is pooled by the same pooler and the results are concatenated.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

POOLINGS = ("attention", "cls", "mean")


class AttentionPool(nn.Module):
    """Multi-head cross-attention from Q learned queries to N tokens: (B, N, C) -> (B, Q, C)."""

    def __init__(self, dim: int, num_queries: int = 4, num_heads: int = 4) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed dim {dim} is not divisible by num_heads={num_heads}")
        self.dim, self.num_queries, self.num_heads = dim, num_queries, num_heads
        self.query = nn.Parameter(torch.randn(num_queries, dim) * dim ** -0.5)   # (Q, C)
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, tokens: torch.Tensor, return_weights: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        B, N, C = tokens.shape
        H, Q, d = self.num_heads, self.num_queries, C // self.num_heads
        q = self.q_proj(self.query).view(Q, H, d).transpose(0, 1)                 # (H, Q, d)
        k = self.k_proj(tokens).view(B, N, H, d).transpose(1, 2)                  # (B, H, N, d)
        v = self.v_proj(tokens).view(B, N, H, d).transpose(1, 2)                  # (B, H, N, d)
        att = torch.einsum("hqd,bhnd->bhqn", q, k) / math.sqrt(d)                 # (B, H, Q, N)
        att = att.softmax(dim=-1)
        out = torch.einsum("bhqn,bhnd->bhqd", att, v)                             # (B, H, Q, d)
        out = self.out_proj(out.transpose(1, 2).reshape(B, Q, C))                 # (B, Q, C)
        return (out, att) if return_weights else out


class PolicyHead(nn.Module):
    """(tokens (B, F, N, C), cls (B, F, C), proprio (B, P)) -> action (B, A).

    F = frames in the stack (oldest first), N = h*w patch tokens per frame.
    """

    def __init__(self, embed_dim: int, num_tokens: int, proprio_dim: int = 4, action_dim: int = 4, *,
                 pooling: str = "attention", num_queries: int = 4, num_heads: int = 4, frames: int = 1,
                 hidden: int = 256) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if frames < 1:
            raise ValueError(f"frames must be >= 1, got {frames}")
        self.pooling, self.frames, self.num_tokens = pooling, frames, num_tokens
        self.norm = nn.LayerNorm(embed_dim)
        if pooling == "attention":
            self.pos = nn.Parameter(torch.zeros(num_tokens, embed_dim))             # (N, C)
            self.pool = AttentionPool(embed_dim, num_queries, num_heads)
            per_frame = num_queries * embed_dim
        else:
            per_frame = embed_dim
        self.mlp = nn.Sequential(
            nn.Linear(frames * per_frame + proprio_dim, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, action_dim),
        )

    def pooled(self, tokens: torch.Tensor, cls: torch.Tensor | None) -> torch.Tensor:
        """Per-frame visual features, concatenated over the stack: (B, F * D)."""
        B, Fr = tokens.shape[:2]
        if self.pooling == "cls":
            if cls is None:
                raise ValueError("pooling='cls' needs the CLS token; this backbone has none")
            return self.norm(cls).reshape(B, -1)                                    # (B, F*C)
        x = self.norm(tokens.flatten(0, 1))                                         # (B*F, N, C)
        if self.pooling == "mean":
            return x.mean(dim=1).reshape(B, -1)                                     # (B, F*C)
        x = self.pool(x + self.pos)                                                 # (B*F, Q, C)
        return x.reshape(B, -1)                                                     # (B, F*Q*C)

    @torch.no_grad()
    def attention_map(self, tokens: torch.Tensor) -> torch.Tensor:
        """Where the attention pooler looks: (B, N, C) tokens of one frame -> (B, N) weights, mean over heads and queries."""
        if self.pooling != "attention":
            raise ValueError(f"pooling={self.pooling!r} has no attention map")
        _, att = self.pool(self.norm(tokens) + self.pos, return_weights=True)   # (B, H, Q, N)
        return att.mean(dim=(1, 2))                                             # (B, N)

    def forward(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor) -> torch.Tensor:
        if tokens.ndim != 4 or tokens.shape[1] != self.frames or tokens.shape[2] != self.num_tokens:
            raise ValueError(f"tokens must be (B, {self.frames}, {self.num_tokens}, C), got {tuple(tokens.shape)}")
        feats = torch.cat([self.pooled(tokens, cls), proprio], dim=-1)              # (B, F*D + P)
        return self.mlp(feats)                                                      # (B, A)


def bc_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Behaviour-cloning loss: mean squared error over batch and action dimensions."""
    return F.mse_loss(pred, target)
