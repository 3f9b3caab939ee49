"""Frozen-encoder features of every demo frame, computed once and cached beside the demos.

The encoder never changes during behaviour cloning, so encoding each frame once and training
on the cache makes an epoch cost a few milliseconds instead of a forward pass per frame.

Cache directory (an artifact, written atomically):

    <demo_dir>/features/<backbone>_<H>px_b<block>_<fingerprint>/
        config.json            kind "control.features": backbone name, weights fingerprint,
                               img_size, block, grid, embed_dim, has_cls, the demos' task, camera,
                               frame size, expert, configs and content digest (`feature_meta`)
        features.safetensors   tokens (M, N, C) float16, cls (M, C) float16, proprio (M, 4),
                               actions (M, 4), episode (M,) int64, step (M,) int64

With views=K > 0 (augmentation under the frozen encoder) the directory name ends in
`_views<K>_s<shift>_j<jitter>_seed<seed>`, config.json also records views, view_shift, view_jitter and
view_seed, and the file also holds view_tokens (M, K, N, C) float16 and view_cls (M, K, C) float16:
K DrQ-style views of every frame (random shift, mild colour jitter), encoded once like the frames.

The encoder runs in bfloat16 (torch.autocast) where the CPU multiplies bfloat16 natively (AMX or AVX512-BF16):
about twice as fast there as float32, tokens within about 1 % of float32's. config.json records the precision
(`precision`), and the directory name of a bfloat16 cache ends in `_bf16`.
"""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.weights import weights_fingerprint as backbone_fingerprint
from frozenvit.backbone.suite.artifacts import atomic_dir, read_config, sort_tensor_metadata, write_json
from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.backbone.suite.progress import progress_bar

from .defaults import DEFAULT_PRECISION, DEFAULT_VIEW_JITTER, DEFAULT_VIEW_SHIFT, DEFAULT_VIEWS, PRECISIONS
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
    view_tokens: torch.Tensor | None = None   # (M, K, N, C) float16: K augmented views per frame, or None
    view_cls: torch.Tensor | None = None      # (M, K, C) float16, or None (no views, or no CLS token)

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def views(self) -> int:
        """K, the augmented views per frame (0: the clean frames only)."""
        return 0 if self.view_tokens is None else int(self.view_tokens.shape[1])

    def nbytes(self) -> dict[str, int]:
        """Bytes of the clean frames' features (tokens + CLS) and of their views' (view_tokens + view_cls),
        in memory. The safetensors file holds the same float16 bytes, plus a header and, for a backbone
        without a CLS token, zeros in its place."""
        size = lambda *ts: sum(t.numel() * t.element_size() for t in ts if t is not None)
        return dict(tokens=size(self.tokens, self.cls), views=size(self.view_tokens, self.view_cls))


def default_blocks(depth: int) -> tuple[int, ...]:
    """The backbone blocks whose tokens a policy reads by default, side by side, the same for every pooling.

    12 blocks or more: the last block of the first quarter, the last of the first half and the last
    (12 blocks: 2, 5 and 11; 24: 5, 11 and 23). The last block alone misses a goal or object about one
    patch wide: block 5 beside it lifted reach (0.37 -> 0.52 over 3 seeds, paired p = 0.0014), and block 2
    beside those two lifted pick-place (0.49 -> 0.60 over 3 seeds, paired p = 0.0015) and the 8-task mean
    (0.746 -> 0.771; all paired episodes 65 / 94, p = 0.026), no task significantly worse
    (lab/control-results.md, "A third block"). Fewer than 12 blocks (distilled students such as the 4-block
    fast encoder): the last alone, the only choice measured on them."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    return (depth // 4 - 1, depth // 2 - 1, depth - 1) if depth >= 12 else (depth - 1,)


def backbone_meta(backbone: Any, block: int | Sequence[int] | None = None) -> dict[str, Any]:
    """What a cache or a policy must agree on with the backbone used at run time (block None: `default_blocks`).

    Several blocks (e.g. (5, 11)): each token is their tokens side by side, in the order given, so
    embed_dim is the backbone's times their number; `block` is then a list (one block: an int, as always)."""
    c = backbone.config
    bs = backbone.resolve_blocks(default_blocks(c.depth) if block is None else block)
    return dict(backbone=c.name, fingerprint=backbone_fingerprint(backbone), pretrained=bool(c.pretrained),
                img_size=list(c.img_size), block=bs[0] if len(bs) == 1 else bs, grid=list(c.grid),
                embed_dim=int(c.embed_dim) * len(bs), has_cls=bool(c.has_cls))


