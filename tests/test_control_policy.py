"""Behaviour cloning on cached tokens: seeded, resumable, saved as safetensors, tied to its backbone."""
import dataclasses
import json

import numpy as np
import pytest
import torch
from sklearn.base import clone

from frozenvit.backbone.errors import ArtifactError
from frozenvit.control import policy as policy_mod
from frozenvit.backbone.suite.errors import InvalidParameterError, ParameterError
from frozenvit.control.features import FeatureCache
from frozenvit.control.head import AttentionConfig
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


def small(pooling="attention", attention=None, **kw):
    """A small, quick head; one action per frame unless a test asks for chunks (tests/test_control_chunks.py)."""
    if pooling == "attention" and attention is None:
        attention = AttentionConfig(queries=2, heads=2)
    kw = {"hidden": 64, "epochs": 4, "batch_size": 64, "lr": 3e-3, "chunk": 1, **kw}
    return PatchTokenPolicy(pooling, attention, **kw)


def rows(cache, n=7):
    return cache.tokens[:n], cache.cls[:n], cache.proprio[:n].numpy()


@pytest.mark.slow
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


def test_fit_leaves_the_global_torch_rng_alone():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    small(epochs=1).fit(marked_token_cache(M=64), progress=False)
    assert torch.equal(torch.rand(3), want)


def test_save_and_load_round_trip_predicts_identically(tmp_path):
    cache = marked_token_cache(M=96)
    pol = small().fit(cache, progress=False)
    assert pol.save(tmp_path / "pol") == tmp_path / "pol"                     # save returns the Path
    assert sorted(p.name for p in (tmp_path / "pol").iterdir()) == [".frozenvit.json", "config.json",
                                                                    "model.safetensors"]
    back = PatchTokenPolicy.load(tmp_path / "pol")
    np.testing.assert_array_equal(pol.predict(*rows(cache)), back.predict(*rows(cache)))
    assert back.get_params() == pol.get_params() and back.meta_["task"] == "reach-v3"
    assert back.attention == AttentionConfig(queries=2, heads=2)


def test_policy_is_a_scikit_learn_estimator_whose_clone_is_unfitted_with_equal_params():
    pol = small(attention=AttentionConfig(queries=3, heads=2), seed=4)
    assert pol.get_params()["attention"] == AttentionConfig(queries=3, heads=2)
    twin = clone(pol.fit(marked_token_cache(M=64), progress=False))
    assert twin.get_params() == pol.get_params() and not hasattr(twin, "head_")
    assert twin.set_params(seed=9).seed == 9
    assert "queries=3" in repr(pol) and "seed=4" in repr(pol)


def test_attention_options_with_another_pooling_are_refused_not_ignored():
    cache = marked_token_cache(M=64)
    for pooling in ("cls", "mean"):
        with pytest.raises(ParameterError, match="pooling='attention'"):
            PatchTokenPolicy(pooling, AttentionConfig(queries=8)).fit(cache, progress=False)
    assert PatchTokenPolicy("cls").fit(cache, progress=False).head_.cfg.attention is None
    default = PatchTokenPolicy("attention", hidden=8, epochs=1).fit(cache, progress=False)
    assert default.head_.cfg.attention == AttentionConfig()              # None means the defaults


def test_hyperparameters_that_do_not_fit_the_tokens_are_named_errors():
    cache = marked_token_cache(M=64, C=16)
    with pytest.raises(ParameterError, match="heads do not divide"):
        small(attention=AttentionConfig(heads=3)).fit(cache, progress=False)
    with pytest.raises(ParameterError, match=">= 1"):
        AttentionConfig(queries=0)
    with pytest.raises(ParameterError, match="CLS"):
        small("cls").fit(dataclasses.replace(cache, cls=None), progress=False)


@pytest.mark.parametrize("name, value", [("pooling", "max"), ("epochs", 0), ("batch_size", 0), ("lr", 0.0),
                                         ("hidden", 0), ("chunk", 0), ("chunk", 2.5), ("augment", 1),
                                         ("attention", dict(queries=2)), ("weight_decay", -1.0)])
def test_a_hyperparameter_out_of_its_range_is_a_parameter_error_naming_it_before_training(name, value):
    with pytest.raises(InvalidParameterError, match=f"'{name}' parameter"):
        small(**{name: value}).fit(marked_token_cache(M=32), progress=False)


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
    with pytest.raises(ArtifactError, match="hyperparameters"):
        small(epochs=2, attention=AttentionConfig(queries=3, heads=2)).fit(
            cache, checkpoint_dir=tmp_path / "ckpt", progress=False)


