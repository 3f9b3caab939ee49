"""A frozen pretrained ViT as a time-series encoder (Lu et al. 2021; "One Fits All", Zhou et al. 2023).

    x (B, C, L) -> RevIN -> patches (B, C, N, P)  [PatchTST's patching]
      -> trained linear patch embedding into the ViT's width D (+ trained position embedding)  (B*C, N, D)
      -> the first k transformer blocks of a `load_backbone(...)` ViT, FROZEN  -> its final norm
      -> trained flat head (B, C, D*N) -> (B, C, h) -> RevIN^-1

Trained: the embedding, the head, RevIN's affine pair and, optionally (`train_pos`, `train_norm`), the
position embedding and the LayerNorms' affine pairs in the blocks and the final norm (the papers train
both). Everything else of the blocks stays frozen: requires_grad False and eval mode (no dropout, no drop
path) even while the forecaster trains; gradients flow through the blocks to the embedding.

The backbone is imported lazily, inside functions: `import frozenvit.forecasting` loads no timm.
A saved forecaster holds only the trained tensors; it records the backbone (name, weights sha256, and
the sha256 of the frozen tensors it used) and rebuilds or checks it on load.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from frozenvit.backbone.suite.errors import ArtifactError, FrozenVitError, ParameterError

from .defaults import LOOKBACK, PATCH_LEN, VIT_DEPTH
from .defaults import NEURAL_TRAINING as _T
from .layers import FastDropout, RevIN, init_uniform_pos, patch_count, patchify
from .training import TRAINING_CONSTRAINTS, NeuralForecaster, at_least, share


class BackboneMismatch(ArtifactError):
    """A saved FrozenViTForecaster is loaded with another backbone than the one it was trained on."""


class NotAViT(FrozenVitError, ValueError):
    """The backbone given to FrozenViTForecaster has no transformer blocks to borrow, or fewer than asked."""


@dataclass(frozen=True)
class FrozenViTConfig:
    """The trained parts around the frozen blocks; the blocks themselves come from the backbone."""
    input_size: int                    # look-back L
    h: int
    patch_len: int = PATCH_LEN
    stride: int = 8
    n_blocks: int = VIT_DEPTH          # the first k blocks of the ViT
    train_norm: bool = True            # LayerNorm affine pairs trained (Lu et al.; One Fits All)
    train_pos: bool = True             # a trained position embedding; without it the head alone knows positions
    dropout: float = 0.1               # on the embedded tokens
    head_dropout: float = 0.0
    revin: bool = True
    revin_affine: bool = True
    subtract_last: bool = False

    def __post_init__(self) -> None:
        patch_count(self.input_size, self.patch_len, self.stride)      # raises if L < P
        if int(self.n_blocks) < 1:
            raise ParameterError(f"n_blocks={self.n_blocks}: use at least one frozen block")

    @property
    def n_patches(self) -> int:
        return patch_count(self.input_size, self.patch_len, self.stride)


def _borrowed(backbone: Any, k: int) -> tuple[nn.Sequential, nn.Module]:
    """A timm ViT's first k blocks and its final norm, the backbone's own modules (not copies)."""
    vit = backbone.model
    blocks = getattr(vit, "blocks", None)
    if backbone.config.kind != "vit" or blocks is None or not hasattr(vit, "norm"):
        raise NotAViT(f"{backbone.name} has no transformer blocks; FrozenViTForecaster needs a ViT backbone "
                      "(load_backbone() or a timm vit_*/deit_*/dinov2 name), not a ConvNet")
    if k > len(blocks):
        raise NotAViT(f"n_blocks={k} but {backbone.name} has {len(blocks)} blocks; use n_blocks <= {len(blocks)}")
    return nn.Sequential(*list(blocks)[:k]), vit.norm


def load_vit(name: str | None = None, weights: Any = None, n_blocks: int = VIT_DEPTH) -> Any:
    """`load_backbone(name, weights)` (None: the embedded default ViT), checked to be a ViT with at least
    `n_blocks` blocks (NotAViT otherwise): what the CLI's --backbone/--weights/--depth give."""
    from frozenvit.backbone import load_backbone

    backbone = load_backbone(name, weights=weights)
    _borrowed(backbone, int(n_blocks))
    return backbone


