// Bindings of Transformer-XL's relative multi-head attention (with its segment memory and its
// evaluation cache) and of the relative shift.
#include <optional>

#include "bindings.hpp"
#include "transformer/attention/relative_attention.hpp"

namespace transformer::bindings {

namespace {

// The layer, what its last forward keeps, and its evaluation cache.
template <typename T>
struct RelativeHolder : Holder<RelativeMultiHeadAttention<T>> {
  using Holder<RelativeMultiHeadAttention<T>>::Holder;
  RelativeAttentionCache<T> cache;
  InferenceBackend<T> backend;  // plain float32 products (the layer's weights may change between calls)
  Matrix<T> y;                  // output of the last infer
};

Index clamp_arg(const py::handle& v, const char* who) {
  return v.is_none() ? -1 : static_cast<Index>(int_arg(v, who, "clamp_len", 0));
}

// An input of infer_memory or infer (`arg`): (batch, T, d_model) with the batch of the evaluation
// cache, which infer_reset must have made.
template <typename T>
RowsInput<T> cached_input(RelativeHolder<T>& h, const py::handle& x, const char* who, const char* arg) {
  if (h.cache.batch == 0) throw std::runtime_error(concat(who, ": call infer_reset(batch, mem_len) first"));
  auto r = as_btc<T>(x, who, arg, h.layer.d_model(), false);
  if (r.lead_shape[0] != h.cache.batch)
    throw py::value_error(
        concat(who, ": ", arg, " must have the cache's batch size (", h.cache.batch, "), got ", describe(r.array)));
  return r;
}

template <typename T>
void bind_relative(py::module_& m) {
  using H = RelativeHolder<T>;
  py::class_<H> cls(m, class_name<T>("RelativeMultiHeadAttention").c_str(),
                    R"doc(Transformer-XL's relative multi-head attention with a segment memory (Dai et al. 2019).

``forward(x, memory=None)``: queries from the segment ``x`` (B, T, d_model), keys and values
from ``[memory ; x]`` with ``memory`` (B, M, d_model) the previous segment's hidden states of
the layer below. Query ``i`` sees every memory position and the segment positions ``<= i``;
its score for key ``j`` is ``((q_i + u) . k_j + (q_i + v) . W_{k,R} R_{i-j}) / sqrt(d_k)`` with
``R`` the sinusoids of the relative distance (distances beyond ``clamp_len`` use
``clamp_len``'s). ``backward(dout)`` returns ``dx``: the memory is a stop-gradient input.
Parameters: ``query|key|value|output.weight|bias``, ``position.weight`` (W_{k,R}), and ``u``,
``v`` (n_heads, d_k), this layer's own (a model shares them across layers by tying them).

Evaluation with state reuse: ``infer_reset(batch, mem_len)``, then ``infer_memory(memory)``
(optional) and ``infer(x)`` for each new segment or token: it attends to the cached positions
(their keys and values are kept, not recomputed) and joins them; the last ``mem_len`` stay.)doc");
  cls.def(py::init([](const py::object& d_model, const py::object& n_heads, const py::object& seed,
                      const py::object& clamp_len) {
            const char* who = "RelativeMultiHeadAttention";
            return new H(int_arg(d_model, who, "d_model"), int_arg(n_heads, who, "n_heads"), seed_arg(seed, who),
                         clamp_arg(clamp_len, who));
          }),
          py::arg("d_model"), py::arg("n_heads"), py::arg("seed") = 0, py::arg("clamp_len") = py::none());
  def_head_properties(cls);
  cls.def_property(
         "clamp_len",
         [](H& h) -> py::object {
           return h.layer.clamp_len() < 0 ? py::object(py::none()) : py::object(py::int_(h.layer.clamp_len()));
         },
         [](H& h, const py::object& v) {
           check_idle(h.busy, "RelativeMultiHeadAttention.clamp_len", "layer");
           h.layer.set_clamp_len(clamp_arg(v, "RelativeMultiHeadAttention"));
         },
         "Distances beyond clamp_len use the sinusoid of clamp_len (None: no clamp).")
      .def(
          "forward",
          [](H& h, const py::handle& x, const py::handle& memory) {
            LayerForward<T, H> call(h, "RelativeMultiHeadAttention.forward");
            const char* who = call.who();
            const Index d = h.layer.d_model();
            auto X = call.btc(x, "x", d, /*keep=*/true);
            const Index B = X.lead_shape[0], Tq = X.lead_shape[1];
            if (Tq == 0)
              throw py::value_error(concat(who, ": x must hold at least one position, got ", describe(X.array)));
            RowsInput<T> Mem;
            Index M = 0;
            if (!memory.is_none()) {
              Mem = call.btc(memory, "memory", d, /*keep=*/true);
              if (Mem.lead_shape[0] != B)
                throw py::value_error(
                    concat(who, ": memory must have the batch size of x (", B, "), got ", describe(Mem.array)));
              M = Mem.lead_shape[1];
            }
            const double heads = static_cast<double>(h.layer.n_heads());
            call.check(concat("a batch of ", B, " sequences of length ", Tq, " with ", M, " memory positions"),
                       attention_elements(static_cast<double>(X.rows), static_cast<double>(B * (M + Tq)), B, heads, Tq,
                                          M + Tq, d) +
                           2.0 * static_cast<double>(B * (M + Tq) * d));
            const T* mp = M > 0 ? Mem.array.data() : nullptr;
            const Matrix<T>& y = call.run({B, Tq}, [&]() -> const Matrix<T>& {
              // through the SelfAttention interface, as a language model's block calls it
              h.layer.set_memory(mp, M);
              SelfAttention<T>& attention = h.layer;
              return attention.forward(X.map(), B, Tq, /*causal=*/true);
            });
            return copy_out<T>(y.data(), {B, Tq, d});
          },
          py::arg("x"), py::arg("memory") = py::none(),
          "x (B, T, d_model), memory (B, M, d_model) or None -> (B, T, d_model)");
  def_d_model_backward<T>(cls, "RelativeMultiHeadAttention",
                          "dout (B, T, d_model) -> dx (B, T, d_model); the memory gets no gradient");
  cls.def(
         "attention_weights",
         [](H& h) {
           check_forward_done(h, "RelativeMultiHeadAttention.attention_weights");
           const auto& l = h.layer;
           return copy_out<T>(l.attention_weights().data(),
                              {l.batch(), l.n_heads(), l.query_length(), l.memory_length() + l.query_length()});
         },
         "The attention weights of the last forward, (B, heads, T, M + T).")
      .def(
          "infer_reset",
          [](H& h, const py::object& batch, const py::object& mem_len) {
            const char* who = "RelativeMultiHeadAttention.infer_reset";
            InUse use(h.busy, who);
            const Index B = int_arg(batch, who, "batch", 1);
            const Index W = int_arg(mem_len, who, "mem_len", 0);
            check_memory(who, concat("a cache of ", B, " sequences of ", W, " positions"),
                         static_cast<double>(sizeof(T)) * 4.0 * static_cast<double>(B * (W + 1)) *
                             static_cast<double>(h.layer.d_model()));
            h.cache.reset(B, W);
          },
          py::arg("batch"), py::arg("mem_len"),
          "Empty the evaluation cache, for `batch` sequences keeping the last `mem_len` positions. The cache "
          "holds keys and values made by the current weights: reset it after they change.")
      .def(
          "infer_memory",
          [](H& h, const py::handle& memory) {
            const char* who = "RelativeMultiHeadAttention.infer_memory";
            InUse use(h.busy, who);
            auto Mem = cached_input(h, memory, who, "memory");
            // (weights are not scanned here: one step of evaluation costs less than the scan, and a
            // non-finite weight makes the output of infer() non-finite, which it refuses)
            const Index M = Mem.lead_shape[1];
            without_gil([&] { h.layer.infer_memory(Mem.map(), M, h.cache); });
          },
          py::arg("memory"),
          "The memory (batch, M, d_model), the hidden states of the layer below, becomes the cached positions "
          "(their keys and values; the last mem_len are kept).")
      .def(
          "infer",
          [](H& h, const py::handle& x) {
            const char* who = "RelativeMultiHeadAttention.infer";
            InUse use(h.busy, who);
            auto X = cached_input(h, x, who, "x");
            const Index B = X.lead_shape[0], Tq = X.lead_shape[1];
            if (Tq == 0)
              throw py::value_error(concat(who, ": x must hold at least one position, got ", describe(X.array)));
            without_gil([&] { h.layer.infer(X.map(), Tq, h.cache, h.backend, h.y); });
            check_output(h.y, who);
            return copy_out<T>(h.y.data(), {B, Tq, h.layer.d_model()});
          },
          py::arg("x"),
          "New positions x (batch, T, d_model) attend to the cached positions and to themselves (causal), as "
          "forward(x, memory) does; then they join the cache. Returns (batch, T, d_model).")
      .def_property_readonly(
          "infer_length", [](H& h) { return h.cache.length; }, "Positions held in the evaluation cache.");
  def_parameters<T>(cls, "RelativeMultiHeadAttention");

  m.def((std::string("rel_shift") + dtype_suffix<T>()).c_str(),
        [](const py::handle& x) {
          const char* who = "rel_shift";
          auto in = as_rows<T>(x, who, "x", -1);
          if (in.array.ndim() < 2)
            throw py::value_error(concat(who, ": x must have shape (..., T, L), got ", describe(in.array)));
          const Index L = in.cols, Tq = in.lead_shape.back();
          if (Tq == 0 || L < Tq)
            throw py::value_error(
                concat(who, ": x must have shape (..., T, L) with L >= T >= 1, got ", describe(in.array)));
          const Index G = in.rows / Tq;
          py::array_t<T> out(shape_of(in.array));
          T* o = out.mutable_data();
          without_gil([&] { relative_shift<T>(in.array.data(), o, G, Tq, L); });
          return out;
        },
        py::arg("x"), "out[..., i, j] = x[..., i, j + T-1-i] for j <= L-T+i, else 0.");
}

void bind_relative_attention(py::module_& m) {
  for_each_scalar([&](auto t) { bind_relative<decltype(t)>(m); });
}

const AttentionKindBinding registered("relative", bind_relative_attention);

}  // namespace

}  // namespace transformer::bindings
