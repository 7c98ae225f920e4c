#include "transformer/attention/kinds.hpp"

#include <stdexcept>

#include "transformer/attention/linear_attention.hpp"
#include "transformer/attention/lsh_attention.hpp"
#include "transformer/attention/relative_attention.hpp"
#include "transformer/attention/tiled_attention.hpp"

namespace transformer {

namespace {
// The makers of a kind whose class is built from (d_model, n_heads, seed).
template <template <typename> class Kind, typename T>
std::unique_ptr<SelfAttention<T>> make(Index d_model, Index n_heads, std::uint64_t seed, const SelfAttentionOptions&) {
  return std::make_unique<Kind<T>>(d_model, n_heads, seed);
}
// LSH attention takes its chunk, hash rounds and buckets from the options.
template <typename T>
std::unique_ptr<SelfAttention<T>> make_lsh(Index d_model, Index n_heads, std::uint64_t seed,
                                           const SelfAttentionOptions& o) {
  return std::make_unique<LSHSelfAttention<T>>(d_model, n_heads, o.lsh_chunk, o.lsh_hashes, o.lsh_buckets, seed);
}
}  // namespace

const std::vector<AttentionKind>& attention_kinds() {
  // clang-format off
  static const std::vector<AttentionKind> kinds{
    //          bidirectional memory  step                      reversible cross  key_padding full_weights hashed
    // SoftmaxSelfAttention (tiled_attention.hpp): MultiHeadAttention, exact, tiled from
    // tuning::kTiledAttentionMinLength keys
    {"softmax", "exact, tiled for long inputs; generation with a key/value cache",
     true, false, GenerationStep::KeyValueCache, true, true, true, true, false,
     make<SoftmaxSelfAttention, float>, make<SoftmaxSelfAttention, double>},
    // LinearMultiHeadAttention (linear_attention.hpp): Katharopoulos et al. 2020
    {"linear", "linear in the context; generation as an RNN",
     true, false, GenerationStep::RecurrentState, true, false, true, false, false,
     make<LinearMultiHeadAttention, float>, make<LinearMultiHeadAttention, double>},
    // LSHSelfAttention (lsh_attention.hpp) with the options' chunk, hashes and buckets
    {"lsh", "Reformer's LSH attention; generation recomputes the window",
     true, false, GenerationStep::None, true, false, false, false, true,
     make_lsh<float>, make_lsh<double>},
    // RelativeMultiHeadAttention (relative_attention.hpp): the language model gives it a segment memory
    {"relative", "Transformer-XL: relative positions, a segment memory",
     false, true, GenerationStep::KeyValueCache, false, false, false, false, false,
     make<RelativeMultiHeadAttention, float>, make<RelativeMultiHeadAttention, double>},
  };
  // clang-format on
  return kinds;
}

const AttentionKind* find_attention_kind(std::string_view name) noexcept {
  for (const auto& kind : attention_kinds())
    if (name == kind.name) return &kind;
  return nullptr;
}

const AttentionKind& attention_kind(std::string_view name, std::string_view who) {
  if (const AttentionKind* kind = find_attention_kind(name)) return *kind;
  std::string message(who);
  if (!message.empty()) message += ": ";
  message += "attention must be one of " + quoted_attention_kinds(nullptr, "") + ", got '" + std::string(name) + "'";
  throw std::invalid_argument(message);
}

std::vector<std::string> attention_kind_names(bool (*supports)(const AttentionKind&)) {
  std::vector<std::string> names;
  for (const auto& kind : attention_kinds())
    if (supports == nullptr || supports(kind)) names.emplace_back(kind.name);
  return names;
}

std::string quoted_attention_kinds(bool (*supports)(const AttentionKind&), std::string_view last) {
  const auto names = attention_kind_names(supports);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size() && !last.empty()) ? " " + std::string(last) + " " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

}  // namespace transformer
