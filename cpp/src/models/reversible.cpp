#include "transformer/models/reversible.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "transformer/attention/attention.hpp"
#include "transformer/attention/kinds.hpp"
#include "transformer/attention/lsh_attention.hpp"
#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"

namespace transformer {

namespace {

// x[i] -= y[i] over n elements.
template <typename T>
void subtract_arrays(T* x, const T* y, Index n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (Index i = 0; i < n; ++i) x[i] -= y[i];
}

// Rows [r0, r0 + n) of a row-major (rows, d) buffer.
template <typename T>
MatrixMap<T> rows_map(T* p, Index r0, Index n, Index d) {
  return MatrixMap<T>(p + r0 * d, n, d);
}
template <typename T>
ConstMatrixMap<T> rows_cmap(const T* p, Index r0, Index n, Index d) {
  return ConstMatrixMap<T>(p + r0 * d, n, d);
}

}  // namespace

// One reversible block: y1 = x1 + Dropout_f(Attention(norm1(x2))), y2 = x2 + Dropout_g(FFN(norm2(y1))).
template <typename T>
struct ReversibleStack<T>::Block {
  Block(const ReversibleStackOptions& o, std::uint64_t seed)
      : norm1(o.d_model, o.eps),
        norm2(o.d_model, o.eps),
        attention(make_self_attention<T>(o.attention, o.d_model, o.n_heads, splitmix64(seed + 1), o.attention_options)),
        lsh(dynamic_cast<LSHSelfAttention<T>*>(attention.get())),
        ff(o.d_model, o.d_ff, o.dropout, splitmix64(seed + 2)),
        drop_f(o.dropout, o.seed, splitmix64(seed + 3)),
        drop_g(o.dropout, o.seed, splitmix64(seed + 4)) {}

