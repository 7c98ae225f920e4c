// Bindings of LayerNorm, ReLU, softmax, embeddings, loss and Adam.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <utility>

#include "bindings.hpp"
#include "transformer/layers/activations.hpp"
#include "transformer/layers/embedding.hpp"
#include "transformer/layers/layer_norm.hpp"
#include "transformer/layers/loss.hpp"
#include "transformer/layers/softmax.hpp"
#include "transformer/models/optimizer.hpp"

namespace transformer::bindings {

namespace {

// ---------------------------------------------------------------------------------------------
// LayerNorm, ReLU

template <typename T>
void bind_layer_norm(py::module_& m) {
  using H = Holder<LayerNorm<T>>;
  py::class_<H> cls(m, class_name<T>("LayerNorm").c_str(),
                    R"doc(Layer normalisation over the last axis, as ``torch.nn.LayerNorm(d_model, eps=eps)``.

``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance (divide by
``d_model``) and ``eps`` inside the square root. Parameters ``"weight"`` (ones) and ``"bias"``
(zeros), each of shape ``(d_model,)``.

``forward(x)`` maps ``(..., d_model)`` to the same shape. ``forward_residual(a, b)`` computes
``LN(a + b)`` (the "Add & Norm" of the paper) without a separate sum; after it, ``backward``
returns ``d(a + b)``, which is the gradient of both ``a`` and ``b``.)doc");
  cls.def(py::init([](const py::object& d_model, const py::object& eps) {
            return new H(int_arg(d_model, "LayerNorm", "d_model"),
                         float_arg(eps, "LayerNorm", "eps", limits::positive()));
          }),
          py::arg("d_model"), py::arg("eps") = 1e-6)
      .def_property_readonly("d_model", [](H& h) { return h.layer.dim(); })
      .def_property_readonly("eps", [](H& h) { return h.layer.eps(); })
      .def(
          "forward",
          [](H& h, const py::handle& x) {
            LayerForward<T, H> call(h, "LayerNorm.forward");
            auto in = call.rows(x, "x", h.layer.dim(), /*keep=*/true);  // the layer reads x again in backward
            call.check(concat("an input of ", in.rows, " rows"),
                       3.0 * static_cast<double>(in.rows) * static_cast<double>(in.cols));
            const Matrix<T>& y =
                call.run(in.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward(in.map()); });
            return rows_out<T>(y, in.lead_shape);
          },
          py::arg("x"), "x: (..., d_model) -> (..., d_model)")
      .def(
          "forward_residual",
          [](H& h, const py::handle& a, const py::handle& b) {
            LayerForward<T, H> call(h, "LayerNorm.forward_residual");
            const char* who = call.who();
            auto ia = as_rows<T>(a, who, "a", h.layer.dim());
            auto ib = as_rows<T>(b, who, "b", h.layer.dim());
            if (ia.lead_shape != ib.lead_shape)
              throw py::value_error(concat("LayerNorm.forward_residual: a and b must have the same shape, got ",
                                           describe(ia.array), " and ", describe(ib.array)));
            check_input(ia, who, "a", false);  // the layer keeps a + b itself
            check_input(ib, who, "b", false);
            call.check(concat("an input of ", ia.rows, " rows"),
                       4.0 * static_cast<double>(ia.rows) * static_cast<double>(ia.cols));
            const Matrix<T>& y = call.run(
                ia.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward_residual(ia.map(), ib.map()); });
            return rows_out<T>(y, ia.lead_shape);
          },
          py::arg("a"), py::arg("b"), "LN(a + b); backward() then returns d(a + b), the gradient of both");
  def_backward<T>(
      cls, "LayerNorm", [](const auto& l) { return l.dim(); }, Dout::Rows,
      "dout: (..., d_model) -> dx; accumulates the weight and bias gradients");
  def_parameters<T>(cls, "LayerNorm");
}

