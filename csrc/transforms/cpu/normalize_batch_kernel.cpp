// CPU kernel of mmdet_ext::normalize_batch (CUDA twin: ../cuda/normalize_batch_kernel.cu): a
// padded uint8 batch (fast_collate) to the float batch the detector sees, in one pass: channel
// order, (x - mean) / std, padding set to pad_value.
// mmdet's DetDataPreprocessor makes four passes per image (index copy, float copy, subtract,
// divide) and two more to pad and stack; on the training process's critical path.
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/types.h>

#include "../normalize_batch.h"

namespace mmdet_ext {
namespace {

at::Tensor normalize_batch_cpu(const at::Tensor& images, const at::Tensor& mean,
                               const at::Tensor& std, bool reverse_channels,
                               const at::Tensor& image_sizes, double pad_value) {
  const std::vector<int64_t> sizes =
      transforms::check_normalize_args(images, mean, std, image_sizes);
  const int64_t batch = images.size(0), channels = images.size(1);
  const int64_t height = images.size(2), width = images.size(3);
  const at::Tensor src = images.contiguous();
  const at::Tensor means = mean.to(at::kFloat).contiguous();
  const at::Tensor stds = std.to(at::kFloat).contiguous();
  const int64_t* size_data = sizes.data();
  at::Tensor out = at::empty({batch, channels, height, width}, images.options().dtype(at::kFloat));
  const uint8_t* in = src.const_data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const float* m = means.const_data_ptr<float>();
  const float* s = stds.const_data_ptr<float>();
  const float pad = static_cast<float>(pad_value);

  // One task per output row (b, c, y). Output channel c reads input channel c, or C-1-c.
  at::parallel_for(0, batch * channels * height, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t y = row % height;
      const int64_t c = (row / height) % channels;
      const int64_t b = row / (height * channels);
      const int64_t src_c = reverse_channels ? channels - 1 - c : c;
      const int64_t valid_h = size_data[2 * b], valid_w = size_data[2 * b + 1];
      float* out_row = dst + row * width;
      if (y >= valid_h) {
        std::fill(out_row, out_row + width, pad);
        continue;
      }
      const uint8_t* in_row = in + ((b * channels + src_c) * height + y) * width;
      const float mc = m[c], sc = s[c];  // mean/std are given in the output's channel order
      for (int64_t x = 0; x < valid_w; ++x) {
        out_row[x] = transforms::normalized_pixel(in_row[x], mc, sc);
      }
      std::fill(out_row + valid_w, out_row + width, pad);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("normalize_batch", &normalize_batch_cpu);
}

}  // namespace mmdet_ext
