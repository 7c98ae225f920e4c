// Bindings of the tiled (memory-linear) softmax attention: the kernel over (B, H, T, d) heads as
// TiledAttention, the adapter SoftmaxSelfAttention, and MultiHeadAttention's attention_impl.
#include "bindings.hpp"
#include "transformer/attention/tiled_attention.hpp"
#include "transformer/core/tuning.hpp"

namespace transformer::bindings {

namespace {

// The kernel over (B, H, T, d) heads, bound on its own: the state a layer Holder would hold and
// the buffers of one forward and backward.
template <typename T>
struct HeadsAttention {
  std::vector<py::object> keep;  // q, k, v (owned copies) and the key padding of the last forward
  std::vector<Index> lead;       // B, H, Tq, Tk, d of the last forward
  bool has_forward = false;
  bool busy = false;
  bool tiled = true;  // the kernel: tiled, or plain (attention_forward, for comparison)
  bool causal = false;
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  std::vector<std::uint8_t> padding;  // (B*H, Tk): the key padding repeated for every head
  MaskBuffer mask;                    // (B*H, Tq, Tk) plain kernel only
  Matrix<T> out, lse, weights, dscores, dq, dk, dv;
};

template <typename T>
void bind_heads_attention(py::module_& m) {
  using S = HeadsAttention<T>;
  py::class_<S> cls(
      m, class_name<T>("TiledAttention").c_str(),
      R"doc(Exact ``softmax(Q K^T / sqrt(d_k) + mask) V`` over (B, H, T, d_k) heads, computed block by block
with a running maximum and sum per query, so that the (Tq, Tk) weights are never stored.

``forward(q, k, v, causal=False, key_padding=None)``: ``q`` (B, H, Tq, d), ``k`` and ``v``
(B, H, Tk, d), ``key_padding`` (B, Tk) with True = blocked; returns the output (B, H, Tq, d).
``backward(dout)`` returns ``(dq, dk, dv)``, recomputing the weights from ``log_sum_exp()``.
``tiled=False`` runs the plain kernel (which stores the weights) on the same inputs.)doc");
  cls.def(py::init([](bool tiled) {
            auto s = new S();
            s->tiled = tiled;
            return s;
          }),
          py::arg("tiled") = true)
      .def_property_readonly("tiled", [](S& s) { return s.tiled; })
      .def(
          "forward",
          [](S& s, const py::handle& q, const py::handle& k, const py::handle& v, bool causal,
             const py::handle& key_padding) {
            LayerForward<T, S> call(s, "TiledAttention.forward");
            const char* who = call.who();
            auto Q = as_floats<T>(q, who, "q", 4), K = as_floats<T>(k, who, "k", 4), V = as_floats<T>(v, who, "v", 4);
            const Index B = Q.shape(0), H = Q.shape(1), Tq = Q.shape(2), dk = Q.shape(3), Tk = K.shape(2);
            if (K.shape(0) != B || K.shape(1) != H || K.shape(3) != dk || V.shape(0) != B || V.shape(1) != H ||
                V.shape(2) != Tk || V.shape(3) != dk || B == 0 || H == 0 || Tq == 0 || Tk == 0 || dk == 0)
              throw py::value_error(concat(who,
                                           ": expected non-empty q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, d) "
                                           "with one B, H and d; got q ",
                                           describe(Q), ", k ", describe(K), ", v ", describe(V)));
            call.finite_kept(Q, "q");  // backward reads all three again
            call.finite_kept(K, "k");
            call.finite_kept(V, "v");
            std::vector<std::uint8_t> padding;
            if (!key_padding.is_none()) {
              auto p = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>::ensure(key_padding);
              if (!p || p.ndim() != 2 || p.shape(0) != B || p.shape(1) != Tk)
                throw py::value_error(
                    concat(who, ": key_padding must have shape (", B, ", ", Tk, ") with 1 = blocked"));
              padding.resize(static_cast<size_t>(B * H * Tk));
              for (Index g = 0; g < B * H; ++g)
                for (Index j = 0; j < Tk; ++j)
                  padding[static_cast<size_t>(g * Tk + j)] = p.data()[(g / H) * Tk + j] != 0;
            }
            const double g = static_cast<double>(B * H), tq = static_cast<double>(Tq), tk = static_cast<double>(Tk);
            const double linear = g * (2 * tq + 2 * tk) * static_cast<double>(dk) + g * tq;
            call.check_memory_bytes(
                concat(B, "x", H, " heads of ", Tq, " queries and ", Tk, " keys"),
                (s.tiled ? linear : linear + 2 * g * tq * tk) * sizeof(T) + (s.tiled ? 0.0 : g * tq * tk));
            const Matrix<T>& out = call.run({B, H, Tq, Tk, dk}, [&]() -> const Matrix<T>& {
              s.q = Q.data();
              s.k = K.data();
              s.v = V.data();
              s.causal = causal;
              s.padding = std::move(padding);
              s.out.resize(B * H * Tq, dk);
              // (B, H, T, d) heads are B*H groups of one head each: row i of group g at (g*T + i)*d
              if (s.tiled) {
                s.lse.resize(B * H, Tq);
                s.weights.resize(0, 0);
                tiled_attention_forward<T>(Q.data(), dk, K.data(), dk, V.data(), dk, B * H, 1, Tq, Tk, dk,
                                           TiledMask{causal, s.padding.empty() ? nullptr : s.padding.data(), {}},
                                           s.out.data(), dk, s.lse.data());
              } else {
                build_attention_mask(s.mask, s.padding.empty() ? nullptr : s.padding.data(), B * H, Tq, Tk, causal);
                s.weights.resize(B * H * Tq, Tk);
                attention_forward<T>(Q.data(), dk, K.data(), dk, V.data(), dk, B * H, 1, Tq, Tk, dk,
                                     AttentionMask{s.mask.data(), Tq * Tk}, s.weights.data(), s.out.data(), dk);
              }
              return s.out;
            });
            return copy_out<T>(out.data(), {B, H, Tq, dk});
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("key_padding") = py::none(),
          "q (B, H, Tq, d), k and v (B, H, Tk, d), key_padding (B, Tk) with 1 = blocked -> (B, H, Tq, d)")
      .def(
          "backward",
          [](S& s, const py::handle& dout) {
            LayerBackward<T, S> call(s, "TiledAttention.backward");
            const Index B = s.lead[0], H = s.lead[1], Tq = s.lead[2], Tk = s.lead[3], dk = s.lead[4];
            auto dO = call.dout_array(dout, {B, H, Tq, dk});
            call.run([&] {
              s.dq.resize(B * H * Tq, dk);
              s.dk.resize(B * H * Tk, dk);
              s.dv.resize(B * H * Tk, dk);
              if (s.tiled) {
                tiled_attention_backward<T>(s.q, dk, s.k, dk, s.v, dk, B * H, 1, Tq, Tk, dk,
                                            TiledMask{s.causal, s.padding.empty() ? nullptr : s.padding.data(), {}},
                                            s.out.data(), dk, s.lse.data(), dO.data(), dk, s.dq.data(), dk, s.dk.data(),
                                            dk, s.dv.data(), dk);
              } else {
                s.dscores.resize(B * H * Tq, Tk);
                attention_backward<T>(s.q, dk, s.k, dk, s.v, dk, B * H, 1, Tq, Tk, dk, s.weights.data(), dO.data(), dk,
                                      s.dq.data(), dk, s.dk.data(), dk, s.dv.data(), dk, s.dscores.data());
              }
            });
            call.check_gradient(s.dq, "gradient of q");
            call.check_gradient(s.dk, "gradient of k");
            call.check_gradient(s.dv, "gradient of v");
            return py::make_tuple(copy_out<T>(s.dq.data(), {B, H, Tq, dk}), copy_out<T>(s.dk.data(), {B, H, Tk, dk}),
                                  copy_out<T>(s.dv.data(), {B, H, Tk, dk}));
          },
          py::arg("dout"), "dout (B, H, Tq, d) -> (dq, dk, dv)")
      .def(
          "log_sum_exp",
          [](S& s) {
            check_idle(s.busy, "TiledAttention.log_sum_exp", "layer");
            if (!s.has_forward || !s.tiled)
              throw std::runtime_error("TiledAttention.log_sum_exp: call forward() of a tiled=True object first");
            return copy_out<T>(s.lse.data(), {s.lead[0], s.lead[1], s.lead[2]});
          },
          "Each query row's log-sum-exp of its scaled scores, (B, H, Tq); +inf where every key is blocked.");
  def_no_parameters(cls);
}

template <typename T>
void bind_softmax_self_attention(py::module_& m) {
  using H = Holder<SoftmaxSelfAttention<T>>;
  py::class_<H> cls(m, class_name<T>("SoftmaxSelfAttention").c_str(),
                    R"doc(Softmax self-attention as a language model's block uses it: ``forward(x, causal=True)`` with
``x`` (B, T, d_model), ``backward(dout)`` returns ``dx``. The layer of :class:`MultiHeadAttention`
(same parameters); ``attention_impl`` defaults to ``"auto"`` (the tiled kernel for long inputs).)doc");
  cls.def(py::init(
              [](const py::object& d_model, const py::object& n_heads, const py::object& seed, const py::object& impl) {
                const char* who = "SoftmaxSelfAttention";
                return new H(int_arg(d_model, who, "d_model"), int_arg(n_heads, who, "n_heads"), seed_arg(seed, who),
                             impl_arg(impl, who));
              }),
          py::arg("d_model"), py::arg("n_heads"), py::arg("seed") = 0, py::arg("attention_impl") = "auto");
  def_model_heads(cls);
  cls.def_property(
         "attention_impl", [](H& h) { return std::string(attention_impl_name(h.layer.attention().attention_impl())); },
         [](H& h, const py::object& v) {
           check_idle(h.busy, "SoftmaxSelfAttention.attention_impl", "layer");
           h.layer.attention().set_attention_impl(impl_arg(v, "SoftmaxSelfAttention"));
         })
      .def_property_readonly("last_forward_tiled", [](H& h) { return h.layer.attention().last_forward_tiled(); })
      .def(
          "forward",
          [](H& h, const py::handle& x, bool causal) {
            LayerForward<T, H> call(h, "SoftmaxSelfAttention.forward");
            const Index d = h.layer.d_model();
            auto X = call.btc(x, "x", d, /*keep=*/true);
            const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
            const double rows = static_cast<double>(X.rows), heads = static_cast<double>(h.layer.n_heads());
            const bool tiled = runs_tiled(h.layer.attention().attention_impl(), Tn);
            // the tiled kernel keeps no (T, T) weights (nor a mask)
            const double elements =
                tiled ? 12 * rows * static_cast<double>(d) + 4 * heads * rows
                      : attention_elements(rows, rows, static_cast<double>(B), heads, static_cast<double>(Tn),
                                           static_cast<double>(Tn), static_cast<double>(d)) +
                            static_cast<double>(B) * static_cast<double>(Tn) * static_cast<double>(Tn) / sizeof(T);
            call.check(concat("a batch of ", B, " sequences of length ", Tn), elements);
            const Matrix<T>& y =
                call.run({B, Tn}, [&]() -> const Matrix<T>& { return h.layer.forward(X.map(), B, Tn, causal); });
            return copy_out<T>(y.data(), {B, Tn, d});
          },
          py::arg("x"), py::arg("causal") = true, "x (B, T, d_model) -> (B, T, d_model)");
  def_d_model_backward<T>(cls, "SoftmaxSelfAttention",
                          "dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients");
  def_parameters<T>(cls, "SoftmaxSelfAttention");
}

}  // namespace

AttentionImpl impl_arg(const py::handle& v, const char* who) {
  const std::string s = str_arg(v, who, "attention_impl");
  if (s != "plain" && s != "tiled" && s != "auto")
    throw py::value_error(concat(who, ": attention_impl must be 'plain', 'tiled' or 'auto', got ", value_repr(v)));
  return parse_attention_impl(s);
}

namespace {

// MultiHeadAttention (bound in bind_layers.cpp) gets the property that picks its kernel.
template <typename T>
void bind_attention_impl(py::module_& m) {
  using H = Holder<MultiHeadAttention<T>>;
  auto cls = py::reinterpret_borrow<py::class_<H>>(m.attr(class_name<T>("MultiHeadAttention").c_str()));
  cls.def_property(
         "attention_impl", [](H& h) { return std::string(attention_impl_name(h.layer.attention_impl())); },
         [](H& h, const py::object& v) {
           check_idle(h.busy, "MultiHeadAttention.attention_impl", "layer");
           h.layer.set_attention_impl(impl_arg(v, "MultiHeadAttention"));
         },
         "'plain' (keeps the attention weights), 'tiled' (memory linear in the length) or 'auto' (tiled from "
         "the length where it pays)")
      .def_property_readonly("last_forward_tiled", [](H& h) { return h.layer.last_forward_tiled(); });
}

void bind_tiled_attention(py::module_& m) {
  for_each_scalar([&](auto t) { bind_heads_attention<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_softmax_self_attention<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_attention_impl<decltype(t)>(m); });
}

const AttentionKindBinding registered("softmax", bind_tiled_attention);

}  // namespace

}  // namespace transformer::bindings
