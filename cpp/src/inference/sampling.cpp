#include "transformer/inference/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"

namespace transformer {

namespace {
// the stream of counter_uniform that sampling draws from (dropout's streams are layer numbers)
constexpr std::uint64_t kSamplingStream = 0x73616D706C65ULL;
}  // namespace

void check_sampling(const SamplingOptions& s, const char* who) {
  TCPP_CHECK(s.top_k >= 1, who, ": sampling_topk must be an integer >= 1 (1: the most likely token), got ", s.top_k);
  TCPP_CHECK(std::isfinite(s.top_p) && s.top_p > 0.0 && s.top_p <= 1.0, who,
             ": sampling_topp must be a number in (0, 1], got ", s.top_p);
  TCPP_CHECK(std::isfinite(s.temperature) && s.temperature > 0.0, who,
             ": sampling_temperature must be a finite number > 0, got ", s.temperature);
}

template <typename T>
void sampling_distribution(const T* logits, Index V, const SamplingOptions& s, std::vector<Index>& ids,
                           std::vector<double>& probs, Index pad) {
  const Index k = std::min<Index>(s.top_k, V - 1);
  ids.resize(static_cast<size_t>(V - 1));
  std::iota(ids.begin(), ids.end(), Index{0});  // every id but the padding id
  for (Index j = pad; j < V - 1; ++j) ids[static_cast<size_t>(j)] = j + 1;
  auto better = [logits](Index a, Index b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  ids.resize(static_cast<size_t>(k));
  probs.resize(ids.size());
  const double top = static_cast<double>(logits[ids[0]]);
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    probs[i] = std::exp((static_cast<double>(logits[ids[i]]) - top) / s.temperature);
    sum += probs[i];
  }
  // nucleus: the fewest most likely ids whose probability reaches top_p (at least one)
  size_t keep = 0;
  double mass = 0.0;
  while (keep < probs.size() && (keep == 0 || mass < s.top_p * sum)) mass += probs[keep++];
  ids.resize(keep);
  probs.resize(keep);
  for (double& p : probs) p /= mass;
}

template <typename T>
std::int64_t sample_token(const T* logits, Index V, const SamplingOptions& s, std::uint64_t stream, std::uint64_t step,
                          std::vector<Index>& ids, std::vector<double>& probs, Index pad) {
  sampling_distribution(logits, V, s, ids, probs, pad);
  const double u = counter_uniform(s.seed, kSamplingStream, stream, step);
  double below = 0.0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    below += probs[i];
    if (u < below) return ids[i];
  }
  return ids.back();
}

template void sampling_distribution<float>(const float*, Index, const SamplingOptions&, std::vector<Index>&,
                                           std::vector<double>&, Index);
template void sampling_distribution<double>(const double*, Index, const SamplingOptions&, std::vector<Index>&,
                                            std::vector<double>&, Index);
template std::int64_t sample_token<float>(const float*, Index, const SamplingOptions&, std::uint64_t, std::uint64_t,
                                          std::vector<Index>&, std::vector<double>&, Index);
template std::int64_t sample_token<double>(const double*, Index, const SamplingOptions&, std::uint64_t, std::uint64_t,
                                           std::vector<Index>&, std::vector<double>&, Index);

}  // namespace transformer
