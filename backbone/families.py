"""Which timm ViT families frozenvit builds as ViTs, and how each one's checkpoints are read.

A family is supported when its model gives every block through `forward_intermediates` (patch grids and prefix
tokens apart), is built at any `img_size` with its position information following the grid, and its checkpoints
load into it the way timm's own loader loads them. Everything else that is a plain (single-scale) transformer is
refused rather than built `features_only`, where timm exposes only its last blocks and the block indices would
silently point at other blocks: the families of `UNSUPPORTED` by name, any other by its feature stages, which all
share one stride (`check_feature_stages`: ConViT, MLP-Mixer, VOLO, Gemma/Qwen/DeepSeek ViTs, ...). Hierarchical
models (Swin, ConvNeXt, ResNet, EfficientNet, ...) are built `features_only` and give stage grids, as ConvNets do.
"""
from __future__ import annotations

from typing import Any

import timm
import torch

from .errors import BackboneUnavailable

# timm module of the model's entry point -> family
VIT_MODULES = {
    "vision_transformer": "vit",            # vit_*, flexivit_*, DINOv2, CLIP, SigLIP, *_gap_*, registers
    "deit": "vit",                          # deit_*, deit3_*, distilled
    "eva": "eva",                           # eva02_*, eva_*, vit_*_dinov3, vit_*_rope_*, vit_pe_* (RoPE follows the grid)
    "vision_transformer_relpos": "relpos",  # vit_relpos_*, vit_srelpos_* (relative position MLP/bias per grid)
}
# plain transformers that frozenvit cannot serve block by block with the same guarantees, named in the refusal; any
# other single-scale model is refused by its feature stages (`check_feature_stages`)
UNSUPPORTED = {
    "beit": "BEiT / BEiTv2 (beit*)",
    "vision_transformer_hybrid": "hybrid ViTs (a ResNet stem: vit_*_r50_*, vit_tiny_r_s16_p8_*, ...)",
    "vision_transformer_sam": "SAM image encoders (samvit_*)",
    "naflexvit": "NaFlexViT (naflexvit_*)",
    "cait": "CaiT (cait_*)",
    "xcit": "XCiT (xcit_*)",
    "tnt": "TNT (tnt_*)",
    "crossvit": "CrossViT (crossvit_*)",
    "vitamin": "ViTamin (vitamin_*)",
}
SUPPORTED = ("plain ViTs (vit_*, deit_*, DINOv2 with or without registers, CLIP, SigLIP, FlexiViT, *_gap_*), "
             "EVA / EVA02 / DINOv3 / RoPE ViTs (timm's eva module: eva02_*, vit_*_dinov3, vit_*_rope_*) and "
             "vit_relpos_*")


def vit_family(arch: str, kwargs: dict) -> str | None:
    """"vit", "eva" or "relpos" for a supported ViT, None for a model built features_only (ConvNets, Swin, ...).

    Raises BackboneUnavailable for a plain transformer of an unsupported family (`UNSUPPORTED`)."""
    if kwargs.get("features_only"):
        return None
    module = timm.models.model_entrypoint(arch).__module__.rsplit(".", 1)[-1]
    if module in UNSUPPORTED:
        raise BackboneUnavailable(
            f"{arch} is one of timm's {UNSUPPORTED[module]}, which frozenvit does not support: it cannot hand out "
            f"their blocks' patch grids with the guarantees it gives a ViT (right blocks, prefix tokens removed, "
            f"position information resampled as timm does). Supported: {SUPPORTED}; ConvNets and hierarchical "
            "models (resnet*, efficientnet*, convnext*, swin*) are built features_only. Pick one of those "
            f"(timm.list_models('vit_*')), or use timm's own {arch}.forward_intermediates directly")
    return VIT_MODULES.get(module)


