"""PatchTST and DLinear building blocks against references and invariants."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from frozenvit.forecasting import DLinear, PatchTST, PatchTSTConfig, PatchTSTNet, RevIN, patch_count, patchify
from frozenvit.forecasting.layers import ResidualAttention, moving_average


@pytest.mark.parametrize("subtract_last", [False, True])
def test_revin_normalize_then_denormalize_is_identity(subtract_last):
    torch.manual_seed(0)
    rev = RevIN(affine=True, subtract_last=subtract_last)
    with torch.no_grad():
        rev.weight.fill_(1.7), rev.bias.fill_(-0.4)
    x = torch.randn(4, 3, 50) * 30 + 100                                  # (B, C, L)
    z, st = rev.normalize(x)
    torch.testing.assert_close(rev.denormalize(z, st), x, rtol=1e-5, atol=1e-3)


def test_revin_uses_population_std_over_the_lookback():
    x = torch.tensor([[[1.0, 2.0, 3.0, 6.0]]])
    z, _ = RevIN(affine=False).normalize(x)
    ref = (x.numpy() - 3.0) / np.sqrt(np.var(x.numpy(), ddof=0))      # no absolute epsilon: scale-free
    np.testing.assert_allclose(z.numpy(), ref, rtol=1e-6)


def test_patch_count_formula_gives_42_patches_for_336_lookback():
    assert patch_count(336, 16, 8) == (336 - 16) // 8 + 2 == 42
    x = torch.arange(336.0).view(1, 1, 336)
    p = patchify(x, 16, 8)                                                # (1, 1, 42, 16)
    assert p.shape == (1, 1, 42, 16)
    # the last patch holds the last 8 values then the last value repeated `stride` times
    assert p[0, 0, -1].tolist() == list(range(328, 336)) + [335.0] * 8
    assert PatchTSTNet(PatchTSTConfig(input_size=336, h=96)).n_patches == 42


def test_permuting_channels_permutes_patchtst_outputs():
    torch.manual_seed(0)
    net = PatchTSTNet(PatchTSTConfig(input_size=64, h=12, d_model=16, n_heads=2, d_ff=32, n_layers=2)).eval()
    x = torch.randn(3, 5, 64)
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        torch.testing.assert_close(net(x[:, perm]), net(x)[:, perm])


def test_attention_without_residual_matches_torch_multihead_attention():
    torch.manual_seed(0)
    ours = ResidualAttention(16, 4).eval()
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.k.weight, ours.v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.k.bias, ours.v.bias]))
        ref.out_proj.weight.copy_(ours.out.weight), ref.out_proj.bias.copy_(ours.out.bias)
    x = torch.randn(2, 7, 16)
    torch.testing.assert_close(ours(x)[0], ref(x, x, x, need_weights=False)[0])


def test_residual_attention_adds_previous_scores():
    torch.manual_seed(0)
    att = ResidualAttention(8, 2).eval()
    x = torch.randn(1, 5, 8)
    _, s0 = att(x)
    prev = torch.randn_like(s0)
    _, s1 = att(x, prev)
    torch.testing.assert_close(s1, s0 + prev)


def test_moving_average_matches_edge_padded_convolution():
    y = np.random.default_rng(0).normal(size=40)
    padded = np.concatenate([np.full(12, y[0]), y, np.full(12, y[-1])])
    ref = np.convolve(padded, np.ones(25) / 25, mode="valid")
    out = moving_average(torch.tensor(y).view(1, 1, -1), 25)[0, 0].numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-10)


@pytest.mark.parametrize("cls", [DLinear, PatchTST])
def test_saved_model_loads_and_predicts_identically(cls, tmp_path):
    y = np.sin(np.arange(200) / 3.0) + np.arange(200) * 0.01
    kw = dict(d_model=8, n_heads=2, d_ff=16, n_layers=1) if cls is PatchTST else {}
    m = cls(h=8, input_size=32, max_epochs=2, progress=False, **kw).fit([y])
    m.save(tmp_path / "m")
    back = cls.load(tmp_path / "m")
    np.testing.assert_array_equal(back.predict([y]), m.predict([y]))
    assert back.get_params() == m.get_params()


def test_fit_rejects_series_shorter_than_lookback_plus_horizon_and_tail():
    from frozenvit.forecasting import SeriesError

    with pytest.raises(SeriesError, match="at least 56 values"):
        DLinear(h=8, input_size=40, progress=False).fit([np.ones(50)])


def test_normalized_loss_weighs_series_of_any_magnitude_alike():
    m = DLinear(h=4, input_size=16)
    x, y, pred = torch.randn(3, 2, 16), torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    crit = nn.L1Loss()
    base = m._window_loss(crit, pred, y, x)
    torch.testing.assert_close(m._window_loss(crit, pred * 1e4, y * 1e4, x * 1e4), base)
    m.normalize_loss = False
    assert float(m._window_loss(crit, pred * 1e4, y * 1e4, x * 1e4)) > 1e3 * float(base)


def test_fast_dropout_keeps_the_expectation_and_is_seeded_and_off_in_eval():
    from frozenvit.forecasting.layers import FastDropout

    drop = FastDropout(0.3)
    x = torch.ones(200_000)
    torch.manual_seed(0)
    a = drop(x)
    kept = (a > 0).float().mean().item()
    assert abs(kept - (1 - 77 / 256)) < 0.005                 # keep probability rounded to 1/256
    assert abs(a.mean().item() - 1.0) < 0.01                  # inverted scaling keeps E[x]
    torch.manual_seed(0)
    assert torch.equal(drop(x), a)                            # same seed, same mask
    assert not torch.equal(drop(x), a)                        # the next draw differs
    x.requires_grad_(True)
    drop(x).sum().backward()
    g = x.grad.unique()
    assert len(g) == 2 and g[0] == 0 and abs(g[1].item() - 256 / 179) < 1e-6   # flows through kept units only
    assert torch.equal(drop.eval()(x), x)
