"""docs/results.md and the README's headline lines are what docs/make_results.py writes from
benchmarks/results/*.json: no figure is typed by hand."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "docs" / "make_results.py"


def _script(tmp_path: Path, monkeypatch):
    """The script as a module, writing to copies of docs/results.md and README.md under tmp_path."""
    spec = importlib.util.spec_from_file_location("make_results", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, path in (("OUT", tmp_path / "results.md"), ("README", tmp_path / "README.md")):
        path.write_text(getattr(mod, name).read_text())
        monkeypatch.setattr(mod, name, path)
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    return mod


def test_results_page_and_readme_headlines_are_up_to_date_with_the_json():
    run = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr + run.stdout


def test_check_fails_on_a_hand_edited_figure_in_the_results_page(tmp_path, monkeypatch):
    mod = _script(tmp_path, monkeypatch)
    assert "0.896" in mod.OUT.read_text()
    mod.OUT.write_text(mod.OUT.read_text().replace("0.896", "0.906", 1))
    assert mod.main(["--check"]) == 1


def test_check_fails_on_a_hand_edited_readme_headline(tmp_path, monkeypatch):
    mod = _script(tmp_path, monkeypatch)
    assert "**1.027**" in mod.README.read_text()
    mod.README.write_text(mod.README.read_text().replace("**1.027**", "**1.020**", 1))
    assert mod.main(["--check"]) == 1
