"""A first-time user's trial of the `control` commands (evaluate's seconds and progress, collect's cure, GIF paths,
--out inside --policy, latency's --camera, NaN inputs, comparing evaluations, encoder wording) and how each defect
it found is met now. No test renders a frame: rollouts are 3-step stand-ins and the encoder is tiny or absent."""
import importlib
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from frozenvit.backbone.errors import ArtifactError, FrozenVitError
from frozenvit.backbone.suite.cli import main
from frozenvit.control import demos as demos_mod
from frozenvit.control.env import config_seeds
from frozenvit.control.errors import DemoError, PolicyError

from test_control_policy import marked_token_cache, small
from test_control_reported_defects import _FakeTask, _NoTask, episode, run  # noqa: F401
from test_rerun_reported import fake_rollouts  # noqa: F401

ev_mod = importlib.import_module("frozenvit.control.evaluate")      # the module; control.evaluate is the function


def _policy(path):
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(path)
    return path


def _evaluate(pol, out, *extra):
    return ["control", "evaluate", "--policy", str(pol), "--configs", "2", "--max-steps", "30", "--out", str(out),
            *extra]


# -- 1. results.json "seconds": the whole evaluation's, and this run's apart -----------------------------------------
def test_a_rerun_evaluation_reports_the_episodes_time_from_the_journal_and_this_runs_apart(tmp_path, capsys,
                                                                                            fake_rollouts,
                                                                                            monkeypatch):
    import time

    pol, out = _policy(tmp_path / "pol"), tmp_path / "ev"
    slow = _FakeTask.step
    monkeypatch.setattr(_FakeTask, "step", lambda self, a: (time.sleep(0.05), slow(self, a))[1])
    assert main(_evaluate(pol, out)) == 0
    lines = [json.loads(ln) for ln in (out / "episodes.jsonl").read_text().splitlines()[1:]]
    took = sum(r["seconds"] for r in lines)
    assert took >= 0.25, lines                                       # 2 episodes of 3 steps of 50 ms, in lockstep
    monkeypatch.setattr(_FakeTask, "step", slow)
    capsys.readouterr()
    assert main(_evaluate(pol, out)) == 0                            # the same command: every episode from the journal
    res = json.loads((out / "results.json").read_text())
    assert res["seconds_this_run"] < took and res["seconds"] >= round(took, 1) - 0.05, res
    assert res["seconds"] == pytest.approx(res["earlier_seconds"] + res["seconds_this_run"], abs=0.11)
    assert res["earlier_episodes"] == 2 and res["untimed_episodes"] == 0
    assert "2 of the 2 episodes came from the journal of an earlier run" in capsys.readouterr().out


def test_a_journal_written_before_the_times_stays_readable_and_its_episodes_are_counted_untimed(tmp_path,
                                                                                               fake_rollouts):
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    configs = config_seeds("heldout", 2)
    first = ev_mod.evaluate(pol, None, configs, max_steps=30, journal=tmp_path / "j.jsonl", progress=False)
    assert first.earlier_episodes == 0
    # the same journal as an older frozenvit wrote it: episode lines without seconds, chained as they were then
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    head, check, old = lines[0], ev_mod._link("", lines[0]), [lines[0]]
    for ln in lines[1:]:
        r = {k: v for k, v in json.loads(ln).items() if k not in ("seconds", "check")}
        check = ev_mod._link(check, ev_mod._episode_line(r))
        old.append(json.dumps(dict(r, check=check)))
    (tmp_path / "j.jsonl").write_text("\n".join(old) + "\n")
    assert head.startswith('{"frozenvit"')
    again = ev_mod.evaluate(pol, None, configs, max_steps=30, journal=tmp_path / "j.jsonl", progress=False)
    assert again.successes == first.successes
    assert again.earlier_episodes == 2 and again.untimed_episodes == 2 and again.earlier_seconds == 0