template <typename T>
void bind_relu(py::module_& m) {
  using H = Holder<ReLU<T>>;
  py::class_<H> cls(m, class_name<T>("ReLU").c_str(),
                    R"doc(``y = max(x, 0)`` element-wise; ``backward(dout)`` passes ``dout`` where ``y > 0``.)doc");
  cls.def(py::init([]() { return new H(); }))
      .def(
          "forward",
          [](H& h, const py::handle& x) {
            LayerForward<T, H> call(h, "ReLU.forward");
            auto in = call.rows(x, "x", -1, /*keep=*/false);  // backward reads the output
            call.check(concat("an input of ", in.rows, " rows"),
                       2.0 * static_cast<double>(in.rows) * static_cast<double>(in.cols));
            const Matrix<T>& y =
                call.run(in.lead_shape, [&]() -> const Matrix<T>& { return h.layer.forward(in.map()); });
            return rows_out<T>(y, in.lead_shape);
          },
          py::arg("x"))
      .def(
          "backward",
          [](H& h, const py::handle& dout) {
            LayerBackward<T, H> call(h, "ReLU.backward");
            auto d = call.dout_rows(dout, -1);
            const Matrix<T>& dx = call.run([&]() -> const Matrix<T>& { return h.layer.backward(d.map()); });
            return rows_out<T>(dx, h.lead);
          },
          py::arg("dout"), "dout -> dx = dout where the output was positive, 0 elsewhere");
  def_no_parameters(cls);
}

// ---------------------------------------------------------------------------------------------
// Embeddings and the padding mask

py::array_t<bool> padding_mask_array(const py::handle& tokens, const char* who) {
  auto tok = as_tokens(tokens, who, "tokens", 2);
  const Index b = tok.shape(0), t = tok.shape(1);
  std::vector<std::uint8_t> mask = padding_mask(ConstTokenMap(tok.data(), b, t));
  py::array_t<bool> out({static_cast<py::ssize_t>(b), static_cast<py::ssize_t>(t)});
  bool* o = out.mutable_data();
  for (size_t i = 0; i < mask.size(); ++i) o[i] = mask[i] != 0;
  return out;
}

// What Embedding and PositionalEmbedding (`name`) share after their forward: backward (the weight
// gradient, nothing returned), padding_mask, parameters() and zero_grad().
template <typename T, typename H>
void def_embedding_methods(py::class_<H>& cls, const std::string& name) {
  cls.def(
      "backward",
      [who = name + ".backward"](H& h, const py::handle& dout) {
        LayerBackward<T, H> call(h, who.c_str());
        auto d = call.dout_rows(dout, h.layer.dim());
        call.run([&] { h.layer.backward(d.map()); });
        call.check_parameter_gradients();
      },
      py::arg("dout"), "dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None");
  cls.def(
      "padding_mask",
      [who = name + ".padding_mask"](H&, const py::handle& tokens) { return padding_mask_array(tokens, who.c_str()); },
      py::arg("tokens"), "bool (B, T), True where tokens == 0");
  def_parameters<T>(cls, name);
}

template <typename T>
void bind_embedding(py::module_& m) {
  using H = Holder<Embedding<T>>;
  py::class_<H> cls(m, class_name<T>("Embedding").c_str(), R"doc(Token embedding with padding id 0.

The ``"weight"`` parameter ``(vocab_size, d_model)`` starts as ``N(0, d_model**-0.5)`` with
row 0 zero; row 0 never receives gradient (like ``padding_idx=0`` in PyTorch).
``forward(tokens, scale=1.0)`` maps int ``(B, T)`` ids to ``weight[tokens] * scale`` of shape
``(B, T, d_model)``; ids outside ``[0, vocab_size)`` raise ``ValueError``.
``backward(dout)`` accumulates the weight gradient and returns ``None``.)doc");
  cls.def(py::init([](const py::object& vocab_size, const py::object& d_model, const py::object& seed) {
            const char* who = "Embedding";
            return new H(int_arg(vocab_size, who, "vocab_size"), int_arg(d_model, who, "d_model"), seed_arg(seed, who));
          }),
          py::arg("vocab_size"), py::arg("d_model"), py::arg("seed") = 0)
      .def_property_readonly("vocab_size", [](H& h) { return h.layer.vocab_size(); })
      .def_property_readonly("d_model", [](H& h) { return h.layer.dim(); })
      .def(
          "forward",
          [](H& h, const py::handle& tokens, const py::object& scale_arg) {
            // the layer checks the token ids before it changes anything: a failed forward leaves
            // the previous one for backward
            LayerForward<T, H> call(h, "Embedding.forward", /*failure_keeps_previous=*/true);
            const char* who = call.who();
            const double scale = float_arg(scale_arg, who, "scale", limits::finite());
            if (std::fabs(scale) > static_cast<double>(std::numeric_limits<T>::max()))  // finite as a double only
              throw py::value_error(concat(who, ": scale must be a finite number, got ", scale));
            auto tok = as_tokens(tokens, who, "tokens", 2);  // copied by the layer
            const Index b = tok.shape(0), t = tok.shape(1);
            call.check(concat("a batch of ", b, " sequences of length ", t),
                       static_cast<double>(b) * static_cast<double>(t) * static_cast<double>(h.layer.dim()));
            const Matrix<T>& y = call.run({b, t}, [&]() -> const Matrix<T>& {
              return h.layer.forward(ConstTokenMap(tok.data(), b, t), static_cast<T>(scale));
            });
            return rows_out<T>(y, h.lead);
          },
          py::arg("tokens"), py::arg("scale") = 1.0, "tokens: int (B, T) -> (B, T, d_model) = weight[tokens] * scale");
  def_embedding_methods<T>(cls, "Embedding");
}

