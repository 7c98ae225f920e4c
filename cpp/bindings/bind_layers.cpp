// Bindings of Linear, Dropout, attention, feed-forward, encoder and decoder layers.
#include "bindings.hpp"
#include "transformer/attention.hpp"
#include "transformer/decoder.hpp"
#include "transformer/dropout.hpp"
#include "transformer/encoder.hpp"
#include "transformer/feed_forward.hpp"
#include "transformer/linear.hpp"

namespace transformer::bindings {

namespace {

template <typename T>
void bind_linear(py::module_& m) {
  using H = Holder<Linear<T>>;
  py::class_<H>(m, class_name<T>("Linear").c_str(),
                "Dense layer y = x W^T + b with W of shape (out_features, in_features).")
      .def(py::init([](long long in_features, long long out_features, bool bias, std::uint64_t seed) {
             return new H(in_features, out_features, bias, seed);
           }),
           py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::arg("seed") = 0)
      .def_property_readonly("in_features", [](H& h) { return h.layer.in_features(); })
      .def_property_readonly("out_features", [](H& h) { return h.layer.out_features(); })
      .def("forward",
           [](H& h, const py::handle& x) {
             auto in = as_rows<T>(x, "Linear.forward", "x", h.layer.in_features());
             {
               py::gil_scoped_release release;
               h.layer.forward(in.map());
             }
             h.saved = in.array;
             h.lead = in.lead_shape;
             h.has_forward = true;
             return rows_out<T>(h.layer.output(), in.lead_shape);
           },
           py::arg("x"), "x: (..., in_features) -> (..., out_features)")
      .def("backward",
           [](H& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("Linear.backward: call forward() first");
             auto d = dout_rows<T>(dout, "Linear.backward", h.layer.out_features(), h.lead);
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             return rows_out<T>(*dx, h.lead);
           },
           py::arg("dout"), "dout: (..., out_features) -> dx: (..., in_features); accumulates dW, db")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); })
      .def("zero_grad", [](H& h) { h.layer.zero_grad(); });
}

template <typename T>
void bind_dropout(py::module_& m) {
  using H = Holder<Dropout<T>>;
  py::class_<H>(m, class_name<T>("Dropout").c_str(),
                "Inverted dropout with a seeded, thread-count independent mask.")
      .def(py::init([](double rate, std::uint64_t seed) { return new H(rate, seed, 0); }),
           py::arg("rate") = 0.1, py::arg("seed") = 0)
      .def_property_readonly("rate", [](H& h) { return h.layer.rate(); })
      .def_property("calls", [](H& h) { return h.layer.calls(); },
                    [](H& h, std::uint64_t c) { h.layer.set_calls(c); })
      .def("forward",
           [](H& h, const py::handle& x, bool training) {
             auto in = as_rows<T>(x, "Dropout.forward", "x", -1);
             {
               py::gil_scoped_release release;
               h.layer.forward(in.map(), training);
             }
             h.lead = in.lead_shape;
             h.has_forward = true;
             return rows_out<T>(h.layer.output(), in.lead_shape);
           },
           py::arg("x"), py::arg("training") = true)
      .def("backward",
           [](H& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("Dropout.backward: call forward() first");
             auto d = dout_rows<T>(dout, "Dropout.backward", -1, h.lead);
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             return rows_out<T>(*dx, h.lead);
           },
           py::arg("dout"))
      .def("parameters", [](py::object) { return empty_parameters(); })
      .def("zero_grad", [](H&) {});
}


// A (B, Tq, Tk) or (1, Tq, Tk) uint8 mask from Python (None: no mask). The Python layer turns
// booleans / broadcastable shapes into this form.
inline AttentionMask mask_arg(const py::handle& obj, const char* who, Index B, Index Tq, Index Tk,
                              std::vector<py::object>& keep) {
  if (obj.is_none()) return AttentionMask{};
  auto m = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!m || m.ndim() != 3 || (m.shape(0) != B && m.shape(0) != 1) || m.shape(1) != Tq || m.shape(2) != Tk)
    throw py::value_error(concat(who, ": mask must have shape (", B, ", ", Tq, ", ", Tk, ") or (1, ", Tq, ", ",
                                 Tk, ") with 1 = blocked"));
  keep.push_back(m);
  return AttentionMask{m.data(), m.shape(0) == 1 ? 0 : Tq * Tk};
}

