"""benchmarks/forecast_auto_rules_cli.py: auto's rules re-scored on what the command itself forecast."""
import json

import numpy as np
import pandas as pd
import pytest


def test_auto_rules_on_the_clis_own_run_reproduce_its_auto(tmp_path, load_benchmark, monkeypatch):
    """forecast_auto_rules_cli.py records auto's candidates during the command's run; re-scoring the default
    rule on the recording gives the command's own auto MASE, and every rule is scored."""
    arc = load_benchmark("forecast_auto_rules_cli")
    rng = np.random.default_rng(0)
    frame = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": np.arange(n), "y": 10 + np.cumsum(rng.normal(0.2, 1, n))})
                       for i, n in enumerate([14, 40, 40, 40, 60, 60])])
    monkeypatch.setattr(arc, "SETS", {"toy": (4, 1)})
    monkeypatch.setattr(arc, "load", lambda name, rows: frame)
    assert arc.main(["--sets", "toy", "--max-epochs", "1", "--out", str(tmp_path / "r.json")]) == 0
    row = json.loads((tmp_path / "r.json").read_text())["rows"][0]
    assert row["shipped_matches"] and set(row["rules"]) == set(arc.RULES)
    assert row["rules"][arc.DEFAULT]["mase"] == pytest.approx(row["reported"]["auto"], rel=1e-9)
