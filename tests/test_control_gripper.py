"""The gripper as a choice: a head's gripper command snapped to the values the expert used in its demos."""
import dataclasses
import json

import numpy as np
import pytest
import torch

from frozenvit.control.errors import PolicyError
from frozenvit.control.features import FeatureCache
from frozenvit.control.policy import MAX_GRIPPER_LEVELS, PatchTokenPolicy, gripper_levels, policy_digest

from test_control_old_policies import _interrupted_checkpoint
from test_control_policy import marked_token_cache, rows, small


def with_gripper(cache: FeatureCache, column: torch.Tensor) -> FeatureCache:
    actions = cache.actions.clone()
    actions[:, -1] = column
    return dataclasses.replace(cache, actions=actions)


def two_level_cache(M=192, low=-1.0, high=0.6) -> FeatureCache:
    """The gripper closes (high) where the object token sits in the grid's right half, opens (low) elsewhere:
    a switch the head can only learn approximately in a few epochs."""
    cache = marked_token_cache(M=M)
    return with_gripper(cache, torch.where(cache.actions[:, 0] > 0, torch.tensor(high), torch.tensor(low)))


def test_levels_are_the_sorted_distinct_values_and_none_for_a_continuous_column():
    assert gripper_levels(np.array([[0, 0.6], [0, -1.0], [0, 0.6]])) == (-1.0, 0.6)
    assert gripper_levels(torch.tensor([[0.0, 1.0], [0.0, 1.0]])) == (1.0,)
    assert gripper_levels(np.array([[0, 1e-9], [0, 0.0]])) == (0.0,)          # rounded to 1e-6: one value
    many = np.linspace(-1, 1, MAX_GRIPPER_LEVELS + 1)[:, None].repeat(2, 1)
    assert gripper_levels(many) is None
    np.testing.assert_allclose(gripper_levels(many[:MAX_GRIPPER_LEVELS]), many[:MAX_GRIPPER_LEVELS, 1], atol=1e-6)


def test_snap_sets_the_gripper_to_the_nearest_demo_value_and_leaves_the_arm_alone():
    cache = two_level_cache()
    snap = small(epochs=3).fit(cache, progress=False)
    assert snap.gripper == "snap" and snap.gripper_levels_ == (-1.0, 0.6)
    cont = snap.set_params(gripper="continuous")
    x = rows(cache, 64)
    raw = cont.predict(*x)
    assert not np.isin(raw[:, -1], [-1.0, 0.6]).all()                         # the head alone blurs the switch
    snapped = snap.set_params(gripper="snap").predict(*x)
    np.testing.assert_array_equal(snapped[:, :-1], raw[:, :-1])
    want = np.where(np.abs(raw[:, -1] + 1.0) <= np.abs(raw[:, -1] - 0.6), -1.0, 0.6)
    np.testing.assert_array_equal(snapped[:, -1], want.astype(np.float32))


def test_a_continuous_expert_is_never_snapped():
    cache = marked_token_cache(M=96)
    cache = with_gripper(cache, torch.linspace(-0.9, 0.9, len(cache)))
    pol = small(epochs=2).fit(cache, progress=False)
    assert pol.gripper_levels_ is None
    x = rows(cache, 16)
    np.testing.assert_array_equal(pol.predict(*x), pol.set_params(gripper="continuous").predict(*x))


def test_training_does_not_depend_on_the_gripper_option():
    cache = two_level_cache(M=96)
    a = small(epochs=2).fit(cache, progress=False)
    b = small(epochs=2, gripper="continuous").fit(cache, progress=False)
    assert a.history_ == b.history_
    assert all(torch.equal(v, b._tensors()[k]) for k, v in a._tensors().items())


def test_levels_and_the_option_survive_save_and_load_and_name_the_head(tmp_path):
    cache = two_level_cache(M=96)
    pol = small(epochs=2).fit(cache, progress=False)
    pol.save(tmp_path / "p")
    assert json.loads((tmp_path / "p" / "config.json").read_text())["gripper_levels"] == [-1.0, 0.6]
    back = PatchTokenPolicy.load(tmp_path / "p")
    assert back.gripper == "snap" and back.gripper_levels_ == (-1.0, 0.6)
    x = rows(cache, 16)
    np.testing.assert_array_equal(back.predict(*x), pol.predict(*x))
    # the digest names evaluation journals: a snapping head's episodes are not a continuous one's
    assert policy_digest(back) != policy_digest(back.set_params(gripper="continuous"))


def test_a_checkpoint_resumes_under_either_option(tmp_path, monkeypatch):
    _interrupted_checkpoint(tmp_path / "ckpt", monkeypatch)                    # gripper "snap", stopped in epoch 3
    cache = marked_token_cache(M=128)
    resumed = small(epochs=4, gripper="continuous").fit(cache, checkpoint_dir=tmp_path / "ckpt", progress=False)
    full = small(epochs=4).fit(cache, progress=False)
    assert resumed.history_ == full.history_ and resumed.gripper == "continuous"
    assert all(torch.equal(v, full._tensors()[k]) for k, v in resumed._tensors().items())


@pytest.mark.parametrize("bad", ["binary", None, "SNAP"])
def test_an_unknown_gripper_option_is_refused_by_name(bad):
    with pytest.raises(PolicyError, match="gripper must be one of snap, continuous"):
        small(epochs=1, gripper=bad).fit(marked_token_cache(M=32), progress=False)


def test_the_library_the_cli_and_the_benchmark_share_the_default_and_older_runs_count_as_continuous(load_benchmark):
    import inspect

    from frozenvit.backbone.suite.cli import build_parser
    from frozenvit.control.defaults import DEFAULT_GRIPPER

    assert inspect.signature(PatchTokenPolicy).parameters["gripper"].default == DEFAULT_GRIPPER
    train = ["control", "train", "--demos", "d", "--out", "o"]
    assert build_parser().parse_args(train).gripper == DEFAULT_GRIPPER
    assert build_parser().parse_args(train + ["--gripper", "continuous"]).gripper == "continuous"
    with pytest.raises(SystemExit):
        build_parser().parse_args(train + ["--gripper", "binary"])
    cs = load_benchmark("control_success")
    old = dict(tasks=["pick-place-v3"], poolings=["attention"], blocks={"attention": 11}, seeds=[0], epochs=200)
    assert cs._pooling_settings(old, "attention") == cs._pooling_settings(dict(old, gripper="continuous"), "attention")
    assert cs._pooling_settings(old, "attention") != cs._pooling_settings(dict(old, gripper="snap"), "attention")
    assert "gripper" not in cs._EPISODE_SETTINGS           # heads that act differently pair on the same episodes
