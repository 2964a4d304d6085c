// Python bindings of the annotation store: file I/O, so pybind11 with the GIL released.
#include "store_bindings.h"

#include <torch/extension.h>

#include "mapped_store.h"

namespace py = pybind11;

namespace mmdet_ext {

void bind_store(py::module_& m) {
  using store::MappedStore;
  py::register_exception<store::StoreError>(m, "StoreError", PyExc_RuntimeError);
  m.def("write_store",
        [](const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& sections,
           const py::bytes& key) {
          const std::string key_bytes = key;
          py::gil_scoped_release release;
          store::write_store(path, sections, key_bytes);
        },
        py::arg("path"), py::arg("sections"), py::arg("key"),
        "Atomically write named 1-D/2-D CPU tensors to an annotation store file.");
  py::class_<MappedStore>(m, "MappedStore")
      .def(py::init<const std::string&, bool>(), py::arg("path"), py::arg("verify_payload") = true,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("path", &MappedStore::path)
      .def_property_readonly("file_size", &MappedStore::file_size)
      .def("key", [](const MappedStore& s) { return py::bytes(s.key()); })
      .def("sections", &MappedStore::sections,
           "List of (name, tensor) views into the mapped file; they keep the mapping alive.");
}

}  // namespace mmdet_ext
