"""The auxiliary scene loss (PatchTokenPolicy.aux_weight): trained only, saved with the head, never acting."""
import numpy as np
import pytest
import torch

from frozenvit.control.errors import DemoError, PolicyError
from frozenvit.control.features import scene_targets
from frozenvit.control.head import AttentionConfig, HeadConfig, PolicyHead
from frozenvit.control.policy import PatchTokenPolicy, policy_digest

from test_control_policy import marked_token_cache, rows, small


def object_cell(cache):
    """The synthetic cache's object cell (x, y) in [-1, 1]: what its actions say, as an auxiliary target."""
    return cache.actions[:, :2].numpy()


def test_a_head_without_the_auxiliary_layer_is_built_and_described_as_before_it_existed():
    torch.manual_seed(0)
    plain = PolicyHead(HeadConfig(16, (4, 4), attention=AttentionConfig(queries=2, heads=2)))
    torch.manual_seed(0)
    aux = PolicyHead(HeadConfig(16, (4, 4), attention=AttentionConfig(queries=2, heads=2), aux_dim=3))
    for k, v in plain.state_dict().items():                    # same draws for every shared weight
        assert torch.equal(v, aux.state_dict()[k]), k
    assert set(aux.state_dict()) - set(plain.state_dict()) == {"aux.weight", "aux.bias"}
    assert "aux_dim" not in plain.cfg.to_dict() and aux.cfg.to_dict()["aux_dim"] == 3
    assert HeadConfig.from_dict(aux.cfg.to_dict()) == aux.cfg


def test_aux_weight_zero_ignores_targets_and_trains_the_head_of_before():
    cache = marked_token_cache(M=128)
    a = small().fit(cache, progress=False)
    b = small(aux_weight=0.0).fit(cache, aux_targets=object_cell(cache), progress=False)
    assert b.head_.aux is None
    for (k, va), vb in zip(a.head_.state_dict().items(), b.head_.state_dict().values()):
        assert torch.equal(va, vb), k
    assert policy_digest(a) == policy_digest(b)


def test_the_auxiliary_layer_learns_its_targets_and_round_trips_without_changing_actions(tmp_path):
    cache = marked_token_cache(M=480)
    target = object_cell(cache)
    pol = small(epochs=30, aux_weight=1.0).fit(cache, aux_targets=target, progress=False)
    x = pol.head_.prepare(cache.tokens.float(), cache.cls.float())
    prop = (cache.proprio - pol.proprio_mean_) / pol.proprio_std_
    with torch.no_grad():
        _, aux = pol.head_.forward_prepared(x, prop, return_aux=True)
    want = (target - target.mean(0)) / target.std(0, ddof=1)
    r2 = 1 - ((aux.numpy() - want) ** 2).sum(0) / (want ** 2).sum(0)
    assert (r2 > 0.8).all(), r2                                 # the pooled features hold the object's cell
    pol.save(tmp_path / "pol")
    back = PatchTokenPolicy.load(tmp_path / "pol")
    assert back.aux_weight == 1.0 and back.head_.cfg.aux_dim == 2
    np.testing.assert_array_equal(pol.predict(*rows(cache)), back.predict(*rows(cache)))
    assert policy_digest(back) == policy_digest(pol) != policy_digest(small(epochs=30).fit(cache, progress=False))


@pytest.mark.parametrize("targets, says", [
    (None, "needs aux_targets"),
    (np.zeros((5, 2)), "one row per cached frame"),
    (np.ones((128, 2)), "constant"),
    (np.full((128, 1), np.nan), "NaN"),
])
def test_bad_auxiliary_targets_are_named_errors(targets, says):
    with pytest.raises(PolicyError, match=says):
        small(aux_weight=0.5).fit(marked_token_cache(M=128), aux_targets=targets, progress=False)


def test_a_negative_aux_weight_is_refused():
    with pytest.raises(PolicyError, match="aux_weight must be a number >= 0"):
        small(aux_weight=-1.0).fit(marked_token_cache(M=64), progress=False)


def test_constant_target_columns_are_dropped():
    cache = marked_token_cache(M=128)
    t = np.concatenate([object_cell(cache), np.full((128, 1), 0.02)], 1)    # e.g. a table-height z
    assert small(aux_weight=0.5).fit(cache, aux_targets=t, progress=False).head_.cfg.aux_dim == 2


def test_scene_targets_give_each_frame_its_episodes_vector_and_refuse_other_demos(tmp_path):
    from frozenvit.control.demos import Episode, _write_episode
    import json
    vecs = [np.array([0.1 * e, 0.8, 0.02 + e], dtype=np.float64) for e in range(3)]
    d = tmp_path / "demos"
    d.mkdir()
    eps = []
    for e, v in enumerate(vecs):
        T = 2 + e
        _write_episode(d / f"ep{e}.npz", Episode(np.zeros((T, 8, 8, 3), np.uint8), np.zeros((T, 4), np.float32),
                                                  np.zeros((T, 4), np.float32), 100 + e, v))
        eps.append(dict(file=f"ep{e}.npz", config=100 + e))
    from frozenvit.control import demos as demos_mod
    (d / "manifest.json").write_text(json.dumps(dict(
        kind=demos_mod.KIND, format_version=demos_mod.FORMAT_VERSION, episodes=eps, failed_configs=[],
        **{k: None for k in demos_mod._SETTINGS})))
    episode = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2, 2])
    cache = marked_token_cache(M=9)
    cache.episode, cache.meta["configs"] = episode, [100, 101, 102]
    t = scene_targets(d, cache)
    assert t.shape == (9, 3) and t.dtype == np.float32
    np.testing.assert_allclose(t, np.stack(vecs)[episode.numpy()].astype(np.float32))
    rel = scene_targets(d, cache, relative=True)                   # each 3-d position minus the frame's hand
    np.testing.assert_allclose(rel, t - cache.proprio[:, :3].numpy(), rtol=1e-6, atol=1e-6)
    cache.meta["configs"] = [100, 101, 103]
    with pytest.raises(DemoError, match="not made from the demos"):
        scene_targets(d, cache)


def test_the_benchmark_names_and_keeps_apart_heads_trained_with_the_auxiliary_loss(load_benchmark):
    from argparse import Namespace

    cs = load_benchmark("control_success")
    assert cs._head_suffix(Namespace(views=4, aux_weight=0.0)) == "_views4"       # older folder names kept
    assert cs._head_suffix(Namespace(views=4, aux_weight=0.1)) == "_views4_aux0.1"
    old = dict(tasks=["reach-v3"], poolings=["attention"], blocks={"attention": 11}, seeds=[0], epochs=200)
    assert cs._pooling_settings(old, "attention") == cs._pooling_settings(dict(old, aux_weight=0.0), "attention")
    assert cs._pooling_settings(old, "attention") != cs._pooling_settings(dict(old, aux_weight=0.1), "attention")
