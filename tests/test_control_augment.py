"""Augmentation under a frozen encoder (issue 21, lever 2): K shifted and colour-jittered views of every demo
frame, encoded once into the feature cache, and BC that samples the frame or one of its views. No MuJoCo:
the demo folders here are written by hand."""
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone

from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import InvalidParameterError, ParameterError
from frozenvit.control.features import (FeatureCache, backbone_fingerprint, cache_features, colour_jitter,
                                        random_shift)
from frozenvit.control.policy import PatchTokenPolicy

from test_control_policy import marked_token_cache, small

RENDER = dict(shadows=False, reflections=False, offsamples=0)
CLEAN_KEYS = {"kind", "format_version", "backbone", "fingerprint", "pretrained", "img_size", "block", "grid",
              "embed_dim", "has_cls", "task", "camera", "demo_image_size", "render", "configs", "precision",
              "expert", "demos"}                # the demos' expert and content digest: features of other demos differ


def write_demos(root: Path, episodes=(5, 4), size=48, seed=0) -> Path:
    """A demo folder as `collect_demos` writes it: frames are a smooth gradient with a bright square that moves."""
    rng = np.random.default_rng(seed)
    (root / "episodes").mkdir(parents=True)
    yy, xx = np.mgrid[0:size, 0:size] / size
    listed = []
    for e, T in enumerate(episodes):
        frames = np.empty((T, size, size, 3), dtype=np.uint8)
        for t in range(T):
            img = np.stack([0.2 + 0.6 * xx, 0.3 + 0.5 * yy, 0.5 + 0.3 * xx * yy], -1)
            r, c = rng.integers(4, size - 12, 2)
            img[r:r + 8, c:c + 8] = (0.9, 0.2, 0.1)
            frames[t] = (255 * img).astype(np.uint8)
        buf = io.BytesIO()
        np.savez_compressed(buf, frames=frames, proprio=rng.normal(size=(T, 4)).astype(np.float32),
                            actions=rng.uniform(-1, 1, (T, 4)).astype(np.float32), config=np.int64(e),
                            rand_vec=np.zeros(3))
        (root / f"episodes/cfg_{e:07d}.npz").write_bytes(buf.getvalue())
        listed.append(dict(config=e, file=f"episodes/cfg_{e:07d}.npz", steps=T))
    (root / "manifest.json").write_text(json.dumps(dict(
        kind="control.demos", format_version=2, task="reach-v3", camera="corner", image_size=size, max_steps=100,
        hold_steps=0, render=RENDER, expert="fingertips", episodes=listed, failed_configs=[])))
    return root


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return write_demos(tmp_path_factory.mktemp("aug") / "demos")


@pytest.fixture(scope="module")
def bb(make_tiny_vit):
    torch.manual_seed(0)
    return make_tiny_vit()


def views_cache(demos, bb, tmp_path, name, **kw) -> FeatureCache:
    return cache_features(demos, bb, cache_dir=tmp_path / name, progress=False, **{"views": 2, **kw})


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().mean())


# -- the image operations --------------------------------------------------------------------------------
def test_random_shift_moves_the_image_and_replicates_its_border():
    x = torch.arange(2 * 3 * 5 * 5, dtype=torch.float32).view(2, 3, 5, 5)
    same = random_shift(x, torch.tensor([[2, 2], [2, 2]]), 2)                     # the centre crop
    assert torch.equal(same, x)
    moved = random_shift(x, torch.tensor([[0, 0], [4, 3]]), 2)
    assert torch.equal(moved[0, :, 2:, 2:], x[0, :, :3, :3])                      # content 2 px down and right
    assert torch.equal(moved[0, :, 0, 2:], x[0, :, 0, :3])                        # top rows: the first row again
    assert torch.equal(moved[1, :, :3, :4], x[1, :, 2:, 1:])                      # 2 px up, 1 px left
    assert torch.equal(moved[1, :, 4, :4], x[1, :, 4, 1:])                        # bottom row replicated


