// Bindings of Linear, Dropout, attention, feed-forward, encoder and decoder layers.
//
// Every forward checks, before the layer runs: one call at a time (InUse), finite inputs (an
// owned copy of those that backward reads again), the memory its buffers need, finite weights;
// after it: a finite output. Every backward: one call at a time and a finite dout.
#include "bindings.hpp"
#include "transformer/layers/attention.hpp"
#include "transformer/layers/decoder.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/encoder.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/linear.hpp"

namespace transformer::bindings {

namespace {

// "an input of 6 rows", "a batch of 2 sequences of length 3": what a memory check is about.
std::string rows_what(Index rows) { return concat("an input of ", rows, " rows"); }
std::string batch_what(Index B, Index T) { return concat("a batch of ", B, " sequences of length ", T); }

template <typename T>
void bind_linear(py::module_& m) {
  using H = Holder<Linear<T>>;
  py::class_<H>(m, class_name<T>("Linear").c_str(),
                "Dense layer y = x W^T + b with W of shape (out_features, in_features).")
      .def(py::init(
               [](const py::object& in_features, const py::object& out_features, bool bias, const py::object& seed) {
                 const char* who = "Linear";
                 return new H(int_arg(in_features, who, "in_features"), int_arg(out_features, who, "out_features"),
                              bias, seed_arg(seed, who));
               }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::arg("seed") = 0)
      .def_property_readonly("in_features", [](H& h) { return h.layer.in_features(); })
      .def_property_readonly("out_features", [](H& h) { return h.layer.out_features(); })
      .def(
          "forward",
          [](H& h, const py::handle& x) {
            const char* who = "Linear.forward";
            InUse in_use(h.busy, who);
            auto in = as_rows<T>(x, who, "x", h.layer.in_features());
            check_input(in, who, "x", true);  // backward reads x again
            check_forward<T>(h.layer, who, rows_what(in.rows),
                             static_cast<double>(in.rows) * static_cast<double>(h.layer.out_features() + in.cols));
            h.has_forward = false;  // until this forward has succeeded
            {
              py::gil_scoped_release release;
              h.layer.forward(in.map());
            }
            h.saved = in.array;
            h.lead = in.lead_shape;
            h.has_forward = true;
            check_output(h.layer.output(), who);
            return rows_out<T>(h.layer.output(), in.lead_shape);
          },
          py::arg("x"), "x: (..., in_features) -> (..., out_features)")
      .def(
          "backward",
          [](H& h, const py::handle& dout) {
            const char* who = "Linear.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("Linear.backward: call forward() first");
            auto d = dout_rows<T>(dout, who, h.layer.out_features(), h.lead);
            const Matrix<T>* dx;
            {
              py::gil_scoped_release release;
              dx = &h.layer.backward(d.map());
            }
            check_gradient(*dx, who);
            check_parameter_gradients(h.layer.parameters(), who);
            return rows_out<T>(*dx, h.lead);
          },
          py::arg("dout"), "dout: (..., out_features) -> dx: (..., in_features); accumulates dW, db")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); })
      .def("zero_grad", [](H& h) {
        check_idle(h.busy, "Linear.zero_grad", "layer");
        h.layer.zero_grad();
      });
}

template <typename T>
void bind_dropout(py::module_& m) {
  using H = Holder<Dropout<T>>;
  py::class_<H>(m, class_name<T>("Dropout").c_str(), "Inverted dropout with a seeded, thread-count independent mask.")
      .def(py::init([](const py::object& rate, const py::object& seed) {
             return new H(float_arg(rate, "Dropout", "rate"), seed_arg(seed, "Dropout"), 0);
           }),
           py::arg("rate") = 0.1, py::arg("seed") = 0)
      .def_property_readonly("rate", [](H& h) { return h.layer.rate(); })
      .def_property(
          "calls", [](H& h) { return h.layer.calls(); },
          [](H& h, const py::object& c) {
            check_idle(h.busy, "Dropout.calls", "layer");
            h.layer.set_calls(seed_arg(c, "Dropout", "calls"));
          })
      .def(
          "forward",
          [](H& h, const py::handle& x, bool training) {
            const char* who = "Dropout.forward";
            InUse in_use(h.busy, who);
            auto in = as_rows<T>(x, who, "x", -1);
            check_input(in, who, "x", false);  // backward needs only the mask
            check_memory(who, rows_what(in.rows),
                         3.0 * static_cast<double>(in.rows) * static_cast<double>(in.cols) * sizeof(T));
            h.has_forward = false;
            {
              py::gil_scoped_release release;
              h.layer.forward(in.map(), training);
            }
            h.lead = in.lead_shape;
            h.has_forward = true;
            check_output(h.layer.output(), who);  // x / (1 - rate) may overflow
            return rows_out<T>(h.layer.output(), in.lead_shape);
          },
          py::arg("x"), py::arg("training") = true)
      .def(
          "backward",
          [](H& h, const py::handle& dout) {
            const char* who = "Dropout.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("Dropout.backward: call forward() first");
            auto d = dout_rows<T>(dout, who, -1, h.lead);
            const Matrix<T>* dx;
            {
              py::gil_scoped_release release;
              dx = &h.layer.backward(d.map());
            }
            check_gradient(*dx, who);
            return rows_out<T>(*dx, h.lead);
          },
          py::arg("dout"))
      .def("parameters", [](py::object) { return empty_parameters(); })
      .def("zero_grad", [](H&) {});
}

