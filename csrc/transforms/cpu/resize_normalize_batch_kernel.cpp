// CPU kernel of mmdet_ext::resize_normalize_batch (CUDA twin:
// ../cuda/resize_normalize_batch_kernel.cu): decoded images, packed in one flat uint8 buffer, to
// the detector's padded float batch in one pass: cv::resize (bilinear or nearest, OpenCV's
// integer arithmetic), flip, channel order, (x - mean) / std, padding. Nothing is written twice.
#include <c10/util/Optional.h>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/types.h>

#include "../normalize_batch.h"
#include "../resize_normalize_batch.h"

namespace mmdet_ext {
namespace {

using transforms::ImageField;

template <typename scalar_t>
void fill_batch(const transforms::ResizePlan& plan, const uint8_t* data, const float* mean,
                const float* std, bool reverse_channels, float pad_value, int64_t height,
                int64_t width, scalar_t* out) {
  const int64_t channels = plan.channels;
  const auto pad = static_cast<scalar_t>(pad_value);
  // normalized_pixel of every uint8 value per output channel: a table lookup instead of a
  // division per pixel, the same bits.
  std::vector<scalar_t> normalized(channels * 256);
  for (int64_t c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      normalized[c * 256 + v] = static_cast<scalar_t>(
          transforms::normalized_pixel(static_cast<uint8_t>(v), mean[c], std[c]));
    }
  }
  // One task per (image, output row): its C output rows read the same two source rows.
  at::parallel_for(0, plan.batch * height, 16, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / height, y = task % height;
      const int64_t* image = plan.images.data() + b * transforms::kImageFields;
      const int64_t out_h = image[ImageField::kOutHeight], out_w = image[ImageField::kOutWidth];
      const int64_t src_h = image[ImageField::kHeight], src_w = image[ImageField::kWidth];
      const bool flip_x = image[ImageField::kFlip] & 1, flip_y = image[ImageField::kFlip] & 2;
      const uint8_t* pixels = data + image[ImageField::kDataOffset];
      const int32_t* column_taps = plan.taps.data() + image[ImageField::kColumnTaps];
      const int32_t* row = plan.taps.data() + image[ImageField::kRowTaps] +
                           transforms::kTapFields * transforms::unflipped(y, out_h, flip_y);
      for (int64_t c = 0; c < channels; ++c) {
        scalar_t* out_row = out + ((b * channels + c) * height + y) * width;
        if (y >= out_h) {
          std::fill(out_row, out_row + width, pad);
          continue;
        }
        const int64_t src_c = reverse_channels ? channels - 1 - c : c;
        const scalar_t* lut = normalized.data() + c * 256;  // the output's channel order
        const uint8_t* plane = pixels + src_c * src_h * src_w;
        const uint8_t* top = plane + row[0] * src_w;
        const uint8_t* bottom = plane + row[1] * src_w;
        const int64_t step = flip_x ? -transforms::kTapFields : transforms::kTapFields;
        const int32_t* column = column_taps + (flip_x ? transforms::kTapFields * (out_w - 1) : 0);
        for (int64_t x = 0; x < out_w; ++x, column += step) {
          out_row[x] = lut[transforms::vertical_pass(transforms::horizontal_pass(top, column),
                                                     transforms::horizontal_pass(bottom, column),
                                                     row)];
        }
        std::fill(out_row + out_w, out_row + width, pad);
      }
    }
  });
}

// c10::optional, not std::optional: the only optional torch < 2.4 matches to a schema's `?` type.
at::Tensor resize_normalize_batch_cpu(const at::Tensor& data, const at::Tensor& image_shapes,
                                      const at::Tensor& out_shapes, const at::Tensor& flips,
                                      int64_t interpolation, const at::Tensor& mean,
                                      const at::Tensor& std, bool reverse_channels,
                                      int64_t batch_height, int64_t batch_width,
                                      double pad_value, c10::optional<at::ScalarType> dtype) {
  const transforms::ResizePlan plan = transforms::plan_resize_normalize(
      data, image_shapes, out_shapes, flips, interpolation, mean, std, batch_height, batch_width);
  const at::ScalarType out_type = dtype.value_or(at::kFloat);
  TORCH_CHECK(out_type == at::kFloat || out_type == at::kHalf || out_type == at::kBFloat16,
              "resize_normalize_batch: dtype must be float32, float16 or bfloat16, got ",
              out_type);
  const at::Tensor src = data.contiguous();
  const at::Tensor means = mean.to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor stds = std.to(at::kCPU, at::kFloat).contiguous();
  at::Tensor out = at::empty({plan.batch, plan.channels, batch_height, batch_width},
                             data.options().dtype(out_type));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out_type, "resize_normalize_batch",
                                  [&] {
    fill_batch<scalar_t>(plan, src.const_data_ptr<uint8_t>(), means.const_data_ptr<float>(),
                         stds.const_data_ptr<float>(), reverse_channels,
                         static_cast<float>(pad_value), batch_height, batch_width,
                         out.mutable_data_ptr<scalar_t>());
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("resize_normalize_batch", &resize_normalize_batch_cpu);
}

}  // namespace mmdet_ext
