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
