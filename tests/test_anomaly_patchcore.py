"""PatchCore on a tiny random ViT: maps at original size, localisation, calibration, audit, artifacts."""
import json

import numpy as np
import pytest
import torch

from frozenvit.anomaly import PatchCore, conformal_threshold, contamination_audit, default_blocks, render_sample
from frozenvit.anomaly.features import center_tokens, fuse_blocks, local_aggregate
from frozenvit.backbone.errors import ArtifactError


# tests fit on a handful of normals on purpose; the small-holdout warning is asserted in its own test
pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def bb(make_tiny_vit):
    torch.manual_seed(0)
    return make_tiny_vit()


@pytest.fixture(scope="module")
def normals():
    return [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(12)]


@pytest.fixture(scope="module")
def fitted(bb, normals):
    return PatchCore(bb, coreset_ratio=0.25, progress=False).fit(normals)


def with_square(img, top, left, size):
    out, mask = img.copy(), np.zeros(img.shape[:2], bool)
    mask[top:top + size[0], left:left + size[1]] = True
    out[mask] = (10, 200, 240)
    return out, mask


def test_default_blocks_are_intermediate_never_the_last():
    assert default_blocks(12) == (7, 10)
    assert default_blocks(4) == (1, 2)
    assert all(max(default_blocks(d)) < d - 1 for d in range(3, 25))


def test_patch_scores_are_brute_force_nearest_bank_distances(bb, fitted, normals):
    imgs = [render_sample("weave", "hole", 0, i, size=(96, 112))[0] for i in range(3)]
    out = fitted.predict(imgs)
    g = bb.patch_grids(imgs, blocks=fitted.blocks_)
    centred = [center_tokens(g[b]) for b in fitted.blocks_]
    f = fuse_blocks([local_aggregate(x, fitted.aggregation_size()) for x in centred], fitted.reduce_dim)   # (B, D, h, w)
    q = f.permute(0, 2, 3, 1).reshape(-1, f.shape[1]).double()
    ref = torch.cdist(q, torch.from_numpy(fitted.bank_).double()).min(1).values.reshape(3, *fitted.grid_)
    assert np.allclose(out.patch_scores, ref.numpy(), atol=1e-3)


@pytest.mark.parametrize("resize", ["stretch", "pad"])
def test_maps_have_original_size_and_peak_on_the_defect(make_tiny_vit, normals, resize):
    torch.manual_seed(0)
    bb = make_tiny_vit(resize=resize)
    det = PatchCore(bb, coreset_ratio=0.5, progress=False).fit(normals)
    img, mask = with_square(render_sample("weave", None, 0, 50, size=(96, 112))[0], 8, 70, (36, 36))
    small, _ = with_square(render_sample("weave", None, 0, 51, size=(60, 150))[0], 0, 0, (1, 1))
    gray = render_sample("weave", None, 0, 52, size=(70, 50))[0].mean(axis=2).astype(np.uint8)   # (H, W)
    out = det.predict([img, small, gray])
    assert [m.shape for m in out.maps] == [(96, 112), (60, 150), (70, 50)]
    m = out.maps[0]
    assert m[mask].mean() > 1.5 * m[~mask].mean()
    y, x = np.unravel_index(m.argmax(), m.shape)
    assert 8 - 12 <= y < 44 + 12 and 70 - 12 <= x < 106 + 12    # within half a token (12 px) of the square


def test_threshold_is_the_conformal_quantile_of_held_out_normals(fitted, normals):
    assert len(fitted.holdout_indices_) == round(0.2 * len(normals))
    assert fitted.threshold_ == conformal_threshold(fitted.calibration_scores_, fitted.target_fpr)
    held = [normals[i] for i in fitted.holdout_indices_]
    assert np.allclose(fitted.decision_function(held), fitted.calibration_scores_, atol=1e-6)


