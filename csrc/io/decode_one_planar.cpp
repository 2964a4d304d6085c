// decode_one_planar.h: one image decoded into its planar place, resized and flipped on the way.
#include "io/decode_one_planar.h"

#include <vector>

#include <c10/util/Exception.h>
#include <opencv2/core.hpp>

#include "image_decoder.h"
#include "transforms/warp_planar.h"

namespace mmdet_ext {

void decode_one_planar(const uint8_t* data, int64_t size, int64_t flags, int64_t scale_denom,
                       int64_t max_pixels, const int64_t* shape, const Warp* warp,
                       const Layout& layout, uint8_t* dst) {
  const cv::Mat decoded =
      decode_image_to_mat(data, size, flags, scale_denom, max_pixels);
  TORCH_CHECK(decoded.channels() == shape[0] && decoded.rows == shape[1] &&
                  decoded.cols == shape[2],
              "decoded to ", decoded.channels(), "x", decoded.rows, "x", decoded.cols,
              " (C x H x W), expected ", shape[0], "x", shape[1], "x", shape[2]);
  if (warp != nullptr) {
    const int64_t* hwf = warp->out_hw_flip;
    warp_into_planar(decoded, cv::Size(static_cast<int>(hwf[1]), static_cast<int>(hwf[0])),
                     warp->interpolation, static_cast<int>(hwf[2]), dst, layout.plane_step,
                     layout.row_step);
    return;
  }
  std::vector<cv::Mat> planes;
  for (int64_t c = 0; c < shape[0]; ++c) {
    planes.emplace_back(decoded.rows, decoded.cols, CV_8UC1, dst + c * layout.plane_step,
                        static_cast<size_t>(layout.row_step));
  }
  split_into_planes(decoded, planes);  // each plane has its size and type: written into `out`
}

std::string error_text(const std::exception& err) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&err)) {
    return c10_error->what_without_backtrace();
  }
  return err.what();
}

}  // namespace mmdet_ext
