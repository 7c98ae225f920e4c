#include "transformer/decoding.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "transformer/activations.hpp"
#include "transformer/checks.hpp"
#include "transformer/softmax.hpp"

namespace transformer {

namespace {

// y = LN(x + res) with the layer's weight, bias and eps; res may be null (y = LN(x))
template <typename T>
void layer_norm_rows(const Matrix<T>& x, const Matrix<T>* res, const LayerNorm<T>& ln, Matrix<T>& y) {
  y.resize(x.rows(), x.cols());
  ln.forward_inference(x.data(), res ? res->data() : nullptr, y.data(), x.rows());
}

// One query against n keys/values (rows j at K + j*ld, V + j*ld, dk wide):
// o = softmax(scale * q.K_j over the unblocked j) V. s holds the n scores (scratch).
template <typename T>
void attend(const T* q, const T* K, const T* V, Index n, Index ld, Index dk, const std::uint8_t* mask, T scale, T* s,
            T* o) {
  using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  const Eigen::Map<const Vec> qv(q, dk);
  for (Index j = 0; j < n; ++j) s[j] = (mask && mask[j]) ? T(0) : scale * Eigen::Map<const Vec>(K + j * ld, dk).dot(qv);
  masked_softmax_row(s, n, mask);
  Eigen::Map<Vec> ov(o, dk);
  ov.setZero();
  for (Index j = 0; j < n; ++j)
    if (s[j] != T(0)) ov += s[j] * Eigen::Map<const Vec>(V + j * ld, dk);
}

// The `keep` largest logits of one row of V, never the padding id 0, as ids best first (ties: the
// lower id first), and the row's log-sum-exp over ids 1..V-1, so that log p(id) = logit - lse.
// Log-softmax is monotonic within a row, so these are also the `keep` most probable ids; the
// softmax itself is never materialised.
template <typename T>
double top_ids_and_lse(const T* logits, Index V, Index keep, std::vector<Index>& top) {
  top.clear();
  for (Index j = 1; j < V; ++j) {
    if (static_cast<Index>(top.size()) == keep && !(logits[j] > logits[top.back()])) continue;
    // insert j after every id with a logit >= its own (so equal logits keep increasing ids)
    auto at = std::upper_bound(top.begin(), top.end(), j, [logits](Index a, Index b) { return logits[a] > logits[b]; });
    top.insert(at, j);
    if (static_cast<Index>(top.size()) > keep) top.pop_back();
  }
  using Arr = Eigen::Array<T, 1, Eigen::Dynamic>;
  const Eigen::Map<const Arr> x(logits + 1, V - 1);
  const T mx = x.maxCoeff();
  const double sum = static_cast<double>((x - mx).exp().sum());  // Eigen's vectorised exp and sum
  return static_cast<double>(mx) + std::log(sum);
}

}  // namespace

template <typename T>
void DecodeLinear<T>::pack(ComputeType t, const T* W, Index N, Index K, Index ldw, const T* b) {
  type = t;
  if (t == ComputeType::Float32) {
    f32.pack(W, N, K, ldw, b);
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    low.pack(t, W, N, K, ldw, b);
  else
    throw std::logic_error("DecodeLinear: int8 / bf16 requested for a float64 model");
}

template <typename T>
void DecodeLinear<T>::apply(const T* x, Index R, Index ldx, T* y, Index ldy) const {
  if (type == ComputeType::Float32) {
    f32.apply(x, R, ldx, y, ldy);
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    low.apply(x, R, ldx, y, ldy);
  else
    throw std::logic_error("DecodeLinear: int8 / bf16 requested for a float64 model");
}

template <typename T>
std::vector<typename DecodeWeights<T>::Dense> DecodeWeights<T>::dense_layers(Transformer<T>& model) {
  const ParameterList<T> params = model.parameters();
  std::unordered_map<std::string, const Parameter<T>*> by_name;
  for (const auto& p : params) by_name[p.name] = &p;
  auto find = [&by_name](const std::string& name) -> const Parameter<T>& {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::logic_error("DecodeWeights: the model has no parameter " + name);
    return *it->second;
  };
  std::vector<Dense> out;
  // `<prefix><name>.weight` and `.bias` for each name, which must follow each other in memory:
  // one product over their rows
  auto add = [&](DecodeLinear<T>& slot, const std::string& prefix, std::initializer_list<const char*> names) {
    Dense d{&slot, nullptr, nullptr, 0, 0};
    for (const char* name : names) {
      const Parameter<T>& w = find(prefix + name + ".weight");
      const Parameter<T>& b = find(prefix + name + ".bias");
      if (d.W == nullptr) {
        d.W = w.value;
        d.b = b.value;
        d.K = w.shape.at(1);
      }
      if (w.shape.at(1) != d.K || w.value != d.W + d.N * d.K || b.value != d.b + d.N)
        throw std::logic_error("DecodeWeights: " + prefix + name + " does not follow the weights fused with it");
      d.N += w.shape.at(0);
    }
    out.push_back(d);
  };
  const Index n_layers = model.config().n_layers;
  layers.resize(static_cast<size_t>(n_layers));
  encoder_layers.resize(static_cast<size_t>(n_layers));
  for (Index l = 0; l < n_layers; ++l) {
    const std::string at = "decoder.layers." + std::to_string(l) + ".";
    Layer& L = layers[static_cast<size_t>(l)];
    add(L.self_qkv, at, {"self_attention.query", "self_attention.key", "self_attention.value"});
    add(L.self_out, at, {"self_attention.output"});
    add(L.cross_q, at, {"cross_attention.query"});  // per step; the keys and values once per sentence
    add(L.cross_kv, at, {"cross_attention.key", "cross_attention.value"});
    add(L.cross_out, at, {"cross_attention.output"});
    add(L.ff1, at, {"feed_forward.linear1"});
    add(L.ff2, at, {"feed_forward.linear2"});
  }
  for (Index l = 0; l < n_layers; ++l) {
    const std::string at = "encoder.layers." + std::to_string(l) + ".";
    EncoderLayer& L = encoder_layers[static_cast<size_t>(l)];
    add(L.qkv, at, {"self_attention.query", "self_attention.key", "self_attention.value"});
    add(L.out, at, {"self_attention.output"});
    add(L.ff1, at, {"feed_forward.linear1"});
    add(L.ff2, at, {"feed_forward.linear2"});
  }
  // the output layer: its own weight, or the decoder embedding it is tied to
  const Parameter<T>& bias = find("output.bias");
  const Parameter<T>& w = by_name.count("output.weight") ? find("output.weight") : find("decoder.embedding.weight");
  if (w.value != model.output_weight()) throw std::logic_error("DecodeWeights: output weight not found by name");
  out.push_back({&output, w.value, bias.value, w.shape.at(0), w.shape.at(1)});
  return out;
}

template <typename T>
bool DecodeWeights<T>::update(Transformer<T>& model, ComputeType c, bool verify) {
  if (!verify && held_ && model_ == &model && type_ == c) return false;
  // fingerprint every weight and bias in 1 MB pieces, in parallel, then combine them in order;
  // the addresses and sizes are part of it (the same model, the same tensors)
  const std::vector<Dense> dense = dense_layers(model);
  struct Piece {
    const T* data;
    Index size;
  };
  std::vector<Piece> sources;
  for (const Dense& d : dense) {
    sources.push_back({d.W, d.N * d.K});
    sources.push_back({d.b, d.N});
  }
  constexpr Index kPiece = (1 << 20) / static_cast<Index>(sizeof(T));
  std::vector<Piece> pieces;
  for (const Piece& s : sources)
    for (Index i = 0; i < s.size; i += kPiece) pieces.push_back({s.data + i, std::min(kPiece, s.size - i)});
  std::vector<std::uint64_t> h(pieces.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (Index i = 0; i < static_cast<Index>(pieces.size()); ++i)
    h[static_cast<size_t>(i)] = fingerprint(pieces[static_cast<size_t>(i)].data,
                                            static_cast<std::size_t>(pieces[static_cast<size_t>(i)].size) * sizeof(T),
                                            static_cast<std::uint64_t>(i));
  std::uint64_t f = fingerprint(h.data(), h.size() * sizeof(std::uint64_t), 0);
  for (const Piece& s : sources) {
    const std::uint64_t where[2] = {reinterpret_cast<std::uintptr_t>(s.data), static_cast<std::uint64_t>(s.size)};
    f = fingerprint(where, sizeof(where), f);
  }
  if (held_ && model_ == &model && fingerprint_ == f && type_ == c) return false;
  type_ = c;
  for (const Dense& d : dense) d.slot->pack(c, d.W, d.N, d.K, d.K, d.b);
  held_ = true;
  model_ = &model;
  fingerprint_ = f;
  return true;
}

template <typename T>
template <typename WeightMatrix, typename Bias>
void IncrementalDecoder<T>::linear(const Matrix<T>& x, const WeightMatrix& W, const Bias& b,
                                   const DecodeLinear<T>* packed, Matrix<T>& y) const {
  y.resize(x.rows(), W.rows());
  if (packed != nullptr && packed->type != ComputeType::Float32) {  // int8 / bf16: at any row count
    packed->apply(x.data(), x.rows(), x.cols(), y.data(), y.cols());
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (packed != nullptr && x.rows() >= DecodeWeights<T>::kMinRows) {
      packed->apply(x.data(), x.rows(), x.cols(), y.data(), y.cols());
      return;
    }
    // up to this many rows the few-row kernel beats Eigen's GEMM, which packs W on every call
    constexpr Index kFewRows = 64;
    if (have_decode_kernels() && x.rows() <= kFewRows && x.cols() % 16 == 0 && W.cols() == x.cols() &&
        W.outerStride() == W.cols()) {
      few_rows_linear(x.data(), x.rows(), x.cols(), W.data(), W.rows(), b.data(), y.data());
      return;
    }
  }
  // the reference: Eigen's GEMM
  y.noalias() = x * W.transpose();
  y.rowwise() += b;
}

template <typename T>
IncrementalDecoder<T>::IncrementalDecoder(Transformer<T>& model)
    : model_(model),
      d_(model.config().d_model),
      h_(model.config().n_heads),
      dk_(model.config().d_model / model.config().n_heads),
      V_(model.config().tgt_vocab_size) {}

template <typename T>
void IncrementalDecoder<T>::start(ConstTokenMap src, Index max_steps, DecodeWeights<T>* packed, ComputeType c,
                                  bool verify) {
  TCPP_CHECK(max_steps >= 1, "decode: max_steps must be >= 1, got ", max_steps);
  model_.decoder().embedding_.reserve_positions(max_steps);  // positions 0 .. max_steps-1 are fed
  B_ = src.rows();
  S_ = src.cols();
  R_ = B_;
  t_ = 0;
  max_steps_ = max_steps;
  packed_ = nullptr;
  if (packed != nullptr && (DecodeWeights<T>::available() || c != ComputeType::Float32)) {
    packed->update(model_, c, verify);
    packed_ = packed;
  }
  // padding positions of the source are only ever masked keys: encode the real tokens alone
  const Matrix<T>* mem = nullptr;
  const Index* mem_rows = nullptr;  // padded index b*S + t of every memory row (null: all rows)
  if (packed_ != nullptr) {
    encode_packed(src);
    mem = &memory_;
    mem_rows = enc_rows_.data();
  } else {
    mem = &model_.encoder().forward(src, false, /*pack=*/true);  // (rows, d)
    if (model_.encoder().layout().packed) mem_rows = model_.encoder().layout().ids.data();
  }
  const Matrix<T>& memory = *mem;
  src_padding_.resize(static_cast<size_t>(B_ * S_));
  for (Index i = 0; i < B_ * S_; ++i) src_padding_[static_cast<size_t>(i)] = src.data()[i] == 0;
  row_sentence_.resize(static_cast<size_t>(R_));
  std::iota(row_sentence_.begin(), row_sentence_.end(), Index(0));
  auto& layers = model_.decoder().layers_;
  caches_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    LayerCache& cache = caches_[l];
    const MultiHeadAttention<T>& cross = layers[l]->cross_attention_;
    // [K | V] of the memory in one product, once per sentence, scattered to the (B*S, d)
    // layout; padding positions are left unset (attention never reads a blocked key)
    if (packed_ != nullptr) {
      kv_.resize(memory.rows(), 2 * d_);
      packed_->layers[l].cross_kv.apply(memory.data(), memory.rows(), d_, kv_.data(), 2 * d_);
    } else {
      kv_.noalias() = memory * cross.w_in_.bottomRows(2 * d_).transpose();  // (rows, 2d)
      kv_.rowwise() += cross.b_in_.tail(2 * d_);
    }
    cache.mk.resize(B_ * S_, d_);
    cache.mv.resize(B_ * S_, d_);
#pragma omp parallel for schedule(static) if (kv_.rows() >= 64)
    for (Index i = 0; i < kv_.rows(); ++i) {
      const Index row = mem_rows ? mem_rows[i] : i;
      cache.mk.row(row) = kv_.row(i).head(d_);
      cache.mv.row(row) = kv_.row(i).tail(d_);
    }
    cache.k.resize(R_, max_steps_ * d_);
    cache.v.resize(R_, max_steps_ * d_);
  }
}

template <typename T>
void IncrementalDecoder<T>::encode_packed(ConstTokenMap src) {
  auto& enc = model_.encoder();
  const TransformerConfig& c = model_.config();
  const Index B = src.rows(), S = src.cols();
  TCPP_CHECK(B > 0 && S > 0, "Encoder: the source batch is empty (shape (", B, ", ", S, "))");
  enc.embedding_.reserve_positions(S);
  const Matrix<T>& pe = enc.embedding_.table();
  // the rows to compute: every non-padding position, sentence by sentence
  enc_rows_.clear();
  enc_offset_.assign(static_cast<size_t>(B + 1), 0);
  for (Index b = 0; b < B; ++b) {
    for (Index t = 0; t < S; ++t) {
      const std::int64_t tok = src(b, t);
      TCPP_CHECK(tok >= 0 && tok < c.src_vocab_size, "Embedding: token id ", tok,
                 " is out of range for vocabulary size ", c.src_vocab_size);
      if (tok != 0) enc_rows_.push_back(b * S + t);
    }
    enc_offset_[static_cast<size_t>(b + 1)] = static_cast<Index>(enc_rows_.size());
  }
  const Index n = static_cast<Index>(enc_rows_.size());
  // x = embedding[token] * sqrt(d) + PE[t]                                     (n, d)
  const Matrix<T>& E = enc.embedding_.embedding().weight_;
  const T emb_scale = static_cast<T>(std::sqrt(static_cast<double>(d_)));
  ex_.resize(n, d_);
#pragma omp parallel for schedule(static) if (n >= 64)
  for (Index i = 0; i < n; ++i) {
    const Index row = enc_rows_[static_cast<size_t>(i)];
    ex_.row(i) = E.row(src.data()[row]) * emb_scale + pe.row(row % S);
  }
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
  tmp_.resize(B * h_, S);
  // self-attention of the packed rows: sentence b's queries against its own keys, which are
  // exactly its non-padding positions (the key-padding mask needs no bytes here)
  auto self_attention = [&](const Matrix<T>& qkv, Matrix<T>& ctx) {
    ctx.resize(n, d_);
#pragma omp parallel for schedule(dynamic, 4) if (B * h_ > 8)
    for (Index bh = 0; bh < B * h_; ++bh) {
      const Index b = bh / h_, h = bh % h_;
      const Index r0 = enc_offset_[static_cast<size_t>(b)], len = enc_offset_[static_cast<size_t>(b + 1)] - r0;
      const T* base = qkv.data() + r0 * 3 * d_ + h * dk_;
      for (Index i = 0; i < len; ++i)
        attend(base + i * 3 * d_, base + d_, base + 2 * d_, len, 3 * d_, dk_, static_cast<const std::uint8_t*>(nullptr),
               scale, tmp_.data() + bh * S, ctx.data() + (r0 + i) * d_ + h * dk_);
    }
  };
  auto apply = [n](const DecodeLinear<T>& w, const Matrix<T>& x, Matrix<T>& y) {
    y.resize(n, w.out_features());
    w.apply(x.data(), n, x.cols(), y.data(), y.cols());
  };
  for (size_t l = 0; l < enc.layers_.size(); ++l) {
    const auto& L = *enc.layers_[l];
    const typename DecodeWeights<T>::EncoderLayer& P = packed_->encoder_layers[l];
    if (!c.pre_norm) {
      // h = LN1(x + SelfAttention(x));  x = LN2(h + FFN(h))
      apply(P.qkv, ex_, eqkv_);
      self_attention(eqkv_, ectx_);
      apply(P.out, ectx_, ea_);
      layer_norm_rows(ea_, &ex_, L.norm1_, eh_);
      apply(P.ff1, eh_, ef_);
      relu_inplace(ef_.data(), ef_.size());
      apply(P.ff2, ef_, ea_);
      layer_norm_rows(ea_, &eh_, L.norm2_, ex_);
    } else {
      // x = x + SelfAttention(LN1(x));  x = x + FFN(LN2(x))
      layer_norm_rows(ex_, static_cast<const Matrix<T>*>(nullptr), L.norm1_, eh_);
      apply(P.qkv, eh_, eqkv_);
      self_attention(eqkv_, ectx_);
      apply(P.out, ectx_, ea_);
      ex_ += ea_;
      layer_norm_rows(ex_, static_cast<const Matrix<T>*>(nullptr), L.norm2_, eh_);
      apply(P.ff1, eh_, ef_);
      relu_inplace(ef_.data(), ef_.size());
      apply(P.ff2, ef_, ea_);
      ex_ += ea_;
    }
  }
  if (enc.final_norm_)
    layer_norm_rows(ex_, static_cast<const Matrix<T>*>(nullptr), *enc.final_norm_, memory_);
  else
    memory_.swap(ex_);
}

template <typename T>
void IncrementalDecoder<T>::attention_self(const Matrix<T>& qkv, LayerCache& c, Matrix<T>& ctx) {
  const Index n = t_ + 1, stride = max_steps_ * d_;
  ctx.resize(R_, d_);
  tmp_.resize(R_ * h_, max_steps_);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
#pragma omp parallel for schedule(dynamic, 16) if (R_ * h_ > 8)
  for (Index rh = 0; rh < R_ * h_; ++rh) {
    const Index r = rh / h_, h = rh % h_;
    // append this position's key and value of head h to row r's cache
    const T* kv = qkv.data() + r * 3 * d_ + h * dk_;
    std::copy(kv + d_, kv + d_ + dk_, c.k.data() + r * stride + t_ * d_ + h * dk_);
    std::copy(kv + 2 * d_, kv + 2 * d_ + dk_, c.v.data() + r * stride + t_ * d_ + h * dk_);
    // every earlier position is visible: no look-ahead to mask
    attend(qkv.data() + r * 3 * d_ + h * dk_, c.k.data() + r * stride + h * dk_, c.v.data() + r * stride + h * dk_, n,
           d_, dk_, static_cast<const std::uint8_t*>(nullptr), scale, tmp_.data() + rh * max_steps_,
           ctx.data() + r * d_ + h * dk_);
  }
}

template <typename T>
void IncrementalDecoder<T>::attention_cross(const Matrix<T>& q, const LayerCache& c, Matrix<T>& ctx) {
  ctx.resize(R_, d_);
  tmp_.resize(R_ * h_, std::max(S_, max_steps_));
  const Index ts = tmp_.cols();
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dk_)));
#pragma omp parallel for schedule(dynamic, 16) if (R_ * h_ > 8)
  for (Index rh = 0; rh < R_ * h_; ++rh) {
    const Index r = rh / h_, h = rh % h_;
    const Index sent = row_sentence_[static_cast<size_t>(r)];
    // source padding is blocked
    attend(q.data() + r * d_ + h * dk_, c.mk.data() + sent * S_ * d_ + h * dk_, c.mv.data() + sent * S_ * d_ + h * dk_,
           S_, d_, dk_, src_padding_.data() + sent * S_, scale, tmp_.data() + rh * ts, ctx.data() + r * d_ + h * dk_);
  }
}

