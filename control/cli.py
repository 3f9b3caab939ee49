"""`frozenvit control collect | train | evaluate | latency`.

    frozenvit control collect  --task reach-v3 --out runs/demos/reach --episodes 25
    frozenvit control train    --demos runs/demos/reach --out runs/policies/reach-attn --pooling attention
    frozenvit control evaluate --policy runs/policies/reach-attn --configs 50 --max-steps 500
    frozenvit control latency  --policy runs/policies/reach-attn --steps 300 --budget-ms 90 --hist lat.png

Without --backbone the embedded default is used; evaluate/latency build it at the input size
the policy was trained with unless --img-size says otherwise.
"""
from __future__ import annotations

import argparse
from typing import Any

from frozenvit.backbone.commands import add_backbone_args
from frozenvit.backbone.suite.cli import add_threads_arg

from .env import RenderSettings
from .defaults import DEFAULT_BC_EPOCHS, DEFAULT_POS_CODE, DEFAULT_QUERY_DIVERSITY, POS_CODES


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("control", help="visuomotor policy on Meta-World: demos, BC, evaluation, latency",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="control_cmd", required=True)

    q = sub.add_parser("collect", help="record scripted-expert demos (successful episodes only; resumable)")
    q.add_argument("--task", required=True, help="Meta-World v3 task, e.g. reach-v3")
    q.add_argument("--out", required=True, help="demo directory (re-run to resume)")
    q.add_argument("--episodes", type=int, default=25)
    _env_args(q)
    q.add_argument("--noise", type=float, default=0.0, help="std of Gaussian noise added to executed actions")
    q.add_argument("--hold-steps", type=int, default=0,
                   help="record the expert this many steps past its first success (what to do at the goal)")
    q.add_argument("--seed", type=int, default=0, help="noise seed")
    q.add_argument("--first-config", type=int, default=0, help="first training configuration seed")
    q.set_defaults(func=_cmd_collect)

    q = sub.add_parser("train", help="cache frozen features of the demos and fit a policy head by BC")
    q.add_argument("--demos", required=True, help="demo directory from `control collect`")
    q.add_argument("--out", required=True, help="policy directory (config.json + model.safetensors)")
    q.add_argument("--pooling", choices=("attention", "cls", "mean"), default="attention")
    q.add_argument("--frames", type=int, default=1, help="frame stack length")
    q.add_argument("--queries", type=int, default=4)
    q.add_argument("--heads", type=int, default=4)
    q.add_argument("--hidden", type=int, default=256)
    q.add_argument("--token-dropout", type=float, default=0.0, help="attention pooling: hide this share of patches")
    q.add_argument("--keypoints", action="store_true", help="attention pooling: also where each query looked (x, y)")
    q.add_argument("--pos-code", choices=POS_CODES, default=DEFAULT_POS_CODE,
                   help="attention pooling: a fixed 2-d sine-cosine position code with orthogonal queries (default), "
                        "or a learned one (the earlier head)")
    q.add_argument("--query-diversity", type=float, default=DEFAULT_QUERY_DIVERSITY, metavar="W",
                   help="attention pooling: weight of the penalty on queries whose attention maps overlap")
    q.add_argument("--with-cls", action="store_true", help="attention pooling: the CLS token beside the pooled patches")
    q.add_argument("--epochs", type=int, default=DEFAULT_BC_EPOCHS)
    q.add_argument("--batch-size", type=int, default=256)
    q.add_argument("--lr", type=float, default=1e-3)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--ensemble", type=int, default=1, metavar="K",
                   help="train K heads (seeds seed .. seed+K-1) that act by their mean action")
    q.add_argument("--block", type=int, default=None,
                   help="backbone block whose tokens are used (default: control.default_block: the last one)")
    q.add_argument("--checkpoint", default=None, help="checkpoint directory (resume by re-running)")
    add_backbone_args(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_train)

    q = sub.add_parser("evaluate", help="success rate on held-out configurations")
    q.add_argument("--policy", required=True)
    q.add_argument("--configs", type=int, default=50, help="number of held-out configurations")
    q.add_argument("--task", default=None, help="default: the task the policy was trained on")
    q.add_argument("--max-steps", type=int, default=500, help="episode cap")
    q.add_argument("--parallel", type=int, default=4, help="environments stepped in lockstep")
    q.add_argument("--gif-dir", default=None)
    q.add_argument("--gifs", type=int, default=0, help="save this many rollouts as GIFs")
    q.add_argument("--json", default=None, help="write the result here")
    _render_arg(q)
    add_backbone_args(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_evaluate)

    q = sub.add_parser("latency", help="per-step latency of render+preprocess+encode+head+step")
    q.add_argument("--policy", default=None, help="trained policy (default: an untrained head of the same shape)")
    q.add_argument("--task", default="reach-v3")
    q.add_argument("--camera", default=None)
    q.add_argument("--pooling", choices=("attention", "cls", "mean"), default="attention",
                   help="head for the untrained default")
    q.add_argument("--steps", type=int, default=200)
    q.add_argument("--warmup", type=int, default=20)
    q.add_argument("--budget-ms", type=float, default=None, help="control period; verdict on p99, exit 1 if over")
    q.add_argument("--hist", default=None, help="histogram PNG path")
    _render_arg(q)
    q.add_argument("--json", default=None)
    add_backbone_args(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_latency)


