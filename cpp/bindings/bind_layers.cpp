// Bindings of Linear, Dropout, attention, feed-forward, encoder and decoder layers.
#include "bindings.hpp"
#include "transformer/dropout.hpp"
#include "transformer/linear.hpp"

namespace transformer::bindings {

namespace {

// Python-side state of a layer: the C++ layer plus the input array of the last forward, which the
// layer reads again in backward (it caches a pointer, not a copy).
template <typename Layer>
struct Holder {
  template <typename... Args>
  explicit Holder(Args&&... args) : layer(std::forward<Args>(args)...) {}
  Layer layer;
  py::object saved;
  std::vector<Index> lead;
  bool has_forward = false;
};

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
             auto d = as_rows<T>(dout, "Linear.backward", "dout", h.layer.out_features());
             if (d.lead_shape != h.lead)
               throw py::value_error("Linear.backward: dout must have the shape of the last output, got " +
                                     describe(d.array));
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
             auto d = as_rows<T>(dout, "Dropout.backward", "dout", -1);
             if (d.lead_shape != h.lead)
               throw py::value_error("Dropout.backward: dout must have the shape of the last output, got " +
                                     describe(d.array));
             const Matrix<T>* dx;
             {
               py::gil_scoped_release release;
               dx = &h.layer.backward(d.map());
             }
             return rows_out<T>(*dx, h.lead);
           },
           py::arg("dout"))
      .def("parameters", [](py::object) { return py::module_::import("collections").attr("OrderedDict")(); })
      .def("zero_grad", [](H&) {});
}

}  // namespace

void bind_layers(py::module_& m) {
  bind_linear<float>(m);
  bind_linear<double>(m);
  bind_dropout<float>(m);
  bind_dropout<double>(m);
}

}  // namespace transformer::bindings