def token_blocks(meta: dict[str, Any]) -> list[int]:
    """The blocks whose tokens a cache or policy reads, in the order their channels are laid side by side."""
    b = meta["block"]
    return [int(x) for x in b] if isinstance(b, (list, tuple)) else [int(b)]


def block_label(meta: dict[str, Any]) -> str:
    """"11" for one block, "5-11" for blocks 5 and 11 (folder names, messages)."""
    return "-".join(str(b) for b in token_blocks(meta))


def check_backbone(meta: dict[str, Any], backbone: Any) -> None:
    """Raise ArtifactError unless `backbone` is the one `meta` (a policy's) was made with: weights and input size."""
    got_fp = backbone_fingerprint(backbone)
    got_size = list(backbone.config.img_size)
    if meta.get("fingerprint") != got_fp or meta.get("img_size") != got_size:
        random = (" (random weights: --random-weights; in Python load_encoder(..., pretrained=False))"
                  if meta.get("pretrained") is False else "")
        trained = encoder_label(meta.get("backbone"), meta.get("fingerprint"), meta.get("img_size"))
        given = encoder_label(backbone.config.name, got_fp, got_size)
        raise ArtifactError(f"this policy was trained on {trained}{random}, the encoder given is {given}; to use the "
                            "policy's own, give no --backbone, --weights or --image-size (command line) or pass "
                            "encoder_for_policy(policy) (Python; frozenvit.control), or retrain the policy on this one")


def encoder_label(name: str | None, fingerprint: str | None, img_size: Sequence[int] | None) -> str:
    """An encoder as messages name it: its --backbone name where it is a named one (metaworld-fast, embedded),
    then the architecture, input size (h, w) and weights, e.g. "metaworld-fast (vit_tiny_patch16_224 at [112, 112],
    weights a98d6c9d5c8b)"."""
    from frozenvit.backbone import is_embedded

    from .encoders import EMBEDDED, FAST, FAST_ENCODER_SHA256

    detail = f"{name} at {list(img_size) if img_size else img_size}, weights {str(fingerprint)[:12]}"
    named = FAST if fingerprint == FAST_ENCODER_SHA256 else EMBEDDED if is_embedded(fingerprint) else None
    return f"{named} ({detail})" if named else detail


