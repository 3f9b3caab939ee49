"""A robot-learning researcher's trial of `frozenvit control` (evaluations of more or fewer configurations on one
journal, checkpoints of a stopped training, demos of another size than the encoder's, collect's --image-size help,
episode times of parallel rollouts, comparing an evaluation with itself, byte-identical policies, the package
example) and how each defect it found is met now. No test renders a frame: rollouts are 3-step stand-ins and the
encoder is tiny or absent."""
import importlib
import importlib.util
import json
import struct
import time
import warnings

import numpy as np
import pytest
import torch

from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.control import policy as policy_mod
from frozenvit.control.env import config_seeds

from test_control_policy import marked_token_cache, small
from test_control_reported_defects import _FakeAgent, _FakeTask, demo_folder, run  # noqa: F401
from test_control_reported_defects import tiny_encoder  # noqa: F401
from test_rerun_reported import fake_rollouts  # noqa: F401

ev_mod = importlib.import_module("frozenvit.control.evaluate")      # the module; control.evaluate is the function
needs_metaworld = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                     reason="Meta-World is not installed")
TRAIN = ["--epochs", "3", "--views", "0", "--precision", "float32", "--hidden", "8", "--batch-size", "4"]


def _lines(path):
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def _rolled(monkeypatch) -> list[int]:
    """The configurations evaluate rolls out from now on, in order."""
    rolled, lockstep = [], ev_mod.lockstep
    monkeypatch.setattr(ev_mod, "lockstep", lambda agent, envs, queue, *a: (rolled.extend(queue),
                                                                            lockstep(agent, envs, queue, *a))[1])
    return rolled


