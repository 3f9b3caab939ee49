"""How local a ViT's patch tokens are: change one patch of the input and measure which tokens move.

    python benchmarks/backbone_locality.py --threads 2 --models default random v1=backbone/assets/... cand=runs/x.safetensors

Why: PatchCore scores each token by its distance to the nearest normal token, so a defect's map is only
as sharp as the defect's effect on the tokens is confined to the patches it covers. A backbone whose
tokens mix in much of the rest of the image smears a small defect over its neighbours (lower pixel AUROC
and AUPRO) while image-level detection can stay the same.

Protocol: normal images of the synthetic anomaly set (`anomaly.synthetic.render_sample`, the categories
of benchmarks/anomaly_quality.py), resized to the backbone's input (`--img-size`, 224 by default; bicubic). For each image and
each of `--positions` seeded random patch positions p, the 16x16 pixels of patch p are inverted
(v -> 255 - v) and the tokens of every block in `--blocks` are recomputed (raw block outputs, as PatchCore
reads them). With d_q = ||t_q(perturbed) - t_q(clean)|| over all patches q:
  own share   d_p / sum_q d_q           (1.0: only the changed patch's token moves)
  near share  sum of d_q over the 3x3 neighbourhood of p / sum_q d_q
  spread      sum_q d_q * dist(p, q) / sum_q d_q, Chebyshev distance in patches
Means over images and positions. Scale-free, so backbones with different token norms compare.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from common import print_table, write_result


def _images(categories: list[str], n: int, size: int, seed: int) -> list[np.ndarray]:
    from PIL import Image

    from frozenvit.anomaly.synthetic import render_sample

    out = []
    for c in categories:
        for i in range(n):
            img, _ = render_sample(c, None, seed, i, size=(192, 224))
            out.append(np.asarray(Image.fromarray(img).resize((size, size), Image.BICUBIC)))
    return out


def locality(bb, images: list[np.ndarray], blocks: tuple[int, ...], positions: int, seed: int) -> dict[int, dict]:
    P = 16
    h = w = images[0].shape[0] // P
    yy, xx = np.mgrid[0:h, 0:w]
    rng = np.random.default_rng(seed)
    acc = {b: {"own": [], "near": [], "spread": []} for b in blocks}
    for img in images:
        clean = bb.patch_grids([img], blocks=blocks, progress=False)
        picks = rng.choice(h * w, size=positions, replace=False)
        batch = []
        for k in picks:
            py, px = divmod(int(k), w)
            x = img.copy()
            x[py * P:(py + 1) * P, px * P:(px + 1) * P] = 255 - x[py * P:(py + 1) * P, px * P:(px + 1) * P]
            batch.append(x)
        moved = bb.patch_grids(batch, blocks=blocks, batch_size=len(batch), progress=False)
        for b in blocks:
            d = (moved[b] - clean[b]).float().norm(dim=1).numpy()          # (positions, h, w)
            for j, k in enumerate(picks):
                py, px = divmod(int(k), w)
                total = float(d[j].sum()) or 1e-12
                dist = np.maximum(np.abs(yy - py), np.abs(xx - px))
                acc[b]["own"].append(float(d[j, py, px]) / total)
                acc[b]["near"].append(float(d[j][dist <= 1].sum()) / total)
                acc[b]["spread"].append(float((d[j] * dist).sum()) / total)
    return {b: {k: float(np.mean(v)) for k, v in m.items()} for b, m in acc.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["default", "random"],
                    help="'default', 'random' (ViT-Ti/16, seed 0) or LABEL=PATH of a ViT-Ti/16 .safetensors")
    ap.add_argument("--blocks", type=int, nargs="+", default=[7, 10, 11])
    ap.add_argument("--categories", nargs="+", default=["weave", "grain", "washer"])
    ap.add_argument("--images", type=int, default=4, help="normal images per category")
    ap.add_argument("--positions", type=int, default=8, help="changed patch positions per image")
    ap.add_argument("--img-size", type=int, default=224, help="input size (the grid is img_size/16 square)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from frozenvit.backbone import load_backbone

    images = _images(args.categories, args.images, args.img_size, args.seed)
    rows = []
    for spec in args.models:
        t0 = time.perf_counter()
        if spec == "default":
            bb, label = load_backbone(img_size=args.img_size), "default"
        elif spec == "random":
            torch.manual_seed(0)
            bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=args.img_size, num_classes=0)
            label = "random"
        else:
            label, _, path = spec.partition("=")
            if not path:
                raise SystemExit(f"{spec!r}: give LABEL=PATH")
            bb = load_backbone("vit_tiny_patch16_224", weights=path, img_size=args.img_size, num_classes=0)
        res = locality(bb, images, tuple(args.blocks), args.positions, args.seed)
        for b, m in res.items():
            rows.append({"model": label, "sha256": (bb.weights_sha256 or "-")[:12], "block": b,
                         "own share": m["own"], "near share": m["near"], "spread": m["spread"],
                         "seconds": round(time.perf_counter() - t0, 1)})
        print_table(rows[-len(res):])
    print_table(rows)
    write_result("backbone_locality", {"setup": vars(args), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
