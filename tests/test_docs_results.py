"""docs/results.md is what docs/make_results.py writes from benchmarks/results/*.json: no figure typed by hand."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "make_results.py"


def test_results_page_is_up_to_date_with_the_json():
    run = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr + run.stdout


def test_check_fails_on_a_hand_edited_figure(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_results", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    edited = tmp_path / "results.md"
    edited.write_text(mod.render().replace("0.896", "0.906", 1))
    monkeypatch.setattr(mod, "OUT", edited)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    assert mod.main(["--check"]) == 1
