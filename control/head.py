"""The policy network on frozen patch tokens: pool one frame's grid, add proprioception, MLP to an action.

Poolings (`HeadConfig.pooling`):

* "attention": Q learned queries cross-attend (H heads) over the h*w patch tokens, each plus a fixed
  2-d sine-cosine position code (the same math as `nn.MultiheadAttention` with the queries as
  `query` and the tokens as `key`/`value`). The queries start orthogonal, and
  `AttentionConfig.query_diversity` weighs a penalty on queries whose attention maps overlap
  (`diversity_penalty`, added to the BC loss).
* "cls": the backbone's CLS token only.
* "mean": the mean patch token.

With `HeadConfig.chunk` = k > 1 the MLP predicts the next k actions of a frame (action chunks, ACT, Zhao et
al. 2023) as (B, k*A), read as (B, k, A).

A hyperparameter no head can use (pooling "max", heads that do not divide the token width) is a
ParameterError; tokens that do not fit a built head are a PolicyError.

Tokens are layer-normalised without parameters first, so for "cls" and "mean" a frame's whole visual
feature is fixed and training computes it once (`PolicyHead.prepare`). Why these choices:
lab/control-results.md.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from frozenvit.backbone.suite.errors import ParameterError

from .defaults import DEFAULT_HEADS, DEFAULT_HIDDEN, DEFAULT_QUERIES, DEFAULT_QUERY_DIVERSITY, MAX_QUERIES, POOLINGS
from .errors import PolicyError

__all__ = ["POOLINGS", "AttentionConfig", "HeadConfig", "AttentionPool", "PolicyHead", "bc_loss",
           "diversity_penalty", "sincos_2d"]


@dataclass(frozen=True)
class AttentionConfig:
    """Options of attention pooling; a policy with another pooling refuses them (ParameterError)."""
    queries: int = DEFAULT_QUERIES                   # learned queries Q
    heads: int = DEFAULT_HEADS                       # attention heads H; must divide the token width
    query_diversity: float = DEFAULT_QUERY_DIVERSITY  # weight of `diversity_penalty` in the loss

    def __post_init__(self) -> None:
        if int(self.queries) < 1 or int(self.heads) < 1:
            raise ParameterError(f"queries and heads must be >= 1, got queries={self.queries}, heads={self.heads}")
        if int(self.queries) > MAX_QUERIES:
            raise ParameterError(f"queries must be 1 to {MAX_QUERIES} (learned queries of attention pooling), got "
                                 f"{self.queries}")
        if not self.query_diversity >= 0:
            raise ParameterError(f"query_diversity must be >= 0, got {self.query_diversity}")


@dataclass(frozen=True)
class HeadConfig:
    """Everything that fixes a head's architecture: the features' shape and the pooling. Derived once.

    attention: None with pooling "attention" means AttentionConfig(); with any other pooling it
    must be None (ParameterError otherwise).
    """
    embed_dim: int                   # C, width of a token
    grid: tuple[int, int]            # (h, w) patch tokens, row-major
    proprio_dim: int = 4
    action_dim: int = 4
    pooling: str = "attention"
    attention: AttentionConfig | None = None
    hidden: int = DEFAULT_HIDDEN
    norm_groups: int = 1             # a token is this many blocks' tokens side by side, each normalised on its own
    chunk: int = 1                   # actions predicted per frame: the MLP outputs chunk * action_dim

    def __post_init__(self) -> None:
        if isinstance(self.chunk, bool) or int(self.chunk) != self.chunk or self.chunk < 1:
            raise ParameterError(f"chunk must be an integer >= 1 (actions predicted per frame), got {self.chunk!r}")
        if int(self.norm_groups) < 1 or self.embed_dim % int(self.norm_groups):
            raise ParameterError(f"norm_groups must be >= 1 and divide the {self.embed_dim}-d tokens, got {self.norm_groups}")
        if self.pooling not in POOLINGS:
            raise ParameterError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.pooling != "attention" and self.attention is not None:
            raise ParameterError(f"attention options {self.attention} given with pooling={self.pooling!r}; "
                                 "they belong to pooling='attention' (pass attention=None)")
        if self.pooling == "attention" and self.attention is None:
            object.__setattr__(self, "attention", AttentionConfig())
        object.__setattr__(self, "grid", (int(self.grid[0]), int(self.grid[1])))
        if self.hidden < 1:
            raise ParameterError(f"hidden must be >= 1, got {self.hidden}")
        if self.attention is not None:
            if self.embed_dim % self.attention.heads:
                raise ParameterError(f"{self.attention.heads} heads do not divide the {self.embed_dim}-d tokens; "
                                     "choose a divisor of the token width")
            if self.embed_dim % 4:
                raise ParameterError(f"the 2-d sine-cosine position code needs a token width divisible by 4, "
                                     f"got {self.embed_dim}")

    @property
    def num_tokens(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def uses_cls(self) -> bool:
        """Whether the head reads the CLS token (pooling "cls")."""
        return self.pooling == "cls"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HeadConfig":
        att = d.get("attention")
        return cls(**{**d, "grid": tuple(d["grid"]), "attention": AttentionConfig(**att) if att else None})


class AttentionPool(nn.Module):
    """Multi-head cross-attention from Q learned queries to N tokens: (B, N, C) -> (B, Q, C)."""

    def __init__(self, dim: int, num_queries: int = DEFAULT_QUERIES, num_heads: int = DEFAULT_HEADS) -> None:
        super().__init__()
        if dim % num_heads:
            raise ParameterError(f"embed dim {dim} is not divisible by num_heads={num_heads}")
        self.dim, self.num_queries, self.num_heads = dim, num_queries, num_heads
        # drawn, then made orthogonal: the draw keeps the RNG stream (and so seeded heads) as it was
        self.query = nn.Parameter(torch.randn(num_queries, dim) * dim ** -0.5)   # (Q, C)
        nn.init.orthogonal_(self.query)                 # queries start mutually orthogonal
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor | None = None, return_weights: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, N, C), optional position code pos (N, C) added to every token's key and value.

        The two products with the tokens (logits and pooling) run in the tokens' dtype: bfloat16 tokens make them
        bfloat16 products (fast where the CPU multiplies bfloat16 natively; training uses that, `PolicyHead.
        forward_prepared`); everything else, and the result, is float32."""
        # Same result as nn.MultiheadAttention(query, tokens + pos, tokens + pos), computed in the
        # cheap order: the queries are fixed, so fold W_k into them (q.W_k x) and project values
        # after pooling (sum_n a_n W_v x_n = W_v sum_n a_n x_n). Cost O(B N C H Q), not O(B N C^2),
        # and the big (B, N, C) tensor is never copied or differentiated.
        B, N, C = tokens.shape
        H, Q, d = self.num_heads, self.num_queries, C // self.num_heads
        q = self.q_proj(self.query).view(Q, H, d).transpose(0, 1)                 # (H, Q, d)
        qk = torch.einsum("hqd,hdc->hqc", q, self.k_proj.weight.view(H, d, C))    # (H, Q, C)
        qb = torch.einsum("hqd,hd->hq", q, self.k_proj.bias.view(H, d))           # (H, Q) key bias term
        keys = qk.reshape(H * Q, C)                                               # (HQ, C)
        logits = (tokens.reshape(B * N, C) @ keys.to(tokens.dtype).T).float()     # (B*N, HQ): one GEMM
        logits = logits.view(B, N, H * Q) + qb.reshape(H * Q)                     # (B, N, HQ)
        if pos is not None:
            logits = logits + pos @ keys.T                                        # (N, HQ)
        att = (logits / math.sqrt(d)).softmax(dim=1).transpose(1, 2)              # (B, HQ, N)
        pooled = (att.to(tokens.dtype) @ tokens).float()                          # (B, HQ, C)
        if pos is not None:
            pooled = pooled + att @ pos                                           # (B, HQ, C)
        out = torch.einsum("bhqc,hdc->bhqd", pooled.view(B, H, Q, C), self.v_proj.weight.view(H, d, C))
        out = out + self.v_proj.bias.view(1, H, 1, d)                             # weights sum to 1
        out = self.out_proj(out.transpose(1, 2).reshape(B, Q, C))                 # (B, Q, C)
        return (out, att.view(B, H, Q, N)) if return_weights else out


