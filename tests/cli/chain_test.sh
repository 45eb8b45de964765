#!/usr/bin/env bash
# The chain a new user runs (issue 13): recommend -> export to every framework
# -> the framework's own rules, on 1 and 4 nodes, for the recommended plan and
# for a matrix of layouts around it (every strategy the frameworks run: DDP,
# ZeRO-1/2/3, hybrid shard, TP, PP, interleaved, CP, uneven stages).
#
# Each export is checked by an oracle that does not share code with the
# exporter: tests/export/check_export.py (Megatron-LM argument names, types,
# choices and validate_args; DeepSpeed config keys and batch arithmetic; the
# PyTorch API names and the gradient-accumulation rule) and
# tests/export/torchtitan_rules.py (torchtitan v0.2.2 config schema, parallel
# dims, pipeline split).  Every script passes `bash -n`.  A refusal is one
# line on stderr, exit 2, nothing on stdout.
#
# Usage: chain_test.sh <trainplan binary>; TRAINPLAN_DATA_DIR = repository root.
set -u
T=$1
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ORACLE="$HERE/../export/check_export.py"
TITAN="$HERE/../export/torchtitan_rules.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

declare -A accepted refused
# export_and_check <plan.json> <nodes> <label>
export_and_check() {
  local plan=$1 nodes=$2 label=$3 gpus
  gpus=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"])' "$plan")
  for target in megatron deepspeed torchtitan fsdp torchtitan-py; do
    local out="$work/out.$target" err="$work/err.$target"
    "$T" export --plan "$plan" --to "$target" > "$out" 2> "$err"
    local rc=$?
    if [ "$rc" = 2 ]; then
      refused[$target,$nodes]=$(( ${refused[$target,$nodes]:-0} + 1 ))
      [ "$(wc -l < "$err")" = 1 ] || fail "$label $target: refusal is not one line: $(cat "$err")"
      grep -q "^trainplan: --to: $target cannot express this plan: " "$err" ||
        grep -q "^trainplan: --plan: " "$err" || fail "$label $target: refusal without the reason: $(cat "$err")"
      [ -s "$out" ] && fail "$label $target: refused but wrote to stdout"
      continue
    fi
    [ "$rc" = 0 ] || { fail "$label $target: exit $rc: $(cat "$err")"; continue; }
    accepted[$target,$nodes]=$(( ${accepted[$target,$nodes]:-0} + 1 ))
    case $target in
      megatron|deepspeed)
        if head -1 "$out" | grep -q '^#!'; then
          bash -n "$out" 2> "$work/bash.err" || fail "$label $target: bash -n: $(cat "$work/bash.err")"
        fi
        python3 "$ORACLE" --target "$target" --plan "$plan" --file "$out" --nodes "$nodes" > "$work/oracle" 2>&1 ||
          fail "$label $target: $(cat "$work/oracle")"
        ;;
      fsdp)
        python3 "$ORACLE" --target fsdp --plan "$plan" --file "$out" --nodes "$nodes" > "$work/oracle" 2>&1 ||
          fail "$label fsdp: $(cat "$work/oracle")"
        ;;
      torchtitan)
        python3 "$TITAN" --plan "$plan" --file "$out" --world "$gpus" > "$work/oracle" 2>&1 ||
          fail "$label torchtitan: $(cat "$work/oracle")"
        ;;
      torchtitan-py)
        python3 "$TITAN" --plan "$plan" --file "$out" --world "$gpus" --format python > "$work/oracle" 2>&1 ||
          fail "$label torchtitan-py: $(cat "$work/oracle")"
        ;;
    esac
  done
}

for nodes in 1 4; do
  rec="$work/rec$nodes.json"
  "$T" recommend --model llama3-8b --cluster dgx-h100 --nodes "$nodes" --save "$rec" > "$work/rec.txt" 2>&1 ||
    { fail "recommend --nodes $nodes: $(cat "$work/rec.txt")"; continue; }
  export_and_check "$rec" "$nodes" "recommended($nodes nodes)"
  # Layouts around the recommendation: (tp pp cp zero vp schedule shard
  # stage_layers precision), precision bf16 or fp8:<recipe> (FP8 plans
  # export to the framework whose FP8 was simulated: Transformer Engine for
  # Megatron, torchao float8 under FSDP2 for torchtitan and the script).
  gpus=$((8 * nodes))
  while read -r tp pp cp zero vp schedule shard stages prec; do
    dp=$((gpus / (tp * pp * cp)))
    [ $((dp * tp * pp * cp)) = "$gpus" ] || continue
    plan="$work/m.json"
    python3 - "$rec" "$plan" "$tp" "$pp" "$cp" "$dp" "$zero" "$vp" "$schedule" "$shard" "$stages" "${prec:-bf16}" <<'PY'
import json, sys
src, dst, tp, pp, cp, dp, zero, vp, schedule, shard, stages, prec = sys.argv[1:]
p = json.load(open(src))
p.pop("fp8_recipe", None)
if prec.endswith("+tpo"):
    # Megatron-Core's --tp-comm-overlap (Transformer Engine userbuffers).
    prec = prec[: -len("+tpo")]
    p.update(tp_comm_overlap=True, framework="megatron-core")
p["precision"] = prec.split(":")[0]
if ":" in prec:
    p["fp8_recipe"] = prec.split(":")[1]
if prec.endswith(":param-gather"):
    p["fp8_param_gather"] = True
p.update(tp=int(tp), pp=int(pp), cp=int(cp), dp=int(dp), zero=int(zero), vp=int(vp), schedule=schedule,
         shard_group=int(shard), sp=int(tp) > 1, mbs=1, recompute="selective" if int(pp) > 1 else "none",
         stage_layers=[] if stages == "-" else [int(x) for x in stages.split(",")])
