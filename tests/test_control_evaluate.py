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
    assert j.done == {} and json.loads(path.read_text()) == {"frozenvit": "control.evaluate.episodes", "run": RUN,
                                                              "chained": True}
    j.append(1000000, True, 12)
    with open(path, "a") as f:
        f.write('{"config": 1000001, "succ')                         # the kill came mid-line
    again = EpisodeJournal(path, json.loads(json.dumps(RUN)))
    assert again.done == {1000000: (True, 12)}
    again.append(1000001, False, 20)
    assert [{k: v for k, v in json.loads(ln).items() if k != "check"} for ln in path.read_text().splitlines()[1:]] == [
        dict(config=1000000, success=True, steps=12), dict(config=1000001, success=False, steps=20)]


@pytest.mark.parametrize("key,value", [("camera", "topview"), ("policy", "cd" * 32), ("max_steps", 30),
                                       ("render", dict(RUN["render"], shadows=True))])
def test_a_journal_of_another_evaluation_is_replaced_with_a_warning(tmp_path, key, value):
    path = tmp_path / "ev.episodes.jsonl"
    EpisodeJournal(path, RUN).append(1000000, True, 12)
    other = dict(RUN, **{key: value})
    with pytest.warns(UserWarning, match=f"another evaluation \\({key} differs\\); they were replaced"):
        j = EpisodeJournal(path, other)
    assert j.done == {} and not j.reopened and j.replaced == [key]
    assert path.read_text().splitlines() == [json.dumps({"frozenvit": "control.evaluate.episodes", "run": other,
                                                         "chained": True})]


def _journal_of_three(path):
    j = EpisodeJournal(path, dict(RUN, configs=[1000000, 1000001, 1000002]))
    for c, ok, steps in [(1000000, False, 20), (1000001, True, 7), (1000002, False, 20)]:
        j.append(c, ok, steps)
    return dict(RUN, configs=[1000000, 1000001, 1000002]), path.read_text().splitlines()


@pytest.mark.parametrize("edit", ["flip", "steps", "drop", "swap", "header"])
def test_a_journal_changed_by_hand_is_an_output_conflict_and_left_alone(tmp_path, edit):
    path = tmp_path / "episodes.jsonl"
    run, lines = _journal_of_three(path)
    if edit == "flip":            # a failure made a success
        lines[1] = lines[1].replace('"success": false', '"success": true')
    elif edit == "steps":
        lines[2] = lines[2].replace('"steps": 7', '"steps": 8')
    elif edit == "drop":          # an episode removed from the middle
        del lines[2]
    elif edit == "swap":
        lines[1], lines[2] = lines[2], lines[1]
    else:                         # the header rewritten to look like this run's, lines kept
        lines[0] = lines[0].replace('"max_steps": 20', '"max_steps": 20 ')
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()
    with pytest.raises(OutputConflict, match="was changed after frozenvit wrote it"):
        EpisodeJournal(path, run)
    assert path.read_bytes() == before


def test_an_unchanged_journal_reopens_and_goes_on_chaining(tmp_path):
    path = tmp_path / "episodes.jsonl"
    run, _ = _journal_of_three(path)
    with open(path, "a") as f:
        f.write('{"config": 1000003, "succ')                         # cut short by a kill
    j = EpisodeJournal(path, run)
    assert j.done == {1000000: (False, 20), 1000001: (True, 7), 1000002: (False, 20)}
    j.append(1000003, True, 3)
    assert EpisodeJournal(path, run).done[1000003] == (True, 3)


def test_a_journal_written_before_the_checks_still_reopens(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps({"frozenvit": "control.evaluate.episodes", "run": RUN}) + "\n"
                    + json.dumps(dict(config=1000000, success=True, steps=12)) + "\n")
    assert EpisodeJournal(path, RUN).done == {1000000: (True, 12)}


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
