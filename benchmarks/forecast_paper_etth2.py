"""ETTh2 under the PatchTST paper protocol: MSE/MAE at 96/192/336/720 beside the paper's table.

    python benchmarks/forecast_paper_etth2.py --threads 1   # CPU budget (~1 h on a busy 2-core box): 10 epochs,
                                                            # patience 3, PatchTST epochs of 2048 sampled windows
    python benchmarks/forecast_paper_etth2.py --windows-per-epoch 0 --paper-schedule   # the paper's schedule (hours)
    # the committed JSON: PatchTST 20 full epochs, then DLinear on the paper's schedule merged in
    python benchmarks/forecast_paper_etth2.py --models patchtst --windows-per-epoch 0 --max-epochs 20 \
        --patience 20 --out runs/etth2/patchtst_e20.json
    python benchmarks/forecast_paper_etth2.py --models dlinear --paper-schedule --merge runs/etth2/patchtst_e20.json

Writes benchmarks/results/forecast_paper_etth2.json after every (model, horizon), so a stopped
run keeps what it finished. Reports seconds per epoch (median over epochs).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from frozenvit.backbone.suite.artifacts import write_json  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import data_arg, machine, now, resolve_data  # noqa: E402
from frozenvit.forecasting.paper import paper_config, paper_protocol, scores_table  # noqa: E402

DEFAULT_CSV = ROOT.parent / "shared" / "data" / "ett" / "ETTh2.csv"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data_arg(ap, "--csv", DEFAULT_CSV, "the ETTh2 CSV")
    ap.add_argument("--horizons", default="96,192,336,720", help="comma-separated forecast horizons")
    ap.add_argument("--models", default="patchtst,dlinear", help="comma-separated, out of patchtst,dlinear")
    ap.add_argument("--max-epochs", type=int, default=10, help="cap on epochs (CPU budget)")
    ap.add_argument("--patience", type=int, default=3, help="early-stopping patience (CPU budget)")
    ap.add_argument("--windows-per-epoch", type=int, default=2048,
                    help="PatchTST: sample this many training windows per epoch (CPU budget; 0: all)")
    ap.add_argument("--paper-schedule", action="store_true",
                    help="the paper scripts' epochs and patience (PatchTST 100/100, DLinear 10/3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=2021, help="the models' seed (default: 2021, the papers')")
    ap.add_argument("--merge", type=Path, default=None,
                    help="earlier JSON of this benchmark: keep its rows of the models not run now (with their settings)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "forecast_paper_etth2.json",
                    help="the JSON to write, rewritten after every model and horizon "
                         "(default: benchmarks/results/forecast_paper_etth2.json)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    csv = resolve_data(args.csv, DEFAULT_CSV, what="pass --csv path/to/ETTh2.csv")
    if csv is None:
        return 0
    args.csv = csv
    torch.set_num_threads(args.threads)
    values = pd.read_csv(args.csv)
    overrides = {} if args.paper_schedule else {"max_epochs": args.max_epochs, "patience": args.patience}
    sub = ({"windows_per_epoch": args.windows_per_epoch}                                   # PatchTST only
           if args.windows_per_epoch and "patchtst" in args.models.lower() else {})
    scores = []
    started = time.time()
    kept = {}
    if args.merge is not None:
        import json

        old = json.loads(args.merge.read_text())
        run_now = {m.lower() for m in args.models.split(",")}
        kept = {"kept_rows": [r for r in old["results"] if r["model"].lower() not in run_now],
                "kept_from": {k: old.get(k) for k in ("when", "overrides", "patchtst_overrides", "machine")}}

    def save(score) -> None:
        scores.append(score)
        rows = scores_table(scores, "ETTh2")
        write_json(args.out, {"benchmark": "forecast_paper_etth2", "csv": args.csv.name, "threads": args.threads,
                              "machine": machine(), "when": now(), "argv": list(sys.argv),
                              "overrides": overrides, "patchtst_overrides": sub, "seed": args.seed, "wall_seconds": time.time() - started,
                              "protocol": "train [0,8640) val [8640,11520) test [11520,14400), look-back 336, "
                                          "StandardScaler on train rows, all test windows, standardised scale",
                              "results": kept.get("kept_rows", []) + rows,
                              **({"kept_from": kept["kept_from"]} if kept else {})})
        r = rows[-1]
        print(f"{r['model']:9s} H={r['h']:4d}  MSE {r['mse']:.3f} MAE {r['mae']:.3f}  "
              f"(paper {r.get('paper_mse', float('nan')):.3f}/{r.get('paper_mae', float('nan')):.3f})  "
              f"epochs {r['epochs']} best {r['best_epoch']}  {r['seconds_per_epoch']:.1f} s/epoch", flush=True)

    paper_protocol(values, [int(h) for h in args.horizons.split(",")], args.models.split(","),
                   make_model=lambda name, h: paper_config(name, h, "ETTh2", seed=args.seed, **overrides,
                                                           **(sub if name == "patchtst" else {})),
                   on_result=save)
    print(pd.DataFrame(scores_table(scores, "ETTh2"))[["model", "h", "mse", "mae", "paper_mse", "paper_mae",
                                              "seconds_per_epoch"]].to_string(index=False))
    if scores:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
