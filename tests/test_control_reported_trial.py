"""A new user's trial of `frozenvit control` (checkpoints, evaluation folders, latency, demos, sizes, the Python API)
and how each defect it found is met now. No test renders a frame or needs the network: the encoder is a tiny random
ViT, and rollouts are 3-step stand-ins."""
import importlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import OutputConflict, ParameterError
from frozenvit.control import demos as demos_mod
from frozenvit.control.env import HELDOUT_OFFSET, config_seeds

from test_control_policy import marked_token_cache, small
from test_control_reported_defects import _FakeAgent, _FakeTask, _NoTask, demo_folder, episode, run  # noqa: F401
from test_control_reported_defects import tiny_encoder  # noqa: F401
from test_rerun_reported import fake_rollouts  # noqa: F401

evaluate_mod = importlib.import_module("frozenvit.control.evaluate")  # the module; control.evaluate is the function
features_mod = importlib.import_module("frozenvit.control.features")
needs_metaworld = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                     reason="Meta-World is not installed")
TRAIN = ["--epochs", "2", "--views", "0", "--precision", "float32", "--hidden", "8"]


def _train(demos: Path, out: Path, *extra: str) -> list[str]:
    return ["control", "train", "--demos", str(demos), "--out", str(out), *TRAIN, *extra]


def _no_encoding(monkeypatch) -> None:
    monkeypatch.setattr(features_mod, "cache_features", lambda *a, **k: pytest.fail("encoded the demos"))


# -- 1. a checkpoint resumed on other features ------------------------------------------------------------------------
def test_resuming_a_checkpoint_with_other_blocks_is_refused_naming_blocks_before_encoding(tmp_path, tiny_encoder,
                                                                                         capsys, monkeypatch):
    demos, ck = demo_folder(tmp_path / "demos"), tmp_path / "ck"
    assert run(_train(demos, tmp_path / "p3", "--blocks", "3", "--checkpoint", str(ck)), capsys)[0] == 0
    _no_encoding(monkeypatch)
    code, err = run(_train(demos, tmp_path / "p1", "--blocks", "1", "--checkpoint", str(ck)), capsys)
    assert code == 2 and "error (ArtifactError)" in err and "--blocks: block 3 (now 1)" in err, err
    assert "delete" in err and not (tmp_path / "p1").exists()


@pytest.mark.parametrize("change", ["expert", "frames"])
def test_resuming_a_checkpoint_on_other_demos_of_the_same_frame_count_is_refused(tmp_path, tiny_encoder, capsys,
                                                                                 monkeypatch, change):
    a, b, ck = demo_folder(tmp_path / "a"), demo_folder(tmp_path / "b"), tmp_path / "ck"
    if change == "expert":
        m = json.loads((b / "manifest.json").read_text())
        (b / "manifest.json").write_text(json.dumps(dict(m, expert="metaworld")))
    else:                                                              # the same configurations, other frames
        ep = episode(config=0)
        demos_mod._write_episode(b / "episodes" / "cfg_0000000.npz",
                                 demos_mod.Episode(255 - ep.frames, ep.proprio, ep.actions, 0, ep.rand_vec))
    assert run(_train(a, tmp_path / "pa", "--checkpoint", str(ck)), capsys)[0] == 0
    _no_encoding(monkeypatch)
    code, err = run(_train(b, tmp_path / "pb", "--checkpoint", str(ck)), capsys)
    assert code == 2 and "error (ArtifactError)" in err and "--demos:" in err, err
    assert ("expert fingertips (now metaworld)" if change == "expert" else "content digest") in err, err
    assert not (tmp_path / "pb").exists()


def test_fit_refuses_a_checkpoint_of_another_input_size(tmp_path):
    cache = marked_token_cache(M=32)
    small(epochs=1).fit(cache, checkpoint_dir=tmp_path / "ck", progress=False)
    other = marked_token_cache(M=32)
    other.meta = dict(other.meta, img_size=[48, 48])
    with pytest.raises(ArtifactError, match=r"--image-size: img_size \[64, 64\] \(now \[48, 48\]\)"):
        small(epochs=1).fit(other, checkpoint_dir=tmp_path / "ck", progress=False)


