// The Python module mmdet_ext._C. Importing it runs the TORCH_LIBRARY registrations of every op;
// the functions here describe the build, so Python can tell a stale extension from a fresh one and
// say what a build has, and set the thread pool of the OpenCV it links (Debian's, not the cv2
// wheel's) when it links one.
#include <optional>
#include <string>

#include <torch/extension.h>
#include <torch/version.h>

#include "io/image_decoder.h"
#include "store/store_bindings.h"

#ifdef MMDET_EXT_WITH_OPENCV
#include <opencv2/core/utility.hpp>
#include <opencv2/core/version.hpp>
#endif
#ifdef MMDET_EXT_WITH_LIBJPEG
#include "io/jpeg_decoder.h"
#endif
#ifdef MMDET_EXT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef MMDET_EXT_SOURCE_HASH
#error "setup.py passes MMDET_EXT_SOURCE_HASH; build with `pip install --no-build-isolation -e .`"
#endif

namespace mmdet_ext {
namespace {

std::string source_hash() { return MMDET_EXT_SOURCE_HASH; }

std::string torch_version() { return TORCH_VERSION; }

bool with_cuda() {
#ifdef MMDET_EXT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// Of the CUDA runtime headers compiled against ("13.0").
std::optional<std::string> cuda_version() {
#ifdef MMDET_EXT_WITH_CUDA
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#else
  return std::nullopt;
#endif
}

std::optional<std::string> opencv_version() {
#ifdef MMDET_EXT_WITH_OPENCV
  return std::string(CV_VERSION);
#else
  return std::nullopt;
#endif
}

std::optional<std::string> libjpeg() {
#ifdef MMDET_EXT_WITH_LIBJPEG
  return libjpeg_version();
#else
  return std::nullopt;
#endif
}

// DataLoader workers must not each start an OpenCV thread pool (N workers x M threads fight
// for the same cores); cv2.setNumThreads only reaches the cv2 wheel's own copy of OpenCV.
void set_opencv_num_threads([[maybe_unused]] int threads) {
#ifdef MMDET_EXT_WITH_OPENCV
  cv::setNumThreads(threads);
#endif
}

std::optional<int> opencv_num_threads() {
#ifdef MMDET_EXT_WITH_OPENCV
  return cv::getNumThreads();
#else
  return std::nullopt;
#endif
}

}  // namespace
}  // namespace mmdet_ext

PYBIND11_MODULE(_C, m) {
  namespace me = mmdet_ext;
  m.doc() = "mmdet_ext native extension (ops are under torch.ops.mmdet_ext)";
  m.def("source_hash", &me::source_hash,
        "SHA-256 of the csrc/ sources this extension was compiled from.");
  m.def("opencv_version", &me::opencv_version,
        "Version of the OpenCV headers the extension was compiled against; None if built "
        "without OpenCV.");
  m.def("torch_version", &me::torch_version,
        "Version of the torch headers the extension was compiled against.");
  m.def("with_cuda", &me::with_cuda, "Whether CUDA kernels were compiled in.");
  m.def("build_info", [] {
    py::dict info;
    info["with_cuda"] = me::with_cuda();
    info["cuda_version"] = me::cuda_version();
    info["torch_version"] = me::torch_version();
    info["opencv_version"] = me::opencv_version();
    info["libjpeg"] = me::libjpeg();
    info["source_hash"] = me::source_hash();
    return info;
  }, "What this extension was built with (mmdet_ext.build_info() documents the keys).");
  m.def("default_max_pixels", [] { return me::kDefaultMaxPixels; },
        "The one image pixel limit (mmdet_ext.io.DEFAULT_MAX_PIXELS), defined in C++.");
  m.def("set_opencv_num_threads", &me::set_opencv_num_threads,
        "cv::setNumThreads for the OpenCV the native ops use (0: run in the calling thread); "
        "does nothing in a build without OpenCV.");
  m.def("opencv_num_threads", &me::opencv_num_threads,
        "cv::getNumThreads of the OpenCV the native ops use; None in a build without OpenCV.");
  me::bind_store(m);
}
