"""`frozenvit control collect | train | evaluate | latency`.

    frozenvit control collect  --task reach-v3 --out runs/demos/reach --episodes 25
    frozenvit control train    --demos runs/demos/reach --out runs/policies/reach-attn --pooling attention
    frozenvit control evaluate --policy runs/policies/reach-attn --configs 50 --max-steps 500
    frozenvit control latency  --policy runs/policies/reach-attn --steps 300 --budget-ms 90 --hist lat.png

Without --backbone the embedded default is used; evaluate/latency build it at the input size
the policy was trained with unless --img-size says otherwise. A composite camera ("corner+topview":
views side by side) gets an encoder built at (S, k*S) for k views of S px; --img-size is then S.
`evaluate --json r.json` writes every episode to r.episodes.jsonl as it ends; the same command
again resumes a stopped run.
"""
from __future__ import annotations

import argparse
from typing import Any

from frozenvit.backbone.commands import add_backbone_args
from frozenvit.backbone.suite.cli import add_threads_arg, number
from frozenvit.backbone.suite.engine import add_engine_args
from frozenvit.backbone.suite.errors import UsageError

from .defaults import (DEFAULT_BATCH_SIZE, DEFAULT_BC_EPOCHS, DEFAULT_CHUNK, DEFAULT_CHUNK_DECAY, DEFAULT_HEADS,
                       DEFAULT_HIDDEN, DEFAULT_HOLD_STEPS, DEFAULT_LR, DEFAULT_QUERIES, DEFAULT_VIEWS, POOLINGS)
from .env import DEFAULT_CAMERA, EXPERTS, RenderSettings, camera_count

