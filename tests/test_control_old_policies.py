"""Policy folders saved by earlier frozenvits: a head whose options all still exist loads and acts as it did;
one trained with a removed option (the velocity input, an L1 or Huber loss: control/RESULTS.md, "Options removed
from the library and the CLI") is refused by name. Action chunks were removed with them on 2026-12-01 and came
back on 2026-12-04: folders of all three times read each other where their options allow."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.artifacts import tensor_metadata, write_json
from frozenvit.control import policy as policy_mod
from frozenvit.control.defaults import DEFAULT_CHUNK
from frozenvit.control.policy import FORMAT_VERSION, REMOVED_OPTIONS, PatchTokenPolicy, policy_digest

from test_control_policy import marked_token_cache, rows, small

DATA = Path(__file__).parent / "data"
BEFORE = DATA / "control_policy_before_chunks"                 # format 2, before the removed options existed
WITH_REMOVED = DATA / "control_policy_with_removed_options"    # format 2, holding them at their defaults
CHUNKED = DATA / "control_policy_chunked_velocity_l1"          # format 2, chunk=3, velocity=True, loss="l1"


def rewrite_config(src: Path, dst: Path, change) -> Path:
    """A copy of the policy folder `src` whose config.json is change(config), tensors re-signed to match
    (as the frozenvit that wrote such a config would have signed them)."""
    shutil.copytree(src, dst)
    cfg = change(json.loads((dst / "config.json").read_text()))
    write_json(dst / "config.json", cfg)
    save_file(load_file(str(dst / "model.safetensors")), str(dst / "model.safetensors"), metadata=tensor_metadata(cfg))
    return dst


def with_params(**kw):
    return lambda cfg: dict(cfg, params=dict(cfg["params"], **kw), head=dict(cfg["head"], chunk=kw.get("chunk", 1)))


def test_the_format_stays_2_because_old_and_new_folders_read_each_other():
    # new folders lack the removed keys, which a frozenvit that had them reads as their defaults
    assert FORMAT_VERSION == 2 and json.loads((WITH_REMOVED / "config.json").read_text())["format_version"] == 2
    assert REMOVED_OPTIONS == dict(velocity=False, loss="mse")


def test_a_policy_written_before_chunking_loads_and_predicts_what_it_predicted_then():
    old = json.loads(BEFORE.with_suffix(".json").read_text())
    pol = PatchTokenPolicy.load(BEFORE)
    # equal up to float32 rounding of another thread count or machine (a changed head would be far off)
    x = rows(marked_token_cache(M=64), 5)
    np.testing.assert_allclose(pol.predict(*x), old["predictions"], rtol=1e-5, atol=1e-7)


def without_chunk_params(cfg):
    """The config as the frozenvit of 2026-12-01..04 wrote it: no chunk parameters (a one-action head)."""
    return dict(cfg, params={k: v for k, v in cfg["params"].items() if k not in ("chunk", "chunk_decay")})


def test_a_folder_without_chunk_parameters_is_a_one_action_head_whatever_the_default():
    assert DEFAULT_CHUNK > 1 and PatchTokenPolicy().chunk == DEFAULT_CHUNK     # else this test proves nothing
    assert "chunk" not in json.loads((BEFORE / "config.json").read_text())["params"]
    pol = PatchTokenPolicy.load(BEFORE)
    assert (pol.chunk, pol.chunk_decay, pol.head_.cfg.chunk) == (1, 0.1, 1)
    x = rows(marked_token_cache(M=64), 5)
    assert pol.predict_chunk(*x).shape == (5, 1, 4)


def test_a_checkpoint_without_chunk_parameters_resumes_as_one_action_and_not_as_chunks(tmp_path, monkeypatch):
    _interrupted_checkpoint(tmp_path / "ckpt", monkeypatch)
    old = rewrite_config(tmp_path / "ckpt", tmp_path / "old", without_chunk_params)
    shutil.copytree(old, tmp_path / "old2")
    cache = marked_token_cache(M=128)
    resumed = small(epochs=4).fit(cache, checkpoint_dir=old, progress=False)
    full = small(epochs=4).fit(cache, progress=False)
    assert resumed.history_ == full.history_
    with pytest.raises(ArtifactError, match="'chunk': 1.*'chunk': 8"):
        small(epochs=4, chunk=8).fit(cache, checkpoint_dir=tmp_path / "old2", progress=False)


def test_a_policy_saved_with_the_removed_options_at_their_defaults_loads_and_predicts_what_it_predicted_then():
    old = json.loads(WITH_REMOVED.with_suffix(".json").read_text())
    saved = json.loads((WITH_REMOVED / "config.json").read_text())
    assert {k: saved["params"][k] for k in REMOVED_OPTIONS} == REMOVED_OPTIONS and saved["head"]["chunk"] == 1
    pol = PatchTokenPolicy.load(WITH_REMOVED)
    assert pol.get_params() == small(epochs=3).get_params()               # the options are gone, the rest is kept
    assert (pol.chunk, pol.chunk_decay) == (1, 0.1)
    x = rows(marked_token_cache(M=64), 5)
    np.testing.assert_allclose(pol.predict(*x), old["predictions"], rtol=1e-5, atol=1e-7)
    assert policy_digest(pol) == old["policy_digest"]                     # its evaluation journals still resume


def test_fit_trains_the_head_of_before_weight_for_weight():
    now = small(epochs=3).fit(marked_token_cache(M=64), progress=False)
    for path in (BEFORE, WITH_REMOVED):
        before = PatchTokenPolicy.load(path)
        np.testing.assert_allclose(now.history_, before.history_, rtol=1e-5)
        assert now._tensors().keys() == before._tensors().keys()
        for k, v in now._tensors().items():
            torch.testing.assert_close(v, before._tensors()[k], rtol=1e-4, atol=1e-6, msg=k)


def test_saved_again_it_no_longer_holds_the_removed_options_and_predicts_identically(tmp_path):
    pol = PatchTokenPolicy.load(WITH_REMOVED)
    pol.save(tmp_path / "again")
    cfg = json.loads((tmp_path / "again" / "config.json").read_text())
    assert not set(REMOVED_OPTIONS) & (set(cfg["params"]) | set(cfg["head"]))
    # chunks are back as parameters; a one-action head's config is the one of before chunks (no "chunk" key),
    # which the frozenvit of 2026-12-01..04 reads as chunk 1
    assert (cfg["params"]["chunk"], cfg["params"]["chunk_decay"]) == (1, 0.1) and "chunk" not in cfg["head"]
    back = PatchTokenPolicy.load(tmp_path / "again")
    x = rows(marked_token_cache(M=64), 5)
    np.testing.assert_array_equal(back.predict(*x), pol.predict(*x))
    assert policy_digest(back) == policy_digest(pol)


def test_a_policy_trained_with_removed_options_is_refused_naming_them():
    with pytest.raises(ArtifactError) as e:
        PatchTokenPolicy.load(CHUNKED)
    msg = str(e.value)
    assert "velocity=True" in msg and "loss='l1'" in msg and "chunk=" not in msg    # chunks are an option again
    assert "retrain" in msg and "older frozenvit" in msg


@pytest.mark.parametrize("option, value", [("velocity", True), ("loss", "huber")])
def test_each_removed_option_off_its_default_is_refused_alone(tmp_path, option, value):
    odd = rewrite_config(WITH_REMOVED, tmp_path / "odd", with_params(**{option: value}))
    with pytest.raises(ArtifactError, match=rf"trained with {option}={value!r}: frozenvit no longer has this option"):
        PatchTokenPolicy.load(odd)


def test_another_chunk_decay_does_not_matter_without_chunks(tmp_path):
    # the decay weighs overlapping chunks at run time; with chunk 1 it never acts
    decay = rewrite_config(WITH_REMOVED, tmp_path / "decay", with_params(chunk_decay=0.5))
    x = rows(marked_token_cache(M=64), 5)
    np.testing.assert_array_equal(PatchTokenPolicy.load(decay).predict(*x),
                                  PatchTokenPolicy.load(WITH_REMOVED).predict(*x))


def test_a_chunked_policy_of_before_the_removal_loads_as_one_of_now(tmp_path):
    # a folder of 2026-12-01 with chunk=3 and the options that stayed removed at their defaults: its head
    # (weights of 3 actions per frame) acts here as it did then
    now = small(epochs=2, chunk=3).fit(marked_token_cache(M=64), progress=False)
    now.save(tmp_path / "now")
    then = rewrite_config(tmp_path / "now", tmp_path / "then", lambda cfg: dict(
        cfg, params=dict(cfg["params"], velocity=False, loss="mse"), head=dict(cfg["head"], chunk=3)))
    old = PatchTokenPolicy.load(then)
    x = rows(marked_token_cache(M=64), 5)
    assert old.chunk == 3 and old.predict_chunk(*x).shape == (5, 3, 4)
    np.testing.assert_array_equal(old.predict_chunk(*x), now.predict_chunk(*x))
    assert policy_digest(old) == policy_digest(now)


def _interrupted_checkpoint(ckpt: Path, monkeypatch) -> None:
    """small(epochs=4) on 128 frames, stopped in epoch 3 after checkpointing epoch 2."""
    real, calls = policy_mod.bc_loss, {"n": 0}

    def crash_in_epoch_three(pred, target):
        calls["n"] += 1
        if calls["n"] > 2 * 2:                                   # 2 steps per epoch
            raise KeyboardInterrupt
        return real(pred, target)

    monkeypatch.setattr(policy_mod, "bc_loss", crash_in_epoch_three)
    with pytest.raises(KeyboardInterrupt):
        small(epochs=4).fit(marked_token_cache(M=128), checkpoint_dir=ckpt, checkpoint_every=2, progress=False)
    monkeypatch.setattr(policy_mod, "bc_loss", real)


def test_a_checkpoint_holding_the_removed_options_at_their_defaults_resumes(tmp_path, monkeypatch):
    _interrupted_checkpoint(tmp_path / "ckpt", monkeypatch)
    old = rewrite_config(tmp_path / "ckpt", tmp_path / "old", with_params(**REMOVED_OPTIONS))
    cache = marked_token_cache(M=128)
    resumed = small(epochs=4).fit(cache, checkpoint_dir=old, progress=False)
    full = small(epochs=4).fit(cache, progress=False)
    assert resumed.history_ == full.history_
    assert all(torch.equal(v, full._tensors()[k]) for k, v in resumed._tensors().items())


def test_a_checkpoint_trained_with_a_removed_option_is_refused(tmp_path, monkeypatch):
    _interrupted_checkpoint(tmp_path / "ckpt", monkeypatch)
    odd = rewrite_config(tmp_path / "ckpt", tmp_path / "odd", with_params(velocity=True))
    with pytest.raises(ArtifactError, match="velocity=True"):
        small(epochs=4).fit(marked_token_cache(M=128), checkpoint_dir=odd, progress=False)
