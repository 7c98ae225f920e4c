// Bindings of linear attention: the kernel over (G, T, d) heads (forward and backward), the
// multi-head layer, and the layer's generation state (the RNN form).
//
// As in bind_layers.cpp, every forward and backward is a LayerForward / LayerBackward: one call at
// a time, finite inputs (owned copies of those backward reads again), the memory the buffers need,
// the work without the GIL, then a finite output.
#include <memory>

#include "bindings.hpp"
#include "transformer/attention/linear_attention.hpp"

namespace transformer::bindings {

namespace {

// A Python bool (TypeError naming the argument otherwise; 0 and 1 are not accepted as flags).
bool bool_arg(const py::handle& v, const char* who, const char* name) {
  if (!PyBool_Check(v.ptr()))
    throw py::type_error(concat(who, ": ", name, " must be True or False, got ", value_repr(v)));
  return v.ptr() == Py_True;
}

// The bound kernel: what a layer Holder would hold, and the buffers of
// linear_attention_forward / linear_attention_backward.
template <typename T>
struct LinearKernel {
  std::vector<py::object> keep;  // q, k, v (owned copies) of the last forward
  std::vector<Index> lead;       // G, T, d of the last forward
  bool has_forward = false;
  bool busy = false;
  bool causal = false;
  const T *q = nullptr, *k = nullptr, *v = nullptr;
  Matrix<T> out, den, state, dq, dk, dv;
};

// The generation state as Python holds it, with the shape of the layer that made it.
template <typename T>
struct PyLinearState {
  LinearAttentionState<T> st;
  InferenceBackend<T> backend;  // plain float32 products (the layer's weights may change between steps)
  Index d_model = 0, n_heads = 0, d_k = 0;
  bool busy = false;
};

template <typename T>
void bind_linear_kernel(py::module_& m) {
  using K = LinearKernel<T>;
  py::class_<K> cls(m, class_name<T>("LinearAttention").c_str(),
                    R"doc(Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs") with its backward.

``out_i = phi(q_i) sum_j phi(k_j)^T v_j / (phi(q_i) . sum_j phi(k_j) + 1e-6)``, ``phi(x) = elu(x) + 1``,
summing over every position ``j`` or, with ``causal=True``, over ``j <= i`` (by cumulative sums in
chunks: time and memory linear in T, no (T, T) matrix). ``forward(q, k, v, causal=False)`` takes
``q``, ``k``, ``v`` of one shape (..., T, d) and returns the output of that shape;
``backward(dout)`` returns ``(dq, dk, dv)``. ``state()`` gives ``(S, z)`` of the last forward,
``S = sum_j phi(k_j)^T v_j`` (..., d, d) and ``z = sum_j phi(k_j)`` (..., d).)doc");
  cls.def(py::init<>())
      .def(
          "forward",
          [](K& s, const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& causal) {
            LayerForward<T, K> call(s, "linear_attention");
            const char* who = call.who();
            const bool c = bool_arg(causal, who, "causal");
            auto Q = as_floats<T>(q, who, "q", 3), Kk = as_floats<T>(k, who, "k", 3), V = as_floats<T>(v, who, "v", 3);
            const Index G = Q.shape(0), Tn = Q.shape(1), d = Q.shape(2);
            if (Kk.shape(0) != G || V.shape(0) != G || Kk.shape(1) != Tn || V.shape(1) != Tn || Kk.shape(2) != d ||
                V.shape(2) != d)
              throw py::value_error(concat(who, ": expected q, k, v of one shape (G, T, d); got q ", describe(Q),
                                           ", k ", describe(Kk), ", v ", describe(V)));
            if (G == 0 || Tn == 0 || d == 0)
              throw py::value_error(concat(who, ": q, k, v must not be empty, got ", describe(Q)));
            call.finite_kept(Q, "q");  // backward reads all three again
            call.finite_kept(Kk, "k");
            call.finite_kept(V, "v");
            const double g = static_cast<double>(G), t = static_cast<double>(Tn), dd = static_cast<double>(d);
            call.check_memory_bytes(concat(G, " heads of ", Tn, " positions"),
                                    (7 * g * t * dd + g * t + g * (dd * dd + dd)) * sizeof(T));
            const Matrix<T>& out = call.run({G, Tn, d}, [&]() -> const Matrix<T>& {
              s.q = Q.data();
              s.k = Kk.data();
              s.v = V.data();
              s.causal = c;
              s.out.resize(G * Tn, d);
              s.den.resize(G, Tn);
              s.state.resize(G, linear_attention_state_size(d));
              linear_attention_forward<T>(Q.data(), d, Kk.data(), d, V.data(), d, G, 1, Tn, d, c, s.out.data(), d,
                                          s.den.data(), s.state.data());
              return s.out;
            });
            return copy_out<T>(out.data(), {G, Tn, d});
          },
          py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, "q, k, v (G, T, d) -> out (G, T, d)")
      .def(
          "backward",
          [](K& s, const py::handle& dout) {
            LayerBackward<T, K> call(s, "linear_attention.backward");
            const Index G = s.lead[0], Tn = s.lead[1], d = s.lead[2];
            auto dO = call.dout_array(dout, {G, Tn, d});
            call.run([&] {
              s.dq.resize(G * Tn, d);
              s.dk.resize(G * Tn, d);
              s.dv.resize(G * Tn, d);
              linear_attention_backward<T>(s.q, d, s.k, d, s.v, d, G, 1, Tn, d, s.causal, s.out.data(), d, s.den.data(),
                                           s.state.data(), dO.data(), d, s.dq.data(), d, s.dk.data(), d, s.dv.data(),
                                           d);
            });
            call.check_gradient(s.dq, "gradient of q");
            call.check_gradient(s.dk, "gradient of k");
            call.check_gradient(s.dv, "gradient of v");
            return py::make_tuple(copy_out<T>(s.dq.data(), {G, Tn, d}), copy_out<T>(s.dk.data(), {G, Tn, d}),
                                  copy_out<T>(s.dv.data(), {G, Tn, d}));
          },
          py::arg("dout"), "dout (G, T, d) -> (dq, dk, dv)")
      .def(
          "state",
          [](K& s) {
            check_forward_done(s, "linear_attention.state");
            const Index G = s.lead[0], d = s.lead[2];
            py::array_t<T> S({G, d, d}), z({G, d});
            for (Index g = 0; g < G; ++g) {
              const T* st = s.state.data() + g * linear_attention_state_size(d);
              std::copy(st, st + d * d, S.mutable_data() + g * d * d);
              std::copy(st + d * d, st + d * d + d, z.mutable_data() + g * d);
            }
            return py::make_tuple(S, z);
          },
          "(S, z) of the last forward over the whole sequence: S (G, d, d) = sum phi(K_j)^T V_j, z (G, d) = "
          "sum phi(K_j)");
  def_no_parameters(cls);
}

template <typename T>
void bind_linear_state(py::module_& m) {
  using S = PyLinearState<T>;
  py::class_<S> cls(m, class_name<T>("LinearAttentionState").c_str(),
                    "The generation state of a LinearMultiHeadAttention: S (d_k x d_k) and z (d_k) per row and head.");
  cls.def_property_readonly("rows", [](S& s) { return s.st.rows(); })
      .def_property_readonly("length", [](S& s) { return s.st.length; })
      .def(
          "values",
          [](S& s) {
            check_idle(s.busy, "LinearAttentionState.values", "state");
            const Index R = s.st.rows(), H = s.n_heads, d = s.d_k, ss = linear_attention_state_size(d);
            py::array_t<T> Sv({R, H, d, d}), z({R, H, d});
            for (Index rh = 0; rh < R * H; ++rh) {
              const T* st = s.st.s.data() + rh * ss;
              std::copy(st, st + d * d, Sv.mutable_data() + rh * d * d);
              std::copy(st + d * d, st + ss, z.mutable_data() + rh * d);
            }
            return py::make_tuple(Sv, z);
          },
          "Copies (S, z): S (rows, n_heads, d_k, d_k) = sum phi(k)^T v, z (rows, n_heads, d_k) = sum phi(k)");
}

template <typename T>
void bind_linear_layer(py::module_& m) {
  using S = PyLinearState<T>;
  using H = Holder<LinearMultiHeadAttention<T>>;
  py::class_<H> cls(m, class_name<T>("LinearMultiHeadAttention").c_str(),
                    R"doc(Multi-head linear attention: the Q, K, V and output projections of :class:`MultiHeadAttention`
(same parameter names ``query|key|value|output.weight|bias``, same layout and, for one seed, the
same initial values) around :class:`LinearAttention` per head instead of softmax attention.

``forward(x, causal=False)``: self-attention over ``x`` (B, T, d_model); with ``causal=True``
position t attends to positions <= t. Time and memory are linear in T. ``backward(dout)``
returns ``dx`` and accumulates the parameter gradients; ``release()`` frees what forward kept.

Generation uses the RNN form: ``state = layer.new_state(rows)``, then ``layer.step(x_t, state)``
with ``x_t`` (rows, d_model), one new position per sequence, returns its output (rows, d_model)
in constant time per position, equal to the causal forward at that position.)doc");
  def_heads_init(cls, "LinearMultiHeadAttention");
  cls.def(
      "forward",
      [](H& h, const py::handle& x, const py::handle& causal) {
        LayerForward<T, H> call(h, "LinearMultiHeadAttention.forward");
        const bool c = bool_arg(causal, call.who(), "causal");
        const Index d = h.layer.d_model(), heads = h.layer.n_heads(), dk = h.layer.d_k();
        auto X = call.btc(x, "x", d, /*keep=*/true);  // backward reads x again
        const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
        if (B == 0 || Tn == 0)
          throw py::value_error(concat(call.who(), ": x must hold at least one position, got ", describe(X.array)));
        const double rows = static_cast<double>(X.rows), bh = static_cast<double>(B * heads);
        call.check(concat("a batch of ", B, " sequences of length ", Tn),
                   10 * rows * static_cast<double>(d) + bh * static_cast<double>(Tn + dk * dk + dk));
        const Matrix<T>& y =
            call.run({B, Tn}, [&]() -> const Matrix<T>& { return h.layer.forward(X.map(), B, Tn, c); });
        return copy_out<T>(y.data(), {B, Tn, d});
      },
      py::arg("x"), py::arg("causal") = false, "x (B, T, d_model) -> (B, T, d_model)");
  def_d_model_backward<T>(cls, "LinearMultiHeadAttention",
                          "dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients");
  cls.def(
         "release",
         [](H& h) {
           check_idle(h.busy, "LinearMultiHeadAttention.release", "layer");
           h.layer.release();
           h.has_forward = false;
           h.keep.clear();
         },
         "Free what the last forward kept for backward.")
      .def(
          "new_state",
          [](H& h, const py::object& rows) {
            const char* who = "LinearMultiHeadAttention.new_state";
            check_idle(h.busy, who, "layer");
            const Index R = int_arg(rows, who, "rows", 1);
            const Index heads = h.layer.n_heads(), dk = h.layer.d_k(), d = h.layer.d_model();
            check_memory(who, concat("a state of ", R, " rows"),
                         static_cast<double>(R) * static_cast<double>(heads * linear_attention_state_size(dk) + 4 * d) *
                             sizeof(T));
            auto s = std::make_unique<S>();
            s->d_model = d;
            s->n_heads = heads;
            s->d_k = dk;
            h.layer.reset_state(s->st, R);
            return s;
          },
          py::arg("rows"), "An empty generation state for `rows` sequences.")
      .def(
          "step",
          [](H& h, const py::handle& x, S& s) {
            const char* who = "LinearMultiHeadAttention.step";
            InUse layer_use(h.busy, who);
            InUse state_use(s.busy, who, "state");
            const Index d = h.layer.d_model();
            if (s.d_model != d || s.n_heads != h.layer.n_heads())
              throw py::value_error(concat(who, ": the state was made for d_model ", s.d_model, " and n_heads ",
                                           s.n_heads, ", this layer has ", d, " and ", h.layer.n_heads()));
            auto X = as_rows<T>(x, who, "x", d);
            if (X.lead_shape.size() != 1 || X.rows != s.st.rows())
              throw py::value_error(concat(who, ": x must have shape (", s.st.rows(), ", ", d,
                                           ") (one position per row of the state), got ", describe(X.array)));
            check_input(X, who, "x", false);
            check_finite_parameters(h.layer.parameters(), who);
            Matrix<T> y;
            without_gil([&] { h.layer.step(X.map(), s.st, s.backend, y); });
            check_output(y, who);
            return copy_out<T>(y.data(), {y.rows(), y.cols()});
          },
          py::arg("x"), py::arg("state"),
          "x (rows, d_model): one new position per row -> y (rows, d_model); advances the state");
  def_parameters<T>(cls, "LinearMultiHeadAttention");
}

void bind_linear_attention(py::module_& m) {
  for_each_scalar([&](auto t) { bind_linear_kernel<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_linear_state<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_linear_layer<decltype(t)>(m); });
}

const AttentionKindBinding registered("linear", bind_linear_attention);

}  // namespace

}  // namespace transformer::bindings
