"""The policy head: attention pooling is multi-head cross-attention; each pooling variant has its contract."""
import pytest
import torch
from torch import nn

from frozenvit.control.head import AttentionPool, PolicyHead


def test_attention_pool_matches_nn_multihead_attention_with_copied_weights():
    torch.manual_seed(0)
    B, N, C, H, Q = 3, 12, 16, 4, 2
    pool = AttentionPool(C, num_queries=Q, num_heads=H)
    ref = nn.MultiheadAttention(C, H, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([pool.q_proj.weight, pool.k_proj.weight, pool.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([pool.q_proj.bias, pool.k_proj.bias, pool.v_proj.bias]))
        ref.out_proj.weight.copy_(pool.out_proj.weight)
        ref.out_proj.bias.copy_(pool.out_proj.bias)
    tokens, pos = torch.randn(B, N, C), torch.randn(N, C)
    out, att = pool(tokens, pos, return_weights=True)                            # (B, Q, C), (B, H, Q, N)
    want, want_att = ref(pool.query.expand(B, Q, C), tokens + pos, tokens + pos, need_weights=True,
                         average_attn_weights=False)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(att, want_att, rtol=1e-5, atol=1e-6)


def test_attention_pool_rejects_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match="divisible"):
        AttentionPool(10, num_heads=4)


@pytest.mark.parametrize("pooling", ["attention", "cls", "mean"])
@pytest.mark.parametrize("frames", [1, 3])
def test_policy_head_maps_token_stack_and_proprio_to_actions(pooling, frames):
    head = PolicyHead(16, 9, 4, 4, pooling=pooling, num_queries=2, num_heads=2, frames=frames, hidden=32)
    out = head(torch.randn(5, frames, 9, 16), torch.randn(5, frames, 16), torch.randn(5, 4))
    assert out.shape == (5, 4)


def test_policy_head_rejects_a_stack_of_the_wrong_length():
    head = PolicyHead(16, 9, frames=2, num_heads=2)
    with pytest.raises(ValueError, match=r"\(B, 2, 9, C\)"):
        head(torch.randn(5, 1, 9, 16), None, torch.randn(5, 4))


def test_mean_pooling_is_invariant_to_token_order_and_attention_pooling_is_not_after_training_pos():
    torch.manual_seed(0)
    tokens, prop = torch.randn(2, 1, 9, 16), torch.randn(2, 4)
    perm = torch.randperm(9)
    mean = PolicyHead(16, 9, pooling="mean", num_heads=2)
    torch.testing.assert_close(mean(tokens, None, prop), mean(tokens[:, :, perm], None, prop))
    att = PolicyHead(16, 9, pooling="attention", num_heads=2)
    with torch.no_grad():
        att.pos.normal_()                                       # a learned position embedding addresses places
    assert not torch.allclose(att(tokens, None, prop), att(tokens[:, :, perm], None, prop))


def test_cls_pooling_ignores_patch_tokens():
    head = PolicyHead(16, 9, pooling="cls", num_heads=2)
    cls, prop = torch.randn(2, 1, 16), torch.randn(2, 4)
    torch.testing.assert_close(head(torch.randn(2, 1, 9, 16), cls, prop), head(torch.randn(2, 1, 9, 16), cls, prop))


def test_attention_map_is_a_distribution_over_the_grid():
    head = PolicyHead(16, 9, pooling="attention", num_heads=2, num_queries=3)
    m = head.attention_map(torch.randn(4, 9, 16))
    assert m.shape == (4, 9)
    torch.testing.assert_close(m.sum(1), torch.ones(4))


def test_attention_pool_gives_zero_weight_to_hidden_tokens():
    pool = AttentionPool(16, num_queries=2, num_heads=2)
    keep = torch.ones(3, 12, dtype=torch.bool)
    keep[:, 5:9] = False
    _, att = pool(torch.randn(3, 12, 16), keep=keep, return_weights=True)       # (3, H, Q, 12)
    assert torch.all(att[..., 5:9] == 0)
    torch.testing.assert_close(att.sum(-1), torch.ones(3, 2, 2))


def test_token_dropout_acts_in_training_only():
    torch.manual_seed(0)
    head = PolicyHead(16, 9, pooling="attention", num_heads=2, token_dropout=0.5)
    x, prop = torch.randn(4, 1, 9, 16), torch.randn(4, 4)
    g = lambda s: torch.Generator().manual_seed(s)                             # noqa: E731
    head.train()
    assert not torch.allclose(head.forward_prepared(x, prop, g(0)), head.forward_prepared(x, prop, g(1)))
    head.eval()
    torch.testing.assert_close(head.forward_prepared(x, prop, g(0)), head.forward_prepared(x, prop, g(1)))


def test_patch_coords_are_row_major_centres_in_minus_one_one():
    from frozenvit.control.head import patch_coords

    c = patch_coords(6, (2, 3))                                     # 2 rows, 3 columns
    torch.testing.assert_close(c[:3, 0], torch.tensor([-2 / 3, 0.0, 2 / 3]))   # x varies along a row
    torch.testing.assert_close(c[::3, 1], torch.tensor([-0.5, 0.5]))            # y steps between rows
    assert patch_coords(9).shape == (9, 2)
    with pytest.raises(ValueError, match="square"):
        patch_coords(6)
    with pytest.raises(ValueError, match="does not hold"):
        patch_coords(6, (2, 2))


def test_keypoints_report_where_a_query_attends():
    torch.manual_seed(0)
    head = PolicyHead(16, 9, pooling="attention", num_queries=1, num_heads=1, keypoints=True, grid=(3, 3))
    assert head.mlp[0].in_features == 16 + 1 * 1 * 2 + 4
    assert PolicyHead(16, 9, num_queries=2, num_heads=2, keypoints=True).mlp[0].in_features == 2 * 16 + 2 * 2 * 2 + 4
    tokens = torch.zeros(1, 9, 16)
    with torch.no_grad():                                          # one token the query's key matches strongly
        target = head.pool.q_proj(head.pool.query)[0] @ head.pool.k_proj.weight   # (C,)
        tokens[0, 5] = 1e3 * target / target.norm()                # row 1, column 2: centre (2/3, 0)
    _, att = head.pool(tokens, head.pos, return_weights=True)
    kp = att @ head.coords                                         # (1, H, Q, 2)
    torch.testing.assert_close(kp[0, 0, 0], torch.tensor([2 / 3, 0.0]), atol=1e-3, rtol=0)
    seen = {}
    head.mlp[0].register_forward_hook(lambda m, i, o: seen.update(x=i[0]))
    head.forward_prepared(tokens[:, None], torch.zeros(1, 4))
    torch.testing.assert_close(seen["x"][0, 16:18], kp[0, 0, 0])


def test_sincos_code_gives_every_patch_its_own_code_varying_on_the_grid():
    from frozenvit.control.head import sincos_2d

    pe = sincos_2d(12, 32, grid=(3, 4))                            # 3 rows x 4 columns, row-major
    assert pe.shape == (12, 32)
    assert torch.cdist(pe, pe).add(torch.eye(12) * 1e3).min() > 0.1    # no two patches share a code
    x_half, y_half = pe[:, :16], pe[:, 16:]
    torch.testing.assert_close(x_half[0], x_half[4])               # same column, other row: same x code
    torch.testing.assert_close(y_half[0], y_half[3])               # same row, other column: same y code
    assert not torch.allclose(x_half[0], x_half[1]) and not torch.allclose(y_half[0], y_half[4])
    assert (pe.std(dim=0) > 0.05).all()                            # no channel is constant over the grid
    with pytest.raises(ValueError, match="divisible by 4"):
        sincos_2d(12, 30, grid=(3, 4))


def test_diversity_penalty_matches_pairwise_cosines_and_spans_zero_to_one():
    from frozenvit.control.head import diversity_penalty

    torch.manual_seed(0)
    att = torch.rand(3, 2, 4, 10).softmax(-1)                      # (B, H, Q, N)
    a = att.mean(1)
    want = torch.stack([torch.stack([torch.nn.functional.cosine_similarity(a[b, i], a[b, j], dim=0) ** 2
                                     for i in range(4) for j in range(4) if i != j]).mean() for b in range(3)]).mean()
    torch.testing.assert_close(diversity_penalty(att), want)
    same = torch.rand(1, 1, 1, 10).softmax(-1).expand(2, 2, 3, 10)
    torch.testing.assert_close(diversity_penalty(same), torch.tensor(1.0))
    apart = torch.eye(10)[:3].expand(2, 2, 3, 10)                  # three queries on three different patches
    assert diversity_penalty(apart) == 0


def test_query_diversity_adds_a_penalty_in_training_and_sincos_code_is_fixed():
    torch.manual_seed(0)
    head = PolicyHead(16, 9, pooling="attention", num_queries=3, num_heads=2, pos_code="sincos",
                      query_diversity=0.5, grid=(3, 3))
    assert "pos" not in dict(head.named_parameters()) and "pos" not in head.state_dict()
    q = head.pool.query.detach()
    torch.testing.assert_close(q @ q.T, torch.eye(3), atol=1e-5, rtol=0)   # queries start orthogonal
    x, prop = torch.randn(5, 1, 9, 16), torch.randn(5, 4)
    out, penalty = head.forward_prepared(x, prop, return_penalty=True)
    assert out.shape == (5, 4) and 0 < penalty <= 0.5
    _, none = PolicyHead(16, 9, num_queries=3, num_heads=2, query_diversity=0.0).forward_prepared(
        x, prop, return_penalty=True)
    assert none == 0
    with pytest.raises(ValueError, match="pos_code"):
        PolicyHead(16, 9, pos_code="rope")
    with pytest.raises(ValueError, match="query_diversity"):
        PolicyHead(16, 9, query_diversity=-1.0)


def test_with_cls_hands_the_mlp_the_cls_token_beside_the_pooled_patches():
    torch.manual_seed(0)
    head = PolicyHead(16, 9, pooling="attention", num_queries=2, num_heads=2, with_cls=True).eval()
    assert head.mlp[0].in_features == 2 * 16 + 16 + 4
    tokens, cls, prop = torch.randn(2, 1, 9, 16), torch.randn(2, 1, 16), torch.randn(2, 4)
    assert head.prepare(tokens, cls).shape == (2, 1, 10, 16)
    a = head(tokens, cls, prop)
    assert not torch.allclose(a, head(tokens, torch.randn(2, 1, 16), prop))       # the CLS token matters
    assert not torch.allclose(a, head(torch.randn(2, 1, 9, 16), cls, prop))       # and so do the patches
    with pytest.raises(ValueError, match="CLS"):
        head(tokens, None, prop)
    m = head.attention_map(tokens[:, 0])                           # maps need the patches only
    assert m.shape == (2, 9) and torch.allclose(m.sum(-1), torch.ones(2))
    assert PolicyHead(16, 9, pooling="cls", with_cls=True).with_cls is False       # an attention option only