p["gbs"] = max(p["gbs"], 8 * int(dp) * int(pp))
json.dump(p, open(dst, "w"))
PY
    if ! "$T" memory --plan "$plan" > /dev/null 2>&1 && ! "$T" simulate --plan "$plan" > /dev/null 2>&1; then
      continue  # a layout the plan rules refuse (e.g. vp with these layers): not an export case
    fi
    export_and_check "$plan" "$nodes" "tp$tp pp$pp cp$cp zero$zero vp$vp $schedule shard$shard stages=$stages ${prec:-bf16} ($nodes nodes)"
    if [[ "${prec:-}" == *+tpo ]]; then
      "$T" export --plan "$plan" --to megatron 2> /dev/null | grep -q -- "--tp-comm-overlap" ||
        fail "tp$tp ${prec} ($nodes nodes): the Megatron export lacks the simulated --tp-comm-overlap"
    fi
  done <<'MATRIX'
1 1 1 0 1 1f1b 0 -
1 1 1 1 1 1f1b 0 -
1 1 1 2 1 1f1b 0 -
1 1 1 3 1 1f1b 0 -
1 1 1 3 1 1f1b 8 -
2 1 1 3 1 1f1b 0 -
8 1 1 1 1 1f1b 0 -
2 2 1 1 1 1f1b 0 -
2 2 1 1 2 interleaved 0 -
2 2 1 2 1 1f1b 0 -
1 4 1 1 1 1f1b 0 7,9,9,7
1 2 1 1 1 gpipe 0 -
2 1 2 1 1 1f1b 0 -
2 1 2 3 1 1f1b 0 -
4 2 1 0 1 1f1b 0 -
1 1 1 1 1 1f1b 0 - fp8:delayed
2 2 1 1 1 1f1b 0 - fp8:tensorwise
1 1 1 0 1 1f1b 0 - fp8:blockwise
1 1 1 3 1 1f1b 0 - fp8:tensorwise
1 1 1 3 1 1f1b 8 - fp8:rowwise
2 1 2 3 1 1f1b 0 - fp8:tensorwise
2 2 1 1 1 1f1b 0 - fp8:delayed:param-gather
2 2 1 2 1 zb-v 0 -
1 4 1 2 1 zb-v 0 6,8,9,9
2 2 1 2 1 dualpipe-v 0 -
2 2 1 2 2 interleaved-zb 0 -
2 1 1 1 1 1f1b 0 - bf16+tpo
8 1 1 1 1 1f1b 0 - bf16+tpo
4 2 1 1 1 1f1b 0 - fp8:delayed+tpo
MATRIX
  # Partial full recompute (Megatron's block method, the first N layers of
  # each chunk): Megatron writes --recompute-method block --recompute-num-layers
  # N (the oracle checks it against the plan); the others refuse with the reason.
  for vp in 1 2; do
    plan="$work/partial.json"
    python3 - "$rec" "$plan" "$gpus" "$vp" <<'PY'
import json, sys
src, dst, gpus, vp = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p = json.load(open(src))
p.pop("fp8_recipe", None)
p.update(tp=2, pp=2, cp=1, dp=gpus // 4, zero=1, vp=vp, schedule="interleaved" if vp > 1 else "1f1b", shard_group=0,
         sp=True, mbs=1, recompute="full", recompute_layers=1, precision="bf16", stage_layers=[])