// (B, T, C) float input, checked.
template <typename T>
RowsInput<T> as_btc(const py::handle& obj, const char* who, const char* arg, Index C) {
  auto r = as_rows<T>(obj, who, arg, C);
  if (r.lead_shape.size() != 2)
    throw py::value_error(concat(who, ": ", arg, " must have shape (batch, length, ", C, "), got ",
                                 describe(r.array)));
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
  };
  py::class_<Sdpa>(m, class_name<T>("ScaledDotProductAttention").c_str(),
                   "softmax(Q K^T / sqrt(d_k) + mask) V over a batch of (T, d_k) groups.")
      .def(py::init<>())
      .def("forward",
           [](Sdpa& s, const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& mask) {
             const char* who = "scaled_dot_product_attention";
             auto Q = as_floats<T>(q, who, "q", 3), K = as_floats<T>(k, who, "k", 3), V = as_floats<T>(v, who, "v", 3);
             const Index G = Q.shape(0), Tq = Q.shape(1), dk = Q.shape(2), Tk = K.shape(1);
             if (K.shape(0) != G || V.shape(0) != G || K.shape(2) != dk || V.shape(1) != Tk || V.shape(2) != dk)
               throw py::value_error(concat(who, ": expected q (G, Tq, d), k (G, Tk, d), v (G, Tk, d) with one d; got q ",
                                            describe(Q), ", k ", describe(K), ", v ", describe(V)));
             s.keep.clear();
             s.mask = mask_arg(mask, who, G, Tq, Tk, s.keep);
             s.q = Q; s.k = K; s.v = V;
             s.G = G; s.Tq = Tq; s.Tk = Tk; s.dk = dk;
             s.weights.resize(G * Tq, Tk);
             s.out.resize(G * Tq, dk);
             {
               py::gil_scoped_release release;
               attention_forward<T>(Q.data(), dk, K.data(), dk, V.data(), dk, G, 1, Tq, Tk, dk, s.mask,
                                    s.weights.data(), s.out.data(), dk);
             }
             return py::make_tuple(copy_out<T>(s.out.data(), {G, Tq, dk}), copy_out<T>(s.weights.data(), {G, Tq, Tk}));
           },
           py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none())
      .def("backward",
           [](Sdpa& s, const py::handle& dout) {
             if (s.G < 0) throw std::runtime_error("scaled_dot_product_attention.backward: call forward() first");
             auto dO = as_floats<T>(dout, "scaled_dot_product_attention.backward", "dout", 3);
             if (dO.shape(0) != s.G || dO.shape(1) != s.Tq || dO.shape(2) != s.dk)
               throw py::value_error("scaled_dot_product_attention.backward: dout must have the output's shape, got " +
                                     describe(dO));
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
      .def(py::init([](long long d_model, long long n_heads, std::uint64_t seed) { return new H(d_model, n_heads, seed); }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("seed") = 0)
      .def_property_readonly("d_model", [](H& h) { return h.layer.d_model(); })
      .def_property_readonly("n_heads", [](H& h) { return h.layer.n_heads(); })
      .def_property_readonly("d_k", [](H& h) { return h.layer.d_k(); })
      .def("forward",
           [](H& h, const py::handle& x, const py::handle& memory, const py::handle& mask) {
             const char* who = "MultiHeadAttention.forward";
             const Index d = h.layer.d_model();
             auto X = as_btc<T>(x, who, "x", d);
             const Index B = X.lead_shape[0], Tq = X.lead_shape[1];
             // The layer points into the arrays of its last accepted forward until backward: collect
             // the new ones aside and replace h.keep / h.flag only once this forward has succeeded.
             std::vector<py::object> keep{X.array};
             if (memory.is_none()) {
               AttentionMask mk = mask_arg(mask, who, B, Tq, Tq, keep);
               py::gil_scoped_release release;
               h.layer.forward(X.map(), B, Tq, mk);
             } else {
               auto M = as_btc<T>(memory, who, "memory", d);
               if (M.lead_shape[0] != B)
                 throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but x has ", B));
               const Index Tk = M.lead_shape[1];
               keep.push_back(M.array);
               AttentionMask mk = mask_arg(mask, who, B, Tq, Tk, keep);
               py::gil_scoped_release release;
               h.layer.forward(X.map(), M.map(), B, Tq, Tk, mk);
             }
             h.keep = std::move(keep);
             h.flag = !memory.is_none();
             h.has_forward = true;
             return btc_out<T>(h.layer.output(), B, Tq);
           },
           py::arg("x"), py::arg("memory") = py::none(), py::arg("mask") = py::none())
      .def("backward",
           [](H& h, const py::handle& dout) -> py::object {
             if (!h.has_forward) throw std::runtime_error("MultiHeadAttention.backward: call forward() first");
             auto d = as_btc<T>(dout, "MultiHeadAttention.backward", "dout", h.layer.d_model());
             const Index B = h.layer.batch(), Tq = h.layer.query_length(), Tk = h.layer.key_length();
             if (d.lead_shape[0] != B || d.lead_shape[1] != Tq)
               throw py::value_error("MultiHeadAttention.backward: dout must have the output's shape, got " + describe(d.array));
             const bool cross = h.flag;
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             if (!cross) return btc_out<T>(*dx, B, Tq);
             return py::make_tuple(btc_out<T>(*dx, B, Tq), btc_out<T>(h.layer.dmemory(), B, Tk));
           },
           py::arg("dout"), "dout (B, Tq, d) -> dx (self-attention) or (dx, dmemory) (cross-attention)")
      .def("attention_weights",
           [](H& h) {
             if (!h.has_forward) throw std::runtime_error("MultiHeadAttention.attention_weights: call forward() first");
             return copy_out<T>(h.layer.attention_weights().data(),
                                {h.layer.batch(), h.layer.n_heads(), h.layer.query_length(), h.layer.key_length()});
           },
           "The attention weights of the last forward, (B, heads, T_q, T_k).")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); })
      .def("zero_grad", [](H& h) { h.layer.zero_grad(); });
}

