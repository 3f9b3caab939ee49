"""The episode journal of an evaluation: appended as episodes end, reopened to resume, never mixed: another
evaluation's is replaced (no rendering)."""
import json

import pytest

from frozenvit.backbone.suite.errors import OutputConflict
from frozenvit.control.evaluate import EpisodeJournal, TaskResult

RUN = dict(policy="ab" * 32, task="reach-v3", camera="corner", image_size=64, max_steps=20,
           render=dict(shadows=False, reflections=False, offsamples=0), configs=[1000000, 1000001])


def test_a_reopened_journal_holds_the_finished_episodes_and_drops_a_line_cut_short(tmp_path):
    path = tmp_path / "ev.episodes.jsonl"
    j = EpisodeJournal(path, RUN)
    assert j.done == {} and json.loads(path.read_text()) == {"frozenvit": "control.evaluate.episodes", "run": RUN}
    j.append(1000000, True, 12)
    with open(path, "a") as f:
        f.write('{"config": 1000001, "succ')                         # the kill came mid-line
    again = EpisodeJournal(path, json.loads(json.dumps(RUN)))
    assert again.done == {1000000: (True, 12)}
    again.append(1000001, False, 20)
    assert [json.loads(ln) for ln in path.read_text().splitlines()[1:]] == [
        dict(config=1000000, success=True, steps=12), dict(config=1000001, success=False, steps=20)]


@pytest.mark.parametrize("key,value", [("configs", [1000000]), ("policy", "cd" * 32), ("max_steps", 30),
                                       ("render", dict(RUN["render"], shadows=True))])
def test_a_journal_of_another_evaluation_is_replaced_with_a_warning(tmp_path, key, value):
    path = tmp_path / "ev.episodes.jsonl"
    EpisodeJournal(path, RUN).append(1000000, True, 12)
    other = dict(RUN, **{key: value})
    with pytest.warns(UserWarning, match=f"another evaluation \\({key} differs\\); they were replaced"):
        j = EpisodeJournal(path, other)
    assert j.done == {} and not j.reopened and j.replaced == [key]
    assert path.read_text().splitlines() == [json.dumps({"frozenvit": "control.evaluate.episodes", "run": other})]


def test_a_file_that_is_no_journal_is_not_taken_over(tmp_path):
    path = tmp_path / "ev.episodes.jsonl"
    path.write_text("my own log\n")
    with pytest.raises(OutputConflict, match="not an episode journal"):
        EpisodeJournal(path, RUN)
    assert path.read_text() == "my own log\n"


def test_a_result_without_episodes_is_written_with_null_not_nan(tmp_path):
    from frozenvit.backbone.suite.artifacts import write_json

    empty = TaskResult("reach-v3", [], [], [], 20)
    write_json(tmp_path / "r.json", empty.to_dict(), kind="control.evaluate")
    text = (tmp_path / "r.json").read_text()
    assert "NaN" not in text and json.loads(text)["success_rate"] is None
