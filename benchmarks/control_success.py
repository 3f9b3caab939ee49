"""Held-out success of behaviour-cloned patch-token policies: attention pooling vs CLS-only vs mean-pool.

Per task: scripted-expert demos on training configurations (successful episodes only), frozen
features cached once, one head per pooling trained with the same seed and budget, each rolled
out on the same held-out configurations (seeds >= 1,000,000, never trained on). Everything under
--work-dir is reused on a re-run (demos resume, caches load, heads load, evaluations resume at the next
episode from a journal beside each head), and the JSON is rewritten after every (task, pooling, seed),
so a long run that is stopped keeps what it measured.

    .venv/bin/python benchmarks/control_success.py --threads 1 \
        --tasks reach-v3 push-v3 button-press-v3 drawer-open-v3 --demos 25 --configs 50

A composite camera (--camera corner+topview: the views side by side) gets its encoder built at
(S, k*S) for k views, S = --size (one view's; None: the model's own).
"""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from common import RESULTS, ROOT, print_table, write_result
from frozenvit.control.defaults import (DEFAULT_BATCH_SIZE, DEFAULT_BC_EPOCHS, DEFAULT_CHUNK, DEFAULT_CHUNK_DECAY,
                                        DEFAULT_HIDDEN, DEFAULT_HOLD_STEPS, DEFAULT_QUERIES, DEFAULT_QUERY_DIVERSITY, DEFAULT_VIEWS)

