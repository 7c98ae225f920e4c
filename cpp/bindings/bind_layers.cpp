// Bindings of Linear, Dropout, attention, feed-forward, encoder and decoder layers.
//
// Every forward and backward is a LayerForward / LayerBackward (bindings.hpp): before the layer
// runs, one call at a time, finite inputs (an owned copy of those that backward reads again), the
// memory its buffers need and finite weights; after it, a finite output (gradients).
#include "bindings.hpp"
#include "transformer/attention/attention.hpp"
#include "transformer/layers/dropout.hpp"
#include "transformer/layers/feed_forward.hpp"
#include "transformer/layers/linear.hpp"
#include "transformer/models/decoder.hpp"
#include "transformer/models/encoder.hpp"

namespace transformer::bindings {

namespace {

// "an input of 6 rows", "a batch of 2 sequences of length 3": what a memory check is about.
std::string rows_what(Index rows) { return concat("an input of ", rows, " rows"); }
std::string batch_what(Index B, Index T) { return concat("a batch of ", B, " sequences of length ", T); }

template <typename T>
void bind_linear(py::module_& m) {
  using H = Holder<Linear<T>>;
  py::class_<H> cls(m, class_name<T>("Linear").c_str(),
                    R"doc(Dense layer ``y = x W^T + b``; ``W`` has shape ``(out_features, in_features)`` as in PyTorch.

Weights are Glorot-uniform from ``seed``, the bias starts at zero.
``forward(x)`` maps ``(..., in_features)`` to ``(..., out_features)``.)doc");
  cls.def(
         py::init([](const py::object& in_features, const py::object& out_features, bool bias, const py::object& seed) {
           const char* who = "Linear";
           return new H(int_arg(in_features, who, "in_features"), int_arg(out_features, who, "out_features"), bias,
                        seed_arg(seed, who));
         }),
         py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true, py::arg("seed") = 0)
      .def_property_readonly("in_features", [](H& h) { return h.layer.in_features(); })
      .def_property_readonly("out_features", [](H& h) { return h.layer.out_features(); })
      .def(
          "forward",
          [](H& h, const py::handle& x) {
            LayerForward<T, H> call(h, "Linear.forward");
            auto in = call.rows(x, "x", h.layer.in_features(), /*keep=*/true);  // backward reads x again
            call.check(rows_what(in.rows),
                       static_cast<double>(in.rows) * static_cast<double>(h.layer.out_features() + in.cols));
            const Matrix<T>& y =
                call.run(in.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward(in.map()); });
            return rows_out<T>(y, in.lead_shape);
          },
          py::arg("x"), "x: (..., in_features) -> (..., out_features)");
  def_backward<T>(
      cls, "Linear", [](const auto& l) { return l.out_features(); }, Dout::Rows,
      "dout: (..., out_features) -> dx: (..., in_features); accumulates dW, db");
  def_parameters<T>(cls, "Linear");
}

template <typename T>
void bind_dropout(py::module_& m) {
  using H = Holder<Dropout<T>>;
  py::class_<H> cls(m, class_name<T>("Dropout").c_str(),
                    R"doc(Inverted dropout. ``forward(x, training=True)`` zeroes each element with probability ``rate``
and scales the rest by ``1 / (1 - rate)``; with ``training=False``, the default of every layer,
it is the identity. Masks depend only on ``seed`` and the call count (``.calls``), never on the
thread count.)doc");
  cls.def(py::init([](const py::object& rate, const py::object& seed) {
            return new H(float_arg(rate, "Dropout", "rate", limits::rate()), seed_arg(seed, "Dropout"), 0);
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
            LayerForward<T, H> call(h, "Dropout.forward");
            auto in = call.rows(x, "x", -1, /*keep=*/false);  // backward needs only the mask
            call.check(rows_what(in.rows), 3.0 * static_cast<double>(in.rows) * static_cast<double>(in.cols));
            // x / (1 - rate) may overflow: run() checks the output
            const Matrix<T>& y =
                call.run(in.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward(in.map(), training); });
            return rows_out<T>(y, in.lead_shape);
          },
          py::arg("x"), py::arg("training") = false)
      .def(
          "backward",
          [](H& h, const py::handle& dout) {
            LayerBackward<T, H> call(h, "Dropout.backward");
            auto d = call.dout_rows(dout, -1);
            const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
            call.check_gradient(dx);
            return rows_out<T>(dx, h.lead);
          },
          py::arg("dout"));
  def_no_parameters(cls);
}

// A (B, Tq, Tk) or (1, Tq, Tk) uint8 mask from Python (None: no mask), kept by the forward `call`.
// The Python layer turns booleans / broadcastable shapes into this form. Masks are read during
// forward only.
template <typename Call>
AttentionMask mask_arg(const py::handle& obj, Index B, Index Tq, Index Tk, Call& call) {
  if (obj.is_none()) return AttentionMask{};
  auto m = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!m || m.ndim() != 3 || (m.shape(0) != B && m.shape(0) != 1) || m.shape(1) != Tq || m.shape(2) != Tk)
    throw py::value_error(concat(call.who(), ": mask must have shape (", B, ", ", Tq, ", ", Tk, ") or (1, ", Tq, ", ",
                                 Tk, ") with 1 = blocked"));
  call.keep(m);
  return AttentionMask{m.data(), m.shape(0) == 1 ? 0 : Tq * Tk};
}

