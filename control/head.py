"""The policy network on top of frozen patch tokens: pool the grid, add proprioception, MLP to an action.

Pooling is the one thing the ablation varies:

* "attention": Q learned queries attend over the h*w patch tokens of a frame (multi-head
  cross-attention, the same math as `nn.MultiheadAttention` with the queries as `query` and the
  tokens as `key`/`value`), so the head can address places in the image.
* "cls": the backbone's CLS token only (a pooled summary; no spatial addressing).
* "mean": the average patch token.

Tokens are layer-normalised first (patch tokens of the last block are un-normalised; the
normalisation has no parameters, so for "mean" and "cls" the whole visual feature of a frame is
fixed and training computes it once). A position code is added to the keys/values so the queries
can address the grid even if the backbone's own position signal has faded by the last block.
With a frame stack of F frames each frame is pooled by the same pooler and the results are
concatenated.

With keypoints=True the attention head also reports *where* each head's query looked: the
attention-weighted mean (x, y) of the patch centres in [-1, 1] (a spatial soft-argmax, as in
deep spatial autoencoders for visuomotor learning), H*Q*2 numbers per frame beside the pooled
features. Content alone tells the MLP what was found; these coordinates tell it where, without
having to learn a position code from a few demos.

Two remedies for queries that collapse onto one region (control/RESULTS.md: with 25 demos the
four queries of a trained head ended up near copies of one another, looking at the arm); both are
the defaults (control/options.py), measured better than the old head on held-out configurations:

* pos_code="sincos": a fixed 2-d sine-cosine position code instead of the learned, zero-initialised
  one ("learned"), so a query can address a place from the first step of training; the queries
  start orthogonal.
* query_diversity=w (default 0.02): `diversity_penalty` (mean squared cosine similarity between the
  attention maps of different queries) is added to the BC loss with weight w.

with_cls=True hands the MLP the LN'ed CLS token beside the attention-pooled patch tokens (global
summary + spatial addressing), so the ablation can ask whether the patch tokens add anything to it.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .defaults import DEFAULT_POS_CODE, DEFAULT_QUERY_DIVERSITY, POS_CODES

POOLINGS = ("attention", "cls", "mean")


class AttentionPool(nn.Module):
    """Multi-head cross-attention from Q learned queries to N tokens: (B, N, C) -> (B, Q, C)."""

    def __init__(self, dim: int, num_queries: int = 4, num_heads: int = 4, orthogonal: bool = False) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed dim {dim} is not divisible by num_heads={num_heads}")
        self.dim, self.num_queries, self.num_heads = dim, num_queries, num_heads
        self.query = nn.Parameter(torch.randn(num_queries, dim) * dim ** -0.5)   # (Q, C)
        if orthogonal:                                  # queries start mutually orthogonal, same scale
            nn.init.orthogonal_(self.query)
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor | None = None, return_weights: bool = False,
                keep: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, N, C), optional position embedding pos (N, C) added to every token's key and value,
        optional keep (B, N) bool: tokens that may be attended to (a key padding mask, inverted)."""
        # Same result as nn.MultiheadAttention(query, tokens + pos, tokens + pos), computed in the
        # cheap order: the queries are fixed, so fold W_k into them (q.W_k x) and project values
        # after pooling (sum_n a_n W_v x_n = W_v sum_n a_n x_n). Cost O(B N C H Q), not O(B N C^2),
        # and the big (B, N, C) tensor is never copied or differentiated.
        B, N, C = tokens.shape
        H, Q, d = self.num_heads, self.num_queries, C // self.num_heads
        q = self.q_proj(self.query).view(Q, H, d).transpose(0, 1)                 # (H, Q, d)
        qk = torch.einsum("hqd,hdc->hqc", q, self.k_proj.weight.view(H, d, C))    # (H, Q, C)
        qb = torch.einsum("hqd,hd->hq", q, self.k_proj.bias.view(H, d))           # (H, Q) key bias term
        logits = torch.einsum("hqc,bnc->bhqn", qk, tokens) + qb[..., None]        # (B, H, Q, N)
        if pos is not None:
            logits = logits + torch.einsum("hqc,nc->hqn", qk, pos)                # (H, Q, N)
        if keep is not None:
            logits = logits.masked_fill(~keep[:, None, None, :], float("-inf"))
        att = (logits / math.sqrt(d)).softmax(dim=-1)                             # (B, H, Q, N)
        pooled = torch.einsum("bhqn,bnc->bhqc", att, tokens)                      # (B, H, Q, C)
        if pos is not None:
            pooled = pooled + att @ pos                                           # (B, H, Q, C)
        out = torch.einsum("bhqc,hdc->bhqd", pooled, self.v_proj.weight.view(H, d, C))
        out = out + self.v_proj.bias.view(1, H, 1, d)                             # weights sum to 1
        out = self.out_proj(out.transpose(1, 2).reshape(B, Q, C))                 # (B, Q, C)
        return (out, att) if return_weights else out


