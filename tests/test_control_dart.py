"""benchmarks/control_success.py --action-noise: demos recorded while the executed arm commands carry Gaussian noise
and the labels stay the expert's clean actions (DART). A screen of the lever, not a library option
(control/RESULTS.md, "Noisy demos")."""
import numpy as np
import pytest

from frozenvit.control.env import MetaWorldTask


def _recording_task(monkeypatch):
    """MetaWorldTask's reset and step replaced by ones that record what they are given (no simulator)."""
    seen = []
    monkeypatch.setattr(MetaWorldTask, "reset", lambda self, config: seen.append(("reset", config)))
    monkeypatch.setattr(MetaWorldTask, "step", lambda self, action: seen.append(("step", np.array(action))))
    return object.__new__(MetaWorldTask), seen


def test_noise_moves_the_arm_commands_only_seeded_by_the_configuration_and_is_undone_after(load_benchmark,
                                                                                           monkeypatch):
    cs = load_benchmark("control_success")
    task, seen = _recording_task(monkeypatch)
    plain_reset, plain_step = MetaWorldTask.reset, MetaWorldTask.step
    expert = np.array([0.2, -0.5, 0.99, 0.7], dtype=np.float32)

    def episode(config):
        seen.clear()
        task.reset(config)
        for _ in range(200):
            task.step(expert)
        return np.stack([a for kind, a in seen if kind == "step"])

    with cs._noisy_steps(0.3):
        a, again, other = episode(7), episode(7), episode(8)
    assert np.array_equal(a, again) and not np.array_equal(a, other)      # the configuration seeds the noise
    assert np.all(a[:, 3] == np.float32(0.7))                              # the gripper's command untouched
    assert a.min() >= -1.0 and a.max() <= 1.0 and np.any(a[:, 2] == 1.0)  # clipped to the action box
    noise = a[:, :2] - expert[:2]
    assert abs(noise.mean()) < 0.05 and 0.25 < noise.std() < 0.35          # N(0, 0.3) on the arm
    assert MetaWorldTask.reset is plain_reset and MetaWorldTask.step is plain_step
    assert np.array_equal(episode(7), np.tile(expert, (200, 1)))          # after the block: the action as given


def test_no_noise_patches_nothing(load_benchmark, monkeypatch):
    cs = load_benchmark("control_success")
    _recording_task(monkeypatch)
    plain_step = MetaWorldTask.step
    with cs._noisy_steps(0.0):
        assert MetaWorldTask.step is plain_step


def test_the_benchmark_refuses_a_negative_noise(load_benchmark, monkeypatch, capsys):
    cs = load_benchmark("control_success")
    monkeypatch.setattr("sys.argv", ["control_success.py", "--action-noise", "-0.3"])
    with pytest.raises(SystemExit):
        cs.main()
    assert "--action-noise must be >= 0" in capsys.readouterr().err