DEFAULT_TASKS = ["reach-v3", "push-v3", "button-press-v3", "drawer-open-v3"]
GRIPPERS = ("continuous", "snap")
# the library's defaults the screening options start from (cache_features' shift and jitter, PatchTokenPolicy's
# weight decay); named once so that the options, the folder suffixes and the settings of older runs agree
VIEW_SHIFT, VIEW_JITTER, WEIGHT_DECAY = 4, 0.1, 1e-4
# an expert whose gripper column takes at most this many values commands the gripper as a choice (Meta-World's
# scripted experts use one or two values per task); with more, --gripper snap leaves the head's command alone
MAX_GRIPPER_LEVELS = 3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS)
    ap.add_argument("--demos", type=int, default=25, help="successful expert demos per task")
    ap.add_argument("--configs", type=int, default=50, help="held-out configurations per task")
    ap.add_argument("--heldout-start", type=int, default=0,
                    help="first held-out configuration (0: the test set; e.g. 500: a validation set disjoint from "
                         "it, for choosing head settings without looking at the test configurations)")
    ap.add_argument("--max-steps", type=int, default=500,
                    help="episode cap at evaluation (issue 21's benchmark: 500, since 2026-12-04; until then 200, which the "
                         "runs of reach, push, button-press and drawer-open used: their experts need <= ~110)")
    ap.add_argument("--poolings", nargs="+", default=["attention", "cls", "mean"])
    ap.add_argument("--epochs", type=int, default=DEFAULT_BC_EPOCHS,
                    help="behaviour-cloning epochs of every head (the results before 2026-11-30 used 60)")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                    help="behaviour-cloning batch of every head (a smaller one takes more steps per epoch)")
    ap.add_argument("--num-queries", type=int, default=DEFAULT_QUERIES, help="learned queries of the attention pooler")
    ap.add_argument("--query-diversity", type=float, default=DEFAULT_QUERY_DIVERSITY, metavar="W",
                    help="attention pooling: weight of the penalty on queries whose attention maps overlap")
    ap.add_argument("--with-cls", action="store_true",
                    help="attention pooling: the MLP also gets the CLS token (patch tokens on top of the summary)")
    ap.add_argument("--views", type=int, default=DEFAULT_VIEWS, metavar="K",
                    help="every head also trains on K augmented views per demo frame (cache_features(views=K))")
    ap.add_argument("--view-shift", type=int, default=VIEW_SHIFT, metavar="PX",
                    help="largest random shift of a view, in pixels at the encoder's input size")
    ap.add_argument("--view-jitter", type=float, default=VIEW_JITTER, help="colour jitter of a view (+-fraction)")
    ap.add_argument("--weight-decay", type=float, default=WEIGHT_DECAY, help="AdamW weight decay of the BC heads")
    ap.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN, help="width of the heads' MLP hidden layers")
    ap.add_argument("--gripper-weight", type=float, default=1.0, metavar="G",
                    help="weight of the gripper command's squared error in the BC loss (the arm's three: 1)")
    ap.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="K",
                    help="every head predicts the next K actions of each frame and acts by ACT's temporal ensemble of "
                         "the overlapping predictions (PatchTokenPolicy chunk; default: the library's, 8 since 2026-12-04; "
                         "1: one action)")
    ap.add_argument("--chunk-decay", type=float, default=DEFAULT_CHUNK_DECAY, metavar="M",
                    help="with --chunk K > 1: the ensemble weighs the prediction made i steps before the oldest "
                         "exp(-M i) (ACT's convention: M > 0 favours older predictions; 0: a plain mean)")
    ap.add_argument("--gripper", choices=GRIPPERS, default="continuous",
                    help="'snap': the head's gripper command is replaced by the nearest value the expert used in the "
                         "demos (measured 2026-12-02, control/RESULTS.md: not in the library, it did not pay); "
                         "'continuous': as the head predicts it. Only acting differs: one trained head serves both")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0],
                    help="training seeds of each head: BC success varies a lot from seed to seed")
    ap.add_argument("--block", type=int, nargs="+", default=None,
                    help="backbone block(s) of every pooling (default: control.default_blocks, 2, 5 and 11 for a "
                         "12-block encoder, their tokens side by side; 5 11: the default until 2026-12-03; 11 "
                         "alone: the default until 2026-12-02)")
    ap.add_argument("--size", type=int, default=None,
                    help="encoder input size of one view (default: the default's own); a composite --camera of k "
                         "views gets an encoder built at (size, k*size)")
    ap.add_argument("--backbone", default=None, help="timm name (default: the embedded default)")
    ap.add_argument("--weights", default=None)
    ap.add_argument("--camera", default="corner",
                    help="camera, or several joined by '+' (corner+topview): their views side by side")
    ap.add_argument("--demo-size", type=int, default=224,
                    help="rendered size of each view (resized to the encoder's)")
    ap.add_argument("--action-noise", type=float, default=0.0, metavar="S",
                    help="DART screen (Laskey et al. 2017): the demos are recorded while N(0, S) noise is added to "
                         "the arm's three executed commands, and keep the expert's clean actions as labels (a screen, "
                         "not a library option: control/RESULTS.md, \"Noisy demos\"; 0: clean demos)")
    ap.add_argument("--expert", choices=("default", "metaworld"), default="default",
                    help="who records the demos (collect_demos(expert=)): 'default', the library's (Meta-World's scripted "
                         "experts, but for reach-v3 a controller that brings the fingertips onto the goal and for pick-place-v3 one that brings the object there, and for peg-insert-side-v3 one that does not put a held peg back down, since "
                         "2026-12-05); 'metaworld': Meta-World's own on every task, as in the results before")
    ap.add_argument("--hold-steps", type=int, default=DEFAULT_HOLD_STEPS,
                    help="demos go on this many expert steps past the first success (what to do at the goal; "
                         "0: demos end at success, as in the results before 2026-11-30)")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--mesh-faces", default=None, metavar="N|none",
                    help="render meshes simplified to N triangles (default: RenderSettings'); 'none': full meshes")
    ap.add_argument("--work-dir", default=str(ROOT / "runs" / "control_success"))
    ap.add_argument("--out", default=None, help=f"JSON path (default {RESULTS}/control_success.json; required with --merge and --compare)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="PART_JSON",
                    help="combine the JSONs of runs over disjoint --tasks or --seeds (all other settings equal, e.g. one "
                         "process per core, or a stopped run and one that ran its missing seeds) into --out with a "
                         "recomputed summary, then exit")
    ap.add_argument("--compare", nargs="+", default=None, metavar="RUN_JSON:POOLING",
                    help="pair the heads of finished runs on the same held-out episodes (e.g. one pooling at two "
                         "epoch budgets): mean success, per seed, exact McNemar against the first; to --out, then exit")
    ap.add_argument("--across-weights", action="store_true",
                    help="with --compare: pair runs whose encoders differ only in their weights (e.g. two defaults)")
    ap.add_argument("--across-inputs", action="store_true",
                    help="with --compare: pair runs that saw the same simulated episodes through other inputs (camera, "
                         "encoder and its size, rendered size, weights), e.g. one camera against two")
    ap.add_argument("--resume", action="store_true",
                    help="keep the results already in the JSON of every pooling whose own settings match (its block, "
                         "encoder, configurations, seeds...; another pooling's block does not matter); run the rest")
    args = ap.parse_args()
    if not args.gripper_weight > 0:
        ap.error(f"--gripper-weight must be > 0 (1: the plain BC loss), got {args.gripper_weight}")
    if not args.action_noise >= 0:
        ap.error(f"--action-noise must be >= 0 (the standard deviation of the noise; 0: clean demos), got {args.action_noise}")
    if args.chunk < 1 or not args.chunk_decay >= 0:
        ap.error(f"--chunk must be >= 1 and --chunk-decay >= 0, got {args.chunk} and {args.chunk_decay}")
    if args.chunk > 1 and args.gripper == "snap":
        ap.error("--gripper snap acts on one action per step: use it without --chunk")
    if args.merge:
        return merge_parts(args.merge, args.out)
    if args.compare:
        return compare_runs(args.compare, args.out, args.across_weights, args.across_inputs)

    import torch

    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.control import (AttentionConfig, PatchTokenPolicy, cache_features, collect_demos, config_seeds,
                                   default_blocks, evaluate, expert_name)
    from frozenvit.control.policy import FORMAT_VERSION as POLICY_FORMAT
    from frozenvit.control.cli import render_settings

    torch.set_num_threads(args.threads)
    if args.gripper_weight != 1.0:
        _weight_gripper_loss(args.gripper_weight)
    bb = load_encoder(args.backbone, args.weights, args.size, args.camera)
    H, W = bb.config.img_size
    enc = f"{bb.config.name}@{H}" if H == W else f"{bb.config.name}@{H}x{W}"     # square: the names of before
    work = Path(args.work_dir)
    heldout = config_seeds("heldout", args.configs, start=args.heldout_start)
    render = render_settings(args)
    lod = "" if render.mesh_faces is None else f"_lod{render.mesh_faces}"    # full-mesh runs keep their old names
    chosen = bb.resolve_blocks(args.block if args.block is not None else default_blocks(bb.config.depth))
    blocks = {p: chosen[0] if len(chosen) == 1 else chosen for p in args.poolings}   # one block: an int, as before
    # several blocks: each block's channels normalised on their own (control.head, norm_groups); the runs of
    # 7ea91fe..be86076 normalised the joint width and named their heads without the "_ln" suffix
    label = "-".join(str(b) for b in chosen) + ("_ln" if len(chosen) > 1 else "")
    # the head options dropped from control (control/RESULTS.md), at the values every run since has had,
    # so that --resume and --compare still match results of runs made while they existed
    args.frames, args.token_dropout, args.keypoints, args.pos_code, args.ensemble = 1, 0.0, False, "sincos", 1
    args.velocity, args.loss = False, "mse"
    results: list[dict] = []
    settings = dict(tasks=args.tasks, demos=args.demos, configs=args.configs, max_steps=args.max_steps,
                    poolings=args.poolings, epochs=args.epochs, batch_size=args.batch_size,
                    frames=args.frames, seeds=args.seeds,
                    token_dropout=args.token_dropout, num_queries=args.num_queries, keypoints=args.keypoints,
                    pos_code=args.pos_code, query_diversity=args.query_diversity, with_cls=args.with_cls,
                    blocks=blocks, ensemble=args.ensemble, chunk=args.chunk, chunk_decay=args.chunk_decay,
                    velocity=args.velocity, loss=args.loss, views=args.views, gripper=args.gripper,
                    view_shift=args.view_shift, view_jitter=args.view_jitter, weight_decay=args.weight_decay,
                    hidden=args.hidden, gripper_weight=args.gripper_weight,
                    encoder=enc, weights_sha256=bb.weights_sha256, camera=args.camera, demo_size=args.demo_size,
                    action_noise=args.action_noise, expert=args.expert, hold_steps=args.hold_steps,
                    demonstrators={t: expert_name(t, args.expert) for t in args.tasks},
                    render=render.as_dict(),
                    threads=args.threads,
                    heldout_seeds=[heldout[0], heldout[-1]] if heldout else [])
    if len(chosen) > 1:
        settings["block_norm"] = "each"            # absent: one block, or the joint norm of the first multi-block runs
    out_path = Path(args.out) if args.out else RESULTS / "control_success.json"
    if args.resume and out_path.is_file():
        import json

        old = json.loads(out_path.read_text())
        keep = [p for p in args.poolings if _pooling_settings(old.get("settings", {}), p) == _pooling_settings(settings, p)]
        results = [r for r in old.get("results", []) if r["task"] in args.tasks and r["pooling"] in keep
                   and r.get("seed", 0) in args.seeds]
        print(f"resuming: {len(results)} results of {keep or 'no pooling'} kept from {out_path}", flush=True)
    done = {(r["task"], r["pooling"], r["seed"]) for r in results}
    demo_sfx = f"_hold{args.hold_steps}" if args.hold_steps > 0 else ""             # none: older folder names
    demo_sfx += f"_dart{args.action_noise:g}" if args.action_noise else ""
    prepared: dict[str, tuple[Any, float]] = {}
    for task in args.tasks:                 # demos and caches of every task first: then seed by seed over the tasks,
        if all((task, p, sd) in done for p in args.poolings for sd in args.seeds):   # so that a run stopped early
            continue                                                                 # has every task at seed 0
        t0 = time.perf_counter()
        demo_dir = work / "demos" / f"{task}_{args.camera}_{args.demo_size}px{lod}{demo_sfx}{_expert_suffix(task, args)}"
        with _noisy_steps(args.action_noise):
            collect_demos(task, demo_dir, args.demos, camera=args.camera, image_size=args.demo_size, max_steps=500,
                          render=render, hold_steps=args.hold_steps, expert=args.expert)
        cache = cache_features(demo_dir, bb, block=chosen, views=args.views, shift=args.view_shift,
                               jitter=args.view_jitter)      # every pooling reads these blocks
        prepared[task] = (cache, time.perf_counter() - t0)
    for seed, task, pooling in [(sd, t, p) for sd in args.seeds for t in args.tasks for p in args.poolings]:
        if (task, pooling, seed) in done:
            continue
        cache, t_prep = prepared[task]
        t1 = time.perf_counter()
        pol_dir = work / "policies" / (f"{task}_{enc}_{(bb.weights_sha256 or 'random')[:10]}_{pooling}"
                                       f"_b{label}_f1_s{seed}{lod}{demo_sfx}{_expert_suffix(task, args)}"
                                       f"{_attention_suffix(args, pooling)}{_head_suffix(args)}")
        attention = AttentionConfig(args.num_queries, query_diversity=args.query_diversity,
                                    with_cls=args.with_cls) if pooling == "attention" else None
        pol = PatchTokenPolicy(pooling, attention, epochs=args.epochs, batch_size=args.batch_size, seed=seed,
                               weight_decay=args.weight_decay, hidden=args.hidden, chunk=args.chunk,
                               chunk_decay=args.chunk_decay)
        try:
            cached = PatchTokenPolicy.load(pol_dir) if (pol_dir / "config.json").is_file() else None
        except ArtifactError:                                      # of an older format: trained again
            cached = None
        if cached is not None and cached.set_params(chunk_decay=args.chunk_decay).get_params() == pol.get_params() \
                and cached.meta_.get("fingerprint") == bb.weights_sha256:
            pol = cached                                           # the decay acts at run time: one fit serves all
        else:
            pol.fit(cache, checkpoint_dir=work / f"ckpt_v{POLICY_FORMAT}" / pol_dir.name)
            pol.save(pol_dir)
        t_fit = time.perf_counter() - t1
        if args.gripper == "snap":
            snap_gripper(pol, gripper_levels(cache.actions))
        res = evaluate(pol, bb, heldout, max_steps=args.max_steps, parallel=args.parallel,
                       journal=episode_journal(pol_dir, pol, heldout, args.max_steps, args.gripper))
        results.append(dict(task=task, pooling=pooling, seed=seed, block=blocks[pooling],
                            success_rate=res.success_rate,
                            successes=int(sum(res.successes)), episodes=len(res.successes),
                            final_bc_loss=float(pol.history_[-1]),
                            demo_frames=len(cache),
                            prep_s=round(t_prep, 1), fit_s=round(t_fit, 1),
                            eval_s=round(time.perf_counter() - t1 - t_fit, 1), per_config=res.successes))
        print(f"{task} {pooling} seed {seed}: {res.success_rate:.2f} ({sum(res.successes)}/{len(res.successes)}) "
              f"fit {t_fit:.0f} s, eval {results[-1]['eval_s']:.0f} s", flush=True)
        write_result("control_success", dict(settings=settings, results=results,
                                             summary=_summary(results, args.poolings), complete=False), args.out)
    summary = _summary(results, args.poolings)
    print_table([{k: v for k, v in r.items() if k != "per_config"} for r in results])
    print_table(summary["by_pooling"])
    print_table(summary["by_seed"])
    if summary["verdict"]:
        for other, t in summary["verdict"]["paired"].items():
            print(f"paired episodes, attention vs {other}: {t['attention_only']} won only by attention, "
                  f"{t[f'{other}_only']} only by {other}; exact McNemar p = {t['p_two_sided']:.3g}")
    write_result("control_success", dict(settings=settings, results=results, summary=summary, complete=True),
                 args.out)
    return 0


