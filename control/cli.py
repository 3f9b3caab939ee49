"""`frozenvit control collect | train | evaluate | compare | latency`.

    frozenvit control collect  --task reach-v3 --out runs/demos/reach --episodes 25
    frozenvit control train    --demos runs/demos/reach --out runs/policies/reach
    frozenvit control evaluate --policy runs/policies/reach --configs 50 --out runs/eval/reach
    frozenvit control compare  runs/eval/reach runs/eval/reach-small
    frozenvit control latency  --policy runs/policies/reach --steps 300 --budget-ms 90 --out runs/latency

--backbone chooses the encoder: `embedded` (the embedded default ViT), `metaworld-fast` (4 blocks distilled
on Meta-World, 112 px), or a timm name with --weights. evaluate and latency use the encoder a policy was
trained on, at its input size, unless told otherwise. `evaluate --out DIR` writes every episode to
DIR/episodes.jsonl as it ends: the same command again resumes a stopped run, another --configs reuses the
episodes of the configurations already rolled out (and keeps the others for later), and another evaluation
(another policy, --task, --max-steps, ...) replaces the earlier one's episodes, with a warning saying what differs.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from frozenvit.backbone.runtimes import add_runtime_arg
from frozenvit.backbone.suite.cli import add_backbone_args, add_threads_arg, number
from frozenvit.backbone.suite.engine import add_engine_args
from frozenvit.backbone.suite.errors import UsageError

from .defaults import (DEFAULT_BATCH_SIZE, DEFAULT_BC_STEPS, DEFAULT_CAMERA, DEFAULT_CHECKPOINT_EVERY, DEFAULT_CHUNK,
                       DEFAULT_CONFIGS, DEFAULT_EPISODES, DEFAULT_EXPERT, DEFAULT_HEADS, DEFAULT_HIDDEN,
                       DEFAULT_HOLD_STEPS, DEFAULT_LR, DEFAULT_MAX_STEPS, DEFAULT_PARALLEL, DEFAULT_POOLING,
                       DEFAULT_PRECISION, DEFAULT_QUERIES, DEFAULT_SEED, DEFAULT_VIEWS, DEFAULT_VIEW_JITTER,
                       DEFAULT_VIEW_SHIFT, HELDOUT_OFFSET, LATENCY_STEPS, LATENCY_TASK, LATENCY_WARMUP,
                       MAX_BATCH_SIZE, MAX_CHUNK, MAX_CONFIGS, MAX_HIDDEN, MAX_IMAGE_SIZE, MAX_PARALLEL, MAX_QUERIES,
                       MAX_VIEWS, MIN_IMAGE_SIZE, POOLINGS, PRECISIONS)
from .experts import EXPERTS


POSITIVE = number(int, min=1)
COUNT = number(int, min=0)
POSITIVE_FINITE = number(float, min=0, min_open=True)
OVER_BUDGET = 3            # exit status of `control latency` when p99 is over --budget-ms
EVALUATE_KIND, LATENCY_KIND = "control.evaluate", "control.latency"
BACKBONE_HELP = "embedded (the embedded default ViT), metaworld-fast (4 blocks distilled on Meta-World, 112 px)"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("control", help="visuomotor policy on Meta-World: demos, BC, evaluation, latency",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="control_cmd", required=True)

    q = sub.add_parser("collect", help="record scripted-expert demos (successful episodes only; resumable)")
    q.add_argument("--task", required=True, help="Meta-World v3 task, e.g. reach-v3")
    q.add_argument("--out", required=True,
                   help="demo folder: new, empty, or an earlier collect output of the same task (re-run to resume)")
    q.add_argument("--episodes", type=POSITIVE, default=DEFAULT_EPISODES, help="successful episodes to record")
    q.add_argument("--camera", default=DEFAULT_CAMERA,
                   help="corner, corner2, corner3, topview, ... (frames are upright)")
    _backbone_args(q, "embedded; the frames are rendered at its input size unless --image-size says otherwise",
                   random_weights=False)
    _set_help(q, "--image-size", f"size of the rendered frames in pixels, {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} "
                                 "(default: the --backbone's input size); any size in that range: `control train` "
                                 "resizes the frames to its encoder's input size, and only that size must be a "
                                 "multiple of the encoder's patch size")
    q.add_argument("--max-steps", type=POSITIVE, default=DEFAULT_MAX_STEPS,
                   help="episode cap; configurations where the expert needs longer are skipped")
    q.add_argument("--hold-steps", type=COUNT, default=DEFAULT_HOLD_STEPS,
                   help="record the expert this many steps past its first success (what to do at the goal; "
                        "0: demos end at success)")
    q.add_argument("--first-config", type=number(int, min=0, max=HELDOUT_OFFSET - 1), default=0,
                   help=f"first training configuration seed (training seeds are 0 to {HELDOUT_OFFSET - 1})")
    q.add_argument("--expert", choices=EXPERTS, default=DEFAULT_EXPERT,
                   help="who demonstrates: 'default', Meta-World's scripted expert made to end where the task "
                        "scores success (once it succeeds or stalls, the point the task scores is servoed onto the "
                        "goal), except on peg-insert-side-v3 (it does not go back down to a peg it holds); "
                        "'servo': the former on every task; 'metaworld': Meta-World's own on every task")
    q.set_defaults(func=_cmd_collect)

    q = sub.add_parser("train", help="cache frozen features of the demos and fit a policy head by BC")
    q.add_argument("--demos", required=True, help="demo folder from `control collect`")
    q.add_argument("--out", required=True, help="policy folder (config.json + model.safetensors): new, empty, or an "
                                                "earlier policy, which is replaced")
    q.add_argument("--pooling", choices=POOLINGS, default=DEFAULT_POOLING,
                   help="how a frame's patch tokens become one feature")
    q.add_argument("--queries", type=number(int, min=1, max=MAX_QUERIES), default=DEFAULT_QUERIES,
                   help=f"attention pooling: learned queries (1 to {MAX_QUERIES})")
    q.add_argument("--heads", type=POSITIVE, default=DEFAULT_HEADS,
                   help="attention pooling: attention heads (must divide the token width)")
    q.add_argument("--hidden", type=number(int, min=1, max=MAX_HIDDEN), default=DEFAULT_HIDDEN,
                   help=f"width of the MLP's hidden layers (1 to {MAX_HIDDEN})")
    q.add_argument("--epochs", type=POSITIVE, default=None,
                   help=f"behaviour-cloning epochs (without it: as many as make about {DEFAULT_BC_STEPS} optimizer "
                        "steps, whatever the number of demo frames)")
    q.add_argument("--batch-size", type=number(int, min=1, max=MAX_BATCH_SIZE), default=DEFAULT_BATCH_SIZE,
                   help=f"frames per optimizer step (1 to {MAX_BATCH_SIZE})")
    q.add_argument("--lr", type=POSITIVE_FINITE, default=DEFAULT_LR,
                   help="peak learning rate (5%% warm-up, then cosine decay)")
    q.add_argument("--chunk", type=number(int, min=1, max=MAX_CHUNK), default=DEFAULT_CHUNK, metavar="K",
                   help="actions predicted per frame (action chunks, ACT); at run time the action is the weighted "
                        f"mean of the up to K predictions made for that step; 1: one action (1 to {MAX_CHUNK})")
    q.add_argument("--views", type=number(int, min=0, max=MAX_VIEWS), default=DEFAULT_VIEWS, metavar="K",
                   help=f"augmented views per demo frame (random shift of {DEFAULT_VIEW_SHIFT} px at the encoder's "
                        f"input size, colour jitter +-{DEFAULT_VIEW_JITTER:g}), encoded once and cached beside the "
                        "clean features; each BC sample reads the frame or one of its views; costs K times the clean "
                        f"features' memory and disk (at most {MAX_VIEWS}); 0: none")
    q.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                   help="arithmetic of the encoder while caching the demo features and of attention pooling's "
                        "products with the tokens in training (weights and the run-time policy are float32 either "
                        "way); auto: bfloat16 where the CPU multiplies it natively (AMX, AVX512-BF16), else float32")
    q.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help="seed of the head's initialisation and of the shuffling")
    q.add_argument("--checkpoint", default=None,
                   help="checkpoint folder, resumed by re-running (new, empty, or an earlier checkpoint of the same "
                        "demos, encoder options and hyperparameters; not a finished policy, not --out); saved every "
                        "--checkpoint-every epochs, after the last, and when training is stopped (Ctrl-C: the last "
                        "epoch it finished); without it training is not checkpointed")
    q.add_argument("--checkpoint-every", type=POSITIVE, default=DEFAULT_CHECKPOINT_EVERY, metavar="N", action=_Given,
                   help="epochs between the checkpoints of --checkpoint (the interval bounds what a killed run "
                        "loses; Ctrl-C loses only the epoch it stops)")
    _backbone_args(q, "embedded", blocks_help="blocks whose tokens are read, side by side (default: 2,5,11 on a "
                                              "12-block encoder, the last of the first quarter, of the first half and "
                                              "of all; the last alone on one of fewer blocks)")
    _set_help(q, "--image-size", f"the encoder's input size in pixels, {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE}, a "
                                 "multiple of its patch size (default: the backbone's own); demo frames of another "
                                 "size are resized to it, and a line says so: the demos' own size encodes them as "
                                 "they are")
    add_threads_arg(q)
    q.set_defaults(func=_cmd_train)

    q = sub.add_parser("evaluate", help="success rate on held-out configurations (resumable with --out)")
    q.add_argument("--policy", required=True, help="policy folder from `control train`")
    q.add_argument("--configs", type=number(int, min=1, max=MAX_CONFIGS), default=DEFAULT_CONFIGS,
                   help=f"number of held-out configurations (1 to {MAX_CONFIGS})")
    q.add_argument("--task", default=None, help="Meta-World task (without it: the one the policy was trained on)")
    q.add_argument("--max-steps", type=POSITIVE, default=DEFAULT_MAX_STEPS, help="episode cap")
    q.add_argument("--parallel", type=number(int, min=1, max=MAX_PARALLEL), default=DEFAULT_PARALLEL,
                   help=f"environments stepped in lockstep (1 to {MAX_PARALLEL})")
    q.add_argument("--out", default=None,
                   help="results folder (new, empty, or an earlier evaluate output): results.json, every episode in "
                        "episodes.jsonl as it ends (re-running the same command resumes a stopped run; another "
                        "--configs reuses the episodes already there and keeps those it does not ask for; another "
                        "policy, --task or --max-steps replaces the earlier episodes), gifs/; "
                        "without it the result is only printed")
    q.add_argument("--gifs", type=COUNT, default=0, metavar="N",
                   help="save the rollouts of the first N configurations as GIFs in OUT/gifs (needs --out); on a "
                        "finished or stopped run, finished episodes without a GIF are rolled out again for their "
                        "GIFs (the journal's results stand)")
    _backbone_args(q, "the one the policy was trained on, at its input size")
    _policy_image_size_help(q, "the policy's input size", "frames are rendered at the size of the policy's demos, "
                                                          "as in its training")
    add_runtime_arg(q)
    add_threads_arg(q)
    add_engine_args(q)
    q.set_defaults(func=_cmd_evaluate)

    q = sub.add_parser("compare", help="pair two or more evaluations on their shared configurations (exact McNemar)",
                       description="Success of each `control evaluate` output on the held-out configurations they "
                                   "all ran, and an exact McNemar test of each against the first: the same "
                                   "configuration is the same initial scene, so outcomes pair episode by episode "
                                   "and a difference needs far fewer episodes to show than two success rates do. "
                                   "Same --task and --max-steps needed.")
    q.add_argument("evaluations", nargs="+", metavar="EVAL",
                   help="`control evaluate --out` folders (or their results.json); the first is the reference")
    q.add_argument("--labels", default=None,
                   help="comma-separated names for the evaluations, in order (default: their folder names)")
    q.set_defaults(func=_cmd_compare)

    q = sub.add_parser("latency", help="per-step latency of render+preprocess+encode+head+step",
                       epilog=f"Exit status {OVER_BUDGET} when p99 is over --budget-ms with every runtime.")
    q.add_argument("--policy", default=None,
                   help="trained policy (without it: an untrained head of the same shape, on --backbone)")
    q.add_argument("--task", default=LATENCY_TASK, action=_Given,
                   help="Meta-World task (a --policy's own when given)")
    q.add_argument("--camera", default=None, action=_Given,
                   help=f"camera (a --policy's own when given; without --policy: {DEFAULT_CAMERA})")
    q.add_argument("--pooling", choices=POOLINGS, default=DEFAULT_POOLING, action=_Given,
                   help="pooling of the untrained head (a --policy's own when given)")
    q.add_argument("--chunk", type=POSITIVE, default=DEFAULT_CHUNK, metavar="K", action=_Given,
                   help="actions per frame of the untrained head (a --policy's own when given)")
    q.add_argument("--steps", type=POSITIVE, default=LATENCY_STEPS, help="timed steps")
    q.add_argument("--warmup", type=COUNT, default=LATENCY_WARMUP, help="untimed steps first")
    q.add_argument("--budget-ms", type=POSITIVE_FINITE, default=None,
                   help=f"control period: verdict on p99, exit status {OVER_BUDGET} if over it "
                        "(without it: no verdict)")
    q.add_argument("--out", default=None,
                   help="report folder (new, empty, or an earlier latency output): latency.json and histogram.png; "
                        "without it the report is only printed")
    _backbone_args(q, "a --policy's own, at its input size; else embedded")
    _policy_image_size_help(q, "a --policy's input size; without --policy, the backbone's own",
                            "frames are rendered at the size of a --policy's demos, as evaluate renders them; "
                            "without --policy, at the encoder's input size")
    add_runtime_arg(q, several=True)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_latency)


class _Given(argparse.Action):
    """Store the value and remember that the command line gave the option (in `args.given`), so that a value the
    command overrides can be told apart from the default."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.given = getattr(namespace, "given", frozenset()) | {self.dest}