def test_colour_jitter_is_the_identity_at_factor_one_and_scales_otherwise():
    x = torch.rand(2, 3, 6, 6, generator=torch.Generator().manual_seed(0)) * 0.8 + 0.1
    torch.testing.assert_close(colour_jitter(x, torch.ones(2, 3)), x, rtol=0, atol=1e-6)
    torch.testing.assert_close(colour_jitter(x, torch.tensor([[0.5, 1, 1]] * 2)), x * 0.5, rtol=0, atol=1e-6)
    grey = colour_jitter(x, torch.tensor([[1, 1, 0.0]] * 2))                      # saturation 0: no colour
    torch.testing.assert_close(grey[:, 0], grey[:, 1], rtol=0, atol=1e-6)
    flat = colour_jitter(x, torch.tensor([[1, 0.0, 1]] * 2))                      # contrast 0: one grey level
    assert float(flat.std((2, 3)).max()) < 1e-6


# -- the cache ------------------------------------------------------------------------------------------
def test_views_are_near_the_clean_features_but_not_equal(demos, bb, tmp_path):
    c = views_cache(demos, bb, tmp_path, "v")
    M, N, C = c.tokens.shape
    assert c.views == 2 and c.view_tokens.shape == (M, 2, N, C) and c.view_cls.shape == (M, 2, C)
    assert c.view_tokens.dtype == torch.float16
    own = gap(c.view_tokens, c.tokens[:, None])                                  # a view vs its own frame
    other = gap(c.view_tokens, c.tokens.roll(1, 0)[:, None])                     # vs another frame
    assert 0.01 < own < 0.8 * other, (own, other)                                # 0.043 vs 0.060 when written
    milder = views_cache(demos, bb, tmp_path, "mild", shift=1, jitter=0.02)
    assert gap(milder.view_tokens, milder.tokens[:, None]) < 0.5 * own           # smaller changes, nearer
    assert not torch.equal(c.view_tokens[:, 0], c.view_tokens[:, 1])              # two different views


def test_views_without_shift_or_jitter_are_the_clean_features(demos, bb, tmp_path):
    c = views_cache(demos, bb, tmp_path, "none", shift=0, jitter=0.0)
    for k in range(2):
        torch.testing.assert_close(c.view_tokens[:, k].float(), c.tokens.float(), rtol=0, atol=2e-3)
        torch.testing.assert_close(c.view_cls[:, k].float(), c.cls.float(), rtol=0, atol=2e-3)


@pytest.mark.parametrize("kw", [dict(shift=3, jitter=0.0), dict(shift=0, jitter=0.2)], ids=["shift", "jitter"])
def test_shift_alone_and_jitter_alone_change_the_views(demos, bb, tmp_path, kw):
    c = views_cache(demos, bb, tmp_path, "one", **kw)
    assert gap(c.view_tokens, c.tokens[:, None]) > 0.01                           # far above float16 rounding


def test_views_are_the_same_with_the_same_seed_and_differ_with_another(demos, bb, tmp_path):
    a, b, c = (views_cache(demos, bb, tmp_path, f"s{i}", seed=s) for i, s in enumerate((0, 0, 1)))
    assert torch.equal(a.view_tokens, b.view_tokens) and torch.equal(a.view_cls, b.view_cls)
    assert not torch.equal(a.view_tokens, c.view_tokens)
    assert torch.equal(a.tokens, c.tokens)                                         # the clean frames do not move
    assert (a.meta["views"], a.meta["view_shift"], a.meta["view_jitter"], a.meta["view_seed"]) == (2, 4, 0.1, 0)


def test_without_views_the_cache_keeps_its_folder_and_config_and_views_go_elsewhere(demos, bb, monkeypatch):
    clean = cache_features(demos, bb, progress=False, views=0, precision="float32")
    name = f"{bb.config.name}_64px_b3_{backbone_fingerprint(bb)[:12]}"
    folder = Path(demos) / "features" / name
    assert set(json.loads((folder / "config.json").read_text())) == CLEAN_KEYS
    assert clean.views == 0 and clean.view_tokens is None and clean.nbytes()["views"] == 0
    with_views = cache_features(demos, bb, progress=False, views=2, shift=3, precision="float32")
    folders = sorted(p.name for p in (Path(demos) / "features").iterdir())
    assert folders == sorted([name, name + "_views2_s3_j0.1_seed0"])
    nb = with_views.nbytes()
    assert nb["views"] == 2 * nb["tokens"] == 2 * (clean.tokens.numel() + clean.cls.numel()) * 2   # float16
    monkeypatch.setattr(type(bb), "patch_grids", lambda *a, **k: pytest.fail("re-encoded a cached frame"))
    again = cache_features(demos, bb, progress=False, views=0, precision="float32")
    assert again.views == 0 and torch.equal(again.tokens, clean.tokens)
    assert cache_features(demos, bb, progress=False, views=2, shift=3, precision="float32").views == 2


