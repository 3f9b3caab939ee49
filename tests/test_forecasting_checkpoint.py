"""Long trainings checkpoint every epoch and resume exactly (forecasting/checkpoint.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from frozenvit.forecasting import DLinear, PatchTST
from frozenvit.forecasting.checkpoint import CheckpointMismatch
from frozenvit.forecasting.training import NeuralForecaster


def _series(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(300)
    return [np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.2, t.size) + k for k in range(3)]


TINY = {
    "DLinear": lambda **kw: DLinear(**{**dict(h=12, input_size=48, max_epochs=5, patience=10, batch_size=32,
                                              windows_per_epoch=256), **kw}),
    # dropout draws from torch's generator; the one-cycle schedule changes lr and Adam's beta1 every step
    "PatchTST one-cycle": lambda **kw: PatchTST(h=12, input_size=48, d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                                dropout=0.2, lr_schedule="onecycle", pct_start=0.4, max_epochs=5,
                                                patience=10, batch_size=32, windows_per_epoch=256, **kw),
}


class _Killed(Exception):
    pass


def _without_seconds(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in history]


@pytest.mark.parametrize("name", list(TINY))
def test_a_run_stopped_after_two_epochs_and_resumed_ends_with_the_uninterrupted_weights(name, tmp_path, monkeypatch):
    make, series = TINY[name], _series()
    whole = make().fit(series)
    evaluate, calls = NeuralForecaster._evaluate, []

    def killed_in_the_third_epoch(self, *args):
        calls.append(1)
        if len(calls) == 3:                   # after epoch 3's training steps, before its checkpoint
            raise _Killed
        return evaluate(self, *args)

    monkeypatch.setattr(NeuralForecaster, "_evaluate", killed_in_the_third_epoch)
    with pytest.raises(_Killed):
        make(checkpoint_dir=str(tmp_path / "ckpt")).fit(series)
    monkeypatch.setattr(NeuralForecaster, "_evaluate", evaluate)
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text())["epoch"] == 2
    resumed = make(checkpoint_dir=str(tmp_path / "ckpt"), resume=True).fit(series)
    a, b = whole.net_.state_dict(), resumed.net_.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _without_seconds(resumed.history_) == _without_seconds(whole.history_)


def test_resuming_a_finished_run_trains_nothing_and_gives_its_weights(tmp_path):
    series = _series()
    done = TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt")).fit(series)
    again = TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt"), resume=True).fit(series)
    assert all(torch.equal(v, again.net_.state_dict()[k]) for k, v in done.net_.state_dict().items())
    assert again.history_ == done.history_          # seconds too: restored, not measured again


def test_resume_refuses_a_checkpoint_of_other_data_or_other_hyperparameters(tmp_path):
    TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt"), max_epochs=1).fit(_series())
    with pytest.raises(CheckpointMismatch, match="other data"):
        TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt"), max_epochs=1, resume=True).fit(_series(seed=1))
    with pytest.raises(CheckpointMismatch, match="hyperparameters batch_size"):
        TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt"), max_epochs=1, batch_size=16,
                        resume=True).fit(_series())



def test_resume_from_a_damaged_checkpoint_is_a_named_error(tmp_path):
    from frozenvit.backbone.errors import ArtifactError

    TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt"), max_epochs=1).fit(_series())
    weights = next((tmp_path / "ckpt").rglob("model.safetensors"))
    weights.write_bytes(weights.read_bytes() + b"x")                 # a truncated copy, a flipped byte
    with pytest.raises(ArtifactError, match="model.safetensors changed.*without --resume"):
        TINY["DLinear"](checkpoint_dir=str(tmp_path / "ckpt"), max_epochs=1, resume=True).fit(_series())


def _long_csv(path, shift: float = 0.0):
    import pandas as pd

    t = np.arange(300)
    pd.DataFrame({"unique_id": np.repeat(["a", "b"], t.size), "ds": np.tile(t, 2),
                  "y": np.concatenate([5 + np.sin(2 * np.pi * t / 24), 3 + np.cos(2 * np.pi * t / 24)]) + shift
                  }).to_csv(path, index=False)
    return path


def test_cli_backtest_checkpoints_each_training_and_resume_reproduces_the_forecasts(tmp_path):
    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    argv = ["forecast", "backtest", "--csv", str(_long_csv(tmp_path / "l.csv")), "--models", "snaive,dlinear",
            "--h", "12", "--windows", "2", "--refit-every", "1", "--max-epochs", "2", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    first = pd.read_csv(tmp_path / "out" / "forecasts.csv")
    states = sorted((tmp_path / "out" / "checkpoints" / "DLinear").glob("cutoffs-*/state.json"))
    assert len(states) == 2 and all(json.loads(s.read_text())["epoch"] == 2 for s in states)   # one per training
    assert main(argv + ["--resume"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "forecasts.csv"), first)



def test_training_logs_a_line_per_epoch_with_both_losses_when_stderr_is_a_file(capsys, monkeypatch):
    monkeypatch.delenv("FROZENVIT_PROGRESS_SECONDS", raising=False)      # the default: other progress every 10 s
    TINY["DLinear"](max_epochs=3).fit(_series())                         # pytest's stderr is not a terminal
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("DLinear:")]
    assert [line.split(" [")[0] for line in lines[:3]] == [f"DLinear: {k}/3 epoch" for k in (1, 2, 3)]
    assert all("train=" in line and "val=" in line for line in lines)


def _stopped_then_resumed(tmp_path, monkeypatch, argv: list[str]) -> None:
    """Run `argv` stopped after its first epoch's checkpoint, check a plain rerun is refused, then resume it."""
    from frozenvit.backbone.suite.cli import main
    from frozenvit.forecasting import checkpoint

    save = checkpoint.save

    def save_then_stop(*args, **kw):
        save(*args, **kw)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save", save_then_stop)
        assert main(argv) == 130
    assert main(argv) == 2                                   # refused: a stopped run is there
    assert main(argv + ["--resume"]) == 0