p["gbs"] = max(p["gbs"], 8 * (gpus // 4) * 2)
json.dump(p, open(dst, "w"))
PY
    "$T" simulate --plan "$plan" > /dev/null 2>&1 || { fail "partial recompute vp$vp ($nodes nodes) does not simulate"; continue; }
    export_and_check "$plan" "$nodes" "partial recompute (1 layer per chunk) vp$vp ($nodes nodes)"
    "$T" export --plan "$plan" --to megatron 2> /dev/null | grep -q -- "--recompute-method block" ||
      fail "partial recompute vp$vp: no --recompute-method block"
    "$T" export --plan "$plan" --to fsdp > /dev/null 2> "$work/err" && fail "partial recompute exported to fsdp"
    grep -q "Megatron's --recompute-method block" "$work/err" || fail "partial recompute fsdp refusal: $(cat "$work/err")"
  done
done

# A large vocabulary's output layer (GPT-OSS 120B: about 4.6 layers' work):
# the search's best plan splits its stages by their work (docs/frameworks.md),
# saved as stage_layers and exported as Megatron-Core's layout string, which
# the oracle parses and checks against the plan.
"$T" recommend --model gpt-oss-120b --cluster dgx-h100 --nodes 8 --framework megatron-core --gbs 1280 --top 1 \
  --save "$work/oss.json" > "$work/oss.txt" 2>&1 || fail "recommend gpt-oss-120b: $(cat "$work/oss.txt")"
grep -q "balanced by their work" "$work/oss.txt" || fail "gpt-oss-120b: the best plan does not say its stages are balanced"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); sys.exit(0 if p["stage_layers"] and len(set(p["stage_layers"])) > 1 else 1)' \
  "$work/oss.json" || fail "gpt-oss-120b: the saved plan has no uneven stage_layers"
"$T" export --plan "$work/oss.json" --to megatron > "$work/oss.sh" 2> "$work/oss.err" ||
  fail "gpt-oss-120b export: $(cat "$work/oss.err")"
grep -q -- "--pipeline-model-parallel-layout" "$work/oss.sh" || fail "gpt-oss-120b: no layout string in the export"
python3 "$ORACLE" --target megatron --plan "$work/oss.json" --file "$work/oss.sh" --nodes 8 > "$work/oracle" 2>&1 ||
  fail "gpt-oss-120b balanced plan: $(cat "$work/oracle")"

# recommend --framework F lists only plans F runs: each of them (top 3, on
# three model/cluster pairs) exports to F's target without a refusal, passes
# the oracle, and carries the overlaps F was simulated with.
while read -r fw target model cluster nodes extra; do
  # shellcheck disable=SC2086  # extra: further recommend flags, word-split on purpose
  "$T" recommend --model "$model" --cluster "$cluster" --nodes "$nodes" --framework "$fw" --top 3 --json $extra \
    > "$work/fw.json" 2> "$work/fw.err" || { fail "recommend --framework $fw $model: $(cat "$work/fw.err")"; continue; }
  heads=0
  count=$(python3 - "$work/fw.json" "$work" "$model" "$cluster" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["tp", "pp", "dp", "cp", "vp", "zero", "shard_group", "mbs", "gbs", "seq", "recompute", "sp", "schedule",
        "precision", "fp8_recipe", "grad_dtype", "attention", "dp_mode", "offload", "ps_servers", "stage_layers",
        "framework", "gpus", "ep", "etp", "recompute_modules", "tp_comm_overlap", "ep_overlap", "delay_wgrad", "mtp_layers",
        "moe_dispatcher", "moe_pad_to_capacity", "moe_router_fusion", "moe_shared_expert_overlap", "cross_entropy_fusion", "moment_dtype", "cp_comm_type"]
for i, p in enumerate(d["plans"]):
    plan = {k: p[k] for k in keys if k in p}
    plan.update(model=sys.argv[3], cluster=sys.argv[4])
    json.dump(plan, open(f"{sys.argv[2]}/fw{i}.json", "w"))
print(len(d["plans"]))
PY
)
  [ "${count:-0}" -ge 1 ] || { fail "recommend --framework $fw $model listed no plan"; continue; }
  for ((i = 0; i < count; i++)); do
    plan="$work/fw$i.json"
    grep -q "\"framework\": \"$fw\"" "$plan" || fail "$fw plan $i does not record its framework"
    "$T" export --plan "$plan" --to "$target" > "$work/fw.out" 2> "$work/fw.err" ||
      { fail "recommend --framework $fw plan $i ($model) does not export to $target: $(cat "$work/fw.err")"; continue; }
    if [ "$target" = megatron ]; then
      python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/fw.out" --nodes "$nodes" > "$work/oracle" 2>&1 ||
        fail "$fw plan $i: $(cat "$work/oracle")"
      dpcp=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(p["dp"]*p["cp"])' "$plan")
      if [ "$fw" = megatron-core ] && [ "$dpcp" -gt 1 ]; then
        grep -q -- "--overlap-grad-reduce" "$work/fw.out" || fail "$fw plan $i: no --overlap-grad-reduce"
      fi
      if [ "$fw" = megatron-lm ]; then
        grep -q -- "--overlap-" "$work/fw.out" && fail "$fw plan $i: Megatron-LM 2021 has no overlap flags"
      fi
    fi
    if [ "$target" = deepspeed ]; then
      python3 "$ORACLE" --target deepspeed --plan "$plan" --file "$work/fw.out" --nodes "$nodes" > "$work/oracle" 2>&1 ||
        fail "$fw plan $i ($model): $(cat "$work/oracle")"
    fi
    if [ "$target" = torchtitan ]; then
      gpus=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"])' "$plan")
      python3 "$TITAN" --plan "$plan" --file "$work/fw.out" --world "$gpus" > "$work/oracle" 2>&1 ||
        fail "$fw plan $i ($model): $(cat "$work/oracle")"
      # The head's Python config: exported and checked, or refused with the reason.
      "$T" export --plan "$plan" --to torchtitan-py > "$work/fw.py" 2> "$work/fw.err"
      rc=$?
      if [ "$rc" = 0 ]; then
        heads=$((heads + 1))
        python3 "$TITAN" --plan "$plan" --file "$work/fw.py" --world "$gpus" --format python > "$work/oracle" 2>&1 ||
          fail "$fw plan $i ($model) torchtitan-py: $(cat "$work/oracle")"
      elif [ "$rc" != 2 ] || ! grep -q "^trainplan: --to: torchtitan-py cannot express this plan: " "$work/fw.err"; then
        fail "$fw plan $i ($model) torchtitan-py: exit $rc: $(cat "$work/fw.err")"
      fi
    fi
    # Another framework's target refuses it with the reason.
    other=fsdp; [ "$target" = fsdp ] && other=megatron
    "$T" export --plan "$plan" --to "$other" > /dev/null 2> "$work/fw.err"
    [ $? = 2 ] && grep -q "the plan was simulated for $fw" "$work/fw.err" ||
      fail "$fw plan $i exported to $other: $(cat "$work/fw.err")"
  done
  echo "recommend --framework $fw${extra:+ $extra} ($model, $cluster, $nodes nodes): $count plans export to $target" \
    "$([ "$target" = torchtitan ] && echo "($heads also to torchtitan-py)")"
done <<'FRAMEWORKS'
megatron-core megatron llama3-8b dgx-h100 1
megatron-core megatron gpt3-1.3b dgx-a100 2
megatron-core megatron llama3-70b dgx-h100 4
megatron-core megatron gpt-oss-120b dgx-h100 8 --gbs 1280
megatron-lm megatron gpt3-1.3b dgx-a100 2
megatron-lm megatron gpt-18b dgx-a100 4
megatron-lm megatron gpt3-175b dgx-a100 16
deepspeed deepspeed llama3-8b dgx-h100 1
deepspeed deepspeed gpt3-1.3b dgx-a100 2
deepspeed deepspeed llama3-70b dgx-h100 4
torchtitan torchtitan llama3-8b dgx-h100 1
torchtitan torchtitan llama3-70b dgx-h100 4
torchtitan torchtitan llama3-8b dgx-h100 2
pytorch fsdp llama3-8b dgx-h100 1
pytorch fsdp gpt3-1.3b dgx-a100 2
pytorch fsdp llama3-70b dgx-h100 4
megatron-core megatron mixtral-8x7b dgx-h100 1
megatron-core megatron qwen3-30b-a3b dgx-h100 2
megatron-core megatron deepseek-v3 dgx-h100 32
megatron-core megatron deepseek-v3 dgx-h100 32 --moment-dtype bf16
torchtitan torchtitan qwen3-30b-a3b dgx-h100 2
torchtitan torchtitan gpt-oss-120b dgx-h100 8
torchtitan torchtitan deepseek-v3 dgx-h100 32
megatron-core megatron qwen3-30b-a3b dgx-h100 2 --moe-dispatcher hybridep
torchtitan torchtitan deepseek-v3 dgx-h100 32 --moe-dispatcher deepep
deepspeed deepspeed mixtral-8x7b dgx-h100 2
deepspeed deepspeed qwen3-30b-a3b dgx-h100 2
deepspeed deepspeed llama3-8b dgx-h100 2 --seq 65536 --gbs 16
FRAMEWORKS

# Without --framework, recommend labels each plan with the frameworks that
# run it: each label exports, each missing one refuses.
"$T" recommend --model llama3-8b --cluster dgx-h100 --nodes 2 --top 5 --json > "$work/gen.json" 2> "$work/gen.err" ||
  fail "recommend --json: $(cat "$work/gen.err")"
python3 - "$work/gen.json" "$work" <<'PY' > "$work/gen.list" || fail "recommend --json lacks frameworks"
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["tp", "pp", "dp", "cp", "vp", "zero", "shard_group", "mbs", "gbs", "seq", "recompute", "sp", "schedule",
        "precision", "fp8_recipe", "grad_dtype", "attention", "dp_mode", "offload", "ps_servers", "stage_layers", "gpus",
        "cp_comm_type"]
target = {"megatron-core": "megatron", "deepspeed": "deepspeed", "torchtitan": "torchtitan", "pytorch": "fsdp"}
for i, p in enumerate(d["plans"]):
    plan = {k: p[k] for k in keys if k in p}
    plan.update(model=d["model"], cluster=d["cluster"])
    json.dump(plan, open(f"{sys.argv[2]}/gen{i}.json", "w"))
    for fw, t in target.items():
        print(f"{i} {t} {'yes' if fw in p['frameworks'] else 'no'}")
PY
while read -r i target runs; do
  "$T" export --plan "$work/gen$i.json" --to "$target" > /dev/null 2> "$work/gen.err"
  rc=$?
  if [ "$runs" = yes ] && [ "$rc" != 0 ]; then fail "plan $i is labelled $target but does not export: $(cat "$work/gen.err")"; fi
  if [ "$runs" = no ] && [ "$rc" != 2 ]; then fail "plan $i is not labelled $target but exports (rc $rc)"; fi
done < "$work/gen.list"
echo "recommend labels: $(grep -c yes "$work/gen.list") framework labels checked by exporting, $(grep -c no "$work/gen.list") refusals"

# A label whose framework's own profile does not fit the plan is flagged with
# that profile's peak (frameworks_out_of_memory_gib): the same figure as
# `memory` of the plan under that framework, above the GPU's memory.
python3 - "$work/gen.json" "$work" <<'PY' > "$work/oom.list" || fail "recommend --json lacks frameworks_out_of_memory_gib"
import json, sys
d = json.load(open(sys.argv[1]))
for i, p in enumerate(d["plans"]):
    for fw, gib in p["frameworks_out_of_memory_gib"].items():
        assert fw in p["frameworks"], (i, fw)
        plan = json.load(open(f"{sys.argv[2]}/gen{i}.json"))
        plan["framework"] = fw
        json.dump(plan, open(f"{sys.argv[2]}/oom{i}_{fw}.json", "w"))
        print(i, fw, gib)
PY
while read -r i fw gib; do
  "$T" memory --plan "$work/oom${i}_$fw.json" --json > "$work/oom.json" 2> "$work/oom.err" ||
    { fail "memory of plan $i under $fw: $(cat "$work/oom.err")"; continue; }
  python3 - "$work/oom.json" "$gib" <<'PY' || fail "plan $i under $fw: recommend's out-of-memory figure $gib GiB disagrees with memory"
import json, sys
m = json.load(open(sys.argv[1]))
assert abs(m["peak_gib"] - float(sys.argv[2])) < 0.01, (m["peak_gib"], sys.argv[2])
assert not m["fits"], m
PY
done < "$work/oom.list"
echo "recommend: $(wc -l < "$work/oom.list") framework labels flagged out of memory, each checked against memory"

# Megatron-Core's all-to-all overlap (--ep-overlap): exported as
# --overlap-moe-expert-parallel-comm with a larger CUDA_DEVICE_MAX_CONNECTIONS
# and passing the oracle's TransformerConfig rules, on one node (no
# pipeline) and four (pp 2 with vp 2); the other targets refuse it; and the
# oracle rejects the script with the allgather dispatcher or without the flag.
for nodes in 1 4; do
  plan="$work/epo$nodes.json"
  if [ "$nodes" = 1 ]; then pp=1 vp=1 sched=1f1b dw=false; else pp=2 vp=2 sched=interleaved dw=true; fi
  gpus=$((8 * nodes))
  cat > "$plan" <<JSON
{"model": "qwen3-30b-a3b", "cluster": "dgx-h100", "gpus": $gpus, "tp": 1, "pp": $pp, "dp": $((gpus / pp)), "cp": 1,
 "vp": $vp, "ep": 8, "etp": 1, "zero": 1, "mbs": 1, "gbs": 256, "seq": 4096, "sp": false, "recompute": "selective",
 "recompute_modules": ["layernorm", "moe_act"], "schedule": "$sched", "precision": "bf16", "grad_dtype": "fp32",
 "attention": "flash", "framework": "megatron-core", "ep_overlap": true, "delay_wgrad": $dw}
JSON
  "$T" simulate --plan "$plan" > "$work/epo.txt" 2>&1 || { fail "ep overlap ($nodes nodes) does not simulate: $(cat "$work/epo.txt")"; continue; }
  grep -q "ep_overlap=on" "$work/epo.txt" || fail "ep overlap ($nodes nodes): the plan line lacks ep_overlap=on"
  export_and_check "$plan" "$nodes" "ep overlap ($nodes nodes)"
  "$T" export --plan "$plan" --to megatron > "$work/epo.sh" 2> /dev/null || { fail "ep overlap: no Megatron export"; continue; }
  grep -q -- "--overlap-moe-expert-parallel-comm" "$work/epo.sh" || fail "ep overlap ($nodes nodes): no --overlap-moe-expert-parallel-comm"
  grep -q "^export CUDA_DEVICE_MAX_CONNECTIONS=32" "$work/epo.sh" || fail "ep overlap ($nodes nodes): CUDA_DEVICE_MAX_CONNECTIONS not raised"
  if [ "$dw" = true ]; then
    grep -q -- "--delay-wgrad-compute" "$work/epo.sh" || fail "ep overlap ($nodes nodes): no --delay-wgrad-compute"
    grep -v -- "--overlap-moe-expert-parallel-comm" "$work/epo.sh" > "$work/epo_dw.sh"
    python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/epo_dw.sh" --nodes "$nodes" 2>&1 |
      grep -q "delay-wgrad-compute needs --overlap-moe-expert-parallel-comm" ||
      fail "oracle accepted --delay-wgrad-compute without the overlap"
  elif grep -q -- "--delay-wgrad-compute" "$work/epo.sh"; then
    fail "ep overlap ($nodes nodes): --delay-wgrad-compute without the plan's delay_wgrad"
  fi
  for target in deepspeed torchtitan fsdp; do
    "$T" export --plan "$plan" --to "$target" > /dev/null 2> "$work/epo.err"
    [ $? = 2 ] || fail "ep overlap exported to $target"
  done
  sed 's/--moe-token-dispatcher-type alltoall/--moe-token-dispatcher-type allgather/' "$work/epo.sh" > "$work/epo_ag.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/epo_ag.sh" --nodes "$nodes" 2>&1 |
    grep -q "needs the alltoall or flex token dispatcher" || fail "oracle accepted ep overlap with the allgather dispatcher"
  grep -v -- "--overlap-moe-expert-parallel-comm" "$work/epo.sh" > "$work/epo_off.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/epo_off.sh" --nodes "$nodes" 2>&1 |
    grep -q "the plan's ep_overlap is True" || fail "oracle accepted a script without the plan's ep overlap"
done

# Per-layer CUDA graphs (--cuda-graph): exported as --cuda-graph-impl
# transformer_engine with the plan's --cuda-graph-modules and --te-rng-tracker,
# passing the oracle's TransformerConfig rules, for an MoE plan on 8 GPUs of a
# GB200 NVL72 (attn, moe_router, moe_preprocess) and a dense one on two H100
# nodes (the whole layer: no module list); the other targets refuse it; the
# oracle rejects moe_preprocess without moe_router and a script without the
# graphs.  The GB200 plan's 8 GPUs sit in two compute trays of 4 (each its own
# host): torchrun runs on 2 nodes with 4 processes each, and the oracle
# rejects 8 processes on one tray.
for nodes in 1 2; do
  plan="$work/cg$nodes.json"
  if [ "$nodes" = 1 ]; then
    cat > "$plan" <<JSON
{"model": "qwen3-30b-a3b", "cluster": "gb200-nvl72", "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "cp": 1, "vp": 1,
 "ep": 8, "etp": 1, "zero": 1, "mbs": 4, "gbs": 512, "seq": 4096, "sp": false, "recompute": "none",
 "schedule": "1f1b", "precision": "fp8", "grad_dtype": "fp32", "attention": "flash", "framework": "megatron-core",
 "cuda_graph": ["attn", "moe_router", "moe_preprocess"]}
JSON
  else
    cat > "$plan" <<JSON
{"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 16, "tp": 2, "pp": 2, "dp": 4, "cp": 1, "vp": 1,
 "zero": 1, "mbs": 1, "gbs": 128, "seq": 8192, "sp": true, "recompute": "none", "schedule": "1f1b",
 "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "framework": "megatron-core", "cuda_graph": ["layer"]}
JSON
  fi
  "$T" simulate --plan "$plan" > "$work/cg.txt" 2>&1 || { fail "cuda graph ($nodes nodes) does not simulate: $(cat "$work/cg.txt")"; continue; }
  grep -q "cuda_graph=" "$work/cg.txt" || fail "cuda graph ($nodes nodes): the plan line lacks cuda_graph="
  export_and_check "$plan" 2 "cuda graph ($nodes nodes)"
  "$T" export --plan "$plan" --to megatron > "$work/cg.sh" 2> /dev/null || { fail "cuda graph: no Megatron export"; continue; }
  if [ "$nodes" = 1 ]; then
    grep -q -- "--nproc_per_node 4" "$work/cg.sh" && grep -q -- "--nnodes 2" "$work/cg.sh" ||
      fail "GB200: 8 GPUs not launched as 2 trays of 4: $(grep -e --nproc_per_node -e --nnodes "$work/cg.sh")"
    sed 's/--nproc_per_node 4/--nproc_per_node 8/; s/--nnodes 2/--nnodes 1/' "$work/cg.sh" > "$work/cg_tray.sh"
    python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/cg_tray.sh" --nodes 1 2>&1 |
      grep -q "a host of gb200-nvl72 has 4 GPUs" || fail "oracle accepted 8 processes on a 4-GPU GB200 tray"
  fi
  grep -q -- "--cuda-graph-impl transformer_engine" "$work/cg.sh" || fail "cuda graph ($nodes nodes): no --cuda-graph-impl"
  grep -q -- "--te-rng-tracker" "$work/cg.sh" || fail "cuda graph ($nodes nodes): no --te-rng-tracker"
  if [ "$nodes" = 1 ]; then
    grep -q -- "--cuda-graph-modules attn moe_router moe_preprocess" "$work/cg.sh" ||
      fail "cuda graph: the modules are not the plan's"
    sed 's/--cuda-graph-modules attn moe_router moe_preprocess/--cuda-graph-modules attn moe_preprocess/' \
      "$work/cg.sh" > "$work/cg_bad.sh"
    python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/cg_bad.sh" --nodes 2 2>&1 |
      grep -q "moe_preprocess cuda graph is only supported with moe_router" ||
      fail "oracle accepted moe_preprocess without moe_router"
  elif grep -q -- "--cuda-graph-modules" "$work/cg.sh"; then
    fail "cuda graph: a whole-layer graph exported with a module list"
  fi
  for target in deepspeed torchtitan fsdp; do
    "$T" export --plan "$plan" --to "$target" > /dev/null 2> "$work/cg.err"
    [ $? = 2 ] || fail "cuda graph exported to $target"
  done
  grep -v -- "--cuda-graph-impl" "$work/cg.sh" > "$work/cg_off.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/cg_off.sh" --nodes 2 2>&1 |
    grep -q "but --cuda-graph-impl is none" || fail "oracle accepted a script without the plan's CUDA graphs"
done

# Megatron-Core's flex dispatcher (--moe-dispatcher deepep|hybridep): exported
# as --moe-token-dispatcher-type flex with the plan's backend, passing the
# oracle, on one node (DeepEP, ep 8) and two (HybridEP, ep 16); the other
# targets refuse it; the oracle rejects the script with the alltoall
# dispatcher; DeepSeek-V3's node-limited routing exports its groups.
for nodes in 1 2; do
  plan="$work/flex$nodes.json"
  gpus=$((8 * nodes))
  if [ "$nodes" = 1 ]; then backend=deepep; else backend=hybridep; fi
  cat > "$plan" <<JSON
{"model": "qwen3-30b-a3b", "cluster": "dgx-h100", "gpus": $gpus, "tp": 1, "pp": 1, "dp": $gpus, "cp": 1,
 "vp": 1, "ep": $gpus, "etp": 1, "zero": 1, "mbs": 1, "gbs": 256, "seq": 4096, "sp": false, "recompute": "selective",
 "recompute_modules": ["layernorm", "moe_act"], "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32",
 "attention": "flash", "framework": "megatron-core", "moe_dispatcher": "$backend"}
JSON
  "$T" simulate --plan "$plan" > "$work/flex.txt" 2>&1 || { fail "flex ($nodes nodes) does not simulate: $(cat "$work/flex.txt")"; continue; }
  grep -q "moe_dispatcher=$backend" "$work/flex.txt" || fail "flex ($nodes nodes): the plan line lacks moe_dispatcher=$backend"
  export_and_check "$plan" "$nodes" "flex $backend ($nodes nodes)"
  "$T" export --plan "$plan" --to megatron > "$work/flex.sh" 2> /dev/null || { fail "flex: no Megatron export"; continue; }
  grep -q -- "--moe-token-dispatcher-type flex" "$work/flex.sh" || fail "flex ($nodes nodes): no flex dispatcher"
  grep -q -- "--moe-flex-dispatcher-backend $backend" "$work/flex.sh" || fail "flex ($nodes nodes): no $backend backend"
  for target in deepspeed torchtitan fsdp; do
    "$T" export --plan "$plan" --to "$target" > /dev/null 2> "$work/flex.err"
    [ $? = 2 ] || fail "flex exported to $target"
  done
  sed 's/--moe-token-dispatcher-type flex/--moe-token-dispatcher-type alltoall/' "$work/flex.sh" > "$work/flex_a2a.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/flex_a2a.sh" --nodes "$nodes" 2>&1 |
    grep -q "the plan simulated moe_dispatcher $backend" || fail "oracle accepted the alltoall dispatcher for a $backend plan"
done

# HybridEP across a GB200 NVL72 domain: 64 expert-parallel ranks on 16 compute
# trays of 4 share the rack's NVLink, so the export sets HybridEP's topology
# (64 ranks per NVLink domain, multi-node NVLink on), launches one torchrun per
# tray, and the oracle rejects either setting of a DGX (8 ranks, USE_MNNVL=0).
plan="$work/hybridep_gb200.json"
cat > "$plan" <<JSON
{"model": "qwen3-30b-a3b", "cluster": "gb200-nvl72", "gpus": 64, "tp": 1, "pp": 1, "dp": 64, "cp": 1, "vp": 1,
 "ep": 64, "etp": 1, "zero": 1, "mbs": 1, "gbs": 512, "seq": 4096, "sp": false, "recompute": "none",
 "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "framework": "megatron-core",
 "moe_dispatcher": "hybridep"}
JSON
if "$T" export --plan "$plan" --to megatron > "$work/hy.sh" 2> "$work/hy.err"; then
  grep -q "^export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64$" "$work/hy.sh" || fail "GB200 HybridEP: ranks per domain not 64"
  grep -q "^export USE_MNNVL=1$" "$work/hy.sh" || fail "GB200 HybridEP: multi-node NVLink not on"
  grep -q -- "--nproc_per_node 4" "$work/hy.sh" && grep -q -- "--nnodes 16" "$work/hy.sh" ||
    fail "GB200 HybridEP: not launched as 16 trays of 4"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/hy.sh" --nodes 16 > "$work/oracle" 2>&1 ||
    fail "GB200 HybridEP: $(cat "$work/oracle")"
  sed 's/^export USE_MNNVL=1$/export USE_MNNVL=0/' "$work/hy.sh" > "$work/hy_nomnnvl.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/hy_nomnnvl.sh" --nodes 16 2>&1 |
    grep -q "USE_MNNVL=0, but the NVLink domain's expert ranks span hosts" || fail "oracle accepted USE_MNNVL=0 on GB200"
  sed 's/RANKS_PER_NVLINK_DOMAIN=64$/RANKS_PER_NVLINK_DOMAIN=8/' "$work/hy.sh" > "$work/hy_dgx.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/hy_dgx.sh" --nodes 16 2>&1 |
    grep -q "but 64 expert-parallel ranks share an NVLink domain" || fail "oracle accepted 8 HybridEP ranks per domain"
else
  fail "GB200 HybridEP: no Megatron export: $(cat "$work/hy.err")"
fi
cat > "$work/dsv3.json" <<JSON
{"model": "deepseek-v3", "cluster": "dgx-h100", "gpus": 1024, "tp": 2, "pp": 16, "dp": 32, "cp": 1,
 "vp": 1, "ep": 64, "etp": 1, "zero": 1, "mbs": 1, "gbs": 1024, "seq": 4096, "sp": true, "recompute": "full",
 "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "framework": "megatron-core",
 "moe_dispatcher": "deepep"}
JSON
if "$T" export --plan "$work/dsv3.json" --to megatron > "$work/dsv3.sh" 2> "$work/dsv3.err"; then
  grep -q -- "--moe-router-num-groups 8" "$work/dsv3.sh" && grep -q -- "--moe-router-group-topk 4" "$work/dsv3.sh" ||
    fail "deepseek-v3: node-limited routing not exported"
  python3 "$ORACLE" --target megatron --plan "$work/dsv3.json" --file "$work/dsv3.sh" --nodes 128 > "$work/oracle" 2>&1 ||
    fail "deepseek-v3 deepep: $(cat "$work/oracle")"
  grep -v -- '--moe-router-num-groups' "$work/dsv3.sh" > "$work/dsv3_g.sh"
  python3 "$ORACLE" --target megatron --plan "$work/dsv3.json" --file "$work/dsv3_g.sh" --nodes 128 2>&1 |
    grep -q "group-topk needs --moe-router-num-groups" || fail "oracle accepted a group top-k without groups"
else
  fail "deepseek-v3 deepep export: $(cat "$work/dsv3.err")"
fi

# recommend's hint for the best all-to-all plan of an MoE model: the same
# layout with DeepEP, not ranked, at the step `simulate` gives that plan.
"$T" recommend --model deepseek-v3 --cluster dgx-h100 --gpus 256 --gbs 1024 --top 1 --json > "$work/hint.json" \
  2> "$work/hint.err" || fail "recommend deepseek-v3: $(cat "$work/hint.err")"
python3 - "$work/hint.json" "$work/hint_plan.json" <<'PY' || fail "recommend deepseek-v3: no flex-dispatcher hint"
import json, sys
d = json.load(open(sys.argv[1]))
h = d["best_with_flex_dispatcher"]
assert h["moe_dispatcher"] == "deepep" and h["step_time_s"] < h["alltoall_step_time_s"], h
p = d["plans"][0]
keys = ["tp", "pp", "dp", "cp", "vp", "zero", "shard_group", "mbs", "gbs", "seq", "recompute", "sp", "schedule",
        "precision", "fp8_recipe", "grad_dtype", "attention", "dp_mode", "offload", "ps_servers", "stage_layers",
        "framework", "gpus", "ep", "etp", "recompute_modules"]
plan = {k: p[k] for k in keys if k in p}
plan.update(model=d["model"], cluster=d["cluster"], moe_dispatcher="deepep")
json.dump(plan, open(sys.argv[2], "w"))
print(h["step_time_s"])
PY
if [ -s "$work/hint_plan.json" ]; then
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_with_flex_dispatcher"]["step_time_s"])' "$work/hint.json")
  got=$("$T" simulate --plan "$work/hint_plan.json" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["step_time_s"], 6))')
  [ "$want" = "$got" ] || fail "recommend's deepep hint says $want s, simulate says $got s"
fi

# recommend's bf16-moments hint (an MoE search that turned layouts away for
# memory): the best plan's optimizer states with them, which `memory` gives for
# that plan with --moment-dtype bf16.  Oracle: the generic executor keeps
# 4 + 2 + 2 of 4 + 4 + 4 bytes (2/3), Megatron-Core 2 + 2 + 2 (1/2: the master's
# remainder); no hint for a dense model or a search that has them already.
for fw in generic megatron-core; do
  "$T" recommend --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --framework "$fw" --top 1 --json \
    > "$work/mhint.json" 2> "$work/mhint.err" || fail "recommend mixtral $fw: $(cat "$work/mhint.err")"
  python3 - "$work/mhint.json" "$fw" "$work/mhint_plan.json" <<'PY' || fail "recommend mixtral $fw: wrong bf16-moments hint"
import json, sys
d, fw = json.load(open(sys.argv[1])), sys.argv[2]
h = d["best_with_bf16_moments"]
ratio = h["optimizer_gib"] / h["fp32_optimizer_gib"]
assert abs(ratio - (0.5 if fw == "megatron-core" else 2 / 3)) < 1e-3, (fw, h)
assert h["peak_memory_gib"] < h["fp32_peak_memory_gib"], h
p = d["plans"][0]
keys = ["tp", "pp", "dp", "cp", "vp", "zero", "shard_group", "mbs", "gbs", "seq", "recompute", "sp", "schedule",
        "precision", "fp8_recipe", "grad_dtype", "attention", "dp_mode", "offload", "ps_servers", "stage_layers",
        "framework", "gpus", "ep", "etp", "recompute_modules", "tp_comm_overlap", "ep_overlap", "delay_wgrad",
        "moe_dispatcher", "cuda_graph"]
plan = {k: p[k] for k in keys if k in p}
plan.update(model=d["model"], cluster=d["cluster"], moment_dtype="bf16")
json.dump(plan, open(sys.argv[3], "w"))
PY
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_with_bf16_moments"]["peak_memory_gib"])' "$work/mhint.json")
  got=$("$T" memory --plan "$work/mhint_plan.json" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["peak_gib"], 3))')
  [ "$want" = "$got" ] || fail "recommend's bf16-moments hint ($fw) says $want GiB, memory says $got GiB"
