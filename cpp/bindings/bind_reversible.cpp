// Bindings of the reversible residual stack (models/reversible.hpp).
#include "bindings.hpp"
#include "transformer/models/reversible.hpp"

namespace transformer::bindings {

namespace {

bool flag_arg(const py::handle& v, const char* who, const char* name) {
  return check_setting(Limit::flag(), who, name, v).cast<bool>();
}

template <typename T>
void bind_reversible_stack(py::module_& m) {
  using H = Holder<ReversibleStack<T>>;
  py::class_<H> cls(m, class_name<T>("ReversibleStack").c_str(),
                    R"doc(Reformer's reversible residual stack of ``n_layers`` blocks (Kitaev et al. 2020, Sec. 3).

The input ``x`` (B, T, d_model) goes into two streams, ``x1 = x2 = x``; block ``i`` computes
``y1 = x1 + Dropout(Attention(LN(x2)))`` and ``y2 = x2 + Dropout(FFN(LN(y1)))`` (pre-norm, the
feed-forward run on chunks of ``chunk_rows`` positions), and the output is ``(y1 + y2) / 2``.
``backward`` rebuilds each block's inputs from its outputs (``x2 = y2 - G(y1)``,
``x1 = y1 - F(x2)``), replaying the forward's dropout masks, so the activations of one block
are held at a time whatever the depth (``activation_bytes()``). ``reversible=False`` gives the
ordinary stack of the same blocks, which keeps every block's activations.

``attention`` names the attention inside: ``"softmax"`` (multi-head attention, with a look-ahead
mask when ``causal``), ``"linear"`` (:class:`LinearMultiHeadAttention`) or ``"lsh"``
(:class:`LSHSelfAttention` with its default chunk, hashes and buckets; each block's hashes are
replayed when backward rebuilds it). ``forward(x, training=False)``; ``backward(dout)`` returns dx and can be
called once per forward; ``rebuilt_inputs()`` then returns the two rebuilt streams.)doc");
  cls.def(py::init([](const py::object& n_layers, const py::object& d_model, const py::object& n_heads,
                      const py::object& d_ff, const py::object& dropout, const py::object& causal,
                      const py::object& seed, const py::object& attention, const py::object& reversible,
                      const py::object& chunk_rows, const py::object& eps) {
            const char* who = "ReversibleStack";
            ReversibleStackOptions o;
            o.n_layers = int_arg(n_layers, who, "n_layers", 1);
            o.d_model = int_arg(d_model, who, "d_model", 1);
            o.n_heads = int_arg(n_heads, who, "n_heads", 1);
            o.d_ff = int_arg(d_ff, who, "d_ff", 1);
            o.dropout = float_arg(dropout, who, "dropout", limits::rate());
            o.causal = flag_arg(causal, who, "causal");
            o.seed = seed_arg(seed, who);
            o.attention = str_arg(attention, who, "attention");
            o.reversible = flag_arg(reversible, who, "reversible");
            // None: the measured default
            if (!chunk_rows.is_none()) o.chunk_rows = int_arg(chunk_rows, who, "chunk_rows", 1);
            o.eps = float_arg(eps, who, "eps", limits::positive());
            return new H(o);
          }),
          py::arg("n_layers"), py::arg("d_model"), py::arg("n_heads"), py::arg("d_ff"), py::arg("dropout") = 0.1,
          py::arg("causal") = true, py::arg("seed") = 0, py::arg("attention") = "softmax", py::arg("reversible") = true,
          py::arg("chunk_rows") = py::none(), py::arg("eps") = 1e-6)
      .def_property_readonly("n_layers", [](H& h) { return h.layer.n_layers(); })
      .def_property_readonly("d_model", [](H& h) { return h.layer.d_model(); })
      .def_property_readonly("n_heads", [](H& h) { return h.layer.options().n_heads; })
      .def_property_readonly("d_ff", [](H& h) { return h.layer.options().d_ff; })
      .def_property_readonly("causal", [](H& h) { return h.layer.options().causal; })
      .def_property_readonly("attention", [](H& h) { return h.layer.options().attention; })
      .def_property_readonly("reversible", [](H& h) { return h.layer.options().reversible; })
      .def_property_readonly("chunk_rows", [](H& h) { return h.layer.options().chunk_rows; })
      .def(
          "forward",
          [](H& h, const py::handle& x, bool training) {
            LayerForward<T, H> call(h, "ReversibleStack.forward");
            const auto& o = h.layer.options();
            auto X = call.btc(x, "x", o.d_model, /*keep=*/false);  // the stack copies its input
            const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
            const double rows = static_cast<double>(X.rows), d = static_cast<double>(o.d_model);
            const double H_ = static_cast<double>(o.n_heads), dff = static_cast<double>(o.d_ff);
            const double Bd = static_cast<double>(B), Td = static_cast<double>(Tn);
            // reversible: the streams and their gradients plus one block at a time; ordinary: every block
            const double elements =
                o.reversible
                    ? 10 * rows * d + attention_elements(rows, rows, Bd, H_, Td, Td, d) +
                          feed_forward_elements(std::min<double>(rows, static_cast<double>(o.chunk_rows)), d, dff)
                    : 10 * rows * d +
                          static_cast<double>(o.n_layers) * encoder_layer_elements(rows, Bd, H_, Td, d, dff);
            call.check(concat("a batch of ", B, " sequences of length ", Tn), elements);
            const Matrix<T>& y =
                call.run({B, Tn}, [&]() -> const Matrix<T>& { return h.layer.forward(X.map(), B, Tn, training); });
            return rows_out<T>(y, {B, Tn});
          },
          py::arg("x"), py::arg("training") = false, "x (B, T, d_model) -> (B, T, d_model)");
  def_d_model_backward<T>(cls, "ReversibleStack",
                          "dout (B, T, d_model) -> dx (B, T, d_model); parameter gradients accumulate");
  cls.def(
         "rebuilt_inputs",
         [](H& h) {
           check_idle(h.busy, "ReversibleStack.rebuilt_inputs", "layer");
           if (!h.has_forward || h.layer.has_forward())
             throw std::runtime_error("ReversibleStack.rebuilt_inputs: call forward() and backward() first");
           return py::make_tuple(rows_out<T>(h.layer.rebuilt_x1(), h.lead), rows_out<T>(h.layer.rebuilt_x2(), h.lead));
         },
         "(x1, x2), each (B, T, d_model): the two streams at the bottom of the stack after backward. A reversible "
         "stack rebuilds them from its output; both equal the input up to rounding.")
      .def(
          "activation_bytes",
          [](H& h) {
            check_idle(h.busy, "ReversibleStack.activation_bytes", "layer");
            return h.layer.activation_bytes();
          },
          "Bytes of activations held for backward since the last forward (0 before a forward or after backward): "
          "the two streams when reversible, every block's cached activations when not.");
  def_parameters<T>(cls, "ReversibleStack");
}

}  // namespace

void bind_reversible(py::module_& m) {
  for_each_scalar([&](auto t) { bind_reversible_stack<decltype(t)>(m); });
}

}  // namespace transformer::bindings
