"""Defects a Python-API trial of `backbone` and `anomaly` reported, each pinned by the behaviour a user relies on.

Random weights are seeded (a model fitted on them loads again); a loaded ensemble keeps its members and a loaded
model its settings; "not fitted" is NotFittedError everywhere; img_size and batch_size are checked; a (B, H, W, C)
array is B images; "embedded" names the embedded default; a Python save names no --out.
"""
import json
import shutil
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from frozenvit.anomaly import PatchCore, PatchCoreEnsemble, PatchCoreSearch, load_detector
from frozenvit.backbone import load_backbone
from frozenvit.backbone.errors import ArtifactError, OutputConflict
from frozenvit.backbone.suite.errors import ParameterError

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")

TINY = dict(depth=2, embed_dim=48, num_heads=3)


def images(n, seed=0, size=(64, 64)):
    """n textured uint8 RGB images (H, W, 3)."""
    rng = np.random.default_rng(seed)
    x = np.arange(size[1])[None, :, None]
    return [(rng.normal(128, 12, (*size, 3)) + 40 * np.sin(x / 3.0)).clip(0, 255).astype(np.uint8) for _ in range(n)]


def tiny(**kw):
    return load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=64, **{**TINY, **kw})


def weights_equal(a, b):
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# ---- 1. random weights are seeded -----------------------------------------------------------------------------

def test_random_weights_are_the_same_on_every_load_and_leave_the_callers_rng_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = tiny()
    assert torch.equal(torch.get_rng_state(), state)                  # the caller's random state is untouched
    torch.manual_seed(7)                                                # whatever the caller's seed
    b = tiny()
    assert weights_equal(a, b)
    cnn_a, cnn_b = (load_backbone("test_efficientnet", pretrained=False, img_size=64) for _ in range(2))
    assert weights_equal(cnn_a, cnn_b)
    assert not weights_equal(a, tiny(seed=1))                           # another seed, other weights


def test_a_model_fitted_on_random_weights_loads_again_with_a_new_load_of_them(tmp_path):
    det = PatchCore(tiny(), coreset_ratio=0.5, progress=False).fit(images(5))
    det.save(tmp_path / "m")
    test = images(2, seed=9)
    back = PatchCore.load(tmp_path / "m", backbone=tiny())               # another load_backbone call, same weights
    np.testing.assert_array_equal(back.predict(test).scores, det.predict(test).scores)
    with pytest.raises(ArtifactError, match=r"load_backbone\('vit_tiny_patch16_224', pretrained=False"):
        load_detector(tmp_path / "m")                                   # the advice names the call that works


# ---- 2. a loaded model keeps its settings, a loaded ensemble its members ---------------------------------------

@pytest.fixture(scope="module")
def weights(saved_test_vit, tmp_path_factory):
    """timm's tiny test_vit (random, seed 0) saved as a file, so that a saved ensemble rebuilds its backbone."""
    return saved_test_vit(tmp_path_factory.mktemp("w"))


def source(weights):
    return {"name": "test_vit", "weights": str(weights), "img_size": [64, 64]}


@pytest.fixture(scope="module")
def custom_ensemble(weights):
    bb = load_backbone("test_vit", weights=weights, img_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PatchCoreEnsemble(members=[PatchCore(bb, coreset_ratio=0.5, progress=False),
                                          PatchCore(bb, blocks=[0], coreset_ratio=0.25, score_border=1,
                                                    progress=False)],
                                 holdout=0.25, progress=False).fit(images(6))


def test_a_loaded_ensemble_keeps_its_members_and_a_clone_of_it_fits_the_same_model(custom_ensemble, weights,
                                                                                 tmp_path):
    ens = custom_ensemble
    ens.save(tmp_path / "e", backbone_sources=[source(weights)] * 2)
    back = load_detector(tmp_path / "e")
    params = back.get_params(deep=False)
    assert params["progress"] is False and params["holdout"] == 0.25
    members = params["members"]
    assert members is not None and len(members) == 2 and not any(hasattr(m, "bank_") for m in members)
    drop = ("backbone",)
    for got, fitted in zip(members, ens.members_):
        assert {k: v for k, v in got.get_params(deep=False).items() if k not in drop} == \
               {k: v for k, v in fitted.get_params(deep=False).items() if k not in drop}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = clone(back).fit(images(6))
    assert len(again.members_) == 2 and [m.blocks_ for m in again.members_] == [m.blocks_ for m in ens.members_]
    test = images(2, seed=9)
    np.testing.assert_allclose(again.predict(test).scores, ens.predict(test).scores, rtol=1e-5)


def test_an_ensemble_saved_before_members_were_recorded_still_loads_with_the_default_members(custom_ensemble,
                                                                                            weights, tmp_path):
    from frozenvit.anomaly.ensemble import KIND
    from frozenvit.backbone.suite.artifacts import atomic_dir, write_json

    custom_ensemble.save(tmp_path / "e", backbone_sources=[source(weights)] * 2)
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    del cfg["members"]
    cfg["params"].pop("progress")
    with atomic_dir(tmp_path / "old", KIND) as tmp:                     # as an earlier frozenvit wrote it
        shutil.copytree(tmp_path / "e" / "members", tmp / "members")
        write_json(tmp / "config.json", cfg)
    back = load_detector(tmp_path / "old")
    assert back.members is None and len(back.members_) == 2


@pytest.mark.parametrize("blocks", [[1], (0, 1), None])
def test_a_loaded_patchcore_has_the_fitted_ones_params(tmp_path, blocks):
    bb = tiny()
    det = PatchCore(bb, blocks=blocks, coreset_ratio=0.5, progress=False).fit(images(5))
    det.save(tmp_path / "m")
    back = PatchCore.load(tmp_path / "m", backbone=bb)
    assert back.get_params(deep=False) == det.get_params(deep=False)   # the backbone object is the one given
    assert back.progress is False


# ---- 3. not fitted is NotFittedError ----------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: PatchCore(), lambda: PatchCoreEnsemble()], ids=["patchcore", "ensemble"])
def test_decision_threshold_before_fit_is_not_fitted_error(make):
    with pytest.raises(NotFittedError):
        make().decision_threshold()


# ---- 4. img_size is checked -------------------------------------------------------------------------------------

@pytest.mark.parametrize("img_size", ["224", -16, 0, 1.5, True, (64,), (64, 0), (64, 64, 3), "64x64"])
def test_an_img_size_that_is_no_input_size_is_a_parameter_error(img_size):
    with pytest.raises(ParameterError, match="img_size"):
        load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=img_size, **TINY)


