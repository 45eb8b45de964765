// The optimizer step as what it is: a memory-bound pass over the local
// shard (step_costs.cc optimizer_ps).  Its bytes per parameter, from the
// tensors Adam touches: read the fp32 master, m, v and the fp32 gradient,
// write master, m, v and the 16-bit weight, 4*4 + 3*4 + 2 = 30, plus the
// gradient-norm and overflow checks (two reads) and the zeroing (one write)
// of the fp32 gradient, 12: 42 bytes.  With bf16 moments (Megatron-Core's
// precision-aware optimizer, Transformer Engine's FusedAdam with
// exp_avg_dtype = exp_avg_sq_dtype = bf16) m and v are read and written at
// 2 bytes: 42 - 4 * 2 = 34; where Megatron-Core keeps only the 16-bit
// remainder of the fp32 master (store_param_remainders), the kernel reads
// the remainder and the bf16 parameter (2 + 2) and writes the remainder (2)
// instead of reading and writing 4 + 4: 32.  All run at the same HBM rate,
// so the step times are in the ratios 34 / 42 and 32 / 42.
#include <catch2/catch.hpp>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace {

TEST_CASE("OptimizerStep: bf16 Adam moments move 34 bytes per parameter against 42", "[sim][taskgraph]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.zero = 1;
  p.mbs = 1;
  p.gbs = 8;
  const Layout fp32 = resolve_plan(m, c, 8, p);
  p.moment_dtype = MomentDtype::kBf16;
  const Layout bf16 = resolve_plan(m, c, 8, p);
  REQUIRE(fp32.feasible);
  REQUIRE(bf16.feasible);
  // 8e9 parameters over 8 ranks: 1e9 per shard, many HBM passes long, so
  // the kernels' fixed overheads do not blur the ratio.
  const double params = 8e9;
  const double a = static_cast<double>(optimizer_ps(c, fp32, params));
  const double b = static_cast<double>(optimizer_ps(c, bf16, params));
  REQUIRE(a > 0);
  CHECK(b / a == Approx(34.0 / 42.0).epsilon(1e-3));
  p.framework = Framework::kMegatronCore;
  const Layout mcore = resolve_plan(m, c, 8, p);
  REQUIRE(mcore.feasible);
  const double r = static_cast<double>(optimizer_ps(c, mcore, params));
  CHECK(r / a == Approx(32.0 / 42.0).epsilon(1e-3));
}

}  // namespace
}  // namespace trainplan
