"""Artifacts fitted on the embedded default keep working after the default changes: they record the
weights' sha256, and an earlier default is found again by it among the `EMBEDDED` names. Here a new
default is simulated by a default.json with other weights (and no file behind it, so that loading it
would fail): everything fitted on today's default must rebuild today's weights by name."""
import json

import numpy as np
import pytest
import torch

from frozenvit.backbone import default_spec, embedded_name_for, load_backbone
from frozenvit.backbone import loading

V1_SHA = "e971feb09780f19ef2eb1f47bd054e8eb048922a44d73383b701a5b5d8a6b339"
V2_SHA = "cb3c852f3fddc9b5e9fba375d9bedbf47b2f8a30bda0f4c7208888b9eddf13d6"  # the default of 2026-12-01 to -02


def ship_new_default(tmp_path, monkeypatch) -> None:
    spec = {**default_spec(), "sha256": "f" * 64, "file": "vit_tiny_v2_not_here.safetensors"}
    path = tmp_path / "default.json"
    path.write_text(json.dumps(spec))
    monkeypatch.setattr(loading, "DEFAULT_SPEC", path)


@pytest.fixture
def new_default_shipped(tmp_path, monkeypatch):
    ship_new_default(tmp_path, monkeypatch)


def test_the_current_default_and_unknown_weights_have_no_earlier_name():
    assert embedded_name_for(default_spec()["sha256"]) is None      # load_backbone() builds it
    assert embedded_name_for("0" * 64) is None and embedded_name_for(None) is None


def test_after_a_new_default_ships_v1_weights_are_found_by_their_sha256(new_default_shipped):
    assert embedded_name_for(V1_SHA) == "frozenvit-default-v1"


def test_the_defaults_before_todays_are_found_by_sha256_and_load_by_name():
    """v2 shipped before today's default: artifacts fitted on it (they record cb3c852f...) rebuild it by name."""
    assert default_spec()["sha256"] not in (V1_SHA, V2_SHA)
    assert embedded_name_for(V2_SHA) == "frozenvit-default-v2"
    bb = load_backbone("frozenvit-default-v2")
    assert bb.config.weights_sha256 == V2_SHA and bb.config.grid == (14, 14)


def test_todays_default_has_a_version_name_that_outlives_it(tmp_path, monkeypatch):
    today = default_spec()["sha256"]
    name = next(n for n, f in loading.EMBEDDED.items() if json.loads((loading.ASSETS / f).read_text())["sha256"] == today)
    ship_new_default(tmp_path, monkeypatch)
    assert embedded_name_for(today) == name
    assert load_backbone(name).config.weights_sha256 == today


@pytest.mark.filterwarnings("ignore:only 1 held-out normals")
def test_a_patchcore_fitted_on_todays_default_loads_on_it_after_a_new_default(tmp_path, monkeypatch):
    from frozenvit.anomaly import PatchCore

    rng = np.random.default_rng(0)
    normals = [rng.integers(0, 255, (48, 48, 3), dtype=np.uint8) for _ in range(4)]
    det = PatchCore(load_backbone(img_size=48), coreset_ratio=0.5, progress=False).fit(normals)
    det.save(tmp_path / "pc")
    want = det.predict(normals[:2])
    ship_new_default(tmp_path, monkeypatch)
    back = PatchCore.load(tmp_path / "pc")
    assert back.backbone_.config.weights_sha256 == det.backbone_.config.weights_sha256
    got = back.predict(normals[:2])
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5)


def test_a_frozen_vit_forecaster_on_todays_default_loads_on_it_after_a_new_default(tmp_path, monkeypatch):
    from frozenvit.forecasting import FrozenViTForecaster

    y = np.sin(np.arange(300) / 4.0).astype(np.float32) + np.random.default_rng(0).normal(0, 0.1, 300)
    m = FrozenViTForecaster(h=8, n_blocks=1, input_size=32, max_epochs=1, windows_per_epoch=16, progress=False)
    m.fit([y]).save(tmp_path / "vit")
    ship_new_default(tmp_path, monkeypatch)
    back = FrozenViTForecaster.load(tmp_path / "vit")
    np.testing.assert_array_equal(back.predict(y[None, -32:]), m.predict(y[None, -32:]))


def test_a_policy_on_todays_default_gets_it_back_after_a_new_default(new_default_shipped):
    pytest.importorskip("frozenvit.control")
    from frozenvit.control.encoders import load_encoder

    bb = load_encoder(None, None, [224, 224], fingerprint=V1_SHA)
    assert bb.config.weights_sha256 == V1_SHA
    with torch.no_grad():
        assert bb.patch_grids(torch.zeros(1, 3, 224, 224), blocks=(0,))[0][0].shape[-2:] == (14, 14)
