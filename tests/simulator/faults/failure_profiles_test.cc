// Tests of the published failure rates (simulator/faults/failure_profiles.h)
// against the log they come from (Dubey et al. 2024, Llama 3, Table 5).
#include "simulator/faults/failure_profiles.h"

#include <numeric>

#include <catch2/catch.hpp>

#include "simulator/faults/failures.h"
#include "simulator/faults/faults.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

TEST_CASE("FailureProfile: Llama 3's rates give back its 419 interruptions", "[faults][profiles]") {
  const FailureProfile& p = failure_profile("llama3");
  int total = 0;
  for (const FailureCause& c : p.causes) total += c.interruptions;
  CHECK(total == 419);  // Table 5: 419 unexpected of 466 interruptions
  // The log's own job: 16,384 GPUs on 2,048 nodes for 54 days.
  FailureModel m;
  m.mtbf_gpu_s = p.mtbf_gpu_s();
  m.mtbf_node_s = p.mtbf_node_s();
  const double rate = failure_rate_per_s(m, 16384, 2048);
  CHECK_THAT(rate * 54 * 86400, WithinRel(419.0, 1e-12));
  // "an average of one failure every three hours" (Sec. 3.3.4): 54 d / 419.
  CHECK_THAT(1 / rate / 3600, WithinRel(54.0 * 24 / 419, 1e-12));
  // The causes of the log's job come back as logged, largest first.
  const std::vector<CauseCount> by = expected_by_cause(p, 16384, 2048, 54 * 86400.0);
  CHECK(std::string(by[0].name) == "faulty GPU");
  CHECK_THAT(by[0].expected, WithinRel(148.0, 1e-12));
  CHECK_THAT(by[1].expected, WithinRel(72.0, 1e-12));  // GPU HBM3 memory
  // Half the job: GPU causes scale with GPUs, node causes with nodes.
  const std::vector<CauseCount> half = expected_by_cause(p, 8192, 1024, 54 * 86400.0);
  double sum = 0;
  for (const CauseCount& k : half) sum += k.expected;
  CHECK_THAT(sum, WithinRel(419.0 / 2, 1e-12));
}

TEST_CASE("FailureProfile: --failure-rates sets the MTBFs; --mtbf-* override them", "[faults][profiles]") {
  FaultFlags f;
  f.failure_rates = "llama3";
  f.storage_bandwidth = "2TB/s";
  f.train_tokens = "1T";
  FaultConfig c = parse_fault_flags(f);
  CHECK(c.failures_given);
  // 54 d x 24 h x 16,384 GPUs / 268 GPU-side interruptions = 79,230 h.
  CHECK_THAT(c.failures.mtbf_gpu_s / 3600, WithinRel(54.0 * 24 * 16384 / 268, 1e-12));
  // 54 d x 24 h x 2,048 nodes / 151 node-side interruptions = 17,578 h.
  CHECK_THAT(c.failures.mtbf_node_s / 3600, WithinRel(54.0 * 24 * 2048 / 151, 1e-12));
  f.mtbf_gpu = "50000h";
  c = parse_fault_flags(f);
  CHECK(c.failures.mtbf_gpu_s == 50000 * 3600.0);
  f.failure_rates = "tpu";
  CHECK_THROWS_WITH(parse_fault_flags(f), "--failure-rates: unknown failure profile \"tpu\"; allowed: llama3");
}

}  // namespace
}  // namespace trainplan
