#!/usr/bin/env bash
# Proves the export oracle (check_export.py) can fail: feeds it hand-made good
# inputs (which must pass) and bad ones (a wrong flag name, a wrong type, a
# broken global batch, the multi-node apostrophe bug, FSDP2 with no_sync, ...)
# and asserts each bad one is rejected with the expected line.
#
#   tests/export/oracle_selftest.sh            (PYTHON=python3.11 to choose the interpreter)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHECK="$HERE/check_export.py"
PY="${PYTHON:-python3}"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

# expect_pass NAME TARGET PLAN FILE [NODES]
expect_pass() {
  local name=$1 target=$2 plan=$3 file=$4 nodes=${5:-}
  local out rc
  out=$("$PY" "$CHECK" --target "$target" --plan "$plan" --file "$file" ${nodes:+--nodes "$nodes"} 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name: expected no problem, got rc=$rc:"; echo "$out" | sed 's/^/       /'
  fi
}

# expect_fail NAME TARGET PLAN FILE PATTERN [NODES]: exit 1 and a line matching PATTERN (grep -E).
expect_fail() {
  local name=$1 target=$2 plan=$3 file=$4 pattern=$5 nodes=${6:-}
  local out rc
  out=$("$PY" "$CHECK" --target "$target" --plan "$plan" --file "$file" ${nodes:+--nodes "$nodes"} 2>&1)
  rc=$?
  if [ "$rc" -eq 1 ] && grep -Eq -- "$pattern" <<<"$out"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name: expected rc=1 and /$pattern/, got rc=$rc:"; echo "$out" | sed 's/^/       /'
  fi
}

# mutate SRC DST SED-EXPR: DST = SRC with the edit applied; the edit must change something.
mutate() {
  sed -e "$3" "$1" >"$2"
  if cmp -s "$1" "$2"; then
    echo "FAIL mutation '$3' did not apply to $(basename "$1")"; fail=$((fail + 1))
  fi
}

# ---- plans -----------------------------------------------------------------
cat >"$T/plan_tp2pp2.json" <<'EOF'
{"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "tp": 2, "pp": 2, "dp": 2, "cp": 1, "vp": 1,
 "zero": 1, "shard_group": 0, "mbs": 1, "gbs": 64, "seq": 8192, "sp": true, "recompute": "selective",
 "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "offload": "none",
 "dp_mode": "sync", "stage_layers": [16, 16]}
EOF
sed -e 's/"gpus": 8/"gpus": 32/; s/"dp": 2,/"dp": 8,/; s/"gbs": 64/"gbs": 256/' "$T/plan_tp2pp2.json" >"$T/plan_tp2pp2_4n.json"
cat >"$T/plan_dp8_z2.json" <<'EOF'
{"model": "gpt3-1.3b", "cluster": "dgx-h100", "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "cp": 1, "vp": 1,
 "zero": 2, "shard_group": 0, "mbs": 2, "gbs": 64, "seq": 2048, "sp": false, "recompute": "none",
 "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "offload": "none",
 "dp_mode": "sync"}
EOF
sed -e 's/"zero": 2/"zero": 1/' "$T/plan_dp8_z2.json" >"$T/plan_dp8_z1.json"
sed -e 's/"tp": 1, "pp": 1, "dp": 8/"tp": 2, "pp": 2, "dp": 2/; s/"zero": 2/"zero": 1/; s/"sp": false/"sp": true/' \
  "$T/plan_dp8_z2.json" >"$T/plan_ds_tp2pp2.json"

# ---- Megatron-LM -----------------------------------------------------------
cat >"$T/megatron.sh" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
export CUDA_DEVICE_MAX_CONNECTIONS=1

DISTRIBUTED_ARGS=(
  --nproc_per_node 8
  --nnodes 1
  --node_rank "${NODE_RANK:-0}"
  --master_addr "${MASTER_ADDR:-localhost}"
  --master_port "${MASTER_PORT:-6000}"
)

MODEL_ARGS=(
  --num-layers 32
  --hidden-size 4096
  --ffn-hidden-size 14336
  --num-attention-heads 32
  --group-query-attention
  --num-query-groups 8
  --seq-length 8192
  --max-position-embeddings 8192
  --position-embedding-type rope
  --swiglu
  --normalization RMSNorm
  --attention-backend flash
)

PARALLEL_ARGS=(
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 2
  --context-parallel-size 1
  --sequence-parallel
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
)

TRAINING_ARGS=(
  --micro-batch-size 1
  --global-batch-size 64
  --bf16
  --recompute-granularity selective
  --train-iters 1000
  --lr 3.0e-4
  --min-lr 3.0e-5
  --lr-decay-style cosine
)

DATA_ARGS=(
  --mock-data
  --tokenizer-type NullTokenizer
  --vocab-size 128255
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py \
  "${MODEL_ARGS[@]}" \
  "${PARALLEL_ARGS[@]}" \
  "${TRAINING_ARGS[@]}" \
  "${DATA_ARGS[@]}" \
  "$@"
EOF
M="$T/megatron.sh"
P="$T/plan_tp2pp2.json"
expect_pass "megatron: good script" megatron "$P" "$M"

mutate "$M" "$T/m_badname.sh" 's/--tensor-model-parallel-size 2/--tensor-parallel-size 2/'
expect_fail "megatron: wrong flag name" megatron "$P" "$T/m_badname.sh" 'unknown argument --tensor-parallel-size'

mutate "$M" "$T/m_badtype.sh" 's/--micro-batch-size 1/--micro-batch-size one/'
expect_fail "megatron: wrong type (int)" megatron "$P" "$T/m_badtype.sh" "--micro-batch-size 'one' is not a valid int"

mutate "$M" "$T/m_badfloat.sh" 's/--lr 3.0e-4/--lr 3e-4x/'
expect_fail "megatron: wrong type (float)" megatron "$P" "$T/m_badfloat.sh" "--lr '3e-4x' is not a valid float"

mutate "$M" "$T/m_badchoice.sh" 's/--attention-backend flash/--attention-backend flash2/'
expect_fail "megatron: value not among choices" megatron "$P" "$T/m_badchoice.sh" "--attention-backend 'flash2' is not one of"

mutate "$M" "$T/m_flagvalue.sh" 's/--swiglu/--swiglu true/'
expect_fail "megatron: value given to a flag" megatron "$P" "$T/m_flagvalue.sh" '--swiglu is a flag and takes no value'

mutate "$M" "$T/m_window.sh" 's/--swiglu/--swiglu --window-size 127,0 --window-attn-skip-freq 2/'
expect_pass "megatron: sliding window" megatron "$P" "$T/m_window.sh"
mutate "$T/m_window.sh" "$T/m_window_one.sh" 's/--window-size 127,0/--window-size 127/'
expect_fail "megatron: --window-size needs left,right" megatron "$P" "$T/m_window_one.sh" \
  "--window-size 127 is not two non-negative ints"
mutate "$T/m_window.sh" "$T/m_window_skip.sh" 's/--window-size 127,0 //'
expect_fail "megatron: skip frequency without a window" megatron "$P" "$T/m_window_skip.sh" \
  '--window-attn-skip-freq without --window-size'

mutate "$M" "$T/m_dup.sh" 's/--bf16/--bf16\n  --micro-batch-size 1/'
expect_fail "megatron: flag given twice" megatron "$P" "$T/m_dup.sh" '--micro-batch-size given twice'

mutate "$M" "$T/m_gbs.sh" 's/--global-batch-size 64/--global-batch-size 63/'
expect_fail "megatron: broken global batch" megatron "$P" "$T/m_gbs.sh" 'global-batch-size 63 not divisible by micro batch 1 x data-parallel 2'

mutate "$M" "$T/m_world.sh" 's/--nproc_per_node 8/--nproc_per_node 6/'
expect_fail "megatron: world not divisible by tp*pp*cp" megatron "$P" "$T/m_world.sh" '6 processes, the plan has 8 GPUs'

mutate "$M" "$T/m_layers.sh" 's/--num-layers 32/--num-layers 31/'
expect_fail "megatron: layers not divisible by pp" megatron "$P" "$T/m_layers.sh" 'num-layers 31 not divisible by --pipeline-model-parallel-size 2'

mutate "$M" "$T/m_opg.sh" '/--use-distributed-optimizer/d'
expect_fail "megatron: overlap-param-gather without distributed optimizer" megatron "$P" "$T/m_opg.sh" \
  'overlap-param-gather needs --use-distributed-optimizer'

# bf16 Adam moments: Megatron-Core's precision-aware optimizer (OptimizerConfig,
# get_megatron_optimizer), and the plan's moment_dtype must match the script's.
sed -e 's/"zero": 1,/"zero": 1, "moment_dtype": "bf16",/' "$P" >"$T/plan_tp2pp2_bf16m.json"
mutate "$M" "$T/m_moments.sh" 's/--use-distributed-optimizer/--use-distributed-optimizer\n  --use-precision-aware-optimizer\n  --exp-avg-dtype bf16\n  --exp-avg-sq-dtype bf16/'
expect_pass "megatron: bf16 Adam moments" megatron "$T/plan_tp2pp2_bf16m.json" "$T/m_moments.sh"
expect_fail "megatron: bf16 moments the plan does not have" megatron "$P" "$T/m_moments.sh" \
  'Adam moments bf16 .*the plan has fp32'
mutate "$T/m_moments.sh" "$T/m_moments_nopao.sh" '/--use-precision-aware-optimizer/d'
expect_fail "megatron: bf16 moments without the precision-aware optimizer" megatron "$T/plan_tp2pp2_bf16m.json" \
  "$T/m_moments_nopao.sh" 'exp-avg-dtype bf16 needs --use-precision-aware-optimizer'
mutate "$T/m_moments.sh" "$T/m_moments_nodo.sh" '/--use-distributed-optimizer/d; /--overlap-param-gather/d'
expect_fail "megatron: precision-aware optimizer without the distributed optimizer" megatron \
  "$T/plan_tp2pp2_bf16m.json" "$T/m_moments_nodo.sh" 'use-precision-aware-optimizer needs --use-distributed-optimizer'

# The fused cross-entropy loss: the script's flag must be the plan's, and training's validate_args refuses
# the Transformer Engine implementation ("disabled due to stability issues").
sed -e 's/"dp_mode": "sync"/"dp_mode": "sync", "cross_entropy_fusion": true/' "$P" >"$T/plan_tp2pp2_ce.json"
mutate "$M" "$T/m_ce.sh" 's/--bf16/--bf16\n  --cross-entropy-loss-fusion\n  --cross-entropy-fusion-impl native/'
expect_pass "megatron: fused cross-entropy loss" megatron "$T/plan_tp2pp2_ce.json" "$T/m_ce.sh"
expect_fail "megatron: fused loss the plan does not have" megatron "$P" "$T/m_ce.sh" \
  'cross-entropy-loss-fusion is True, the plan.s cross_entropy_fusion is False'
expect_fail "megatron: plan's fused loss missing from the script" megatron "$T/plan_tp2pp2_ce.json" "$M" \
  'cross-entropy-loss-fusion is False, the plan.s cross_entropy_fusion is True'
mutate "$T/m_ce.sh" "$T/m_ce_te.sh" 's/--cross-entropy-fusion-impl native/--cross-entropy-fusion-impl te/'
expect_fail "megatron: the TE loss fusion validate_args refuses" megatron "$T/plan_tp2pp2_ce.json" "$T/m_ce_te.sh" \
  'cross-entropy-fusion-impl te .validate_args: disabled due to stability issues'

mutate "$M" "$T/m_ogr.sh" '/--overlap-grad-reduce/d'
expect_fail "megatron: overlap-param-gather without overlap-grad-reduce" megatron "$P" "$T/m_ogr.sh" \
  'overlap-param-gather needs --overlap-grad-reduce'

mutate "$M" "$T/m_cdmc.sh" '/CUDA_DEVICE_MAX_CONNECTIONS/d'
expect_fail "megatron: tp>1 without CUDA_DEVICE_MAX_CONNECTIONS=1" megatron "$P" "$T/m_cdmc.sh" \
  'needs CUDA_DEVICE_MAX_CONNECTIONS=1'

mutate "$M" "$T/m_gqa.sh" 's/--num-query-groups 8/--num-query-groups 3/'
expect_fail "megatron: query groups vs tp/heads" megatron "$P" "$T/m_gqa.sh" 'num-query-groups 3 must be a multiple or divisor of tp 2'

# Mixture-of-Experts: 8 experts over ep 2 with the all-to-all dispatcher and the fused permutations the
# simulator costs (plan moe fields as trainplan writes them); without --moe-permute-fusion the export runs
# unfused torch permutations.
sed -e 's/"dp_mode": "sync"/"dp_mode": "sync", "ep": 2, "etp": 1, "moe_dispatcher": "alltoall"/' "$P" >"$T/plan_moe.json"
mutate "$M" "$T/m_moe.sh" 's/--swiglu/--swiglu\n  --num-experts 8\n  --moe-router-topk 2\n  --moe-grouped-gemm\n  --moe-permute-fusion\n  --moe-token-dispatcher-type alltoall\n  --disable-bias-linear/; s/--pipeline-model-parallel-size 2/--pipeline-model-parallel-size 2\n  --expert-model-parallel-size 2\n  --expert-tensor-parallel-size 1/'
expect_pass "megatron: MoE with the fused permutations" megatron "$T/plan_moe.json" "$T/m_moe.sh"
mutate "$T/m_moe.sh" "$T/m_moe_unfused.sh" '/--moe-permute-fusion/d'
expect_fail "megatron: MoE without --moe-permute-fusion" megatron "$T/plan_moe.json" "$T/m_moe_unfused.sh" \
  'without --moe-permute-fusion permutes tokens unfused'
# Shared experts beside the all-to-alls: the plan's flag must match the script's, and Megatron-Core's rules hold.
sed -e 's/"moe_dispatcher": "alltoall"/"moe_dispatcher": "alltoall", "moe_shared_expert_overlap": true/' \
  "$T/plan_moe.json" >"$T/plan_moe_shared.json"
mutate "$T/m_moe.sh" "$T/m_moe_shared.sh" 's/--moe-permute-fusion/--moe-permute-fusion\n  --moe-shared-expert-intermediate-size 4096\n  --moe-shared-expert-overlap/'
expect_pass "megatron: shared experts beside the all-to-alls" megatron "$T/plan_moe_shared.json" "$T/m_moe_shared.sh"
expect_fail "megatron: shared-expert overlap the plan does not have" megatron "$T/plan_moe.json" "$T/m_moe_shared.sh" \
  'moe-shared-expert-overlap is True, the plan'
mutate "$T/m_moe_shared.sh" "$T/m_moe_shared_ag.sh" 's/--moe-token-dispatcher-type alltoall/--moe-token-dispatcher-type allgather/'
expect_fail "megatron: shared-expert overlap with the allgather dispatcher" megatron "$T/plan_moe_shared.json" \
  "$T/m_moe_shared_ag.sh" 'needs the alltoall or flex dispatcher'

# Context parallelism as Ulysses all-to-alls: cp 2 instead of dp 2, --cp-comm-type a2a.
sed -e 's/"dp": 2, "cp": 1/"dp": 1, "cp": 2/; s/"dp_mode": "sync"/"dp_mode": "sync", "cp_comm_type": "a2a"/' \
  "$P" >"$T/plan_cp2_a2a.json"
mutate "$M" "$T/m_a2a.sh" 's/--context-parallel-size 1/--context-parallel-size 2\n  --cp-comm-type a2a/'
expect_pass "megatron: cp 2 with --cp-comm-type a2a" megatron "$T/plan_cp2_a2a.json" "$T/m_a2a.sh"
mutate "$T/m_a2a.sh" "$T/m_a2a_p2p.sh" 's/--cp-comm-type a2a/--cp-comm-type p2p/'
expect_fail "megatron: the plan's a2a exchange written as p2p" megatron "$T/plan_cp2_a2a.json" "$T/m_a2a_p2p.sh" \
  "--cp-comm-type p2p, the plan's context-parallel exchange is a2a"
mutate "$T/m_a2a.sh" "$T/m_a2a_heads.sh" 's/--num-query-groups 8/--num-query-groups 2/'
expect_fail "megatron: a2a needs the key/value heads of a TP rank divisible by cp" megatron "$T/plan_cp2_a2a.json" \
  "$T/m_a2a_heads.sh" 'query and 1 key/value heads of a TP rank must be divisible by it'
mutate "$T/m_a2a.sh" "$T/m_a2a_name.sh" 's/--cp-comm-type a2a/--cp-comm-type alltoall/'
expect_fail "megatron: a cp comm type Transformer Engine does not run" megatron "$T/plan_cp2_a2a.json" \
  "$T/m_a2a_name.sh" "--cp-comm-type 'alltoall' is not one Transformer Engine runs"

mutate "$M" "$T/m_vp.sh" 's/--sequence-parallel/--sequence-parallel\n  --num-layers-per-virtual-pipeline-stage 3/'
expect_fail "megatron: virtual pipeline stage size" megatron "$P" "$T/m_vp.sh" \
  'layers per pipeline stage 16 not divisible by --num-layers-per-virtual-pipeline-stage 3'

mutate "$M" "$T/m_uneven.sh" 's/--sequence-parallel/--sequence-parallel\n  --decoder-first-pipeline-num-layers 0/'
expect_fail "megatron: uneven first stage rule" megatron "$P" "$T/m_uneven.sh" 'decoder-first-pipeline-num-layers 0 must be > 0'

mutate "$M" "$T/m_layout.sh" "s/--sequence-parallel/--sequence-parallel\n  --pipeline-model-parallel-layout 'Et*16|t*15L'/"
expect_fail "megatron: pipeline layout decoder count" megatron "$P" "$T/m_layout.sh" \
  'the layout has 31 decoder layers, --num-layers is 32'
mutate "$M" "$T/m_layout3.sh" "s/--sequence-parallel/--sequence-parallel\n  --pipeline-model-parallel-layout '(Et*8|)*1(t*8|)*2t*8L'/"
expect_fail "megatron: pipeline layout implies a virtual pipeline" megatron "$P" "$T/m_layout3.sh" \
  'virtual pipeline degree 2, the plan has vp=1'

mutate "$M" "$T/m_fsdp.sh" 's/--use-distributed-optimizer/--use-distributed-optimizer\n  --use-megatron-fsdp/'
expect_fail "megatron: Megatron-FSDP needs fsdp_dtensor and CUDA_DEVICE_MAX_CONNECTIONS != 1" megatron "$P" "$T/m_fsdp.sh" \
  'Megatron-FSDP requires --ckpt-format fsdp_dtensor'
expect_fail "megatron: Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1" megatron "$P" "$T/m_fsdp.sh" \
  'asserts CUDA_DEVICE_MAX_CONNECTIONS != 1'

mutate "$M" "$T/m_recompute.sh" 's/--recompute-granularity selective/--recompute-granularity full/'
expect_fail "megatron: full recompute without method" megatron "$P" "$T/m_recompute.sh" 'full needs --recompute-method'

# Multi-node: the apostrophe inside "${NODE_RANK:?...}" breaks bash -n.
mutate "$M" "$T/m4.sh" 's/--nnodes 1/--nnodes 4/; s/--node_rank "${NODE_RANK:-0}"/--node_rank "${NODE_RANK:?set NODE_RANK to this node'"'"'s index, 0..3}"/; s/--master_addr "${MASTER_ADDR:-localhost}"/--master_addr "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}"/'
expect_fail "megatron: multi-node apostrophe bug (bash -n)" megatron "$T/plan_tp2pp2_4n.json" "$T/m4.sh" \
  '^.*: bash -n: line [0-9]+: unexpected EOF while looking for matching' 4
mutate "$M" "$T/m4_ok.sh" 's/--nnodes 1/--nnodes 4/; s/--node_rank "${NODE_RANK:-0}"/--node_rank "${NODE_RANK:?set NODE_RANK to the index of this node, 0..3}"/; s/--master_addr "${MASTER_ADDR:-localhost}"/--master_addr "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}"/; s/--global-batch-size 64/--global-batch-size 256/'
expect_pass "megatron: good multi-node script" megatron "$T/plan_tp2pp2_4n.json" "$T/m4_ok.sh" 4
mutate "$T/m4_ok.sh" "$T/m4_default.sh" 's/--node_rank "${NODE_RANK:?[^}]*}"/--node_rank "${NODE_RANK:-0}"/'
expect_fail "megatron: multi-node with a defaulted node rank" megatron "$T/plan_tp2pp2_4n.json" "$T/m4_default.sh" \
  "--node_rank .*NODE_RANK:-0.* falls back to '0' when the variable is unset" 4

# ---- DeepSpeed config ------------------------------------------------------
cat >"$T/ds.json" <<'EOF'
{
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 4,
  "gradient_clipping": 1.0,
  "steps_per_print": 10,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95], "eps": 1e-08, "weight_decay": 0.1}},
  "bf16": {"enabled": true},
  "data_types": {"grad_accum_dtype": "fp32"},
  "zero_optimization": {"stage": 2, "overlap_comm": true, "contiguous_gradients": true, "reduce_bucket_size": 500000000}
}
EOF
D="$T/plan_dp8_z2.json"
expect_pass "deepspeed: good config" deepspeed "$D" "$T/ds.json"
mutate "$T/ds.json" "$T/ds_batch.json" 's/"gradient_accumulation_steps": 4/"gradient_accumulation_steps": 3/'
expect_fail "deepspeed: batch arithmetic" deepspeed "$D" "$T/ds_batch.json" \
  'train_batch_size 64 != train_micro_batch_size_per_gpu 2 \* gradient_accumulation_steps 3 \* data-parallel 8'
