// decoding.hpp — fast inference: greedy and beam search over an incremental (KV-cached) decoder.
//
// The encoder runs once per batch. For every decoder layer the cross-attention keys and values
// of the memory are projected once per sentence, and the self-attention keys and values of each
// hypothesis are appended to a cache one position per step, so step t costs O(t) attention work
// and O(1) projections instead of re-running the decoder on the whole prefix.
//
// Generation never emits the padding id 0 (its logit is treated as -inf), so outputs can be
// padded with 0 after the end token.
#pragma once

#include <cstdint>
#include <vector>

#include "transformer/transformer.hpp"

namespace transformer {

template <typename T>
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(Transformer<T>& model);

  // Encode src (B, S) and prepare caches for up to max_steps positions, one hypothesis per
  // sentence (row r belongs to sentence r).
  void start(ConstTokenMap src, Index max_steps);
  // Feed tokens[r] at the next position for every live row; returns logits (R, V).
  const Matrix<T>& step(const std::int64_t* tokens);
  // Keep rows: new row i is old row rows[i] (with its cache); rows may repeat (beam expansion).
  void select_rows(const std::vector<Index>& rows);

  Index rows() const { return R_; }
  Index position() const { return t_; }
  Index sentence_of(Index row) const { return row_sentence_[static_cast<size_t>(row)]; }

 private:
  struct LayerCache {
    Matrix<T> k, v;      // (R, max_steps * d): row r holds positions 0..t-1 of hypothesis r
    Matrix<T> mk, mv;    // (B*S, d): cross-attention keys/values of the memory, per sentence
  };
  void attention_self(const Matrix<T>& qkv, LayerCache& c, Matrix<T>& ctx);
  void attention_cross(const Matrix<T>& q, const LayerCache& c, Matrix<T>& ctx);

  Transformer<T>& model_;
  Index d_, h_, dk_, V_;
  Index B_ = 0, S_ = 0, R_ = 0, t_ = 0, max_steps_ = 0;
  std::vector<LayerCache> caches_;
  std::vector<Index> row_sentence_;
  std::vector<std::uint8_t> src_padding_;  // (B, S)
  // step buffers (R, .)
  Matrix<T> x_, qkv_, q_, ctx_, a_, h1_, h2_, f1_, y_, logits_, tmp_;
  Matrix<T> gather_;  // scratch for select_rows
};

// Greedy decoding: (B, L) ids generated after start_id, up to and including end_id, then 0.
// L <= max_length; at most config.max_length positions are fed to the decoder.
template <typename T>
TokenMatrix greedy_decode(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id, std::int64_t end_id,
                          Index max_length);

struct BeamHypothesis {
  std::vector<std::int64_t> tokens;  // generated ids (ending with end_id unless cut at max_length)
  double log_prob = 0.0;            // sum of token log-probabilities
  double score = 0.0;               // log_prob / ((5 + len)^alpha / 6^alpha)  (GNMT length penalty)
  bool finished = false;            // ended with end_id
};

// Beam search with beam size k and GNMT length penalty alpha; returns the n_best hypotheses of
// each sentence, best first. A sentence stops as soon as no live beam can still beat its
// n_best-th finished hypothesis (an exact bound, since log-probabilities only decrease), or at
// max_length. With beam_size 1 this is greedy decoding.
template <typename T>
std::vector<std::vector<BeamHypothesis>> beam_search(Transformer<T>& model, ConstTokenMap src,
                                                     std::int64_t start_id, std::int64_t end_id,
                                                     Index max_length, Index beam_size, double alpha,
                                                     Index n_best);

}  // namespace transformer
