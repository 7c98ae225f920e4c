// stack.hpp — the residual sub-layer, forward, backward and at inference, written once for every
// layer of the encoder, the decoder and the language model; and what the encoder and decoder
// stacks have in common (LayerStack): a positional embedding, N layers and (pre-norm) a final
// LayerNorm, named "embedding", "layers.i" and "norm".
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "transformer/core/checks.hpp"
#include "transformer/core/random.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/embedding.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/layer_norm.hpp"

namespace transformer {

// Forward of one residual sub-layer of an encoder or decoder layer, F being an attention or the
// feed-forward network: `sub_forward(input)` runs F and returns its output buffer, which is
// dropped out in place. Post-norm returns LN(x + Dropout(F(x))) (the norm's output); pre-norm
// writes x + Dropout(F(LN(x))) into `sum` and returns it.
template <typename T, typename SubForward>
const Matrix<T>& residual_forward(bool pre_norm, LayerNorm<T>& norm, Dropout<T>& dropout, SubForward&& sub_forward,
                                  ConstMatrixMap<T> x, bool training, const Index* ids, Matrix<T>& sum) {
  if (!pre_norm) {
    Matrix<T>& a = sub_forward(x);
    dropout.forward_inplace(MatrixMap<T>(a.data(), a.rows(), a.cols()), training, ids);
    return norm.forward_residual(x, ConstMatrixMap<T>(a.data(), a.rows(), a.cols()));
  }
  const Matrix<T>& n = norm.forward(x);
  Matrix<T>& a = sub_forward(ConstMatrixMap<T>(n.data(), n.rows(), n.cols()));
  dropout.forward_inplace(MatrixMap<T>(a.data(), a.rows(), a.cols()), training, ids);
  sum.resize(x.rows(), x.cols());
  add_arrays(sum.data(), x.data(), a.data(), sum.size());
  return sum;
}

// Backward of one residual sub-layer of an encoder or decoder layer, F being an attention or the
// feed-forward network whose backward is `sub_backward(d output) -> d input`:
//   post-norm  y = LN(x + Dropout(F(x))):  dx = s + F'(Dropout'(s)),  s = LN'(dy)
//   pre-norm   y = x + Dropout(F(LN(x))):  dx = dy + LN'(F'(Dropout'(dy)))
// `scratch` holds the dropped-out gradient; dx must be neither dy's storage nor scratch.
template <typename T, typename SubBackward>
void residual_backward(bool pre_norm, LayerNorm<T>& norm, const Dropout<T>& dropout, SubBackward&& sub_backward,
                       ConstMatrixMap<T> dy, Matrix<T>& scratch, Matrix<T>& dx) {
  auto cmap = [](const Matrix<T>& m) { return ConstMatrixMap<T>(m.data(), m.rows(), m.cols()); };
  if (!pre_norm) {
    const Matrix<T>& s = norm.backward(dy);   // d(x + F'(x)): to x directly and through F
    dropout.backward_into(cmap(s), scratch);  // scratch = Dropout'(s), one pass
    const Matrix<T>& d_sub = sub_backward(cmap(scratch));
    dx.resize(s.rows(), s.cols());
    add_arrays(dx.data(), s.data(), d_sub.data(), dx.size());
    return;
  }
  dropout.backward_into(dy, scratch);
  const Matrix<T>& d_sub = sub_backward(cmap(scratch));
  const Matrix<T>& d_norm = norm.backward(cmap(d_sub));
  dx.resize(dy.rows(), dy.cols());
  add_arrays(dx.data(), dy.data(), d_norm.data(), dx.size());
}

// residual_forward and residual_backward of a sub-layer that is one layer F (an attention or the
// feed-forward network) whose forward(input, args...) fills its output buffer, output_mut(), and
// whose backward(d output) returns d input.
template <typename T, typename Layer, typename... Args>
const Matrix<T>& layer_residual(bool pre_norm, LayerNorm<T>& norm, Dropout<T>& dropout, ConstMatrixMap<T> x,
                                bool training, const Index* ids, Matrix<T>& sum, Layer& layer, const Args&... args) {
  return residual_forward<T>(
      pre_norm, norm, dropout,
      [&](ConstMatrixMap<T> in) -> Matrix<T>& {
        layer.forward(in, args...);
        return layer.output_mut();
      },
      x, training, ids, sum);
}
template <typename T, typename Layer>
void layer_residual_backward(bool pre_norm, LayerNorm<T>& norm, const Dropout<T>& dropout, Layer& layer,
                             ConstMatrixMap<T> dy, Matrix<T>& scratch, Matrix<T>& dx) {
  residual_backward<T>(
      pre_norm, norm, dropout, [&layer](ConstMatrixMap<T> d) -> const Matrix<T>& { return layer.backward(d); }, dy,
      scratch, dx);
}

// The parameters of a layer of a self-attention and a feed-forward sub-layer (EncoderLayer, the
// language model's block), by the names both give them.
template <typename T>
ParameterList<T> attention_block_parameters(ParameterList<T> attention, LayerNorm<T>& norm1, FeedForward<T>& ff,
                                            LayerNorm<T>& norm2) {
  return named_parameters<T>({{"self_attention", std::move(attention)},
                              {"norm1", norm1.parameters()},
                              {"feed_forward", ff.parameters()},
                              {"norm2", norm2.parameters()}});
}

// One residual sub-layer of an encoder or decoder layer at inference (no dropout, nothing kept),
// F being an attention or the feed-forward network: `sub(in, out)` writes F(in) into out.
//   post-norm  x = LN(x + F(x))      pre-norm  x = x + F(LN(x))
// x is updated in place; n and a are scratch.
template <typename T, typename Sub>
void residual_infer(bool pre_norm, const LayerNorm<T>& norm, Sub&& sub, Matrix<T>& x, Matrix<T>& n, Matrix<T>& a) {
  n.resize(x.rows(), x.cols());
  if (!pre_norm) {
    sub(static_cast<const Matrix<T>&>(x), a);
    norm.forward_inference(a.data(), x.data(), n.data(), x.rows());
    x.swap(n);
    return;
  }
  norm.forward_inference(x.data(), nullptr, n.data(), x.rows());
  sub(static_cast<const Matrix<T>&>(n), a);
  x += a;
}

// Backward through the final norm (if any) and the layers in reverse order; returns the gradient
// of the stack's input (the buffer of the first layer).
template <typename T, typename Layer, typename PerLayer>
ConstMatrixMap<T> stack_backward(ConstMatrixMap<T> dout, std::vector<std::unique_ptr<Layer>>& layers,
                                 LayerNorm<T>* final_norm, PerLayer after_layer) {
  ConstMatrixMap<T> d = dout;
  if (final_norm) {
    const Matrix<T>& dn = final_norm->backward(d);
    new (&d) ConstMatrixMap<T>(dn.data(), dn.rows(), dn.cols());  // re-seat the map
  }
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    const Matrix<T>& dx = (*it)->backward(d);
    after_layer(**it);
    new (&d) ConstMatrixMap<T>(dx.data(), dx.rows(), dx.cols());
  }
  return d;
}

