// CPU kernel of mmdet_ext::decode_image: decode_image_to_mat (image_decoder.h) into a tensor that
// owns the cv::Mat, so the pixels are never copied after decoding; or, with `planar`, split once
// into channel planes ([C, H, W]), the layout PackDetInputs produces, so that it copies nothing.
// A build without OpenCV or libjpeg registers a kernel that says so instead
// (optional_libraries.h).
#include <c10/util/Optional.h>

#include <torch/library.h>
#include <torch/types.h>

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
#include <memory>
#include <vector>

#include <opencv2/core.hpp>

#include "../image_decoder.h"
#else
#include "optional_libraries.h"
#endif

namespace mmdet_ext {
namespace {

// Optional op arguments are c10::optional in kernel signatures: torch < 2.4 matches a kernel to its
// schema only through c10::optional (its own class there), newer torch makes it std::optional.

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)

at::Tensor decode_image_cpu(const at::Tensor& data, int64_t flags, int64_t scale_denom,
                            c10::optional<int64_t> max_pixels, bool planar) {
  TORCH_CHECK(data.device().is_cpu(), "decode_image: expected the encoded bytes on the CPU, got ",
              data.device());
  TORCH_CHECK(data.scalar_type() == at::kByte && data.dim() == 1,
              "decode_image: expected a 1-D uint8 tensor of encoded bytes, got ",
              data.scalar_type(), " with shape ", data.sizes());

  const at::Tensor bytes = data.contiguous();
  auto decoded = std::make_shared<cv::Mat>(
      decode_image_to_mat(bytes.data_ptr<uint8_t>(), bytes.numel(), flags, scale_denom,
                          max_pixels.value_or(kDefaultMaxPixels)));

  const int64_t height = decoded->rows;
  const int64_t width = decoded->cols;
  const int64_t channels = decoded->channels();
  if (planar && channels > 1) {
    at::Tensor out = at::empty({channels, height, width}, at::kByte);
    std::vector<cv::Mat> planes;
    for (int64_t c = 0; c < channels; ++c) {
      planes.emplace_back(static_cast<int>(height), static_cast<int>(width), CV_8UC1,
                          out.data_ptr<uint8_t>() + c * height * width);
    }
    // Each plane already has its size and type, so cv::split writes into `out`'s memory.
    cv::split(*decoded, planes);
    return out;
  }
  // The deleter keeps the Mat (and its pixel buffer) alive exactly as long as the tensor.
  const std::vector<int64_t> shape = planar ? std::vector<int64_t>{channels, height, width}
                                            : std::vector<int64_t>{height, width, channels};
  return torch::from_blob(
      decoded->data, shape, [decoded](void*) mutable { decoded.reset(); },
      torch::TensorOptions().dtype(torch::kUInt8));
}

#else

at::Tensor decode_image_cpu(const at::Tensor&, int64_t, int64_t, c10::optional<int64_t>, bool) {
#ifdef MMDET_EXT_WITH_OPENCV
  fail_built_without("decode_image", "libjpeg");
#else
  fail_built_without("decode_image", "OpenCV");
#endif
}

#endif

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("decode_image", &decode_image_cpu);
}

}  // namespace mmdet_ext
