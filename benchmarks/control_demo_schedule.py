"""BC schedules for `make demo`'s short control evaluation: held-out success and fitting time.

    python benchmarks/control_demo_schedule.py --threads 2 --schedules 200x256 40x32 --seeds 0 1 2 --configs 24

Why: the demo's control section must stay under a minute. Its head is fitted on a small cache (8 demos of
button-press-topdown-v3 at 128 px, ~520 frames, no augmented views), where the default schedule (200 epochs
of batch 256) is 3 optimizer steps per epoch and 200 passes over the data. A smaller batch for fewer epochs
takes about as many steps in far fewer passes. This measures whether success holds.

Protocol: the demo's own settings (`frozenvit.control.demo_section`: task, input size, 8 demos ending at
success, episode cap 100, the default blocks and attention head), demos collected and encoded once; for each
schedule EPOCHSxBATCH and seed, a head is fitted and rolled out on `--configs` held-out configurations (the
demo uses the first 8). Reported: fitting seconds, final BC loss, successes; per-configuration outcomes in the
JSON, so schedules pair on the same configurations.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import print_table, write_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--schedules", nargs="+", default=["200x256", "40x32"], help="EPOCHSxBATCH")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--configs", type=int, default=24, help="held-out configurations per head")
    ap.add_argument("--work-dir", default="runs/control_demo_schedule", help="demos go here")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch

    from frozenvit.backbone import load_backbone
    from frozenvit.control import PatchTokenPolicy, cache_features, collect_demos, config_seeds, evaluate
    from frozenvit.control.demo_section import DEMO_CAP, DEMO_EPISODES, EASY_TASK, EVAL_SIZE

    torch.set_num_threads(args.threads)
    schedules = []
    for s in args.schedules:
        try:
            epochs, batch = (int(v) for v in s.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--schedules takes EPOCHSxBATCH, e.g. 40x32; got {s!r}")
        schedules.append((epochs, batch))
    n_demos, cap = DEMO_EPISODES, DEMO_CAP
    bb = load_backbone(img_size=EVAL_SIZE)
    demo_dir = collect_demos(EASY_TASK, Path(args.work_dir) / f"demos_{EASY_TASK}_{EVAL_SIZE}px", n_demos,
                             image_size=EVAL_SIZE, max_steps=150, hold_steps=0, progress=False)
    cache = cache_features(demo_dir, bb, progress=False, views=0)
    configs = config_seeds("heldout", args.configs)
    rows, runs = [], []
    for epochs, batch in schedules:
        for seed in args.seeds:
            t0 = time.perf_counter()
            pol = PatchTokenPolicy("attention", epochs=epochs, batch_size=batch, seed=seed).fit(cache, progress=False)
            fit_s = time.perf_counter() - t0
            res = evaluate(pol, bb, configs, max_steps=cap, parallel=4, progress=False)
            ok = [int(s) for s in res.successes]
            rows.append(dict(schedule=f"{epochs}x{batch}", seed=seed, steps=epochs * -(-len(cache) // batch),
                             fit_s=fit_s, final_bc_loss=pol.history_[-1], success=f"{sum(ok)}/{len(ok)}",
                             first8=f"{sum(ok[:8])}/8"))
            runs.append(dict(epochs=epochs, batch_size=batch, seed=seed, fit_s=fit_s,
                             final_bc_loss=pol.history_[-1], successes=ok))
            print(f"[schedule] {epochs}x{batch} seed {seed}: fit {fit_s:.1f} s, {sum(ok)}/{len(ok)}", flush=True)
    print_table(rows, floatfmt="{:.4g}")
    write_result("control_demo_schedule", dict(task=EASY_TASK, image_size=EVAL_SIZE, demos=n_demos,
                                               frames=len(cache), max_steps=cap, configs=configs,
                                               threads=args.threads, runs=runs), args.out)


if __name__ == "__main__":
    main()
