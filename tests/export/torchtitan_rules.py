#!/usr/bin/env python3
"""Oracle for trainplan's torchtitan exports.

check_toml(text, plan, world) checks a TOML job config against torchtitan
v0.2.2, the last release that reads TOML (see tests/data/frameworks/
torchtitan.json for the facts and where each was read), and against the plan
it was exported from.  check_python_config(text, plan, world) does the same for
a Python config in the format of torchtitan's head (a function returning
Trainer.Config, run with --module/--config).  Both return problem lines;
an empty list means the config loads in torchtitan and reproduces the plan.
Passing a list as `warnings` collects things torchtitan only warns about.

Usage: torchtitan_rules.py --plan P.json --file F.toml|F.py --world N

Python 3.11 standard library only.  Paths in the comments are files of the
torchtitan repository (github.com/pytorch/torchtitan) at the release tag
(v0.2.2) or at the head commit recorded in torchtitan.json; "trainplan:" marks
a file of this repository.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import sys
import tomllib
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FACTS_PATH = os.path.join(REPO, "tests", "data", "frameworks", "torchtitan.json")

_FACTS: dict | None = None


def facts() -> dict:
    global _FACTS
    if _FACTS is None:
        with open(FACTS_PATH, encoding="utf-8") as f:
            _FACTS = json.load(f)
    return _FACTS


# ---- the plan (trainplan's side) ---------------------------------------------


def load_model(name: str) -> dict | None:
    """The trainplan model spec models/<name>.json, or None."""
    for root in (os.environ.get("TRAINPLAN_DATA_DIR"), REPO):
        if root:
            path = os.path.join(root, "models", name + ".json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    return json.load(f)
    return None


def balance_stage_layers(layers: int, pp: int) -> list[int]:
    """Port of trainplan: simulator/spec/plan.cc balance_stage_layers."""
    if pp == 1:
        return [layers]
    if layers % pp == 0:
        return [layers // pp] * pp
    units = layers + 2  # embedding on the first stage, loss on the last
    per = [units // pp] * pp
    order = list(range(1, pp - 1)) + [0, pp - 1]
    for k in range(units % pp):
        per[order[k]] += 1
    per[0] -= 1
    per[-1] -= 1
    if min(per) >= 1:
        return per
    even = [layers // pp] * pp
    for k in range(layers % pp):
        even[order[k]] += 1
    return even if min(even) >= 1 else []


def balance_v_stage_layers(layers: int, pp: int) -> list[int]:
    """Port of trainplan: simulator/spec/plan.cc balance_v_stage_layers (zb-v:
    rank 0 holds the embedding and the loss, a layer's weight each)."""
    if layers % pp == 0:
        return [layers // pp] * pp
    units = layers + 2
    out = [units // pp] * pp
    for k in range(units % pp):
        out[pp - 1 - k] += 1
    out[0] -= 2
    if pp > 1 and out[0] >= 2:
        return out
    even = [layers // pp] * pp
    for k in range(layers % pp):
        even[pp - 1 - k] += 1
    return even


def virtual_stage_layers(stage_layers: list[int], pp: int, vp: int, v_style: bool = False) -> list[int]:
    """Port of trainplan: simulator/spec/plan.cc chunk_counts / virtual_stage.

    A rank's layers are split over its vp chunks as evenly as possible, the
    later chunks taking the extra ones; chunk v of pipeline rank r is virtual
    stage v*pp + r, or with the V placement (zb-v, vp = 2) stage r for chunk 0
    and 2*pp-1-r for chunk 1.  With the looped placement a first (last) rank
    holding fewer layers than the fullest middle one (with pp 2, the other
    end) counts the embedding (loss) as a layer's place in its first (last)
    chunk, which is left the short one.
    """
    out = [0] * (pp * vp)
    looped = vp > 1 and pp > 1 and not v_style
    middle = max(stage_layers[1:-1]) if pp > 2 else 0
    first_ref = middle if pp > 2 else stage_layers[-1]
    last_ref = middle if pp > 2 else stage_layers[0]
    for r in range(pp):
        embedding = looped and r == 0 and stage_layers[0] < first_ref
        loss = looped and r == pp - 1 and stage_layers[-1] < last_ref
        places = stage_layers[r] + int(embedding) + int(loss)
        counts = []
        for v in range(vp):
            extra = v < places % vp if loss else v >= vp - places % vp
            counts.append(places // vp + int(extra))
        if embedding:
            counts[0] -= 1
        if loss:
            counts[-1] -= 1
        for v in range(vp):
            stage = (r if v == 0 else 2 * pp - 1 - r) if v_style else v * pp + r
            out[stage] = counts[v]
    return out


class Plan:
    """The figures of a plan JSON (tests/data/export/plan_*.json) that the
    checks need, derived the way trainplan: simulator/spec/plan.cc
    resolve_plan derives them."""

    def __init__(self, plan: dict):
        self.raw = plan
        self.model_name = plan.get("model", "")
        self.model = load_model(self.model_name) if self.model_name else None
        self.gpus = int(plan.get("gpus", 0))
        self.tp = int(plan.get("tp", 1))
        self.pp = int(plan.get("pp", 1))
        self.cp = int(plan.get("cp", 1))
        self.vp = int(plan.get("vp", 1))
        self.dp = int(plan.get("dp", 0)) or max(1, self.gpus // max(1, self.tp * self.pp * self.cp))
        self.zero = int(plan.get("zero", 0))
        self.mbs = int(plan.get("mbs", 1))
        self.gbs = int(plan.get("gbs", 0)) or self.mbs * self.dp
        seq = int(plan.get("seq", 0))
        if seq == 0 and self.model:
            seq = int(self.model.get("seq_len", 0))
        self.seq = seq
        self.sp = bool(plan.get("sp", False))
        self.tp_comm_overlap = bool(plan.get("tp_comm_overlap", False))
        self.compile = bool(plan.get("compile", False))
        self.recompute = plan.get("recompute", "none")
        self.schedule = plan.get("schedule", "1f1b")
        self.precision = plan.get("precision", "bf16")
        self.fp8_recipe = plan.get("fp8_recipe")
        self.grad_dtype = plan.get("grad_dtype", "fp32")
        self.attention = plan.get("attention", "flash")
        self.ep = int(plan.get("ep", 1))
        self.moe_dispatcher = plan.get("moe_dispatcher", "alltoall")
        self.etp = int(plan.get("etp", 0)) or (self.tp if self.model and self.model.get("moe") else 1)
        self.dp_mode = plan.get("dp_mode", "sync")
        self.offload = plan.get("offload", "none")
        sg = int(plan.get("shard_group", 0))
        self.shard_degree = sg if sg else (self.dp * self.cp if self.zero > 0 else 1)
        self.microbatches = max(1, self.gbs // max(1, self.mbs * self.dp))
        layers = int(self.model["layers"]) if self.model else 0
        v_style = self.schedule in ("zb-v", "dualpipe-v")
        if plan.get("stage_layers"):
            self.stage_layers = [int(x) for x in plan["stage_layers"]]
        elif layers and v_style:
            self.stage_layers = balance_v_stage_layers(layers, self.pp)
        elif layers:
            self.stage_layers = balance_stage_layers(layers, self.pp)
        else:
            self.stage_layers = []
        self.virtual_stages = (
            virtual_stage_layers(self.stage_layers, self.pp, 2 if v_style else self.vp, v_style)
            if len(self.stage_layers) == self.pp else []
        )


def plan_refusals(p: Plan) -> list[str]:
    """Plan features no torchtitan config can express (same list as
    trainplan: planner/export/torchtitan_export.cc export_torchtitan refuses)."""
    out = []
    if p.dp_mode == "async":
        out.append("plan: dp_mode async: torchtitan has no asynchronous data parallelism")
    if p.zero == 1:
        # torchtitan/models/llama3/infra/parallelize.py: DDP (replicate) or FSDP2 only.
        out.append("plan: zero 1: torchtitan has no optimizer-only sharding (DDP or FSDP2 only) "
                   "[torchtitan/models/llama3/infra/parallelize.py parallelize_llama]")
    if p.precision == "fp16":
        out.append("plan: precision fp16: training.mixed_precision_param is bfloat16 or float32")
    if p.grad_dtype == "bf16":
        out.append("plan: grad_dtype bf16: training.mixed_precision_reduce is float32 only")
    if p.offload == "optimizer":
        out.append("plan: offload optimizer: training.enable_cpu_offload moves parameters, gradients and "
                   "optimizer state together")
    if p.attention == "naive":
        out.append("plan: attention naive: torchtitan's llama3 uses scaled_dot_product_attention")
    if p.pp > 1 and p.schedule == "naive":
        out.append("plan: schedule naive: torchtitan has no naive pipeline schedule")
    if p.model and p.model.get("moe") and p.precision == "fp8":
        out.append("plan: precision fp8 with MoE: torchtitan's float8 grouped-MM training is a prototype "
                   "(quantize.grouped_mm.float8; no pipeline or context parallelism) [components/quantization/float8.py]")
    return out


def check_moe_model(name: str, flavor: str, p: Plan, pp: int, cp: int) -> tuple[list[str], int]:
    """An MoE train spec of v0.2.2: the flavor is the plan's model, and the
    spec runs the plan's pipeline and context parallelism.  Returns
    (problems, the flavor's layer count or 0)."""
    moe = facts()["release"]["moe_flavors"]
    src = f"torchtitan/models/{name}/__init__.py"
    spec = moe[name]
    out = []
    if flavor not in spec["flavors"]:
        return [f"model.flavor = {flavor!r}: not a {name} flavor trainplan knows ({sorted(spec['flavors'])}) [{src}]"], 0
    f = spec["flavors"][flavor]
    m = p.model or {}
    e = m.get("moe") or {}
    if not e:
        out.append(f"model.name = {name!r} is an MoE train spec, the plan's model {p.model_name} has no experts")
    want = {"layers": m.get("layers"), "hidden": m.get("hidden"), "vocab": m.get("vocab"),
            "experts": e.get("experts"), "top_k": e.get("top_k"), "expert_ffn_hidden": e.get("expert_ffn_hidden"),
            "shared_experts": e.get("shared_experts", 0) if e else None,
            "dense_layers": e.get("dense_layers", 0) if e else None}
    for key, value in want.items():
        if value is not None and int(f[key]) != int(value):
            out.append(f"model.flavor {name} {flavor!r} has {key}={f[key]}, the plan's model {p.model_name} has {value} "
                       f"[{src}]")
    if pp > 1 and not spec["pipeline"]:
        out.append(f"parallelism.pipeline_parallel_degree = {pp}: RuntimeError 'Pipeline Parallel is enabled but "
                   f"{name} does not support pipelining' [torchtitan/train.py]")
    if cp > 1 and not spec["context_parallel"]:
        out.append(f"parallelism.context_parallel_degree = {cp}: {name} {flavor} raises NotImplementedError for "
                   f"context parallelism [torchtitan/models/{name}/model/args.py, infra/parallelize.py]")
    return out, int(f["layers"])


def check_head_moe_model(family: str, flavor: Any, p: Plan) -> tuple[list[str], int]:
    """An MoE model_registry flavor at head (facts head.moe_registries): the
    flavor is the plan's model, routing groups included.  Returns (problems,
    the flavor's layer count or 0).  Every head MoE spec pipelines."""
    reg = facts()["head"]["moe_registries"][family]
    src = f"torchtitan/models/{family}/__init__.py model_registry"
    if flavor not in reg["flavors"]:
        return [f"model_registry({flavor!r}): not a {family} flavor ({sorted(reg['flavors'])}) [{src}]"], 0
    f = reg["flavors"][flavor]
    m = p.model or {}
    e = m.get("moe") or {}
    if not e:
        return [f"model_registry: {family} {flavor!r} is an MoE model, the plan's model {p.model_name} has no "
                "experts"], int(f["layers"])
    out = []
    want = {"layers": m.get("layers"), "hidden": m.get("hidden"), "vocab": m.get("vocab"),
            "experts": e.get("experts"), "top_k": e.get("top_k"), "expert_ffn_hidden": e.get("expert_ffn_hidden"),
            "shared_experts": e.get("shared_experts", 0), "dense_layers": e.get("dense_layers", 0),
            "router_groups": e.get("router_groups", 0), "router_group_topk": e.get("router_group_topk", 0)}
    for key, value in want.items():
        if value is not None and int(f[key]) != int(value):
            out.append(f"model_registry: {family} {flavor!r} has {key}={f[key]}, the plan's model {p.model_name} "
                       f"has {value} [{src}]")
    return out, int(f["layers"])


def expert_parallel(ep: Any, etp: Any, shard: int, cp: int, tp: int, p: Plan, where: str) -> list[str]:
    """torchtitan/distributed/parallel_dims.py: the expert mesh borrows
    dp_shard*cp*tp ranks (facts rules.expert_parallel)."""
    src = "torchtitan/distributed/parallel_dims.py ParallelDims"
    out = []
    if ep < 1 or etp < 1:
        return [f"{where}: expert_parallel_degree {ep}, expert_tensor_parallel_degree {etp} must be >= 1 [{src}]"]
    moe = bool(p.model and p.model.get("moe"))
    if not moe:
        if ep > 1:
            out.append(f"{where}.expert_parallel_degree = {ep}: no effect for the dense model {p.model_name}; "
                       "the plan has no experts")
        return out
    if ep > 1 and etp not in (1, tp):
        out.append(f"{where}: expert_tensor_parallel_degree {etp} with tensor_parallel_degree {tp}: 'Currently we "
                   f"only support ETP=TP or ETP=1' [{src}]")
    if (shard * cp * tp) % (ep * etp) != 0:
        out.append(f"{where}: ep*etp = {ep * etp} does not divide dp_shard*cp*tp = {shard * cp * tp}: the (efsdp, ep, "
                   f"etp) mesh cannot be unflattened [{src}]")
    if ep > 1 and etp == 1 and tp > 1 and (p.mbs * p.seq) % ep != 0:
        out.append(f"{where}: etp 1 with tp > 1 splits mbs*seq = {p.mbs * p.seq} tokens over ep = {ep}: "
                   f"'Requires EP degree dividing batch size * seq len' [{src}]")
    if ep != p.ep:
        out.append(f"{where}.expert_parallel_degree = {ep}, the plan has ep={p.ep}")
    if ep > 1 and etp != p.etp:
        out.append(f"{where}.expert_tensor_parallel_degree = {etp}, the plan has etp={p.etp}")
    return out


# ---- torchtitan's rules, shared by both formats ----------------------------------


def _schedule_kind(name: str) -> tuple[str | None, str | None]:
    """(canonical name, 'single'|'multi') for a schedule name, or (None, None).

    torch/distributed/pipelining/schedules.py get_schedule_class matches names
    case-insensitively and raises ValueError for unknown ones."""
    sd = facts()["release"]["schedules_detail"]
    for canon in facts()["release"]["schedules"]:
        if canon.lower() == str(name).lower():
            return canon, ("single" if canon in sd["single_stage"] else "multi")
    return None, None


def parallel_dims(rep: Any, shard: Any, cp: Any, tp: Any, pp: Any, world: int,
                  where: str) -> tuple[list[str], int | None]:
    """torchtitan/distributed/parallel_dims.py ParallelDims._validate.

    Returns (problems, resolved dp_shard)."""
    out = []
    for name, d in (("data_parallel_replicate_degree", rep), ("context_parallel_degree", cp),
                    ("tensor_parallel_degree", tp), ("pipeline_parallel_degree", pp)):
        if d < 1:
            out.append(f"{where}.{name} = {d}: parallelism degrees must be >= 1 "
                       "[torchtitan/distributed/parallel_dims.py ParallelDims._validate]")
    if not (shard == -1 or shard >= 1):
        out.append(f"{where}.data_parallel_shard_degree = {shard}: must be -1 or >= 1 "
                   "[torchtitan/distributed/parallel_dims.py ParallelDims._validate]")
    if out:
        return out, None
    if shard < 0:
        shard = world // (rep * cp * tp * pp)
        if shard < 1:
            out.append(f"{where}: data_parallel_shard_degree = -1 resolves to {shard} on {world} ranks "
                       "[torchtitan/distributed/parallel_dims.py ParallelDims._validate]")
            return out, None
    product = rep * shard * cp * tp * pp
    if product != world:
        out.append(f"{where}: dp_replicate({rep}) * dp_shard({shard}) * cp({cp}) * tp({tp}) * pp({pp}) = "
                   f"{product} != world size {world} "
                   "[torchtitan/distributed/parallel_dims.py ParallelDims._validate]")
    return out, shard


def generate_llm_fqn_per_model_part(num_stages: int, num_layers: int, iw: int, ow: int,
                                    out_name: str) -> tuple[list[list[str]] | None, str | None]:
    """Port of torchtitan/distributed/pipeline_parallel.py
    generate_llm_fqn_per_model_part (head: _generate_llm_fqn_per_model_part,
    with 'lm_head' for 'output').  Returns (stages, error)."""
    if num_stages < 1:
        return None, "Number of stages must be at least 1"
    if num_stages == 1:
        return [["tok_embeddings"] + [f"layers.{i}" for i in range(num_layers)] + ["norm", out_name]], None
    eff = num_layers + iw + ow
    if num_stages > eff:
        return None, f"Number of stages ({num_stages}) cannot be greater than effective layers ({eff})"
    base, extra = eff // num_stages, eff % num_stages
    if base == 0:
        return None, f"Configuration would result in empty stages ({num_stages} stages, {eff} effective layers)"
    if iw > base:
        return None, f"input_weight ({iw}) exceeds minimum layers per stage ({base})"
    if ow > base:
        return None, f"output_weight ({ow}) exceeds minimum layers per stage ({base})"
    stages, cur = [], 0
    for s in range(num_stages):
        share = base + (1 if s < extra else 0)
        mods: list[str] = []
        if s == 0:
            mods.append("tok_embeddings")
            share -= iw
        elif s == num_stages - 1:
            share -= ow
        for _ in range(share):
            if cur < num_layers:
                mods.append(f"layers.{cur}")
                cur += 1
        if s == num_stages - 1 and num_stages > 1:
            mods.extend(["norm", out_name])
        stages.append(mods)
    return stages, None


def pipeline_stages(pp: int, schedule: str, n_layers: int, layers_per_stage: int | None,
                    fqns: list[list[str]] | None, iw: int, ow: int, out_name: str,
                    where: str) -> tuple[list[str], list[list[str]] | None]:
    """The module lists of the pipeline stages torchtitan builds, in stage order.

    torchtitan/distributed/pipeline_parallel.py pipeline_llm (head:
    _get_pipeline_metadata) and pipeline_module_split."""
    src = "[torchtitan/distributed/pipeline_parallel.py pipeline_llm]"
    canon, kind = _schedule_kind(schedule)
    if canon is None:
        return [f"{where}.pipeline_parallel_schedule = {schedule!r}: unknown schedule; valid: "
                f"{facts()['release']['schedules']} [torch/distributed/pipelining/schedules.py get_schedule_class]"], None
    single = kind == "single"
    out: list[str] = []
    if layers_per_stage is not None:
        num_stages = math.ceil((n_layers + iw + ow) / layers_per_stage)
        info = (f"{n_layers} layers + first_stage_less_layers {iw} + last_stage_less_layers {ow} "
                f"with pipeline_parallel_layers_per_stage = {layers_per_stage} give {num_stages} stages")
        if num_stages % pp != 0:
            out.append(f"{where}: {info}, not divisible by pipeline_parallel_degree {pp} {src}")
            return out, None
        spr = num_stages // pp
        if single and spr != 1:
            out.append(f"{where}: {info}: {spr} stages per rank, but {canon} is a single-stage schedule {src}")
            return out, None
        if not single and spr < 2:
            out.append(f"{where}: {info}: {spr} stage per rank, but {canon} needs >= 2 {src}")
            return out, None
    else:
        spr = 1 if single else 2
        num_stages = pp * spr
    if fqns is None:
        stages, err = generate_llm_fqn_per_model_part(num_stages, n_layers, iw, ow, out_name)
        if err:
            out.append(f"{where}: {err} [torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part]")
            return out, None
    else:
        stages = fqns
    # torchtitan/distributed/pipeline_parallel.py pipeline_module_split _get_stage_indices
    if len(stages) % pp != 0:
        out.append(f"{where}.module_fqns_per_model_part: {len(stages)} stages, not divisible by "
                   f"pipeline_parallel_degree {pp} [torchtitan/distributed/pipeline_parallel.py pipeline_module_split]")
        return out, None
    spr = len(stages) // pp
    if single and spr != 1:
        # build_pipeline_schedule hands a single-stage schedule stages[0] only.
        out.append(f"{where}.module_fqns_per_model_part: {len(stages)} stages on {pp} ranks, but {canon} runs one "
                   "stage per rank (the others are built and never scheduled) "
                   "[torchtitan/distributed/pipeline_parallel.py build_pipeline_schedule]")
    if canon in facts()["release"]["schedules_detail"]["v_style"] and spr != 2:
        out.append(f"{where}: {canon} needs exactly 2 stages per rank, got {spr} "
                   "[torchtitan/distributed/pipeline_parallel.py pipeline_module_split]")
    # Module names: pipeline_module_split keeps the named children and deletes
    # the rest, silently ignoring names that match nothing.
    seen: list[int] = []
    for s, mods in enumerate(stages):
        beyond = [m for m in mods if re.fullmatch(r"layers\.(\d+)", m) and int(m.split(".")[1]) >= n_layers]
        if beyond:
            out.append(f"{where}.module_fqns_per_model_part[{s}]: {beyond[0]}..{beyond[-1]} ({len(beyond)} names) are "
                       f"not layers of the {n_layers}-layer model (ignored by pipeline_module_split)")
        for m in mods:
            mt = re.fullmatch(r"layers\.(\d+)", m)
            if mt:
                seen.append(int(mt.group(1)))
            elif m == "tok_embeddings":
                if s != 0:
                    out.append(f"{where}.module_fqns_per_model_part[{s}]: tok_embeddings must be in the first stage")
            elif m in ("norm", out_name):
                if s != len(stages) - 1:
                    out.append(f"{where}.module_fqns_per_model_part[{s}]: {m} must be in the last stage")
            else:
                out.append(f"{where}.module_fqns_per_model_part[{s}]: unknown module {m!r} (llama3 has "
                           f"tok_embeddings, layers.<i>, norm, {out_name}); pipeline_module_split ignores it")
    if stages:
        if "tok_embeddings" not in stages[0]:
            out.append(f"{where}.module_fqns_per_model_part: the first stage lacks tok_embeddings")
        for m in ("norm", out_name):
            if m not in stages[-1]:
                out.append(f"{where}.module_fqns_per_model_part: the last stage lacks {m}")
    if seen != list(range(n_layers)):
        out.append(f"{where}.module_fqns_per_model_part: the stages must hold layers.0 .. layers.{n_layers - 1} "
                   "once each, in order")
    return out, stages


def stage_layer_counts(stages: list[list[str]]) -> list[int]:
    return [sum(1 for m in mods if re.fullmatch(r"layers\.\d+", m)) for mods in stages]


def interleaved_rounds(schedule: str, n_mb: int, pp: int, where: str) -> list[str]:
    """torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B /
    ScheduleInterleavedZeroBubble __init__: rounds = max(1, n_mb // pp) must
    divide n_mb."""
    canon, _ = _schedule_kind(schedule)
    if canon in ("Interleaved1F1B", "InterleavedZeroBubble") and n_mb > 0:
        rounds = max(1, n_mb // pp)
        if n_mb % rounds != 0:
            return [f"{where}: {canon} needs the {n_mb} pipeline microbatches to be a multiple of the number of "
                    f"rounds {rounds} [torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B]"]
    return []


def expected_schedule(p: Plan) -> str | None:
    return {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B",
            "zb-v": "ZBVZeroBubble", "dualpipe-v": "DualPipeV",
            "interleaved-zb": "InterleavedZeroBubble"}.get(p.schedule)


def check_flavor(flavor: str, table: dict, p: Plan, where: str, source: str) -> list[str]:
    """The flavor's architecture must be the plan's model."""
    if flavor not in table:
        return [f"{where}: flavor {flavor!r} is not a llama3 flavor ({sorted(table)}) [{source}]"]
    if not p.model:
        return [f"plan: model {p.model_name!r} not found under models/ (set TRAINPLAN_DATA_DIR)"]
    f = table[flavor]
    out = []
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        if key in p.model and int(p.model[key]) != int(f[key]):
            out.append(f"{where}: flavor {flavor!r} has {key}={f[key]}, the plan's model {p.model_name} has "
                       f"{key}={p.model[key]} [{source}]")
    tied = bool(f.get("tied_embeddings", False))
    if bool(p.model.get("tied_embeddings", False)) != tied:
        out.append(f"{where}: flavor {flavor!r} has tied_embeddings={tied}, the plan's model has "
                   f"{p.model.get('tied_embeddings')} [{source}]")
    return out


def resolved_reshard(policy: str, pp: int) -> bool | None:
    """torchtitan/models/llama3/infra/parallelize.py apply_fsdp."""
    return {"always": True, "never": False, "default": pp <= 1}.get(policy)


def fidelity_degrees(p: Plan, rep: int, shard: int, cp: int, tp: int, pp: int, policy: str,
                     world: int, where: str,
                     reshard_src: str = "torchtitan/models/llama3/infra/parallelize.py apply_fsdp") -> list[str]:
    """The degrees must be the plan's (trainplan: planner/export/torchtitan_export.cc
    export_torchtitan maps ZeRO 2/3 to FSDP2 over dp_shard*cp ranks and ZeRO 0
    to DDP replicas)."""
    out = []
    if p.gpus and world != p.gpus:
        out.append(f"world size {world} but the plan has gpus={p.gpus}")
    for name, got, want in (("tensor_parallel_degree", tp, p.tp), ("pipeline_parallel_degree", pp, p.pp),
                            ("context_parallel_degree", cp, p.cp)):
        if got != want:
            out.append(f"{where}.{name} = {got}, the plan has {want}")
    if rep * shard != p.dp:
        out.append(f"{where}: data_parallel_replicate_degree({rep}) * data_parallel_shard_degree({shard}) = "
                   f"{rep * shard}, the plan has dp={p.dp}")
    if p.zero >= 2:
        if shard * cp != p.shard_degree:
            out.append(f"{where}: FSDP shards over dp_shard*cp = {shard * cp} ranks, the plan's ZeRO-{p.zero} "
                       f"shard group is {p.shard_degree}")
        want = p.zero == 3
        got = resolved_reshard(policy, pp)
        if shard * cp > 1 and got is not None and got != want:
            out.append(f"{where}.fsdp_reshard_after_forward = {policy!r} resolves to reshard_after_forward={got} "
                       f"with pp={pp}; ZeRO-{p.zero} needs {want} [{reshard_src}]")
    elif p.zero == 0 and (shard > 1 or cp > 1):
        out.append(f"{where}: dp_shard={shard}, cp={cp} shards parameters (FSDP2), the plan has zero 0")
    return out


# ---- TOML (release v0.2.2) ---------------------------------------------------------


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "str":
        return isinstance(value, str)
    if typ == "bool":
        return isinstance(value, bool)
    if typ == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if typ == "list[int]":
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if typ == "list[list[str]]":
        return isinstance(value, list) and all(isinstance(v, list) and all(isinstance(x, str) for x in v)
                                               for v in value)
    if typ == "list[str]|str":
        return isinstance(value, str) or _type_ok(value, "list[str]")
    return True


def _toml_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


def check_schema(doc: dict) -> list[str]:
    """Every table and key must exist at the release, with its type and choices.

    torchtitan/config/manager.py ConfigManager._dict_to_dataclass rejects
    unknown keys (ValueError "Invalid field names in ... data"), recursively.
    Types are not checked there (values reach the dataclasses as parsed), so a
    wrong type fails later where it is used; the annotations are
    torchtitan/config/job_config.py's."""
    rel = facts()["release"]
    sections = rel["sections"]
    tables = set(sections) | set(rel["table_only_sections"])
    removed = rel["removed_keys"]
    out: list[str] = []

    def walk(prefix: str, table: dict) -> None:
        for key, value in table.items():
            path = f"{prefix}.{key}" if prefix else key
            if path in tables:
                if not isinstance(value, dict):
                    out.append(f"{path}: expected a table, got {_toml_kind(value)} "
                               "[torchtitan/config/job_config.py JobConfig]")
                else:
                    walk(path, value)
                continue
            if not prefix:
                out.append(f"[{key}]: unknown section; torchtitan v0.2.2 rejects it (Invalid field names in "
                           "JobConfig) [torchtitan/config/manager.py ConfigManager._dict_to_dataclass]")
                continue
            spec = sections.get(prefix, {}).get("keys", {}).get(key)
            if spec is None:
                hint = f"; {removed[path]}" if path in removed else ""
                out.append(f"{path}: unknown key; torchtitan v0.2.2 rejects it (Invalid field names in "
                           f"{sections.get(prefix, {}).get('class', prefix)}){hint} "
                           "[torchtitan/config/manager.py ConfigManager._dict_to_dataclass]")
                continue
            typ = spec.get("type", "")
            if not _type_ok(value, typ):
                out.append(f"{path}: expected {spec.get('py_type', typ)}, got {_toml_kind(value)} {value!r} "
                           "[torchtitan/config/job_config.py]")
                continue
            if "choices" in spec and value not in spec["choices"]:
                out.append(f"{path} = {value!r}: not one of {spec['choices']} [torchtitan/config/job_config.py]")

    walk("", doc)
    return out


def _get(doc: dict, section: str, key: str) -> Any:
    """The effective value: the TOML's, else the release default."""
    node: Any = doc
    for part in section.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    if isinstance(node, dict) and key in node:
        return node[key]
    return facts()["release"]["sections"][section]["keys"][key].get("default")


def check_toml(text: str, plan: dict, world: int, warnings: list[str] | None = None) -> list[str]:
    """Problem lines for a torchtitan v0.2.2 TOML job config exported from plan."""
    warn = warnings if warnings is not None else []
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # torchtitan/config/manager.py ConfigManager._maybe_load_toml re-raises it.
        return [f"toml: {e} [torchtitan/config/manager.py ConfigManager._maybe_load_toml]"]
    out = check_schema(doc)
    if out:
        return out  # later checks read values of the right type only
    rel = facts()["release"]
    p = Plan(plan)
    out += plan_refusals(p)

    # Model: torchtitan/protocols/train_spec.py get_train_spec, llama3 flavors
    # from torchtitan/models/llama3/__init__.py llama3_args.
    name, flavor = _get(doc, "model", "name"), _get(doc, "model", "flavor")
    moe_layers = 0
    if name not in rel["model_names"]["values"]:
        out.append(f"model.name = {name!r}: TrainSpec is not registered [torchtitan/protocols/train_spec.py get_train_spec]")
    elif name in rel["moe_flavors"]:
        probs, moe_layers = check_moe_model(name, flavor, p, _get(doc, "parallelism", "pipeline_parallel_degree"),
                                            _get(doc, "parallelism", "context_parallel_degree"))
        out += probs
    elif name != "llama3":
        out.append(f"model.name = {name!r}: trainplan exports llama3 flavors and the MoE specs "
                   f"{sorted(k for k in rel['moe_flavors'] if k != 'source')} only")
    else:
        if p.model and p.model.get("moe"):
            out.append(f"model.name = 'llama3' is dense, the plan's model {p.model_name} has experts")
        out += check_flavor(flavor, rel["flavors"]["llama3"], p, "model.flavor",
                            "torchtitan/models/llama3/__init__.py llama3_args")
    if _get(doc, "model", "tokenizer_path"):
        # torchtitan/config/manager.py ConfigManager._validate_config
        warn.append("model.tokenizer_path is deprecated at v0.2.2 (copied into model.hf_assets_path with a warning)")
    # torchtitan/components/optimizer.py build_optimizers
    opt = _get(doc, "optimizer", "name")
    if opt not in rel["optimizer_names"]["values"]:
        out.append(f"optimizer.name = {opt!r}: not in {rel['optimizer_names']['values']} "
                   "[torchtitan/components/optimizer.py build_optimizers]")

    rep = _get(doc, "parallelism", "data_parallel_replicate_degree")
    shard_cfg = _get(doc, "parallelism", "data_parallel_shard_degree")
    cp = _get(doc, "parallelism", "context_parallel_degree")
    tp = _get(doc, "parallelism", "tensor_parallel_degree")
    pp = _get(doc, "parallelism", "pipeline_parallel_degree")
    probs, shard = parallel_dims(rep, shard_cfg, cp, tp, pp, world, "parallelism")
    out += probs
    if shard is None:
        return out
    policy = _get(doc, "parallelism", "fsdp_reshard_after_forward")
    # torchtitan/models/llama3/infra/parallelize.py parallelize_llama: DDP only
    # without other parallelism.
    if not (shard > 1 or cp > 1) and rep > 1 and world != rep:
        out.append(f"parallelism: data_parallel_replicate_degree {rep} without sharding is DDP, which torchtitan "
                   f"applies only when it is the only parallelism (world {world}): RuntimeError 'DDP has not "
                   "supported > 1D parallelism' [torchtitan/models/llama3/infra/parallelize.py parallelize_llama]")
    out += fidelity_degrees(p, rep, shard, cp, tp, pp, policy, world, "parallelism")
    out += expert_parallel(_get(doc, "parallelism", "expert_parallel_degree"),
                           _get(doc, "parallelism", "expert_tensor_parallel_degree"), shard, cp, tp, p, "parallelism")
    # expert_parallel_comm_backend (v0.2.2 job_config.py: "standard" | "deepep"); only deepseek_v3's
    # parallelize reads it ("DeepEP requires expert parallelism", "DeepEP with Expert Tensor Parallelism
    # (ETP) is not supported yet" [torchtitan/models/deepseek_v3/infra/parallelize.py]).
    backend = _get(doc, "parallelism", "expert_parallel_comm_backend")
    want = {"alltoall": "standard", "deepep": "deepep"}.get(p.moe_dispatcher)
    if want is None:
        out.append(f"plan: moe_dispatcher {p.moe_dispatcher!r} has no torchtitan v0.2.2 backend (standard, deepep)")
    elif backend != want:
        out.append(f"parallelism.expert_parallel_comm_backend = {backend!r}, the plan has moe_dispatcher "
                   f"{p.moe_dispatcher!r}")
    if backend == "deepep":
        if name != "deepseek_v3":
            out.append(f"parallelism.expert_parallel_comm_backend = 'deepep': {name} ignores it (v0.2.2 runs DeepEP "
                       "in deepseek_v3's and llama4's parallelize only)")
        if (_get(doc, "parallelism", "expert_parallel_degree") or 1) <= 1:
            out.append("parallelism.expert_parallel_comm_backend = 'deepep' needs expert_parallel_degree > 1: "
                       "'DeepEP requires expert parallelism (ep_degree > 1)' [torchtitan/models/deepseek_v3/infra/"
                       "parallelize.py]")
        if (_get(doc, "parallelism", "expert_tensor_parallel_degree") or 1) != 1:
            out.append("parallelism.expert_parallel_comm_backend = 'deepep' with expert_tensor_parallel_degree > 1: "
                       "'DeepEP with Expert Tensor Parallelism (ETP) is not supported yet'")
    if tp > 1 and not p.sp:
        # torchtitan/models/llama3/infra/parallelize.py apply_tp: always SequenceParallel norms.
        warn.append("parallelism.tensor_parallel_degree > 1 always shards norms over the sequence "
                    "(sequence parallelism); the plan has sp off")
    if _get(doc, "parallelism", "enable_async_tensor_parallel") and not (
            _get(doc, "compile", "enable") and "model" in _get(doc, "compile", "components")):
        out.append("parallelism.enable_async_tensor_parallel needs compile.enable with 'model' in compile.components "
                   "[torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp]")
    # Fidelity: async TP is the plan's tp_comm_overlap (simulated as micro-pipelined TP collectives).
    if bool(_get(doc, "parallelism", "enable_async_tensor_parallel")) != p.tp_comm_overlap:
        out.append(f"parallelism.enable_async_tensor_parallel = {bool(_get(doc, 'parallelism', 'enable_async_tensor_parallel'))}, "
                   f"the plan has tp_comm_overlap {'on' if p.tp_comm_overlap else 'off'}")
    # Fidelity: a plan simulated with --compile runs its model compiled.
    if p.compile and not (_get(doc, "compile", "enable") and "model" in _get(doc, "compile", "components")):
        out.append("the plan has compile on (simulated under torch.compile): compile.enable must be true with "
                   "'model' in compile.components")

    # Sequence: torchtitan/models/llama3/infra/parallelize.py parallelize_llama
    # asserts seq_len % ParallelDims.seq_len_divisor (tp * cp * 2) == 0.
    seq = _get(doc, "training", "seq_len")
    if seq % (tp * cp * 2) != 0:
        out.append(f"training.seq_len = {seq}: not divisible by tp*cp*2 = {tp * cp * 2} "
                   "[torchtitan/models/llama3/infra/parallelize.py parallelize_llama]")
    if p.seq and seq != p.seq:
        out.append(f"training.seq_len = {seq}, the plan has seq={p.seq}")

    # Batches: torchtitan/train.py Trainer.__init__ "verify batch sizes".
    local = _get(doc, "training", "local_batch_size")
    gbs = _get(doc, "training", "global_batch_size")
    bd = rep * shard
    if gbs < 0:
        gbs = local * bd
    accum = None
    if local < 1 or gbs <= 0 or gbs % (local * bd) != 0:
        out.append(f"training: global_batch_size {gbs} is not a multiple of local_batch_size {local} * "
                   f"dp_replicate*dp_shard {bd} [torchtitan/train.py Trainer.__init__]")
    else:
        accum = gbs // (local * bd)
    if gbs != p.gbs:
        out.append(f"training.global_batch_size = {gbs}, the plan has gbs={p.gbs}")

    # Precision, offload, recompute: trainplan's plan fields.
    want_param = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}.get(p.precision)
    got_param = _get(doc, "training", "mixed_precision_param")
    if want_param and got_param != want_param:
        out.append(f"training.mixed_precision_param = {got_param!r}, the plan has precision {p.precision}")
    # FP8: torchao float8 linears through the model converter registered as
    # "quantize.linear.float8" (components/quantization/float8.py; v0.1's
    # "float8" is not registered in v0.2.x: KeyError), the recipe in
    # [quantize.linear.float8] recipe_name (None = tensorwise), the output
    # layer kept in bf16 as trainplan simulates it.
    converters = _get(doc, "model", "converters") or []
    fp8_section = "quantize.linear.float8"
    if "float8" in converters:
        out.append("model.converters 'float8' is torchtitan v0.1's name; v0.2.x registers 'quantize.linear.float8'")
    if p.precision == "fp8":
        if "quantize.linear.float8" not in converters:
            out.append("the plan has precision fp8 but model.converters lacks 'quantize.linear.float8'")
        recipe = _get(doc, fp8_section, "recipe_name") or "tensorwise"
        if p.fp8_recipe and recipe != p.fp8_recipe:
            out.append(f"quantize.linear.float8.recipe_name = {recipe!r}, the plan has fp8_recipe {p.fp8_recipe}")
        if not any(f == "output" for f in (_get(doc, fp8_section, "filter_fqns") or [])):
            out.append("quantize.linear.float8.filter_fqns lacks 'output': the LM head would run in FP8, "
                       "trainplan simulates it in bf16")
        if _get(doc, fp8_section, "enable_fsdp_float8_all_gather") and recipe != "tensorwise":
            out.append("quantize.linear.float8.enable_fsdp_float8_all_gather needs the tensorwise recipe "
                       "[components/quantization/float8.py]")
    elif "quantize.linear.float8" in converters:
        out.append(f"model.converters has 'quantize.linear.float8' but the plan's precision is {p.precision}")
    if _get(doc, "training", "dtype") != "float32" and p.precision in ("bf16", "fp8"):
        out.append("training.dtype = 'bfloat16' trains without fp32 master weights; the plan's bf16 is mixed precision")
    offload = _get(doc, "training", "enable_cpu_offload")
    if p.offload in ("none", "params") and offload != (p.offload == "params"):
        out.append(f"training.enable_cpu_offload = {str(offload).lower()}, the plan has offload {p.offload}")
    # torchtitan/distributed/activation_checkpoint.py apply_ac and
    # _apply_ac_to_transformer_block.
    mode = _get(doc, "activation_checkpoint", "mode")
    if mode == "selective":
        opt_ac = _get(doc, "activation_checkpoint", "selective_ac_option")
        if not (opt_ac == "op" or opt_ac.isdigit()):
            out.append(f"activation_checkpoint.selective_ac_option = {opt_ac!r}: must be 'op' or a layer frequency "
                       "[torchtitan/distributed/activation_checkpoint.py _apply_ac_to_transformer_block]")
    if mode == "memory_budget" and not (_get(doc, "compile", "enable") and "model" in _get(doc, "compile", "components")):
        out.append("activation_checkpoint.mode = 'memory_budget' needs compile.enable with 'model' in "
                   "compile.components [torchtitan/distributed/activation_checkpoint.py apply_ac]")
    if p.recompute in ("none", "full", "selective") and mode != p.recompute:
        out.append(f"activation_checkpoint.mode = {mode!r}, the plan has recompute {p.recompute}"
                   + (" (the default mode is 'selective')" if "activation_checkpoint" not in doc else ""))

    n_layers = moe_layers or int(rel["flavors"]["llama3"].get(flavor, {}).get("layers", 0)) or (
        int(p.model["layers"]) if p.model else 0)
    if pp <= 1:
        if accum is not None and local != p.mbs:
            out.append(f"training.local_batch_size = {local}, the plan's micro-batch is mbs={p.mbs} "
                       f"(global / (local * dp) = {accum} accumulation steps; the plan has {p.microbatches})")
        return out

    # Pipeline: torchtitan/distributed/pipeline_parallel.py build_pipeline_schedule.
    schedule = _get(doc, "parallelism", "pipeline_parallel_schedule")
    mb = _get(doc, "parallelism", "pipeline_parallel_microbatch_size")
    n_mb = None
    if mb < 1 or local % mb != 0:
        out.append(f"parallelism: local_batch_size {local} is not divisible by pipeline_parallel_microbatch_size {mb} "
                   "[torchtitan/distributed/pipeline_parallel.py build_pipeline_schedule]")
    else:
        n_mb = local // mb
    if _get(doc, "parallelism", "pipeline_parallel_schedule_csv"):
        warn.append("parallelism.pipeline_parallel_schedule_csv is set: the schedule comes from that file")
    want_sched = expected_schedule(p)
    canon, _ = _schedule_kind(schedule)
    if want_sched and canon and canon != want_sched:
        out.append(f"parallelism.pipeline_parallel_schedule = {schedule!r}, the plan has schedule {p.schedule} "
                   f"({want_sched})")
    if mb != p.mbs:
        out.append(f"parallelism.pipeline_parallel_microbatch_size = {mb}, the plan has mbs={p.mbs}")
    if n_mb is not None and accum is not None:
        if accum != 1:
            out.append(f"training: {accum} gradient accumulation steps with pipeline parallelism run {accum} pipeline "
                       f"flushes of {n_mb} microbatches per step; the plan has one of {p.microbatches} "
                       f"(set local_batch_size = mbs * {p.microbatches} = {p.mbs * p.microbatches}) "
                       "[torchtitan/train.py Trainer.train_step]")
        elif n_mb != p.microbatches:
            out.append(f"training: {n_mb} pipeline microbatches per step, the plan has {p.microbatches}")
        out += interleaved_rounds(schedule, n_mb, pp, "parallelism")
    if canon == "DualPipeV":
        # torchtitan/distributed/dual_pipe_v.py get_dual_pipe_v_flag; PyTorch
        # ScheduleDualPipeV.__init__ (n_microbatches >= num_stages).
        ep_deg = _get(doc, "parallelism", "expert_parallel_degree")
        if (isinstance(ep_deg, int) and ep_deg > 1 and _get(doc, "parallelism", "pipeline_parallel_expert_parallel_overlap")
                and _get(doc, "activation_checkpoint", "mode") != "none"):
            out.append("DualPipeV with expert parallelism and activation_checkpoint.mode != 'none': torchtitan raises "
                       "NotImplementedError [torchtitan/distributed/dual_pipe_v.py get_dual_pipe_v_flag]")
        if n_mb is not None and n_mb < 2 * pp:
            out.append(f"DualPipeV: {n_mb} microbatches < {2 * pp} stages [torch/distributed/pipelining/schedules.py "
                       "ScheduleDualPipeV: requires at least as many microbatches as stages]")
    no_compile = facts()["release"]["schedules_detail"]["no_compile"]
    if canon in no_compile and _get(doc, "compile", "enable") and "model" in _get(doc, "compile", "components"):
        out.append(f"parallelism.pipeline_parallel_schedule = {schedule!r} with compile.enable: {canon} splits the "
                   f"backward into input and weight passes, which PyTorch refuses on compiled stages "
                   f"[{facts()['release']['schedules_detail']['no_compile_source']}]")
    fqns = doc.get("parallelism", {}).get("module_fqns_per_model_part")
    probs, stages = pipeline_stages(
        pp, schedule, n_layers, _get(doc, "parallelism", "pipeline_parallel_layers_per_stage"), fqns,
        _get(doc, "parallelism", "pipeline_parallel_first_stage_less_layers"),
        _get(doc, "parallelism", "pipeline_parallel_last_stage_less_layers"),
        facts()["release"]["module_names"]["output"], "parallelism")
    out += probs
    if stages is not None:
        got = stage_layer_counts(stages)
        if n_mb is not None and n_mb < len(stages):
            # build_pipeline_schedule only warns.
            warn.append(f"{n_mb} microbatches < {len(stages)} stages: torchtitan warns of a pipeline bubble")
        if p.virtual_stages and got != p.virtual_stages:
            out.append(f"parallelism: the config produces pipeline stages of {got} transformer layers, the plan has "
                       f"{p.virtual_stages} (pp={p.pp} vp={p.vp}) "
                       "[torchtitan/distributed/pipeline_parallel.py pipeline_llm]")
    return out


# ---- Python config (head) ----------------------------------------------------------

class _Unknown:
    """A value the checker cannot see (inherited from a registry function)."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"<unknown: {self.why}>"


class _Obj:
    """An instance of a torchtitan config class: its name and the fields set."""

    def __init__(self, cls: str, fields: dict[str, Any], inherited: str | None = None):
        self.cls = cls
        self.fields = fields
        self.inherited = inherited  # fields not set come from this registry function


# Renamed or removed names, with the head replacement (tests/data/frameworks/
# torchtitan.json head.equivalents).
_HEAD_RENAMED = {
    "local_batch_size": "TrainingConfig.num_tokens_per_microbatch_per_dp_rank (mbs * seq)",
    "global_batch_size": "TrainingConfig.num_tokens_per_train_step (gbs * seq)",
    "seq_len": "TrainingConfig.max_context_length",
    "pipeline_parallel_microbatch_size": "ParallelismConfig.num_pp_microbatches (a count)",
    "pipeline_parallel_split_points": "ParallelismConfig.module_fqns_per_model_part",
    "enable_async_tensor_parallel": "CompileConfig.enable_async_tensor_parallel",
    "mode": "activation_checkpoint = FullAC.Config() | SelectiveAC.Config() | None",
}

# Classes whose keyword arguments the checker validates, by the names used in
# a config file; fields from torchtitan.json head.classes.
_HEAD_CLASSES = {
    "Trainer.Config": "Trainer.Config",
    "TrainingConfig": "TrainingConfig",
    "ParallelismConfig": "ParallelismConfig",
    "CompileConfig": "CompileConfig",
    "LRSchedulersContainer.Config": "LRSchedulersContainer.Config",
    "OptimizersContainer.Config": "OptimizersContainer.Config",
    "ParamGroupConfig": "ParamGroupConfig",
    "SelectiveAC.Config": "SelectiveAC.Config",
    "FullAC.Config": "FullAC.Config",
    "MemoryBudgetAC.Config": "MemoryBudgetAC.Config",
}
_AC_BASE = "ActivationCheckpointing.Config"
# Trainer.Config fields holding one of the classes above.
_TRAINER_FIELD_CLASS = {"training": "TrainingConfig", "parallelism": "ParallelismConfig",
                        "compile": "CompileConfig", "lr_scheduler": "LRSchedulersContainer.Config",
                        "optimizer": "OptimizersContainer.Config"}
# torchtitan/models/llama3/config_registry.py functions and their flavor.
_REGISTRY_BASES = {"llama3_debugmodel": "debugmodel", "llama3_8b": "8B", "llama3_70b": "70B",
                   "llama3_405b": "405B"}


def _head_fields(cls: str) -> dict[str, dict]:
    classes = facts()["head"]["classes"]
    fields = dict(classes[cls]["fields"])
    if cls in ("SelectiveAC.Config", "FullAC.Config", "MemoryBudgetAC.Config"):
        fields = {**classes[_AC_BASE]["fields"], **fields}
    return fields


def _head_default(cls: str, field: str) -> Any:
    d = _head_fields(cls)[field]["default"]
    try:
        return ast.literal_eval(d) if d is not None else None
    except (ValueError, SyntaxError):
        return _Unknown(f"default {d}")


class _Interp:
    """Evaluates the statements of a config function that trainplan-style
    configs use: constants, arithmetic, constructor calls of known config
    classes, model_registry(...), default_adamw(...), registry functions, and
    attribute assignments to the config."""

    def __init__(self, problems: list[str], registry_module: str | None = None):
        self.env: dict[str, Any] = {}
        self.problems = problems
        # The module model_registry was imported from (llama3 or an MoE model).
        self.registry_family = registry_module.split(".")[-1] if registry_module else "llama3"

    def call_name(self, node: ast.AST) -> str:
        return ast.unparse(node)

    def eval(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.eval(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.eval(node.operand)
            return -v if isinstance(v, (int, float)) else _Unknown(ast.unparse(node))
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                x = self.eval(v.value) if isinstance(v, ast.FormattedValue) else self.eval(v)
                if isinstance(x, _Unknown):
                    return x
                parts.append(str(x))
            return "".join(parts)
        if isinstance(node, ast.ListComp) and len(node.generators) == 1 and not node.generators[0].ifs \
                and isinstance(node.generators[0].target, ast.Name):
            gen = node.generators[0]
            seq = self.eval(gen.iter)
            if not isinstance(seq, list):
                return _Unknown(ast.unparse(node))
            saved = self.env.get(gen.target.id, None)
            items = []
            for x in seq:
                self.env[gen.target.id] = x
                items.append(self.eval(node.elt))
            if saved is None:
                self.env.pop(gen.target.id, None)
            else:
                self.env[gen.target.id] = saved
            return items
        if isinstance(node, ast.BinOp):
            a, b = self.eval(node.left), self.eval(node.right)
            if isinstance(a, list) and isinstance(b, list) and isinstance(node.op, ast.Add):
                return a + b
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
                       ast.FloorDiv: lambda: a // b, ast.Div: lambda: a / b}
                if type(node.op) in ops:
                    return ops[type(node.op)]()
            return _Unknown(ast.unparse(node))
        if isinstance(node, ast.Name):
            return self.env.get(node.id, _Unknown(node.id))
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value)
            if isinstance(base, _Obj):
                return base.fields.get(node.attr, _Unknown(ast.unparse(node)))
            return _Unknown(ast.unparse(node))
        if isinstance(node, ast.Call):
            return self.eval_call(node)
        return _Unknown(ast.unparse(node))

    def eval_call(self, node: ast.Call) -> Any:
        name = self.call_name(node.func)
        short = name.split(".")[-1]
        if name == "range" and not node.keywords and 1 <= len(node.args) <= 3:
            args = [self.eval(a) for a in node.args]
            if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
                return list(range(*args))
            return _Unknown(ast.unparse(node))
        if name in _HEAD_CLASSES:
            cls = _HEAD_CLASSES[name]
            known = _head_fields(cls)
            fields: dict[str, Any] = {}
            if node.args:
                self.problems.append(f"{name}(...): positional arguments; the config classes are keyword-only "
                                     "(@dataclass(kw_only=True)) [torchtitan/config/configs.py]")
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                if kw.arg not in known:
                    hint = f"; use {_HEAD_RENAMED[kw.arg]}" if kw.arg in _HEAD_RENAMED else ""
                    self.problems.append(f"{name}({kw.arg}=...): no such field, TypeError at head{hint} "
                                         f"[{facts()['head']['classes'][cls]['file']}]")
                    continue
                fields[kw.arg] = self.eval(kw.value)
            return _Obj(cls, fields)
        if short == "model_registry" or name.endswith(".model_registry"):
            flavor = self.eval(node.args[0]) if node.args else None
            attn = comm = None
            for kw in node.keywords:
                if kw.arg == "flavor":
                    flavor = self.eval(kw.value)
                if kw.arg == "attn_backend":
                    attn = self.eval(kw.value)
                if kw.arg == "moe_comm_backend":
                    comm = self.eval(kw.value)
            return _Obj("ModelSpec", {"flavor": flavor, "family": self.registry_family, "attn_backend": attn,
                                      "moe_comm_backend": comm})
        if short == "default_adamw" or name.endswith(".default_adamw"):
            # torchtitan/components/optimizer/optimizer.py default_adamw
            return _Obj("OptimizersContainer.Config", {"param_groups": _Unknown("default_adamw")})
        if name.split(".")[-1] in _REGISTRY_BASES and not node.args:
            base = name.split(".")[-1]
            why = f"inherited from {base}()"
            fields: dict[str, Any] = {f: _Unknown(why) for f in _head_fields("Trainer.Config")}
            for f, cls in _TRAINER_FIELD_CLASS.items():
                fields[f] = _Obj(cls, {}, inherited=why)
            fields["model_spec"] = _Obj("ModelSpec", {"flavor": _REGISTRY_BASES[base]})
            return _Obj("Trainer.Config", fields, inherited=why)
        return _Unknown(f"{name}()")

    def assign(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            return
        if isinstance(target, ast.Attribute):
            owner = self.eval(target.value)
            if isinstance(owner, _Obj):
                if owner.cls in facts()["head"]["classes"] or owner.cls in _HEAD_CLASSES.values():
                    known = _head_fields(owner.cls)
                    if target.attr not in known:
                        hint = f"; use {_HEAD_RENAMED[target.attr]}" if target.attr in _HEAD_RENAMED else ""
                        self.problems.append(
                            f"{ast.unparse(target)} = ...: {owner.cls} has no field {target.attr!r} "
                            f"(slots dataclass: AttributeError){hint} [{facts()['head']['classes'][owner.cls]['file']}]")
                        return
                owner.fields[target.attr] = value
            elif isinstance(owner, _Unknown):
                self.problems.append(f"{ast.unparse(target)} = ...: cannot follow {owner.why}")

    def run(self, body: list[ast.stmt]) -> Any:
        for st in body:
            if isinstance(st, ast.Assign):
                v = self.eval(st.value)
                for t in st.targets:
                    self.assign(t, v)
            elif isinstance(st, ast.AnnAssign) and st.value is not None:
                self.assign(st.target, self.eval(st.value))
            elif isinstance(st, ast.Return):
                return self.eval(st.value) if st.value is not None else None
            elif isinstance(st, (ast.Expr, ast.Pass, ast.Assert)):
                continue
            else:
                self.problems.append(f"line {st.lineno}: statement the checker does not follow: "
                                     f"{ast.unparse(st).splitlines()[0]}")
        return None


def _field(obj: _Obj, cls: str, name: str) -> Any:
    """A field of a config object: set, or the class default at head."""
    if name in obj.fields:
        return obj.fields[name]
    if obj.inherited:
        return _Unknown(obj.inherited)
    return _head_default(cls, name)


def check_python_config(text: str, plan: dict, world: int, function: str | None = None,
                        warnings: list[str] | None = None) -> list[str]:
    """Problem lines for a torchtitan-head Python config (a function returning
    Trainer.Config, selected with --module/--config; torchtitan/config/manager.py
    ConfigManager._load_config) exported from plan."""
    warn = warnings if warnings is not None else []
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return [f"python: {e}"]
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)
           and n.returns is not None and ast.unparse(n.returns) == "Trainer.Config"]
    if function:
        fns = [n for n in fns if n.name == function]
    if not fns:
        return ["python: no function returning Trainer.Config (--config names one) "
                "[torchtitan/config/manager.py ConfigManager._load_config]"]
    fn = fns[0]
    out: list[str] = []
    if fn.args.args or fn.args.kwonlyargs:
        out.append(f"def {fn.name}: --config calls it with no arguments [torchtitan/config/manager.py _load_config]")
    # Imports: names used must come from the head modules (torchtitan.json head.imports).
    imports = facts()["head"]["imports"]
    moe_reg = facts()["head"]["moe_registries"]
    registry_modules = [imports["model_registry"]] + [v["module"] for k, v in moe_reg.items() if k != "source"]
    registry_module = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchtitan"):
            for a in node.names:
                if a.name == "model_registry":
                    registry_module = node.module
                    if node.module not in registry_modules:
                        out.append(f"from {node.module} import model_registry: head defines it in "
                                   f"{', '.join(registry_modules)}")
                    continue
                want = imports.get(a.name)
                if want and not want.startswith(node.module) and node.module not in want:
                    out.append(f"from {node.module} import {a.name}: it lives in {want} at head")
    it = _Interp(out, registry_module)
    for node in tree.body:  # module-level constants (SEQ = 8192)
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            v = it.eval(node.value)
            if isinstance(v, (int, float, str, bool, list)):
                for t in node.targets:
                    it.env[t.id] = v
    cfg = it.run(fn.body)
    if not isinstance(cfg, _Obj) or cfg.cls != "Trainer.Config":
        out.append(f"def {fn.name}: does not return a Trainer.Config the checker can follow")
        return out
    p = Plan(plan)
    out += plan_refusals(p)

    def obj(field: str) -> _Obj | _Unknown:
        v = cfg.fields.get(field)
        if v is None and field in _TRAINER_FIELD_CLASS:
            return _Obj(_TRAINER_FIELD_CLASS[field], {})
        return v if isinstance(v, (_Obj, _Unknown)) else _Unknown(f"{field} = {v!r}")

    def need(field: str) -> _Obj | None:
        v = obj(field)
        if isinstance(v, _Unknown):
            out.append(f"config.{field}: not set explicitly ({v.why}); set it from the plan")
            return None
        return v


    # Model: torchtitan/models/llama3/__init__.py model_registry / llama3_configs.
    ms = cfg.fields.get("model_spec")
    if not isinstance(ms, _Obj) or ms.cls != "ModelSpec":
        out.append("config.model_spec: not a model_registry(<flavor>) the checker can read "
                   "[torchtitan/models/llama3/__init__.py model_registry]")
        n_layers = int(p.model["layers"]) if p.model else 0
    elif ms.fields.get("family") in moe_reg:
        family = ms.fields["family"]
        probs, n_layers = check_head_moe_model(family, ms.fields.get("flavor"), p)
        out += probs
        n_layers = n_layers or (int(p.model["layers"]) if p.model else 0)
    else:
        if p.model and p.model.get("moe"):
            out.append(f"config.model_spec: a llama3 model_registry, the plan's model {p.model_name} has experts "
                       "(import model_registry from its MoE model: " +
                       ", ".join(v["module"] for k, v in moe_reg.items() if k != "source") + ")")
        head_flavors = facts()["head"]["model_registry"]["flavors"]
        out += check_flavor(ms.fields.get("flavor"), head_flavors, p, "model_registry",
                            "torchtitan/models/llama3/__init__.py llama3_configs")
        n_layers = int(head_flavors.get(ms.fields.get("flavor"), {}).get("layers", 0)) or (
            int(p.model["layers"]) if p.model else 0)

    par, tr, comp = need("parallelism"), need("training"), obj("compile")
    if par is None or tr is None:
        return out
    g = lambda o, c, f: _field(o, c, f)  # noqa: E731
    vals = {f: g(par, "ParallelismConfig", f) for f in _head_fields("ParallelismConfig")}
    tvals = {f: g(tr, "TrainingConfig", f) for f in _head_fields("TrainingConfig")}
    cvals = ({f: g(comp, "CompileConfig", f) for f in _head_fields("CompileConfig")}
             if isinstance(comp, _Obj) else {})
    unknown = [f"ParallelismConfig.{k} ({v.why})" for k, v in vals.items() if isinstance(v, _Unknown)] + \
              [f"TrainingConfig.{k} ({v.why})" for k, v in tvals.items() if isinstance(v, _Unknown)]
    if unknown:
        out.append(f"values the checker cannot evaluate (set them explicitly): {', '.join(unknown)}")
        return out
    n_typed = len(out)
    # Types and choices: the annotations of torchtitan/config/configs.py.
    for cls, vs in (("ParallelismConfig", vals), ("TrainingConfig", tvals), ("CompileConfig", cvals)):
        for k, v in vs.items():
            if isinstance(v, _Unknown):
                continue  # inherited CompileConfig values; their users check them
            ann = _head_fields(cls)[k]["type"]
            m = re.fullmatch(r"Literal\[(.*)\]", ann)
            if m:
                choices = [ast.literal_eval(x.strip()) for x in m.group(1).split(",")]
                if v not in choices:
                    out.append(f"{cls}.{k} = {v!r}: not one of {choices} [torchtitan/config/configs.py]")
                continue
            base = [t.strip() for t in ann.split("|") if t.strip() != "None"]
            typ = {"int": "int", "bool": "bool", "str": "str", "float | int": "float",
                   "list[str]": "list[str]", "list[list[str]]": "list[list[str]]"}.get(" | ".join(base))
            if typ and not (v is None and "None" in ann) and not _type_ok(v, typ):
                out.append(f"{cls}.{k} = {v!r}: expected {ann} [torchtitan/config/configs.py]")
    if len(out) > n_typed:
        return out  # later checks read values of the right type only

    rep, shard_cfg = vals["data_parallel_replicate_degree"], vals["data_parallel_shard_degree"]
    cp, tp, pp = vals["context_parallel_degree"], vals["tensor_parallel_degree"], vals["pipeline_parallel_degree"]
    probs, shard = parallel_dims(rep, shard_cfg, cp, tp, pp, world, "ParallelismConfig")
    out += probs
    if shard is None:
        return out
    # torchtitan/distributed/parallel_dims.py ParallelDims._validate: ep | dp_shard*cp*tp.
    ep = vals["expert_parallel_degree"]
    if (shard * cp * tp) % ep != 0:
        out.append("ParallelismConfig.expert_parallel_degree must divide dp_shard*cp*tp "
                   "[torchtitan/distributed/parallel_dims.py ParallelDims._validate]")
    # Head has no expert tensor parallelism (facts head.rules.expert_parallel): etp is 1.
    out += expert_parallel(ep, 1, shard, cp, tp, p, "ParallelismConfig")
    if isinstance(ms, _Obj) and ms.fields.get("family") in moe_reg:
        experts = int(moe_reg[ms.fields["family"]]["flavors"].get(ms.fields.get("flavor"), {}).get("experts", 0))
        if experts and experts % ep != 0:
            out.append(f"ParallelismConfig.expert_parallel_degree = {ep} does not divide the {experts} experts "
                       "[torchtitan/models/common/decoder.py]")
        # model_registry(moe_comm_backend=...): models/common/config_utils.py make_token_dispatcher_config
        # (standard | deepep | hybridep | minimal_async_ep); DeepEP, HybridEP "requires expert parallelism
        # (expert_parallel_degree > 1)" [token_dispatcher.py update_ep_token_dispatcher_config].
        comm = ms.fields.get("moe_comm_backend") or "standard"
        want = {"alltoall": "standard"}.get(p.moe_dispatcher, p.moe_dispatcher)
        if comm not in ("standard", "deepep", "hybridep", "minimal_async_ep"):
            out.append(f"model_registry(moe_comm_backend={comm!r}): Unknown comm_backend "
                       "[torchtitan/models/common/config_utils.py]")
        elif comm != want:
            out.append(f"model_registry(moe_comm_backend={comm!r}), the plan has moe_dispatcher {p.moe_dispatcher!r}")
        if comm in ("deepep", "hybridep", "minimal_async_ep") and ep <= 1:
            out.append(f"model_registry(moe_comm_backend={comm!r}) requires expert parallelism "
                       "(expert_parallel_degree > 1) [torchtitan/models/common/token_dispatcher.py]")
        if cp > 1:
            attn = ms.fields.get("attn_backend") or moe_reg[ms.fields["family"]]["attn_backend_default"]
            if attn != "flex":
                out.append(f"context_parallel_degree = {cp} with attn_backend {attn!r}: 'Context Parallel is not "
                           "supported with ScaledDotProductAttention or VarlenAttention. Use FlexAttention or "
                           "disable CP.' (pass attn_backend=\"flex\" to model_registry)")
    if ep > 1 and not tvals["disable_cuda_graphs"]:
        out.append("TrainingConfig.disable_cuda_graphs must be True with expert_parallel_degree > 1 on the standard "
                   "all-to-all [torchtitan/trainer.py Trainer.Config._validate_cuda_graphs]")
    # Head llama3 always applies FSDP2 (torchtitan/models/llama3/parallelize.py
    # apply_fsdp_to_decoder), so zero 0 is dp_replicate replicas of shard 1.
    out += fidelity_degrees(p, rep, shard, cp, tp, pp, vals["fsdp_reshard_after_forward"], world,
                            "ParallelismConfig", "torchtitan/distributed/fsdp.py (head)")
    if tp > 1 and vals["enable_sequence_parallel"] != p.sp:
        out.append(f"ParallelismConfig.enable_sequence_parallel = {vals['enable_sequence_parallel']}, the plan has "
                   f"sp {'on' if p.sp else 'off'}")
    # torchtitan/config/configs.py CompileConfig.__post_init__
    compiled = cvals.get("enable") is True and "model" in (cvals.get("components") or [])
    if isinstance(cvals.get("enable"), _Unknown) or isinstance(cvals.get("components"), _Unknown):
        compiled = None  # inherited from a registry function
    if cvals.get("enable_async_tensor_parallel") is True and compiled is False:
        out.append("CompileConfig.enable_async_tensor_parallel needs enable=True with 'model' in components "
                   "[torchtitan/config/configs.py CompileConfig.__post_init__]")
    if not isinstance(cvals.get("enable_async_tensor_parallel"), _Unknown) and \
            bool(cvals.get("enable_async_tensor_parallel")) != p.tp_comm_overlap:
        out.append(f"CompileConfig.enable_async_tensor_parallel = {cvals.get('enable_async_tensor_parallel')}, the "
                   f"plan has tp_comm_overlap {'on' if p.tp_comm_overlap else 'off'}")
    if p.compile and compiled is False:
        out.append("the plan has compile on (simulated under torch.compile): CompileConfig needs enable=True with "
                   "'model' in components")

    # Tokens: torchtitan/trainer.py Trainer.__init__.
    tok_mb = tvals["num_tokens_per_microbatch_per_dp_rank"]
    divisor = (tp if vals["enable_sequence_parallel"] else 1) * (2 * cp if cp > 1 else 1)
    if tok_mb % divisor != 0:
        out.append(f"TrainingConfig.num_tokens_per_microbatch_per_dp_rank = {tok_mb}: not divisible by {divisor} "
                   "(tp with sequence parallel * 2*cp) [torchtitan/trainer.py Trainer.__init__]")
    # torchtitan/trainer.py Trainer.Config.__post_init__
    n_mb = vals["num_pp_microbatches"] if pp > 1 else 1
    if vals["num_pp_microbatches"] <= 0:
        out.append("ParallelismConfig.num_pp_microbatches must be > 0 [torchtitan/trainer.py Trainer.Config.__post_init__]")
        return out
    bd = rep * shard
    step = tvals["num_tokens_per_train_step"]
    if step < 0:
        step = tok_mb * n_mb * bd
    accum = None
    if step % (tok_mb * n_mb * bd) != 0:
        out.append(f"TrainingConfig.num_tokens_per_train_step = {step}: not divisible by tokens per accumulation "
                   f"iteration {tok_mb * n_mb * bd} [torchtitan/trainer.py Trainer.__init__]")
    else:
        accum = step // (tok_mb * n_mb * bd)
    if p.seq:
        if tvals["max_context_length"] != p.seq:
            out.append(f"TrainingConfig.max_context_length = {tvals['max_context_length']}, the plan has seq={p.seq}")
        if tok_mb != p.mbs * p.seq:
            out.append(f"TrainingConfig.num_tokens_per_microbatch_per_dp_rank = {tok_mb}, the plan has mbs*seq = "
                       f"{p.mbs * p.seq}")
        if step != p.gbs * p.seq:
            out.append(f"TrainingConfig.num_tokens_per_train_step = {step}, the plan has gbs*seq = {p.gbs * p.seq}")
    want_param = {"bf16": "bfloat16", "fp32": "float32"}.get(p.precision)
    if want_param and tvals["mixed_precision_param"] != want_param:
        out.append(f"TrainingConfig.mixed_precision_param = {tvals['mixed_precision_param']!r}, the plan has "
                   f"precision {p.precision}")
    if p.offload in ("none", "params") and tvals["enable_cpu_offload"] != (p.offload == "params"):
        out.append(f"TrainingConfig.enable_cpu_offload = {tvals['enable_cpu_offload']}, the plan has offload {p.offload}")

    # Activation checkpointing: torchtitan/distributed/activation_checkpoint.py
    # ActivationCheckpointingConfig; None disables it.
    ac = cfg.fields.get("activation_checkpoint", _Unknown("default SelectiveAC.Config()")) \
        if "activation_checkpoint" in cfg.fields else _Obj("SelectiveAC.Config", {})
    if isinstance(ac, _Unknown):
        out.append(f"config.activation_checkpoint: not set explicitly ({ac.why}); set it from the plan")
    else:
        got = "none" if ac is None else {"SelectiveAC.Config": "selective", "FullAC.Config": "full",
                                         "MemoryBudgetAC.Config": "memory_budget"}.get(getattr(ac, "cls", ""), "?")
        if got == "?":
            out.append("config.activation_checkpoint: not SelectiveAC.Config(), FullAC.Config(), "
                       "MemoryBudgetAC.Config() or None [torchtitan/distributed/activation_checkpoint.py]")
        elif p.recompute in ("none", "full", "selective") and got != p.recompute:
            out.append(f"config.activation_checkpoint is {got}, the plan has recompute {p.recompute}")
        if got == "memory_budget" and not compiled:
            out.append("MemoryBudgetAC.Config needs compile enabled for 'model'"
                       + (" (config.compile is inherited; set it)" if compiled is None else "")
                       + " [torchtitan/trainer.py Trainer.Config.__post_init__]")

    if pp <= 1:
        if accum is not None and accum != p.microbatches:
            out.append(f"{accum} gradient accumulation steps, the plan has {p.microbatches}")
        return out
    # torchtitan/trainer.py Trainer.Config._validate_cuda_graphs
    if not tvals["disable_cuda_graphs"]:
        out.append("TrainingConfig.disable_cuda_graphs must be True with pipeline parallelism (ValueError "
                   "'CUDA graphs do not support pipeline parallelism yet') [torchtitan/trainer.py Trainer.Config._validate_cuda_graphs]")
    schedule = vals["pipeline_parallel_schedule"]
    want_sched = expected_schedule(p)
    canon, _ = _schedule_kind(schedule)
    if want_sched and canon and canon != want_sched:
        out.append(f"ParallelismConfig.pipeline_parallel_schedule = {schedule!r}, the plan has schedule {p.schedule}")
    if accum is not None:
        if accum != 1:
            out.append(f"{accum} gradient accumulation steps with pipeline parallelism run {accum} pipeline flushes; "
                       f"the plan has one flush of {p.microbatches} microbatches (num_pp_microbatches = {p.microbatches})")
        elif n_mb != p.microbatches:
            out.append(f"ParallelismConfig.num_pp_microbatches = {n_mb}, the plan has {p.microbatches}")
        out += interleaved_rounds(schedule, n_mb, pp, "ParallelismConfig")
    probs, stages = pipeline_stages(
        pp, schedule, n_layers, vals["pipeline_parallel_layers_per_stage"], vals["module_fqns_per_model_part"],
        vals["pipeline_parallel_first_stage_less_layers"], vals["pipeline_parallel_last_stage_less_layers"],
        facts()["head"]["module_names"]["output"], "ParallelismConfig")
    out += probs
    if stages is not None:
        got = stage_layer_counts(stages)
        if n_mb < len(stages):
            warn.append(f"{n_mb} microbatches < {len(stages)} stages: torchtitan warns of a pipeline bubble")
        if p.virtual_stages and got != p.virtual_stages:
            out.append(f"ParallelismConfig: the config produces pipeline stages of {got} transformer layers, the "
                       f"plan has {p.virtual_stages} (pp={p.pp} vp={p.vp}) "
                       "[torchtitan/distributed/pipeline_parallel.py _get_pipeline_metadata]")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="plan JSON the config was exported from")
    ap.add_argument("--file", required=True, help="torchtitan TOML (v0.2.2) or Python config (head)")
    ap.add_argument("--world", type=int, required=True, help="number of ranks (torchrun WORLD_SIZE)")
    ap.add_argument("--format", choices=["toml", "python"], help="default: by the file's extension")
    ap.add_argument("--config", help="Python format: the function name (--config of torchtitan)")
    a = ap.parse_args(argv)
    with open(a.plan, encoding="utf-8") as f:
        plan = json.load(f)
    with open(a.file, encoding="utf-8") as f:
        text = f.read()
    fmt = a.format or ("python" if a.file.endswith(".py") else "toml")
    warns: list[str] = []
    if fmt == "toml":
        problems = check_toml(text, plan, a.world, warnings=warns)
    else:
        problems = check_python_config(text, plan, a.world, function=a.config, warnings=warns)
    for w in warns:
        print(f"warning: {w}")
    for line in problems:
        print(line)
    if not problems:
        print(f"OK: {a.file} loads in torchtitan "
              f"{'v0.2.2' if fmt == 'toml' else 'head ' + facts()['head']['commit'][:9]} and reproduces the plan")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