mutate "$T/ds.json" "$T/ds_key.json" 's/"overlap_comm"/"overlap_communication"/'
expect_fail "deepspeed: unknown zero_optimization key" deepspeed "$D" "$T/ds_key.json" \
  'zero_optimization.overlap_communication is not a field of DeepSpeedZeroConfig'
mutate "$T/ds.json" "$T/ds_type.json" 's/"reduce_bucket_size": 500000000/"reduce_bucket_size": "5e8"/'
expect_fail "deepspeed: wrong value type" deepspeed "$D" "$T/ds_type.json" 'reduce_bucket_size = "5e8" is not int'
mutate "$T/ds.json" "$T/ds_top.json" 's/"steps_per_print"/"step_per_print"/'
expect_fail "deepspeed: unknown top-level key" deepspeed "$D" "$T/ds_top.json" "unknown top-level key 'step_per_print'"
mutate "$T/ds.json" "$T/ds_dup.json" 's/"gradient_clipping": 1.0,/"gradient_clipping": 1.0, "gradient_clipping": 0.5,/'
expect_fail "deepspeed: duplicate key" deepspeed "$D" "$T/ds_dup.json" "duplicate key 'gradient_clipping'"
mutate "$T/ds.json" "$T/ds_comm.json" 's/"bf16": {"enabled": true},/"bf16": {"enabled": true}, "communication_data_type": "fp8",/'
expect_fail "deepspeed: communication_data_type outside DeepSpeed's choices" deepspeed "$D" "$T/ds_comm.json" \
  "communication_data_type = \"fp8\" is not one of"