template <typename T>
const Matrix<T>& IncrementalDecoder<T>::step(const std::int64_t* tokens) {
  TCPP_CHECK(t_ < max_steps_, "decode: no room for another step (max_steps ", max_steps_, ")");
  const TransformerConfig& c = model_.config();
  auto& dec = model_.decoder();
  // x = embedding[token] * sqrt(d) + PE[t]                                 (R, d)
  const Matrix<T>& E = dec.embedding_.embedding().weight_;
  const Matrix<T>& pe = dec.embedding_.table();
  const T scale = static_cast<T>(std::sqrt(static_cast<double>(d_)));
  x_.resize(R_, d_);
  for (Index r = 0; r < R_; ++r) {
    const std::int64_t tok = tokens[r];
    TCPP_CHECK(tok >= 0 && tok < c.tgt_vocab_size, "decode: token id ", tok, " is out of range for vocabulary size ",
               c.tgt_vocab_size);
    x_.row(r) = E.row(tok) * scale + pe.row(t_);
  }
  for (size_t l = 0; l < dec.layers_.size(); ++l) {
    DecoderLayer<T>& L = *dec.layers_[l];
    LayerCache& cache = caches_[l];
    MultiHeadAttention<T>& sa = L.self_attention_;
    MultiHeadAttention<T>& ca = L.cross_attention_;
    FeedForward<T>& ff = L.feed_forward_;
    const typename DecodeWeights<T>::Layer* P = packed_ ? &packed_->layers[l] : nullptr;
    if (!c.pre_norm) {
      // h1 = LN1(x + SelfAttention(x)) over the cached prefix
      linear(x_, sa.w_in_, sa.b_in_, P ? &P->self_qkv : nullptr, qkv_);
      attention_self(qkv_, cache, ctx_);
      linear(ctx_, sa.out_.weight_, sa.out_.bias_, P ? &P->self_out : nullptr, a_);
      layer_norm_rows(a_, &x_, L.norm1_, h1_);
      // h2 = LN2(h1 + CrossAttention(h1, memory))
      linear(h1_, ca.w_in_.topRows(d_), ca.b_in_.head(d_), P ? &P->cross_q : nullptr, q_);
      attention_cross(q_, cache, ctx_);
      linear(ctx_, ca.out_.weight_, ca.out_.bias_, P ? &P->cross_out : nullptr, a_);
      layer_norm_rows(a_, &h1_, L.norm2_, h2_);
      // y = LN3(h2 + FFN(h2))
      linear(h2_, ff.linear1_.weight_, ff.linear1_.bias_, P ? &P->ff1 : nullptr, f1_);
      relu_inplace(f1_.data(), f1_.size());
      linear(f1_, ff.linear2_.weight_, ff.linear2_.bias_, P ? &P->ff2 : nullptr, a_);
      layer_norm_rows(a_, &h2_, L.norm3_, x_);
    } else {
      // r1 = x + SelfAttention(LN1(x))
      layer_norm_rows(x_, static_cast<const Matrix<T>*>(nullptr), L.norm1_, h1_);
      linear(h1_, sa.w_in_, sa.b_in_, P ? &P->self_qkv : nullptr, qkv_);
      attention_self(qkv_, cache, ctx_);
      linear(ctx_, sa.out_.weight_, sa.out_.bias_, P ? &P->self_out : nullptr, a_);
      x_ += a_;
      // r2 = r1 + CrossAttention(LN2(r1), memory)
      layer_norm_rows(x_, static_cast<const Matrix<T>*>(nullptr), L.norm2_, h1_);
      linear(h1_, ca.w_in_.topRows(d_), ca.b_in_.head(d_), P ? &P->cross_q : nullptr, q_);
      attention_cross(q_, cache, ctx_);
      linear(ctx_, ca.out_.weight_, ca.out_.bias_, P ? &P->cross_out : nullptr, a_);
      x_ += a_;
      // y = r2 + FFN(LN3(r2))
      layer_norm_rows(x_, static_cast<const Matrix<T>*>(nullptr), L.norm3_, h2_);
      linear(h2_, ff.linear1_.weight_, ff.linear1_.bias_, P ? &P->ff1 : nullptr, f1_);
      relu_inplace(f1_.data(), f1_.size());
      linear(f1_, ff.linear2_.weight_, ff.linear2_.bias_, P ? &P->ff2 : nullptr, a_);
      x_ += a_;
    }
  }
  const Matrix<T>* y = &x_;
  if (dec.final_norm_) {
    layer_norm_rows(x_, static_cast<const Matrix<T>*>(nullptr), *dec.final_norm_, y_);
    y = &y_;
  }
  // logits = y W_out^T + b                                                 (R, V)
  ConstMatrixMap<T> W(model_.output_weight(), V_, d_);
  linear(*y, W, model_.out_bias_, packed_ ? &packed_->output : nullptr, logits_);
  ++t_;
  return logits_;
}