def test_cli_predict_resumes_a_stopped_training_to_the_forecasts_of_an_uninterrupted_one(tmp_path, monkeypatch,
                                                                                           capsys):
    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    csv = _long_csv(tmp_path / "l.csv")
    argv = ["forecast", "predict", "--csv", str(csv), "--models", "snaive,dlinear", "--h", "12", "--max-epochs", "2"]
    assert main(argv + ["--out", str(tmp_path / "whole")]) == 0
    _stopped_then_resumed(tmp_path, monkeypatch, argv + ["--out", str(tmp_path / "out")])
    assert "stopped predict" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "forecasts.csv"),
                                  pd.read_csv(tmp_path / "whole" / "forecasts.csv"))
    loaded = DLinear.load(tmp_path / "out" / "models" / "DLinear")           # the network that forecast
    last = pd.read_csv(csv).groupby("unique_id")["y"].apply(lambda y: y.to_numpy()[-loaded.input_size:])
    got = pd.read_csv(tmp_path / "out" / "forecasts.csv").pivot(index="step", columns="unique_id", values="DLinear")
    np.testing.assert_allclose(loaded.predict(np.stack(last.to_list())).T, got[last.index].to_numpy(), rtol=1e-5)
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["frozenvit"] == "forecast.predict.run" and "checkpoints/DLinear" in record["files"]


def test_cli_backtest_checkpoints_autos_networks_too(tmp_path, monkeypatch):
    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    argv = ["forecast", "backtest", "--csv", str(_long_csv(tmp_path / "l.csv")), "--models", "auto",
            "--h", "12", "--windows", "1", "--max-epochs", "2", "--input-size", "48"]
    assert main(argv + ["--out", str(tmp_path / "whole")]) == 0
    for net in ("DLinear", "PatchTST"):          # its validation training and the one that forecasts
        assert len(list((tmp_path / "whole" / "checkpoints" / net).glob("cutoffs-*/state.json"))) == 2
    _stopped_then_resumed(tmp_path, monkeypatch, argv + ["--out", str(tmp_path / "out")])
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / "forecasts.csv"),
                                  pd.read_csv(tmp_path / "whole" / "forecasts.csv"))
