#include "transformer/attention/self_attention.hpp"

#include <stdexcept>

#include "transformer/attention/kinds.hpp"

namespace transformer {

const std::vector<std::string>& self_attention_kinds() {
  static const std::vector<std::string> kinds = attention_kind_names();
  return kinds;
}

template <typename T>
std::unique_ptr<SelfAttention<T>> make_self_attention(const std::string& kind, Index d_model, Index n_heads,
                                                      std::uint64_t seed, const SelfAttentionOptions& options) {
  return attention_kind(kind).maker<T>()(d_model, n_heads, seed, options);  // throws for a name that is no kind
}

template std::unique_ptr<SelfAttention<float>> make_self_attention<float>(const std::string&, Index, Index,
                                                                          std::uint64_t, const SelfAttentionOptions&);
template std::unique_ptr<SelfAttention<double>> make_self_attention<double>(const std::string&, Index, Index,
                                                                            std::uint64_t, const SelfAttentionOptions&);

}  // namespace transformer
