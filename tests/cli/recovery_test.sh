#!/usr/bin/env bash
# validate --inject on the cpu backend with 2 MPI ranks (issue 17): a rank
# killed mid-step (dp2) and a rank stopped mid-step (pp2) are detected, the
# job is relaunched from the last committed checkpoint and finishes; an
# injected straggler slows the step.  Timings on a shared machine are noisy:
# the assertions are the structure and the bounds each mechanism implies,
# not the accuracy figures (docs/faults.md has those, from tools/faults_validate.sh).
# Args: $1 = trainplan binary.
set -uo pipefail
T=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
plan() {  # name tp pp
  cat > "$work/$1.json" <<JSON
{"model": "gpt-tiny", "cluster": "cpu-local", "gpus": 2, "tp": $2, "pp": $3, "dp": $((2 / ($2 * $3))), "cp": 1,
 "vp": 1, "zero": 0, "mbs": 2, "gbs": 8, "seq": 128, "recompute": "none", "sp": false, "schedule": "1f1b",
 "precision": "fp32", "grad_dtype": "fp32", "attention": "flash"}
JSON
}
plan dp2 1 1; plan pp2 1 2

# A killed rank: its process exit is seen at once; resumed from the last
# checkpoint before the fault (step 5 with a checkpoint every 2: step 4).
"$T" validate --backend cpu --plan "$work/dp2.json" --steps 5 --inject kill:rank=1,step=5 --checkpoint-every 2 \
  --checkpoint-dir "$work/ck-kill" --json > "$work/kill.json" 2> "$work/kill.err" || { cat "$work/kill.err"; fail "kill: exit $?"; }
python3 - "$work/kill.json" "$work/ck-kill" <<'PY' || fail "kill: wrong recovery report"
import json, os, sys
d = json.load(open(sys.argv[1])); r = d["results"]; ck = sys.argv[2]
assert d["detected_by"] == "rank 1's process exited", d["detected_by"]
assert d["resumed_from_step"] == 4 == d["predicted_resumed_from_step"], d
# Shards as the plan shards them: each rank its share of the unique bytes.
for step in (2, 4):
    for rank in (0, 1):
        size = os.path.getsize(f"{ck}/ckpt/step-{step}/rank-{rank}.bin")
        assert size == int(d["checkpoint_bytes_per_rank"]), (step, rank, size)
assert 2 * d["checkpoint_bytes_per_rank"] == d["checkpoint_bytes_total"]
# The poll period is 5 ms: a dead process is seen within a few polls
# (1 s would be mpirun's own teardown grace period).
assert 0 <= r["detection_s"]["measured"] < 0.5, r["detection_s"]
# Every phase measured, and recovery = the phases end to end (the phases
# are disjoint intervals between the fault and the redone step).
for k in ("restart_s", "checkpoint_write_s", "checkpoint_load_s", "lost_work_s", "redo_s", "recovery_s"):
    assert r[k]["measured"] > 0 and r[k]["predicted"] > 0, (k, r[k])
parts = sum(r[k]["measured"] for k in ("detection_s", "restart_s", "checkpoint_load_s", "redo_s"))
assert parts <= r["recovery_s"]["measured"] + 1e-6, (parts, r["recovery_s"])
PY
grep -q . "$work/kill.err" && { cat "$work/kill.err"; fail "kill: stderr not empty"; }

# Asynchronous checkpoints: training blocks for the snapshot only, the
# shards persist in the background and commit when in place; the resumed
# checkpoint is still the last one before the fault, each shard complete.
"$T" validate --backend cpu --plan "$work/dp2.json" --steps 5 --inject kill:rank=0,step=5 --checkpoint-every 2 \
  --checkpoint-mode async --checkpoint-dir "$work/ck-async" --json > "$work/async.json" 2> "$work/async.err" ||
  { cat "$work/async.err"; fail "async: exit $?"; }
python3 - "$work/async.json" "$work/ck-async" <<'PY' || fail "async: wrong recovery report"
import json, os, sys
d = json.load(open(sys.argv[1])); r = d["results"]; ck = sys.argv[2]
assert d["checkpoint_mode"] == "async" and d["resumed_from_step"] == 4, d
for step in (2, 4):
    for rank in (0, 1):
        assert os.path.getsize(f"{ck}/ckpt/step-{step}/rank-{rank}.bin") == int(d["checkpoint_bytes_per_rank"])
assert r["checkpoint_persist_s"]["measured"] > 0, r["checkpoint_persist_s"]
assert not any(f.endswith(".tmp") for f in os.listdir(f"{ck}/ckpt/step-4")), os.listdir(f"{ck}/ckpt/step-4")
PY

