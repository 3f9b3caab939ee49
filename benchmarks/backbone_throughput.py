"""images/s of `patch_grids` at 224 px for ViT-Tiny/16 and ViT-S/14 DINOv2 (random weights: speed only) and for the
embedded default backbone (its shipped weights, at its own input size; left out when it cannot be loaded).

    python benchmarks/backbone_throughput.py --threads 2

Per model: img_s_encode times `patch_grids` on preprocessed pixels, img_s_with_preprocess on the raw uint8 images
(preprocessing included), each the median of --repeats timed calls after two warm-up calls. Writes
benchmarks/results/backbone_throughput_t<threads>.json (or --out).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from common import add_repeats_arg, median, positive_int, print_table, time_call, write_result

from frozenvit.backbone import load_backbone

MODELS = ["vit_tiny_patch16_224", "vit_small_patch14_dinov2", "default"]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--batch-size", type=positive_int, default=16, help="images per timed call (default: 16)")
    add_repeats_arg(ap, 5)
    ap.add_argument("--out", default=None, help="the JSON to write (default: benchmarks/results/backbone_throughput_t<threads>.json)")
    return ap


def main() -> None:
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(args.batch_size)]
    rows = []
    for name in MODELS:
        if name == "default":
            try:
                bb = load_backbone()
            except Exception as e:  # not shipped yet
                print(f"skip default: {e}")
                continue
        else:
            bb = load_backbone(name, pretrained=False, img_size=224)
        pixels = bb.preprocess(images).pixels
        last = bb.config.depth - 1
        t_enc = time_call(lambda: bb.patch_grids(pixels, blocks=last, check=False), repeats=args.repeats)
        t_all = time_call(lambda: bb.patch_grids(images, blocks=last), repeats=args.repeats)
        label = f"embedded default ({bb.name})" if name == "default" else bb.name
        rows.append({"model": label, "grid": "x".join(map(str, bb.config.grid)), "batch": args.batch_size,
                     "threads": args.threads, "img_s_encode": args.batch_size / median(t_enc),
                     "img_s_with_preprocess": args.batch_size / median(t_all),
                     "median_batch_s": median(t_all)})
    print_table(rows, "{:.2f}")
    write_result(f"backbone_throughput_t{args.threads}", {"batch_size": args.batch_size, "repeats": args.repeats,
                                                          "threads": args.threads, "rows": rows}, args.out)


if __name__ == "__main__":
    main()