done
"$T" recommend --model mixtral-8x7b --cluster dgx-h100 --gpus 64 --top 1 --moment-dtype bf16 --json |
  python3 -c 'import json,sys; sys.exit("best_with_bf16_moments" in json.load(sys.stdin))' ||
  fail "recommend --moment-dtype bf16 still hints at bf16 moments"
"$T" recommend --model llama3-70b --cluster dgx-h100 --gpus 64 --top 1 --json |
  python3 -c 'import json,sys; sys.exit("best_with_bf16_moments" in json.load(sys.stdin))' ||
  fail "a dense search hints at bf16 moments"

# recommend's torch.compile hint for the best eager plan of a PyTorch search: the
# same layout compiled, not ranked, at the step `simulate` gives that plan, and
# faster (the fused elementwise ops); with --compile every plan is compiled and
# there is no hint.
"$T" recommend --model gpt3-1.3b --cluster dgx-a100 --framework pytorch --top 1 --json > "$work/chint.json" \
  2> "$work/chint.err" || fail "recommend gpt3-1.3b pytorch: $(cat "$work/chint.err")"
python3 - "$work/chint.json" "$work/chint_plan.json" <<'PY' || fail "recommend gpt3-1.3b pytorch: no compile hint"
import json, sys
d = json.load(open(sys.argv[1]))
h = d["best_compiled"]
p = d["plans"][0]
assert h["step_time_s"] < h["eager_step_time_s"] == p["step_time_s"], (h, p["step_time_s"])
keys = ["tp", "pp", "dp", "cp", "vp", "zero", "shard_group", "mbs", "gbs", "seq", "recompute", "sp", "schedule",
        "precision", "fp8_recipe", "grad_dtype", "attention", "dp_mode", "offload", "ps_servers", "stage_layers",
        "framework", "gpus", "recompute_modules"]