POSITIVE = number(int, min=1)
ENCODERS = ("default", "fast")
COUNT = number(int, min=0)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("control", help="visuomotor policy on Meta-World: demos, BC, evaluation, latency",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="control_cmd", required=True)

    q = sub.add_parser("collect", help="record scripted-expert demos (successful episodes only; resumable)")
    q.add_argument("--task", required=True, help="Meta-World v3 task, e.g. reach-v3")
    q.add_argument("--out", required=True, help="demo directory: new, empty, or an earlier collect output of the same task (re-run to resume)")
    q.add_argument("--episodes", type=POSITIVE, default=25, help="successful episodes to record")
    q.add_argument("--camera", default="corner", help="corner, corner2, corner3, topview, ... (frames are upright); "
                   "several joined by '+' (corner+topview): their views side by side, the encoder built at (S, k*S)")
    q.add_argument("--image-size", type=number(int, min=16), default=None,
                   help="rendered size of each view (pixels, square; None: the --encoder's input size, 224 or 112)")
    _encoder_arg(q, "whose input size the frames are rendered at")
    q.add_argument("--max-steps", type=POSITIVE, default=500, help="episode cap; configurations where the expert "
                   "needs longer are skipped")
    _render_arg(q)
    q.add_argument("--hold-steps", type=COUNT, default=DEFAULT_HOLD_STEPS,
                   help="record the expert this many steps past its first success (what to do at the goal; "
                        "0: demos end at success)")
    q.add_argument("--first-config", type=COUNT, default=0, help="first training configuration seed")
    q.add_argument("--expert", choices=EXPERTS, default="default",
                   help="who demonstrates: 'default', Meta-World's scripted experts except on reach-v3, where a "
                        "controller brings the fingertips (the point the task scores) onto the goal, and pick-place-v3, "
                        "where the expert's last phase brings the object there, and peg-insert-side-v3, where the expert does not go back down to a peg it holds; 'metaworld': Meta-World's own on every "
                        "task (they bring the hand's body to the goal: reach's fingertips stop 4.4 cm from it, "
                        "pick-place's object 4.0 cm, median)")
    q.set_defaults(func=_cmd_collect)

    q = sub.add_parser("train", help="cache frozen features of the demos and fit a policy head by BC")
    q.add_argument("--demos", required=True, help="demo directory from `control collect`")
    q.add_argument("--out", required=True, help="policy directory (config.json + model.safetensors): new, empty, or an earlier policy, which is replaced")
    q.add_argument("--pooling", choices=POOLINGS, default="attention",
                   help="how a frame's patch tokens become one feature")
    q.add_argument("--queries", type=POSITIVE, default=DEFAULT_QUERIES, help="attention pooling: learned queries")
    q.add_argument("--heads", type=POSITIVE, default=DEFAULT_HEADS,
                   help="attention pooling: attention heads (must divide the token width)")
    q.add_argument("--with-cls", action="store_true", help="attention pooling: the CLS token beside the pooled patches")
    q.add_argument("--hidden", type=POSITIVE, default=DEFAULT_HIDDEN, help="width of the MLP's hidden layers")
    q.add_argument("--epochs", type=POSITIVE, default=DEFAULT_BC_EPOCHS, help="behaviour-cloning epochs")
    q.add_argument("--batch-size", type=POSITIVE, default=DEFAULT_BATCH_SIZE, help="frames per optimizer step")
    q.add_argument("--lr", type=number(float, min=0, min_open=True), default=DEFAULT_LR,
                   help="peak learning rate (5%% warm-up, then cosine decay)")
    q.add_argument("--chunk", type=POSITIVE, default=DEFAULT_CHUNK, metavar="K",
                   help="actions predicted per frame (action chunks, ACT); at run time the action is the weighted mean "
                        "of the up to K predictions made for that step; 1: one action (control/RESULTS.md, \"Action "
                        "chunks the default\": K = 8 raised the 8-task mean from 0.771 to 0.808 and lowered "
                        "reach-v3 from 0.52 to 0.46)")
    q.add_argument("--chunk-decay", type=number(float, min=0), default=DEFAULT_CHUNK_DECAY, metavar="M",
                   help="with --chunk K > 1: weights exp(-M i) of a step's overlapping predictions, i = 0 for the "
                        "oldest (0: a plain mean)")
    q.add_argument("--views", type=COUNT, default=DEFAULT_VIEWS, metavar="K",
                   help="augmented views per demo frame (random shift of 4 px at the encoder's input size, colour "
                        "jitter +-0.1), encoded once and cached beside the clean features; each BC sample reads the "
                        "frame or one of its views; costs K times the clean features' memory and disk; 0: none")
    q.add_argument("--seed", type=int, default=0, help="seed of the head's initialisation and of the shuffling")
    q.add_argument("--block", type=int, nargs="+", default=None, metavar="B",
                   help="backbone block(s) whose tokens are read, negative from the end; several: their tokens side "
                        "by side. Default: 2, 5 and 11 on a 12-block encoder (the last of the first quarter, of the first "
                        "half and of all), the last on one of fewer blocks such as the fast encoder "
                        "(control/RESULTS.md, \"A third block\"); --block 5 11: the default until 2026-12-03; "
                        "--block -1: the last alone, the default until 2026-12-02")
    q.add_argument("--checkpoint", default=None, help="checkpoint directory (resume by re-running): new, empty, or an earlier checkpoint")
    _encoder_arg(q)
    add_backbone_args(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_train)

    q = sub.add_parser("evaluate", help="success rate on held-out configurations (resumable with --json)")
    q.add_argument("--policy", required=True, help="policy directory from `control train`")
    q.add_argument("--configs", type=POSITIVE, default=50, help="number of held-out configurations")
    q.add_argument("--task", default=None, help="Meta-World task (None: the one the policy was trained on)")
    q.add_argument("--max-steps", type=POSITIVE, default=500, help="episode cap")
    q.add_argument("--parallel", type=POSITIVE, default=4, help="environments stepped in lockstep")
    q.add_argument("--gif-dir", default=None, help="folder for the GIFs of --gifs rollouts: new, empty, or an earlier GIF folder")
    q.add_argument("--gifs", type=COUNT, default=0, help="save this many rollouts as GIFs (needs --gif-dir)")
    q.add_argument("--json", default=None,
                   help="write the result here, and every episode as it ends to NAME.episodes.jsonl beside it; "
                        "re-running the same command resumes a stopped run (an existing file is replaced only if this command wrote it)")
    _render_arg(q)
    _encoder_arg(q)
    add_backbone_args(q)
    add_threads_arg(q)
    add_engine_args(q)
    q.set_defaults(func=_cmd_evaluate)

    q = sub.add_parser("latency", help="per-step latency of render+preprocess+encode+head+step")
    q.add_argument("--policy", default=None, help="trained policy (None: an untrained head of the same shape)")
    q.add_argument("--task", default="reach-v3", help="Meta-World task (a --policy's own when given)")
    q.add_argument("--camera", default=None, help="camera, or several joined by '+' (None: the policy's, or corner)")
    q.add_argument("--pooling", choices=POOLINGS, default="attention", help="pooling of the untrained head")
    q.add_argument("--chunk", type=POSITIVE, default=DEFAULT_CHUNK, metavar="K",
                   help="actions per frame of the untrained head (a --policy's own when given)")
    q.add_argument("--steps", type=POSITIVE, default=200, help="timed steps")
    q.add_argument("--warmup", type=COUNT, default=20, help="untimed steps first")
    q.add_argument("--budget-ms", type=number(float, min=0, min_open=True), default=None,
                   help="control period; verdict on p99, exit 1 if over")
    q.add_argument("--hist", default=None, help="histogram PNG path (an existing file is replaced only if this command wrote it)")
    _render_arg(q)
    q.add_argument("--json", default=None, help="write the report here (an existing file is replaced only if this command wrote it)")
    _encoder_arg(q)
    add_backbone_args(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_latency)