mutate "$T/ds.json" "$T/ds_comm_ok.json" 's/"bf16": {"enabled": true},/"bf16": {"enabled": true}, "communication_data_type": "BF16",/'
expect_pass "deepspeed: communication_data_type is read lower-cased" deepspeed "$D" "$T/ds_comm_ok.json"
mutate "$T/ds.json" "$T/ds_stage0.json" 's/"stage": 2/"stage": 0/'
expect_fail "deepspeed: stage 0 bf16 with fp32 grad accumulation" deepspeed "$D" "$T/ds_stage0.json" 'unsupported mix of model_dtype and grad_accum_dtype'

# DeepSpeed AutoEP: Mixtral 8x7B on 16 GPUs, expert parallel 8 (config "expert_parallel").
cat >"$T/plan_mixtral_ep8.json" <<'EOF'
{"model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 16, "tp": 1, "pp": 1, "dp": 16, "cp": 1, "vp": 1,
 "zero": 1, "shard_group": 0, "mbs": 1, "gbs": 16, "seq": 4096, "sp": false, "recompute": "full",
 "schedule": "1f1b", "precision": "bf16", "grad_dtype": "fp32", "attention": "flash", "offload": "none",
 "dp_mode": "sync", "ep": 8, "etp": 1}
EOF
cat >"$T/ep.json" <<'EOF'
{
  "train_batch_size": 16,
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.0003, "betas": [0.9, 0.95], "eps": 1e-08, "weight_decay": 0.1}},
  "bf16": {"enabled": true},
  "data_types": {"grad_accum_dtype": "fp32"},
  "zero_optimization": {"stage": 1, "contiguous_gradients": true, "reduce_scatter": true},
  "expert_parallel": {"enabled": true, "autoep_size": 8, "preset_model": "mixtral", "use_grouped_mm": true}
}
EOF
E="$T/plan_mixtral_ep8.json"
expect_pass "deepspeed autoep: good config" deepspeed "$E" "$T/ep.json"
mutate "$T/ep.json" "$T/ep_off.json" 's/"enabled": true, "autoep_size"/"enabled": false, "autoep_size"/'
expect_fail "deepspeed autoep: expert parallelism off for an ep plan" deepspeed "$E" "$T/ep_off.json" \
  'the plan has ep=8 but expert_parallel is not enabled'