def _note_overridden(args: argparse.Namespace, fixed: dict[str, Any]) -> None:
    """One line for each option given on the command line that the policy overrides ({dest: the policy's value})."""
    for dest, value in fixed.items():
        if dest in getattr(args, "given", ()) and getattr(args, dest) != value:
            how = f"on {value}" if dest == "task" else f"with {dest} {value}"
            print(f"--{dest.replace('_', '-')} {getattr(args, dest)} ignored: the policy was trained {how}")


def _backbone_args(q: argparse.ArgumentParser, default_help: str, blocks_help: str | None = None,
                   random_weights: bool = True) -> None:
    add_backbone_args(q, default_help=f"{default_help}; named: {BACKBONE_HELP}", blocks_help=blocks_help)
    if random_weights:
        q.add_argument("--random-weights", action="store_true",
                       help="the backbone's architecture with random weights, the same every time (baselines)")


def _set_help(q: argparse.ArgumentParser, flag: str, text: str) -> None:
    """Replace the help of an option a shared helper added (add_backbone_args)."""
    next(a for a in q._actions if flag in a.option_strings).help = text


def _policy_image_size_help(q: argparse.ArgumentParser, default: str, frames: str) -> None:
    """--image-size's help where a --policy sets the encoder: its default is the policy's input size."""
    _set_help(q, "--image-size", f"the encoder's input size in pixels, {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} "
                                 f"(default: {default}), a multiple of its patch size; {frames}")


