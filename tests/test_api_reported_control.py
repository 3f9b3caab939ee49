"""Reported mistakes of the control package's Python API and how each is met now: a named error before any work,
a folder frozenvit does not own left alone, messages that name Python's arguments rather than CLI flags."""
import importlib
import importlib.util
import json

import numpy as np
import pytest
import torch

from frozenvit.backbone.suite.artifacts import MARKER, output_dir
from frozenvit.backbone.suite.errors import OutputConflict, ParameterError
from frozenvit.control import demos as demos_mod
from frozenvit.control.env import HELDOUT_OFFSET, config_seeds
from frozenvit.control.errors import PolicyError

from test_control_policy import marked_token_cache, small
from test_control_reported_defects import _NoTask, demo_folder, episode, run, tiny_encoder  # noqa: F401

evaluate_mod = importlib.import_module("frozenvit.control.evaluate")  # the module; control.evaluate is the function
needs_metaworld = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                     reason="Meta-World is not installed")


@pytest.fixture(scope="module")
def pol():
    """A small fitted attention head on synthetic 4 x 4 tokens of width 16 (task reach-v3)."""
    return small(epochs=1).fit(marked_token_cache(M=32), progress=False)


def _no_rollouts(monkeypatch, recorded: list):
    """collect_demos without Meta-World: no scene; each configuration gives a tiny episode."""
    monkeypatch.setattr(demos_mod, "MetaWorldTask", _NoTask)

    def record(env, config, **k):
        recorded.append(config)
        return episode(config=config)

    monkeypatch.setattr(demos_mod, "record_episode", record)


# -- 1. collect_demos claims its folder as `control collect --out` does ---------------------------------------------
@pytest.mark.parametrize("foreign", ["notes", "other_output"])
def test_collect_demos_refuses_a_folder_it_does_not_own_before_any_episode(tmp_path, monkeypatch, foreign):
    recorded: list = []
    _no_rollouts(monkeypatch, recorded)
    d = tmp_path / "d"
    if foreign == "notes":
        d.mkdir()
        (d / "notes.txt").write_text("mine")
    else:
        output_dir(d, "control.evaluate")                              # another command's output
    before = sorted(p.name for p in d.iterdir())
    with pytest.raises(OutputConflict) as e:
        demos_mod.collect_demos("reach-v3", d, 1, image_size=64, progress=False)
    assert recorded == [] and sorted(p.name for p in d.iterdir()) == before
    msg = str(e.value)
    assert "--out" not in msg and f"out_dir {d}" in msg, msg


def test_collect_demos_claims_a_new_folder_before_the_first_episode_and_resumes_it(tmp_path, monkeypatch):
    recorded: list = []
    _no_rollouts(monkeypatch, recorded)
    d = tmp_path / "d"
    claimed = []
    real_record = demos_mod.record_episode
    monkeypatch.setattr(demos_mod, "record_episode",
                        lambda env, config, **k: (claimed.append((d / MARKER).is_file()), real_record(env, config))[1])
    demos_mod.collect_demos("reach-v3", d, 2, image_size=64, progress=False)
    assert claimed == [True, True] and json.loads((d / MARKER).read_text())["kind"] == demos_mod.KIND
    demos_mod.collect_demos("reach-v3", d, 3, image_size=64, progress=False)   # its own folder: resumed
    assert recorded == [0, 1, 2]


@needs_metaworld
def test_control_collect_still_names_out_and_claims_once(tmp_path, monkeypatch, capsys, tiny_encoder):  # noqa: F811
    from frozenvit.backbone.suite import artifacts

    d = tmp_path / "user"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    monkeypatch.setattr(demos_mod, "collect_demos", lambda *a, **k: pytest.fail("collect went to work"))
    code, err = run(["control", "collect", "--task", "reach-v3", "--out", str(d), "--episodes", "1",
                     "--image-size", "64"], capsys)
    assert code == 2 and f"error (OutputConflict): --out {d}" in err, err
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]

    monkeypatch.undo()
    recorded: list = []
    _no_rollouts(monkeypatch, recorded)
    monkeypatch.setattr("frozenvit.control.encoders.load_encoder", lambda *a, **k: tiny_encoder)
    claims = []
    real = artifacts.output_dir
    monkeypatch.setattr(artifacts, "output_dir", lambda *a, **k: (claims.append(a), real(*a, **k))[1])
    monkeypatch.setattr(demos_mod, "output_dir", lambda *a, **k: (claims.append(a), real(*a, **k))[1])
    code, err = run(["control", "collect", "--task", "reach-v3", "--out", str(tmp_path / "new"), "--episodes", "1",
                     "--image-size", "64"], capsys)
    assert code == 0, err
    assert len(claims) == 1 and recorded == [0]


