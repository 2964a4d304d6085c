// Python bindings of the annotation store: file I/O, so pybind11 with the GIL released.
#include "store_bindings.h"

#include <torch/extension.h>
#include <pybind11/numpy.h>

#include "coco_json_reader.h"
#include "mapped_store.h"
#include "store_format.h"

namespace py = pybind11;

namespace mmdet_ext {
namespace {

// numpy's name of each element type a store holds (store_format.h's codes). Sections cross into
// Python as numpy arrays, not tensors: torch < 2.3 has no uint16/uint32 tensors.
constexpr std::pair<int32_t, const char*> kNumpyTypes[] = {
    {store::kUInt8, "uint8"},     {store::kInt8, "int8"},       {store::kInt16, "int16"},
    {store::kInt32, "int32"},     {store::kInt64, "int64"},     {store::kFloat16, "float16"},
    {store::kFloat32, "float32"}, {store::kFloat64, "float64"}, {store::kUInt16, "uint16"},
    {store::kUInt32, "uint32"}};

int32_t element_type_of(const py::dtype& dtype) {
  for (const auto& [code, name] : kNumpyTypes) {
    if (dtype.equal(py::dtype(name))) return code;
  }
  return -1;  // write_store refuses it, naming the dtype
}

py::dtype numpy_type_of(int32_t code) {
  for (const auto& [known, name] : kNumpyTypes) {
    if (known == code) return py::dtype(name);
  }
  throw std::logic_error("store section of an element type MappedStore does not validate");
}

}  // namespace

void bind_store(py::module_& m) {
  using store::MappedStore;
  py::register_exception<store::StoreError>(m, "StoreError", PyExc_RuntimeError);
  m.def("write_store",
        [](const std::string& path,
           const std::vector<std::pair<std::string, py::array>>& arrays, const py::bytes& key) {
          std::vector<store::Section> sections;
          for (const auto& [name, array] : arrays) {
            if (!(array.flags() & py::array::c_style)) {
              throw store::StoreError("annotation store " + path + ": section '" + name +
                                      "' is not C-contiguous");
            }
            store::Section& section = sections.emplace_back();
            section.name = name;
            section.dtype = element_type_of(array.dtype());
            section.type_name = py::str(array.dtype());
            section.ndim = static_cast<int32_t>(array.ndim());
            section.shape[0] = array.ndim() > 0 ? array.shape(0) : 1;
            section.shape[1] = array.ndim() > 1 ? array.shape(1) : 1;
            section.data = array.data();
          }
          const std::string key_bytes = key;
          py::gil_scoped_release release;  // the arrays stay referenced by `arrays`
          store::write_store(path, sections, key_bytes);
        },
        py::arg("path"), py::arg("sections"), py::arg("key"),
        "Atomically write named 1-D/2-D C-contiguous numpy arrays to an annotation store file.");
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
      .def("sections",
           [](const py::object& self) {
             py::list out;
             for (const store::Section& section : self.cast<const MappedStore&>().sections()) {
               std::vector<py::ssize_t> shape = {section.shape[0]};
               if (section.ndim == 2) shape.push_back(section.shape[1]);
               // base=self: each array keeps this MappedStore, and so the mapping, alive.
               out.append(py::make_tuple(
                   section.name, py::array(numpy_type_of(section.dtype), shape, section.data, self)));
             }
             return out;
           },
           "List of (name, numpy array) views into the mapped file; they keep the mapping alive.");
}

}  // namespace mmdet_ext
