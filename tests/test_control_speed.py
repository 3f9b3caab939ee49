"""A new task in minutes (issue 62): the encoder and the pooling's products in bfloat16 where the CPU has it, and
a behaviour-cloning budget in optimizer steps rather than epochs. No MuJoCo: hand-written demo folders."""
import json

import pytest
import torch

from frozenvit.backbone.suite.cli import build_parser, main
from frozenvit.backbone.suite.errors import InvalidParameterError, ParameterError
from frozenvit.control import features
from frozenvit.control.defaults import DEFAULT_BC_STEPS
from frozenvit.control.features import cache_features, resolve_precision
from frozenvit.control.head import AttentionPool
from frozenvit.control.policy import PatchTokenPolicy, bc_epochs

from test_control_augment import bb, gap, write_demos  # noqa: F401  (bb: the tiny ViT fixture)
from test_control_policy import marked_token_cache, small


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return write_demos(tmp_path_factory.mktemp("speed") / "demos")


def test_a_bfloat16_cache_is_near_the_float32_one_and_kept_in_its_own_folder(demos, bb):
    f32 = cache_features(demos, bb, progress=False, views=1, precision="float32")
    b16 = cache_features(demos, bb, progress=False, views=1, precision="bfloat16")
    assert not torch.equal(f32.tokens, b16.tokens)
    assert gap(f32.tokens, b16.tokens) < 0.02 * float(f32.tokens.float().abs().mean())
    assert gap(f32.view_tokens, b16.view_tokens) < 0.02 * float(f32.view_tokens.float().abs().mean())
    names = sorted(p.name for p in (demos / "features").iterdir())
    assert len(names) == 2 and names[1] == names[0] + "_bf16"
    assert json.loads((demos / "features" / names[1] / "config.json").read_text())["precision"] == "bfloat16"


@pytest.mark.parametrize("native, resolved", [(True, "bfloat16"), (False, "float32")])
def test_auto_precision_is_bfloat16_only_where_the_cpu_multiplies_it_natively(monkeypatch, native, resolved):
    monkeypatch.setattr(features, "native_bfloat16", lambda: native)
    assert resolve_precision("auto") == resolved
    assert resolve_precision("float32") == "float32" and resolve_precision("bfloat16") == "bfloat16"


def test_an_unknown_precision_is_a_parameter_error_before_anything_is_written(demos, bb, tmp_path):
    with pytest.raises(ParameterError, match="precision"):
        cache_features(demos, bb, cache_dir=tmp_path / "x", progress=False, precision="float16")
    assert not (tmp_path / "x").exists()
    with pytest.raises(InvalidParameterError, match="precision"):
        small(precision="half").fit(marked_token_cache(M=32), progress=False)


def test_attention_pooling_on_bfloat16_tokens_is_near_float32_and_its_result_is_float32():
    torch.manual_seed(0)
    pool, tokens, pos = AttentionPool(64, 2, 4), torch.randn(8, 16, 64), 0.1 * torch.randn(16, 64)
    with torch.no_grad():
        ref, att = pool(tokens, pos, return_weights=True)
        low, att_low = pool(tokens.bfloat16(), pos, return_weights=True)
    assert low.dtype == torch.float32 and att_low.dtype == torch.float32
    assert not torch.equal(low, ref) and gap(low, ref) < 0.02 * float(ref.abs().mean())
    assert torch.allclose(att_low.sum(-1), torch.ones_like(att_low[..., 0]))


def test_a_bfloat16_fit_learns_like_a_float32_fit_and_predicts_in_float32():
    cache = marked_token_cache()
    f32 = small(epochs=30, precision="float32").fit(cache, progress=False)
    b16 = small(epochs=30, precision="bfloat16").fit(cache, progress=False)
    assert b16.history_ != f32.history_                                    # the products really were bfloat16
    assert b16.history_[-1] < 0.5 * b16.history_[0] and b16.history_[-1] < 2 * f32.history_[-1]


@pytest.mark.parametrize("frames", [100, 1427, 2743])
def test_default_epochs_make_the_step_budget_whatever_the_number_of_frames(frames):
    steps = bc_epochs(frames, 256) * -(-frames // 256)
    assert DEFAULT_BC_STEPS <= steps < DEFAULT_BC_STEPS + -(-frames // 256)


def test_fit_without_epochs_trains_the_epochs_of_the_step_budget(monkeypatch):
    from frozenvit.control import policy

    monkeypatch.setattr(policy, "DEFAULT_BC_STEPS", 7)
    cache = marked_token_cache(M=96)                                      # 2 steps of 64 per epoch
    pol = small(epochs=None).fit(cache, progress=False)
    assert len(pol.history_) == 4 and pol.epochs is None


def test_train_precision_float32_caches_and_trains_in_float32(demos, bb, tmp_path, monkeypatch):
    from frozenvit.control import encoders

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: bb)
    out = str(tmp_path / "pol")
    assert main(["control", "train", "--demos", str(demos), "--out", out, "--epochs", "1", "--heads", "3",
                 "--views", "0", "--precision", "float32", "--threads", "1"]) == 0
    pol = PatchTokenPolicy.load(out)
    assert pol.precision == "float32" and pol.meta_["precision"] == "float32"
    assert build_parser().parse_args(["control", "train", "--demos", "d", "--out", "o"]).epochs is None
