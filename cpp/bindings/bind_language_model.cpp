// Bindings of the decoder-only language model: forward/backward, train_step/evaluate_loss with the
// GIL released, hierarchical parameters, optimiser state for checkpoints, and the key/value-cached
// generation step (the sampling is Python's, over these logits).
#include <exception>

#include "bindings.hpp"
#include "model_methods.hpp"
#include "transformer/attention/kinds.hpp"
#include "transformer/models/language_model.hpp"

namespace transformer::bindings {

namespace {

template <typename T>
struct LanguageModelHolder {
  explicit LanguageModelHolder(const LanguageModelConfig& c) : model(c) {}
  LanguageModel<T> model;
  LanguageModelState<T> state;  // the generation caches, kept between steps
  Index B = -1, T_len = 0;      // shape of the last forward() that backward() may follow
  bool busy = false;            // a call that released the GIL is running on this model
};

// A model keeps activations and scratch as members: one call at a time (InUse, bindings.hpp).
template <typename T>
class LmInUse : public InUse {
 public:
  LmInUse(LanguageModelHolder<T>& h, const char* who) : InUse(h.busy, who, "LanguageModel") {}
};

ConstTokenMap tmap(const py::array_t<std::int64_t, py::array::c_style>& a) {
  return ConstTokenMap(a.data(), a.shape(0), a.shape(1));
}

// train_step, compute_gradients and evaluate_loss: tokens (B, T+1) -> (loss, labels scored) by
// `step` with the GIL released; no backward() may follow.
template <typename T, typename Step>
auto token_loss(LanguageModelHolder<T>& h, const py::handle& tokens, const char* who, Step&& step) {
  auto t = as_tokens(tokens, who, "tokens", 2);
  LmInUse<T> in_use(h, who);
  h.B = -1;
  const LossStats s = without_gil([&] { return step(tmap(t)); });
  return py::make_tuple(s.loss, s.count);
}

template <typename T>
void bind_language_model_class(py::module_& m) {
  using H = LanguageModelHolder<T>;
  py::class_<H> cls(m, class_name<T>("LanguageModel").c_str(), "The decoder-only (GPT-style) language model.");
  cls.def(py::init([](const LanguageModelConfig& c) { return new H(c); }), py::arg("config"),
          "A model of this architecture (checked again for the memory it needs).")
      .def(
          "forward",
          [](H& h, const py::handle& tokens, bool training) {
            auto t = as_tokens(tokens, "LanguageModel.forward", "tokens", 2);
            LmInUse<T> in_use(h, "LanguageModel.forward");
            h.B = -1;
            const Matrix<T>& logits =
                without_gil([&]() -> const Matrix<T>& { return h.model.forward(tmap(t), training); });
            h.B = t.shape(0);
            h.T_len = t.shape(1);
            return copy_out<T>(logits.data(), {h.B, h.T_len, logits.cols()});
          },
          py::arg("tokens"), py::arg("training") = false,
          "tokens (B, T) int ids -> logits (B, T, vocab_size): position t predicts the token after it.")
      .def(
          "backward",
          [](H& h, const py::handle& dlogits) {
            LmInUse<T> in_use(h, "LanguageModel.backward");
            logits_backward<T>(h.model, dlogits, "LanguageModel.backward", h.B, h.T_len, h.model.config().vocab_size);
          },
          py::arg("dlogits"), "Accumulate every parameter gradient from d loss / d logits (B, T, V).")
      .def(
          "train_step",
          [](H& h, const py::handle& tokens) {
            return token_loss(h, tokens, "LanguageModel.train_step",
                              [&](ConstTokenMap t) { return h.model.train_step(t); });
          },
          py::arg("tokens"),
          "tokens (B, T+1): inputs tokens[:, :-1], labels tokens[:, 1:]. Forward, mean cross-entropy, backward "
          "and one Adam step; returns (loss, labels scored).")
      .def(
          "check_batch", [](H& h, Index batch, Index length) { h.model.check_batch(batch, length, "check_batch"); },
          py::arg("batch"), py::arg("length"),
          "Raise MemoryError when a training step on (batch, length) tokens (length = T+1, as train_step takes "
          "them) needs more memory than there is: checked before the batch is built.")
      .def(
          "compute_gradients",
          [](H& h, const py::handle& tokens, bool training) {
            return token_loss(h, tokens, "LanguageModel.compute_gradients",
                              [&](ConstTokenMap t) { return h.model.compute_gradients(t, training); });
          },
          py::arg("tokens"), py::arg("training") = true,
          "train_step's loss and gradients (in parameters()' .grad) without the update; returns (loss, count).")
      .def(
          "apply_gradients",
          [](H& h) {
            LmInUse<T> in_use(h, "LanguageModel.apply_gradients");
            without_gil([&] { h.model.apply_gradients(); });
          },
          "train_step's update from the gradients in parameters()' .grad (compute_gradients', or a sum of "
          "several batches' written there): clipping, one Adam step, the gradients zeroed.")
      .def(
          "evaluate_loss",
          [](H& h, const py::handle& tokens) {
            return token_loss(h, tokens, "LanguageModel.evaluate_loss",
                              [&](ConstTokenMap t) { return h.model.evaluate_loss(t); });
          },
          py::arg("tokens"),
          "tokens (B, T+1): mean cross-entropy (nats) of tokens[:, 1:] given the tokens before, in inference "
          "mode; returns (loss, labels scored).")
      .def_property_readonly(
          "has_cached_step", [](H& h) { return h.model.has_cached_step(); },
          "Whether generation can run one step per token (softmax and relative attention: a key/value cache; "
          "linear: its RNN state; LSH attention and reversible blocks have none).")
      .def(
          "start_generation",
          [](H& h, const py::object& rows, const py::object& capacity) {
            const char* who = "LanguageModel.start_generation";
            const Index r = int_arg(rows, who, "rows", 1, 1 << 20);
            const Index c = int_arg(capacity, who, "capacity", 1);
            LmInUse<T> in_use(h, who);
            without_gil([&] { h.model.infer_start(r, c, h.state); });
          },
          py::arg("rows"), py::arg("capacity"),
          "Empty generation state (key/value caches, or linear attention's RNN state) for `rows` sequences of up to "
          "`capacity` positions.")
      .def(
          "generation_step",
          [](H& h, const py::handle& tokens) {
            const char* who = "LanguageModel.generation_step";
            auto t = as_tokens(tokens, who, "tokens", 1);
            LmInUse<T> in_use(h, who);
            if (h.state.rows < 1) throw std::runtime_error(concat(who, ": call start_generation() first"));
            if (t.shape(0) != h.state.rows)
              throw py::value_error(
                  concat(who, ": tokens must hold one id per sequence (", h.state.rows, "), got ", describe(t)));
            const Index V = h.model.config().vocab_size;
            for (py::ssize_t i = 0; i < t.shape(0); ++i)
              if (t.data()[i] < 0 || t.data()[i] >= V)
                throw py::value_error(concat(who, ": token id ", t.data()[i], " is out of range for vocab_size ", V));
            const Matrix<T>& logits =
                without_gil([&]() -> const Matrix<T>& { return h.model.infer_step(t.data(), h.state); });
            return copy_out<T>(logits.data(), {logits.rows(), logits.cols()});
          },
          py::arg("tokens"),
          "Feed one token per sequence at the next position: logits (rows, vocab_size) of the token after it.")
      .def_property_readonly(
          "generation_position", [](H& h) { return h.state.position(); }, "Positions fed since start_generation.")
      .def("parameters", [](py::object self) {
        check_idle(self.cast<H&>().busy, "LanguageModel.parameters", "LanguageModel");
        return parameters_dict<T>(self.cast<H&>().model.parameters(), self);
      });
  def_optimizer_methods<T>(cls, "LanguageModel", "Adam, the schedule and clipping of the following train_steps.");
  def_set_dropout_seed(cls, "LanguageModel");
  def_learning_rate(cls, "LanguageModel");
  def_output_chunks(cls, "LanguageModel");
  cls.def_property(
         "memory_length", [](H& h) { return h.model.memory_length(); },
         [](H& h, const py::object& m) {
           check_idle(h.busy, "LanguageModel.memory_length", "LanguageModel");
           const Index length = int_arg(m, "LanguageModel", "memory_length", 0, 1 << 20);
           if (length > 0 && !attention_kind(h.model.config().attention).memory)
             throw py::value_error(concat("LanguageModel: memory_length needs attention ",
                                          quoted_attention_kinds(takes_memory), ", the model has '",
                                          h.model.config().attention, "'"));
           h.model.set_memory_length(length);
         },
         "Relative attention: positions of the preceding segments each block attends to (any length; setting it "
         "empties the memory).")
      .def_property(
          "clamp_len",
          [](H& h) -> py::object {
            return h.model.clamp_len() < 0 ? py::none() : py::object(py::int_(h.model.clamp_len()));
          },
          [](H& h, const py::object& c) {
            check_idle(h.busy, "LanguageModel.clamp_len", "LanguageModel");
            const Index clamp = c.is_none() ? -1 : int_arg(c, "LanguageModel", "clamp_len", 0);
            if (clamp >= 0 && !attention_kind(h.model.config().attention).memory)
              throw py::value_error(concat("LanguageModel: clamp_len needs attention ",
                                           quoted_attention_kinds(takes_memory), ", the model has '",
                                           h.model.config().attention, "'"));
            h.model.set_clamp_len(clamp);
          },
          "Relative attention: distances beyond it are encoded as it (None: no clamp).")
      .def_property_readonly(
          "memory_held", [](H& h) { return h.model.memory_held(); }, "Positions the segment memory holds now.")
      .def(
          "reset_memory",
          [](H& h) {
            check_idle(h.busy, "LanguageModel.reset_memory", "LanguageModel");
            h.model.reset_memory();
          },
          "Empty the segment memory (a new text, or a stripe that starts again).")
      .def_property(
          "memory_update", [](H& h) { return h.model.memory_update(); },
          [](H& h, bool update) {
            check_idle(h.busy, "LanguageModel.memory_update", "LanguageModel");
            h.model.set_memory_update(update);
          },
          "True (default): each forward moves the segment memory on; False: forwards read it and leave it as it is.");
  def_nonfinite_parameters(cls, "LanguageModel",
                           "Names of the parameters (and, with optimizer_state, Adam moments) holding NaN or inf.");
  cls.def("config", [](H& h) { return h.model.config(); }, "The architecture.");
}

}  // namespace

void bind_language_model(py::module_& m) {
  for_each_scalar([&](auto t) { bind_language_model_class<decltype(t)>(m); });
}

}  // namespace transformer::bindings