def episode_journal(pol_dir: Path, policy: Any, heldout: list[int], max_steps: int,
                    gripper: str = "continuous") -> Path:
    """Where a head's evaluation journals its episodes, so that a run stopped mid-evaluation resumes at the
    next episode: named by the head's digest, the held-out configurations and the cap, so that another
    evaluation (or a head trained again into the same folder) never meets this one's journal. The digest
    covers the policy's chunk_decay, which acts at run time only."""
    from frozenvit.control.policy import policy_digest

    span = f"{heldout[0]}-{heldout[-1]}x{len(heldout)}" if heldout else "none"
    snap = "_snap" if gripper == "snap" else ""                 # the same head acting otherwise: other episodes
    return Path(pol_dir) / f"episodes_{policy_digest(policy)[:12]}_cfg{span}_cap{max_steps}{snap}.jsonl"


def gripper_levels(actions: Any) -> tuple[float, ...] | None:
    """The sorted distinct values of the last column of expert actions (M, A), rounded to 1e-6, or None when
    there are more than MAX_GRIPPER_LEVELS (a continuous gripper command)."""
    levels = np.unique(np.round(np.asarray(actions, dtype=np.float64)[:, -1], 6))
    return tuple(float(v) for v in levels) if 0 < len(levels) <= MAX_GRIPPER_LEVELS else None


