"""`make bench` (benchmarks/run_all.py) gives every benchmark script run_all's arguments (`--threads N`): each script
must accept them, which `run_all.py --dry-run` checks without running anything."""
import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("run_all", Path(__file__).resolve().parents[1] / "benchmarks" / "run_all.py")
run_all = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_all)


@pytest.mark.parametrize("script", run_all.scripts(), ids=lambda p: p.name)
def test_every_script_accepts_the_arguments_run_all_gives_it(script):
    assert run_all.rejects(script, run_all.script_args(2)) is None


def _folder(tmp_path: Path) -> Path:
    good = "import argparse\ndef parser():\n    ap = argparse.ArgumentParser()\n    ap.add_argument('--threads', type=int)\n    return ap\n"
    bad = "import argparse\ndef parser():\n    return argparse.ArgumentParser()\n"
    (tmp_path / "good.py").write_text(good)
    (tmp_path / "bad.py").write_text(bad)
    (tmp_path / "plain.py").write_text("x = 1\n")
    return tmp_path


def test_a_script_that_rejects_threads_is_reported(tmp_path):
    folder = _folder(tmp_path)
    assert run_all.rejects(folder / "good.py", ["--threads", "2"]) is None
    assert run_all.rejects(folder / "bad.py", ["--threads", "2"]) == "exit 2"
    assert run_all.rejects(folder / "plain.py", ["--threads", "2"]) == "no parser() to check"


def test_dry_run_fails_when_a_script_rejects_its_arguments_and_runs_none(tmp_path, monkeypatch, capsys):
    folder = _folder(tmp_path)
    monkeypatch.setattr(run_all, "HERE", folder)
    monkeypatch.setattr("sys.argv", ["run_all.py", "--dry-run", "--threads", "2"])
    assert run_all.main() == 1
    out = capsys.readouterr().out
    assert "failed: bad.py, plain.py" in out and "===" not in out
    monkeypatch.setattr("sys.argv", ["run_all.py", "--dry-run", "--only", "good"])
    assert run_all.main() == 0
