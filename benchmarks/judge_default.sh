#!/usr/bin/env bash
# Judge a candidate embedded default (a ViT-Ti/16 student .safetensors) on everything MODEL_CARD.md's
# before/after table reports, with the same settings the current default's figures were measured with.
#
#   STUDENT=runs/distill_v2/student.safetensors TAG=distill_v2 bash benchmarks/judge_default.sh [steps...]
#
# steps (default: all, in this order; each writes benchmarks/results/${TAG}_<step>*.json):
#   probe      Imagenette linear probe (student only; random/teacher rows merged from probe_imagenette.json),
#              plus attention statistics and the forward-time ratio against timm's vit_tiny_patch16_224
#   mpdd       PatchCore on MPDD metal_plate, anomaly_real.py's "vit" row (stretch, exact search, 3x3 mean) and
#              "vit_agg1" (the same without the 3x3 mean, as PatchCore's ViT default)
#   kolektor   PatchCore on KolektorSDD: "vit" (stretch), "vit_tile2_b1" (tiles x2, border 1) and
#              "vit_tile2_b1_ivf_agg1" (IVF, no 3x3 mean: what `anomaly fit --backbone embedded --tile 2 --score-border 1` does)
#   synthetic  anomaly_quality.py (the synthetic set: weave, grain, washer)
#   control    control_success.py, attention head, 4 tasks x 3 seeds, the head defaults of today (200 epochs,
#              4 augmented views per frame), demos held 20 steps, cap 200, as two processes of one thread
#              (reach+drawer-open, push+button-press), then merged and paired (McNemar) with the current
#              default's heads under the same settings: control_success_views4.json (v2, since 2026-12-01)
# Knobs: THREADS (default 2; the control step always runs two one-thread processes), SEEDS (default "0 1 2").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
STUDENT=${STUDENT:?set STUDENT=path/to/student.safetensors}
TAG=${TAG:?set TAG=name for the result files}
THREADS=${THREADS:-2}
SEEDS=${SEEDS:-0 1 2}
R=benchmarks/results
export HF_HUB_OFFLINE=1
steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(probe mpdd kolektor synthetic control)

for step in "${steps[@]}"; do
  echo "== $step ($(date -u +%H:%M:%S))"
  case $step in
    probe)
      "$PY" benchmarks/probe_imagenette.py --models student --student "$STUDENT" --threads "$THREADS" \
        --merge "$R/probe_imagenette.json" --out "$R/${TAG}_probe.json" ;;
    mpdd)
      "$PY" benchmarks/anomaly_real.py --vit-weights "$STUDENT" --sets mpdd_metal_plate --configs vit vit_agg1 \
        --threads "$THREADS" --out "$R/${TAG}_anomaly" ;;
    kolektor)
      "$PY" benchmarks/anomaly_real.py --vit-weights "$STUDENT" --sets kolektorsdd --configs vit vit_tile2_b1 vit_tile2_b1_ivf_agg1 \
        --threads "$THREADS" --out "$R/${TAG}_anomaly" ;;
    synthetic)
      "$PY" benchmarks/anomaly_quality.py --weights "$STUDENT" --threads "$THREADS" \
        --out "$R/${TAG}_anomaly_quality.json" ;;
    control)
      common=(--threads 1 --backbone vit_tiny_patch16_224 --weights "$STUDENT" --size 224 --poolings attention
              --seeds $SEEDS --hold-steps 20 --max-steps 200 --epochs 200 --work-dir "runs/${TAG}_control")
      "$PY" benchmarks/control_success.py "${common[@]}" --tasks reach-v3 drawer-open-v3 \
        --out "runs/${TAG}_control_a.json" > "runs/${TAG}_control_a.log" 2>&1 &
      a=$!
      "$PY" benchmarks/control_success.py "${common[@]}" --tasks push-v3 button-press-v3 \
        --out "runs/${TAG}_control_b.json" > "runs/${TAG}_control_b.log" 2>&1 &
      b=$!
      wait $a; wait $b
      "$PY" benchmarks/control_success.py --merge "runs/${TAG}_control_a.json" "runs/${TAG}_control_b.json" \
        --out "$R/${TAG}_control_success.json"
      # paired against the current default's heads on the same held-out configurations
      "$PY" benchmarks/control_success.py --across-weights --compare "$R/control_success_views4.json:attention" \
        "$R/${TAG}_control_success.json:attention" --out "$R/${TAG}_control_compare.json" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
