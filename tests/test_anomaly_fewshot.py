"""Few-shot PatchCore: fitting on 1-16 normals, the uncalibrated threshold, explicit thresholds, augmentation."""
import json
import warnings

import numpy as np
import pytest
import torch

from frozenvit.anomaly import DatasetError, PatchCore, render_sample

pytestmark = pytest.mark.filterwarnings("ignore:only .* held-out normals:UserWarning")


@pytest.fixture(scope="module")
def normals():
    return [render_sample("weave", None, 0, i, size=(96, 112))[0] for i in range(6)]


@pytest.fixture(scope="module")
def one_shot(tiny_vit, normals):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PatchCore(tiny_vit, progress=False).fit(normals[:1])


def defective(i):
    img = render_sample("weave", None, 0, 100 + i, size=(96, 112))[0].copy()
    img[30:60, 40:70] = (10, 200, 240)
    return img


def test_no_normal_image_is_a_dataset_error(tiny_vit):
    with pytest.raises(DatasetError, match="no normal images"):
        PatchCore(tiny_vit, progress=False).fit([])


def test_one_normal_builds_the_bank_and_warns_that_the_threshold_is_not_calibrated(tiny_vit, normals):
    with pytest.warns(UserWarning, match="threshold is not calibrated.*is_defect None.*threshold="):
        det = PatchCore(tiny_vit, progress=False).fit(normals[:1])
    assert det.threshold_ is None and det.n_train_images_ == 1
    assert len(det.holdout_indices_) == 0 and len(det.calibration_scores_) == 0


def test_an_uncalibrated_model_predicts_scores_and_maps_but_no_decisions(one_shot, normals):
    out = one_shot.predict([normals[3], defective(0)])
    assert out.is_defect is None and out.threshold is None
    assert [m.shape for m in out.maps] == [(96, 112), (96, 112)]
    assert out.scores[1] > out.scores[0]
    lo, hi = one_shot.map_range_
    assert 0 < lo < hi                                                  # an overlay scale all the same


@pytest.mark.parametrize("n,holdout,held", [(1, 0.2, 0), (2, 0.2, 0), (3, 0.2, 1), (6, 0.2, 1), (8, 0.2, 2),
                                            (2, 0.5, 1), (6, 0.0, 0)])
def test_images_are_held_out_only_when_holdout_times_n_rounds_to_one_or_more(tiny_vit, normals, n, holdout, held):
    imgs = (normals * 2)[:n]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCore(tiny_vit, holdout=holdout, progress=False).fit(imgs)
    assert len(det.holdout_indices_) == held and det.n_train_images_ == n - held
    assert (det.threshold_ is None) == (held == 0)


def test_an_explicit_threshold_decides_without_calibration_and_without_a_warning(tiny_vit, normals):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        det = PatchCore(tiny_vit, threshold=0.2, progress=False).fit(normals[:1])
    out = det.predict([normals[3], defective(0)])
    assert det.threshold_ == 0.2 and out.threshold == 0.2
    assert np.array_equal(out.is_defect, out.scores > 0.2)


def test_a_threshold_set_on_a_fitted_model_takes_effect_at_predict(one_shot, normals):
    det = one_shot.set_params(threshold=None)
    scores = det.decision_function([normals[3], defective(0)])
    t = float(scores.mean())
    out = det.set_params(threshold=t).predict([normals[3], defective(0)])
    det.set_params(threshold=None)
    assert out.is_defect.tolist() == [False, True] and out.threshold == t


def test_an_uncalibrated_model_saves_and_loads(one_shot, tiny_vit, tmp_path):
    one_shot.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["threshold"] is None
    loaded = PatchCore.load(tmp_path / "m", backbone=tiny_vit)
    a, b = one_shot.predict([defective(1)]), loaded.predict([defective(1)])
    assert loaded.threshold_ is None and b.is_defect is None
    assert np.array_equal(a.scores, b.scores) and np.array_equal(a.maps[0], b.maps[0])
    assert loaded.map_range_ == one_shot.map_range_


@pytest.mark.parametrize("augment,copies", [(None, 1), ("flips", 4), ("rot90", 4), ("all", 8)])
def test_augmentation_multiplies_the_patches_the_bank_is_chosen_from(tiny_vit, normals, augment, copies):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCore(tiny_vit, augment=augment, coreset_ratio=0.5, progress=False).fit(normals[:2])
    assert det.n_train_patches_ == 2 * 16 * copies                     # 2 images of 4 x 4 tokens
    assert det.bank_.shape[0] == int(np.ceil(0.5 * det.n_train_patches_))


def test_a_flipped_normal_is_in_a_flip_augmented_bank(tiny_vit, normals):
    flipped = np.ascontiguousarray(normals[0][:, ::-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = PatchCore(tiny_vit, coreset_ratio=1.0, progress=False).fit(normals[:1])
        aug = PatchCore(tiny_vit, coreset_ratio=1.0, augment="flips", progress=False).fit(normals[:1])
    assert aug.predict([flipped]).patch_scores.max() < 1e-3            # every patch of the flip is in the bank
    assert plain.predict([flipped]).patch_scores.max() > 0.05


def test_tiles_and_augmentation_combine(tiny_vit, normals):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = PatchCore(tiny_vit, tile=1.0, augment="rot90", coreset_ratio=0.5, progress=False).fit(normals[:1])
    assert det.n_train_patches_ == 4 * 4 * 16                          # 2 x 2 tiles, 4 turns, 4 x 4 tokens


def test_the_report_overlay_figure_handles_an_uncalibrated_model(one_shot, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from frozenvit.anomaly import make_synthetic_mvtec, read_mvtec
    from frozenvit.anomaly.demo_section import overlay_figure

    make_synthetic_mvtec(tmp_path, "weave", n_train=1, n_test_good=1, n_test_defect=1, size=(96, 112), seed=0)
    fig = overlay_figure(one_shot, read_mvtec(tmp_path / "weave"), n=3)
    assert any("uncalibrated" in ax.get_title() for ax in fig.axes)