template <typename T>
void bind_positional_embedding(py::module_& m) {
  using H = Holder<PositionalEmbedding<T>>;
  py::class_<H> cls(m, class_name<T>("PositionalEmbedding").c_str(),
                    R"doc(The input layer of the Transformer: ``weight[tokens] * sqrt(d_model) + PE[:T]``.

``PE`` is the sinusoidal table of :func:`transformer_cpp.positional_encoding` with the given
``layout`` (``"interleaved"`` or ``"concatenated"``), built once for ``max_length`` positions
(``.table``) and grown for longer inputs. ``forward(tokens)`` takes int ids ``(B, T)`` and
returns ``(B, T, d_model)``; the embedding weight is as in :class:`Embedding`.)doc");
  cls.def(py::init([](const py::object& vocab_size, const py::object& d_model, const py::object& max_length,
                      const py::object& layout, const py::object& seed) {
            const char* who = "PositionalEmbedding";
            return new H(int_arg(vocab_size, who, "vocab_size"), int_arg(d_model, who, "d_model"),
                         int_arg(max_length, who, "max_length"),
                         parse_positional_layout(str_arg(layout, who, "layout")), seed_arg(seed, who));
          }),
          py::arg("vocab_size"), py::arg("d_model"), py::arg("max_length") = 2048, py::arg("layout") = "interleaved",
          py::arg("seed") = 0)
      .def_property_readonly("vocab_size", [](H& h) { return h.layer.vocab_size(); })
      .def_property_readonly("d_model", [](H& h) { return h.layer.dim(); })
      .def_property_readonly("max_length", [](H& h) { return h.layer.max_length(); })
      .def_property_readonly("layout", [](H& h) { return to_string(h.layer.layout()); })
      .def_property_readonly(
          "table",
          [](H& h) {
            check_idle(h.busy, "PositionalEmbedding.table", "layer");
            // a copy: the table is a cache that grows (and moves) for longer inputs
            const Matrix<T>& pe = h.layer.table();
            py::array_t<T> a({pe.rows(), pe.cols()});
            std::copy(pe.data(), pe.data() + pe.size(), a.mutable_data());
            a.attr("flags").attr("writeable") = false;
            return a;
          },
          "read-only copy (cached positions, d_model) of the positional table")
      .def(
          "forward",
          [](H& h, const py::handle& tokens) {
            // as Embedding.forward: a failed forward leaves the previous one for backward
            LayerForward<T, H> call(h, "PositionalEmbedding.forward", /*failure_keeps_previous=*/true);
            auto tok = as_tokens(tokens, call.who(), "tokens", 2);  // copied by the layer
            const Index b = tok.shape(0), t = tok.shape(1);
            const double d = static_cast<double>(h.layer.dim());
            call.check(concat("a batch of ", b, " sequences of length ", t),
                       static_cast<double>(b) * static_cast<double>(t) * d + 2.0 * static_cast<double>(t) * d);
            const Matrix<T>& y = call.run(
                {b, t}, [&]() -> const Matrix<T>& { return h.layer.forward(ConstTokenMap(tok.data(), b, t)); });
            return rows_out<T>(y, h.lead);
          },
          py::arg("tokens"), "tokens: int (B, T) -> (B, T, d_model); the table grows past max_length as needed");
  def_embedding_methods<T>(cls, "PositionalEmbedding");
}

// ---------------------------------------------------------------------------------------------
// softmax, loss, accuracy

