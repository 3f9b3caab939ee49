"""Paper mode tells the truth: each ETT file gets its own scripts' hyperparameters and its own published
rows, an unknown file none, and `--dataset` overrides the file name (forecasting/paper.py)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from frozenvit.forecasting.paper import ETT, ETTM_BORDERS, PaperScore, paper_config, recognise, scores_table


def _score(model: str, h: int) -> PaperScore:
    return PaperScore(model, h, mse=0.5, mae=0.5, n_test_windows=1, epochs=1, best_epoch=0, seconds_per_epoch=1.0,
                      seconds_total=1.0)


# (dataset, model, horizon) -> the published (MSE, MAE): PatchTST/42 and DLinear, Table 3 of the PatchTST paper
PUBLISHED = {("ETTh1", "PatchTST", 96): (0.375, 0.399), ("ETTh1", "DLinear", 720): (0.472, 0.490),
             ("ETTh2", "PatchTST", 336): (0.331, 0.380), ("ETTh2", "DLinear", 96): (0.289, 0.353),
             ("ETTm1", "PatchTST", 720): (0.420, 0.424), ("ETTm1", "DLinear", 192): (0.335, 0.365),
             ("ETTm2", "PatchTST", 96): (0.165, 0.255), ("ETTm2", "DLinear", 336): (0.281, 0.342)}


@pytest.mark.parametrize("dataset,model,h", list(PUBLISHED))
def test_each_dataset_is_compared_with_its_own_published_row(dataset, model, h):
    row = scores_table([_score(model, h)], dataset)[0]
    assert (row["paper_mse"], row["paper_mae"]) == PUBLISHED[dataset, model, h]
    assert row["mse_vs_paper"] == pytest.approx(0.5 / PUBLISHED[dataset, model, h][0] - 1)


def test_an_unknown_dataset_gets_no_reference_at_all():
    rows = scores_table([_score("PatchTST", 96), _score("DLinear", 336)], None)
    assert not any(k.startswith(("paper_", "mse_vs", "all_windows")) for row in rows for k in row)


def test_only_etth2_carries_the_all_windows_rerun():
    assert "all_windows_mse" in scores_table([_score("PatchTST", 336)], "ETTh2")[0]
    assert "all_windows_mse" not in scores_table([_score("PatchTST", 336)], "ETTh1")[0]


@pytest.mark.parametrize("name,expected", [("ETTh1.csv", "ETTh1"), ("/data/ett/ETTm2.csv", "ETTm2"),
                                           ("copy_of_etth2_2024.csv", "ETTh2"), ("electricity.csv", None),
                                           ("ETTh1_vs_ETTh2.csv", None)])
def test_the_dataset_is_recognised_from_the_file_name_or_not_at_all(name, expected):
    assert recognise(name) == expected


@pytest.mark.parametrize("dataset,h,lr,batch", [("ETTh1", 96, 0.005, 32), ("ETTh2", 720, 0.05, 32),
                                                ("ETTm1", 336, 1e-4, 8), ("ETTm2", 192, 0.001, 32),
                                                ("ETTm2", 336, 0.01, 32)])
def test_dlinear_takes_the_learning_rate_and_batch_of_its_dataset_script(dataset, h, lr, batch):
    p = paper_config("dlinear", h, dataset).get_params()
    assert (p["lr"], p["batch_size"], p["max_epochs"], p["patience"], p["revin"]) == (lr, batch, 10, 3, False)


def test_patchtst_takes_the_ettm_scripts_shape_and_one_cycle_schedule_and_the_etth_ones_elsewhere():
    m = paper_config("patchtst", 96, "ETTm1").get_params()
    assert (m["d_model"], m["n_heads"], m["d_ff"], m["dropout"], m["patience"], m["lr_schedule"], m["pct_start"]) == \
        (128, 16, 256, 0.2, 20, "onecycle", 0.4)
    h = paper_config("patchtst", 96, "ETTh1").get_params()
    assert (h["d_model"], h["n_heads"], h["d_ff"], h["dropout"], h["patience"], h["lr_schedule"]) == \
        (16, 4, 128, 0.3, 100, "step")
    assert (h["lr"], h["batch_size"], h["max_epochs"], h["loss"], h["normalize_loss"]) == (1e-4, 128, 100, "mse", False)


def test_ettm_uses_the_minute_level_split():
    assert ETT["ETTm1"].borders == ETTM_BORDERS == (12 * 30 * 24 * 4, 16 * 30 * 24 * 4, 20 * 30 * 24 * 4)
    assert ETT["ETTh1"].borders == (12 * 30 * 24, 16 * 30 * 24, 20 * 30 * 24)


@pytest.fixture(scope="module")
def ett_rows(tmp_path_factory):
    """14400 hourly rows of two channels: the paper protocol's ETTh length, nothing more."""
    t = np.arange(14400)
    rng = np.random.default_rng(0)
    return pd.DataFrame({"date": pd.date_range("2016-07-01", periods=t.size, freq="h").astype(str),
                         "HUFL": np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.1, t.size),
                         "OT": np.cos(2 * np.pi * t / 24) + rng.normal(0, 0.1, t.size)})