template <typename T>
void IncrementalDecoder<T>::select_rows(const std::vector<Index>& rows) {
  const Index n = static_cast<Index>(rows.size());
  for (Index i = 0; i < n; ++i)
    TCPP_CHECK(rows[static_cast<size_t>(i)] >= 0 && rows[static_cast<size_t>(i)] < R_, "decode: bad row index");
  const Index used = t_ * d_;  // cached columns in use
  for (LayerCache& c : caches_) {
    for (Matrix<T>* m : {&c.k, &c.v}) {
      gather_.resize(n, m->cols());
      for (Index i = 0; i < n; ++i)
        std::copy(m->data() + rows[static_cast<size_t>(i)] * m->cols(),
                  m->data() + rows[static_cast<size_t>(i)] * m->cols() + used, gather_.data() + i * m->cols());
      m->swap(gather_);
    }
  }
  std::vector<Index> sentences(static_cast<size_t>(n));
  for (Index i = 0; i < n; ++i)
    sentences[static_cast<size_t>(i)] = row_sentence_[static_cast<size_t>(rows[static_cast<size_t>(i)])];
  row_sentence_.swap(sentences);
  R_ = n;
}

namespace {
// Before a decode allocates anything: refuse one whose buffers cannot fit (the encoder pass over
// src; in every decoder layer the key/value caches of `rows` hypotheses for `steps` positions and
// the memory's keys and values; scores, step buffers, logits, the output ids), then weights that
// are not finite (skipped when the caller knows the weights are unchanged since the last decode
// with this workspace found them finite: the scan costs more than decoding one short sentence).
template <typename T>
void check_decode(Transformer<T>& model, ConstTokenMap src, Index rows, Index steps, const char* who,
                  const std::string& what, DecodeWorkspace<T>* workspace, bool weights_unchanged) {
  const TransformerConfig& c = model.config();
  const double B = static_cast<double>(src.rows()), S = static_cast<double>(src.cols());
  const double R = static_cast<double>(rows), n = static_cast<double>(steps), d = static_cast<double>(c.d_model);
  const double H = static_cast<double>(c.n_heads), dff = static_cast<double>(c.d_ff);
  const double L = static_cast<double>(c.n_layers), V = static_cast<double>(c.tgt_vocab_size);
  const double elements = L * encoder_layer_elements(B * S, B, H, S, d, dff) + 4 * B * S * d +
                          L * (2 * R * n * d + 2 * B * S * d) + R * n * d + R * H * std::max(S, n) +
                          R * (12 * d + 2 * dff + 2 * V) + n * d;
  check_memory(who, what, elements * static_cast<double>(sizeof(T)) + B * S * S + B * n * 8);
  if (workspace != nullptr && &workspace->decoder.model() != &model) workspace = nullptr;  // refused later
  if (workspace != nullptr && weights_unchanged && workspace->finite_checked) return;
  if (workspace != nullptr) workspace->finite_checked = false;
  check_finite_parameters(model.parameters(), who);
  if (workspace != nullptr) workspace->finite_checked = true;
}

[[noreturn]] void throw_nonfinite_logits(const char* who, Index step) {
  throw NonFiniteError(concat(who, ": the logits of step ", step,
                              " are not finite: the activations overflowed "
                              "(the weights are too large); nothing was decoded"));
}

// The caller's workspace (which must belong to this model), else a fresh one owned by `local`.
template <typename T>
DecodeWorkspace<T>& workspace_for(Transformer<T>& model, DecodeWorkspace<T>* workspace,
                                  std::unique_ptr<DecodeWorkspace<T>>& local) {
  if (workspace != nullptr) {
    TCPP_CHECK(&workspace->decoder.model() == &model, "decode: the workspace belongs to another model");
    return *workspace;
  }
  local = std::make_unique<DecodeWorkspace<T>>(model);
  return *local;
}
}  // namespace