def snap_gripper(policy: Any, levels: tuple[float, ...] | None) -> Any:
    """`policy` (in place) acting with its gripper command (the last action column) replaced by the nearest of
    `levels` (ties to the lower); None leaves it as it is. The scripted experts open or close, and regression
    blurs the switch; control/RESULTS.md, "The gripper as a choice", has what it did."""
    if levels is None:
        return policy
    raw = policy.predict
    grid = np.asarray(levels, dtype=np.float32)                                     # (L,)

    def predict(*inputs: Any) -> np.ndarray:
        out = raw(*inputs)                                                          # (B, A)
        out[:, -1] = grid[np.abs(out[:, -1:] - grid).argmin(1)]
        return out

    policy.predict = predict
    return policy


def load_encoder(backbone: str | None, weights: str | None, size: int | None, camera: str, **kwargs) -> Any:
    """The run's frozen encoder for frames of `camera`: built at size (None: the model's own) for one
    camera, at (size, k*size) for a composite camera of k views (control.frame_size)."""
    from frozenvit.backbone import load_backbone
    from frozenvit.control import camera_count, frame_size

    bb = load_backbone(backbone, weights=weights, img_size=frame_size(size, camera) if size else None, **kwargs)
    if camera_count(camera) > 1 and not size:          # the model's own size is one view's
        bb = load_backbone(backbone, weights=weights, img_size=frame_size(bb.config.img_size[0], camera), **kwargs)
    return bb


