// The PyTorch export: an FSDP2 / DDP training script
// (torch.distributed.fsdp.fully_shard, DeviceMesh,
// torch.distributed.tensor.parallel, DistributedDataParallel).
#include "planner/export/export_common.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"
#include "simulator/framework/framework.h"
#include "simulator/network/collective_model.h"
#include "simulator/spec/pipeline_layout.h"

namespace trainplan {
namespace export_detail {

namespace {

// The body of the FSDP script; the constants above it come from the plan.
constexpr const char* kFsdpScriptBody = R"PY(DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
FSDP = ZERO >= 2 and DP > 1


def rope_table(seq, head_dim, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    return torch.stack((angles.cos(), angles.sin()))  # [2, seq, head_dim / 2]


def apply_rope(x, table):
    # x: [batch, seq, heads, head_dim]; rotates the pairs (x[2i], x[2i+1]).
    cos = table[0].to(x.dtype)[None, :, None, :]
    sin = table[1].to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def make_norm():
    return nn.LayerNorm(HIDDEN, bias=True) if BIAS else nn.RMSNorm(HIDDEN, eps=1e-5)


def core_attention(q, k, v, training):
    # q, k, v: [batch, heads, seq, head_dim]; causal.
    p = DROPOUT if training else 0.0
    if ATTENTION == "flash":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    probs = F.dropout(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1), p)
    return probs @ v


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.wq = nn.Linear(HIDDEN, HEADS * self.head_dim, bias=BIAS)
        self.wk = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=BIAS)
        self.wv = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=BIAS)
        self.wo = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=BIAS)

    def forward(self, x, rope):
        b, s, _ = x.shape
        # -1: the heads of this tensor-parallel rank.
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        if POSITIONS == "rope":
            q, k = apply_rope(q, rope[:, :s]), apply_rope(k, rope[:, :s])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if q.shape[1] != k.shape[1]:  # grouped-query attention
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        if RECOMPUTE == "selective":
            o = checkpoint(core_attention, q, k, v, self.training, use_reentrant=False)
        else:
            o = core_attention(q, k, v, self.training)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, FFN_HIDDEN, bias=BIAS)
        self.w2 = nn.Linear(FFN_HIDDEN, HIDDEN, bias=BIAS)
        self.w3 = nn.Linear(HIDDEN, FFN_HIDDEN, bias=BIAS) if MLP == "swiglu" else None

    def forward(self, x):
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = make_norm()
        self.attention = Attention()
        self.ffn_norm = make_norm()
        self.feed_forward = FeedForward()

    def forward(self, x, rope):
        # Full recompute inside the block, so that FSDP2 has gathered the
        # block's parameters when backward replays its forward.
        if RECOMPUTE == "full":
            return checkpoint(self.layer, x, rope, use_reentrant=False)
        return self.layer(x, rope)

    def layer(self, x, rope):
        h = x + F.dropout(self.attention(self.attention_norm(x), rope), DROPOUT, self.training)
        return h + F.dropout(self.feed_forward(self.ffn_norm(h)), DROPOUT, self.training)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.pos_embeddings = nn.Embedding(SEQ, HIDDEN) if POSITIONS == "learned" else None
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = make_norm()
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)
        if TIED_EMBEDDINGS:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("rope", torch.empty(2, SEQ, HIDDEN // HEADS // 2), persistent=False)

    @torch.no_grad()
    def init_weights(self):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
            if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
                nn.init.ones_(m.weight)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        self.rope.copy_(rope_table(SEQ, HIDDEN // HEADS))

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(torch.arange(tokens.shape[1], device=tokens.device))
        x = F.dropout(x, DROPOUT, self.training)
        for block in self.layers:
            x = block(x, self.rope)
        return self.output(self.norm(x))


def apply_tensor_parallel(model, tp_mesh):
    # torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py):
    # column-parallel in, row-parallel out; with SP the norms and residuals
    # are sharded over the sequence between the blocks.
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    between = Shard(1) if SP else Replicate()
    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
        "output": ColwiseParallel(input_layouts=between, output_layouts=Replicate()),
    }
    if SP:
        plan["norm"] = SequenceParallel()
    parallelize_module(model, tp_mesh, plan)
    for block in model.layers:
        plan = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=between),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=between),
        }
        if MLP == "swiglu":
            plan["feed_forward.w3"] = ColwiseParallel()
        if SP:
            plan["attention_norm"] = SequenceParallel()
            plan["attention"] = PrepareModuleInput(
                input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
            )
            plan["ffn_norm"] = SequenceParallel()
            plan["feed_forward"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
        parallelize_module(block, tp_mesh, plan)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    if world != DP * TP:
        raise SystemExit(f"this plan needs {DP * TP} processes, torchrun started {world}")
    torch.manual_seed(0)

    # Ranks: tp innermost (one node's NVLink), then the data-parallel dims.
    if FSDP:
        dims = [("dp_replicate", REPLICATE), ("dp_shard", SHARD), ("tp", TP)]
    else:
        dims = [("dp", DP), ("tp", TP)]
    dims = [(name, size) for name, size in dims if size > 1 or name == "dp_shard"]
    mesh = None
    if dims:
        mesh = init_device_mesh(
            "cuda", tuple(size for _, size in dims), mesh_dim_names=tuple(name for name, _ in dims)
        )

    with torch.device("meta"):
        model = Transformer()
    if TP > 1:
        apply_tensor_parallel(model, mesh["tp"])
    if FP8_RECIPE:
        # torchao float8 training: every linear of the blocks in FP8, the
        # output layer in bf16 (as simulated), before fully_shard so that
        # FSDP2 all-gathers tensorwise weights in FP8.
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        if FP8_RECIPE == "tensorwise":
            fp8_config = Float8LinearConfig(enable_fsdp_float8_all_gather=FSDP)
        else:
            fp8_config = Float8LinearConfig.from_recipe_name(FP8_RECIPE)
        convert_to_float8_training(
            model,
            config=fp8_config,
            module_filter_fn=lambda mod, fqn: fqn != "output" and mod.in_features % 16 == 0 and mod.out_features % 16 == 0,
        )
    if COMPILE:
        # Each block compiled in place (nn.Module.compile keeps the parameter
        # names), before sharding, as torchtitan's apply_compile does.
        for block in model.layers:
            block.compile()
    dtype = DTYPES[PRECISION]
    if FSDP:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        dp_names = tuple(name for name, _ in dims if name.startswith("dp"))
        # A 2-D mesh is HSDP: replicate over dim 0, shard over dim 1.
        dp_mesh = mesh[dp_names[0]] if len(dp_names) == 1 else mesh[dp_names]
        kwargs = {
            "mesh": dp_mesh,
            "reshard_after_forward": ZERO == 3,  # False keeps gathered parameters: ZeRO-2
            "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=DTYPES[REDUCE_DTYPE]),
        }
        if CPU_OFFLOAD:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
        for block in model.layers:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
    model.to_empty(device="cpu" if CPU_OFFLOAD else "cuda")
    model.init_weights()
    if CPU_OFFLOAD:
        model.rope = model.rope.cuda()
    model.train()

    if not FSDP and DP > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[local_rank], bucket_cap_mb=25)
    DDP_WRAPPED = not FSDP and DP > 1
    params = [p for p in model.parameters() if p.requires_grad]
    if ZERO == 1 and DP > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(
            params, optimizer_class=torch.optim.AdamW, lr=LR, betas=(0.9, 0.95), weight_decay=0.1
        )
    else:
        optimizer = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    # FSDP2 casts through mp_policy; DDP and single replicas use autocast.
    use_autocast = not FSDP and PRECISION != "fp32"
    scaler = torch.amp.GradScaler("cuda") if PRECISION == "fp16" else None

    # Tensor-parallel ranks of one replica read the same batch.
    generator = torch.Generator(device="cuda").manual_seed(1234 + rank // TP)
    for step in range(STEPS):
        for micro in range(ACCUM):
            tokens = torch.randint(0, VOCAB, (MBS, SEQ + 1), device="cuda", generator=generator)
            last = micro == ACCUM - 1
            # As trainplan simulated the plan: DDP all-reduces once per step,
            # skipping its all-reduce inside no_sync() until the last
            # micro-batch; FSDP2 keeps gradient sync on and reduce-scatters
            # every micro-batch into its sharded fp32 gradients (turning it
            # off with set_requires_gradient_sync(False) would hold the whole
            # unsharded gradient in fp32 until the last micro-batch).
            sync = model.no_sync() if DDP_WRAPPED and not last else contextlib.nullcontext()
            with sync:
                with torch.autocast("cuda", dtype=dtype, enabled=use_autocast):
                    logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()) / ACCUM
                (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if FP8_RECIPE == "tensorwise" and FSDP:
            # One all-reduce of the weights' amaxes for the next FP8 all-gather.
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(model)
        optimizer.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step + 1}/{STEPS} loss {loss.item() * ACCUM:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
)PY";

}  // namespace