// Scaled dot-product attention over (G, T, d) groups, bound on its own: the state a layer Holder
// would hold, and the buffers of attention_forward / attention_backward.
template <typename T>
struct Sdpa {
  std::vector<py::object> keep;  // q, k, v (owned copies) and the mask of the last forward
  std::vector<Index> lead;       // G, Tq, Tk, d of the last forward
  bool has_forward = false;
  bool busy = false;
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  AttentionMask mask;
  Matrix<T> weights, out, dscores, dq, dk, dv;
};

template <typename T>
void bind_sdpa(py::module_& m) {
  using S = Sdpa<T>;
  py::class_<S> cls(m, class_name<T>("ScaledDotProductAttention").c_str(),
                    R"doc(``softmax(Q K^T / sqrt(d_k) + mask) V`` with its backward.

``forward(q, k, v, mask=None)`` takes ``q`` (..., Tq, d), ``k`` and ``v`` (..., Tk, d) and a
mask broadcastable to (..., Tq, Tk) with True = blocked; returns ``(output, weights)``.
``backward(dout)`` returns ``(dq, dk, dv)``.)doc");
  cls.def(py::init<>())
      .def(
          "forward",
          [](S& s, const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& mask) {
            LayerForward<T, S> call(s, "scaled_dot_product_attention");
            const char* who = call.who();
            auto Q = as_floats<T>(q, who, "q", 3), K = as_floats<T>(k, who, "k", 3), V = as_floats<T>(v, who, "v", 3);
            const Index G = Q.shape(0), Tq = Q.shape(1), dk = Q.shape(2), Tk = K.shape(1);
            if (K.shape(0) != G || V.shape(0) != G || K.shape(2) != dk || V.shape(1) != Tk || V.shape(2) != dk)
              throw py::value_error(concat(who,
                                           ": expected q (G, Tq, d), k (G, Tk, d), v (G, Tk, d) with one d; got q ",
                                           describe(Q), ", k ", describe(K), ", v ", describe(V)));
            call.finite_kept(Q, "q");  // backward reads all three again
            call.finite_kept(K, "k");
            call.finite_kept(V, "v");
            const double g = static_cast<double>(G), tq = static_cast<double>(Tq), tk = static_cast<double>(Tk);
            call.check_memory_bytes(concat(G, " groups of ", Tq, " queries and ", Tk, " keys"),
                                    (3 * g * tq * tk + 2 * g * (tq + 2 * tk) * static_cast<double>(dk)) * sizeof(T));
            const AttentionMask mk = mask_arg(mask, G, Tq, Tk, call);
            const Matrix<T>& out = call.run({G, Tq, Tk, dk}, [&]() -> const Matrix<T>& {
              s.q = Q.data();
              s.k = K.data();
              s.v = V.data();
              s.mask = mk;
              s.weights.resize(G * Tq, Tk);
              s.out.resize(G * Tq, dk);
              attention_forward<T>(Q.data(), dk, K.data(), dk, V.data(), dk, G, 1, Tq, Tk, dk, mk, s.weights.data(),
                                   s.out.data(), dk);
              return s.out;
            });
            return py::make_tuple(copy_out<T>(out.data(), {G, Tq, dk}), copy_out<T>(s.weights.data(), {G, Tq, Tk}));
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none())
      .def(
          "backward",
          [](S& s, const py::handle& dout) {
            LayerBackward<T, S> call(s, "scaled_dot_product_attention.backward");
            const Index G = s.lead[0], Tq = s.lead[1], Tk = s.lead[2], dk = s.lead[3];
            auto dO = call.dout_array(dout, {G, Tq, dk});
            call.run([&] {
              s.dscores.resize(G * Tq, Tk);
              s.dq.resize(G * Tq, dk);
              s.dk.resize(G * Tk, dk);
              s.dv.resize(G * Tk, dk);
              attention_backward<T>(s.q, dk, s.k, dk, s.v, dk, G, 1, Tq, Tk, dk, s.weights.data(), dO.data(), dk,
                                    s.dq.data(), dk, s.dk.data(), dk, s.dv.data(), dk, s.dscores.data());
            });
            call.check_gradient(s.dq, "gradient of q");
            call.check_gradient(s.dk, "gradient of k");
            call.check_gradient(s.dv, "gradient of v");
            return py::make_tuple(copy_out<T>(s.dq.data(), {G, Tq, dk}), copy_out<T>(s.dk.data(), {G, Tk, dk}),
                                  copy_out<T>(s.dv.data(), {G, Tk, dk}));
          },
          py::arg("dout"));
  def_no_parameters(cls);
}

template <typename T>
void bind_multi_head_attention(py::module_& m) {
  using H = Holder<MultiHeadAttention<T>>;
  py::class_<H> cls(m, class_name<T>("MultiHeadAttention").c_str(),
                    R"doc(Multi-head attention (Q, K, V projections, ``n_heads`` heads of ``d_k = d_model / n_heads``,
concatenation, output projection).

``forward(x, memory=None, mask=None)``: self-attention over ``x`` (B, T, d_model) or, with
``memory`` (B, S, d_model), cross-attention whose keys and values come from ``memory``.
``mask`` broadcasts to (B, Tq, Tk) (also (B, 1, Tq, Tk)); True = blocked.
``backward(dout)`` returns ``dx`` (self-attention) or ``(dx, dmemory)`` (cross-attention).
``attention_weights()`` gives the last weights (B, n_heads, Tq, Tk).
``attention_impl``: ``"plain"`` keeps those weights; ``"tiled"`` keeps one log-sum-exp per query
instead (memory linear in the length, no weights to read); ``"auto"`` is tiled for long inputs.
Parameters: ``query|key|value|output.weight|bias``.)doc");
  def_heads_init(cls, "MultiHeadAttention");
  cls.def(
         "forward",
         [](H& h, const py::handle& x, const py::handle& memory, const py::handle& mask) {
           LayerForward<T, H> call(h, "MultiHeadAttention.forward");
           const char* who = call.who();
           const Index d = h.layer.d_model();
           auto X = call.btc(x, "x", d, /*keep=*/true);
           const Index B = X.lead_shape[0], Tq = X.lead_shape[1];
           const double heads = static_cast<double>(h.layer.n_heads());
           const bool cross = !memory.is_none();
           RowsInput<T> M;
           Index Tk = Tq;
           if (cross) {
             M = call.btc(memory, "memory", d, /*keep=*/true);
             if (M.lead_shape[0] != B)
               throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but x has ", B));
             Tk = M.lead_shape[1];
             call.check(concat(batch_what(B, Tq), " attending to ", Tk, " memory positions"),
                        attention_elements(X.rows, M.rows, B, heads, Tq, Tk, d));
           } else {
             call.check(batch_what(B, Tq), attention_elements(X.rows, X.rows, B, heads, Tq, Tq, d));
           }
           const AttentionMask mk = mask_arg(mask, B, Tq, Tk, call);
           const Matrix<T>& y = call.run({B, Tq, Tk}, [&]() -> const Matrix<T>& {
             h.flag = cross;  // backward then returns the memory gradient too
             return cross ? h.layer.forward(X.map(), M.map(), B, Tq, Tk, mk) : h.layer.forward(X.map(), B, Tq, mk);
           });
           return btc_out<T>(y, B, Tq);
         },
         py::arg("x"), py::arg("memory") = py::none(), py::arg("mask") = py::none())
      .def(
          "backward",
          [](H& h, const py::handle& dout) -> py::object {
            LayerBackward<T, H> call(h, "MultiHeadAttention.backward");
            auto d = call.dout_btc(dout, h.layer.d_model());
            const Index B = h.lead[0], Tq = h.lead[1], Tk = h.lead[2];
            const bool cross = h.flag;
            const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
            call.check_gradient(dx);
            if (cross) call.check_gradient(h.layer.dmemory(), "memory gradient");
            call.check_parameter_gradients();
            if (!cross) return btc_out<T>(dx, B, Tq);
            return py::make_tuple(btc_out<T>(dx, B, Tq), btc_out<T>(h.layer.dmemory(), B, Tk));
          },
          py::arg("dout"), "dout (B, Tq, d) -> dx (self-attention) or (dx, dmemory) (cross-attention)")
      .def(
          "attention_weights",
          [](H& h) {
            check_forward_done(h, "MultiHeadAttention.attention_weights");
            return copy_out<T>(h.layer.attention_weights().data(),
                               {h.layer.batch(), h.layer.n_heads(), h.layer.query_length(), h.layer.key_length()});
          },
          "The attention weights of the last forward, (B, heads, T_q, T_k).");
  def_parameters<T>(cls, "MultiHeadAttention");
}

