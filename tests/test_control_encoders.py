"""The shipped fast control encoder loads frozen, at its documented size and depth, checksum-verified."""
import numpy as np
import pytest
import torch

from frozenvit.control import load_fast_encoder
from frozenvit.control.encoders import FAST_ENCODER, FAST_ENCODER_SHA256


def test_fast_encoder_loads_as_a_4_block_vit_at_112px_with_its_checksum():
    from frozenvit.backbone.suite.artifacts import sha256_file

    assert sha256_file(FAST_ENCODER) == FAST_ENCODER_SHA256
    bb = load_fast_encoder()
    c = bb.config
    assert (c.depth, c.grid, c.img_size, c.embed_dim, c.weights_sha256) == (4, (7, 7), (112, 112), 192, FAST_ENCODER_SHA256)
    assert all(not p.requires_grad for p in bb.model.parameters())
    frame = np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    g = bb.patch_grids([frame], blocks=(-1,))
    assert g[-1].shape == (1, 192, 7, 7) and torch.isfinite(g[-1]).all()


def test_a_tampered_fast_encoder_is_refused(tmp_path, monkeypatch):
    import frozenvit.control.encoders as enc
    from frozenvit.backbone import BackboneUnavailable

    bad = tmp_path / "x.safetensors"
    bad.write_bytes(FAST_ENCODER.read_bytes()[:-1] + b"\0")
    monkeypatch.setattr(enc, "FAST_ENCODER", bad)
    with pytest.raises(BackboneUnavailable, match="checksum"):
        enc.load_fast_encoder()


def test_load_encoder_resolves_controls_names_and_refuses_the_fast_one_at_another_size():
    from frozenvit.backbone.suite.errors import UsageError
    from frozenvit.control.encoders import load_encoder

    assert load_encoder("metaworld-fast").config.weights_sha256 == FAST_ENCODER_SHA256
    assert load_encoder(fingerprint=FAST_ENCODER_SHA256).config.weights_sha256 == FAST_ENCODER_SHA256  # a policy's
    for kw in (dict(image_size=64), dict(weights="w.safetensors"), dict(pretrained=False)):
        with pytest.raises(UsageError, match="metaworld-fast"):
            load_encoder("metaworld-fast", **kw)


def test_load_encoder_builds_the_same_random_weights_every_time():
    from frozenvit.control.encoders import load_encoder

    a, b = (load_encoder("embedded", image_size=32, pretrained=False) for _ in range(2))
    assert not a.config.pretrained and tuple(a.config.img_size) == (32, 32)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
