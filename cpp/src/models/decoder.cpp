#include "transformer/models/decoder.hpp"

#include <new>
#include <numeric>
#include <utility>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/layers/stack.hpp"

namespace transformer {

template <typename T>
DecoderLayer<T>::DecoderLayer(Index d_model, Index n_heads, Index d_ff, double dropout, bool pre_norm, double eps,
                              std::uint64_t seed)
    : self_attention_(checked_size<T>("DecoderLayer", concat("d_model ", d_model, ", d_ff ", d_ff),
                                      decoder_layer_parameters(d_model, d_ff), 0, d_model),
                      n_heads, splitmix64(seed + 1)),
      norm1_(d_model, eps),
      cross_attention_(d_model, n_heads, splitmix64(seed + 2)),
      norm2_(d_model, eps),
      feed_forward_(d_model, d_ff, dropout, splitmix64(seed + 3)),
      norm3_(d_model, eps),
      pre_norm_(pre_norm),
      dropout1_(dropout, seed, splitmix64(seed + 4)),
      dropout2_(dropout, seed, splitmix64(seed + 5)),
      dropout3_(dropout, seed, splitmix64(seed + 6)) {}

template <typename T>
void DecoderLayer<T>::set_precision(Precision p) {
  self_attention_.set_precision(p);
  cross_attention_.set_precision(p);
  feed_forward_.set_precision(p);
}

template <typename T>
void DecoderLayer<T>::zero_grad() {
  zero_grads(self_attention_, norm1_, cross_attention_, norm2_, feed_forward_, norm3_);
}

template <typename T>
const Matrix<T>& DecoderLayer<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, Index B, Index T_len, Index S,
                                          const AttentionMask& self_mask, const AttentionMask& cross_mask,
                                          bool training) {
  TCPP_CHECK(B > 0 && T_len > 0 && S > 0 && x.rows() == B * T_len && memory.rows() == B * S, "DecoderLayer: x has ",
             x.rows(), " rows and memory ", memory.rows(), ", expected B*T = ", B, "*", T_len, " and B*S = ", B, "*",
             S);
  own_x_ = RowLayout::dense(B, T_len);
  own_m_ = RowLayout::dense(B, S);
  return forward(x, memory, own_x_, own_m_, self_mask, cross_mask, training);
}

template <typename T>
const Matrix<T>& DecoderLayer<T>::forward(ConstMatrixMap<T> x, ConstMatrixMap<T> memory, const RowLayout& lx,
                                          const RowLayout& lm, const AttentionMask& self_mask,
                                          const AttentionMask& cross_mask, bool training) {
  x_ = x.data();
  const Index* ids = lx.row_ids();
  // post-norm: h1 = LN1(x + Dropout(MaskedSelfAttention(x))), h2 = LN2(h1 + Dropout(CrossAttention(h1,
  // memory))), y = LN3(h2 + Dropout(FFN(h2))); pre-norm: r1 = x + Dropout(MaskedSelfAttention(LN1(x))),
  // r2 = r1 + Dropout(CrossAttention(LN2(r1), memory)), y = r2 + Dropout(FFN(LN3(r2)))
  const Matrix<T>& h1 = layer_residual<T>(pre_norm_, norm1_, dropout1_, x, training, ids, r1_, self_attention_, lx,
                                          self_mask, true, static_cast<const std::uint8_t*>(nullptr));
  const Matrix<T>& h2 = layer_residual<T>(pre_norm_, norm2_, dropout2_, cmap(h1), training, ids, r2_, cross_attention_,
                                          memory, lx, lm, cross_mask);
  return layer_residual<T>(pre_norm_, norm3_, dropout3_, cmap(h2), training, ids, out_, feed_forward_, training, ids);
}

template <typename T>
const Matrix<T>& DecoderLayer<T>::backward(ConstMatrixMap<T> dout) {
  if (x_ == nullptr) throw std::runtime_error("DecoderLayer: backward() called before forward()");
  // the three residual sub-layers in reverse: feed-forward, cross-attention (its queries; the
  // memory's gradient is kept by the attention), masked self-attention
  layer_residual_backward<T>(pre_norm_, norm3_, dropout3_, feed_forward_, dout, dtmp_, d3_);
  layer_residual_backward<T>(pre_norm_, norm2_, dropout2_, cross_attention_, cmap(d3_), dtmp_, d2_);
  layer_residual_backward<T>(pre_norm_, norm1_, dropout1_, self_attention_, cmap(d2_), dtmp_, dx_);
  return dx_;
}

