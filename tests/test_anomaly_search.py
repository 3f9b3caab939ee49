"""faiss search against brute force; scoring helpers against hand-computed values."""
import numpy as np
import pytest
import torch

from frozenvit.anomaly.anomaly_map import smooth
from frozenvit.anomaly.features import fuse_blocks, local_aggregate, reduced_width
from frozenvit.anomaly.scoring import reweighted_max, topk_mean
from frozenvit.anomaly.search import build_index, knn, load_index, save_index


@pytest.fixture
def bank_and_queries():
    rng = np.random.default_rng(0)
    return rng.standard_normal((2000, 32)).astype(np.float32), rng.standard_normal((100, 32)).astype(np.float32)


def brute_knn(bank, q, k):
    d = torch.cdist(torch.from_numpy(q).double(), torch.from_numpy(bank).double())
    v, i = d.topk(k, largest=False)
    return v.numpy(), i.numpy()


def test_flat_index_equals_brute_force_distances_and_neighbours(bank_and_queries):
    bank, q = bank_and_queries
    d, i = knn(build_index(bank, "flat"), q, 3)
    bd, bi = brute_knn(bank, q, 3)
    assert (i == bi).all()
    assert np.allclose(d, bd, atol=1e-4)


def test_flat_gemm_search_agrees_with_faiss_own_flat_search(bank_and_queries):
    import faiss
    bank, q = bank_and_queries
    index = build_index(bank, "flat")
    d2, i = faiss.IndexFlat.search(index, q, 4)                 # faiss's own implementation
    d, j = knn(index, q, 4)
    assert (i == j).all() and np.allclose(d, np.sqrt(d2), atol=1e-4)


def test_exact_search_in_small_blocks_equals_one_block(bank_and_queries):
    from frozenvit.anomaly.search import knn_exact
    bank, q = bank_and_queries
    a, b = knn_exact(bank, q, 2), knn_exact(bank, q, 2, block_bytes=4 * len(bank) * 7)   # 7 queries per block
    assert (a[1] == b[1]).all() and np.allclose(a[0], b[0])


def test_ivf_with_all_lists_probed_is_exact(bank_and_queries):
    bank, q = bank_and_queries
    index = build_index(bank, "ivf", nlist=16, nprobe=16)
    d, i = knn(index, q, 1)
    bd, bi = brute_knn(bank, q, 1)
    assert (i == bi).all() and np.allclose(d, bd, atol=1e-4)


def test_ivfpq_finds_approximate_neighbours(bank_and_queries):
    bank, q = bank_and_queries
    d, _ = knn(build_index(bank, "ivfpq", nlist=8, nprobe=8, pq_bits=4), q, 1)
    bd, _ = brute_knn(bank, q, 1)
    assert np.corrcoef(d[:, 0], bd[:, 0])[0, 1] > 0.5


def test_index_round_trips_through_a_file(bank_and_queries, tmp_path):
    bank, q = bank_and_queries
    index = build_index(bank, "flat")
    save_index(index, tmp_path / "i.faiss")
    assert (knn(load_index(tmp_path / "i.faiss"), q, 2)[1] == knn(index, q, 2)[1]).all()


def test_local_aggregate_averages_existing_neighbours_only():
    g = torch.arange(16.0).reshape(1, 1, 4, 4)
    out = local_aggregate(g, 3)
    assert out[0, 0, 1, 1] == g[0, 0, 0:3, 0:3].mean()                  # interior: 9 neighbours
    assert out[0, 0, 0, 0] == g[0, 0, 0:2, 0:2].mean()                  # corner: 4, no zero padding
    assert torch.equal(local_aggregate(g, 1), g)


def test_fuse_blocks_concatenates_and_pools_channels():
    a, b = torch.ones(2, 4, 3, 3), torch.zeros(2, 4, 3, 3)
    assert fuse_blocks([a, b]).shape == (2, 8, 3, 3)
    r = fuse_blocks([a, b], reduce_dim=2)
    assert r.shape == (2, 2, 3, 3) and torch.allclose(r[:, 0], torch.ones(1)) and torch.allclose(r[:, 1], torch.zeros(1))


def test_reweighted_max_matches_the_paper_formula():
    s, d = np.array([2.0]), np.array([[2.0, 3.0, 4.5]])
    expected = (1 - np.exp(2.0) / np.exp(d).sum()) * 2.0
    assert reweighted_max(s, d)[0] == pytest.approx(expected, rel=1e-6)
    # stable for large distances (naive exp overflows)
    assert np.isfinite(reweighted_max(np.array([900.0]), np.array([[900.0, 950.0]]))).all()


def test_topk_mean_takes_the_top_percent():
    p = np.arange(200, dtype=float)[None]
    assert topk_mean(p, 0.01)[0] == pytest.approx((199 + 198) / 2)