def _encoder_arg(q: argparse.ArgumentParser, what: str = "") -> None:
    q.add_argument("--encoder", choices=ENCODERS, default=None,
                   help=f"a shipped encoder by name{' ' + what if what else ''}: 'default' (the embedded ViT-Tiny "
                        "at 224 px) or 'fast' (4 blocks distilled on Meta-World, 112 px, about 3x faster); instead "
                        "of --backbone/--weights/--img-size. None: --backbone's, else the one a --policy was "
                        "trained on, else 'default'")


def _render_arg(q: argparse.ArgumentParser) -> None:
    q.add_argument("--mesh-faces", type=_mesh_faces_arg, default=None, metavar="N|none",
                   help="draw big meshes simplified to ~N triangles each (e.g. 800: frames ~2x faster, "
                        "see docs/control.md); 'none': full meshes (None: the policy's demos' setting, else full)")


def render_settings(args: argparse.Namespace, stored: dict | None = None) -> RenderSettings:
    """RenderSettings from --mesh-faces; without it, the stored settings (a policy's demos) or the defaults."""
    v = getattr(args, "mesh_faces", None)
    if v is None:
        return RenderSettings.from_dict(stored) if stored else RenderSettings()
    return v if isinstance(v, RenderSettings) else parse_mesh_faces(v)


def parse_mesh_faces(v: Any) -> RenderSettings:
    """RenderSettings for a --mesh-faces value: a triangle count (>= 4) or 'none'; UsageError otherwise."""
    if str(v).lower() == "none":
        return RenderSettings(mesh_faces=None)
    try:
        n = int(v)
    except ValueError:
        raise UsageError(f"--mesh-faces takes a triangle count or 'none', got {v!r}") from None
    if n < 4:
        raise UsageError(f"--mesh-faces must be >= 4 triangles or 'none', got {n}")
    return RenderSettings(mesh_faces=n)