template <typename T>
void bind_feed_forward(py::module_& m) {
  using H = Holder<FeedForward<T>>;
  py::class_<H> cls(m, class_name<T>("FeedForward").c_str(),
                    R"doc(Position-wise ``Linear(d_model, d_ff) -> ReLU -> Dropout -> Linear(d_ff, d_model)``;
``forward(x, training=False)`` with ``x`` (..., d_model).)doc");
  cls.def(py::init(
              [](const py::object& d_model, const py::object& d_ff, const py::object& dropout, const py::object& seed) {
                const char* who = "FeedForward";
                return new H(int_arg(d_model, who, "d_model"), int_arg(d_ff, who, "d_ff"),
                             float_arg(dropout, who, "dropout", limits::rate()), seed_arg(seed, who));
              }),
          py::arg("d_model"), py::arg("d_ff"), py::arg("dropout") = 0.1, py::arg("seed") = 0)
      .def(
          "forward",
          [](H& h, const py::handle& x, bool training) {
            LayerForward<T, H> call(h, "FeedForward.forward");
            auto X = call.rows(x, "x", h.layer.linear1_.in_features(), /*keep=*/true);
            call.check(rows_what(X.rows), feed_forward_elements(X.rows, X.cols, h.layer.linear1_.out_features()));
            const Matrix<T>& y =
                call.run(X.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward(X.map(), training); });
            return rows_out<T>(y, X.lead_shape);
          },
          py::arg("x"), py::arg("training") = false);
  def_backward<T>(cls, "FeedForward", [](const auto& l) { return l.linear2_.out_features(); }, Dout::Rows, nullptr);
  def_parameters<T>(cls, "FeedForward");
}

