// CUDA kernel of mmdet_ext::normalize_batch (CPU twin: ../cpu/normalize_batch_kernel.cpp): the
// padded uint8 batch already on the GPU to the detector's float input in one pass, a block per
// output row, with the same per-pixel formula (../normalize_batch.h) and so the same bits.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../cuda_launch.cuh"
#include "../normalize_batch.h"

namespace mmdet_ext {
namespace {

// Row r of the output is (b, c, y) = (r / (C * H), r / H % C, r % H).
__global__ void normalize_batch_kernel(const uint8_t* images, const float* mean, const float* std,
                                       const int64_t* sizes, bool reverse_channels,
                                       float pad_value, int64_t batch, int64_t channels,
                                       int64_t height, int64_t width, float* out) {
  const int64_t rows = batch * channels * height;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t y = r % height, c = (r / height) % channels, b = r / (height * channels);
    const int64_t src_c = reverse_channels ? channels - 1 - c : c;
    const uint8_t* src = images + ((b * channels + src_c) * height + y) * width;
    // Columns past the image's own width, or every column of a row past its height, are padding.
    const int64_t valid = y < sizes[2 * b] ? sizes[2 * b + 1] : 0;
    const float m = mean[c], s = std[c];
    float* row = out + r * width;
    for (int64_t x = threadIdx.x; x < width; x += blockDim.x) {
      row[x] = x < valid ? transforms::normalized_pixel(src[x], m, s) : pad_value;
    }
  }
}

at::Tensor normalize_batch_cuda(const at::Tensor& images, const at::Tensor& mean,
                                const at::Tensor& std, bool reverse_channels,
                                const at::Tensor& image_sizes, double pad_value) {
  TORCH_CHECK(images.is_cuda(), "normalize_batch: expected the batch on a CUDA device (mean, "
              "std and image_sizes may be anywhere), got ", images.device());
  const std::vector<int64_t> sizes =
      transforms::check_normalize_args(images, mean, std, image_sizes);
  const c10::cuda::CUDAGuard guard(images.device());
  const at::Tensor src = images.contiguous();
  const at::Tensor means = cuda::to_device(mean.to(at::kFloat), images.device());
  const at::Tensor stds = cuda::to_device(std.to(at::kFloat), images.device());
  const at::Tensor sizes_on_device = cuda::to_device(sizes, images.device());
  at::Tensor out = at::empty(images.sizes(), images.options().dtype(at::kFloat));
  if (out.numel() == 0) {
    return out;
  }
  const int64_t rows = images.size(0) * images.size(1) * images.size(2);
  normalize_batch_kernel<<<cuda::blocks_for_rows(rows), cuda::kThreadsPerBlock, 0,
                           c10::cuda::getCurrentCUDAStream()>>>(
      src.const_data_ptr<uint8_t>(), means.const_data_ptr<float>(), stds.const_data_ptr<float>(),
      sizes_on_device.const_data_ptr<int64_t>(), reverse_channels, static_cast<float>(pad_value),
      images.size(0), images.size(1), images.size(2), images.size(3),
      out.mutable_data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) {
  m.impl("normalize_batch", &normalize_batch_cuda);
}

}  // namespace mmdet_ext
