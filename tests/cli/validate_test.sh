#!/usr/bin/env bash
# The calibrate -> validate loop on the cpu backend with 2 MPI ranks (issue:
# "predicted step time within 15% of the measured one" for a DP=2, a TP=2 and
# a PP=2 plan of a small model).  Timing on a shared machine is noisy, so a
# plan that misses is measured again, and after two misses the machine is
# recalibrated, before the test fails.
# Args: $1 = trainplan binary.
set -uo pipefail
T=$1
MPI=(mpirun --allow-run-as-root --oversubscribe -np 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
plan() {  # name tp pp
  cat > "$work/$1.json" <<JSON
{"model": "gpt-tiny", "cluster": "cpu-local", "gpus": 2, "tp": $2, "pp": $3, "dp": $((2 / ($2 * $3))), "cp": 1, "vp": 1,
 "zero": 0, "mbs": 2, "gbs": 8, "seq": 128, "recompute": "none", "sp": false, "schedule": "1f1b",
 "precision": "fp32", "grad_dtype": "fp32", "attention": "flash"}
JSON
}
plan dp2 1 1; plan tp2 2 1; plan pp2 1 2

calibrate() {
  "${MPI[@]}" "$T" calibrate --backend cpu --out "$work/cal.json" -e 4M --iters 10 --model gpt-tiny --mbs 2 \
    > "$work/cal.txt" 2>&1 || { cat "$work/cal.txt"; fail "calibrate exited non-zero"; }
}
calibrate
grep -q "^# OK: 0 wrong elements" "$work/cal.txt" || fail "calibrate reported wrong data"
grep -q "all_reduce_perf, intra-node, 2 ranks" "$work/cal.txt" || fail "no nccl-tests-style all_reduce table"
python3 - "$work/cal.json" <<'PY' || fail "calibration.json lacks fits"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["complete"] and c["ranks"] == 2 and c["backend"] == "cpu"
assert {f["collective"] for f in c["collectives"]} >= {"all_reduce", "all_gather", "reduce_scatter", "sendrecv"}
assert len(c["gemm_table"]) > 10 and c["peak"].endswith("TFLOP/s")
PY

for n in dp2 tp2 pp2; do
  ok=0
  for attempt in 1 2 3 4; do
    # A calibration taken during a burst of other work skews every later
    # prediction: after two misses, measure the machine again.
    [ "$attempt" = 3 ] && calibrate
    "${MPI[@]}" "$T" validate --backend cpu --plan "$work/$n.json" --calibration "$work/cal.json" --steps 5 \
      --out "$work/$n.out.json" > "$work/$n.txt" 2>&1 || { cat "$work/$n.txt"; fail "validate $n exited non-zero"; }
    err=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"]["step_time_s"]["error"])' "$work/$n.out.json")
    echo "$n attempt $attempt: step time error $err"
    if python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1])) <= 0.15 else 1)' "$err"; then ok=1; break; fi
  done
  [ "$ok" = 1 ] || { cat "$work/$n.txt"; fail "$n: predicted step time not within 15% of measured"; }
done
echo "all validate checks passed"