template <typename T>
void DecoderLayer<T>::infer_step(Matrix<T>& x, KVCache<T>& self, LinearAttentionState<T>& linear,
                                 const Matrix<T>& memory_kv, const SentenceRows& memory_rows,
                                 const std::vector<Index>& sentence_of, InferenceBackend<T>& be, InferenceScratch<T>& s,
                                 Matrix<T>* cross_weights) const {
  // the three residual sub-layers of forward(), without dropout: masked self-attention (over the
  // cache or the linear state), cross-attention, feed-forward
  residual_infer<T>(
      pre_norm_, norm1_,
      [&](const Matrix<T>& in, Matrix<T>& out) {
        if (const auto* lin = self_attention_.linear())
          lin->step(cmap(in), linear, be, out);
        else
          self_attention_.softmax()->infer_step(in, self, be, s, out);
      },
      x, s.n, s.a);
  residual_infer<T>(
      pre_norm_, norm2_,
      [&](const Matrix<T>& in, Matrix<T>& out) {
        cross_attention_.infer_cross(in, memory_kv, memory_rows, sentence_of, be, s, out, cross_weights);
      },
      x, s.n, s.a);
  residual_infer<T>(
      pre_norm_, norm3_, [&](const Matrix<T>& in, Matrix<T>& out) { feed_forward_.infer(in, be, s, out); }, x, s.n,
      s.a);
}

template <typename T>
ParameterList<T> DecoderLayer<T>::parameters() {
  return named_parameters<T>({{"self_attention", self_attention_.parameters()},
                              {"norm1", norm1_.parameters()},
                              {"cross_attention", cross_attention_.parameters()},
                              {"norm2", norm2_.parameters()},
                              {"feed_forward", feed_forward_.parameters()},
                              {"norm3", norm3_.parameters()}});
}

template <typename T>
std::vector<Dropout<T>*> DecoderLayer<T>::dropouts() {
  return {&dropout1_, &dropout2_, &feed_forward_.dropout(), &dropout3_};
}

// ---------------------------------------------------------------------------------------------

template <typename T>
Decoder<T>::Decoder(Index vocab_size, Index d_model, Index n_layers, Index n_heads, Index d_ff, double dropout,
                    Index max_length, PositionalLayout layout, bool pre_norm, double eps, std::uint64_t seed)
    : LayerStack<T, DecoderLayer<T>>("Decoder", decoder_layer_parameters(d_model, d_ff), 200, vocab_size, d_model,
                                     n_layers, n_heads, d_ff, dropout, max_length, layout, pre_norm, eps, seed) {}

template <typename T>
const Matrix<T>& Decoder<T>::forward(ConstTokenMap tokens, ConstMatrixMap<T> memory, Index S,
                                     const std::uint8_t* source_padding, bool training) {
  TCPP_CHECK(memory.rows() == tokens.rows() * S, "Decoder: memory has ", memory.rows(),
             " rows, expected B*S = ", tokens.rows(), "*", S);
  own_memory_ = RowLayout::dense(tokens.rows(), S);
  return forward(tokens, memory, own_memory_, source_padding, training, nullptr, false);
}

template <typename T>
const Matrix<T>& Decoder<T>::forward(ConstTokenMap tokens, ConstMatrixMap<T> memory, const RowLayout& memory_layout,
                                     const std::uint8_t* source_padding, bool training, const std::int64_t* targets,
                                     bool pack) {
  const Index B = tokens.rows(), Tt = tokens.cols(), S = memory_layout.T;
  TCPP_CHECK(B > 0 && Tt > 0, "Decoder: the target batch is empty (shape (", B, ", ", Tt, "))");
  TCPP_CHECK(memory_layout.B == B && memory.rows() == memory_layout.rows(), "Decoder: memory has ", memory.rows(),
             " rows for batch ", memory_layout.B, ", expected ", memory_layout.rows(), " rows for batch ", B);
  // rows to compute: all, or (pack) the positions with an input token or a target — a padding
  // query whose target is padding too feeds nothing that the loss sees
  layout_.B = B;
  layout_.T = Tt;
  layout_.packed = false;
  layout_.ids.clear();
  // (when the start id is the padding id, position 0 holds the start token: never padding)
  const std::int64_t pad = this->padding_id_;
  const bool keep_first = start_is_padding_;
  auto is_padding = [&](Index i) { return tokens.data()[i] == pad && !(keep_first && i % Tt == 0); };
  if (pack) {
    for (Index i = 0; i < B * Tt; ++i)
      if (!is_padding(i) || (targets != nullptr && targets[i] != pad)) layout_.ids.push_back(i);
    // nothing to compute (an all-padding batch): run unpacked rather than with zero rows
    layout_.packed = !layout_.ids.empty() && static_cast<Index>(layout_.ids.size()) < B * Tt;
    if (!layout_.packed) layout_.ids.clear();
  }
  // (rows, d): Dropout(embedding * sqrt(d) + PE), one pass
  this->embedding_.forward_dropout(tokens, layout_, this->dropout_, training, x_);
  B_ = B;
  T_ = Tt;
  S_ = S;
  mem_rows_ = memory.rows();
  key_padding_.resize(static_cast<size_t>(B * Tt));
  for (Index i = 0; i < B * Tt; ++i) key_padding_[i] = is_padding(i);
  // masked self-attention: look-ahead and target padding; cross-attention: source padding
  build_attention_mask(self_mask_, key_padding_.data(), B, Tt, Tt, true);
  build_attention_mask(cross_mask_, source_padding, B, Tt, S, false);
  AttentionMask self_mask{self_mask_.data(), Tt * Tt}, cross_mask{cross_mask_.data(), Tt * S};
  const Matrix<T>* h = &x_;
  for (auto& layer : this->layers_)
    h = &layer->forward(cmap(*h), memory, layout_, memory_layout, self_mask, cross_mask, training);
  if (this->final_norm_) h = &this->final_norm_->forward(cmap(*h));
  return *h;
}

