// Bindings of the Transformer model.
#include "bindings.hpp"

namespace transformer::bindings {
void bind_model(py::module_& m) { (void)m; }
}  // namespace transformer::bindings
