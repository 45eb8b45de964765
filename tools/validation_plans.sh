#!/usr/bin/env bash
# The plans the calibrate -> validate loop runs on the cpu backend with 2 MPI
# ranks, written as plan.json files into DIR: DP=2, TP=2, PP=2, CP=2 (ring and Ulysses) and
# ZeRO-3 plans of gpt-tiny, a ZB-V plan (two chunks per rank in a V, PyTorch's
# ScheduleZBVZeroBubble order) and an MoE plan (gpt-tiny-moe's 4 experts over
# ep=2: a token all-to-all each layer).  One list for tools/validation.sh
# (docs/validation.md) and its CI test, tests/cli/validate_test.sh.
# Usage: bash tools/validation_plans.sh DIR
set -euo pipefail
dir=$1
plan() {  # name tp pp cp zero seq
  cat > "$dir/$1.json" <<JSON
{"model": "gpt-tiny", "cluster": "cpu-local", "gpus": 2, "tp": $2, "pp": $3, "dp": $((2 / ($2 * $3 * $4))), "cp": $4,
 "vp": 1, "zero": $5, "mbs": 2, "gbs": 8, "seq": $6, "recompute": "none", "sp": false, "schedule": "1f1b",
 "precision": "fp32", "grad_dtype": "fp32", "attention": "flash"}
JSON
}
plan dp2 1 1 1 0 128; plan tp2 2 1 1 0 128; plan pp2 1 2 1 0 128; plan cp2 1 1 2 0 256; plan zero3 1 1 1 3 128
sed 's/"schedule": "1f1b"/"schedule": "zb-v"/' "$dir/pp2.json" > "$dir/zbv2.json"
# CP=2 as Ulysses all-to-alls (cp_comm_type a2a) instead of the ring.
sed 's/"attention": "flash"}/"attention": "flash", "cp_comm_type": "a2a"}/' "$dir/cp2.json" > "$dir/cp2_a2a.json"
cat > "$dir/moe_ep2.json" <<JSON
{"model": "gpt-tiny-moe", "cluster": "cpu-local", "gpus": 2, "tp": 1, "pp": 1, "dp": 2, "cp": 1, "ep": 2, "etp": 1,
 "vp": 1, "zero": 0, "mbs": 2, "gbs": 8, "seq": 128, "recompute": "none", "sp": false, "schedule": "1f1b",
 "precision": "fp32", "grad_dtype": "fp32", "attention": "flash"}
JSON
