"""Encoders for the control loop, by name: `load_encoder("embedded")`, `load_encoder("metaworld-fast")`.

"embedded" (the default, also None) is the embedded default ViT of frozenvit.backbone. "metaworld-fast"
(`FAST_ENCODER`) is a 4-block ViT-Tiny/16 at 112 px (7 x 7 tokens) distilled from the embedded default on
Meta-World expert-demo frames by `frozenvit distill` (recipe and figures: control/assets/MODEL_CARD.md and lab/control-fast-encoder-notes.md). It
only knows Meta-World's look; for anything else use the embedded default or your own backbone. Any other
name is a timm model, built by `backbone.load_backbone`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from frozenvit.backbone.config import EMBEDDED_NAME as EMBEDDED
from frozenvit.backbone.suite.errors import UsageError

FAST = "metaworld-fast"
BACKBONES = (EMBEDDED, FAST)                 # the names this module resolves itself
FAST_ENCODER = Path(__file__).parent / "assets" / "metaworld_vit4_112.safetensors"
FAST_ENCODER_SHA256 = "a98d6c9d5c8be363622b69a1ff3f0f55b0a6115d17d19198e0cbfe04a1dd3d66"
FAST_ENCODER_ARCH = "vit_tiny_patch16_224"
FAST_ENCODER_SIZE = 112


def load_fast_encoder(verify: bool = True) -> Any:
    """The frozen fast encoder (a backbone.FrozenBackbone); raises BackboneUnavailable if the file is
    missing or (verify) does not match its recorded checksum."""
    from frozenvit.backbone import BackboneUnavailable, load_backbone
    from frozenvit.backbone.suite.artifacts import sha256_file

    if not FAST_ENCODER.is_file():
        raise BackboneUnavailable(f"{FAST_ENCODER} is missing: reinstall frozenvit, or distil one with "
                                  "`frozenvit distill` and pass it as --backbone/--weights")
    if verify and sha256_file(FAST_ENCODER) != FAST_ENCODER_SHA256:
        raise BackboneUnavailable(f"{FAST_ENCODER} does not match its checksum; reinstall frozenvit")
    return load_backbone(FAST_ENCODER_ARCH, weights=FAST_ENCODER, img_size=FAST_ENCODER_SIZE)


def load_encoder(name: str | None = None, weights: str | os.PathLike | None = None,
                 image_size: int | tuple[int, int] | list[int] | None = None, *, pretrained: bool = True,
                 fingerprint: str | None = None) -> Any:
    """The frozen encoder called `name` (None or "embedded": the embedded default; "metaworld-fast"; else a timm
    name with optional local `weights`), at `image_size` (None: its own).

    fingerprint: the weights a policy was trained on. With no name, no weights and pretrained weights, it picks
    the encoder that has them: the fast encoder, or an earlier embedded default (backbone.embedded_name_for).
    pretrained=False: random weights, drawn from seed 0 (the same every time, so a baseline trained on them can
    be evaluated later). UsageError for "metaworld-fast" with weights, random weights or another size.
    """
    import torch

    from frozenvit.backbone import embedded_name_for, load_backbone

    size = tuple(image_size) if isinstance(image_size, (list, tuple)) else image_size
    if name is None and weights is None and pretrained and fingerprint == FAST_ENCODER_SHA256:
        name = FAST
    if name == FAST:
        if weights is not None or not pretrained or size not in (None, FAST_ENCODER_SIZE,
                                                                (FAST_ENCODER_SIZE, FAST_ENCODER_SIZE)):
            raise UsageError(f"{FAST} is a shipped encoder with its own weights at {FAST_ENCODER_SIZE} px; give "
                             "no --weights, --random-weights or --image-size with it")
        return load_fast_encoder()
    if name in (None, EMBEDDED):
        name = embedded_name_for(fingerprint) if weights is None and pretrained else None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return load_backbone(name, weights=weights, img_size=size, pretrained=pretrained)


def encoder_for_policy(policy: Any, name: str | None = None, weights: str | os.PathLike | None = None,
                       image_size: int | None = None, *, pretrained: bool = True) -> Any:
    """The encoder a fitted policy acts with: `load_encoder` at the policy's input size (unless `image_size`),
    by default the very weights it was trained on. ArtifactError unless it is that encoder.

    `name` "metaworld-fast" comes at its own size whatever the policy's (only an explicit `image_size` of another
    size is a UsageError), so that naming it for a policy of another encoder is that ArtifactError."""
    size = image_size or (None if name == FAST else policy.meta_["img_size"])
    bb = load_encoder(name, weights, size, pretrained=pretrained, fingerprint=policy.meta_.get("fingerprint"))
    policy.check_backbone(bb)
    return bb
