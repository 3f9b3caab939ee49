"""PatchCoreEnsemble (the default of `anomaly fit`): the mean of its members' scores and maps, each standardised by
its own held-out normals, calibrated like a PatchCore; saved and loaded whole. Checked here against members fitted
alone, on tiny inputs of both backbone kinds (Lite0 at 64 px, the embedded ViT at 48 px with tiles)."""
import json
import warnings

import numpy as np
import pytest

from frozenvit.anomaly import PatchCore, PatchCoreEnsemble, conformal_threshold, load_detector
from frozenvit.backbone import load_backbone
from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.errors import ParameterError


@pytest.fixture(scope="module")
def backbones():
    return load_backbone("efficientnet_lite0", img_size=64), load_backbone(img_size=48)


def members(backbones, **kw):
    lite0, vit = backbones
    return [PatchCore(lite0, coreset_ratio=0.5, progress=False, **kw),
            PatchCore(vit, coreset_ratio=0.5, tile=1.0, score_border=1, progress=False, **kw)]


def images(n, seed, defect=False):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = (rng.normal(128, 12, (64, 96, 3)) + 40 * np.sin(np.arange(96) / 3.0)[None, :, None]).clip(0, 255)
        if defect:
            x[20:34, 50:62] = 255
        out.append(x.astype(np.uint8))
    return out


@pytest.fixture(scope="module")
def fitted(backbones):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                           # 2 held-out normals bound the false-alarm rate
        ens = PatchCoreEnsemble(members(backbones)).fit(images(10, 0))
        alone = [m.fit(images(10, 0)) for m in members(backbones)]
    return ens, alone


def test_scores_maps_and_threshold_are_the_mean_of_members_standardised_by_their_held_out_normals(fitted):
    ens, alone = fitted
    test = images(2, 1) + images(2, 2, defect=True)
    got = ens.predict(test)
    preds = [m.predict(test) for m in alone]
    stats = [(m.calibration_scores_.mean(), m.calibration_scores_.std()) for m in alone]
    assert len(alone[0].calibration_scores_) == 2 and np.array_equal(ens.holdout_indices_, alone[1].holdout_indices_)
    want = sum((p.scores - mu) / sd for p, (mu, sd) in zip(preds, stats)) / 2
    np.testing.assert_allclose(got.scores, want, rtol=1e-4, atol=1e-5)
    for i in range(len(test)):
        want_map = sum((p.maps[i] - mu) / sd for p, (mu, sd) in zip(preds, stats)) / 2
        assert got.maps[i].shape == test[i].shape[:2]
        np.testing.assert_allclose(got.maps[i], want_map, rtol=1e-4, atol=1e-4)
    held = sum((m.calibration_scores_ - mu) / sd for m, (mu, sd) in zip(alone, stats)) / 2
    assert ens.threshold_ == pytest.approx(conformal_threshold(held, 0.01), rel=1e-5)
    assert np.array_equal(got.is_defect, got.scores > ens.threshold_)
    assert got.scores[2:].min() > got.scores[:2].max()            # the planted squares rank above the normals
    np.testing.assert_allclose(ens.decision_function(test), got.scores, rtol=1e-6)


def test_the_members_given_are_not_fitted_and_share_their_backbones(backbones):
    given = members(backbones)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ens = PatchCoreEnsemble(given).fit(images(5, 3))
    assert not any(hasattr(m, "bank_") for m in given)
    assert [m.backbone_ for m in ens.members_] == list(backbones)


def rewritten(to, cfg, members):
    """An ensemble artifact of config `cfg` and these member artifact folders, written the way frozenvit writes
    artifacts (file digests matching): what a faulty writer, not a hand edit, would leave."""
    import shutil

    from frozenvit.anomaly.ensemble import KIND
    from frozenvit.backbone.suite.artifacts import atomic_dir, write_json

    with atomic_dir(to, KIND) as tmp:
        for i, m in enumerate(members):
            shutil.copytree(m, tmp / "members" / str(i))
        write_json(tmp / "config.json", cfg)
    return to


