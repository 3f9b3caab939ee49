"""The latency report and the untrained stand-in head it can time (no rendering here)."""
import numpy as np
import pytest
import torch

from frozenvit.control.latency import STAGES, LatencyReport, UntrainedHead


def test_latency_verdict_compares_p99_with_the_budget():
    rep = LatencyReport(np.arange(1.0, 101.0), {"render": np.ones(100)})
    assert rep.verdict(100.0)[0] and not rep.verdict(98.0)[0]
    assert rep.verdict(98.0)[1].startswith("FAIL")


def test_concatenated_reports_hold_every_step_and_only_shared_stages():
    a = LatencyReport(np.array([1.0, 2.0]), {s: np.ones(2) for s in STAGES}, {"task": "reach-v3"})
    b = LatencyReport(np.array([3.0]), {"render": np.ones(1)})
    both = LatencyReport.concat([a, b])
    assert both.total.tolist() == [1.0, 2.0, 3.0] and list(both.stages) == ["render"]
    assert both.meta == {"task": "reach-v3", "rounds": 2}
    with pytest.raises(ValueError, match="no reports"):
        LatencyReport.concat([])


@pytest.mark.parametrize("pooling", ["attention", "cls", "mean"])
def test_untrained_head_has_the_shape_of_a_trained_policy_on_that_backbone(pooling, make_tiny_vit):
    torch.manual_seed(0)
    bb = make_tiny_vit()
    head = UntrainedHead(bb, pooling, block=1)
    head.check_backbone(bb)
    assert head.meta_["block"] == 1 and head.uses_cls == (pooling == "cls")
    tokens, cls = torch.randn(3, 16, 48), torch.randn(3, 48)
    a = head.predict(tokens, cls, np.zeros((3, 4), dtype=np.float32))
    assert a.shape == (3, 4) and np.abs(a).max() <= 1.0
    again = UntrainedHead(bb, pooling, block=1).predict(tokens, cls, np.zeros((3, 4), dtype=np.float32))
    np.testing.assert_array_equal(a, again)                              # seeded: the same stand-in every time