def test_conformal_threshold_picks_the_right_order_statistic():
    s = np.arange(1, 200, dtype=float)                  # 199 scores: 1..199
    assert conformal_threshold(s, 0.01) == 198.0        # ceil(200 * 0.99) = 198th smallest
    assert conformal_threshold(s[:10], 0.01) == 10.0    # too few: the maximum
    assert conformal_threshold(s[:99], 0.1) == 90.0     # ceil(100 * 0.9) = 90th


def test_defects_score_above_the_calibrated_threshold_and_fresh_normals_mostly_below(bb, normals):
    det = PatchCore(bb, coreset_ratio=0.25, holdout=0.5, progress=False).fit(normals)
    good = [render_sample("weave", None, 0, 200 + i, size=(96, 112))[0] for i in range(8)]
    bad = [with_square(g, 20, 20, (40, 40))[0] for g in good]
    out = det.predict(good + bad)
    assert out.scores[8:].min() > out.scores[:8].max()
    assert out.is_defect[8:].all()
    assert out.is_defect[:8].sum() <= 1     # 6 held-out normals: false-alarm rate <= 1/7 in expectation


def test_image_score_options(bb, normals):
    imgs = [render_sample("weave", "crack", 0, i, size=(96, 112))[0] for i in range(3)]
    mx = PatchCore(bb, image_score="max", progress=False).fit(normals).predict(imgs)
    assert np.allclose(mx.scores, mx.patch_scores.reshape(3, -1).max(1))
    rw = PatchCore(bb, image_score="reweighted", progress=False).fit(normals).predict(imgs)
    assert (rw.scores < mx.scores).all() and (rw.scores > 0).all()     # a weight in (0, 1) times the max
    tk = PatchCore(bb, image_score="topk", topk_frac=0.1, progress=False).fit(normals).predict(imgs)
    top2 = np.sort(tk.patch_scores.reshape(3, -1), 1)[:, -2:].mean(1)  # 10% of 16 patches -> 2
    assert np.allclose(tk.scores, top2)


@pytest.mark.parametrize("image_score", ["max", "topk", "reweighted"])
def test_score_border_leaves_the_edge_patches_out_of_the_image_score_but_keeps_them_in_the_maps(bb, normals,
                                                                                             image_score):
    imgs = [with_square(render_sample("weave", None, 0, i, size=(96, 112))[0], 0, 0, (20, 20))[0] for i in range(3)]
    kw = dict(image_score=image_score, topk_frac=0.5, progress=False)
    full = PatchCore(bb, **kw).fit(normals).predict(imgs)
    inner = PatchCore(bb, score_border=1, **kw).fit(normals).predict(imgs)
    assert np.array_equal(inner.patch_scores, full.patch_scores)
    assert all(np.array_equal(a, b) for a, b in zip(inner.maps, full.maps))
    p = full.patch_scores                                               # (3, 4, 4): the defect in the corner patch
    ring_max = np.maximum(p[:, [0, -1], :].reshape(3, -1).max(1), p[:, :, [0, -1]].reshape(3, -1).max(1))
    core = p[:, 1:-1, 1:-1].reshape(3, -1)                              # the 2x2 patches that count
    assert (ring_max > core.max(1)).all()                               # the worst patch is on the edge...
    assert not np.isclose(inner.scores, full.scores).any()              # ...and no longer counts
    if image_score == "max":
        assert np.allclose(inner.scores, core.max(1))
    elif image_score == "topk":
        assert np.allclose(inner.scores, np.sort(core, 1)[:, -2:].mean(1))        # 50% of the 4 inner patches
    else:                                                               # the paper's weight in (0, 1) on the inner max
        assert ((inner.scores < core.max(1)) & (inner.scores > 0)).all()


def test_score_border_that_leaves_no_patch_or_is_negative_is_refused(bb, normals):
    from frozenvit.backbone.suite.errors import InvalidParameterError, ParameterError

    with pytest.raises(ParameterError, match="score_border=2 leaves no patch of the 4x4 grid to score; use at most 1"):
        PatchCore(bb, score_border=2, progress=False).fit(normals)
    with pytest.raises(InvalidParameterError, match="'score_border' parameter of PatchCore must be"):
        PatchCore(bb, score_border=-1, progress=False).fit(normals)


