// DeepSpeed ZeRO-3's coordinator replayed on hand-made traces
// (simulator/framework/deepspeed_zero3.h); every expectation is worked from
// the rules of deepspeed/runtime/zero/stage3.py (v0.3.14) in the comments.
#include "simulator/framework/deepspeed_zero3.h"

#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

// GPT-3 175B's four partitioned weights per layer (h = 12288, 4h MLP):
// QKV 3h^2, proj h^2, FC1 and FC2 4h^2 each.  All exceed the 5e7 prefetch
// bucket, so each prefetch holds exactly one of them.
constexpr double kH2 = 12288.0 * 12288.0;
constexpr double kQkv = 3 * kH2, kProj = kH2, kFc1 = 4 * kH2, kFc2 = 4 * kH2;

std::vector<ModuleUse> forward(int layer, double q, double p, double f1, double f2) {
  return {{4 * layer, q}, {4 * layer + 1, p}, {4 * layer + 2, f1}, {4 * layer + 3, f2}};
}

void expect(const std::vector<AwaitedGather>& got, double numel, int launched_at) {
  REQUIRE(got.size() == 1);
  CHECK(got[0].numel == numel);
  CHECK(got[0].launched_at == launched_at);
}

TEST_CASE("ZeRO-3 coordinator: large modules are prefetched one module ahead", "[sim][framework][zero3]") {
  // Use 0 (QKV): not available -> gathered there and waited for (blocking);
  // its hook then prefetches the next module not available (proj), whose
  // fetch waits for it; and so on: every later use waits for its own module,
  // launched by the previous use's hook.  Each is released after its
  // forward: the trace never uses it again.
  std::vector<ModuleUse> trace = forward(0, kQkv, kProj, kFc1, kFc2);
  const std::vector<ModuleUse> second = forward(1, kQkv, kProj, kFc1, kFc2);
  trace.insert(trace.end(), second.begin(), second.end());
  const auto a = replay_zero3_fetches(trace, Zero3CoordinatorKnobs{});
  expect(a[0], kQkv, 0);
  for (size_t i = 1; i < trace.size(); ++i) expect(a[i], trace[i].numel, static_cast<int>(i) - 1);
}

TEST_CASE("ZeRO-3 coordinator: a step counter behind the trace gathers every use on demand",
          "[sim][framework][zero3]") {
  // v0.3.14 - v0.5.10 (trace_aligned = false): get_params_to_prefetch and
  // get_reuse_distance_in_numel compare a module with the trace entry one
  // step before its own, so neither prefetches nor keeps anything.  GPT-3
  // 1.3B's small modules (which an aligned trace batches 5e7 at a time,
  // test below) and a recompute-like reuse right after a forward (FC2 used
  // twice in a row, kept when aligned: nothing in between): every use of a
  // partitioned module is a blocking gather of that module alone, launched
  // by its own hook; persistent modules (under 1e5 elements) never gather.
  constexpr double h2 = 2048.0 * 2048.0;
  std::vector<ModuleUse> trace;
  for (int l = 0; l < 2; ++l) {
    const auto f = forward(l, 3 * h2, h2, 4 * h2, 4 * h2);
    trace.insert(trace.end(), f.begin(), f.end());
  }
  trace.push_back(ModuleUse{7, 4 * h2});  // layer 1's FC2 again
  trace.push_back(ModuleUse{99, 5e4});    // a norm: persistent
  Zero3CoordinatorKnobs broken;
  broken.trace_aligned = false;
  const auto a = replay_zero3_fetches(trace, broken);
  for (size_t i = 0; i + 1 < trace.size(); ++i) expect(a[i], trace[i].numel, static_cast<int>(i));
  CHECK(a.back().empty());
  // Aligned, the same trace prefetches (use 1 waits for a batch launched
  // at use 0) and keeps FC2 for its reuse (use 8 does not synchronize).
  const auto b = replay_zero3_fetches(trace, Zero3CoordinatorKnobs{});
  REQUIRE_FALSE(b[1].empty());
  CHECK(b[1][0].launched_at == 0);
  CHECK(b[8].empty());
}

