// mmdet_ext::normalize_batch for every device: the argument checks (host) and the per-pixel
// formula (device-neutral), shared by cpu/normalize_batch_kernel.cpp and
// cuda/normalize_batch_kernel.cu so both give the same bits.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "../host_device.h"

namespace mmdet_ext::transforms {

// (x - mean) / std in float32, the same two roundings torch's ops make (no fused multiply-add).
MMDET_EXT_HOST_DEVICE inline float normalized_pixel(uint8_t value, float mean, float std) {
  return (static_cast<float>(value) - mean) / std;
}

// Checks the arguments (images: uint8 [B, C, H, W] on any device; mean, std: C values;
// image_sizes: int64 [B, 2] within the batch) and returns image_sizes on the host, flattened
// (height, width of each image).
std::vector<int64_t> check_normalize_args(const at::Tensor& images, const at::Tensor& mean,
                                          const at::Tensor& std, const at::Tensor& image_sizes);

}  // namespace mmdet_ext::transforms
