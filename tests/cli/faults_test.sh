#!/usr/bin/env bash
# CLI tests of training under faults (`simulate` and `recommend` with
# --stragglers, --mtbf-*, --checkpoint-interval, --checkpoint-mode,
# --storage-bandwidth, --restart-time, --detect-time, --slow-node-*,
# --slow-detect-time, --spare-nodes, --repair-time, --train-tokens, --seed,
# --runs): bad values
# exit 2 with exactly one line on stderr (verbatim) and nothing on stdout;
# good runs give the documented JSON fields, and the same seed gives
# byte-identical output.
#
# Usage: faults_test.sh <trainplan binary> <tests/data dir>
# TRAINPLAN_DATA_DIR must point at the repository root (models/, topologies/).
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 <trainplan binary> <tests/data dir>" >&2
  exit 1
fi
BIN=$1
# shellcheck source=tests/cli/common.sh
source "$(dirname "$0")/common.sh"
if [ -z "${TRAINPLAN_DATA_DIR:-}" ] || [ ! -d "$TRAINPLAN_DATA_DIR/models" ]; then
  echo "TRAINPLAN_DATA_DIR must point at the repository root" >&2
  exit 1
fi







SIM=(simulate --model gpt3-1.3b --cluster dgx-a100)
SMALL=("${SIM[@]}" --gpus 8)
GRAMMAR='allowed: comma-separated jitter=DIST, op_jitter=DIST, slow_gpus=P:F, slow_nodes=P:F, degraded_link=P:F, degraded_nvlink=P:F, slow_rank=R:F with DIST one of lognormal:SIGMA, normal:SIGMA, uniform:LO:HI, exp:MEAN (e.g. jitter=lognormal:0.05,slow_nodes=0.01:1.5,degraded_link=0.02:0.5)'
FAIL_OK=(--mtbf-gpu 50000h --storage-bandwidth 20GB/s --train-tokens 10B)

# ---- bad input: exit 2, one line on stderr, exact message -------------------

expect_error "--stragglers not KEY=VALUE" \
  "trainplan: --stragglers: \"bogus\" is not KEY=VALUE; $GRAMMAR" \
  "${SMALL[@]}" --stragglers bogus
expect_error "--stragglers unknown item" \
  "trainplan: --stragglers: unknown item \"jiter\"; $GRAMMAR" \
  "${SMALL[@]}" --stragglers jiter=lognormal:0.05
expect_error "--stragglers unknown distribution" \
  "trainplan: --stragglers: jitter=gamma:2: unknown distribution \"gamma:2\"; allowed: lognormal:SIGMA, normal:SIGMA, uniform:LO:HI, exp:MEAN" \
  "${SMALL[@]}" --stragglers jitter=gamma:2
expect_error "--stragglers slow factor below 1" \
  "trainplan: --stragglers: slow_nodes=0.01:0.5: slowdown factor F 0.5 is not in [1, 100]; P:F with F the slowdown factor, e.g. slow_nodes=0.01:1.5" \
  "${SMALL[@]}" --stragglers slow_nodes=0.01:0.5
expect_error "--stragglers empty" \
  "trainplan: --stragglers: empty value" \
  "${SMALL[@]}" --stragglers ""
expect_error "--mtbf-gpu without a unit" \
  "trainplan: --mtbf-gpu: \"50000\" has no unit; expected e.g. \"2.5us\", \"30min\", \"50000h\"" \
  "${SMALL[@]}" --mtbf-gpu 50000
expect_error "--mtbf-node zero" \
  "trainplan: --mtbf-node: must be > 0, got \"0h\"; expected e.g. \"30min\", \"50000h\"" \
  "${SMALL[@]}" --mtbf-node 0h
expect_error "--checkpoint-interval not a duration" \
  "trainplan: --checkpoint-interval: \"soon\" is not a number with a unit; expected e.g. \"2.5us\", \"30min\", \"50000h\"" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --checkpoint-interval soon
expect_error "--storage-bandwidth without /s" \
  "trainplan: --storage-bandwidth: unknown unit \"GB\" in \"20GB\"; expected e.g. \"450GB/s\", \"400Gb/s\", \"3.35TB/s\"" \
  "${SMALL[@]}" --mtbf-gpu 50000h --storage-bandwidth 20GB --train-tokens 10B
expect_error "--restart-time negative" \
  "trainplan: --restart-time: \"-5min\" is negative; expected e.g. \"2.5us\", \"30min\", \"50000h\"" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --restart-time -5min