# -- 1. more or fewer configurations on the same journal ---------------------------------------------------------------
@needs_metaworld
def test_more_and_fewer_configurations_reuse_the_journals_episodes_and_keep_the_others(tmp_path, fake_rollouts,
                                                                                      monkeypatch):
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    journal = tmp_path / "episodes.jsonl"
    kw = dict(max_steps=30, journal=journal, progress=False)
    ev_mod.evaluate(pol, None, config_seeds("heldout", 2), **kw)
    rolled = _rolled(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # no "another evaluation" warning
        grown = ev_mod.evaluate(pol, None, config_seeds("heldout", 3), **kw)
        assert rolled == config_seeds("heldout", 3)[2:]                 # only the new configuration
        assert grown.configs == config_seeds("heldout", 3) and grown.successes == [True] * 3
        assert grown.earlier_episodes == 2
        shrunk = ev_mod.evaluate(pol, None, config_seeds("heldout", 1), **kw)
    assert rolled == config_seeds("heldout", 3)[2:]                     # nothing more rolled out
    assert shrunk.configs == config_seeds("heldout", 1) and shrunk.successes == [True]
    assert shrunk.earlier_episodes == 1                                 # counts only the configurations asked
    assert [r["config"] for r in _lines(journal)[1:]] == config_seeds("heldout", 3)     # none dropped


@needs_metaworld
def test_cli_evaluate_with_fewer_configurations_keeps_the_others_episodes_and_gifs(tmp_path, capsys, fake_rollouts,
                                                                                  monkeypatch):
    pol, ev = tmp_path / "pol", tmp_path / "ev"
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(pol)
    cmd = ["control", "evaluate", "--policy", str(pol), "--max-steps", "30", "--out", str(ev)]
    assert main(cmd + ["--configs", "3", "--gifs", "3"]) == 0
    gifs = sorted(p.name for p in (ev / "gifs").iterdir())
    assert len(gifs) == 3
    capsys.readouterr()
    made = fake_rollouts.made
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(cmd + ["--configs", "1"]) == 0
    out = capsys.readouterr().out
    assert fake_rollouts.made == made                                   # every episode came from the journal
    assert "removed" not in out and "2 episodes of configurations not asked" in out, out
    assert sorted(p.name for p in (ev / "gifs").iterdir()) == gifs      # the others' GIFs stay
    res = json.loads((ev / "results.json").read_text())
    assert res["configs"] == config_seeds("heldout", 1) and res["gifs"] == [f"gifs/{gifs[0]}"]
    assert main(cmd + ["--configs", "3"]) == 0                           # and back: all three, none rolled again
    res = json.loads((ev / "results.json").read_text())
    assert fake_rollouts.made == made and res["successes"] == [True] * 3 and len(res["gifs"]) == 3


@needs_metaworld
def test_another_cap_still_replaces_the_journal_saying_what_differs_and_what_goes(tmp_path, fake_rollouts):
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    journal = tmp_path / "episodes.jsonl"
    ev_mod.evaluate(pol, None, config_seeds("heldout", 2), max_steps=30, journal=journal, progress=False)
    with pytest.warns(UserWarning) as got:
        ev_mod.evaluate(pol, None, config_seeds("heldout", 2), max_steps=60, journal=journal, progress=False)
    msg = " ".join(str(w.message) for w in got)
    assert "(max_steps differs); they were replaced" in msg and "max_steps 30 there, 60 now" in msg, msg
    assert "its 2 episodes were dropped" in msg and "its own folder" in msg, msg


def test_a_journal_whose_header_records_its_configurations_is_reused_by_another_configuration_set(tmp_path):
    run = dict(policy="ab" * 32, task="reach-v3", camera="corner", image_size=64, max_steps=20,
               render=dict(shadows=False, reflections=False, offsamples=0))
    path = tmp_path / "episodes.jsonl"
    EpisodeJournal = ev_mod.EpisodeJournal
    EpisodeJournal(path, dict(run, configs=[1000000, 1000001])).append(1000000, True, 12)   # as earlier runs wrote
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        j = EpisodeJournal(path, run)
    assert j.reopened and j.done == {1000000: (True, 12)} and j.replaced == []


# -- 2. --checkpoint-every and a checkpoint when training is stopped ------------------------------------------------
def _stop_in_epoch(monkeypatch, epoch: int, steps_per_epoch: int) -> None:
    """KeyboardInterrupt at the first step of `epoch` (1-based), as Ctrl-C mid-training."""
    calls, real = {"n": 0}, policy_mod.bc_loss

    def loss(pred, target):
        calls["n"] += 1
        if calls["n"] > (epoch - 1) * steps_per_epoch:
            raise KeyboardInterrupt
        return real(pred, target)

    monkeypatch.setattr(policy_mod, "bc_loss", loss)


def test_ctrl_c_saves_the_last_finished_epoch_and_the_resumed_policy_is_the_same_bytes(tmp_path, monkeypatch):
    cache = marked_token_cache(M=128)                                   # 2 steps an epoch
    full = small(epochs=5).fit(cache, progress=False)
    ck = tmp_path / "ck"
    real = policy_mod.bc_loss
    _stop_in_epoch(monkeypatch, 4, 2)
    with pytest.raises(KeyboardInterrupt):
        small(epochs=5).fit(cache, checkpoint_dir=ck, checkpoint_every=100, progress=False)   # no save due yet
    assert json.loads((ck / "train_state.json").read_text())["epoch"] == 3
    monkeypatch.setattr(policy_mod, "bc_loss", real)
    resumed = small(epochs=5).fit(cache, checkpoint_dir=ck, checkpoint_every=100, progress=False)
    assert resumed.history_ == full.history_
    for (k, a), b in zip(full.head_.state_dict().items(), resumed.head_.state_dict().values()):
        assert torch.equal(a, b), k
    full.save(tmp_path / "a")
    resumed.save(tmp_path / "b")
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_ctrl_c_in_the_epoch_after_a_checkpoint_writes_nothing_new(tmp_path, monkeypatch):
    cache, saved = marked_token_cache(M=128), []
    real = policy_mod.PatchTokenPolicy._checkpoint
    monkeypatch.setattr(policy_mod.PatchTokenPolicy, "_checkpoint",
                        lambda self, ck, opt, gen, epoch: (saved.append(epoch), real(self, ck, opt, gen, epoch)))
    _stop_in_epoch(monkeypatch, 3, 2)
    with pytest.raises(KeyboardInterrupt):
        small(epochs=4).fit(cache, checkpoint_dir=tmp_path / "ck", checkpoint_every=2, progress=False)
    assert saved == [2]                                                 # epoch 2's own checkpoint, once


@pytest.mark.parametrize("every", [0, -1, 1.5, True])
def test_checkpoint_every_that_is_no_positive_integer_is_a_parameter_error(tmp_path, every):
    with pytest.raises(ParameterError, match="checkpoint_every must be an integer >= 1"):
        small(epochs=1).fit(marked_token_cache(M=32), checkpoint_dir=tmp_path / "ck", checkpoint_every=every,
                            progress=False)
    assert not (tmp_path / "ck").exists()


def test_train_checkpoint_every_sets_the_interval(tmp_path, tiny_encoder, capsys, monkeypatch):
    demos, saved = demo_folder(tmp_path / "demos"), []
    real = policy_mod.PatchTokenPolicy._checkpoint
    monkeypatch.setattr(policy_mod.PatchTokenPolicy, "_checkpoint",
                        lambda self, ck, opt, gen, epoch: (saved.append(epoch), real(self, ck, opt, gen, epoch)))
    cmd = ["control", "train", "--demos", str(demos), *TRAIN]
    assert run(cmd + ["--out", str(tmp_path / "p1"), "--checkpoint", str(tmp_path / "c1")], capsys)[0] == 0
    assert saved == [3]                                                 # the default interval: the last epoch only
    saved.clear()
    assert run(cmd + ["--out", str(tmp_path / "p2"), "--checkpoint", str(tmp_path / "c2"),
                      "--checkpoint-every", "1"], capsys)[0] == 0
    assert saved == [1, 2, 3]


def test_train_checkpoint_every_without_a_checkpoint_is_a_usage_error(tmp_path, tiny_encoder, capsys):
    code, err = run(["control", "train", "--demos", str(demo_folder(tmp_path / "d")), "--out", str(tmp_path / "p"),
                     *TRAIN, "--checkpoint-every", "2"], capsys)
    assert code == 2 and "error (UsageError)" in err and "--checkpoint DIR" in err, err
    assert not (tmp_path / "p").exists()


def test_train_stopped_with_a_checkpoint_says_which_epoch_it_holds(tmp_path, tiny_encoder, capsys, monkeypatch):
    _stop_in_epoch(monkeypatch, 3, 2)                                   # 6 frames in batches of 4
    code, err = run(["control", "train", "--demos", str(demo_folder(tmp_path / "d")), "--out", str(tmp_path / "p"),
                     *TRAIN, "--checkpoint", str(tmp_path / "ck")], capsys)
    assert code == 130 and f"--checkpoint {tmp_path / 'ck'} holds epoch 2" in err and "resume" in err, err


def test_train_help_names_the_checkpoint_interval(capsys):
    with pytest.raises(SystemExit):
        main(["control", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--checkpoint-every N epochs between the checkpoints of --checkpoint" in text
    assert "(default: 10)" in text and "Ctrl-C" in text


# -- 3. demos of another size than the encoder's ----------------------------------------------------------------------
def test_train_on_demos_of_another_size_says_the_frames_are_resized_and_how_to_match(tmp_path, tiny_encoder, capsys):
    demos = demo_folder(tmp_path / "d", size=32)                        # the tiny encoder takes 64 px, 16-px patches
    assert main(["control", "train", "--demos", str(demos), "--out", str(tmp_path / "p"), *TRAIN]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "resized from 32 to 64 px" in out and "--image-size 32" in out, out


def test_train_on_demos_of_the_encoders_size_says_nothing_of_sizes(tmp_path, tiny_encoder, capsys):
    assert main(["control", "train", "--demos", str(demo_folder(tmp_path / "d", size=64)), "--out",
                 str(tmp_path / "p"), *TRAIN]) == 0
    assert "resized" not in capsys.readouterr().out


# -- 4. collect --image-size: the frames' size, any size -------------------------------------------------------------
def test_collect_image_size_help_says_it_is_the_frames_size_and_where_patches_matter(capsys):
    with pytest.raises(SystemExit):
        main(["control", "collect", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--image-size PX size")
    help_ = text[start:text.index("--max-steps", start)]
    assert "size of the rendered frames" in help_ and "`control train` resizes" in help_, help_
    assert "a multiple of the model's patch size" not in help_


# -- 5. episode times of episodes that end together --------------------------------------------------------------------
@needs_metaworld
def test_episodes_that_end_on_the_same_step_share_its_time_evenly(tmp_path, fake_rollouts, monkeypatch):
    slow = _FakeTask.step
    monkeypatch.setattr(_FakeTask, "step", lambda self, a: (time.sleep(0.04), slow(self, a))[1])
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    journal = tmp_path / "episodes.jsonl"
    start = time.monotonic()
    ev_mod.evaluate(pol, None, config_seeds("heldout", 4), max_steps=30, parallel=4, journal=journal,
                    progress=False)
    took = time.monotonic() - start
    seconds = [r["seconds"] for r in _lines(journal)[1:]]
    assert len(seconds) == 4 and len(set(seconds)) == 1, seconds      # all four ended on step 3
    assert seconds[0] >= 3 * 4 * 0.04 / 4 * 0.9 and sum(seconds) <= took + 0.01, (seconds, took)


# -- 6. one evaluation given twice --------------------------------------------------------------------------------------
@needs_metaworld
@pytest.mark.parametrize("second", ["folder", "file"])
def test_compare_of_one_evaluation_given_twice_says_so(tmp_path, capsys, fake_rollouts, second):
    pol, ev = tmp_path / "pol", tmp_path / "ev"
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(pol)
    assert main(["control", "evaluate", "--policy", str(pol), "--configs", "2", "--out", str(ev)]) == 0
    capsys.readouterr()
    other = ev if second == "folder" else ev / "results.json"
    code, err = run(["control", "compare", str(ev), str(other)], capsys)
    assert code == 2 and "error (UsageError)" in err and "same evaluation given twice" in err, err
    assert "got 1" not in err


# -- 7. the same policy is the same bytes ------------------------------------------------------------------------------
def test_saves_of_one_policy_are_byte_identical_with_sorted_metadata(tmp_path):
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    files = []
    for i in range(12):                     # safetensors' own order changes from one save to the next
        pol.save(tmp_path / f"p{i}")
        files.append((tmp_path / f"p{i}" / "model.safetensors").read_bytes())
    assert len(set(files)) == 1
    n = struct.unpack("<Q", files[0][:8])[0]
    meta = json.loads(files[0][8:8 + n])["__metadata__"]
    assert list(meta) == sorted(meta) and len(meta) == 2
    policy_mod.PatchTokenPolicy.load(tmp_path / "p0")                  # still checks against its config


def test_sorting_the_metadata_leaves_the_tensors_readable(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    from frozenvit.control.features import save_tensors

    t = {"b": torch.arange(6.0).view(2, 3), "a": torch.ones(5, dtype=torch.float16)}
    for _ in range(6):                      # each save draws its own order: every one comes out sorted
        save_tensors(t, tmp_path / "x.safetensors", metadata={"z": "1", "format": "pt", "m": "é"})
        raw = (tmp_path / "x.safetensors").read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        assert list(json.loads(raw[8:8 + n])["__metadata__"]) == ["format", "m", "z"]
    back = load_file(str(tmp_path / "x.safetensors"))
    assert torch.equal(back["b"], t["b"]) and torch.equal(back["a"], t["a"])
    with safe_open(str(tmp_path / "x.safetensors"), framework="pt") as f:
        assert f.metadata() == {"z": "1", "format": "pt", "m": "é"}


# -- 8. the package's example defines the encoder before using it -------------------------------------------------------
def test_the_package_example_defines_bb_before_using_it():
    import frozenvit.control as control

    lines = [ln.split("#")[0] for ln in control.__doc__.splitlines()]
    defined = next(i for i, ln in enumerate(lines) if ln.strip().startswith("bb ="))
    used = next(i for i, ln in enumerate(lines) if "bb)" in ln or "bb," in ln)
    assert defined < used
