#!/usr/bin/env bash
# calibrate's inputs and files: nccl-tests output in, calibration out, the
# overlay on simulate (and its refusal for another GPU type), bad flags, and
# --resume measuring only what is missing.
# Args: $1 = trainplan binary, $2 = tests/data dir.  TRAINPLAN_DATA_DIR set.
set -uo pipefail
BIN=$1
# shellcheck source=tests/cli/common.sh
source "$(dirname "$0")/common.sh"
DATA=$2

# nccl-tests text -> calibration.json with an all_reduce fit near the
# curve's 235 GB/s busbw (bandwidth-bound sizes dominate the fit).
expect_ok "fit nccl-tests output" calibrate --from-nccl-tests "$DATA/nccl/all_reduce_perf_a100.txt" \
  --collective all_reduce --out "$TMP/a100.json"
python3 - "$TMP/a100.json" <<'PY' || fail "calibration from nccl-tests is wrong"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["gpu_type"] == "A100" and c["complete"], c
f = [x for x in c["collectives"] if x["collective"] == "all_reduce"][0]
busbw = float(f["bus_bandwidth"].replace("GB/s", ""))
assert 225 < busbw < 245, busbw
assert f["ranks"] == 8 and f["scope"] == "intra"
PY
# The same curve taken on two hosts of 4 GPUs (the device lines name two
# hosts) is an inter-node curve; where the two hosts are trays of one NVLink
# domain (a GB200 NVL72), --ranks-per-node 8 says the 8 ranks shared NVLink.
sed 's/Rank  \([4-7]\) Group  0 Pid  41234 on node-a01/Rank  \1 Group  0 Pid  41235 on node-a02/' \
  "$DATA/nccl/all_reduce_perf_a100.txt" > "$TMP/two_trays.txt"
grep -q node-a02 "$TMP/two_trays.txt" || fail "the two-host fixture was not made"
for rpn in "" 8; do
  expect_ok "fit two-host nccl-tests output (ranks per node: ${rpn:-hosts})" calibrate --from-nccl-tests \
    "$TMP/two_trays.txt" --collective all_reduce ${rpn:+--ranks-per-node $rpn} --out "$TMP/trays$rpn.json"
  python3 - "$TMP/trays$rpn.json" "${rpn:-hosts}" <<'PY' || fail "two-host calibration scope is wrong (${rpn:-hosts})"
import json, sys
c = json.load(open(sys.argv[1]))
f = [x for x in c["collectives"] if x["collective"] == "all_reduce"][0]
want = "inter" if sys.argv[2] == "hosts" else "intra"
assert f["scope"] == want, (f["scope"], want)
assert c["nodes"] == (2 if want == "inter" else 1), c["nodes"]
PY
done
expect_error "ranks per node below 1" "trainplan: --ranks-per-node: out of range: 0; allowed: 1 or more (the ranks of one NVLink domain)" \
  calibrate --from-nccl-tests "$TMP/two_trays.txt" --collective all_reduce --ranks-per-node 0 --out "$TMP/x.json"
expect_ok "overlay on the matching GPU" simulate --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --calibration "$TMP/a100.json"
expect_error "overlay on another GPU type" \
  "trainplan: $TMP/a100.json: /gpu_type: taken on NVIDIA A100-SXM4-80GB (A100), but cluster dgx-h100 has H100-SXM5-80GB (H100); calibrate on the cluster you plan for" \
  simulate --model gpt3-1.3b --cluster dgx-h100 --gpus 8 --calibration "$TMP/a100.json"
expect_error "unknown backend" "trainplan: --backend: unknown backend \"tpu\"; allowed: cpu, cuda" \
  calibrate --backend tpu --out "$TMP/x.json"
expect_error "step factor below 2" "trainplan: -f/--stepfactor: out of range: 1; allowed: 2 to 1024" calibrate --backend cpu -f 1 --out "$TMP/x.json"
expect_error "unknown collective" \
  "trainplan: --collectives: unknown collective \"allsum\"; allowed: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, sendrecv" \
  calibrate --backend cpu --collectives allsum --out "$TMP/x.json"
[ ! -e "$TMP/x.json" ] || fail "a refused calibration wrote a file"

