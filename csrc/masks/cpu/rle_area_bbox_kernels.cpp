// CPU kernels of rle_area and rle_to_bbox: what an RLE's runs measure, pycocotools' area and
// toBbox.
#include <algorithm>
#include <cstdint>

#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "../rle_codec.h"

namespace mmdet_ext {
namespace {

using masks::Counts;

at::Tensor rle_area_cpu(const at::Tensor& counts) {
  const Counts runs = masks::read_runs("rle_area", counts);
  int64_t area = 0;
  for (size_t j = 1; j < runs.size(); j += 2) {
    area += runs[j];
  }
  return at::scalar_tensor(area, at::kLong);
}

// pycocotools' rleToBbox (the version that walks whole foreground runs), in its 32-bit
// unsigned arithmetic, so that an RLE without foreground gives the same numbers too.
at::Tensor rle_to_bbox_cpu(const at::Tensor& counts, int64_t height, int64_t width) {
  const Counts runs = masks::read_counts("rle_to_bbox", counts, height, width);
  at::Tensor out = at::zeros({4}, at::kDouble);
  const size_t m = runs.size() / 2 * 2;
  if (m == 0) {
    return out;
  }
  const auto h = static_cast<uint32_t>(height);
  const auto w = static_cast<uint32_t>(width);
  uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0;
  for (size_t j = 0; j < m; ++j) {
    const uint32_t start = cc;
    cc += runs[j];
    if (j % 2 == 0 || runs[j] == 0) {
      continue;
    }
    const uint32_t y_start = start % h, x_start = start / h;
    const uint32_t y_end = (cc - 1) % h, x_end = (cc - 1) / h;
    xs = std::min(xs, x_start);
    xe = std::max(xe, x_end);
    if (x_start < x_end) {  // the run wraps into the next column: every row is covered
      ys = 0;
      ye = h - 1;
    } else {
      ys = std::min(ys, y_start);
      ye = std::max(ye, y_end);
    }
  }
  double* box = out.mutable_data_ptr<double>();
  box[0] = xs;
  box[1] = ys;
  box[2] = static_cast<uint32_t>(xe - xs + 1);
  box[3] = static_cast<uint32_t>(ye - ys + 1);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_area", &rle_area_cpu);
  m.impl("rle_to_bbox", &rle_to_bbox_cpu);
}

}  // namespace mmdet_ext
