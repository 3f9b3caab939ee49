"""benchmarks/control_success.py --gripper snap: a head's gripper command replaced by the nearest value the
expert used in the demos. Measured on 2026-12-02 (control/RESULTS.md, "The gripper as a choice"): it did not
pay, so it lives in the benchmark, not in the library."""
import dataclasses
from pathlib import Path

import numpy as np
import torch

from test_control_policy import marked_token_cache, rows, small


def two_level_cache(M=192, low=-1.0, high=0.6):
    """The gripper closes (high) where the object token sits in the grid's right half and opens (low)
    elsewhere: a switch the head learns only approximately in a few epochs."""
    cache = marked_token_cache(M=M)
    actions = cache.actions.clone()
    actions[:, -1] = torch.where(actions[:, 0] > 0, torch.tensor(high), torch.tensor(low))
    return dataclasses.replace(cache, actions=actions)


def test_levels_are_the_sorted_distinct_values_and_none_for_a_continuous_column(load_benchmark):
    cs = load_benchmark("control_success")
    assert cs.gripper_levels(np.array([[0, 0.6], [0, -1.0], [0, 0.6]])) == (-1.0, 0.6)
    assert cs.gripper_levels(torch.tensor([[0.0, 1.0], [0.0, 1.0]])) == (1.0,)
    assert cs.gripper_levels(np.array([[0, 1e-9], [0, 0.0]])) == (0.0,)           # rounded to 1e-6: one value
    many = np.linspace(-1, 1, cs.MAX_GRIPPER_LEVELS + 1)[:, None].repeat(2, 1)
    assert cs.gripper_levels(many) is None
    assert len(cs.gripper_levels(many[1:])) == cs.MAX_GRIPPER_LEVELS


def test_snap_sets_the_gripper_to_the_nearest_demo_value_and_leaves_the_arm_alone(load_benchmark):
    cs = load_benchmark("control_success")
    cache = two_level_cache()
    pol = small(epochs=3).fit(cache, progress=False)
    x = rows(cache, 64)
    raw = pol.predict(*x)
    assert not np.isin(raw[:, -1], [-1.0, 0.6]).all()                            # the head alone blurs the switch
    snapped = cs.snap_gripper(pol, cs.gripper_levels(cache.actions)).predict(*x)
    np.testing.assert_array_equal(snapped[:, :-1], raw[:, :-1])
    want = np.where(np.abs(raw[:, -1] + 1.0) <= np.abs(raw[:, -1] - 0.6), -1.0, 0.6).astype(np.float32)
    np.testing.assert_array_equal(snapped[:, -1], want)


def test_a_continuous_expert_is_left_alone_and_snapped_episodes_journal_apart(load_benchmark):
    cs = load_benchmark("control_success")
    cache = marked_token_cache(M=96)
    pol = small(epochs=1).fit(cache, progress=False)
    x = rows(cache, 8)
    before = pol.predict(*x)
    np.testing.assert_array_equal(cs.snap_gripper(pol, None).predict(*x), before)
    a = cs.episode_journal(Path("p"), pol, [1, 2], 200)
    b = cs.episode_journal(Path("p"), pol, [1, 2], 200, "snap")
    assert a != b and a.name.startswith("episodes_") and b.name.endswith("_snap.jsonl")


def test_runs_before_the_option_count_as_continuous_and_pair_with_snapped_ones(load_benchmark):
    cs = load_benchmark("control_success")
    old = dict(tasks=["pick-place-v3"], poolings=["attention"], blocks={"attention": 11}, seeds=[0], epochs=200)
    assert cs._pooling_settings(old, "attention") == cs._pooling_settings(dict(old, gripper="continuous"), "attention")
    assert cs._pooling_settings(old, "attention") != cs._pooling_settings(dict(old, gripper="snap"), "attention")
    assert "gripper" not in cs._EPISODE_SETTINGS           # the same simulated episodes: --compare pairs them
