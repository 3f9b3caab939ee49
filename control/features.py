"""Frozen-encoder features of every demo frame, computed once and cached beside the demos.

The encoder never changes during behaviour cloning, so encoding each frame once and training
on the cache makes an epoch cost a few milliseconds instead of a forward pass per frame.

Cache directory (an artifact, written atomically):

    <demo_dir>/features/<backbone>_<H>px_b<block>_<fingerprint>/
        config.json            kind "control.features": backbone name, weights fingerprint,
                               img_size, block, grid, embed_dim, has_cls, demo configs
        features.safetensors   tokens (M, N, C) float16, cls (M, C) float16, proprio (M, 4),
                               actions (M, 4), episode (M,) int64, step (M,) int64
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.artifacts import atomic_dir, read_config, write_json
from frozenvit.backbone.suite.progress import progress_bar

from .demos import iter_episodes, load_manifest
from .errors import DemoError

KIND = "control.features"
FORMAT_VERSION = 1


@dataclass
class FeatureCache:
    """Patch tokens and labels of every demo frame, M frames in all."""
    tokens: torch.Tensor        # (M, N, C) float16, N = h*w patch tokens, row-major over the grid
    cls: torch.Tensor | None    # (M, C) float16, or None if the backbone has no CLS token
    proprio: torch.Tensor       # (M, 4) float32
    actions: torch.Tensor       # (M, 4) float32
    episode: torch.Tensor       # (M,) int64, episode index (0..E-1)
    step: torch.Tensor          # (M,) int64, step within the episode
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.actions.shape[0])


def backbone_fingerprint(backbone: Any) -> str:
    """Weights hash of a backbone; for random (unhashed) weights, a hash of the parameters."""
    if getattr(backbone, "weights_sha256", None):
        return str(backbone.weights_sha256)
    h = hashlib.sha256()
    for name, p in backbone.model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def default_block(depth: int) -> int:
    """The backbone block whose tokens a policy reads by default: the last one (0-based: depth - 1), for
    every pooling, so that poolings are compared on the same tokens (control/RESULTS.md, "Which block")."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    return depth - 1


def backbone_meta(backbone: Any, block: int | None = None) -> dict[str, Any]:
    """What a cache or a policy must agree on with the backbone used at run time (block None: the last)."""
    c = backbone.config
    b = backbone.resolve_blocks(default_block(c.depth) if block is None else block)[0]
    return dict(backbone=c.name, fingerprint=backbone_fingerprint(backbone), pretrained=bool(c.pretrained),
                img_size=list(c.img_size), block=b, grid=list(c.grid), embed_dim=int(c.embed_dim),
                has_cls=bool(c.has_cls))


def check_backbone(meta: dict[str, Any], backbone: Any) -> None:
    """Raise ArtifactError unless `backbone` is the one `meta` (a policy's) was made with: weights and input size."""
    got_fp = backbone_fingerprint(backbone)
    got_size = list(backbone.config.img_size)
    if meta.get("fingerprint") != got_fp or meta.get("img_size") != got_size:
        random = " (random weights: pass --random-weights)" if meta.get("pretrained") is False else ""
        raise ArtifactError(
            f"this policy was trained on {meta.get('backbone')} at {meta.get('img_size')} (weights "
            f"{str(meta.get('fingerprint'))[:12]}{random}), the backbone given is {backbone.config.name} at "
            f"{got_size} (weights {got_fp[:12]}); load the same backbone or retrain the policy")


def cache_features(demo_dir: str | Path, backbone: Any, *, block: int | None = None, batch_size: int = 32,
                   cache_dir: str | Path | None = None, progress: bool | None = None) -> FeatureCache:
    """Encode every frame of `demo_dir` once with the frozen `backbone` (block `block`) and cache it.

    block None: `default_block(depth)`, the last block.

    A cache with the same backbone weights, input size, block and episodes is loaded instead of
    recomputed. `cache_dir` overrides the default location under `<demo_dir>/features/`.
    """
    manifest = load_manifest(demo_dir)
    if not manifest["episodes"]:
        raise DemoError(f"{demo_dir} has no successful episodes to encode")
    meta = backbone_meta(backbone, block)
    meta.update(task=manifest["task"], camera=manifest["camera"], demo_image_size=manifest["image_size"],
                render=manifest["render"])
    meta["configs"] = [e["config"] for e in manifest["episodes"]]
    if cache_dir is None:
        H = meta["img_size"][0]
        cache_dir = Path(demo_dir) / "features" / (
            f"{meta['backbone']}_{H}px_b{meta['block']}_{meta['fingerprint'][:12]}")
    cache_dir = Path(cache_dir)
    if (cache_dir / "config.json").is_file():
        cached = load_feature_cache(cache_dir)
        if {k: cached.meta.get(k) for k in meta} == meta:
            return cached
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("tokens", "cls", "proprio", "actions", "episode", "step")}
    episodes = progress_bar(iter_episodes(demo_dir), total=len(manifest["episodes"]), desc="encode demos", unit="ep",
                    disable=None if progress is None else not progress)
    for e, ep in enumerate(episodes):
        g = backbone.patch_grids(list(ep.frames), blocks=(meta["block"],), batch_size=batch_size, progress=False)
        grid = g[meta["block"]]                                                   # (T, C, h, w)
        parts["tokens"].append(grid.flatten(2).transpose(1, 2).half())            # (T, N, C)
        cls = g.cls(meta["block"])
        parts["cls"].append((cls if cls is not None else grid.new_zeros(grid.shape[0], grid.shape[1])).half())
        parts["proprio"].append(torch.from_numpy(ep.proprio).float())
        parts["actions"].append(torch.from_numpy(ep.actions).float())
        parts["episode"].append(torch.full((len(ep),), e, dtype=torch.int64))
        parts["step"].append(torch.arange(len(ep), dtype=torch.int64))
    tensors = {k: torch.cat(v).contiguous() for k, v in parts.items()}
    with atomic_dir(cache_dir, KIND) as tmp:
        save_file(tensors, str(tmp / "features.safetensors"))
        write_json(tmp / "config.json", dict(kind=KIND, format_version=FORMAT_VERSION, **meta))
    return _as_cache(tensors, meta)


def load_feature_cache(cache_dir: str | Path) -> FeatureCache:
    cfg = read_config(cache_dir, KIND, FORMAT_VERSION)
    tensors = load_file(str(Path(cache_dir) / "features.safetensors"))
    meta = {k: v for k, v in cfg.items() if k not in ("kind", "format_version")}
    return _as_cache(tensors, meta)


def _as_cache(t: dict[str, torch.Tensor], meta: dict[str, Any]) -> FeatureCache:
    return FeatureCache(t["tokens"], t["cls"] if meta.get("has_cls") else None, t["proprio"], t["actions"],
                        t["episode"], t["step"], meta)
