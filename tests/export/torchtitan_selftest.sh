#!/usr/bin/env bash
# Self-test of tests/export/torchtitan_rules.py: good configs pass, hand-made
# bad ones are rejected with the expected line.  Needs python3 (3.11+, for
# tomllib) and nothing else; the trainplan binary is not used.
#
#   bash tests/export/torchtitan_selftest.sh
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
export TRAINPLAN_DATA_DIR="${TRAINPLAN_DATA_DIR:-$ROOT}"
RULES="$HERE/torchtitan_rules.py"
DATA="$ROOT/tests/data/export"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0

# expect_ok NAME PLAN FILE WORLD
expect_ok() {
  local out
  if out="$(python3 "$RULES" --plan "$2" --file "$3" --world "$4" 2>&1)"; then
    pass=$((pass + 1)); echo "ok   $1"
  else
    fail=$((fail + 1)); echo "FAIL $1: expected no problems, got:"; echo "$out" | sed 's/^/     /'
  fi
}

# expect_bad NAME PLAN FILE WORLD EXPECTED-SUBSTRING
expect_bad() {
  local out rc
  out="$(python3 "$RULES" --plan "$2" --file "$3" --world "$4" 2>&1)"; rc=$?
  if [ "$rc" -ne 0 ] && grep -qF -- "$5" <<<"$out"; then
    pass=$((pass + 1)); echo "ok   $1"
  else
    fail=$((fail + 1)); echo "FAIL $1: expected rc!=0 and a line with: $5 (rc=$rc)"; echo "$out" | sed 's/^/     /'
  fi
}

# mutate SRC DST PYTHON-EXPRESSION-ON-s : writes DST = f(SRC text)
mutate() {
  python3 - "$1" "$2" "$3" <<'PY'
import sys
s = open(sys.argv[1]).read()
s2 = eval(sys.argv[3], {"s": s})
assert s2 != s, "mutation changed nothing"
open(sys.argv[2], "w").write(s2)
PY
}

# ---- pp = 1: the golden export (16 GPUs, ZeRO-3) ---------------------------
Z3_PLAN="$DATA/plan_llama3-8b_zero3.json"
Z3="$DATA/torchtitan_llama3-8b_zero3.toml"
expect_ok "golden zero3 toml" "$Z3_PLAN" "$Z3" 16
expect_bad "world size differs" "$Z3_PLAN" "$Z3" 8 "!= world size 8"

mutate "$Z3" "$TMP/type.toml" 's.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = \"1\"")'
expect_bad "wrong type" "$Z3_PLAN" "$TMP/type.toml" 16 \
  "parallelism.tensor_parallel_degree: expected int, got str '1'"

mutate "$Z3" "$TMP/product.toml" 's.replace("data_parallel_shard_degree = 8", "data_parallel_shard_degree = 4")'
expect_bad "product != world" "$Z3_PLAN" "$TMP/product.toml" 16 \
  "dp_replicate(2) * dp_shard(4) * cp(1) * tp(1) * pp(1) = 8 != world size 16"

mutate "$Z3" "$TMP/section.toml" 's + "\n[float8]\nenable_fsdp_float8_all_gather = true\n"'
expect_bad "unknown section" "$Z3_PLAN" "$TMP/section.toml" 16 "[float8]: unknown section"

mutate "$Z3" "$TMP/key.toml" 's.replace("[training]\n", "[training]\nbatch_size = 2\n")'
expect_bad "unknown key" "$Z3_PLAN" "$TMP/key.toml" 16 "training.batch_size: unknown key"

mutate "$Z3" "$TMP/choice.toml" 's.replace("\"always\"", "\"sometimes\"")'
expect_bad "bad choice" "$Z3_PLAN" "$TMP/choice.toml" 16 \
  "parallelism.fsdp_reshard_after_forward = 'sometimes': not one of ['default', 'always', 'never']"

mutate "$Z3" "$TMP/reshard.toml" 's.replace("\"always\"", "\"never\"")'
expect_bad "zero3 needs reshard" "$Z3_PLAN" "$TMP/reshard.toml" 16 "ZeRO-3 needs True"

mutate "$Z3" "$TMP/gbs.toml" 's.replace("global_batch_size = 128", "global_batch_size = 100")'
expect_bad "global batch not a multiple" "$Z3_PLAN" "$TMP/gbs.toml" 16 \
  "global_batch_size 100 is not a multiple of local_batch_size 2 * dp_replicate*dp_shard 16"

