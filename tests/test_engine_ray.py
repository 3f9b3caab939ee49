"""engine="ray": one switch, local stays ray-free, named errors, and Ray runs equal local runs even when a
worker dies. The Ray runs start a local 2-CPU instance (a few seconds each).

A worker's death is injected from here, never by the product: `worker_dies_once` starts the Ray instance
with a worker setup hook that wraps the unit of work in every worker, and the first call to create the
flag file kills its worker (the retried call finds the file and goes on)."""
import contextlib
import subprocess
import sys
import time

import numpy as np
import pytest

from frozenvit.backbone.suite.engine import (ClusterUnreachable, EngineUnavailable, check_engine, import_ray,
                                             ray_session)
from frozenvit.backbone.suite.errors import UsageError


def _kill_once_hook(flag, target: str):
    """A Ray worker setup hook: wraps `target` ("module:Class.method" or "module:function") in the worker so
    that the first call anywhere creates `flag` and kills its worker; an exclusive create decides the race."""
    def hook():
        import functools
        import importlib
        import os

        module, _, path = target.partition(":")
        *owners, name = path.split(".")
        owner = importlib.import_module(module)
        for o in owners:
            owner = getattr(owner, o)
        work = getattr(owner, name)

        @functools.wraps(work)
        def dies_once(*args, **kw):
            try:
                open(flag, "x").close()
            except FileExistsError:
                return work(*args, **kw)
            os._exit(1)

        setattr(owner, name, dies_once)
    return hook


@contextlib.contextmanager
def worker_dies_once(flag, target: str, num_cpus: int = 2):
    """A local Ray instance (the library's calls run on it) whose first call of `target` kills its worker."""
    import ray

    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"worker_process_setup_hook": _kill_once_hook(str(flag), target)})
    try:
        yield
    finally:
        ray.shutdown()


def test_local_runs_never_import_ray():
    code = ("import sys\n"
            "import frozenvit.control.evaluate, frozenvit.forecasting, frozenvit.anomaly.patchcore\n"
            "import frozenvit.backbone.suite.cli as c\n"
            "c.build_parser()\n"
            "assert 'ray' not in sys.modules, 'ray imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_engine_names_are_checked():
    assert check_engine("local") == "local" and check_engine("ray") == "ray"
    with pytest.raises(UsageError, match="engine must be one of"):
        check_engine("dask")


def test_missing_ray_is_a_named_error_that_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)                    # `import ray` raises ImportError
    with pytest.raises(EngineUnavailable, match=r"frozenvit\[ray\]"):
        import_ray()


def test_an_address_that_does_not_answer_fails_fast_and_by_name():
    pytest.importorskip("ray")
    t = time.perf_counter()
    with pytest.raises(ClusterUnreachable, match="127.0.0.1:1"):
        with ray_session("127.0.0.1:1"):
            pass
    assert time.perf_counter() - t < 10


