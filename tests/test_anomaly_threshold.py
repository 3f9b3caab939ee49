"""Operating points: thresholds calibrated on stored held-out normals at a chosen false-alarm rate, and evaluate's
detection at 1 %, 5 % and 10 % on hand-computed scores."""
import math

import numpy as np
import pytest

from frozenvit.anomaly import AnomalyPrediction, evaluate_dataset, make_synthetic_mvtec, read_mvtec
from frozenvit.anomaly.evaluation import at_fpr
from frozenvit.anomaly.threshold import min_held_out, threshold_at
from frozenvit.backbone.suite.errors import ParameterError

HELD = np.arange(1, 21, dtype=np.float32)            # 20 held-out normal scores 1..20


def test_threshold_at_picks_the_conformal_order_statistic_of_the_held_out_scores():
    assert threshold_at(HELD, 0.05) == 20.0          # ceil(21 * 0.95) = 20th smallest
    assert threshold_at(HELD, 0.10) == 19.0          # ceil(21 * 0.90) = 19th smallest


def test_held_out_normals_needed_for_a_rate_are_the_least_n_with_n_plus_1_times_rate_at_least_1():
    assert [min_held_out(f) for f in (0.01, 0.05, 0.10, 0.5)] == [99, 19, 9, 1]


def test_threshold_at_refuses_too_few_held_out_normals_and_says_how_many_it_needs():
    assert threshold_at(HELD[:19], 0.05) == 19.0
    with pytest.raises(ParameterError, match="18 held-out normals .* at least 19"):
        threshold_at(HELD[:18], 0.05)


def test_threshold_at_refuses_a_model_without_held_out_normals():
    with pytest.raises(ParameterError, match="no held-out normal scores.*at least 9"):
        threshold_at(np.zeros(0, np.float32), 0.1)


class _Scripted:
    """A detector whose image scores are given in test-set order; held-out normal scores 1..20."""

    calibration_scores_ = HELD

    def __init__(self, scores):
        self.scores = list(scores)

    def decision_threshold(self):
        return 19.5

    def predict(self, images):
        s, self.scores = np.array(self.scores[:len(images)], np.float32), self.scores[len(images):]
        return AnomalyPrediction(s, [np.zeros(i.shape[:2], np.float32) for i in images], s > 19.5, 19.5,
                                 np.zeros((len(images), 1, 1), np.float32))


def test_evaluate_reports_detection_and_false_alarms_at_thresholds_calibrated_on_the_held_out_normals(tmp_path):
    ds = read_mvtec(make_synthetic_mvtec(tmp_path, n_train=1, n_test_good=4, n_test_defect=1, size=(40, 40)))
    good = iter([5.0, 19.5, 21.0, 0.0])
    bad = iter([19.5, 25.0, 30.0, 1.0])
    scores = [next(good) if s.label == 0 else next(bad) for s in ds.test]
    m, _ = evaluate_dataset(_Scripted(scores), ds)
    assert m["held_out_normals"] == 20
    # 10 %: threshold 19 -> good 19.5, 21 and defective 19.5, 25, 30 lie above it
    assert (m[at_fpr("threshold", 0.1)], m[at_fpr("false_alarm_rate", 0.1)], m[at_fpr("detection_rate", 0.1)]) \
        == (19.0, 0.5, 0.75)
    # 5 %: threshold 20 -> good 21 and defective 25, 30
    assert (m[at_fpr("threshold", 0.05)], m[at_fpr("false_alarm_rate", 0.05)], m[at_fpr("detection_rate", 0.05)]) \
        == (20.0, 0.25, 0.5)
    # 1 % needs 99 held-out normals: not reported
    assert all(math.isnan(m[at_fpr(k, 0.01)]) for k in ("threshold", "false_alarm_rate", "detection_rate"))
    # the model's own threshold (19.5) as before
    assert (m["false_alarm_rate"], m["detection_rate"]) == (0.25, 0.5)