  LayerNorm<T> norm1, norm2;
  std::unique_ptr<SelfAttention<T>> attention;
  LSHSelfAttention<T>* lsh;  // the attention when it is LSH attention (its hash counter is replayed), else nullptr
  FeedForward<T> ff;
  Dropout<T> drop_f, drop_g;  // after the attention, after the feed-forward
  // The dropout call counters of the last forward (of drop_f, the feed-forward's, drop_g), which
  // the recomputation in backward replays.
  std::uint64_t calls_f = 0, calls_ff = 0, calls_g = 0;
  std::uint64_t calls_hash = 0;  // LSH attention's hash counter before the forward
  // Records the counters above at the start of a forward.
  void note_calls() {
    calls_f = drop_f.calls();
    calls_ff = ff.dropout().calls();
    calls_g = drop_g.calls();
    if (lsh) calls_hash = lsh->calls();
  }
  // Ordinary (non-reversible) stack only: the block's inputs that its norms read in backward.
  Matrix<T> x2, y1;  // (rows, d)
};

template <typename T>
ReversibleStack<T>::ReversibleStack(const ReversibleStackOptions& o) : opt_(o) {
  TCPP_CHECK(o.n_layers > 0, "ReversibleStack: n_layers must be a positive integer, got ", o.n_layers);
  TCPP_CHECK(o.d_model > 0 && o.n_heads > 0 && o.d_ff > 0, "ReversibleStack: d_model, n_heads and d_ff must be ",
             "positive, got ", o.d_model, ", ", o.n_heads, " and ", o.d_ff);
  TCPP_CHECK(o.d_model % o.n_heads == 0, "ReversibleStack: d_model ", o.d_model, " is not divisible by n_heads ",
             o.n_heads);
  TCPP_CHECK(o.chunk_rows > 0, "ReversibleStack: chunk_rows must be a positive integer, got ", o.chunk_rows);
  // every kind whose record says it works in a reversible stack (not one with a segment memory,
  // which a recomputation from the next block's output cannot rebuild); checked before anything
  // is allocated
  const AttentionKind* kind = find_attention_kind(o.attention);
  if (kind == nullptr || !kind->reversible)
    throw std::invalid_argument(concat("ReversibleStack: attention must be one of ",
                                       quoted_attention_kinds(works_reversible, ""), ", got '", o.attention, "'"));
  const double d = static_cast<double>(o.d_model), dff = static_cast<double>(o.d_ff);
  checked_size<T>("ReversibleStack", concat(o.n_layers, " layers of d_model ", o.d_model, ", d_ff ", o.d_ff),
                  static_cast<double>(o.n_layers) * encoder_layer_parameters(d, dff), 0, 0);
  for (Index i = 0; i < o.n_layers; ++i)
    blocks_.push_back(std::make_unique<Block>(o, splitmix64(o.seed + 1000003ULL * static_cast<std::uint64_t>(i + 1))));
}

template <typename T>
ReversibleStack<T>::~ReversibleStack() = default;

template <typename T>
const Matrix<T>& ReversibleStack<T>::forward(ConstMatrixMap<T> x, Index B, Index T_len, bool training) {
  const Index d = opt_.d_model;
  TCPP_CHECK(x.cols() == d, "ReversibleStack: input has ", x.cols(), " features, expected d_model ", d);
  TCPP_CHECK(B > 0 && T_len > 0 && x.rows() == B * T_len, "ReversibleStack: input has ", x.rows(),
             " rows, expected B*T = ", B, "*", T_len);
  state_ = State::None;
  B_ = B;
  T_ = T_len;
  training_ = training;
  const Index rows = B * T_len;
  if (static_cast<Index>(row_ids_.size()) != rows) {
    row_ids_.resize(static_cast<size_t>(rows));
    for (Index r = 0; r < rows; ++r) row_ids_[static_cast<size_t>(r)] = r;
  }
  // the stack's input is duplicated into both streams: x1 = x2 = x              (rows, d) each
  x1_ = x;
  x2_ = x;
  buf_.resize(rows, d);
  if (opt_.reversible) {
    forward_reversible(training);
  } else {
    forward_ordinary(training);
  }
  // output = (y1 + y2) / 2                                                       (rows, d)
  out_.resize(rows, d);
  add_arrays(out_.data(), x1_.data(), x2_.data(), out_.size());
  out_ *= T(0.5);
  state_ = State::Forward;
  return out_;
}

template <typename T>
void ReversibleStack<T>::drop_rows(Dropout<T>& owner, std::uint64_t counter, T* data, Index r0, Index n,
                                   bool training) {
  // The dropout of `owner`'s `counter`-th call on rows [r0, r0 + n) of a (rows, d) buffer: row r
  // draws the mask of row r of the whole matrix, so chunks reproduce the unchunked masks. A copy
  // of `owner` (the shared worker_) draws it, so no block keeps a mask. Multiplying by the mask is
  // also the dropout's backward (the mask is diagonal), so the same call drops out a gradient.
  // `owner`'s counter is left where the forward's call left it.
  worker_ = owner;
  worker_.set_calls(counter);
  worker_.forward_inplace(rows_map(data, r0, n, opt_.d_model), training, row_ids_.data() + r0);
  owner.set_calls(worker_.calls());
}

template <typename T>
void ReversibleStack<T>::release_block(Block& b, bool after_backward) {
  // The norms and the feed-forward resize their buffers to each call's rows: a call on one zero
  // row shrinks what the last chunk left (its hidden layer, statistics, gradients) to one row.
  // Its gradients are exactly zero (zero input, zero dout), so the parameter gradients do not
  // change. The feed-forward runs it in training so that its dropout mask becomes one row too
  // (its counter is put back); a copy of that dropout then holds one row where the original kept
  // the capacity of a chunk.
  zero_.setZero(1, opt_.d_model);
  for (LayerNorm<T>* norm : {&b.norm1, &b.norm2}) {
    norm->forward(cmap(zero_));
    if (after_backward) norm->backward(cmap(zero_));
  }
  Dropout<T>& ff_dropout = b.ff.dropout();
  const std::uint64_t calls = ff_dropout.calls();
  b.ff.forward(cmap(zero_), true);
  ff_dropout.set_calls(calls);
  if (after_backward) b.ff.backward(cmap(zero_));
  ff_dropout = Dropout<T>(ff_dropout);
  b.attention->release();
}

template <typename T>
void ReversibleStack<T>::g_chunk(Block& b, const T* in, Index r0, Index r1, bool training, T* out) {
  // G(x) = Dropout_g(FFN(norm2(x))) on rows [r0, r1), caching for backward   (r1 - r0, d)
  const Index n = r1 - r0, d = opt_.d_model;
  const Matrix<T>& h = b.norm2.forward(rows_cmap(in, r0, n, d));
  b.ff.dropout().set_calls(b.calls_ff);
  const Matrix<T>& g = b.ff.forward(cmap(h), training, row_ids_.data() + r0);
  std::memcpy(out + r0 * d, g.data(), static_cast<size_t>(n * d) * sizeof(T));
  drop_rows(b.drop_g, b.calls_g, out, r0, n, training);
}

template <typename T>
void ReversibleStack<T>::forward_reversible(bool training) {
  const Index rows = B_ * T_, d = opt_.d_model, chunk = opt_.chunk_rows;
  for (auto& bp : blocks_) {
    Block& b = *bp;
    b.note_calls();
    // y1 = x1 + Dropout_f(Attention(norm1(x2))); the norm keeps nothing here       (rows, d)
    b.norm1.forward_inference(x2_.data(), nullptr, buf_.data(), rows);
    const Matrix<T>& a = b.attention->forward(cmap(buf_), B_, T_, opt_.causal);  // (rows, d)
    buf_ = a;
    b.attention->release();  // nothing of the attention is kept: backward recomputes it
    for (Index r0 = 0; r0 < rows; r0 += chunk)
      drop_rows(b.drop_f, b.calls_f, buf_.data(), r0, std::min(chunk, rows - r0), training);
    add_arrays(x1_.data(), x1_.data(), buf_.data(), x1_.size());
    // y2 = x2 + G(y1), chunk by chunk (the feed-forward's hidden layer is (chunk, d_ff))
    for (Index r0 = 0; r0 < rows; r0 += chunk) {
      const Index r1 = std::min(rows, r0 + chunk);
      g_chunk(b, x1_.data(), r0, r1, training, buf_.data());
      add_arrays(x2_.data() + r0 * d, x2_.data() + r0 * d, buf_.data() + r0 * d, (r1 - r0) * d);
    }
    release_block(b, false);
  }
}

template <typename T>
void ReversibleStack<T>::forward_ordinary(bool training) {
  // The same blocks, each keeping its activations for backward (its norms, attention,
  // feed-forward and dropouts cache theirs; the block keeps the norms' inputs x2 and y1).
  for (auto& bp : blocks_) {
    Block& b = *bp;
    b.note_calls();
    b.x2 = x2_;                                                  // (rows, d)
    const Matrix<T>& n1 = b.norm1.forward(cmap(b.x2));           // (rows, d)
    buf_ = b.attention->forward(cmap(n1), B_, T_, opt_.causal);  // (rows, d)
    b.drop_f.forward_inplace(mmap(buf_), training, row_ids_.data());
    add_arrays(x1_.data(), x1_.data(), buf_.data(), x1_.size());  // y1
    b.y1 = x1_;                                                   // (rows, d)
    const Matrix<T>& n2 = b.norm2.forward(cmap(b.y1));            // (rows, d)
    buf_ = b.ff.forward(cmap(n2), training, row_ids_.data());     // (rows, d)
    b.drop_g.forward_inplace(mmap(buf_), training, row_ids_.data());
    add_arrays(x2_.data(), x2_.data(), buf_.data(), x2_.size());  // y2
  }
}

template <typename T>
const Matrix<T>& ReversibleStack<T>::backward(ConstMatrixMap<T> dout) {
  if (state_ == State::None) throw std::runtime_error("ReversibleStack: backward() called before forward()");
  if (state_ == State::Backward)
    throw std::runtime_error(
        "ReversibleStack: backward() was already called for this forward (the stack rebuilt its inputs "
        "on the way); call forward() again");
  const Index rows = B_ * T_, d = opt_.d_model;
  TCPP_CHECK(dout.rows() == rows && dout.cols() == d, "ReversibleStack: backward got dout of shape (", dout.rows(),
             ", ", dout.cols(), "), expected (", rows, ", ", d, ")");
  // output = (y1 + y2) / 2, so dy1 = dy2 = dout / 2                               (rows, d) each
  dx1_ = dout * T(0.5);
  dx2_ = dx1_;
  dbuf_.resize(rows, d);
  state_ = State::Backward;
  if (opt_.reversible) {
    backward_reversible();
  } else {
    backward_ordinary();
  }
  // the input went into both streams: dx = dx1 + dx2                            (rows, d)
  dx_.resize(rows, d);
  add_arrays(dx_.data(), dx1_.data(), dx2_.data(), dx_.size());
  return dx_;
}

template <typename T>
void ReversibleStack<T>::backward_reversible() {
  // Block by block from the top, with (x1_, x2_) = (y1, y2) and (dx1_, dx2_) = (dy1, dy2) of the
  // block on entry and its (x1, x2), (dx1, dx2) on exit:
  //   G:  x2 = y2 - G(y1);     dy1 += G'(y1)^T dy2     (y2 = x2 + G(y1): dx2 gets dy2 as it is)
  //   F:  x1 = y1 - F(x2);     dx2 = dy2 + F'(x2)^T dy1,  dx1 = dy1
  // Each of F and G is recomputed once, with caching and the forward's dropout counters, and
  // gone back through at once; the recomputed values are the forward's bit for bit, so the
  // rebuilt x equals the forward's x up to the rounding of y +- F.
  const Index rows = B_ * T_, d = opt_.d_model, chunk = opt_.chunk_rows;
  const bool training = training_;
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Block& b = **it;
    // G, chunk by chunk: G(y1) into buf_, x2 = y2 - G(y1), then back through G
    for (Index r0 = 0; r0 < rows; r0 += chunk) {
      const Index r1 = std::min(rows, r0 + chunk), n = r1 - r0;
      g_chunk(b, x1_.data(), r0, r1, training, buf_.data());
      subtract_arrays(x2_.data() + r0 * d, buf_.data() + r0 * d, n * d);
      // dG = Dropout_g'(dy2); dh = FFN'(dG); dy1 += norm2'(dh)                  (n, d)
      MatrixMap<T> dg = rows_map(dbuf_.data(), r0, n, d);
      dg = rows_cmap(dx2_.data(), r0, n, d);
      drop_rows(b.drop_g, b.calls_g, dbuf_.data(), r0, n, training);
      const Matrix<T>& dh = b.ff.backward(ConstMatrixMap<T>(dg.data(), n, d));
      const Matrix<T>& dn = b.norm2.backward(cmap(dh));
      add_arrays(dx1_.data() + r0 * d, dx1_.data() + r0 * d, dn.data(), n * d);
    }
    // F: norm1(x2) into dbuf_, the attention recomputed (cached), x1 = y1 - F(x2)
    Matrix<T>& nrm = dbuf_;  // (rows, d) the attention's input, alive until its backward
    b.norm1.forward_inference(x2_.data(), nullptr, nrm.data(), rows);
    std::uint64_t hash_after = 0;  // LSH: the counter as the forward left it, put back afterwards
    if (b.lsh) {
      hash_after = b.lsh->calls();
      b.lsh->set_calls(b.calls_hash);  // the forward's rotations, so the forward's buckets
    }
    const Matrix<T>& a = b.attention->forward(cmap(nrm), B_, T_, opt_.causal);  // (rows, d)
    if (b.lsh) b.lsh->set_calls(hash_after);
    buf_ = a;
    for (Index r0 = 0; r0 < rows; r0 += chunk)
      drop_rows(b.drop_f, b.calls_f, buf_.data(), r0, std::min(chunk, rows - r0), training);
    subtract_arrays(x1_.data(), buf_.data(), x1_.size());
    // dF = Dropout_f'(dy1) (the mask again), da = Attention'(dF)                  (rows, d)
    buf_ = dx1_;
    for (Index r0 = 0; r0 < rows; r0 += chunk)
      drop_rows(b.drop_f, b.calls_f, buf_.data(), r0, std::min(chunk, rows - r0), training);
    const Matrix<T>& da = b.attention->backward(cmap(buf_));
    // dx2 = dy2 + norm1'(da), the norm recomputed chunk by chunk                  (rows, d)
    for (Index r0 = 0; r0 < rows; r0 += chunk) {
      const Index n = std::min(chunk, rows - r0);
      b.norm1.forward(rows_cmap(x2_.data(), r0, n, d));
      const Matrix<T>& dn = b.norm1.backward(rows_cmap(da.data(), r0, n, d));
      add_arrays(dx2_.data() + r0 * d, dx2_.data() + r0 * d, dn.data(), n * d);
    }
    release_block(b, true);
  }
}

