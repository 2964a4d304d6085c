// Argument checks of normalize_batch, shared by its kernels (see normalize_batch.h).
#include "normalize_batch.h"

#include <c10/util/Exception.h>

namespace mmdet_ext::transforms {

std::vector<int64_t> check_normalize_args(const at::Tensor& images, const at::Tensor& mean,
                                          const at::Tensor& std, const at::Tensor& image_sizes) {
  TORCH_CHECK(images.scalar_type() == at::kByte && images.dim() == 4,
              "normalize_batch: expected a uint8 batch [B, C, H, W], got ", images.scalar_type(),
              " ", images.sizes(), " on ", images.device());
  const int64_t batch = images.size(0), channels = images.size(1);
  const int64_t height = images.size(2), width = images.size(3);
  TORCH_CHECK(mean.numel() == channels && std.numel() == channels,
              "normalize_batch: mean and std need one value per channel (", channels,
              "), got ", mean.numel(), " and ", std.numel());
  TORCH_CHECK(image_sizes.scalar_type() == at::kLong && image_sizes.dim() == 2 &&
                  image_sizes.size(0) == batch && image_sizes.size(1) == 2,
              "normalize_batch: image_sizes must be int64 [B, 2] (height, width of each image "
              "before padding), got ", image_sizes.scalar_type(), " ", image_sizes.sizes());
  const at::Tensor sizes = image_sizes.cpu().contiguous();
  std::vector<int64_t> values(sizes.const_data_ptr<int64_t>(),
                              sizes.const_data_ptr<int64_t>() + sizes.numel());
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(values[2 * b] >= 0 && values[2 * b] <= height && values[2 * b + 1] >= 0 &&
                    values[2 * b + 1] <= width,
                "normalize_batch: image ", b, " is ", values[2 * b], "x", values[2 * b + 1],
                ", outside the ", height, "x", width, " batch");
  }
  return values;
}

}  // namespace mmdet_ext::transforms
