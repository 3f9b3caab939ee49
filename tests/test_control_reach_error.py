"""benchmarks/control_reach_error.py: the stretch of the corner camera's ray that lies in reach-v3's goal box,
and the ceiling it puts on a policy that goes straight to one point of that ray."""
import numpy as np
import pytest


def _brute_force_stretch(origin, through, lo, hi, far=10.0, n=200_001):
    d = (through - origin) / np.linalg.norm(through - origin)
    t = np.linspace(-far, far, n)
    pts = origin + t[:, None] * d
    inside = np.all((pts >= lo) & (pts <= hi), axis=1)
    return inside.sum() * (t[1] - t[0])


def test_stretch_in_box_matches_simple_cases_and_brute_force(load_benchmark):
    re = load_benchmark("control_reach_error")
    lo, hi = np.zeros(3), np.ones(3)
    assert re.stretch_in_box(np.array([-2.0, 0.5, 0.5]), np.array([0.5, 0.5, 0.5]), lo, hi) == pytest.approx(1.0)
    assert re.stretch_in_box(np.array([-1.0, -1.0, -1.0]), np.array([0.5, 0.5, 0.5]), lo, hi) == pytest.approx(3 ** 0.5)
    assert re.stretch_in_box(np.array([-1.0, 2.0, 0.5]), np.array([0.0, 2.0, 0.5]), lo, hi) == 0.0   # parallel, outside
    rng = np.random.default_rng(0)
    box_lo, box_hi = np.array([-0.1, 0.8, 0.05]), np.array([0.1, 0.9, 0.3])                      # reach-v3's goal box
    for _ in range(20):
        origin = rng.uniform(-2, 2, 3)
        through = rng.uniform(box_lo, box_hi)
        got = re.stretch_in_box(origin, through, box_lo, box_hi)
        assert got == pytest.approx(_brute_force_stretch(origin, through, box_lo, box_hi), abs=3e-4)
        assert 0 < got <= np.linalg.norm(box_hi - box_lo) + 1e-12


def test_ceiling_of_the_corner_camera_is_a_probability_from_the_goals_stretches(load_benchmark):
    pytest.importorskip("metaworld")
    pytest.importorskip("mujoco")
    re = load_benchmark("control_reach_error")
    c = re.ceiling("corner", 5)
    stretch = np.array(c["per_config_stretch_m"])
    assert stretch.shape == (5,) and np.all(stretch > 0)
    expected = np.minimum(1.0, 2 * re.RADIUS / stretch).mean()
    assert c["straight_policy_success"] == pytest.approx(expected, abs=1e-3)   # stretches are stored rounded
    lo, hi = map(np.array, c["goal_box"])
    assert np.allclose(lo, [-0.1, 0.8, 0.05]) and np.allclose(hi, [0.1, 0.9, 0.3])
    with pytest.raises(SystemExit, match="no camera named"):
        re.ceiling("nowhere", 1)