class PolicyHead(nn.Module):
    """(tokens (B, N, C), cls (B, C) or None, proprio (B, P)) -> actions (B, chunk * A), for one `HeadConfig`.

    `prepare` turns a frame's tokens into what the pooling consumes (LN'ed tokens, or an already
    pooled (C,) vector for "mean"/"cls"); it has no parameters, so training computes it once per frame.
    """

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        C = cfg.embed_dim
        if cfg.attention is not None:
            self.register_buffer("pos", sincos_2d(cfg.grid, C), persistent=False)   # (N, C)
            self.pool = AttentionPool(C, cfg.attention.queries, cfg.attention.heads)
            features = cfg.attention.queries * C
        else:
            features = C
        self.mlp = nn.Sequential(
            nn.Linear(features + cfg.proprio_dim, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.GELU(),
            nn.Linear(cfg.hidden, cfg.action_dim * cfg.chunk),
        )

    def prepare(self, tokens: torch.Tensor, cls: torch.Tensor | None) -> torch.Tensor:
        """Parameter-free input: tokens (..., N, C) -> LN'ed (..., N, C) for "attention", mean of LN'ed tokens
        (..., C) for "mean", LN'ed CLS (..., C) for "cls"."""
        C = tokens.shape[-1]
        if self.cfg.uses_cls and cls is None:
            raise PolicyError(f"this {self.cfg.pooling} head reads the CLS token; the backbone has none")
        if self.cfg.pooling == "cls":
            return self._norm(cls)
        x = self._norm(tokens)                    # affine-free: the projections that follow absorb scale/shift
        return x.mean(dim=-2) if self.cfg.pooling == "mean" else x

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        """Parameter-free LayerNorm over the token width (..., C); with norm_groups G over each of the G
        blocks' C/G channels on its own, so that a block with smaller activations (block 5's tokens are about
        a third of block 11's norm in ViT-Ti) is not scaled down against the other."""
        C, G = x.shape[-1], self.cfg.norm_groups
        if G == 1:
            return F.layer_norm(x.float(), (C,))
        return F.layer_norm(x.float().unflatten(-1, (G, C // G)), (C // G,)).flatten(-2)

    def forward_prepared(self, x: torch.Tensor, proprio: torch.Tensor, return_penalty: bool = False
                         ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """x: prepared frames (B, N, C) for "attention" or (B, C); proprio (B, P) -> (B, chunk * A).

        return_penalty: also the weighted query-diversity penalty (a scalar; 0 without attention)."""
        penalty = x.new_zeros(())
        a = self.cfg.attention
        if a is not None:
            x, att = self.pool(x, self.pos, return_weights=True)                   # (B, Q, C), (B, H, Q, N)
            x = x.flatten(1)                                                        # (B, Q*C)
            if a.query_diversity > 0:
                penalty = a.query_diversity * diversity_penalty(att)
        out = self.mlp(torch.cat([x, proprio], dim=-1))                             # (B, k*A)
        return (out, penalty) if return_penalty else out

    def forward(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: torch.Tensor) -> torch.Tensor:
        N, C = self.cfg.num_tokens, self.cfg.embed_dim
        if tokens.ndim != 3 or tokens.shape[1:] != (N, C):
            raise PolicyError(f"tokens must be (B, {N}, {C}), got {tuple(tokens.shape)}")
        return self.forward_prepared(self.prepare(tokens, cls), proprio)

    @torch.no_grad()
    def query_attention(self, tokens: torch.Tensor) -> torch.Tensor:
        """Where each query looks: (B, N, C) patch tokens of one frame -> (B, H, Q, N) attention weights."""
        if self.cfg.attention is None:
            raise PolicyError(f"pooling={self.cfg.pooling!r} has no attention map")
        x = self._norm(tokens)                                                      # as prepare()
        return self.pool(x, self.pos, return_weights=True)[1]

    @torch.no_grad()
    def attention_map(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, N, C) tokens of one frame -> (B, N) attention weights, mean over heads and queries."""
        return self.query_attention(tokens).mean(dim=(1, 2))                        # (B, N)


def sincos_2d(grid: tuple[int, int], dim: int) -> torch.Tensor:
    """(h*w, dim) fixed 2-d sine-cosine position code of a row-major (h, w) patch grid: the first half
    of the channels encodes x, the second y, each as sin/cos pairs at dim/4 frequencies spaced
    geometrically from half a period across the grid to one period every four patches (at one
    period every two, sin would be 0 at every patch)."""
    if dim % 4:
        raise ParameterError(f"a 2-d sine-cosine code needs dim divisible by 4, got {dim}")
    h, w = int(grid[0]), int(grid[1])
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
    """Behaviour-cloning loss: squared error of the actions, averaged over batch and action dimensions
    (L1 and Huber were tried and did not pay: lab/control-results.md)."""
    return F.mse_loss(pred, target)
