"""Reported mistakes of `frozenvit control` and how each is met now: a named error, exit 2, nothing written,
and results that say what is in the folder. No test renders a frame or needs the network."""
import importlib
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from frozenvit.backbone.errors import ArtifactError
from frozenvit.backbone.suite.cli import main
from frozenvit.backbone.suite.errors import ParameterError
from frozenvit.control import demos as demos_mod
from frozenvit.control.errors import DemoError, PolicyError

from test_control_policy import marked_token_cache, small

HAVE_METAWORLD = importlib.util.find_spec("metaworld") is not None
needs_metaworld = pytest.mark.skipif(not HAVE_METAWORLD, reason="Meta-World is not installed")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "control.md"


def run(argv: list[str], capsys) -> tuple[int, str]:
    """Exit status and stderr of `frozenvit ...argv`, whether the parser or the command refuses."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def episode(T: int = 3, size: int = 64, config: int = 0) -> demos_mod.Episode:
    g = np.random.default_rng(config)
    return demos_mod.Episode(g.integers(0, 256, (T, size, size, 3), dtype=np.uint8), g.random((T, 4), np.float32),
                             g.uniform(-1, 1, (T, 4)).astype(np.float32), config, np.zeros(3))


def demo_folder(root: Path, episodes: int = 2, size: int = 64) -> Path:
    """A demo folder as `control collect` writes it, with tiny random episodes (no Meta-World needed)."""
    entries = []
    for c in range(episodes):
        name = f"episodes/cfg_{c:07d}.npz"
        demos_mod._write_episode(root / name, episode(size=size, config=c))
        entries.append(dict(config=c, file=name, steps=3))
    (root / "manifest.json").write_text(json.dumps(dict(
        kind="control.demos", format_version=2, task="reach-v3", camera="corner", image_size=size, max_steps=100,
        hold_steps=0, render=dict(shadows=False, reflections=False, offsamples=0), expert="fingertips",
        episodes=entries, failed_configs=[])))
    return root


@pytest.fixture
def tiny_encoder(make_tiny_vit, monkeypatch):
    """Every control command encodes with one tiny random ViT (48-d tokens, 4 blocks, 64 px)."""
    from frozenvit.control import encoders

    torch.manual_seed(0)
    bb = make_tiny_vit()
    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: bb)
    return bb


# -- unreadable episode files ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncated", "flipped byte"])
def test_a_damaged_episode_file_is_a_demo_error_naming_it(tmp_path, damage):
    path = tmp_path / "cfg_0000000.npz"
    demos_mod._write_episode(path, episode())
    raw = bytearray(path.read_bytes())
    if damage == "truncated":
        raw = raw[:len(raw) // 2]
    else:
        raw[len(raw) // 2] ^= 0xFF                                     # inside the compressed frames: a bad CRC
    path.write_bytes(bytes(raw))
    with pytest.raises(DemoError, match=rf"cannot read episode {re.escape(str(path))}.*delete it"):
        demos_mod.read_episode(path)


def test_an_episode_file_with_arrays_of_another_shape_is_a_demo_error(tmp_path):
    path = tmp_path / "cfg_0000000.npz"
    ep = episode()
    demos_mod._write_episode(path, demos_mod.Episode(ep.frames[:2], ep.proprio, ep.actions, 0, ep.rand_vec))
    with pytest.raises(DemoError, match="do not make one episode"):
        demos_mod.read_episode(path)


def test_train_on_a_truncated_episode_exits_2_with_a_demo_error_and_writes_nothing(tmp_path, tiny_encoder, capsys,
                                                                                    tree_snapshot):
    demos = demo_folder(tmp_path / "demos")
    bad = demos / "episodes" / "cfg_0000001.npz"
    bad.write_bytes(bad.read_bytes()[:5000])
    before = tree_snapshot(tmp_path)
    code, err = run(["control", "train", "--demos", str(demos), "--out", str(tmp_path / "pol"), "--epochs", "1",
                     "--views", "0", "--precision", "float32"], capsys)
    assert code == 2 and "error (DemoError): cannot read episode" in err and "cfg_0000001.npz" in err, err
    assert "bug in frozenvit" not in err
    assert tree_snapshot(tmp_path) == before


def test_a_damaged_feature_cache_is_encoded_again_with_a_warning(tmp_path, tiny_vit):
    from frozenvit.control.features import cache_features

    demos = demo_folder(tmp_path / "demos", episodes=1)
    first = cache_features(demos, tiny_vit, views=0, precision="float32", progress=False)
    (stored,) = (demos / "features").glob("*/features.safetensors")
    stored.write_bytes(stored.read_bytes()[:-100])
    with pytest.warns(UserWarning, match="encoding the demos again"):
        again = cache_features(demos, tiny_vit, views=0, precision="float32", progress=False)
    assert torch.equal(again.tokens, first.tokens)


# -- --image-size out of range ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["collect --task reach-v3 --out {new}", "train --demos {demos} --out {new}",
                                     "evaluate --policy {pol}", "latency"])
@pytest.mark.parametrize("size", ["99999", "1040"])
def test_an_image_size_past_the_upper_bound_is_a_usage_error_before_any_work(tmp_path, monkeypatch, capsys, command,
                                                                             size, tree_snapshot):
    from frozenvit.control import encoders

    def no_work(*a, **k):
        pytest.fail("the command went to work with --image-size " + size)

    monkeypatch.setattr(encoders, "load_encoder", no_work)
    monkeypatch.setattr(demos_mod, "collect_demos", no_work)
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(tmp_path / "pol")
    demo_folder(tmp_path / "demos", episodes=1)
    before = tree_snapshot(tmp_path)
    argv = ["control", *command.format(new=tmp_path / "new", demos=tmp_path / "demos", pol=tmp_path / "pol").split(),
            "--image-size", size]
    code, err = run(argv, capsys)
    assert code == 2 and "error (UsageError): --image-size must be 16 to 1024" in err, err
    assert tree_snapshot(tmp_path) == before


# -- which error a hyperparameter is ---------------------------------------------------------------------------------
def test_heads_that_do_not_divide_the_tokens_are_a_parameter_error_in_code_and_in_the_guide():
    from frozenvit.control.head import AttentionConfig

    with pytest.raises(ParameterError, match="heads do not divide") as e:
        small(attention=AttentionConfig(queries=2, heads=5)).fit(marked_token_cache(M=32, C=16), progress=False)
    assert not isinstance(e.value, PolicyError)
    text = " ".join(DOCS.read_text().split())
    at = [m.start() for m in re.finditer("do not divide the token width", text)]
    assert at
    for i in at:                                     # the error the guide names for it, before or right after
        before = [e for e in re.findall(r"`(\w+Error)`", text[:i]) if e != "InvalidParameterError"]
        after = re.match(r"do not divide the token width[^`]*?\)\s*`(\w+Error)`", text[i:])
        named_after = after.group(1) if after else "ParameterError"
        assert before[-1] == named_after == "ParameterError", text[i - 300:i + 80]


@pytest.mark.parametrize("bad", [dict(pooling="max"), dict(hidden=0), dict(lr=float("nan")), dict(chunk=0)])
def test_a_hyperparameter_out_of_range_is_frozenvits_parameter_error(bad):
    from frozenvit.control.policy import PatchTokenPolicy

    with pytest.raises(ParameterError, match=f"'{next(iter(bad))}' parameter of PatchTokenPolicy"):
        PatchTokenPolicy(**bad).fit(marked_token_cache(M=32), progress=False)


@pytest.mark.parametrize("argv", [["control", "train", "--demos", "{d}", "--out", "{o}", "--lr", "nan"],
                                  ["control", "train", "--demos", "{d}", "--out", "{o}", "--lr", "inf"],
                                  ["control", "latency", "--steps", "1", "--warmup", "0", "--budget-ms", "nan"],
                                  ["control", "latency", "--steps", "1", "--warmup", "0", "--budget-ms", "inf"]],
                         ids=["lr nan", "lr inf", "budget nan", "budget inf"])
def test_a_number_that_is_not_finite_is_refused_while_parsing(tmp_path, capsys, argv):
    argv = [a.format(d=tmp_path / "demos", o=tmp_path / "new") for a in argv]
    code, err = run(argv, capsys)
    flag = argv[-2]
    assert code == 2 and f"error (UsageError): argument {flag}: must be a finite number" in err, err
    assert not any(tmp_path.iterdir())


# -- an encoder other than the policy's ------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["evaluate", "--configs", "1", "--max-steps", "5"], ["latency", "--steps", "1"]])
def test_naming_the_fast_encoder_for_a_policy_of_another_is_an_artifact_error_naming_both(tmp_path, capsys, command):
    small(epochs=1).fit(marked_token_cache(M=32), progress=False).save(tmp_path / "pol")
    code, err = run(["control", command[0], "--policy", str(tmp_path / "pol"), *command[1:],
                     "--backbone", "metaworld-fast"], capsys)
    assert code == 2 and "error (ArtifactError): this policy was trained on synthetic at [64, 64]" in err, err
    assert "the encoder given is metaworld-fast (vit_tiny_patch16_224 at [112, 112]" in err


# -- collect: inputs checked before the folder is made ---------------------------------------------------------------
@needs_metaworld
def test_collect_refuses_an_unknown_camera_before_it_makes_its_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(demos_mod, "collect_demos", lambda *a, **k: pytest.fail("collect went to work"))
    code, err = run(["control", "collect", "--task", "reach-v3", "--out", str(tmp_path / "cam"), "--episodes", "1",
                     "--image-size", "64", "--camera", "nope"], capsys)
    assert code == 2 and "error (TaskError): no camera named 'nope' in reach-v3" in err and "corner2" in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args,says", [(["--first-config", "1000000"], "argument --first-config: must be <= 999999"),
                                       (["--first-config", "999999", "--episodes", "2"],
                                        "--first-config 999999 leaves 1 training configuration, fewer than "
                                        "--episodes 2")])
def test_collect_refuses_a_first_configuration_past_the_training_range(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.setattr(demos_mod, "collect_demos", lambda *a, **k: pytest.fail("collect went to work"))
    code, err = run(["control", "collect", "--task", "reach-v3", "--out", str(tmp_path / "fc"), "--image-size", "64",
                     *args], capsys)
    assert code == 2 and "(UsageError)" in err and says in err, err
    assert not any(tmp_path.iterdir())


class _NoTask:
    """Stands in for MetaWorldTask in collect_demos: no scene, no renderer."""

    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.mark.parametrize("fails", [set(), {demos_mod.HELDOUT_OFFSET - 2}])
def test_collect_that_runs_out_of_training_configurations_says_so(tmp_path, monkeypatch, fails):
    from frozenvit.control.env import HELDOUT_OFFSET

    (tmp_path / "d").mkdir()                                         # what `control collect` claims first
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)
    monkeypatch.setattr(demos_mod, "record_episode",
                        lambda env, config, **k: None if config in fails else episode(config=config))
    with pytest.raises(DemoError) as e:
        demos_mod.collect_demos("reach-v3", tmp_path / "d", 4, image_size=64, first_config=HELDOUT_OFFSET - 3,
                                progress=False)
    msg = str(e.value)
    assert f"ran out at {HELDOUT_OFFSET - 1}" in msg and f"{3 - len(fails)} of the 4 episodes recorded" in msg, msg
    assert "fails too often" not in msg
    assert ("the expert failed on 1 configuration of this run" in msg) == bool(fails)
    assert "--first-config" in msg


# -- evaluate --gifs on a finished run ------------------------------------------------------------------------------
class _FakeTask:
    """Stands in for MetaWorldTask in evaluate: 3-step episodes of 8-px frames; `succeed` decides the outcome."""
    succeed = True
    made = 0

    def __init__(self, name, camera, image_size, max_steps, render):
        type(self).made += 1

    def reset(self, config):
        from frozenvit.control.env import State

        self.t = 0
        return State(np.zeros(4, np.float32), np.zeros(39), False, 0, False)

    def render(self):
        return np.full((8, 8, 3), 40 * self.t, np.uint8)

    def step(self, action):
        from frozenvit.control.env import State

        self.t += 1
        return State(np.zeros(4, np.float32), np.zeros(39), self.succeed and self.t == 3, self.t, self.t == 3)

    def close(self):
        pass


class _FakeAgent:
    def __init__(self, policy, backbone):
        pass

    def reset(self, slots=None):
        pass

    def act(self, frames, proprio, slots=None, timer=None):
        return np.zeros((len(frames), 4), np.float32)


@needs_metaworld
def test_gifs_asked_of_a_finished_evaluation_are_made_and_listed_and_the_journal_stands(tmp_path, monkeypatch):
    ev = importlib.import_module("frozenvit.control.evaluate")      # the module; control.evaluate is the function

    monkeypatch.setattr(ev, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(ev, "VisuomotorAgent", _FakeAgent)
    monkeypatch.setattr(_FakeTask, "succeed", True)
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    configs = [1_000_000, 1_000_001, 1_000_002]
    kw = dict(journal=tmp_path / "episodes.jsonl", gif_dir=tmp_path / "gifs", progress=False)

    first = ev.evaluate(pol, None, configs, gif_episodes=0, **kw)
    assert first.successes == [True] * 3 and first.gifs == [] and not (tmp_path / "gifs").exists()
    journal = (tmp_path / "episodes.jsonl").read_bytes()

    monkeypatch.setattr(_FakeTask, "succeed", False)                 # a second rollout would now fail
    again = ev.evaluate(pol, None, configs, gif_episodes=2, **kw)
    want = [str(tmp_path / "gifs" / f"reach-v3_cfg{c}.gif") for c in configs[:2]]
    assert again.gifs == want and all(Path(g).is_file() for g in want)
    assert again.successes == [True] * 3                             # the journal's outcomes, not the replays'
    grown = (tmp_path / "episodes.jsonl").read_bytes()                # its episodes stand; the new GIFs are listed
    listed = [json.loads(ln)["gif"] for ln in grown[len(journal):].splitlines()]
    assert grown.startswith(journal) and listed == configs[:2]

    made = _FakeTask.made
    plain = ev.evaluate(pol, None, configs, gif_episodes=0, **kw)
    assert plain.gifs == want                                        # what is in gifs/, listed
    assert _FakeTask.made == made                                    # and nothing rolled out again for it


class _StopAfterEpisodes(Exception):
    pass


@needs_metaworld
def test_a_stopped_evaluation_keeps_the_gifs_of_its_finished_episodes_and_resuming_rolls_none_again(tmp_path,
                                                                                                    monkeypatch):
    """Each GIF is written as its episode ends, so a run killed midway does not re-simulate those episodes."""
    ev = importlib.import_module("frozenvit.control.evaluate")

    monkeypatch.setattr(ev, "MetaWorldTask", _FakeTask)
    monkeypatch.setattr(ev, "VisuomotorAgent", _FakeAgent)
    monkeypatch.setattr(_FakeTask, "succeed", True)
    pol = small(epochs=1).fit(marked_token_cache(M=32), progress=False)
    configs = [1_000_000, 1_000_001, 1_000_002]
    kw = dict(journal=tmp_path / "episodes.jsonl", gif_dir=tmp_path / "gifs", gif_episodes=3, parallel=1,
              progress=False)
    append = ev.EpisodeJournal.append

    def stop_after_two(self, config, *a, **k):
        append(self, config, *a, **k)
        if config == configs[1]:
            raise _StopAfterEpisodes
    monkeypatch.setattr(ev.EpisodeJournal, "append", stop_after_two)
    with pytest.raises(_StopAfterEpisodes):
        ev.evaluate(pol, None, configs, **kw)
    assert sorted(p.name for p in (tmp_path / "gifs").iterdir()) == [f"reach-v3_cfg{c}.gif" for c in configs[:2]]
    monkeypatch.setattr(ev.EpisodeJournal, "append", append)
    rolled = []
    lockstep = ev.lockstep
    monkeypatch.setattr(ev, "lockstep", lambda agent, envs, queue, *a: (rolled.extend(queue),
                                                                         lockstep(agent, envs, queue, *a))[1])
    res = ev.evaluate(pol, None, configs, **kw)
    assert rolled == configs[2:] and res.gifs == [str(tmp_path / "gifs" / f"reach-v3_cfg{c}.gif") for c in configs]


def test_a_journal_of_another_evaluation_names_what_differs_in_good_grammar(tmp_path):
    from frozenvit.control.evaluate import EpisodeJournal

    run = dict(policy="ab" * 32, task="reach-v3", camera="corner", image_size=64, max_steps=20, render={},
               configs=[1000000])
    EpisodeJournal(tmp_path / "j.jsonl", run)
    with pytest.warns(UserWarning, match=r"\(camera differs\)"):
        EpisodeJournal(tmp_path / "j.jsonl", dict(run, camera="topview"))
    with pytest.warns(UserWarning, match=r"\(camera, task differ\)"):
        EpisodeJournal(tmp_path / "j.jsonl", dict(run, task="push-v3"))


# -- latency: options a --policy overrides are named when given ------------------------------------------------------
class _Stop(Exception):
    pass


def _latency_until_timing(tmp_path, monkeypatch, capsys, *options):
    """Run `control latency --policy` up to where it would time the loop; (exit status, stdout, the task made)."""
    from types import SimpleNamespace

    from frozenvit.control import cli, env, latency
    from frozenvit.control.errors import TaskError

    made = {}

    class Task(_NoTask):
        def __init__(self, name, **k):
            made["task"] = name

    def stop(policy, *a, **k):
        made["chunk"], made["pooling"] = policy.chunk, policy.pooling
        raise TaskError("stopped before timing")

    monkeypatch.setattr(cli, "_encoder", lambda args, pol=None: SimpleNamespace(config=SimpleNamespace(img_size=[64])))
    monkeypatch.setattr(env, "MetaWorldTask", Task)
    monkeypatch.setattr(latency, "compare_runtimes", stop)
    small(epochs=1, chunk=2).fit(marked_token_cache(M=32), progress=False).save(tmp_path / "pol")
    try:
        code = main(["control", "latency", "--policy", str(tmp_path / "pol"), "--steps", "1", *options])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().out, made


def test_latency_names_each_option_given_that_the_policy_overrides(tmp_path, monkeypatch, capsys):
    code, out, made = _latency_until_timing(tmp_path, monkeypatch, capsys, "--task", "button-press-v3",
                                            "--chunk", "5", "--pooling", "cls")
    assert code == 2 and made == dict(task="reach-v3", chunk=2, pooling="attention"), (code, made)
    assert "--task button-press-v3 ignored: the policy was trained on reach-v3" in out, out
    assert "--chunk 5 ignored: the policy was trained with chunk 2" in out
    assert "--pooling cls ignored: the policy was trained with pooling attention" in out


@pytest.mark.parametrize("options", [[], ["--task", "reach-v3", "--chunk", "2", "--pooling", "attention"]],
                         ids=["not given", "the policy's own"])
def test_latency_says_nothing_of_options_not_given_or_equal_to_the_policys(tmp_path, monkeypatch, capsys, options):
    code, out, _ = _latency_until_timing(tmp_path, monkeypatch, capsys, *options)
    assert code == 2 and "ignored" not in out, out


# -- a resumed training shows its progress of all the epochs ---------------------------------------------------------
def test_a_resumed_training_counts_on_from_the_resumed_epoch_of_all_epochs(tmp_path, monkeypatch):
    import io

    from frozenvit.control import policy as policy_mod

    real, checkpoint = policy_mod.progress_bar, policy_mod.PatchTokenPolicy._checkpoint

    def interrupted(self, ckpt, opt, gen, epoch):                # Ctrl-C right after the checkpoint of epoch 2
        checkpoint(self, ckpt, opt, gen, epoch)
        raise KeyboardInterrupt

    cache = marked_token_cache(M=32)
    monkeypatch.setattr(policy_mod.PatchTokenPolicy, "_checkpoint", interrupted)
    with pytest.raises(KeyboardInterrupt):
        small(epochs=4).fit(cache, checkpoint_dir=tmp_path / "ck", checkpoint_every=2, progress=False)
    monkeypatch.setattr(policy_mod.PatchTokenPolicy, "_checkpoint", checkpoint)
    shown = io.StringIO()
    monkeypatch.setattr(policy_mod, "progress_bar",
                        lambda it, **kw: real(it, **{**kw, "disable": False, "file": shown, "mininterval": 0}))
    small(epochs=4).fit(cache, checkpoint_dir=tmp_path / "ck", checkpoint_every=2)
    text = shown.getvalue()
    assert "2/4" in text and "4/4" in text and "/2 " not in text, text


# -- tensor files get the permissions of every other file ------------------------------------------------------------
def test_tensor_files_of_policies_checkpoints_and_feature_caches_are_as_readable_as_their_config(tmp_path, tiny_vit):
    import os

    from frozenvit.control.features import cache_features

    old = os.umask(0o022)
    try:
        small(epochs=1).fit(marked_token_cache(M=32), checkpoint_dir=tmp_path / "ck", progress=False).save(
            tmp_path / "pol")
        demos = demo_folder(tmp_path / "demos", episodes=1)
        cache_features(demos, tiny_vit, views=0, precision="float32", progress=False)
    finally:
        os.umask(old)
    (feats,) = (demos / "features").glob("*/features.safetensors")
    for f in [tmp_path / "pol" / "model.safetensors", tmp_path / "ck" / "model.safetensors",
              tmp_path / "ck" / "train_state.safetensors", feats]:
        assert oct(f.stat().st_mode & 0o777) == oct((f.parent / "config.json").stat().st_mode & 0o777) == "0o644", f


# -- a checkpoint of other hyperparameters -------------------------------------------------------------------------
def test_a_checkpoint_of_other_hyperparameters_names_only_the_options_that_differ(tmp_path):
    cache = marked_token_cache(M=32)
    small(epochs=1).fit(cache, checkpoint_dir=tmp_path / "ck", progress=False)
    with pytest.raises(ArtifactError) as e:
        small(epochs=1, lr=1e-3).fit(cache, checkpoint_dir=tmp_path / "ck", progress=False)
    msg = str(e.value)
    assert "--lr 0.003 (now 0.001)" in msg and "another --checkpoint folder" in msg, msg
    assert "checkpoint_dir" not in msg and "hidden" not in msg and "pooling" not in msg


# -- a task name in the wrong case ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,want", [("Reach-v3", "did you mean 'reach-v3'?"),
                                       ("button-pres-v3", "'button-press-v3'")])
def test_an_unknown_task_suggests_the_closest_names_whatever_the_case(monkeypatch, name, want):
    from types import SimpleNamespace

    from frozenvit.control import env
    from frozenvit.control.errors import TaskError

    names = ["assembly-v3", "basketball-v3", "bin-picking-v3", "box-close-v3", "button-press-topdown-v3",
             "button-press-v3", "reach-v3", "reach-wall-v3"]
    fake = SimpleNamespace(env_dict=SimpleNamespace(ALL_V3_ENVIRONMENTS=dict.fromkeys(names)))
    monkeypatch.setattr(env, "_metaworld", lambda: fake)
    with pytest.raises(TaskError) as e:
        env.check_task(name)
    assert want in str(e.value) and "assembly-v3" not in str(e.value), str(e.value)


# -- a renderer that fails (or is interrupted) while the task is built ------------------------------------------------
@needs_metaworld
def test_a_task_whose_renderer_fails_to_start_closes_its_scene(monkeypatch):
    from frozenvit.control import env

    closed = []
    cls = env._metaworld().env_dict.ALL_V3_ENVIRONMENTS["reach-v3"]
    monkeypatch.setattr(cls, "close", lambda self: closed.append(self))

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(env, "FrameRenderer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        env.MetaWorldTask("reach-v3", image_size=64)
    assert len(closed) == 1