mutate "$Z3" "$TMP/seq.toml" 's.replace("seq_len = 8192", "seq_len = 8191")'
expect_bad "seq_len divisor" "$Z3_PLAN" "$TMP/seq.toml" 16 "training.seq_len = 8191: not divisible by tp*cp*2 = 2"

mutate "$Z3" "$TMP/flavor.toml" 's.replace("flavor = \"8B\"", "flavor = \"70B\"")'
expect_bad "flavor dims" "$Z3_PLAN" "$TMP/flavor.toml" 16 "flavor '70B' has layers=80, the plan's model llama3-8b has layers=32"

mutate "$Z3" "$TMP/ac.toml" 's.replace("[activation_checkpoint]\nmode = \"full\"\n", "")'
expect_bad "default AC mode is selective" "$Z3_PLAN" "$TMP/ac.toml" 16 \
  "activation_checkpoint.mode = 'selective', the plan has recompute full (the default mode is 'selective')"

mutate "$Z3" "$TMP/ddp.toml" 's.replace("data_parallel_replicate_degree = 2", "data_parallel_replicate_degree = 8").replace("data_parallel_shard_degree = 8", "data_parallel_shard_degree = 1").replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2")'
expect_bad "DDP with tp" "$Z3_PLAN" "$TMP/ddp.toml" 16 "DDP has not supported > 1D parallelism"

printf 'not toml [\n' >"$TMP/syntax.toml"
expect_bad "toml syntax" "$Z3_PLAN" "$TMP/syntax.toml" 16 "toml: "

# ---- pp = 2 (8 GPUs, ZeRO-2) ----------------------------------------------
PP_PLAN="$DATA/plan_llama3-8b_pp2_zero2.json"
cat >"$TMP/pp2.toml" <<'TOML'
[job]
dump_folder = "./outputs"
description = "llama3-8b on dgx-h100, 8 GPUs (trainplan export)"

[model]
name = "llama3"
flavor = "8B"

[optimizer]
name = "AdamW"
lr = 3.0e-4
eps = 1e-8
weight_decay = 0.1

[lr_scheduler]
warmup_steps = 100

[training]
local_batch_size = 16
global_batch_size = 64
seq_len = 8192
max_norm = 1.0
steps = 1000
mixed_precision_param = "bfloat16"
mixed_precision_reduce = "float32"
enable_cpu_offload = false

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = 4
fsdp_reshard_after_forward = "never"
tensor_parallel_degree = 1
enable_async_tensor_parallel = false
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_microbatch_size = 1
module_fqns_per_model_part = [
  ["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3", "layers.4", "layers.5", "layers.6", "layers.7",
   "layers.8", "layers.9", "layers.10", "layers.11", "layers.12", "layers.13", "layers.14", "layers.15"],
  ["layers.16", "layers.17", "layers.18", "layers.19", "layers.20", "layers.21", "layers.22", "layers.23",
   "layers.24", "layers.25", "layers.26", "layers.27", "layers.28", "layers.29", "layers.30", "layers.31",
   "norm", "output"],
]
context_parallel_degree = 1

[activation_checkpoint]
mode = "none"
TOML
expect_ok "pp2 toml with module_fqns_per_model_part" "$PP_PLAN" "$TMP/pp2.toml" 8

# What today's exporter writes for this plan (split points, removed before v0.2.0).
mutate "$TMP/pp2.toml" "$TMP/split.toml" \
  's[:s.index("module_fqns_per_model_part")] + "pipeline_parallel_split_points = [\"layers.16\"]\n" + s[s.index("context_parallel_degree"):]'
expect_bad "split_points key" "$PP_PLAN" "$TMP/split.toml" 8 \
  "parallelism.pipeline_parallel_split_points: unknown key; torchtitan v0.2.2 rejects it"

mutate "$TMP/pp2.toml" "$TMP/lps.toml" \
  's[:s.index("module_fqns_per_model_part")] + "pipeline_parallel_layers_per_stage = 16\n" + s[s.index("context_parallel_degree"):]'
expect_bad "layers_per_stage counts embedding and output" "$PP_PLAN" "$TMP/lps.toml" 8 \
  "with pipeline_parallel_layers_per_stage = 16 give 3 stages, not divisible by pipeline_parallel_degree 2"

