// CPU kernel of mmdet_ext::normalize_batch: a padded uint8 batch (fast_collate) to the float batch
// the detector sees, in one pass: channel order, (x - mean) / std, padding set to pad_value.
// mmdet's DetDataPreprocessor makes four passes per image (index copy, float copy, subtract,
// divide) and two more to pad and stack; on the training process's critical path.
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/types.h>

namespace mmdet_ext {
namespace {

at::Tensor normalize_batch_cpu(const at::Tensor& images, const at::Tensor& mean,
                               const at::Tensor& std, bool reverse_channels,
                               const at::Tensor& image_sizes, double pad_value) {
  TORCH_CHECK(images.device().is_cpu() && images.scalar_type() == at::kByte && images.dim() == 4,
              "normalize_batch: expected a CPU uint8 batch [B, C, H, W], got ",
              images.scalar_type(), " ", images.sizes(), " on ", images.device());
  const int64_t batch = images.size(0), channels = images.size(1);
  const int64_t height = images.size(2), width = images.size(3);
  TORCH_CHECK(mean.numel() == channels && std.numel() == channels,
              "normalize_batch: mean and std need one value per channel (", channels,
              "), got ", mean.numel(), " and ", std.numel());
  TORCH_CHECK(image_sizes.scalar_type() == at::kLong && image_sizes.dim() == 2 &&
                  image_sizes.size(0) == batch && image_sizes.size(1) == 2,
              "normalize_batch: image_sizes must be int64 [B, 2] (height, width of each image "
              "before padding), got ", image_sizes.scalar_type(), " ", image_sizes.sizes());

  const at::Tensor src = images.contiguous();
  const at::Tensor means = mean.to(at::kFloat).contiguous().cpu();
  const at::Tensor stds = std.to(at::kFloat).contiguous().cpu();
  const at::Tensor sizes = image_sizes.contiguous().cpu();
  const auto* size_data = sizes.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(size_data[2 * b] >= 0 && size_data[2 * b] <= height &&
                    size_data[2 * b + 1] >= 0 && size_data[2 * b + 1] <= width,
                "normalize_batch: image ", b, " is ", size_data[2 * b], "x",
                size_data[2 * b + 1], ", outside the ", height, "x", width, " batch");
  }
  at::Tensor out = at::empty({batch, channels, height, width}, images.options().dtype(at::kFloat));
  const uint8_t* in = src.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const float* m = means.data_ptr<float>();
  const float* s = stds.data_ptr<float>();
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
      // (x - mean) / std in float32, the same two roundings torch's ops make.
      for (int64_t x = 0; x < valid_w; ++x) {
        out_row[x] = (static_cast<float>(in_row[x]) - mc) / sc;
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