def _env_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("--camera", default="corner", help="corner, corner2, corner3, topview, ... (frames are upright)")
    q.add_argument("--image-size", type=int, default=224, help="rendered frame size (pixels, square)")
    q.add_argument("--max-steps", type=int, default=500, help="episode cap")
    _render_arg(q)


def _render_arg(q: argparse.ArgumentParser) -> None:
    q.add_argument("--mesh-faces", default=None, metavar="N|none",
                   help="draw big meshes simplified to ~N triangles each (e.g. 800: frames ~2x faster, "
                        "see README); 'none': full meshes (the default, or else the policy's demos' setting)")


def render_settings(args: argparse.Namespace, stored: dict | None = None) -> RenderSettings:
    """RenderSettings from --mesh-faces; without it, the stored settings (a policy's demos) or the defaults."""
    v = getattr(args, "mesh_faces", None)
    if v is None:
        return RenderSettings.from_dict(stored) if stored else RenderSettings()
    return parse_mesh_faces(v)


def parse_mesh_faces(v: Any) -> RenderSettings:
    """RenderSettings for a --mesh-faces value: a triangle count or 'none' (SystemExit with the reason otherwise)."""
    if str(v).lower() == "none":
        return RenderSettings(mesh_faces=None)
    try:
        n = int(v)
    except ValueError:
        raise SystemExit(f"--mesh-faces takes a triangle count or 'none', got {v!r}") from None
    try:
        return RenderSettings(mesh_faces=n)
    except ValueError as e:
        raise SystemExit(f"--mesh-faces: {e}") from None


def load_backbone_for(args: argparse.Namespace, img_size: Any = None) -> Any:
    """The backbone the command asks for (tests replace this function)."""
    from frozenvit.backbone import load_backbone

    size = args.img_size or img_size
    return load_backbone(args.backbone, weights=args.weights, img_size=size,
                         pretrained=not getattr(args, "random_weights", False))