# --from-runs: measured step times of a few layouts fit the model's scales.
# Oracle: "measured" = trainplan's own prediction for the single-node runs
# and 3x it for the multi-node ones (a slow network); the fit must leave the
# GPU figures alone, slow the NICs, and change what recommend ranks first
# (fewer bytes over the NICs per step).
python3 - "$BIN" "$TMP" <<'PY' || fail "could not write the runs"
import json, subprocess, sys
binary, tmp = sys.argv[1], sys.argv[2]
runs = []
for name, gpus, dp, slow in (("one-gpu", 1, 1, 1), ("dp8", 8, 8, 1), ("dp16", 16, 16, 3), ("dp32", 32, 32, 3)):
    plan = {"model": "gpt3-1.3b", "cluster": "dgx-a100", "gpus": gpus, "tp": 1, "pp": 1, "dp": dp, "cp": 1, "vp": 1,
            "zero": 0, "shard_group": 0, "mbs": 1, "gbs": dp, "seq": 2048, "recompute": "none", "sp": False,
            "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "dp_mode": "sync",
            "offload": "none"}
    json.dump(plan, open(f"{tmp}/{name}.json", "w"))
    out = subprocess.run([binary, "simulate", "--plan", f"{tmp}/{name}.json", "--json"], capture_output=True, text=True)
    t = json.loads(out.stdout)["step_time_s"] * slow
    runs.append({"name": name, "plan": f"{name}.json", "step_time": f"{t:.6g}s"})
json.dump({"runs": runs}, open(f"{tmp}/runs.json", "w"))
json.dump({"runs": runs[:1] + [{"name": "h", "plan": "h100.json", "step_time": "1s"}]}, open(f"{tmp}/mixed.json", "w"))
plan = json.load(open(f"{tmp}/one-gpu.json")); plan["cluster"] = "dgx-h100"
json.dump(plan, open(f"{tmp}/h100.json", "w"))
json.dump({"runs": [{"name": "x", "plan": "one-gpu.json"}]}, open(f"{tmp}/no-time.json", "w"))
PY
"$BIN" calibrate --from-runs "$TMP/runs.json" --out "$TMP/runs-cal.json" >"$TMP/fit.txt" 2>&1 || fail "calibrate --from-runs failed: $(cat "$TMP/fit.txt")"
python3 - "$TMP/runs-cal.json" <<'PY' || fail "the fit to runs is wrong: $(cat "$TMP/fit.txt")"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["backend"] == "runs" and c["gpu_type"] == "A100" and c["complete"], c
s = c["run_fit"]["scales"]
assert s["inter_bandwidth"] < 0.6, s          # the NICs explain the 3x
assert 0.95 < s["gemm_efficiency"] < 1.05, s   # the GPU runs as published
assert c["run_fit"]["residual_rms"] < 0.05, c["run_fit"]
PY
"$BIN" recommend --model gpt3-1.3b --cluster dgx-a100 --nodes 4 --gbs 64 --top 1 >"$TMP/before.txt" || fail "recommend failed"
"$BIN" recommend --model gpt3-1.3b --cluster dgx-a100 --nodes 4 --gbs 64 --top 1 --calibration "$TMP/runs-cal.json" \
  >"$TMP/after.txt" || fail "recommend --calibration failed"
[ "$(sed -n 4p "$TMP/before.txt" | cut -c1-90)" != "$(sed -n 4p "$TMP/after.txt" | cut -c1-90)" ] \
  || fail "a slow-network calibration did not change the best layout: $(sed -n 4p "$TMP/after.txt")"
expect_error "runs on two GPU types" \
  "trainplan: $TMP/mixed.json: /runs/1/plan: runs on H100-SXM5-80GB (H100), the first run on A100; fit the runs of one GPU type at a time" \
  calibrate --from-runs "$TMP/mixed.json" --out "$TMP/y.json"
expect_error "run without a step time" \
  "trainplan: $TMP/no-time.json: /runs/0/step_time: missing required key" \
  calibrate --from-runs "$TMP/no-time.json" --out "$TMP/y.json"
[ ! -e "$TMP/y.json" ] || fail "a refused fit wrote a file"

# --resume: a second run with a larger -e measures only the new sizes.
if command -v mpirun >/dev/null; then
  MPI=(mpirun --allow-run-as-root --oversubscribe -np 2)
  "${MPI[@]}" "$BIN" calibrate --backend cpu --collectives all_reduce -b 8 -e 64 --iters 2 --warmup 1 \
    --gemm-max-flops 1e6 --out "$TMP/r.json" > "$TMP/r1.txt" 2>&1 || fail "first calibrate failed: $(cat "$TMP/r1.txt")"
  "${MPI[@]}" "$BIN" calibrate --backend cpu --collectives all_reduce -b 8 -e 256 --iters 2 --warmup 1 \
    --gemm-max-flops 1e6 --out "$TMP/r.json" --resume > "$TMP/r2.txt" 2>&1 || fail "resumed calibrate failed: $(cat "$TMP/r2.txt")"
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float' "$TMP/r2.txt")
  [ "$rows" -eq 2 ] || fail "--resume measured $rows collective sizes, expected 2 (128 and 256 B): $(cat "$TMP/r2.txt")"
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); n=len(c["samples"]["collectives"]); assert n == 6, n' "$TMP/r.json" \
    || fail "resumed file does not hold all six all_reduce sizes"
fi
echo "all $CHECKS calibrate checks passed"
