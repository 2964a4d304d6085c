// The Python module mmdet_ext._C. Importing it runs the TORCH_LIBRARY registrations of every op;
// the functions here describe the build, so Python can tell a stale extension from a fresh one, and
// set the thread pool of the OpenCV it links (Debian's, not the cv2 wheel's).
#include <opencv2/core/utility.hpp>
#include <opencv2/core/version.hpp>
#include <torch/extension.h>
#include <torch/version.h>

#include "io/image_decoder.h"
#include "store/store_bindings.h"

#ifndef MMDET_EXT_SOURCE_HASH
#error "setup.py passes MMDET_EXT_SOURCE_HASH; build with `pip install --no-build-isolation -e .`"
#endif

PYBIND11_MODULE(_C, m) {
  m.doc() = "mmdet_ext native extension (ops are under torch.ops.mmdet_ext)";
  m.def("source_hash", [] { return std::string(MMDET_EXT_SOURCE_HASH); },
        "SHA-256 of the csrc/ sources this extension was compiled from.");
  m.def("opencv_version", [] { return std::string(CV_VERSION); },
        "Version of the OpenCV headers the extension was compiled against.");
  m.def("torch_version", [] { return std::string(TORCH_VERSION); },
        "Version of the torch headers the extension was compiled against.");
  m.def("with_cuda", [] {
#ifdef MMDET_EXT_WITH_CUDA
    return true;
#else
    return false;
#endif
  }, "Whether CUDA kernels were compiled in.");
  m.def("default_max_pixels", [] { return mmdet_ext::kDefaultMaxPixels; },
        "The one image pixel limit (mmdet_ext.io.DEFAULT_MAX_PIXELS), defined in C++.");
  // DataLoader workers must not each start an OpenCV thread pool (N workers x M threads fight
  // for the same cores); cv2.setNumThreads only reaches the cv2 wheel's own copy of OpenCV.
  m.def("set_opencv_num_threads", [](int threads) { cv::setNumThreads(threads); },
        "cv::setNumThreads for the OpenCV the native ops use (0: run in the calling thread).");
  m.def("opencv_num_threads", [] { return cv::getNumThreads(); },
        "cv::getNumThreads of the OpenCV the native ops use.");
  mmdet_ext::bind_store(m);
}