def _require_out(out: str | None, inputs: list[str], flag: str) -> None:
    """--merge and --compare write only where they are told: without --out they used to replace the committed
    benchmarks/results JSON, and an --out that is one of their inputs would overwrite it."""
    if not out:
        raise SystemExit(f"{flag} needs --out PATH (a new JSON file); it does not write to {RESULTS} by default")
    dst = Path(out).resolve()
    if any(Path(p.rpartition(":")[0] if flag == "--compare" else p).resolve() == dst for p in inputs):
        raise SystemExit(f"--out {out} is one of the {flag} inputs; give a new path")


def merge_parts(paths: list[str], out: str | None) -> int:
    """One result from runs that split the tasks or the seeds between processes (a stopped run's part
    included); refuses parts with other settings and parts that repeat a task, pooling and seed."""
    import json

    _require_out(out, paths, "--merge")
    parts = [json.loads(Path(p).read_text()) for p in paths]
    same = [{k: v for k, v in p["settings"].items() if k not in ("tasks", "seeds", "demonstrators")} for p in parts]
    if any(s != same[0] for s in same[1:]):
        raise SystemExit("these runs differ in settings other than --tasks and --seeds; they cannot be merged")
    results = [r for p in parts for r in p["results"]]
    keys = [(r["task"], r["pooling"], r.get("seed")) for r in results]
    repeated = sorted({k for k in keys if keys.count(k) > 1}, key=str)
    if repeated:
        raise SystemExit(f"the runs overlap in (task, pooling, seed): {repeated}")
    settings = dict(parts[0]["settings"], tasks=list(dict.fromkeys(t for p in parts for t in p["settings"]["tasks"])))
    if any("demonstrators" in p["settings"] for p in parts):
        settings["demonstrators"] = {t: e for p in parts for t, e in _demonstrators(p["settings"]).items()}
    if all("seeds" in p["settings"] for p in parts):
        # the seeds each task has; a part's planned seeds that it never ran do not count
        settings["seeds"] = sorted({r["seed"] for r in results})
        expected = {(t, pl, s) for t in settings["tasks"] for pl in settings["poolings"] for s in settings["seeds"]}
        complete = expected <= set(keys)
    else:
        complete = all(p.get("complete") for p in parts)
    summary = _summary(results, settings["poolings"])
    print_table(summary["by_pooling"])
    write_result("control_success", dict(settings=settings, results=results, summary=summary, complete=complete,
                                         merged_from=[Path(p).name for p in paths]), out)
    return 0


