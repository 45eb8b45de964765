// What DeepEP's normal (high-throughput) kernels support and allocate, as
// Megatron-Core's flex dispatcher (--moe-flex-dispatcher-backend deepep)
// and torchtitan v0.2.2's DeepEP backend (distributed/deepep/deepep.py,
// the same legacy Buffer and size hints) run them; torchtitan's head moved
// to DeepEP v2's ElasticBuffer, sized from the tokens per rank, which is not
// modelled.  The one place for DeepEP's
// tuned group sizes (a plan rule) and for the buffers it allocates per GPU
// (the memory model).
//
// Sources (deepseek-ai/DeepEP dd758ca, facts restated, no code copied):
//  - deep_ep/buffers/legacy.py Buffer.get_dispatch_config /
//    get_combine_config: a Config(num_sms, nvl_send, nvl_recv, rdma_send,
//    rdma_recv) per group size in {2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144,
//    160}, any other size asserts "Unsupported number of EP ranks";
//    Buffer.num_sms = 20 (Megatron-Core's historical moe_deepep_num_sms).
//  - csrc/legacy/config.hpp Config: rdma_recv rounded up to a multiple of
//    rdma_send; get_nvl_buffer_size_hint / get_rdma_buffer_size_hint (below,
//    with kNumMaxTopK = kNumMaxScales = 128, an 8-byte SourceMeta
//    (csrc/kernels/legacy/internode.cu) and 8-byte top-k indices
//    (EP_NUM_TOPK_IDX_BITS 64); no RDMA buffer up to 8 ranks, LEGACY_NUM_MAX_NVL_PEERS).
//  - Megatron-Core megatron/core/transformer/moe/fused_a2a.py get_buffer:
//    the maximum of the dispatch and combine configs' hints, for hidden_bytes
//    = hidden x max(element size, 2), allocated once per process (NVLink
//    buffer by cudaMalloc with IPC handles, RDMA buffer in NVSHMEM's
//    symmetric heap): outside PyTorch's caching allocator.
#ifndef TRAINPLAN_SIM_SPEC_DEEPEP_H_
#define TRAINPLAN_SIM_SPEC_DEEPEP_H_

#include <cstdint>
#include <string>

namespace trainplan {

// DeepEP's default SMs for its normal kernels (Buffer.num_sms).
constexpr int kDeepEpNumSms = 20;

// HybridEP's default SMs for its dispatch and combine kernels
// (deepseek-ai/DeepEP 098da2a6de deep_ep/hybrid_ep_buffer.py HybridEPBuffer:
// num_sms_dispatch_api = num_sms_combine_api = 32 inside one NVLink domain,
// 8 when the group spans several: "Inter-node case should use less SMs").
// Megatron-Core passes its moe_flex_dispatcher_num_sms, default None (each
// backend's own default).
constexpr int kHybridEpNumSms = 32;
constexpr int kHybridEpInterDomainNumSms = 8;

// Whether DeepEP has a tuned dispatch/combine config for a group of `ranks`.
bool deepep_supports_group(int64_t ranks);
// The group sizes it has, for messages ("2, 4, 8, ...").
std::string deepep_group_sizes();

struct DeepEpBuffers {
  double nvl_bytes = 0;   // the NVLink (intranode) buffer
  double rdma_bytes = 0;  // the RDMA (internode) buffer; 0 up to 8 ranks
  double total() const { return nvl_bytes + rdma_bytes; }
};

// The buffers Megatron-Core's get_buffer allocates on each GPU of an
// expert-parallel group of `ranks` for tokens of `hidden` elements.
// REQUIRES: deepep_supports_group(ranks), hidden > 0, num_sms even > 0.
DeepEpBuffers deepep_buffer_bytes(int64_t hidden, int64_t ranks, int num_sms = kDeepEpNumSms);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_DEEPEP_H_