template <typename T>
TokenMatrix greedy_decode(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id, std::int64_t end_id,
                          Index max_length, DecodeWorkspace<T>* workspace, ComputeType compute,
                          bool weights_unchanged) {
  const TransformerConfig& c = model.config();
  check_compute_type<T>(compute, "greedy_decode");
  TCPP_CHECK(start_id > 0 && start_id < c.tgt_vocab_size && end_id > 0 && end_id < c.tgt_vocab_size,
             "greedy_decode: start_id and end_id must be in [1, ", c.tgt_vocab_size, "), got ", start_id, " and ",
             end_id);
  TCPP_CHECK(max_length >= 1, "greedy_decode: max_length must be >= 1, got ", max_length);
  const Index steps = max_length;
  const Index B = src.rows();
  if (B == 0) return TokenMatrix::Zero(0, 1);
  check_decode(model, src, B, steps, "greedy_decode",
               concat("max_length ", max_length, " for ", B, " sentences of source length ", src.cols()), workspace,
               weights_unchanged);
  TokenMatrix out = TokenMatrix::Zero(B, steps);
  std::unique_ptr<DecodeWorkspace<T>> local;
  DecodeWorkspace<T>& ws = workspace_for(model, workspace, local);
  IncrementalDecoder<T>& dec = ws.decoder;
  const bool pack = DecodeWeights<T>::wanted(compute, B);
  dec.start(src, steps, pack ? &ws.weights(compute) : nullptr, compute, !weights_unchanged);
  std::vector<std::int64_t> tokens(static_cast<size_t>(B), start_id);
  std::vector<std::int64_t> next;
  std::vector<Index> keep;
  const Index V = c.tgt_vocab_size;
  for (Index t = 0; t < steps && dec.rows() > 0; ++t) {
    const Matrix<T>& logits = dec.step(tokens.data());  // (R, V)
    const Index R = dec.rows();
    next.resize(static_cast<size_t>(R));
    int bad = 0;
#pragma omp parallel for schedule(static) if (R > 4) reduction(| : bad)
    for (Index r = 0; r < R; ++r) {
      const T* row = logits.data() + r * V;
      bad |= !ConstRowArray<T>(row, V).allFinite();
      next[static_cast<size_t>(r)] = 1 + first_argmax(row + 1, V - 1);  // never the padding id 0
    }
    if (bad) throw_nonfinite_logits("greedy_decode", t);
    keep.clear();
    for (Index r = 0; r < R; ++r) {
      out(dec.sentence_of(r), t) = next[static_cast<size_t>(r)];
      if (next[static_cast<size_t>(r)] != end_id) keep.push_back(r);
    }
    if (static_cast<Index>(keep.size()) != R) dec.select_rows(keep);  // finished sentences leave the batch
    tokens.resize(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) tokens[i] = next[static_cast<size_t>(keep[i])];
  }
  return out;
}

