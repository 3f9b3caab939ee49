"""The shipped default backbone: loads, has the documented grid, matches its checksum."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ASSETS = Path(__file__).resolve().parents[1] / "backbone" / "assets"
SPEC = ASSETS / "default.json"
pytestmark = pytest.mark.skipif(not SPEC.is_file(), reason="no embedded default shipped yet (backbone/assets/default.json)")


def _spec() -> dict:
    return json.loads(SPEC.read_text())


def test_asset_checksum_matches_default_json_and_model_card():
    from frozenvit.backbone.suite.artifacts import sha256_file

    spec = _spec()
    sha = sha256_file(ASSETS / spec["file"])
    assert sha == spec["sha256"]
    assert sha in (ASSETS / "MODEL_CARD.md").read_text()


def test_asset_is_a_small_bare_vit_at_the_training_grid():
    from safetensors.torch import load_file

    spec = _spec()
    path = ASSETS / spec["file"]
    assert path.stat().st_size < 15 * 2**20
    sd = load_file(path)
    g = spec["train_img_size"] // 16
    assert tuple(sd["pos_embed"].shape) == (1, 1 + g * g, spec["embed_dim"])
    assert not any(k.startswith("head.") and sd[k].numel() for k in sd)


def test_default_backbone_loads_with_the_documented_grid():
    from frozenvit.backbone import load_backbone

    spec = _spec()
    bb = load_backbone()
    n = spec["img_size"] // 16
    assert bb.config.grid == (n, n)
    assert bb.config.weights_sha256 == spec["sha256"]
    assert tuple(bb.config.mean) == tuple(spec["mean"]) and tuple(bb.config.std) == tuple(spec["std"])
    assert not any(p.requires_grad for p in bb.model.parameters())
    g = bb.patch_grids(torch.zeros(1, 3, spec["img_size"], spec["img_size"]), blocks=(spec["depth"] - 1,))
    assert g[spec["depth"] - 1].shape == (1, spec["embed_dim"], n, n)
    assert torch.isfinite(g[spec["depth"] - 1]).all()