// A (B, Tq, Tk) or (1, Tq, Tk) uint8 mask from Python (None: no mask). The Python layer turns
// booleans / broadcastable shapes into this form. Masks are read during forward only.
inline AttentionMask mask_arg(const py::handle& obj, const char* who, Index B, Index Tq, Index Tk,
                              std::vector<py::object>& keep) {
  if (obj.is_none()) return AttentionMask{};
  auto m = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!m || m.ndim() != 3 || (m.shape(0) != B && m.shape(0) != 1) || m.shape(1) != Tq || m.shape(2) != Tk)
    throw py::value_error(concat(who, ": mask must have shape (", B, ", ", Tq, ", ", Tk, ") or (1, ", Tq, ", ", Tk,
                                 ") with 1 = blocked"));
  keep.push_back(m);
  return AttentionMask{m.data(), m.shape(0) == 1 ? 0 : Tq * Tk};
}

// (B, T, C) float input, checked: shape, finite values, and (keep) an owned copy for backward.
template <typename T>
RowsInput<T> as_btc(const py::handle& obj, const char* who, const char* arg, Index C, bool keep) {
  auto r = as_rows<T>(obj, who, arg, C);
  if (r.lead_shape.size() != 2)
    throw py::value_error(concat(who, ": ", arg, " must have shape (batch, length, ", C, "), got ", describe(r.array)));
  check_input(r, who, arg, keep);
  return r;
}

template <typename T>
py::array_t<T> btc_out(const Matrix<T>& m, Index B, Index Tn) {
  return copy_out<T>(m.data(), {B, Tn, m.cols()});
}

