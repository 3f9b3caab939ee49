"""engine="ray": one switch, local stays ray-free, named errors, and Ray runs equal local runs even when a
worker dies. The Ray runs start a local 2-CPU instance (a few seconds each)."""
import os
import subprocess
import sys
import time

import pytest

from frozenvit.backbone.suite.engine import (ClusterUnreachable, EngineUnavailable, check_engine, import_ray,
                                             ray_session)
from frozenvit.backbone.suite.errors import UsageError


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
def test_ray_evaluation_equals_local_and_survives_a_dead_worker(policy_and_bb, tmp_path, monkeypatch):
    from frozenvit.control.evaluate import KILL_ONCE_ENV

    pol, bb = policy_and_bb
    configs = control.config_seeds("heldout", 5)
    local = control.evaluate(pol, bb, configs, max_steps=15, parallel=2, progress=False)
    flag = tmp_path / "killed"
    monkeypatch.setenv(KILL_ONCE_ENV, str(flag))                     # the first call on any worker kills it
    journal = tmp_path / "r.episodes.jsonl"
    on_ray = control.evaluate(pol, bb, configs, max_steps=15, parallel=2, progress=False, engine="ray", workers=2,
                              journal=journal)
    assert flag.exists()                                              # a worker did die
    assert on_ray.configs == local.configs
    assert on_ray.successes == local.successes and on_ray.steps == local.steps
    assert len(journal.read_text().splitlines()) == 1 + len(configs)  # every episode journaled once
    import ray

    assert not ray.is_initialized()                                   # the instance started for the call is gone