template <typename T>
void ReversibleStack<T>::backward_ordinary() {
  // Block by block from the top, the plain chain rule through what each block kept:
  //   y2 = x2 + Dropout_g(FFN(norm2(y1))):  dy1 += norm2'(FFN'(Dropout_g'(dy2)))
  //   y1 = x1 + Dropout_f(Attn(norm1(x2))): dx2 = dy2 + norm1'(Attn'(Dropout_f'(dy1))), dx1 = dy1
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Block& b = **it;
    dbuf_ = dx2_;
    b.drop_g.backward_inplace(mmap(dbuf_));
    const Matrix<T>& dh = b.ff.backward(cmap(dbuf_));
    const Matrix<T>& dn2 = b.norm2.backward(cmap(dh));
    add_arrays(dx1_.data(), dx1_.data(), dn2.data(), dx1_.size());
    dbuf_ = dx1_;
    b.drop_f.backward_inplace(mmap(dbuf_));
    const Matrix<T>& da = b.attention->backward(cmap(dbuf_));
    const Matrix<T>& dn1 = b.norm1.backward(cmap(da));
    add_arrays(dx2_.data(), dx2_.data(), dn1.data(), dx2_.size());
  }
}

template <typename T>
ParameterList<T> ReversibleStack<T>::parameters() {
  ParameterList<T> ps;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block& b = *blocks_[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    append_parameters(ps, b.norm1.parameters(), p + "norm1");
    append_parameters(ps, b.attention->parameters(), p + "self_attention");
    append_parameters(ps, b.norm2.parameters(), p + "norm2");
    append_parameters(ps, b.ff.parameters(), p + "feed_forward");
  }
  return ps;
}