def test_saved_ensemble_loads_with_the_same_predictions_and_a_corrupt_one_is_refused(fitted, tmp_path):
    ens, _ = fitted
    ens.save(tmp_path / "ens")
    back = load_detector(tmp_path / "ens")
    assert isinstance(back, PatchCoreEnsemble)
    test = images(3, 4, defect=True)
    a, b = ens.predict(test), back.predict(test)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5)
    np.testing.assert_allclose(a.maps[0], b.maps[0], rtol=1e-5, atol=1e-6)
    assert back.threshold_ == pytest.approx(ens.threshold_)
    cfg = json.loads((tmp_path / "ens" / "config.json").read_text())
    cfg["standardisers"][0][1] *= 2
    members = sorted((tmp_path / "ens" / "members").iterdir())
    with pytest.raises(ArtifactError, match="standardisers"):
        load_detector(rewritten(tmp_path / "corrupt", cfg, members))


def test_members_held_out_on_different_normals_are_refused(backbones, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ens = PatchCoreEnsemble(members(backbones)).fit(images(10, 0))
        ens.save(tmp_path / "ens")
        other = members(backbones, seed=5)[1].fit(images(10, 0))
    other.save(tmp_path / "other")
    cfg = json.loads((tmp_path / "ens" / "config.json").read_text())
    swapped = [tmp_path / "ens" / "members" / "0", tmp_path / "other"]   # a member split differently
    with pytest.raises(ArtifactError, match="different held-out normals"):
        load_detector(rewritten(tmp_path / "swapped", cfg, swapped))


def test_few_shot_ensemble_has_no_threshold_and_warns_once(backbones):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ens = PatchCoreEnsemble(members(backbones)).fit(images(2, 5))
    said = [str(w.message) for w in caught if "not calibrated" in str(w.message)]
    assert len(said) == 1
    out = ens.predict(images(1, 6))
    assert ens.threshold_ is None and out.is_defect is None and out.threshold is None
    for m, (loc, scale) in zip(ens.members_, ens.standardisers_):       # no held-out normals: the patch statistics
        assert (loc, scale) == pytest.approx((m.map_range_[0], m.map_range_[1] - m.map_range_[0]))
    with_threshold = PatchCoreEnsemble(members(backbones), threshold=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert with_threshold.fit(images(2, 5)).predict(images(1, 6)).is_defect is not None


def test_bad_members_are_a_parameter_error():
    with pytest.raises(ParameterError, match="non-empty list of PatchCore"):
        PatchCoreEnsemble([]).fit(images(3, 0))
    with pytest.raises(ParameterError, match="non-empty list of PatchCore"):
        PatchCoreEnsemble(["lite0"]).fit(images(3, 0))


@pytest.mark.parametrize("bad", [dict(target_fpr=0.0), dict(holdout=1.0), dict(threshold=float("nan")),
                                 dict(members="lite0")])
def test_a_bad_ensemble_hyperparameter_is_refused_by_fit_before_any_member_fits(backbones, bad):
    from frozenvit.backbone.suite.errors import InvalidParameterError

    ens = PatchCoreEnsemble(**{"members": members(backbones), **bad})
    with pytest.raises(InvalidParameterError, match=f"'{next(iter(bad))}' parameter of PatchCoreEnsemble"):
        ens.fit(images(3, 0))
    assert not any(hasattr(m, "bank_") for m in (ens.members if isinstance(ens.members, list) else []))


def test_a_bad_member_hyperparameter_is_refused_by_the_ensemble_fit(backbones):
    from frozenvit.backbone.suite.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="'coreset_ratio' parameter of PatchCore"):
        PatchCoreEnsemble([PatchCore(backbones[0], coreset_ratio=2.0)]).fit(images(3, 0))


def test_ensemble_save_returns_the_artifact_path_and_refuses_an_unfitted_one(fitted, tmp_path):
    from sklearn.exceptions import NotFittedError

    assert fitted[0].save(tmp_path / "e") == tmp_path / "e" and (tmp_path / "e" / "config.json").is_file()
    with pytest.raises(NotFittedError):
        PatchCoreEnsemble().save(tmp_path / "unfitted")
    assert not (tmp_path / "unfitted").exists()


def test_partial_fit_grows_every_member_and_recalibrates_the_ensemble_as_fit_would(backbones, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ens = PatchCoreEnsemble(members(backbones)).fit(images(10, 0))
        banks = [len(m.bank_) for m in ens.members_]
        new = images(5, 7)
        ens.partial_fit(new, names=[f"n{i}" for i in range(5)])
    assert all(len(m.bank_) > b for m, b in zip(ens.members_, banks))
    held = {tuple(m.updates_[-1]["held_out"]) for m in ens.members_}
    assert len(held) == 1 and len(next(iter(held))) == 1                    # the same new image held out by all
    stats = [(m.calibration_scores_.mean(), m.calibration_scores_.std()) for m in ens.members_]
    want = sum((m.calibration_scores_ - mu) / sd for m, (mu, sd) in zip(ens.members_, stats)) / 2
    np.testing.assert_allclose(ens.calibration_scores_, want, rtol=1e-5)
    assert len(ens.calibration_scores_) == 3 and ens.threshold_ == conformal_threshold(ens.calibration_scores_, 0.01)
    u = ens.updates_[-1]
    assert sorted(u["added_to_bank"] + u["held_out"]) == [f"n{i}" for i in range(5)]
    test = images(2, 1) + images(2, 2, defect=True)
    back = load_detector(ens.save(tmp_path / "ens"))
    assert back.updates_ == ens.updates_
    np.testing.assert_allclose(back.predict(test).scores, ens.predict(test).scores, rtol=1e-5)


def test_scoring_files_shows_one_bar_over_all_of_them_not_one_per_member_and_batch(fitted, tmp_path, capsys,
                                                                                    monkeypatch):
    from PIL import Image

    from frozenvit.anomaly.stream import iter_scored

    ens = fitted[0]
    for m in ens.members_:
        monkeypatch.setattr(m, "progress", None)                 # as a loaded model's: bars where someone sees them
    files = []
    for i, x in enumerate(images(5, 11)):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(x).save(files[-1])
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")        # a line at every update (stderr is not a terminal)
    capsys.readouterr()
    got = list(iter_scored(ens, files, overlays=False, batch_size=2))
    lines = capsys.readouterr().err.splitlines()
    assert [g.path for g in got] == [str(f) for f in files]
    assert [ln.split(" image")[0] for ln in lines] == ["predict: 2/5", "predict: 4/5", "predict: 5/5"]
    assert [m.progress for m in ens.members_] == [None, None]     # the members' own bars are back after
    monkeypatch.setattr(ens, "progress", False)
    list(iter_scored(ens, files[:1], overlays=False))
    assert capsys.readouterr().err == ""                          # progress=False: nothing at all


def test_evaluating_shows_one_bar_over_the_test_images(fitted, tmp_path, capsys, monkeypatch):
    from frozenvit.anomaly import evaluate_dataset, make_synthetic_mvtec, read_mvtec

    ens = fitted[0]
    for m in ens.members_:
        monkeypatch.setattr(m, "progress", None)
    ds = read_mvtec(make_synthetic_mvtec(tmp_path / "synth", n_train=2, n_test_good=2, n_test_defect=1,
                                         defects=("scratch", "stain"), size=(64, 96)))
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    capsys.readouterr()
    evaluate_dataset(ens, ds)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" image")[0] for ln in lines if not ln.startswith("warning")] == ["evaluate: 4/4"]
