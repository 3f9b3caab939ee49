"""Behaviour cloning on cached tokens: seeded, resumable, saved as safetensors, tied to its backbone."""
import dataclasses

import numpy as np
import pytest
import torch

from frozenvit.backbone.errors import ArtifactError
from frozenvit.control import policy as policy_mod
from frozenvit.control.features import FeatureCache
from frozenvit.control.policy import PatchTokenPolicy


def marked_token_cache(M=480, grid=(4, 4), C=16, seed=0, episode_len=12) -> FeatureCache:
    """Noise tokens plus one 'object' token at a random grid cell; the expert action is that cell's (x, y)."""
    g = torch.Generator().manual_seed(seed)
    N = grid[0] * grid[1]
    tokens = 0.3 * torch.randn(M, N, C, generator=g)
    obj = torch.randn(C, generator=g)
    where = torch.randint(0, N, (M,), generator=g)
    tokens[torch.arange(M), where] += 3 * obj
    rows, cols = where // grid[1], where % grid[1]
    actions = torch.stack([cols / (grid[1] - 1) * 2 - 1, rows / (grid[0] - 1) * 2 - 1,
                           torch.zeros(M), torch.zeros(M)], 1)                    # (M, 4) in [-1, 1]
    step = torch.arange(M) % episode_len
    meta = dict(backbone="synthetic", fingerprint="f" * 64, img_size=[64, 64], block=3, grid=list(grid),
                embed_dim=C, has_cls=True, task="reach-v3", camera="corner", demo_image_size=64)
    return FeatureCache(tokens.half(), torch.randn(M, C, generator=g).half(), torch.randn(M, 4, generator=g),
                        actions, torch.arange(M) // episode_len, step, meta)


def small(pooling="attention", **kw):
    kw = {"num_queries": 2, "num_heads": 2, "hidden": 64, "epochs": 4, "batch_size": 64, "lr": 3e-3, **kw}
    return PatchTokenPolicy(pooling, **kw)


def test_attention_pooling_learns_where_the_object_is_while_mean_pooling_cannot():
    cache = marked_token_cache(M=480)
    att = small("attention", epochs=40).fit(cache, progress=False)
    mean = small("mean", epochs=40).fit(cache, progress=False)
    assert att.history_[-1] < 0.3 * mean.history_[-1]
    assert att.history_[-1] < 0.05


def test_fit_with_the_same_seed_is_reproducible_and_another_seed_differs():
    cache = marked_token_cache(M=128)
    a, b, c = (small(seed=s).fit(cache, progress=False) for s in (0, 0, 1))
    for (k, va), vb in zip(a.head_.state_dict().items(), b.head_.state_dict().values()):
        assert torch.equal(va, vb), k
    assert not torch.equal(a.head_.pool.query, c.head_.pool.query)


def test_save_and_load_round_trip_predicts_identically(tmp_path):
    cache = marked_token_cache(M=96)
    pol = small(frames=2).fit(cache, progress=False)
    pol.save(tmp_path / "pol")
    assert sorted(p.name for p in (tmp_path / "pol").iterdir()) == [".frozenvit.json", "config.json", "model.safetensors"]
    back = PatchTokenPolicy.load(tmp_path / "pol")
    idx = cache.stack_index(2)[:7]                                                  # (7, 2)
    args = (cache.tokens[idx], cache.cls[idx], cache.proprio[:7].numpy())
    np.testing.assert_array_equal(pol.predict(*args), back.predict(*args))
    assert back.get_params() == pol.get_params() and back.meta_["task"] == "reach-v3"


def test_resumed_training_ends_where_an_uninterrupted_run_ends(tmp_path, monkeypatch):
    cache = marked_token_cache(M=128)
    full = small(epochs=6).fit(cache, progress=False)
    calls = {"n": 0}
    real_loss = policy_mod.bc_loss

    def crash_in_epoch_five(pred, target):
        calls["n"] += 1
        if calls["n"] > 4 * 2:                                   # 2 steps per epoch: die in epoch 5
            raise KeyboardInterrupt
        return real_loss(pred, target)

    monkeypatch.setattr(policy_mod, "bc_loss", crash_in_epoch_five)
    with pytest.raises(KeyboardInterrupt):
        small(epochs=6).fit(cache, checkpoint_dir=tmp_path / "ckpt", checkpoint_every=2, progress=False)
    monkeypatch.setattr(policy_mod, "bc_loss", real_loss)
    resumed = small(epochs=6).fit(cache, checkpoint_dir=tmp_path / "ckpt", checkpoint_every=2, progress=False)
    assert len(resumed.history_) == 6
    np.testing.assert_allclose(resumed.history_, full.history_, rtol=1e-6)
    for (k, va), vb in zip(full.head_.state_dict().items(), resumed.head_.state_dict().values()):
        torch.testing.assert_close(va, vb, rtol=0, atol=0, msg=k)


def test_resume_refuses_a_checkpoint_made_with_other_hyperparameters(tmp_path):
    cache = marked_token_cache(M=64)
    small(epochs=2).fit(cache, checkpoint_dir=tmp_path / "ckpt", checkpoint_every=1, progress=False)
    with pytest.raises(ArtifactError, match="hyperparameters"):
        small(epochs=2, lr=1e-4).fit(cache, checkpoint_dir=tmp_path / "ckpt", progress=False)


def test_stack_index_repeats_the_first_frame_and_never_crosses_episodes():
    cache = marked_token_cache(M=8, episode_len=3)                   # episodes [0,1,2] [3,4,5] [6,7]
    idx = cache.stack_index(3)
    assert idx.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [3, 3, 3], [3, 3, 4], [3, 4, 5], [6, 6, 6], [6, 6, 7]]