before=$(ls -d /tmp/trainplan-recovery-* 2>/dev/null)
# A stopped rank: nothing exits, the heartbeat timeout detects it; it cannot
# be detected before the timeout has passed since the last heartbeat.  The
# timeout must exceed a step (about 1 s on a busy 2-core machine), or healthy
# ranks are declared hung before the fault.
"$T" validate --backend cpu --plan "$work/pp2.json" --steps 3 --inject hang:rank=0,step=3 --heartbeat-timeout 3s \
  --json > "$work/hang.json" 2> "$work/hang.err" || { cat "$work/hang.err"; fail "hang: exit $?"; }
python3 - "$work/hang.json" <<'PY' || fail "hang: wrong recovery report"
import json, sys
d = json.load(open(sys.argv[1])); r = d["results"]
assert d["detected_by"] == "heartbeat timeout", d["detected_by"]
assert d["resumed_from_step"] == 2, d
lower = d["heartbeat_timeout_s"] - d["since_heartbeat_s"]
assert lower - 0.01 <= r["detection_s"]["measured"] <= lower + 0.5, (lower, r["detection_s"])
PY
# The temporary checkpoint folder is removed afterwards.
[ "$before" = "$(ls -d /tmp/trainplan-recovery-* 2>/dev/null)" ] || fail "hang: left its temporary folder behind"

# Under a launcher, kill and hang are refused (validate relaunches the job).
out=$(mpirun --allow-run-as-root --oversubscribe -np 2 "$T" validate --backend cpu --plan "$work/dp2.json" \
  --inject kill:rank=1,step=2 --checkpoint-every 1 2>&1)
echo "$out" | grep -q "^trainplan: --inject: kill:rank=1,step=2: validate launches (and relaunches) the job itself" ||
  { echo "$out"; fail "kill under mpirun not refused"; }

# A straggler: rank 1's compute twice as long; the slowed steps are slower
# (tax > 0.3: compute is ~90% of this plan's step) and the gradient syncs
# see rank 1 arrive late.
mpirun --allow-run-as-root --oversubscribe -np 2 "$T" validate --backend cpu --plan "$work/dp2.json" --steps 3 \
  --inject slow:rank=1,factor=2 --out "$work/slow.json" > "$work/slow.txt" 2>&1 || { cat "$work/slow.txt"; fail "slow: exit"; }
python3 - "$work/slow.json" <<'PY' || fail "slow: wrong straggler report"
import json, sys
d = json.load(open(sys.argv[1])); s = d["straggler"]
assert len(d["slowed_step_times_s"]) == 3
assert s["straggler_tax"]["measured"] > 0.3, s["straggler_tax"]
assert 0.3 < s["straggler_tax"]["predicted"] <= 1.0, s["straggler_tax"]
# The baseline jitter is fitted to the plain steps' arrival spread: inside
# the bisection's range its simulated spread is the measured one (64 sampled
# steps, the same draws at every sigma; within 10%).  At the range's top
# (0.5) the plain steps were noisier than any jitter it fits -- the shared
# machine busy during those three steps (a CI run measured a 0.41 s spread
# there) -- and the slowed steps' spread cannot be told from that noise.
sigma = d["jitter_sigma"]
assert 0 <= sigma <= 0.5, sigma
if sigma < 0.5:
    assert s["slowed_arrival_spread_s"]["measured"] > s["arrival_spread_s"]["measured"], s
if 0 < sigma < 0.5:
    a = s["arrival_spread_s"]
    assert abs(a["predicted"] - a["measured"]) <= 0.1 * a["measured"], a
PY
grep -q "^# injected straggler (slow:rank=1,factor=2)" "$work/slow.txt" || fail "slow: no straggler table"
# A slow link: rank 1's transfers at a quarter of the bandwidth (dp2: the
# gradient all-reduces move 4x the bytes); the slowed steps' DP
# communication grows, and the model (the node's fabric at 0.25) predicts a
# tax > 0.
mpirun --allow-run-as-root --oversubscribe -np 2 "$T" validate --backend cpu --plan "$work/dp2.json" --steps 3 \
  --inject link:rank=1,factor=0.25 --out "$work/link.json" > "$work/link.txt" 2>&1 || { cat "$work/link.txt"; fail "link: exit"; }
python3 - "$work/link.json" <<'PY' || fail "link: wrong straggler report"
import json, sys
d = json.load(open(sys.argv[1])); s = d["straggler"]
assert len(d["slowed_step_times_s"]) == 3
assert s["straggler_tax"]["predicted"] > 0, s["straggler_tax"]
assert s["slowed_step_time_s"]["measured"] > 0, s
PY
grep -q "^# injected slow link (link:rank=1,factor=0.25)" "$work/link.txt" || fail "link: no straggler table"
echo "recovery_test: all checks passed"