def test_the_cli_refuses_workers_without_ray(capsys):
    from frozenvit.backbone.suite.cli import main

    assert main(["control", "evaluate", "--policy", "nowhere", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "UsageError" in err and "--ray" in err


# ---- control evaluation on Ray actors ---------------------------------------------------------------
control = pytest.importorskip("frozenvit.control")


@pytest.fixture(scope="module")
def policy_and_bb(make_tiny_vit, tmp_path_factory):
    pytest.importorskip("metaworld")
    pytest.importorskip("ray")
    import torch

    torch.manual_seed(0)
    bb = make_tiny_vit()
    d = tmp_path_factory.mktemp("demos") / "reach"
    try:
        control.collect_demos("reach-v3", d, 2, image_size=64, max_steps=100, progress=False)
    except control.RenderUnavailable as e:
        pytest.skip(f"no headless OpenGL: {e}")
    pol = control.PatchTokenPolicy("attention", hidden=8, epochs=2).fit(control.cache_features(d, bb, progress=False))
    return pol, bb


@pytest.mark.slow
def test_ray_evaluation_equals_local_and_survives_a_dead_worker(policy_and_bb, tmp_path):
    pol, bb = policy_and_bb
    configs = control.config_seeds("heldout", 5)
    local = control.evaluate(pol, bb, configs, max_steps=15, parallel=2, progress=False)
    flag = tmp_path / "killed"
    journal = tmp_path / "r.episodes.jsonl"
    with worker_dies_once(flag, "frozenvit.control.evaluate:EvalWorker.run"):
        on_ray = control.evaluate(pol, bb, configs, max_steps=15, parallel=2, progress=False, engine="ray",
                                  workers=2, journal=journal)
    assert flag.exists()                                              # a worker did die
    assert on_ray.configs == local.configs
    assert on_ray.successes == local.successes and on_ray.steps == local.steps
    assert len(journal.read_text().splitlines()) == 1 + len(configs)  # every episode journaled once


@pytest.mark.slow
def test_a_ray_instance_started_for_a_call_is_gone_after_it():
    pytest.importorskip("ray")
    import ray

    with ray_session(num_cpus=1):
        assert ray.is_initialized()
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_second_ray_evaluation_in_one_session_reuses_the_actors_and_still_equals_local(policy_and_bb):
    import importlib

    ev = importlib.import_module("frozenvit.control.evaluate")
    pol, bb = policy_and_bb
    configs = control.config_seeds("heldout", 4)
    with ray_session(num_cpus=2) as ray:
        control.evaluate(pol, bb, configs, max_steps=15, parallel=2, progress=False, engine="ray", workers=2)
        pids = sorted(ray.get([a.ping.remote() for a in ev._actor_pool(ray, 2, 1)]))
        # another cap: the actors rebuild their environments, and the answers still equal a local run
        again = control.evaluate(pol, bb, configs, max_steps=12, parallel=2, progress=False, engine="ray", workers=2)
        assert sorted(ray.get([a.ping.remote() for a in ev._actor_pool(ray, 2, 1)])) == pids
    local = control.evaluate(pol, bb, configs, max_steps=12, parallel=2, progress=False)
    assert (again.successes, again.steps) == (local.successes, local.steps)


@pytest.mark.parametrize("n,workers,parallel", [(16, 2, 4), (5, 2, 2), (1, 3, 4), (100, 7, 8)])
def test_guided_chunks_cover_the_queue_never_exceed_parallel_and_shrink_to_one(n, workers, parallel):
    import importlib

    guided_chunk = importlib.import_module("frozenvit.control.evaluate").guided_chunk
    sizes, left = [], n
    while left:
        sizes.append(guided_chunk(left, workers, parallel))
        left -= sizes[-1]
    assert sum(sizes) == n and max(sizes) <= parallel
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1


# ---- anomaly scoring streamed through Ray Data --------------------------------------------------------
@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    from PIL import Image

    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("imgs")
    base = rng.integers(90, 110, (48, 64, 3), dtype=np.uint8)
    files = []
    for i in range(7):
        img = np.clip(base.astype(int) + rng.integers(-5, 6, base.shape), 0, 255).astype(np.uint8)
        if i >= 4:                                                    # three with a bright square
            img[10:20, 20 + i:30 + i] = 250
        Image.fromarray(img).save(d / f"im{i}.png")
        files.append(d / f"im{i}.png")
    return files


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:only 1 held-out normals")
def test_ray_scoring_streams_equal_scores_in_file_order_and_survives_a_dead_worker(make_tiny_vit, image_files,
                                                                                   tmp_path):
    pytest.importorskip("ray")
    import torch

    from frozenvit.anomaly import PatchCore
    from frozenvit.anomaly.stream import iter_scored

    torch.manual_seed(0)
    det = PatchCore(make_tiny_vit(), coreset_ratio=0.5, holdout=0.3).fit(image_files[:4])
    det.save(tmp_path / "model")
    test = image_files[2:]
    local = list(iter_scored(det, test, batch_size=2))
    with worker_dies_once(tmp_path / "killed", "frozenvit.anomaly.stream:_ScoringActor.__call__"):
        on_ray = list(iter_scored(det, test, batch_size=2, engine="ray", workers=2, model_dir=tmp_path / "model"))
    assert (tmp_path / "killed").exists()
    assert [s.path for s in on_ray] == [str(f) for f in test]
    np.testing.assert_allclose([s.score for s in on_ray], [s.score for s in local], rtol=1e-5, atol=1e-6)
    assert [s.is_defect for s in on_ray] == [s.is_defect for s in local]
    assert all(s.overlay_png.startswith(b"\x89PNG") for s in on_ray)
    assert min(s.score for s in local[2:]) > max(s.score for s in local[:2])   # the squares stand out


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:only 1 held-out normals")
def test_ray_scoring_of_an_ensemble_rebuilds_its_members_and_equals_local(image_files, tmp_path):
    """An ensemble (anomaly fit's default) has no single backbone to hand over: workers load it whole."""
    pytest.importorskip("ray")
    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
    from frozenvit.anomaly.stream import iter_scored
    from frozenvit.backbone import load_backbone

    members = [PatchCore(load_backbone("efficientnet_lite0", img_size=64), coreset_ratio=0.5),
               PatchCore(load_backbone(img_size=48), coreset_ratio=0.5, tile=1.0)]
    det = PatchCoreEnsemble(members, holdout=0.3, progress=False).fit(image_files[:4])
    det.save(tmp_path / "model")
    test = image_files[2:]
    local = list(iter_scored(det, test, batch_size=2))
    on_ray = list(iter_scored(det, test, batch_size=2, engine="ray", workers=2, model_dir=tmp_path / "model"))
    assert [s.path for s in on_ray] == [str(f) for f in test]
    np.testing.assert_allclose([s.score for s in on_ray], [s.score for s in local], rtol=1e-5, atol=1e-6)
    # the held-out normal among the test files scores exactly the threshold (its largest held-out score), where
    # threads' rounding may tip the decision: every other decision must agree
    t = det.decision_threshold()
    away = [abs(s.score - t) > 1e-4 for s in local]
    assert sum(away) >= 4
    assert [r.is_defect for r, a in zip(on_ray, away) if a] == [s.is_defect for s, a in zip(local, away) if a]


# ---- forecasting: the statistical models' fits as Ray tasks ------------------------------------------
@pytest.mark.slow
def test_ray_backtest_gives_the_same_forecasts_to_the_last_digit_and_survives_a_dead_worker(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("statsforecast")
    import pandas as pd

    from frozenvit.forecasting import ETS, SeasonalNaive, backtest

    rng = np.random.default_rng(0)
    t = np.arange(150)
    df = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t,
                                  "y": 10 + 3 * np.sin(2 * np.pi * t / 12 + i) + rng.normal(0, 0.5, t.size)})
                    for i in range(6)], ignore_index=True)
    models = [SeasonalNaive(12), ETS(12)]
    kw = dict(h=12, n_windows=2, season_length=12, levels=(80,), progress=False)
    local = backtest(df, models, **kw)
    with worker_dies_once(tmp_path / "killed", "frozenvit.forecasting.baselines:_fit_chunk"):
        on_ray = backtest(df, models, engine="ray", workers=2, **kw)
    assert (tmp_path / "killed").exists()
    pd.testing.assert_frame_equal(on_ray.forecasts_with_intervals(), local.forecasts_with_intervals(),
                                  check_exact=True)


