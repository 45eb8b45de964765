#!/usr/bin/env python3
"""Writes tests/bad_input/files/: one malformed input per class of
tests/bad_input/cases.json, each a shipped file with one thing changed
(textually, so that what JSON libraries cannot emit -- 1e400, duplicate keys,
raw control characters -- can be written).  Run it after changing a shipped
file the corpus derives from; the files are committed."""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "files")


def text(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def write(name, body):
    with open(os.path.join(OUT, name), "w") as f:
        f.write(body)


def edit(src, old, new, name, count=1):
    body = text(src)
    assert body.count(old) >= 1, (src, old)
    write(name, body.replace(old, new, count))


MODEL = "tests/data/model_tiny.json"
CLUSTER = "topologies/dgx-a100.json"
PLAN = "tests/data/export/plan_llama3-8b_tp2_pp2.json"
CAL = "tests/data/calibration/a100_nccl_tests.json"
CPU_CAL = "tests/data/calibration/cpu_small.json"
NCCL = "tests/data/nccl/all_reduce_perf_a100.txt"

os.makedirs(OUT, exist_ok=True)
# Numbers beyond double range, in every loader.
edit(MODEL, '"layers": 4', '"layers": 1e400', "model_1e400.json")
edit(CLUSTER, '"sm_count": 108', '"sm_count": -1e400', "cluster_1e400.json")
edit(PLAN, '"tp": 2', '"tp": 1e400', "plan_1e400.json")
edit(CAL, '"ranks": 8', '"ranks": 1e400', "calibration_1e400.json")
# Integers that narrowed to int (SIGFPE, silent truncation).
edit(PLAN, '"tp": 2', '"tp": 1099511627776', "plan_tp_2e40.json")
edit(CLUSTER, '"sm_count": 108', '"sm_count": 4294967296', "cluster_sm_2e32.json")
edit(CLUSTER, '"sm_count": 108', '"sm_count": 2147483648', "cluster_sm_2e31.json")
edit(CLUSTER, '"nvls": false', '"nvls": false, "gpus_per_switch": 4294967296', "cluster_gps_2e32.json")
edit(CLUSTER, '"nvls": false', '"nvls": false, "gpus_per_switch": 16', "cluster_gps_above_node.json")
edit(CLUSTER, '"nic_bandwidth": "200Gb/s",', '"nic_bandwidth": "200Gb/s", "efficiency": 1.2,', "cluster_nic_efficiency.json")
edit(CLUSTER, '"bandwidth_per_gpu": "25GB/s"', '"bandwidth_per_gpu": "25GB/s", "op_overhead": "5ms"',
     "cluster_op_overhead_5ms.json")
edit(MODEL, '"layers": 4', '"layers": 4.0', "model_layers_float.json")
edit(MODEL, '"vocab": 1024', '"vocab": 18446744073709551616', "model_vocab_2e64.json")
edit(PLAN, '"gpus": 8', '"gpus": 12', "plan_gpus_12.json")
edit(PLAN, '"pp": 2', '"pp": 2, "stage_layers": [16, 15]', "plan_stage_sum.json")
edit(PLAN, '"pp": 2', '"pp": 2, "stage_layers": [32, 0]', "plan_stage_empty.json")
edit(PLAN, '"zero": 1', '"zero": 4', "plan_zero_4.json")
edit(PLAN, '"seq": 8192', '"seq": 0', "plan_seq_0.json")
edit(PLAN, '"zero": 1', '"zero": 1, "ep_overlap": "yes"', "plan_ep_overlap_string.json")
edit(PLAN, '"zero": 1', '"zero": 1, "mtp_layers": 17', "plan_mtp_layers_17.json")
edit(PLAN, '"zero": 1', '"zero": 1, "cuda_graph": ["attn", "full_iteration"]', "plan_cuda_graph_unknown.json")
edit(PLAN, '"zero": 1', '"zero": 1, "framework": "megatron-core", "cuda_graph": ["attn"]', "plan_cuda_graph.json")
# Plans whose overlaps validate's executors cannot reproduce.
edit(PLAN, '"zero": 1', '"zero": 1, "framework": "megatron-core", "tp_comm_overlap": true', "plan_tp_comm_overlap.json")
edit("tests/data/export/plan_qwen3-30b-a3b_ep8.json", '"framework": "torchtitan"',
     '"framework": "megatron-core", "ep_overlap": true', "plan_ep_overlap.json")
edit(PLAN, '"precision": "bf16"', '"precision": "bf16", "fp8_recipe": "delayed"', "plan_fp8_recipe_bf16.json")
# Duplicate keys (nlohmann keeps the last one).
edit(MODEL, '"layers": 4,', '"layers": 4, "layers": 400,', "model_duplicate.json")
edit(CLUSTER, '"memory": "81920MiB",', '"memory": "81920MiB", "memory": "8TiB",', "cluster_duplicate.json")
edit(PLAN, '"tp": 2,', '"tp": 2, "tp": 4,', "plan_duplicate.json")
edit(CAL, '"ranks": 8,', '"ranks": 8, "ranks": 16,', "calibration_duplicate.json")
# Calibration: reached internal checks or an empty optional.
edit(CPU_CAL, '"kernel_overhead": "', '"kernel_overhead": "1e12s", "x": "', "calibration_overhead_huge.json")
body = json.loads(text(CPU_CAL))
del body["gemm_table"][0]["efficiency"]
write("calibration_gemm_no_efficiency.json", json.dumps(body, indent=2) + "\n")
edit(CPU_CAL, '"dtype": "fp32"', '"dtype": "int4"', "calibration_dtype.json")
edit(CPU_CAL, '"backend": "cpu"', '"backend": "tpu"', "calibration_backend.json")
edit(CAL, '"nodes": 1', '"nodes": 64', "calibration_nodes_above_ranks.json")
# Control characters in values that are echoed back.
edit(MODEL, '"mlp": "gelu"', '"mlp": "ge\\nlu\\u001b[31m"', "model_control_chars.json")
# nccl-tests output nccl-tests itself would flag.
nccl = text(NCCL)
rows = [l for l in nccl.splitlines() if l.strip() and not l.startswith("#")]
header = "\n".join(l for l in nccl.splitlines() if l.startswith("#"))
write("nccl_no_rows.txt", header + "\n")
first = rows[0]
fields = first.split()
def row_with(**kw):
    f = list(fields)
    for i, v in kw.items():
        f[int(i[1:])] = v
    return "  ".join(f)
write("nccl_negative_time.txt", nccl.replace(first, row_with(f9="-378.2"), 1))
write("nccl_inf_time.txt", nccl.replace(first, row_with(f9="inf"), 1))
write("nccl_wrong.txt", nccl.replace(first, row_with(f12="12"), 1))
write("nccl_failed.txt", nccl.replace("Out of bounds values : 0 OK", "Out of bounds values : 12 FAILED", 1))
write("nccl_truncated_row.txt", nccl.replace(first, "  ".join(fields[:6]), 1))
write("nccl_1e400.json", '{"results": [{"size": 1024, "in_place": {"time": 1e400, "nwrong": 0}}]}\n')
# Malformed JSON.
write("model_truncated.json", text(MODEL)[:60])
write("model_deep.json", '{"name": ' + "[" * 40 + "]" * 40 + "}\n")
write("model_not_object.json", "[1, 2, 3]\n")
# calibrate --from-runs inputs (plan paths are relative to the runs file).
PLAN_REL = "../../data/export/plan_llama3-8b_pp2_zero2.json"
write("runs_empty.json", '{"runs": []}\n')
write("runs_step_no_unit.json", '{"runs": [{"name": "a", "plan": "%s", "step_time": "12.3"}]}\n' % PLAN_REL)
write("runs_step_negative.json", '{"runs": [{"name": "a", "plan": "%s", "step_time": "-1s"}]}\n' % PLAN_REL)
write("runs_missing_plan.json", '{"runs": [{"name": "a", "plan": "no_such_plan.json", "step_time": "1s"}]}\n')
write("runs_duplicate.json", '{"runs": [{"name": "a", "name": "b", "plan": "%s", "step_time": "1s"}]}\n' % PLAN_REL)
write("runs_unknown_key.json", '{"runs": [{"name": "a", "plan": "%s", "step_time": "1s", "tokens": 5}]}\n' % PLAN_REL)
body = json.loads(text(CPU_CAL))
body["backend"] = "runs"
body["run_fit"] = {"scales": {"gemm_efficiency": 50, "hbm_efficiency": 1, "attention_efficiency": 1,
                              "intra_bandwidth": 1, "inter_bandwidth": 1},
                   "runs": [], "residual_rms": 0, "leave_one_out_rms": 0}
write("calibration_run_scale.json", json.dumps(body, indent=2) + "\n")
edit(PLAN, '"gpus": 8', '"framework": "jax",\n  "gpus": 8', "plan_framework.json")
# Mixture-of-Experts and latent attention (models/mixtral-8x7b.json, models/deepseek-v3.json).
MOE = "models/mixtral-8x7b.json"
MLA = "models/deepseek-v3.json"
edit(MOE, '"top_k": 2', '"top_k": 9', "moe_topk_above_experts.json")
edit(MOE, '"top_k": 2', '"top_k": 2, "exprts": 8', "moe_unknown_key.json")
edit(MOE, '"experts": 8', '"experts": 0', "moe_experts_0.json")
edit(MOE, '"router": "softmax"', '"router": "topk"', "moe_router_bad.json")
edit(MOE, '"router": "softmax"', '"router": "softmax", "router_groups": 3, "router_group_topk": 1',
     "moe_groups_not_divisor.json")
edit(MOE, '"router": "softmax"', '"router": "softmax", "router_group_topk": 2', "moe_group_topk_alone.json")
edit(PLAN, '"zero": 1', '"zero": 1, "moe_dispatcher": "nccl"', "plan_moe_dispatcher_bad.json")
edit(PLAN, '"zero": 1', '"zero": 1, "moe_pad_to_capacity": 1', "plan_moe_pad_number.json")
edit(PLAN, '"zero": 1', '"zero": 1, "moe_router_fusion": "yes"', "plan_moe_router_fusion_string.json")
edit(PLAN, '"zero": 1', '"zero": 1, "cross_entropy_fusion": 1', "plan_ce_fusion_number.json")
edit(PLAN, '"zero": 1', '"zero": 1, "framework": "megatron-core", "cross_entropy_fusion": true', "plan_ce_fusion.json")
edit("tests/data/export/plan_qwen3-30b-a3b_ep8.json", '"framework": "torchtitan"',
     '"framework": "megatron-core", "moe_dispatcher": "deepep"', "plan_moe_dispatcher_deepep.json")
edit("tests/data/export/plan_qwen3-30b-a3b_ep8.json", '"framework": "torchtitan"',
     '"framework": "megatron-core", "moe_router_fusion": true', "plan_moe_router_fusion.json")
write("plan_moe_shared_overlap.json",
      text("tests/data/export/plan_qwen3-30b-a3b_ep8.json")
      .replace('"framework": "torchtitan"', '"framework": "megatron-core", "moe_shared_expert_overlap": true')
      .replace('"model": "qwen3-30b-a3b"', '"model": "deepseek-v2"'))
edit(MOE, '"top_k": 2', '"top_k": 2, "capacity_factor": -1', "moe_capacity_negative.json")
edit(MOE, '"top_k": 2', '"top_k": 2, "dense_layers": 32', "moe_dense_all.json")
edit(MOE, '"kv_heads": 8,', '"kv_heads": 8, "kv_lora_rank": 512,', "mla_key_without_mla.json")
edit(MLA, '"kv_heads": 128', '"kv_heads": 8', "mla_kv_heads.json")
edit(MLA, '"kv_lora_rank": 512,', '', "mla_missing_rank.json")
edit(MODEL, '"layers": 4,', '"layers": 4, "moe": 5,', "moe_not_object.json")
# Sliding-window attention (models/gpt-oss-120b.json).
OSS = "models/gpt-oss-120b.json"
edit(OSS, '"tokens": 128', '"tokens": 0', "window_tokens_0.json")
edit(OSS, '"full_every": 2', '"full_every": 1', "window_full_every_1.json")
# hf_model_type: a Hugging Face config.json model_type (lowercase, digits, '_').
edit(MODEL, '"dropout": true,', '"dropout": true, "hf_model_type": "Mixtral",', "model_hf_model_type.json")
# cp_comm_type: p2p or a2a.
edit(PLAN, '"cp": 1,', '"cp": 1, "cp_comm_type": "ulysses",', "plan_cp_comm_type.json")