def test_a_damaged_checkpoint_says_to_delete_it_or_choose_another(tmp_path, tiny_encoder, capsys, monkeypatch):
    demos, ck = demo_folder(tmp_path / "demos"), tmp_path / "ck"
    assert run(_train(demos, tmp_path / "p", "--checkpoint", str(ck)), capsys)[0] == 0
    state = ck / "train_state.safetensors"
    state.write_bytes(state.read_bytes()[:len(state.read_bytes()) // 2])
    _no_encoding(monkeypatch)
    code, err = run(_train(demos, tmp_path / "p", "--checkpoint", str(ck)), capsys)
    assert code == 2 and "error (ArtifactError)" in err and "train_state.safetensors" in err, err
    assert "delete that folder" in err and "another --checkpoint" in err and "write the artifact again" not in err


# -- 2. a finished policy as --checkpoint, --out and --checkpoint the same ---------------------------------------------
def test_a_finished_policy_given_as_checkpoint_is_refused_and_left_as_it_was(tmp_path, tiny_encoder, capsys,
                                                                             monkeypatch, tree_snapshot):
    demos, victim = demo_folder(tmp_path / "demos"), tmp_path / "victim"
    assert run(_train(demos, victim), capsys)[0] == 0
    before = tree_snapshot(victim)
    from frozenvit.control import encoders

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: pytest.fail("went to work"))
    code, err = run(_train(demos, tmp_path / "x", "--checkpoint", str(victim)), capsys)
    assert code == 2 and "error (OutputConflict)" in err and "finished policy, not a training checkpoint" in err, err
    assert tree_snapshot(victim) == before and not (tmp_path / "x").exists()


def test_fit_refuses_a_finished_policy_as_its_checkpoint_dir(tmp_path):
    cache = marked_token_cache(M=32)
    small(epochs=1).fit(cache, progress=False).save(tmp_path / "pol")
    before = (tmp_path / "pol" / "model.safetensors").read_bytes()
    with pytest.raises(OutputConflict, match="finished policy"):
        small(epochs=1, seed=3).fit(cache, checkpoint_dir=tmp_path / "pol", progress=False)
    assert (tmp_path / "pol" / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize("where", ["same", "inside"])
def test_out_and_checkpoint_in_one_folder_are_refused_before_any_work(tmp_path, tiny_encoder, capsys, monkeypatch,
                                                                      where):
    demos = demo_folder(tmp_path / "demos")
    from frozenvit.control import encoders

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: pytest.fail("went to work"))
    ck = tmp_path / "x" if where == "same" else tmp_path / "x" / "ck"
    code, err = run(_train(demos, tmp_path / "x", "--checkpoint", str(ck)), capsys)
    assert code == 2 and "error (OutputConflict)" in err and "--checkpoint" in err, err
    assert not (tmp_path / "x").exists()


# -- 3. GIFs of another evaluation are never taken for this one's -----------------------------------------------------
class _KilledTask(_FakeTask):
    """A 3-step stand-in that is interrupted (Ctrl-C) on its first step of configuration `kill_at`."""
    kill_at: int | None = None

    def reset(self, config):
        self.config = config
        return super().reset(config)

    def step(self, action):
        if self.config == self.kill_at:
            raise KeyboardInterrupt
        return super().step(action)


@needs_metaworld
def test_a_gif_of_a_replaced_evaluation_is_rolled_out_again_after_a_resumed_run(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", _KilledTask)
    monkeypatch.setattr(evaluate_mod, "VisuomotorAgent", _FakeAgent)
    configs = config_seeds("heldout", 2)
    kw = dict(journal=tmp_path / "episodes.jsonl", gif_dir=tmp_path / "gifs", progress=False, parallel=1)
    first = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    evaluate_mod.evaluate(first, None, configs, gif_episodes=1, max_steps=40, **kw)
    gif = tmp_path / "gifs" / f"reach-v3_cfg{configs[0]}.gif"
    gif.write_bytes(b"the first evaluation's rollout")                    # tell its bytes apart

    monkeypatch.setattr(_KilledTask, "kill_at", configs[1])              # another evaluation, stopped midway
    with pytest.warns(UserWarning, match="another evaluation"), pytest.raises(KeyboardInterrupt):
        evaluate_mod.evaluate(first, None, configs, max_steps=100, **kw)
    monkeypatch.setattr(_KilledTask, "kill_at", None)
    res = evaluate_mod.evaluate(first, None, configs, gif_episodes=1, max_steps=100, **kw)
    assert res.gifs == [str(gif)] and gif.read_bytes() != b"the first evaluation's rollout"
    lines = [json.loads(ln) for ln in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert {"gif": configs[0], "file": gif.name} in [{k: r.get(k) for k in ("gif", "file")} for r in lines]


@needs_metaworld
def test_a_gif_line_edited_in_the_journal_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(evaluate_mod, "VisuomotorAgent", _FakeAgent)
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    kw = dict(journal=tmp_path / "episodes.jsonl", gif_dir=tmp_path / "gifs", progress=False)
    evaluate_mod.evaluate(pol, None, config_seeds("heldout", 2), gif_episodes=1, **kw)
    path = tmp_path / "episodes.jsonl"
    path.write_text(path.read_text().replace('"gif": 1000000', '"gif": 1000001'))
    with pytest.raises(OutputConflict, match="changed after frozenvit wrote it"):
        evaluate_mod.evaluate(pol, None, config_seeds("heldout", 2), gif_episodes=1, **kw)


# -- 4. a replaced evaluation's results.json goes before any rollout ----------------------------------------------------
@needs_metaworld
def test_an_interrupted_evaluation_of_other_settings_leaves_no_results_of_the_earlier_one(tmp_path, capsys,
                                                                                         fake_rollouts, monkeypatch):
    pol, ev = tmp_path / "pol", tmp_path / "ev"
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(pol)
    cmd = ["control", "evaluate", "--policy", str(pol), "--configs", "2", "--max-steps", "30", "--out", str(ev)]
    assert main(cmd + ["--gifs", "1"]) == 0 and (ev / "results.json").is_file() and (ev / "gifs").is_dir()
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", _KilledTask)
    monkeypatch.setattr(_KilledTask, "kill_at", config_seeds("heldout", 1)[0])
    with pytest.warns(UserWarning, match="another evaluation"):
        assert main(cmd[:7] + ["60"] + cmd[8:]) == 130                 # another cap; Ctrl-C at its first step
    assert not (ev / "results.json").exists() and not (ev / "gifs").exists()


# -- 5. latency times the loop the policy runs --------------------------------------------------------------------------
def test_latency_of_a_policy_renders_at_its_demos_frame_size_and_says_so(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from frozenvit.control import cli, env, latency
    from frozenvit.control.errors import TaskError

    made = {}

    class Task(_NoTask):
        def __init__(self, name, **k):
            made.update(k)

    def stop(*a, **k):
        raise TaskError("stopped before timing")

    monkeypatch.setattr(cli, "_encoder", lambda args, pol=None: SimpleNamespace(config=SimpleNamespace(img_size=[64])))
    monkeypatch.setattr(env, "MetaWorldTask", Task)
    monkeypatch.setattr(latency, "compare_runtimes", stop)
    cache = marked_token_cache(M=32)
    cache.meta = dict(cache.meta, demo_image_size=128)                 # demos at 128 px, the encoder at 64
    small(epochs=1).fit(cache, progress=False).save(tmp_path / "pol")
    assert run(["control", "latency", "--policy", str(tmp_path / "pol"), "--steps", "1"], capsys)[0] == 2
    assert made["image_size"] == 128, made


def test_a_latency_report_records_the_frame_size_it_timed(monkeypatch):
    import frozenvit.control.latency as latency

    class Env:
        name, image_size, camera = "reach-v3", 128, "corner"

    def rollout(agent, env, config, timer, max_steps=None):
        for _ in range(max_steps):
            for stage in ("total", "render"):
                timer.ms.setdefault(stage, []).append(1.0)

    monkeypatch.setattr(latency, "rollout_timed", rollout)
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    rep = latency.measure_latency(type("Agent", (), {"policy": pol})(), Env(), steps=2, warmup=0)
    assert rep.summary()["frame_size"] == 128


# -- 6. the cure for a damaged episode file -----------------------------------------------------------------------------
def test_an_unreadable_episode_names_the_cure_that_works(tmp_path):
    path = tmp_path / "cfg_0000000.npz"
    demos_mod._write_episode(path, episode())
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(Exception) as e:
        demos_mod.read_episode(path)
    msg = str(e.value)
    assert "not its manifest entry" in msg and "run the same `control collect` again" in msg, msg
    assert "delete it and its manifest entry" not in msg


def test_collect_over_a_damaged_episode_says_to_delete_it_and_then_records_it_again(tmp_path, monkeypatch):
    recorded: list = []
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)
    monkeypatch.setattr(demos_mod, "record_episode",
                        lambda env, config, **k: recorded.append(config) or episode(config=config))
    d = tmp_path / "d"
    demos_mod.collect_demos("reach-v3", d, 3, image_size=64, progress=False)
    bad = d / "episodes" / "cfg_0000001.npz"
    bad.write_bytes(bad.read_bytes()[:300])
    recorded.clear()
    with pytest.raises(OutputConflict) as e:
        demos_mod.collect_demos("reach-v3", d, 3, image_size=64, progress=False)
    msg = str(e.value)
    assert str(bad) in msg and "delete it" in msg and "run the same `control collect` again" in msg, msg
    assert recorded == []
    bad.unlink()                                                        # the cure, as the message says
    demos_mod.collect_demos("reach-v3", d, 3, image_size=64, progress=False)
    assert recorded == [1]
    assert sorted(e["config"] for e in demos_mod.load_manifest(d)["episodes"]) == [0, 1, 2]
    assert len(list(demos_mod.iter_episodes(d))) == 3


# -- 7. sizes past what any use needs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,limit", [
    (["evaluate", "--policy", "nope", "--configs", "100001"], "100000"),
    (["evaluate", "--policy", "nope", "--parallel", "257"], "256"),
    (["train", "--demos", "d", "--out", "o", "--hidden", "100000000"], "8192"),
    (["train", "--demos", "d", "--out", "o", "--queries", "257"], "256"),
    (["train", "--demos", "d", "--out", "o", "--chunk", "501"], "500"),
    (["train", "--demos", "d", "--out", "o", "--batch-size", "16385"], "16384"),
    (["train", "--demos", "d", "--out", "o", "--views", "65"], "64"),
])
def test_a_size_past_its_upper_bound_is_refused_while_parsing_naming_the_bound(tmp_path, capsys, monkeypatch, argv,
                                                                               limit):
    monkeypatch.chdir(tmp_path)
    code, err = run(["control", *argv], capsys)
    assert code == 2 and f"<= {limit}" in err and "bug in frozenvit" not in err, err


@pytest.mark.parametrize("param,value", [("hidden", 8193), ("chunk", 501), ("batch_size", 16385)])
def test_a_policy_size_past_its_upper_bound_is_a_parameter_error_before_training(param, value):
    with pytest.raises(ParameterError, match=param):
        small(epochs=1, **{param: value}).fit(marked_token_cache(M=32), progress=False)


def test_too_many_queries_and_too_many_configurations_are_parameter_errors():
    from frozenvit.control import AttentionConfig

    with pytest.raises(ParameterError, match="256"):
        AttentionConfig(queries=257)
    with pytest.raises(ParameterError, match=str(HELDOUT_OFFSET)):
        config_seeds("heldout", HELDOUT_OFFSET + 1)


# -- 8. progress between episodes ---------------------------------------------------------------------------------------
@needs_metaworld
def test_evaluate_shows_progress_lines_before_the_first_episode_ends(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(evaluate_mod, "VisuomotorAgent", _FakeAgent)
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    capsys.readouterr()
    evaluate_mod.evaluate(pol, None, config_seeds("heldout", 2), parallel=2)   # progress=None: lines on a log
    lines = capsys.readouterr().err.splitlines()
    before = [ln for ln in lines if ln.startswith("eval reach-v3: 0/2 ep")]
    assert before and "steps=2" in before[0] and "running=2" in before[0], lines


# -- 9. the Python API's out-of-range arguments ------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(image_size=0), dict(image_size=5000), dict(expert="nope")])
def test_collect_demos_refuses_arguments_out_of_range_before_any_work(tmp_path, monkeypatch, kw):
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)
    monkeypatch.setattr(demos_mod, "record_episode", lambda *a, **k: pytest.fail("recorded an episode"))
    with pytest.raises(ParameterError, match="image_size must be an integer from 16 to 1024|expert must be one of"):
        demos_mod.collect_demos("reach-v3", tmp_path / "d", 1, progress=False, **kw)
    assert not (tmp_path / "d").exists()


@needs_metaworld
@pytest.mark.parametrize("configs,kw,says", [
    ([HELDOUT_OFFSET], dict(image_size=0), "image_size must be an integer from 16"),
    ([HELDOUT_OFFSET], dict(image_size=7), "image_size must be an integer from 16"),
    ([], {}, "no configurations"),
])
def test_evaluate_refuses_arguments_out_of_range(monkeypatch, configs, kw, says):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", lambda *a, **k: pytest.fail("rolled out"))
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    with pytest.raises(ParameterError, match=says):
        evaluate_mod.evaluate(pol, None, configs, progress=False, **kw)


@pytest.mark.parametrize("kw", [dict(steps=0), dict(warmup=-1)])
def test_measure_latency_refuses_steps_out_of_range_as_a_parameter_error(kw):
    from frozenvit.control import measure_latency

    with pytest.raises(ParameterError, match="steps"):
        measure_latency(None, None, **kw)


# -- 10. held-out checks and what results.json records ------------------------------------------------------------------
def _trained_on_configs(configs):
    cache = marked_token_cache(M=32)
    cache.meta = dict(cache.meta, configs=list(configs))
    return small(epochs=1).fit(cache, progress=False)


def test_a_policy_records_its_training_configurations(tmp_path):
    from frozenvit.control import PatchTokenPolicy

    _trained_on_configs([3, 0, 1]).save(tmp_path / "p")
    assert PatchTokenPolicy.load(tmp_path / "p").meta_["train_configs"] == [0, 1, 3]


@needs_metaworld
def test_evaluating_on_the_policys_training_configurations_warns(monkeypatch):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(evaluate_mod, "VisuomotorAgent", _FakeAgent)
    pol = _trained_on_configs(config_seeds("train", 2))
    with pytest.warns(UserWarning, match=r"2 of the 2 configurations evaluated \(0, 1\) are among the policy's "
                                         "training configurations"):
        res = evaluate_mod.evaluate(pol, None, config_seeds("train", 2), progress=False)
    assert res.trained_configs == [0, 1]


@needs_metaworld
def test_evaluating_on_another_task_than_the_policys_warns(monkeypatch):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(evaluate_mod, "VisuomotorAgent", _FakeAgent)
    pol = _trained_on_configs([0, 1])
    with pytest.warns(UserWarning, match="trained on reach-v3, and it is evaluated on button-press-v3"):
        res = evaluate_mod.evaluate(pol, None, config_seeds("heldout", 1), task="button-press-v3", progress=False)
    assert res.policy_task == "reach-v3"


@needs_metaworld
def test_results_json_names_the_policy_and_the_runtime(tmp_path, capsys, fake_rollouts):
    from frozenvit.control.policy import PatchTokenPolicy, policy_digest

    pol, ev = tmp_path / "pol", tmp_path / "ev"
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(pol)
    assert main(["control", "evaluate", "--policy", str(pol), "--configs", "2", "--out", str(ev)]) == 0
    res = json.loads((ev / "results.json").read_text())
    assert res["policy"] == policy_digest(PatchTokenPolicy.load(pol)) and res["policy_path"] == str(pol.resolve())
    assert res["runtime"] == "torch" and res["engine"] == "local" and res["seconds"] >= 0
    assert res["policy_task"] == "reach-v3" and res["trained_configs"] == []


# -- 11. help ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["evaluate", "latency"])
def test_image_size_help_names_the_policys_input_size_as_its_default(capsys, command):
    with pytest.raises(SystemExit):
        main(["control", command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "policy's input size" in out and "default: the backbone's own)" not in out, out
