"""Long jobs are visible in a log file: plain lines with count, rate and ETA when stderr is not a terminal."""
from frozenvit.backbone.suite.progress import _LogLines, progress_bar


def test_redirected_stderr_gets_log_lines_with_count_rate_and_eta(capsys, monkeypatch):
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    bar = progress_bar(range(4), desc="bc attention", unit="epoch")        # pytest's stderr is not a terminal
    assert isinstance(bar, _LogLines)
    for i in bar:
        bar.set_postfix(loss=0.5 / (i + 1))
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4                                                  # one per epoch
    assert lines[0].startswith("bc attention: 1/4 epoch [") and "epoch/s" in lines[0]
    assert "<" in lines[0]                                                  # an ETA while work is left
    assert lines[-1].startswith("bc attention: 4/4 epoch") and "loss=0.125" in lines[-1]


def test_lines_are_throttled_and_a_quick_job_prints_nothing(capsys, monkeypatch):
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "3600")
    with progress_bar(total=1000, desc="quick") as bar:
        for _ in range(1000):
            bar.update(1)
    assert capsys.readouterr().err == ""


def test_disabled_progress_prints_nothing(capsys, monkeypatch):
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    assert list(progress_bar(range(3), desc="x", disable=True)) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_the_last_line_is_printed_once(capsys, monkeypatch):
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    with progress_bar(total=3, desc="x", unit="epoch") as bar:
        for _ in range(3):
            bar.update(1)
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(" [")[0] for line in lines] == ["x: 1/3 epoch", "x: 2/3 epoch", "x: 3/3 epoch"]


def test_closing_shows_the_state_the_last_line_did_not(capsys, monkeypatch):
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    bar = progress_bar(total=3, desc="x", unit="epoch")
    bar.update(1)
    bar.set_postfix(loss=0.5)                                               # shown by no line yet
    bar.close()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("x: 1/3 epoch") and "loss=0.5" in lines[-1]


def test_a_statistical_model_counts_its_fits_not_its_series(capsys, monkeypatch):
    """A few long series refitted at many cutoffs (ETTh2's seven) show progress after every fit, not after
    a whole series' fits."""
    import numpy as np

    from frozenvit.forecasting import SeasonalNaive

    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    series = [np.arange(40.0), np.arange(50.0)]
    cutoffs = np.array([[30, 32, 34], [40, 42, 44]])
    preds = SeasonalNaive(4).forecast_cutoffs(series, cutoffs, 2, progress=None)[0]
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(" [")[0] for line in lines] == [f"SeasonalNaive: {k}/6 fit" for k in range(1, 7)]
    assert np.array_equal(preds[1, 2], [40.0, 41.0])                         # y[44 - 4: 44 - 2]
