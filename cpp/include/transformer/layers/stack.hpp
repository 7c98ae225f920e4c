// stack.hpp — what the encoder and decoder stacks have in common: a positional embedding, N
// layers and (pre-norm) a final LayerNorm, named "embedding", "layers.i" and "norm".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transformer/layers/dropout.hpp"
#include "transformer/layers/embedding.hpp"
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
  auto map = [](Matrix<T>& m) { return MatrixMap<T>(m.data(), m.rows(), m.cols()); };
  auto cmap = [](const Matrix<T>& m) { return ConstMatrixMap<T>(m.data(), m.rows(), m.cols()); };
  if (!pre_norm) {
    const Matrix<T>& s = norm.backward(dy);  // d(x + F'(x)): to x directly and through F
    scratch = s;
    dropout.backward_inplace(map(scratch));
    const Matrix<T>& d_sub = sub_backward(cmap(scratch));
    dx.resize(s.rows(), s.cols());
    add_arrays(dx.data(), s.data(), d_sub.data(), dx.size());
    return;
  }
  scratch = dy;
  dropout.backward_inplace(map(scratch));
  const Matrix<T>& d_sub = sub_backward(cmap(scratch));
  const Matrix<T>& d_norm = norm.backward(cmap(d_sub));
  dx.resize(dy.rows(), dy.cols());
  add_arrays(dx.data(), dy.data(), d_norm.data(), dx.size());
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

template <typename T, typename Layer>
ParameterList<T> stack_parameters(PositionalEmbedding<T>& embedding, std::vector<std::unique_ptr<Layer>>& layers,
                                  LayerNorm<T>* final_norm) {
  ParameterList<T> ps;
  append_parameters(ps, embedding.parameters(), "embedding");
  for (size_t i = 0; i < layers.size(); ++i)
    append_parameters(ps, layers[i]->parameters(), "layers." + std::to_string(i));
  if (final_norm) append_parameters(ps, final_norm->parameters(), "norm");
  return ps;
}

template <typename T, typename Layer>
void stack_zero_grad(PositionalEmbedding<T>& embedding, std::vector<std::unique_ptr<Layer>>& layers,
                     LayerNorm<T>* final_norm) {
  embedding.zero_grad();
  for (auto& l : layers) l->zero_grad();
  if (final_norm) final_norm->zero_grad();
}

// The stack's own dropout (after the embedding) first, then every layer's.
template <typename T, typename Layer>
std::vector<Dropout<T>*> stack_dropouts(Dropout<T>& input_dropout, std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<Dropout<T>*> ds{&input_dropout};
  for (auto& l : layers)
    for (auto* d : l->dropouts()) ds.push_back(d);
  return ds;
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

}  // namespace transformer