def test_an_edited_episode_time_is_refused_like_any_edited_line(tmp_path, fake_rollouts):
    from frozenvit.backbone.suite.errors import OutputConflict

    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    configs = config_seeds("heldout", 1)
    ev_mod.evaluate(pol, None, configs, max_steps=30, journal=tmp_path / "j.jsonl", progress=False)
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    r = json.loads(lines[1])
    lines[1] = json.dumps(dict(r, seconds=r["seconds"] + 100))
    (tmp_path / "j.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(OutputConflict, match="line 2 does not match its check"):
        ev_mod.evaluate(pol, None, configs, max_steps=30, journal=tmp_path / "j.jsonl", progress=False)


# -- 2. collect: a cap too short leaves nothing, the cure names --max-steps, and works --------------------------------
def test_a_collect_whose_expert_always_fails_leaves_no_folder_and_names_max_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)
    monkeypatch.setattr(demos_mod, "record_episode", lambda env, config, **k: None)
    with pytest.raises(DemoError) as e:
        demos_mod.collect_demos("reach-v3", tmp_path / "d", 1, image_size=64, max_steps=10, max_failures=2,
                                progress=False)
    assert "--max-steps" in str(e.value) and "max_steps=" in str(e.value), e.value
    assert not (tmp_path / "d").exists()
    (tmp_path / "empty").mkdir()                                     # a folder the user made: it stays, empty
    with pytest.raises(DemoError):
        demos_mod.collect_demos("reach-v3", tmp_path / "empty", 1, image_size=64, max_steps=10, max_failures=2,
                                progress=False)
    assert (tmp_path / "empty").is_dir() and not any((tmp_path / "empty").iterdir())


def test_a_demo_folder_without_episodes_takes_a_raised_max_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)
    monkeypatch.setattr(demos_mod, "_remove_new", lambda *a: None)   # a folder as an earlier frozenvit left it
    monkeypatch.setattr(demos_mod, "record_episode", lambda env, config, **k: None)
    with pytest.raises(DemoError):
        demos_mod.collect_demos("reach-v3", tmp_path / "d", 1, image_size=64, max_steps=10, max_failures=2,
                                progress=False)
    assert demos_mod.load_manifest(tmp_path / "d")["episodes"] == []
    monkeypatch.setattr(demos_mod, "record_episode", lambda env, config, **k: episode(config=config))
    demos_mod.collect_demos("reach-v3", tmp_path / "d", 1, image_size=64, max_steps=200, progress=False)
    m = demos_mod.load_manifest(tmp_path / "d")
    assert m["max_steps"] == 200 and [e["config"] for e in m["episodes"]] == [0] and m["failed_configs"] == []


def test_a_demo_folder_with_episodes_names_the_option_of_a_setting_that_differs(tmp_path, monkeypatch):
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)
    monkeypatch.setattr(demos_mod, "record_episode", lambda env, config, **k: episode(config=config))
    demos_mod.collect_demos("reach-v3", tmp_path / "d", 1, image_size=64, max_steps=10, progress=False)
    with pytest.raises(DemoError, match=r"max_steps \(--max-steps\) 10 stored, 200 asked"):
        demos_mod.collect_demos("reach-v3", tmp_path / "d", 2, image_size=64, max_steps=200, progress=False)


# -- 3. evaluate's progress counts configurations; re-rolls apart; running=0 at the end -------------------------------
def test_the_progress_counts_configurations_and_gif_rerolls_apart_and_ends_with_nothing_running(tmp_path, capsys,
                                                                                                fake_rollouts,
                                                                                                monkeypatch):
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    configs = config_seeds("heldout", 3)
    kw = dict(max_steps=30, journal=tmp_path / "j.jsonl", gif_dir=tmp_path / "gifs", parallel=3)
    ev_mod.evaluate(pol, None, configs, **kw)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "3/3 ep" in last and "running=0" in last, last
    ev_mod.evaluate(pol, None, configs, gif_episodes=2, **kw)        # two finished episodes rolled out for GIFs
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "3/3 ep" in last and "gif_rerolls=2/2" in last and "running=0" in last, last


# -- 5. results.json's GIFs are relative to the results folder --------------------------------------------------------
def test_results_json_names_gifs_relative_to_the_results_folder(tmp_path, fake_rollouts, monkeypatch):
    pol, out = _policy(tmp_path / "pol"), tmp_path / "ev"
    monkeypatch.chdir(tmp_path)
    assert main(_evaluate(pol.name, out.name, "--gifs", "1")) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["gifs"] == [f"gifs/reach-v3_cfg{config_seeds('heldout', 1)[0]}.gif"], res["gifs"]
    assert (out / res["gifs"][0]).is_file()


# -- 7. evaluate --out inside --policy is refused before any work ----------------------------------------------------
@pytest.mark.parametrize("inside", ["ev", "."])
def test_evaluate_refuses_an_out_inside_the_policy_folder_naming_both(tmp_path, capsys, fake_rollouts, inside):
    pol = _policy(tmp_path / "pol")
    before = sorted(p.name for p in pol.iterdir())
    code, err = run(_evaluate(pol, pol / inside), capsys)
    if inside == ".":        # the policy folder itself: another kind of output, refused as any folder not ours
        assert code == 2 and "error (OutputConflict)" in err and "--out" in err, err
    else:
        assert code == 2 and "error (UsageError)" in err and "--out" in err and "--policy" in err, err
    assert sorted(p.name for p in pol.iterdir()) == before


