"""`frozenvit control ...` shows the library's defaults (read from it, never repeated) and documents its exit status."""
import inspect

import pytest

from frozenvit.backbone.suite.cli import build_parser, main
from frozenvit.control import AttentionConfig, PatchTokenPolicy, collect_demos, evaluate, measure_latency


def defaults(fn, *names):
    params = inspect.signature(fn).parameters
    return tuple(params[n].default for n in names)


def test_every_commands_defaults_are_the_librarys():
    parse = build_parser().parse_args
    col = parse(["control", "collect", "--task", "reach-v3", "--out", "d"])
    assert (col.max_steps, col.hold_steps, col.expert, col.camera) == defaults(
        collect_demos, "max_steps", "hold_steps", "expert", "camera")
    tr = parse(["control", "train", "--demos", "d", "--out", "o"])
    params = PatchTokenPolicy().get_params()
    names = ("pooling", "hidden", "epochs", "batch_size", "lr", "seed", "chunk", "precision")
    assert {k: getattr(tr, k) for k in names} == {k: params[k] for k in names}
    assert (tr.queries, tr.heads) == (AttentionConfig().queries, AttentionConfig().heads)
    ev = parse(["control", "evaluate", "--policy", "p"])
    assert (ev.max_steps, ev.parallel) == defaults(evaluate, "max_steps", "parallel")
    lat = parse(["control", "latency"])
    assert (lat.steps, lat.warmup, lat.pooling, lat.chunk) == defaults(measure_latency, "steps", "warmup") + (
        params["pooling"], params["chunk"])


def test_latency_help_names_its_over_budget_exit_status(capsys):
    from frozenvit.control.cli import OVER_BUDGET

    with pytest.raises(SystemExit):
        main(["control", "latency", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert OVER_BUDGET not in (0, 1, 2) and f"Exit status {OVER_BUDGET} when p99 is over --budget-ms" in text
