#include "transformer/inference/constraints.hpp"

namespace transformer {

ConstraintState start_constraints(const std::vector<Phrase>& phrases) {
  ConstraintState s;
  s.met.assign(phrases.size(), 0);
  s.missing = static_cast<Index>(phrases.size());
  return s;
}

namespace {
void follow(ConstraintState& s, const std::vector<Phrase>& phrases, Index c) {
  s.active = c;
  s.progress = 1;
  s.met_tokens += 1;
  if (static_cast<size_t>(s.progress) == phrases[static_cast<size_t>(c)].size()) {
    s.met[static_cast<size_t>(c)] = 1;
    s.active = -1;
    s.progress = 0;
    --s.missing;
  }
}
}  // namespace

ConstraintState advance_constraints(const ConstraintState& s, const std::vector<Phrase>& phrases, std::int64_t token) {
  ConstraintState n = s;
  if (n.active >= 0) {
    const Phrase& p = phrases[static_cast<size_t>(n.active)];
    if (p[static_cast<size_t>(n.progress)] == token) {
      ++n.progress;
      ++n.met_tokens;
      if (static_cast<size_t>(n.progress) == p.size()) {
        n.met[static_cast<size_t>(n.active)] = 1;
        n.active = -1;
        n.progress = 0;
        --n.missing;
      }
      return n;
    }
    n.met_tokens -= n.progress;  // the constraint was broken off: its tokens no longer count
    n.active = -1;
    n.progress = 0;
  }
  for (size_t c = 0; c < phrases.size(); ++c)
    if (!n.met[c] && phrases[c][0] == token) {
      follow(n, phrases, static_cast<Index>(c));
      break;
    }
  return n;
}

void constraint_tokens(const ConstraintState& s, const std::vector<Phrase>& phrases, std::vector<std::int64_t>& out) {
  if (s.active >= 0) {
    out.push_back(phrases[static_cast<size_t>(s.active)][static_cast<size_t>(s.progress)]);
    return;
  }
  for (size_t c = 0; c < phrases.size(); ++c)
    if (!s.met[c]) out.push_back(phrases[c][0]);
}

}  // namespace transformer