TEST_CASE("ZeRO-3 coordinator: small modules are prefetched a bucket at a time", "[sim][framework][zero3]") {
  // GPT-3 1.3B (h = 2048): QKV 12.6M, proj 4.2M, FC1 and FC2 16.8M.  Use 0
  // gathers QKV (blocking), then walks the trace to 5e7 elements: proj,
  // FC1, FC2 (37.7M), the next QKV (50.3M >= 5e7): one batch launched at
  // use 0, waited for at use 1 (proj in flight).  Use 1's hook walks again:
  // layer 1's proj, FC1, FC2 and layer 2's QKV (50.3M).  Uses 2-4 find
  // their modules available: no synchronize.  Use 5 (layer 1's proj) waits
  // for the batch launched at use 1.
  constexpr double h2 = 2048.0 * 2048.0;
  std::vector<ModuleUse> trace;
  for (int l = 0; l < 3; ++l) {
    const auto f = forward(l, 3 * h2, h2, 4 * h2, 4 * h2);
    trace.insert(trace.end(), f.begin(), f.end());
  }
  const auto a = replay_zero3_fetches(trace, Zero3CoordinatorKnobs{});
  expect(a[0], 3 * h2, 0);
  REQUIRE(a[1].size() == 4);
  double batch = 0;
  for (const AwaitedGather& g : a[1]) {
    CHECK(g.launched_at == 0);
    batch += g.numel;
  }
  CHECK(batch == 12 * h2);
  for (int i : {2, 3, 4}) CHECK(a[static_cast<size_t>(i)].empty());
  REQUIRE(a[5].size() == 4);
  CHECK(a[5][0].launched_at == 1);
}

TEST_CASE("ZeRO-3 coordinator: the recompute's last module is kept for its backward", "[sim][framework][zero3]") {
  // A checkpointed layer's backward: recompute forward Q, P, F1, F2, then
  // backward F2, F1, P, Q.  After the recompute's F2 the next use is the
  // backward's F2, no parameters in between: kept (0 < 1e9).  F1's next use
  // is after F2 twice (2 x 604M = 1.21e9 >= 1e9): released, gathered again;
  // P and Q likewise.  Prefetches: at the recompute's F2 hook the next
  // module not available is the backward's F1 (F2 is kept), launched there
  // and waited for at the backward's F1; the backward's F2 waits for nothing.
  std::vector<ModuleUse> trace = forward(0, kQkv, kProj, kFc1, kFc2);
  trace.push_back({3, kFc2});
  trace.push_back({2, kFc1});
  trace.push_back({1, kProj});
  trace.push_back({0, kQkv});
  const auto a = replay_zero3_fetches(trace, Zero3CoordinatorKnobs{});
  CHECK(a[4].empty());        // backward F2: kept from the recompute
  expect(a[5], kFc1, 3);      // backward F1: prefetched at the recompute's F2
  expect(a[6], kProj, 5);
  expect(a[7], kQkv, 6);
}

TEST_CASE("ZeRO-3 coordinator: live parameters and persistence stop prefetching", "[sim][framework][zero3]") {
  // A (6e8), B (6e8), A, B, C (1e8), with D (5e4) in between: D is under the
  // 1e5 persistence threshold, never partitioned, never waited for.  Use 0
  // gathers A (blocking) and prefetches B (live 1.2e9).  Use 1 waits for B;
  // both are kept (each is used again within 6e8 < 1e9 elements), so 1.2e9
  // live >= 1e9: no prefetch.  Use 3 (A again) is available; after it A is
  // released (no later use): 6e8 live.  Use 4 (B) is available and its hook
  // prefetches C, which use 5 waits for.
  const std::vector<ModuleUse> trace = {{0, 6e8}, {1, 6e8}, {9, 5e4}, {0, 6e8}, {1, 6e8}, {2, 1e8}};
  const auto a = replay_zero3_fetches(trace, Zero3CoordinatorKnobs{});
  expect(a[0], 6e8, 0);
  expect(a[1], 6e8, 0);
  CHECK(a[2].empty());
  CHECK(a[3].empty());
  CHECK(a[4].empty());
  expect(a[5], 1e8, 4);
  // With a live limit of 2e9 the prefetch at use 1 would have taken C.
  Zero3CoordinatorKnobs roomy;
  roomy.max_live_numel = 2e9;
  const auto b = replay_zero3_fetches(trace, roomy);
  expect(b[5], 1e8, 1);
}

}  // namespace
}  // namespace trainplan