def test_a_clean_cache_given_as_cache_dir_is_not_taken_for_a_views_cache_or_back(demos, bb, tmp_path):
    cache_features(demos, bb, cache_dir=tmp_path / "c", progress=False, views=0)
    assert cache_features(demos, bb, cache_dir=tmp_path / "c", progress=False, views=1).views == 1
    assert cache_features(demos, bb, cache_dir=tmp_path / "c", progress=False, views=0).views == 0


@pytest.mark.parametrize("kw", [dict(views=-1), dict(views=1.5), dict(views=True), dict(views=1, shift=-1),
                                dict(views=1, jitter=1.0), dict(views=1, jitter=-0.1)],
                         ids=["views<0", "views float", "views bool", "shift<0", "jitter 1", "jitter<0"])
def test_bad_augmentation_values_are_refused_before_anything_is_written(demos, bb, tmp_path, kw):
    with pytest.raises(ParameterError, match=next(iter(k for k in ("jitter", "shift", "views") if k in kw))):
        cache_features(demos, bb, cache_dir=tmp_path / "x", progress=False, **kw)
    assert not (tmp_path / "x").exists()


# -- behaviour cloning ----------------------------------------------------------------------------------
def with_views(cache: FeatureCache, K=2, scale=0.2, seed=1) -> FeatureCache:
    """The cache plus K noisy copies of every frame's features as its views."""
    g = torch.Generator().manual_seed(seed)
    vt = cache.tokens[:, None].float() + scale * torch.randn(len(cache), K, *cache.tokens.shape[1:], generator=g)
    vc = cache.cls[:, None].float() + scale * torch.randn(len(cache), K, cache.cls.shape[1], generator=g)
    return FeatureCache(cache.tokens, cache.cls, cache.proprio, cache.actions, cache.episode, cache.step,
                        dict(cache.meta, views=K), view_tokens=vt.half(), view_cls=vc.half())


def same_weights(a: PatchTokenPolicy, b: PatchTokenPolicy) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.head_.state_dict().values(), b.head_.state_dict().values()))


def test_on_a_cache_without_views_augment_changes_nothing():
    cache = marked_token_cache(M=64)
    now = small(epochs=3).fit(cache, progress=False)
    off = small(epochs=3, augment=False).fit(cache, progress=False)
    assert off.history_ == now.history_ and same_weights(off, now)


@pytest.mark.parametrize("pooling", ["attention", "cls", "mean"])
def test_fit_samples_the_views_and_augment_false_ignores_them(pooling):
    cache = marked_token_cache(M=96)
    aug = with_views(cache)
    plain = small(pooling, epochs=3).fit(cache, progress=False)
    used = small(pooling, epochs=3).fit(aug, progress=False)
    ignored = small(pooling, epochs=3, augment=False).fit(aug, progress=False)
    assert ignored.history_ == plain.history_ and same_weights(ignored, plain)
    assert used.history_ != plain.history_ and not same_weights(used, plain)
    again = small(pooling, epochs=3).fit(aug, progress=False)
    assert again.history_ == used.history_ and same_weights(again, used)       # seeded


def test_fit_draws_the_clean_frame_and_every_view_about_equally_often(monkeypatch):
    cache = marked_token_cache(M=96, C=16)
    K = 3
    aug = with_views(cache, K=K, scale=0.0)
    marks = torch.arange(K + 1, dtype=torch.float16)                              # view k: every value k
    aug.tokens[:] = marks[0]
    aug.view_tokens[:] = marks[1:].view(1, K, 1, 1)
    seen = []
    real = PatchTokenPolicy._build

    def spy(self, cfg):
        head = real(self, cfg)
        forward = head.forward_prepared
        head.prepare = lambda t, c: t.float()                                    # keep the marks readable
        head.forward_prepared = lambda x, p, **kw: (seen.append(x[:, 0, 0].clone()), forward(x, p, **kw))[1]
        return head

    monkeypatch.setattr(PatchTokenPolicy, "_build", spy)
    small(epochs=20).fit(aug, progress=False)
    counts = torch.bincount(torch.cat(seen).long(), minlength=K + 1)
    assert counts.sum() == 20 * 96 and counts.min() > 0.8 * 20 * 96 / (K + 1), counts