template <typename T>
void bind_attention(py::module_& m) {
  // ---- scaled dot-product attention over (G, T, d) groups --------------------------------------
  struct Sdpa {
    py::array_t<T, py::array::c_style> q, k, v;
    std::vector<py::object> keep;
    AttentionMask mask;
    Index G = -1, Tq = 0, Tk = 0, dk = 0;
    Matrix<T> weights, out, dscores, dq, dk_, dv;
    bool busy = false;
  };
  py::class_<Sdpa>(m, class_name<T>("ScaledDotProductAttention").c_str(),
                   "softmax(Q K^T / sqrt(d_k) + mask) V over a batch of (T, d_k) groups.")
      .def(py::init<>())
      .def(
          "forward",
          [](Sdpa& s, const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& mask) {
            const char* who = "scaled_dot_product_attention";
            InUse in_use(s.busy, who);
            auto Q = as_floats<T>(q, who, "q", 3), K = as_floats<T>(k, who, "k", 3), V = as_floats<T>(v, who, "v", 3);
            const Index G = Q.shape(0), Tq = Q.shape(1), dk = Q.shape(2), Tk = K.shape(1);
            if (K.shape(0) != G || V.shape(0) != G || K.shape(2) != dk || V.shape(1) != Tk || V.shape(2) != dk)
              throw py::value_error(concat(who,
                                           ": expected q (G, Tq, d), k (G, Tk, d), v (G, Tk, d) with one d; got q ",
                                           describe(Q), ", k ", describe(K), ", v ", describe(V)));
            const std::pair<const char*, py::array_t<T, py::array::c_style>*> inputs[] = {
                {"q", &Q}, {"k", &K}, {"v", &V}};
            for (const auto& in : inputs) {  // backward reads all three again
              check_finite_input(in.second->data(), static_cast<Index>(in.second->size()), who, in.first);
              *in.second = owned<T>(*in.second);
            }
            const double g = static_cast<double>(G), tq = static_cast<double>(Tq), tk = static_cast<double>(Tk);
            check_memory(who, concat(G, " groups of ", Tq, " queries and ", Tk, " keys"),
                         (3 * g * tq * tk + 2 * g * (tq + 2 * tk) * static_cast<double>(dk)) * sizeof(T));
            std::vector<py::object> keep;
            AttentionMask mk = mask_arg(mask, who, G, Tq, Tk, keep);
            s.G = -1;  // no backward until this forward has succeeded
            s.weights.resize(G * Tq, Tk);
            s.out.resize(G * Tq, dk);
            {
              py::gil_scoped_release release;
              attention_forward<T>(Q.data(), dk, K.data(), dk, V.data(), dk, G, 1, Tq, Tk, dk, mk, s.weights.data(),
                                   s.out.data(), dk);
            }
            check_output(s.out, who);
            s.keep = std::move(keep);
            s.mask = mk;
            s.q = std::move(Q);
            s.k = std::move(K);
            s.v = std::move(V);
            s.G = G;
            s.Tq = Tq;
            s.Tk = Tk;
            s.dk = dk;
            return py::make_tuple(copy_out<T>(s.out.data(), {G, Tq, dk}), copy_out<T>(s.weights.data(), {G, Tq, Tk}));
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none())
      .def(
          "backward",
          [](Sdpa& s, const py::handle& dout) {
            const char* who = "scaled_dot_product_attention.backward";
            InUse in_use(s.busy, who);
            if (s.G < 0) throw std::runtime_error("scaled_dot_product_attention.backward: call forward() first");
            auto dO = as_floats<T>(dout, who, "dout", 3);
            if (dO.shape(0) != s.G || dO.shape(1) != s.Tq || dO.shape(2) != s.dk)
              throw py::value_error("scaled_dot_product_attention.backward: dout must have the output's shape, got " +
                                    describe(dO));
            check_finite_input(dO.data(), static_cast<Index>(dO.size()), who, "dout");
            s.dscores.resize(s.G * s.Tq, s.Tk);
            s.dq.resize(s.G * s.Tq, s.dk);
            s.dk_.resize(s.G * s.Tk, s.dk);
            s.dv.resize(s.G * s.Tk, s.dk);
            {
              py::gil_scoped_release release;
              attention_backward<T>(s.q.data(), s.dk, s.k.data(), s.dk, s.v.data(), s.dk, s.G, 1, s.Tq, s.Tk, s.dk,
                                    s.weights.data(), dO.data(), s.dk, s.dq.data(), s.dk, s.dk_.data(), s.dk,
                                    s.dv.data(), s.dk, s.dscores.data());
            }
            check_gradient(s.dq, who, "gradient of q");
            check_gradient(s.dk_, who, "gradient of k");
            check_gradient(s.dv, who, "gradient of v");
            return py::make_tuple(copy_out<T>(s.dq.data(), {s.G, s.Tq, s.dk}),
                                  copy_out<T>(s.dk_.data(), {s.G, s.Tk, s.dk}),
                                  copy_out<T>(s.dv.data(), {s.G, s.Tk, s.dk}));
          },
          py::arg("dout"))
      .def("parameters", [](py::object) { return empty_parameters(); })
      .def("zero_grad", [](Sdpa&) {});

  // ---- multi-head attention -------------------------------------------------------------------
  using H = Holder<MultiHeadAttention<T>>;
  py::class_<H>(m, class_name<T>("MultiHeadAttention").c_str(),
                "Multi-head attention: projections, heads, scaled dot-product attention, output projection.")
      .def(py::init([](const py::object& d_model, const py::object& n_heads, const py::object& seed) {
             const char* who = "MultiHeadAttention";
             return new H(int_arg(d_model, who, "d_model"), int_arg(n_heads, who, "n_heads"), seed_arg(seed, who));
           }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("seed") = 0)
      .def_property_readonly("d_model", [](H& h) { return h.layer.d_model(); })
      .def_property_readonly("n_heads", [](H& h) { return h.layer.n_heads(); })
      .def_property_readonly("d_k", [](H& h) { return h.layer.d_k(); })
      .def(
          "forward",
          [](H& h, const py::handle& x, const py::handle& memory, const py::handle& mask) {
            const char* who = "MultiHeadAttention.forward";
            InUse in_use(h.busy, who);
            const Index d = h.layer.d_model();
            auto X = as_btc<T>(x, who, "x", d, true);
            const Index B = X.lead_shape[0], Tq = X.lead_shape[1];
            const double heads = static_cast<double>(h.layer.n_heads());
            // The layer points into the arrays of its last accepted forward until backward: collect
            // the new ones aside and replace h.keep / h.flag only once this forward has succeeded.
            std::vector<py::object> keep{X.array};
            h.has_forward = false;
            if (memory.is_none()) {
              check_forward<T>(h.layer, who, batch_what(B, Tq),
                               attention_elements(X.rows, X.rows, B, heads, Tq, Tq, d));
              AttentionMask mk = mask_arg(mask, who, B, Tq, Tq, keep);
              py::gil_scoped_release release;
              h.layer.forward(X.map(), B, Tq, mk);
            } else {
              auto M = as_btc<T>(memory, who, "memory", d, true);
              if (M.lead_shape[0] != B)
                throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but x has ", B));
              const Index Tk = M.lead_shape[1];
              check_forward<T>(h.layer, who, concat(batch_what(B, Tq), " attending to ", Tk, " memory positions"),
                               attention_elements(X.rows, M.rows, B, heads, Tq, Tk, d));
              keep.push_back(M.array);
              AttentionMask mk = mask_arg(mask, who, B, Tq, Tk, keep);
              py::gil_scoped_release release;
              h.layer.forward(X.map(), M.map(), B, Tq, Tk, mk);
            }
            h.keep = std::move(keep);
            h.flag = !memory.is_none();
            h.has_forward = true;
            check_output(h.layer.output(), who);
            return btc_out<T>(h.layer.output(), B, Tq);
          },
          py::arg("x"), py::arg("memory") = py::none(), py::arg("mask") = py::none())
      .def(
          "backward",
          [](H& h, const py::handle& dout) -> py::object {
            const char* who = "MultiHeadAttention.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("MultiHeadAttention.backward: call forward() first");
            auto d = as_btc<T>(dout, who, "dout", h.layer.d_model(), false);
            const Index B = h.layer.batch(), Tq = h.layer.query_length(), Tk = h.layer.key_length();
            if (d.lead_shape[0] != B || d.lead_shape[1] != Tq)
              throw py::value_error("MultiHeadAttention.backward: dout must have the output's shape, got " +
                                    describe(d.array));
            const bool cross = h.flag;
            const Matrix<T>* dx;
            {
              py::gil_scoped_release release;
              dx = &h.layer.backward(d.map());
            }
            check_gradient(*dx, who);
            if (cross) check_gradient(h.layer.dmemory(), who, "memory gradient");
            check_parameter_gradients(h.layer.parameters(), who);
            if (!cross) return btc_out<T>(*dx, B, Tq);
            return py::make_tuple(btc_out<T>(*dx, B, Tq), btc_out<T>(h.layer.dmemory(), B, Tk));
          },
          py::arg("dout"), "dout (B, Tq, d) -> dx (self-attention) or (dx, dmemory) (cross-attention)")
      .def(
          "attention_weights",
          [](H& h) {
            check_idle(h.busy, "MultiHeadAttention.attention_weights", "layer");
            if (!h.has_forward) throw std::runtime_error("MultiHeadAttention.attention_weights: call forward() first");
            return copy_out<T>(h.layer.attention_weights().data(),
                               {h.layer.batch(), h.layer.n_heads(), h.layer.query_length(), h.layer.key_length()});
          },
          "The attention weights of the last forward, (B, heads, T_q, T_k).")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); })
      .def("zero_grad", [](H& h) {
        check_idle(h.busy, "MultiHeadAttention.zero_grad", "layer");
        h.layer.zero_grad();
      });
}

