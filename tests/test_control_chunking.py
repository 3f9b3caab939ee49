"""Action chunking with temporal ensembling, the velocity input and the BC loss options of the policy head."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from frozenvit.control.agent import TemporalEnsemble, VisuomotorAgent
from frozenvit.control.errors import PolicyError
from frozenvit.control.features import FeatureCache
from frozenvit.control.head import HeadConfig, bc_loss
from frozenvit.control.policy import PatchTokenPolicy, chunk_rows, proprio_velocity

from test_control_policy import marked_token_cache, rows, small

BEFORE = Path(__file__).parent / "data" / "control_policy_before_chunks"


def test_a_policy_written_before_chunking_loads_and_predicts_what_it_predicted_then():
    old = json.loads(BEFORE.with_suffix(".json").read_text())
    pol = PatchTokenPolicy.load(BEFORE)
    assert (pol.chunk, pol.velocity, pol.loss) == (1, False, "mse") and pol.head_.cfg.chunk == 1
    cache = marked_token_cache(M=64)
    # equal up to float32 rounding of another thread count or machine (a changed head would be far off)
    np.testing.assert_allclose(pol.predict(*rows(cache, 5)), old["predictions"], rtol=1e-5, atol=1e-7)


def test_chunk_1_trains_the_head_of_before_weight_for_weight():
    before = PatchTokenPolicy.load(BEFORE)
    now = small(epochs=3, chunk=1).fit(marked_token_cache(M=64), progress=False)
    np.testing.assert_allclose(now.history_, before.history_, rtol=1e-5)
    for (k, a), b in zip(now.head_.state_dict().items(), before.head_.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=k)


def test_the_temporal_ensemble_weighs_the_overlapping_predictions_oldest_first():
    ens = TemporalEnsemble(3, math.log(2))                 # weights 1, 1/2, 1/4 for the oldest, next, newest
    np.testing.assert_allclose(ens.weights(3), np.array([4, 2, 1]) / 7)
    chunk = lambda t: np.array([[10 * t + j] for j in range(3)], dtype=np.float64)[None]   # (1, 3, 1): step t + j
    got = [float(ens([0], chunk(t))[0, 0]) for t in range(4)]
    # step 0: 0 alone; 1: (1*1 + 10/2) / 1.5; 2: (2 + 11/2 + 20/4) / 1.75; 3: the chunk of step 0 has run out
    np.testing.assert_allclose(got, [0.0, 4.0, 12.5 / 1.75, (12 + 21 / 2 + 30 / 4) / 1.75])
    ens.reset([0])
    assert float(ens([0], chunk(5))[0, 0]) == 50.0         # a new episode forgets the old chunks


def test_the_temporal_ensemble_keeps_slots_apart_and_passes_single_actions_through():
    ens = TemporalEnsemble(2, 0.0)                         # decay 0: the plain mean
    a = ens([0, 1], np.array([[[1.0], [2.0]], [[5.0], [6.0]]]))
    b = ens([1], np.array([[[10.0], [20.0]]]))             # only slot 1 steps
    np.testing.assert_allclose(a[:, 0], [1.0, 5.0])
    np.testing.assert_allclose(b[:, 0], [(6.0 + 10.0) / 2])
    one = TemporalEnsemble(1, 0.3)
    x = np.random.default_rng(0).normal(size=(3, 1, 4))
    assert np.array_equal(one([0, 1, 2], x), x[:, 0]) and np.array_equal(one([0, 1, 2], x), x[:, 0])


def _episodes(lengths):
    step = torch.cat([torch.arange(n) for n in lengths])
    ep = torch.cat([torch.full((n,), e) for e, n in enumerate(lengths)])
    M = len(step)
    return FeatureCache(torch.zeros(M, 1, 4).half(), None, torch.arange(M * 4.0).view(M, 4) ** 2,
                        torch.arange(M * 4.0).view(M, 4), ep, step, {})


def test_chunk_targets_past_a_demo_end_repeat_its_last_action():
    cache = _episodes([3, 2])
    assert chunk_rows(cache, 3).tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4]]
    assert chunk_rows(cache, 1).tolist() == [[0], [1], [2], [3], [4]]
    shuffled = _episodes([3, 2])
    shuffled.step = shuffled.step.flip(0)
    with pytest.raises(Exception, match="rebuild the cache"):
        chunk_rows(shuffled, 2)


def test_velocity_is_the_difference_of_the_last_two_readings_and_zero_at_a_demo_start():
    cache = _episodes([3, 2])
    v = proprio_velocity(cache)
    assert torch.equal(v[[0, 3]], torch.zeros(2, 4))
    assert torch.equal(v[1], cache.proprio[1] - cache.proprio[0]) and torch.equal(v[4], cache.proprio[4] - cache.proprio[3])


def test_a_chunked_velocity_head_round_trips_through_its_artifact(tmp_path):
    cache = marked_token_cache(M=96)
    pol = small(chunk=3, chunk_decay=0.25, velocity=True, loss="l1").fit(cache, progress=False)
    pol.save(tmp_path / "pol")
    back = PatchTokenPolicy.load(tmp_path / "pol")
    vel = np.full((7, 4), 0.01, dtype=np.float32)
    a = pol.predict_chunk(*rows(cache), vel)
    assert a.shape == (7, 3, 4)
    np.testing.assert_array_equal(a, back.predict_chunk(*rows(cache), vel))
    np.testing.assert_array_equal(back.predict(*rows(cache), vel), a[:, 0])
    assert not np.array_equal(back.predict(*rows(cache)), a[:, 0])          # the velocity is read
    assert back.get_params() == pol.get_params() and back.head_.cfg.chunk == 3
    cfg = json.loads((tmp_path / "pol" / "config.json").read_text())
    assert (cfg["params"]["chunk"], cfg["params"]["chunk_decay"], cfg["params"]["velocity"]) == (3, 0.25, True)


class _Stub:
    """A policy whose action chunk is the proprio x it gets, + the step within the chunk; records velocities."""
    pooling, uses_cls, meta_ = "attention", False, {"block": 0}

    def __init__(self, chunk, velocity=False):
        self.chunk, self.chunk_decay, self.velocity, self.seen = chunk, 0.0, velocity, []

    def predict_chunk(self, tokens, cls, proprio, velocity=None):
        self.seen.append(velocity)
        return proprio[:, None, :1] + np.arange(self.chunk, dtype=np.float32)[None, :, None]   # (B, k, 1)

    def predict(self, tokens, cls, proprio, velocity=None):
        return self.predict_chunk(tokens, cls, proprio, velocity)[:, 0]


def _agent(policy):
    agent = VisuomotorAgent(policy, None, check=False)
    agent.encode = lambda frames, timer=None: (torch.zeros(len(frames), 1, 4), None)
    return agent


def test_the_agent_ensembles_per_slot_and_reset_starts_a_new_episode():
    agent = _agent(_Stub(2))
    p = lambda *x: np.array([[v, 0, 0, 0] for v in x], dtype=np.float32)
    assert agent.act([0, 0], p(0, 100)).ravel().tolist() == [0, 100]
    assert agent.act([0], p(10), slots=[1]).ravel().tolist() == [(101 + 10) / 2]
    agent.reset([1])
    assert agent.act([0, 0], p(20, 30)).ravel().tolist() == [(1 + 20) / 2, 30]


def test_the_agent_hands_a_velocity_head_the_change_since_the_slot_s_last_reading():
    stub = _Stub(1, velocity=True)
    agent = _agent(stub)
    p = lambda *x: np.array([[v, 1, 0, 0] for v in x], dtype=np.float32)
    agent.act([0, 0], p(1, 5))
    agent.act([0, 0], p(4, 5.5))
    agent.reset([0])
    agent.act([0], p(9))
    assert [x for v in stub.seen for x in v[:, 0].tolist()] == [0, 0, 3, 0.5, 0]     # the head sees a row at a time


@pytest.mark.parametrize("kw, match", [(dict(chunk=0), "chunk must be an integer >= 1"),
                                       (dict(chunk=2.5), "chunk must be an integer >= 1"),
                                       (dict(chunk=2, chunk_decay=-0.1), "chunk_decay must be >= 0"),
                                       (dict(chunk_decay=float("nan")), "chunk_decay must be >= 0"),
                                       (dict(loss="l2"), "loss must be one of")])
def test_bad_chunking_and_loss_options_are_named_errors(kw, match):
    with pytest.raises(PolicyError, match=match):
        small(**kw).fit(marked_token_cache(M=32), progress=False)


def test_the_ensemble_and_the_head_refuse_bad_values_too():
    with pytest.raises(PolicyError, match="chunk must be"):
        TemporalEnsemble(0, 0.1)
    with pytest.raises(PolicyError, match="chunk_decay must be >= 0"):
        TemporalEnsemble(4, -1.0)
    with pytest.raises(PolicyError, match="chunk must be >= 1"):
        HeadConfig(16, (4, 4), chunk=0)
    assert HeadConfig.from_dict({"embed_dim": 16, "grid": [4, 4], "pooling": "mean"}).chunk == 1   # configs of before


def test_bc_losses_on_a_hand_computed_case():
    pred, target = torch.tensor([[0.0, 0.5]]), torch.zeros(1, 2)
    assert bc_loss(pred, target).item() == pytest.approx(0.125)
    assert bc_loss(pred, target, "l1").item() == pytest.approx(0.25)
    assert bc_loss(pred, target, "huber").item() == pytest.approx(0.1 * (0.5 - 0.05) / 2)
    with pytest.raises(PolicyError, match="loss must be one of"):
        bc_loss(pred, target, "l2")