def test_an_img_size_pair_as_list_or_numpy_ints_is_taken():
    assert load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=[64, 96], **TINY).config.img_size == (64, 96)
    assert load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=np.int64(48), **TINY).config.img_size == (48, 48)


# ---- 5. and 6. patch_grids reads a (B, H, W, C) array as B images and checks batch_size -------------------------

def test_patch_grids_reads_a_bhwc_array_as_a_batch_as_preprocess_does():
    bb = tiny()
    batch = np.stack(images(2, seed=3))                                 # (2, 64, 64, 3)
    assert bb.preprocess(batch).pixels.shape[0] == 2
    g = bb.patch_grids(batch, blocks=1)
    listed = bb.patch_grids(list(batch), blocks=1)
    assert g[1].shape[0] == 2 and len(g.mappings) == 2
    assert torch.equal(g[1], listed[1])
    assert bb.patch_grids(batch[0], blocks=1)[1].shape[0] == 1           # one (H, W, C) array is one image


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True, "8"])
def test_a_batch_size_that_is_not_a_positive_int_is_a_parameter_error(batch_size):
    bb = tiny()
    with pytest.raises(ParameterError, match="batch_size"):
        bb.patch_grids(images(1), batch_size=batch_size)


# ---- 7. "embedded" names the embedded default -------------------------------------------------------------------

def test_load_backbone_takes_embedded_as_the_cli_does():
    a = load_backbone("embedded", pretrained=False, img_size=32)
    b = load_backbone(None, pretrained=False, img_size=32)
    assert a.config == b.config and weights_equal(a, b)
    assert load_backbone("embedded").config.weights_sha256 == load_backbone().config.weights_sha256


# ---- 8. a member's setting through the ensemble -----------------------------------------------------------------

def test_setting_a_members_param_through_the_ensemble_says_to_pass_new_members():
    ens = PatchCoreEnsemble(members=[PatchCore(), PatchCore()])
    with pytest.raises(ParameterError, match=r"members=\["):
        ens.set_params(members__0__coreset_ratio=0.2)
    assert ens.set_params(holdout=0.3).holdout == 0.3                   # the ensemble's own settings still set


# ---- 9. a Python save names its path, the CLI its --out ---------------------------------------------------------

def test_a_python_save_over_a_foreign_folder_names_no_cli_option(custom_ensemble, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    det = custom_ensemble.members_[0]
    search = PatchCoreSearch([("a", PatchCore(det.backbone_, coreset_ratio=0.5, progress=False))],
                             holdout=0.4, search_holdout=2).fit(images(6))
    for model in (det, custom_ensemble, search):
        with pytest.raises(OutputConflict) as e:
            model.save(foreign)
        assert "--out" not in str(e.value) and str(e.value).startswith(f"output {foreign} is a non-empty folder")
    assert (foreign / "notes.txt").read_text() == "keep"


def test_the_cli_still_names_its_out_option(tmp_path, capsys):
    from frozenvit.backbone.suite.cli import main

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    rc = main(["anomaly", "fit", "--data", str(tmp_path / "data"), "--out", str(foreign),
               "--backbone", "test_vit", "--random-weights", "--image-size", "64"])
    assert rc == 2 and f"--out {foreign}" in capsys.readouterr().err
