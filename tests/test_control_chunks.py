"""Action chunks (PatchTokenPolicy chunk=k): a head predicts the next k actions of each frame and the agent acts
by ACT's temporal ensemble of the overlapping predictions, per environment slot, through control.evaluate's
lockstep loop. Checked against direct definitions: the targets, the ensemble, the slots."""
import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from frozenvit.backbone.errors import ArtifactError
from frozenvit.control.agent import TemporalEnsemble, VisuomotorAgent
from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.control.evaluate import lockstep
from frozenvit.control.policy import PatchTokenPolicy, chunk_rows, policy_digest

from test_control_policy import marked_token_cache, rows, small


def shuffled_cache(M=60, episode_len=12, seed=0):
    """A cache whose frames are not stored in (episode, step) order, with actions that name their frame."""
    cache = marked_token_cache(M=M, episode_len=episode_len)
    order = torch.randperm(M, generator=torch.Generator().manual_seed(seed))
    actions = torch.stack([cache.episode.float(), cache.step.float(), -cache.step.float(), torch.ones(M)], 1)
    return dataclasses.replace(cache, tokens=cache.tokens[order], cls=cache.cls[order], proprio=cache.proprio[order],
                               actions=actions[order], episode=cache.episode[order], step=cache.step[order])


@pytest.mark.parametrize("k", [1, 2, 5, 12, 15])
def test_chunk_rows_are_the_next_k_frames_of_the_same_demo_with_its_last_repeated(k):
    cache = shuffled_cache(episode_len=12)
    chunks = cache.actions[chunk_rows(cache, k)]                                     # (M, k, 4)
    assert chunks.shape == (len(cache), k, 4)
    for r in range(len(cache)):
        e, s = int(cache.episode[r]), int(cache.step[r])
        for i in range(k):
            torch.testing.assert_close(chunks[r, i], torch.tensor([e, min(s + i, 11), -min(s + i, 11), 1.0]))
    torch.testing.assert_close(chunks[:, 0], cache.actions)           # a chunk starts with the frame's own action


def test_a_chunked_head_fits_the_chunks_and_predict_gives_their_first_action():
    cache = shuffled_cache(M=96)
    pol = small(epochs=2, chunk=3).fit(cache, progress=False)
    x = rows(cache, 5)
    chunks = pol.predict_chunk(*x)
    assert chunks.shape == (5, 3, 4) and pol.head_.cfg.chunk == 3
    np.testing.assert_array_equal(pol.predict(*x), chunks[:, 0])
    # the loss is the squared error over all k actions of the chunk targets
    head_out = pol.head_(x[0], x[1], (torch.as_tensor(x[2]) - pol.proprio_mean_) / pol.proprio_std_)
    assert head_out.shape == (5, 12)


def test_one_action_per_chunk_is_the_head_without_chunks_weight_for_weight():
    cache = marked_token_cache(M=96)
    plain = small(epochs=2).fit(cache, progress=False)
    one = small(epochs=2, chunk=1).fit(cache, progress=False)
    assert plain.history_ == one.history_
    assert all(torch.equal(v, one._tensors()[k]) for k, v in plain._tensors().items())


def test_a_chunked_policy_saves_and_loads_with_its_chunk(tmp_path):
    cache = marked_token_cache(M=96)
    pol = small(epochs=2, chunk=4).fit(cache, progress=False)
    pol.save(tmp_path / "p")
    cfg = json.loads((tmp_path / "p" / "config.json").read_text())
    assert cfg["params"]["chunk"] == 4 and cfg["head"]["chunk"] == 4
    back = PatchTokenPolicy.load(tmp_path / "p")
    assert back.chunk == 4 and back.head_.cfg.chunk == 4
    x = rows(cache, 5)
    np.testing.assert_array_equal(back.predict_chunk(*x), pol.predict_chunk(*x))
    assert policy_digest(back) == policy_digest(pol)


def test_a_checkpoint_of_a_chunked_head_resumes_and_refuses_another_chunk(tmp_path):
    cache = marked_token_cache(M=128)
    small(epochs=2, chunk=3).fit(cache, checkpoint_dir=tmp_path / "ck", checkpoint_every=1, progress=False)
    again = small(epochs=2, chunk=3).fit(cache, checkpoint_dir=tmp_path / "ck", progress=False)
    assert again.history_ == small(epochs=2, chunk=3).fit(cache, progress=False).history_
    with pytest.raises(ArtifactError, match="checkpoint"):                       # another chunk trains otherwise
        small(epochs=2, chunk=2).fit(cache, checkpoint_dir=tmp_path / "ck", progress=False)


@pytest.mark.parametrize("chunk, decay, what", [(0, 0.1, "chunk"), (2.5, 0.1, "chunk"), (True, 0.1, "chunk"),
                                                 (3, -0.1, "decay"), (3, float("nan"), "decay"), (3, "0.1", "decay")])
