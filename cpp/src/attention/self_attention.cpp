#include "transformer/attention/self_attention.hpp"

#include <stdexcept>

#include "transformer/attention/kinds.hpp"
#include "transformer/attention/linear_attention.hpp"
#include "transformer/attention/lsh_attention.hpp"
#include "transformer/attention/relative_attention.hpp"
#include "transformer/attention/tiled_attention.hpp"

namespace transformer {

const std::vector<std::string>& self_attention_kinds() {
  static const std::vector<std::string> kinds = attention_kind_names();  // each one a case below
  return kinds;
}

template <typename T>
std::unique_ptr<SelfAttention<T>> make_self_attention(const std::string& kind, Index d_model, Index n_heads,
                                                      std::uint64_t seed, const SelfAttentionOptions& options) {
  if (kind == "softmax") return std::make_unique<SoftmaxSelfAttention<T>>(d_model, n_heads, seed);
  if (kind == "linear") return std::make_unique<LinearMultiHeadAttention<T>>(d_model, n_heads, seed);
  if (kind == "lsh")
    return std::make_unique<LSHSelfAttention<T>>(d_model, n_heads, options.lsh_chunk, options.lsh_hashes,
                                                 options.lsh_buckets, seed);
  if (kind == "relative") return std::make_unique<RelativeMultiHeadAttention<T>>(d_model, n_heads, seed);
  (void)attention_kind(kind);  // throws, naming the kinds
  throw std::logic_error(concat("make_self_attention: attention '", kind, "' has a record but no case"));
}

template std::unique_ptr<SelfAttention<float>> make_self_attention<float>(const std::string&, Index, Index,
                                                                          std::uint64_t, const SelfAttentionOptions&);
template std::unique_ptr<SelfAttention<double>> make_self_attention<double>(const std::string&, Index, Index,
                                                                            std::uint64_t, const SelfAttentionOptions&);

}  // namespace transformer
