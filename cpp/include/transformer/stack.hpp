// stack.hpp — what the encoder and decoder stacks have in common: a positional embedding, N
// layers and (pre-norm) a final LayerNorm, named "embedding", "layers.i" and "norm".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transformer/dropout.hpp"
#include "transformer/embedding.hpp"
#include "transformer/layer_norm.hpp"

namespace transformer {

template <typename T, typename Layer>
ParameterList<T> stack_parameters(PositionalEmbedding<T>& embedding, std::vector<std::unique_ptr<Layer>>& layers,
                                  LayerNorm<T>* final_norm) {
  ParameterList<T> ps;
  append_parameters(ps, embedding.parameters(), "embedding");
  for (size_t i = 0; i < layers.size(); ++i) append_parameters(ps, layers[i]->parameters(), "layers." + std::to_string(i));
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