ExportResult export_fsdp(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("PyTorch DDP/FSDP2", p)) return refuse(*r);
  if (auto r = attention_kernel_refusal("the PyTorch script", p, AttentionKernel::kFa2,
                                        "scaled_dot_product_attention, whose flash backend is FlashAttention-2")) {
    return refuse(*r);
  }
  if (auto r = partial_recompute_refusal("the PyTorch script", p, "checkpoints every block")) return refuse(*r);
  if (m.has_moe || m.attention == AttentionKind::kMla || m.separate_head_dim() || m.has_sliding_window) {
    return refuse("the PyTorch script's model is a dense GPT/Llama block with head_dim = hidden/heads attending to the "
                  "whole causal prefix; it has no experts, latent attention, separate head_dim or sliding window (use "
                  "--to megatron)");
  }
  if (p.pp > 1) {
    return refuse(
        "PyTorch FSDP2 and DDP have no pipeline schedule; export pipeline-parallel plans with --to torchtitan "
        "(torch.distributed.pipelining) or --to megatron");
  }
  if (p.cp > 1) {
    return refuse(
        "the FSDP2 script has no context parallelism; export context-parallel plans with --to torchtitan or --to "
        "megatron");
  }
  if (m.position_embedding == PositionEmbedding::kAlibi) {
    return refuse("the FSDP2 script's model has RoPE or learned position embeddings, not ALiBi");
  }
  const bool fsdp = p.zero >= 2 && p.dp > 1;
  if (p.tp > 1 && p.dp > 1 && p.zero < 2) {
    return refuse(
        "PyTorch composes tensor parallelism (DTensor) with FSDP2's fully_shard, not with DistributedDataParallel or "
        "ZeroRedundancyOptimizer (use zero 2 or 3 with tp > 1)");
  }
  if (p.tp > 1 && (m.position_embedding != PositionEmbedding::kRope || m.tied_embeddings)) {
    return refuse(
        "the FSDP2 script applies tensor parallelism with torchtitan's Llama plan, which needs RoPE and untied "
        "embeddings; " +
        m.name + " has " + (m.tied_embeddings && m.position_embedding == PositionEmbedding::kRope
                                   ? "tied embeddings"
                                   : "learned positions") +
        " (use --to megatron)");
  }
  if (p.zero == 1 && L.shard_degree < p.dp) {
    return refuse(
        "torch.distributed.optim.ZeroRedundancyOptimizer shards over the whole data-parallel group; it has no "
        "hybrid shard groups (use zero 3 for hybrid sharding)");
  }
  if (p.offload == Offload::kOptimizer) {
    return refuse(
        "FSDP2's CPUOffloadPolicy moves parameters, gradients and optimizer state together; it has no "
        "optimizer-only offload (use offload params with zero 3)");
  }
  if (p.precision == Precision::kFp16 && (fsdp || p.tp > 1)) {
    return refuse(
        "the FSDP2 script scales fp16 losses with torch.amp.GradScaler only for plain tensors (DDP, no tensor "
        "parallelism); use precision bf16");
  }
  if (p.grad_dtype == GradDtype::kBf16 && !fsdp) {
    return refuse(
        "DDP under torch.autocast keeps fp32 parameters and gradients; bf16 gradient reduction needs FSDP2's "
        "MixedPrecisionPolicy(reduce_dtype=bfloat16) (use zero 2 or 3)");
  }
  if (auto r = fp8_refusal("the FSDP2 script", p, false)) return refuse(*r);
  if (p.fp8_recipe != Fp8Recipe::kNone && p.tp > 1) {
    return refuse(
        "the FSDP2 script converts linears to torchao float8 without tensor parallelism (FP8 TP needs "
        "Float8ColwiseParallel/Float8RowwiseParallel plans); export FP8 with tp > 1 with --to torchtitan");
  }
  if (render == Render::kCheckOnly) return accept("");

  const int shard = fsdp ? L.shard_degree : 1;
  std::string s = "#!/usr/bin/env python3\n";
  s += header_comment("# ", "PyTorch training script", m, c, L);
  // One node runs as is; on several, each node must say who it is (a
  // default would make every node rank 0 on localhost).
  const LaunchShape h = launch_of(c, L);
  const std::string node_rank =
      h.hosts == 1 ? "\"${NODE_RANK:-0}\""
                   : required_env("NODE_RANK", "set NODE_RANK to the index of this node, 0.." + str(h.hosts - 1));
  const std::string master =
      h.hosts == 1 ? "\"${MASTER_ADDR:-localhost}\""
                   : required_env("MASTER_ADDR", "set MASTER_ADDR to the address of node 0");
  s += "# Launch on every node (NODE_RANK 0..N-1, MASTER_ADDR = node 0):\n";
  s += "#   torchrun --nproc_per_node " + str(h.per_host) + " --nnodes " + str(h.hosts) +
       " --node_rank " + node_rank + " \\\n#     --master_addr " + master +
       " --master_port \"${MASTER_PORT:-29500}\" <this file>\n";
  s += "# Needs PyTorch >= 2.6 (torch.distributed.fsdp.fully_shard). Trains on random\n"
       "# tokens: replace torch.randint in main() with your data loader.\n";
  s += "import contextlib\nimport math\nimport os\n\n";
  s += "import torch\nimport torch.distributed as dist\nimport torch.nn as nn\nimport torch.nn.functional as F\n";
  s += "from torch.distributed.device_mesh import init_device_mesh\nfrom torch.utils.checkpoint import checkpoint\n\n";
  s += "# Model: " + m.name + ".\n";
  s += "LAYERS = " + str(m.layers) + "\n";
  s += "HIDDEN = " + str(m.hidden) + "\n";
  s += "HEADS = " + str(m.heads) + "\n";
  s += "KV_HEADS = " + str(m.kv_heads) + "\n";
  s += "FFN_HIDDEN = " + str(m.ffn_hidden) + "\n";
  s += "VOCAB = " + str(m.vocab) + "\n";
  s += std::string("MLP = ") + (m.mlp == MlpKind::kSwiglu ? "\"swiglu\"" : "\"gelu\"") +
       "  # \"swiglu\" (SiLU-gated, w1/w3) or \"gelu\"\n";
  s += "BIAS = " + py_bool(m.bias) + "  # linear biases; LayerNorm when True, RMSNorm when False\n";
  s += "TIED_EMBEDDINGS = " + py_bool(m.tied_embeddings) + "\n";
  s += std::string("POSITIONS = ") + (m.position_embedding == PositionEmbedding::kRope ? "\"rope\"" : "\"learned\"") +
       "\n";
  s += std::string("DROPOUT = ") + (m.dropout ? "0.1" : "0.0") + "\n\n";
  s += "# Plan.\n";
  s += "TP = " + str(p.tp) + "\n";
  s += "DP = " + str(p.dp) + "\n";
  s += "ZERO = " + str(p.zero) +
       "  # 0: DDP, 1: DDP + ZeroRedundancyOptimizer, 2/3: FSDP2 fully_shard (ZeRO-2 keeps gathered params)\n";
  s += "SHARD = " + str(shard) + "  # ranks one copy of sharded state is spread over\n";
  s += "REPLICATE = " + str(fsdp ? p.dp / shard : 1) + "  # copies of the sharded state (HSDP when > 1)\n";
  s += "SP = " + py_bool(p.sp && p.tp > 1) + "  # sequence parallelism with TP\n";
  s += "MBS = " + str(p.mbs) + "\n";
  s += "GBS = " + str(p.gbs) + "\n";
  s += "SEQ = " + str(p.seq) + "\n";
  s += "ACCUM = " + str(L.microbatches) + "  # GBS // (MBS * DP) micro-batches per step\n";
  s += std::string("RECOMPUTE = \"") + to_string(p.recompute) +
       "\"  # \"none\", \"selective\" (core attention) or \"full\" (whole blocks)\n";
  s += std::string("PRECISION = \"") + to_string(p.precision) + "\"\n";
  s += "FP8_RECIPE = " +
       (p.fp8_recipe == Fp8Recipe::kNone ? std::string("None") : "\"" + std::string(to_string(p.fp8_recipe)) + "\"") +
       "  # torchao float8 linears: None, \"tensorwise\" or \"rowwise\"\n";
  s += std::string("REDUCE_DTYPE = \"") + to_string(p.grad_dtype) + "\"  # FSDP2 gradient reduction\n";
  s += std::string("ATTENTION = \"") + to_string(p.attention) +
       "\"  # \"flash\" (scaled_dot_product_attention) or \"naive\" (softmax(QK^T)V)\n";
  s += "COMPILE = " + py_bool(model_compiled(p)) + "  # torch.compile each block (elementwise ops fused)\n";
  s += "CPU_OFFLOAD = " + py_bool(p.offload == Offload::kParams) +
       "  # FSDP2 CPUOffloadPolicy: parameters, gradients, optimizer on the host\n";
  s += "STEPS = int(os.environ.get(\"STEPS\", \"10\"))\n";
  s += "LR = " + std::string(kLearningRate) + "\n\n";
  s += kFsdpScriptBody;
  return accept(s);
}

}  // namespace export_detail
}  // namespace trainplan