mutate "$T/ep.json" "$T/ep_size.json" 's/"autoep_size": 8/"autoep_size": 3/'
expect_fail "deepspeed autoep: autoep_size must divide the experts" deepspeed "$E" "$T/ep_size.json" \
  "autoep_size 3 does not divide the model's 8 experts"
mutate "$T/ep.json" "$T/ep_preset.json" 's/"preset_model": "mixtral"/"preset_model": "deepseek_v3"/'
expect_fail "deepspeed autoep: preset of another model type" deepspeed "$E" "$T/ep_preset.json" \
  "AutoEP preset 'deepseek_v3' supports model_type .*; the model's config.json model_type is 'mixtral'"
mutate "$T/ep.json" "$T/ep_unknown.json" 's/"preset_model": "mixtral"/"preset_model": "gpt_oss"/'
expect_fail "deepspeed autoep: unknown preset" deepspeed "$E" "$T/ep_unknown.json" \
  "preset_model 'gpt_oss' is not an AutoEP preset"
mutate "$T/ep.json" "$T/ep_etp.json" 's/"use_grouped_mm": true/"use_grouped_mm": true, "expert_tensor_parallel_size": 2/'
expect_fail "deepspeed autoep: expert tensor parallelism" deepspeed "$E" "$T/ep_etp.json" \
  'expert_tensor_parallel_size 2 is not supported yet'