template <typename T>
void bind_feed_forward(py::module_& m) {
  using H = Holder<FeedForward<T>>;
  py::class_<H>(m, class_name<T>("FeedForward").c_str(), "FFN(x) = Linear2(Dropout(ReLU(Linear1(x)))).")
      .def(py::init([](const py::object& d_model, const py::object& d_ff, const py::object& dropout,
                       const py::object& seed) {
             const char* who = "FeedForward";
             return new H(int_arg(d_model, who, "d_model"), int_arg(d_ff, who, "d_ff"),
                          float_arg(dropout, who, "dropout"), seed_arg(seed, who));
           }),
           py::arg("d_model"), py::arg("d_ff"), py::arg("dropout") = 0.1, py::arg("seed") = 0)
      .def(
          "forward",
          [](H& h, const py::handle& x, bool training) {
            const char* who = "FeedForward.forward";
            InUse in_use(h.busy, who);
            auto X = as_rows<T>(x, who, "x", h.layer.linear1_.in_features());
            check_input(X, who, "x", true);
            check_forward<T>(h.layer, who, rows_what(X.rows),
                             feed_forward_elements(X.rows, X.cols, h.layer.linear1_.out_features()));
            h.has_forward = false;
            {
              py::gil_scoped_release release;
              h.layer.forward(X.map(), training);
            }
            h.saved = X.array;
            h.lead = X.lead_shape;
            h.has_forward = true;
            check_output(h.layer.output(), who);
            return rows_out<T>(h.layer.output(), X.lead_shape);
          },
          py::arg("x"), py::arg("training") = false)
      .def(
          "backward",
          [](H& h, const py::handle& dout) {
            const char* who = "FeedForward.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("FeedForward.backward: call forward() first");
            auto d = dout_rows<T>(dout, who, h.layer.linear2_.out_features(), h.lead);
            const Matrix<T>* dx;
            {
              py::gil_scoped_release release;
              dx = &h.layer.backward(d.map());
            }
            check_gradient(*dx, who);
            check_parameter_gradients(h.layer.parameters(), who);
            return rows_out<T>(*dx, h.lead);
          },
          py::arg("dout"))
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); })
      .def("zero_grad", [](H& h) {
        check_idle(h.busy, "FeedForward.zero_grad", "layer");
        h.layer.zero_grad();
      });
}