def test_bad_ensemble_options_are_named(chunk, decay, what):
    with pytest.raises(ParameterError, match=rf"^{what} must be"):
        TemporalEnsemble(chunk, decay)


def brute_force_action(chunks_so_far, k, decay):
    """What ACT's temporal ensemble takes at step t = len(chunks_so_far) - 1: the predictions for step t made at
    steps max(0, t-k+1)..t, weighted exp(-decay i), i = 0 for the oldest."""
    t = len(chunks_so_far) - 1
    made = list(range(max(0, t - k + 1), t + 1))                                   # oldest first
    w = np.exp(-decay * np.arange(len(made)))
    return sum(wi * chunks_so_far[m][t - m] for wi, m in zip(w, made)) / w.sum()


class CountingEnv:
    """A fake environment: its episode of config c lasts c steps; proprio says (config, step); steps keep the
    actions they were given."""

    def __init__(self, log):
        self.log = log

    def reset(self, config):
        self.config, self.t = config, 0
        return SimpleNamespace(proprio=np.array([config, 0, 0, 0], np.float32), done=False)

    def render(self):
        return np.zeros((8, 8, 3), np.uint8)

    def step(self, action):
        self.log.setdefault(self.config, []).append(np.array(action))
        self.t += 1
        done = self.t >= self.config
        return SimpleNamespace(proprio=np.array([self.config, self.t, 0, 0], np.float32), done=done,
                               success=done, steps=self.t)


def chunk_of(config, t, k):
    """The fake head's chunk at step t of config's episode: distinct numbers for every (config, t, i)."""
    return np.array([[config * 1000 + t * 10 + i, -config, t, i] for i in range(k)], np.float32)   # (k, 4)


class ProprioAgent(VisuomotorAgent):
    """The real agent (act, reset, the ensemble) over a fake encoder and a head that reads proprio only."""

    def __init__(self, k, decay):
        self.policy = SimpleNamespace(predict_chunk=lambda tokens, cls, prop: np.stack(
            [chunk_of(int(p[0]), int(p[1]), k) for p in prop]))
        self.ensemble = TemporalEnsemble(k, decay)

    def encode(self, frames, timer=None):
        return torch.zeros(len(frames), 1, 1), None


@pytest.mark.parametrize("k,decay", [(4, 0.1), (3, 0.0), (6, 1.0)])
def test_the_ensemble_follows_each_slot_through_the_lockstep_loop(k, decay):
    agent = ProprioAgent(k, decay)
    log, finished = {}, []
    configs = [7, 3, 5, 2, 9, 4, 1]                       # episodes of unequal length: slots free up out of order
    lockstep(agent, [CountingEnv(log) for _ in range(3)], configs, set(), {}, lambda c, ok, n: finished.append(c))
    assert sorted(finished) == sorted(configs)
    for c in configs:
        assert len(log[c]) == c
        chunks = [chunk_of(c, t, k) for t in range(c)]
        for t, taken in enumerate(log[c]):
            np.testing.assert_allclose(taken, brute_force_action(chunks[:t + 1], k, decay), rtol=1e-6)


def test_without_a_reset_a_slot_would_carry_the_last_episode_over():
    # the reset at each episode start is what keeps episodes apart (lockstep and rollout_timed call it)
    agent = ProprioAgent(4, 0.0)
    first = agent.act([None], np.array([[5, 3, 0, 0]], np.float32))
    agent.reset([0])
    fresh = agent.act([None], np.array([[2, 0, 0, 0]], np.float32))
    np.testing.assert_array_equal(fresh[0], chunk_of(2, 0, 4)[0])
    carried = ProprioAgent(4, 0.0)
    carried.act([None], np.array([[5, 3, 0, 0]], np.float32))
    assert not np.array_equal(carried.act([None], np.array([[2, 0, 0, 0]], np.float32)), fresh)
    np.testing.assert_array_equal(first[0], chunk_of(5, 3, 4)[0])


def test_slots_must_match_the_frames_one_to_one():
    agent = ProprioAgent(3, 0.1)
    prop = np.zeros((2, 4), np.float32)
    for slots in ([0], [1, 1], [0, 1, 2]):
        with pytest.raises(ValueError, match="one distinct slot per frame"):
            agent.act([None, None], prop, slots=slots)


def test_the_ensemble_weights_are_act_s_and_one_action_passes_through():
    ens = TemporalEnsemble(3, 0.5)
    np.testing.assert_allclose(ens.weights(3), np.exp(-0.5 * np.arange(3)) / np.exp(-0.5 * np.arange(3)).sum())
    chunks = np.random.default_rng(0).normal(size=(2, 1, 4)).astype(np.float32)
    np.testing.assert_array_equal(TemporalEnsemble(1, 0.1)([0, 1], chunks), chunks[:, 0])
    with pytest.raises(ParameterError):
        TemporalEnsemble(0, 0.1)
