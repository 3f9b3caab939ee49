"""Demos -> feature cache -> policy -> held-out evaluation and loop latency, on a real Meta-World env
with a tiny random ViT; plus the CLI and the demo section end to end. Every test here renders."""
import json
import os
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("metaworld")

from frozenvit.backbone.suite.report import DemoContext  # noqa: E402
from frozenvit.control import (AttentionConfig, DemoError, MetaWorldTask, PatchTokenPolicy, RenderUnavailable,  # noqa: E402
                               UntrainedHead, VisuomotorAgent, cache_features, collect_demos, config_seeds,
                               default_blocks, evaluate, iter_episodes, load_manifest, measure_latency)
from frozenvit.control.defaults import DEFAULT_CHUNK  # noqa: E402
from frozenvit.control.latency import STAGES  # noqa: E402
from frozenvit.control.features import block_label, token_blocks  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bb(make_tiny_vit):
    torch.manual_seed(0)
    return make_tiny_vit()


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("demos") / "reach"
    try:
        collect_demos("reach-v3", d, 2, image_size=64, max_steps=100, hold_steps=0, progress=False)
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
    d = collect_demos("reach-v3", tmp_path / "d", 1, image_size=32, max_steps=44, hold_steps=0, expert="metaworld",
                      progress=False)
    m = load_manifest(d)                                           # Meta-World's expert needs 41..52 steps on reach
    assert m["failed_configs"] and all(e["steps"] < 44 for e in m["episodes"])
    with pytest.raises(DemoError, match="max_steps"):
        collect_demos("reach-v3", tmp_path / "e", 1, image_size=32, max_steps=1, max_failures=0, progress=False)


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
            assert s.success == (s.steps >= len(short)), s.steps  # up from the first success, and it stays up
        assert not s.done


def test_collect_resumes_without_rerecording_and_refuses_other_settings(demo_dir, tmp_path):
    d = tmp_path / "copy"
    shutil.copytree(demo_dir, d)
    before = {p.name: p.stat().st_mtime_ns for p in (d / "episodes").iterdir()}
    collect_demos("reach-v3", d, 3, image_size=64, max_steps=100, hold_steps=0, progress=False)
    after = {p.name: p.stat().st_mtime_ns for p in (d / "episodes").iterdir()}
    assert len(after) == 3 and all(after[k] == v for k, v in before.items())
    with pytest.raises(DemoError, match="other settings"):
        collect_demos("reach-v3", d, 3, image_size=32, max_steps=100, hold_steps=0, progress=False)
    with pytest.raises(DemoError, match="hold_steps"):                # demos collected before the default held them
        collect_demos("reach-v3", d, 3, image_size=64, max_steps=100, progress=False)


def test_feature_cache_holds_the_encoder_tokens_and_is_reused(demo_dir, bb, monkeypatch):
    cache = cache_features(demo_dir, bb, block=0)
    b = 0
    assert cache.meta["block"] == b
    ep = next(iter_episodes(demo_dir))
    direct = bb.patch_grids(list(ep.frames[:3]), blocks=(b,))[b].flatten(2).transpose(1, 2)   # (3, N, C)
    torch.testing.assert_close(cache.tokens[:3].float(), direct, atol=2e-3, rtol=1e-2)       # float16 storage
    last = cache_features(demo_dir, bb)                    # default of a 4-block encoder: the last block alone
    assert default_blocks(bb.config.depth) == (3,) and last.meta["block"] == 3
    torch.testing.assert_close(last.cls[:3].float(), bb.patch_grids(list(ep.frames[:3]), blocks=(-1,)).cls(3),
                               atol=2e-3, rtol=1e-2)
    assert len(cache) == sum(len(e) for e in iter_episodes(demo_dir))
    monkeypatch.setattr(type(bb), "patch_grids", lambda *a, **k: pytest.fail("re-encoded a cached frame"))
    again = cache_features(demo_dir, bb, block=0)
    assert torch.equal(again.tokens, cache.tokens)


