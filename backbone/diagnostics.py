"""Diagnostics of a frozen ViT on real images.

- attention entropy per block and head (near 0: collapsed onto one token; near log N: uniform),
- mean attention distance per head in pixels (local vs global heads, as in Dosovitskiy et al.),
- per-token output-norm outliers: the high-norm artefact tokens that registers remove
  (Darcet et al., "Vision Transformers Need Registers").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
import torch

from .model import FrozenBackbone, _to_model
from .suite.errors import ParameterError


@dataclass
class Inspection:
    name: str
    grid: tuple[int, int]
    patch_size: int
    entropy: np.ndarray            # (depth, heads) nats, mean over patch queries and images
    entropy_max: float             # log(number of keys): the uniform-attention ceiling
    distance: np.ndarray           # (depth, heads) mean attention distance in pixels
    norm_ratio: np.ndarray         # (depth,) max / median patch-token norm at each block output
    outlier_frac: np.ndarray       # (depth,) fraction of patch tokens with norm > 3 x median
    last_norms: np.ndarray         # (B, h, w) patch-token norms at the last block

    def table(self) -> str:
        rows = [f"{'block':>5} {'entropy':>8} {'min head':>8} {'dist px':>8} {'norm max/med':>12} {'outliers':>8}"]
        for b in range(self.entropy.shape[0]):
            rows.append(f"{b:>5} {self.entropy[b].mean():>8.3f} {self.entropy[b].min():>8.3f} "
                        f"{self.distance[b].mean():>8.1f} {self.norm_ratio[b]:>12.2f} {self.outlier_frac[b]:>8.3%}")
        rows.append(f"(entropy in nats; uniform = {self.entropy_max:.3f}; distance in input pixels; "
                    f"outliers = patch tokens with norm > 3x the median)")
        return "\n".join(rows)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("last_norms")
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def _attention_probs(attn: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Recompute a timm Attention's probabilities for input x (B, N, C) -> (B, heads, N, N)."""
    B, N, _ = x.shape
    qkv = attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, _ = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1)


def reads_attention(bb: FrozenBackbone) -> bool:
    """Whether `inspect_backbone` can recompute `bb`'s attention: a ViT whose blocks use timm's plain Attention
    (softmax(q k^T) with no RoPE or relative position bias, which EVA/DINOv3 and vit_relpos blocks add)."""
    from timm.models.vision_transformer import Attention

    blocks = getattr(bb.model, "blocks", None)
    return bb.config.kind == "vit" and blocks is not None and all(
        type(getattr(blk, "attn", None)) is Attention for blk in blocks)


@torch.inference_mode()
def inspect_backbone(bb: FrozenBackbone, images: Sequence[Any], batch_size: int = 8) -> Inspection:
    """Run the diagnostics over `images` (PIL/numpy, any size) on the model's device and dtype. ViTs only:
    ParameterError (a ValueError) for a CNN."""
    if bb.config.kind != "vit":
        raise ParameterError(f"inspect_backbone needs a ViT (it reads attention maps); {bb.name} is a CNN: "
                             "pass a ViT backbone")
    if not reads_attention(bb):
        raise ParameterError(f"inspect_backbone recomputes plain ViT attention; {bb.name}'s blocks "
                             f"({type(bb.model.blocks[0].attn).__name__}) add RoPE or relative position bias, which it "
                             "does not model: pass a plain ViT (vit_*, deit_*, DINOv2)")
    model, cfg = bb.model, bb.config
    depth, heads = cfg.depth, model.blocks[0].attn.num_heads
    P = cfg.num_prefix_tokens
    h, w = cfg.grid
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    pos = torch.tensor(np.stack([yy.ravel(), xx.ravel()], 1), dtype=torch.float32) * cfg.patch_size
    dist = torch.cdist(pos, pos)                                          # (hw, hw) pixels
    model.eval()
    dist = _to_model(dist, model)

    ent_sum = torch.zeros(depth, heads)
    dist_sum = torch.zeros(depth, heads)
    norms_all: list[list[torch.Tensor]] = [[] for _ in range(depth)]
    n_img = 0
    captured: dict[int, torch.Tensor] = {}
    hooks = [blk.attn.register_forward_pre_hook(lambda m, a, i=i: captured.__setitem__(i, a[0]))
             for i, blk in enumerate(model.blocks)]
    out_hooks = [blk.register_forward_hook(
                     lambda m, a, o, i=i: norms_all[i].append(o[:, P:].float().norm(dim=-1).cpu()))
                 for i, blk in enumerate(model.blocks)]
    try:
        for s in range(0, len(images), batch_size):
            pixels = _to_model(bb.preprocess(list(images[s:s + batch_size])).pixels, model)
            captured.clear()
            model.forward_features(pixels)
            for i in range(depth):
                p = _attention_probs(model.blocks[i].attn, captured[i]).float()     # (B, H, N, N)
                pq = p[:, :, P:, :]                                         # patch queries, all keys
                ent = -(pq * pq.clamp_min(1e-12).log()).sum(-1)             # (B, H, hw)
                ent_sum[i] += ent.mean(-1).sum(0).cpu()
                pp = p[:, :, P:, P:]                                        # patch -> patch
                mass = pp.sum(-1).clamp_min(1e-12)                          # (B, H, hw)
                d = (pp * dist.float()).sum(-1) / mass                      # (B, H, hw) pixels
                dist_sum[i] += d.mean(-1).sum(0).cpu()
            n_img += pixels.shape[0]
    finally:
        for hk in hooks + out_hooks:
            hk.remove()
    norms = [torch.cat(n) for n in norms_all]                              # depth x (B, hw)
    ratio = np.array([float(n.max() / n.median()) for n in norms])
    frac = np.array([float((n > 3 * n.median(dim=1, keepdim=True).values).float().mean()) for n in norms])
    return Inspection(cfg.name, cfg.grid, cfg.patch_size, (ent_sum / n_img).numpy(),
                      float(np.log(P + h * w)), (dist_sum / n_img).numpy(), ratio, frac,
                      norms[-1].reshape(-1, h, w).numpy())


def plot_inspection(rep: Inspection, path: Any = None):
    """Three panels: entropy heatmap, attention distance per head, token-norm map of one image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    im = ax[0].imshow(rep.entropy.T, aspect="auto", cmap="viridis", vmin=0, vmax=rep.entropy_max)
    ax[0].set(xlabel="block", ylabel="head", title=f"attention entropy (nats, uniform={rep.entropy_max:.2f})")
    ax[0].set_yticks(range(rep.entropy.shape[1]))           # whole head numbers
    ax[0].set_xticks(range(0, rep.entropy.shape[0], max(1, rep.entropy.shape[0] // 8)))
    fig.colorbar(im, ax=ax[0])
    depth, heads = rep.distance.shape
    for hd in range(heads):
        ax[1].scatter(np.arange(depth), rep.distance[:, hd], s=14, alpha=0.7)
    ax[1].set(xlabel="block", ylabel="mean attention distance (px)", title="attention distance per head")
    im = ax[2].imshow(rep.last_norms[0], cmap="magma")
    ax[2].set(title=f"last-block token norms, image 0 (max/median {rep.norm_ratio[-1]:.1f})")
    ax[2].axis("off")
    fig.colorbar(im, ax=ax[2])
    fig.suptitle(rep.name)
    fig.tight_layout()
    if path is not None:
        import io

        from .suite.artifacts import atomic_write_bytes

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        atomic_write_bytes(path, buf.getvalue())
    return fig
