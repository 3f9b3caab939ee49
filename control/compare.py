"""Paired comparison of evaluation runs on the same held-out episodes, and merging runs split between processes.

A run is a dict (the JSON benchmarks/control_success.py writes):

    {"settings": {"tasks": [...], "seeds": [...], "configs": 50, "max_steps": 500, ...,
                  "demonstrators": {"reach-v3": "servo", ...}},
     "results": [{"task": "reach-v3", "pooling": "attention", "seed": 0, "success_rate": 0.75,
                  "per_config": [true, false, ...]}, ...]}

`per_config[i]` is the outcome of the i-th held-out configuration, seed heldout_seeds[0] + i. Two heads rolled
out on the same task, the same configurations, cap and demos met the same simulated episodes, so their outcomes
pair episode by episode and the exact McNemar test compares them with far fewer episodes than two independent
success rates need (it treats the trained heads as fixed: seed-to-seed variation is in `summarize`'s by_seed).
Runs of different lengths pair on the configurations they share. `max_steps` is one cap, or {task: cap} in a run
merged from parts with other caps.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from math import comb
from typing import Any, Mapping, Sequence

from frozenvit.backbone.suite.errors import FrozenVitError

# the settings that must be equal for two runs' episodes to be the same episodes (and each shared task's
# demonstrator, settings["demonstrators"][task])
# (each shared task's cap, `task_cap`); runs pair on the held-out configurations they share (`run_configs`)
EPISODE_SETTINGS = ("demos", "hold_steps", "encoder", "weights_sha256", "camera", "demo_size", "render")


class RunMismatch(FrozenVitError, ValueError):
    """Runs that cannot be paired or merged: other episodes, other settings, or results that overlap."""


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test of two paired binary outcomes."""
    a_only: int      # pairs where only a succeeded
    b_only: int      # pairs where only b succeeded
    p: float         # exact two-sided p-value

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """Exact McNemar test of outcomes a[i], b[i] of the same episode i.

    Only the discordant pairs count: under the null hypothesis each is won by a or by b with probability 1/2, so
    p = P(|X - n/2| >= |a_only - n/2|) for X ~ Binomial(n = a_only + b_only, 1/2), i.e. twice the smaller tail,
    at most 1 (scipy.stats.binomtest(a_only, n).pvalue). No discordant pair: p = 1. RunMismatch (a ValueError)
    when the lengths differ.
    """
    if len(a) != len(b):
        raise RunMismatch(f"paired outcomes need the same episodes: {len(a)} against {len(b)}; pair the outcomes "
                          "of the configurations both runs share (for `control evaluate` results: the same "
                          "'configs', task and cap)")
    a_only = sum(bool(x) and not bool(y) for x, y in zip(a, b))
    b_only = sum(bool(y) and not bool(x) for x, y in zip(a, b))
    n = a_only + b_only
    tail = sum(comb(n, k) for k in range(min(a_only, b_only) + 1))      # exact integers, then one division
    return McNemar(a_only, b_only, min(1.0, 2 * tail / 2 ** n))


def paired_test(results: Sequence[Mapping[str, Any]], a: str, b: str) -> McNemar:
    """McNemar test of heads labelled `a` and `b` (results' "pooling") over every episode they share: the same
    task, training seed (missing: 0) and configuration."""
    runs = {(r["task"], r.get("seed", 0), r["pooling"]): r["per_config"] for r in results}
    xs: list[bool] = []
    ys: list[bool] = []
    for task, seed in sorted({(t, s) for t, s, _ in runs}):
        if (task, seed, a) in runs and (task, seed, b) in runs:
            xs += runs[(task, seed, a)]
            ys += runs[(task, seed, b)]
    return mcnemar(xs, ys)