@pytest.mark.slow
def test_forecast_backtest_with_ray_on_the_command_line_writes_what_the_local_run_writes(tmp_path):
    pytest.importorskip("ray")
    import json

    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    t = np.arange(80)
    pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": 5 + np.sin(t / 2 + i) + 0.1 * (t % 7)})
               for i in range(4)]).to_csv(tmp_path / "p.csv", index=False)
    cmd = ["forecast", "backtest", "--csv", str(tmp_path / "p.csv"), "--h", "6", "--windows", "2",
           "--season-length", "12", "--models", "snaive,naive"]
    assert main(cmd + ["--out", str(tmp_path / "local")]) == 0
    assert main(cmd + ["--out", str(tmp_path / "ray"), "--ray", "--workers", "2"]) == 0
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("local", "ray"))
    for rows in (a["summary"], b["summary"]):
        for r in rows:
            r.pop("seconds")                                          # wall time is all that may differ
    assert a["summary"] == b["summary"] and a["mase_by_horizon"] == b["mase_by_horizon"]
    assert (tmp_path / "local" / "forecasts.csv").read_bytes() == (tmp_path / "ray" / "forecasts.csv").read_bytes()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:only 1 held-out normals")
def test_anomaly_predict_with_ray_writes_the_local_scores_decisions_and_overlays(make_tiny_vit, image_files, tmp_path,
                                                                                monkeypatch):
    pytest.importorskip("ray")
    import csv

    import torch

    from frozenvit.anomaly import PatchCore
    from frozenvit.backbone.suite.cli import main

    torch.manual_seed(0)
    bb = make_tiny_vit()
    PatchCore(bb, coreset_ratio=0.5, holdout=0.3).fit(image_files[:4]).save(tmp_path / "m")
    real_load = PatchCore.load
    monkeypatch.setattr(PatchCore, "load",
                        classmethod(lambda cls, path, backbone=None, weights=None: real_load(path, backbone=bb)))
    folder = image_files[0].parent
    cmd = ["anomaly", "predict", "--model", str(tmp_path / "m"), "--images", str(folder), "--threshold", "0.5"]
    assert main(cmd + ["--out", str(tmp_path / "local")]) == 0
    assert main(cmd + ["--out", str(tmp_path / "ray"), "--ray", "--workers", "2"]) == 0
    a, b = (list(csv.DictReader(open(tmp_path / d / "scores.csv"))) for d in ("local", "ray"))
    assert [r["image"] for r in a] == [r["image"] for r in b] == sorted(f.name for f in image_files)
    np.testing.assert_allclose([float(r["score"]) for r in b], [float(r["score"]) for r in a], atol=2e-6)
    assert [(r["is_defect"], r["threshold"]) for r in a] == [(r["is_defect"], r["threshold"]) for r in b]
    assert {r["threshold"] for r in b} == {"0.500000"}                # the override reached the Ray actors
    assert sorted(p.name for p in (tmp_path / "ray" / "overlays").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local" / "overlays").iterdir())


@pytest.mark.slow
def test_ray_backtest_trains_each_neural_model_as_one_task_with_the_local_weights(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    import pandas as pd
    import torch

    from frozenvit.forecasting import DLinear, Ensemble, SeasonalNaive, backtest
    from frozenvit.forecasting.remote import GlobalRuns

    taken, take = [], GlobalRuns.take

    def spy(self, model):
        got = take(self, model)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(GlobalRuns, "take", spy)

    rng = np.random.default_rng(1)
    t = np.arange(120)
    df = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t,
                                  "y": 5 + 2 * np.sin(2 * np.pi * t / 12 + i) + rng.normal(0, 0.3, t.size)})
                    for i in range(5)], ignore_index=True)
    net = DLinear(h=12, input_size=24, max_epochs=2, batch_size=16, seed=0)
    models = [SeasonalNaive(12), net, Ensemble([SeasonalNaive(12), net], how="median")]
    kw = dict(h=12, n_windows=2, season_length=12, levels=(80,), progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = backtest(df, models, **kw)
        with worker_dies_once(tmp_path / "killed", "frozenvit.forecasting.remote:_train_and_forecast"):
            on_ray = backtest(df, models, engine="ray", workers=2, **kw)
    finally:
        torch.set_num_threads(threads)
    assert (tmp_path / "killed").exists()
    pd.testing.assert_frame_equal(on_ray.forecasts_with_intervals(), local.forecasts_with_intervals(),
                                  check_exact=True)
    assert sum(taken) == 1                # DLinear came back from its one task; the ensemble reused it


@pytest.mark.slow
def test_forecast_predict_with_ray_writes_what_the_local_run_writes(tmp_path):
    pytest.importorskip("ray")
    import pandas as pd

    from frozenvit.backbone.suite.cli import main

    t = np.arange(80)
    pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": t, "y": 5 + np.sin(t / 2 + i) + 0.1 * (t % 7)})
               for i in range(4)]).to_csv(tmp_path / "p.csv", index=False)
    cmd = ["forecast", "predict", "--csv", str(tmp_path / "p.csv"), "--h", "6", "--season-length", "12",
           "--models", "snaive,ets,auto", "--levels", "80", "--max-epochs", "1"]
    assert main(cmd + ["--out", str(tmp_path / "local")]) == 0
    assert main(cmd + ["--out", str(tmp_path / "ray"), "--ray", "--workers", "2"]) == 0
    assert (tmp_path / "local" / "forecasts.csv").read_bytes() == (tmp_path / "ray" / "forecasts.csv").read_bytes()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:only")
def test_anomaly_ensemble_on_ray_takes_its_members_backbones_from_this_process(make_tiny_vit, image_files, tmp_path):
    """Workers get the members' backbones through the object store: a model whose backbones the artifact cannot
    rebuild (random weights here; a weights file moved since, given again with --weights, on the command line)
    scores on Ray as it does here."""
    pytest.importorskip("ray")
    import torch

    from frozenvit.anomaly import PatchCore, PatchCoreEnsemble
    from frozenvit.anomaly.stream import iter_scored

    torch.manual_seed(0)
    a, b = make_tiny_vit(), make_tiny_vit(seed=1)
    ens = PatchCoreEnsemble([PatchCore(a, coreset_ratio=0.5, holdout=0.3), PatchCore(b, coreset_ratio=0.5, holdout=0.3)])
    ens.fit(image_files[:4]).save(tmp_path / "m")
    local = [s.score for s in iter_scored(ens, image_files, overlays=False)]
    ray = [s.score for s in iter_scored(ens, image_files, overlays=False, engine="ray", workers=1,
                                        model_dir=tmp_path / "m")]
    np.testing.assert_allclose(ray, local, atol=2e-6)
