"""What each runtime and precision costs in quality: the default ensemble's metrics on the real development sets with
the backbone run by torch eager and by every deployment variant, on the same fitted model.

    nice -n 10 python benchmarks/deploy_auroc.py --threads 1 --tag 2026-12-05 [--work DIR]

For each set of ../shared/data/defects: `frozenvit anomaly fit` (the default ensemble) into --work/<set> unless a
model is there, then `frozenvit anomaly evaluate --runtime R --precision P` into --work/eval_<set>_<R>_<P>.json for
every variant (int8: calibrated on the set's train/good, at most 32 images), skipping an evaluation whose JSON is
already there (a run cut short goes on where it stopped). Each row: image AUROC, pixel AUROC, AUPRO and their
differences from torch float32's on the same model. Writes benchmarks/results/deploy_auroc[_<tag>].json (or --out).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import SHARED_DATA, print_table, write_result

SETS = ("mpdd_metal_plate", "kolektorsdd")
# (runtime, --precision); the first is the reference every difference is taken from. "float32,float32,bfloat16":
# the default ensemble's ConvNets (Lite0, Lite2) in float32, its ViT in bfloat16
VARIANTS = (("torch", "float32"), ("onnxruntime", "float32"), ("openvino", "float32"), ("openvino", "bfloat16"),
            ("openvino", "float32,float32,bfloat16"), ("onnxruntime", "int8"), ("openvino", "int8"))
METRICS = ("image_auroc", "pixel_auroc", "aupro")
FROZENVIT = [sys.executable, "-m", "frozenvit.backbone.suite.cli"]


def frozenvit(*args: str) -> None:
    """Run one frozenvit command; stop the benchmark if it fails."""
    subprocess.run([*FROZENVIT, *args], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def evaluation(work: Path, data: Path, name: str, runtime: str, precision: str, threads: int) -> dict:
    """The JSON of `anomaly evaluate` for one variant, run unless already written."""
    out = work / f"eval_{name}_{runtime}_{precision.replace(',', '+')}.json"
    if not out.is_file():
        cal = ["--calibration", str(data / "train" / "good")] if "int8" in precision else []
        frozenvit("anomaly", "evaluate", "--model", str(work / name), "--data", str(data), "--out", str(out),
                  "--runtime", runtime, "--precision", precision, *cal, "--threads", str(threads))
    got = json.loads(out.read_text())
    if (got.get("runtime"), got.get("precision")) != (runtime, precision):
        raise SystemExit(f"{out} holds runtime {got.get('runtime')} / {got.get('precision')}, not {runtime} / "
                         f"{precision}: remove it and run again")
    return got


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "frozenvit-deploy-auroc"),
                    help="folder for the fitted models and each evaluation's JSON, kept for a later run (default: "
                         "frozenvit-deploy-auroc in the temporary folder)")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated sets of ../shared/data/defects")
    ap.add_argument("--threads", type=int, default=1, help="threads of every fit and evaluation")
    ap.add_argument("--tag", default="", help="suffix of the JSON file name (benchmarks/results/deploy_auroc_<tag>.json)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the JSON to write (default: benchmarks/results/deploy_auroc[_<tag>].json)")
    return ap


def main() -> None:
    args = parser().parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.sets.split(","):
        data = SHARED_DATA / "defects" / name
        if not (work / name / "config.json").is_file():
            frozenvit("anomaly", "fit", "--data", str(data), "--out", str(work / name), "--threads", str(args.threads))
        ref = None
        for runtime, precision in VARIANTS:
            m = evaluation(work, data, name, runtime, precision, args.threads)["metrics"]
            ref = ref or m
            rows.append({"set": name, "runtime": runtime, "precision": precision,
                         **{k: m[k] for k in METRICS}, **{f"{k}_diff": m[k] - ref[k] for k in METRICS}})
    print_table(rows, "{:.4f}")
    from frozenvit.anomaly.defaults import ENSEMBLE

    members = " + ".join(name or "embedded ViT" for name, _ in ENSEMBLE)
    write_result("deploy_auroc" + (f"_{args.tag}" if args.tag else ""),
                 {"threads": args.threads, "model": f"the default ensemble of `anomaly fit` ({members})",
                  "reference": "torch float32", "rows": rows}, args.out)


if __name__ == "__main__":
    main()