def test_resume_with_views_ends_where_an_uninterrupted_run_does_and_refuses_other_views(tmp_path, monkeypatch):
    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.control import policy as policy_mod

    aug = with_views(marked_token_cache(M=128))                                  # 2 steps per epoch
    full = small(epochs=4).fit(aug, progress=False)
    real_loss, calls = policy_mod.bc_loss, {"n": 0}

    def crash_in_epoch_three(*a):
        calls["n"] += 1
        if calls["n"] > 2 * 2:
            raise KeyboardInterrupt
        return real_loss(*a)

    monkeypatch.setattr(policy_mod, "bc_loss", crash_in_epoch_three)
    with pytest.raises(KeyboardInterrupt):
        small(epochs=4).fit(aug, checkpoint_dir=tmp_path / "ck", checkpoint_every=2, progress=False)
    monkeypatch.setattr(policy_mod, "bc_loss", real_loss)
    with pytest.raises(ArtifactError, match="other features"):                    # the clean frames alone
        small(epochs=4).fit(marked_token_cache(M=128), checkpoint_dir=tmp_path / "ck", progress=False)
    resumed = small(epochs=4).fit(aug, checkpoint_dir=tmp_path / "ck", checkpoint_every=2, progress=False)
    assert resumed.history_ == full.history_ and same_weights(resumed, full)


# -- the parameter ---------------------------------------------------------------------------------------
def test_augment_is_an_estimator_parameter_saved_with_the_policy(tmp_path):
    pol = small(augment=False)
    assert pol.get_params()["augment"] is False and clone(pol).augment is False
    assert pol.set_params(augment=True).augment is True
    pol.set_params(augment=False).fit(with_views(marked_token_cache(M=64)), progress=False).save(tmp_path / "p")
    assert json.loads((tmp_path / "p" / "config.json").read_text())["params"]["augment"] is False
    back = PatchTokenPolicy.load(tmp_path / "p")
    assert back.augment is False and back.get_params() == pol.get_params() and back.meta_["views"] == 2


def test_augment_must_be_a_bool():
    with pytest.raises(InvalidParameterError, match="augment"):
        small(augment="yes").fit(marked_token_cache(M=32), progress=False)


# -- the command line and the benchmark -----------------------------------------------------------------
def test_train_views_caches_the_views_and_reports_their_size(demos, bb, tmp_path, monkeypatch, capsys):
    from frozenvit.control import encoders

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: bb)
    out = str(tmp_path / "pol")
    assert main(["control", "train", "--demos", str(demos), "--out", out, "--epochs", "1", "--heads", "3",
                 "--views", "1", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "MiB more for 1 views of each" in text, text
    assert PatchTokenPolicy.load(out).meta_["views"] == 1
    with pytest.raises(SystemExit) as e:
        main(["control", "train", "--demos", str(demos), "--out", str(tmp_path / "p2"), "--views", "-1"])
    assert e.value.code == 2 and not (tmp_path / "p2").exists()


def test_train_help_shows_the_views_default(capsys):
    with pytest.raises(SystemExit):
        main(["control", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--views K" in text and "0: none (default: 4)" in text


def test_the_library_and_the_cli_train_on_the_same_number_of_views_by_default():
    # four views per frame paid on reach and push (lab/control-results.md, "Augmented views"): the default of both
    import inspect

    from frozenvit.backbone.suite.cli import build_parser
    from frozenvit.control.defaults import DEFAULT_VIEWS

    assert DEFAULT_VIEWS == 4
    assert inspect.signature(cache_features).parameters["views"].default == DEFAULT_VIEWS
    args = build_parser().parse_args(["control", "train", "--demos", "d", "--out", "o"])
    assert args.views == DEFAULT_VIEWS
    assert build_parser().parse_args(["control", "train", "--demos", "d", "--out", "o", "--views", "0"]).views == 0
