"""docs/forecasting.md's table of the CLI defaults over the development sets is what docs/make_results.py
writes from benchmarks/results/forecast_defaults.json: a figure typed by hand there fails --check."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "docs" / "make_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_defaults_table_in_the_guide_is_generated_from_its_json():
    mod = _script()
    guide = ROOT / "docs" / "forecasting.md"
    assert guide.read_text() == mod.with_tables(guide)
    assert "forecast_defaults.json" in guide.read_text()


def test_a_hand_edited_cell_of_the_defaults_table_is_overwritten(tmp_path, monkeypatch):
    mod = _script()
    guide = tmp_path / "forecasting.md"
    text = (ROOT / "docs" / "forecasting.md").read_text()
    start = text.index("<!-- table:forecast_defaults -->")
    edited = text[:start] + text[start:].replace("| M3 yearly |", "| M3 yearly | 0.001 |", 1)
    guide.write_text(edited)
    monkeypatch.setitem(mod.DOC_TABLES, guide, mod.DOC_TABLES[ROOT / "docs" / "forecasting.md"])
    assert mod.with_tables(guide) == text


def test_the_rivals_table_puts_their_baseline_first_and_marks_a_rule_meeting_both_bars(monkeypatch):
    mod = _script()
    rules = {"a rival": {"over_best": 1.01, "over_ets_theta": 0.99},
             "top 2 within 20 % (auto's default)": {"over_best": 1.04, "over_ets_theta": 0.82}}
    row = {"set": "etth2", "longest": 2880, "series": 7, "series_in_file": 7, "rules": rules}
    monkeypatch.setattr(mod, "load", lambda name: {"when": "2026-12-06", "rows": [row], "meeting_both": ["a rival"]})
    lines = mod.auto_rivals_table().splitlines()
    assert lines[2].startswith("| top 2 within 20 % on every window (the rivals' baseline) | 1.040 / 0.820 |")
    assert lines[3] == "| a rival (meets both) | 1.010 / 0.990 |"