template <typename T>
void bind_feed_forward(py::module_& m) {
  using H = Holder<FeedForward<T>>;
  py::class_<H>(m, class_name<T>("FeedForward").c_str(), "FFN(x) = Linear2(Dropout(ReLU(Linear1(x)))).")
      .def(py::init([](long long d_model, long long d_ff, double dropout, std::uint64_t seed) {
             return new H(d_model, d_ff, dropout, seed);
           }),
           py::arg("d_model"), py::arg("d_ff"), py::arg("dropout") = 0.1, py::arg("seed") = 0)
      .def("forward",
           [](H& h, const py::handle& x, bool training) {
             auto X = as_rows<T>(x, "FeedForward.forward", "x", h.layer.linear1_.in_features());
             {
               py::gil_scoped_release release;
               h.layer.forward(X.map(), training);
             }
             h.saved = X.array;
             h.lead = X.lead_shape;
             h.has_forward = true;
             return rows_out<T>(h.layer.output(), X.lead_shape);
           },
           py::arg("x"), py::arg("training") = false)
      .def("backward",
           [](H& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("FeedForward.backward: call forward() first");
             auto d = dout_rows<T>(dout, "FeedForward.backward", h.layer.linear2_.out_features(), h.lead);
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             return rows_out<T>(*dx, h.lead);
           },
           py::arg("dout"))
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<H&>().layer.parameters(), self); })
      .def("zero_grad", [](H& h) { h.layer.zero_grad(); });
}