def test_score_border_is_saved(bb, normals, tmp_path):
    imgs = [with_square(render_sample("weave", None, 0, 0, size=(96, 112))[0], 0, 0, (20, 20))[0]]
    det = PatchCore(bb, score_border=1, progress=False).fit(normals)
    loaded = PatchCore.load(det.save(tmp_path / "m"), backbone=bb)
    assert loaded.score_border == 1 and np.array_equal(loaded.predict(imgs).scores, det.predict(imgs).scores)


def test_index_auto_is_exact_for_small_banks_and_ivf_from_ivf_min_bank_entries(bb, normals, monkeypatch):
    import faiss

    from frozenvit.anomaly import defaults
    from frozenvit.anomaly.defaults import IVF_MIN_BANK

    det = PatchCore(bb, progress=False)
    assert det.index == "auto"
    assert det.index_kind(IVF_MIN_BANK - 1) == "flat" and det.index_kind(IVF_MIN_BANK) == "ivf"
    assert PatchCore(bb, index="flat").index_kind(10 ** 9) == "flat"
    small = det.fit(normals)                                            # 10 x 16 patches -> a bank of 16
    assert type(small.index_) is faiss.IndexFlatL2
    monkeypatch.setattr(defaults, "IVF_MIN_BANK", len(small.bank_))           # as if this bank were large
    large = PatchCore(bb, progress=False).fit(normals)
    assert isinstance(large.index_, faiss.IndexIVFFlat) and np.array_equal(large.bank_, small.bank_)


def test_predict_does_not_change_the_fitted_state(fitted):
    bank, thr = fitted.bank_.copy(), fitted.threshold_
    fitted.predict([render_sample("weave", "stain", 0, 0, size=(96, 112))[0]])
    assert (fitted.bank_ == bank).all() and fitted.threshold_ == thr


def test_chunked_fit_builds_a_bank_of_the_same_size(bb, normals):
    det = PatchCore(bb, coreset_ratio=0.25, coreset_chunk=40, progress=False).fit(normals)
    assert det.bank_.shape[0] == int(np.ceil(0.25 * det.n_train_patches_))


def test_centring_removes_an_image_wide_shift_of_the_tokens(bb, normals):
    det = PatchCore(bb, progress=False).fit(normals)
    g = bb.patch_grids(normals[:2], blocks=det.blocks_)
    shifted = type(g)({b: g[b] + torch.randn(1, g[b].shape[1], 1, 1) for b in g.grids})
    assert torch.allclose(det.feature_extractor().from_grids(g), det.feature_extractor().from_grids(shifted), atol=1e-5)
    det.center = False
    assert not torch.allclose(det.feature_extractor().from_grids(g), det.feature_extractor().from_grids(shifted), atol=1e-2)


def test_audit_ranks_a_defective_training_image_first(bb, normals):
    dirty = list(normals)
    dirty[5] = with_square(normals[5], 30, 30, (40, 50))[0]
    res = contamination_audit(PatchCore(bb, progress=False), dirty, n_splits=4)
    assert res.ranking(1)[0]["image"] == "image 5" and res.flagged[5]


def test_save_load_round_trip_predicts_the_same(fitted, bb, tmp_path):
    imgs = [render_sample("weave", "scratch", 0, i, size=(96, 112))[0] for i in range(2)]
    fitted.save(tmp_path / "m")
    assert {p.name for p in (tmp_path / "m").iterdir()} == {"config.json", "bank.safetensors", "index.faiss", ".frozenvit.json"}
    loaded = PatchCore.load(tmp_path / "m", backbone=bb)
    a, b = fitted.predict(imgs), loaded.predict(imgs)
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.maps[0], b.maps[0])
    assert loaded.threshold_ == fitted.threshold_ and loaded.blocks_ == fitted.blocks_