def test_several_blocks_lay_their_tokens_side_by_side_in_cache_agent_and_policy(demo_dir, bb, tmp_path):
    one, three = cache_features(demo_dir, bb, block=1, views=2), cache_features(demo_dir, bb, block=3, views=2)
    both = cache_features(demo_dir, bb, block=(3, 1), views=2)
    assert both.meta["block"] == [3, 1] and token_blocks(both.meta) == [3, 1] and block_label(both.meta) == "3-1"
    assert both.meta["embed_dim"] == 2 * bb.config.embed_dim
    C = bb.config.embed_dim
    for name in ("tokens", "cls", "view_tokens", "view_cls"):          # the augmented views draw the same shifts
        a = getattr(both, name)
        assert torch.equal(a[..., :C], getattr(three, name)) and torch.equal(a[..., C:], getattr(one, name))
    torch.manual_seed(0)
    pol = PatchTokenPolicy("attention", hidden=8, epochs=2).fit(both)
    pol.save(tmp_path / "p")
    assert pol.head_.cfg.norm_groups == 2 and json.loads((tmp_path / "p" / "config.json").read_text())["head"]["norm_groups"] == 2
    agent = VisuomotorAgent(PatchTokenPolicy.load(tmp_path / "p"), bb)
    assert agent.policy.head_.cfg.norm_groups == 2
    frames = list(next(iter_episodes(demo_dir)).frames[:3])
    tokens, _ = agent.encode(frames)                                  # what the loop feeds the head at run time
    torch.testing.assert_close(tokens.half(), both.tokens[:3], atol=2e-3, rtol=1e-2)
    assert agent.act(frames, np.zeros((3, 4), np.float32)).shape == (3, 4)
    assert cache_features(demo_dir, bb, block=3).meta["block"] == 3   # one block: an int, as in older caches


def acting_alone(agent, frames, prop):
    """Each frame acted on in a call of its own, in its own environment slot: (B, 4)."""
    return np.concatenate([agent.act([f], p[None], slots=[i]) for i, (f, p) in enumerate(zip(frames, prop))])


@pytest.mark.parametrize("chunk", [1, DEFAULT_CHUNK], ids=["one action", "default chunks"])
def test_agent_acting_for_several_environments_equals_acting_for_each_alone(demo_dir, bb, chunk):
    agent = VisuomotorAgent(UntrainedHead(bb, chunk=chunk), bb)
    frames = list(next(iter_episodes(demo_dir)).frames[:6])
    prop = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    together = [agent.act(frames, prop), agent.act(frames[::-1], prop)]                 # two steps of 6 slots
    agent.reset()
    alone = [acting_alone(agent, frames, prop), acting_alone(agent, frames[::-1], prop)]
    for t, a in zip(together, alone):
        np.testing.assert_array_equal(t, a)                           # bit for bit: see control.agent._row_by_row
    assert not np.allclose(together[0][0], together[0][1])            # the frames and proprio matter
    assert (chunk == 1) == np.array_equal(together[1], agent.act(frames[::-1], prop))   # chunks: the past matters


@pytest.mark.parametrize("chunk", [1, DEFAULT_CHUNK], ids=["one action", "default chunks"])
def test_a_trained_heads_actions_do_not_depend_on_the_batch_they_share(demo_dir, bb, chunk):
    """An episode's outcome must not depend on which episodes share its lockstep step or Ray chunk."""
    torch.manual_seed(0)
    pol = PatchTokenPolicy("attention", hidden=8, epochs=2, chunk=chunk).fit(
        cache_features(demo_dir, bb, progress=False))
    agent = VisuomotorAgent(pol, bb)
    frames = list(next(iter_episodes(demo_dir)).frames[:5])
    prop = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    tokens, _ = agent.encode(frames)
    alone_tokens = torch.cat([agent.encode([f])[0] for f in frames])
    assert torch.equal(tokens, alone_tokens)                          # the encoder's rows are batch-invariant
    together = agent.act(frames, prop)
    agent.reset()
    np.testing.assert_array_equal(together, acting_alone(agent, frames, prop))
    agent.reset()
    np.testing.assert_array_equal(together[2:4], agent.act(frames[2:4], prop[2:4], slots=[2, 3]))


def test_evaluate_reports_every_heldout_configuration(demo_dir, bb, tmp_path):
    cache = cache_features(demo_dir, bb)
    pol = PatchTokenPolicy("attention", AttentionConfig(heads=3), epochs=2, seed=0).fit(cache, progress=False)
    configs = config_seeds("heldout", 3)
    res = evaluate(pol, bb, configs, max_steps=4, parallel=2, gif_dir=tmp_path, gif_episodes=1, progress=False)
    assert res.task == "reach-v3" and res.configs == configs
    assert res.successes == [False] * 3 and res.steps == [4] * 3     # reach needs 37+ steps: the cap ends them
    assert res.success_rate == 0.0 and res.to_dict()["success_rate"] == 0.0
    assert len(res.gifs) == 1 and os.path.getsize(res.gifs[0]) > 0


