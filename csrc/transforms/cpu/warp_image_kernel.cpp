// CPU kernel of mmdet_ext::warp_image: resize then flip an HxWxC uint8 image in one native call and
// write it channel-planar (CxHxW), the layout the model takes: PackDetInputs' HWC -> CHW copy then
// finds the pixels already in place and copies nothing. The arithmetic is OpenCV's cv::resize, the
// call mmcv.imresize makes, and the flip gives cv::flip's (mmcv.imflip's) bits (warp_planar.h). A
// build without OpenCV registers a kernel that says so instead (optional_libraries.h).
#include <torch/library.h>
#include <torch/types.h>

#ifdef MMDET_EXT_WITH_OPENCV
#include <opencv2/core.hpp>

#include "../warp_planar.h"
#else
#include "optional_libraries.h"
#endif

namespace mmdet_ext {
namespace {

#ifdef MMDET_EXT_WITH_OPENCV

int opencv_type(const at::Tensor& image) {
  return CV_MAKETYPE(CV_8U, static_cast<int>(image.size(2)));
}

cv::Mat as_mat(const at::Tensor& image) {
  return cv::Mat(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)),
                 opencv_type(image), image.data_ptr<uint8_t>());
}

at::Tensor warp_image_cpu(const at::Tensor& image, int64_t out_height, int64_t out_width,
                          int64_t interpolation, int64_t flip, at::OptionalIntArrayRef keep) {
  TORCH_CHECK(image.device().is_cpu() && image.scalar_type() == at::kByte && image.dim() == 3,
              "warp_image: expected a CPU uint8 tensor [H, W, C], got ", image.scalar_type(),
              " ", image.sizes(), " on ", image.device());
  TORCH_CHECK(image.size(2) >= 1 && image.size(2) <= 4, "warp_image: expected 1 to 4 channels, "
              "got ", image.size(2));
  TORCH_CHECK(image.size(0) > 0 && image.size(1) > 0, "warp_image: the image is empty ",
              image.sizes());
  TORCH_CHECK(!keep.has_value() || keep->size() == 4,
              "warp_image: keep must be (y, x, height, width), got ", *keep);
  const int64_t* kept = keep.has_value() ? keep->data() : nullptr;
  check_warp_arguments("warp_image", out_height, out_width, interpolation, flip, kept);

  const at::Tensor src_tensor = image.contiguous();
  const cv::Size out_size(static_cast<int>(out_width), static_cast<int>(out_height));
  const cv::Rect part = kept_part(out_size, kept);
  at::Tensor out = at::empty({image.size(2), part.height, part.width}, image.options());
  warp_into_planar(as_mat(src_tensor), out_size, static_cast<int>(interpolation),
                   static_cast<int>(flip), out.data_ptr<uint8_t>(), -1, -1, part);
  return out;
}

#else

at::Tensor warp_image_cpu(const at::Tensor&, int64_t, int64_t, int64_t, int64_t,
                          at::OptionalIntArrayRef) {
  fail_built_without("warp_image", "OpenCV");
}

#endif

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("warp_image", &warp_image_cpu);
}

}  // namespace mmdet_ext
