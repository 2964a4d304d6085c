// mmdet_ext::resize_normalize_batch for every device: the plan (argument checks and OpenCV's
// resize coefficients, computed on the host) and the per-pixel arithmetic (device-neutral),
// shared by cpu/resize_normalize_batch_kernel.cpp and cuda/resize_normalize_batch_kernel.cu so
// both give the same bits.
//
// The resize is cv::resize's for uint8 (what mmcv.imresize calls): the coefficients are
// OpenCV's float computations, rounded to 11-bit fixed point (INTER_RESIZE_COEF_BITS) on the
// host, and the pixel arithmetic is integer only, so a GPU computes the same bits as the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../host_device.h"

namespace mmdet_ext::transforms {

// One output column (or row) of a resize: the two source columns (rows) it reads, already
// clamped to the image, and their fixed-point weights (sum 2048).
constexpr int kTapFields = 4;  // {index0, index1, weight0, weight1}

// Per image of the plan: where its pixels start in the flat buffer, its size, its output size,
// its flip (0 none, 1 horizontal, 2 vertical, 3 both) and where its column and row taps start.
enum ImageField : int {
  kDataOffset, kHeight, kWidth, kOutHeight, kOutWidth, kFlip, kColumnTaps, kRowTaps,
  kImageFields
};

// What both kernels need, built on the host: images[b * kImageFields + field], taps (int32).
struct ResizePlan {
  int64_t batch = 0;
  int64_t channels = 0;
  std::vector<int64_t> images;
  std::vector<int32_t> taps;
};

// Checks the arguments and computes the taps. data: uint8 [N] (any device); image_shapes: int64
// [B, 3] (height, width, channels of each image, packed one after another, CHW); out_shapes:
// int64 [B, 2]; flips: int64 [B]; interpolation: 0 nearest, 1 bilinear (cv::InterpolationFlags;
// the others are refused by name); mean, std: C values; the batch (batch_height x batch_width)
// must hold every output.
ResizePlan plan_resize_normalize(const at::Tensor& data, const at::Tensor& image_shapes,
                                 const at::Tensor& out_shapes, const at::Tensor& flips,
                                 int64_t interpolation, const at::Tensor& mean,
                                 const at::Tensor& std, int64_t batch_height,
                                 int64_t batch_width);

// One output value of cv::resize (uint8, INTER_LINEAR or INTER_NEAREST through its taps), in
// two steps a kernel may also call apart (the CPU kernel hoists the row pointers):
// channel `channel` at the output column with taps `column` and the output row with taps `row`
// of the channel-planar image `image` (C x `height` x `width`, as PackDetInputs packs it).
//
// The horizontal pass is exact integer arithmetic (source x 2048). The vertical pass is the one
// of OpenCV's VResizeLinearVec_32s8u (drop 4 bits, 16x16 -> high 16 bits, round off 2 bits),
// not its scalar FixedPtCast (round off 22 bits): the two differ on ~10% of pixels, and
// opencv-python (4.11, x86-64) gives the vectorised result for every column, the last ones
// included (tests/test_resize_normalize.py compares every column with cv2.resize). cv::resize's
// exact 2x downscale (INTER_AREA in disguise) is the same arithmetic with weights 1024/1024.
MMDET_EXT_HOST_DEVICE inline int32_t horizontal_pass(const uint8_t* source_row,
                                                     const int32_t* column) {
  return source_row[column[0]] * column[2] + source_row[column[1]] * column[3];
}

MMDET_EXT_HOST_DEVICE inline uint8_t vertical_pass(int32_t top, int32_t bottom,
                                                   const int32_t* row) {
  // top >> 4 <= 255 * 2048 / 16 fits int16 (v_pack never saturates); weights are 0..2048.
  const int32_t sum = (((top >> 4) * row[2]) >> 16) + (((bottom >> 4) * row[3]) >> 16);
  const int32_t value = (sum + 2) >> 2;
  return static_cast<uint8_t>(value < 0 ? 0 : (value > 255 ? 255 : value));
}

MMDET_EXT_HOST_DEVICE inline uint8_t resized_pixel(const uint8_t* image, int64_t height,
                                                   int64_t width, int64_t channel,
                                                   const int32_t* column, const int32_t* row) {
  const uint8_t* plane = image + channel * height * width;
  return vertical_pass(horizontal_pass(plane + row[0] * width, column),
                       horizontal_pass(plane + row[1] * width, column), row);
}

// The source-order output index of output index `i` (of `size`) under a flip along that axis.
MMDET_EXT_HOST_DEVICE inline int64_t unflipped(int64_t i, int64_t size, bool flipped) {
  return flipped ? size - 1 - i : i;
}

}  // namespace mmdet_ext::transforms
