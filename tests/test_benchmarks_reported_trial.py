"""The benchmark scripts' fixes from the reviewer's trial: argparse checks, common.py helpers, and
docs/make_results.py's one-line errors on a missing, malformed or dateless results JSON. Fast: no benchmark runs."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _module(path: Path, name: str):
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.fixture(scope="module")
def common():
    return _module(BENCH / "common.py", "benchmark_common_trial")


def script(stem: str):
    return _module(BENCH / f"{stem}.py", f"benchmark_{stem}_trial")


def test_positive_int_and_set_counts(common):
    import argparse

    assert common.positive_int("3") == 3
    for bad in ("0", "-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.positive_int(bad)
    assert common.set_counts("") == {}
    assert common.set_counts("m4_hourly=40,m3_yearly=5") == {"m4_hourly": 40, "m3_yearly": 5}
    for bad in ("m4_hourly=0", "m4_hourly", "=3"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.set_counts(bad)


def test_median_and_time_call_refuse_no_repeats(common):
    with pytest.raises(ValueError, match="repeats"):
        common.median([])
    with pytest.raises(ValueError, match="repeats"):
        common.time_call(lambda: None, repeats=0)
    assert len(common.time_call(lambda: None, repeats=2, warmup=0)) == 2


def test_resolve_data_skips_the_default_and_refuses_a_given_path(common, tmp_path, capsys):
    missing = tmp_path / "absent"
    assert common.resolve_data(None, missing) is None                 # the default absent: skipped, exit 0
    assert "skipped" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:                              # named by the user: an error
        common.resolve_data(missing, tmp_path / "default")
    assert e.value.code == 2 and str(missing) in capsys.readouterr().err
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "f.csv").write_text("x")
    assert common.resolve_data(tmp_path / "here", missing, "f.csv") == tmp_path / "here"


def test_the_record_names_versions_commit_argv_and_a_dated_when(common):
    import datetime

    v = common.versions(("numpy", "surely-not-installed-dist"))
    assert "numpy" in v and "surely-not-installed-dist" not in v
    g = common.git_state(Path("/"))                                   # not a checkout: None, no exception
    assert set(g) == {"commit", "dirty"}
    when = common.now()
    assert datetime.datetime.fromisoformat(when).utcoffset() is not None and when[4] == "-" and when[7] == "-"


@pytest.mark.parametrize("stem, argv", [
    ("backbone_throughput", ["--repeats", "0"]),
    ("anomaly_speed", ["--repeats", "0"]),
    ("deploy_speed", ["--rounds", "0"]),
    ("probe_imagenette", ["--train-per-class", "1"]),
    ("forecast_long_season", ["--max-series", "0"]),
    ("forecast_two_seasons", ["--max-series", "0"]),
    ("forecast_defaults", ["--max-series", "m4_hourly=0"]),
])
def test_counts_below_their_minimum_are_argparse_errors(stem, argv, capsys):
    with pytest.raises(SystemExit) as e:
        script(stem).parser().parse_args(argv)
    assert e.value.code == 2 and "at least" in capsys.readouterr().err


def test_probe_folds_follow_the_smallest_class():
    import numpy as np

    probe = script("probe_imagenette")
    assert probe.cv_folds(np.repeat(np.arange(3), 100)) == 5
    assert probe.cv_folds(np.repeat(np.arange(3), 3)) == 3
    with pytest.raises(SystemExit):
        probe.cv_folds(np.arange(3))


@pytest.mark.parametrize("stem", ["anomaly_feedback", "deploy_auroc"])
def test_out_option(stem, tmp_path):
    args = script(stem).parser().parse_args(["--out", str(tmp_path / "x.json")])
    assert Path(args.out) == tmp_path / "x.json"
    assert script(stem).parser().parse_args([]).out is None          # default: benchmarks/results as before


@pytest.mark.parametrize("stem, flag", [("forecast_m4_hourly", "--data"), ("probe_imagenette", "--data"),
                                        ("anomaly_real", "--data-root"), ("forecast_paper_etth2", "--csv")])
def test_data_paths_default_to_none_so_a_given_path_is_told_apart(stem, flag):
    ap = script(stem).parser()
    assert getattr(ap.parse_args([]), flag.lstrip("-").replace("-", "_")) is None


def test_help_keeps_example_commands_on_their_lines(capsys):
    for stem in ("anomaly_quality", "anomaly_speed", "backbone_throughput"):
        with pytest.raises(SystemExit):
            script(stem).parser().parse_args(["--help"])
        out = capsys.readouterr().out
        assert any(line.strip().startswith("python benchmarks/") for line in out.splitlines()), stem
    assert "not shipped" not in script("anomaly_quality").__doc__


# ------------------------------------------------------------------ docs/make_results.py

@pytest.fixture()
def make_results(tmp_path, monkeypatch):
    mr = _module(ROOT / "docs" / "make_results.py", "make_results_trial")
    monkeypatch.setattr(mr, "RESULTS", tmp_path)
    return mr


def test_make_results_names_a_missing_file_and_its_writer(make_results):
    with pytest.raises(SystemExit) as e:
        make_results.load("forecast_m4_hourly.json")
    msg = str(e.value)
    assert "forecast_m4_hourly.json is missing" in msg and "benchmarks/forecast_m4_hourly.py" in msg


def test_make_results_names_a_malformed_file(make_results, tmp_path):
    (tmp_path / "anomaly_real_kolektorsdd.json").write_text('{"when": "2026", "rows": [')
    with pytest.raises(SystemExit) as e:
        make_results.load("anomaly_real_kolektorsdd.json")
    assert "anomaly_real_kolektorsdd.json is not valid JSON" in str(e.value)
    assert "benchmarks/anomaly_real.py" in str(e.value)


def test_make_results_names_a_dateless_file_and_reads_dates_as_before(make_results, tmp_path):
    (tmp_path / "deploy_auroc_x.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit) as e:
        make_results.date(make_results.load("deploy_auroc_x.json"))
    assert "deploy_auroc_x.json has no date" in str(e.value) and "benchmarks/deploy_auroc.py" in str(e.value)
    assert make_results.date({"when": "2026-12-06T10:11:12+01:00"}) == "2026-12-06"
    assert make_results.date({"date": "2026-12-05"}) == "2026-12-05"
