// kinds.hpp — what each attention kind supports, as data.
//
// One record per kind of make_self_attention (self_attention.hpp). Every caller that needs to know
// whether a kind can do something (the language model's checks, memory estimates and generation,
// the reversible stack, the Python package and the command line, through the binding
// attention_kinds()) reads the record; only the lookup below compares names, and the record's
// makers build the kind's class, so make_self_attention has no case per kind.
// Adding a kind: its class and a row of the table in kinds.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "transformer/attention/self_attention.hpp"

namespace transformer {

// How a kind generates one token after another without re-reading its context.
enum class GenerationStep {
  None,           // no cached step: generation re-runs forward() over the context
  KeyValueCache,  // keys and values of the positions so far are kept (softmax, relative)
  RecurrentState  // a fixed-size state per head (linear attention's RNN form)
};

// Builds a kind's SelfAttention<T>: (d_model, n_heads, seed, options) -> the layer.
template <typename T>
using SelfAttentionMaker = std::unique_ptr<SelfAttention<T>> (*)(Index, Index, std::uint64_t,
                                                                 const SelfAttentionOptions&);

struct AttentionKind {
  const char* name;
  const char* summary;                   // one line for help texts
  bool bidirectional;                    // works without a causal mask (forward(..., causal=false))
  bool memory;                           // takes a segment memory of preceding positions and encodes positions
                                         // itself (memory_length, clamp_len; no absolute positional encoding)
  GenerationStep step;                   // the generation step it has, if any
  bool reversible;                       // works in a reversible stack (recomputable from the next block's output)
  bool cross_attention;                  // works as a decoder's cross-attention (queries and keys of two sequences)
  bool key_padding;                      // masks padded keys of a bidirectional batch (forward_key_padding)
  bool full_weights;                     // keeps the (B, H, T, T) weights below tuning::kTiledAttentionMinLength keys
  bool hashed;                           // hashes positions into buckets (LSH options; a per-update hash counter)
  SelfAttentionMaker<float> make_float;  // the kind's class, for each element type
  SelfAttentionMaker<double> make_double;

  bool has_cached_step() const { return step != GenerationStep::None; }
  template <typename T>
  SelfAttentionMaker<T> maker() const {
    if constexpr (std::is_same_v<T, float>)
      return make_float;
    else
      return make_double;
  }
};

// Every kind is causal (forward(..., causal=true)); the table's order is the order messages list them.
const std::vector<AttentionKind>& attention_kinds();

// The predicates messages list kinds by.
inline bool takes_memory(const AttentionKind& k) { return k.memory; }
inline bool works_reversible(const AttentionKind& k) { return k.reversible; }
// A translator's decoder: causal self-attention over its own positions (no segment memory) with a
// cached step for decoding one position at a time.
inline bool fits_decoder_self_attention(const AttentionKind& k) { return k.has_cached_step() && !k.memory; }
// A translator's encoder: bidirectional self-attention over a padded batch of sources.
inline bool fits_encoder_self_attention(const AttentionKind& k) {
  return k.bidirectional && k.key_padding && !k.memory;
}

// A translator layer's use of self-attention: the kinds that fit it, and how messages name the
// layer and what the use needs.
struct AttentionUse {
  bool (*fits)(const AttentionKind&);
  const char* who;
  const char* needs;
};
inline constexpr AttentionUse kEncoderSelfAttention{
    fits_encoder_self_attention, "EncoderLayer",
    "an encoder's self-attention (it needs a bidirectional form that masks padded keys)"};
inline constexpr AttentionUse kDecoderSelfAttention{
    fits_decoder_self_attention, "DecoderLayer",
    "a decoder's masked self-attention (it needs a cached decoding step and no segment memory)"};

// The record of `name`, or nullptr for a name that is no kind.
const AttentionKind* find_attention_kind(std::string_view name) noexcept;
// The record of `name`; throws std::invalid_argument "<who>: attention must be one of ..., got '<name>'".
const AttentionKind& attention_kind(std::string_view name, std::string_view who = "");
// What is wrong with the attention kinds' bindings when the bind files registered bindings for
// the kinds named `bound` (one name per registration) and the table holds the kinds named `kinds`:
// a binding of a name that is no kind, a kind without a binding, or a kind bound twice; empty when
// each kind has exactly one. The module refuses to import with this message (bindings/module.cpp).
inline std::string kind_binding_problem(const std::vector<std::string_view>& kinds,
                                        const std::vector<std::string_view>& bound) {
  const auto count = [](const std::vector<std::string_view>& names, std::string_view name) {
    Index n = 0;
    for (std::string_view x : names) n += x == name ? 1 : 0;
    return n;
  };
  for (std::string_view name : bound)
    if (count(kinds, name) == 0)
      return "a binding is registered for attention '" + std::string(name) + "', which is no kind of attention_kinds()";
  for (std::string_view kind : kinds) {
    const Index n = count(bound, kind);
    if (n == 0)
      return "attention '" + std::string(kind) +
             "' has a record but no binding (its bind file registers one with AttentionKindBinding)";
    if (n > 1)
      return "attention '" + std::string(kind) + "' has " + std::to_string(n) +
             " bindings registered (each kind's bind file registers it once)";
  }
  return {};
}
// The names of the kinds for which `supports` holds (every kind without it), in the table's order.
std::vector<std::string> attention_kind_names(bool (*supports)(const AttentionKind&) = nullptr);
// Those names quoted for a message: "'softmax', 'linear' or 'lsh'" (`last` joins the last two).
std::string quoted_attention_kinds(bool (*supports)(const AttentionKind&) = nullptr, std::string_view last = "or");

}  // namespace transformer