// A stack of Layer (EncoderLayer, DecoderLayer): the positional embedding of the input tokens and
// its dropout, the layers, and (pre-norm) a final LayerNorm. The encoder and the decoder derive
// from it and run the layers their way (forward, inference); what follows is the same for both.
template <typename T, typename Layer>
class LayerStack {
 public:
  const Matrix<T>& output() const {  // the last forward's, after the final norm (if any)
    return final_norm_ ? final_norm_->output() : layers_.back()->output();
  }

  ParameterList<T> parameters() {  // embedding.weight, layers.i.*, (pre-norm) norm.*
    ParameterList<T> ps;
    append_parameters(ps, embedding_.parameters(), "embedding");
    for (size_t i = 0; i < layers_.size(); ++i)
      append_parameters(ps, layers_[i]->parameters(), "layers." + std::to_string(i));
    if (final_norm_) append_parameters(ps, final_norm_->parameters(), "norm");
    return ps;
  }
  void zero_grad() {
    embedding_.zero_grad();
    for (auto& l : layers_) l->zero_grad();
    if (final_norm_) final_norm_->zero_grad();
  }
  // The stack's own dropout (after the embedding) first, then every layer's.
  std::vector<Dropout<T>*> dropouts() {
    std::vector<Dropout<T>*> ds{&dropout_};
    for (auto& l : layers_)
      for (auto* d : l->dropouts()) ds.push_back(d);
    return ds;
  }

  // The id of padding in the stack's input (0 by default): masked as a key, skipped by packing,
  // no embedding gradient.
  void set_padding_id(std::int64_t id) {
    embedding_.embedding().set_padding_id(id);
    padding_id_ = id;
  }
  std::int64_t padding_id() const { return padding_id_; }

  PositionalEmbedding<T> embedding_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<LayerNorm<T>> final_norm_;  // pre-norm only

 protected:
  std::int64_t padding_id_ = 0;
  // `who` ("Encoder") names the stack in messages; each layer holds layer_parameters weights. The
  // memory of all weights is checked before any is allocated; layer i is
  // Layer(d_model, n_heads, d_ff, dropout, pre_norm, eps, splitmix64(seed + layer_seeds + i)).
  // With shared_embedding, the token embedding is tied to that one from the start.
  LayerStack(const char* who, double layer_parameters, std::uint64_t layer_seeds, Index vocab_size, Index d_model,
             Index n_layers, Index n_heads, Index d_ff, double dropout, Index max_length, PositionalLayout layout,
             bool pre_norm, double eps, std::uint64_t seed, Embedding<T>* shared_embedding = nullptr)
      : embedding_(checked_size<T>(
                       who,
                       concat("vocab_size ", vocab_size, ", d_model ", d_model, ", n_layers ", n_layers, ", d_ff ",
                              d_ff, ", max_length ", max_length),
                       static_cast<double>(vocab_size) * d_model + static_cast<double>(n_layers) * layer_parameters,
                       static_cast<double>(max_length) * d_model, vocab_size),
                   d_model, max_length, layout, splitmix64(seed + 1), shared_embedding),
        dropout_(dropout, seed, splitmix64(seed + 2)) {
    TCPP_CHECK(n_layers > 0, who, ": n_layers must be positive, got ", n_layers);
    for (Index i = 0; i < n_layers; ++i)
      layers_.push_back(std::make_unique<Layer>(d_model, n_heads, d_ff, dropout, pre_norm, eps,
                                                splitmix64(seed + layer_seeds + static_cast<std::uint64_t>(i))));
    if (pre_norm) final_norm_ = std::make_unique<LayerNorm<T>>(d_model, eps);
  }

  // Backward from the gradient of the output through the final norm, the layers in reverse
  // (after_layer(layer) after each), the input dropout and the embedding (its gradient accumulates).
  template <typename AfterLayer>
  void backward_through(ConstMatrixMap<T> dout, AfterLayer after_layer) {
    dx_ = stack_backward<T>(dout, layers_, final_norm_.get(), after_layer);
    dropout_.backward_inplace(MatrixMap<T>(dx_.data(), dx_.rows(), dx_.cols()));
    embedding_.backward(ConstMatrixMap<T>(dx_.data(), dx_.rows(), dx_.cols()));
  }

  Dropout<T> dropout_;  // after the embedding
  Matrix<T> dx_;        // (rows, d) the gradient of the embedded input
};

}  // namespace transformer
