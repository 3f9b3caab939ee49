"""The shipped fast encoder for the control loop.

`load_fast_encoder()` returns a 4-block ViT-Tiny/16 at 112 px (7 x 7 tokens) distilled from the
embedded default on Meta-World expert-demo frames by `frozenvit distill` (recipe and figures:
control/assets/MODEL_CARD.md, benchmarks/control_student.py). It only knows Meta-World's look; for
anything else use the embedded default or your own backbone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

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
                                  "benchmarks/control_student.py and pass it as --backbone/--weights")
    if verify and sha256_file(FAST_ENCODER) != FAST_ENCODER_SHA256:
        raise BackboneUnavailable(f"{FAST_ENCODER} does not match its checksum; reinstall frozenvit")
    return load_backbone(FAST_ENCODER_ARCH, weights=FAST_ENCODER, img_size=FAST_ENCODER_SIZE)
