"""A policy evaluated through each runtime closes the loop as torch does, on Meta-World (renders: slow)."""
import numpy as np
import pytest
import torch

pytest.importorskip("metaworld")
pytest.importorskip("onnx")

from frozenvit.backbone.export import runtime_backbone  # noqa: E402
from frozenvit.control import (AttentionConfig, MetaWorldTask, PatchTokenPolicy, RenderUnavailable,  # noqa: E402
                               VisuomotorAgent, cache_features, collect_demos, config_seeds, evaluate)
from frozenvit.control.features import token_blocks  # noqa: E402

pytestmark = pytest.mark.slow
RUNTIMES = [rt for rt in ("onnxruntime", "openvino") if __import__("importlib").util.find_spec(rt)]


@pytest.fixture(scope="module")
def trained(make_tiny_vit, tmp_path_factory):
    torch.manual_seed(0)
    bb = make_tiny_vit()
    d = tmp_path_factory.mktemp("demos") / "reach"
    try:
        collect_demos("reach-v3", d, 2, image_size=64, max_steps=100, hold_steps=0, progress=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    pol = PatchTokenPolicy("attention", AttentionConfig(heads=3), epochs=2, seed=0).fit(cache_features(d, bb),
                                                                                        progress=False)
    return pol, bb


def hand_path(pol, bb, config, steps=25):
    """The hand positions of one closed-loop episode (the policy acting on its own renders)."""
    agent, path = VisuomotorAgent(pol, bb), []
    with MetaWorldTask("reach-v3", image_size=64, max_steps=steps) as env:
        s = env.reset(config)
        while not s.done:
            s = env.step(agent.act([env.render()], s.proprio[None])[0])
            path.append(s.proprio[:3].copy())
    return np.stack(path)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_closed_loop_episodes_follow_torchs(trained, runtime):
    pol, bb = trained
    rbb = runtime_backbone(bb, runtime, token_blocks(pol.meta_))
    config = config_seeds("heldout", 1)[0]
    np.testing.assert_allclose(hand_path(pol, rbb, config), hand_path(pol, bb, config), atol=1e-3)
    configs = config_seeds("heldout", 3)
    ref = evaluate(pol, bb, configs, max_steps=40, parallel=1, progress=False)
    got = evaluate(pol, rbb, configs, max_steps=40, parallel=1, progress=False)
    assert got.successes == ref.successes and got.steps == ref.steps
