#!/usr/bin/env bash
# CLI tests of training under faults (`simulate` and `recommend` with
# --stragglers, --mtbf-*, --checkpoint-interval, --storage-bandwidth,
# --restart-time, --detect-time, --train-tokens, --seed, --runs): bad values
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
GRAMMAR='allowed: comma-separated jitter=DIST, op_jitter=DIST, slow_gpus=P:F, slow_nodes=P:F, degraded_link=P:F with DIST one of lognormal:SIGMA, normal:SIGMA, uniform:LO:HI, exp:MEAN (e.g. jitter=lognormal:0.05,slow_nodes=0.01:1.5,degraded_link=0.02:0.5)'
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

echo "all $CHECKS checks passed"