# what must be equal for two runs' episodes to be the same episodes
_EPISODE_SETTINGS = ("configs", "heldout_seeds", "max_steps", "encoder", "weights_sha256", "demos", "camera",
                     "demo_size", "hold_steps", "action_noise", "render")    # and each shared task's demonstrator
# ... of which these only change what the policy sees, not what is simulated (--across-inputs lets them differ)
_INPUT_SETTINGS = ("encoder", "weights_sha256", "camera", "demo_size", "render")


def compare_runs(specs: list[str], out: str | None, across_weights: bool = False, across_inputs: bool = False) -> int:
    """Heads from different runs (RUN_JSON:POOLING each) on the episodes they share: the tasks and seeds
    every run has, the same held-out configurations. Refuses runs whose episodes differ; across_weights
    (--across-weights) lets the encoder's weights differ (same architecture and size), to pair two
    backbones' heads on the same configurations. across_inputs (--across-inputs) lets everything the policy
    sees differ (_INPUT_SETTINGS: camera, encoder and size, rendered size, weights, render options): the
    configurations, episode cap, demos and their hold are still the same, so are the simulated episodes."""
    import json

    _require_out(out, specs, "--compare")
    runs = []
    for spec in specs:
        path, _, pooling = spec.rpartition(":")
        if not path:
            raise SystemExit(f"{spec!r}: give RUN_JSON:POOLING, e.g. results.json:attention")
        d = json.loads(Path(path).read_text())
        runs.append((f"{Path(path).stem}:{pooling}", d, pooling))
    free = _INPUT_SETTINGS if across_inputs else ("weights_sha256",) if across_weights else ()
    keys = [k for k in _EPISODE_SETTINGS if k not in free]
    first = {k: runs[0][1]["settings"].get(k) for k in keys}
    for label, d, _ in runs[1:]:
        other = {k: d["settings"].get(k) for k in keys}
        if other != first:
            diff = sorted(k for k in first if first[k] != other[k])
            raise SystemExit(f"{label} was rolled out on other episodes than {runs[0][0]} ({', '.join(diff)} differ)")
    keys = [{(r["task"], r.get("seed", 0)) for r in d["results"] if r["pooling"] == p} for _, d, p in runs]
    shared = set.intersection(*keys)
    if not shared:
        raise SystemExit("these runs share no (task, seed) heads")
    who = [_demonstrators(d["settings"]) for _, d, _ in runs]
    for task in sorted({t for t, _ in shared}):
        if len({w.get(task) for w in who}) > 1:
            raise SystemExit(f"{task}'s demos were recorded by other experts in these runs "
                             f"({', '.join(f'{label}: {w.get(task)}' for (label, _, _), w in zip(runs, who))}); "
                             "their episodes differ")
    results = [dict(r, pooling=label) for label, d, p in runs for r in d["results"]
               if r["pooling"] == p and (r["task"], r.get("seed", 0)) in shared]
    labels = [label for label, _, _ in runs]
    summary = _summary(results, labels)
    paired = {b: _mcnemar(results, labels[0], b) for b in labels[1:]}
    tasks = sorted({t for t, _ in shared})
    paired_by_task = {t: {b: _mcnemar([r for r in results if r["task"] == t], labels[0], b) for b in labels[1:]}
                      for t in tasks} if len(tasks) > 1 else None
    print_table(summary["by_pooling"])
    print_table(summary["by_seed"])
    for b, t in paired.items():
        print(f"{labels[0]} vs {b}: {t[f'{labels[0]}_only']} vs {t[f'{b}_only']} paired episodes, "
              f"exact McNemar p = {t['p_two_sided']:.3g}")
    inputs = {label: {k: d["settings"].get(k) for k in _INPUT_SETTINGS} for label, d, _ in runs} if across_inputs else None
    write_result("control_success_compare", dict(runs=specs, across_weights=across_weights, across_inputs=across_inputs,
                                                 inputs=inputs, tasks=tasks,
                                                 seeds=sorted({s for _, s in shared}), episodes=first,
                                                 by_pooling=summary["by_pooling"], by_seed=summary["by_seed"],
                                                 paired=paired, paired_by_task=paired_by_task), out)
    return 0


def _demonstrators(settings: dict) -> dict[str, str]:
    """Who recorded each task's demos (control.expert_name). Runs before 2026-12-05 recorded no expert (Meta-World's
    everywhere); those written before settings named the demonstrators give --expert, which resolves as the library
    does now ('fingertips': the reach screen's name for the library's default)."""
    from frozenvit.control import expert_name

    if "demonstrators" in settings:
        return dict(settings["demonstrators"])
    expert = {"fingertips": "default"}.get(settings.get("expert", "metaworld"), settings.get("expert", "metaworld"))
    return {t: expert_name(t, expert) for t in settings.get("tasks", [])}