expect_error "--runs 0" \
  "trainplan: --runs: \"0\" is not an integer in [1, 100000]; e.g. --runs 1000" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --runs 0
expect_error "--seed not a number" \
  "trainplan: --seed: \"x\" is not an integer in [0, 18446744073709551615]; e.g. --seed 42" \
  "${SMALL[@]}" --seed x
expect_error "--train-tokens not a count" \
  "trainplan: --train-tokens: \"lots\" is not a number; expected a token count, e.g. 15.6T, 300B, 2e12" \
  "${SMALL[@]}" --train-tokens lots
expect_error "--runs without an MTBF" \
  "trainplan: --runs: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates" \
  "${SMALL[@]}" --runs 10
expect_error "--checkpoint-interval without an MTBF" \
  "trainplan: --checkpoint-interval: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates" \
  "${SMALL[@]}" --checkpoint-interval auto
expect_error "--straggler-steps without --stragglers" \
  "trainplan: --straggler-steps: has no effect without --stragglers" \
  "${SMALL[@]}" --straggler-steps 4
expect_error "an MTBF without storage bandwidth" \
  "trainplan: --storage-bandwidth: is required with --mtbf-gpu, --mtbf-node or --failure-rates (checkpoint write and load times depend on it); e.g. --storage-bandwidth 100GB/s" \
  "${SMALL[@]}" --mtbf-gpu 50000h
expect_error "an MTBF without a run length" \
  "trainplan: --train-tokens: is required with --mtbf-gpu, --mtbf-node or --failure-rates (the run length); e.g. --train-tokens 15.6T" \
  "${SMALL[@]}" --mtbf-gpu 50000h --storage-bandwidth 20GB/s
expect_error "--checkpoint-mode unknown" \
  "trainplan: --checkpoint-mode: unknown mode \"lazy\"; allowed: sync, async" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --checkpoint-mode lazy
expect_error "--checkpoint-mode without an MTBF" \
  "trainplan: --checkpoint-mode: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates" \
  "${SMALL[@]}" --checkpoint-mode async
SLOW_OK=(--slow-node-mtbf 20000h --slow-node-factor 1.5 --spare-nodes 1 --repair-time 1d)
expect_error "--slow-node-mtbf without a factor" \
  "trainplan: --slow-node-factor: is required with --slow-node-mtbf (the slow node's compute slowdown; no published default); e.g. --slow-node-factor 1.5" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --slow-node-mtbf 20000h --spare-nodes 1
expect_error "--slow-node-factor not above 1" \
  "trainplan: --slow-node-factor: \"0.8\" is not in (1, 100]; F = a slow node's compute time / nominal, e.g. --slow-node-factor 1.5" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --slow-node-mtbf 20000h --slow-node-factor 0.8 --spare-nodes 0
expect_error "--spare-nodes without --slow-node-mtbf" \
  "trainplan: --spare-nodes: has no effect without --slow-node-mtbf (a duration > 0)" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --spare-nodes 4
expect_error "--repair-time with no spare" \
  "trainplan: --repair-time: has no effect with --spare-nodes 0 (no node is drained to repair)" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --slow-node-mtbf 20000h --slow-node-factor 1.5 --spare-nodes 0 --repair-time 1d
expect_error "--slow-node-mtbf without failures" \
  "trainplan: --slow-node-mtbf: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates" \
  "${SMALL[@]}" "${SLOW_OK[@]}"
expect_error "recommend validates the same options" \
  "trainplan: --mtbf-gpu: \"50000\" has no unit; expected e.g. \"2.5us\", \"30min\", \"50000h\"" \
  recommend --model gpt3-1.3b --cluster dgx-a100 --gpus 8 --mtbf-gpu 50000

# ---- good input -------------------------------------------------------------

FAULTS=(--stragglers jitter=lognormal:0.05,slow_nodes=0.05:1.5,degraded_link=0.05:0.5 --straggler-steps 4
        --mtbf-gpu 50000h --mtbf-node 20000h --storage-bandwidth 20GB/s --restart-time 10min
        --train-tokens 300B --runs 200)
expect_ok "simulate with every fault option" "${SIM[@]}" --nodes 32 --gbs 512 --mbs 2 "${FAULTS[@]}" --seed 42 --json
json_check "fault fields" '
for k in ("goodput", "time_to_train_s", "checkpoint_interval_s", "young_daly_interval_s", "straggler_tax",
          "stragglers", "failures", "seed", "steps"):
    assert k in d, "missing key " + k