// dlogits is large ((B*T, V): 63 MB for 960 tokens and 16k classes), and a fresh allocation each
// step costs page faults on every page. The buffer handed to NumPy comes back here when the array
// dies (with the GIL held) and is reused by the next call, so a training loop that drops dlogits
// before the next step allocates nothing once shapes are stable.
template <typename T>
std::unique_ptr<Matrix<T>>& spare_gradient() {
  static std::unique_ptr<Matrix<T>> spare;
  return spare;
}

template <typename T>
std::unique_ptr<Matrix<T>> take_gradient_buffer() {
  auto& spare = spare_gradient<T>();
  return spare ? std::move(spare) : std::make_unique<Matrix<T>>();
}

template <typename T>
void return_gradient_buffer(void* p) {
  std::unique_ptr<Matrix<T>> m(static_cast<Matrix<T>*>(p));
  auto& spare = spare_gradient<T>();
  if (!spare) spare = std::move(m);  // otherwise m is freed here
}

// The arguments of masked_cross_entropy and masked_accuracy: logits (N, V) or (B, T, V), and the
// target ids of their leading shape.
template <typename T>
std::pair<RowsInput<T>, py::array_t<std::int64_t, py::array::c_style>> logits_and_targets(const py::handle& logits,
                                                                                          const py::handle& targets,
                                                                                          const char* who) {
  auto lg = as_rows<T>(logits, who, "logits", -1);
  if (lg.array.ndim() < 2)
    throw py::value_error(concat(who, ": logits must have shape (N, V) or (B, T, V), got ", describe(lg.array)));
  auto tg = as_tokens(targets, who, "targets", static_cast<int>(lg.array.ndim() - 1));
  if (shape_of(tg) != lg.lead_shape)
    throw py::value_error(concat(who, ": targets must have shape ", shape_str(lg.lead_shape), " to match logits ",
                                 describe(lg.array), ", got ", describe(tg)));
  return {std::move(lg), std::move(tg)};
}

template <typename T>
void bind_functions(py::module_& m) {
  m.def((std::string("softmax") + dtype_suffix<T>()).c_str(),
        [](const py::handle& x) {
          auto in = as_rows<T>(x, "softmax", "x", -1);
          py::array_t<T> out(shape_of(in.array));
          T* o = out.mutable_data();
          without_gil([&] {
            std::copy(in.array.data(), in.array.data() + in.rows * in.cols, o);
            softmax_rows(o, in.rows, in.cols);
          });
          return out;
        },
        py::arg("x"), "Softmax over the last axis; a row that is all -inf gives zeros.");
  m.def((std::string("softmax_backward") + dtype_suffix<T>()).c_str(),
        [](const py::handle& y, const py::handle& dy) {
          auto iy = as_rows<T>(y, "softmax_backward", "y", -1);
          auto idy = as_rows<T>(dy, "softmax_backward", "dy", -1);
          if (shape_of(iy.array) != shape_of(idy.array))
            throw py::value_error(concat("softmax_backward: y and dy must have the same shape, got ",
                                         describe(iy.array), " and ", describe(idy.array)));
          py::array_t<T> out(shape_of(iy.array));
          T* o = out.mutable_data();
          without_gil([&] { softmax_rows_backward(iy.array.data(), idy.array.data(), o, iy.rows, iy.cols); });
          return out;
        },
        py::arg("y"), py::arg("dy"),
        "Gradient of the softmax input given its output y and dy: y * (dy - sum(dy * y)).");
  m.def((std::string("masked_cross_entropy") + dtype_suffix<T>()).c_str(),
        [](const py::handle& logits, const py::handle& targets, const py::object& smoothing,
           bool compute_grad) -> py::tuple {
          const char* who = "masked_cross_entropy";
          const double label_smoothing = float_arg(smoothing, who, "label_smoothing", limits::fraction());
          auto args = logits_and_targets<T>(logits, targets, who);
          const RowsInput<T>& lg = args.first;
          const auto& tg = args.second;
          std::unique_ptr<Matrix<T>> grad = compute_grad ? take_gradient_buffer<T>() : nullptr;
          const LossStats stats =
              without_gil([&] { return masked_cross_entropy<T>(lg.map(), tg.data(), grad.get(), label_smoothing); });
          if (!compute_grad) return py::make_tuple(stats.loss, py::none());
          // Hand the gradient buffer to NumPy without copying; the capsule gives it back with the array.
          Matrix<T>* g = grad.release();
          py::capsule owner(g, &return_gradient_buffer<T>);
          std::vector<py::ssize_t> shape(lg.array.shape(), lg.array.shape() + lg.array.ndim());
          py::array_t<T> dlogits(shape, g->data(), owner);
          return py::make_tuple(stats.loss, dlogits);
        },
        py::arg("logits"), py::arg("targets"), py::arg("label_smoothing") = 0.0, py::arg("compute_grad") = true,
        "(loss, dlogits): softmax cross-entropy averaged over targets != 0, and its gradient.");
  m.def((std::string("masked_accuracy") + dtype_suffix<T>()).c_str(),
        [](const py::handle& logits, const py::handle& targets) {
          const char* who = "masked_accuracy";
          auto args = logits_and_targets<T>(logits, targets, who);
          const RowsInput<T>& lg = args.first;
          const auto& tg = args.second;
          const LossStats stats = without_gil([&] { return masked_accuracy<T>(lg.map(), tg.data()); });
          return stats.count == 0 ? 0.0 : static_cast<double>(stats.correct) / static_cast<double>(stats.count);
        },
        py::arg("logits"), py::arg("targets"), "Fraction of targets != 0 whose argmax over logits is right.");
}

