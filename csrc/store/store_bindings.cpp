// Python bindings of the annotation store: file I/O, so pybind11 with the GIL released.
#include "store_bindings.h"

#include <torch/extension.h>

#include "coco_json_reader.h"
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
  py::register_exception<store::CocoJsonError>(m, "CocoJsonError", PyExc_ValueError);
  m.def("read_coco_json",
        [](const std::string& path, bool record_starts, const py::object& progress) {
#ifdef MMDET_EXT_WITH_RAPIDJSON
          store::ReadProgress report;
          if (!progress.is_none()) {
            report = [&progress](int64_t done, int64_t total) {
              py::gil_scoped_acquire acquire;
              progress(done, total);
            };
          }
          py::gil_scoped_release release;
          return store::read_coco_json(path, record_starts, report);
#else
          (void)path, (void)record_starts, (void)progress;
          throw std::runtime_error(
              "read_coco_json: this build of mmdet_ext has no rapidjson (setup.py did not find "
              "it, or MMDET_EXT_WITH_RAPIDJSON=0 switched it off); install it (Debian/Ubuntu: "
              "apt-get install rapidjson-dev) and rebuild: pip install --no-build-isolation -e .");
#endif
        },
        py::arg("path"), py::arg("record_starts") = false, py::arg("progress") = py::none(),
        "Stream a COCO json into named columns (csrc/store/coco_json_reader.h).");
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
