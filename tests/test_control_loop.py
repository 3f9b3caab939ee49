"""Demos -> feature cache -> policy -> held-out evaluation and loop latency, on a real Meta-World env
with a tiny random ViT; plus the CLI and the demo section end to end."""
import os
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("metaworld")

from frozenvit.backbone.suite.report import DemoContext  # noqa: E402
from frozenvit.control import (DemoError, MetaWorldTask, PatchTokenPolicy, RenderUnavailable, VisuomotorAgent,  # noqa: E402
                     backbone_meta, cache_features, collect_demos, config_seeds, default_block, evaluate, iter_episodes,
                     load_manifest, measure_latency)
from frozenvit.control.latency import STAGES, LatencyReport  # noqa: E402


@pytest.fixture(scope="module")
def bb(make_tiny_vit):
    torch.manual_seed(0)
    return make_tiny_vit()


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demos") / "reach"
    try:
        collect_demos("reach-v3", d, 2, image_size=64, max_steps=100, progress=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    return d


def test_collected_demos_hold_successful_episodes_that_replay_to_success(demo_dir):
    m = load_manifest(demo_dir)
    assert len(m["episodes"]) == 2
    with MetaWorldTask("reach-v3", render=None, max_steps=100) as env:
        for ep in iter_episodes(demo_dir):
            assert ep.frames.shape == (len(ep), 64, 64, 3) and ep.frames.dtype == np.uint8
            s = env.reset(ep.config)
            np.testing.assert_allclose(s.proprio, ep.proprio[0], atol=1e-6)
            for a in ep.actions:                                   # no noise: replay is the recorded episode
                s = env.step(a)
            assert s.success and s.steps == len(ep)


def test_collect_skips_configurations_where_the_expert_fails(tmp_path):
    d = collect_demos("reach-v3", tmp_path / "d", 1, image_size=32, max_steps=44, progress=False)
    m = load_manifest(d)                                           # the expert needs 41..52 steps on reach
    assert m["failed_configs"] and all(e["steps"] < 44 for e in m["episodes"])
    with pytest.raises(DemoError, match="max_steps"):
        collect_demos("reach-v3", tmp_path / "e", 1, image_size=32, max_steps=1, max_failures=0, progress=False)


def test_action_noise_perturbs_the_visited_states_but_labels_stay_expert_actions():
    from frozenvit.control import record_episode

    try:
        env = MetaWorldTask("reach-v3", image_size=32, max_steps=150)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    with env:
        clean = record_episode(env, 5)
        noisy = record_episode(env, 5, action_noise=0.3, rng=np.random.default_rng(0))
        assert clean is not None and noisy is not None
        n = min(len(clean), len(noisy))
        assert np.abs(clean.proprio[1:n] - noisy.proprio[1:n]).max() > 1e-3         # other states visited
        rng, s = np.random.default_rng(0), env.reset(5)          # replay: label + the same noise draws
        for t in range(len(noisy)):
            np.testing.assert_allclose(s.proprio, noisy.proprio[t], atol=1e-5)
            np.testing.assert_allclose(noisy.actions[t], np.clip(env.expert_action(s), -1, 1), atol=1e-6)
            s = env.step(noisy.actions[t] + rng.normal(0.0, 0.3, size=4))
        assert s.success


def test_hold_steps_record_the_expert_past_its_first_success():
    from frozenvit.control import record_episode

    try:
        stop = MetaWorldTask("reach-v3", image_size=32, max_steps=150)
        go_on = MetaWorldTask("reach-v3", image_size=32, max_steps=150, stop_on_success=False)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    with stop, go_on:
        short = record_episode(stop, 5)
        with pytest.raises(ValueError, match="stop_on_success"):
            record_episode(stop, 5, hold_steps=4)
        held = record_episode(go_on, 5, hold_steps=4)
        assert short is not None and held is not None and len(held) == len(short) + 4
        np.testing.assert_allclose(held.proprio[:len(short)], short.proprio, atol=1e-6)   # same run up to success
        s = go_on.reset(5)
        for a in held.actions:                                   # the success flag is up after len(short) steps
            s = go_on.step(a)
            assert s.success == (s.steps >= len(short)) or s.steps > len(short)
        assert not s.done


def test_collect_resumes_without_rerecording_and_refuses_other_settings(demo_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(demo_dir, d)
    before = {p.name: p.stat().st_mtime_ns for p in (d / "episodes").iterdir()}
    collect_demos("reach-v3", d, 3, image_size=64, max_steps=100, progress=False)
    after = {p.name: p.stat().st_mtime_ns for p in (d / "episodes").iterdir()}
    assert len(after) == 3 and all(after[k] == v for k, v in before.items())
    with pytest.raises(DemoError, match="other settings"):
        collect_demos("reach-v3", d, 3, image_size=32, max_steps=100, progress=False)


def test_feature_cache_holds_the_encoder_tokens_and_is_reused(demo_dir, bb, monkeypatch):
    cache = cache_features(demo_dir, bb, block=0)
    b = 0
    assert cache.meta["block"] == b
    ep = next(iter_episodes(demo_dir))
    direct = bb.patch_grids(list(ep.frames[:3]), blocks=(b,))[b].flatten(2).transpose(1, 2)   # (3, N, C)
    torch.testing.assert_close(cache.tokens[:3].float(), direct, atol=2e-3, rtol=1e-2)       # float16 storage
    last = cache_features(demo_dir, bb)                                   # default: the last block, for every pooling
    assert last.meta["block"] == default_block(bb.config.depth) == 3
    torch.testing.assert_close(last.cls[:3].float(), bb.patch_grids(list(ep.frames[:3]), blocks=(-1,)).cls(3),
                               atol=2e-3, rtol=1e-2)
    assert len(cache) == sum(len(e) for e in iter_episodes(demo_dir))
    monkeypatch.setattr(type(bb), "patch_grids", lambda *a, **k: pytest.fail("re-encoded a cached frame"))
    again = cache_features(demo_dir, bb, block=0)
    assert torch.equal(again.tokens, cache.tokens)


def test_default_block_is_the_last_for_every_pooling():
    assert [default_block(d) for d in (1, 4, 8, 12, 24)] == [0, 3, 7, 11, 23]
    assert default_block(12, "cls") == default_block(12, "mean") == default_block(12, "attention") == 11
    with pytest.raises(ValueError, match="depth"):
        default_block(0)
    with pytest.raises(ValueError, match="pooling"):
        default_block(12, "max")


def test_agent_acting_for_several_slots_equals_acting_for_each_alone(demo_dir, bb):
    pol = PatchTokenPolicy("attention", frames=2, num_heads=3, seed=0).init_untrained(backbone_meta(bb, -1))
    pol.proprio_std_ = torch.ones(4)
    frames = list(next(iter_episodes(demo_dir)).frames[:6])
    prop = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    together, alone = VisuomotorAgent(pol, bb), VisuomotorAgent(pol, bb)
    a = [together.act(frames[t:t + 2], prop[t:t + 2], slots=[0, 1]) for t in (0, 2, 4)]      # 2 envs in lockstep
    b0 = [alone.act([frames[t]], prop[t:t + 1], slots=[0]) for t in (0, 2, 4)]
    alone.reset()
    b1 = [alone.act([frames[t + 1]], prop[t + 1:t + 2], slots=[0]) for t in (0, 2, 4)]
    np.testing.assert_allclose(np.stack(a)[:, 0], np.concatenate(b0), atol=1e-5)
    np.testing.assert_allclose(np.stack(a)[:, 1], np.concatenate(b1), atol=1e-5)


def test_evaluate_reports_every_heldout_configuration(demo_dir, bb, tmp_path):
    cache = cache_features(demo_dir, bb)
    pol = PatchTokenPolicy("attention", num_heads=3, epochs=2, seed=0).fit(cache, progress=False)
    configs = config_seeds("heldout", 3)
    res = evaluate(pol, bb, configs, max_steps=4, parallel=2, gif_dir=tmp_path, gif_episodes=1, progress=False)
    assert res.task == "reach-v3" and res.configs == configs
    assert len(res.successes) == 3 and all(1 <= s <= 4 for s in res.steps)
    assert 0.0 <= res.success_rate <= 1.0 and len(res.gifs) == 1 and os.path.getsize(res.gifs[0]) > 0


def test_measure_latency_times_every_stage_of_the_loop(bb):
    pol = PatchTokenPolicy("attention", num_heads=3).init_untrained(backbone_meta(bb, -1))
    try:
        env = MetaWorldTask("reach-v3", image_size=64, max_steps=4)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    with env:
        rep = measure_latency(VisuomotorAgent(pol, bb), env, steps=6, warmup=2)    # crosses an episode reset
    assert rep.total.shape == (6,) and set(rep.stages) == set(STAGES)
    stage_sum = sum(rep.stages[s] for s in STAGES)
    assert np.all(stage_sum <= rep.total + 1e-6) and np.all(stage_sum > 0.5 * rep.total)
    p = rep.percentiles()
    assert p["p50"] <= p["p95"] <= p["p99"]


def test_latency_verdict_compares_p99_with_the_budget():
    rep = LatencyReport(np.arange(1.0, 101.0), {"render": np.ones(100)})
    assert rep.verdict(100.0)[0] and not rep.verdict(98.0)[0]
    assert rep.verdict(98.0)[1].startswith("FAIL")


def test_cli_collect_train_evaluate_latency(tmp_path, bb, monkeypatch, capsys):
    from frozenvit.backbone.suite.cli import main
    from frozenvit.control import cli

    monkeypatch.setattr(cli, "load_backbone_for", lambda args, img_size=None: bb)
    d, p = str(tmp_path / "demos"), str(tmp_path / "pol")
    assert main(["control", "collect", "--task", "reach-v3", "--out", d, "--episodes", "1", "--image-size", "32",
                 "--max-steps", "100"]) == 0
    assert main(["control", "train", "--demos", d, "--out", p, "--epochs", "2", "--heads", "3", "--threads", "1"]) == 0
    assert main(["control", "evaluate", "--policy", p, "--configs", "1", "--max-steps", "3",
                 "--json", str(tmp_path / "ev.json")]) == 0
    rc = main(["control", "latency", "--policy", p, "--steps", "4", "--warmup", "1", "--budget-ms", "100000",
               "--hist", str(tmp_path / "h.png"), "--json", str(tmp_path / "lat.json")])
    out = capsys.readouterr().out
    assert rc == 0 and "PASS" in out and ("success 0/1" in out or "success 1/1" in out)
    assert (tmp_path / "h.png").stat().st_size > 0 and (tmp_path / "ev.json").is_file()
    e = str(tmp_path / "ens")
    assert main(["control", "train", "--demos", d, "--out", e, "--epochs", "1", "--heads", "3", "--ensemble", "2",
                 "--seed", "5", "--threads", "1"]) == 0
    assert "(2 heads)" in capsys.readouterr().out
    from frozenvit.control.policy import PolicyEnsemble, load_policy
    ens = load_policy(e)
    assert isinstance(ens, PolicyEnsemble) and ens.seeds == [5, 6]
    assert main(["control", "evaluate", "--policy", e, "--configs", "1", "--max-steps", "2"]) == 0
    assert "on held-out configurations" in capsys.readouterr().out
    w = str(tmp_path / "withcls")
    assert main(["control", "train", "--demos", d, "--out", w, "--epochs", "1", "--heads", "3", "--pos-code", "sincos",
                 "--query-diversity", "0.1", "--with-cls", "--keypoints", "--threads", "1"]) == 0
    pol = load_policy(w)
    assert (pol.pos_code, pol.query_diversity, pol.with_cls, pol.keypoints) == ("sincos", 0.1, True, True)
    # the agent feeds such a head the CLS token as well
    assert main(["control", "evaluate", "--policy", w, "--configs", "1", "--max-steps", "2"]) == 0


def test_demo_section_quick(tmp_path):
    from frozenvit.control.demo_section import section

    sec = section(DemoContext(out_dir=tmp_path, threads=1, quick=True))
    html = "\n".join(sec.blocks)
    assert sec.order == 40 and sec.title.startswith("Control")
    assert "Skipped" in html or ("<img" in html and "p99" in html and "success_rate" in html)


def test_demos_record_their_render_settings_and_policies_are_evaluated_with_them(demo_dir, bb, tmp_path, monkeypatch):
    import importlib
    import json

    from frozenvit.control import RenderSettings

    ev = importlib.import_module("frozenvit.control.evaluate")          # `control.evaluate` the attribute is the function

    m = load_manifest(demo_dir)
    assert m["render"] == RenderSettings().as_dict()
    d = tmp_path / "copy"
    shutil.copytree(demo_dir, d)
    with pytest.raises(DemoError, match="other settings"):          # simplified meshes would be another scene
        collect_demos("reach-v3", d, 3, image_size=64, max_steps=100, render=RenderSettings.simplified(),
                      progress=False)
    legacy = json.loads((d / "manifest.json").read_text())
    legacy.pop("render")                                             # written before settings were recorded
    (d / "manifest.json").write_text(json.dumps(legacy))
    assert load_manifest(d)["render"]["mesh_faces"] is None

    cache = cache_features(demo_dir, bb)
    pol = PatchTokenPolicy("mean", epochs=1, seed=0).fit(cache, progress=False)
    assert pol.meta_["render"] == m["render"]
    seen = []
    real = ev.MetaWorldTask
    monkeypatch.setattr(ev, "MetaWorldTask", lambda *a, **k: seen.append(k["render"]) or real(*a, **k))
    evaluate(pol, bb, config_seeds("heldout", 1), max_steps=2, parallel=1, progress=False)
    assert seen == [RenderSettings.from_dict(m["render"])]