// The arguments of EncoderLayer / DecoderLayer, and of Encoder / Decoder.
struct LayerArgs {
  Index d_model, n_heads, d_ff;
  double dropout, eps;
  std::uint64_t seed;
};
LayerArgs layer_args(const char* who, const py::object& d_model, const py::object& n_heads, const py::object& d_ff,
                     const py::object& dropout, const py::object& eps, const py::object& seed) {
  return {int_arg(d_model, who, "d_model"),   int_arg(n_heads, who, "n_heads"), int_arg(d_ff, who, "d_ff"),
          float_arg(dropout, who, "dropout"), float_arg(eps, who, "eps"),       seed_arg(seed, who)};
}

struct StackArgs {
  Index vocab_size, n_layers, max_length;
  PositionalLayout layout;
  LayerArgs layer;
};
StackArgs stack_args(const char* who, const py::object& vocab, const py::object& d_model, const py::object& n_layers,
                     const py::object& n_heads, const py::object& d_ff, const py::object& dropout,
                     const py::object& max_length, const py::object& layout, const py::object& eps,
                     const py::object& seed) {
  return {int_arg(vocab, who, "vocab_size"), int_arg(n_layers, who, "n_layers"), int_arg(max_length, who, "max_length"),
          parse_positional_layout(str_arg(layout, who, "layout")),
          layer_args(who, d_model, n_heads, d_ff, dropout, eps, seed)};
}

// Heads, d_ff and layers of a stack, for the memory estimates.
template <typename Stack>
std::tuple<double, double, double> stack_dims(const Stack& s) {
  const auto& first = *s.layers_.front();
  return {static_cast<double>(first.self_attention_.n_heads()),
          static_cast<double>(first.feed_forward_.linear1_.out_features()), static_cast<double>(s.layers_.size())};
}