def _pooling_settings(settings: dict, pooling: str) -> dict:
    """The settings one pooling's results depend on: all but the task list, the seeds (results are kept
    per seed), the other poolings and their blocks, and (except for attention) the token dropout, the
    number of queries, keypoints and the other options of the attention head."""
    s = {k: v for k, v in settings.items()
         if k not in ("tasks", "poolings", "blocks", "seeds", "demonstrators") + _ATTENTION_OPTIONS}
    s["block"] = settings.get("blocks", {}).get(pooling)
    s.setdefault("ensemble", 1)                        # runs before --ensemble existed had one head per seed
    s.setdefault("action_noise", 0.0)                  # ... and before --action-noise, noise-free demos
    s.setdefault("expert", "metaworld")                # ... and before --expert, Meta-World's experts
    if s["expert"] == "fingertips":                    # the screen's name, 2026-12-05, before the library took it
        s["expert"] = "default"
    s.setdefault("hold_steps", 0)                      # ... and before --hold-steps, demos that end at success
    s.update({k: settings.get(k, default) for k, default in _HEAD_OPTIONS_DEFAULTS.items()})   # ... and before these
    if s["chunk"] == 1:
        s["chunk_decay"] = 0.1                         # unused without chunks
    if not s["views"]:
        s["view_shift"], s["view_jitter"] = VIEW_SHIFT, VIEW_JITTER     # unused without views
    if pooling == "attention":                         # runs from before an option existed: its default
        s.update({k: settings.get(k, default) for k, default in _ATTENTION_OPTIONS_DEFAULTS.items()})
    return s


# what a result JSON (or policy folder name) written before an attention option existed was made with
_ATTENTION_OPTIONS_DEFAULTS = dict(token_dropout=0.0, num_queries=4, keypoints=False, pos_code="learned",
                                   query_diversity=0.0, with_cls=False)
_ATTENTION_OPTIONS = tuple(_ATTENTION_OPTIONS_DEFAULTS)


# what a result JSON (or policy folder name) written before the options of every head existed was made with
_HEAD_OPTIONS_DEFAULTS = dict(chunk=1, chunk_decay=0.1, velocity=False, loss="mse", views=0, gripper="continuous",
                              batch_size=DEFAULT_BATCH_SIZE, view_shift=VIEW_SHIFT,
                              view_jitter=VIEW_JITTER, weight_decay=WEIGHT_DECAY, hidden=DEFAULT_HIDDEN, gripper_weight=1.0)


def _expert_suffix(task: str, args: argparse.Namespace) -> str:
    """'_tcp' for demos of the fingertips controller (reach-v3 under the library's default expert), '_carry' for
    pick-place-v3's object-onto-goal expert, '_held' for peg-insert-side-v3's: folders of Meta-World's own demos keep the names of before."""
    from frozenvit.control import expert_name

    return {"fingertips": "_tcp", "carry": "_carry", "held": "_held"}.get(expert_name(task, args.expert), "")


@contextmanager
def _noisy_steps(noise: float) -> Iterator[None]:
    """While in the block, every MetaWorldTask.step executes its action plus N(0, noise) on the arm's three
    commands (the gripper's untouched), from a generator seeded by the configuration at each reset. Demos
    recorded in it keep the expert's clean actions as labels (control.demos.record_episode records an action
    before it steps): DART's noise injection, a screen of the lever, not a library option. noise 0: no change."""
    if not noise:
        yield
        return
    from frozenvit.control.env import MetaWorldTask

    reset, step = MetaWorldTask.reset, MetaWorldTask.step
    rngs: dict[int, np.random.Generator] = {}

    def noisy_reset(self, config: int):
        rngs[id(self)] = np.random.default_rng([int(config), 0xDA27])
        return reset(self, config)

    def noisy_step(self, action):
        a = np.asarray(action, dtype=np.float32).reshape(-1)
        return step(self, np.clip(a + np.r_[rngs[id(self)].normal(0.0, noise, 3), 0.0], -1.0, 1.0))

    MetaWorldTask.reset, MetaWorldTask.step = noisy_reset, noisy_step
    try:
        yield
    finally:
        MetaWorldTask.reset, MetaWorldTask.step = reset, step


