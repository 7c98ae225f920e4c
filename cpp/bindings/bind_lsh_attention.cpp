// Binding of LSHSelfAttention (Reformer's LSH attention), float32 and float64.
//
// forward and backward are a LayerForward / LayerBackward (bindings.hpp): one call at a time,
// finite inputs (x owned and kept: backward reads it again), the memory of the buffers and finite
// weights before the work, a finite output and gradients after it.
#include "bindings.hpp"
#include "transformer/layers/lsh_attention.hpp"
#include "transformer/runtime.hpp"

namespace transformer::bindings {

namespace {

template <typename T>
void bind_lsh(py::module_& m) {
  using L = LSHSelfAttention<T>;
  using H = Holder<L>;  // H::flag: the layer's causal setting, used when forward is not told
  py::class_<H>(m, class_name<T>("LSHSelfAttention").c_str(),
                "Reformer's LSH self-attention: shared-QK heads hashed by random rotations, sorted by bucket, "
                "attending within chunks and one chunk back, n_hashes rounds combined.")
      .def(py::init([](const py::object& d_model, const py::object& n_heads, const py::object& chunk,
                       const py::object& n_hashes, const py::object& n_buckets, const py::object& causal,
                       const py::object& seed) {
             const char* who = "LSHSelfAttention";
             const Index nb = n_buckets.is_none() ? 0 : int_arg(n_buckets, who, "n_buckets", 2, Index(1) << 30);
             auto* h = new H(int_arg(d_model, who, "d_model", 1), int_arg(n_heads, who, "n_heads", 1),
                             int_arg(chunk, who, "chunk", 1), int_arg(n_hashes, who, "n_hashes", 1, L::kMaxHashes), nb,
                             seed_arg(seed, who));
             h->flag = check_setting(Limit::flag(), who, "causal", causal).cast<bool>();
             return h;
           }),
           py::arg("d_model"), py::arg("n_heads"), py::arg("chunk") = 64, py::arg("n_hashes") = 4,
           py::arg("n_buckets") = py::none(), py::arg("causal") = false, py::arg("seed") = 0)
      .def_property_readonly("d_model", [](H& h) { return h.layer.d_model(); })
      .def_property_readonly("n_heads", [](H& h) { return h.layer.n_heads(); })
      .def_property_readonly("d_k", [](H& h) { return h.layer.d_k(); })
      .def_property_readonly("chunk", [](H& h) { return h.layer.chunk(); })
      .def_property_readonly("n_hashes", [](H& h) { return h.layer.n_hashes(); })
      .def_property_readonly(
          "n_buckets",
          [](H& h) -> py::object {
            return h.layer.n_buckets() ? py::object(py::int_(h.layer.n_buckets())) : py::none();
          },
          "The number of buckets, or None: 2 * max(1, length // chunk) for each input")
      .def_property_readonly("causal", [](H& h) { return h.flag; })
      .def_property(
          "calls", [](H& h) { return h.layer.calls(); },
          [](H& h, const py::object& c) {
            check_idle(h.busy, "LSHSelfAttention.calls", "layer");
            h.layer.set_calls(seed_arg(c, "LSHSelfAttention", "calls"));
          },
          "The forward count that, with the seed, draws the next forward's rotations")
      .def_property(
          "freeze_hash", [](H& h) { return h.layer.freeze_hash(); },
          [](H& h, const py::object& f) {
            check_idle(h.busy, "LSHSelfAttention.freeze_hash", "layer");
            h.layer.set_freeze_hash(check_setting(Limit::flag(), "LSHSelfAttention", "freeze_hash", f).cast<bool>());
          },
          "True: forward does not advance calls, so every forward hashes with the same rotations")
      .def(
          "forward",
          [](H& h, const py::handle& x, const py::object& causal) {
            LayerForward<T, H> call(h, "LSHSelfAttention.forward");
            const char* who = call.who();
            const bool c = causal.is_none() ? h.flag : check_setting(Limit::flag(), who, "causal", causal).cast<bool>();
            const Index d = h.layer.d_model();
            auto X = call.btc(x, "x", d, /*keep=*/true);  // backward reads x again
            const Index B = X.lead_shape[0], Tn = X.lead_shape[1];
            if (Tn > std::numeric_limits<std::int32_t>::max())
              throw py::value_error(concat(who, ": length ", Tn, " is beyond 2**31 - 1 positions"));
            const auto dbl = [](Index v) { return static_cast<double>(v); };
            call.check(concat("a batch of ", B, " sequences of length ", Tn),
                       lsh_attention_elements(dbl(X.rows), dbl(B), dbl(h.layer.n_heads()), dbl(Tn), dbl(d),
                                              dbl(h.layer.n_hashes()), dbl(h.layer.buckets_for(Tn)),
                                              dbl(std::min(h.layer.chunk(), Tn)), dbl(get_num_threads())));
            const Matrix<T>& y =
                call.run({B, Tn}, [&]() -> const Matrix<T>& { return h.layer.forward(X.map(), B, Tn, c); });
            return copy_out<T>(y.data(), {B, Tn, d});
          },
          py::arg("x"), py::arg("causal") = py::none(),
          "x (B, T, d_model) -> (B, T, d_model); causal None: the layer's setting")
      .def(
          "backward",
          [](H& h, const py::handle& dout) {
            LayerBackward<T, H> call(h, "LSHSelfAttention.backward");
            auto d = call.dout_btc(dout, h.layer.d_model());
            const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
            call.check_gradient(dx);
            call.check_parameter_gradients();
            return copy_out<T>(dx.data(), {h.lead[0], h.lead[1], h.layer.d_model()});
          },
          py::arg("dout"), "dout (B, T, d_model) -> dx (B, T, d_model); accumulates parameter gradients")
      .def(
          "rotations",
          [](H& h) {
            check_idle(h.busy, "LSHSelfAttention.rotations", "layer");
            if (!h.has_forward) throw std::runtime_error("LSHSelfAttention.rotations: call forward() first");
            const L& l = h.layer;
            return copy_out<T>(l.rotations().data(), {l.n_heads(), l.n_hashes(), l.d_k(), l.last_n_buckets() / 2});
          },
          "The random rotations of the last forward, (n_heads, n_hashes, d_k, n_buckets/2)")
      .def(
          "buckets",
          [](H& h) {
            check_idle(h.busy, "LSHSelfAttention.buckets", "layer");
            if (!h.has_forward) throw std::runtime_error("LSHSelfAttention.buckets: call forward() first");
            const L& l = h.layer;
            py::array_t<std::int64_t> out(std::vector<py::ssize_t>{l.batch(), l.n_heads(), l.n_hashes(), l.length()});
            std::copy(l.buckets().begin(), l.buckets().end(), out.mutable_data());
            return out;
          },
          "The buckets of the last forward, (B, n_heads, n_hashes, T)")
      .def("parameters", parameters_method<T, H>())
      .def("zero_grad", zero_grad_method<H>("LSHSelfAttention.zero_grad"));
}

}  // namespace

void bind_lsh_attention(py::module_& m) {
  bind_lsh<float>(m);
  bind_lsh<double>(m);
}

}  // namespace transformer::bindings
