"""benchmarks/control_expert_margin.py: where each demonstrator leaves the scored distance at a demo's end."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import control_expert_margin as cem  # noqa: E402


def test_summary_counts_only_episodes_that_succeeded_and_reports_centimetres():
    eps = [dict(task="t", demonstrator="d", first_success=10, end_distance=0.02, success_at_end=True),
           dict(task="t", demonstrator="d", first_success=30, end_distance=0.06, success_at_end=False),
           dict(task="t", demonstrator="d", first_success=None, end_distance=0.5, success_at_end=False)]
    s = cem.summarise(eps)
    assert s["succeeded"] == "2/3" and s["first_median"] == 20 and s["first_max"] == 30
    assert np.isclose(s["end_cm_min"], 2.0) and np.isclose(s["end_cm_max"], 6.0) and s["success_at_end"] == 1


def test_reach_demos_end_where_each_demonstrator_puts_the_fingertips():
    pytest.importorskip("metaworld")
    ours = cem.run_expert("reach-v3", "default", 1, hold_steps=20, max_steps=200)
    theirs = cem.run_expert("reach-v3", "metaworld", 1, hold_steps=20, max_steps=200)
    assert (ours["demonstrator"], theirs["demonstrator"]) == ("fingertips", "metaworld")
    assert ours["steps"] == ours["first_success"] + 20 and ours["success_at_end"]
    assert ours["end_distance"] < 0.025 < 0.035 < theirs["end_distance"] < 0.05      # reach's radius is 5 cm
