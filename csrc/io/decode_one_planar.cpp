// decode_one_planar.h: one image decoded into its planar place, resized and flipped on the way.
#include "io/decode_one_planar.h"

#include <algorithm>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <opencv2/core.hpp>

#include "image_decoder.h"
#include "transforms/warp_planar.h"

namespace mmdet_ext {
namespace {

void decode_into(const DecodeTask& task) {
  const cv::Mat decoded = decode_image_to_mat(task.data, task.data_size, task.flags,
                                              task.scale_denom, task.max_pixels);
  const int64_t* shape = task.shape;
  TORCH_CHECK(decoded.channels() == shape[0] && decoded.rows == shape[1] &&
                  decoded.cols == shape[2],
              "decoded to ", decoded.channels(), "x", decoded.rows, "x", decoded.cols,
              " (C x H x W), expected ", shape[0], "x", shape[1], "x", shape[2]);
  const Layout& layout = task.layout;
  if (task.warped) {
    const Warp& warp = task.warp;
    warp_into_planar(decoded,
                     cv::Size(static_cast<int>(warp.out_width), static_cast<int>(warp.out_height)),
                     static_cast<int>(warp.interpolation), static_cast<int>(warp.flip), task.dst,
                     layout.plane_step, layout.row_step,
                     kept_part(cv::Size(static_cast<int>(warp.out_width),
                                        static_cast<int>(warp.out_height)),
                               warp.keep));
    return;
  }
  std::vector<cv::Mat> planes;
  for (int64_t c = 0; c < shape[0]; ++c) {
    planes.emplace_back(decoded.rows, decoded.cols, CV_8UC1, task.dst + c * layout.plane_step,
                        static_cast<size_t>(layout.row_step));
  }
  split_into_planes(decoded, planes);  // each plane has its size and type: written into `dst`
}

}  // namespace

std::string run_decode(const DecodeTask& task) {
  try {
    decode_into(task);
    return {};
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  }
}

DecodeTask plan_decode(const char* op, int64_t tag, const uint8_t* data, int64_t data_size,
                       uint8_t* out, int64_t out_bytes, int64_t offset, int64_t flags,
                       int64_t scale_denom, int64_t max_pixels, const int64_t* shape,
                       const int64_t* warp, const int64_t* keep, int64_t interpolation,
                       const int64_t* slot_hw) {
  TORCH_CHECK(shape[0] >= 1 && shape[0] <= 4 && shape[1] > 0 && shape[2] > 0, op, ": image ",
              tag, ": bad expected shape ", shape[0], "x", shape[1], "x", shape[2]);
  TORCH_CHECK(keep == nullptr || warp != nullptr, op, ": image ", tag,
              ": a kept part needs a warp");
  DecodeTask task{tag, data, data_size, nullptr, flags, scale_denom, max_pixels,
                  {shape[0], shape[1], shape[2]}, warp != nullptr,
                  Warp{0, 0, 0, interpolation, {0, 0, 0, 0}},
                  Layout{shape[1] * shape[2], shape[2]}};
  int64_t height = shape[1];
  int64_t width = shape[2];
  if (warp != nullptr) {
    check_warp_arguments(op, warp[0], warp[1], interpolation, warp[2], keep);
    task.warp = Warp{warp[0], warp[1], warp[2], interpolation,
                     {0, 0, warp[0], warp[1]}};
    if (keep != nullptr) std::copy(keep, keep + 4, task.warp.keep);
    height = task.warp.keep[2];
    width = task.warp.keep[3];
    task.layout = Layout{height * width, width};
  }
  if (slot_hw != nullptr) {
    TORCH_CHECK(height <= slot_hw[0] && width <= slot_hw[1], op, ": image ", tag, " is ", height,
                "x", width, " (h x w), larger than its ", slot_hw[0], "x", slot_hw[1], " slot");
    task.layout = Layout{slot_hw[0] * slot_hw[1], slot_hw[1]};
  }
  const int64_t size = shape[0] * task.layout.plane_step;
  TORCH_CHECK(offset >= 0 && offset <= out_bytes - size, op, ": image ", tag, " (", size,
              " bytes at offset ", offset, ") does not fit in out (", out_bytes, " bytes)");
  task.dst = out + offset;
  return task;
}

}  // namespace mmdet_ext
