"""Composite cameras ("corner+topview"): views side by side, an encoder built at (S, k*S), the whole loop."""
import argparse

import numpy as np
import pytest
import torch

pytest.importorskip("metaworld")
pytest.importorskip("mujoco")

from frozenvit.control import (AttentionConfig, MetaWorldTask, PatchTokenPolicy, RenderUnavailable,  # noqa: E402
                               TaskError, cache_features, camera_count, collect_demos, config_seeds, evaluate,
                               frame_size, load_manifest)

TWO = "corner+topview"


def _task(camera, size=32):
    try:
        return MetaWorldTask("reach-v3", camera=camera, image_size=size)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")


def test_camera_count_and_frame_size_follow_the_views():
    assert camera_count("corner") == 1 and camera_count(TWO) == 2
    assert frame_size(64, "corner") == (64, 64) and frame_size(64, "corner+topview+corner2") == (64, 192)
    with pytest.raises(TaskError, match="empty name"):
        camera_count("corner+")


def test_a_composite_frame_is_the_single_cameras_frames_side_by_side():
    with _task(TWO) as both, _task("corner") as left, _task("topview") as right:
        for t in (both, left, right):
            t.reset(config_seeds("heldout", 1)[0])
            t.step(np.array([0.5, -0.3, 0.2, 0.0]))             # same action, same state: a frame past the reset
        frame = both.render()
        assert frame.shape == (32, 64, 3) and frame.dtype == np.uint8
        np.testing.assert_array_equal(frame[:, :32], left.render())     # each view upright on its own
        np.testing.assert_array_equal(frame[:, 32:], right.render())
        assert not np.array_equal(frame[:, :32], frame[:, 32:])


def test_an_unknown_camera_inside_a_composite_is_refused_naming_the_scenes_cameras():
    with pytest.raises(TaskError, match=r"no camera named 'nosuchcam'.*corner"):
        _task("corner+nosuchcam")


@pytest.fixture(scope="module")
def two_view_bb(make_tiny_vit):
    torch.manual_seed(0)
    return make_tiny_vit(img_size=frame_size(64, TWO))                  # (64, 128): a 4 x 8 token grid


@pytest.mark.slow
def test_collect_cache_fit_and_evaluate_with_two_views(tmp_path, two_view_bb):
    d = tmp_path / "reach2"
    try:
        collect_demos("reach-v3", d, 2, camera=TWO, image_size=64, max_steps=100, progress=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    assert load_manifest(d)["camera"] == TWO
    cache = cache_features(d, two_view_bb)
    assert cache.meta["grid"] == [4, 8] and cache.tokens.shape[1] == 32 and cache.meta["camera"] == TWO
    pol = PatchTokenPolicy("attention", AttentionConfig(heads=3), epochs=2, seed=0).fit(cache, progress=False)
    assert pol.head_.cfg.grid == (4, 8) and pol.meta_["img_size"] == [64, 128]
    res = evaluate(pol, two_view_bb, config_seeds("heldout", 2), max_steps=3, parallel=2, progress=False)
    assert res.steps == [3, 3] and res.success_rate == 0.0              # 3 steps cannot reach the goal


def _args(**kw):
    base = dict(encoder=None, backbone="vit_tiny_patch16_224", weights=None, img_size=None, random_weights=True)
    return argparse.Namespace(**{**base, **kw})


def test_the_cli_builds_the_encoder_for_a_composite_cameras_frames():
    from frozenvit.control.cli import load_backbone_for_camera

    def size(*a):
        return tuple(load_backbone_for_camera(*a).config.img_size)

    assert size(_args(img_size=64), TWO) == (64, 128)          # --img-size: one view's
    assert size(_args(), TWO) == (224, 448)                    # the model's own, per view
    assert size(_args(), TWO, [64, 128]) == (64, 128)          # a policy's: the whole input
    assert size(_args(img_size=64), "corner") == (64, 64)


def test_the_fast_encoder_refuses_a_composite_camera(tmp_path, capsys):
    from frozenvit.backbone.suite.cli import main

    out = tmp_path / "demos"
    assert main(["control", "collect", "--task", "reach-v3", "--out", str(out), "--camera", TWO,
                 "--encoder", "fast"]) == 2
    assert "fast encoder" in capsys.readouterr().err and not (out / "manifest.json").exists()
    from frozenvit.backbone.suite.errors import UsageError
    from frozenvit.control.cli import load_backbone_for_camera

    with pytest.raises(UsageError, match="composite"):
        load_backbone_for_camera(_args(encoder="fast", backbone=None, random_weights=False), TWO)