template <typename T>
void ReversibleStack<T>::zero_grad() {
  for (auto& b : blocks_) {
    b->norm1.zero_grad();
    b->attention->zero_grad();
    b->norm2.zero_grad();
    b->ff.zero_grad();
  }
}

template <typename T>
SelfAttention<T>& ReversibleStack<T>::attention(Index i) {
  TCPP_CHECK(i >= 0 && i < static_cast<Index>(blocks_.size()), "ReversibleStack: block ", i, " does not exist (",
             blocks_.size(), " blocks)");
  return *blocks_[static_cast<size_t>(i)]->attention;
}

template <typename T>
std::vector<Dropout<T>*> ReversibleStack<T>::dropouts() {
  std::vector<Dropout<T>*> ds;
  for (auto& b : blocks_)
    for (Dropout<T>* d : {&b->drop_f, &b->ff.dropout(), &b->drop_g}) ds.push_back(d);
  return ds;
}

template <typename T>
double ReversibleStack<T>::activation_bytes() const {
  if (state_ != State::Forward) return 0.0;
  const double rows = static_cast<double>(B_ * T_), d = static_cast<double>(opt_.d_model);
  const double size = static_cast<double>(sizeof(T));
  if (opt_.reversible) return 2.0 * rows * d * size;  // the streams (y1, y2) of the top block
  // Per block, what it and its layers cache for backward (their shapes, attention.hpp,
  // feed_forward.hpp, layer_norm.hpp, dropout.hpp): the inputs x2, y1 and the norms' outputs and
  // statistics; the attention's [Q | K | V], (B*H*T, T) weights, context and output; the dropout
  // masks (one bit an element, each row starting a 64-bit word); the feed-forward's hidden layer,
  // its mask and output.
  const double H = static_cast<double>(opt_.n_heads), dff = static_cast<double>(opt_.d_ff);
  const double T_len = static_cast<double>(T_);
  auto mask_bytes = [rows](double cols) { return rows * std::ceil(cols / 64.0) * 8.0; };
  const double values = 2 * rows * d + 2 * (rows * d + 2 * rows) + (3 * rows * d + rows * H * T_len + 2 * rows * d) +
                        (rows * dff + rows * d);
  const double per_block = values * size + 2 * mask_bytes(d) + mask_bytes(dff);
  return static_cast<double>(blocks_.size()) * per_block;
}

template class ReversibleStack<float>;
template class ReversibleStack<double>;

}  // namespace transformer
