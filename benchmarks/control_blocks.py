"""Which backbone block should a policy read? Held-out behaviour-cloning error per block, no rollouts.

For each task, attention and mean-pooling heads are trained (same seed and budget) on the cached
tokens of one block for the first --train-episodes demos, and scored by action MSE on the
remaining demos (their configurations were never trained on). The CLS-only head is scored on the
last block. Cheap (seconds per head) where a success-rate run costs minutes per head, so it picks
`control.default_blocks`; success is then measured by `control_success.py`.

    .venv/bin/python benchmarks/control_blocks.py --threads 1 --blocks 11 7 4 2 0
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import ROOT, print_table, write_result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tasks", nargs="+", default=["reach-v3", "push-v3", "button-press-v3", "drawer-open-v3"])
    ap.add_argument("--blocks", nargs="+", type=int, default=[11, 7, 4, 2, 0])
    ap.add_argument("--train-episodes", type=int, default=20, help="demos trained on; the rest are held out")
    ap.add_argument("--size", type=int, default=128, help="encoder input size")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--backbone", default=None, help="timm name (default: the embedded default)")
    ap.add_argument("--weights", default=None, help="local weights for --backbone")
    ap.add_argument("--demo-size", type=int, default=224, help="rendered frame size of the demos")
    ap.add_argument("--demo-dir", default=str(ROOT / "runs" / "control_success" / "demos"),
                    help="folder of <task>_corner_<demo-size>px demo folders (from control_success.py)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch

    from frozenvit.backbone import load_backbone
    from frozenvit.control import PatchTokenPolicy, cache_features, collect_demos
    from frozenvit.control.features import FeatureCache

    torch.set_num_threads(args.threads)
    bb = load_backbone(args.backbone, weights=args.weights, img_size=args.size)
    last = bb.config.depth - 1

    def split(c: FeatureCache, train: bool) -> FeatureCache:
        m = (c.episode < args.train_episodes) if train else (c.episode >= args.train_episodes)
        return FeatureCache(c.tokens[m], None if c.cls is None else c.cls[m], c.proprio[m], c.actions[m],
                            c.episode[m], c.step[m], c.meta)

    rows = []
    for task in args.tasks:
        demo_dir = Path(args.demo_dir) / f"{task}_corner_{args.demo_size}px"
        collect_demos(task, demo_dir, 25, image_size=args.demo_size, max_steps=500)   # no-op when already there
        for block in args.blocks:
            cache = cache_features(demo_dir, bb, block=block, progress=False)
            train, held = split(cache, True), split(cache, False)
            for pooling in ["attention", "mean"] + (["cls"] if block in (last, -1) else []):
                pol = PatchTokenPolicy(pooling, epochs=args.epochs, seed=0).fit(train, progress=False)
                head = pol.head_
                with torch.no_grad():
                    x = head.prepare(held.tokens.float(), None if held.cls is None else held.cls.float())
                    prop = (held.proprio - pol.proprio_mean_) / pol.proprio_std_
                    pred = head.forward_prepared(x, prop)
                rows.append(dict(task=task, block=cache.meta["block"], pooling=pooling,
                                 train_mse=pol.history_[-1], heldout_mse=float(((pred - held.actions) ** 2).mean()),
                                 heldout_frames=len(held), action_var=float(held.actions.var(0).mean())))
                print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()),
                      flush=True)
    print_table(rows, "{:.4f}")
    write_result("control_blocks", dict(rows=rows, setup=vars(args), encoder=f"{bb.config.name}@{args.size}",
                                        weights_sha256=bb.weights_sha256), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