def frozen_sha256(backbone: Any, k: int) -> str:
    """sha256 of the pretrained tensors a forecaster borrows: the first k blocks and the final norm."""
    blocks, norm = _borrowed(backbone, k)
    digest = hashlib.sha256()
    for prefix, part in (("blocks.", blocks), ("norm.", norm)):
        for name, t in sorted(part.state_dict().items()):
            digest.update((prefix + name).encode())
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class FrozenViTNet(nn.Module):
    """The network; `state_dict` holds the trained tensors only (the frozen ones come from the backbone)."""

    def __init__(self, cfg: FrozenViTConfig, backbone: Any) -> None:
        super().__init__()
        self.cfg, self.n_patches = cfg, cfg.n_patches
        # copies: training their LayerNorms must not change the caller's backbone
        self.blocks, self.norm = map(copy.deepcopy, _borrowed(backbone, int(cfg.n_blocks)))
        width = backbone.config.embed_dim
        self.revin = RevIN(cfg.revin_affine, cfg.subtract_last) if cfg.revin else None
        self.embed = nn.Linear(cfg.patch_len, width)
        self.pos = init_uniform_pos(self.n_patches, width) if cfg.train_pos else None
        self.drop = FastDropout(cfg.dropout)
        self.head = nn.Sequential(nn.Flatten(start_dim=-2), nn.Linear(width * self.n_patches, cfg.h),
                                  FastDropout(cfg.head_dropout))
        self.blocks.requires_grad_(False).eval()
        self.norm.requires_grad_(False).eval()
        if cfg.train_norm:
            for m in [*self.blocks.modules(), *self.norm.modules()]:
                if isinstance(m, nn.LayerNorm):
                    m.requires_grad_(True)
        self._frozen = {k for k, v in self._all_tensors().items() if not v.requires_grad}

    def _all_tensors(self) -> dict[str, torch.Tensor]:
        return {**dict(self.named_parameters()), **dict(self.named_buffers())}

    def train(self, mode: bool = True) -> "FrozenViTNet":
        super().train(mode)
        self.blocks.eval()          # no dropout / drop path in the borrowed blocks, ever
        self.norm.eval()
        return self

    def state_dict(self, *args: Any, **kw: Any) -> dict[str, torch.Tensor]:
        return {k: v for k, v in super().state_dict(*args, **kw).items() if k not in self._frozen}

    def load_state_dict(self, state: dict, strict: bool = True, **kw: Any):
        res = super().load_state_dict(state, strict=False, **kw)
        missing = sorted(set(res.missing_keys) - self._frozen)
        if strict and (missing or res.unexpected_keys):
            raise RuntimeError(f"FrozenViTNet weights do not fit: missing {missing}, unexpected "
                               f"{sorted(res.unexpected_keys)}")
        return res

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, C, L) -> forecasts (B, C, h)."""
        B, C, _ = x.shape
        if self.revin is not None:
            x, stats = self.revin.normalize(x)                                      # (B, C, L)
        p = patchify(x, self.cfg.patch_len, self.cfg.stride)                        # (B, C, N, P)
        z = self.embed(p).reshape(B * C, self.n_patches, -1)                        # (B*C, N, D)
        if self.pos is not None:
            z = z + self.pos
        z = self.norm(self.blocks(self.drop(z)))                                    # (B*C, N, D)
        z = z.reshape(B, C, self.n_patches, -1).transpose(-1, -2)                   # (B, C, D, N)
        y = self.head(z)                                                            # (B, C, h)
        return self.revin.denormalize(y, stats) if self.revin is not None else y


def trainable_parameters(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


def _is_embedded_default(bb: Any) -> bool:
    """The embedded default, or an earlier one loaded by name (found again on load by its sha256)."""
    from frozenvit.backbone import is_embedded

    return is_embedded(bb.weights_sha256)


class FrozenViTForecaster(NeuralForecaster):
    """Channel-independent forecaster on the frozen blocks of a ViT (CLI model name `vit`).

    backbone: a `load_backbone(...)` ViT; None: the embedded default, loaded on first use. n_blocks: how
    many of its first blocks to use (One Fits All uses 6 of GPT-2's 12). Training: `NeuralForecaster`'s
    loop and defaults (`forecasting.defaults`). Trainable parameters (D the ViT's width, N patches):
    embedding (P+1)·D + head (D·N+1)·h, + N·D with `train_pos`, + 4·D per block + 2·D with
    `train_norm`, + 2 with RevIN's affine pair (`trainable_parameters(model.net_)`).
    """

    config_class, net_class = FrozenViTConfig, FrozenViTNet
    _parameter_constraints = {
        **TRAINING_CONSTRAINTS, "backbone": "no_validation", "n_blocks": at_least(1), "patch_len": at_least(1),
        "stride": at_least(1), "dropout": share(), "head_dropout": share(),
        **dict.fromkeys(("train_norm", "train_pos", "revin", "revin_affine", "subtract_last"), ["boolean"])}

    def __init__(self, h: int, backbone: Any = None, n_blocks: int = VIT_DEPTH, input_size: int = LOOKBACK,
                 patch_len: int = PATCH_LEN, stride: int = 8, train_norm: bool = True, train_pos: bool = True, dropout: float = 0.1,
                 head_dropout: float = 0.0, revin: bool = True, revin_affine: bool = True,
                 subtract_last: bool = False, loss: str = _T["loss"], normalize_loss: bool = _T["normalize_loss"],
                 lr: float = _T["lr"], lr_decay: float = 0.9, lr_decay_after: int = 3, lr_schedule: str = "step",
                 pct_start: float = 0.3, max_epochs: int = _T["max_epochs"], patience: int = _T["patience"],
                 batch_size: int = _T["batch_size"], windows_per_epoch: int | None = _T["windows_per_epoch"],
                 val_size: int | None = None, seed: int = _T["seed"], progress: bool | None = None,
                 device: str = "cpu", checkpoint_dir: str | None = None, resume: bool = False,
                 alias: str | None = None) -> None:
        self.h, self.backbone, self.n_blocks, self.input_size = h, backbone, n_blocks, input_size
        self.patch_len, self.stride, self.train_norm, self.train_pos = patch_len, stride, train_norm, train_pos
        self.dropout, self.head_dropout, self.revin, self.revin_affine = dropout, head_dropout, revin, revin_affine
        self.subtract_last, self.loss, self.normalize_loss, self.lr = subtract_last, loss, normalize_loss, lr
        self.lr_decay, self.lr_decay_after, self.lr_schedule = lr_decay, lr_decay_after, lr_schedule
        self.pct_start, self.max_epochs, self.patience, self.batch_size = pct_start, max_epochs, patience, batch_size
        self.windows_per_epoch, self.val_size, self.seed = windows_per_epoch, val_size, seed
        self.progress, self.device = progress, device
        self.checkpoint_dir, self.resume, self.alias = checkpoint_dir, resume, alias

    def _default_alias(self) -> str:
        return "FrozenViT"

    def get_backbone(self) -> Any:
        """The backbone given, or the embedded default (loaded once per instance)."""
        if self.backbone is not None:
            return self.backbone
        if getattr(self, "_default", None) is None:
            from frozenvit.backbone import load_backbone

            self._default = load_backbone()
        return self._default

    def _build(self) -> nn.Module:
        return FrozenViTNet(self.net_config, self.get_backbone())

    def backbone_record(self) -> dict:
        """What identifies the frozen part: name, weights file sha256, sha256 of the borrowed tensors."""
        bb = self.get_backbone()
        return {"name": bb.name, "weights_sha256": bb.weights_sha256, "default": _is_embedded_default(bb),
                "n_blocks": int(self.n_blocks), "frozen_sha256": frozen_sha256(bb, int(self.n_blocks))}

    def recorded_params(self) -> dict:
        return {**super().recorded_params(), "backbone": self.backbone_record()}

    @classmethod
    def _from_params(cls, params: dict, path: Path, backbone: Any = None) -> "FrozenViTForecaster":
        """Rebuild the embedded default (or take `backbone`) and check it is the one trained on."""
        rec = params.pop("backbone", None)
        if not isinstance(rec, dict) or "frozen_sha256" not in rec:
            raise ArtifactError(f"{path}/config.json does not record its backbone; the artifact is corrupt, "
                                "write it again")
        if backbone is None and not rec.get("default"):
            raise BackboneMismatch(f"{path} was trained on backbone {rec['name']!r} (weights sha256 "
                                   f"{rec.get('weights_sha256')}), which is not the embedded default: load it "
                                   "with that backbone, FrozenViTForecaster.load(path, backbone=load_backbone(...))")
        if backbone is None:
            from frozenvit.backbone import embedded_name_for, load_backbone

            earlier = embedded_name_for(rec.get("weights_sha256"))     # trained on an earlier default
            backbone = load_backbone(earlier) if earlier else None
        model = cls(backbone=backbone, **params)
        have = frozen_sha256(model.get_backbone(), int(model.n_blocks))
        if have != rec["frozen_sha256"]:
            raise BackboneMismatch(f"{path} was trained on other frozen weights than this backbone's "
                                   f"({model.get_backbone().name!r} vs {rec['name']!r} recorded); load it with the "
                                   "backbone it was trained on, or train again")
        return model
