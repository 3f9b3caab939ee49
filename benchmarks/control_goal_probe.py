"""Can a frozen encoder's tokens tell where the goal and the object are? (issue 21, lever 3: a diagnosis)

    python benchmarks/control_goal_probe.py --threads 1 --tasks reach-v3 push-v3 \
        --encoders default@224 default@320 frozenvit-default-v1@224 --blocks 3 7 11

Why: the reach and push heads fail by driving to one place whatever the goal (control/RESULTS.md). Either
the tokens the head reads do not say where the ~5x6 px goal is (then a higher input size, another block or
another encoder is the lever), or they do and the head does not learn to read it from 25 demos (then
augmentation, more demos or the head itself is).

Protocol: for each task, `--configs` training configurations (seeds 0..n-1, as demos use) are reset and
their first frame rendered with the control defaults (camera `corner`, the frame rendered at the encoder's
input size). At reset the arm is always in the same place, so the frames differ only by the goal (and, for
push, the puck). Targets from the simulator state: goal x, y, z and object x, y. For each encoder and block,
a ridge regression (scikit-learn RidgeCV, alpha chosen by leave-one-out on the training folds) is fitted on
  tokens  every patch token of the block, flattened (N x C features: where a thing is can be read)
  mean    the mean token (C features: a global summary, no layout)
and scored by 5-fold cross-validated predictions: RMSE in cm and R^2 per target. A ridge on the raw
pixels (frames shrunk to 56 x 56) is the reference for "the information is linearly in the image". The
scale that matters: reach succeeds within 5 cm of the goal, push when the puck is within 5 cm of it.
Linear probes bound what a linear readout finds; the attention head is not linear, so a low R^2 says
the information is not linearly there, not that no head could find it.

    python benchmarks/control_goal_probe.py --geometry corner topview --configs 100 --out .../control_goal_geometry.json

measures instead where each camera draws the goal (224 px): the centroid of the pixels that change when the
goal site is hidden, its range over the configurations, and pixels per cm of goal motion along x, y, z.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from common import print_table, write_result

# Meta-World v3's 39-value state: hand xyz [0:3], gripper [3], object xyz [4:7], ..., goal xyz [36:39]
TARGETS = {"goal_x": 36, "goal_y": 37, "goal_z": 38, "obj_x": 4, "obj_y": 5}


def _scene(task: str, configs: list[int], size: int, cameras: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
    """First frames of `configs` seen by each camera (a list of (n, S, S, 3) arrays) and the targets (n, 5)."""
    from frozenvit.control.env import MetaWorldTask

    views, targets = [], []
    for cam in cameras:
        frames, targets = [], []
        with MetaWorldTask(task, camera=cam, image_size=size, max_steps=10) as env:
            for c in configs:
                s = env.reset(c)
                frames.append(env.render())
                targets.append([s.full[i] for i in TARGETS.values()])
        views.append(np.stack(frames))
    return views, np.asarray(targets, dtype=np.float64)


def _ridge():
    """The probe: standardised features, ridge regression with alpha chosen by leave-one-out."""
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-1, 6, 15)))


def _probe(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, dict[str, float]]:
    from sklearn.model_selection import KFold, cross_val_predict

    pred = cross_val_predict(_ridge(), x, y, cv=KFold(5, shuffle=True, random_state=seed))
    out = {}
    for j, name in enumerate(TARGETS):
        var = float(np.var(y[:, j]))
        if var < 1e-10:              # a coordinate this task does not vary (e.g. push's goal z)
            continue
        mse = float(np.mean((pred[:, j] - y[:, j]) ** 2))
        out[name] = {"rmse_cm": 100 * mse ** 0.5, "r2": 1 - mse / var, "std_cm": 100 * var ** 0.5}
    return out


def _geometry(tasks: list[str], cameras: list[str], n: int, size: int) -> list[dict]:
    """Where the goal is drawn: for n configurations, the centroid of the pixels that change when the goal site
    is hidden, and a least-squares fit of that pixel position on the goal's x, y, z (pixels per cm)."""
    from sklearn.linear_model import LinearRegression

    from frozenvit.control.env import MetaWorldTask      # before mujoco: it picks the headless GL backend
    import mujoco  # noqa: E402

    rows = []
    for task in tasks:
        for cam in cameras:
            goals, uv, npx = [], [], []
            with MetaWorldTask(task, camera=cam, image_size=size, max_steps=10) as env:
                model = env.env.model
                site = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "goal")
                rgba = model.site_rgba[site].copy()
                for c in range(n):
                    s = env.reset(c)
                    shown = env.render()
                    model.site_rgba[site, 3] = 0.0
                    hidden = env.render()
                    model.site_rgba[site] = rgba
                    changed = np.abs(shown.astype(int) - hidden.astype(int)).sum(-1) > 20
                    if changed.any():
                        ys, xs = np.nonzero(changed)
                        goals.append(s.full[36:39])
                        uv.append([xs.mean(), ys.mean()])
                        npx.append(int(changed.sum()))
            g, p = np.asarray(goals), np.asarray(uv)
            fit = LinearRegression().fit(g, p)
            rows.append({"task": task, "camera": cam, "size": size, "goal_visible": f"{len(g)}/{n}",
                         "goal_px": float(np.median(npx)) if npx else 0.0,
                         "u range px": f"{p[:, 0].min():.0f}-{p[:, 0].max():.0f}",
                         "v range px": f"{p[:, 1].min():.0f}-{p[:, 1].max():.0f}",
                         "u px/cm (x, y, z)": ", ".join(f"{v / 100:+.2f}" for v in fit.coef_[0]),
                         "v px/cm (x, y, z)": ", ".join(f"{v / 100:+.2f}" for v in fit.coef_[1]),
                         "fit R2": round(float(fit.score(g, p)), 3)})
    return rows


