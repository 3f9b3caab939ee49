"""Re-runs into an earlier output replace what that run left: an evaluate of another evaluation replaces the
earlier journal (with a warning), and a smaller `anomaly synth` leaves exactly its own images. No rendering."""
import importlib
import importlib.util
import json
from pathlib import Path

import pytest

from frozenvit.backbone.suite.cli import main

from test_control_policy import marked_token_cache, small

needs_metaworld = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                     reason="Meta-World is not installed")


# -- control evaluate: another evaluation into the same --out -----------------------------------------------------
@pytest.fixture
def fake_rollouts(monkeypatch):
    """evaluate's environments and agent replaced by 3-step stand-ins; the CLI's encoder by None."""
    from test_control_reported_defects import _FakeAgent, _FakeTask

    ev = importlib.import_module("frozenvit.control.evaluate")
    cli = importlib.import_module("frozenvit.control.cli")
    monkeypatch.setattr(ev, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(ev, "VisuomotorAgent", _FakeAgent)
    monkeypatch.setattr(_FakeTask, "succeed", True)
    monkeypatch.setattr(cli, "_encoder", lambda *a, **k: None)
    return _FakeTask


def _journal(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "episodes.jsonl").read_text().splitlines()]


@needs_metaworld
@pytest.mark.parametrize("change", ["policy", "max_steps"])
def test_evaluate_of_another_run_replaces_the_earlier_journal_and_says_so(tmp_path, capsys, fake_rollouts, change):
    from frozenvit.control.env import config_seeds

    pol, ev = tmp_path / "pol", tmp_path / "ev"
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(pol)
    cmd = ["control", "evaluate", "--policy", str(pol), "--configs", "2", "--max-steps", "30", "--out", str(ev)]
    assert main(cmd) == 0
    first = _journal(ev)
    assert [r["config"] for r in first[1:]] == config_seeds("heldout", 2)
    capsys.readouterr()

    if change == "policy":                                           # the policy retrained into the same folder
        small(epochs=1, seed=1).fit(marked_token_cache(M=32), progress=False).save(pol)
        again, n = cmd, 2
    else:
        again, n = cmd[:7] + ["60"] + cmd[8:], 2
    with pytest.warns(UserWarning, match=rf"held the episodes of another evaluation \({change} differs\); they "
                                         "were replaced"):
        assert main(again) == 0
    out = capsys.readouterr().out
    assert f"success {n}/{n}" in out
    now = _journal(ev)
    assert now[0]["run"][change] != first[0]["run"][change]
    assert [r["config"] for r in now[1:]] == config_seeds("heldout", n)          # this run's episodes only
    res = json.loads((ev / "results.json").read_text())
    assert res["configs"] == config_seeds("heldout", n) and res["successes"] == [True] * n

    made = fake_rollouts.made                                        # the same evaluation still resumes
    with _no_warning():
        assert main(again) == 0
    assert fake_rollouts.made == made and _journal(ev) == now


class _no_warning:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings(record=True)
        self.got = self._w.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._w.__exit__(*exc)
        assert not [w for w in self.got if "another evaluation" in str(w.message)]


def test_a_file_that_is_no_journal_is_still_an_output_conflict(tmp_path):
    from frozenvit.backbone.suite.errors import OutputConflict
    from frozenvit.control.evaluate import EpisodeJournal

    path = tmp_path / "episodes.jsonl"
    path.write_text('{"frozenvit": "something else"}\n')
    with pytest.raises(OutputConflict, match="not an episode journal"):
        EpisodeJournal(path, dict(policy="ab" * 32, configs=[1000000]))
    assert path.read_text() == '{"frozenvit": "something else"}\n'


# -- anomaly synth: a smaller re-run ----------------------------------------------------------------------------
SMALL = ["--height", "32", "--width", "32", "--n-test-good", "1", "--n-test-defect", "1"]


def _pngs(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and p.name != ".frozenvit.json")


def test_a_smaller_synth_rerun_leaves_exactly_its_own_images(tmp_path, capsys):
    from frozenvit.anomaly.synthetic import synthetic_files

    syn = tmp_path / "syn"
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "6", *SMALL]) == 0
    assert sorted(p.name for p in (syn / "weave" / "train" / "good").iterdir()) == [f"{i:03d}.png" for i in range(6)]
    capsys.readouterr()
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "3", *SMALL]) == 0
    assert "removed 3 files of the earlier synth run" in capsys.readouterr().out
    want = sorted(synthetic_files("weave", n_train=3, n_test_good=1, n_test_defect=1))
    assert _pngs(syn) == want
    marker = json.loads((syn / ".frozenvit.json").read_text())
    assert sorted(marker["files"]) == want                          # the removed files leave the marker too

    # fewer categories and no defect images: the earlier category's files and emptied folders go
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "6", "--category", "weave", "grain",
                 *SMALL]) == 0
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "2", "--n-test-defect", "0",
                 "--height", "32", "--width", "32", "--n-test-good", "1"]) == 0
    assert _pngs(syn) == sorted(synthetic_files("weave", n_train=2, n_test_good=1, n_test_defect=0))
    assert not (syn / "grain").exists() and not (syn / "weave" / "ground_truth").exists()


def test_a_synth_rerun_never_removes_a_users_file_and_refuses_an_edited_one(tmp_path, capsys):
    syn = tmp_path / "syn"
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "4", *SMALL]) == 0
    mine = syn / "weave" / "train" / "good" / "mine.png"
    mine.write_bytes(b"my own image")
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "2", *SMALL]) == 0
    assert mine.read_bytes() == b"my own image"                     # not listed in the marker: kept
    assert sorted(p.name for p in mine.parent.iterdir()) == ["000.png", "001.png", "mine.png"]

    edited = syn / "weave" / "train" / "good" / "001.png"
    edited.write_bytes(b"edited")
    capsys.readouterr()
    assert main(["anomaly", "synth", "--out", str(syn), "--n-train", "1", *SMALL]) == 2   # refused before any work
    assert "OutputConflict" in capsys.readouterr().err and edited.read_bytes() == b"edited"


def test_the_listed_synthetic_files_are_the_ones_written(tmp_path):
    from frozenvit.anomaly.synthetic import make_synthetic_mvtec, synthetic_files

    make_synthetic_mvtec(tmp_path, "washer", n_train=2, n_test_good=1, n_test_defect=1, size=(32, 32))
    assert _pngs(tmp_path) == sorted(synthetic_files("washer", n_train=2, n_test_good=1, n_test_defect=1))
