#!/usr/bin/env bash
# The calibrate -> validate loop on the cpu backend with 2 MPI ranks (issue:
# "predicted step time within 15% of the measured one" for a DP=2, a TP=2 and
# a PP=2 plan of a small model).  Timing on a shared machine is noisy, so a
# plan that misses is run again, up to five times, each time right after the
# machine is calibrated again, before the test fails.
# Args: $1 = trainplan binary.
set -uo pipefail
T=$1
MPI=(mpirun --allow-run-as-root --oversubscribe -np 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bash "$(dirname "$0")/../../tools/validation_plans.sh" "$work" || fail "could not write the plans"

calibrate() {
  "${MPI[@]}" "$T" calibrate --backend cpu --out "$work/cal.json" -e 4M --iters 10 --model gpt-tiny --model gpt-tiny-moe --mbs 2 \
    > "$work/cal.txt" 2>&1 || { cat "$work/cal.txt"; fail "calibrate exited non-zero"; }
}
calibrate
grep -qE "^# OK(:| with [0-9]+ poor fits)" "$work/cal.txt" || fail "calibrate reported wrong data"
grep -qE "^# .* 0 wrong elements" "$work/cal.txt" || fail "calibrate reported wrong elements"
# A fit worse than 20% rms is flagged, never printed as a plain OK (issue 13).
if python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(0 if any(f["residual_rms"] > 0.2 for f in c["collectives"]) else 1)' "$work/cal.json" 2>/dev/null; then
  grep -q "^# WARNING: poor fit:" "$work/cal.txt" || fail "a poor fit (> 20% rms) without a warning"
  grep -q "^# OK: " "$work/cal.txt" && fail "plain OK printed with a poor fit"
fi
grep -q "all_reduce_perf, intra-node, 2 ranks" "$work/cal.txt" || fail "no nccl-tests-style all_reduce table"
python3 - "$work/cal.json" <<'PY' || fail "calibration.json lacks fits"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["complete"] and c["ranks"] == 2 and c["backend"] == "cpu"
assert {f["collective"] for f in c["collectives"]} >= {"all_reduce", "all_gather", "reduce_scatter", "sendrecv"}
assert len(c["gemm_table"]) > 10 and c["peak"].endswith("TFLOP/s")
PY

# --tolerance: validate exits 1 when the step time misses by more, 0 within.
for n in dp2 tp2 pp2 zbv2 cp2 cp2_a2a zero3 moe_ep2; do
  ok=0
  for attempt in 1 2 3 4 5; do
    # A calibration taken during a burst of other work skews every later
    # prediction (this shared machine's speed swings by 1.5-4x over minutes):
    # after a miss, measure the machine again right before the next run.
    [ "$attempt" -ge 2 ] && calibrate
    "${MPI[@]}" "$T" validate --backend cpu --plan "$work/$n.json" --calibration "$work/cal.json" --steps 5 \
      --tolerance 15 --out "$work/$n.out.json" > "$work/$n.txt" 2>&1
    rc=$?
    err=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"]["step_time_s"]["error"])' "$work/$n.out.json")
    echo "$n attempt $attempt: step time error $err (exit $rc)"
    within=$(python3 -c 'import sys; print(1 if abs(float(sys.argv[1])) <= 0.15 else 0)' "$err")
    if [ "$within" = 1 ]; then
      [ "$rc" = 0 ] || { cat "$work/$n.txt"; fail "$n: within tolerance but exit $rc"; }
      grep -q "^# within tolerance" "$work/$n.txt" || fail "$n: no tolerance verdict"
      ok=1; break
    fi
    [ "$rc" = 1 ] || { cat "$work/$n.txt"; fail "$n: missed the tolerance but exit $rc (expected 1)"; }
  done
  [ "$ok" = 1 ] || { cat "$work/$n.txt"; fail "$n: predicted step time not within 15% of measured"; }
  # The executor's memory is tracked, not allocated: named so (issue 13).
  grep -q "^peak_memory_tracked_gib" "$work/$n.txt" || fail "$n: memory row not named tracked"
done
# The MoE plan ran its token all-to-all for real and the model predicted it.
python3 - "$work/moe_ep2.out.json" <<'PY' || fail "moe_ep2: no all-to-all measured or predicted"
import json, sys
r = json.load(open(sys.argv[1]))["results"]["ep_comm_s"]
assert r["measured"] > 0 and r["predicted"] > 0, r
PY

# recommend -> validate: the plan the search picks for this machine (with its
# calibration) runs and meets the tolerance (retried on a noisy machine; after
# a miss the machine is measured again and the search rerun with it).
recommend() {
  "$T" recommend --model gpt-tiny --cluster cpu-local --gpus 2 --gbs 8 --seq 128 --precision fp32 \
    --calibration "$work/cal.json" --save "$work/rec.json" > "$work/rec.txt" 2>&1 ||
    { cat "$work/rec.txt"; fail "recommend on cpu-local failed"; }
}
recommend
ok=0
for attempt in 1 2 3 4 5; do
  [ "$attempt" -ge 2 ] && { calibrate; recommend; }
  if "${MPI[@]}" "$T" validate --backend cpu --plan "$work/rec.json" --calibration "$work/cal.json" --steps 5 \
       --tolerance 15 > "$work/rec.val" 2>&1; then ok=1; break; fi
  echo "recommended plan attempt $attempt missed: $(grep -m1 "^trainplan: validate" "$work/rec.val")"
done
[ "$ok" = 1 ] || { cat "$work/rec.val"; fail "recommended plan: not within --tolerance 15"; }
echo "recommended plan: $(grep "^# within tolerance" "$work/rec.val")"

# A run predicted to exceed --max-time is refused before it starts: exit 2,
# one line (from rank 0 only), naming the flag.
"${MPI[@]}" "$T" validate --backend cpu --plan "$work/dp2.json" --steps 5 --max-time 10ms > "$work/mt.out" 2> "$work/mt.err"
rc=$?
[ "$rc" != 0 ] || fail "--max-time: a run over the limit was started"
n=$(grep -c "^trainplan: --max-time: the run is predicted to take" "$work/mt.err")
[ "$n" = 1 ] || { cat "$work/mt.err"; fail "--max-time: expected one line, got $n"; }
[ -s "$work/mt.out" ] && fail "--max-time: output on stdout"

# Async plans are refused with the reason (they used to report compute 0).
sed 's/"zero": 0,/"zero": 0, "dp_mode": "async",/' "$work/dp2.json" > "$work/async.json"
"${MPI[@]}" "$T" validate --backend cpu --plan "$work/async.json" --steps 1 > /dev/null 2> "$work/async.err"
grep -q "^trainplan: --plan: validate executes synchronous plans only" "$work/async.err" ||
  { cat "$work/async.err"; fail "async plan not refused"; }
echo "all validate checks passed"