def cache_features(demo_dir: str | Path, backbone: Any, *, block: int | Sequence[int] | None = None,
                   batch_size: int = 32, cache_dir: str | Path | None = None, progress: bool | None = None,
                   views: int = DEFAULT_VIEWS, shift: int = DEFAULT_VIEW_SHIFT,
                   jitter: float = DEFAULT_VIEW_JITTER, seed: int = 0,
                   precision: str = DEFAULT_PRECISION) -> FeatureCache:
    """Encode every frame of `demo_dir` once with the frozen `backbone` (block `block`) and cache it.

    block None: `default_blocks(depth)` (2, 5 and 11 for 12 blocks). Several blocks: their tokens side by side
    (`backbone_meta`).

    views=K > 0: also K augmented views of every frame (`view_tokens`, `view_cls`), encoded once. A view is
    the frame as the encoder sees it (after the backbone's resize to its input size), shifted DrQ-style
    (replicate-padded by `shift` pixels of that input size on every side, then cropped back at a random
    offset) and colour-jittered (brightness, contrast and saturation each scaled by a factor drawn from
    [1 - jitter, 1 + jitter]). The draws come from numpy's default_rng(seed) in frame order, so the cache is
    the same on every run. Memory and disk: K times the clean frames' features (`FeatureCache.nbytes`).
    views=0: the clean frames only; shift, jitter and seed are then unused. ParameterError for views or shift < 0 or jitter outside [0, 1).

    precision: the encoder's arithmetic, "float32", "bfloat16" (torch.autocast on the CPU) or "auto" (bfloat16
    where the CPU multiplies it natively, `native_bfloat16`, else float32); the tokens are stored in float16
    either way. ParameterError for another value.

    A cache with the same backbone weights, input size, block, episodes (and views) is loaded instead of
    recomputed; one that cannot be read (a changed or cut-short file) is recomputed, with a warning. DemoError for
    an episode file that cannot be read (`read_episode`). `cache_dir` overrides the default location under
    `<demo_dir>/features/`.
    """
    meta = feature_meta(demo_dir, backbone, block=block, views=views, shift=shift, jitter=jitter, seed=seed,
                        precision=precision)
    precision = meta["precision"]
    manifest = load_manifest(demo_dir)
    if cache_dir is None:
        H = meta["img_size"][0]
        sfx = f"_views{views}_s{shift}_j{jitter:g}_seed{seed}" if views else ""    # none: the clean caches' names
        sfx += "_bf16" if precision == "bfloat16" else ""
        cache_dir = Path(demo_dir) / "features" / (
            f"{meta['backbone']}_{H}px_b{block_label(meta)}_{meta['fingerprint'][:12]}{sfx}")
    cache_dir = Path(cache_dir)
    if (cache_dir / "config.json").is_file():
        try:
            cached = load_feature_cache(cache_dir)
        except ArtifactError as e:                    # a damaged cache is encoded again, never trained on
            warnings.warn(f"the feature cache {cache_dir} cannot be used ({e}); encoding the demos again")
            cached = None
        if cached is not None and {k: cached.meta.get(k) for k in meta} == meta and cached.views == views:
            return cached
    names = ("tokens", "cls", "proprio", "actions", "episode", "step") + (("view_tokens", "view_cls") if views else ())
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in names}
    rng = np.random.default_rng(seed)
    episodes = progress_bar(iter_episodes(demo_dir), total=len(manifest["episodes"]), desc="encode demos", unit="ep",
                    disable=None if progress is None else not progress)
    blocks = token_blocks(meta)
    for e, ep in enumerate(episodes):
        with _autocast(precision):
            g = backbone.patch_grids(list(ep.frames), blocks=blocks, batch_size=batch_size, progress=False)
        tokens, cls = _tokens_and_cls(g, blocks)                                 # (T, N, C), (T, C)
        parts["tokens"].append(tokens)
        parts["cls"].append(cls)
        parts["proprio"].append(torch.from_numpy(ep.proprio).float())
        parts["actions"].append(torch.from_numpy(ep.actions).float())
        parts["episode"].append(torch.full((len(ep),), e, dtype=torch.int64))
        parts["step"].append(torch.arange(len(ep), dtype=torch.int64))
        if views:
            vt, vc = _encode_views(backbone, ep.frames, blocks, views, shift, jitter, rng, batch_size, precision)
            parts["view_tokens"].append(vt)
            parts["view_cls"].append(vc)
    tensors = {k: torch.cat(v).contiguous() for k, v in parts.items()}
    with atomic_dir(cache_dir, KIND, keep_edits=False) as tmp:
        save_tensors(tensors, tmp / "features.safetensors")
        write_json(tmp / "config.json", dict(kind=KIND, format_version=FORMAT_VERSION, **meta))
    return _as_cache(tensors, meta)