def _mesh_faces_arg(text: str) -> RenderSettings:
    try:
        return parse_mesh_faces(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--mesh-faces ")) from None


def load_backbone_for(args: argparse.Namespace, img_size: Any = None, fingerprint: str | None = None) -> Any:
    """The backbone the command asks for, at --img-size, else `img_size` (a policy's), else the model's own.

    `--encoder fast` (or no encoder option at all and a policy whose weights `fingerprint` is the fast
    encoder's) loads the shipped fast encoder; a policy trained on an earlier embedded default gets that one
    back (backbone.embedded_name_for). --random-weights builds the same random weights every time
    (seed 0), so a baseline policy trained on them can be evaluated later. Tests replace this function."""
    import torch

    from frozenvit.backbone import load_backbone

    from .encoders import FAST_ENCODER_SHA256, load_fast_encoder

    encoder = _encoder(args)
    if encoder is None and fingerprint == FAST_ENCODER_SHA256 and not _backbone_options(args):
        encoder = "fast"
        print("(the policy was trained on the fast encoder: loading it; --encoder default overrides)")
    if encoder == "fast":
        return load_fast_encoder()
    size = args.img_size or (tuple(img_size) if isinstance(img_size, (list, tuple)) else img_size)
    random = bool(getattr(args, "random_weights", False))
    name = args.backbone
    if encoder is None and not _backbone_options(args):
        from frozenvit.backbone import embedded_name_for

        name = embedded_name_for(fingerprint)          # a policy trained on an earlier embedded default: that one
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return load_backbone(name, weights=args.weights, img_size=size, pretrained=not random)


def load_backbone_for_camera(args: argparse.Namespace, camera: str, img_size: Any = None,
                             fingerprint: str | None = None) -> Any:
    """load_backbone_for, built for the frames of `camera`: k views of S px side by side need an
    encoder input of (S, k*S). --img-size is then the size S of one view; `img_size` (a policy's) is the
    whole (H, W) input; without either, S is the model's own size. A single camera: exactly
    load_backbone_for. UsageError for an encoder that cannot be built so (the fast encoder: 112 x 112 only)."""
    k = camera_count(camera)
    if k == 1:
        return load_backbone_for(args, img_size, fingerprint)
    if _encoder(args) == "fast":
        _refuse_fast_encoder(camera)
    if args.img_size:
        args = argparse.Namespace(**{**vars(args), "img_size": (args.img_size, k * args.img_size)})
    bb = load_backbone_for(args, img_size, fingerprint)
    S = bb.config.img_size[0]
    if img_size is None and tuple(bb.config.img_size) != (S, k * S):     # the model's own size was one view's
        bb = load_backbone_for(args, (S, k * S), fingerprint)
    if tuple(bb.config.img_size) != (S, k * S):
        raise UsageError(f"{bb.config.name} is built at {bb.config.img_size[0]} x {bb.config.img_size[1]} px; "
                         f"frames of camera {camera!r} are {k} views side by side, which needs {S} x {k * S}")
    return bb


def _refuse_fast_encoder(camera: str) -> None:
    raise UsageError(f"the fast encoder reads one 112 x 112 view; camera {camera!r} has {camera_count(camera)} "
                     "views side by side: use --encoder default (or --backbone) with a composite camera")


def _backbone_options(args: argparse.Namespace) -> list[str]:
    """The explicit backbone options given (they and --encoder exclude each other)."""
    return [flag for flag, v in [("--backbone", getattr(args, "backbone", None)), ("--weights", getattr(args, "weights", None)),
                                 ("--img-size", getattr(args, "img_size", None)),
                                 ("--random-weights", getattr(args, "random_weights", False))] if v]


def _encoder(args: argparse.Namespace) -> str | None:
    """--encoder, checked against the explicit backbone options."""
    encoder = getattr(args, "encoder", None)
    given = _backbone_options(args)
    if encoder is not None and given:
        raise UsageError(f"--encoder {encoder} names a shipped encoder; {', '.join(given)} describe another one: "
                         "give one or the other")
    return encoder


def _cmd_collect(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir

    from .demos import KIND, collect_demos, load_manifest
    from .env import check_task

    from .encoders import FAST_ENCODER_SIZE

    check_output_dir(args.out, KIND)
    check_task(args.task)
    if args.encoder == "fast" and camera_count(args.camera) > 1:
        _refuse_fast_encoder(args.camera)
    size = args.image_size or (FAST_ENCODER_SIZE if args.encoder == "fast" else 224)
    output_dir(args.out, KIND)
    out = collect_demos(args.task, args.out, args.episodes, camera=args.camera, image_size=size,
                        max_steps=args.max_steps, hold_steps=args.hold_steps, first_config=args.first_config,
                        expert=args.expert, render=render_settings(args))
    m = load_manifest(out)
    steps = [e["steps"] for e in m["episodes"]]
    print(f"{len(steps)} successful episodes of {args.task} in {out} ({sum(steps)} frames, "
          f"{len(m['failed_configs'])} configurations where the expert failed)")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    from .demos import load_manifest
    from .features import backbone_meta, block_label, cache_features
    from .head import AttentionConfig
    from .policy import KIND, PatchTokenPolicy

    attention = AttentionConfig(queries=args.queries, heads=args.heads, with_cls=args.with_cls)
    if args.pooling != "attention":
        given = [f for f, v, default in [("--queries", args.queries, DEFAULT_QUERIES),
                                         ("--heads", args.heads, DEFAULT_HEADS), ("--with-cls", args.with_cls, False)]
                 if v != default]
        if given:
            raise UsageError(f"{', '.join(given)} belong to --pooling attention, not --pooling {args.pooling}")
        attention = None
    check_artifact_dir(args.out, KIND)
    if args.checkpoint:
        check_artifact_dir(args.checkpoint, KIND, flag="--checkpoint")
    demos = load_manifest(args.demos)                  # a missing or foreign folder fails before the encoder loads
    bb = load_backbone_for_camera(args, demos.get("camera", DEFAULT_CAMERA))
    block = _block(args.block, bb.config.depth)
    pol = PatchTokenPolicy(args.pooling, attention, hidden=args.hidden, epochs=args.epochs, batch_size=args.batch_size,
                           lr=args.lr, seed=args.seed, chunk=args.chunk, chunk_decay=args.chunk_decay)
    pol.head_config(backbone_meta(bb, block))          # hyperparameters that cannot fit fail before any encoding
    cache = cache_features(args.demos, bb, block=block, views=args.views)
    size = cache.nbytes()
    print(f"features: {size['tokens'] / 2**20:.1f} MiB for {len(cache)} frames"
          + (f", {size['views'] / 2**20:.1f} MiB more for {cache.views} views of each" if cache.views else "")
          + " (in memory and on disk)")
    pol.fit(cache, checkpoint_dir=args.checkpoint)
    pol.save(args.out)
    random = "" if bb.config.pretrained else " RANDOM weights"
    print(f"trained {args.pooling} policy on {len(cache)} frames of {cache.meta['task']} ({bb.config.name}{random} "
          f"{_px(bb.config.img_size)}, block {block_label(cache.meta)}); final loss {pol.history_[-1]:.4f}; "
          f"saved to {args.out}")
    return 0


def _block(blocks: list[int] | None, depth: int) -> int | list[int] | None:
    if blocks is None:
        return None
    for b in blocks:
        if not -depth <= b < depth:
            raise UsageError(f"--block {b} is out of range for a {depth}-block backbone (0..{depth - 1}, or negative "
                             "from the end)")
    if len({b % depth for b in blocks}) < len(blocks):
        raise UsageError(f"--block {' '.join(map(str, blocks))} names a block twice")
    return blocks[0] if len(blocks) == 1 else blocks


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from frozenvit.backbone.suite.artifacts import check_output_dir, check_output_file, output_dir, write_json
    from frozenvit.backbone.suite.engine import engine_from_args, engine_session

    from .env import check_task, config_seeds
    from .evaluate import evaluate
    from .policy import PatchTokenPolicy

    check_output_file(args.json, "control.evaluate", flag="--json")
    engine_from_args(args)                             # --workers without --ray fails before any work
    if args.gif_dir and args.gifs:
        check_output_dir(args.gif_dir, "control.gifs", flag="--gif-dir")
    if args.task:
        check_task(args.task)
    pol = PatchTokenPolicy.load(args.policy)
    bb = load_backbone_for_camera(args, pol.meta_.get("camera", DEFAULT_CAMERA), pol.meta_["img_size"],
                                  pol.meta_.get("fingerprint"))
    pol.check_backbone(bb)
    if args.gif_dir and args.gifs:
        output_dir(args.gif_dir, "control.gifs", flag="--gif-dir")
    journal = Path(args.json).with_suffix(".episodes.jsonl") if args.json else None
    with engine_session(args) as engine:
        res = evaluate(pol, bb, config_seeds("heldout", args.configs), task=args.task, max_steps=args.max_steps,
                       parallel=args.parallel, gif_dir=args.gif_dir, gif_episodes=args.gifs,
                       render=render_settings(args, pol.meta_.get("render")), journal=journal, engine=engine,
                       workers=args.workers)
    print(f"{res.task}: success {sum(res.successes)}/{len(res.successes)} = {res.success_rate:.2f} "
          f"on held-out configurations (cap {res.max_steps} steps)")
    for g in res.gifs:
        print("gif:", g)
    if args.json:
        write_json(args.json, res.to_dict(), kind="control.evaluate")
        print(f"wrote {args.json} (episodes: {journal})")
    return 0


def _cmd_latency(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .agent import VisuomotorAgent
    from .env import MetaWorldTask
    from .latency import UntrainedHead, measure_latency
    from .policy import PatchTokenPolicy

    check_output_file(args.json, "control.latency", flag="--json")
    check_output_file(args.hist, "control.latency", flag="--hist")
    if args.policy:
        pol = PatchTokenPolicy.load(args.policy)
        trained = pol.meta_.get("camera", DEFAULT_CAMERA)
        task, camera = pol.meta_.get("task", args.task), args.camera or trained
        if camera_count(camera) != camera_count(trained):
            raise UsageError(f"--camera {camera} shows {camera_count(camera)} view(s), the policy was trained on "
                             f"{trained!r} ({camera_count(trained)}): give a camera with as many views")
        bb = load_backbone_for_camera(args, camera, pol.meta_["img_size"], pol.meta_.get("fingerprint"))
    else:
        task, camera = args.task, args.camera or DEFAULT_CAMERA
        bb = load_backbone_for_camera(args, camera)
        pol = UntrainedHead(bb, args.pooling, chunk=args.chunk)
        print("(no --policy: an untrained head of the same shape; latency does not depend on its weights)")
    agent = VisuomotorAgent(pol, bb)
    size = bb.config.img_size[0]                       # one view's: a composite camera's frames are (S, k*S)
    with MetaWorldTask(task, camera=camera, image_size=size,
                       render=render_settings(args, pol.meta_.get("render"))) as env:
        rep = measure_latency(agent, env, steps=args.steps, warmup=args.warmup)
    _print_rows(rep.table())
    s = rep.summary()
    print(f"{bb.config.name} at {_px(bb.config.img_size)}, {s['threads']} threads: p50 {s['p50']:.1f} ms, "
          f"p95 {s['p95']:.1f}, p99 {s['p99']:.1f} ({s['fps_p50']:.1f} steps/s at p50)")
    ok = True
    if args.budget_ms:
        ok, msg = rep.verdict(args.budget_ms)
        print(msg)
    if args.hist:
        rep.histogram(args.budget_ms).savefig(args.hist, dpi=100, metadata={"frozenvit": "control.latency"})
        print("histogram:", args.hist)
    if args.json:
        write_json(args.json, rep.to_dict(), kind="control.latency")
    return 0 if ok else 1


def _px(img_size: Any) -> str:
    """'224px' for a square input (as before composite cameras), '160x320px' otherwise."""
    H, W = img_size
    return f"{H}px" if H == W else f"{H}x{W}px"


def _print_rows(rows: list[dict[str, Any]]) -> None:
    cols = list(rows[0])
    print("  ".join(f"{c:>10s}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>10.2f}" if isinstance(r[c], float) else f"{r[c]:>10s}" for c in cols))