def test_predict_before_fit_is_not_fitted_error_saying_how_to_get_a_policy():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="fit"):
        small().predict(torch.zeros(1, 16, 16), None, np.zeros((1, 4)))


def test_check_backbone_rejects_a_backbone_with_other_weights_or_size(make_tiny_vit):
    from frozenvit.control.features import backbone_meta

    a = make_tiny_vit()
    b = make_tiny_vit(seed=1)                                        # random weights of another seed
    cache = marked_token_cache(M=32, grid=(4, 4), C=48)
    cache.meta.update(backbone_meta(a))                              # tokens "from" backbone a
    pol = small(epochs=1).fit(cache, progress=False)
    assert pol.meta_["pretrained"] is False
    pol.check_backbone(a)
    with pytest.raises(ArtifactError, match="retrain"):
        pol.check_backbone(b)
    torch.manual_seed(0)
    with pytest.raises(ArtifactError, match=r"\[64, 64\].*\[96, 96\]"):
        pol.check_backbone(make_tiny_vit(img_size=96))


def test_a_policy_config_edited_by_hand_is_refused(tmp_path):
    small(epochs=1).fit(marked_token_cache(M=64), progress=False).save(tmp_path / "p")
    cfg_path = tmp_path / "p" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["meta"]["block"] = 2                           # features of another block: every action would be wrong
    cfg_path.write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="changed after it was written"):
        PatchTokenPolicy.load(tmp_path / "p")


def test_a_policy_of_the_older_format_is_refused_with_retrain(tmp_path):
    small(epochs=1).fit(marked_token_cache(M=64), progress=False).save(tmp_path / "p")
    cfg_path = tmp_path / "p" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps(dict(cfg, format_version=1)))
    with pytest.raises(ArtifactError, match="format version 1.*retrain") as e:
        PatchTokenPolicy.load(tmp_path / "p")
    assert len(str(e.value).splitlines()) == 1
    with pytest.raises(ArtifactError, match="does not exist"):
        PatchTokenPolicy.load(tmp_path / "nothing")


def test_sincos_policy_round_trips_and_its_diverse_queries_look_at_different_places(tmp_path):
    from frozenvit.control.head import diversity_penalty

    cache = marked_token_cache(M=256)
    plain = small(epochs=15, attention=AttentionConfig(queries=2, heads=2, query_diversity=0.0)).fit(
        cache, progress=False)
    pol = small(epochs=15, attention=AttentionConfig(queries=2, heads=2, query_diversity=0.5)).fit(
        cache, progress=False)

    def overlap(p):
        return float(diversity_penalty(p.head_.query_attention(cache.tokens[:64])))

    assert overlap(pol) < 0.5 * overlap(plain)
    pol.save(tmp_path / "p")
    back = PatchTokenPolicy.load(tmp_path / "p")
    assert back.get_params() == pol.get_params()
    np.testing.assert_array_equal(pol.predict(*rows(cache, 5)), back.predict(*rows(cache, 5)))


def test_default_blocks_end_the_first_quarter_the_first_half_and_the_whole_from_12_blocks_and_the_last_below():
    from frozenvit.control.features import default_blocks

    assert [default_blocks(d) for d in (1, 4, 8, 11)] == [(0,), (3,), (7,), (10,)]
    assert [default_blocks(d) for d in (12, 16, 24)] == [(2, 5, 11), (3, 7, 15), (5, 11, 23)]
    with pytest.raises(ValueError, match="depth"):
        default_blocks(0)


def test_a_12_block_encoder_is_read_at_blocks_2_5_and_11_side_by_side_by_default():
    from frozenvit.backbone import load_backbone
    from frozenvit.control.features import backbone_meta
    from frozenvit.control.latency import UntrainedHead

    bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=12, embed_dim=24, num_heads=2)
    meta = backbone_meta(bb)
    assert meta["block"] == [2, 5, 11] and meta["embed_dim"] == 72
    assert backbone_meta(bb, -1)["block"] == 11 and backbone_meta(bb, -1)["embed_dim"] == 24
    head = UntrainedHead(bb)
    assert head.meta_["block"] == [2, 5, 11] and head.head_.cfg.norm_groups == 3