class PolicyHead(nn.Module):
    """(tokens (B, F, N, C), cls (B, F, C), proprio (B, P)) -> action (B, A).

    F = frames in the stack (oldest first), N = h*w patch tokens per frame. `prepare` turns a
    frame's tokens into what the pooling consumes (LN'ed tokens, or an already pooled (C,)
    vector for "mean"/"cls"); it has no parameters, so training computes it once per cached frame.
    """

    def __init__(self, embed_dim: int, num_tokens: int, proprio_dim: int = 4, action_dim: int = 4, *,
                 pooling: str = "attention", num_queries: int = 4, num_heads: int = 4, frames: int = 1,
                 hidden: int = 256, token_dropout: float = 0.0, keypoints: bool = False,
                 grid: tuple[int, int] | None = None, pos_code: str = DEFAULT_POS_CODE,
                 query_diversity: float = DEFAULT_QUERY_DIVERSITY,
                 with_cls: bool = False) -> None:
        super().__init__()
        if not 0.0 <= token_dropout < 1.0:
            raise ValueError(f"token_dropout must be in [0, 1), got {token_dropout}")
        if pos_code not in POS_CODES:
            raise ValueError(f"pos_code must be one of {POS_CODES}, got {pos_code!r}")
        if query_diversity < 0:
            raise ValueError(f"query_diversity must be >= 0, got {query_diversity}")
        self.token_dropout = token_dropout
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if frames < 1:
            raise ValueError(f"frames must be >= 1, got {frames}")
        self.pooling, self.frames, self.num_tokens, self.embed_dim = pooling, frames, num_tokens, embed_dim
        self.keypoints = keypoints and pooling == "attention"
        self.with_cls = with_cls and pooling == "attention"
        self.query_diversity = query_diversity if pooling == "attention" else 0.0
        if pooling == "attention":
            if pos_code == "sincos":
                self.register_buffer("pos", sincos_2d(num_tokens, embed_dim, grid), persistent=False)   # (N, C)
            else:
                self.pos = nn.Parameter(torch.zeros(num_tokens, embed_dim))         # (N, C)
            self.pool = AttentionPool(embed_dim, num_queries, num_heads, orthogonal=pos_code == "sincos")
            per_frame = num_queries * embed_dim + (embed_dim if self.with_cls else 0)
            if self.keypoints:
                self.register_buffer("coords", patch_coords(num_tokens, grid), persistent=False)   # (N, 2)
                per_frame += num_heads * num_queries * 2
        else:
            per_frame = embed_dim
        self.mlp = nn.Sequential(
            nn.Linear(frames * per_frame + proprio_dim, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, action_dim),
        )

    def prepare(self, tokens: torch.Tensor, cls: torch.Tensor | None) -> torch.Tensor:
        """Parameter-free per-frame input: tokens (..., N, C) -> LN'ed (..., N, C) for "attention"
        ((..., N+1, C) with_cls: the LN'ed CLS token last), mean of LN'ed tokens (..., C) for "mean",
        LN'ed CLS (..., C) for "cls"."""
        C = tokens.shape[-1]
        if self.pooling == "cls" or self.with_cls:
            if cls is None:
                raise ValueError(f"pooling={self.pooling!r}{' with_cls' if self.with_cls else ''} needs the CLS "
                                 "token; this backbone has none")
            if self.pooling == "cls":
                return F.layer_norm(cls.float(), (C,))
        x = F.layer_norm(tokens.float(), (C,))    # affine-free: the projections that follow absorb scale/shift
        if self.with_cls:
            x = torch.cat([x, F.layer_norm(cls.float(), (C,)).unsqueeze(-2)], dim=-2)
        return x.mean(dim=-2) if self.pooling == "mean" else x

    def forward_prepared(self, x: torch.Tensor, proprio: torch.Tensor,
                         generator: torch.Generator | None = None, return_penalty: bool = False
                         ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x: prepared frames (B, F, N, C) for "attention" or (B, F, C); proprio (B, P) -> (B, A).

        In training mode with token_dropout > 0, random patches are hidden from the queries
        (drawn from `generator`, so seeded training stays reproducible). return_penalty: also the
        weighted query-diversity penalty (a scalar, 0 unless query_diversity > 0), for the loss."""
        B = x.shape[0]
        if x.shape[1] != self.frames:
            raise ValueError(f"expected a stack of {self.frames} frames, got {tuple(x.shape)}")
        penalty = x.new_zeros(())
        if self.pooling == "attention":
            x = x.flatten(0, 1)                                                     # (B*F, N(+1), C)
            if self.with_cls:
                x, cls = x[:, :-1], x[:, -1]                                        # (B*F, N, C), (B*F, C)
            keep = None
            if self.training and self.token_dropout > 0:    # regulariser: hide random patches from the queries
                keep = torch.rand(x.shape[:2], generator=generator) >= self.token_dropout   # (B*F, N)
                keep[:, 0] |= ~keep.any(1)                                          # never hide all of them
            x, att = self.pool(x, self.pos, return_weights=True, keep=keep)        # (B*F, Q, C), (B*F, H, Q, N)
            if self.keypoints:                                                      # where each query looked
                x = torch.cat([x.flatten(1), (att @ self.coords).flatten(1)], 1)    # (B*F, Q*C + H*Q*2)
            if self.with_cls:
                x = torch.cat([x.flatten(1), cls], 1)                               # (B*F, D + C)
            if self.query_diversity > 0:
                penalty = self.query_diversity * diversity_penalty(att)
        feats = torch.cat([x.reshape(B, -1), proprio], dim=-1)                      # (B, F*D + P)
        out = self.mlp(feats)                                                       # (B, A)
        return (out, penalty) if return_penalty else out

    def forward(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor) -> torch.Tensor:
        if tokens.ndim != 4 or tokens.shape[1] != self.frames or tokens.shape[2] != self.num_tokens:
            raise ValueError(f"tokens must be (B, {self.frames}, {self.num_tokens}, C), got {tuple(tokens.shape)}")
        return self.forward_prepared(self.prepare(tokens, cls), proprio)

    @torch.no_grad()
    def query_attention(self, tokens: torch.Tensor) -> torch.Tensor:
        """Where each query looks: (B, N, C) patch tokens of one frame -> (B, H, Q, N) attention weights."""
        if self.pooling != "attention":
            raise ValueError(f"pooling={self.pooling!r} has no attention map")
        x = F.layer_norm(tokens.float(), (tokens.shape[-1],))                           # as prepare(), without CLS
        return self.pool(x, self.pos, return_weights=True)[1]

    @torch.no_grad()
    def attention_map(self, tokens: torch.Tensor) -> torch.Tensor:
        """Where the attention pooler looks: (B, N, C) tokens of one frame -> (B, N) weights, mean over heads and queries."""
        return self.query_attention(tokens).mean(dim=(1, 2))                           # (B, N)


def patch_coords(num_tokens: int, grid: tuple[int, int] | None = None) -> torch.Tensor:
    """(N, 2) centres (x, y) in [-1, 1] of a row-major h*w patch grid (square when grid is None)."""
    h, w = _grid_hw(num_tokens, grid)
    ys = (torch.arange(h) + 0.5) / h * 2 - 1
    xs = (torch.arange(w) + 0.5) / w * 2 - 1
    return torch.stack(torch.meshgrid(xs, ys, indexing="xy"), -1).reshape(-1, 2)   # row-major: x varies fastest


def _grid_hw(num_tokens: int, grid: tuple[int, int] | None) -> tuple[int, int]:
    if grid is None:
        side = math.isqrt(num_tokens)
        if side * side != num_tokens:
            raise ValueError(f"{num_tokens} tokens are not a square grid: pass grid=(h, w)")
        grid = (side, side)
    h, w = int(grid[0]), int(grid[1])
    if h * w != num_tokens:
        raise ValueError(f"grid {h}x{w} does not hold {num_tokens} tokens")
    return h, w


def sincos_2d(num_tokens: int, dim: int, grid: tuple[int, int] | None = None) -> torch.Tensor:
    """(N, dim) fixed 2-d sine-cosine position code of a row-major patch grid: the first half of the
    channels encodes x, the second y, each as sin/cos pairs at dim/4 frequencies spaced geometrically
    from half a period across the grid to one period every four patches (at one period every two, sin
    would be 0 at every patch)."""
    if dim % 4:
        raise ValueError(f"a 2-d sine-cosine code needs dim divisible by 4, got {dim}")
    h, w = _grid_hw(num_tokens, grid)
    cells = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(h), indexing="xy"), -1)
    cells = cells.reshape(-1, 2).float()                                            # (N, 2) patch (col, row)
    lo = math.pi / max(h, w)
    freqs = lo * (math.pi / 2 / lo) ** (torch.arange(dim // 4, dtype=torch.float32) / max(1, dim // 4 - 1))
    parts = []
    for axis in (0, 1):
        ang = cells[:, axis:axis + 1] * freqs                                       # (N, dim/4)
        parts += [ang.sin(), ang.cos()]
    return torch.cat(parts, dim=1)                                                  # (N, dim)


def diversity_penalty(att: torch.Tensor) -> torch.Tensor:
    """Mean squared cosine similarity between the attention maps of different queries.

    att (B, H, Q, N) -> scalar in [0, 1]: 1 when every query looks where the others do, 0 when
    their maps do not overlap. Maps are averaged over heads first (a query is one place to look)."""
    a = F.normalize(att.mean(dim=1), dim=-1)                                        # (B, Q, N)
    Q = a.shape[1]
    if Q < 2:
        return att.new_zeros(())
    cos = a @ a.transpose(1, 2)                                                     # (B, Q, Q)
    off = cos.pow(2).sum(dim=(1, 2)) - cos.diagonal(dim1=1, dim2=2).pow(2).sum(-1)  # (B,)
    return (off / (Q * (Q - 1))).mean()


def bc_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Behaviour-cloning loss: mean squared error over batch and action dimensions."""
    return F.mse_loss(pred, target)
