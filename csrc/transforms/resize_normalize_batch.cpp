// The host half of resize_normalize_batch, shared by its kernels (see resize_normalize_batch.h):
// argument checks, and cv::resize's coefficients computed with OpenCV's own float arithmetic
// (modules/imgproc/src/resize.cpp, cv::hal::resize for 8U) so that the integer pixel pass gives
// its bits.
#include "resize_normalize_batch.h"

#include <algorithm>
#include <cmath>

#include <c10/util/Exception.h>

namespace mmdet_ext::transforms {
namespace {

constexpr int kCoefScale = 1 << 11;  // INTER_RESIZE_COEF_SCALE
constexpr int64_t kMaxSide = 1 << 15;
constexpr const char* kInterpolationNames[] = {"nearest", "bilinear", "bicubic", "area",
                                               "lanczos"};

int floor_float(float value) {  // cvFloor(float)
  const int i = static_cast<int>(value);
  return i - (i > value);
}

int32_t fixed_point(float weight) {  // saturate_cast<short>(weight * 2048): round half to even
  return static_cast<int32_t>(std::lrintf(weight * static_cast<float>(kCoefScale)));
}

int64_t clamp_index(int64_t i, int64_t size) { return std::min(std::max(i, int64_t{0}), size - 1); }

// INTER_LINEAR: src coordinate (d + 0.5) * scale - 0.5 in double, then float, as cv::hal::resize.
// Columns outside the image take the border column with weight 1 (OpenCV's xmin/xmax); rows
// keep their fractional weights and read the clamped rows (its resizeGeneric_Invoker).
void linear_taps(int64_t src, int64_t dst, bool columns, std::vector<int32_t>& taps) {
  const double inv_scale = static_cast<double>(dst) / static_cast<double>(src);
  const double scale = 1.0 / inv_scale;
  for (int64_t d = 0; d < dst; ++d) {
    float f = static_cast<float>((static_cast<double>(d) + 0.5) * scale - 0.5);
    int64_t s = floor_float(f);
    f -= static_cast<float>(s);
    if (columns && s < 0) {
      f = 0.f, s = 0;
    }
    if (columns && s >= src - 1) {
      f = 0.f, s = src - 1;
    }
    taps.insert(taps.end(), {static_cast<int32_t>(clamp_index(s, src)),
                             static_cast<int32_t>(clamp_index(s + 1, src)),
                             fixed_point(1.f - f), fixed_point(f)});
  }
}

// INTER_NEAREST: floor(d / inv_scale) in double, as cv::resizeNN; a tap of weight 1.
void nearest_taps(int64_t src, int64_t dst, std::vector<int32_t>& taps) {
  const double step = 1.0 / (static_cast<double>(dst) / static_cast<double>(src));
  for (int64_t d = 0; d < dst; ++d) {
    const auto s = static_cast<int32_t>(
        std::min(static_cast<int64_t>(std::floor(static_cast<double>(d) * step)), src - 1));
    taps.insert(taps.end(), {s, s, kCoefScale, 0});
  }
}

std::vector<int64_t> host_values(const at::Tensor& t) {
  const at::Tensor host = t.cpu().contiguous();
  return std::vector<int64_t>(host.const_data_ptr<int64_t>(),
                              host.const_data_ptr<int64_t>() + host.numel());
}

}  // namespace

ResizePlan plan_resize_normalize(const at::Tensor& data, const at::Tensor& image_shapes,
                                 const at::Tensor& out_shapes, const at::Tensor& flips,
                                 int64_t interpolation, const at::Tensor& mean,
                                 const at::Tensor& std, int64_t batch_height,
                                 int64_t batch_width) {
  constexpr const char* op = "resize_normalize_batch";
  TORCH_CHECK(data.scalar_type() == at::kByte && data.dim() == 1, op,
              ": expected the images' pixels as one flat uint8 buffer [N], got ",
              data.scalar_type(), " ", data.sizes());
  TORCH_CHECK(image_shapes.scalar_type() == at::kLong && image_shapes.dim() == 2 &&
                  image_shapes.size(1) == 3,
              op, ": image_shapes must be int64 [B, 3] (height, width, channels), got ",
              image_shapes.scalar_type(), " ", image_shapes.sizes());
  const int64_t batch = image_shapes.size(0);
  TORCH_CHECK(out_shapes.scalar_type() == at::kLong && out_shapes.dim() == 2 &&
                  out_shapes.size(0) == batch && out_shapes.size(1) == 2,
              op, ": out_shapes must be int64 [B, 2] (height, width after the resize) with B = ",
              batch, ", got ", out_shapes.scalar_type(), " ", out_shapes.sizes());
  TORCH_CHECK(flips.scalar_type() == at::kLong && flips.dim() == 1 && flips.size(0) == batch,
              op, ": flips must be int64 [B] with B = ", batch, ", got ", flips.scalar_type(),
              " ", flips.sizes());
  TORCH_CHECK(interpolation >= 0 && interpolation <= 4, op, ": unknown interpolation ",
              interpolation, " (0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 lanczos)");
  TORCH_CHECK(interpolation <= 1, op, ": interpolation '", kInterpolationNames[interpolation],
              "' is not implemented; only 'nearest' and 'bilinear' reproduce cv2.resize bit for "
              "bit here (resize such images in the workers: pixels_on='worker')");
  TORCH_CHECK(batch_height >= 0 && batch_width >= 0 && batch_height <= kMaxSide &&
                  batch_width <= kMaxSide,
              op, ": batch size ", batch_height, "x", batch_width, " must be within 0..", kMaxSide);

  ResizePlan plan;
  plan.batch = batch;
  const std::vector<int64_t> shapes = host_values(image_shapes);
  const std::vector<int64_t> outs = host_values(out_shapes);
  const std::vector<int64_t> flip_codes = host_values(flips);
  plan.channels = batch > 0 ? shapes[2] : 1;
  int64_t offset = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t height = shapes[3 * b], width = shapes[3 * b + 1], channels = shapes[3 * b + 2];
    const int64_t out_h = outs[2 * b], out_w = outs[2 * b + 1];
    TORCH_CHECK(height >= 1 && width >= 1 && height <= kMaxSide && width <= kMaxSide, op,
                ": image ", b, " is ", height, "x", width, " (h x w); expected 1..", kMaxSide);
    TORCH_CHECK(channels >= 1 && channels <= 4 && channels == plan.channels, op, ": image ", b,
                " has ", channels, " channels, image 0 has ", plan.channels,
                " (one count, 1 to 4, per batch)");
    TORCH_CHECK(out_h >= 1 && out_w >= 1 && out_h <= batch_height && out_w <= batch_width, op,
                ": image ", b, " resizes to ", out_h, "x", out_w, ", which must be at least 1x1 "
                "and fit the ", batch_height, "x", batch_width, " batch");
    TORCH_CHECK(flip_codes[b] >= 0 && flip_codes[b] <= 3, op, ": image ", b, " has flip ",
                flip_codes[b], "; expected 0 (none), 1 (horizontal), 2 (vertical), 3 (diagonal)");
    const auto column_taps = static_cast<int64_t>(plan.taps.size());
    if (interpolation == 0) {
      nearest_taps(width, out_w, plan.taps);
    } else {
      linear_taps(width, out_w, true, plan.taps);
    }
    const auto row_taps = static_cast<int64_t>(plan.taps.size());
    if (interpolation == 0) {
      nearest_taps(height, out_h, plan.taps);
    } else {
      linear_taps(height, out_h, false, plan.taps);
    }
    plan.images.insert(plan.images.end(), {offset, height, width, out_h, out_w, flip_codes[b],
                                           column_taps, row_taps});
    offset += height * width * channels;
  }
  TORCH_CHECK(data.numel() == offset, op, ": the buffer holds ", data.numel(),
              " bytes but image_shapes describe ", offset);
  TORCH_CHECK(mean.numel() == plan.channels && std.numel() == plan.channels, op,
              ": mean and std need one value per channel (", plan.channels, "), got ",
              mean.numel(), " and ", std.numel());
  return plan;
}

}  // namespace mmdet_ext::transforms
