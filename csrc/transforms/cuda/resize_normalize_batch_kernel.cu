// CUDA kernel of mmdet_ext::resize_normalize_batch (CPU twin:
// ../cpu/resize_normalize_batch_kernel.cpp): the decoded images, copied to the GPU as one flat
// uint8 buffer, to the detector's padded batch, a block per output row. The resize taps
// come from the same host code (../resize_normalize_batch.cpp) and the pixel arithmetic from the
// same header, integer only, so the bits are the CPU kernel's.
#include <c10/util/Optional.h>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../../cuda_launch.cuh"
#include "../normalize_batch.h"
#include "../resize_normalize_batch.h"

namespace mmdet_ext {
namespace {

using transforms::ImageField;

// Row r of the output is (b, c, y) = (r / (C * H), r / H % C, r % H).
template <typename scalar_t>
__global__ void resize_normalize_batch_kernel(const uint8_t* data, const int64_t* images,
                                              const int32_t* taps, const float* mean,
                                              const float* std, bool reverse_channels,
                                              float pad_value, int64_t batch, int64_t channels,
                                              int64_t height, int64_t width, scalar_t* out) {
  const int64_t rows = batch * channels * height;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t y = r % height, c = (r / height) % channels, b = r / (height * channels);
    const int64_t* image = images + b * transforms::kImageFields;
    const int64_t out_h = image[ImageField::kOutHeight], out_w = image[ImageField::kOutWidth];
    const int64_t flip = image[ImageField::kFlip];
    // Columns past the image's resized width, or every column of a row past its height, are
    // padding.
    const int64_t valid = y < out_h ? out_w : 0;
    const int32_t* row_taps =
        valid == 0 ? nullptr
                   : taps + image[ImageField::kRowTaps] +
                         transforms::kTapFields * transforms::unflipped(y, out_h, flip & 2);
    const int64_t src_c = reverse_channels ? channels - 1 - c : c;
    const uint8_t* src = data + image[ImageField::kDataOffset];
    const float m = mean[c], s = std[c];
    scalar_t* row = out + r * width;
    for (int64_t x = threadIdx.x; x < width; x += blockDim.x) {
      if (x >= valid) {
        row[x] = static_cast<scalar_t>(pad_value);
        continue;
      }
      const int32_t* column = taps + image[ImageField::kColumnTaps] +
                              transforms::kTapFields * transforms::unflipped(x, out_w, flip & 1);
      const uint8_t value = transforms::resized_pixel(src, image[ImageField::kHeight],
                                                      image[ImageField::kWidth], src_c, column,
                                                      row_taps);
      row[x] = static_cast<scalar_t>(transforms::normalized_pixel(value, m, s));
    }
  }
}

at::Tensor resize_normalize_batch_cuda(const at::Tensor& data, const at::Tensor& image_shapes,
                                       const at::Tensor& out_shapes, const at::Tensor& flips,
                                       int64_t interpolation, const at::Tensor& mean,
                                       const at::Tensor& std, bool reverse_channels,
                                       int64_t batch_height, int64_t batch_width,
                                       double pad_value, c10::optional<at::ScalarType> dtype) {
  TORCH_CHECK(data.is_cuda(), "resize_normalize_batch: expected the pixels on a CUDA device "
              "(shapes, flips, mean and std may be anywhere), got ", data.device());
  const transforms::ResizePlan plan = transforms::plan_resize_normalize(
      data, image_shapes, out_shapes, flips, interpolation, mean, std, batch_height, batch_width);
  const at::ScalarType out_type = dtype.value_or(at::kFloat);
  TORCH_CHECK(out_type == at::kFloat || out_type == at::kHalf || out_type == at::kBFloat16,
              "resize_normalize_batch: dtype must be float32, float16 or bfloat16, got ",
              out_type);
  const c10::cuda::CUDAGuard guard(data.device());
  at::Tensor out = at::empty({plan.batch, plan.channels, batch_height, batch_width},
                             data.options().dtype(out_type));
  if (out.numel() == 0) {
    return out;
  }
  const at::Tensor src = data.contiguous();
  const at::Tensor means = cuda::to_device(mean.to(at::kFloat), data.device());
  const at::Tensor stds = cuda::to_device(std.to(at::kFloat), data.device());
  const at::Tensor images = cuda::to_device(plan.images, data.device());
  const at::Tensor taps = cuda::to_device(plan.taps, data.device());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out_type, "resize_normalize_batch",
                                  [&] {
    resize_normalize_batch_kernel<scalar_t>
        <<<cuda::blocks_for_rows(plan.batch * plan.channels * batch_height),
           cuda::kThreadsPerBlock, 0,
           c10::cuda::getCurrentCUDAStream()>>>(
            src.const_data_ptr<uint8_t>(), images.const_data_ptr<int64_t>(),
            taps.const_data_ptr<int32_t>(), means.const_data_ptr<float>(),
            stds.const_data_ptr<float>(), reverse_channels, static_cast<float>(pad_value),
            plan.batch, plan.channels, batch_height, batch_width,
            out.mutable_data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) {
  m.impl("resize_normalize_batch", &resize_normalize_batch_cuda);
}

}  // namespace mmdet_ext
