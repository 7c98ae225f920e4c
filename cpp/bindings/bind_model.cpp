// Bindings of the Transformer model: forward/backward, train_step/evaluate with the GIL released,
// hierarchical parameters, optimiser state for checkpoints, attention weights for plots.
#include <exception>

#include "bindings.hpp"
#include "model_methods.hpp"
#include "transformer/attention/tiled_attention.hpp"
#include "transformer/inference/decoding.hpp"
#include "transformer/kernels/decode_kernels.hpp"
#include "transformer/models/transformer.hpp"

namespace transformer::bindings {

namespace {

template <typename T>
struct ModelHolder {
  explicit ModelHolder(const TransformerConfig& c) : model(c), decode(model) {}
  Transformer<T> model;
  DecodeWorkspace<T> decode;  // prepared weights, caches and buffers of decoding, kept between decodes
  // Whether the weights may have changed since the last decode checked them: a train_step, or a
  // NumPy view of them (parameters()) alive now or released since (it may have been written). When
  // neither, a decode skips the fingerprint and the finite check, two passes over every weight
  // that cost more than decoding one short sentence. (Writes through a raw address kept after its
  // view died are not seen: keep the view.)
  long views = 0;             // parameters() results (sets of views) alive
  bool weights_dirty = true;  // a train_step or a released view since the last checked decode
  bool weights_unchanged() const { return views == 0 && !weights_dirty; }
  // Whether the weights are known to be finite: true after a successful train_step (its update is
  // checked element by element) while no parameters() view has been alive since; train_step and
  // evaluate then skip their pass over every weight (Transformer::vouch_weights_finite).
  bool finite_known = false;
  std::uint64_t view_events = 0;  // parameters() view sets made or released, ever
  Index B = -1, Tt = 0;
  Index last_count = 0;
  bool busy = false;  // a call that released the GIL is running on this model
};

// A model is not thread-safe: its layers keep activations and scratch as members. Calls that
// release the GIL (or change what such a call reads) hold a ModelInUse (see InUse in bindings.hpp).
template <typename T>
class ModelInUse : public InUse {
 public:
  ModelInUse(ModelHolder<T>& h, const char* who) : InUse(h.busy, who, "Transformer") {}
};

template <typename T>
void check_model_idle(const ModelHolder<T>& h, const char* who) {
  check_idle(h.busy, who, "Transformer");
}

// The decoders' compute_type argument: a str naming one of the compute types.
ComputeType compute_type_arg(const py::handle& v, const char* who) {
  const std::string name = str_arg(v, who, "compute_type");
  try {
    return parse_compute_type(name);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(concat(who, ": ", e.what()));
  }
}

// The decoders' max_lengths argument: None (every sentence gets max_length), or one integer limit
// per sentence, an integer array (or sequence) of shape (B,); the values are checked by the core.
std::vector<Index> max_lengths_arg(const py::handle& v, Index B, const char* who) {
  if (v.is_none()) return {};
  py::array a = py::array::ensure(v);
  const char kind = a ? a.dtype().kind() : '?';
  if (!a || (kind != 'i' && kind != 'u'))
    throw py::value_error(concat(who, ": max_lengths must be None or an integer array of shape (", B,
                                 ",) (one output limit per sentence), got ",
                                 a ? describe(a) : std::string(py::str(py::type::of(v).attr("__name__")))));
  if (a.ndim() != 1 || a.shape(0) != B)
    throw py::value_error(
        concat(who, ": max_lengths must have shape (", B, ",) (one output limit per sentence), got ", describe(a)));
  auto ints = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (kind == 'u')  // a uint64 beyond int64's range must not wrap to a negative limit
    for (py::ssize_t i = 0; i < a.shape(0); ++i)
      if (py_less(py::int_(std::numeric_limits<std::int64_t>::max()), a[py::int_(i)]))
        throw py::value_error(concat(who, ": max_lengths[", i, "] is too large; each must be at most max_length"));
  return std::vector<Index>(ints.data(), ints.data() + ints.size());
}

// A list of token id sequences (None: none), each a sequence of ints.
std::vector<std::vector<std::int64_t>> id_rows_arg(const py::handle& v, const char* who, const char* name) {
  std::vector<std::vector<std::int64_t>> out;
  if (v.is_none()) return out;
  if (!py::isinstance<py::sequence>(v) || py::isinstance<py::str>(v))
    throw py::value_error(concat(who, ": ", name, " must be None or a list of token id lists"));
  for (const py::handle& row : py::reinterpret_borrow<py::sequence>(v)) {
    if (!py::isinstance<py::sequence>(row) || py::isinstance<py::str>(row))
      throw py::value_error(concat(who, ": ", name, " must be None or a list of token id lists"));
    std::vector<std::int64_t> ids;
    for (const py::handle& id : py::reinterpret_borrow<py::sequence>(row)) ids.push_back(int_arg(id, who, name));
    out.push_back(std::move(ids));
  }
  return out;
}

// The decoders' target_prefix argument: None, or one id list per sentence (B entries).
std::vector<std::vector<std::int64_t>> prefixes_arg(const py::handle& v, Index B, const char* who) {
  auto rows = id_rows_arg(v, who, "target_prefix");
  if (!v.is_none() && static_cast<Index>(rows.size()) != B)
    throw py::value_error(concat(who, ": target_prefix has ", rows.size(), " entries for ", B,
                                 " sentences; give one id list per sentence"));
  return rows;
}

// beam_search's constraints argument: None, or per sentence a list of id lists (B entries).
std::vector<std::vector<Phrase>> constraints_arg(const py::handle& v, Index B, const char* who) {
  std::vector<std::vector<Phrase>> out;
  if (v.is_none()) return out;
  if (!py::isinstance<py::sequence>(v) || py::isinstance<py::str>(v))
    throw py::value_error(concat(who, ": constraints must be None or, per sentence, a list of token id lists"));
  for (const py::handle& sentence : py::reinterpret_borrow<py::sequence>(v))
    out.push_back(id_rows_arg(sentence, who, "constraints"));
  if (static_cast<Index>(out.size()) != B)
    throw py::value_error(concat(who, ": constraints has ", out.size(), " entries for ", B,
                                 " sentences; give one list of constraints per sentence"));
  return out;
}

// One output's recorded cross-attention weights as an array of the model's dtype
// (layers, heads, tokens, source).
template <typename T>
py::array_t<T> attention_array(const CrossAttention& a) {
  std::vector<T> w(a.weights.begin(), a.weights.end());
  return copy_out<T>(w.data(), {a.layers, a.heads, a.tokens, a.source});
}

// Check the three token arrays of a training/evaluation batch.
struct Batch {
  py::array_t<std::int64_t, py::array::c_style> src, tgt_in, tgt_out;
};

Batch token_batch(const py::handle& src, const py::handle& tgt_in, const py::handle* tgt_out, const char* who) {
  Batch b;
  b.src = as_tokens(src, who, "src", 2);
  b.tgt_in = as_tokens(tgt_in, who, "tgt_in", 2);
  if (tgt_out != nullptr) {
    b.tgt_out = as_tokens(*tgt_out, who, "tgt_out", 2);
    if (b.tgt_out.shape(0) != b.tgt_in.shape(0) || b.tgt_out.shape(1) != b.tgt_in.shape(1))
      throw py::value_error(concat(who, ": tgt_out has shape ", describe(b.tgt_out), " but tgt_in has ",
                                   describe(b.tgt_in), "; they must match"));
  }
  if (b.src.shape(0) != b.tgt_in.shape(0))
    throw py::value_error(concat(who, ": src has batch size ", b.src.shape(0), " but tgt_in has ", b.tgt_in.shape(0),
                                 "; they must match"));
  return b;
}

ConstTokenMap tmap(const py::array_t<std::int64_t, py::array::c_style>& a) {
  return ConstTokenMap(a.data(), a.shape(0), a.shape(1));
}

// train_step (train) or evaluate: (loss, accuracy) over the non-padding targets, GIL released.
template <typename T>
py::tuple loss_step(ModelHolder<T>& h, const py::handle& src, const py::handle& tgt_in, const py::handle& tgt_out,
                    bool train) {
  const char* who = train ? "Transformer.train_step" : "Transformer.evaluate";
  Batch b = token_batch(src, tgt_in, &tgt_out, who);
  ModelInUse<T> in_use(h, who);
  if (train) h.weights_dirty = true;
  LossStats s;
  const std::uint64_t events = h.view_events;
  h.model.vouch_weights_finite(h.finite_known && h.views == 0);
  std::exception_ptr error;
  without_gil([&] {
    try {
      s = train ? h.model.train_step(tmap(b.src), tmap(b.tgt_in), tmap(b.tgt_out))
                : h.model.evaluate(tmap(b.src), tmap(b.tgt_in), tmap(b.tgt_out));
    } catch (...) {
      h.model.vouch_weights_finite(false);  // not consumed if the call failed before its check
      error = std::current_exception();
    }
  });
  if (error) {
    h.finite_known = false;  // a failed call proves nothing about the weights: the next one checks
    std::rethrow_exception(error);
  }
  // checked by this call, or vouched for, and no view made or released meanwhile (another thread)
  if (h.views == 0 && h.view_events == events) h.finite_known = true;
  h.B = -1;  // these passes compute only the rows the loss needs: no backward() may follow
  h.last_count = s.count;
  const double acc = s.count > 0 ? static_cast<double>(s.correct) / static_cast<double>(s.count) : 0.0;
  return py::make_tuple(s.loss, acc);
}

template <typename T>
void bind_transformer(py::module_& m) {
  using H = ModelHolder<T>;
  py::class_<H> cls(m, class_name<T>("Transformer").c_str(), "The encoder-decoder Transformer.");
  cls.def(py::init([](const TransformerConfig& c) { return new H(c); }), py::arg("config"),
          "A model of this architecture (checked again for the precision and the memory it needs).")
      .def(
          "forward",
          [](H& h, const py::handle& src, const py::handle& tgt_in, bool training) {
            Batch b = token_batch(src, tgt_in, nullptr, "Transformer.forward");
            ModelInUse<T> in_use(h, "Transformer.forward");
            h.B = -1;  // until this forward has succeeded
            const ConstMatrixMap<T> logits = without_gil(
                [&]() -> ConstMatrixMap<T> { return h.model.forward(tmap(b.src), tmap(b.tgt_in), training); });
            h.B = b.tgt_in.shape(0);
            h.Tt = b.tgt_in.shape(1);
            return copy_out<T>(logits.data(), {h.B, h.Tt, logits.cols()});
          },
          py::arg("src"), py::arg("tgt_in"), py::arg("training") = false,
          "src (B, S), tgt_in (B, T) int token ids -> logits (B, T, tgt_vocab_size)")
      .def(
          "backward",
          [](H& h, const py::handle& dlogits) {
            ModelInUse<T> in_use(h, "Transformer.backward");
            logits_backward<T>(h.model, dlogits, "Transformer.backward", h.B, h.Tt, h.model.config().tgt_vocab_size);
          },
          py::arg("dlogits"), "Accumulate every parameter gradient from d loss / d logits (B, T, V).");
  for (const bool train : {true, false})
    cls.def(
        train ? "train_step" : "evaluate",
        [train](H& h, const py::handle& src, const py::handle& tgt_in, const py::handle& tgt_out) {
          return loss_step(h, src, tgt_in, tgt_out, train);
        },
        py::arg("src"), py::arg("tgt_in"), py::arg("tgt_out"),
        train ? "Forward, masked loss, backward and one Adam step; returns (loss, accuracy)."
              : "Forward (inference mode) and masked loss/accuracy, no update; returns (loss, accuracy).");
  cls
      // data parallelism: train_step in two halves around a sum of gradient_buffer() over processes
      .def(
          "compute_gradients",
          [](H& h, const py::handle& src, const py::handle& tgt_in, const py::handle& tgt_out,
             const py::object& grad_scale, bool accumulate) {
            const char* who = "Transformer.compute_gradients";
            const double scale = float_arg(grad_scale, who, "grad_scale", limits::finite());
            Batch b = token_batch(src, tgt_in, &tgt_out, who);
            ModelInUse<T> in_use(h, who);
            const LossStats s = without_gil([&] {
              return h.model.compute_gradients(tmap(b.src), tmap(b.tgt_in), tmap(b.tgt_out), scale, accumulate);
            });
            h.B = -1;
            h.last_count = s.count;
            const double acc = s.count > 0 ? static_cast<double>(s.correct) / static_cast<double>(s.count) : 0.0;
            return py::make_tuple(s.loss, acc);
          },
          py::arg("src"), py::arg("tgt_in"), py::arg("tgt_out"), py::arg("grad_scale") = 1.0,
          py::arg("accumulate") = false,
          "Forward, masked loss and backward; the gradients times grad_scale go to gradient_buffer() "
          "(the layers' own are zeroed); no update. With accumulate they are added to the gradients "
          "not yet applied there (several batches, one update). Returns (loss, accuracy).")
      .def(
          "gradient_buffer",
          [](py::object self) {
            H& h = self.cast<H&>();
            check_model_idle(h, "Transformer.gradient_buffer");
            T* data = h.model.flat_gradients();
            const Index n = h.model.flat_parameter_count() + Transformer<T>::kFlatSpareSlots;
            return py::array_t<T>({static_cast<py::ssize_t>(n)}, {static_cast<py::ssize_t>(sizeof(T))}, data, self);
          },
          "The contiguous gradient buffer (a view, not a copy): every parameter's gradient in parameters() "
          "order, then 8 spare values for the caller to sum along with them.")
      .def(
          "zero_gradient_buffer",
          [](H& h) {
            ModelInUse<T> in_use(h, "Transformer.zero_gradient_buffer");
            h.model.zero_flat_gradients();
          },
          "Set gradient_buffer() to 0 and make it ready for apply_gradients (a process without a share "
          "of the batch).")
      .def(
          "apply_gradients",
          [](H& h, const py::object& grad_scale) {
            const char* who = "Transformer.apply_gradients";
            const double scale = float_arg(grad_scale, who, "grad_scale", limits::finite());
            ModelInUse<T> in_use(h, who);
            h.finite_known = false;
            without_gil([&] { h.model.apply_gradients(scale); });
          },
          py::arg("grad_scale") = 1.0,
          "Norm, clipping and one Adam step with gradient_buffer() * grad_scale as the gradients.");
  def_set_dropout_seed(cls, "Transformer");
  cls.def(
         "weights_fingerprint",
         [](H& h) {
           check_model_idle(h, "Transformer.weights_fingerprint");
           std::uint64_t f = 0;
           for (const auto& p : h.model.parameters())
             f = fingerprint(p.value, static_cast<std::size_t>(p.size()) * sizeof(T), f);
           return f;
         },
         "64-bit fingerprint of every weight's bytes (equal weights, equal fingerprints).")
      .def_property_readonly(
          "last_token_count", [](H& h) { return h.last_count; },
          "Non-padding target tokens in the last train_step/evaluate batch.")
      .def("parameters", [](py::object self) {
        // the views' base: a capsule that keeps the model alive and, when the last view of
        // this set goes, marks the weights as possibly written (see ModelHolder::views)
        H& h = self.cast<H&>();
        struct Guard {
          PyObject* owner;
          H* holder;
        };
        auto* g = new Guard{self.ptr(), &h};
        Py_INCREF(self.ptr());
        ++h.views;
        ++h.view_events;
        h.finite_known = false;  // the views may be written
        py::capsule base(g, [](void* p) {
          auto* guard = static_cast<Guard*>(p);
          --guard->holder->views;
          guard->holder->weights_dirty = true;
          guard->holder->finite_known = false;
          ++guard->holder->view_events;
          Py_DECREF(guard->owner);
          delete guard;
        });
        return parameters_dict<T>(h.model.parameters(), base);
      });
  def_optimizer_methods<T>(cls, "Transformer",
                           "Adam, the schedule, clipping and label smoothing of the following train_steps.");
  def_learning_rate(cls, "Transformer");
  def_nonfinite_parameters(
      cls, "Transformer",
      "Names of the parameters (and, with optimizer_state, Adam moments '<param>.m'/'.v') holding NaN or inf.");
  def_output_chunks(cls, "Transformer");
  cls.def_property(
      "attention_impl", [](H& h) { return std::string(attention_impl_name(h.model.attention_impl())); },
      [](H& h, const py::object& v) {
        check_model_idle(h, "Transformer.attention_impl");
        h.model.set_attention_impl(impl_arg(v, "Transformer"));
      },
      "The kernel of every softmax attention's training forward and backward: 'auto' (the default: tiled "
      "from the length where it pays, memory linear in the length), 'tiled', or 'plain' (keeps the weights "
      "attention_weights() returns at every length). Decoding does not use it.");
  cls.def(
         "attention_weights",
         [](H& h) {
           check_model_idle(h, "Transformer.attention_weights");
           if (h.B < 0) throw std::runtime_error("Transformer.attention_weights: call forward() first");
           py::dict out;
           auto add = [&](const std::string& name, MultiHeadAttention<T>& a) {
             if (a.last_forward_tiled())
               throw std::runtime_error(
                   concat("Transformer.attention_weights: the last forward ran the tiled kernel in ", name, " (",
                          a.key_length(), " keys; attention_impl '", attention_impl_name(h.model.attention_impl()),
                          "'), which keeps no attention weights; set attention_impl = 'plain' before the forward to "
                          "keep them"));
             out[py::str(name)] =
                 copy_out<T>(a.attention_weights().data(), {a.batch(), a.n_heads(), a.query_length(), a.key_length()});
           };
           auto& enc = h.model.encoder();
           for (size_t i = 0; i < enc.layers_.size(); ++i)
             if (auto* self = enc.layers_[i]->softmax_self_attention())  // linear attention keeps no weights
               add("encoder.layers." + std::to_string(i) + ".self_attention", *self);
           auto& dec = h.model.decoder();
           for (size_t i = 0; i < dec.layers_.size(); ++i) {
             if (auto* self = dec.layers_[i]->softmax_self_attention())  // linear attention keeps no weights
               add("decoder.layers." + std::to_string(i) + ".self_attention", *self);
             add("decoder.layers." + std::to_string(i) + ".cross_attention", dec.layers_[i]->cross_attention_);
           }
           return out;
         },
         "The last forward's attention weights: name -> (B, heads, T_q, T_k); see attention_impl.")
      .def(
          "greedy_decode",
          [](H& h, const py::handle& src, const py::object& start_id, const py::object& end_id,
             const py::object& max_length, const py::object& compute_type, const py::object& max_lengths,
             bool return_attention, const py::object& target_prefix, const py::object& sampling_topk,
             const py::object& sampling_topp, const py::object& sampling_temperature,
             const py::object& seed) -> py::object {
            const char* who = "greedy_decode";
            const ComputeType compute = compute_type_arg(compute_type, who);
            auto s = as_tokens(src, "Transformer.greedy_decode", "src", 2);
            const std::int64_t start = int_arg(start_id, who, "start_id"), end = int_arg(end_id, who, "end_id");
            const Index steps = int_arg(max_length, who, "max_length");
            DecodeExtras extras{max_lengths_arg(max_lengths, s.shape(0), who), return_attention, {}};
            extras.prefixes = prefixes_arg(target_prefix, s.shape(0), who);
            extras.sampling.top_k = int_arg(sampling_topk, who, "sampling_topk");
            extras.sampling.top_p = float_arg(sampling_topp, who, "sampling_topp", limits::non_negative());
            extras.sampling.temperature =
                float_arg(sampling_temperature, who, "sampling_temperature", limits::non_negative());
            const std::int64_t seed_value = int_arg(seed, who, "seed");
            if (seed_value < 0) throw py::value_error(concat(who, ": seed must be an integer >= 0, got ", seed_value));
            extras.sampling.seed = static_cast<std::uint64_t>(seed_value);
            ModelInUse<T> in_use(h, "Transformer.greedy_decode");
            TokenMatrix out;
            // decoding runs the layers' inference methods: the last forward() stays valid for
            // backward() and attention_weights()
            const bool unchanged = h.weights_unchanged();
            without_gil([&] {
              out = greedy_decode<T>(h.model, tmap(s), start, end, steps, &h.decode, compute, unchanged, &extras);
            });
            h.weights_dirty = false;  // checked (or unchanged) and finite
            // drop trailing columns that are padding in every row
            Index L = out.cols();
            while (L > 0 && (out.col(L - 1).array() == 0).all()) --L;
            py::array_t<std::int64_t> r({out.rows(), L});
            for (Index i = 0; i < out.rows(); ++i)
              std::copy(out.data() + i * out.cols(), out.data() + i * out.cols() + L, r.mutable_data() + i * L);
            if (!return_attention) return std::move(r);
            py::list attention;
            for (const CrossAttention& a : extras.attention) attention.append(attention_array<T>(a));
            return py::make_tuple(r, attention);
          },
          py::arg("src"), py::arg("start_id"), py::arg("end_id"), py::arg("max_length"),
          py::arg("compute_type") = "float32", py::arg("max_lengths") = py::none(), py::arg("return_attention") = false,
          py::arg("target_prefix") = py::none(), py::arg("sampling_topk") = 1, py::arg("sampling_topp") = 1.0,
          py::arg("sampling_temperature") = 1.0, py::arg("seed") = 0,
          "KV-cached greedy decoding: (B, L) ids after the start token, up to and including end_id, then 0. "
          "max_lengths: each sentence's own limit (int array (B,), each in [1, max_length]); return_attention: "
          "also each sentence's cross-attention weights (layers, heads, its tokens, its source tokens). "
          "target_prefix: per sentence, ids each output starts with. sampling_topk > 1: draw each token among "
          "the k most likely (then the fewest whose probability reaches sampling_topp), logits divided by "
          "sampling_temperature; sentence b's draws depend only on seed and b.")
      .def(
          "beam_search",
          [](H& h, const py::handle& src, const py::object& start_id, const py::object& end_id,
             const py::object& max_length, const py::object& beam_size, const py::object& length_penalty,
             const py::object& n_best, const py::object& compute_type, const py::object& max_lengths,
             bool return_attention, const py::object& target_prefix, const py::object& constraints,
             const std::string& length_penalty_mode, const std::string& early_stopping, bool force_end) {
            const char* who = "beam_search";
            const ComputeType compute = compute_type_arg(compute_type, who);
            auto s = as_tokens(src, "Transformer.beam_search", "src", 2);
            const std::int64_t start = int_arg(start_id, who, "start_id"), end = int_arg(end_id, who, "end_id");
            const Index steps = int_arg(max_length, who, "max_length"), beam = int_arg(beam_size, who, "beam_size");
            const Index best = int_arg(n_best, who, "n_best");
            const double alpha = float_arg(length_penalty, who, "length_penalty", limits::non_negative());
            DecodeExtras extras{max_lengths_arg(max_lengths, s.shape(0), who), return_attention, {}};
            extras.prefixes = prefixes_arg(target_prefix, s.shape(0), who);
            extras.constraints = constraints_arg(constraints, s.shape(0), who);
            if (length_penalty_mode != "gnmt" && length_penalty_mode != "hf")
              throw py::value_error(
                  concat(who, ": length_penalty_mode must be 'gnmt' or 'hf', got '", length_penalty_mode, "'"));
            if (early_stopping != "heuristic" && early_stopping != "first" && early_stopping != "never")
              throw py::value_error(
                  concat(who, ": early_stopping must be 'heuristic', 'first' or 'never', got '", early_stopping, "'"));
            if (length_penalty_mode == "gnmt" && early_stopping != "heuristic")
              throw py::value_error(
                  concat(who, ": early_stopping '", early_stopping, "' is a rule of length_penalty_mode 'hf'"));
            extras.length_rule = length_penalty_mode == "hf" ? LengthRule::Hf : LengthRule::Gnmt;
            extras.early_stopping = early_stopping == "first"   ? EarlyStopping::First
                                    : early_stopping == "never" ? EarlyStopping::Never
                                                                : EarlyStopping::Heuristic;
            extras.force_end = force_end;
            const bool constrained = !constraints.is_none();
            ModelInUse<T> in_use(h, "Transformer.beam_search");
            std::vector<std::vector<BeamHypothesis>> res;
            const bool unchanged = h.weights_unchanged();  // and the last forward() stays valid
            without_gil([&] {
              res = beam_search<T>(h.model, tmap(s), start, end, steps, beam, alpha, best, &h.decode, compute,
                                   unchanged, &extras);
            });
            h.weights_dirty = false;
            py::list out;
            for (auto& sent : res) {
              py::list hyps;
              for (auto& hyp : sent) {
                py::array_t<std::int64_t> toks(static_cast<py::ssize_t>(hyp.tokens.size()));
                std::copy(hyp.tokens.begin(), hyp.tokens.end(), toks.mutable_data());
                py::list fields;
                for (py::object f : {py::object(toks), py::object(py::float_(hyp.score)),
                                     py::object(py::float_(hyp.log_prob)), py::object(py::bool_(hyp.finished))})
                  fields.append(f);
                if (return_attention) fields.append(attention_array<T>(hyp.attention));
                if (constrained) fields.append(py::int_(hyp.constraints_missing));
                hyps.append(py::tuple(fields));
              }
              out.append(hyps);
            }
            return out;
          },
          py::arg("src"), py::arg("start_id"), py::arg("end_id"), py::arg("max_length"), py::arg("beam_size") = 4,
          py::arg("length_penalty") = 0.6, py::arg("n_best") = 1, py::arg("compute_type") = "float32",
          py::arg("max_lengths") = py::none(), py::arg("return_attention") = false,
          py::arg("target_prefix") = py::none(), py::arg("constraints") = py::none(),
          py::arg("length_penalty_mode") = "gnmt", py::arg("early_stopping") = "heuristic",
          py::arg("force_end") = false,
          "KV-cached beam search: per sentence, n_best (tokens, score, log_prob, finished) best first. "
          "length_penalty_mode 'gnmt': score log_prob / ((5 + len) / 6) ** length_penalty; 'hf': Hugging "
          "Face generate's rules, log_prob / len ** length_penalty, early_stopping 'heuristic' (its False), "
          "'first' (True) or 'never'. force_end: at the limit the end token, its log-probability not counted. "
          "target_prefix: per sentence, ids each output starts with; constraints: per sentence, id lists "
          "that must each appear in every output (fewer than beam_size), each tuple then ending with the "
          "number of constraints the hypothesis misses (above 0 only when cut at its limit). "
          "max_lengths: each sentence's own limit (int array (B,), each in [1, max_length]); return_attention: "
          "each hypothesis also carries its cross-attention weights (layers, heads, its tokens, its source tokens).")
      .def("config", [](H& h) { return h.model.config(); }, "The architecture.");
  if constexpr (std::is_same_v<T, float>)
    m.def(
        "sampling_distribution",
        [](const py::array_t<double, py::array::c_style | py::array::forcecast>& logits, Index top_k, double top_p,
           double temperature) {
          const char* who = "sampling_distribution";
          if (logits.ndim() != 1 || logits.shape(0) < 2)
            throw py::value_error(concat(who, ": logits must be a 1-D array of at least 2 values"));
          SamplingOptions s{top_k, top_p, temperature, 0};
          check_sampling(s, who);
          std::vector<Index> ids;
          std::vector<double> probs;
          sampling_distribution(logits.data(), logits.shape(0), s, ids, probs);
          py::array_t<double> out(logits.shape(0));
          std::fill(out.mutable_data(), out.mutable_data() + out.size(), 0.0);
          for (size_t i = 0; i < ids.size(); ++i) out.mutable_data()[ids[i]] = probs[i];
          return out;
        },
        py::arg("logits"), py::arg("top_k"), py::arg("top_p") = 1.0, py::arg("temperature") = 1.0,
        "The distribution greedy decoding samples from for one row of logits (padding id 0 never): "
        "temperature, then top-k, then top-p, renormalised.");
}

}  // namespace

void bind_model(py::module_& m) {
  for_each_scalar([&](auto t) { bind_transformer<decltype(t)>(m); });
}

}  // namespace transformer::bindings