def test_a_stopped_evaluation_resumes_from_its_journal_and_ends_as_an_uninterrupted_one(demo_dir, bb, tmp_path,
                                                                                       monkeypatch):
    from frozenvit.control.evaluate import EpisodeJournal

    cache = cache_features(demo_dir, bb)
    pol = PatchTokenPolicy("mean", epochs=2, seed=0).fit(cache, progress=False)
    configs = config_seeds("heldout", 3)
    whole = evaluate(pol, bb, configs, max_steps=20, parallel=1, progress=False)
    journal = tmp_path / "ev.episodes.jsonl"
    real_append = EpisodeJournal.append

    def die_after_the_first(self, *a):
        real_append(self, *a)
        raise KeyboardInterrupt

    monkeypatch.setattr(EpisodeJournal, "append", die_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        evaluate(pol, bb, configs, max_steps=20, parallel=1, journal=journal, progress=False)
    monkeypatch.setattr(EpisodeJournal, "append", real_append)
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["config"] == configs[0]
    with open(journal, "a") as f:
        f.write('{"config": 10000')                                    # a line the kill cut short
    resets = []
    real_reset = MetaWorldTask.reset
    monkeypatch.setattr(MetaWorldTask, "reset", lambda self, c: resets.append(c) or real_reset(self, c))
    again = evaluate(pol, bb, configs, max_steps=20, parallel=1, journal=journal, progress=False)
    assert resets == configs[1:]                                      # the finished episode is not rolled out again
    assert (again.successes, again.steps) == (whole.successes, whole.steps)
    assert [json.loads(ln)["config"] for ln in journal.read_text().splitlines()[1:]] == configs
    more = config_seeds("heldout", 4)
    resets.clear()                                                    # more configurations reuse the journal's
    res = evaluate(pol, bb, more, max_steps=20, journal=journal, progress=False)
    assert resets == more[3:] and res.configs == more
    assert [json.loads(ln)["config"] for ln in journal.read_text().splitlines()[1:]] == more
    other = PatchTokenPolicy("mean", epochs=2, seed=1).fit(cache, progress=False)
    with pytest.warns(UserWarning, match="policy differs"):
        evaluate(other, bb, more, max_steps=20, journal=journal, progress=False)


def test_measure_latency_times_every_stage_of_the_loop(bb):
    pol = UntrainedHead(bb, block=-1)
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


def test_a_chunked_head_acts_in_the_timed_loop_and_is_reset_at_each_episode(bb, monkeypatch):
    pol = UntrainedHead(bb, block=-1, chunk=4)
    try:
        env = MetaWorldTask("reach-v3", image_size=64, max_steps=3)
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    agent = VisuomotorAgent(pol, bb)
    resets = []
    real = agent.reset
    monkeypatch.setattr(agent, "reset", lambda slots=None: resets.append(slots) or real(slots))
    with env:
        rep = measure_latency(agent, env, steps=5, warmup=2)           # 7 steps: three episodes of <= 3
    assert rep.total.shape == (5,) and rep.meta["chunk"] == 4 and resets == [None, None, None]


def test_cli_collect_train_evaluate_latency(tmp_path, bb, monkeypatch, capsys):
    from frozenvit.backbone.suite.cli import main
    from frozenvit.control import encoders
    from frozenvit.control.cli import OVER_BUDGET

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: bb)
    monkeypatch.setenv("FROZENVIT_PROGRESS_SECONDS", "0")            # a progress line per epoch / episode
    d, p = str(tmp_path / "demos"), str(tmp_path / "pol")
    assert main(["control", "collect", "--task", "reach-v3", "--out", d, "--episodes", "1", "--image-size", "32",
                 "--max-steps", "100"]) == 0
    assert main(["control", "train", "--demos", d, "--out", p, "--epochs", "2", "--heads", "3", "--threads", "1"]) == 0
    ev, lat = tmp_path / "ev", tmp_path / "lat"
    assert main(["control", "evaluate", "--policy", p, "--configs", "1", "--max-steps", "3", "--out", str(ev),
                 "--gifs", "1"]) == 0
    rc = main(["control", "latency", "--policy", p, "--steps", "4", "--warmup", "1", "--budget-ms", "100000",
               "--out", str(lat)])
    out, err = capsys.readouterr()
    assert rc == 0 and "PASS" in out and "success 0/1" in out          # 3 steps cannot reach the goal
    assert "bc attention: 1/2 epoch" in err and "bc attention: 2/2 epoch" in err   # visible in a log file
    assert "eval reach-v3: 1/1 ep" in err
    assert sorted(f.name for f in lat.iterdir()) == [".frozenvit.json", "histogram.png", "latency.json"]
    assert sorted(f.name for f in ev.iterdir()) == [".frozenvit.json", "episodes.jsonl", "gifs", "results.json"]
    assert json.loads((ev / "results.json").read_text())["success_rate"] == 0.0
    assert len(list((ev / "gifs").glob("*.gif"))) == 1
    journal = ev / "episodes.jsonl"
    lines = [json.loads(ln) for ln in journal.read_text().splitlines()[1:]]
    assert [r["config"] for r in lines if "gif" not in r] == config_seeds("heldout", 1)
    assert [r["gif"] for r in lines if "gif" in r] == config_seeds("heldout", 1)   # the GIF it wrote, listed
    assert main(["control", "latency", "--policy", p, "--steps", "2", "--warmup", "0", "--budget-ms", "0.001",
                 "--out", str(lat)]) == OVER_BUDGET == 3                # over budget: its own exit status
    assert "FAIL" in capsys.readouterr().out

    pol = PatchTokenPolicy.load(p)
    assert pol.attention == AttentionConfig(heads=3) and pol.epochs == 2
    c = str(tmp_path / "c")
    assert main(["control", "train", "--demos", d, "--out", c, "--pooling", "cls", "--epochs", "1",
                 "--threads", "1"]) == 0
    assert PatchTokenPolicy.load(c).attention is None
    assert main(["control", "evaluate", "--policy", c, "--configs", "1", "--max-steps", "2"]) == 0   # CLS fed
    two = str(tmp_path / "twoblocks")                                 # an intermediate block beside the last
    assert main(["control", "train", "--demos", d, "--out", two, "--epochs", "1", "--heads", "3",
                 "--blocks", "1,3", "--threads", "1"]) == 0
    assert "blocks 1-3" in capsys.readouterr().out
    assert PatchTokenPolicy.load(two).meta_["block"] == [1, 3]
    assert main(["control", "evaluate", "--policy", two, "--configs", "1", "--max-steps", "2"]) == 0
    capsys.readouterr()
    ck = str(tmp_path / "chunked")                                    # action chunks: trained, evaluated, timed
    assert main(["control", "train", "--demos", d, "--out", ck, "--epochs", "1", "--heads", "3", "--chunk", "4",
                 "--threads", "1"]) == 0
    chunked = PatchTokenPolicy.load(ck)
    assert (chunked.chunk, chunked.head_.cfg.chunk) == (4, 4)
    assert main(["control", "evaluate", "--policy", ck, "--configs", "1", "--max-steps", "3"]) == 0
    assert main(["control", "latency", "--policy", ck, "--steps", "3", "--warmup", "1",
                 "--out", str(tmp_path / "lat4")]) == 0
    assert json.loads((tmp_path / "lat4" / "latency.json").read_text())["summary"]["chunk"] == 4
    capsys.readouterr()