// ---------------------------------------------------------------------------------------------
// Adam

template <typename T>
struct AdamHolder {
  std::unique_ptr<Adam<T>> adam;
  bool busy = false;  // a step is running (see InUse)
  std::vector<std::string> names;
  std::vector<py::array> keep;  // every parameter's value and grad view: they keep the layers alive
};

template <typename T>
AdamHolder<T>* make_adam(const py::object& params, const py::object& beta1_arg, const py::object& beta2_arg,
                         const py::object& eps_arg) {
  const std::string who = class_name<T>("Adam");
  const double beta1 = float_arg(beta1_arg, "Adam", "beta1", limits::rate());
  const double beta2 = float_arg(beta2_arg, "Adam", "beta2", limits::rate());
  const double eps = float_arg(eps_arg, "Adam", "eps", limits::positive());
  // (name, parameter) pairs from a mapping (keys are the names) or a sequence of Parameter.
  std::vector<std::pair<std::string, py::object>> items;
  const bool mapping = py::hasattr(params, "items") && py::hasattr(params, "keys");
  if (mapping) {
    for (auto kv : params.attr("items")()) {
      auto pair = kv.cast<py::tuple>();
      items.emplace_back(py::str(pair[0]).cast<std::string>(), py::reinterpret_borrow<py::object>(pair[1]));
    }
  } else {
    for (auto p : params) items.emplace_back(std::string(), py::reinterpret_borrow<py::object>(p));
  }
  if (items.empty()) throw py::value_error(who + ": got no parameters to optimise");
  for (auto& it : items) {
    if (!py::isinstance<PyParameter>(it.second))
      throw py::type_error(concat(who, ": parameters must be Parameter objects (from a layer's parameters()), got ",
                                  py::str(py::type::of(it.second).attr("__name__")).cast<std::string>()));
    if (!mapping) it.first = it.second.cast<PyParameter&>().name;
  }
  if (!mapping) {  // names from a list must be unique to key the state; otherwise prefix the index
    std::set<std::string> seen;
    bool unique = true;
    for (auto& it : items) unique = seen.insert(it.first).second && unique;
    if (!unique)
      for (size_t i = 0; i < items.size(); ++i) items[i].first = std::to_string(i) + "." + items[i].first;
  }

  auto holder = std::make_unique<AdamHolder<T>>();
  ParameterList<T> list;
  std::set<const void*> addresses;
  for (auto& it : items) {
    const PyParameter& p = it.second.cast<PyParameter&>();
    for (const py::array* a : {&p.value, &p.grad}) {
      if (!py::isinstance<py::array_t<T>>(*a))
        throw py::type_error(concat(who, ": parameter '", it.first, "' is a ", describe(*a), ", expected ",
                                    sizeof(T) == 4 ? "float32" : "float64", " (use the Adam of the layer's dtype)"));
      if (!(a->flags() & py::array::c_style))
        throw py::value_error(concat(who, ": parameter '", it.first, "' is not contiguous"));
    }
    if (shape_of(p.value) != shape_of(p.grad))
      throw py::value_error(
          concat(who, ": parameter '", it.first, "' has value ", describe(p.value), " but grad ", describe(p.grad)));
    py::array value = p.value, grad = p.grad;
    T* v = static_cast<T*>(value.mutable_data());  // raises if read-only
    T* g = static_cast<T*>(grad.mutable_data());
    if (!addresses.insert(v).second) throw py::value_error(concat(who, ": parameter '", it.first, "' is given twice"));
    list.push_back({it.first, v, g, shape_of(value)});
    holder->names.push_back(it.first);
    holder->keep.push_back(value);
    holder->keep.push_back(grad);
  }
  holder->adam = std::make_unique<Adam<T>>(std::move(list), beta1, beta2, eps);
  return holder.release();
}

