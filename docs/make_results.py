"""Write docs/results.md: one table per application, every figure read from benchmarks/results/*.json.

    python docs/make_results.py           # (re)write docs/results.md and the README's headline lines
    python docs/make_results.py --check   # exit 1 when either is not what this script writes

A figure is typed nowhere by hand: each cell names the JSON file and the field it comes from, and each
table is dated with its JSON's own date ("when" or "date") and links to it. To change a headline, run the
benchmark, point the spec below at its JSON, and rerun this script. Needs only the standard library.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
HEADLINE = re.compile(r"(<!-- headline:(\w+) -->\n).*?(<!-- /headline -->)", re.S)
LINK = "../benchmarks/results/"          # from docs/results.md to a JSON

# The eight tasks of control's held-out benchmark, and the JSON that holds each task's shipped default
# (its default demonstrator, blocks 2, 5 and 11, action chunks of 8), three training seeds each.
CONTROL_TASKS = [
    ("reach-v3", "control_success_fingertips_2026-12-05_reach.json"),
    ("push-v3", "control_success_default_cap500_2026-12-04_reach_push.json"),
    ("pick-place-v3", "control_success_carry_2026-12-05_pick_place.json"),
    ("peg-insert-side-v3", "control_success_held_2026-12-05_peg.json"),
    ("sweep-into-v3", "control_success_default_2026-12-04_new4.json"),
    ("button-press-v3", "control_success_default_2026-12-04_first4.json"),
    ("drawer-open-v3", "control_success_default_2026-12-04_first4.json"),
    ("door-open-v3", "control_success_default_2026-12-04_new4.json"),
]
CONTROL_LATENCY = [f"control_latency_default_chunk8_2026-12-04_run{i}.json" for i in (1, 2, 3)]
# A new task in minutes (issue 62): a new task's stages, both recipes; the default recipe paired against the earlier
CONTROL_STAGES = ["control_train_speed_2026-12-06_hammer_servo_1thread.json", "control_train_speed_2026-12-05_hammer_full_1thread.json", "control_train_speed_2026-12-05_hammer_1thread.json", "control_train_speed_2026-12-05_hammer.json"]
CONTROL_SPEED_SUCCESS = "control_train_speed_2026-12-05_reach_pick.json"
# The eight tasks with the default recipe (seed 0), paired with the earlier recipe's seed-0 heads (issue 62), and
# the same heads through each runtime, paired with torch (issue 60): control_success.py --compare's JSON each
CONTROL_RECIPES = "control_success_compare_2026-12-05_recipe_eight.json"
CONTROL_RUNTIMES = ["control_success_compare_2026-12-05_runtime_openvino.json",
                    "control_success_compare_2026-12-06_runtime_openvino_int8.json"]
# CortexBench's five Meta-World tasks (issue 62): control_success.py --merge of the attention and the CLS parts, and
# VC-1 (ViT-L)'s published Meta-World success over the same five tasks (Majumdar et al. 2023, "Where are we in the
# search for an Artificial Visual Cortex for Embodied Intelligence?", CortexBench results; eai-vc's model card)
CONTROL_CORTEXBENCH = "control_success_cortexbench5_2026-12-06.json"
# Demos that end where the task scores success (issue 62): the scripted experts alone (control_expert_goal.py), and
# heads trained on GoalServo's demos paired with the default demonstrators' seed-0 heads (control_success.py --compare)
CONTROL_GOAL_DEMOS = "control_expert_goal_2026-12-06.json"
CONTROL_GOAL_POLICY = "control_success_compare_2026-12-06_servo.json"
VC1_METAWORLD = dict(mean=0.888, sd=0.022, paper="https://arxiv.org/abs/2303.18240",
                     card="https://github.com/facebookresearch/eai-vc/blob/main/MODEL_CARD.md")


class Result(dict):
    """A results JSON as read by `load`: a dict that knows its file name (`source`), for the errors that name it."""
    source = ""


def writer(name: str) -> str:
    """The benchmark script that writes results file `name`: the longest benchmarks/*.py stem its name starts with."""
    stems = sorted((p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("common", "run_all")),
                   key=len, reverse=True)
    for stem in stems:
        if name.startswith(stem):
            return f"benchmarks/{stem}.py"
    return "the benchmark or lab script that wrote it (see its 'benchmark' field in the history of the file)"


def _where(name: str) -> str:
    path = RESULTS / name
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def load(name: str) -> dict:
    """benchmarks/results/<name> as a dict; a missing or malformed file stops the script with one message that
    names the file and the benchmark that writes it."""
    path = RESULTS / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SystemExit(f"make_results: {_where(name)} is missing; it is written by {writer(name)} "
                         "(run it, or point this script's spec at another results file)") from None
    except OSError as e:
        raise SystemExit(f"make_results: cannot read {_where(name)} ({e}); it is written by {writer(name)}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"make_results: {_where(name)} is not valid JSON ({e}); it is written by {writer(name)}: "
                         "rerun it or restore the file") from None
    if not isinstance(data, dict):
        raise SystemExit(f"make_results: {_where(name)} holds a JSON {type(data).__name__}, not an object; it is "
                         f"written by {writer(name)}")
    d = Result(data)
    d.source = name
    return d


def date(d: dict) -> str:
    """The JSON's own date, YYYY-MM-DD."""
    when = d.get("when") or d.get("date")
    if not when:
        name = getattr(d, "source", "") or "a results JSON"
        raise SystemExit(f"make_results: {_where(name) if name.endswith('.json') else name} has no date (no \"when\" "
                         f"or \"date\" field); it is written by {writer(name)}: rerun it or restore the file")
    return str(when)[:10]


def src(name: str, d: dict | None = None) -> str:
    """'2026-12-02, [json](...)': the date and the link a row or table cites."""
    d = load(name) if d is None else d
    return f"{date(d)}, [json]({LINK}{name})"


def f3(x: float) -> str:
    return f"{x:.3f}"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def pval(p: float) -> str:
    return f"{p:.2g}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def run_of(d: dict, config: str) -> dict:
    """The run of an anomaly_real JSON with this configuration name."""
    (run,) = [r for r in d["runs"] if r.get("config", r.get("detector")) == config]
    return run


def row_of(rows: list[dict], **match) -> dict:
    (row,) = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return row


# ---------------------------------------------------------------- anomaly

VIT_ALONE = "embedded ViT alone (`--backbone embedded --tile 2 --score-border 1 --index ivf`)"
DEFAULT_ENSEMBLE = "**default ensemble** (Lite0 + Lite2 + embedded ViT)"
ENSEMBLE2 = "Lite0 + embedded ViT ensemble"
ANOMALY_QUALITY = [   # (what, set, JSON, configuration in it); the first row is the README's headline
    (DEFAULT_ENSEMBLE, "MPDD metal_plate", "anomaly_real_ensemble3_mpdd_metal_plate.json", "ensemble3"),
    (ENSEMBLE2, "MPDD metal_plate", "anomaly_real_ensemble2_mpdd_metal_plate.json", "ensemble2"),
    ("Lite0 alone (`--backbone efficientnet_lite0`)", "MPDD metal_plate", "anomaly_real_mpdd_metal_plate.json", "lite0_tileauto_b1"),
    (VIT_ALONE, "MPDD metal_plate", "distill_v3_anomaly_tiles_mpdd_metal_plate.json", "vit_tile2_b1_ivf_agg1"),
    (DEFAULT_ENSEMBLE, "KolektorSDD", "anomaly_real_ensemble3_kolektorsdd.json", "ensemble3"),
    (ENSEMBLE2, "KolektorSDD", "anomaly_real_ensemble2_kolektorsdd.json", "ensemble2"),
    ("Lite0 alone (`--backbone efficientnet_lite0`)", "KolektorSDD", "anomaly_real_kolektorsdd.json", "lite0_tileauto_b1_ivf"),
    (VIT_ALONE, "KolektorSDD", "distill_v3_kd4_more2_anomaly_kolektorsdd.json", "vit_tile2_b1_ivf_agg1"),
]
ANOMALY_SPEED = [     # (what, JSON, (what, variant) of the 512 px row, of the tiled row)
    ("default ensemble", "anomaly_speed_ensemble_t2.json",
     ("predict (maps)", "512px"), ("predict (maps)", "1250x500")),
    ("Lite0 alone", "anomaly_speed_efficientnet_lite0_t2_tiledmaps_quiet.json",
     ("predict (maps)", "ivf index, maps at 512px"),
     ("predict tiled (maps)", "1250x500 px, tile auto, 3 tiles/img, bank 12466x38 (untiled 12544), ivf index (the default's)")),
]

ANOMALY_FEEDBACK = [  # (set, normals fitted on, JSON of benchmarks/anomaly_feedback.py)
    ("MPDD metal_plate", "all 54", "anomaly_feedback_mpdd_metal_plate.json"),
    ("MPDD metal_plate", "20 of 54", "anomaly_feedback_mpdd_metal_plate_n20.json"),
    ("MPDD metal_plate", "10 of 54", "anomaly_feedback_mpdd_metal_plate_n10.json"),
    ("KolektorSDD", "20 of 263", "anomaly_feedback_kolektorsdd_n20.json"),
]


def anomaly_feedback() -> str:
    rows = []
    for dataset, fitted, name in ANOMALY_FEEDBACK:
        d = load(name)
        n_good = d["n_scoring_good"] * len(d["seeds"])
        for r in d["table"]:
            rows.append([dataset, fitted, str(len(d["seeds"])), "before" if r["k"] == 0 else f"k = {r['k']}",
                         str(r["marked"]), f"{r['false_alarms']} of {n_good}", pct(r["false_alarm_rate"]),
                         pct(r["detection_rate"]), f3(r["image_auroc"]), src(name, d)])
    return table(["set", "fitted on", "seeds", "feedback", "marked", "false alarms", "false-alarm rate", "detected",
                  "image AUROC", "measured"], rows)


# The labels-free configuration choice (benchmarks/anomaly_select.py); also written into docs/anomaly.md between
# <!-- table:anomaly_select --> markers.
ANOMALY_SELECT = "anomaly_select.json"
SELECT_SETS = {"mpdd_metal_plate": "MPDD metal_plate", "kolektorsdd": "KolektorSDD", "synthetic_weave": "synthetic weave"}


def anomaly_select_table(link: str = LINK) -> str:
    """Per set: the rank correlation of planted-defect AUROC with test AUROC over the grid, and the default, the
    search's choice and the grid's best by test AUROC, with fit times."""
    def full(r: dict) -> str:
        return " / ".join(f3(r[k]) for k in ("image_auroc", "pixel_auroc", "aupro"))

    d = load(ANOMALY_SELECT)
    (base,) = {s["models"]["default"]["config"] for s in d["sets"].values()}   # the ensemble fitted as the baseline
    rows = []
    for key, s in d["sets"].items():
        m = s["models"]
        grid = {g["candidate"]: g["test AUROC"] for g in s["grid"]}
        rows.append([SELECT_SETS.get(key, key), str(len(s["grid"])), f"{s['spearman']:+.2f} (p {pval(s['spearman_p'])})",
                     f"{full(m['default'])} ({m['default']['fit_s']:.0f} s)",
                     f"{m['auto']['config']}: {full(m['auto'])} ({m['auto']['search_s']:.0f} + "
                     f"{m['auto']['refit_s']:.0f} s)",
                     f"{f3(grid[m['default']['config']])} / {f3(grid[m['auto']['config']])} / "
                     f"{s['best_of_grid']}: {f3(grid[s['best_of_grid']])}"])
    t = table(["set", "candidates", "Spearman rho, planted vs test AUROC",
               f"`{base}`: image AUROC / pixel AUROC / AUPRO (fit)",
               "`--select auto`: choice, the same (search + refit)",
               f"search-time models' test AUROC: `{base}` / choice / best of grid"], rows)
    return f"{t}\n\n({date(d)}, {d['threads']} thread, busy machine; [json]({link}{ANOMALY_SELECT}))\n"


def anomaly_select_grid(link: str = LINK) -> str:
    """Every candidate's planted-defect AUROC and its search-time model's test AUROC, per set."""
    d = load(ANOMALY_SELECT)
    sets = list(d["sets"])
    names = [g["candidate"] for g in d["sets"][sets[0]]["grid"]]
    rows = []
    for n in names:
        cells = []
        for k in sets:
            (g,) = [g for g in d["sets"][k]["grid"] if g["candidate"] == n]
            cells.append(f"{f3(g['synthetic AUROC'])} / {f3(g['test AUROC'])}")
        rows.append([f"`{n}`", *cells])
    t = table(["candidate", *[f"{SELECT_SETS.get(k, k)}: planted / test" for k in sets]], rows)
    return f"{t}\n\n({date(d)}, [json]({link}{ANOMALY_SELECT}))\n"


ANOMALY_SELECT_PLANTED = "anomaly_select_planted.json"   # anomaly_select.py --ranking-only, four kinds, two seeds
PLANTED_COLUMNS = [("synthetic_auroc", "all kinds"), ("cutpaste_auroc", "cutpaste"), ("texture_auroc", "texture"),
                   ("scar_auroc", "scar"), ("stain_auroc", "stain")]


def anomaly_select_planted(link: str = LINK) -> str:
    """Per set and seed: Spearman rho of each planted kind's AUROC with the search-time models' test AUROC, the
    held-out normals scored, and how well the test ranking repeats across seeds (other banks)."""
    d = load(ANOMALY_SELECT_PLANTED)
    rows = []
    for key, s in d["sets"].items():
        for seed, r in s["seeds"].items():
            rows.append([SELECT_SETS.get(key, key), seed, str(r["held_out"]),
                         *[f"{r['spearman'][k]:+.2f}" for k, _ in PLANTED_COLUMNS],
                         ", ".join(f"{v:+.2f}" for v in s["test_rank_repeat"].values()) if seed == next(iter(s["seeds"]))
                         else ""])
    t = table(["set", "seed", "held-out normals", *[f"rho, {name}" for _, name in PLANTED_COLUMNS],
               "rho, test ranking seed vs seed"], rows)
    return (f"{t}\n\n({date(d)}, {d['threads']} thread, {len(d['sets'])} sets x {len(d['seeds'])} seeds x 12 "
            f"candidates; [json]({link}{ANOMALY_SELECT_PLANTED}))\n")


ANOMALY_FIT_SPEED = "anomaly_fit_speed_t2.json"   # benchmarks/anomaly_fit_speed.py --threads 2 (dev sets, busy)
ANOMALY_FIT_761 = "anomaly_fit_speed_761_t2.json"  # the same with --skip-dev, the 761-image stand-in alone, quiet


def anomaly_fit_speed(link: str = LINK) -> str:
    """Quality and fit seconds by stage, exact vs default coreset, on the development sets, and the 761-image
    stand-in's fit times; also written into docs/anomaly.md between <!-- table:anomaly_fit_speed --> markers."""
    s = lambda r, k: f"{r[k]:.0f}"  # noqa: E731
    stages = ["fit_s", "backbone_s", "coreset_s", "knn_s", "rest_s"]
    head = ["fit s", "backbone s", "coreset s", "kNN s", "rest s", "load"]
    d = load(ANOMALY_FIT_SPEED)
    # that run's "ensemble" is the two-member Lite0 + ViT one (its banks say so)
    member = {"ensemble": "Lite0 + ViT ensemble"}
    rows = [[r["set"], member.get(r["detector"], r["detector"]), r["coreset"], r["bank"], f3(r["image_auroc"]), f3(r["pixel_auroc"]),
             f3(r["aupro"]), *[s(r, k) for k in stages], f"{r['load_before']:.1f}"] for r in d["dev_sets"]]
    dev = table(["set", "detector", "coreset", "bank of patches", "image AUROC", "pixel AUROC", "AUPRO@0.3", *head],
                rows)
    b = load(ANOMALY_FIT_761)
    rows = [[r["set"], r["detector"], r["bank"], *[s(r, k) for k in stages], f"{r['load_before']:.1f}"]
            for r in b["stand_in"]]
    big = table(["set", "detector", "bank of patches", *head], rows)
    return (f"{big}\n\n({b['threads']} threads, no other work on the machine; {date(b)}, "
            f"[json]({link}{ANOMALY_FIT_761}))\n\n{dev}\n\n({d['threads']} threads, one run on a shared 2-core "
            "machine: the last column is the 1-minute load average before each fit, so compare ratios within a "
            f"table, not across runs; {date(d)}, [json]({link}{ANOMALY_FIT_SPEED}))\n")


ANOMALY_ENSEMBLE_SPEED = "anomaly_speed_ensemble_vs_lite0_t1.json"


def anomaly_ensemble_cost(link: str = LINK) -> str:
    """The default ensemble against Lite0 alone, fitted and timed in one run (benchmarks/anomaly_speed.py
    --backbone ensemble); written into docs/anomaly.md between <!-- table:anomaly_ensemble_cost --> markers."""
    d = load(ANOMALY_ENSEMBLE_SPEED)
    fit, alone_fit = row_of(d["rows"], what="fit"), row_of(d["rows"], what="Lite0 alone: fit")
    sizes = [r["variant"] for r in d["rows"] if r["what"] == "Lite0 alone: predict (maps)"]
    ens = [row_of(d["rows"], what="predict (maps)", variant=v) for v in sizes]
    alone = [row_of(d["rows"], what="Lite0 alone: predict (maps)", variant=v) for v in sizes]
    rows = [["default ensemble (Lite0 + Lite2 + embedded ViT)", f"{fit['seconds']:.1f}",
             *[f"{r['img_s']:.1f}" for r in ens], *["1"] * (len(sizes) + 1)],
            ["Lite0 alone", f"{alone_fit['seconds']:.1f}", *[f"{r['img_s']:.1f}" for r in alone],
             f"{alone_fit['fit_share_of_ensemble']:.2f}",
             *[f"{r['time_share_of_ensemble_per_round_median']:.2f}" for r in alone]]]
    head = ["model", f"fit s ({fit['variant']})", *[f"predict img/s, {v}" for v in sizes],
            "time ÷ the ensemble's: fit", *[f"time ÷ the ensemble's: predict {v}" for v in sizes]]
    n = d["machine"]["torch_threads"]
    return (f"{table(head, rows)}\n\n({n} thread{'s' if n > 1 else ''}, one run: both fitted on the same "
            f"synthetic images, predict timed in the same interleaved rounds, maps included; {date(d)}, "
            f"[json]({link}{ANOMALY_ENSEMBLE_SPEED}))\n")


def anomaly() -> str:
    rows = []
    for what, dataset, name, config in ANOMALY_QUALITY:
        d = load(name)
        m = run_of(d, config)["metrics"]
        rows.append([what, dataset, f3(m["image_auroc"]), f3(m["pixel_auroc"]), f3(m["aupro"]),
                     pct(m["detection_rate"]), pct(m["false_alarm_rate"]), src(name, d)])
    quality = table(["model", "set", "image AUROC", "pixel AUROC", "AUPRO@0.3", "detected", "false alarms", "measured"],
                    rows)
    rows = []
    for what, name, whole, tiled in ANOMALY_SPEED:
        d = load(name)
        a = row_of(d["rows"], what=whole[0], variant=whole[1])
        b = row_of(d["rows"], what=tiled[0], variant=tiled[1])
        rows.append([what, f3(a["ratio_to_patch_grids"]), f3(b["ratio_to_patch_grids"]), f"{d['targets']['predict_ratio']:.2f}",
                     src(name, d)])
    speed = table(["model", "512 px images", "1250x500 px images (tiled)", "target", "measured"], rows)
    return f"""## anomaly

Full protocol of `benchmarks/anomaly_real.py`: fit on `train/good` with 20% held out to calibrate the
threshold at a 1% false-alarm target, test on all of `test/`. "Detected" and "false alarms" are at that
calibrated threshold.

{quality}

Speed (`benchmarks/anomaly_speed.py --threads 2`): `predict` with maps, in images per second, as a share
of the bare backbone's (`patch_grids` of each member on exactly the inputs it sees).

{speed}

False alarms fed back (`benchmarks/anomaly_feedback.py`, `--backbone efficientnet_lite0`, one run per seed:
the split, the subset of normals fitted on and the model's seed). The good test images are split into a
feedback half and a scoring half; the top k false alarms of the feedback half at the calibrated threshold are
marked normal and added with `PatchCore.partial_fit` (`anomaly update`); false alarms (summed over the seeds),
the detection rate and image AUROC (averaged) are measured on the scoring half and all defective images, before
and after. No scored image is ever added. "Marked" (summed over the seeds) is fewer than k per seed where the
feedback half had fewer false alarms.

{anomaly_feedback()}

Configuration chosen without defect labels (`benchmarks/anomaly_select.py`, `anomaly fit --select auto`): the
candidates of `anomaly/defaults.py` SEARCH_GRID ranked by image AUROC on defects planted into held-out training
normals, against their test AUROC (search-time models: 40 bank normals, 2% coreset, maximum patch score).

{anomaly_select_table()}

Fit time by stage, and `coreset="auto"` against the exact coreset (`benchmarks/anomaly_fit_speed.py`):

{anomaly_fit_speed()}"""


# ---------------------------------------------------------------- forecasting

MODEL_NAMES = {"SeasonalNaive": "seasonal naive", "Naive": "naive"}
# The CLI's defaults over the development and held-out sets (benchmarks/forecast_defaults.py): one row a set, the MASE of
# each default model; also written into docs/forecasting.md between <!-- table:forecast_defaults --> markers.
DEFAULTS = "forecast_defaults.json"
DEFAULTS_SETS = {"m4_hourly": "M4 Hourly", "m3_monthly": "M3 monthly", "m3_quarterly": "M3 quarterly",
                 "m3_yearly": "M3 yearly", "etth2": "ETTh2", "etth2_h96": "ETTh2, h 96",
                 "tourism_monthly": "Tourism monthly",
                 "tourism_quarterly": "Tourism quarterly", "tourism_yearly": "Tourism yearly",
                 "m1_monthly": "M1 monthly", "m1_quarterly": "M1 quarterly", "m1_yearly": "M1 yearly",
                 "m3_other": "M3 other", "us_macro_quarterly": "US macro quarterly"}


def defaults_order(row: dict) -> tuple:
    """Development sets first, then the held-out ones (each row's `held_out`: run only after the defaults were
    chosen), each in DEFAULTS_SETS' order, ETTh2's cuts by rows."""
    return bool(row.get("held_out")), list(DEFAULTS_SETS).index(row["set"]), row.get("etth2_rows") or 0


def defaults_name(row: dict) -> str:
    """A row's set as the tables name it: ETTh2 with its rows where cut, a held-out set marked so."""
    return (DEFAULTS_SETS[row["set"]] + (f", last {row['etth2_rows']} rows" if row.get("etth2_rows") else "")
            + (" (held out)" if row.get("held_out") else ""))
DEFAULTS_COLUMNS = [("snaive", "seasonal naive"), ("theta", "Theta"), ("ets", "ETS"), ("dlinear", "DLinear"),
                    ("patchtst", "PatchTST"), ("median", "median (no seasonal naive)"),
                    ("median_all", "median of all five"), ("auto", "auto")]
AUTO_OWN = [k for k, _ in DEFAULTS_COLUMNS if k != "auto"]      # auto's candidates: every other column
# auto's rules on the same cached candidate forecasts, and the look-back rule against the constant
# (benchmarks/forecast_auto_rules.py); written into docs/forecasting-auto.md (the rules) and docs/forecasting.md
# (the look-back) too.
AUTO_RULES = "forecast_auto_rules.json"
AUTO_ONE = "global, top 2 within 20 %"                   # auto's rule: one validation window (AUTO_COMBINE)
AUTO_ALL = "all windows, top 2 within 20 %"             # the same on every validation window a series has
AUTO_RULE_COLUMNS = [("shipped", "global, top 1 (a plain choice)", "one window: one candidate"),
                     ("shipped", AUTO_ONE, "one window: best 2 within 20 % (default)"),
                     ("shipped", "select", "one window: select"),
                     ("shipped", "former rule, networks judged by a second training", "one window: best 3 within 20 % of absolute errors"),
                     ("rolling", "2 windows, top 2 within 20 %", "2 windows: best 2 within 20 %"),
                     ("rolling", "4 windows, top 2 within 20 %", "4 windows: best 2 within 20 %"),
                     ("rolling", "all windows, top 1", "all windows: one candidate"),
                     ("rolling", AUTO_ALL, "all windows: best 2 within 20 %"),
                     ("rolling", "all windows, top 3 within 20 %", "all windows: best 3 within 20 %"),
                     ("rolling", "all windows, select", "all windows: select")]
# rivals of auto's rule on the same cached forecasts (benchmarks/forecast_auto_rivals.py): each over the best
# candidate and over the better of ETS and Theta, per set; written into docs/forecasting-auto.md too.
AUTO_RIVALS = "forecast_auto_rivals.json"
# the defaults over the networks' training seeds (benchmarks/forecast_auto_seeds.py): per set each model's mean
# MASE and spread, auto over its best candidate per seed; written into docs/forecasting.md too.
AUTO_SEEDS = "forecast_auto_seeds.json"
# auto's rules re-scored on the forecasts of the command's own run, every set (benchmarks/forecast_auto_rules_cli.py)
AUTO_RULES_CLI = "forecast_auto_rules_cli.json"
# the same, seed by seed, where the default takes a network on its own (--seed; forecast_auto_rules_cli.py)
AUTO_RULES_SEEDS = "forecast_auto_rules_cli_seeds.json"
DOC_TABLES = {ROOT / "docs" / "forecasting.md": {
    "forecast_defaults": lambda: defaults_table("../benchmarks/results/"),
    "forecast_auto_seeds": lambda: auto_seeds_table("../benchmarks/results/"),
    "forecast_lookback": lambda: lookback_table("../benchmarks/results/"),
    "forecast_stat_history": lambda: stat_history_table("../benchmarks/results/"),
    "forecast_long_season": lambda: long_season_table("../benchmarks/results/"),
    "forecast_long_season_arima": lambda: long_season_arima_table("../benchmarks/results/"),
    "forecast_two_seasons": lambda: two_seasons_table("../benchmarks/results/")},
    ROOT / "docs" / "forecasting-auto.md": {
    "forecast_auto_rules": lambda: auto_rules_table("../benchmarks/results/"),
    "forecast_auto_rivals": lambda: auto_rivals_table("../benchmarks/results/"),
    "forecast_auto_rules_cli": lambda: auto_rules_cli_table("../benchmarks/results/"),
    "forecast_auto_rules_seeds": lambda: auto_rules_seeds_table("../benchmarks/results/"),
    "forecast_auto_noise": lambda: auto_noise_table("../benchmarks/results/")},
    ROOT / "docs" / "anomaly.md": {"anomaly_select": lambda: anomaly_select_table("../benchmarks/results/"),
                                   "anomaly_select_grid": lambda: anomaly_select_grid("../benchmarks/results/"),
                                   "anomaly_select_planted": lambda: anomaly_select_planted("../benchmarks/results/"),
                                   "anomaly_fit_speed": lambda: anomaly_fit_speed("../benchmarks/results/"),
                                   "anomaly_ensemble_cost": lambda: anomaly_ensemble_cost("../benchmarks/results/")},
    ROOT / "docs" / "control.md": {"control_train_speed": lambda: control_speed("../benchmarks/results/"),
                                   "control_recipe_eight": lambda: control_recipes("../benchmarks/results/"),
                                   "control_cortexbench5": lambda: control_cortexbench("../benchmarks/results/"),
                                   "control_goal_demos": lambda: control_goal_demos("../benchmarks/results/"),
                                   "control_goal_policy": lambda: control_goal_policy("../benchmarks/results/")},
    ROOT / "docs" / "deployment.md": {"deploy_auroc": lambda: deploy_auroc_table("../benchmarks/results/"),
                                      "control_runtime_success": lambda: control_runtimes("../benchmarks/results/")}}
TABLE = re.compile(r"(<!-- table:(\w+) -->\n).*?(<!-- /table -->)", re.S)


def defaults_table(link: str = LINK) -> str:
    """The defaults table: sets x models (MASE), the series scored of the series in the file, and how the
    set was run (h, season, windows, look-back, subsample), dated and linked to its JSON."""
    d = load(DEFAULTS)
    rows = []
    for r in sorted(d["rows"], key=defaults_order):
        sub = f", {r['series_run']} of them run (seeded sample)" if r.get("subsample") else ""
        sub += f", last {r['etth2_rows']} rows" if r.get("etth2_rows") else ""
        mase = r["mase"]
        best = min((k for k in AUTO_OWN if mase.get(k) is not None), key=lambda k: mase[k])   # auto's
        rows.append([defaults_name({**r, "etth2_rows": None}), *[f3(mase[k]) if mase.get(k) is not None else "-"
                                                 for k, _ in DEFAULTS_COLUMNS],
                     f"{mase['auto'] / min(mase['ets'], mase['theta']):.3f} / {mase['auto'] / mase[best]:.3f} "
                     f"({dict(DEFAULTS_COLUMNS)[best]})",
                     f"{r['series_scored']} / {r['series_run']}", f"{r['series_in_file']}{sub}",
                     f"{r['h']} / {r['season']} / {r['n_windows']} / {r['input_size']}",
                     stat_history_used(r.get("stat_history"))])
    t = table(["set", *[n for _, n in DEFAULTS_COLUMNS], "auto ÷ best of ETS, Theta / ÷ best candidate",
               "series scored / run", "series in the file", "h / season / windows / look-back",
               "Theta / ETS fitted on (values)"], rows)
    return f"{t}\n\n({date(d)}, [json]({link}{DEFAULTS}))\n"


def stat_history_used(record: dict | None) -> str:
    """What a run's summary.json says Theta and ETS were fitted on: 'all' or the last N values."""
    if not record or not record.get("used"):
        return "-"
    return " / ".join("all" if record["used"].get(k) is None else str(record["used"][k]) for k in ("Theta", "ETS"))


STAT_HISTORY = "forecast_stat_history.json"
STAT_MODELS = {"theta": "Theta", "ets": "ETS"}


def stat_history_table(link: str = LINK) -> str:
    """Theta and ETS per set on all of each history, on each fixed window of the ladder (in units of
    max(season, h)) and with history="auto": MASE, auto's window, and the seconds of all against auto."""
    d = load(STAT_HISTORY)
    held = {r["set"] for r in load(DEFAULTS)["rows"] if r.get("held_out")}
    ks = sorted({int(w) // max(r["season"], r["h"]) for r in d["rows"] for w in r["ladder"]})
    rows = []
    for r in d["rows"]:
        unit = max(r["season"], r["h"])
        for key in [k for k in STAT_MODELS if k in r["mase"]]:
            mase = r["mase"][key]
            best = min(mase.values())
            cell = lambda v: f"**{f3(v)}**" if v == best else f3(v)          # noqa: E731
            chose = r["auto_history"][key]
            rows.append([defaults_name({**r, "held_out": r["set"] in held}),
                         STAT_MODELS[key], cell(mase["all"]),
                         *[cell(mase[str(k * unit)]) if str(k * unit) in mase else "-" for k in ks],
                         f"{cell(mase['auto'])} ({'all' if chose is None else chose})",
                         f"{r['seconds'][key]['all']:.0f} / {r['seconds'][key]['auto']:.0f}"])
    t = table(["set", "model", "all of it", *[f"last {k} x max(m, h)" for k in ks], "auto (its window)",
               "seconds: all / auto"], rows)
    threads = f"{d['threads']} thread{'s' if d['threads'] > 1 else ''}"
    return f"{t}\n\n({date(d)}, {threads}, [json]({link}{STAT_HISTORY}))\n"


def rules_set(row: dict) -> str:
    """A row's set in forecast_auto_rules.json, ETTh2 with its rows per series (the whole file or its tail)."""
    return DEFAULTS_SETS[row["set"]] + (f", {row['longest']} rows" if row["set"] == "etth2" else "")


def auto_rules_table(link: str = LINK) -> str:
    """auto's rules on the same candidate forecasts (the look-back rule's networks, validated as auto does):
    MASE over the best candidate's, per set, on one validation window and on several; the sets the default
    was chosen on marked."""
    d = load(AUTO_RULES)
    on = d["choice"]["sets"]
    rows = []
    for r in d["rows"]:
        x, rolling = r["shipped"], r.get("rolling", {}).get("rules", {})
        best = x["best_candidate"]

        def ratio(part: str, key: str) -> str:
            if part == "shipped":
                return f"{x['rules_over_best'][key]:.3f}"
            return f"{rolling[key]['over_best']:.3f}" if key in rolling else "-"

        rows.append([rules_set(r) + (" (chosen on)" if r["set"] in on else ""),
                     f"{r['series']} / {r['series_in_file']}", f"{best} {f3(x['candidates'][best])}",
                     str(r["rolling"]["validation_windows"]) if rolling else "-",
                     *[ratio(part, key) for part, key, _ in AUTO_RULE_COLUMNS],
                     f"{x['rules_over_ets_theta'][AUTO_ONE]:.3f}"])
    t = table(["set", "series run / in file", "best candidate (MASE)", "most validation windows",
               *[n for _, _, n in AUTO_RULE_COLUMNS], "default ÷ best of ETS, Theta"], rows)
    return f"{t}\n\n({date(d)}, [json]({link}{AUTO_RULES}))\n"


def auto_rivals_table(link: str = LINK) -> str:
    """Rivals of auto's rule: one row a rule, per set its MASE over the best candidate's / over the better of
    ETS and Theta; first the rule they are rivals of (auto's on every validation window, the JSON's "default"),
    the rules meeting both bars (1.02, 1) on every set marked."""
    d = load(AUTO_RIVALS)
    default = next(k for k in d["rows"][0]["rules"] if "default" in k)
    keys = [default, *sorted(k for k in d["rows"][0]["rules"] if k != default)]
    shown = {default: default.replace("(auto's default)", "on every window (the rivals' baseline)")}
    rows = [[shown.get(k, k) + (" (meets both)" if k in d["meeting_both"] else ""),
             *[f"{r['rules'][k]['over_best']:.3f} / {r['rules'][k]['over_ets_theta']:.3f}" for r in d["rows"]]]
            for k in keys]
    t = table(["rule", *[f"{rules_set(r)} ({r['series']} of {r['series_in_file']})" for r in d["rows"]]], rows)
    return f"{t}\n\n({date(d)}, [json]({link}{AUTO_RIVALS}))\n"


def auto_noise_table(link: str = LINK) -> str:
    """How much of the 2 % bar each set's own series and windows leave to chance (forecast_auto_rules_cli.py's
    `noise`): auto over the best candidate, its bootstrap interval over the series; over random halves of the
    series auto on a half, and the candidate best on the test windows of one half scored on the other, each
    over that half's best candidate; and where there are several test windows, the candidate best on one of
    them, or on half of them, scored on the others (median, 95th percentile, share of draws within 2 %)."""
    d = load(AUTO_RULES_CLI)
    rows = []
    for r in sorted(d["rows"], key=defaults_order):
        n, rep = r["noise"], r["reported"]
        b, a, o = n["bootstrap_auto"], n["half_split_auto"], n["half_split_oracle"]
        spread = lambda x: f"{x['median']:.3f} / {x['p95']:.3f} ({pct(x['within_2pct'])})"   # noqa: E731
        ws = n.get("window_split_oracle")
        rows.append([defaults_name(r), str(r["series"]), f3(rep["auto"] / rep[r["best_candidate"]]),
                     f"{b['p05']:.3f} - {b['p95']:.3f}", spread(a), spread(o),
                     f"{ws['windows']} windows, {ws['series']} series: {spread(ws['one'])}; {spread(ws['half'])}"
                     if ws else "one window"])
    draws = d["rows"][0]["noise"]["draws"]
    t = table(["set", "series", "auto ÷ best candidate", "the same, 90 % bootstrap interval over the series",
               "auto on half the series ÷ that half's best", "the candidate best on the test windows of the "
               "other half of the series ÷ this half's best", "test windows (on the series every candidate forecast): the "
               "candidate best on one of them, on the others ÷ their best; the same chosen on half of them"], rows)
    return (f"{t}\n\nEach spread: median / 95th percentile (the share of draws within 2 %). ({date(d)}, {draws} random "
            f"halves of the series a set, every split of the windows; [json]({link}{AUTO_RULES_CLI}))\n")


def auto_rules_cli_table(link: str = LINK) -> str:
    """auto's rules on the forecasts of the command's own run: one row a set (development sets first), the best
    candidate, then per rule its MASE over the best candidate's / over the better of ETS and Theta; the default
    rule's column marked, the rivals (not among the rules chosen from) last, and the rule the CHOOSE_ON
    criterion picks named below."""
    d = load(AUTO_RULES_CLI)
    family = d["choice"].get("mean_over_best", {})                   # the rules the choice is made among
    keys = sorted(d["rows"][0]["rules"], key=lambda k: k not in family)     # rivals last
    names = dict(DEFAULTS_COLUMNS)
    label = lambda k: k.replace("global, ", "") + (" (default)" if k == AUTO_ONE else "" if k in family   # noqa: E731
                                                    else " (rival, not in the choice)")
    rows = [[defaults_name(r), f"{names[r['best_candidate']]} {f3(r['reported'][r['best_candidate']])}",
             *[f"{r['rules'][k]['over_best']:.3f} / {r['rules'][k]['over_ets_theta']:.3f}" for k in keys]]
            for r in sorted(d["rows"], key=defaults_order)]
    t = table(["set", "best candidate (MASE)", *[label(k) for k in keys]], rows)
    c = d["choice"]
    on = ", ".join(DEFAULTS_SETS[s] for s in c["sets"])
    chosen = (f"Over {on}, the rule of the least mean ratio to the best candidate among those at most the better "
              f"of ETS and Theta on each: **{label(c['chosen'])}** (mean "
              f"{c['mean_over_best'][c['chosen']]:.3f}).") if c.get("chosen") else ""
    matched = all(r["shipped_matches"] for r in d["rows"])
    check = "the default rule re-scored gives the command's own auto on every set" if matched else \
        "the default rule re-scored does NOT give the command's own auto on every set"
    return f"{t}\n\n{chosen} ({date(d)}; {check}; [json]({link}{AUTO_RULES_CLI}))\n"


def auto_rules_seeds_table(link: str = LINK) -> str:
    """The default rule and each rival on the command's own forecasts, seed by seed: one row a run (set and
    ETTh2 cut), each rule's MASE over the best candidate's at every seed, the seeds within 2 %, and its mean
    MASE over the seeds over the best candidate's mean (over the better of ETS and Theta's mean)."""
    d = load(AUTO_RULES_SEEDS)
    runs: dict[tuple, list[dict]] = {}
    for r in sorted(d["rows"], key=lambda r: (defaults_order(r), r["seed"])):
        runs.setdefault((r["set"], r.get("etth2_rows")), []).append(r)
    rules = [AUTO_ONE, *(k for k in d["rows"][0]["rules"] if k not in d["choice"].get("mean_over_best", {}))]
    label = lambda k: "default" if k == AUTO_ONE else k.split(", ")[-1]   # noqa: E731
    rows = []
    for seeds in runs.values():
        cands = [k for k in seeds[0]["reported"] if k != "auto"]
        best = min(fmean([s["reported"][k] for s in seeds]) for k in cands)
        better = min(fmean([s["reported"][k] for s in seeds]) for k in ("ets", "theta"))
        cells = [defaults_name(seeds[0]), ", ".join(str(s["seed"]) for s in seeds)]
        for k in rules:
            ratios = [s["rules"][k]["over_best"] for s in seeds]
            mean = fmean([s["rules"][k]["mase"] for s in seeds])
            cells += [" ".join(f3(x) for x in ratios), f"{sum(x <= 1.02 for x in ratios)} of {len(ratios)}",
                      f"{f3(mean / best)} ({f3(mean / better)})"]
        rows.append(cells)
    head = ["set", "seeds"]
    for k in rules:
        head += [f"{label(k)}: ÷ best candidate, seed by seed", f"{label(k)}: seeds within 2 %",
                 f"{label(k)}: mean ÷ best candidate's mean (÷ better of ETS and Theta's)"]
    return f"{table(head, rows)}\n\n({date(d)}, [json]({link}{AUTO_RULES_SEEDS}))\n"


def auto_choice(per_seed: list[dict], most: int = 2) -> str:
    """auto's `most` commonest weightings of each seed and their series, seeds of the same ones together, e.g.
    'DLinear + median (7 of 7 series): seeds 1, 2'; '-' for runs from before the command recorded it."""
    names = {"SeasonalNaive": "seasonal naive", "median of candidates": "median of all five",
             "median(Theta,ETS,DLinear,PatchTST)": "median (no seasonal naive)"}
    seen: dict[str, list] = {}
    for s in per_seed:
        combos = s.get("auto_choice")
        if not combos:
            return "-"
        total = sum(c["series"] for c in combos)
        key = ", ".join(" + ".join(names.get(m, m) for m in c["members"]) + f" ({c['series']})"
                        for c in combos[:most]) + f" of {total} series"
        seen.setdefault(key, []).append(str(s["seed"]))
    if len(seen) == 1:
        return next(iter(seen)) + ", every seed"
    return "; ".join(f"{k}: seed{'s' if len(v) > 1 else ''} {', '.join(v)}" for k, v in seen.items())


def auto_seeds_table(link: str = LINK) -> str:
    """The defaults over the networks' seeds: per set, each model's mean MASE (± its spread where the seed moves
    it), auto over its best candidate seed by seed, how many seeds within 2 %, and auto's mean over the mean of
    the candidate best on average."""
    d = load(AUTO_SEEDS)
    rows = []
    for r in sorted(d["rows"], key=defaults_order):
        name = defaults_name(r)
        name += f" ({r['series_run']} of {r['series_in_file']} series, seeded sample)" if r.get("subsample") else ""
        cells = ["-" if k not in r["mean"] else f"{f3(r['mean'][k])} ± {r['std'][k]:.3f}" if r["std"][k] > 5e-5
                 else f3(r["mean"][k]) for k, _ in DEFAULTS_COLUMNS]
        a = r["auto_over_best"]
        rows.append([name, ", ".join(str(s) for s in r["seeds"]), *cells,
                     " ".join(f"{s['auto_over_best']:.3f}" for s in r["per_seed"]),
                     f"{a['seeds_within_2pct']} of {len(r['seeds'])}",
                     f"{r['auto_mean_over_best_mean']:.3f} ({dict(DEFAULTS_COLUMNS)[r['best_candidate_of_means']]})",
                     auto_choice(r["per_seed"])])
    t = table(["set", "seeds", *[f"{n} (mean ± sd)" for _, n in DEFAULTS_COLUMNS],
               "auto ÷ best candidate, seed by seed", "seeds within 2 %", "auto's mean ÷ best mean",
               "auto's choice (its commonest combinations, equal weights; series)"], rows)
    return f"{t}\n\n({date(d)}, [json]({link}{AUTO_SEEDS}))\n"


LONG_SEASON = "forecast_long_season.json"
LONG_SEASON_NAMES = {"m4_hourly": "M4 Hourly", "etth2": "ETTh2", "co2_weekly": "CO2, weekly",
                     "taylor": "taylor, half-hourly"}


def long_season_table(link: str = LINK) -> str:
    """ETS on a season above 24 steps, STL against AutoETS' own, beside seasonal naive and Theta (MASE)."""
    d = load(LONG_SEASON)
    rows = []
    for r in (r for r in d["rows"] if r.get("kind", "ets") == "ets"):
        m, best = r["mase"], min(v for k, v in r["mase"].items() if "(season" not in k)
        cell = lambda k: f"**{f3(m[k])}**" if m[k] == best else f3(m[k])  # noqa: E731
        daily = [f"{k} (season 24)" for k in ("SeasonalNaive", "Theta", "ETS") if f"{k} (season 24)" in m]
        rows.append([LONG_SEASON_NAMES[r["set"]], f"{r['series_run']} / {r['h']} / {r['season']} / {r['windows']} "
                     f"/ {r['mase_season']}", cell("SeasonalNaive"), cell("Theta"), cell("ETS, AutoETS' season"),
                     cell("ETS + STL"), f3(r["stl_over_autoets"]),
                     f"{pct(r['stl_better_windows'])} of {r['windows_scored']}",
                     " / ".join(f3(m[k]) for k in daily) if daily else "-"])
    t = table(["set", "series / h / season / windows / MASE's lag", "seasonal naive", "Theta",
               "ETS, AutoETS' own season", "ETS, STL (default)", "STL ÷ AutoETS'", "windows where STL is better",
               "season 24: seasonal naive / Theta / ETS"], rows)
    return f"{t}\n\n(MASE; bold: the least of the row at the long season. {date(d)}, [json]({link}{LONG_SEASON}))\n"


def long_season_arima_table(link: str = LINK) -> str:
    """ARIMA on a season above 24 steps: STL against AutoARIMA's own season, MASE and seconds a fit."""
    d = load(LONG_SEASON)
    rows = [[LONG_SEASON_NAMES[r["set"]], f"{r['h']} / {r['season']} / {r['windows']} / {r['history']}",
             f3(r["mase"]["own"]), f3(r["mase"]["stl"]), f"{r['seconds_per_fit']['own']:.1f}",
             f"{r['seconds_per_fit']['stl']:.2f}"] for r in d["rows"] if r.get("kind") == "arima"]
    t = table(["set", "h / season / windows / values fitted", "MASE: AutoARIMA's own season", "MASE: STL (default)",
               "seconds a fit: own", "seconds a fit: STL"], rows)
    return f"{t}\n\n({date(d)}, [json]({link}{LONG_SEASON}))\n"


TWO_SEASONS = "forecast_two_seasons.json"
TWO_SEASONS_COLUMNS = ("seasonal naive, day", "seasonal naive, week", "Theta, day", "ETS, day", "ETS, day + week",
                       "ARIMA, day + week")


def two_seasons_table(link: str = LINK) -> str:
    """ETS and ARIMA on the day and the week at once (MSTL) against the day alone (MASE; seconds of ETS)."""
    d = load(TWO_SEASONS)
    rows = []
    for r in d["rows"]:
        m = r["mase"]
        best = min(m[k] for k in TWO_SEASONS_COLUMNS)
        day, week = r["seasons"]
        rows.append([LONG_SEASON_NAMES[r["set"]], f"{r['series_run']} / {r['h']} / {day}, {week} / {r['windows']}",
                     *[f"**{f3(m[k])}**" if m[k] == best else f3(m[k]) for k in TWO_SEASONS_COLUMNS],
                     f3(r["two_seasons_over_day"]), f"{pct(r['two_seasons_better_windows'])} of {r['windows_scored']}",
                     f"{r['seconds']['ETS, day']:.0f} / {r['seconds']['ETS, day + week']:.0f}"])
    t = table(["set", "series / h / seasons / windows", *TWO_SEASONS_COLUMNS, "ETS: day + week ÷ day",
               "windows where day + week is better", "ETS seconds: day / day + week"], rows)
    return (f"{t}\n\n(MASE, scaled by the day; bold: the least of the row. {date(d)}, "
            f"[json]({link}{TWO_SEASONS}))\n")


def lookback_table(link: str = LINK) -> str:
    """The neural models' lengths by the rule against the constant: settings and MASE of DLinear, PatchTST."""
    d = load(AUTO_RULES)

    def lengths(x: dict) -> str:
        return f"{x['input_size']} / {x['patch_len']}, {x['stride']} / {x['kernel_size']}"

    rows = []
    for r in d["rows"]:
        rule, c = r["lengths_rule"], r["candidates"]
        same = rule.get("same_as_constant")
        tail = r.get("val_tail", {}).get("candidates", {})
        rows.append([rules_set(r), lengths(r["lengths"]["constant"]), f"{f3(c['DLinear'])} / {f3(c['PatchTST'])}",
                     "the same" if same else lengths(r["lengths"]["rule"]),
                     "the same" if same else f"{f3(rule['candidates']['DLinear'])} / {f3(rule['candidates']['PatchTST'])}",
                     f"{f3(tail['DLinear'])} / {f3(tail['PatchTST'])}" if tail else "-"])
    t = table(["set", "constant: look-back / patch, stride / kernel", "DLinear / PatchTST",
               "rule: look-back / patch, stride / kernel", "DLinear / PatchTST", "validation tail 4 h instead of h"],
              rows)
    return f"{t}\n\n({date(d)}, [json]({link}{AUTO_RULES}))\n"


def forecasting() -> str:
    name = "forecast_m4_hourly.json"
    d = load(name)
    rows = []
    for r in d["summary"]:
        p = r["p_value"]
        rows.append([MODEL_NAMES.get(r["model"], r["model"]), f3(r["MASE"]), f"{r['sMAPE']:.2f}",
                     "-" if p is None or p != p else pval(p)])
    m4 = table(["model", "MASE", "sMAPE", "Diebold-Mariano p vs seasonal naive"], rows)

    iname = "forecast_m4_hourly_intervals.json"
    di = load(iname)
    rows = [[MODEL_NAMES.get(r["model"], r["model"]), f3(r["MASE"]), f"{100 * r['cov80']:.1f}%", f"{100 * r['cov95']:.1f}%",
             f"{r['MSIS95']:.2f}"] for r in di["summary"]]
    intervals = table(["model", "MASE", "coverage of the 80% interval", "coverage of the 95% interval", "MSIS (95%)"], rows)

    pname = "forecast_paper_etth2.json"
    dp = load(pname)
    by = {(r["model"], r["h"]): r for r in dp["results"]}
    rows = []
    for h in sorted({r["h"] for r in dp["results"]}):
        p, dl = by[("PatchTST", h)], by[("DLinear", h)]
        rows.append([str(h), f"{p['mse']:.3f} / {p['mae']:.3f}", f"{p['all_windows_mse']:.3f}",
                     f"{100 * (p['mse'] / p['all_windows_mse'] - 1):+.1f}%", f"{p['paper_mse']:.3f} / {p['paper_mae']:.3f}",
                     f"{dl['mse']:.3f} / {dl['mae']:.3f}", f"{dl['paper_mse']:.3f} / {dl['paper_mae']:.3f}"])
    etth2 = table(["H", "PatchTST MSE / MAE", "paper, all test windows (MSE)", "vs all windows",
                   "paper PatchTST/42 (published)", "DLinear MSE / MAE", "paper DLinear"], rows)
    return f"""## forecasting

M4 Hourly ({d['n_series']} series, horizon {d['h']}, {d['n_windows']} rolling windows, season
{d['season_length']}; `benchmarks/forecast_m4_hourly.py`; {src(name, d)}):

{m4}

Conformal intervals and combinations on M4 Hourly ({di['n_windows']} window, `--levels 80,95`;
`benchmarks/forecast_m4_hourly_intervals.py`; {src(iname, di)}):

{intervals}

The CLI's defaults (only `--h` and `--season-length` given) on every development set and the held-out ones, MASE
(`benchmarks/forecast_defaults.py`):

{defaults_table()}
ETTh2, the PatchTST paper's protocol (`frozenvit forecast paper`; `benchmarks/forecast_paper_etth2.py`;
{src(pname, dp)}):

{etth2}
"""


# ---------------------------------------------------------------- control

def control() -> str:
    rows, by_seed, names = [], {}, []
    for task, name in CONTROL_TASKS:
        d = load(name)
        runs = sorted((r for r in d["results"] if r["task"] == task and r["pooling"] == "attention"), key=lambda r: r["seed"])
        rates = [r["success_rate"] for r in runs]
        for r in runs:
            by_seed.setdefault(r["seed"], []).append((r["successes"], r["episodes"]))
        st = d["settings"]         # a run that names no demonstrator: its expert where it named one (fingertips)
        demonstrator = st.get("demonstrators", {}).get(task) or (
            st["expert"] if st.get("expert") not in (None, "default") else "Meta-World's expert")
        rows.append([task, *[f"{x:.2f}" for x in rates], f"**{sum(rates) / len(rates):.2f}**", demonstrator,
                     str(d["settings"]["max_steps"]), src(name, d)])
        names.append(name)
    seeds = sorted(by_seed)
    assert all(len(by_seed[s]) == len(CONTROL_TASKS) for s in seeds), "every task needs every seed"
    won = [sum(k for k, _ in by_seed[s]) for s in seeds]
    played = [sum(n for _, n in by_seed[s]) for s in seeds]
    # per seed to four places: k / 400 episodes is exact there, where three places would round a half either way
    rows.append(["**mean of the eight**", *[f"{k / n:.4f}" for k, n in zip(won, played)],
                 f"**{f3(sum(won) / sum(played))}**", "", "", ""])
    success = table(["task", *[f"seed {s}" for s in seeds], "mean", "demonstrator", "cap (steps)", "measured"], rows)

    rows = []
    for name in CONTROL_LATENCY:
        d = load(name)
        default = [r for r in d["rows"] if r["threads"] == 2 and r["encoder"].startswith("embedded default")]
        fast = [r for r in d["rows"] if r["threads"] == 2 and r["encoder"].startswith("fast encoder")]
        (a,), (b,) = default, fast
        rows.append([f"{a['p50']:.1f} / {a['p99']:.1f}", f"{b['p50']:.1f} / {b['p99']:.1f}", src(name, d)])
    t = load(CONTROL_LATENCY[0])["targets"]
    latency = table(["default encoder p50 / p99 (ms)", "`--backbone metaworld-fast` p50 / p99 (ms)", "measured"], rows)
    return f"""## control

Held-out success with the earlier recipe (`benchmarks/control_success.py`): encoder and pooling in float32,
200 epochs of behaviour cloning; the embedded ViT at 224 px, heads reading blocks 2, 5 and 11 through
attention pooling, chunks of 8 actions, 4 augmented views, 25 demos per task, 50 held-out configurations per
task and seed, three training seeds. The default recipe (bfloat16 where the CPU has it, 1,500 optimizer
steps) is paired with these heads below on two tasks, and with their seed 0 on all eight in
[control.md](control.md#the-eight-tasks-with-the-default-recipe).

{success}

Demonstrators: "Meta-World's expert" is Meta-World's scripted policy as it ships (`collect --expert metaworld`).
`held` is `HeldPegExpert`, the default demonstrator of peg-insert-side-v3 (`collect --expert default`): Meta-World's
expert, except that it does not put a peg it holds back down on the table. `fingertips` (reach-v3) and `carry`
(pick-place-v3) are Meta-World's expert with a hand-written last phase that brings the fingertips, or the object
carried, onto the goal; they are not in the package. On every task but peg-insert-side-v3 the default demonstrator
is GoalServo (`--expert default` or `--expert servo`), which makes that correction by itself on any task; its
heads are paired with these demonstrators' in
[control.md](control.md#demos-that-end-where-the-task-scores-success).

A new task in minutes (`benchmarks/control_train_speed.py`):

{control_speed()}

CortexBench's five Meta-World tasks, Meta-World's experts unchanged, the shipped defaults
([control.md](control.md#cortexbenchs-five-meta-world-tasks)):

{control_cortexbench()}
Control loop latency on reach-v3, one environment, 2 threads (`benchmarks/control_latency.py`; render,
preprocess, encode, head and environment step; targets p50 <= {t['p50_ms']:.0f} ms and p99 <= {t['p99_ms']:.0f} ms):

{latency}
"""


DEMONSTRATORS = {"servo": "GoalServo", "metaworld": "Meta-World's expert", "held": "held"}


def control_speed(link: str = LINK) -> str:
    """Wall seconds per stage of a new task (collect, encode, train) for both recipes, and the default recipe's
    held-out success paired episode by episode against the earlier recipe's heads, dated and linked."""
    name = lambda r: "default" if r["recipe"] == "default" else "earlier (float32, 200 epochs)"  # noqa: E731
    cell = lambda r, k: "not timed" if r.get(k) is None else f"{r[k]:.0f}" + (  # noqa: E731
        " *" if r["scaled"] and k != "collect_s" else "")
    rows = []
    for js in CONTROL_STAGES:
        d = load(js)
        m, st = d["machine"], d["settings"]
        run = lambda r: (f"{st['threads']}, load {m['loadavg_1min']:.1f}" + (  # noqa: E731
            f", * first {st['sample_demos']} demos, {st['sample_epochs']} epochs, scaled" if r["scaled"] else "")
            + f"; {date(d)}, [json]({link}{js})")
        rows += [[name(r), r["task"], DEMONSTRATORS.get(r.get("demonstrator"), r.get("demonstrator") or "-"), str(r["frames"]), str(r["epochs"]), cell(r, "collect_s"), cell(r, "encode_s"),
                  cell(r, "train_s"), f"**{r['collect_train_s'] / 60:.1f}**" if "collect_train_s" in r else "", run(r)]
                 for r in d["results"]]
    stages = table(["recipe", "task", "demos by", "frames", "epochs", "collect (s)", "encode (s)", "train (s)",
                    "collect + train (min)", "threads, machine load, measured"], rows)
    e = load(CONTROL_SPEED_SUCCESS)
    rows = []
    for r in e["results"]:
        t = r["paired"]
        n = t["episodes"]
        rows.append([r["task"], str(n), f"{round(t['baseline_success'] * n)} / {n}", f"{round(t['success'] * n)} / {n}",
                     f"{t['baseline_only']} / {t['this_only']}", pval(t["p"])])
    a = e["paired_all"]
    rows.append(["**both**", str(a["episodes"]), "", "", f"{a['baseline_only']} / {a['this_only']}", pval(a["p"])])
    paired = table(["task", "held-out configurations", "earlier recipe", "default recipe",
                    "won only by earlier / default", "exact McNemar p"], rows)
    return f"""{stages}

25 demos on 2 cores with other work running (the load is the 1-minute load when the run ended).

{paired}

One training seed (0) per recipe, the first {e['settings']['configs']} of the earlier run's 50 held-out \
configurations, cap {e['settings']['max_steps']} steps, the same demos ({date(e)}, [json]({link}{CONTROL_SPEED_SUCCESS}); \
earlier heads: {', '.join(f"[{t}]({link}{j})" for t, j in e['settings']['baselines'].items())}).
"""


def compared(name: str) -> tuple[dict, list[tuple[str, str, dict]]]:
    """A control_success.py --compare JSON and its runs in order: (label, JSON file name, run JSON)."""
    c = load(name)
    runs = []
    for spec in c["runs"]:
        path, _, pooling = spec.rpartition(":")
        runs.append((f"{Path(path).stem}:{pooling}", Path(path).name, load(Path(path).name)))
    return c, runs


def paired_cells(c: dict, labels: list[str], task: str | None = None) -> list[str]:
    """Successes of each label (k / n) on the shared configurations, then won only by the first / by each other
    and the exact McNemar p: of one task, or pooled over the tasks (task None)."""
    n = c["configs"] * (1 if task else len(c["tasks"]))
    won = [sum(r[lb] for r in c["by_task"] if task in (None, r["task"])) for lb in labels]
    tests = [c["paired_by_task"][task][lb] if task else c["paired"][lb] for lb in labels[1:]]
    return [*[f"{k} / {n}" for k in won], *[f"{t['a_only']} / {t['b_only']}" for t in tests],
            *[pval(t["p"]) for t in tests]]


def control_recipes(link: str = LINK) -> str:
    """The eight tasks with the default recipe against the earlier recipe's seed-0 heads on the same episodes,
    per task and pooled, with the new heads' training and evaluation times."""
    c, runs = compared(CONTROL_RECIPES)
    (earlier, earlier_js, _), (new, new_js, run) = runs
    st, by_task = run["settings"], {r["task"]: r for r in run["results"]}
    cap = lambda t: st["max_steps"][t] if isinstance(st["max_steps"], dict) else st["max_steps"]  # noqa: E731
    # a head found in the work dir was loaded, not trained, by the process that evaluated it (fit_s: the loading)
    fit = lambda r: f"{r['fit_s']:.0f}" if r["fit_s"] >= 1 else "loaded"  # noqa: E731
    rows = [[t, st["demonstrators"][t], str(cap(t)), *paired_cells(c, [earlier, new], t), fit(by_task[t]),
             f"{by_task[t]['eval_s'] / by_task[t]['episodes']:.1f}"] for t in c["tasks"]]
    mean = {r["pooling"]: r["mean_success"] for r in c["by_pooling"]}
    pooled = paired_cells(c, [earlier, new])
    rows.append([f"**{len(c['tasks'])} tasks**", "", "", f"{pooled[0]} (**{f3(mean[earlier])}**)",
                 f"{pooled[1]} (**{f3(mean[new])}**)", *pooled[2:], "", ""])
    t = table(["task", "demonstrator", "cap (steps)", "earlier recipe", "default recipe", "won only by earlier / default",
               "exact McNemar p", "train (s)", "evaluation (s / episode)"], rows)
    return f"""{t}

Seed 0 per recipe, the first {c['configs']} of the earlier run's 50 held-out configurations of each task, the same
demos, demonstrators and caps ({date(c)}, [json]({link}{CONTROL_RECIPES}); default recipe: [json]({link}{new_js}), \
{st['threads']} thread, one process per task, on the shared 2-core machine with other jobs running; earlier \
recipe: [json]({link}{earlier_js}), the seed-0 rows of the JSONs the eight-task table of
[results.md](results.md#control) links). Train: behaviour cloning of the head from the cached demo features;
"loaded": the head was trained by an earlier process of the run and loaded from its work directory.
"""


def control_goal_demos(link: str = LINK) -> str:
    """Scripted demos per task and demonstrator: success, first-success step, the task's scored distance at the demo's
    end, the point GoalServo found and how many demos it changed."""
    d = load(CONTROL_GOAL_DEMOS)
    st, by = d["settings"], {(r["task"], r["expert"]): r for r in d["rows"]}
    experts = st["experts"]

    def each(t: str, median: str = "", most: str = "") -> str:    # "a / b / c": one per demonstrator, in order
        rs = [by[t, e] for e in experts]
        return " / ".join(str(r[median]).split("/")[0] if not most else "-" if r[median] is None else f"{r[median]:g} ({r[most]:g})"
                          for r in rs)

    rows = [[t, each(t, "demonstrator"), each(t, "success"), each(t, "first_median", "first_max"),
             each(t, "final_median_cm", "final_max_cm"), by[t, "servo"]["scored_point"].replace("none", "none found"),
             f"{st['configs'] - by[t, 'servo']['same_as_metaworld']} / {st['configs']}"] for t in st["tasks"]]
    t = table(["task", "demonstrators", f"succeeded (of {st['configs']})", "first success, median (max) step",
               "scored distance at the end, median (max), cm", "point GoalServo servoes", "demos GoalServo changed"],
              rows)
    return f"""{t}

`benchmarks/control_expert_goal.py`: three demonstrators per task, in the order of the second column: Meta-World's
expert, the per-task demonstrator that the eight-task benchmark of [results.md](results.md#control) used (`fingertips`
on reach-v3, `carry` on pick-place-v3, `held` on peg-insert-side-v3, Meta-World's expert elsewhere; defined there), and
GoalServo on Meta-World's expert, each rolled out without rendering on the first {st['configs']} training configurations as
`collect_demos` records a demo (to the first success and {st['hold_steps']} steps more; caps \
{', '.join(f"{k} {v}" for k, v in st['caps'].items())} steps, 500 elsewhere). The scored distance is the task's own
`obj_to_target` at the demo's last step (door-open-v3 reports 0 throughout); demos changed: episodes whose actions
differ from those of Meta-World's expert ({date(d)}, [json]({link}{CONTROL_GOAL_DEMOS})).
"""


def control_goal_totals() -> tuple[list[int], int, list[dict]]:
    """Episodes won over every task by the per-task demonstrators' heads and by GoalServo's: the tasks where both
    record the same demos keep one set of heads for both."""
    c, ((ref, _, ref_run), (servo, _, _)) = compared(CONTROL_GOAL_POLICY)
    n = c["configs"]
    kept = [r for r in ref_run["results"] if r["pooling"] == "attention" and r["task"] not in c["tasks"]]
    won_kept = sum(sum(map(bool, r["per_config"][:n])) for r in kept)
    won = [sum(r[lb] for r in c["by_task"]) + won_kept for lb in (ref, servo)]
    return won, n * (len(c["tasks"]) + len(kept)), kept


def control_goal_policy(link: str = LINK) -> str:
    """Heads trained on GoalServo's demos against the default demonstrators' heads, per task and pooled."""
    c, runs = compared(CONTROL_GOAL_POLICY)
    (ref, ref_js, ref_run), (servo, servo_js, run) = runs
    cap = lambda st, t: st["max_steps"][t] if isinstance(st["max_steps"], dict) else st["max_steps"]  # noqa: E731
    rows = [[t, ref_run["settings"]["demonstrators"][t], str(cap(run["settings"], t)),
             *paired_cells(c, [ref, servo], t)] for t in c["tasks"]]
    rows.append([f"**{len(c['tasks'])} tasks**", "", "", *paired_cells(c, [ref, servo])])
    t = table(["task", "per-task demonstrator", "cap (steps)", "its heads", "GoalServo's heads",
               "won only by per-task / GoalServo", "exact McNemar p"], rows)
    won, played, kept = control_goal_totals()
    return f"""{t}

Over all {len(c['tasks']) + len(kept)} tasks, with the same heads where GoalServo's demos and the per-task
demonstrator's are the same ({', '.join(r['task'] for r in kept)}), seed 0 wins {won[0]} / {played} ({f3(won[0] / played)}) with the per-task \
demonstrators and {won[1]} / {played} ({f3(won[1] / played)}) with the shipped ones (GoalServo; `held` on
peg-insert-side-v3).

Seed 0, the shipped recipe, 25 demos per task, the first {c['configs']} held-out configurations of each task, the
same episodes for both heads (`benchmarks/control_success.py --compare --across-demonstrators`; {date(c)},
[json]({link}{CONTROL_GOAL_POLICY}); GoalServo's heads: [json]({link}{servo_js}), {run['settings']['threads']} thread,
one process per task, on the shared 2-core machine with other jobs running; the other heads: [json]({link}{ref_js})).
"""


def control_runtimes(link: str = LINK) -> str:
    """The same trained heads rolled out with the encoder run by another runtime, paired with torch episode by
    episode, per task and pooled: one table per comparison."""
    return "\n".join(control_runtime(name, link) for name in CONTROL_RUNTIMES)


def control_runtime(name: str, link: str) -> str:
    c, runs = compared(name)
    labels = [lb for lb, _, _ in runs]
    names = [run["settings"]["runtime"] + (" int8" if run["settings"].get("int8") else "") for _, _, run in runs]
    rows = [[t, *paired_cells(c, labels, t)] for t in c["tasks"]]
    rows.append(["**all**", *paired_cells(c, labels)])
    others = names[1:]
    t = table(["task", *names, *[f"won only by torch / {o}" for o in others], *[f"exact McNemar p, {o}" for o in others]],
              rows)
    files = ", ".join(f"{nm}: [json]({link}{js})" for nm, (_, js, _) in zip(names, runs))
    st = runs[0][2]["settings"]
    int8 = ""
    for _, _, run in runs[1:]:
        if run["settings"].get("int8"):
            err = max(e for r in run["results"] for e in r["int8_grid_rel_error"].values())
            int8 = (f"; int8 calibrated on {run['settings']['int8']['calibration_frames']} frames of each task's demos, "
                    f"its patch grids within {err:.2f} of torch's there (max |diff| / max |torch|, worst block and task)")
    return f"""{t}

`benchmarks/control_success.py --runtime`: the seed-0 heads of the eight-task benchmark (default recipe), the first
{c['configs']} held-out configurations of each task, the encoder ({st['encoder']}, blocks \
{', '.join(map(str, st['blocks']))}) exported and run by each runtime, the head in torch{int8} ({date(c)}, \
[json]({link}{name}); {files}).
"""


def control_cortexbench(link: str = LINK) -> str:
    """CortexBench's five Meta-World tasks: the attention head's success per training seed and its mean, the CLS
    head beside it paired episode by episode on the seeds both have, and VC-1's published figure."""
    d = load(CONTROL_CORTEXBENCH)
    st, sm = d["settings"], d["summary"]
    ref, other = st["poolings"][:2]
    heads = {(r["task"], r["pooling"], r["seed"]): r for r in d["results"]}
    seeds = sorted({s for _, p, s in heads if p == ref})
    cls_seeds = sorted({s for _, p, s in heads if p == other})
    rate = lambda t, p, s: f"{heads[t, p, s]['success_rate']:.2f}" if (t, p, s) in heads else "not run"  # noqa: E731
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    n_tasks = len(st["tasks"])

    def across(p: str, s: int) -> str:        # the mean over the tasks that have this seed, and how many they are
        rs = [r["success_rate"] for (_, q, z), r in heads.items() if (q, z) == (p, s)]
        return f"{mean(rs):.3f}" + ("" if len(rs) == n_tasks else f" ({len(rs)} of {n_tasks} tasks)")

    rows, task_means = [], []
    for t in st["tasks"]:
        mine = [r for (u, q, _), r in heads.items() if (u, q) == (t, ref)]
        task_means.append(mean([r["success_rate"] for r in mine]))
        trained = [r["fit_s"] for r in mine if r["fit_s"] >= 1]
        test = sm["paired_by_task"][t][other]
        both = any((t, other, s) in heads for s in seeds)
        rows.append([t, *[rate(t, ref, s) for s in seeds], f"**{task_means[-1]:.3f}**",
                     *[rate(t, other, s) for s in cls_seeds],
                     f"{test['a_only']} / {test['b_only']}" if both else "", pval(test["p"]) if both else "",
                     f"{mean(trained):.0f}" if trained else "loaded",
                     f"{sum(r['eval_s'] for r in mine) / sum(r['episodes'] for r in mine):.1f}"])
    test = sm["paired"][other]
    pairs = sum((t, ref, s) in heads for t, p, s in heads if p == other)
    rows.append([f"**{n_tasks} tasks**", *[across(ref, s) for s in seeds], f"**{f3(mean(task_means))}**",
                 *[across(other, s) for s in cls_seeds],
                 f"{test['a_only']} / {test['b_only']} ({pairs * st['configs']} episodes)", pval(test["p"]), "", ""])
    vc1 = VC1_METAWORLD
    rows.append([f"VC-1 (ViT-L), published ([paper]({vc1['paper']}), [model card]({vc1['card']}))",
                 *[""] * len(seeds), f"{f3(vc1['mean'])} ± {f3(vc1['sd'])}", *[""] * len(cls_seeds), "", "", "", ""])
    t = table(["task", *[f"attention, seed {s}" for s in seeds], "attention, mean",
               *[f"CLS, seed {s}" for s in cls_seeds], "won only by attention / CLS", "exact McNemar p", "train (s)",
               "evaluation (s / episode)"], rows)
    return f"""{t}

{st['demos']} demos per task recorded by Meta-World's own scripted experts (`--expert {st['expert']}`), the shipped
defaults ({st['encoder']}, blocks {', '.join(map(str, st['blocks']))}, attention pooling), {st['configs']} held-out
configurations per task and seed, cap {st['max_steps']} steps, the same episodes for every head. A task's mean is
over the seeds it has, the five tasks' mean over the tasks' means; a seed's row is over the tasks that have it. The
CLS head is paired with the attention head of the same task and seed. Train: seconds per attention head; evaluation:
seconds per episode of the attention heads. {st['threads']} thread per process, on the shared 2-core machine with
other jobs running ({date(d)}, [json]({link}{CONTROL_CORTEXBENCH})). VC-1's figure was measured
under CortexBench's own protocol (its recorded demos, the `top_cap2` camera at 256 px, a stack of three frames, an
MLP on the frozen embedding), not on these episodes: it stands beside ours for scale and is not paired.
"""


# ---------------------------------------------------------------- backbone

PROBE = [   # (what, JSON, model row)
    ("**v3, the embedded default**", "distill_v3_kd4_more2_probe.json", "student"),
    ("v2 (`frozenvit-default-v2`)", "distill_v2_probe.json", "student"),
    ("v1 (`frozenvit-default-v1`)", "probe_imagenette.json", "student"),
    ("teacher: ImageNet EfficientNet-Lite0", "distill_v3_kd4_more2_probe.json", "teacher"),
]
DENSE = [   # (what, JSON, configuration): PatchCore on MPDD metal_plate, no 3x3 mean (its ViT default)
    ("**v3, the embedded default**", "distill_v3_kd4_more2_anomaly_mpdd_metal_plate.json", "vit_agg1"),
    ("v2 (`frozenvit-default-v2`)", "anomaly_real_mpdd_metal_plate_variants.json", "vit_agg1"),
    ("teacher: Lite0's stride-16 stage", "anomaly_real_mpdd_metal_plate_variants.json", "lite0_s1_agg1"),
]


def backbone() -> str:
    rows = []
    for what, name, model in PROBE:
        d = load(name)
        got = {r["features"]: r["top1"] for r in d["rows"] if r["model"] == model}
        cells = [f3(got["pool"]), "-"] if "pool" in got else [f3(got["cls+mean"]), f3(got["mean"])]
        rows.append([what, *cells, src(name, d)])
    probe = table(["model", "top-1, CLS + mean token (teacher: pooled)", "top-1, mean token", "measured"], rows)
    rows = []
    for what, name, config in DENSE:
        d = load(name)
        (r,) = [r for r in d["table"] if r["config"] == config]
        rows.append([what, f3(r["image AUROC"]), f3(r["pixel AUROC"]), f3(r["AUPRO@0.3"]), src(name, d)])
    dense = table(["model", "image AUROC", "pixel AUROC", "AUPRO@0.3", "measured"], rows)
    return f"""## backbone

Imagenette linear probe (`benchmarks/probe_imagenette.py`: logistic regression on 100 training images per
class, scored on the 3,925 validation images, 224 px):

{probe}

Patch tokens for dense work: PatchCore on MPDD metal_plate, one 224 px input per image, without the 3x3
neighbourhood mean (PatchCore's default on a ViT), `benchmarks/anomaly_real.py`:

{dense}
"""


# ---------------------------------------------------------------- scale-out

SCALEOUT = [   # (job, JSON, part, local run, Ray run)
    ("AutoETS backtest, M4 Hourly ({n_series} series)", "ray_scaleout.json", "forecast", "local, 1 process", "ray, 2 workers"),
    ("anomaly scoring, {n_images:,} MPDD images with overlays", "ray_scaleout_anomaly_large.json", "anomaly",
     "local, 1 thread", "ray, 2 x 1 thread"),
    ("control evaluation, button-press, actors kept between calls", "ray_scaleout_control.json", "control",
     "local, 1 thread", "ray, 2 x 1 thread, actors kept from the previous call"),
    ("the same, fresh actors", "ray_scaleout_control.json", "control",
     "local, 1 thread", "ray, 2 x 1 thread, fresh actors"),
]


def scaleout() -> str:
    rows = []
    for job, name, part, local, ray in SCALEOUT:
        d = load(name)
        a, b = row_of(d[part]["rows"], run=local), row_of(d[part]["rows"], run=ray)
        rows.append([job.format(**d[part]), f"{a['wall_s']:.1f} s", f"{b['wall_s']:.1f} s", f"**{b['speedup']:.2f}x**",
                     f"{b['speedup_incl_start']:.2f}x", src(name, d)])
    t = table(["job", "local, 1 process", "Ray, 2 single-thread workers", "speedup", "with Ray's start", "measured"], rows)
    return f"""## scale-out

`benchmarks/ray_scaleout.py` on the 2-core machine, one local Ray instance, the same answers as the local
run in every case ([scaling.md](scaling.md)):

{t}
"""


DEPLOY = [("encoder", "deploy_speed_t2_encoder.json"), ("loop", "deploy_speed_t2_loop.json"),
          ("loop", "deploy_speed_t2_loop_quiet.json"), ("anomaly", "deploy_speed_t2_anomaly512.json"),
          ("anomaly", "deploy_speed_t2_anomaly512_quiet.json")]


DEPLOY_AUROC = "deploy_auroc_2026-12-06.json"


def deploy_auroc_table(link: str = LINK) -> str:
    """Each runtime and precision's image AUROC, pixel AUROC and AUPRO on the development sets, with the difference
    from torch float32 on the same model (benchmarks/deploy_auroc.py); also in docs/deployment.md."""
    d = load(DEPLOY_AUROC)
    ref = lambda r: (r["runtime"], r["precision"]) == ("torch", "float32")  # noqa: E731
    diff = lambda r, k: "-" if ref(r) else f"{round(r[k], 4) + 0.0:+.4f}"  # noqa: E731
    rows = [[r["set"], r["runtime"], r["precision"], f"{r['image_auroc']:.4f}", diff(r, "image_auroc_diff"),
             f"{r['pixel_auroc']:.4f}", diff(r, "pixel_auroc_diff"), f"{r['aupro']:.4f}", diff(r, "aupro_diff")]
            for r in d["rows"]]
    t = table(["set", "runtime", "precision", "image AUROC", "vs torch", "pixel AUROC", "vs torch", "AUPRO@0.3",
               "vs torch"], rows)
    return (f"{t}\n\n({d['model']}, fitted once per set; {d['threads']} thread; {date(d)}, "
            f"[json]({link}{DEPLOY_AUROC}))\n")


DEPLOY_ALONE = ["deploy_speed_t2_anomaly512_quiet_torch_alone.json",      # torch first: the reference
                "deploy_speed_t2_anomaly512_quiet_openvino_alone.json"]
# anomaly speed runs of the two-member ensemble (their precision "float32,bfloat16" is one per member)
ENSEMBLE2_RUNS = {name: "the Lite0 + embedded ViT ensemble" for name in
                  ("deploy_speed_t2_anomaly512.json", "deploy_speed_t2_anomaly512_quiet.json", *DEPLOY_ALONE)}


def deploy_alone() -> str:
    """Anomaly predict with each runtime in a process of its own (no other runtime's thread pools loaded beside
    it), run one after the other on the quiet machine; speed relative to the first file's torch row."""
    runs = [(name, load(name)) for name in DEPLOY_ALONE]
    rows = [(name, d, r) for name, d in runs for r in d["rows"] if r["part"] == "anomaly"]
    torch_ips = rows[0][2]["images_per_s"]
    t = table(["runtime", "precision", "images/s (with maps)", "vs torch alone", "image AUROC", "load before",
               "measured"],
              [[r["runtime"], r.get("precision", "float32"), f"{r['images_per_s']:.2f}",
                f"**{r['images_per_s'] / torch_ips:.2f}x**", f3(r["image_auroc"]), f"{d['load_before']:.2f}",
                src(name, d)] for name, d, r in rows])
    return ("The same (the Lite0 + embedded ViT ensemble), each runtime in a process of its own, one process after the other with nothing else "
            f"running ({runs[0][1]['threads']} threads; in one process the runtimes' idle thread pools slow the "
            f"one being timed, torch most):\n\n{t}\n")


def deployment() -> str:
    """`--runtime` against torch eager (benchmarks/deploy_speed.py); a part whose JSON is absent is left out."""
    parts = []
    for part, name in DEPLOY:
        if not (RESULTS / name).is_file():
            continue
        d = load(name)
        rows = [r for r in d["rows"] if r["part"] == part]
        if part == "encoder":
            t = table(["runtime", "preprocess p50", "encode p50", "head p50", "step compute p50 / p95", "encode vs torch",
                       "grid error vs torch"],
                      [[r["runtime"], f"{r['preprocess_p50_ms']:.1f} ms", f"{r['encode_p50_ms']:.1f} ms",
                        f"{r['head_p50_ms']:.1f} ms", f"{r['compute_p50_ms']:.1f} / {r['compute_p95_ms']:.1f} ms",
                        f"{r['encode_speedup']:.2f}x",
                        f"{r['int8_grid_rel_error']:.3f} (int8)" if "int8_grid_rel_error" in r else "fp32"]
                       for r in rows])
            what = (f"One control step's compute at batch 1 on Meta-World renders (a 20 ms pause stands for the render): "
                    f"{rows[0]['backbone']} at "
                    f"{rows[0]['img_size']} px, blocks {rows[0]['blocks']}, an untrained head of the default shape")
        elif part == "loop":
            t = table(["runtime", "loop p50", "p95", "p99", "render", "encode", "head"],
                      [[r["runtime"], f"**{r['p50_ms']:.1f} ms**", f"{r['p95_ms']:.1f} ms", f"{r['p99_ms']:.1f} ms",
                        f"{r['render_p50_ms']:.1f} ms", f"{r['encode_p50_ms']:.1f} ms", f"{r['head_p50_ms']:.1f} ms"]
                       for r in rows])
            what = f"The whole loop on {rows[0]['task']} (`control latency --runtime ...`), {rows[0]['steps']} steps each"
        else:
            t = table(["runtime", "precision", "images/s (with maps)", "vs torch", "image AUROC",
                       "same ranking as torch"],
                      [[r["runtime"], r.get("precision", "float32"), f"{r['images_per_s']:.2f}",
                        f"**{r['speedup']:.2f}x**", f3(r["image_auroc"]), "yes" if r["same_ranking"] else "no"]
                       for r in rows])
            model = ENSEMBLE2_RUNS.get(name, "the default ensemble")
            what = (f"`anomaly predict` with maps, {model} fitted on {rows[0]['n_train']} synthetic "
                    f"normals, {rows[0]['images']} test images of {rows[0]['image_size']} px")
        parts.append(f"{what}, {d['threads']} threads, 1-minute load {d['machine']['loadavg_1min']:.1f} at the end of the "
                     f"run ({src(name, d)}):\n\n{t}\n")
    if all((RESULTS / name).is_file() for name in DEPLOY_ALONE):
        parts.append(deploy_alone())
    if not parts:
        return ""
    body = "\n".join(parts)
    return f"""## deployment runtimes

`benchmarks/deploy_speed.py` ([deployment.md](deployment.md)): every runtime timed in interleaved rounds in one
run. Most runs shared the 2-core machine with other jobs (a load above 2): there only the ratios within a table
mean anything; the runs at a load near 1 had the machine to themselves.

{body}
What each runtime and precision costs in quality on the development sets (`benchmarks/deploy_auroc.py`):

{deploy_auroc_table()}"""


# ---------------------------------------------------------------- README headlines

def headlines() -> dict[str, str]:
    """One sentence per application for the README, between its <!-- headline:NAME --> markers."""
    link = "[results](docs/results.md#{})"
    what, dataset, name, config = ANOMALY_QUALITY[0]
    m = run_of(load(name), config)["metrics"]
    anomaly_ = (f"On MPDD metal_plate the default ensemble scores image AUROC / pixel AUROC / AUPRO "
                f"**{f3(m['image_auroc'])} / {f3(m['pixel_auroc'])} / {f3(m['aupro'])}**, and at its calibrated "
                f"threshold ({m['held_out_normals']} held-out normals) it detects {pct(m['detection_rate'])} of the "
                f"defects with {pct(m['false_alarm_rate'])} false alarms ({link.format('anomaly')}).")
    every = load(DEFAULTS)["rows"]
    won = lambda rows: sum(r["mase"]["auto"] <= min(r["mase"]["ets"], r["mase"]["theta"]) for r in rows)   # noqa: E731
    near = lambda rows: sum(r["mase"]["auto"] <= 1.02 * min(r["mase"][k] for k in AUTO_OWN if r["mase"].get(k))  # noqa: E731
                            for r in rows)
    dev, held = [r for r in every if not r.get("held_out")], [r for r in every if r.get("held_out")]
    whole = sum(r["series_scored"] == r["series_run"] for r in every)
    scored = ("every series is scored" if whole == len(every) else
              f"every series is scored on {whole} of {len(every)} runs")
    m4 = row_of(every, set="m4_hourly")
    mase = m4["mase"]
    forecasting_ = (f"On M4 Hourly ({m4['series_run']} series, h {m4['h']}, {m4['n_windows']} windows; {date(load(DEFAULTS))}) "
                    f"the command's defaults score MASE **{f3(mase['auto'])}** with `auto`, against seasonal naive's "
                    f"{f3(mase['snaive'])}, DLinear's {f3(mase['dlinear'])} and PatchTST's {f3(mase['patchtst'])} "
                    "([table](docs/forecasting.md#the-defaults-over-the-development-and-held-out-sets)). With only `--h` and "
                    f"`--season-length` {scored}, and `auto` matches or beats the better of ETS and Theta on "
                    f"{won(dev)} of {len(dev)} development-set runs and {won(held)} of {len(held)} held-out sets, and "
                    f"stays within 2 % of its best candidate (the table's other model columns are its candidates) on {near(dev)} of {len(dev)} and {near(held)} of "
                    f"{len(held)} (the same table; [over seeds](docs/forecasting.md#over-the-networks-seeds)).")
    won = played = 0
    episodes = set()                        # held-out configurations per task and seed
    for task, name in CONTROL_TASKS:
        for r in load(name)["results"]:
            if r["task"] == task and r["pooling"] == "attention":
                won, played = won + r["successes"], played + r["episodes"]
                episodes.add(r["episodes"])
    (per_task,) = episodes
    c, ((earlier, _, _), (new, _, _)) = compared(CONTROL_RECIPES)
    mean = {r["pooling"]: r["mean_success"] for r in c["by_pooling"]}
    (before, servo), n_goal, _ = control_goal_totals()
    goal, ((ref, _, _), (goal_servo, _, _)) = compared(CONTROL_GOAL_POLICY)
    goal_p = goal["paired"][goal["by_pooling"][-1]["pooling"]]["p"]
    goal_won = [sum(r[lb] for r in goal["by_task"]) for lb in (ref, goal_servo)]
    goal_n = goal["configs"] * len(goal["tasks"])
    control_ = (f"Held-out success over eight Meta-World tasks (seed 0, {c['configs']} configurations per task) is "
                f"**{f3(servo / n_goal)}** ({servo} / {n_goal}) with the shipped recipe and demonstrators "
                "([table](docs/control.md#demos-that-end-where-the-task-scores-success), where it is compared with "
                "other demonstrators and recipes).")
    probe = {r["model"]: r["top1"] for r in load(PROBE[0][1])["rows"] if r["features"] in ("cls+mean", "pool")}
    backbone_ = (f"The embedded ViT scores **{f3(probe['student'])}** on an Imagenette linear probe, its ImageNet "
                 f"teacher {f3(probe['teacher'])} ({link.format('backbone')}).")
    return {"anomaly": anomaly_, "forecasting": forecasting_, "control": control_, "backbone": backbone_}


def with_headlines(readme: str) -> str:
    """The README with each headline block refilled; a marker this script does not know is an error."""
    lines = headlines()

    def fill(m: re.Match) -> str:
        if m.group(2) not in lines:
            raise SystemExit(f"README.md: no headline named {m.group(2)!r} (known: {', '.join(lines)})")
        return m.group(1) + lines[m.group(2)] + "\n" + m.group(3)

    return HEADLINE.sub(fill, readme)


def with_tables(path: Path) -> str:
    """A doc with each <!-- table:NAME --> block refilled from DOC_TABLES."""
    tables = DOC_TABLES[path]

    def fill(m: re.Match) -> str:
        if m.group(2) not in tables:
            raise SystemExit(f"{path.name}: no table named {m.group(2)!r} (known: {', '.join(tables)})")
        return m.group(1) + tables[m.group(2)]() + m.group(3)

    return TABLE.sub(fill, path.read_text())


def render() -> str:
    return "\n".join([
        "# Measured results",
        "",
        "<!-- Generated by `python docs/make_results.py` from benchmarks/results/*.json. Do not edit by hand:",
        "     change the JSON or the script, then rerun it. tests/test_docs_results.py fails when this file is stale. -->",
        "",
        "Every figure below is read from the JSON a benchmark wrote; each row or table gives the date of its run",
        "and links to the JSON. All runs are on a 2-core CPU without a GPU. The guides say what each option does;",
        "experiment notes, with the runs behind each default, are in [lab/](../lab/README.md). What each score",
        "means (AUROC, AUPRO, MASE, sMAPE, MSIS, McNemar p, Spearman rho, top-1) is in the [glossary](glossary.md).",
        "",
        anomaly(), forecasting(), control(), backbone(), scaleout(), deployment(),
    ]).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/results.md differs from what would be written")
    args = ap.parse_args(argv)
    wanted = {OUT: render(), README: with_headlines(README.read_text()), **{p: with_tables(p) for p in DOC_TABLES}}
    if args.check:
        stale = [p for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
        for p in stale:
            print(f"{p.relative_to(ROOT)} is out of date: run python docs/make_results.py", file=sys.stderr)
        if not stale:
            print("docs/results.md, the README's headlines and the docs' tables are up to date")
        return 1 if stale else 0
    for p, text in wanted.items():
        p.write_text(text)
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
