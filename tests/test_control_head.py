"""The policy head: attention pooling is multi-head cross-attention; each pooling variant has its contract."""
import json

import pytest
import torch
from torch import nn

from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.control.errors import PolicyError
from frozenvit.control.head import AttentionConfig, AttentionPool, HeadConfig, PolicyHead


def test_attention_pool_matches_nn_multihead_attention_with_copied_weights():
    torch.manual_seed(0)
    B, N, C, H, Q = 3, 12, 16, 4, 2
    pool = AttentionPool(C, num_queries=Q, num_heads=H)
    q = pool.query.detach()
    torch.testing.assert_close(q @ q.T, torch.eye(Q), atol=1e-5, rtol=0)         # queries start orthogonal
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
    with pytest.raises(ParameterError, match="divisible"):
        AttentionPool(10, num_heads=4)


def head(pooling="attention", grid=(3, 3), C=16, **att):
    attention = AttentionConfig(**{"queries": 2, "heads": 2, **att}) if pooling == "attention" else None
    return PolicyHead(HeadConfig(C, grid, pooling=pooling, attention=attention, hidden=32))


@pytest.mark.parametrize("pooling", ["attention", "cls", "mean"])
def test_policy_head_maps_tokens_and_proprio_to_actions(pooling):
    h = head(pooling)
    out = h(torch.randn(5, 9, 16), torch.randn(5, 16), torch.randn(5, 4))
    assert out.shape == (5, 4)


def test_policy_head_rejects_tokens_of_another_grid():
    with pytest.raises(PolicyError, match=r"\(B, 9, 16\)"):
        head()(torch.randn(5, 12, 16), None, torch.randn(5, 4))


def test_head_config_refuses_attention_options_with_another_pooling_and_fills_them_for_attention():
    with pytest.raises(ParameterError, match="pooling='attention'"):
        HeadConfig(16, (3, 3), pooling="cls", attention=AttentionConfig())
    assert HeadConfig(16, (3, 3)).attention == AttentionConfig()
    assert HeadConfig(16, (3, 3), pooling="mean").attention is None
    cfg = HeadConfig(16, [3, 4], pooling="attention", attention=AttentionConfig(queries=3, heads=2))
    assert cfg.grid == (3, 4) and cfg.num_tokens == 12 and not cfg.uses_cls
    assert HeadConfig(16, (3, 3), pooling="cls").uses_cls
    assert HeadConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_mean_pooling_is_invariant_to_token_order_and_attention_pooling_is_not():
    torch.manual_seed(0)
    tokens, prop = torch.randn(2, 9, 16), torch.randn(2, 4)
    perm = torch.randperm(9)
    mean = head("mean")
    torch.testing.assert_close(mean(tokens, None, prop), mean(tokens[:, perm], None, prop))
    att = head()                                                 # the position code addresses places
    assert not torch.allclose(att(tokens, None, prop), att(tokens[:, perm], None, prop))


def test_cls_pooling_ignores_patch_tokens():
    h = head("cls")
    cls, prop = torch.randn(2, 16), torch.randn(2, 4)
    torch.testing.assert_close(h(torch.randn(2, 9, 16), cls, prop), h(torch.randn(2, 9, 16), cls, prop))


def test_attention_map_is_a_distribution_over_the_grid():
    m = head(queries=3).attention_map(torch.randn(4, 9, 16))
    assert m.shape == (4, 9)
    torch.testing.assert_close(m.sum(1), torch.ones(4))
    with pytest.raises(PolicyError, match="no attention map"):
        head("mean").attention_map(torch.randn(4, 9, 16))


def test_sincos_code_gives_every_patch_its_own_code_varying_on_the_grid():
    from frozenvit.control.head import sincos_2d

    pe = sincos_2d((3, 4), 32)                                     # 3 rows x 4 columns, row-major
    assert pe.shape == (12, 32)
    assert torch.cdist(pe, pe).add(torch.eye(12) * 1e3).min() > 0.1    # no two patches share a code
    x_half, y_half = pe[:, :16], pe[:, 16:]
    torch.testing.assert_close(x_half[0], x_half[4])               # same column, other row: same x code
    torch.testing.assert_close(y_half[0], y_half[3])               # same row, other column: same y code
    assert not torch.allclose(x_half[0], x_half[1]) and not torch.allclose(y_half[0], y_half[4])
    assert (pe.std(dim=0) > 0.05).all()                            # no channel is constant over the grid
    with pytest.raises(ParameterError, match="divisible by 4"):
        sincos_2d((3, 4), 30)


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


def test_query_diversity_adds_a_penalty_in_training_and_the_position_code_is_fixed():
    torch.manual_seed(0)
    h = head(queries=3, query_diversity=0.5)
    assert "pos" not in dict(h.named_parameters()) and "pos" not in h.state_dict()
    x, prop = torch.randn(5, 9, 16), torch.randn(5, 4)
    out, penalty = h.forward_prepared(x, prop, return_penalty=True)
    assert out.shape == (5, 4) and 0 < penalty <= 0.5
    _, none = head(queries=3, query_diversity=0.0).forward_prepared(x, prop, return_penalty=True)
    assert none == 0
    with pytest.raises(ParameterError, match="query_diversity"):
        AttentionConfig(query_diversity=-1.0)


def test_a_cls_head_given_no_cls_token_is_a_policy_error():
    with pytest.raises(PolicyError, match="CLS"):
        head("cls")(torch.randn(2, 9, 16), None, torch.randn(2, 4))


@pytest.mark.parametrize("pooling", ["attention", "mean", "cls"])
def test_two_blocks_side_by_side_are_normalised_each_on_its_own(pooling):
    torch.manual_seed(0)
    one = PolicyHead(HeadConfig(16, (2, 2), pooling=pooling))
    two = PolicyHead(HeadConfig(16, (2, 2), pooling=pooling, norm_groups=2))
    tokens, cls = torch.randn(3, 4, 16), torch.randn(3, 16)
    louder = torch.cat([tokens[..., :8], 3 * tokens[..., 8:] + 1], -1)      # the second block 3x larger, shifted
    louder_cls = torch.cat([cls[..., :8], 3 * cls[..., 8:] + 1], -1)
    torch.testing.assert_close(two.prepare(louder, louder_cls), two.prepare(tokens, cls), atol=1e-4, rtol=1e-4)  # LN eps aside
    assert not torch.allclose(one.prepare(louder, louder_cls), one.prepare(tokens, cls))     # jointly: it shifts
    halves = torch.cat([nn.functional.layer_norm(tokens[..., :8], (8,)), nn.functional.layer_norm(tokens[..., 8:], (8,))], -1)
    if pooling == "attention":
        torch.testing.assert_close(two.prepare(tokens, None), halves)
    assert one.cfg.to_dict()["norm_groups"] == 1 and two.cfg.to_dict()["norm_groups"] == 2
    assert HeadConfig.from_dict(two.cfg.to_dict()) == two.cfg and HeadConfig.from_dict(one.cfg.to_dict()) == one.cfg
    with pytest.raises(ParameterError, match="norm_groups"):
        HeadConfig(16, (2, 2), norm_groups=3)
