// CPU kernel of mmdet_ext::resize_part: the part of an HxWxC uint8 image's bilinear resize that a
// crop keeps, HxWxC, computed alone where cv::resize computes it with its fixed-point arithmetic
// (resize_part.h); elsewhere (a resize to the same size, OpenCV's exact halving: both local) from
// the pixels under the part, by a copy or cv::resize. The image may be a window of a larger one
// (`source`: its y, x in the larger image and the larger image's height, width). A build without
// OpenCV registers a kernel that says so.
#include <torch/library.h>
#include <torch/types.h>

#ifdef MMDET_EXT_WITH_OPENCV
#include <opencv2/imgproc.hpp>

#include "../resize_part.h"
#include "../warp_planar.h"
#else
#include "optional_libraries.h"
#endif

namespace mmdet_ext {
namespace {

#ifdef MMDET_EXT_WITH_OPENCV

at::Tensor resize_part_cpu(const at::Tensor& image, int64_t out_height, int64_t out_width,
                           at::IntArrayRef keep, at::IntArrayRef source) {
  TORCH_CHECK(image.device().is_cpu() && image.scalar_type() == at::kByte && image.dim() == 3,
              "resize_part: expected a CPU uint8 tensor [H, W, C], got ", image.scalar_type(),
              " ", image.sizes(), " on ", image.device());
  TORCH_CHECK(image.size(2) >= 1 && image.size(2) <= 4, "resize_part: expected 1 to 4 channels, "
              "got ", image.size(2));
  TORCH_CHECK(image.size(0) > 0 && image.size(1) > 0, "resize_part: the image is empty ",
              image.sizes());
  TORCH_CHECK(keep.size() == 4, "resize_part: keep must be (y, x, height, width), got ", keep);
  check_warp_arguments("resize_part", out_height, out_width, cv::INTER_LINEAR, 0, keep.data());
  TORCH_CHECK(source.empty() || source.size() == 4, "resize_part: source must be (y, x, height, "
              "width) of the image the tensor is a window of, or empty, got ", source);
  const cv::Point origin = source.empty() ? cv::Point() : cv::Point(static_cast<int>(source[1]),
                                                                    static_cast<int>(source[0]));
  const cv::Size full = source.empty() ? cv::Size(static_cast<int>(image.size(1)),
                                                  static_cast<int>(image.size(0)))
                                       : cv::Size(static_cast<int>(source[3]),
                                                  static_cast<int>(source[2]));
  TORCH_CHECK(origin.x >= 0 && origin.y >= 0 && origin.x + image.size(1) <= full.width &&
              origin.y + image.size(0) <= full.height, "resize_part: a ", image.size(0), "x",
              image.size(1), " window at (y, x) = (", origin.y, ", ", origin.x,
              ") is not inside a ", full.height, "x", full.width, " image");

  const at::Tensor src_tensor = image.contiguous();
  const int channels = static_cast<int>(image.size(2));
  const cv::Mat src(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)),
                    CV_MAKETYPE(CV_8U, channels), src_tensor.data_ptr<uint8_t>());
  const cv::Size out_size(static_cast<int>(out_width), static_cast<int>(out_height));
  const cv::Rect part = kept_part(out_size, keep.data());
  at::Tensor out = at::empty({part.height, part.width, channels}, image.options());
  cv::Mat dst(part.height, part.width, src.type(), out.data_ptr<uint8_t>());
  bool inside = true;
  if (linear_part::computes_like_resize(full, out_size)) {
    inside = linear_part::resize_part(src, out_size, part, dst, full, origin);
  } else {
    // the same size: a copy; an exact halving: each pixel the mean of its 2x2 source block
    const int factor = out_size == full ? 1 : 2;
    const cv::Rect under(part.x * factor - origin.x, part.y * factor - origin.y,
                         part.width * factor, part.height * factor);
    inside = (under & cv::Rect(cv::Point(), src.size())) == under;
    if (inside && factor == 1) src(under).copyTo(dst);
    if (inside && factor == 2) cv::resize(src(under), dst, part.size(), 0, 0, cv::INTER_LINEAR);
  }
  TORCH_CHECK(inside, "resize_part: the ", image.size(0), "x", image.size(1), " window at (y, x) "
              "= (", origin.y, ", ", origin.x, ") lacks pixels the part ", keep, " of the ",
              out_height, "x", out_width, " resize reads");
  return out;
}

#else

at::Tensor resize_part_cpu(const at::Tensor&, int64_t, int64_t, at::IntArrayRef,
                           at::IntArrayRef) {
  fail_built_without("resize_part", "OpenCV");
}

#endif

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("resize_part", &resize_part_cpu);
}

}  // namespace mmdet_ext