def _check_image_size(args: argparse.Namespace) -> None:
    """UsageError for an --image-size out of MIN_IMAGE_SIZE..MAX_IMAGE_SIZE, before any work."""
    size = args.image_size
    if size is not None and not MIN_IMAGE_SIZE <= size <= MAX_IMAGE_SIZE:
        raise UsageError(f"--image-size must be {MIN_IMAGE_SIZE} to {MAX_IMAGE_SIZE} px for a control command "
                         f"(frames are rendered and encoded at that size), got {size}")


def _encoder(args: argparse.Namespace, policy: Any = None) -> Any:
    """The encoder the command asks for; for a `policy`, the one it was trained on unless told otherwise."""
    from .encoders import encoder_for_policy, load_encoder

    kw = dict(pretrained=not getattr(args, "random_weights", False))
    if policy is not None:
        return encoder_for_policy(policy, args.backbone, args.weights, args.image_size, **kw)
    return load_encoder(args.backbone, args.weights, args.image_size, **kw)


def _cmd_collect(args: argparse.Namespace) -> int:
    from .demos import check_demo_dir, collect_demos, load_manifest
    from .env import check_camera, check_task

    _check_image_size(args)
    left = HELDOUT_OFFSET - args.first_config
    if left < args.episodes:
        raise UsageError(f"--first-config {args.first_config} leaves {left} training "
                         f"configuration{'s' * (left != 1)}, fewer than --episodes {args.episodes}; training "
                         f"configurations are 0 to {HELDOUT_OFFSET - 1}")
    check_demo_dir(args.out)
    check_task(args.task)
    check_camera(args.task, args.camera)
    size = args.image_size or _encoder(args).config.img_size[0]
    # collect_demos claims --out itself (output_dir), once every input is known to be good
    out = collect_demos(args.task, args.out, args.episodes, camera=args.camera, image_size=size,
                        max_steps=args.max_steps, hold_steps=args.hold_steps, first_config=args.first_config,
                        expert=args.expert, flag="--out")
    m = load_manifest(out)
    steps = [e["steps"] for e in m["episodes"]]
    print(f"{len(steps)} successful episodes of {args.task} in {out} ({sum(steps)} frames, "
          f"{len(m['failed_configs'])} configurations where the expert failed)")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from frozenvit.backbone.suite.artifacts import check_artifact_dir
    from frozenvit.backbone.suite.errors import OutputConflict

    from .demos import load_manifest
    from .features import backbone_meta, block_label, cache_features, feature_meta
    from .head import AttentionConfig
    from .policy import KIND, PatchTokenPolicy, check_checkpoint_dir

    _check_image_size(args)
    attention = AttentionConfig(queries=args.queries, heads=args.heads)
    if args.pooling != "attention":
        given = [f for f, v, default in [("--queries", args.queries, DEFAULT_QUERIES),
                                         ("--heads", args.heads, DEFAULT_HEADS)] if v != default]
        if given:
            raise UsageError(f"{', '.join(given)} belong to --pooling attention, not --pooling {args.pooling}")
        attention = None
    if "checkpoint_every" in getattr(args, "given", ()) and not args.checkpoint:
        raise UsageError(f"--checkpoint-every {args.checkpoint_every} sets how often --checkpoint DIR is saved: give "
                         "--checkpoint DIR too, or drop --checkpoint-every")
    if args.checkpoint:
        out, ckpt = Path(args.out).resolve(), Path(args.checkpoint).resolve()
        if out == ckpt or out in ckpt.parents or ckpt in out.parents:
            raise OutputConflict(f"--out {args.out} and --checkpoint {args.checkpoint} "
                                 f"{'are the same folder' if out == ckpt else 'lie one inside the other'}: saving the "
                                 "policy would remove the checkpoint's training state; give --checkpoint a folder of "
                                 "its own")
    check_artifact_dir(args.out, KIND)
    if args.checkpoint:                                # a finished policy is no checkpoint: refused before any work
        check_checkpoint_dir(args.checkpoint)
    manifest = load_manifest(args.demos)               # a missing or foreign folder fails before the encoder loads
    bb = _encoder(args)
    note = _resize_note(int(manifest["image_size"]), bb, args.backbone)
    if note:
        print(note)
    blocks = _blocks(args.blocks, bb.config.depth)
    pol = PatchTokenPolicy(args.pooling, attention, hidden=args.hidden, epochs=args.epochs, batch_size=args.batch_size,
                           lr=args.lr, seed=args.seed, chunk=args.chunk, precision=args.precision)
    pol.head_config(backbone_meta(bb, blocks))         # hyperparameters that cannot fit fail before any encoding
    if args.checkpoint:                                # so does a checkpoint of other settings or a damaged one
        meta = feature_meta(args.demos, bb, block=blocks, views=args.views, precision=args.precision)
        pol.check_checkpoint(args.checkpoint, meta, sum(int(e["steps"]) for e in manifest["episodes"]))
    cache = cache_features(args.demos, bb, block=blocks, views=args.views, precision=args.precision)
    size = cache.nbytes()
    print(f"features: {size['tokens'] / 2**20:.1f} MiB for {len(cache)} frames"
          + (f", {size['views'] / 2**20:.1f} MiB more for {cache.views} views of each" if cache.views else "")
          + " (in memory and on disk)")
    try:
        pol.fit(cache, checkpoint_dir=args.checkpoint, checkpoint_every=args.checkpoint_every)
    except KeyboardInterrupt:
        if args.checkpoint:
            print(_checkpoint_note(args.checkpoint), file=sys.stderr)
        raise
    path = pol.save(args.out)
    random = "" if bb.config.pretrained else " RANDOM weights"
    print(f"trained {args.pooling} policy on {len(cache)} frames of {cache.meta['task']} "
          f"({_encoder_name(bb, pol)}{random} {bb.config.img_size[0]}px, blocks {block_label(cache.meta)}); "
          f"final loss {pol.history_[-1]:.4f}; saved to {path}")
    return 0


