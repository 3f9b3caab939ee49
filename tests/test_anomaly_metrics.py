"""Metrics against references: scikit-learn, and a brute-force AUPRO on tiny hand-made cases."""
import numpy as np
import pytest
from scipy import ndimage
from sklearn.metrics import f1_score, roc_auc_score

from frozenvit.anomaly.metrics import aupro, f1_max, image_auroc, pixel_auroc, pro_curve


def brute_force_aupro(masks, maps, fpr_limit=0.3):
    """Threshold at every distinct score; regions by 8-connectivity over the whole set."""
    regions = []
    ok = []
    for m, a in zip(masks, maps):
        lab, n = ndimage.label(m, structure=np.ones((3, 3)))
        regions += [(len(ok), lab == k) for k in range(1, n + 1)]
        ok.append(~m)
    pts = {(0.0, 0.0), (1.0, 1.0)}
    for t in np.unique(np.concatenate([a.ravel() for a in maps])):
        pred = [a >= t for a in maps]
        fpr = sum((p & o).sum() for p, o in zip(pred, ok)) / sum(o.sum() for o in ok)
        pro = np.mean([(pred[i] & r).sum() / r.sum() for i, r in regions])
        pts.add((float(fpr), float(pro)))
    pts = sorted(pts)
    # integrate to fpr_limit, interpolating at the limit
    area = 0.0
    for (x0, y0), (x1, y1) in zip(pts[:-1], pts[1:]):
        if x0 >= fpr_limit:
            break
        if x1 > fpr_limit:
            y1 = y0 + (y1 - y0) * (fpr_limit - x0) / (x1 - x0)
            x1 = fpr_limit
        area += (x1 - x0) * (y0 + y1) / 2
    return area / fpr_limit


def hand_made_case(seed):
    rng = np.random.default_rng(seed)
    m1 = np.zeros((6, 7), bool)
    m1[1, 1] = m1[2, 2] = m1[3, 3] = True           # one diagonal region: 8-connected, not 4-connected
    m1[0:2, 5:7] = True                             # a second, square region
    m2 = np.zeros((5, 5), bool)                     # another image size
    m2[3:5, 0:3] = True
    m3 = np.zeros((4, 4), bool)                     # a defect-free image
    masks = [m1, m2, m3]
    maps = [np.round(rng.random(m.shape) + 0.6 * m, 1) for m in masks]   # rounding creates ties
    return masks, maps


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_aupro_matches_brute_force_with_ties_and_mixed_sizes(seed):
    masks, maps = hand_made_case(seed)
    assert aupro(masks, maps) == pytest.approx(brute_force_aupro(masks, maps), abs=1e-9)


@pytest.mark.parametrize("limit", [0.05, 0.3, 1.0])
def test_aupro_matches_brute_force_at_other_fpr_limits(limit):
    masks, maps = hand_made_case(7)
    assert aupro(masks, maps, limit) == pytest.approx(brute_force_aupro(masks, maps, limit), abs=1e-9)


def test_aupro_weighs_regions_equally_not_by_size():
    m = np.zeros((10, 10), bool)
    m[0:5, 0:5] = True            # big region (25 px), found
    m[8, 8] = True                # tiny region (1 px), missed
    a = np.zeros((10, 10))
    a[0:5, 0:5] = 1.0
    fpr, pro = pro_curve([m], [a])
    # at the threshold that takes exactly the big square: no false positives, half the regions
    assert fpr[1] == 0 and pro[1] == pytest.approx(0.5)


def test_aupro_is_one_for_a_perfect_map_and_small_for_an_inverted_one():
    masks, _ = hand_made_case(0)
    perfect = [m.astype(float) for m in masks]
    assert aupro(masks, perfect) == pytest.approx(1.0)
    assert aupro(masks, [1 - p for p in perfect]) < 0.05


def test_pixel_auroc_equals_sklearn_on_pooled_pixels():
    masks, maps = hand_made_case(3)
    y = np.concatenate([m.ravel() for m in masks])
    s = np.concatenate([a.ravel() for a in maps])
    assert pixel_auroc(masks, maps) == pytest.approx(roc_auc_score(y, s))


def test_image_auroc_is_nan_with_one_class_only():
    with pytest.warns(UserWarning, match="only good"):
        assert np.isnan(image_auroc([0, 0, 0], [0.1, 0.2, 0.3]))


def test_f1_max_equals_best_threshold_by_brute_force():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 40)
    s = rng.random(40) + 0.5 * y
    best = max(f1_score(y, s >= t) for t in np.unique(s))
    assert f1_max(y, s) == pytest.approx(best)


def test_pixel_metrics_reject_map_of_other_size():
    with pytest.raises(ValueError, match="shape"):
        pixel_auroc([np.zeros((4, 4), bool)], [np.zeros((4, 5))])
