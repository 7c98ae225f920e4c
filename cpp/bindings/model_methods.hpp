// model_methods.hpp — the methods the two bound models, LanguageModel and Transformer, share: the
// gradients of the logits, the optimiser's configuration and state, the step count, the dropout
// counter and seed, the learning rate, the output chunks and the non-finite parameter check.
//
// Each helper binds on a class of holders H with the model (.model) and its one-call guard
// (.busy); `name` is the class as messages name it ("LanguageModel": "LanguageModel.step: this
// LanguageModel is in use by another thread ...").
#pragma once

#include <string>
#include <vector>

#include "bindings.hpp"
#include "transformer/models/optimizer.hpp"

namespace transformer::bindings {

// backward(dlogits) after a forward of B sequences of length Tn over V classes (B < 0: no forward
// to go back through): dlogits (B, Tn, V), finite; the parameter gradients it accumulates, finite.
template <typename T, typename Model>
void logits_backward(Model& model, const py::handle& dlogits, const char* who, Index B, Index Tn, Index V) {
  if (B < 0) throw std::runtime_error(concat(who, ": call forward() first"));
  auto d = as_floats<T>(dlogits, who, "dlogits", 3);
  if (d.shape(0) != B || d.shape(1) != Tn || d.shape(2) != V)
    throw py::value_error(concat(who, ": dlogits must have shape (", B, ", ", Tn, ", ", V, "), got ", describe(d)));
  check_finite_input(d.data(), static_cast<Index>(d.size()), who, "dlogits");
  without_gil([&] { model.backward(ConstMatrixMap<T>(d.data(), B * Tn, V)); });
  check_parameter_gradients(model.parameters(), who);
}

// zero_grad, configure_optimizer (documented by `configure_doc`), optimizer_config,
// optimizer_state, step and dropout_calls.
template <typename T, typename H>
void def_optimizer_methods(py::class_<H>& cls, const std::string& name, const char* configure_doc) {
  cls.def("zero_grad", [name, who = name + ".zero_grad"](H& h) {
    check_idle(h.busy, who.c_str(), name.c_str());
    h.model.zero_grad();
  });
  cls.def(
      "configure_optimizer",
      [name, who = name + ".configure_optimizer"](H& h, const OptimizerConfig& o) {
        check_idle(h.busy, who.c_str(), name.c_str());
        h.model.set_optimizer_config(o);
      },
      py::arg("config"), configure_doc);
  cls.def("optimizer_config", [](H& h) { return h.model.optimizer_config(); }, "The optimiser's configuration.");
  cls.def(
      "optimizer_state",
      [name, who = name + ".optimizer_state"](py::object self) {
        check_idle(self.cast<H&>().busy, who.c_str(), name.c_str());
        return parameters_dict<T>(self.cast<H&>().model.optimizer().state(), self);
      },
      "Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).");
  cls.def_property(
      "step",
      [name, who = name + ".step"](H& h) {
        check_idle(h.busy, who.c_str(), name.c_str());
        return h.model.step_count();
      },
      [name, who = name + ".step"](H& h, const py::object& s) {
        check_idle(h.busy, who.c_str(), name.c_str());
        h.model.set_step_count(int_arg(s, name.c_str(), "step", 0));
      },
      "Optimiser steps taken so far.");
  cls.def_property(
      "dropout_calls", [](H& h) { return h.model.dropout_calls(); },
      [name, who = name + ".dropout_calls"](H& h, const py::object& c) {
        check_idle(h.busy, who.c_str(), name.c_str());
        h.model.set_dropout_calls(seed_arg(c, name.c_str(), "dropout_calls"));
      },
      "Training forwards so far: the dropout masks' counter (restore it to resume exactly).");
}

// set_dropout_seed.
template <typename H>
void def_set_dropout_seed(py::class_<H>& cls, const std::string& name) {
  cls.def(
      "set_dropout_seed",
      [name, who = name + ".set_dropout_seed"](H& h, const py::object& seed) {
        check_idle(h.busy, who.c_str(), name.c_str());
        h.model.set_dropout_seed(seed_arg(seed, name.c_str(), "dropout seed"));
      },
      py::arg("seed"), "Seed the dropout masks (the counter is kept).");
}

// learning_rate(step): the schedule's rate at an optimiser step (from 1).
template <typename H>
void def_learning_rate(py::class_<H>& cls, const std::string& name) {
  cls.def(
      "learning_rate",
      [who = name + ".learning_rate"](H& h, const py::object& step) {
        return h.model.learning_rate(int_arg(step, who.c_str(), "step", 1));
      },
      py::arg("step"));
}

// nonfinite_parameters (documented by `doc`).
template <typename H>
void def_nonfinite_parameters(py::class_<H>& cls, const std::string& name, const char* doc) {
  cls.def(
      "nonfinite_parameters",
      [name, who = name + ".nonfinite_parameters"](H& h, bool optimizer_state) {
        check_idle(h.busy, who.c_str(), name.c_str());
        std::vector<std::string> bad = nonfinite_parameters(h.model.parameters());
        if (optimizer_state && h.model.has_optimizer())
          for (auto& p : nonfinite_parameters(h.model.optimizer().state())) bad.push_back(p);
        return bad;
      },
      py::arg("optimizer_state") = true, doc);
}

// last_grad_norm and output_chunk_rows.
template <typename H>
void def_output_chunks(py::class_<H>& cls, const std::string& name) {
  cls.def_property_readonly("last_grad_norm", [](H& h) { return h.model.last_grad_norm(); });
  cls.def_property(
      "output_chunk_rows", [](H& h) { return h.model.output_chunk_rows(); },
      [name, who = name + ".output_chunk_rows"](H& h, const py::object& rows) {
        check_idle(h.busy, who.c_str(), name.c_str());
        h.model.set_output_chunk_rows(int_arg(rows, name.c_str(), "output_chunk_rows", -1));
      },
      "Rows per chunk of the training step's output layer and loss, computed together chunk by chunk "
      "so the (rows, vocabulary) logits are never stored whole: 0 (default) sizes the chunks from the "
      "vocabulary, n > 0 takes n rows, -1 computes the whole logits matrix (the unfused reference).");
}

}  // namespace transformer::bindings