def _resize_note(demo_size: int, bb: Any, backbone: str | None) -> str | None:
    """The line `control train` prints when the demos' frames are not the encoder's input size (each frame is
    resized, and encoded at the encoder's size whatever the frames hold), with the option that matches them;
    None when they are."""
    from .encoders import FAST

    h, w = (int(x) for x in bb.config.img_size)
    if (h, w) == (demo_size, demo_size):
        return None
    size = f"{h} px" if h == w else f"{h}x{w} px"
    if backbone == FAST:                               # a fixed input size: only the demos can match it
        cure = f"collect the demos at {size} (collect --backbone {FAST})"
    elif demo_size % bb.config.patch_size == 0:
        cure = (f"give --image-size {demo_size} to encode them at their own size, or collect the demos at "
                f"--image-size {h}" if h == w else f"give --image-size {demo_size} to encode them at their own size")
    else:
        cure = (f"collect the demos at the encoder's size or at a multiple of its {bb.config.patch_size}-px patches "
                "and give that as --image-size")
    return (f"note: the demo frames are {demo_size} px and the encoder takes {size}: each frame is resized from "
            f"{demo_size} to {size} before encoding, which costs what {size} frames cost; to match, {cure}")


def _checkpoint_note(checkpoint: str) -> str:
    """What a stopped `control train --checkpoint` left: the epoch its checkpoint holds, and how to resume."""
    import json
    from pathlib import Path

    try:
        epoch = json.loads((Path(checkpoint) / "train_state.json").read_text())["epoch"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"stopped before the first epoch ended: --checkpoint {checkpoint} holds no checkpoint yet"
    return (f"stopped: --checkpoint {checkpoint} holds epoch {epoch}; run the same command again to resume from it "
            "(it ends as an uninterrupted run would)")


def _encoder_name(bb: Any, policy: Any = None) -> str:
    """The encoder as summary lines name it: "metaworld-fast (vit_tiny_patch16_224)" for the fast encoder (a policy's
    fingerprint or the encoder's weights sha256 says so), else its architecture."""
    from .encoders import FAST, FAST_ENCODER_SHA256

    meta = getattr(policy, "meta_", None) or {}
    fast = FAST_ENCODER_SHA256 in (meta.get("fingerprint"), getattr(bb.config, "weights_sha256", None))
    return f"{FAST} ({bb.config.name})" if fast else bb.config.name


def _blocks(blocks: tuple[int, ...] | None, depth: int) -> int | list[int] | None:
    """--blocks as `cache_features` takes them (None: its default); UsageError for a block out of range or twice."""
    if blocks is None:
        return None
    if max(blocks) >= depth:
        raise UsageError(f"--blocks {max(blocks)} is out of range for a {depth}-block backbone (0..{depth - 1})")
    if len(set(blocks)) < len(blocks):
        raise UsageError(f"--blocks {','.join(map(str, blocks))} names a block twice")
    return blocks[0] if len(blocks) == 1 else list(blocks)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from frozenvit.backbone.export import runtime_backbone
    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir, remove_earlier_outputs, write_json
    from frozenvit.backbone.suite.engine import engine_from_args, engine_session

    from .env import check_task, config_seeds
    from .evaluate import evaluate, journal_listing
    from .features import token_blocks
    from .policy import PatchTokenPolicy

    _check_image_size(args)
    if args.gifs and not args.out:
        raise UsageError("--gifs writes into --out DIR/gifs: give --out")
    if args.out:
        check_output_dir(args.out, EVALUATE_KIND, names=["results.json"])   # a user's folder or file first
        pol_dir, out_dir = Path(args.policy).resolve(), Path(args.out).resolve()
        if out_dir == pol_dir or pol_dir in out_dir.parents:
            raise UsageError(f"--out {args.out} {'is' if out_dir == pol_dir else 'lies inside'} --policy "
                             f"{args.policy}: the policy folder holds the policy alone (a later `control train` into "
                             "it would refuse the results); give --out a folder outside it")
    engine_from_args(args)                             # --workers without --ray fails before any work
    if args.runtime != "torch" and args.ray is not None:
        raise UsageError(f"--runtime {args.runtime} runs in this process only; drop --ray or --runtime")
    if args.task:
        check_task(args.task)
    pol = PatchTokenPolicy.load(args.policy)
    bb = runtime_backbone(_encoder(args, pol), args.runtime, token_blocks(pol.meta_))
    configs = config_seeds("heldout", args.configs)
    task = args.task or pol.meta_.get("task")         # the GIFs' names (`evaluate`): a user's file of one is refused
    gif_names = [f"gifs/{task}_cfg{int(c)}.gif" for c in configs[:args.gifs]] if task else []
    out = output_dir(args.out, EVALUATE_KIND, names=["results.json", *gif_names]) if args.out else None

    def fresh_journal() -> None:                       # before any rollout: nothing of an earlier evaluation stays
        gone = remove_earlier_outputs(out, {"episodes.jsonl"})
        if gone:
            print(f"removed {_files_named(gone)} of the evaluation this one replaced")

    start = time.monotonic()
    with engine_session(args) as engine:
        res = evaluate(pol, bb, configs, task=args.task, max_steps=args.max_steps,
                       parallel=args.parallel, gif_dir=out / "gifs" if out else None,
                       gif_episodes=args.gifs, journal=out / "episodes.jsonl" if out else None, engine=engine,
                       workers=args.workers, on_new_journal=fresh_journal if out else None)
    seconds = time.monotonic() - start               # this run's; the episodes of earlier runs add theirs
    print(f"{res.task}: success {sum(res.successes)}/{len(res.successes)} = {res.success_rate:.2f} "
          f"on held-out configurations (cap {res.max_steps} steps)")
    if args.gifs > len(res.configs):
        print(f"--gifs {args.gifs}: there are only {len(res.configs)} configurations, one GIF each")
    for g in res.gifs:
        print("gif:", g)
    if res.earlier_episodes:
        untimed = f", {res.untimed_episodes} of them of unknown time" if res.untimed_episodes else ""
        now = len(res.configs) - res.earlier_episodes
        print(f"{res.earlier_episodes} of the {len(res.configs)} episodes came from the journal of an earlier run "
              f"({res.earlier_seconds:.1f} s{untimed}), {now} {'was' if now == 1 else 'were'} rolled out now "
              f"({seconds:.1f} s)")
    if out:
        gifs = [Path(g).relative_to(out).as_posix() for g in res.gifs]      # relative to the results folder
        # seconds: the whole evaluation's, earlier runs' episodes (their journal lines' times) and this run;
        # seconds_this_run: this command's alone; untimed_episodes: journal episodes whose time is not known
        body = dict(res.to_dict(), gifs=gifs, policy_path=str(Path(args.policy).resolve()), runtime=args.runtime,
                    engine=engine, seconds=round(res.earlier_seconds + seconds, 1),
                    seconds_this_run=round(seconds, 1))
        write_json(Path(out) / "results.json", body, kind=EVALUATE_KIND)
        print(f"wrote {out / 'results.json'} (episodes: {out / 'episodes.jsonl'})")
        episodes, listed = journal_listing(out / "episodes.jsonl")
        others = len(set(episodes) - set(res.configs))
        if others:
            print(f"the journal also holds {others} episode{'s' * (others != 1)} of configurations not asked this "
                  "time: kept for a later --configs, not counted in these results")
        keep = {"results.json", *gifs, *(f"gifs/{name}" for name in listed.values())}   # every GIF it lists
        gone = remove_earlier_outputs(out, keep)      # GIFs this evaluation's journal does not list
        if gone:
            print(f"removed {_files_named(gone)} that this evaluation did not write")
    return 0


def _files_named(names: list[str]) -> str:
    """"3 GIFs and results.json": the GIFs counted, other files named."""
    gifs = [n for n in names if n.endswith(".gif")]
    parts = ([f"{len(gifs)} GIF{'s' * (len(gifs) > 1)}"] if gifs else []) + [n for n in names if n not in gifs]
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def _cmd_compare(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from .compare import compare_evaluations

    if len(args.evaluations) < 2:
        raise UsageError("control compare needs two evaluations or more: frozenvit control compare A B")
    files = [Path(e) / "results.json" if Path(e).is_dir() else Path(e) for e in args.evaluations]
    seen: dict[Path, str] = {}
    for given, f in zip(args.evaluations, files):       # one evaluation twice would pair it with itself
        if f.resolve() in seen:
            same = "given twice" if seen[f.resolve()] == given else f"given twice ({seen[f.resolve()]} and {given})"
            raise UsageError(f"{f.resolve()} is the same evaluation {same}: compare it with another `control "
                             "evaluate --out` folder (or its results.json)")
        seen[f.resolve()] = given
    labels = ([x.strip() for x in args.labels.split(",")] if args.labels
              else [f.parent.name if f.name == "results.json" else f.stem for f in files])
    if len(labels) != len(files):
        raise UsageError(f"--labels names {len(labels)} evaluations, {len(files)} were given; give one name each")
    if len(set(labels)) < len(labels):
        if args.labels:
            raise UsageError(f"--labels {args.labels}: each evaluation needs a name of its own")
        labels = [str(f.parent if f.name == "results.json" else f) for f in files]
    results = {}
    for label, f, given in zip(labels, files, args.evaluations):
        if not f.is_file():
            what = "no results.json there" if Path(given).is_dir() else "no such file or folder"
            raise UsageError(f"{given}: {what}; give a `control evaluate --out` folder or its results.json")
        try:
            results[label] = json.loads(f.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise UsageError(f"{f} is not JSON ({e}); give a `control evaluate --out` folder or its results.json") \
                from None
    c = compare_evaluations(results)
    print(f"{c['task']}: {c['configs']} held-out configurations every evaluation ran (seeds {c['config_seeds'][0]} "
          f"to {c['config_seeds'][1]}), cap {c['max_steps']} steps")
    width = max(len(r["label"]) for r in c["by_label"])
    for r in c["by_label"]:
        print(f"  {r['label']:<{width}}  {r['successes']:>4}/{r['episodes']}  {r['success_rate']:.2f}")
    ref = c["by_label"][0]["label"]
    for label, m in c["paired"].items():
        print(f"{label} against {ref}: {ref} alone succeeded in {m['a_only']}, {label} alone in {m['b_only']} "
              f"episodes; exact McNemar p = {m['p']:.3g}")
    return 0


LATENCY_FILES = ("latency.json", "histogram.png")      # what `control latency --out DIR` writes


def _cmd_latency(args: argparse.Namespace) -> int:
    import io

    from frozenvit.backbone.suite.artifacts import atomic_write_bytes, check_output_dir, output_dir, write_json

    from .env import MetaWorldTask
    from .latency import UntrainedHead, compare_runtimes, comparison_rows
    from .policy import PatchTokenPolicy
    from .render import RenderSettings

    _check_image_size(args)
    if args.out:
        check_output_dir(args.out, LATENCY_KIND, names=LATENCY_FILES)    # a user's file of those names too
    if args.policy:
        pol = PatchTokenPolicy.load(args.policy)
        task, camera = pol.meta_.get("task", args.task), pol.meta_.get("camera", DEFAULT_CAMERA)
        _note_overridden(args, dict(task=task, camera=camera, pooling=pol.pooling, chunk=pol.chunk))
        bb = _encoder(args, pol)
    else:
        task, camera = args.task, args.camera or DEFAULT_CAMERA
        bb = _encoder(args)
        pol = UntrainedHead(bb, args.pooling, chunk=args.chunk)
        print("(no --policy: an untrained head of the same shape; latency does not depend on its weights)")
    render = RenderSettings.from_dict(pol.meta_["render"]) if "render" in pol.meta_ else RenderSettings()
    # the loop the policy runs: frames rendered at its demos' size (as evaluate renders them), resized by the encoder
    frame = int(pol.meta_.get("demo_image_size") or bb.config.img_size[0]) if args.policy else bb.config.img_size[0]
    with MetaWorldTask(task, camera=camera, image_size=frame, render=render) as env:
        reports = compare_runtimes(pol, bb, env, args.runtime, steps=args.steps, warmup=args.warmup,
                                   rounds=1 if len(args.runtime) == 1 else 3)
    _print_rows(comparison_rows(reports) if len(reports) > 1 else next(iter(reports.values())).table())
    fits = []
    for rt, rep in reports.items():
        s = rep.summary()
        threads = f"{s['threads']} thread{'' if s['threads'] == 1 else 's'}"
        print(f"{rt}: frames rendered at {frame}px, {_encoder_name(bb, pol)} at {bb.config.img_size[0]}px, "
              f"{threads}: "
              f"p50 {s['p50']:.1f} ms, "
              f"p95 {s['p95']:.1f}, p99 {s['p99']:.1f} ({s['fps_p50']:.1f} steps/s at p50)")
        if args.budget_ms:
            ok, msg = rep.verdict(args.budget_ms)
            fits.append(ok)
            print(f"{rt}: {msg}")
    if args.out:
        out = output_dir(args.out, LATENCY_KIND, names=LATENCY_FILES)
        first = next(iter(reports.values()))
        body = first.to_dict() if len(reports) == 1 else {
            **first.to_dict(), "runtimes": {rt: rep.to_dict() for rt, rep in reports.items()},
            "comparison": comparison_rows(reports)}
        write_json(out / "latency.json", body, kind=LATENCY_KIND)
        buf = io.BytesIO()
        first.histogram(args.budget_ms).savefig(buf, format="png", dpi=100, metadata={"frozenvit": LATENCY_KIND})
        atomic_write_bytes(out / "histogram.png", buf.getvalue())
        print(f"wrote {out / 'latency.json'} and {out / 'histogram.png'}")
    return 0 if not fits or any(fits) else OVER_BUDGET


def register_export(sub: Any, common: Any) -> None:
    """`frozenvit export policy` (entry-point group frozenvit.export)."""
    from frozenvit.backbone.export_cli import add_export

    add_export(sub, common, "policy", "the encoder of a control policy: its blocks at its input size", "--policy",
               "policy folder from `control train`", _export_sources)


def _export_sources(args: argparse.Namespace) -> list[tuple[str, Any, Any]]:
    from .encoders import encoder_for_policy
    from .features import token_blocks
    from .policy import PatchTokenPolicy

    pol = PatchTokenPolicy.load(args.policy)
    return [("", encoder_for_policy(pol, pretrained=pol.meta_.get("pretrained", True)), token_blocks(pol.meta_))]


def _print_rows(rows: list[dict[str, Any]]) -> None:
    cols = list(rows[0])
    print("  ".join(f"{c:>10s}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>10.2f}" if isinstance(r[c], float) else f"{r[c]:>10s}" for c in cols))