# -- 2. predict refuses inputs that do not fit the head with PolicyError ---------------------------------------------
def _tokens(n=2):
    cache = marked_token_cache(M=32)
    return cache.tokens[:n], cache.proprio[:n].numpy()


@pytest.mark.parametrize("case", ["proprio_width", "proprio_rows", "empty", "one_frame", "list_tokens",
                                  "wrong_grid", "text_proprio"])
def test_predict_refuses_inputs_that_do_not_fit_the_head_naming_the_shapes(pol, case):
    tokens, proprio = _tokens()
    args = {"proprio_width": (tokens, None, np.zeros((2, 7))),
            "proprio_rows": (tokens, None, np.zeros((3, 4))),
            "empty": (tokens[:0], None, np.zeros((0, 4))),
            "one_frame": (tokens[0], None, proprio[0]),
            "list_tokens": (tokens.tolist(), None, proprio),
            "wrong_grid": (torch.zeros(2, 9, 16), None, proprio),
            "text_proprio": (tokens, None, [["a"] * 4] * 2)}[case]
    with pytest.raises(PolicyError) as e:
        pol.predict(*args)
    assert "(B, 16, 16)" in str(e.value) and "(B, 4)" in str(e.value), str(e.value)


def test_predict_takes_numpy_tokens_as_it_takes_tensors(pol):
    tokens, proprio = _tokens(3)
    np.testing.assert_array_equal(pol.predict(tokens.numpy(), None, proprio), pol.predict(tokens, None, proprio))
    np.testing.assert_array_equal(pol.predict(tokens, None, torch.from_numpy(proprio)),
                                  pol.predict(tokens, None, proprio))


def test_predict_of_a_cls_head_refuses_a_cls_of_another_shape():
    cache = marked_token_cache(M=32)
    cls_pol = small("cls", epochs=1).fit(cache, progress=False)
    assert cls_pol.predict(cache.tokens[:2], cache.cls[:2], cache.proprio[:2]).shape == (2, 4)
    with pytest.raises(PolicyError, match=r"cls must be \(B, 16\)"):
        cls_pol.predict(cache.tokens[:2], cache.cls[:3], cache.proprio[:2])


# -- 3. raw errors where named ones are promised ---------------------------------------------------------------------
def test_a_seed_torch_cannot_take_is_a_parameter_error_and_the_range_it_takes_is_accepted():
    cache = marked_token_cache(M=32)
    with pytest.raises(ParameterError, match="seed"):
        small(seed=2**70, epochs=1).fit(cache, progress=False)
    with pytest.raises(ParameterError, match="seed"):
        small(seed=-2**63 - 1, epochs=1).fit(cache, progress=False)
    for seed in (-1, 2**63, 2**64 - 1):
        small(seed=seed).head_config(cache.meta)


@pytest.mark.parametrize("kw,says", [(dict(configs=[-5]), "configuration seeds must be integers >= 0"),
                                     (dict(configs=[HELDOUT_OFFSET, -1]), "got [-1]"),
                                     (dict(max_steps=0), "max_steps must be an integer >= 1"),
                                     (dict(parallel=0), "parallel must be an integer >= 1"),
                                     (dict(parallel=-2), "parallel must be an integer >= 1")])
