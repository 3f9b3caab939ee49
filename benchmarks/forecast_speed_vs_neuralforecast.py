"""One PatchTST training epoch, ours against neuralforecast's, on the same data, windows, batch, width,
depth and threads, in one run.

The anchor is installed by this script into a folder of its own (`--target`), without dependencies,
so that it runs on this environment's torch instead of pulling a new one: neuralforecast, Lightning
and the few packages it imports that the suite does not have (`ANCHOR`; the registry mirror serves
them). It then runs in a child process that sees that folder first on its path.

The data: M4 Hourly's training parts (414 series). The epoch: 8192 windows of look-back 336 and
horizon 48, batches of 128 (ours: `windows_per_epoch=8192`, 64 steps; neuralforecast: `max_steps=64`,
`windows_batch_size=128` windows drawn from `batch_size=32` series per step, its default). Both:
d_model 32, 4 heads, d_ff 64, 2 layers, dropout 0.1, patches of 16 with stride 8 and end padding,
RevIN with an affine pair, BatchNorm, residual attention, learnt positions, MAE loss, Adam lr 1e-3,
no validation. neuralforecast's epoch time is the difference between fits of 2x and 1x the steps
(its set-up cancels); ours is the training loop's own clock (`history_[0]['seconds']`). Each side is
timed `--repeats` times alternately; the medians are compared.

    nice -n 5 python benchmarks/forecast_speed_vs_neuralforecast.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, add_repeats_arg, data_arg, median, print_table, resolve_data, write_result  # noqa: E402

ANCHOR = ("neuralforecast==3.3.0", "pytorch-lightning", "lightning-utilities", "torchmetrics", "pydantic",
          "pydantic-core", "annotated-types", "typing-inspection")
H, L, WINDOWS, BATCH = 48, 336, 8192, 128
SHAPE = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1)


def series(data: Path) -> list:
    import pandas as pd

    frame = pd.read_csv(data / "Hourly-train.csv", index_col=0)
    return [r[~pd.isna(r)].astype("float32") for r in frame.to_numpy(dtype=float)]


def ours(data: Path, threads: int) -> dict:
    import torch

    from frozenvit.forecasting import PatchTST

    torch.set_num_threads(threads)
    m = PatchTST(h=H, input_size=L, **SHAPE, loss="mae", normalize_loss=False, lr=1e-3, batch_size=BATCH,
                 windows_per_epoch=WINDOWS, max_epochs=1, val_size=0, progress=False)
    t0 = time.perf_counter()
    m.fit(series(data))
    return {"epoch_seconds": m.history_[0]["seconds"], "fit_seconds": time.perf_counter() - t0}


def anchor_fit(data: Path, threads: int, steps: int) -> float:
    """Wall seconds of neuralforecast's PatchTST fit of `steps` steps (runs in the child process)."""
    import logging

    import pandas as pd
    import torch
    from neuralforecast import NeuralForecast
    from neuralforecast.losses.pytorch import MAE
    from neuralforecast.models import PatchTST as NFPatchTST

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning_fabric").setLevel(logging.ERROR)
    torch.set_num_threads(threads)
    ys = series(data)
    df = pd.concat([pd.DataFrame({"unique_id": i, "ds": range(len(y)), "y": y}) for i, y in enumerate(ys)])
    model = NFPatchTST(h=H, input_size=L, encoder_layers=SHAPE["n_layers"], n_heads=SHAPE["n_heads"],
                       hidden_size=SHAPE["d_model"], linear_hidden_size=SHAPE["d_ff"], dropout=SHAPE["dropout"],
                       fc_dropout=0.0, head_dropout=0.0, attn_dropout=0.0, patch_len=16, stride=8, revin=True,
                       revin_affine=True, res_attention=True, batch_normalization=True, learn_pos_embed=True,
                       loss=MAE(), max_steps=steps, learning_rate=1e-3, batch_size=32,
                       windows_batch_size=BATCH, scaler_type="identity", start_padding_enabled=False,
                       random_seed=0, accelerator="cpu", devices=1, enable_progress_bar=False,
                       enable_model_summary=False, logger=False, enable_checkpointing=False)
    nf = NeuralForecast(models=[model], freq=1)
    t0 = time.perf_counter()
    nf.fit(df, val_size=0)
    return time.perf_counter() - t0