def _learning_curve(x: np.ndarray, y: np.ndarray, sizes: list[int], draws: int, seed: int) -> dict:
    """RMSE (cm) per target of a ridge fitted on `size` scenes and scored on a fixed set of the others."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    test, pool = order[: len(x) // 5], order[len(x) // 5:]
    out = {}
    for size in sizes:
        errs = []
        for _ in range(draws):
            tr = rng.choice(pool, size=min(size, len(pool)), replace=False)
            model = _ridge().fit(x[tr], y[tr])
            errs.append(np.sqrt(((model.predict(x[test]) - y[test]) ** 2).mean(axis=0)))
        e = 100 * np.mean(errs, axis=0)
        out[str(size)] = {name: float(e[j]) for j, name in enumerate(TARGETS) if np.var(y[:, j]) > 1e-10}
    return out


def _encoder(spec: str):
    from frozenvit.backbone import load_backbone

    name, _, size = spec.partition("@")
    return load_backbone(None if name == "default" else name, img_size=int(size) if size else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tasks", nargs="+", default=["reach-v3", "push-v3"])
    ap.add_argument("--encoders", nargs="+", default=["default@224", "default@320", "frozenvit-default-v1@224"],
                    help="NAME@SIZE: 'default' (the embedded default), an EMBEDDED name or a timm name")
    ap.add_argument("--blocks", nargs="+", type=int, default=[3, 7, 11])
    ap.add_argument("--configs", type=int, default=400)
    ap.add_argument("--cameras", nargs="+", default=["corner"],
                    help="cameras whose frames are read together (features of each concatenated): e.g. corner topview")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--train-sizes", nargs="*", type=int, default=None, metavar="N",
                    help="instead of the cross-validated probes: a learning curve of the token probe, fitted on N "
                         "scenes (5 random draws) and scored on a fixed fifth of the configurations")
    ap.add_argument("--geometry", nargs="*", default=None, metavar="CAMERA",
                    help="instead of the probes: where the goal is drawn by these cameras (default corner topview), "
                         "at 224 px, over --configs configurations")
    args = ap.parse_args()
    if args.geometry is not None:
        rows = _geometry(args.tasks, args.geometry or ["corner", "topview"], args.configs, 224)
        print_table(rows)
        write_result("control_goal_geometry", {"settings": vars(args), "rows": rows}, args.out)
        return
    import torch

    torch.set_num_threads(args.threads)
    configs = list(range(args.configs))
    rows, results = [], []
    encoders = {spec: _encoder(spec) for spec in args.encoders}
    for task in args.tasks:
        scenes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for spec, bb in encoders.items():
            size = bb.config.img_size[0]
            if size not in scenes:
                t0 = time.perf_counter()
                scenes[size] = _scene(task, configs, size, args.cameras)
                print(f"{task}: rendered {len(configs)} frames at {size} px in {time.perf_counter() - t0:.0f} s")
            views, y = scenes[size]
            if not any(r["task"] == task and r["features"] == "pixels" for r in results):
                from PIL import Image
                small = np.concatenate([np.stack([np.asarray(Image.fromarray(f).resize((56, 56), Image.BILINEAR))
                                                  for f in frames]).reshape(len(frames), -1) for frames in views], 1)
                results.append({"task": task, "encoder": "-", "block": None, "features": "pixels",
                                "probe": _probe(small.astype(np.float64), y, args.seed)})
            gs = [bb.patch_grids(list(frames), blocks=tuple(args.blocks), progress=False) for frames in views]
            for b in args.blocks:
                grids = [g[b].float().numpy() for g in gs]                     # per camera (n, C, h, w)
                feats = {"tokens": np.concatenate([x.reshape(len(x), -1) for x in grids], 1),
                         "mean": np.concatenate([x.mean(axis=(2, 3)) for x in grids], 1)}
                if args.train_sizes:
                    curve = _learning_curve(feats["tokens"].astype(np.float64), y, args.train_sizes, 5, args.seed)
                    results.append({"task": task, "encoder": spec, "block": b, "features": "tokens",
                                    "learning_curve_rmse_cm": curve})
                    print(f"{task} {spec} block {b}: RMSE (cm) by training scenes: "
                          + "; ".join(f"{n}: " + ", ".join(f"{k} {v:.1f}" for k, v in c.items())
                                      for n, c in curve.items()))
                    continue
                for kind, x in feats.items():
                    results.append({"task": task, "encoder": spec, "block": b, "features": kind,
                                    "probe": _probe(x.astype(np.float64), y, args.seed)})
        for r in results:
            if r["task"] != task or "probe" not in r:
                continue
            row = {"task": task, "encoder": r["encoder"], "block": r["block"] if r["block"] is not None else "-",
                   "features": r["features"]}
            for name, m in r["probe"].items():
                row[f"{name} cm (R2)"] = f"{m['rmse_cm']:.1f} ({m['r2']:.2f})"
            rows.append(row)
        spread = {k: round(v["std_cm"], 1) for k, v in next(r for r in results if r["task"] == task
                                                             and "probe" in r)["probe"].items()}
        print(f"{task}: spread of the targets (std, cm): {spread}")
    print_table(rows)
    write_result("control_goal_probe", {"settings": vars(args), "targets": list(TARGETS), "results": results},
                 args.out)


if __name__ == "__main__":
    main()