def feature_meta(demo_dir: str | Path, backbone: Any, *, block: int | Sequence[int] | None = None,
                 views: int = DEFAULT_VIEWS, shift: int = DEFAULT_VIEW_SHIFT, jitter: float = DEFAULT_VIEW_JITTER,
                 seed: int = 0, precision: str = DEFAULT_PRECISION) -> dict[str, Any]:
    """What `cache_features` with these arguments records of its features (`FeatureCache.meta`), without encoding
    anything: the encoder (`backbone_meta`), the demos (task, camera, frame size, rendering, expert, configurations
    and `demos`, the digest of their content, `demos.demos_digest`), the precision and the views. A policy trained
    on the cache keeps it (`PatchTokenPolicy.meta_`), so a checkpoint can be matched against it before any encoding.
    ParameterError for views, shift, jitter or precision out of range; DemoError for a folder without episodes."""
    from .demos import demos_digest

    check_views(views, shift, jitter, seed)
    precision = resolve_precision(precision)
    manifest = load_manifest(demo_dir)
    if not manifest["episodes"]:
        raise DemoError(f"{demo_dir} has no successful episodes to encode")
    meta = backbone_meta(backbone, block)
    meta.update(task=manifest["task"], camera=manifest["camera"], demo_image_size=manifest["image_size"],
                render=manifest["render"], expert=manifest["expert"], demos=demos_digest(demo_dir, manifest))
    meta["configs"] = [e["config"] for e in manifest["episodes"]]
    meta["precision"] = precision
    if views:
        meta.update(views=int(views), view_shift=int(shift), view_jitter=float(jitter), view_seed=int(seed))
    return meta