def test_cli_evaluate_resumes_a_finished_run_and_replaces_another_configuration_set(tmp_path, bb, demo_dir,
                                                                                   monkeypatch, capsys):
    from frozenvit.backbone.suite.cli import main
    from frozenvit.control import encoders

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: bb)
    p, ev = str(tmp_path / "pol"), str(tmp_path / "ev")
    PatchTokenPolicy("mean", epochs=1).fit(cache_features(demo_dir, bb), progress=False).save(p)
    cmd = ["control", "evaluate", "--policy", p, "--configs", "2", "--max-steps", "3", "--out", ev]
    assert main(cmd) == 0
    journal = tmp_path / "ev" / "episodes.jsonl"
    first = journal.read_text()
    resets = []
    real_reset = MetaWorldTask.reset
    monkeypatch.setattr(MetaWorldTask, "reset", lambda self, c: resets.append(c) or real_reset(self, c))
    assert main(cmd) == 0 and resets == []                             # nothing left to roll out
    assert journal.read_text() == first and "success 0/2" in capsys.readouterr().out
    before = sorted(f.name for f in (tmp_path / "ev").iterdir())
    assert main(cmd[:5] + ["3"] + cmd[6:]) == 0                       # --configs 3 on the same --out: reused
    assert "success 0/3" in capsys.readouterr().out
    assert sorted(f.name for f in (tmp_path / "ev").iterdir()) == before
    assert len(journal.read_text().splitlines()) == 1 + 3
    assert json.loads((tmp_path / "ev" / "results.json").read_text())["configs"] == config_seeds("heldout", 3)