// The arguments of EncoderLayer / DecoderLayer, and of Encoder / Decoder.
struct LayerArgs {
  Index d_model, n_heads, d_ff;
  double dropout, eps;
  std::uint64_t seed;
};
LayerArgs layer_args(const char* who, const py::object& d_model, const py::object& n_heads, const py::object& d_ff,
                     const py::object& dropout, const py::object& eps, const py::object& seed) {
  return {int_arg(d_model, who, "d_model"),
          int_arg(n_heads, who, "n_heads"),
          int_arg(d_ff, who, "d_ff"),
          float_arg(dropout, who, "dropout", limits::rate()),
          float_arg(eps, who, "eps", limits::positive()),
          seed_arg(seed, who)};
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

// The constructor of EncoderLayer / DecoderLayer (`name`), whose arguments both take.
template <typename H>
void def_layer_init(py::class_<H>& cls, const std::string& name) {
  cls.def(py::init([name](const py::object& d_model, const py::object& n_heads, const py::object& d_ff,
                          const py::object& dropout, bool pre_norm, const py::object& eps, const py::object& seed) {
            const LayerArgs a = layer_args(name.c_str(), d_model, n_heads, d_ff, dropout, eps, seed);
            return new H(a.d_model, a.n_heads, a.d_ff, a.dropout, pre_norm, a.eps, a.seed);
          }),
          py::arg("d_model"), py::arg("n_heads"), py::arg("d_ff"), py::arg("dropout") = 0.1,
          py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0);
}

// The constructor of Encoder / Decoder (`name`), whose arguments both take.
template <typename H>
void def_stack_init(py::class_<H>& cls, const std::string& name) {
  cls.def(py::init([name](const py::object& vocab, const py::object& d_model, const py::object& n_layers,
                          const py::object& n_heads, const py::object& d_ff, const py::object& dropout,
                          const py::object& max_length, const py::object& layout, bool pre_norm, const py::object& eps,
                          const py::object& seed) {
            const StackArgs a = stack_args(name.c_str(), vocab, d_model, n_layers, n_heads, d_ff, dropout, max_length,
                                           layout, eps, seed);
            const LayerArgs& l = a.layer;
            return new H(a.vocab_size, l.d_model, a.n_layers, l.n_heads, l.d_ff, l.dropout, a.max_length, a.layout,
                         pre_norm, l.eps, l.seed);
          }),
          py::arg("vocab_size"), py::arg("d_model"), py::arg("n_layers"), py::arg("n_heads"), py::arg("d_ff"),
          py::arg("dropout") = 0.1, py::arg("max_length") = 2048, py::arg("layout") = "interleaved",
          py::arg("pre_norm") = false, py::arg("eps") = 1e-6, py::arg("seed") = 0);
}

// Heads, d_ff and layers of a stack, for the memory estimates.
template <typename Stack>
std::tuple<double, double, double> stack_dims(const Stack& s) {
  const auto& first = *s.layers_.front();
  return {static_cast<double>(first.n_heads()), static_cast<double>(first.feed_forward_.linear1_.out_features()),
          static_cast<double>(s.layers_.size())};
}

template <typename T>
void bind_encoder_layer(py::module_& m) {
  using E = Holder<EncoderLayer<T>>;
  py::class_<E> cls(
      m, class_name<T>("EncoderLayer").c_str(),
      R"doc(``x -> LN(x + Dropout(SelfAttention(x))) -> LN(. + Dropout(FFN(.)))`` (post-norm; ``pre_norm=True``
for the pre-norm variant). ``forward(x, mask=None, training=False)`` with ``x`` (B, T, d_model).)doc");
  def_layer_init(cls, "EncoderLayer");
  cls.def(
      "forward",
      [](E& h, const py::handle& x, const py::handle& mask, bool training) {
        LayerForward<T, E> call(h, "EncoderLayer.forward");
        const Index d = h.layer.norm1_.dim();
        auto X = call.btc(x, "x", d, /*keep=*/true);
        const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
        call.check(batch_what(B, Tn), encoder_layer_elements(X.rows, B, h.layer.self_attention_.n_heads(), Tn, d,
                                                             h.layer.feed_forward_.linear1_.out_features()));
        const AttentionMask mk = mask_arg(mask, B, Tn, Tn, call);
        const Matrix<T>& y =
            call.run({B, Tn}, [&]() -> const Matrix<T>& { return h.layer.forward(X.map(), B, Tn, mk, training); });
        return btc_out<T>(y, B, Tn);
      },
      py::arg("x"), py::arg("mask") = py::none(), py::arg("training") = false);
  def_backward<T>(cls, "EncoderLayer", [](const auto& l) { return l.norm1_.dim(); }, Dout::BTC, nullptr);
  def_parameters<T>(cls, "EncoderLayer");
}