# -- 8. latency --camera with a --policy: ignored, with a line, like --task, --pooling and --chunk -----------------------
def test_latency_ignores_another_camera_than_the_policys_and_says_so(tmp_path, monkeypatch, capsys):
    from frozenvit.control import cli, env, latency
    from frozenvit.control.errors import TaskError

    made = {}

    class Task(_NoTask):
        def __init__(self, name, camera=None, **k):
            made.update(task=name, camera=camera)

    def stop(*a, **k):
        raise TaskError("stopped before timing")

    monkeypatch.setattr(cli, "_encoder", lambda args, pol=None: SimpleNamespace(config=SimpleNamespace(img_size=[64])))
    monkeypatch.setattr(env, "MetaWorldTask", Task)
    monkeypatch.setattr(latency, "compare_runtimes", stop)
    _policy(tmp_path / "pol")
    try:
        code = main(["control", "latency", "--policy", str(tmp_path / "pol"), "--steps", "1", "--camera", "topview"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr().out
    assert code == 2 and made["camera"] == "corner", made          # the policy's camera is the one timed
    assert "--camera topview ignored: the policy was trained with camera corner" in out, out


# -- 9. non-finite inputs to a policy --------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["tokens", "proprio"])
def test_predict_refuses_tokens_or_proprio_that_are_not_finite(which):
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    cfg = pol.head_.cfg
    tokens = np.zeros((1, cfg.num_tokens, cfg.embed_dim), np.float32)
    proprio = np.zeros((1, cfg.proprio_dim), np.float32)
    (tokens if which == "tokens" else proprio).flat[0] = np.nan
    with pytest.raises(PolicyError, match=f"{which} holds 1 value that is not finite"):
        pol.predict(tokens, None, proprio)
    with pytest.raises(PolicyError, match="not finite"):
        pol.predict(torch.from_numpy(tokens) if which == "tokens" else tokens, None,
                    np.full_like(proprio, np.inf) if which == "proprio" else proprio)


# -- 6. comparing evaluations ---------------------------------------------------------------------------------------
def test_mcnemar_of_runs_of_other_lengths_is_a_named_frozenvit_error():
    from frozenvit.control import RunMismatch, mcnemar

    with pytest.raises(RunMismatch) as e:
        mcnemar([True] * 6, [True] * 3)
    assert isinstance(e.value, FrozenVitError) and isinstance(e.value, ValueError)


def test_compare_runs_refuses_evaluate_results_saying_what_it_takes_and_what_to_use():
    from frozenvit.control import RunMismatch, compare_runs

    a = dict(task="reach-v3", configs=[1000000, 1000001], successes=[True, False], steps=[3, 30], max_steps=30)
    with pytest.raises(RunMismatch, match=r"`control evaluate` results.json.*compare_evaluations\(.*frozenvit control compare A B"):
        compare_runs({"a": (a, "attention"), "b": (dict(a), "attention")})


# -- 10. the encoder-mismatch cure names the command line and Python; summaries name metaworld-fast ---------------------
def test_an_encoder_mismatch_names_the_options_and_the_python_call(make_tiny_vit):
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    with pytest.raises(ArtifactError) as e:
        pol.check_backbone(make_tiny_vit())
    msg = str(e.value)
    assert "--backbone, --weights or --image-size" in msg and "encoder_for_policy(policy)" in msg, msg


def test_summary_lines_name_the_fast_encoder():
    from frozenvit.control.cli import _encoder_name
    from frozenvit.control.encoders import FAST_ENCODER_SHA256

    bb = SimpleNamespace(config=SimpleNamespace(name="vit_tiny_patch16_224", weights_sha256=FAST_ENCODER_SHA256))
    assert _encoder_name(bb) == "metaworld-fast (vit_tiny_patch16_224)"
    other = SimpleNamespace(config=SimpleNamespace(name="vit_tiny_patch16_224", weights_sha256=None))
    assert _encoder_name(other) == "vit_tiny_patch16_224"
    assert _encoder_name(other, SimpleNamespace(meta_=dict(fingerprint=FAST_ENCODER_SHA256))).startswith(
        "metaworld-fast")
