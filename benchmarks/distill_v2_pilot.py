"""Pilot of the v2 distillation recipe (issue 18): training throughput, v2 vs the v1 recipe, on this machine.

    python benchmarks/distill_v2_pilot.py --threads 1            # CPU, 5 warm-up + 20 timed steps each
    python benchmarks/distill_v2_pilot.py --device cuda --batch-size 256

Runs the real trainer (`backbone.distill.train.distill`) for a few steps into a scratch folder under runs/
(git-ignored) on the decoded image cache the full run uses (built here once if missing), so the figure
includes the teacher, augmentation and data reads. Recipes:
  v2  224 px (14x14 tokens), init from the embedded default, dense stride-8/16 targets from blocks
      7, 10 and the last, plus the v1 targets (KD + stride-16/head);
  v2_plain  224 px, the v1 targets only (what the stride-8/16 projectors and losses cost);
  v1  128 px (8x8 tokens), the v1 targets only (how the shipped default was trained).
Throughput = images / wall seconds over the timed steps (log windows after the warm-up), median of windows.
Writes benchmarks/results/distill_v2_pilot[_SUFFIX].json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, SHARED_DATA, print_table, write_result  # noqa: E402

V2 = dict(img_size=224, dense_blocks=(7, 10, -1), init="default")
V2_PLAIN = dict(img_size=224, dense_blocks=(), init="default")   # v2's resolution without the stride-8/16 targets
V1 = dict(img_size=128, dense_blocks=(), init="default")
W_STRIDED = 20.0   # the recipe's --w-s8/--w-s16 (benchmarks/distill_v2.sh)


def grad_norms(model, teacher, images, cfg) -> dict[str, float]:
    """Norm of each weighted loss term's gradient on the student ViT (projectors and heads left out), one batch.

    Says which targets steer the ViT at the recipe's weights: the balance the weights should set.
    """
    import torch

    from frozenvit.backbone.distill.data import BatchReader, augment
    from frozenvit.backbone.distill.train import step_losses

    u8 = BatchReader(images, cfg.batch_size, cfg.seed + 1).get(0, 1)  # (B, S, S, 3), a batch not trained on yet
    x = augment(u8, cfg.img_size, cfg.augment, torch.Generator().manual_seed(1))
    x = (x - torch.tensor(teacher.mean).view(1, 3, 1, 1)) / torch.tensor(teacher.std).view(1, 3, 1, 1)
    parts, weights = step_losses(model, teacher, x, _pairs(model, teacher), cfg)
    params = [q for q in model.student.parameters() if q.requires_grad]
    out = {}
    for k, v in parts.items():
        grads = torch.autograd.grad(weights[k] * v, params, retain_graph=True, allow_unused=True)
        out[k] = round(float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None))), 5)
    return out


def _pairs(model, teacher) -> dict:
    return teacher.default_pairs(len(model.student.blocks)) if len(model.dense) else {}


def run_recipe(name: str, recipe: dict, args: argparse.Namespace, teacher, roots: list[Path]) -> dict:
    from frozenvit.backbone.distill.data import AugmentConfig, build_cache
    from frozenvit.backbone.distill.train import DistillConfig, distill

    cache_size = int(round(recipe["img_size"] * 1.125))
    images = build_cache(roots, ROOT / "runs" / "distill_v2_cache", cache_size)
    cfg = DistillConfig(img_size=recipe["img_size"], cache_size=cache_size, epochs=30, batch_size=args.batch_size,
                        lr=3e-4, warmup_steps=100, init=recipe["init"], dense_blocks=recipe["dense_blocks"],
                        w_s8=W_STRIDED, w_s16=W_STRIDED, precision=args.precision, device=args.device, log_every=args.window,
                        ckpt_every_s=1e9, augment=AugmentConfig(scale=(0.35, 1.0), mix_prob=0.2))
    out = ROOT / "runs" / "distill_v2_pilot" / name
    if out.exists():
        shutil.rmtree(out)                          # our own scratch run from an earlier pilot
    steps = args.warmup_steps + args.steps
    t0 = time.perf_counter()
    model = distill(teacher, images, cfg, out, max_steps=steps)
    wall = time.perf_counter() - t0
    norms = grad_norms(model, teacher, images, cfg)
    log = [json.loads(line) for line in open(out / "log.jsonl")]
    timed = [r for r in log if r["step"] > args.warmup_steps]
    rates = [r["img_s"] for r in timed]
    last = log[-1]
    return {"recipe": name, "img_size": recipe["img_size"], "grid": recipe["img_size"] // 16,
            "dense_blocks": list(recipe["dense_blocks"]), "batch": args.batch_size, "timed_steps": args.steps,
            "img_s_median": round(statistics.median(rates), 2), "img_s_windows": rates,
            "wall_s_incl_setup": round(wall, 1), "n_images": int(len(images)),
            "last_losses": {k: v for k, v in last.items() if k not in ("step", "epoch", "lr", "img_s", "elapsed_s")},
            "grad_norm_on_vit_weighted": norms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(SHARED_DATA / "imagenette" / "train"))
    ap.add_argument("--extra-data", default=str(SHARED_DATA / "more_images"), help="'' for none")
    ap.add_argument("--teacher", default="efficientnet_lite0")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--window", type=int, default=5, help="steps per log window (throughput sample)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--recipes", default="v2,v2_plain,v1")
    ap.add_argument("--suffix", default="")
    args = ap.parse_args()
    if not Path(args.data).is_dir():
        print(f"no training images at {args.data} (../shared/data absent): nothing to measure")
        return 0
    import torch

    from frozenvit.backbone.distill.teacher import make_teacher

    torch.set_num_threads(args.threads)
    roots = [Path(args.data)] + ([Path(args.extra_data)] if args.extra_data else [])
    rows = []
    for name in args.recipes.split(","):
        recipe = {"v2": V2, "v2_plain": V2_PLAIN, "v1": V1}[name]
        teacher = make_teacher(args.teacher, img_size=recipe["img_size"])
        rows.append(run_recipe(name, recipe, args, teacher, roots))
    print_table([{k: r[k] for k in ("recipe", "img_size", "grid", "batch", "timed_steps", "img_s_median",
                                    "wall_s_incl_setup")} for r in rows])
    for r in rows:
        print(f"{r['recipe']}: |grad| on the ViT per weighted term: {r['grad_norm_on_vit_weighted']}")
    rate = {r["recipe"]: r["img_s_median"] for r in rows}
    for a, b in (("v2", "v1"), ("v2", "v2_plain"), ("v2_plain", "v1")):
        if a in rate and b in rate:
            print(f"{a} / {b} throughput: {rate[a] / rate[b]:.3f}")
    write_result("distill_v2_pilot" + (f"_{args.suffix}" if args.suffix else ""),
                 {"device": args.device, "threads": args.threads, "precision": args.precision,
                  "teacher": args.teacher, "roots": [str(r) for r in roots], "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
