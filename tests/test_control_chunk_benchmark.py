"""benchmarks/control_success.py --chunk K --chunk-decay M: heads that predict the next K actions of each frame,
acting by ACT's temporal ensemble. A library option until 2026-12-01 (removed, control/RESULTS.md "Options
removed"); measured again on the three-block default in the benchmark only, so the benchmark's parts are
tested here: the chunk targets, the ensemble, and the slots it follows through control.evaluate's lockstep."""
import dataclasses
import importlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from test_control_policy import marked_token_cache, small


def shuffled_cache(M=60, episode_len=12, seed=0):
    """A cache whose frames are not stored in (episode, step) order, with actions that name their frame."""
    cache = marked_token_cache(M=M, episode_len=episode_len)
    order = torch.randperm(M, generator=torch.Generator().manual_seed(seed))
    actions = torch.stack([cache.episode.float(), cache.step.float(), -cache.step.float(), torch.ones(M)], 1)
    return dataclasses.replace(cache, tokens=cache.tokens[order], cls=cache.cls[order], proprio=cache.proprio[order],
                               actions=actions[order], episode=cache.episode[order], step=cache.step[order])


@pytest.mark.parametrize("k", [2, 5, 12, 15])
def test_chunk_targets_are_the_next_k_actions_of_the_same_demo_with_its_last_repeated(load_benchmark, k):
    cs = load_benchmark("control_success")
    cache = shuffled_cache(episode_len=12)
    out = cs.chunk_targets(cache, k)
    assert out.actions.shape == (len(cache), 4 * k)
    chunks = out.actions.view(len(cache), k, 4)
    for r in range(len(cache)):
        e, s = int(cache.episode[r]), int(cache.step[r])
        for i in range(k):
            want = torch.tensor([e, min(s + i, 11), -min(s + i, 11), 1.0])
            torch.testing.assert_close(chunks[r, i], want)
    torch.testing.assert_close(chunks[:, 0], cache.actions)       # the first action of a chunk: the frame's own
    assert out.tokens is cache.tokens and out.episode is cache.episode       # only the labels change


def test_one_action_per_chunk_leaves_the_cache_alone(load_benchmark):
    cs = load_benchmark("control_success")
    cache = shuffled_cache()
    assert cs.chunk_targets(cache, 1) is cache


def test_a_head_fitted_on_chunk_targets_predicts_whole_chunks(load_benchmark):
    cs = load_benchmark("control_success")
    cache = cs.chunk_targets(marked_token_cache(M=96), 3)
    pol = small(epochs=2).fit(cache, progress=False)
    assert pol.predict(cache.tokens[:5], cache.cls[:5], cache.proprio[:5].numpy()).shape == (5, 12)


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


@pytest.mark.parametrize("k,decay", [(4, 0.1), (3, 0.0), (6, 1.0)])
def test_the_ensemble_follows_each_slot_through_the_lockstep_loop(load_benchmark, k, decay):
    cs = load_benchmark("control_success")
    ev = importlib.import_module("frozenvit.control.evaluate")

    class FakeAgent:                                       # encode passes proprio through; the head reads it
        def encode(self, frames):
            return torch.zeros(len(frames), 1, 1), None

    agent = FakeAgent()
    agent.policy = SimpleNamespace(predict=lambda tokens, cls, prop: np.stack(
        [chunk_of(int(p[0]), int(p[1]), k).ravel() for p in prop]))
    log, finished = {}, []
    ens = cs.ChunkEnsemble(agent, k, decay)
    configs = [7, 3, 5, 2, 9, 4, 1]                       # episodes of unequal length: slots free up out of order
    envs = [ens.env(s, CountingEnv(log)) for s in range(3)]
    ev.lockstep(ens, envs, configs, set(), {}, lambda c, ok, n: finished.append(c))
    assert sorted(finished) == sorted(configs) and ens.past == {}
    for c in configs:
        assert len(log[c]) == c
        chunks = [chunk_of(c, t, k) for t in range(c)]
        for t, taken in enumerate(log[c]):
            np.testing.assert_allclose(taken, brute_force_action(chunks[:t + 1], k, decay), rtol=1e-6)


def test_the_benchmark_refuses_chunks_with_the_snapped_gripper(load_benchmark, monkeypatch, capsys):
    cs = load_benchmark("control_success")
    monkeypatch.setattr("sys.argv", ["control_success.py", "--chunk", "4", "--gripper", "snap"])
    with pytest.raises(SystemExit):
        cs.main()
    assert "--gripper snap" in capsys.readouterr().err
    monkeypatch.setattr("sys.argv", ["control_success.py", "--chunk", "0"])
    with pytest.raises(SystemExit):
        cs.main()
    assert "--chunk must be >= 1" in capsys.readouterr().err