template <typename T>
void bind_decoder_layer(py::module_& m) {
  using D = Holder<DecoderLayer<T>>;
  py::class_<D> cls(
      m, class_name<T>("DecoderLayer").c_str(),
      R"doc(Masked self-attention, cross-attention over ``memory`` and FFN, each with residual + LayerNorm.

``forward(x, memory, self_mask=None, cross_mask=None, training=False)``; ``backward(dout)``
returns ``(dx, dmemory)``.)doc");
  def_layer_init(cls, "DecoderLayer");
  cls.def(
         "forward",
         [](D& h, const py::handle& x, const py::handle& memory, const py::handle& self_mask,
            const py::handle& cross_mask, bool training) {
           LayerForward<T, D> call(h, "DecoderLayer.forward");
           const char* who = call.who();
           const Index d = h.layer.norm1_.dim();
           auto X = call.btc(x, "x", d, /*keep=*/true);
           auto M = call.btc(memory, "memory", d, /*keep=*/true);
           const Index B = X.lead_shape[0], Tn = X.lead_shape[1], S = M.lead_shape[1];
           if (M.lead_shape[0] != B)
             throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but x has ", B));
           call.check(concat(batch_what(B, Tn), " attending to ", S, " memory positions"),
                      decoder_layer_elements(X.rows, M.rows, B, h.layer.n_heads(), Tn, S, d,
                                             h.layer.feed_forward_.linear1_.out_features()));
           const AttentionMask sm = mask_arg(self_mask, B, Tn, Tn, call);
           const AttentionMask cm = mask_arg(cross_mask, B, Tn, S, call);
           const Matrix<T>& y = call.run({B, Tn, S}, [&]() -> const Matrix<T>& {
             return h.layer.forward(X.map(), M.map(), B, Tn, S, sm, cm, training);
           });
           return btc_out<T>(y, B, Tn);
         },
         py::arg("x"), py::arg("memory"), py::arg("self_mask") = py::none(), py::arg("cross_mask") = py::none(),
         py::arg("training") = false)
      .def(
          "backward",
          [](D& h, const py::handle& dout) {
            LayerBackward<T, D> call(h, "DecoderLayer.backward");
            auto d = call.dout_btc(dout, h.layer.norm1_.dim());
            const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
            call.check_gradient(dx);
            call.check_gradient(h.layer.dmemory(), "memory gradient");
            call.check_parameter_gradients();
            return py::make_tuple(btc_out<T>(dx, h.lead[0], h.lead[1]),
                                  btc_out<T>(h.layer.dmemory(), h.lead[0], h.lead[2]));
          },
          py::arg("dout"), "dout (B, T, d) -> (dx (B, T, d), dmemory (B, S, d))");
  def_parameters<T>(cls, "DecoderLayer");
}

