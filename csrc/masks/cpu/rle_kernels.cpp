// CPU kernels of the COCO RLE ops: encode (one mask or a batch) / decode, the compressed string
// form, merge, area, bounding box, and crop-and-resize for the Mask R-CNN mask head. Results are
// bit-exact with pycocotools (and, for crop-and-resize, with mmcv's CPU roi_align as mmdet calls
// it, through the device-neutral ../roi_align_binary.h that the CUDA kernel shares).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "../rle_codec.h"
#include "../roi_align_binary.h"

namespace mmdet_ext {
namespace {

using masks::Counts;

at::Tensor rle_encode_cpu(const at::Tensor& mask) {
  TORCH_CHECK(mask.device().is_cpu(), "rle_encode: expected the mask on the CPU, got ",
              mask.device());
  TORCH_CHECK(mask.dim() == 2 && (mask.scalar_type() == at::kByte ||
                                  mask.scalar_type() == at::kBool),
              "rle_encode: expected a (height, width) uint8 or bool mask, got ",
              mask.scalar_type(), " with shape ", mask.sizes());
  masks::check_image_size("rle_encode", "mask", mask.size(0), mask.size(1));
  Counts counts;
  // COCO runs go down the columns: a Fortran-ordered mask (as pycocotools wants) is read as it
  // is, any other layout row by row.
  const at::Tensor columns = mask.t();
  if (columns.is_contiguous()) {
    masks::encode_columns(static_cast<const uint8_t*>(columns.const_data_ptr()),
                          columns.numel(), counts);
  } else {
    const at::Tensor rows = mask.contiguous();
    masks::encode_rows(static_cast<const uint8_t*>(rows.const_data_ptr()), rows.size(0),
                       rows.size(1), counts);
  }
  return masks::counts_to_tensor(counts);
}

// Masks handled per parallel task: a full-size mask is worth a task of its own.
constexpr int64_t kMasksPerTask = 1;

std::tuple<at::Tensor, at::Tensor> rle_encode_batch_cpu(const at::Tensor& masks) {
  constexpr const char* op = "rle_encode_batch";
  TORCH_CHECK(masks.device().is_cpu(), op, ": expected the masks on the CPU, got ",
              masks.device());
  masks::check_mask_batch(op, masks);
  const at::Tensor rows = masks.contiguous();
  const int64_t n = rows.size(0), height = rows.size(1), width = rows.size(2);
  const uint8_t* pixels = static_cast<const uint8_t*>(rows.const_data_ptr());
  std::vector<Counts> rles(n);
  at::parallel_for(0, n, kMasksPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      masks::encode_rows(pixels + i * height * width, height, width, rles[i]);
    }
  });
  return masks::pack_counts(rles);
}

at::Tensor rle_decode_cpu(const at::Tensor& counts, int64_t height, int64_t width) {
  const Counts runs = masks::read_counts("rle_decode", counts, height, width);
  at::Tensor out = at::zeros({height, width}, at::kByte);
  masks::paint_counts(runs.data(), static_cast<int64_t>(runs.size()), height, width,
                      out.mutable_data_ptr<uint8_t>());
  return out;
}

// Paints every RLE into its image of `out` (rles.size() x height x width, zeroed by the caller).
void paint_packed_counts(const masks::PackedCounts& rles, int64_t height, int64_t width,
                         uint8_t* images) {
  at::parallel_for(0, rles.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      masks::paint_counts(rles.data(i), rles.length(i), height, width,
                          images + i * height * width);
    }
  });
}

at::Tensor rle_decode_batch_cpu(const at::Tensor& counts, const at::Tensor& run_counts,
                                int64_t height, int64_t width) {
  const masks::PackedCounts rles =
      masks::read_packed_counts("rle_decode_batch", counts, run_counts, height, width);
  at::Tensor out = at::zeros({rles.size(), height, width}, at::kByte);
  paint_packed_counts(rles, height, width, out.mutable_data_ptr<uint8_t>());
  return out;
}

// rle_decode_batch written into a given [N, H, W] uint8 tensor (its CUDA twin is what lets the
// packed counts stay on the host while the masks are made on a GPU).
void rle_decode_batch_into_cpu(const at::Tensor& counts, const at::Tensor& run_counts,
                               const at::Tensor& out) {
  constexpr const char* op = "rle_decode_batch_into";
  TORCH_CHECK(out.device().is_cpu(), op, ": expected out on the CPU, got ", out.device());
  const auto [height, width] = masks::masks_out_size(op, out);
  const masks::PackedCounts rles = masks::read_packed_counts(op, counts, run_counts, height, width);
  masks::check_masks_out_count(op, out, rles.size());
  out.zero_();
  paint_packed_counts(rles, height, width, out.mutable_data_ptr<uint8_t>());
}