def save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' save_file with its metadata in sorted key order and the permissions of every other file we write
    (0666 less the umask): save_file itself makes its file 0600, unreadable to anyone else who can read the folder,
    and writes the metadata from a hash map in an order that changes from one call to the next, so that the same
    tensors and metadata would not always be the same bytes (nor have the same sha256)."""
    save_file(tensors, str(path), metadata=metadata)
    if metadata and len(metadata) > 1:
        sort_tensor_metadata(path)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX tiles or AVX512-BF16), where autocast pays."""
    cpu = torch.cpu
    return any(getattr(cpu, f, lambda: False)() for f in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"))


def resolve_precision(precision: str) -> str:
    """"float32" or "bfloat16" for a `cache_features` precision ("auto": `native_bfloat16`); ParameterError for
    another value."""
    if precision not in PRECISIONS:
        raise ParameterError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "auto":
        return "bfloat16" if native_bfloat16() else "float32"
    return precision


def _autocast(precision: str) -> Any:
    """The context the encoder runs in: bfloat16 autocast on the CPU, or nothing for float32."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16")


def load_feature_cache(cache_dir: str | Path) -> FeatureCache:
    cfg = read_config(cache_dir, KIND, FORMAT_VERSION)
    tensors = load_file(str(Path(cache_dir) / "features.safetensors"))
    meta = {k: v for k, v in cfg.items() if k not in ("kind", "format_version")}
    return _as_cache(tensors, meta)


def _as_cache(t: dict[str, torch.Tensor], meta: dict[str, Any]) -> FeatureCache:
    has_cls = meta.get("has_cls")
    return FeatureCache(t["tokens"], t["cls"] if has_cls else None, t["proprio"], t["actions"],
                        t["episode"], t["step"], meta, view_tokens=t.get("view_tokens"),
                        view_cls=t.get("view_cls") if has_cls else None)


def _tokens_and_cls(g: Any, blocks: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """float16 tokens (B, N, C) and CLS (B, C) of PatchGrids (zeros without a CLS token); several blocks
    side by side along C, in the order given."""
    tokens, cls = [], []
    for b in blocks:
        grid = g[b]                                                                   # (B, C, h, w)
        c = g.cls(b)
        tokens.append(grid.flatten(2).transpose(1, 2))
        cls.append(c if c is not None else grid.new_zeros(grid.shape[0], grid.shape[1]))
    return torch.cat(tokens, -1).half(), torch.cat(cls, -1).half()


def check_views(views: Any, shift: Any, jitter: Any, seed: Any) -> None:
    """ParameterError unless views and shift are integers >= 0, jitter a number in [0, 1) and seed an integer."""
    def whole(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    if not whole(views) or views < 0:
        raise ParameterError(f"views must be an integer >= 0 (augmented views per frame; 0: none), got {views!r}")
    if not whole(shift) or shift < 0:
        raise ParameterError(f"shift must be an integer >= 0 (pixels of the encoder's input; 0: no shift), got {shift!r}")
    if not isinstance(jitter, (int, float, np.number)) or not 0 <= float(jitter) < 1:
        raise ParameterError(f"jitter must be a number in [0, 1) (colour factors are drawn from [1 - jitter, "
                         f"1 + jitter]; 0: none), got {jitter!r}")
    if not whole(seed):
        raise ParameterError(f"seed must be an integer, got {seed!r}")


def random_shift(x: torch.Tensor, offsets: torch.Tensor, pad: int) -> torch.Tensor:
    """DrQ random shift: images (B, 3, H, W) replicate-padded by `pad` px, cropped back to H x W at
    offsets (B, 2) = (dy, dx) in [0, 2 pad]; (pad, pad) is the image unchanged."""
    H, W = x.shape[-2:]
    xp = F.pad(x, (pad, pad, pad, pad), mode="replicate")                            # (B, 3, H+2p, W+2p)
    return torch.stack([xp[i, :, dy:dy + H, dx:dx + W] for i, (dy, dx) in enumerate(offsets.tolist())])


_LUMA = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)


def colour_jitter(x: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Images (B, 3, H, W) in [0, 1] with brightness, contrast and saturation scaled by factors (B, 3),
    in that order (1: unchanged); each step blends with black, the mean grey level, the pixel's grey."""
    b, c, s = (factors[:, i].view(-1, 1, 1, 1).to(x.dtype) for i in range(3))
    x = (x * b).clamp(0, 1)
    grey = (x * _LUMA).sum(1, keepdim=True)                                          # (B, 1, H, W)
    mean = grey.mean((2, 3), keepdim=True)                                           # (B, 1, 1, 1)
    x = ((x - mean) * c + mean).clamp(0, 1)
    grey = (x * _LUMA).sum(1, keepdim=True)
    return ((x - grey) * s + grey).clamp(0, 1)


def _encode_views(backbone: Any, frames: np.ndarray, blocks: Sequence[int], k: int, shift: int, jitter: float,
                  rng: np.random.Generator, batch_size: int, precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, k, N, C) and (T, k, C) float16 features of k augmented views of each of T frames (uint8)."""
    T = len(frames)
    offsets = torch.from_numpy(rng.integers(0, 2 * shift + 1, size=(T, k, 2)))       # (T, k, 2)
    factors = torch.from_numpy(rng.uniform(1 - jitter, 1 + jitter, size=(T, k, 3)))  # (T, k, 3)
    pre = backbone.preprocess
    tokens, cls = [], []
    for i in range(0, T, batch_size):
        x = pre(list(frames[i:i + batch_size])).pixels * pre.std + pre.mean           # (b, 3, H, W) in [0, 1]
        x = x.repeat_interleave(k, 0)                                                 # (b*k, 3, H, W)
        x = colour_jitter(random_shift(x, offsets[i:i + batch_size].flatten(0, 1), shift),
                          factors[i:i + batch_size].flatten(0, 1))
        with _autocast(precision):
            g = backbone.patch_grids((x - pre.mean) / pre.std, blocks=blocks, batch_size=batch_size,
                                     progress=False, check=False)
        t, c = _tokens_and_cls(g, blocks)                                              # (b*k, N, C), (b*k, C)
        tokens.append(t)
        cls.append(c)
    N, C = tokens[0].shape[1:]
    return torch.cat(tokens).view(T, k, N, C), torch.cat(cls).view(T, k, C)
