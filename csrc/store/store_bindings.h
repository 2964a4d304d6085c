#pragma once

#include <pybind11/pybind11.h>

namespace mmdet_ext {

void bind_store(pybind11::module_& m);

}  // namespace mmdet_ext
