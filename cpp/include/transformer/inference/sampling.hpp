// sampling.hpp — drawing the next token from the logits instead of taking the most likely one:
// temperature, then top-k, then top-p (nucleus), as CTranslate2 and Hugging Face filter them.
//
// The draw of output row `stream` at step `step` is a stateless hash of (seed, stream, step)
// (core/random.hpp's counter_uniform), so a row gets the same tokens whichever thread decodes it
// and whatever the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "transformer/core/tensor.hpp"

namespace transformer {

struct SamplingOptions {
  Index top_k = 1;           // draw among the k most likely tokens; 1 = the most likely (no draw)
  double top_p = 1.0;        // then among the fewest whose probability sums to at least p, in (0, 1]
  double temperature = 1.0;  // logits divided by it first, finite and > 0
  std::uint64_t seed = 0;
  bool active() const { return top_k != 1; }
};

// Throws std::invalid_argument naming the field and what it allows.
void check_sampling(const SamplingOptions& s, const char* who);

// The filtered distribution of one row of V logits: ids (never the padding id `pad`), most likely
// first (ties: the lower id first), and their probabilities, renormalised to sum to 1.
template <typename T>
void sampling_distribution(const T* logits, Index V, const SamplingOptions& s, std::vector<Index>& ids,
                           std::vector<double>& probs, Index pad = 0);

// One id drawn from sampling_distribution with the uniform of (s.seed, stream, step).
template <typename T>
std::int64_t sample_token(const T* logits, Index V, const SamplingOptions& s, std::uint64_t stream, std::uint64_t step,
                          std::vector<Index>& ids, std::vector<double>& probs, Index pad = 0);

}  // namespace transformer
