"""Latency of the whole control loop: render, preprocess, encode, head, env step — per step.

The policy has to act within a control period, so the number that matters is a high
percentile of the per-step time, not the mean. Steps are timed after a warm-up, one
environment at a time (batch 1, as on a robot), with torch's current thread setting.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from .agent import StageTimer, VisuomotorAgent
from .defaults import DEFAULT_CHUNK, LATENCY_STEPS, LATENCY_WARMUP
from .env import ACTION_DIM, PROPRIO_DIM, MetaWorldTask, check_count, config_seeds
from .evaluate import rollout_timed
from .features import backbone_meta, check_backbone, token_blocks
from .head import HeadConfig, PolicyHead

STAGES = ("render", "preprocess", "encode", "head", "step")


@dataclass
class LatencyReport:
    """Per-step milliseconds of the loop and of each stage (after warm-up)."""
    total: np.ndarray                          # (S,) ms per step
    stages: dict[str, np.ndarray]              # stage -> (S,) ms
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def concat(cls, reports: Sequence["LatencyReport"]) -> "LatencyReport":
        """One report over the steps of several (e.g. interleaved rounds); meta of the first, steps summed."""
        if not reports:
            raise ValueError("no reports to concatenate")
        names = [s for s in STAGES if all(s in r.stages for r in reports)]
        return cls(np.concatenate([r.total for r in reports]),
                   {s: np.concatenate([r.stages[s] for r in reports]) for s in names},
                   dict(reports[0].meta, rounds=len(reports)))

    def percentiles(self, q: Sequence[float] = (50, 95, 99)) -> dict[str, float]:
        return {f"p{int(p)}": float(np.percentile(self.total, p)) for p in q}

    def summary(self) -> dict[str, Any]:
        """p50/p95/p99/mean of the loop, median and share of each stage."""
        out: dict[str, Any] = dict(steps=int(self.total.size), **self.percentiles(), min=float(self.total.min()),
                                   mean=float(self.total.mean()), fps_p50=1e3 / float(np.median(self.total)))
        med = {s: float(np.median(self.stages[s])) for s in STAGES if s in self.stages}
        out["stage_p50_ms"] = med
        out["stage_share"] = {s: float(self.stages[s].sum() / self.total.sum()) for s in med}
        out.update(self.meta)
        return out

    def verdict(self, budget_ms: float) -> tuple[bool, str]:
        """Does p99 of the loop fit the control period `budget_ms`?"""
        p = self.percentiles()
        ok = p["p99"] <= budget_ms
        return ok, (f"{'PASS' if ok else 'FAIL'}: p99 {p['p99']:.1f} ms {'<=' if ok else '>'} budget "
                    f"{budget_ms:g} ms (p50 {p['p50']:.1f}, p95 {p['p95']:.1f})")

    def table(self) -> list[dict[str, Any]]:
        """Rows for printing: the loop and each stage, p50/p95/p99 in ms."""
        rows = []
        for name, arr in [("loop", self.total)] + [(s, self.stages[s]) for s in STAGES if s in self.stages]:
            rows.append(dict(stage=name, min=float(arr.min()), p50=float(np.percentile(arr, 50)),
                             p95=float(np.percentile(arr, 95)), p99=float(np.percentile(arr, 99)),
                             mean=float(arr.mean())))
        return rows

    def histogram(self, budget_ms: float | None = None, title: str = "") -> Any:
        """Matplotlib figure: histogram of the loop time, percentiles and stage medians marked."""
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw=dict(width_ratios=[2, 1]))
        ax.hist(self.total, bins=40, color="#4472c4", alpha=0.85)
        for name, v, c in [(k, v, c) for (k, v), c in zip(self.percentiles().items(), ("k", "#e69f00", "#d55e00"))]:
            ax.axvline(v, color=c, ls="--", lw=1.2, label=f"{name} {v:.1f} ms")
        if budget_ms:
            ax.axvline(budget_ms, color="red", lw=2, label=f"budget {budget_ms:g} ms")
        ax.set_xlabel("loop time per step (ms)")
        ax.set_ylabel("steps")
        ax.legend(fontsize=8)
        ax.set_title(title or f"control loop latency ({self.total.size} steps)")
        med = [float(np.median(self.stages[s])) for s in STAGES if s in self.stages]
        names = [s for s in STAGES if s in self.stages]
        bx.barh(names[::-1], med[::-1], color="#70ad47")
        bx.set_xlabel("median ms per step")
        bx.set_title("stages")
        fig.tight_layout()
        return fig

    def to_dict(self) -> dict[str, Any]:
        return dict(summary=self.summary(), table=self.table())


def measure_latency(agent: VisuomotorAgent, env: MetaWorldTask, *, steps: int = LATENCY_STEPS,
                    warmup: int = LATENCY_WARMUP, configs: Sequence[int] | None = None) -> LatencyReport:
    """Time `steps` loop steps after `warmup` untimed ones, resetting to new configurations as episodes end.

    Environment resets are not timed (they happen between episodes, not within the control period). The frames are
    rendered at `env.image_size` (recorded as `frame_size`): for a policy's own loop, the size of its demos
    (`meta_["demo_image_size"]`), as `evaluate` renders them. ParameterError for steps < 1 or warmup < 0.
    """
    check_count("steps", steps, 1, "timed steps")
    check_count("warmup", warmup, 0, "untimed steps first")
    timer = StageTimer()
    seeds = list(configs) if configs is not None else config_seeds("heldout", 10_000)
    need = steps + warmup
    i = 0
    while len(timer.ms["total"]) < need:
        rollout_timed(agent, env, seeds[i % len(seeds)], timer, max_steps=need - len(timer.ms["total"]))
        i += 1
    total = np.asarray(timer.ms["total"][warmup:need])
    stages = {s: np.asarray(timer.ms[s][warmup:need]) for s in STAGES if timer.ms.get(s)}
    meta = dict(task=env.name, image_size=env.image_size, frame_size=env.image_size, camera=env.camera, threads=torch.get_num_threads(),
                backbone=agent.policy.meta_.get("backbone"), img_size=agent.policy.meta_.get("img_size"),
                pooling=agent.policy.pooling, trained=not isinstance(agent.policy, UntrainedHead), warmup=warmup,
                chunk=int(getattr(agent.policy, "chunk", 1)))
    return LatencyReport(total, stages, meta)


def compare_runtimes(policy: Any, backbone: Any, env: MetaWorldTask, runtimes: Sequence[str], *,
                     steps: int = LATENCY_STEPS, warmup: int = LATENCY_WARMUP, rounds: int = 3,
                     configs: Sequence[int] | None = None) -> dict[str, LatencyReport]:
    """The loop's latency with the backbone run by each of `runtimes` (backbone.export.RUNTIMES), in one run.

    The encoder of every runtime is built first (onnxruntime / OpenVINO: `backbone` exported at its input size and
    the policy's blocks); then `rounds` rounds each time every runtime for about steps/rounds steps (after
    `warmup` untimed steps in each round), so a machine that gets busier during the run slows all runtimes alike.
    Returns {runtime: LatencyReport of its rounds}, in the order given.
    """
    from frozenvit.backbone.export import runtime_backbone

    check_count("steps", steps, 1, "timed steps")
    check_count("warmup", warmup, 0, "untimed steps first")
    check_count("rounds", rounds, 1)
    blocks = token_blocks(policy.meta_)
    agents = {rt: VisuomotorAgent(policy, runtime_backbone(backbone, rt, blocks)) for rt in runtimes}
    per_round = [steps // rounds + (i < steps % rounds) for i in range(rounds)]
    parts: dict[str, list[LatencyReport]] = {rt: [] for rt in runtimes}
    for n in (k for k in per_round if k):
        for rt, agent in agents.items():
            parts[rt].append(measure_latency(agent, env, steps=n, warmup=warmup, configs=configs))
    out = {}
    for rt, reps in parts.items():
        rep = LatencyReport.concat(reps)
        rep.meta["runtime"] = rt
        out[rt] = rep
    return out


def comparison_rows(reports: dict[str, LatencyReport]) -> list[dict[str, Any]]:
    """One row per runtime and stage (the loop first): p50/p95/p99 in ms."""
    return [dict(runtime=rt, **{k: r[k] for k in ("stage", "p50", "p95", "p99")})
            for rt, rep in reports.items() for r in rep.table()]


class UntrainedHead:
    """A randomly initialised policy head of the shape a trained one has on `backbone`: it stands in for
    a policy when only the loop's latency is measured (the time does not depend on the weights; the
    actions mean nothing). Same interface as a fitted PatchTokenPolicy for `VisuomotorAgent`."""

    def __init__(self, backbone: Any, pooling: str = "attention", block: int | Sequence[int] | None = None,
                 seed: int = 0, *, chunk: int = DEFAULT_CHUNK) -> None:
        self.pooling = pooling
        self.chunk = chunk
        self.meta_ = backbone_meta(backbone, block)
        cfg = HeadConfig(self.meta_["embed_dim"], tuple(self.meta_["grid"]), PROPRIO_DIM, ACTION_DIM, pooling=pooling,
                         norm_groups=len(token_blocks(self.meta_)), chunk=chunk)
        self.uses_cls = cfg.uses_cls
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head_ = PolicyHead(cfg).eval()

    def check_backbone(self, backbone: Any) -> None:
        check_backbone(self.meta_, backbone)

    def predict(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: np.ndarray) -> np.ndarray:
        return self.predict_chunk(tokens, cls, proprio)[:, 0]

    @torch.inference_mode()
    def predict_chunk(self, tokens: torch.Tensor, cls: torch.Tensor | None, proprio: np.ndarray) -> np.ndarray:
        prop = torch.as_tensor(np.asarray(proprio, dtype=np.float32))
        out = self.head_(tokens.float(), None if cls is None else cls.float(), prop).clamp(-1.0, 1.0)
        return out.view(len(prop), self.chunk, -1).numpy()