template <typename T>
void bind_encoder_decoder(py::module_& m) {
  using E = Holder<EncoderLayer<T>>;
  py::class_<E>(m, class_name<T>("EncoderLayer").c_str(), "Self-attention and feed-forward sub-layers with residuals and LayerNorm.")
      .def(py::init([](long long d_model, long long n_heads, long long d_ff, double dropout, bool pre_norm, double eps,
                       std::uint64_t seed) { return new E(d_model, n_heads, d_ff, dropout, pre_norm, eps, seed); }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("d_ff"), py::arg("dropout") = 0.1,
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def("forward",
           [](E& h, const py::handle& x, const py::handle& mask, bool training) {
             const char* who = "EncoderLayer.forward";
             auto X = as_btc<T>(x, who, "x", h.layer.norm1_.dim());
             const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
             h.keep.clear();
             h.keep.push_back(X.array);
             AttentionMask mk = mask_arg(mask, who, B, Tn, Tn, h.keep);
             const Matrix<T>* y;
             {
               py::gil_scoped_release release;
               y = &h.layer.forward(X.map(), B, Tn, mk, training);
             }
             h.lead = X.lead_shape;
             h.has_forward = true;
             return btc_out<T>(*y, B, Tn);
           },
           py::arg("x"), py::arg("mask") = py::none(), py::arg("training") = false)
      .def("backward",
           [](E& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("EncoderLayer.backward: call forward() first");
             auto d = as_btc<T>(dout, "EncoderLayer.backward", "dout", h.layer.norm1_.dim());
             if (d.lead_shape != h.lead)
               throw py::value_error("EncoderLayer.backward: dout must have the output's shape, got " + describe(d.array));
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             return btc_out<T>(*dx, h.lead[0], h.lead[1]);
           },
           py::arg("dout"))
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<E&>().layer.parameters(), self); })
      .def("zero_grad", [](E& h) { h.layer.zero_grad(); });

  using D = Holder<DecoderLayer<T>>;
  py::class_<D>(m, class_name<T>("DecoderLayer").c_str(),
                "Masked self-attention, cross-attention and feed-forward sub-layers with residuals and LayerNorm.")
      .def(py::init([](long long d_model, long long n_heads, long long d_ff, double dropout, bool pre_norm, double eps,
                       std::uint64_t seed) { return new D(d_model, n_heads, d_ff, dropout, pre_norm, eps, seed); }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("d_ff"), py::arg("dropout") = 0.1,
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def("forward",
           [](D& h, const py::handle& x, const py::handle& memory, const py::handle& self_mask,
              const py::handle& cross_mask, bool training) {
             const char* who = "DecoderLayer.forward";
             const Index d = h.layer.norm1_.dim();
             auto X = as_btc<T>(x, who, "x", d);
             auto M = as_btc<T>(memory, who, "memory", d);
             const Index B = X.lead_shape[0], Tn = X.lead_shape[1], S = M.lead_shape[1];
             if (M.lead_shape[0] != B)
               throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but x has ", B));
             h.keep.clear();
             h.keep.push_back(X.array);
             h.keep.push_back(M.array);
             AttentionMask sm = mask_arg(self_mask, who, B, Tn, Tn, h.keep);
             AttentionMask cm = mask_arg(cross_mask, who, B, Tn, S, h.keep);
             const Matrix<T>* y;
             {
               py::gil_scoped_release release;
               y = &h.layer.forward(X.map(), M.map(), B, Tn, S, sm, cm, training);
             }
             h.lead = {B, Tn, S};
             h.has_forward = true;
             return btc_out<T>(*y, B, Tn);
           },
           py::arg("x"), py::arg("memory"), py::arg("self_mask") = py::none(), py::arg("cross_mask") = py::none(),
           py::arg("training") = false)
      .def("backward",
           [](D& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("DecoderLayer.backward: call forward() first");
             auto d = as_btc<T>(dout, "DecoderLayer.backward", "dout", h.layer.norm1_.dim());
             if (d.lead_shape[0] != h.lead[0] || d.lead_shape[1] != h.lead[1])
               throw py::value_error("DecoderLayer.backward: dout must have the output's shape, got " + describe(d.array));
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             return py::make_tuple(btc_out<T>(*dx, h.lead[0], h.lead[1]), btc_out<T>(h.layer.dmemory(), h.lead[0], h.lead[2]));
           },
           py::arg("dout"), "dout (B, T, d) -> (dx (B, T, d), dmemory (B, S, d))")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<D&>().layer.parameters(), self); })
      .def("zero_grad", [](D& h) { h.layer.zero_grad(); });

  using En = Holder<Encoder<T>>;
  py::class_<En>(m, class_name<T>("Encoder").c_str(), "Positional embedding, dropout and N encoder layers.")
      .def(py::init([](long long vocab, long long d_model, long long n_layers, long long n_heads, long long d_ff,
                       double dropout, long long max_length, const std::string& layout, bool pre_norm, double eps,
                       std::uint64_t seed) {
             return new En(vocab, d_model, n_layers, n_heads, d_ff, dropout, max_length,
                           parse_positional_layout(layout), pre_norm, eps, seed);
           }),
           py::arg("vocab_size"), py::arg("d_model"), py::arg("n_layers"), py::arg("n_heads"), py::arg("d_ff"),
           py::arg("dropout") = 0.1, py::arg("max_length") = 2048, py::arg("layout") = "interleaved",
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def("forward",
           [](En& h, const py::handle& tokens, bool training) {
             auto tok = as_tokens(tokens, "Encoder.forward", "tokens", 2);
             const Index B = tok.shape(0), S = tok.shape(1);
             const Matrix<T>* y;
             {
               py::gil_scoped_release release;
               y = &h.layer.forward(ConstTokenMap(tok.data(), B, S), training);
             }
             h.saved = tok;
             h.lead = {B, S};
             h.has_forward = true;
             return btc_out<T>(*y, B, S);
           },
           py::arg("tokens"), py::arg("training") = false)
      .def("backward",
           [](En& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("Encoder.backward: call forward() first");
             auto d = as_btc<T>(dout, "Encoder.backward", "dout", h.layer.embedding_.dim());
             if (d.lead_shape != h.lead)
               throw py::value_error("Encoder.backward: dout must have the output's shape, got " + describe(d.array));
             py::gil_scoped_release release;
             h.layer.backward(d.map());
           },
           py::arg("dout"))
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<En&>().layer.parameters(), self); })
      .def("zero_grad", [](En& h) { h.layer.zero_grad(); });

  using De = Holder<Decoder<T>>;
  py::class_<De>(m, class_name<T>("Decoder").c_str(),
                 "Positional embedding, dropout and N decoder layers attending to an encoder memory.")
      .def(py::init([](long long vocab, long long d_model, long long n_layers, long long n_heads, long long d_ff,
                       double dropout, long long max_length, const std::string& layout, bool pre_norm, double eps,
                       std::uint64_t seed) {
             return new De(vocab, d_model, n_layers, n_heads, d_ff, dropout, max_length,
                           parse_positional_layout(layout), pre_norm, eps, seed);
           }),
           py::arg("vocab_size"), py::arg("d_model"), py::arg("n_layers"), py::arg("n_heads"), py::arg("d_ff"),
           py::arg("dropout") = 0.1, py::arg("max_length") = 2048, py::arg("layout") = "interleaved",
           py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0)
      .def("forward",
           [](De& h, const py::handle& tokens, const py::handle& memory, const py::handle& source_padding,
              bool training) {
             const char* who = "Decoder.forward";
             auto tok = as_tokens(tokens, who, "tokens", 2);
             auto M = as_btc<T>(memory, who, "memory", h.layer.embedding_.dim());
             const Index B = tok.shape(0), Tn = tok.shape(1), S = M.lead_shape[1];
             if (M.lead_shape[0] != B)
               throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but tokens have ", B));
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
             {
               py::gil_scoped_release release;
               y = &h.layer.forward(ConstTokenMap(tok.data(), B, Tn), M.map(), S, pad, training);
             }
             h.keep = std::move(keep);
             h.lead = {B, Tn, S};
             h.has_forward = true;
             return btc_out<T>(*y, B, Tn);
           },
           py::arg("tokens"), py::arg("memory"), py::arg("source_padding") = py::none(), py::arg("training") = false)
      .def("backward",
           [](De& h, const py::handle& dout) {
             if (!h.has_forward) throw std::runtime_error("Decoder.backward: call forward() first");
             auto d = as_btc<T>(dout, "Decoder.backward", "dout", h.layer.embedding_.dim());
             if (d.lead_shape[0] != h.lead[0] || d.lead_shape[1] != h.lead[1])
               throw py::value_error("Decoder.backward: dout must have the output's shape, got " + describe(d.array));
             {
               py::gil_scoped_release release;
               h.layer.backward(d.map());
             }
             return btc_out<T>(h.layer.dmemory(), h.lead[0], h.lead[2]);
           },
           py::arg("dout"), "dout (B, T, d) -> dmemory (B, S, d)")
      .def("parameters", [](py::object self) { return parameters_dict<T>(self.cast<De&>().layer.parameters(), self); })
      .def("zero_grad", [](De& h) { h.layer.zero_grad(); });
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
      [](const py::handle& key_padding, long long Tq, bool causal) {
        auto p = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(key_padding);
        if (!p || p.ndim() != 2) throw py::value_error("attention_mask: key_padding must be a (B, T_k) array");
        const Index B = p.shape(0), Tk = p.shape(1);
        std::vector<std::uint8_t> out;
        build_attention_mask(out, p.data(), B, Tq, Tk, causal);
        py::array_t<bool> r({B, static_cast<Index>(Tq), Tk});
        std::copy(out.begin(), out.end(), r.mutable_data());
        return r;
      },
      py::arg("key_padding"), py::arg("query_length"), py::arg("causal") = false);
}

}  // namespace transformer::bindings