def _weight_gripper_loss(weight: float) -> None:
    """Make the BC loss of every head trained in this process weigh the gripper command's squared error
    (the last action) `weight` times the arm's: a screen of the lever, not a library option."""
    import torch

    import frozenvit.control.policy as policy

    from frozenvit.control.env import ACTION_DIM

    def weighted(pred: "torch.Tensor", target: "torch.Tensor") -> "torch.Tensor":
        w = torch.ones(pred.shape[-1], dtype=pred.dtype)                         # (k*A,): k actions of a chunk
        w[ACTION_DIM - 1::ACTION_DIM] = weight
        return ((pred - target) ** 2 * w).mean()

    policy.bc_loss = weighted


def _head_suffix(args: argparse.Namespace) -> str:
    """Policy-folder suffix of the options of every head that differ from the defaults (none for the defaults,
    so older folders keep their names), and _ck<K> for chunks of K > 1 actions, the default's included (a
    one-action head keeps the name it had before chunks became the default, a chunked one the name it had
    before). The folders of heads with the removed options (_k8, _vel, _l1) stay as they are; no head
    trained now is named so, nor _chunk<K> (the heads of 2026-12-04 this script fitted on targets of K
    actions, as a one-action head of K*4 outputs)."""
    return (f"_views{args.views}" if args.views else "") + \
        (f"_vs{args.view_shift}" if args.views and args.view_shift != VIEW_SHIFT else "") + \
        (f"_vj{args.view_jitter:g}" if args.views and args.view_jitter != VIEW_JITTER else "") + \
        (f"_bs{args.batch_size}" if args.batch_size != DEFAULT_BATCH_SIZE else "") + \
        (f"_wd{args.weight_decay:g}" if args.weight_decay != WEIGHT_DECAY else "") + \
        (f"_h{args.hidden}" if args.hidden != DEFAULT_HIDDEN else "") + \
        (f"_gw{args.gripper_weight:g}" if args.gripper_weight != 1.0 else "") + \
        (f"_ck{args.chunk}" if args.chunk > 1 else "")


def _attention_suffix(args: argparse.Namespace, pooling: str) -> str:
    """Policy-folder suffix of an attention head's options other than the defaults (none for the
    defaults, so older folders keep their names)."""
    if pooling != "attention":
        return ""
    return (f"_td{args.token_dropout:g}" if args.token_dropout > 0 else "") \
        + (f"_q{args.num_queries}" if args.num_queries != 4 else "") + ("_kp" if args.keypoints else "") \
        + ("_sincos" if args.pos_code != _ATTENTION_OPTIONS_DEFAULTS["pos_code"] else "") \
        + (f"_div{args.query_diversity:g}" if args.query_diversity > 0 else "") + ("_cls" if args.with_cls else "")


def _summary(results: list[dict], poolings: list[str]) -> dict:
    """Mean success per pooling over tasks and seeds; per seed; paired tests against attention."""
    seeds = sorted({r.get("seed", 0) for r in results})
    by, by_seed = [], []
    for p in poolings:
        rates = [r["success_rate"] for r in results if r["pooling"] == p]
        if rates:
            by.append(dict(pooling=p, runs=len(rates), mean_success=float(np.mean(rates))))
    for sd in seeds:
        row = {"seed": sd}
        for p in poolings:
            rates = [r["success_rate"] for r in results if r["pooling"] == p and r.get("seed", 0) == sd]
            if rates:
                row[p] = float(np.mean(rates))
        by_seed.append(row)
    means = {r["pooling"]: r["mean_success"] for r in by}
    verdict = None
    if "attention" in means and "cls" in means:
        diffs = [row["attention"] - row["cls"] for row in by_seed if "attention" in row and "cls" in row]
        verdict = dict(attention_beats_cls=means["attention"] > means["cls"],
                       attention_minus_cls=means["attention"] - means["cls"],
                       attention_minus_cls_by_seed=diffs,
                       paired={p: _mcnemar(results, "attention", p) for p in poolings if p != "attention"})
    return dict(by_pooling=by, by_seed=by_seed, verdict=verdict)


def _mcnemar(results: list[dict], a: str, b: str) -> dict:
    """Exact McNemar test over paired episodes (same task, training seed and held-out configuration)
    of poolings a and b. It treats the trained heads as fixed: seed-to-seed variation is in by_seed."""
    from scipy.stats import binomtest

    runs = {(r["task"], r.get("seed", 0), r["pooling"]): r["per_config"] for r in results}
    only_a = only_b = 0
    for task, seed in {(t, sd) for t, sd, _ in runs}:
        if (task, seed, a) in runs and (task, seed, b) in runs:
            for x, y in zip(runs[(task, seed, a)], runs[(task, seed, b)]):
                only_a += bool(x) and not y
                only_b += bool(y) and not x
    p = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
    return {f"{a}_only": only_a, f"{b}_only": only_b, "p_two_sided": float(p)}


if __name__ == "__main__":
    sys.exit(main())