def test_load_refuses_another_backbone_or_format_version(make_tiny_vit, fitted, tmp_path):
    fitted.save(tmp_path / "m")
    with pytest.raises(ArtifactError, match="fingerprint"):
        PatchCore.load(tmp_path / "m", backbone=make_tiny_vit(seed=1))               # same shape, other weights
    with pytest.raises(ArtifactError, match="img_size"):
        PatchCore.load(tmp_path / "m", backbone=make_tiny_vit(img_size=96))
    with pytest.raises(ArtifactError, match="pass the same backbone"):
        PatchCore.load(tmp_path / "m")                                          # random weights: not rebuildable
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["format_version"] = 99
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="format version"):
        PatchCore.load(tmp_path / "m", backbone=fitted.backbone_)


def test_failed_save_leaves_the_previous_artifact(fitted, tmp_path, monkeypatch):
    fitted.save(tmp_path / "m")
    before = (tmp_path / "m" / "config.json").read_text()
    import frozenvit.anomaly.artifact as art
    monkeypatch.setattr(art, "save_index", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        fitted.save(tmp_path / "m")
    assert (tmp_path / "m" / "config.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_too_few_held_out_normals_warn_that_the_target_rate_cannot_hold(bb, normals):
    with pytest.warns(UserWarning, match="only 2 held-out normals"):
        PatchCore(bb, target_fpr=0.01, progress=False).fit(normals)


# ---- the estimator protocol (scikit-learn) ------------------------------------------------------

def test_params_come_from_the_constructor_and_clone_gives_an_unfitted_copy(bb, fitted):
    import inspect

    from sklearn.base import clone

    assert set(fitted.get_params()) == set(inspect.signature(PatchCore).parameters)
    copy = clone(PatchCore(bb, coreset_ratio=0.25, sigma=2.0))
    assert copy.get_params()["coreset_ratio"] == 0.25 and copy.sigma == 2.0
    assert not [k for k in vars(copy) if k.endswith("_")]              # nothing learned in the constructor
    assert copy.set_params(sigma=1.0) is copy and copy.sigma == 1.0
    assert "coreset_ratio=0.25" in repr(PatchCore(coreset_ratio=0.25)) and "sigma" not in repr(PatchCore())


@pytest.mark.parametrize("bad", [dict(coreset_ratio=0.0), dict(holdout=1.0), dict(image_score="median"),
                                 dict(threshold=float("inf")), dict(reduce_dim=1.5), dict(seed=-1),
                                 dict(coreset="sampled")])
def test_the_constructor_checks_nothing_and_fit_names_the_bad_parameter(bb, normals, bad):
    from frozenvit.backbone.suite.errors import InvalidParameterError

    det = PatchCore(bb, **bad)                                          # no error yet
    with pytest.raises(InvalidParameterError, match=f"'{next(iter(bad))}' parameter of PatchCore"):
        det.fit(normals)


def test_coreset_auto_grows_the_bank_as_the_square_root_past_the_knee_and_exact_keeps_the_ratio(bb, normals,
                                                                                                monkeypatch):
    from frozenvit.anomaly import defaults
    from frozenvit.anomaly.coreset import coreset_size

    monkeypatch.setattr(defaults, "CORESET_KNEE", 50)                   # a knee the few test patches pass
    auto = PatchCore(bb, coreset_ratio=0.5, coreset="auto", progress=False).fit(normals)
    exact = PatchCore(bb, coreset_ratio=0.5, coreset="exact", progress=False).fit(normals)
    n = auto.n_train_patches_
    assert len(auto.bank_) == coreset_size(n, 0.5, knee=50) < len(exact.bank_) == coreset_size(n, 0.5)


def test_blocks_the_backbone_lacks_are_a_parameter_error(bb, normals):
    from frozenvit.backbone.suite.errors import ParameterError

    with pytest.raises(ParameterError, match=r"blocks=\(1, 9\): block 9 is out of range .*\(blocks 0\.\.3, or "
                                             r"-4\.\.-1 from the end\); or None"):
        PatchCore(bb, blocks=(1, 9), progress=False).fit(normals)


def test_save_returns_the_artifact_path_and_refuses_an_unfitted_model(fitted, tmp_path):
    from sklearn.exceptions import NotFittedError

    assert fitted.save(tmp_path / "m") == tmp_path / "m" and (tmp_path / "m" / "config.json").is_file()
    with pytest.raises(NotFittedError):
        PatchCore().save(tmp_path / "unfitted")
    assert not (tmp_path / "unfitted").exists()


def test_predict_and_decision_function_leave_every_learned_attribute_as_it_was(fitted):
    def learned():
        return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(fitted).items() if k.endswith("_")}

    before, params = learned(), fitted.get_params()
    imgs = [render_sample("weave", "stain", 0, 0, size=(96, 112))[0]]
    fitted.predict(imgs)
    fitted.decision_function(imgs)
    after = learned()
    assert before.keys() == after.keys() and fitted.get_params() == params
    for k in before:
        same = np.array_equal(before[k], after[k]) if isinstance(before[k], np.ndarray) else before[k] is after[k] \
            or before[k] == after[k]
        assert same, k


def test_an_unfitted_detector_says_so():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="not fitted"):
        PatchCore().predict([np.zeros((32, 32, 3), np.uint8)])


