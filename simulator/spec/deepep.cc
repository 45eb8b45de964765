#include "simulator/spec/deepep.h"

#include <algorithm>
#include <array>

#include "simulator/core/error.h"

namespace trainplan {

namespace {

// A config's chunk sizes in tokens (num_sms is the buffer's).
struct Chunks {
  int nvl_send, nvl_recv, rdma_send, rdma_recv;
};
struct TunedConfig {
  int ranks;
  Chunks dispatch, combine;
};

// deep_ep/buffers/legacy.py get_dispatch_config and get_combine_config.
constexpr std::array<TunedConfig, 12> kConfigs = {{{2, {24, 256, 6, 128}, {10, 256, 6, 128}},
                                                   {4, {6, 256, 6, 128}, {9, 256, 6, 128}},
                                                   {8, {6, 256, 6, 128}, {4, 256, 6, 128}},
                                                   {16, {36, 288, 20, 128}, {4, 288, 12, 128}},
                                                   {24, {32, 288, 8, 128}, {1, 288, 8, 128}},
                                                   {32, {32, 288, 8, 128}, {1, 288, 8, 128}},
                                                   {48, {32, 288, 8, 128}, {1, 288, 8, 128}},
                                                   {64, {32, 288, 8, 128}, {1, 288, 8, 128}},
                                                   {96, {20, 480, 12, 128}, {1, 480, 8, 128}},
                                                   {128, {20, 560, 12, 128}, {1, 560, 8, 128}},
                                                   {144, {32, 720, 12, 128}, {2, 720, 8, 128}},
                                                   {160, {28, 720, 12, 128}, {2, 720, 8, 128}}}};

constexpr int64_t kMaxNvlPeers = 8;     // LEGACY_NUM_MAX_NVL_PEERS
constexpr int64_t kMaxTopK = 128;       // kNumMaxTopK
constexpr int64_t kMaxScales = 128;     // kNumMaxScales
constexpr int64_t kSourceMetaBytes = 8;  // sizeof(SourceMeta): two ints
constexpr int64_t kTopkIdxBytes = 8;     // topk_idx_t, 64 bits
constexpr int64_t kInt4Bytes = 16;

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

const TunedConfig* find(int64_t ranks) {
  for (const TunedConfig& c : kConfigs) {
    if (c.ranks == ranks) return &c;
  }
  return nullptr;
}

// config.hpp get_nvl_buffer_size_hint.
int64_t nvl_hint(const Chunks& c, int num_sms, int64_t hidden_bytes, int64_t ranks) {
  const int64_t rdma_ranks = std::max<int64_t>(ranks / kMaxNvlPeers, 1);
  const int64_t nvl_ranks = std::min(ranks, kMaxNvlPeers);
  const int64_t channels = num_sms / 2;
  const int64_t slots = channels * nvl_ranks * c.nvl_recv;  // token slots
  int64_t bytes = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4;
  bytes += slots * hidden_bytes;
  bytes += slots * kSourceMetaBytes;
  bytes += slots * kMaxTopK * kTopkIdxBytes;
  bytes += slots * kMaxTopK * 4;
  bytes += slots * kMaxScales * 4;
  return round_up(bytes, 128);
}

// config.hpp get_rdma_buffer_size_hint (Config's constructor rounds
// rdma_recv up to a multiple of rdma_send first).
int64_t rdma_hint(const Chunks& c, int num_sms, int64_t hidden_bytes, int64_t ranks) {
  if (ranks <= kMaxNvlPeers) return 0;
  const int64_t rdma_ranks = ranks / kMaxNvlPeers;
  const int64_t channels = num_sms / 2;
  const int64_t slots = channels * rdma_ranks * round_up(c.rdma_recv, c.rdma_send);
  int64_t bytes = channels * rdma_ranks * (kMaxNvlPeers * 2 + 2) * 2 * 4;
  bytes += slots * hidden_bytes * 2;
  bytes += slots * kSourceMetaBytes * 2;
  bytes += slots * kMaxTopK * kTopkIdxBytes * 2;
  bytes += slots * kMaxTopK * 4 * 2;
  bytes += slots * kMaxScales * 4 * 2;
  bytes += slots * kInt4Bytes * 2;
  return round_up(bytes, 128);
}

}  // namespace

bool deepep_supports_group(int64_t ranks) { return find(ranks) != nullptr; }

std::string deepep_group_sizes() {
  std::string s;
  for (const TunedConfig& c : kConfigs) s += (s.empty() ? "" : ", ") + std::to_string(c.ranks);
  return s;
}

DeepEpBuffers deepep_buffer_bytes(int64_t hidden, int64_t ranks, int num_sms) {
  const TunedConfig* c = find(ranks);
  TRAINPLAN_CHECK(c != nullptr && hidden > 0 && num_sms > 0 && num_sms % 2 == 0,
                  "deepep_buffer_bytes: unsupported group or bad arguments");
  // fused_a2a.py get_hidden_bytes: hidden x max(element size, 2).
  const int64_t hidden_bytes = hidden * 2;
  DeepEpBuffers b;
  b.nvl_bytes = static_cast<double>(std::max(nvl_hint(c->dispatch, num_sms, hidden_bytes, ranks),
                                             nvl_hint(c->combine, num_sms, hidden_bytes, ranks)));
  b.rdma_bytes = static_cast<double>(std::max(rdma_hint(c->dispatch, num_sms, hidden_bytes, ranks),
                                              rdma_hint(c->combine, num_sms, hidden_bytes, ranks)));
  return b;
}

}  // namespace trainplan
