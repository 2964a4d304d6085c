// nvJPEG, the GPU decode of decode_jpegs_into (io/cuda/nvjpeg_decode.cpp): built where setup.py
// finds nvjpeg.h in a CUDA build (MMDET_EXT_WITH_NVJPEG), loaded with dlopen at first use.
#pragma once

#include <optional>
#include <string>

namespace mmdet_ext {

// Why nvJPEG cannot be used in this process (the library not found, a function missing), or
// nullopt when it can. Loads the library on the first call. (bindings.cpp answers for builds
// without nvJPEG.)
std::optional<std::string> nvjpeg_load_error();

}  // namespace mmdet_ext