def _cmd_collect(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import output_dir

    from .demos import KIND, collect_demos, load_manifest

    output_dir(args.out, KIND)
    out = collect_demos(args.task, args.out, args.episodes, camera=args.camera, image_size=args.image_size,
                        max_steps=args.max_steps, action_noise=args.noise, hold_steps=args.hold_steps,
                        seed=args.seed,
                        first_config=args.first_config, render=render_settings(args))
    m = load_manifest(out)
    steps = [e["steps"] for e in m["episodes"]]
    print(f"{len(steps)} successful episodes of {args.task} in {out} ({sum(steps)} frames, "
          f"{len(m['failed_configs'])} configurations where the expert failed)")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from .features import cache_features, default_block
    from .policy import PatchTokenPolicy, PolicyEnsemble

    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    from .policy import ENSEMBLE_KIND, KIND

    if args.ensemble < 1:
        raise SystemExit(f"--ensemble must be >= 1, got {args.ensemble}")
    check_artifact_dir(args.out, KIND if args.ensemble == 1 else ENSEMBLE_KIND)
    if args.checkpoint and args.ensemble == 1:
        check_artifact_dir(args.checkpoint, KIND, flag="--checkpoint")
    bb = load_backbone_for(args)
    block = args.block if args.block is not None else default_block(bb.config.depth, args.pooling)
    cache = cache_features(args.demos, bb, block=block)
    members = []
    for seed in range(args.seed, args.seed + args.ensemble):
        ckpt = args.checkpoint if args.checkpoint is None or args.ensemble == 1 else f"{args.checkpoint}/member_seed{seed}"
        members.append(PatchTokenPolicy(
            args.pooling, num_queries=args.queries, num_heads=args.heads, frames=args.frames, hidden=args.hidden,
            token_dropout=args.token_dropout, keypoints=args.keypoints, pos_code=args.pos_code,
            query_diversity=args.query_diversity, with_cls=args.with_cls, epochs=args.epochs,
            batch_size=args.batch_size, lr=args.lr, seed=seed).fit(cache, checkpoint_dir=ckpt))
    pol = members[0] if args.ensemble == 1 else PolicyEnsemble(members)
    pol.save(args.out)
    loss = " ".join(f"{m.history_[-1]:.4f}" for m in members)
    print(f"trained {args.pooling} policy ({args.ensemble} head{'s' * (args.ensemble > 1)}) on {len(cache)} frames of "
          f"{cache.meta['task']} ({bb.config.name} {bb.config.img_size[0]}px, block {cache.meta['block']}); "
          f"final loss {loss}; saved to {args.out}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_file, output_dir, write_json

    from .env import config_seeds
    from .evaluate import evaluate
    from .policy import load_policy

    check_output_file(args.json, "control.evaluate", flag="--json")
    if args.gif_dir:
        output_dir(args.gif_dir, "control.gifs", flag="--gif-dir")
    pol = load_policy(args.policy)
    bb = load_backbone_for(args, pol.meta_["img_size"])
    res = evaluate(pol, bb, config_seeds("heldout", args.configs), task=args.task, max_steps=args.max_steps,
                   parallel=args.parallel, gif_dir=args.gif_dir, gif_episodes=args.gifs,
                   render=render_settings(args, pol.meta_.get("render")))
    print(f"{res.task}: success {sum(res.successes)}/{len(res.successes)} = {res.success_rate:.2f} "
          f"on held-out configurations (cap {res.max_steps} steps)")
    for g in res.gifs:
        print("gif:", g)
    if args.json:
        write_json(args.json, res.to_dict(), kind="control.evaluate")
    return 0


def _cmd_latency(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .agent import VisuomotorAgent
    from .env import MetaWorldTask
    from .features import backbone_meta
    from .policy import PatchTokenPolicy, load_policy

    check_output_file(args.json, "control.latency", flag="--json")
    check_output_file(args.hist, "control.latency", flag="--hist")
    if args.policy:
        pol = load_policy(args.policy)
        bb = load_backbone_for(args, pol.meta_["img_size"])
        task, camera = pol.meta_.get("task", args.task), args.camera or pol.meta_.get("camera", "corner")
    else:
        bb = load_backbone_for(args)
        pol = PatchTokenPolicy(args.pooling).init_untrained(backbone_meta(bb, pooling=args.pooling))
        task, camera = args.task, args.camera or "corner"
        print("(no --policy: an untrained head of the same shape; latency does not depend on its weights)")
    size = bb.config.img_size[0]
    with MetaWorldTask(task, camera=camera, image_size=size,
                       render=render_settings(args, pol.meta_.get("render"))) as env:
        from .latency import measure_latency

        rep = measure_latency(VisuomotorAgent(pol, bb), env, steps=args.steps, warmup=args.warmup)
    _print_rows(rep.table())
    s = rep.summary()
    print(f"{bb.config.name} at {size}px, {s['threads']} threads: p50 {s['p50']:.1f} ms, p95 {s['p95']:.1f}, "
          f"p99 {s['p99']:.1f} ({s['fps_p50']:.1f} steps/s at p50)")
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


def _print_rows(rows: list[dict[str, Any]]) -> None:
    cols = list(rows[0])
    print("  ".join(f"{c:>10s}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>10.2f}" if isinstance(r[c], float) else f"{r[c]:>10s}" for c in cols))