def test_evaluate_refuses_bad_arguments_with_a_parameter_error_before_any_work(pol, monkeypatch, kw, says):
    monkeypatch.setattr(evaluate_mod, "MetaWorldTask", lambda *a, **k: pytest.fail("an environment was made"))
    monkeypatch.setattr(evaluate_mod, "VisuomotorAgent", lambda *a, **k: pytest.fail("an agent was made"))
    kw = {"configs": [HELDOUT_OFFSET], **kw}
    with pytest.raises(ParameterError) as e:
        evaluate_mod.evaluate(pol, None, kw.pop("configs"), progress=False, **kw)
    assert says in str(e.value), str(e.value)


@pytest.mark.parametrize("args", [("heldout", 2.5), ("heldout", -1), ("test", 2), ("train", 1, -3), ("heldout", True),
                                  ("train", 10, HELDOUT_OFFSET - 5)])
def test_config_seeds_refuses_bad_arguments_with_a_parameter_error(args):
    with pytest.raises(ParameterError):
        config_seeds(*args)
    assert config_seeds("heldout", np.int64(2)) == [HELDOUT_OFFSET, HELDOUT_OFFSET + 1]


@pytest.mark.parametrize("kw", [dict(n_episodes=0), dict(n_episodes=1.5), dict(hold_steps=-1), dict(max_steps=0),
                                dict(first_config=-1), dict(first_config=HELDOUT_OFFSET)])
def test_collect_demos_refuses_bad_arguments_with_a_parameter_error_writing_nothing(tmp_path, monkeypatch, kw):
    recorded: list = []
    _no_rollouts(monkeypatch, recorded)
    kw = {"n_episodes": 1, **kw}
    with pytest.raises(ParameterError):
        demos_mod.collect_demos("reach-v3", tmp_path / "d", kw.pop("n_episodes"), progress=False, **kw)
    assert not (tmp_path / "d").exists() and recorded == []


# -- 4. PatchTokenPolicy.save names no CLI flag ----------------------------------------------------------------------
def test_save_over_a_users_folder_names_the_path_not_a_cli_flag(pol, tmp_path):
    d = tmp_path / "user"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    with pytest.raises(OutputConflict) as e:
        pol.save(d)
    assert "--out" not in str(e.value) and f"policy folder {d}" in str(e.value), str(e.value)
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


def test_control_train_still_names_out(tmp_path, capsys, tiny_encoder):  # noqa: F811
    demos = demo_folder(tmp_path / "demos", episodes=1)
    d = tmp_path / "user"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    code, err = run(["control", "train", "--demos", str(demos), "--out", str(d), "--epochs", "1",
                     "--image-size", "64"], capsys)
    assert code == 2 and f"error (OutputConflict): --out {d}" in err, err


# -- 5. MetaWorldTask.step refuses actions that are not finite -------------------------------------------------------
@needs_metaworld
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_action_is_a_parameter_error_before_mujoco(tmp_path, monkeypatch, bad):
    from frozenvit.control import MetaWorldTask

    monkeypatch.chdir(tmp_path)
    with MetaWorldTask("reach-v3", render=None) as task:
        task.reset(0)
        action = np.zeros(4)
        action[1] = bad
        with pytest.raises(ParameterError, match="finite"):
            task.step(action)
        assert task.step(np.zeros(4)).steps == 1                          # the episode goes on
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


# -- 6. VisuomotorAgent.act takes a (4,) proprio for one frame -------------------------------------------------------
def test_act_takes_a_one_dimensional_proprio_for_one_frame(tiny_vit):
    from frozenvit.control import VisuomotorAgent

    cache = marked_token_cache(M=32, C=48)                                   # tiny_vit's block 3: 4 x 4 x 48
    agent = VisuomotorAgent(small(epochs=1).fit(cache, progress=False), tiny_vit, check=False)
    frame = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    proprio = np.array([0.1, 0.5, 0.2, 1.0], np.float32)
    np.testing.assert_array_equal(agent.act([frame], proprio), agent.act([frame], proprio[None]))
    with pytest.raises(PolicyError, match=r"proprio must be \(n_frames, 4\)"):
        agent.act([frame, frame], proprio)
    with pytest.raises(ValueError, match=r"proprio must be \(n_frames, 4\)"):
        agent.act([frame], np.zeros((2, 4)))
