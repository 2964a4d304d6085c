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

Layout place_image(const char* op, const std::string& image, const int64_t* shape,
                   const int64_t* warp, int64_t interpolation, const int64_t* slot_hw,
                   int64_t offset, int64_t out_bytes) {
  TORCH_CHECK(shape[0] >= 1 && shape[0] <= 4 && shape[1] > 0 && shape[2] > 0, op, ": ", image,
              ": bad expected shape ", shape[0], "x", shape[1], "x", shape[2]);
  int64_t height = shape[1];
  int64_t width = shape[2];
  if (warp != nullptr) {
    check_warp_arguments(op, warp[0], warp[1], interpolation, warp[2]);
    height = warp[0];
    width = warp[1];
  }
  Layout layout{height * width, width};
  if (slot_hw != nullptr) {
    TORCH_CHECK(height <= slot_hw[0] && width <= slot_hw[1], op, ": ", image, " is ", height,
                "x", width, " (h x w), larger than its ", slot_hw[0], "x", slot_hw[1], " slot");
    layout = Layout{slot_hw[0] * slot_hw[1], slot_hw[1]};
  }
  const int64_t size = shape[0] * layout.plane_step;
  TORCH_CHECK(offset >= 0 && offset <= out_bytes - size, op, ": ", image, " (", size,
              " bytes at offset ", offset, ") does not fit in out (", out_bytes, " bytes)");
  return layout;
}

std::string error_text(const std::exception& err) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&err)) {
    return c10_error->what_without_backtrace();
  }
  return err.what();
}

}  // namespace mmdet_ext