template <typename T>
void bind_encoder_decoder(py::module_& m) {
  using E = Holder<EncoderLayer<T>>;
  py::class_<E>(m, class_name<T>("EncoderLayer").c_str(),
                "Self-attention and feed-forward sub-layers with residuals and LayerNorm.")
      .def(py::init([](const py::object& d_model, const py::object& n_heads, const py::object& d_ff,
                       const py::object& dropout, bool pre_norm, const py::object& eps, const py::object& seed) {
             const LayerArgs a = layer_args("EncoderLayer", d_model, n_heads, d_ff, dropout, eps, seed);
             return new E(a.d_model, a.n_heads, a.d_ff, a.dropout, pre_norm, a.eps, a.seed);
           }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("d_ff"), py::arg("dropout") = 0.1,
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def(
          "forward",
          [](E& h, const py::handle& x, const py::handle& mask, bool training) {
            const char* who = "EncoderLayer.forward";
            InUse in_use(h.busy, who);
            const Index d = h.layer.norm1_.dim();
            auto X = as_btc<T>(x, who, "x", d, true);
            const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
            check_forward<T>(h.layer, who, batch_what(B, Tn),
                             encoder_layer_elements(X.rows, B, h.layer.self_attention_.n_heads(), Tn, d,
                                                    h.layer.feed_forward_.linear1_.out_features()));
            std::vector<py::object> keep{X.array};
            AttentionMask mk = mask_arg(mask, who, B, Tn, Tn, keep);
            const Matrix<T>* y;
            h.has_forward = false;
            {
              py::gil_scoped_release release;
              y = &h.layer.forward(X.map(), B, Tn, mk, training);
            }
            h.keep = std::move(keep);
            h.lead = X.lead_shape;
            h.has_forward = true;
            check_output(*y, who);
            return btc_out<T>(*y, B, Tn);
          },
          py::arg("x"), py::arg("mask") = py::none(), py::arg("training") = false)
      .def(
          "backward",
          [](E& h, const py::handle& dout) {
            const char* who = "EncoderLayer.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("EncoderLayer.backward: call forward() first");
            auto d = as_btc<T>(dout, who, "dout", h.layer.norm1_.dim(), false);
            if (d.lead_shape != h.lead)
              throw py::value_error("EncoderLayer.backward: dout must have the output's shape, got " +
                                    describe(d.array));
            const Matrix<T>* dx;
            {
              py::gil_scoped_release release;
              dx = &h.layer.backward(d.map());
            }
            check_gradient(*dx, who);
            check_parameter_gradients(h.layer.parameters(), who);
            return btc_out<T>(*dx, h.lead[0], h.lead[1]);
          },
          py::arg("dout"))
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<E&>().layer.parameters(), self); })
      .def("zero_grad", [](E& h) {
        check_idle(h.busy, "EncoderLayer.zero_grad", "layer");
        h.layer.zero_grad();
      });

  using D = Holder<DecoderLayer<T>>;
  py::class_<D>(m, class_name<T>("DecoderLayer").c_str(),
                "Masked self-attention, cross-attention and feed-forward sub-layers with residuals and LayerNorm.")
      .def(py::init([](const py::object& d_model, const py::object& n_heads, const py::object& d_ff,
                       const py::object& dropout, bool pre_norm, const py::object& eps, const py::object& seed) {
             const LayerArgs a = layer_args("DecoderLayer", d_model, n_heads, d_ff, dropout, eps, seed);
             return new D(a.d_model, a.n_heads, a.d_ff, a.dropout, pre_norm, a.eps, a.seed);
           }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("d_ff"), py::arg("dropout") = 0.1,
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def(
          "forward",
          [](D& h, const py::handle& x, const py::handle& memory, const py::handle& self_mask,
             const py::handle& cross_mask, bool training) {
            const char* who = "DecoderLayer.forward";
            InUse in_use(h.busy, who);
            const Index d = h.layer.norm1_.dim();
            auto X = as_btc<T>(x, who, "x", d, true);
            auto M = as_btc<T>(memory, who, "memory", d, true);
            const Index B = X.lead_shape[0], Tn = X.lead_shape[1], S = M.lead_shape[1];
            if (M.lead_shape[0] != B)
              throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but x has ", B));
            check_forward<T>(h.layer, who, concat(batch_what(B, Tn), " attending to ", S, " memory positions"),
                             decoder_layer_elements(X.rows, M.rows, B, h.layer.self_attention_.n_heads(), Tn, S, d,
                                                    h.layer.feed_forward_.linear1_.out_features()));
            std::vector<py::object> keep{X.array, M.array};
            AttentionMask sm = mask_arg(self_mask, who, B, Tn, Tn, keep);
            AttentionMask cm = mask_arg(cross_mask, who, B, Tn, S, keep);
            const Matrix<T>* y;
            h.has_forward = false;
            {
              py::gil_scoped_release release;
              y = &h.layer.forward(X.map(), M.map(), B, Tn, S, sm, cm, training);
            }
            h.keep = std::move(keep);
            h.lead = {B, Tn, S};
            h.has_forward = true;
            check_output(*y, who);
            return btc_out<T>(*y, B, Tn);
          },
          py::arg("x"), py::arg("memory"), py::arg("self_mask") = py::none(), py::arg("cross_mask") = py::none(),
          py::arg("training") = false)
      .def(
          "backward",
          [](D& h, const py::handle& dout) {
            const char* who = "DecoderLayer.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("DecoderLayer.backward: call forward() first");
            auto d = as_btc<T>(dout, who, "dout", h.layer.norm1_.dim(), false);
            if (d.lead_shape[0] != h.lead[0] || d.lead_shape[1] != h.lead[1])
              throw py::value_error("DecoderLayer.backward: dout must have the output's shape, got " +
                                    describe(d.array));
            const Matrix<T>* dx;
            {
              py::gil_scoped_release release;
              dx = &h.layer.backward(d.map());
            }
            check_gradient(*dx, who);
            check_gradient(h.layer.dmemory(), who, "memory gradient");
            check_parameter_gradients(h.layer.parameters(), who);
            return py::make_tuple(btc_out<T>(*dx, h.lead[0], h.lead[1]),
                                  btc_out<T>(h.layer.dmemory(), h.lead[0], h.lead[2]));
          },
          py::arg("dout"), "dout (B, T, d) -> (dx (B, T, d), dmemory (B, S, d))")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<D&>().layer.parameters(), self); })
      .def("zero_grad", [](D& h) {
        check_idle(h.busy, "DecoderLayer.zero_grad", "layer");
        h.layer.zero_grad();
      });

  using En = Holder<Encoder<T>>;
  py::class_<En>(m, class_name<T>("Encoder").c_str(), "Positional embedding, dropout and N encoder layers.")
      .def(py::init([](const py::object& vocab, const py::object& d_model, const py::object& n_layers,
                       const py::object& n_heads, const py::object& d_ff, const py::object& dropout,
                       const py::object& max_length, const py::object& layout, bool pre_norm, const py::object& eps,
                       const py::object& seed) {
             const StackArgs a =
                 stack_args("Encoder", vocab, d_model, n_layers, n_heads, d_ff, dropout, max_length, layout, eps, seed);
             const LayerArgs& l = a.layer;
             return new En(a.vocab_size, l.d_model, a.n_layers, l.n_heads, l.d_ff, l.dropout, a.max_length, a.layout,
                           pre_norm, l.eps, l.seed);
           }),
           py::arg("vocab_size"), py::arg("d_model"), py::arg("n_layers"), py::arg("n_heads"), py::arg("d_ff"),
           py::arg("dropout") = 0.1, py::arg("max_length") = 2048, py::arg("layout") = "interleaved",
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def(
          "forward",
          [](En& h, const py::handle& tokens, bool training) {
            const char* who = "Encoder.forward";
            InUse in_use(h.busy, who);
            auto tok = as_tokens(tokens, who, "tokens", 2);
            const Index B = tok.shape(0), S = tok.shape(1);
            const auto [H, dff, L] = stack_dims(h.layer);
            const double b = static_cast<double>(B), s = static_cast<double>(S), d = h.layer.embedding_.dim();
            check_forward<T>(
                h.layer, who, batch_what(B, S),
                L * encoder_layer_elements(b * s, b, H, s, d, dff) + 4 * b * s * d + b * s * s / sizeof(T));
            const Matrix<T>* y;
            h.has_forward = false;
            {
              py::gil_scoped_release release;
              y = &h.layer.forward(ConstTokenMap(tok.data(), B, S), training);
            }
            h.saved = std::move(tok);
            h.lead = {B, S};
            h.has_forward = true;
            check_output(*y, who);
            return btc_out<T>(*y, B, S);
          },
          py::arg("tokens"), py::arg("training") = false)
      .def(
          "backward",
          [](En& h, const py::handle& dout) {
            const char* who = "Encoder.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("Encoder.backward: call forward() first");
            auto d = as_btc<T>(dout, who, "dout", h.layer.embedding_.dim(), false);
            if (d.lead_shape != h.lead)
              throw py::value_error("Encoder.backward: dout must have the output's shape, got " + describe(d.array));
            {
              py::gil_scoped_release release;
              h.layer.backward(d.map());
            }
            check_parameter_gradients(h.layer.parameters(), who);
          },
          py::arg("dout"))
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<En&>().layer.parameters(), self); })
      .def("zero_grad", [](En& h) {
        check_idle(h.busy, "Encoder.zero_grad", "layer");
        h.layer.zero_grad();
      });

  using De = Holder<Decoder<T>>;
  py::class_<De>(m, class_name<T>("Decoder").c_str(),
                 "Positional embedding, dropout and N decoder layers attending to an encoder memory.")
      .def(py::init([](const py::object& vocab, const py::object& d_model, const py::object& n_layers,
                       const py::object& n_heads, const py::object& d_ff, const py::object& dropout,
                       const py::object& max_length, const py::object& layout, bool pre_norm, const py::object& eps,
                       const py::object& seed) {
             const StackArgs a =
                 stack_args("Decoder", vocab, d_model, n_layers, n_heads, d_ff, dropout, max_length, layout, eps, seed);
             const LayerArgs& l = a.layer;
             return new De(a.vocab_size, l.d_model, a.n_layers, l.n_heads, l.d_ff, l.dropout, a.max_length, a.layout,
                           pre_norm, l.eps, l.seed);
           }),
           py::arg("vocab_size"), py::arg("d_model"), py::arg("n_layers"), py::arg("n_heads"), py::arg("d_ff"),
           py::arg("dropout") = 0.1, py::arg("max_length") = 2048, py::arg("layout") = "interleaved",
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def(
          "forward",
          [](De& h, const py::handle& tokens, const py::handle& memory, const py::handle& source_padding,
             bool training) {
            const char* who = "Decoder.forward";
            InUse in_use(h.busy, who);
            auto tok = as_tokens(tokens, who, "tokens", 2);
            auto M = as_btc<T>(memory, who, "memory", h.layer.embedding_.dim(), true);
            const Index B = tok.shape(0), Tn = tok.shape(1), S = M.lead_shape[1];
            if (M.lead_shape[0] != B)
              throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but tokens have ", B));
            const auto [H, dff, L] = stack_dims(h.layer);
            const double b = static_cast<double>(B), t = static_cast<double>(Tn), s = static_cast<double>(S);
            const double d = h.layer.embedding_.dim();
            check_forward<T>(h.layer, who, concat(batch_what(B, Tn), " attending to ", S, " memory positions"),
                             L * decoder_layer_elements(b * t, b * s, b, H, t, s, d, dff) + 4 * b * t * d +
                                 b * (t * t + t * s) / sizeof(T));
            // as in MultiHeadAttention.forward: replace h.keep only once the forward has succeeded
            std::vector<py::object> keep{tok, M.array};
            const std::uint8_t* pad = nullptr;
            if (!source_padding.is_none()) {
              auto p = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(source_padding);
              if (!p || p.ndim() != 2 || p.shape(0) != B || p.shape(1) != S)
                throw py::value_error(concat(who, ": source_padding must have shape (", B, ", ", S, ")"));
              keep.push_back(p);
              pad = p.data();
            }
            const Matrix<T>* y;
            h.has_forward = false;
            {
              py::gil_scoped_release release;
              y = &h.layer.forward(ConstTokenMap(tok.data(), B, Tn), M.map(), S, pad, training);
            }
            h.keep = std::move(keep);
            h.lead = {B, Tn, S};
            h.has_forward = true;
            check_output(*y, who);
            return btc_out<T>(*y, B, Tn);
          },
          py::arg("tokens"), py::arg("memory"), py::arg("source_padding") = py::none(), py::arg("training") = false)
      .def(
          "backward",
          [](De& h, const py::handle& dout) {
            const char* who = "Decoder.backward";
            InUse in_use(h.busy, who);
            if (!h.has_forward) throw std::runtime_error("Decoder.backward: call forward() first");
            auto d = as_btc<T>(dout, who, "dout", h.layer.embedding_.dim(), false);
            if (d.lead_shape[0] != h.lead[0] || d.lead_shape[1] != h.lead[1])
              throw py::value_error("Decoder.backward: dout must have the output's shape, got " + describe(d.array));
            {
              py::gil_scoped_release release;
              h.layer.backward(d.map());
            }
            check_gradient(h.layer.dmemory(), who, "memory gradient");
            check_parameter_gradients(h.layer.parameters(), who);
            return btc_out<T>(h.layer.dmemory(), h.lead[0], h.lead[2]);
          },
          py::arg("dout"), "dout (B, T, d) -> dmemory (B, S, d)")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<De&>().layer.parameters(), self); })
      .def("zero_grad", [](De& h) {
        check_idle(h.busy, "Decoder.zero_grad", "layer");
        h.layer.zero_grad();
      });
}

}  // namespace