def test_random_weights_without_a_backbone_are_recorded_and_evaluated_at_the_policys_size(tmp_path, demo_dir,
                                                                                          capsys):
    """The real load_encoder: the default's architecture, random (seeded) weights, built at the policy's size."""
    from frozenvit.backbone import default_spec
    from frozenvit.backbone.suite.cli import main

    d, p = tmp_path / "demos", str(tmp_path / "pol")
    shutil.copytree(demo_dir, d)
    assert main(["control", "train", "--demos", str(d), "--out", p, "--random-weights", "--image-size", "64",
                 "--epochs", "1", "--hidden", "8", "--threads", "1"]) == 0
    assert "RANDOM weights 64px" in capsys.readouterr().out
    meta = PatchTokenPolicy.load(p).meta_
    assert meta["pretrained"] is False and meta["img_size"] == [64, 64] and meta["backbone"] == default_spec()["arch"]
    assert meta["fingerprint"] != default_spec()["sha256"]            # not the shipped weights
    assert main(["control", "evaluate", "--policy", p, "--random-weights", "--configs", "1", "--max-steps", "2"]) == 0
    assert "success 0/1" in capsys.readouterr().out                    # rebuilt at 64 px, not the default's 224
    assert main(["control", "latency", "--policy", p, "--random-weights", "--steps", "2", "--warmup", "0"]) == 0
    assert "at 64px" in capsys.readouterr().out
    assert main(["control", "evaluate", "--policy", p, "--configs", "1", "--max-steps", "2"]) == 2
    assert "ArtifactError" in capsys.readouterr().err                 # the pretrained default is another backbone


def test_demo_section_quick(tmp_path):
    from frozenvit.control.demo_section import section

    try:
        MetaWorldTask("reach-v3", image_size=32).close()
    except RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    sec = section(DemoContext(out_dir=tmp_path, threads=1, quick=True))
    html = "\n".join(sec.blocks)
    assert sec.order == 40 and sec.title.startswith("Control")
    assert "Skipped" not in html
    assert html.count("<img") == 2 and "p99" in html and "success_rate" in html   # latency histogram, attention map
    assert "tiny RANDOM-weight ViT (quick mode)" in html


def test_demos_record_their_render_settings_and_policies_are_evaluated_with_them(demo_dir, bb, tmp_path, monkeypatch):
    import importlib

    from frozenvit.control import RenderSettings

    ev = importlib.import_module("frozenvit.control.evaluate")          # `control.evaluate` the attribute is the function

    m = load_manifest(demo_dir)
    assert m["render"] == RenderSettings().as_dict()
    d = tmp_path / "copy"
    shutil.copytree(demo_dir, d)
    with pytest.raises(DemoError, match="other settings"):          # Meta-World's look is another scene
        collect_demos("reach-v3", d, 3, image_size=64, max_steps=100, render=RenderSettings.metaworld(),
                      progress=False)
    legacy = json.loads((d / "manifest.json").read_text())
    legacy.pop("render")                                             # a manifest without its settings
    (d / "manifest.json").write_text(json.dumps(legacy))
    with pytest.raises(DemoError, match="lacks render.*re-collect"):
        load_manifest(d)

    cache = cache_features(demo_dir, bb)
    pol = PatchTokenPolicy("mean", epochs=1, seed=0).fit(cache, progress=False)
    assert pol.meta_["render"] == m["render"]
    seen = []
    real = ev.MetaWorldTask
    monkeypatch.setattr(ev, "MetaWorldTask", lambda *a, **k: seen.append(k["render"]) or real(*a, **k))
    evaluate(pol, bb, config_seeds("heldout", 1), max_steps=2, parallel=1, progress=False)
    assert seen == [RenderSettings.from_dict(m["render"])]