def _paper(tmp_path, frame, name, *extra):
    from frozenvit.backbone.suite.cli import main

    frame.to_csv(tmp_path / name, index=False)
    out = tmp_path / "scores.json"
    assert main(["forecast", "paper", "--csv", str(tmp_path / name), "--models", "dlinear", "--horizons", "96",
                 "--max-epochs", "1", "--threads", "1", "--out", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_cli_applies_the_recognised_datasets_hyperparameters_and_prints_its_reference(tmp_path, ett_rows, capsys):
    got = _paper(tmp_path, ett_rows, "ETTh1.csv")
    assert (got["dataset"], got["dataset_from"]) == ("ETTh1", "the file name")
    assert got["hyperparameters"]["DLinear H=96"]["lr"] == 0.005
    assert got["results"][0]["paper_mse"] == 0.375
    assert "dataset ETTh1 (from the file name)" in capsys.readouterr().out


def test_cli_dataset_flag_overrides_the_file_name(tmp_path, ett_rows):
    got = _paper(tmp_path, ett_rows, "ETTh1.csv", "--dataset", "ETTh2")
    assert (got["dataset"], got["dataset_from"]) == ("ETTh2", "--dataset")
    assert got["hyperparameters"]["DLinear H=96"]["lr"] == 0.05
    assert got["results"][0]["paper_mse"] == 0.289


def test_cli_prints_no_reference_for_a_file_it_does_not_recognise_and_says_so(tmp_path, ett_rows, capsys):
    got = _paper(tmp_path, ett_rows, "substation.csv")
    assert got["dataset"] is None and "paper_mse" not in got["results"][0]
    printed = capsys.readouterr().out
    assert "dataset not recognised" in printed and "no published reference" in printed
    assert "paper_mse" not in printed


def test_cli_resume_of_a_finished_run_gives_its_scores_without_training_again(tmp_path, ett_rows):
    first = _paper(tmp_path, ett_rows, "ETTh2.csv")
    assert (tmp_path / "scores.json.ckpt" / "DLinear_H96" / "state.json").is_file()
    again = _paper(tmp_path, ett_rows, "ETTh2.csv", "--resume")
    keep = ("mse", "mae", "epochs", "best_epoch", "seconds_per_epoch")
    assert [{k: r[k] for k in keep} for r in again["results"]] == [{k: r[k] for k in keep} for r in first["results"]]


def test_cli_resume_needs_the_out_of_the_stopped_run(tmp_path, ett_rows, capsys):
    from frozenvit.backbone.suite.cli import main

    ett_rows.to_csv(tmp_path / "ETTh2.csv", index=False)
    assert main(["forecast", "paper", "--csv", str(tmp_path / "ETTh2.csv"), "--resume"]) == 2
    assert "UsageError" in capsys.readouterr().err and not (tmp_path / "ETTh2.csv.ckpt").exists()
