// libFuzzer target: Megatron-Core layout strings (simulator/spec/
// pipeline_layout.cc, read by --pipeline-layout).  Every input is either
// refused with a reason or read as a split whose written form reads back as
// the same split (the export writes it).
#include <cstdlib>

#include "fuzz/fuzz_common.h"
#include "simulator/spec/pipeline_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainplan;
  PipelineLayout layout;
  const std::string problem = parse_pipeline_layout(fuzz::text_of(data, size), &layout);
  if (!problem.empty()) return 0;
  PipelineLayout back;
  if (!parse_pipeline_layout(format_pipeline_layout(layout.stage_layers, layout.mtp_layers), &back).empty() ||
      back.stage_layers != layout.stage_layers || back.mtp_layers != layout.mtp_layers) {
    std::abort();
  }
  return 0;
}