mutate "$TMP/pp2.toml" "$TMP/lps17.toml" \
  's[:s.index("module_fqns_per_model_part")] + "pipeline_parallel_layers_per_stage = 17\n" + s[s.index("context_parallel_degree"):]'
expect_ok "layers_per_stage 17 gives 16 + 16" "$PP_PLAN" "$TMP/lps17.toml" 8

mutate "$TMP/pp2.toml" "$TMP/mbs.toml" 's.replace("pipeline_parallel_microbatch_size = 1", "pipeline_parallel_microbatch_size = 3")'
expect_bad "local batch / microbatch" "$PP_PLAN" "$TMP/mbs.toml" 8 \
  "local_batch_size 16 is not divisible by pipeline_parallel_microbatch_size 3"

mutate "$TMP/pp2.toml" "$TMP/accum.toml" 's.replace("local_batch_size = 16", "local_batch_size = 4")'
expect_bad "pp with accumulation" "$PP_PLAN" "$TMP/accum.toml" 8 "4 gradient accumulation steps with pipeline parallelism"

mutate "$TMP/pp2.toml" "$TMP/sched.toml" 's.replace("\"1F1B\"", "\"OneFOneB\"")'
expect_bad "unknown schedule" "$PP_PLAN" "$TMP/sched.toml" 8 "pipeline_parallel_schedule = 'OneFOneB': unknown schedule"

mutate "$TMP/pp2.toml" "$TMP/move.toml" 's.replace("\"layers.15\"],", "],").replace("[\"layers.16\",", "[\"layers.15\", \"layers.16\",")'
expect_bad "stage split differs from the plan" "$PP_PLAN" "$TMP/move.toml" 8 \
  "the config produces pipeline stages of [15, 17] transformer layers, the plan has [16, 16]"

# An explicit uneven split: torchtitan's own split (16 + 16) is not the plan's.
python3 - "$PP_PLAN" "$TMP/plan_uneven.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["stage_layers"] = [15, 17]
json.dump(p, open(sys.argv[2], "w"))
PY
mutate "$TMP/pp2.toml" "$TMP/nofqns.toml" \
  's[:s.index("module_fqns_per_model_part")] + s[s.index("context_parallel_degree"):]'
expect_ok "default split is 16 + 16" "$PP_PLAN" "$TMP/nofqns.toml" 8
expect_bad "default split vs uneven plan" "$TMP/plan_uneven.json" "$TMP/nofqns.toml" 8 \
  "the config produces pipeline stages of [16, 16] transformer layers, the plan has [15, 17]"
expect_ok "uneven plan with module_fqns_per_model_part" "$TMP/plan_uneven.json" "$TMP/move.toml" 8

# ---- head Python config (Trainer.Config) ------------------------------------
cat >"$TMP/pp2_head.py" <<'PY'
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import llama3_8b
from torchtitan.trainer import Trainer

SEQ = 8192


def trainplan_llama3_8b() -> Trainer.Config:
    config = llama3_8b()
    config.model_spec = model_registry("8B")
    config.optimizer = default_adamw(lr=3.0e-4)
    config.lr_scheduler = LRSchedulersContainer.Config(warmup_steps=100)
    config.training = TrainingConfig(
        num_tokens_per_microbatch_per_dp_rank=1 * SEQ,
        num_tokens_per_train_step=64 * SEQ,
        max_context_length=SEQ,
        steps=1000,
        disable_cuda_graphs=True,
    )
    config.parallelism = ParallelismConfig(
        data_parallel_replicate_degree=1,
        data_parallel_shard_degree=4,
        fsdp_reshard_after_forward="never",
        pipeline_parallel_degree=2,
        pipeline_parallel_schedule="1F1B",
        num_pp_microbatches=16,
        module_fqns_per_model_part=[
            ["tok_embeddings"] + [f"layers.{i}" for i in range(0, 16)],
            [f"layers.{i}" for i in range(16, 32)] + ["norm", "lm_head"],
        ],
    )
    config.activation_checkpoint = None
    return config
PY
expect_ok "head python config pp2" "$PP_PLAN" "$TMP/pp2_head.py" 8

mutate "$TMP/pp2_head.py" "$TMP/head_old.py" 's.replace("num_tokens_per_microbatch_per_dp_rank=1 * SEQ", "local_batch_size=16")'
expect_bad "head: release field name" "$PP_PLAN" "$TMP/head_old.py" 8 \
  "TrainingConfig(local_batch_size=...): no such field"

