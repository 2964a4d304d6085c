// mmdet 3.3's test-time mask pasting (FCNMaskHead._predict_by_feat_single: _do_paste_mask, then
// `>= mask_thr_binary`), one output pixel at a time and device-neutral, so the CPU kernel
// (cpu/paste_mask_kernels.cpp) and the CUDA kernel (cuda/paste_mask_kernels.cu) compute the same
// bits, and neither needs the full-size mask.
//
// _do_paste_mask samples each box's M x M probabilities with F.grid_sample(bilinear, zeros,
// align_corners=False) at the image's pixel centres, all in float32:
//   g = (x + 0.5 - x1) / (x2 - x1) * 2 - 1          (torch tensor ops; an infinite g becomes 0)
//   u = (g + 1) * (M / 2) - 0.5                     (grid_sample's unnormalize)
// and the value is the bilinear mix of the four mask cells around (u, v), cells outside the mask
// reading 0. The expressions below follow torch's vectorised CPU kernel of grid_sample
// (aten/src/ATen/native/cpu/GridSamplerKernel.cpp) as torch 2.13's x86-64 AVX2 and AVX512
// kernels compute it: their results are those of fused multiply-adds for
// `(in + 1) * scaling - 0.5` and for the sum of the four weighted cells (the compiler contracts
// them; both kernels checked with ATEN_CPU_CAPABILITY), so those are explicit fmaf calls here
// (the rest of the build has contraction off). tests/test_predicted_masks.py pins this against
// mmdet on random boxes and fails without either fmaf. torch's scalar kernel
// (ATEN_CPU_CAPABILITY=default) rounds some values differently in the last bit, and so may its
// CUDA kernel (which computes the weights as (low + 1 - u) products).
#pragma once

#include <cmath>
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "../host_device.h"

namespace mmdet_ext::masks {

// The image columns (or rows) [begin, end) that mmdet fills for one box along one axis.
struct PasteSpan {
  int64_t begin, end;
};

// skip_empty (mmdet's CPU path, which pastes one box at a time): from floor(lo) - 1 to
// ceil(hi) + 1, clamped to the image, computed in float32 as mmdet does; mmdet raises where
// begin > end (a box more than a pixel outside the image, or one with x2 < x1 by more than about
// two pixels), which gives the empty span here. Otherwise (its GPU path) the whole image.
MMDET_EXT_HOST_DEVICE inline PasteSpan paste_span(float lo, float hi, int64_t size,
                                                  bool skip_empty) {
  if (!skip_empty) {
    return {0, size};
  }
  const float limit = static_cast<float>(size);
  float begin = floorf(lo) - 1.0f;
  float end = ceilf(hi) + 1.0f;
  begin = begin < 0.0f ? 0.0f : (begin > limit ? limit : begin);
  end = end < 0.0f ? 0.0f : (end > limit ? limit : end);
  // Clamped again in integers: float32(size) may round up past the image (sizes above 2^24).
  const int64_t b = static_cast<int64_t>(begin) < size ? static_cast<int64_t>(begin) : size;
  const int64_t e = static_cast<int64_t>(end) < size ? static_cast<int64_t>(end) : size;
  return {b, e > b ? e : b};
}

// Where pixel centre `pixel` + 0.5 samples a mask of `size` cells along one axis of a box
// [lo, lo + extent]: grid_sample's floor of the coordinate, the distance past it and 1 - that.
struct PasteTap {
  bool valid;  // a cell at low or low + 1 lies inside the mask; else the value is 0 (or NaN)
  int low;
  float frac, rest;
};

MMDET_EXT_HOST_DEVICE inline PasteTap paste_tap(int64_t pixel, float lo, float extent,
                                                int size) {
  const float centre = static_cast<float>(pixel) + 0.5f;
  float g = (centre - lo) / extent * 2.0f - 1.0f;
  if (fabsf(g) == INFINITY) {  // mmdet zeroes infinite grid values (a zero-extent box)
    g = 0.0f;
  }
  const float coordinate = fmaf(g + 1.0f, static_cast<float>(size) / 2.0f, -0.5f);
  const float low = floorf(coordinate);
  PasteTap tap{};
  // False for NaN: grid_sample's cells are then all outside and its weights NaN.
  tap.valid = low >= -1.0f && low <= static_cast<float>(size - 1);
  if (tap.valid) {
    tap.low = static_cast<int>(low);
    tap.frac = coordinate - low;
    tap.rest = 1.0f - tap.frac;
  }
  return tap;
}

// Cell (row, col) of a row-major mask `width` cells wide, or 0 outside it (grid_sample's zeros
// padding).
MMDET_EXT_HOST_DEVICE inline float paste_cell(const float* mask, int width, bool inside,
                                              int row, int col) {
  return inside ? mask[static_cast<int64_t>(row) * width + col] : 0.0f;
}

// grid_sample's value at taps (y, x) of a row-major height x width float32 mask; both taps valid.
MMDET_EXT_HOST_DEVICE inline float paste_value(const float* mask, int height, int width,
                                               const PasteTap& y, const PasteTap& x) {
  const bool west = x.low >= 0, east = x.low + 1 < width;
  const bool north = y.low >= 0, south = y.low + 1 < height;
  const float nw = y.rest * x.rest, ne = y.rest * x.frac;
  const float sw = y.frac * x.rest, se = y.frac * x.frac;
  float value = paste_cell(mask, width, north && west, y.low, x.low) * nw;
  value = fmaf(paste_cell(mask, width, north && east, y.low, x.low + 1), ne, value);
  value = fmaf(paste_cell(mask, width, south && west, y.low + 1, x.low), sw, value);
  return fmaf(paste_cell(mask, width, south && east, y.low + 1, x.low + 1), se, value);
}

// One box as _do_paste_mask reads it: corners and the float32 extents it divides by.
struct PasteBox {
  float x1, y1, extent_x, extent_y;
  PasteSpan columns, rows;

  MMDET_EXT_HOST_DEVICE PasteBox(const float* box, int64_t height, int64_t width,
                                 bool skip_empty)
      : x1(box[0]),
        y1(box[1]),
        extent_x(box[2] - box[0]),
        extent_y(box[3] - box[1]),
        columns(paste_span(box[0], box[2], width, skip_empty)),
        rows(paste_span(box[1], box[3], height, skip_empty)) {}

  MMDET_EXT_HOST_DEVICE PasteTap column_tap(int64_t x, int mask_width) const {
    return paste_tap(x, x1, extent_x, mask_width);
  }
  MMDET_EXT_HOST_DEVICE PasteTap row_tap(int64_t y, int mask_height) const {
    return paste_tap(y, y1, extent_y, mask_height);
  }
};

// The checked arguments of paste_masks_to_rle (host).
struct PasteArgs {
  int64_t num_masks;
  int mask_height, mask_width;
  float threshold;  // mmdet compares float32 values with the threshold cast to float32
};

// Checks masks (N, M_h, M_w) float32, boxes (N, 4) float32 with finite coordinates (`boxes` on
// the host), the image size (check_image_size) and 0 < threshold (finite).
PasteArgs read_paste_args(const char* op, const at::Tensor& masks, const at::Tensor& boxes,
                          int64_t height, int64_t width, double threshold);

}  // namespace mmdet_ext::masks
