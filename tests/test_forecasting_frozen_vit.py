"""FrozenViTForecaster: the borrowed ViT blocks stay frozen, the trained parts are what the docs say,
and a saved forecaster holds only what it trained while it checks the backbone it is loaded with."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from frozenvit.forecasting import FrozenViTForecaster, trainable_parameters
from frozenvit.forecasting.frozen_vit import BackboneMismatch, NotAViT, frozen_sha256

H, L = 8, 48


def _series(n: int = 400, seed: int = 0) -> np.ndarray:
    t = np.arange(n)
    return 5 + np.sin(2 * np.pi * t / 24) + 0.01 * t + np.random.default_rng(seed).normal(0, 0.1, n)


def _model(bb, **kw) -> FrozenViTForecaster:
    base = dict(h=H, backbone=bb, n_blocks=2, input_size=L, max_epochs=2, windows_per_epoch=64, batch_size=16,
                progress=False)
    return FrozenViTForecaster(**{**base, **kw})


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_frozen_weights_are_bit_identical_after_training_and_the_norms_learn(tiny_vit):
    before = _snapshot(tiny_vit.model)
    m = _model(tiny_vit, train_norm=True).fit([_series()])
    net = m.net_
    trained_norm = 0
    for name, t in net.blocks.named_parameters():
        orig = before[f"blocks.{name}"]
        if ".norm" in name:                      # norm1 / norm2: LayerNorm affine pairs, trained here
            trained_norm += not torch.equal(t, orig)
        else:
            assert torch.equal(t, orig), name
    assert trained_norm > 0                       # train_norm did train them
    assert all(torch.equal(v, before[k]) for k, v in tiny_vit.model.state_dict().items())   # the caller's backbone


def test_without_train_norm_every_borrowed_tensor_is_bit_identical(tiny_vit):
    before = _snapshot(tiny_vit.model)
    net = _model(tiny_vit, train_norm=False).fit([_series()]).net_
    for name, t in [*net.blocks.state_dict().items()]:
        assert torch.equal(t, before[f"blocks.{name}"]), name
    for name, t in net.norm.state_dict().items():
        assert torch.equal(t, before[f"norm.{name}"]), name
    assert not any(p.requires_grad for p in [*net.blocks.parameters(), *net.norm.parameters()])


@pytest.mark.parametrize("train_norm,train_pos", [(True, True), (False, False), (True, False)])
def test_trainable_parameters_are_what_the_docstring_says(tiny_vit, train_norm, train_pos):
    m = _model(tiny_vit, train_norm=train_norm, train_pos=train_pos)
    net = m._build()
    D, N, P, k = tiny_vit.config.embed_dim, net.n_patches, 16, 2
    want = (P + 1) * D + (D * N + 1) * H + 2 + N * D * train_pos + (4 * D * k + 2 * D) * train_norm
    assert trainable_parameters(net) == want


def test_gradients_flow_through_the_frozen_blocks_to_the_embedding(tiny_vit):
    net = _model(tiny_vit)._build().train()
    net(torch.randn(3, 2, L)).pow(2).mean().backward()
    assert net.embed.weight.grad is not None and net.embed.weight.grad.abs().sum() > 0
    assert all(p.grad is None for n, p in net.blocks.named_parameters() if ".norm" not in n)


def test_train_mode_leaves_the_borrowed_blocks_in_eval_mode(tiny_vit):
    net = _model(tiny_vit)._build().train()
    assert net.training and net.embed.training
    assert not any(mod.training for mod in [*net.blocks.modules(), *net.norm.modules()])


def test_saved_forecaster_holds_no_frozen_weights_and_forecasts_alike(tiny_vit, tmp_path):
    from safetensors import safe_open

    m = _model(tiny_vit).fit([_series()])
    m.save(tmp_path / "vit")
    with safe_open(str(tmp_path / "vit" / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert keys == set(m.net_.state_dict())
    assert not any(k.startswith("blocks.") and ".norm" not in k for k in keys)       # qkv, mlp: not stored
    assert sum(1 for k in keys if k.startswith("blocks.")) == 2 * 2 * 2                # 2 blocks x 2 norms x (w, b)
    rec = json.loads((tmp_path / "vit" / "config.json").read_text())["params"]["backbone"]
    assert rec["frozen_sha256"] == frozen_sha256(tiny_vit, 2) and rec["name"] == tiny_vit.name
    back = FrozenViTForecaster.load(tmp_path / "vit", backbone=tiny_vit)
    ctx = np.stack([_series(seed=1)[-L:], _series(seed=2)[-L:]])
    np.testing.assert_array_equal(back.predict(ctx), m.predict(ctx))


def test_loading_with_another_backbone_is_refused(tiny_vit, make_tiny_vit, tmp_path):
    _model(tiny_vit).fit([_series()]).save(tmp_path / "vit")
    other = make_tiny_vit(seed=1)                               # same architecture, other weights
    with pytest.raises(BackboneMismatch, match="other frozen weights"):
        FrozenViTForecaster.load(tmp_path / "vit", backbone=other)
    with pytest.raises(BackboneMismatch, match="backbone="):    # not the embedded default: cannot be rebuilt
        FrozenViTForecaster.load(tmp_path / "vit")


def test_the_embedded_default_is_loaded_lazily_and_rebuilt_on_load(tmp_path):
    m = FrozenViTForecaster(h=H, n_blocks=1, input_size=L, max_epochs=1, windows_per_epoch=32, progress=False)
    assert m.backbone is None and not hasattr(m, "_default")
    m.fit([_series()])
    assert m.net_.embed.out_features == 192                     # the default ViT-Tiny's width
    m.save(tmp_path / "vit")
    back = FrozenViTForecaster.load(tmp_path / "vit")           # rebuilds load_backbone() and checks it
    ctx = _series(seed=3)[None, -L:]
    np.testing.assert_array_equal(back.predict(ctx), m.predict(ctx))


def test_a_stopped_and_resumed_training_ends_with_the_uninterrupted_weights(tiny_vit, tmp_path, monkeypatch):
    from frozenvit.forecasting.training import NeuralForecaster

    y = [_series()]
    whole = _model(tiny_vit, max_epochs=3, dropout=0.2).fit(y)
    evaluate = NeuralForecaster._evaluate

    def killed_in_the_second_epoch(self, net, *args):
        if len(self.history_) == 1:
            raise KeyboardInterrupt
        return evaluate(self, net, *args)

    monkeypatch.setattr(NeuralForecaster, "_evaluate", killed_in_the_second_epoch)
    with pytest.raises(KeyboardInterrupt):
        _model(tiny_vit, max_epochs=3, dropout=0.2, checkpoint_dir=str(tmp_path / "ck")).fit(y)
    monkeypatch.setattr(NeuralForecaster, "_evaluate", evaluate)
    resumed = _model(tiny_vit, max_epochs=3, dropout=0.2, checkpoint_dir=str(tmp_path / "ck"), resume=True).fit(y)
    assert len(resumed.history_) == 3
    a, b = whole.net_.state_dict(), resumed.net_.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resuming_on_another_backbone_is_refused(tiny_vit, make_tiny_vit, tmp_path):
    from frozenvit.forecasting.checkpoint import CheckpointMismatch

    _model(tiny_vit, max_epochs=1, checkpoint_dir=str(tmp_path / "ck")).fit([_series()])
    with pytest.raises(CheckpointMismatch, match="backbone"):
        _model(make_tiny_vit(seed=2), max_epochs=1, checkpoint_dir=str(tmp_path / "ck"), resume=True).fit([_series()])


def test_a_convnet_or_too_many_blocks_is_a_named_error(tiny_vit, make_tiny_convnet):
    with pytest.raises(NotAViT, match="not a ConvNet"):
        _model(make_tiny_convnet())._build()
    with pytest.raises(NotAViT, match="n_blocks <= 4"):
        _model(tiny_vit, n_blocks=5)._build()


def test_paper_mode_builds_it_with_the_patchtst_training_schedule():
    from frozenvit.forecasting.paper import paper_config

    m = paper_config("vit", 96, "ETTh2")
    assert isinstance(m, FrozenViTForecaster) and m.backbone is None
    assert (m.lr, m.loss, m.normalize_loss, m.revin_affine, m.batch_size) == (1e-4, "mse", False, False, 128)


@pytest.mark.parametrize("blocks", [None, 2])
def test_cli_backtest_trains_vit_and_saves_a_forecaster_that_loads_alone(tmp_path, blocks):
    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    t = np.arange(160)
    pd.DataFrame({"unique_id": "a", "ds": t, "y": _series(160)}).to_csv(tmp_path / "l.csv", index=False)
    argv = ["forecast", "backtest", "--csv", str(tmp_path / "l.csv"), "--models", "snaive,vit", "--h", str(H),
            "--windows", "1", "--input-size", str(L), "--max-epochs", "1", "--out", str(tmp_path / "out")]
    assert main(argv + ([] if blocks is None else ["--depth", str(blocks)])) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "FrozenViT" in summary["models"]
    back = FrozenViTForecaster.load(tmp_path / "out" / "models" / "FrozenViT")
    assert back.predict(_series(160)[None, -L:]).shape == (1, H)
    assert back.n_blocks == (blocks or 6) and back.backbone_record()["default"]      # the embedded ViT either way


def test_the_benchmarks_ten_percent_keeps_the_last_tenth_of_the_training_windows(load_benchmark):
    bench = load_benchmark("forecast_frozen_vit")
    y, h, tail = np.arange(1000.0), 48, 48
    kept = bench.last_fraction(y, 0.1, h, tail)
    n_all = len(y) - bench.L - h - tail + 1                     # training windows of the whole series
    assert len(kept) - bench.L - h - tail + 1 == round(0.1 * n_all)
    assert kept[-1] == y[-1]                                    # the most recent values
    assert len(bench.last_fraction(y[: bench.L + h + tail + 3], 0.1, h, tail)) == bench.L + h + tail   # one at least