def test_the_fast_encoder_by_name_and_policies_trained_on_it_bring_it_back(tmp_path, demo_dir, capsys):
    """`--backbone metaworld-fast` names the shipped fast encoder; evaluate/latency pick it from the policy's
    fingerprint."""
    from frozenvit.backbone.suite.cli import main
    from frozenvit.control.encoders import FAST_ENCODER_SHA256, FAST_ENCODER_SIZE

    d, p = tmp_path / "demos", str(tmp_path / "pol")
    shutil.copytree(demo_dir, d)
    assert main(["control", "train", "--demos", str(d), "--out", p, "--backbone", "metaworld-fast", "--epochs", "1",
                 "--hidden", "8", "--threads", "1"]) == 0
    assert f"{FAST_ENCODER_SIZE}px" in capsys.readouterr().out
    meta = PatchTokenPolicy.load(p).meta_
    assert meta["fingerprint"] == FAST_ENCODER_SHA256 and meta["img_size"] == [FAST_ENCODER_SIZE] * 2
    assert main(["control", "evaluate", "--policy", p, "--configs", "1", "--max-steps", "2"]) == 0
    assert "success 0/1" in capsys.readouterr().out
    assert main(["control", "evaluate", "--policy", p, "--backbone", "embedded", "--configs", "1",
                 "--max-steps", "2"]) == 2
    assert "ArtifactError" in capsys.readouterr().err                 # asked for the other encoder: refused
    assert main(["control", "latency", "--backbone", "metaworld-fast", "--image-size", "64", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "UsageError" in err and "--image-size" in err


def test_collect_renders_at_the_encoders_input_size(tmp_path):
    from frozenvit.backbone.suite.cli import main
    from frozenvit.control.encoders import FAST_ENCODER_SIZE

    out = tmp_path / "d"
    assert main(["control", "collect", "--task", "reach-v3", "--out", str(out), "--episodes", "1",
                 "--backbone", "metaworld-fast", "--max-steps", "100"]) == 0
    ep = next(iter_episodes(out))
    assert ep.frames.shape[1:] == (FAST_ENCODER_SIZE, FAST_ENCODER_SIZE, 3)


def test_demos_go_on_past_success_by_default_in_the_library_and_the_cli():
    # held demos lifted both heads on the test set (lab/control-results.md, "Held demos on the test set"): both
    # entry points record the same 20 steps past the first success unless told otherwise
    import inspect

    from frozenvit.backbone.suite.cli import build_parser
    from frozenvit.control.defaults import DEFAULT_HOLD_STEPS

    assert DEFAULT_HOLD_STEPS == 20
    assert inspect.signature(collect_demos).parameters["hold_steps"].default == DEFAULT_HOLD_STEPS
    parse = build_parser().parse_args
    assert parse(["control", "collect", "--task", "reach-v3", "--out", "d"]).hold_steps == DEFAULT_HOLD_STEPS
    assert parse(["control", "collect", "--task", "reach-v3", "--out", "d", "--hold-steps", "0"]).hold_steps == 0


def test_cli_evaluate_that_replaces_another_removes_its_gifs(tmp_path, bb, demo_dir,
                                                               monkeypatch, capsys):
    from frozenvit.backbone.suite.cli import main
    from frozenvit.control import encoders

    monkeypatch.setattr(encoders, "load_encoder", lambda *a, **k: bb)
    p, ev = str(tmp_path / "pol"), tmp_path / "ev"
    PatchTokenPolicy("mean", epochs=1).fit(cache_features(demo_dir, bb), progress=False).save(p)
    cmd = ["control", "evaluate", "--policy", p, "--max-steps", "2", "--out", str(ev)]
    assert main(cmd + ["--configs", "3", "--gifs", "3"]) == 0
    first = sorted(f.name for f in (ev / "gifs").iterdir())
    assert len(first) == 3
    assert main(cmd + ["--configs", "3", "--gifs", "1"]) == 0          # the same evaluation: its GIFs stand
    assert sorted(f.name for f in (ev / "gifs").iterdir()) == first
    capsys.readouterr()
    with pytest.warns(UserWarning, match="max_steps differs"):
        assert main(cmd[:5] + ["3"] + cmd[6:] + ["--configs", "3", "--gifs", "1"]) == 0
    assert "removed 3 GIFs and results.json of the evaluation this one replaced" in capsys.readouterr().out
    res = json.loads((ev / "results.json").read_text())
    assert sorted(f.name for f in (ev / "gifs").iterdir()) == first[:1] and len(res["gifs"]) == 1
