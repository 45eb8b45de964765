// Reads nccl-tests output a user already has — the text table or the -J JSON
// file — into collective samples for the fit.
//
// Text: data rows "size count type redop root time algbw busbw #wrong
// [time algbw busbw #wrong]"; the in-place time is used when present.  The
// collective comes from "# Collective test starting: all_reduce_perf" (or
// the caller), the rank count from the "#  Rank" lines.  JSON: the
// "devices" list and result records with "size" and "in_place"/"out_of_place"
// objects holding "time" (us) and "nwrong".
#ifndef TRAINPLAN_CALIBRATE_NCCL_TESTS_READER_H_
#define TRAINPLAN_CALIBRATE_NCCL_TESTS_READER_H_

#include <optional>
#include <string>
#include <vector>

#include "simulator/spec/calibration.h"

namespace trainplan {

struct NcclTestsRun {
  Collective collective = Collective::kAllReduce;
  int ranks = 0;
  int nodes = 0;               // distinct host names in the device lines (0: unknown)
  std::string device;          // first device name seen
  std::vector<CollectiveSample> samples;
};

// Parses one nccl-tests output (text or JSON, detected).  `collective` and
// `ranks` override what the file says (required when it does not say).
// Throws InputError("<where>: ...") on unreadable or empty output.
NcclTestsRun parse_nccl_tests(const std::string& text, const std::string& where,
                              std::optional<Collective> collective, int ranks);

// "all_reduce_perf", "all_reduce", "allreduce" -> kAllReduce, etc.
std::optional<Collective> collective_from_name(const std::string& name);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_NCCL_TESTS_READER_H_
