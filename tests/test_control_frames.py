"""A head that reads the last F frames (PatchTokenPolicy(frames=F)): the stacks it is trained on are the stacks
the agent hands it while acting, episode by episode and environment by environment; one frame is as before."""
import json

import numpy as np
import pytest
import torch

from frozenvit.control import PatchTokenPolicy, PolicyError, VisuomotorAgent
from frozenvit.control.features import FeatureCache, backbone_meta
from frozenvit.control.head import HeadConfig, PolicyHead
from frozenvit.control.policy import _frames_back, policy_digest

EPISODES = (5, 3)                      # steps of the two episodes of the cache below


def _frames(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def setup(tiny_vit):
    """The tiny ViT, its two-block meta, and a cache of two episodes of random frames, encoded by the agent."""
    meta = backbone_meta(tiny_vit, (0, 1))
    frames = [_frames(n, seed) for seed, n in enumerate(EPISODES)]

    class _Meta:                                       # just enough of a policy for the agent to encode
        meta_, uses_cls = meta, True
    enc = VisuomotorAgent(_Meta(), tiny_vit, check=False)
    toks, clss = zip(*(enc.encode(f) for f in frames))
    M = sum(EPISODES)
    rng = np.random.default_rng(9)
    cache = FeatureCache(tokens=torch.cat(toks).half(), cls=torch.cat(clss).half(),
                         proprio=torch.from_numpy(rng.normal(size=(M, 4)).astype(np.float32)),
                         actions=torch.from_numpy(rng.uniform(-1, 1, size=(M, 4)).astype(np.float32)),
                         episode=torch.cat([torch.full((n,), e) for e, n in enumerate(EPISODES)]),
                         step=torch.cat([torch.arange(n) for n in EPISODES]), meta=meta)
    return tiny_vit, frames, cache, enc


def test_frames_back_is_the_last_f_rows_of_the_episode_with_its_first_frame_repeated():
    step = torch.tensor([0, 1, 2, 3, 0, 0, 1])                     # episodes of 4, 1 and 2 frames
    start = torch.tensor([0, 0, 0, 0, 4, 5, 5])
    for F in (2, 3, 5):
        got = _frames_back(step, F)
        for r in range(len(step)):                                 # brute force: walk back, stop at the start
            want = [max(int(start[r]), r - j) for j in range(F - 1, -1, -1)]
            assert got[r].tolist() == want
    assert _frames_back(step, 1) is None


@pytest.mark.parametrize("pooling", ["attention", "cls", "mean"])
def test_the_agent_stacks_frames_as_training_does(setup, pooling):
    bb, frames, cache, enc = setup
    pol = PatchTokenPolicy(pooling, hidden=8, epochs=2, batch_size=4, frames=3).fit(cache, progress=False)
    assert pol.head_.cfg.frames == 3
    agent = VisuomotorAgent(pol, bb)
    start = 0
    for ep, fr in zip(EPISODES, frames):
        rows = torch.arange(start, start + ep)
        back = _frames_back(cache.step[rows], 3) + start           # (T, 3) cache rows, oldest first
        tok, cls = enc.encode(fr)                                  # float32: what the loop feeds the head
        tok_all = torch.zeros(len(cache), *tok.shape[1:])
        cls_all = torch.zeros(len(cache), cls.shape[1])
        tok_all[rows], cls_all[rows] = tok, cls
        prop = cache.proprio[rows].numpy()
        want = np.concatenate([pol.predict(tok_all[back[i:i + 1]], cls_all[back[i:i + 1]], prop[i:i + 1])
                               for i in range(ep)])
        agent.reset()
        got = np.concatenate([agent.act([f], prop[i:i + 1]) for i, f in enumerate(fr)])
        np.testing.assert_array_equal(got, want)
        start += ep
    assert not np.allclose(want[0], want[-1])


def test_environments_keep_their_own_frames_and_reset_forgets_them(setup):
    bb, frames, cache, enc = setup
    pol = PatchTokenPolicy(hidden=8, epochs=2, batch_size=4, frames=2).fit(cache, progress=False)
    a, b = frames[0][:3], frames[1][:3]
    prop = np.zeros((1, 4), np.float32)
    agent = VisuomotorAgent(pol, bb)
    alone_a = [agent.act([f], prop) for f in a]
    agent.reset()
    alone_b = [agent.act([f], prop) for f in b]
    agent.reset()
    together = [agent.act([fa, fb], np.zeros((2, 4), np.float32), slots=["x", "y"]) for fa, fb in zip(a, b)]
    np.testing.assert_array_equal(np.concatenate([t[:1] for t in together]), np.concatenate(alone_a))
    np.testing.assert_array_equal(np.concatenate([t[1:] for t in together]), np.concatenate(alone_b))
    agent.reset(["y"])                                             # slot y starts over, slot x goes on
    nxt = agent.act([a[0], b[0]], np.zeros((2, 4), np.float32), slots=["x", "y"])
    np.testing.assert_array_equal(nxt[1:], alone_b[0])
    assert not np.array_equal(nxt[:1], alone_a[0])                 # x's stack is (a[2], a[0]), not (a[0], a[0])
    with pytest.raises(ValueError, match="slots"):
        agent.act([a[0]], prop, slots=["x", "y"])


def test_a_head_of_three_frames_saves_loads_and_refuses_wrong_input(setup, tmp_path):
    bb, frames, cache, enc = setup
    pol = PatchTokenPolicy(hidden=8, epochs=2, batch_size=4, frames=3).fit(cache, progress=False)
    pol.save(tmp_path / "p")
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    assert cfg["params"]["frames"] == 3 and cfg["head"]["frames"] == 3
    back = PatchTokenPolicy.load(tmp_path / "p")
    assert back.frames == 3 and policy_digest(back) == policy_digest(pol)
    tok = torch.randn(2, 3, 16, cache.tokens.shape[-1])
    np.testing.assert_array_equal(back.predict(tok, torch.randn(2, 3, tok.shape[-1]), np.zeros((2, 4))).shape, (2, 4))
    with pytest.raises(PolicyError, match=r"tokens must be \(B, 3, 16"):
        back.predict(tok[:, 0], None, np.zeros((2, 4)))
    with pytest.raises(PolicyError, match="frames must be >= 1"):
        PatchTokenPolicy(frames=0).fit(cache, progress=False)


def test_one_frame_keeps_the_head_config_of_before(setup):
    """frames=1 (the default) writes no `frames` key in the head config (nor, tests/test_control_old_policies.py
    checks, changes the digest that names earlier evaluations' journals); F frames widen the MLP's input F-fold."""
    bb, frames, cache, enc = setup
    pol = PatchTokenPolicy(hidden=8, epochs=1, batch_size=4).fit(cache, progress=False)
    assert "frames" not in pol.head_.cfg.to_dict() and pol.head_.cfg.frames == 1
    three = PolicyHead(HeadConfig.from_dict({**pol.head_.cfg.to_dict(), "frames": 3}))
    assert three.mlp[0].in_features - 4 == 3 * (pol.head_.mlp[0].in_features - 4)
