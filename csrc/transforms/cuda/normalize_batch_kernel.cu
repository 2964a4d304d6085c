// CUDA kernel of mmdet_ext::normalize_batch (CPU twin: ../cpu/normalize_batch_kernel.cpp): the
// padded uint8 batch already on the GPU to the detector's float input in one pass, one thread per
// output value, with the same per-pixel formula (../normalize_batch.h) and so the same bits.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../../cuda_launch.cuh"
#include "../normalize_batch.h"

namespace mmdet_ext {
namespace {

__global__ void normalize_batch_kernel(const uint8_t* images, const float* mean, const float* std,
                                       const int64_t* sizes, bool reverse_channels,
                                       float pad_value, int64_t batch, int64_t channels,
                                       int64_t height, int64_t width, float* out) {
  const int64_t total = batch * channels * height * width;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const int64_t x = k % width, y = (k / width) % height;
    const int64_t c = (k / (width * height)) % channels, b = k / (width * height * channels);
    if (y >= sizes[2 * b] || x >= sizes[2 * b + 1]) {
      out[k] = pad_value;
      continue;
    }
    const int64_t src_c = reverse_channels ? channels - 1 - c : c;
    const uint8_t value = images[((b * channels + src_c) * height + y) * width + x];
    out[k] = transforms::normalized_pixel(value, mean[c], std[c]);
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
  const at::Tensor means = mean.to(images.device(), at::kFloat).contiguous();
  const at::Tensor stds = std.to(images.device(), at::kFloat).contiguous();
  const at::Tensor sizes_on_device = cuda::to_device(sizes, images.device());
  at::Tensor out = at::empty(images.sizes(), images.options().dtype(at::kFloat));
  if (out.numel() == 0) {
    return out;
  }
  normalize_batch_kernel<<<cuda::blocks_for(out.numel()), cuda::kThreadsPerBlock, 0,
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