template <typename T>
void bind_adam(py::module_& m) {
  using H = AdamHolder<T>;
  py::class_<H>(m, class_name<T>("Adam").c_str(),
                "Adam over Parameter views (torch.optim.Adam update with bias correction).")
      .def(py::init(&make_adam<T>), py::arg("parameters"), py::arg("beta1") = 0.9, py::arg("beta2") = 0.98,
           py::arg("eps") = 1e-9)
      .def(
          "step",
          [](H& h, const py::object& lr) {
            const double rate = float_arg(lr, "Adam.step", "lr", limits::non_negative());
            InUse in_use(h.busy, "Adam.step", "optimizer");
            // refused, changing nothing, if a weight or moment would become NaN or infinite
            without_gil([&] { h.adam->step(rate, 1.0, false, "Adam.step"); });
          },
          py::arg("lr"), "One update with learning rate lr (increments step_count first).")
      .def(
          "clip_grad_norm",
          [](H& h, const py::object& max_norm_arg) {
            const double max_norm = float_arg(max_norm_arg, "Adam.clip_grad_norm", "max_norm", limits::non_negative());
            InUse in_use(h.busy, "Adam.clip_grad_norm", "optimizer");
            return without_gil([&] { return h.adam->clip_grad_norm(max_norm); });
          },
          py::arg("max_norm"),
          "Global L2 norm of all gradients; scales them by max_norm / norm when it is larger. Returns the norm "
          "before clipping.")
      .def_property(
          "step_count", [](H& h) { return h.adam->step_count(); },
          [](H& h, const py::object& t) {
            check_idle(h.busy, "Adam.step_count", "optimizer");
            h.adam->set_step_count(int_arg(t, "Adam", "step_count", 0));
          })
      .def_property_readonly("beta1", [](H& h) { return h.adam->beta1; })
      .def_property_readonly("beta2", [](H& h) { return h.adam->beta2; })
      .def_property_readonly("eps", [](H& h) { return h.adam->eps; })
      .def_property_readonly(
          "names", [](H& h) { return h.names; }, "parameter names, in update order")
      .def("__len__", [](H& h) { return h.names.size(); })
      .def(
          "state",
          [](py::object self) {
            py::object od = empty_parameters();
            for (const auto& p : self.cast<H&>().adam->state()) od[py::str(p.name)] = view<T>(p.value, p.shape, self);
            return od;
          },
          "OrderedDict '<param>.m' / '<param>.v' -> writable views of the moments (for checkpoints).")
      .def(
          "reset_state",
          [](H& h) {
            check_idle(h.busy, "Adam.reset_state", "optimizer");
            h.adam->reset_state();
          },
          "Zero the moments and the step count.");
}

}  // namespace

void bind_basic_layers(py::module_& m) {
  for_each_scalar([&](auto t) { bind_layer_norm<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_relu<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_embedding<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_positional_embedding<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_functions<decltype(t)>(m); });
  for_each_scalar([&](auto t) { bind_adam<decltype(t)>(m); });
  m.def(
      "padding_mask", [](const py::handle& tokens) { return padding_mask_array(tokens, "padding_mask"); },
      py::arg("tokens"), "bool (B, T), True where tokens == 0 (padding)");
  m.def(
      "warmup_learning_rate",
      [](const py::object& step, const py::object& d_model, const py::object& warmup, const py::object& scale) {
        const char* who = "warmup_learning_rate";
        return warmup_learning_rate(int_arg(step, who, "step"), int_arg(d_model, who, "d_model"),
                                    int_arg(warmup, who, "warmup"),
                                    float_arg(scale, who, "scale", limits::non_negative()));
      },
      py::arg("step"), py::arg("d_model"), py::arg("warmup") = 4000, py::arg("scale") = 1.0,
      "d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) * scale, step counted from 1.");
}

}  // namespace transformer::bindings
