// constraints.hpp — lexically constrained beam search (Post & Vilar 2018, dynamic beam allocation):
// each constraint is a sequence of token ids that must appear, contiguously, in every output.
//
// A hypothesis tracks which constraints it has met and how far it is into the one it is
// following; a constraint counts as met only once all its tokens were generated one after the
// other, so a hypothesis counted as meeting every constraint holds each of them.
#pragma once

#include <cstdint>
#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer {

using Phrase = std::vector<std::int64_t>;

struct ConstraintState {
  std::vector<char> met;  // per constraint
  Index active = -1;      // the constraint being followed, or -1
  Index progress = 0;     // its tokens generated so far
  Index met_tokens = 0;   // the tokens of the met constraints, plus progress (the hypothesis's bank)
  Index missing = 0;      // constraints not met
};

ConstraintState start_constraints(const std::vector<Phrase>& phrases);

// The state after generating `token`.
ConstraintState advance_constraints(const ConstraintState& s, const std::vector<Phrase>& phrases, std::int64_t token);

// The tokens that would advance the state (the next token of the active constraint, or the first
// token of every unmet one), appended to `out`.
void constraint_tokens(const ConstraintState& s, const std::vector<Phrase>& phrases, std::vector<std::int64_t>& out);

}  // namespace transformer