mutate "$T/ep.json" "$T/ep_lb.json" 's/"use_grouped_mm": true/"use_grouped_mm": true, "load_balance_coeff": 0.001/'
expect_fail "deepspeed autoep: expert-bias balancing" deepspeed "$E" "$T/ep_lb.json" 'load_balance_coeff must be null'
mutate "$T/ep.json" "$T/ep_score.json" 's/"use_grouped_mm": true/"use_grouped_mm": true, "score_func": "tanh"/'
expect_fail "deepspeed autoep: score_func outside AutoEP's choices" deepspeed "$E" "$T/ep_score.json" \
  'score_func = "tanh" is not one of'

# Megatron-DeepSpeed launcher with the config in a heredoc; pp > 1 is DeepSpeed's PipelineEngine.
cat >"$T/mds.sh" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
export CUDA_DEVICE_MAX_CONNECTIONS=1

DS_CONFIG="${DS_CONFIG:-ds_config.json}"
cat >"$DS_CONFIG" <<'JSON'
{
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 16,
  "bf16": {"enabled": true},
  "data_types": {"grad_accum_dtype": "fp32"},
  "zero_optimization": {"stage": 1}
}
JSON

DISTRIBUTED_ARGS=(
  --nproc_per_node 8
  --nnodes 1
  --node_rank "${NODE_RANK:-0}"
  --master_addr "${MASTER_ADDR:-localhost}"
  --master_port "${MASTER_PORT:-6000}"
)