template <typename T>
std::vector<std::vector<BeamHypothesis>> beam_search(Transformer<T>& model, ConstTokenMap src, std::int64_t start_id,
                                                     std::int64_t end_id, Index max_length, Index beam_size,
                                                     double alpha, Index n_best, DecodeWorkspace<T>* workspace,
                                                     ComputeType compute, bool weights_unchanged) {
  const TransformerConfig& c = model.config();
  check_compute_type<T>(compute, "beam_search");
  TCPP_CHECK(start_id > 0 && start_id < c.tgt_vocab_size && end_id > 0 && end_id < c.tgt_vocab_size,
             "beam_search: start_id and end_id must be in [1, ", c.tgt_vocab_size, "), got ", start_id, " and ",
             end_id);
  TCPP_CHECK(beam_size >= 1 && beam_size <= kMaxBeamSize, "beam_search: beam_size must be in [1, ", kMaxBeamSize,
             "], got ", beam_size);
  TCPP_CHECK(n_best >= 1 && n_best <= beam_size, "beam_search: n_best must be in [1, beam_size = ", beam_size,
             "], got ", n_best);
  TCPP_CHECK(max_length >= 1, "beam_search: max_length must be >= 1, got ", max_length);
  TCPP_CHECK(std::isfinite(alpha) && alpha >= 0.0, "beam_search: length_penalty must be a finite number >= 0, got ",
             alpha);
  const Index steps = max_length;
  const Index B = src.rows(), V = c.tgt_vocab_size;
  auto penalty = [alpha](Index len) { return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha); };
  TCPP_CHECK(std::isfinite(penalty(steps)), "beam_search: length_penalty ", alpha, " is too large for max_length ",
             max_length, ": the penalty ((5 + length) / 6) ** length_penalty overflows");

  std::vector<std::vector<BeamHypothesis>> finished(static_cast<size_t>(B));
  // live beams: one row of the decoder each
  struct Live {
    Index sentence;
    std::vector<std::int64_t> tokens;
    double log_prob;
  };
  std::vector<Live> live;
  if (B == 0) return finished;
  check_decode(model, src, B * beam_size, steps, "beam_search",
               concat("beam_size ", beam_size, " and max_length ", max_length, " for ", B,
                      " sentences of source length ", src.cols()),
               workspace, weights_unchanged);
  live.reserve(static_cast<size_t>(B));
  for (Index b = 0; b < B; ++b) live.push_back({b, {}, 0.0});
  std::unique_ptr<DecodeWorkspace<T>> local;
  DecodeWorkspace<T>& ws = workspace_for(model, workspace, local);
  IncrementalDecoder<T>& dec = ws.decoder;
  // after the first step every sentence has up to beam_size rows
  const bool pack = DecodeWeights<T>::wanted(compute, B * beam_size);
  dec.start(src, steps, pack ? &ws.weights(compute) : nullptr, compute, !weights_unchanged);
  std::vector<std::int64_t> feed(static_cast<size_t>(B), start_id);
  // per live row: its best 2k continuations and its log-sum-exp; the best 2k continuations of
  // each row are enough to refill k beams
  const Index keep_per_row = std::min<Index>(2 * beam_size, V - 1);
  std::vector<std::vector<Index>> top;
  std::vector<double> lse;

  auto sentence_done = [&](Index s, const std::vector<const Live*>& beams, Index t) {
    auto& fin = finished[static_cast<size_t>(s)];
    if (beams.empty()) return true;
    if (static_cast<Index>(fin.size()) < n_best) return false;
    // the n_best-th best finished score
    std::vector<double> scores;
    for (auto& h : fin) scores.push_back(h.score);
    std::nth_element(scores.begin(), scores.begin() + (n_best - 1), scores.end(), std::greater<double>());
    const double threshold = scores[static_cast<size_t>(n_best - 1)];
    // log-probs only fall, so a live beam's best possible score is log_prob / penalty(longest)
    double best_live = -std::numeric_limits<double>::infinity();
    for (const Live* l : beams) best_live = std::max(best_live, l->log_prob / penalty(steps));
    (void)t;
    return threshold >= best_live;
  };

  for (Index t = 0; t < steps && !live.empty(); ++t) {
    const Matrix<T>& logits = dec.step(feed.data());  // (R, V), row r = live[r]
    const Index R = dec.rows();
    top.resize(static_cast<size_t>(R));
    lse.resize(static_cast<size_t>(R));
    int bad = 0;
#pragma omp parallel for schedule(static) if (R > 4) reduction(| : bad)
    for (Index r = 0; r < R; ++r) {
      bad |= !ConstRowArray<T>(logits.data() + r * V, V).allFinite();
      lse[static_cast<size_t>(r)] =
          top_ids_and_lse(logits.data() + r * V, V, keep_per_row, top[static_cast<size_t>(r)]);
    }
    if (bad) throw_nonfinite_logits("beam_search", t);

    std::vector<Live> next_live;
    std::vector<Index> rows;
    std::vector<std::int64_t> next_feed;
    // process each sentence's beams (rows of one sentence are contiguous)
    Index r0 = 0;
    while (r0 < R) {
      const Index s = live[static_cast<size_t>(r0)].sentence;
      Index r1 = r0;
      while (r1 < R && live[static_cast<size_t>(r1)].sentence == s) ++r1;
      // candidates (score, row, token)
      struct Cand {
        double lp;
        Index row;
        std::int64_t tok;
      };
      std::vector<Cand> cands;
      for (Index r = r0; r < r1; ++r) {
        const T* row = logits.data() + r * V;
        for (Index tok : top[static_cast<size_t>(r)])
          cands.push_back(
              {live[static_cast<size_t>(r)].log_prob + (static_cast<double>(row[tok]) - lse[static_cast<size_t>(r)]), r,
               tok});
      }
      std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.lp > b.lp; });
      std::vector<const Live*> kept;
      const size_t first_new = next_live.size();
      for (const Cand& cd : cands) {
        if (static_cast<Index>(next_live.size() - first_new) >= beam_size) break;
        const Live& parent = live[static_cast<size_t>(cd.row)];
        std::vector<std::int64_t> toks = parent.tokens;
        toks.push_back(cd.tok);
        if (cd.tok == end_id) {
          const Index len = static_cast<Index>(toks.size());
          finished[static_cast<size_t>(s)].push_back({toks, cd.lp, cd.lp / penalty(len), true});
        } else if (t + 1 < steps) {
          next_live.push_back({s, std::move(toks), cd.lp});
          rows.push_back(cd.row);
          next_feed.push_back(cd.tok);
        } else {
          // cut at max_length: keep as an unfinished hypothesis
          const Index len = static_cast<Index>(toks.size());
          finished[static_cast<size_t>(s)].push_back({toks, cd.lp, cd.lp / penalty(len), false});
          next_live.push_back({s, {}, 0.0});  // placeholder to count toward the beam, removed below
          rows.push_back(-1);
          next_feed.push_back(0);
        }
      }
      for (size_t i = first_new; i < next_live.size(); ++i)
        if (rows[i] >= 0) kept.push_back(&next_live[i]);
      if (sentence_done(s, kept, t)) {
        // drop this sentence's live beams
        next_live.resize(first_new);
        rows.resize(first_new);
        next_feed.resize(first_new);
      }
      r0 = r1;
    }
    // remove placeholders of hypotheses cut at max_length
    std::vector<Live> compact;
    std::vector<Index> compact_rows;
    std::vector<std::int64_t> compact_feed;
    for (size_t i = 0; i < next_live.size(); ++i) {
      if (rows[i] < 0) continue;
      compact.push_back(std::move(next_live[i]));
      compact_rows.push_back(rows[i]);
      compact_feed.push_back(next_feed[i]);
    }
    live.swap(compact);
    feed.swap(compact_feed);
    if (!live.empty()) dec.select_rows(compact_rows);
  }
  // any beams still alive at the end (cannot happen when steps ran out, kept for safety)
  for (const Live& l : live) {
    const Index len = static_cast<Index>(l.tokens.size());
    finished[static_cast<size_t>(l.sentence)].push_back({l.tokens, l.log_prob, l.log_prob / penalty(len), false});
  }
  for (auto& fin : finished) {
    std::stable_sort(fin.begin(), fin.end(),
                     [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
    if (static_cast<Index>(fin.size()) > n_best) fin.resize(static_cast<size_t>(n_best));
  }
  return finished;
}

template struct DecodeLinear<float>;
template struct DecodeLinear<double>;
template struct DecodeWeights<float>;
template struct DecodeWeights<double>;
template class IncrementalDecoder<float>;
template class IncrementalDecoder<double>;
template TokenMatrix greedy_decode<float>(Transformer<float>&, ConstTokenMap, std::int64_t, std::int64_t, Index,
                                          DecodeWorkspace<float>*, ComputeType, bool);
template TokenMatrix greedy_decode<double>(Transformer<double>&, ConstTokenMap, std::int64_t, std::int64_t, Index,
                                           DecodeWorkspace<double>*, ComputeType, bool);
template std::vector<std::vector<BeamHypothesis>> beam_search<float>(Transformer<float>&, ConstTokenMap, std::int64_t,
                                                                     std::int64_t, Index, Index, double, Index,
                                                                     DecodeWorkspace<float>*, ComputeType, bool);
template std::vector<std::vector<BeamHypothesis>> beam_search<double>(Transformer<double>&, ConstTokenMap, std::int64_t,
                                                                      std::int64_t, Index, Index, double, Index,
                                                                      DecodeWorkspace<double>*, ComputeType, bool);

}  // namespace transformer
