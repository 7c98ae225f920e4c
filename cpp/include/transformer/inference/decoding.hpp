// decoding.hpp — fast inference: greedy and beam search over the model's inference entry point
// (Transformer::infer_start / infer_step, which call the layers' own inference methods; see
// kernels/inference_backend.hpp).
//
// The encoder runs once per batch. For every decoder layer the cross-attention keys and values
// of the memory are projected once per sentence, and the self-attention keys and values of each
// hypothesis are appended to a cache one position per step, so step t costs O(t) attention work
// and O(1) projections instead of re-running the decoder on the whole prefix. This file holds the
// search: which tokens to feed, which hypotheses to keep.
//
// Generation never emits the model's padding id (config().pad_id, 0 by default: its logit is
// treated as -inf), so outputs can be padded with it after the end token.
#pragma once

#include <cstdint>
#include <vector>

#include "transformer/inference/constraints.hpp"
#include "transformer/inference/sampling.hpp"
#include "transformer/kernels/inference_backend.hpp"
#include "transformer/kernels/quantized_linear.hpp"
#include "transformer/models/transformer.hpp"

namespace transformer {

// What a model keeps between decodes: the inference state (caches and buffers, so steady
// decoding at a fixed batch shape allocates nothing) and a matrix-product backend per compute
// type, each with the weights it prepared (switching between compute types does not prepare
// again; each backend follows the weights by its own fingerprints). One per model; not
// thread-safe.
template <typename T>
struct DecodeWorkspace {
  explicit DecodeWorkspace(Transformer<T>& m) : model(m) {}
  Transformer<T>& model;
  InferenceState<T> state;
  InferenceBackend<T> backends[3];  // by ComputeType
  // Decodes whose caller could not promise unchanged weights, counted: a backend whose prepared
  // weights were checked at the current count needs no check.
  std::uint64_t weights_version = 0;
  std::uint64_t checked_version[3] = {~0ULL, ~0ULL, ~0ULL};
  bool finite_checked = false;  // the last decode found every weight finite
};

// Cross-attention weights recorded while decoding one output: for every decoder layer and head,
// one row per generated token (the query whose step produced it) over the sentence's source tokens
// (its non-padding positions). The values of the model's scalar type, held as double.
struct CrossAttention {
  Index layers = 0, heads = 0, tokens = 0, source = 0;
  std::vector<double> weights;  // (layers, heads, tokens, source), row-major
};

// What a decode may be asked besides its tokens.
// How beam search scores and stops (DecodeExtras::length_rule).
// Gnmt: score = log_prob / ((5 + len) / 6) ** alpha; a sentence stops once no live beam can still
// beat its n_best-th finished hypothesis (an exact bound).
// Hf: Hugging Face's generate: score = log_prob / len ** alpha (len: the generated tokens, the end
// token included); only a candidate ranked among the first beam_size of a step's candidates may
// finish; a sentence stops once beam_size hypotheses are finished and, by early_stopping,
// Heuristic (early_stopping=False): the best live beam's log_prob / (its length) ** alpha does
// not beat the beam_size-th finished score; First (True): at once; Never ("never"): as Heuristic
// with the sentence's limit as the length when alpha > 0.
enum class LengthRule { Gnmt, Hf };
enum class EarlyStopping { Heuristic, First, Never };

struct DecodeExtras {
  // Each sentence's own output limit (B entries, each in [1, max_length]), or empty: max_length for
  // every sentence. A sentence stops at its limit inside the search, as if decoded alone with it.
  std::vector<Index> max_lengths;
  // Record the cross-attention weights of the outputs (greedy: `attention`, one per sentence; beam
  // search: each hypothesis's own).
  bool record_attention = false;
  std::vector<CrossAttention> attention;
  // Each sentence's forced first tokens (B entries, each no longer than the sentence's limit, ids
  // in [1, V) other than end_id), or empty: the output starts with them, greedy or beam.
  std::vector<std::vector<std::int64_t>> prefixes;
  // Beam search only: each sentence's lexical constraints (B entries, each fewer than beam_size
  // non-empty id sequences, ids in [1, V) other than end_id), or empty (constraints.hpp).
  std::vector<std::vector<Phrase>> constraints;
  // Greedy decoding only: draw each token instead of taking the most likely (sampling.hpp); the
  // stream of sentence b is b.
  SamplingOptions sampling;
  // Beam search only: the length rule (LengthRule) and, at a sentence's limit, the end token in
  // place of any other, its log-probability not counted (Hugging Face's forced_eos_token_id).
  LengthRule length_rule = LengthRule::Gnmt;
  EarlyStopping early_stopping = EarlyStopping::Heuristic;
  bool force_end = false;
};

// Greedy decoding: (B, L) ids generated after start_id, up to and including end_id, then the
// padding id.
// L <= max_length (the positional table grows to max_length rows if it is shorter).
// `extras` (optional): per-sentence limits and the cross-attention weights (DecodeExtras).
// `workspace` (optional, for `model`) keeps packed weights and buffers between calls.
// `compute` is the matrix products' compute type (quantized_linear.hpp; int8 and bf16 need a
// float model and the CPU's support, else std::invalid_argument naming what is missing).
// `weights_unchanged`: the caller knows the weights did not change since the last decode with this
// workspace (the bindings track train steps and NumPy views): its fingerprint and finite check
// (full passes over the weights, the largest cost of a one-sentence decode) are skipped.
template <typename T>
TokenMatrix greedy_decode(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id, std::int64_t end_id,
                          Index max_length, DecodeWorkspace<T>* workspace = nullptr,
                          ComputeType compute = ComputeType::Float32, bool weights_unchanged = false,
                          DecodeExtras* extras = nullptr);

struct BeamHypothesis {
  std::vector<std::int64_t> tokens;  // generated ids (ending with end_id unless cut at max_length)
  double log_prob = 0.0;             // sum of token log-probabilities
  double score = 0.0;                // log_prob / ((5 + len)^alpha / 6^alpha)  (GNMT length penalty)
  bool finished = false;             // ended with end_id
  Index constraints_missing = 0;     // lexical constraints it does not hold (only when cut at the limit)
  CrossAttention attention;          // when DecodeExtras::record_attention
};

// The largest beam_search accepts: each live beam keeps its own key/value caches.
constexpr Index kMaxBeamSize = 1024;

// Both decoders check first, before allocating: sizes against the memory there is (caches for
// max_length positions), ids and options, and that every weight is finite (NonFiniteError);
// logits that overflow while decoding are a NonFiniteError too, never a silent choice.

// Beam search with beam size k and GNMT length penalty alpha; returns the n_best hypotheses of
// each sentence, best first. A sentence stops as soon as no live beam can still beat its
// n_best-th finished hypothesis (an exact bound, since log-probabilities only decrease), or at
// max_length (or the sentence's own limit, DecodeExtras::max_lengths: the bound then uses that
// limit, so a sentence gets what it gets alone with it). With beam_size 1 this is greedy decoding.
// With constraints (DecodeExtras::constraints) the candidates of a sentence are grouped in banks by
// the constraint tokens they have met and the beam is filled from the banks in turn, best bank
// first; a hypothesis ends only once it holds every constraint. Hypotheses cut at the limit are
// ranked by the constraints they miss (fewest first), then by score.
template <typename T>
std::vector<std::vector<BeamHypothesis>> beam_search(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id,
                                                     std::int64_t end_id, Index max_length, Index beam_size,
                                                     double alpha, Index n_best,
                                                     DecodeWorkspace<T>* workspace = nullptr,
                                                     ComputeType compute = ComputeType::Float32,
                                                     bool weights_unchanged = false, DecodeExtras* extras = nullptr);

}  // namespace transformer