plan = {k: p[k] for k in keys if k in p}
plan.update(model=d["model"], cluster=d["cluster"], compile=True)
json.dump(plan, open(sys.argv[2], "w"))
PY
if [ -s "$work/chint_plan.json" ]; then
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best_compiled"]["step_time_s"])' "$work/chint.json")
  got=$("$T" simulate --plan "$work/chint_plan.json" --json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["step_time_s"], 6))')
  [ "$want" = "$got" ] || fail "recommend's compile hint says $want s, simulate says $got s"
fi
"$T" recommend --model gpt3-1.3b --cluster dgx-a100 --framework pytorch --top 1 --compile --json |
  python3 -c 'import json,sys; d = json.load(sys.stdin); assert "best_compiled" not in d and d["plans"][0]["compile"] is True' ||
  fail "recommend --compile: a compile hint, or an eager plan"

# Token dropping padded to capacity (--moe-pad-to-capacity): exported as
# --moe-pad-expert-input-to-capacity beside the capacity factor, passing
# the oracle; the other targets refuse it; the oracle rejects the flag
# without a capacity factor.
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); m["moe"]["capacity_factor"] = 1.25
m["name"] = "qwen3-30b-a3b-cf1.25"; json.dump(m, open(sys.argv[2], "w"))' \
  "$TRAINPLAN_DATA_DIR/models/qwen3-30b-a3b.json" "$work/qwen_cf.json"