ARGS=(
  --num-layers 24
  --hidden-size 2048
  --num-attention-heads 16
  --seq-length 2048
  --max-position-embeddings 2048
  --tensor-model-parallel-size 2
  --pipeline-model-parallel-size 2
  --sequence-parallel
  --deepspeed
  --deepspeed_config "$DS_CONFIG"
  --zero-stage 1
  --micro-batch-size 2
  --global-batch-size 64
  --bf16
  --data-path "${DATA_PATH:?set DATA_PATH}"
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py "${ARGS[@]}" "$@"
EOF
DP="$T/plan_ds_tp2pp2.json"
expect_pass "megatron-deepspeed: good launcher" deepspeed "$DP" "$T/mds.sh"
mutate "$T/mds.sh" "$T/mds_z2.sh" 's/"stage": 1/"stage": 2/; s/--zero-stage 1/--zero-stage 2/'
sed -e 's/"zero": 1/"zero": 2/' "$DP" >"$T/plan_ds_tp2pp2_z2.json"
expect_fail "megatron-deepspeed: ZeRO-2 with the PipelineEngine" deepspeed "$T/plan_ds_tp2pp2_z2.json" "$T/mds_z2.sh" \
  'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'
mutate "$T/mds.sh" "$T/mds_gas.sh" 's/"gradient_accumulation_steps": 16/"gradient_accumulation_steps": 8/'
expect_fail "megatron-deepspeed: batch with dp = world/(tp*pp)" deepspeed "$DP" "$T/mds_gas.sh" \
  'train_batch_size 64 != train_micro_batch_size_per_gpu 2 \* gradient_accumulation_steps 8 \* data-parallel 2'
mutate "$T/mds.sh" "$T/mds_zs.sh" 's/--zero-stage 1/--zero-stage 0/'
expect_fail "megatron-deepspeed: --zero-stage disagrees with the config" deepspeed "$DP" "$T/mds_zs.sh" \
  '--zero-stage 0 but the DeepSpeed config has stage 1'
mutate "$T/mds.sh" "$T/mds_name.sh" 's/--deepspeed_config/--deepspeed-config/'
expect_fail "megatron-deepspeed: wrong flag name" deepspeed "$DP" "$T/mds_name.sh" 'unknown argument --deepspeed-config'
# DeepSpeed-Ulysses: cp 4 as --ds-sequence-parallel-size 4, tp 1, pp 1 (dp 2: the same 16 accumulation steps).
sed -e 's/"tp": 2, "pp": 2, "dp": 2, "cp": 1/"tp": 1, "pp": 1, "dp": 2, "cp": 4/; s/"sp": true/"sp": false/' \
  -e 's/"dp_mode": "sync"/"dp_mode": "sync", "cp_comm_type": "a2a"/' "$DP" >"$T/plan_ds_ulysses.json"
mutate "$T/mds.sh" "$T/mds_ulysses.sh" 's/--tensor-model-parallel-size 2/--tensor-model-parallel-size 1/; s/--pipeline-model-parallel-size 2/--pipeline-model-parallel-size 1\n  --no-pipeline-parallel\n  --ds-sequence-parallel-size 4/; /--sequence-parallel$/d; /CUDA_DEVICE_MAX_CONNECTIONS/d'
expect_pass "megatron-deepspeed: Ulysses, --ds-sequence-parallel-size 4" deepspeed "$T/plan_ds_ulysses.json" \
  "$T/mds_ulysses.sh"
mutate "$T/mds_ulysses.sh" "$T/mds_ulysses_tp.sh" 's/--tensor-model-parallel-size 1/--tensor-model-parallel-size 2/; s/--ds-sequence-parallel-size 4/--ds-sequence-parallel-size 2/'
expect_fail "megatron-deepspeed: Ulysses with tensor parallelism" deepspeed "$T/plan_ds_ulysses.json" \
  "$T/mds_ulysses_tp.sh" "sequence parallel does not work with tensor parallel or pipeline parallel"

# ---- PyTorch FSDP2 / DDP script --------------------------------------------
cat >"$T/fsdp.py" <<'EOF'
#!/usr/bin/env python3
# Needs PyTorch >= 2.6 (torch.distributed.fsdp.fully_shard).
import contextlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh

TP = 1
DP = 8
ZERO = 2
MBS = 2
GBS = 64
SEQ = 2048
ACCUM = 4
RECOMPUTE = "none"
PRECISION = "bf16"
REDUCE_DTYPE = "fp32"
SP = False
CPU_OFFLOAD = False
FSDP = ZERO >= 2 and DP > 1


def main():
    dist.init_process_group("nccl")
    mesh = init_device_mesh("cuda", (DP,), mesh_dim_names=("dp_shard",))
    model = nn.Linear(16, 16, bias=False)
    if FSDP:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        kwargs = {"mesh": mesh, "reshard_after_forward": ZERO == 3}
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        fully_shard(model, **kwargs)
    ddp_wrapped = False
    if not FSDP and DP > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])])
        ddp_wrapped = True
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for micro in range(ACCUM):
        last = micro == ACCUM - 1
        sync = model.no_sync() if ddp_wrapped and not last else contextlib.nullcontext()
        with sync:
            x = torch.randn(MBS, 16, device="cuda")
            F.mse_loss(model(x), x).backward()
    optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
