// Megatron-Core's pipeline layout string (--pipeline-model-parallel-layout,
// megatron/core/transformer/pipeline_parallel_layer_layout.py), read and
// written in one place: the CLI's --pipeline-layout reads it, the Megatron
// export writes it.
//
// Grammar (parse_str_to_list there): commas are cosmetic and dropped; a
// parenthesised group followed by *n is repeated n times ("(t*2|)*3" =
// "t*2|t*2|t*2|"), then a character followed by *n (t*3 = ttt); '|'
// separates the virtual stages, listed in model order (virtual stage
// c * pp + r is model chunk c of pipeline rank r); each stage is a run of
// E (the embedding), t (a transformer layer), m (a multi-token prediction
// depth) and L (the loss).  Validation (validate_layer_layout there): E
// exactly once, first; L exactly once, last; no t after an m; the m all in
// one stage, the last of its rank.  trainplan also keeps the m with the
// loss (the last virtual stage), where it places the prediction depths.
// Nested parentheses, which that parser's regular expression does not
// read as nesting, are refused.
#ifndef TRAINPLAN_SIM_SPEC_PIPELINE_LAYOUT_H_
#define TRAINPLAN_SIM_SPEC_PIPELINE_LAYOUT_H_

#include <string>
#include <vector>

namespace trainplan {

struct PipelineLayout {
  std::vector<int> stage_layers;  // transformer layers of each virtual stage, model order
  int mtp_layers = 0;             // m count (in the last virtual stage)
};

// Parses `text`.  On success returns "" and fills *out; otherwise returns
// what is wrong (one clause, no location), e.g. "the first layer must be the
// embedding E, got t".
std::string parse_pipeline_layout(const std::string& text, PipelineLayout* out);

// The layout string of `stage_layers` (transformer layers per virtual
// stage, model order) with the embedding first, `mtp_layers` m and the loss
// last, runs of three or more equal stages written (S|)*k: 61 layers as 1,
// 29 x 2, 1, 1 over 32 stages is "Et|(t*2|)*29,t|tL".  REQUIRES: non-empty.
std::string format_pipeline_layout(const std::vector<int>& stage_layers, int mtp_layers);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_PIPELINE_LAYOUT_H_