cat > "$work/pad.json" <<JSON
{"model": "$work/qwen_cf.json", "cluster": "dgx-h100", "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "cp": 1,
 "vp": 1, "ep": 8, "etp": 1, "zero": 1, "mbs": 1, "gbs": 256, "seq": 4096, "sp": false, "recompute": "selective",
 "recompute_modules": ["layernorm", "moe_act"], "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32",
 "attention": "flash", "framework": "megatron-core", "moe_pad_to_capacity": true}
JSON
if "$T" simulate --plan "$work/pad.json" > "$work/pad.txt" 2>&1; then
  grep -q "moe_pad_to_capacity=on" "$work/pad.txt" || fail "pad: the plan line lacks moe_pad_to_capacity=on"
  grep -q "busiest expert-parallel rank 1.250x" "$work/pad.txt" || fail "pad: the load is not the capacity factor"
  export_and_check "$work/pad.json" 1 "pad to capacity"
  "$T" export --plan "$work/pad.json" --to megatron > "$work/pad.sh" 2> /dev/null || fail "pad: no Megatron export"
  grep -q -- "--moe-pad-expert-input-to-capacity" "$work/pad.sh" || fail "pad: no --moe-pad-expert-input-to-capacity"
  grep -v -- "--moe-expert-capacity-factor" "$work/pad.sh" > "$work/pad_nocf.sh"
  python3 "$ORACLE" --target megatron --plan "$work/pad.json" --file "$work/pad_nocf.sh" --nodes 1 2>&1 |
    grep -q "needs --moe-expert-capacity-factor" || fail "oracle accepted padding without a capacity factor"
