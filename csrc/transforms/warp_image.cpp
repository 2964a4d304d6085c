// CPU kernel of mmdet_ext::warp_image: resize then flip an HxWxC uint8 image in one native call and
// write it channel-planar (CxHxW), the layout the model takes: PackDetInputs' HWC -> CHW copy then
// finds the pixels already in place and copies nothing. The arithmetic is OpenCV's (cv::resize,
// cv::flip), the same calls mmcv.imresize/imflip make. A build without OpenCV registers a kernel
// that says so instead (optional_libraries.h).
#include <torch/library.h>
#include <torch/types.h>

#ifdef MMDET_EXT_WITH_OPENCV
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#else
#include "optional_libraries.h"
#endif

namespace mmdet_ext {
namespace {

#ifdef MMDET_EXT_WITH_OPENCV

// flip: 0 none, 1 horizontal, 2 vertical, 3 diagonal (both), mmcv's direction names in order.
constexpr int kFlipCodes[] = {0, 1, 0, -1};  // cv::flip's codes for 1..3 (index 0 unused)

int opencv_type(const at::Tensor& image) {
  return CV_MAKETYPE(CV_8U, static_cast<int>(image.size(2)));
}

cv::Mat as_mat(const at::Tensor& image) {
  return cv::Mat(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)),
                 opencv_type(image), image.data_ptr<uint8_t>());
}

at::Tensor warp_image_cpu(const at::Tensor& image, int64_t out_height, int64_t out_width,
                          int64_t interpolation, int64_t flip) {
  TORCH_CHECK(image.device().is_cpu() && image.scalar_type() == at::kByte && image.dim() == 3,
              "warp_image: expected a CPU uint8 tensor [H, W, C], got ", image.scalar_type(),
              " ", image.sizes(), " on ", image.device());
  TORCH_CHECK(image.size(2) >= 1 && image.size(2) <= 4, "warp_image: expected 1 to 4 channels, "
              "got ", image.size(2));
  TORCH_CHECK(image.size(0) > 0 && image.size(1) > 0, "warp_image: the image is empty ",
              image.sizes());
  TORCH_CHECK(out_height > 0 && out_width > 0 && out_height <= (1 << 15) &&
                  out_width <= (1 << 15),
              "warp_image: output size ", out_height, "x", out_width,
              " (h x w) must be within 1..32768 (an absurd resize target)");
  TORCH_CHECK(interpolation >= cv::INTER_NEAREST && interpolation <= cv::INTER_LANCZOS4,
              "warp_image: unknown interpolation ", interpolation,
              " (0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 lanczos)");
  TORCH_CHECK(flip >= 0 && flip <= 3, "warp_image: flip must be 0 (none), 1 (horizontal), "
              "2 (vertical) or 3 (diagonal), got ", flip);

  const at::Tensor src_tensor = image.contiguous();
  const cv::Mat src = as_mat(src_tensor);
  const int channels = static_cast<int>(image.size(2));
  const cv::Size out_size(static_cast<int>(out_width), static_cast<int>(out_height));
  cv::Mat warped = src;
  if (out_size != src.size()) {
    cv::resize(src, warped, out_size, 0, 0, static_cast<int>(interpolation));
  }
  if (flip != 0) {
    cv::Mat flipped;
    cv::flip(warped, flipped, kFlipCodes[flip]);
    warped = flipped;
  }
  at::Tensor out = at::empty({image.size(2), out_height, out_width}, image.options());
  std::vector<cv::Mat> planes;
  for (int c = 0; c < channels; ++c) {  // each plane views the output tensor's memory
    planes.emplace_back(out_size, CV_8UC1, out[c].data_ptr<uint8_t>());
  }
  if (channels == 1) {
    warped.copyTo(planes[0]);
  } else {
    cv::split(warped, planes);
  }
  for (int c = 0; c < channels; ++c) {
    TORCH_CHECK(planes[c].data == out[c].data_ptr<uint8_t>(),
                "warp_image: OpenCV reallocated output plane ", c);
  }
  return out;
}

#else

at::Tensor warp_image_cpu(const at::Tensor&, int64_t, int64_t, int64_t, int64_t) {
  fail_built_without("warp_image", "OpenCV");
}

#endif

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("warp_image", &warp_image_cpu);
}

}  // namespace mmdet_ext