def test_smooth_is_a_normalised_gaussian():
    a = np.zeros((41, 41), np.float32)
    a[20, 20] = 1
    s = smooth(a, 4.0)
    assert s.sum() == pytest.approx(1.0, rel=1e-4) and s.argmax() == 20 * 41 + 20
    assert s[20, 24] / s[20, 20] == pytest.approx(np.exp(-0.5), rel=0.02)


def test_batched_torch_smoothing_equals_scipy_gaussian_filter():
    from frozenvit.anomaly.anomaly_map import smooth_batch
    a = np.random.default_rng(0).random((2, 30, 45)).astype(np.float32)
    got = smooth_batch(torch.from_numpy(a), 4.0).numpy()
    assert np.allclose(got, np.stack([smooth(x, 4.0) for x in a]), atol=1e-5)


def test_canvas_maps_equal_bilinear_upsampling_then_scipy_gaussian():
    import torch.nn.functional as F
    from frozenvit.anomaly.anomaly_map import canvas_maps
    p = np.random.default_rng(1).random((3, 4, 5)).astype(np.float32)
    up = F.interpolate(torch.from_numpy(p)[:, None], size=(64, 80), mode="bilinear", align_corners=False)[:, 0]
    ref = np.stack([smooth(u, 4.0) for u in up.numpy()])
    assert np.allclose(canvas_maps(p, (64, 80), 4.0), ref, atol=1e-5)


@pytest.mark.parametrize("size", [3, 5])
def test_local_aggregate_equals_avg_pool_without_padding(size):
    import torch.nn.functional as F
    g = torch.randn(2, 3, 6, 7)
    ref = F.avg_pool2d(g, size, stride=1, padding=size // 2, count_include_pad=False)
    assert torch.allclose(local_aggregate(g, size), ref, atol=1e-5)


def test_center_tokens_ignores_a_defect_covering_a_third_of_the_image():
    from frozenvit.anomaly.features import center_tokens
    g = torch.randn(1, 8, 6, 6) * 0.1 + 3.0
    g[..., :2, :] += 10.0                                               # 12 of 36 tokens: a large defect
    out = center_tokens(g)
    assert out[..., 2:, :].abs().mean() < 0.2                           # normal tokens end up near 0
    assert out[..., :2, :].mean() > 9.0                                 # the defect keeps its offset


@pytest.mark.parametrize("mapping", [
    ("stretch", (37, 90), (64, 80), (0, 0, 64, 80), (0.0, 0.0, 37.0, 90.0)),
    ("pad", (30, 60), (64, 64), (16, 0, 32, 64), (-15.0, 0.0, 45.0, 60.0)),
])
def test_original_maps_equal_canvas_maps_then_to_original(mapping):
    from frozenvit.anomaly.anomaly_map import canvas_maps, original_maps
    from frozenvit.backbone.preprocess import GridMapping
    _, orig, model, box, region = mapping
    m = GridMapping(orig, model, box, region)
    p = np.random.default_rng(2).random((2, 4, 5)).astype(np.float32)
    ref = [m.to_original(c) for c in canvas_maps(p, model, 4.0)]
    got = original_maps(p, [m, m], 4.0)
    assert [g.shape for g in got] == [orig, orig]
    assert all(np.allclose(g, r, atol=1e-5) for g, r in zip(got, ref))


def test_reduce_dim_accepts_fractions_counts_and_none():
    assert reduced_width(384, None) == 384
    assert reduced_width(384, 0.25) == 96 and reduced_width(384, 1.0) == 384
    assert reduced_width(384, 100) == 100 and reduced_width(384, 1000) == 384
    assert reduced_width(3, 0.01) == 1
    for bad in (0, -2, 1.5, 0.0, "96", True):
        with pytest.raises(ValueError, match="reduce_dim"):
            reduced_width(384, bad)


def test_fuse_blocks_even_groups_match_adaptive_pooling():
    g = [torch.randn(2, 8, 3, 4), torch.randn(2, 8, 3, 4)]
    x = torch.cat(g, 1)
    ref = torch.nn.functional.adaptive_avg_pool1d(x.permute(0, 2, 3, 1).reshape(-1, 1, 16), 4)
    ref = ref.reshape(2, 3, 4, 4).permute(0, 3, 1, 2)
    assert torch.allclose(fuse_blocks(g, 0.25), ref, atol=1e-6)          # 16 -> 4: groups of 4
    assert fuse_blocks(g, 5).shape == (2, 5, 3, 4)                       # uneven: adaptive pooling
    assert torch.allclose(fuse_blocks(g, 5)[:, 0], x[:, :4].mean(1), atol=1e-6)
