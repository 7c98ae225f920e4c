#include "transformer/attention/kinds.hpp"

#include <stdexcept>

namespace transformer {

const AttentionKind* find_attention_kind(std::string_view name) noexcept {
  for (const auto& kind : kAttentionKinds)
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
  for (const auto& kind : kAttentionKinds)
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