def summarize(results: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Mean success rate per label over tasks and seeds ("by_pooling": pooling, runs, mean_success) and per
    seed ("by_seed": seed and one mean per label). A label without results is left out."""
    seeds = sorted({r.get("seed", 0) for r in results})
    by_label, by_seed = [], []
    for label in labels:
        rates = [r["success_rate"] for r in results if r["pooling"] == label]
        if rates:
            by_label.append(dict(pooling=label, runs=len(rates), mean_success=sum(rates) / len(rates)))
    for seed in seeds:
        row: dict[str, Any] = {"seed": seed}
        for label in labels:
            rates = [r["success_rate"] for r in results if r["pooling"] == label and r.get("seed", 0) == seed]
            if rates:
                row[label] = sum(rates) / len(rates)
        by_seed.append(row)
    return dict(by_pooling=by_label, by_seed=by_seed)


def task_cap(settings: Mapping[str, Any], task: str) -> int | None:
    """The episode cap of `task` in a run's settings: max_steps, or its entry when max_steps is {task: cap}."""
    cap = settings.get("max_steps")
    return cap.get(task) if isinstance(cap, Mapping) else cap


def run_configs(settings: Mapping[str, Any]) -> list[int]:
    """The held-out configuration seeds of a run, in per_config order: `configs` seeds from heldout_seeds[0]."""
    return list(range(settings["heldout_seeds"][0], settings["heldout_seeds"][0] + settings["configs"]))


def compare_runs(runs: Mapping[str, tuple[Mapping[str, Any], str]], *, may_differ: Sequence[str] = ()) -> dict[str, Any]:
    """Pair heads of finished runs on the episodes they share.

    runs: {label: (run, pooling)}, the first is the reference. Each run's heads of `pooling` are relabelled
    `label`; only the (task, seed) heads every run has are kept. may_differ: settings of EPISODE_SETTINGS the
    runs may differ in (e.g. ("weights_sha256",) to pair two encoders' heads on the same configurations), and
    "demonstrators" to pair heads trained on other demonstrators' demos of a task.
    Only the held-out configurations every run has count (runs of 25 and of 50 configurations pair on the first
    25), in every figure. Returns tasks, seeds, configs and heldout_seeds (those shared), by_pooling and by_seed
    (`summarize`), by_task ([{task, seed, label: successes}]), paired ({label: McNemar dict} against the first) and paired_by_task ({task: {label: McNemar
    dict}}). RunMismatch when the runs' episodes differ (a setting, a shared task's cap or demonstrator; a run
    that names no demonstrator pairs only with a run that names none either) or they share no head or no
    configuration.
    """
    if len(runs) < 2:
        raise RunMismatch(f"a comparison needs two runs or more, got {len(runs)}")
    for label, value in runs.items():
        _check_run(label, value)
    items = list(runs.items())
    keys = [k for k in EPISODE_SETTINGS if k not in may_differ]
    (ref, (first, _)), *rest = items
    for label, (run, _) in rest:
        diff = [k for k in keys if first["settings"].get(k) != run["settings"].get(k)]
        if diff:
            raise RunMismatch(f"{label} was rolled out on other episodes than {ref} ({', '.join(diff)} differ)")
    heads = [{(r["task"], r.get("seed", 0)) for r in run["results"] if r["pooling"] == p} for run, p in runs.values()]
    shared = set.intersection(*heads)
    if not shared:
        raise RunMismatch(f"the runs {', '.join(runs)} share no (task, seed) head")
    tasks = sorted({t for t, _ in shared})
    for task in tasks:
        caps = {label: task_cap(run["settings"], task) for label, (run, _) in items}
        if len(set(caps.values())) > 1:
            raise RunMismatch(f"{task}'s episodes were capped at other lengths in these runs (max_steps: {caps})")
        who = {label: run["settings"].get("demonstrators", {}).get(task) for label, (run, _) in items}
        if len(set(who.values())) > 1 and "demonstrators" not in may_differ:
            raise RunMismatch(f"{task}'s demos were recorded by other demonstrators in these runs ({who}); "
                              "their episodes differ")
    seeds_of = {label: run_configs(run["settings"]) for label, (run, _) in items}
    common = sorted(set.intersection(*map(set, seeds_of.values())))
    if not common:
        raise RunMismatch(f"the runs {', '.join(runs)} share no held-out configuration")
    results = []
    for label, (run, p) in items:
        at = [seeds_of[label].index(c) for c in common]
        for r in run["results"]:
            if r["pooling"] == p and (r["task"], r.get("seed", 0)) in shared:
                won = [r["per_config"][i] for i in at]
                results.append(dict(r, pooling=label, per_config=won, success_rate=sum(map(bool, won)) / len(won)))
    others = [label for label, _ in rest]
    return dict(tasks=tasks, seeds=sorted({s for _, s in shared}), configs=len(common),
                heldout_seeds=[common[0], common[-1]], **summarize(results, list(runs)),
                by_task=[dict(task=t, seed=s, **{r["pooling"]: sum(map(bool, r["per_config"])) for r in results
                                                 if (r["task"], r.get("seed", 0)) == (t, s)}) for t, s in sorted(shared)],
                paired={b: paired_test(results, ref, b).as_dict() for b in others},
                paired_by_task={t: {b: paired_test([r for r in results if r["task"] == t], ref, b).as_dict()
                                    for b in others} for t in tasks})


def compare_evaluations(results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Pair two or more `control evaluate` results (their results.json, {label: result}; the first is the
    reference) on the held-out configurations they all ran: the same configuration seed is the same initial scene,
    so with one task and one episode cap the outcomes pair episode by episode (`mcnemar`).

    Returns task, max_steps, configs (how many are shared), config_seeds (the first and last shared), by_label
    ([{label, successes, episodes, success_rate, policy}], on the shared configurations only) and paired ({label:
    McNemar dict} against the first). RunMismatch when one is not an evaluate result, or the results differ in task
    or cap, or share no configuration.
    """
    if len(results) < 2:
        raise RunMismatch(f"a comparison needs two evaluations or more, got {len(results)}")
    for label, r in results.items():
        lacks = [k for k in ("task", "configs", "successes", "max_steps") if not isinstance(r, Mapping) or k not in r]
        if lacks:
            raise RunMismatch(f"{label} is not a `control evaluate` results.json (it lacks {', '.join(lacks)}); "
                              "runs of benchmarks/control_success.py pair with compare_runs")
        if len(r["configs"]) != len(r["successes"]):
            raise RunMismatch(f"{label}: {len(r['configs'])} configurations but {len(r['successes'])} outcomes; "
                              "evaluate it again")
    for key, what in (("task", "tasks"), ("max_steps", "episode caps")):
        seen = {label: r[key] for label, r in results.items()}
        if len(set(seen.values())) > 1:
            raise RunMismatch(f"other {what} ({', '.join(f'{k}: {v}' for k, v in seen.items())}): their episodes "
                              f"are not the same episodes; evaluate both with the same --task and --max-steps")
    (ref, first), *rest = results.items()
    common = [c for c in first["configs"] if all(c in r["configs"] for _, r in rest)]
    if not common:
        raise RunMismatch(f"{', '.join(results)} share no held-out configuration; evaluate them with the same "
                          "--configs")
    outcomes = {label: [bool(dict(zip(r["configs"], r["successes"]))[c]) for c in common]
                for label, r in results.items()}
    return dict(task=first["task"], max_steps=first["max_steps"], configs=len(common),
                config_seeds=[common[0], common[-1]],
                by_label=[dict(label=label, successes=sum(won), episodes=len(won), success_rate=sum(won) / len(won),
                               policy=results[label].get("policy")) for label, won in outcomes.items()],
                paired={label: mcnemar(outcomes[ref], outcomes[label]).as_dict() for label, _ in rest})


def _check_run(label: str, value: Any) -> None:
    """RunMismatch unless runs[label] is (run, pooling) with a run of benchmarks/control_success.py; saying what to
    do with `control evaluate`'s results.json, which is no such run."""
    run = value[0] if isinstance(value, (tuple, list)) and len(value) == 2 else None
    if not isinstance(run, Mapping):
        raise RunMismatch(f"runs[{label!r}] must be (run, pooling), a run of benchmarks/control_success.py and a "
                          f"pooling label; got {type(value).__name__}")
    if "settings" in run and "results" in run:
        return
    if "successes" in run and "configs" in run:
        raise RunMismatch(f"runs[{label!r}] is a `control evaluate` results.json, not a run of "
                          "benchmarks/control_success.py ({'settings': ..., 'results': [...]}) that compare_runs "
                          "pairs; compare evaluations with compare_evaluations({'a': a, 'b': b}) (on the command "
                          "line: frozenvit control compare A B)")
    raise RunMismatch(f"runs[{label!r}] is not a run of benchmarks/control_success.py: it lacks "
                      f"{', '.join(k for k in ('settings', 'results') if k not in run)}")


def merge_runs(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One run from runs that split the tasks, the seeds or the poolings between processes (a stopped run's part
    included).

    Returns settings (the first part's, with the tasks and the poolings in order of appearance, the seeds that
    have results and every part's demonstrators), results (all parts', in order) and complete (every task x
    pooling x seed of the merged settings has a result). Parts with other caps merge into max_steps {task: cap}.
    RunMismatch when the parts differ in a setting other than tasks, seeds, poolings, demonstrators and
    max_steps, or two parts hold a result of the same task, pooling and seed.
    """
    if not parts:
        raise RunMismatch("nothing to merge")
    split = ("tasks", "seeds", "poolings", "demonstrators", "max_steps")
    same = [{k: v for k, v in p["settings"].items() if k not in split} for p in parts]
    diff = sorted({k for s in same[1:] for k in s.keys() | same[0].keys() if s.get(k) != same[0].get(k)})
    if diff:
        raise RunMismatch(f"these runs differ in settings other than tasks, seeds and poolings ({', '.join(diff)}); "
                          "they cannot be merged")
    results = [dict(r) for p in parts for r in p["results"]]
    keys = [(r["task"], r["pooling"], r.get("seed", 0)) for r in results]
    repeated = sorted({k for k in keys if keys.count(k) > 1}, key=str)
    if repeated:
        raise RunMismatch(f"the runs overlap in (task, pooling, seed): {repeated}")
    settings = dict(parts[0]["settings"], tasks=list(dict.fromkeys(t for p in parts for t in p["settings"]["tasks"])),
                    seeds=sorted({r.get("seed", 0) for r in results}))
    if any("poolings" in p["settings"] for p in parts):
        settings["poolings"] = list(dict.fromkeys(x for p in parts for x in p["settings"].get("poolings", [])))
    caps: dict[str, Any] = {}
    for p in parts:
        for t in p["settings"]["tasks"]:
            if caps.setdefault(t, task_cap(p["settings"], t)) != task_cap(p["settings"], t):
                raise RunMismatch(f"{t} is capped at other lengths in these runs (max_steps); they cannot be merged")
    if len(set(caps.values())) > 1:
        settings["max_steps"] = caps
    if any("demonstrators" in p["settings"] for p in parts):
        settings["demonstrators"] = {t: e for p in parts for t, e in p["settings"].get("demonstrators", {}).items()}
    poolings = settings.get("poolings") or sorted({r["pooling"] for r in results})
    expected = {(t, p, s) for t in settings["tasks"] for p in poolings for s in settings["seeds"]}
    return dict(settings=settings, results=results, complete=expected <= set(keys))