template <typename T>
void bind_encoder(py::module_& m) {
  using En = Holder<Encoder<T>>;
  py::class_<En> cls(
      m, class_name<T>("Encoder").c_str(),
      R"doc(Positional embedding, dropout and ``n_layers`` encoder layers. ``forward(tokens, training=False)``
maps int tokens (B, S) to (B, S, d_model); padding (token 0) keys are masked.)doc");
  def_stack_init(cls, "Encoder");
  cls.def(
         "forward",
         [](En& h, const py::handle& tokens, bool training) {
           LayerForward<T, En> call(h, "Encoder.forward");
           auto tok = as_tokens(tokens, call.who(), "tokens", 2);
           call.keep(tok);
           const Index B = tok.shape(0), S = tok.shape(1);
           const auto [H, dff, L] = stack_dims(h.layer);
           const double b = static_cast<double>(B), s = static_cast<double>(S), d = h.layer.embedding_.dim();
           call.check(batch_what(B, S),
                      L * encoder_layer_elements(b * s, b, H, s, d, dff) + 4 * b * s * d + b * s * s / sizeof(T));
           const Matrix<T>& y = call.run({B, S}, [&]() -> const Matrix<T>& {
             return h.layer.forward(ConstTokenMap(tok.data(), B, S), training);
           });
           return btc_out<T>(y, B, S);
         },
         py::arg("tokens"), py::arg("training") = false)
      .def(
          "backward",
          [](En& h, const py::handle& dout) {
            LayerBackward<T, En> call(h, "Encoder.backward");
            auto d = call.dout_btc(dout, h.layer.embedding_.dim());
            call.run([&] { h.layer.backward(d.map()); });
            call.check_parameter_gradients();
          },
          py::arg("dout"));
  def_parameters<T>(cls, "Encoder");
}