template <typename T>
void Decoder<T>::infer_start(const Matrix<T>& memory, const SentenceRows& memory_rows, Index max_steps,
                             InferenceBackend<T>& be, DecoderCache<T>& cache) const {
  TCPP_CHECK(max_steps >= 1, "Decoder: max_steps must be >= 1, got ", max_steps);
  TCPP_CHECK(memory.rows() == memory_rows.rows() && memory.cols() == this->embedding_.dim(),
             "Decoder: memory has shape (", memory.rows(), ", ", memory.cols(), "), expected (", memory_rows.rows(),
             ", ", this->embedding_.dim(), ")");
  const size_t L = this->layers_.size();
  cache.self.resize(L);
  cache.linear.resize(L);
  cache.memory_kv.resize(L);
  cache.fed = 0;
  if (&cache.memory_rows != &memory_rows) cache.memory_rows = memory_rows;
  cache.sentence_of.resize(static_cast<size_t>(memory_rows.B));
  std::iota(cache.sentence_of.begin(), cache.sentence_of.end(), Index(0));
  for (size_t l = 0; l < L; ++l) {
    this->layers_[l]->cross_attention_.infer_memory(memory, be, cache.memory_kv[l]);
    const DecoderLayer<T>& layer = *this->layers_[l];
    if (const auto* lin = layer.linear_self_attention())
      lin->reset_state(cache.linear[l], memory_rows.B);
    else
      cache.self[l].reset(memory_rows.B, max_steps, this->embedding_.dim());
  }
}

template <typename T>
const Matrix<T>& Decoder<T>::infer_step(const std::int64_t* tokens, DecoderCache<T>& cache, InferenceBackend<T>& be,
                                        InferenceScratch<T>& s) const {
  const Index R = cache.rows(), t = cache.position();
  // x = embedding[token] * sqrt(d) + PE[t]                                   (R, d)
  this->embedding_.infer(R, [&](Index r) { return std::make_pair(tokens[r], t); }, s.x);
  if (cache.record_cross) cache.cross_weights.resize(this->layers_.size());
  for (size_t l = 0; l < this->layers_.size(); ++l)
    this->layers_[l]->infer_step(s.x, cache.self[l], cache.linear[l], cache.memory_kv[l], cache.memory_rows,
                                 cache.sentence_of, be, s, cache.record_cross ? &cache.cross_weights[l] : nullptr);
  ++cache.fed;
  if (!this->final_norm_) return s.x;
  s.n.resize(R, s.x.cols());
  this->final_norm_->forward_inference(s.x.data(), nullptr, s.n.data(), R);
  return s.n;
}

template <typename T>
void DecoderCache<T>::select_rows(const std::vector<Index>& rows, Matrix<T>& scratch) {
  const Index R = this->rows();
  for (Index r : rows) TCPP_CHECK(r >= 0 && r < R, "Decoder: row ", r, " is not one of the ", R, " rows");
  for (KVCache<T>& c : self)
    if (c.capacity > 0) c.select_rows(rows, scratch);
  for (LinearAttentionState<T>& st : linear) {
    if (st.s.rows() == 0) continue;
    scratch.resize(static_cast<Index>(rows.size()), st.s.cols());
    for (size_t i = 0; i < rows.size(); ++i) scratch.row(static_cast<Index>(i)) = st.s.row(rows[i]);
    st.s.swap(scratch);
  }
  std::vector<Index> sentences(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) sentences[i] = sentence_of[static_cast<size_t>(rows[i])];
  sentence_of.swap(sentences);
}

template <typename T>
void Decoder<T>::backward(ConstMatrixMap<T> dout) {
  if (B_ < 0) throw std::runtime_error("Decoder: backward() called before forward()");
  dmemory_.setZero(mem_rows_, this->embedding_.dim());
  // every layer attends to the same memory: its gradient is the sum over the layers
  this->backward_through(dout, [this](DecoderLayer<T>& layer) { dmemory_ += layer.dmemory(); });
}

template struct DecoderCache<float>;
template struct DecoderCache<double>;
template class DecoderLayer<float>;
template class DecoderLayer<double>;
template class Decoder<float>;
template class Decoder<double>;

}  // namespace transformer