void bind_layers(py::module_& m) {
  bind_linear<float>(m);
  bind_linear<double>(m);
  bind_dropout<float>(m);
  bind_dropout<double>(m);
  bind_attention<float>(m);
  bind_attention<double>(m);
  bind_feed_forward<float>(m);
  bind_feed_forward<double>(m);
  bind_encoder_decoder<float>(m);
  bind_encoder_decoder<double>(m);
  m.def(
      "attention_mask",
      [](const py::handle& key_padding, const py::object& query_length, bool causal) {
        const char* who = "attention_mask";
        auto p = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(key_padding);
        if (!p || p.ndim() != 2) throw py::value_error("attention_mask: key_padding must be a (B, T_k) array");
        const Index B = p.shape(0), Tk = p.shape(1);
        const Index Tq = int_arg(query_length, who, "query_length", 0);
        check_memory(who, concat("a (", B, ", ", Tq, ", ", Tk, ") mask"),
                     2.0 * static_cast<double>(B) * static_cast<double>(Tq) * static_cast<double>(Tk));
        std::vector<std::uint8_t> out;
        build_attention_mask(out, p.data(), B, Tq, Tk, causal);
        py::array_t<bool> r({B, Tq, Tk});
        std::copy(out.begin(), out.end(), r.mutable_data());
        return r;
      },
      py::arg("key_padding"), py::arg("query_length"), py::arg("causal") = false);
}

}  // namespace transformer::bindings