EOF
F="$T/plan_dp8_z2.json"
expect_pass "fsdp: good FSDP2 script" fsdp "$F" "$T/fsdp.py"
# FSDP2 turning gradient sync off (the unsharded fp32 accumulator the plan has no memory for).
mutate "$T/fsdp.py" "$T/fsdp_sync_off.py" 's/^        last = micro == ACCUM - 1$/        last = micro == ACCUM - 1\n        if FSDP:\n            model.set_requires_gradient_sync(last)/'
expect_fail "fsdp: FSDP2 turns gradient sync off" fsdp "$F" "$T/fsdp_sync_off.py" \
  'runs FSDP2 with 4 micro-batches, simulated with a reduce-scatter every micro-batch'
mutate "$T/fsdp.py" "$T/fsdp_nosync.py" 's/sync = model.no_sync() if ddp_wrapped and not last else contextlib.nullcontext()/sync = model.no_sync() if not last else contextlib.nullcontext()/'
expect_fail "fsdp: FSDP2 module no_sync()" fsdp "$F" "$T/fsdp_nosync.py" 'FSDP2 module has no no_sync\(\)'
# DDP plan (ZeRO 1): the same script must enter no_sync(); without it every micro-batch all-reduces.
mutate "$T/fsdp.py" "$T/ddp.py" 's/^ZERO = 2/ZERO = 1/'
expect_pass "fsdp: good DDP script" fsdp "$T/plan_dp8_z1.json" "$T/ddp.py"
mutate "$T/ddp.py" "$T/ddp_nosync.py" 's/sync = model.no_sync() if ddp_wrapped and not last else contextlib.nullcontext()/sync = contextlib.nullcontext()/'
expect_fail "fsdp: DDP without no_sync" fsdp "$T/plan_dp8_z1.json" "$T/ddp_nosync.py" 'never enters model.no_sync\(\)'
mutate "$T/fsdp.py" "$T/fsdp_api.py" 's/from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard/from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, no_sync_policy/'
expect_fail "fsdp: unknown torch name" fsdp "$F" "$T/fsdp_api.py" 'torch.distributed.fsdp.no_sync_policy is not a PyTorch API name'
mutate "$T/fsdp.py" "$T/fsdp_kw.py" 's/"reshard_after_forward": ZERO == 3/"reshard_after_forward": ZERO == 3, "reshard_after_backward": True/'
expect_fail "fsdp: unknown fully_shard keyword" fsdp "$F" "$T/fsdp_kw.py" "fully_shard\(\) has no keyword argument 'reshard_after_backward'"
mutate "$T/fsdp.py" "$T/fsdp_accum.py" 's/^ACCUM = 4/ACCUM = 8/'
expect_fail "fsdp: ACCUM disagrees with the plan" fsdp "$F" "$T/fsdp_accum.py" 'ACCUM = 8, the plan has 4'
mutate "$T/fsdp.py" "$T/fsdp_syntax.py" 's/^def main():/def main(:/'
expect_fail "fsdp: Python syntax error" fsdp "$F" "$T/fsdp_syntax.py" 'SyntaxError'

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