def test_predict_before_fit_says_how_to_get_a_policy():
    with pytest.raises(ValueError, match="fit"):
        small().predict(torch.zeros(1, 1, 16, 16), None, np.zeros((1, 4)))


def test_check_backbone_rejects_a_backbone_with_other_weights(make_tiny_vit):

    torch.manual_seed(0)
    a = make_tiny_vit()
    torch.manual_seed(1)
    b = make_tiny_vit()
    from frozenvit.control.features import backbone_meta

    pol = small().init_untrained(backbone_meta(a, -1))
    pol.check_backbone(a)
    with pytest.raises(ArtifactError, match="retrain"):
        pol.check_backbone(b)


def test_ensemble_acts_by_the_mean_of_its_members_and_round_trips(tmp_path):
    from frozenvit.control.policy import PolicyEnsemble, load_policy

    cache = marked_token_cache(M=96)
    ens = PolicyEnsemble.fit_seeds(cache, small(epochs=2), seeds=[3, 4], progress=False)
    assert ens.seeds == [3, 4] and len(ens) == 2 and ens.pooling == "attention"
    assert not torch.equal(ens.members[0].head_.pool.query, ens.members[1].head_.pool.query)
    idx = cache.stack_index(1)[:5]
    args = (cache.tokens[idx], cache.cls[idx], cache.proprio[:5].numpy())
    a, b = (m.predict(*args) for m in ens.members)
    assert not np.allclose(a, b)
    np.testing.assert_allclose(ens.predict(*args), (a + b) / 2, rtol=1e-6)
    ens.save(tmp_path / "ens")
    back = load_policy(tmp_path / "ens")
    assert isinstance(back, PolicyEnsemble) and back.seeds == [3, 4]
    np.testing.assert_array_equal(back.predict(*args), ens.predict(*args))
    ens.members[0].save(tmp_path / "one")
    assert isinstance(load_policy(tmp_path / "one"), PatchTokenPolicy)
    with pytest.raises(ArtifactError, match="missing"):
        load_policy(tmp_path / "nothing")


def test_ensemble_refuses_members_that_see_other_inputs():
    from frozenvit.control.policy import PolicyEnsemble

    cache = marked_token_cache(M=64)
    att = small(epochs=1).fit(cache, progress=False)
    with pytest.raises(ValueError, match="member 1"):
        PolicyEnsemble([att, small("mean", epochs=1).fit(cache, progress=False)])
    with pytest.raises(ValueError, match="member 1"):
        PolicyEnsemble([att, small(epochs=1, frames=2).fit(cache, progress=False)])
    with pytest.raises(ValueError, match="fit"):
        PolicyEnsemble([att, small()])
    with pytest.raises(ValueError, match="at least one"):
        PolicyEnsemble([])


def test_a_policy_config_edited_by_hand_is_refused(tmp_path):
    import json

    from frozenvit.backbone.errors import ArtifactError

    small(epochs=1).fit(marked_token_cache(M=64), progress=False).save(tmp_path / "p")
    cfg_path = tmp_path / "p" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["meta"]["block"] = 2                           # features of another block: every action would be wrong
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="edited by hand"):
        PatchTokenPolicy.load(tmp_path / "p")


def test_diverse_sincos_policy_with_cls_round_trips_and_its_queries_look_at_different_places(tmp_path):
    from frozenvit.control.agent import VisuomotorAgent
    from frozenvit.control.head import diversity_penalty

    cache = marked_token_cache(M=256)
    plain = small(epochs=15, pos_code="learned", query_diversity=0.0).fit(cache, progress=False)
    pol = small(epochs=15, pos_code="sincos", query_diversity=0.1, with_cls=True).fit(cache, progress=False)
    assert pol.uses_cls and not plain.uses_cls and VisuomotorAgent(pol, None, check=False).uses_cls

    def overlap(p):
        return float(diversity_penalty(p.head_.query_attention(cache.tokens[:64])))

    assert overlap(pol) < 0.5 * overlap(plain)
    pol.save(tmp_path / "p")
    back = PatchTokenPolicy.load(tmp_path / "p")
    assert back.get_params() == pol.get_params()
    idx = cache.stack_index(1)[:5]
    args = (cache.tokens[idx], cache.cls[idx], cache.proprio[:5].numpy())
    np.testing.assert_array_equal(pol.predict(*args), back.predict(*args))
    no_cls = dataclasses.replace(cache, cls=None)
    with pytest.raises(ValueError, match="CLS"):
        small(with_cls=True).fit(no_cls, progress=False)