t = d["time_to_train_s"]
assert set(t) == {"mean", "p50", "p90", "expected", "fault_free"}, t
assert t["fault_free"] < t["p50"] <= t["p90"], t
assert 0 < d["goodput"] <= 1, d["goodput"]
assert d["straggler_tax"] > 0, d["straggler_tax"]
assert d["seed"] == 42
f = d["failures"]
assert f["runs"] == 200
# 256 GPUs / 50000 h + 32 nodes / 20000 h
assert abs(f["rate_per_hour"] - (256 / 50000 + 32 / 20000)) < 1e-6, f["rate_per_hour"]
assert f["interval"]["mode"] == "auto"
assert abs(f["interval"]["seconds"] - d["checkpoint_interval_s"]) < 1e-3
# 300e9 tokens / (512 * 2048 tokens per step), rounded up
assert d["steps"] == -(-300 * 10**9 // (512 * 2048)), d["steps"]
s = d["stragglers"]
assert s["sampled_steps"] == 4 and s["simulated_ranks"] == 256, s
assert s["gpu_busy_fraction"]["with"] < s["gpu_busy_fraction"]["without"], s
assert s["sync_arrival_spread"]["with"]["range_mean_ms"] > 0, s
'
cp "$TMP/out" "$TMP/first"
expect_ok "same seed again" "${SIM[@]}" --nodes 32 --gbs 512 --mbs 2 "${FAULTS[@]}" --seed 42 --json
cmp -s "$TMP/out" "$TMP/first" || fail "same seed, different output"
expect_ok "another seed" "${SIM[@]}" --nodes 32 --gbs 512 --mbs 2 "${FAULTS[@]}" --seed 43 --json
cmp -s "$TMP/out" "$TMP/first" && fail "another seed, same output"

expect_ok "a given checkpoint interval is rounded to whole steps" \
  "${SMALL[@]}" "${FAIL_OK[@]}" --checkpoint-interval 30min --runs 50 --json
json_check "interval given" '
f = d["failures"]["interval"]
assert f["mode"] == "given", f
step = d["step_time_s"]
assert abs(f["seconds"] - 1800) <= step, f
'

# --checkpoint-mode sync is the default: the same output, the mode named.
expect_ok "default checkpoint mode" "${SMALL[@]}" "${FAIL_OK[@]}" --runs 50 --json
cp "$TMP/out" "$TMP/default"
expect_ok "explicit sync" "${SMALL[@]}" "${FAIL_OK[@]}" --runs 50 --checkpoint-mode sync --json
python3 - "$TMP/default" "$TMP/out" <<'PY' || fail "--checkpoint-mode sync differs from the default"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b["failures"]["checkpoint"].pop("mode") == "sync"
assert a == b
PY
# Async at a slow store: blocks only for the snapshot, gains goodput.
expect_ok "async checkpointing" "${SMALL[@]}" --mtbf-node 50h --storage-bandwidth 2GB/s --train-tokens 10B \
  --runs 100 --checkpoint-mode async --json
cp "$TMP/out" "$TMP/async"
expect_ok "sync checkpointing" "${SMALL[@]}" --mtbf-node 50h --storage-bandwidth 2GB/s --train-tokens 10B \
  --runs 100 --json
python3 - "$TMP/async" "$TMP/out" <<'PY' || fail "async JSON"
import json, sys
a, s = (json.load(open(p)) for p in sys.argv[1:])
c = a["failures"]["checkpoint"]
assert c["mode"] == "async", c
# persist = the sync write; the snapshot is much shorter
assert abs(c["persist_s"] - c["write_s"]) < 1e-3 and 0 < c["snapshot_s"] < c["write_s"] / 10, c
assert c["blocking_per_checkpoint_s"] >= c["snapshot_s"], c
assert a["goodput"] > s["goodput"], (a["goodput"], s["goodput"])
PY
# Slow nodes: a slow share and drains in the breakdown, goodput below the
# same run without them.
expect_ok "slow nodes" "${SIM[@]}" --nodes 32 --gbs 512 --mbs 2 "${FAIL_OK[@]}" "${SLOW_OK[@]}" --runs 100 --json
json_check "slow node fields" '
f = d["failures"]
sn = f["slow_nodes"]
for k in ("mtbf_node_s", "factor", "detect_s", "spare_nodes", "repair_s", "rate_per_hour", "drain_s", "expected",
          "monte_carlo"):
    assert k in sn, k
# 32 nodes / 20000 h
assert abs(sn["rate_per_hour"] - 32 / 20000) < 1e-6, sn
assert sn["detect_s"] == 600 and sn["spare_nodes"] == 1, sn
b = f["wall_breakdown_s"]
assert b["slow"] > 0 and b["drain"] > 0, b
assert abs(sum(b.values()) - d["time_to_train_s"]["mean"]) < 1, (b, d["time_to_train_s"])
'
cp "$TMP/out" "$TMP/slow"
expect_ok "the same without slow nodes" "${SIM[@]}" --nodes 32 --gbs 512 --mbs 2 "${FAIL_OK[@]}" --runs 100 --json
python3 - "$TMP/slow" "$TMP/out" <<'PY' || fail "slow nodes cost goodput"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["goodput"] < b["goodput"], (a["goodput"], b["goodput"])
assert "slow_nodes" not in b["failures"] and "slow" not in b["failures"]["wall_breakdown_s"]
PY
expect_ok "slow nodes text" "${SIM[@]}" --nodes 32 --gbs 512 --mbs 2 "${FAIL_OK[@]}" "${SLOW_OK[@]}" --runs 50 \
  --checkpoint-mode async
for want in "slow nodes" "spares " "async " "slow " "drain "; do
  grep -q "$want" "$TMP/out" || fail "text output lacks \"$want\""
done

expect_ok "text output has the fault sections" "${SMALL[@]}" "${FAIL_OK[@]}" --stragglers jitter=lognormal:0.1 --runs 50
for want in "straggler tax" "goodput" "time to train" "Young"; do
  grep -q "$want" "$TMP/out" || fail "text output lacks \"$want\""
done

# Async DP with k equal workers: staleness k - 1 (here k = 4), kept with
# stragglers, which add the staleness distribution under jitter.
expect_ok "async staleness" "${SIM[@]}" --gpus 4 --dp-mode async --mbs 4 --stragglers jitter=lognormal:0.1 --json
json_check "staleness k-1" '
assert d["staleness"]["mean"] == 3 and d["staleness"]["max"] == 3, d["staleness"]
st = d["stragglers"]["staleness"]
assert st["without"]["mean"] == 3, st
assert set(st["with"]) == {"mean", "p90", "max", "samples"}, st
assert "tokens_per_s" in d["stragglers"]
'

expect_ok "recommend ranks by expected time to train" \
  recommend --model gpt3-1.3b --cluster dgx-a100 --nodes 4 --gbs 64 --top 3 --mtbf-node 100h \
  --storage-bandwidth 10GB/s --train-tokens 10B --runs 100 --json
json_check "recommend fault fields" '
assert d["ranked_by"] == "expected time to train", d["ranked_by"]
plans = d["plans"]
assert plans, d
for p in plans:
    for k in ("goodput", "time_to_train_s", "checkpoint_interval_s", "failures_per_hour", "score_s"):
        assert k in p, k
scores = [p["score_s"] for p in plans]
assert scores == sorted(scores), scores
worlds = d["worlds"]
assert [w["gpus"] for w in worlds] == [32, 24, 16], worlds
'

# The search ranks by the expected time to train of the chosen checkpoint
# mode: async at slow storage trains sooner, and its bound still prunes.
REC=(recommend --model gpt3-1.3b --cluster dgx-a100 --nodes 4 --gbs 64 --top 1 --mtbf-node 20h
     --storage-bandwidth 1GB/s --train-tokens 10B --runs 50 --json)
expect_ok "recommend, sync checkpoints" "${REC[@]}"
cp "$TMP/out" "$TMP/rec_sync"
expect_ok "recommend, async checkpoints" "${REC[@]}" --checkpoint-mode async
python3 - "$TMP/rec_sync" "$TMP/out" <<'PY' || fail "recommend with async"
import json, sys
s, a = (json.load(open(p)) for p in sys.argv[1:])
assert a["plans"][0]["score_s"] < s["plans"][0]["score_s"], (a["plans"][0]["score_s"], s["plans"][0]["score_s"])
assert a["plans"][0]["goodput"] > s["plans"][0]["goodput"]
PY

echo "all $CHECKS checks passed"
