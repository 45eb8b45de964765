// libFuzzer target: nccl-tests output, text or -J JSON
// (calibrate/nccl_tests_reader.cc), then the collective fit.
#include "calibrate/fit.h"
#include "calibrate/nccl_tests_reader.h"
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainplan;
  TRAINPLAN_FUZZ_BODY({
    const NcclTestsRun run = parse_nccl_tests(fuzz::text_of(data, size), "nccl.txt", Collective::kAllReduce, 8);
    (void)fit_collectives(run.samples);
  })
}