template <typename T>
void bind_decoder(py::module_& m) {
  using De = Holder<Decoder<T>>;
  py::class_<De> cls(m, class_name<T>("Decoder").c_str(),
                     R"doc(Positional embedding, dropout and ``n_layers`` decoder layers.
``forward(tokens, memory, source_padding=None, training=False)``: tokens (B, T), memory (B, S, d),
source_padding bool (B, S) (True = padding key). ``backward(dout)`` returns dmemory.)doc");
  def_stack_init(cls, "Decoder");
  cls.def(
         "forward",
         [](De& h, const py::handle& tokens, const py::handle& memory, const py::handle& source_padding,
            bool training) {
           LayerForward<T, De> call(h, "Decoder.forward");
           const char* who = call.who();
           auto tok = as_tokens(tokens, who, "tokens", 2);
           call.keep(tok);
           auto M = call.btc(memory, "memory", h.layer.embedding_.dim(), /*keep=*/true);
           const Index B = tok.shape(0), Tn = tok.shape(1), S = M.lead_shape[1];
           if (M.lead_shape[0] != B)
             throw py::value_error(concat(who, ": memory has batch size ", M.lead_shape[0], " but tokens have ", B));
           const auto [H, dff, L] = stack_dims(h.layer);
           const double b = static_cast<double>(B), t = static_cast<double>(Tn), s = static_cast<double>(S);
           const double d = h.layer.embedding_.dim();
           call.check(concat(batch_what(B, Tn), " attending to ", S, " memory positions"),
                      L * decoder_layer_elements(b * t, b * s, b, H, t, s, d, dff) + 4 * b * t * d +
                          b * (t * t + t * s) / sizeof(T));
           const std::uint8_t* pad = nullptr;
           if (!source_padding.is_none()) {
             auto p = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(source_padding);
             if (!p || p.ndim() != 2 || p.shape(0) != B || p.shape(1) != S)
               throw py::value_error(concat(who, ": source_padding must have shape (", B, ", ", S, ")"));
             call.keep(p);
             pad = p.data();
           }
           const Matrix<T>& y = call.run({B, Tn, S}, [&]() -> const Matrix<T>& {
             return h.layer.forward(ConstTokenMap(tok.data(), B, Tn), M.map(), S, pad, training);
           });
           return btc_out<T>(y, B, Tn);
         },
         py::arg("tokens"), py::arg("memory"), py::arg("source_padding") = py::none(), py::arg("training") = false)
      .def(
          "backward",
          [](De& h, const py::handle& dout) {
            LayerBackward<T, De> call(h, "Decoder.backward");
            auto d = call.dout_btc(dout, h.layer.embedding_.dim());
            call.run([&] { h.layer.backward(d.map()); });
            call.check_gradient(h.layer.dmemory(), "memory gradient");
            call.check_parameter_gradients();
            return btc_out<T>(h.layer.dmemory(), h.lead[0], h.lead[2]);
          },
          py::arg("dout"), "dout (B, T, d) -> dmemory (B, S, d)");
  def_parameters<T>(cls, "Decoder");
}

}  // namespace

void bind_layers(py::module_& m) {
  for_each_scalar([&](auto t) { bind_linear<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_dropout<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_sdpa<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_multi_head_attention<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_feed_forward<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_encoder_layer<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_decoder_layer<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_encoder<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_decoder<decltype(t)>(m); });
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