def check_feature_stages(arch: str, kwargs: dict, model: torch.nn.Module | None = None) -> None:
    """Raise BackboneUnavailable unless the features_only `model` (built from `arch` and `kwargs` on the meta
    device when not given: no memory, no weights) is a pyramid of stages that frozenvit can number.

    frozenvit numbers a features_only model's blocks by the stages timm returns, which is right for a pyramid
    (ResNet, EfficientNet, ConvNeXt, Swin, Hiera: each stage at a coarser stride), and wrong for a single-scale
    network, of which timm returns only the last blocks (ConViT, MLP-Mixer, ConvMixer, VOLO, Gemma/Qwen/DeepSeek
    ViTs: frozenvit's block 0 would be their block 9). The rule: refused when every feature stage the model has
    shares one stride (an isotropic network), or when the stages timm selects by default are two or more of one
    stride (the tail of one). An `out_indices` the caller passes is their choice and lifts the second test.
    A model that cannot be built on the meta device is checked once built (load_backbone calls this again).
    """
    if model is None:
        try:
            with torch.device("meta"):
                model = timm.create_model(arch, pretrained=False, **{**kwargs, "features_only": True})
        except Exception:  # noqa: BLE001 - any model the meta device cannot build: checked when built for real
            return
    info = getattr(model, "feature_info", None)
    if info is None or not hasattr(info, "info") or not hasattr(info, "out_indices"):
        return
    every = [int(f["reduction"]) for f in info.info]
    chosen = [every[i] for i in info.out_indices]
    isotropic = len(every) > 1 and len(set(every)) == 1
    tail = "out_indices" not in kwargs and len(chosen) > 1 and len(set(chosen)) == 1
    if not (isotropic or tail):
        return
    sel = tuple(int(i) for i in info.out_indices)
    what = (f"all {len(every)} of its blocks run at one stride ({every[0]} px), a single-scale network (a plain "
            "transformer, MLP-Mixer or ConvMixer), not a ConvNet pyramid"
            + (f"; built features_only, timm hands out only its blocks {sel}, so frozenvit's block 0 would be its "
               f"block {sel[0]}" if sel != tuple(range(len(every))) else "") if isotropic else
            f"built features_only, timm hands out its stages {sel} of 0..{len(every) - 1}, all at stride {chosen[0]} "
            f"px (the tail of a single-scale trunk, not a ConvNet pyramid), so frozenvit's block 0 would be its "
            f"stage {sel[0]}")
    raise BackboneUnavailable(
        f"{arch}: {what}. frozenvit does not support it. Supported: {SUPPORTED}; ConvNets and hierarchical models "
        "(resnet*, efficientnet*, convnext*, swin*) are built features_only. Pick one of those "
        f"(timm.list_models('vit_*')), or use timm's own {arch}.forward_intermediates directly")


def pos_embed_resampling(arch: str) -> dict[str, Any]:
    """How timm's loader resamples `arch`'s absolute position embeddings: bicubic with antialias, except FlexiViT
    and RADIO, which timm resamples bilinear without antialias (`_create_vision_transformer`)."""
    if "flexi" in arch or "radio" in arch:
        from timm.models.vision_transformer import _RADIO_ALIGN_CORNERS

        corners = any(n in arch for n in _RADIO_ALIGN_CORNERS) if "radio" in arch else None
        return dict(interpolation="bilinear", antialias=False, align_corners=corners)
    return dict(interpolation="bicubic", antialias=True, align_corners=None)


# keys that fix the architecture: a family's key filter would resample them silently (another patch size is
# another model, and position embeddings are fitted by the loader, which checks grid and prefix tokens first)
_KEEP = ("pos_embed", "patch_embed.proj.weight")


def to_timm_layout(family: str, sd: dict[str, torch.Tensor], model: torch.nn.Module, source: Any
                   ) -> dict[str, torch.Tensor]:
    """The checkpoint in the key layout of the timm model: original-repo layouts converted as timm's
    checkpoint_filter_fn converts them (DINOv2's `mask_token`/`register_tokens`/CLS row in `pos_embed`, OpenAI
    and OpenCLIP prefixes, EVA's and DINOv3's names), WITHOUT resampling anything. Position embeddings are fitted
    afterwards (`loading._fit_pos_embed`). A checkpoint the filter cannot read raises BackboneUnavailable."""
    try:
        if family == "vit":
            from timm.models import vision_transformer as tv

            if "mask_token" in sd:                                       # facebookresearch/dinov2 layout
                return tv._convert_dinov2(dict(sd), model)
            if any(k.startswith(("visual.", "trunk.", "module.visual.")) for k in sd):
                return tv.checkpoint_filter_fn(dict(sd), model)         # CLIP layouts (pos_embed as saved)
            return sd
        if family == "eva":
            from timm.models import eva

            kept = {k: sd[k] for k in _KEEP if k in sd}
            out = eva.checkpoint_filter_fn({k: v for k, v in sd.items() if k not in kept}, model)
            return {**out, **kept}
        if family == "relpos":
            from timm.models import vision_transformer_relpos as relpos

            return relpos.checkpoint_filter_fn(dict(sd), model)        # relative-position bias tables per grid
    except (RuntimeError, ValueError, KeyError, IndexError, AttributeError) as e:
        raise BackboneUnavailable(f"{source} cannot be converted to the layout of {type(model).__name__} "
                                  f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); the weights are for "
                                  "another model. Is it the right model name?") from e
    return sd
