// Bindings of Reformer's LSH attention, float32 and float64: the kernel over (B, H, T, d) heads as
// LSHAttention, and the layer with its projections as LSHSelfAttention.
//
// forward and backward are a LayerForward / LayerBackward (bindings.hpp): one call at a time,
// finite inputs (x owned and kept: backward reads it again), the memory of the buffers and finite
// weights before the work, a finite output and gradients after it.
#include "bindings.hpp"
#include "transformer/attention/lsh_attention.hpp"
#include "transformer/core/runtime.hpp"

namespace transformer::bindings {

namespace {

// The buckets of a last forward (B, H, n_hashes, T) as a NumPy int64 array.
py::array_t<std::int64_t> buckets_array(const std::vector<std::int32_t>& buckets, std::vector<py::ssize_t> shape) {
  py::array_t<std::int64_t> out(shape);
  std::copy(buckets.begin(), buckets.end(), out.mutable_data());
  return out;
}

// The hashing settings LSHAttention and LSHSelfAttention share: the chunk, n_hashes and n_buckets
// properties, and the forward count `calls` (`name` names the class in messages).
template <typename H>
void def_hashing_properties(py::class_<H>& cls) {
  cls.def_property_readonly("chunk", [](H& h) { return h.layer.chunk(); });
  cls.def_property_readonly("n_hashes", [](H& h) { return h.layer.n_hashes(); });
  cls.def_property_readonly(
      "n_buckets",
      [](H& h) -> py::object { return h.layer.n_buckets() ? py::object(py::int_(h.layer.n_buckets())) : py::none(); },
      "The number of buckets, or None: 2 * max(1, length // chunk) for each input");
}
template <typename H>
void def_calls(py::class_<H>& cls, const std::string& name) {
  cls.def_property(
      "calls", [](H& h) { return h.layer.calls(); },
      [name, who = name + ".calls"](H& h, const py::object& c) {
        check_idle(h.busy, who.c_str(), "layer");
        h.layer.set_calls(seed_arg(c, name.c_str(), "calls"));
      },
      "The forward count that, with the seed, draws the next forward's rotations");
}

// n_buckets of the constructors: None (0: chosen for each input) or an even count.
Index n_buckets_arg(const py::object& n_buckets, const char* who) {
  return n_buckets.is_none() ? 0 : int_arg(n_buckets, who, "n_buckets", 2, Index(1) << 30);
}

// buckets() of LSHAttention and LSHSelfAttention (`name`): those of the last forward as
// (B, heads(layer), n_hashes, T), documented by `doc`.
template <typename H, typename Heads>
void def_buckets(py::class_<H>& cls, const std::string& name, Heads heads, const char* doc) {
  cls.def(
      "buckets",
      [who = name + ".buckets", heads](H& h) {
        check_forward_done(h, who.c_str());
        const auto& l = h.layer;
        return buckets_array(l.buckets(), {l.batch(), heads(l), l.n_hashes(), l.length()});
      },
      doc);
}

// The kernel over (B, H, T, d) heads, with the members LayerForward and LayerBackward use and the
// buffers of one forward and backward.
template <typename T>
struct LSHHeads {
  LSHHeads(Index chunk, Index n_hashes, Index n_buckets, std::uint64_t seed)
      : layer(chunk, n_hashes, n_buckets, seed) {}
  LSHAttention<T> layer;
  std::vector<py::object> keep;  // qk and v (owned copies) of the last forward
  std::vector<Index> lead;       // B, H, T, d of the last forward
  bool has_forward = false;
  bool busy = false;
  Matrix<T> out, dq, dv;  // (B*H*T, d)
};

template <typename T>
void bind_lsh_heads(py::module_& m) {
  using S = LSHHeads<T>;
  using L = LSHAttention<T>;
  py::class_<S> cls(m, class_name<T>("LSHAttention").c_str(),
                    R"doc(Reformer's LSH attention over given heads: the kernel of :class:`LSHSelfAttention` without its
query, value and output projections, as :class:`TiledAttention` is for softmax attention.

``forward(qk, v, causal=False)``: ``qk`` (B, H, T, d) are the shared queries and keys (the keys
are their unit vectors), ``v`` (B, H, T, d) the values; returns the output (B, H, T, d).
``backward(dout)`` returns ``(dqk, dv)``. Hashing, chunks, rounds and masks are those of
:class:`LSHSelfAttention`; with the same ``seed`` and ``calls`` it draws the same rotations, so
its heads equal the layer's on the layer's projections. ``buckets()``: ``(B, H, n_hashes, T)``
of the last forward.)doc");
  cls.def(py::init([](const py::object& chunk, const py::object& n_hashes, const py::object& n_buckets,
                      const py::object& seed) {
            const char* who = "LSHAttention";
            const Index nb = n_buckets_arg(n_buckets, who);
            return new S(int_arg(chunk, who, "chunk", 1), int_arg(n_hashes, who, "n_hashes", 1, L::kMaxHashes), nb,
                         seed_arg(seed, who));
          }),
          py::arg("chunk") = 64, py::arg("n_hashes") = 4, py::arg("n_buckets") = py::none(), py::arg("seed") = 0);
  def_hashing_properties(cls);
  def_calls(cls, "LSHAttention");
  cls.def(
         "forward",
         [](S& s, const py::handle& qk, const py::handle& v, const py::object& causal) {
           LayerForward<T, S> call(s, "LSHAttention.forward");
           const char* who = call.who();
           const bool c = check_setting(Limit::flag(), who, "causal", causal).cast<bool>();
           auto Q = as_floats<T>(qk, who, "qk", 4), V = as_floats<T>(v, who, "v", 4);
           const Index B = Q.shape(0), H = Q.shape(1), Tn = Q.shape(2), dk = Q.shape(3);
           if (V.shape(0) != B || V.shape(1) != H || V.shape(2) != Tn || V.shape(3) != dk || B == 0 || H == 0 ||
               Tn == 0 || dk == 0)
             throw py::value_error(concat(who, ": expected non-empty qk and v of one shape (B, H, T, d); got qk ",
                                          describe(Q), ", v ", describe(V)));
           if (Tn > std::numeric_limits<std::int32_t>::max())
             throw py::value_error(concat(who, ": length ", Tn, " is beyond 2**31 - 1 positions"));
           call.finite_kept(Q, "qk");  // backward reads both again
           call.finite_kept(V, "v");
           const auto dbl = [](Index x) { return static_cast<double>(x); };
           const double heads = dbl(B * H * Tn * dk);  // the output and the two gradients
           call.check_memory_bytes(concat(B, "x", H, " heads of length ", Tn),
                                   (lsh_kernel_elements(dbl(B), dbl(H), dbl(Tn), dbl(dk), dbl(s.layer.n_hashes()),
                                                        dbl(s.layer.buckets_for(Tn)),
                                                        dbl(std::min(s.layer.chunk(), Tn)), dbl(get_num_threads())) +
                                    3 * heads) *
                                       sizeof(T));
           const Matrix<T>& out = call.run({B, H, Tn, dk}, [&]() -> const Matrix<T>& {
             s.out.resize(B * H * Tn, dk);
             const HeadStrides heads_strides{H * Tn * dk, Tn * dk, dk};
             s.layer.forward(Q.data(), heads_strides, V.data(), heads_strides, B, H, Tn, dk, c, s.out.data(),
                             heads_strides);
             return s.out;
           });
           return copy_out<T>(out.data(), {B, H, Tn, dk});
         },
         py::arg("qk"), py::arg("v"), py::arg("causal") = false,
         "qk (B, H, T, d): the shared queries and keys (the keys are their unit vectors), v (B, H, T, d) -> "
         "(B, H, T, d)")
      .def(
          "backward",
          [](S& s, const py::handle& dout) {
            LayerBackward<T, S> call(s, "LSHAttention.backward");
            const Index B = s.lead[0], H = s.lead[1], Tn = s.lead[2], dk = s.lead[3];
            auto dO = call.dout_array(dout, {B, H, Tn, dk});
            call.run([&] {
              s.dq.resize(B * H * Tn, dk);
              s.dv.resize(B * H * Tn, dk);
              const HeadStrides heads_strides{H * Tn * dk, Tn * dk, dk};
              s.layer.backward(dO.data(), heads_strides, s.dq.data(), heads_strides, s.dv.data(), heads_strides);
            });
            call.check_gradient(s.dq, "gradient of qk");
            call.check_gradient(s.dv, "gradient of v");
            return py::make_tuple(copy_out<T>(s.dq.data(), {B, H, Tn, dk}), copy_out<T>(s.dv.data(), {B, H, Tn, dk}));
          },
          py::arg("dout"), "dout (B, H, T, d) -> (dqk, dv)");
  def_buckets(
      cls, "LSHAttention", [](const L& l) { return l.heads(); },
      "The buckets of the last forward, (B, H, n_hashes, T)");
  def_no_parameters(cls);
}

template <typename T>
void bind_lsh(py::module_& m) {
  using L = LSHSelfAttention<T>;
  using H = Holder<L>;  // H::flag: the layer's causal setting, used when forward is not told
  py::class_<H> cls(m, class_name<T>("LSHSelfAttention").c_str(),
                    R"doc(Reformer's LSH self-attention (Kitaev et al. 2020): O(T) memory instead of O(T^2).

Shared QK: the query projection gives the queries and the keys are the same vectors normalised
to unit length; a value and an output projection as in :class:`MultiHeadAttention`
(parameters ``query|value|output.weight|bias``). Per head and hash round, positions are
hashed with a random rotation ``R`` (``h(x) = argmax([xR; -xR])``), sorted by (bucket,
position) and cut into chunks of ``chunk`` positions (the last may be shorter); each chunk
attends to itself and to the chunk before. A position attends to itself only when it has no
other key in any round (its output is then its value); ``causal`` blocks later positions.
``n_hashes`` rounds are combined as one softmax over the union of their windows, each key
counted once (Reformer, App. A). Scores are scaled by ``1/sqrt(d_k)``.

``n_buckets=None`` chooses ``2 * max(1, length // chunk)`` for each input; a given
``n_buckets`` must be even. The rotations of a forward are drawn from ``seed`` and the forward
count ``.calls``, which each forward advances unless ``.freeze_hash`` is True; ``backward``
uses the buckets of the last forward. ``rotations()`` and ``buckets()`` return those of the
last forward, ``(n_heads, n_hashes, d_k, n_buckets/2)`` and ``(B, n_heads, n_hashes, T)``.

``forward(x, causal=None)`` with ``x`` (B, T, d_model); ``causal=None`` uses the layer's setting.)doc");
  cls.def(py::init([](const py::object& d_model, const py::object& n_heads, const py::object& chunk,
                      const py::object& n_hashes, const py::object& n_buckets, const py::object& causal,
                      const py::object& seed) {
            const char* who = "LSHSelfAttention";
            const Index nb = n_buckets_arg(n_buckets, who);
            auto* h = new H(int_arg(d_model, who, "d_model", 1), int_arg(n_heads, who, "n_heads", 1),
                            int_arg(chunk, who, "chunk", 1), int_arg(n_hashes, who, "n_hashes", 1, L::kMaxHashes), nb,
                            seed_arg(seed, who));
            h->flag = check_setting(Limit::flag(), who, "causal", causal).cast<bool>();
            return h;
          }),
          py::arg("d_model"), py::arg("n_heads"), py::arg("chunk") = 64, py::arg("n_hashes") = 4,
          py::arg("n_buckets") = py::none(), py::arg("causal") = false, py::arg("seed") = 0);
  def_head_properties(cls);
  def_hashing_properties(cls);
  cls.def_property_readonly("causal", [](H& h) { return h.flag; });
  def_calls(cls, "LSHSelfAttention");
  cls.def_property(
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
          "x (B, T, d_model) -> (B, T, d_model); causal None: the layer's setting");
  def_d_model_backward<T>(cls, "LSHSelfAttention",
                          "dout (B, T, d_model) -> dx (B, T, d_model); accumulates parameter gradients");
  cls.def(
      "rotations",
      [](H& h) {
        check_forward_done(h, "LSHSelfAttention.rotations");
        const L& l = h.layer;
        return copy_out<T>(l.rotations().data(), {l.n_heads(), l.n_hashes(), l.d_k(), l.last_n_buckets() / 2});
      },
      "The random rotations of the last forward, (n_heads, n_hashes, d_k, n_buckets/2)");
  def_buckets(
      cls, "LSHSelfAttention", [](const L& l) { return l.n_heads(); },
      "The buckets of the last forward, (B, n_heads, n_hashes, T)");
  def_parameters<T>(cls, "LSHSelfAttention");
}

void bind_lsh_attention(py::module_& m) {
  for_each_scalar([&](auto t) { bind_lsh_heads<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_lsh<decltype(t)>(m); });
}

const AttentionKindBinding registered("lsh", bind_lsh_attention);

}  // namespace

}  // namespace transformer::bindings