else
  fail "pad to capacity does not simulate: $(cat "$work/pad.txt")"
fi

# Multi-token prediction (--mtp-layers): exported as --mtp-num-layers N,
# passing the oracle (rope; the plan's depth), on one node and on two (pp 2,
# the MTP layer on the last stage); the other targets refuse it; the oracle
# rejects a script that drops the flag.
for nodes in 1 2; do
  plan="$work/mtp$nodes.json"
  gpus=$((8 * nodes))
  cat > "$plan" <<JSON
{"model": "qwen3-30b-a3b", "cluster": "dgx-h100", "gpus": $gpus, "tp": 1, "pp": $nodes, "dp": 8, "cp": 1,
 "vp": 1, "ep": 8, "etp": 1, "zero": 1, "mbs": 1, "gbs": 128, "seq": 4096, "sp": false, "recompute": "none",
 "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "framework": "megatron-core",
 "mtp_layers": $nodes}
JSON
  "$T" simulate --plan "$plan" > "$work/mtp.txt" 2>&1 || { fail "mtp ($nodes nodes) does not simulate: $(cat "$work/mtp.txt")"; continue; }
  grep -q "mtp_layers=$nodes" "$work/mtp.txt" || fail "mtp ($nodes nodes): the plan line lacks mtp_layers=$nodes"
  export_and_check "$plan" "$nodes" "mtp ($nodes nodes)"
  "$T" export --plan "$plan" --to megatron > "$work/mtp.sh" 2> /dev/null || { fail "mtp: no Megatron export"; continue; }
  grep -q -- "--mtp-num-layers $nodes" "$work/mtp.sh" || fail "mtp ($nodes nodes): no --mtp-num-layers $nodes"
  for target in deepspeed torchtitan fsdp; do
    "$T" export --plan "$plan" --to "$target" > /dev/null 2> "$work/mtp.err"
    [ $? = 2 ] || fail "mtp exported to $target"
  done
  grep -v -- "--mtp-num-layers" "$work/mtp.sh" > "$work/mtp_off.sh"
  python3 "$ORACLE" --target megatron --plan "$plan" --file "$work/mtp_off.sh" --nodes "$nodes" 2>&1 |
    grep -q "the plan has mtp_layers $nodes" || fail "oracle accepted a script without the plan's MTP layers"
done

# Every framework took some plans on one and on four nodes.
for target in megatron deepspeed torchtitan fsdp torchtitan-py; do
  for nodes in 1 4; do
    n=${accepted[$target,$nodes]:-0}
    echo "$target, $nodes node(s): $n exported and checked, ${refused[$target,$nodes]:-0} refused with the reason"
    [ "$n" -ge 2 ] || fail "$target on $nodes node(s): only $n plans exported"
  done
done
bash "$HERE/../export/oracle_selftest.sh" > "$work/self.txt" 2>&1 || fail "oracle self-test: $(tail -5 "$work/self.txt")"
[ "$failures" = 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "chain recommend -> export -> framework rules: all checks passed"