def rewritten(model, cfg, to):
    """A copy of the artifact `model` with config `cfg`, written the way frozenvit writes artifacts (file digests and
    tensor metadata matching): what another version of frozenvit would have written."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from frozenvit.anomaly.artifact import KIND
    from frozenvit.backbone.suite.artifacts import atomic_dir, tensor_metadata, write_json

    with atomic_dir(to, KIND) as tmp:
        save_file(load_file(str(model / "bank.safetensors")), str(tmp / "bank.safetensors"),
                  metadata=tensor_metadata(cfg))
        shutil.copy(model / "index.faiss", tmp / "index.faiss")
        write_json(tmp / "config.json", cfg)
    return to


def test_an_artifact_with_unknown_parameters_is_refused_not_crashed(fitted, bb, tmp_path):
    cfg = json.loads((fitted.save(tmp_path / "m") / "config.json").read_text())
    cfg["params"]["not_a_parameter"] = 3
    with pytest.raises(ArtifactError, match="not a complete anomaly.patchcore config.*refit"):
        PatchCore.load(rewritten(tmp_path / "m", cfg, tmp_path / "other"), backbone=bb)


@pytest.mark.parametrize("older", ["score_border", "aggregation"])
def test_an_artifact_without_a_hyperparameter_is_refused_with_refit(fitted, bb, tmp_path, older):
    cfg = json.loads((fitted.save(tmp_path / "m") / "config.json").read_text())
    del cfg["params"][older]                                            # as an older frozenvit wrote it
    with pytest.raises(ArtifactError, match=f"{older}.*refit"):
        PatchCore.load(rewritten(tmp_path / "m", cfg, tmp_path / "older"), backbone=bb)


def test_aggregation_auto_is_saved_as_auto(bb, normals, tmp_path):
    imgs = [with_square(render_sample("weave", None, 0, 0, size=(96, 112))[0], 30, 40, (20, 20))[0]]
    det = PatchCore(bb, progress=False).fit(normals)
    loaded = PatchCore.load(det.save(tmp_path / "m"), backbone=bb)
    assert loaded.aggregation == "auto" and loaded.aggregation_size() == 1
    assert np.array_equal(loaded.predict(imgs).scores, det.predict(imgs).scores)


@pytest.mark.parametrize("bad", [2, 0, "none", 1.0])
def test_aggregation_other_than_auto_or_an_odd_positive_int_is_refused(bb, normals, bad):
    from frozenvit.backbone.suite.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="aggregation"):
        PatchCore(bb, aggregation=bad, progress=False).fit(normals)
