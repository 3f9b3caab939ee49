"""The control section of `frozenvit demo`: loop latency and a short evaluation on one easy task.

Uses the embedded default backbone. A build without it gets a latency measurement on a
random-weight stand-in of a typical size (latency does not depend on weights), clearly
labelled, and no evaluation (random features say nothing about task success).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from frozenvit.backbone.suite.report import DemoContext, Section

from .defaults import DEFAULT_BATCH_SIZE, DEFAULT_BC_STEPS

EASY_TASK = "button-press-topdown-v3"
BUDGET_MS = 90.0
EVAL_SIZE = 128      # the short evaluation's input: 8x8 tokens, a third of 224 px's, so the section stays short
# The short evaluation's cache is small (~520 frames): at the default batch of 256 an epoch is 3 steps, so the
# default step budget is well over a hundred passes. Batch 32 for 40 epochs is ~680 steps in 40 passes: the same
# success as 200 passes (lab/control-results.md, "The demo's schedule").
DEMO_EPOCHS, DEMO_BATCH = 40, 32
DEMO_EPISODES, DEMO_CONFIGS, DEMO_CAP = 8, 8, 100   # demos, held-out configurations, episode cap


def section(ctx: DemoContext) -> Section:
    sec = Section("Control: a patch-token visuomotor policy on Meta-World", order=40)
    try:
        from .env import task_names

        task_names()
    except Exception as e:  # Meta-World is an optional extra
        return sec.text(f"Skipped: {e}")
    from frozenvit.backbone.errors import BackboneUnavailable

    from . import MetaWorldTask, RenderUnavailable, UntrainedHead, VisuomotorAgent, measure_latency

    bb, label, real = _backbone(ctx, BackboneUnavailable)
    size = bb.config.img_size[0]
    grid = f"{bb.config.grid[0]}x{bb.config.grid[1]} tokens"
    if real and not ctx.quick:
        sizes = (f"The latency below is measured at its own input size, {size}x{size} px ({grid}); the short "
                 f"evaluation after it runs the same weights at {EVAL_SIZE}x{EVAL_SIZE} px, which has a third of "
                 "the tokens, so that encoding the demos and rolling out the policy keep this section to a couple "
                 "of minutes.")
    else:
        sizes = f"Input {size}x{size} px ({grid}) throughout."
    sec.text(f"Encoder: {label} ({bb.config.name}, {bb.config.embed_dim}-d tokens). {sizes} Camera 'corner', "
             "frames rendered upright at the encoder's input size with shadows, reflections and multisampling off.")
    steps, warmup = (5, 1) if ctx.quick else (120, 10)
    try:
        with MetaWorldTask("reach-v3", image_size=size) as env:
            rep = measure_latency(VisuomotorAgent(UntrainedHead(bb), bb), env, steps=steps, warmup=warmup)
    except RenderUnavailable as e:
        return sec.text(f"Skipped: no headless OpenGL on this machine ({e}).")
    load, cores = os.getloadavg()[0], os.cpu_count()     # the load at the time of measuring, for the reader
    p = rep.percentiles()
    within = p["p99"] <= BUDGET_MS
    sec.text(f"Latency of the whole loop (render, preprocess, encode, attention head, env step) at {size} px, one "
             f"environment, {rep.meta['threads']} torch threads, {steps} steps after {warmup} warm-up steps. "
             f"Measured on this machine now: p50 {p['p50']:.1f} ms, p95 {p['p95']:.1f} ms, p99 {p['p99']:.1f} ms, "
             f"{'within' if within else 'over'} a {BUDGET_MS:g} ms control period (the demo's example budget; "
             f"`frozenvit control latency --budget-ms` checks any). The 1-minute load average was {load:.1f} on "
             f"{cores} cores when measured: other work on the machine slows every stage, so the same encoder "
             "measures several times slower on a busy machine than on a quiet one. This is a measurement of this "
             "machine at this moment, not a pass/fail of the product.")
    sec.table(rep.table(), floatfmt="{:.1f}")
    sec.figure(rep.histogram(BUDGET_MS, title=f"loop latency, {label}, {size} px"),
               f"Per-step loop time (ms); dashed lines p50/p95/p99, solid red line the {BUDGET_MS:g} ms budget; "
               f"right: median per stage. 1-minute load average {load:.1f} on {cores} cores.",
               alt=f"Histogram of per-step loop time: p99 {p['p99']:.1f} ms against a {BUDGET_MS:g} ms budget.")
    if not real and not ctx.quick:
        return sec.text("No evaluation: without the embedded default's pretrained weights, task success would "
                        "measure a random encoder. Run `frozenvit control collect/train/evaluate` with a real backbone.")
    if real and not ctx.quick:   # evaluate on the faster input size
        from frozenvit.backbone import load_backbone

        bb = load_backbone(img_size=EVAL_SIZE)
        label = f"the embedded default at {EVAL_SIZE}x{EVAL_SIZE} px ({bb.config.grid[0]}x{bb.config.grid[1]} tokens)"
    _short_evaluation(sec, bb, ctx, label)
    return sec


def _backbone(ctx: DemoContext, unavailable: type) -> tuple[Any, str, bool]:
    from frozenvit.backbone import load_backbone

    if ctx.quick:
        bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=64, depth=4, embed_dim=48, num_heads=3)
        return bb, "tiny RANDOM-weight ViT (quick mode)", False
    try:
        return load_backbone(), "the embedded default", True
    except unavailable as e:
        bb = load_backbone("vit_small_patch16_224", pretrained=False)
        return bb, f"RANDOM-weight ViT-S/16 stand-in (no embedded default: {str(e)[:80]}...)", False


def demo_directory(out_dir: Path, task: str, size: int) -> Path:
    """Where the demo keeps `task`'s demos between runs: named by the task's default demonstrator too, so a
    report written before that default changed is not resumed with the new one (its folder stays as it was)."""
    from .experts import expert_name

    return Path(out_dir) / "control" / f"demos_{task}_{size}px_{expert_name(task)}"


def _short_evaluation(sec: Section, bb: Any, ctx: DemoContext, label: str) -> None:
    from . import PatchTokenPolicy, cache_features, collect_demos, config_seeds, evaluate
    from .features import block_label

    task = "reach-v3" if ctx.quick else EASY_TASK
    n_demos, n_cfg, cap, epochs = ((1, 1, 5, 2) if ctx.quick
                                   else (DEMO_EPISODES, DEMO_CONFIGS, DEMO_CAP, DEMO_EPOCHS))
    demo_cap = max(cap, 150)                   # the scripted expert needs up to ~100 steps
    size = bb.config.img_size[0]
    t0 = time.perf_counter()
    demo_dir = demo_directory(ctx.out_dir, task, size)
    # demos end at success (no held steps) and no augmented views: both keep the section well under a minute
    collect_demos(task, demo_dir, n_demos, image_size=size, max_steps=demo_cap, hold_steps=0, progress=False)
    t_demo = time.perf_counter() - t0
    cache = cache_features(demo_dir, bb, progress=False, views=0)
    t_enc = time.perf_counter() - t0 - t_demo
    pol = PatchTokenPolicy("attention", epochs=epochs, batch_size=DEMO_BATCH, seed=0).fit(cache, progress=False)
    t_fit = time.perf_counter() - t0 - t_demo - t_enc
    res = evaluate(pol, bb, config_seeds("heldout", n_cfg), max_steps=cap, parallel=4, progress=False)
    t_eval = time.perf_counter() - t0 - t_demo - t_enc - t_fit
    sec.text(f"Short evaluation on {task}: {n_demos} scripted-expert demos ({len(cache)} frames), attention-"
             f"pooling head over block(s) {block_label(cache.meta)} trained by behaviour cloning ({epochs} epochs of "
             f"batch {DEMO_BATCH}, not the default {DEFAULT_BC_STEPS} steps of {DEFAULT_BATCH_SIZE}: on a cache "
             "this small those are many passes over the same frames), "
             f"rolled out on {n_cfg} held-out configurations (seeds {res.configs[0]}..{res.configs[-1]}, never "
             f"seen in training), cap {cap} steps.")
    sec.table([dict(task=task, encoder=label, demos=n_demos, heldout_configs=n_cfg,
                    success_rate=res.success_rate, mean_steps_success=float(np.mean(
                        [s for s, ok in zip(res.steps, res.successes) if ok])) if any(res.successes) else float("nan"),
                    final_bc_loss=pol.history_[-1])], floatfmt="{:.3g}")
    sec.text(f"Timings: demos {t_demo:.0f} s, encoding {t_enc:.0f} s, training {t_fit:.0f} s, "
             f"evaluation {t_eval:.0f} s.")
    sec.figure(_attention_figure(pol, bb, task, res.configs[0], size), "Where the attention pooler looks on a held-out "
               "configuration: mean attention weight over heads and queries on the patch grid.")


def _attention_figure(pol: Any, bb: Any, task: str, config: int, size: int) -> Any:
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from PIL import Image

    from . import MetaWorldTask, VisuomotorAgent

    with MetaWorldTask(task, image_size=size) as env:
        env.reset(config)
        frame = env.render()
    tokens, _ = VisuomotorAgent(pol, bb).encode([frame])                         # (1, N, C)
    h, w = bb.config.grid
    att = pol.head_.attention_map(tokens)[0].reshape(h, w).numpy()              # (h, w)
    up = np.asarray(Image.fromarray((att / att.max() * 255).astype(np.uint8)).resize((size, size), Image.BILINEAR))
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.3))
    axes[0].imshow(frame)
    axes[0].set_title("frame (upright)")
    axes[1].imshow(frame)
    axes[1].imshow(up, cmap="magma", alpha=0.55)
    axes[1].set_title("attention pooling")
    for a in axes:
        a.axis("off")
    fig.tight_layout()
    return fig
