"""Greedy k-center coreset: equal to the textbook loop, covering, chunked, deterministic."""
import numpy as np
import pytest

from frozenvit.anomaly.coreset import (chunked_coreset, coreset_size, greedy_coreset, greedy_kcenter,
                                       greedy_kcenter_reference, random_projection)


@pytest.mark.parametrize("candidates", [1, 7, 2048])
def test_lazy_batched_kcenter_selects_the_same_points_as_the_textbook_loop(candidates):
    z = np.random.default_rng(0).standard_normal((1500, 12)).astype(np.float32)
    fast = greedy_kcenter(z, 150, start=3, candidates=candidates)
    assert (fast == greedy_kcenter_reference(z, 150, start=3)).all()


def test_kcenter_on_clustered_data_puts_one_centre_in_each_cluster_first():
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((6, 8)) * 50
    x = (centres[rng.integers(0, 6, 600)] + rng.standard_normal((600, 8))).astype(np.float32)
    idx = greedy_kcenter(x, 6, start=0)
    owner = np.argmin(((x[idx][:, None] - centres[None]) ** 2).sum(-1), axis=1)
    assert sorted(owner) == list(range(6))


def test_coreset_covers_within_twice_the_radius_of_a_random_subset():
    # greedy's covering radius is at most 2x optimal, and optimal <= any subset's radius
    x = np.random.default_rng(2).standard_normal((800, 6)).astype(np.float32)
    def radius(idx):
        return np.sqrt(((x[:, None] - x[idx][None]) ** 2).sum(-1)).min(1).max()
    greedy = greedy_coreset(x, 0.05, proj_dim=None)
    rnd = np.random.default_rng(0).choice(len(x), len(greedy), replace=False)
    assert len(greedy) == 40 and len(set(greedy)) == 40
    assert radius(greedy) < radius(rnd)


def test_random_projection_is_seeded_and_keeps_distances_roughly():
    x = np.random.default_rng(3).standard_normal((50, 384)).astype(np.float32)
    a, b = random_projection(x, 128, seed=5), random_projection(x, 128, seed=5)
    assert a.shape == (50, 128) and (a == b).all()
    d_in = np.linalg.norm(x[0] - x[1:], axis=1)
    d_out = np.linalg.norm(a[0] - a[1:], axis=1)
    assert np.abs(d_out / d_in - 1).max() < 0.35


def test_chunked_coreset_returns_rows_of_the_data_of_the_requested_size():
    x = np.random.default_rng(4).standard_normal((1000, 16)).astype(np.float32)
    rows = chunked_coreset((x[i:i + 300] for i in range(0, 1000, 300)), 0.1, proj_dim=None)
    assert rows.shape == (100, 16)
    assert np.isin(rows.view([("", rows.dtype)] * 16), x.view([("", x.dtype)] * 16)).all()
    assert len(np.unique(rows, axis=0)) == 100


def test_coreset_ratio_must_be_a_fraction():
    with pytest.raises(ValueError, match="ratio"):
        greedy_coreset(np.zeros((10, 2), np.float32), 1.5)


def test_kcenter_far_from_the_origin_picks_distinct_centres_as_the_textbook_loop():
    # |z|^2 ~ 1.2e7 in float32: without centring, |a|^2 + |b|^2 - 2ab loses the 0.1-scale distances
    z = (1e3 + 0.1 * np.random.default_rng(5).standard_normal((2000, 12))).astype(np.float32)
    idx = greedy_kcenter(z, 200, start=0)
    assert len(set(idx.tolist())) == 200 and (idx == greedy_kcenter_reference(z, 200, start=0)).all()


def test_coreset_size_grows_as_the_square_root_past_the_knee():
    assert coreset_size(50_000, 0.1, knee=100_000) == 5_000              # below the knee: ratio x N
    assert coreset_size(400_000, 0.1, knee=100_000) == 20_000            # 0.1 x sqrt(1e5 x 4e5)
    assert coreset_size(400_000, 0.1) == 40_000                          # no knee: ratio x N


def test_exact_greedy_coreset_is_the_textbook_selection_from_its_seeded_start():
    x = np.random.default_rng(6).standard_normal((600, 10)).astype(np.float32)
    start = int(np.random.default_rng(3).integers(600))
    assert (greedy_coreset(x, 0.1, proj_dim=None, seed=3) == greedy_kcenter_reference(x, 60, start)).all()


def test_a_cover_sample_makes_the_coreset_the_textbook_selection_on_a_seeded_sample_of_cover_x_n_rows():
    x = np.random.default_rng(7).standard_normal((1000, 10)).astype(np.float32)
    rng = np.random.default_rng(4)
    start = int(rng.integers(1000))
    rows = np.sort(rng.choice(1000, 150, replace=False))                # cover 3 x 50 centres
    got = greedy_coreset(x, n=50, proj_dim=None, seed=4, cover=3.0)
    assert (got == rows[greedy_kcenter_reference(x[rows], 50, start % 150)]).all()


def test_a_cover_sample_at_least_as_large_as_the_data_is_the_exact_selection():
    x = np.random.default_rng(8).standard_normal((300, 6)).astype(np.float32)
    assert (greedy_coreset(x, 0.1, proj_dim=None, cover=10.0) == greedy_coreset(x, 0.1, proj_dim=None)).all()
