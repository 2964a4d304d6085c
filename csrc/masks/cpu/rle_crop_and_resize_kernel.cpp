// CPU kernel of rle_crop_and_resize (CUDA twin: ../cuda/rle_decode_kernels.cu): the Mask R-CNN
// mask head's targets of crowd RLEs, bit-exact with mmcv's CPU roi_align as mmdet's
// BitmapMasks.crop_and_resize calls it, through the device-neutral ../roi_align_binary.h that
// the CUDA kernel shares. Each box decodes only the window of its mask that its samples touch.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../rle_codec.h"
#include "../roi_align_binary.h"

namespace mmdet_ext {
namespace {

// Every sample of one axis of a box, computed once per box: cells share them.
template <typename T>
std::vector<masks::AxisSample<T>> axis_samples(T start, T bin, int grid, int pooled, int size) {
  std::vector<masks::AxisSample<T>> samples;
  samples.reserve(static_cast<size_t>(pooled) * grid);
  for (int p = 0; p < pooled; ++p) {
    for (int i = 0; i < grid; ++i) {
      samples.push_back(masks::axis_sample<T>(start, bin, grid, p, i, size));
    }
  }
  return samples;
}

// Pixels [y0, y1] x [x0, x1] of an RLE into a row-major window; only the runs that overlap it are
// visited. `starts[j]` is where run j begins.
void decode_window(const uint32_t* runs, const int64_t* starts, int64_t num_runs, int64_t height,
                   int64_t y0, int64_t y1, int64_t x0, int64_t x1, std::vector<uint8_t>& window) {
  const int64_t window_width = x1 - x0 + 1;
  window.assign(static_cast<size_t>((y1 - y0 + 1) * window_width), 0);
  int64_t j = std::upper_bound(starts, starts + num_runs, x0 * height + y0) - starts - 1;
  for (int64_t x = x0; x <= x1; ++x) {
    const int64_t lo = x * height + y0, hi = x * height + y1 + 1;
    while (j < num_runs && starts[j] + runs[j] <= lo) {
      ++j;
    }
    for (int64_t k = j; k < num_runs && starts[k] < hi; ++k) {
      if (k % 2 == 1) {
        const int64_t from = std::max(lo, starts[k]), to = std::min(hi, starts[k] + runs[k]);
        for (int64_t i = from; i < to; ++i) {
          window[(i - lo) * window_width + (x - x0)] = 1;
        }
      }
    }
  }
}

// One box of mmdet's BitmapMasks.crop_and_resize (../roi_align_binary.h), reading only the
// window of the mask that its samples touch.
template <typename T>
void roi_align_binary(const uint32_t* runs, const int64_t* starts, int64_t num_runs,
                      int64_t height, int64_t width, const T* roi, int out_h, int out_w,
                      std::vector<uint8_t>& window, uint8_t* out) {
  const masks::RoiAlignBox<T> box(roi, out_h, out_w);
  const auto ys = axis_samples<T>(box.start_h, box.bin_h, box.grid_h, out_h,
                                  static_cast<int>(height));
  const auto xs = axis_samples<T>(box.start_w, box.bin_w, box.grid_w, out_w,
                                  static_cast<int>(width));
  int64_t y0 = height, y1 = -1, x0 = width, x1 = -1;
  for (const auto& s : ys) {
    if (s.inside) {
      y0 = std::min<int64_t>(y0, s.low);
      y1 = std::max<int64_t>(y1, s.high);
    }
  }
  for (const auto& s : xs) {
    if (s.inside) {
      x0 = std::min<int64_t>(x0, s.low);
      x1 = std::max<int64_t>(x1, s.high);
    }
  }
  if (y1 < 0 || x1 < 0) {  // every sample falls outside the image: mmcv adds only zeros
    std::memset(out, 0, static_cast<size_t>(out_h) * out_w);
    return;
  }
  decode_window(runs, starts, num_runs, height, y0, y1, x0, x1, window);
  const int64_t ww = x1 - x0 + 1;
  auto pixel = [&](int y, int x) { return window[(y - y0) * ww + (x - x0)]; };
  auto sample_y = [&](int p, int i) { return ys[p * box.grid_h + i]; };
  auto sample_x = [&](int p, int i) { return xs[p * box.grid_w + i]; };
  for (int ph = 0; ph < out_h; ++ph) {
    for (int pw = 0; pw < out_w; ++pw) {
      out[ph * out_w + pw] = masks::roi_align_cell(box, ph, pw, sample_y, sample_x, pixel);
    }
  }
}

at::Tensor rle_crop_and_resize_cpu(const at::Tensor& counts, const at::Tensor& run_counts,
                                   int64_t height, int64_t width, const at::Tensor& boxes,
                                   const at::Tensor& inds, int64_t out_h, int64_t out_w) {
  constexpr const char* op = "rle_crop_and_resize";
  const masks::PackedCounts rles = masks::read_packed_counts(op, counts, run_counts, height,
                                                             width);
  const std::vector<int64_t> mask_index =
      masks::read_crop_boxes(op, boxes, inds, rles.size(), out_h, out_w);
  masks::check_ordered_boxes(op, boxes);
  const int64_t n = boxes.size(0);
  // Where each run starts, so a box only visits the runs that overlap it.
  const std::vector<int64_t> starts = masks::run_starts(rles);
  const at::Tensor rois = boxes.contiguous();
  at::Tensor out = at::empty({n, out_h, out_w}, at::kByte);
  uint8_t* images = out.mutable_data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), "rle_crop_and_resize", [&] {
    const scalar_t* roi = rois.const_data_ptr<scalar_t>();
    at::parallel_for(0, n, masks::kBoxesPerTask, [&](int64_t begin, int64_t end) {
      std::vector<uint8_t> window;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = mask_index[i];
        roi_align_binary<scalar_t>(rles.data(r), starts.data() + rles.offsets[r], rles.length(r),
                                   height, width, roi + 4 * i, static_cast<int>(out_h),
                                   static_cast<int>(out_w), window,
                                   images + i * out_h * out_w);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_crop_and_resize", &rle_crop_and_resize_cpu);
}

}  // namespace mmdet_ext