// pycocotools' rleToString: each count (from the fourth on, minus the count two before it) as a
// little-endian sequence of 5-bit groups, 0x20 = more groups follow, 0x10 of the last group =
// sign, offset by 48 into printable ASCII.
at::Tensor rle_to_string_cpu(const at::Tensor& counts) {
  const Counts runs = masks::read_runs("rle_to_string", counts);
  std::string text;
  text.reserve(runs.size() * 2);
  for (size_t i = 0; i < runs.size(); ++i) {
    int64_t x = runs[i];
    if (i > 2) {
      x -= runs[i - 2];
    }
    bool more = true;
    while (more) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) {
        c |= 0x20;
      }
      text.push_back(static_cast<char>(c + 48));
    }
  }
  at::Tensor out = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) {  // an empty tensor's data pointer may be null: memcpy(null) is UB
    std::memcpy(out.mutable_data_ptr<uint8_t>(), text.data(), text.size());
  }
  return out;
}

// pycocotools' rleFrString, with the checks it lacks: it reads past the end of a truncated
// string and shifts 32-bit ints past their width for over-long values.
at::Tensor rle_from_string_cpu(const at::Tensor& data, int64_t height, int64_t width) {
  TORCH_CHECK(data.device().is_cpu() && data.dim() == 1 && data.scalar_type() == at::kByte,
              "rle_from_string: expected the RLE string as a 1-D uint8 CPU tensor of ASCII "
              "bytes, got ", data.scalar_type(), " with shape ", data.sizes(), " on ",
              data.device());
  masks::check_image_size("rle_from_string", "image", height, width);
  const at::Tensor bytes = data.contiguous();
  const uint8_t* s = bytes.const_data_ptr<uint8_t>();
  const int64_t n = bytes.numel();
  constexpr int kMaxGroups = 7;  // 35 bits: enough for any delta of two 31-bit counts
  Counts runs;
  int64_t sum = 0;
  int64_t p = 0;
  while (p < n) {
    const int64_t first = p;
    int64_t x = 0;
    int groups = 0;
    bool more = true;
    while (more) {
      TORCH_CHECK(p < n, "rle_from_string: the string ends inside the value that starts at byte ",
                  first, " (its last character has the continuation bit 0x20 set; truncated?)");
      const int c = static_cast<int>(s[p]) - 48;
      TORCH_CHECK(c >= 0 && c < 64, "rle_from_string: byte ", p, " (value ",
                  static_cast<int>(s[p]), ") is not a COCO RLE character (ASCII 48-111)");
      TORCH_CHECK(groups < kMaxGroups, "rle_from_string: the value starting at byte ", first,
                  " is longer than ", kMaxGroups, " characters; corrupt RLE string?");
      x |= static_cast<int64_t>(c & 0x1f) << (5 * groups);
      more = (c & 0x20) != 0;
      ++p;
      ++groups;
      if (!more && (c & 0x10)) {
        x |= static_cast<int64_t>(~uint64_t{0} << (5 * groups));  // sign-extend
      }
    }
    if (runs.size() > 2) {
      x += runs[runs.size() - 2];
    }
    TORCH_CHECK(x >= 0 && x <= masks::kMaxPixels, "rle_from_string: the value starting at byte ",
                first, " decodes to run length ", x, ", outside [0, 2^31 - 1]; corrupt RLE?");
    runs.push_back(static_cast<uint32_t>(x));
    sum += x;
  }
  TORCH_CHECK(sum == height * width, "rle_from_string: the decoded runs sum to ", sum,
              " but a ", height, "x", width, " mask has ", height * width,
              " pixels (wrong size or corrupt RLE string)");
  return masks::counts_to_tensor(runs);
}

at::Tensor rle_merge_cpu(const at::Tensor& counts, const at::Tensor& run_counts, int64_t height,
                         int64_t width, bool intersect) {
  const masks::PackedCounts rles =
      masks::read_packed_counts("rle_merge", counts, run_counts, height, width);
  TORCH_CHECK(rles.size() > 0, "rle_merge: needs at least one RLE (run_counts is empty)");
  std::vector<Counts> list;
  list.reserve(rles.size());
  for (int64_t i = 0; i < rles.size(); ++i) {
    list.emplace_back(rles.data(i), rles.data(i) + rles.length(i));
  }
  return masks::counts_to_tensor(masks::merge_counts(list, intersect));
}

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
  m.impl("rle_encode", &rle_encode_cpu);
  m.impl("rle_encode_batch", &rle_encode_batch_cpu);
  m.impl("rle_decode", &rle_decode_cpu);
  m.impl("rle_decode_batch", &rle_decode_batch_cpu);
  m.impl("rle_decode_batch_into", &rle_decode_batch_into_cpu);
  m.impl("rle_to_string", &rle_to_string_cpu);
  m.impl("rle_from_string", &rle_from_string_cpu);
  m.impl("rle_merge", &rle_merge_cpu);
  m.impl("rle_area", &rle_area_cpu);
  m.impl("rle_to_bbox", &rle_to_bbox_cpu);
  m.impl("rle_crop_and_resize", &rle_crop_and_resize_cpu);
}

}  // namespace mmdet_ext
