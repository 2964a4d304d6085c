#pragma once

#include <pybind11/pybind11.h>

namespace mmdet_ext {

// mmdet_ext._C.DecodeQueue (decode_queue.cpp).
void bind_decode_queue(pybind11::module_& m);

}  // namespace mmdet_ext