mutate "$TMP/pp2_head.py" "$TMP/head_graphs.py" 's.replace("        disable_cuda_graphs=True,\n", "")'
expect_bad "head: cuda graphs with pp" "$PP_PLAN" "$TMP/head_graphs.py" 8 "disable_cuda_graphs must be True"

mutate "$TMP/pp2_head.py" "$TMP/head_output.py" 's.replace("\"lm_head\"", "\"output\"")'
expect_bad "head: output module is lm_head" "$PP_PLAN" "$TMP/head_output.py" 8 "unknown module 'output'"

# ---- MoE: qwen3 30B-A3B, ep 8 over 16 FSDP2 ranks (the golden export) ------------
MOE_PLAN="$DATA/plan_qwen3-30b-a3b_ep8.json"
MOE="$DATA/torchtitan_qwen3-30b-a3b_ep8.toml"
expect_ok "golden moe toml" "$MOE_PLAN" "$MOE" 16
mutate "$MOE" "$TMP/ep3.toml" 's.replace("expert_parallel_degree = 8", "expert_parallel_degree = 3")'
expect_bad "ep does not divide the borrowed ranks" "$MOE_PLAN" "$TMP/ep3.toml" 16 \
  "ep*etp = 3 does not divide dp_shard*cp*tp = 16"
mutate "$MOE" "$TMP/etp.toml" 's.replace("expert_tensor_parallel_degree = 1", "expert_tensor_parallel_degree = 2")'
expect_bad "etp neither 1 nor tp" "$MOE_PLAN" "$TMP/etp.toml" 16 "'Currently we only support ETP=TP or ETP=1'"
mutate "$MOE" "$TMP/flavor.toml" 's.replace("flavor = \"30B-A3B\"", "flavor = \"235B-A22B\"")'
expect_bad "flavor of another model" "$MOE_PLAN" "$TMP/flavor.toml" 16 "has layers=94, the plan's model qwen3-30b-a3b has 48"
mutate "$MOE" "$TMP/pp.toml" 's.replace("pipeline_parallel_degree = 1", "pipeline_parallel_degree = 2").replace("data_parallel_shard_degree = 16", "data_parallel_shard_degree = 8")'
expect_bad "qwen3 has no pipelining" "$MOE_PLAN" "$TMP/pp.toml" 16 "does not support pipelining"
mutate "$MOE" "$TMP/llama.toml" 's.replace("name = \"qwen3\"", "name = \"llama3\"")'
expect_bad "a dense train spec for an MoE plan" "$MOE_PLAN" "$TMP/llama.toml" 16 "is dense, the plan's model qwen3-30b-a3b has experts"

# ---- async TP: the plan's tp_comm_overlap, compiled -------------------------
AT_PLAN="$DATA/plan_llama3-70b_tp8_asynctp.json"
AT="$DATA/torchtitan_llama3-70b_tp8_asynctp.toml"
expect_ok "golden async-TP toml" "$AT_PLAN" "$AT" 32
mutate "$AT" "$TMP/at_off.toml" 's.replace("enable_async_tensor_parallel = true", "enable_async_tensor_parallel = false")'
expect_bad "async TP off where the plan overlaps" "$AT_PLAN" "$TMP/at_off.toml" 32 \
  "parallelism.enable_async_tensor_parallel = False, the plan has tp_comm_overlap on"
mutate "$AT" "$TMP/at_nocompile.toml" 's.replace("[compile]\n", "[compile]\nenable = false\n").replace("enable = true\n\n[optimizer]", "\n[optimizer]")'
expect_bad "async TP without compile" "$AT_PLAN" "$TMP/at_nocompile.toml" 32 \
  "parallelism.enable_async_tensor_parallel needs compile.enable"

# ---- compile: the plan's compile ---------------------------------------------
CO_PLAN="$DATA/plan_llama3-8b_zero3_compiled.json"
CO="$DATA/torchtitan_llama3-8b_zero3_compiled.toml"
expect_ok "golden compiled toml" "$CO_PLAN" "$CO" 16
mutate "$CO" "$TMP/co_off.toml" 's.replace("enable = true", "enable = false")'
expect_bad "eager where the plan was simulated compiled" "$CO_PLAN" "$TMP/co_off.toml" 16 \
  "the plan has compile on (simulated under torch.compile)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