def profiled(fn, *args) -> list[dict]:
    """The 12 functions where `fn(*args)` spent the most time of its own (cProfile tottime), in seconds."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(fn, *args)
    stats = pstats.Stats(prof).stats
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:12]
    return [{"function": f"{Path(k[0]).name}:{k[1]}({k[2]})", "seconds": round(v[2], 3)} for k, v in top]


def install(target: Path) -> None:
    """The anchor into `target`, reusing this environment's torch (no dependencies resolved)."""
    if (target / "neuralforecast").is_dir():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), *ANCHOR],
                   check=True)


def _in_anchor_env(call: str, target: Path):
    """Evaluate `call` (an expression over this module, `b`) in a child process that sees `target` first."""
    code = ("import json, sys; sys.path.insert(0, %r); import forecast_speed_vs_neuralforecast as b; "
            "from pathlib import Path; print(json.dumps(%s))" % (str(Path(__file__).parent), call))
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def anchor(data: Path, threads: int, target: Path) -> dict:
    steps = WINDOWS // BATCH
    one, two = _in_anchor_env(f"[b.anchor_fit(Path({str(data)!r}), {threads}, s) for s in ({steps}, {2 * steps})]",
                              target)
    return {"epoch_seconds": two - one, "fit_seconds": one}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    data_arg(ap, "--data", SHARED_DATA / "m4_hourly", "folder holding M4's Hourly-train.csv and Hourly-test.csv")
    ap.add_argument("--target", type=Path, default=Path("/tmp/frozenvit-neuralforecast"),
                    help="folder neuralforecast is installed into (kept between runs)")
    ap.add_argument("--threads", type=int, default=1)
    add_repeats_arg(ap, 2, what="timed fits of each side, alternating; medians compared")
    ap.add_argument("--profile", action="store_true",
                    help="also run each side once under cProfile: where its time goes (top 12 by own time)")
    ap.add_argument("--out", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    data = resolve_data(args.data, SHARED_DATA / "m4_hourly", "Hourly-train.csv", "M4 Hourly")
    if data is None:
        return 0
    args.data = data
    install(args.target)
    runs: dict[str, list[dict]] = {"ours": [], "neuralforecast": []}
    for _ in range(args.repeats):                    # alternate, so that load from other jobs falls on both
        runs["ours"].append(ours(args.data, args.threads))
        runs["neuralforecast"].append(anchor(args.data, args.threads, args.target))
    rows = [{"model": k, "epoch_s": median([r["epoch_seconds"] for r in v]),
             "first_fit_s": median([r["fit_seconds"] for r in v])} for k, v in runs.items()]
    ratio = rows[0]["epoch_s"] / rows[1]["epoch_s"]
    print_table(rows)
    print(f"ours / neuralforecast epoch time: {ratio:.2f}")
    profile = {}
    if args.profile:
        profile = {"ours": profiled(ours, args.data, args.threads),
                   "neuralforecast": _in_anchor_env(f"b.profiled(b.anchor_fit, Path({str(args.data)!r}), "
                                                    f"{args.threads}, {WINDOWS // BATCH})", args.target)}
        for side, top in profile.items():
            print(f"{side}: where one fit's time goes (cProfile, own time)")
            print_table(top)
    write_result("forecast_speed_vs_neuralforecast", {
        "threads": args.threads, "anchor": list(ANCHOR), "windows": WINDOWS, "batch": BATCH, "shape": SHAPE,
        "runs": runs, "table": rows, "ratio_ours_over_anchor": ratio, "profile": profile}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
