// Validation, merging and painting of COCO RLEs, shared by the mask kernels (see rle_codec.h).
#include "rle_codec.h"

#include <algorithm>
#include <cstring>

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

namespace mmdet_ext::masks {

void check_image_size(const char* op, const char* what, int64_t height, int64_t width) {
  TORCH_CHECK(height >= 0 && width >= 0, op, ": the ", what, " size must be non-negative, got ",
              height, "x", width, " (height x width)");
  TORCH_CHECK(width == 0 || height <= kMaxPixels / width, op, ": the ", what, " size ", height,
              "x", width, " has more than 2^31 - 1 pixels, which COCO RLE (32-bit counts) "
              "cannot index");
}

std::pair<int64_t, int64_t> masks_out_size(const char* op, const at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kByte && out.dim() == 3 && out.is_contiguous(), op,
              ": expected out as a contiguous uint8 tensor [N, height, width], got ",
              out.scalar_type(), " ", out.sizes(), out.is_contiguous() ? "" : " (not contiguous)");
  check_image_size(op, "output", out.size(1), out.size(2));
  return {out.size(1), out.size(2)};
}

void check_masks_out_count(const char* op, const at::Tensor& out, int64_t num_masks) {
  TORCH_CHECK(out.size(0) == num_masks, op, ": out has room for ", out.size(0),
              " masks, the input holds ", num_masks);
}

namespace {

void check_counts_tensor(const char* op, const char* name, const at::Tensor& counts) {
  TORCH_CHECK(counts.device().is_cpu(), op, ": expected ", name, " on the CPU, got ",
              counts.device());
  TORCH_CHECK(counts.dim() == 1 && at::isIntegralType(counts.scalar_type(), false), op,
              ": expected ", name, " as a 1-D integer tensor (int32 or int64), got ",
              counts.scalar_type(), " with shape ", counts.sizes());
}

// Appends the counts to `out` and returns their sum; refuses negative or > 2^31 - 1 runs.
int64_t append_counts(const char* op, const at::Tensor& counts, Counts& out) {
  const at::Tensor values = counts.contiguous();
  int64_t sum = 0;
  AT_DISPATCH_INTEGRAL_TYPES(values.scalar_type(), "append_counts", [&] {
    const scalar_t* data = values.const_data_ptr<scalar_t>();
    const int64_t n = values.numel();
    out.reserve(out.size() + n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t run = static_cast<int64_t>(data[i]);
      TORCH_CHECK(run >= 0 && run <= kMaxPixels, op, ": run length ", run, " at index ", i,
                  " is out of range [0, 2^31 - 1]; corrupt RLE?");
      sum += run;
      out.push_back(static_cast<uint32_t>(run));
    }
  });
  return sum;
}

}  // namespace

Counts read_runs(const char* op, const at::Tensor& counts) {
  check_counts_tensor(op, "counts", counts);
  Counts out;
  append_counts(op, counts, out);
  return out;
}

Counts read_counts(const char* op, const at::Tensor& counts, int64_t height, int64_t width) {
  check_image_size(op, "image", height, width);
  check_counts_tensor(op, "counts", counts);
  Counts out;
  const int64_t sum = append_counts(op, counts, out);
  TORCH_CHECK(sum == height * width, op, ": the RLE counts sum to ", sum, " but a ", height, "x",
              width, " mask has ", height * width, " pixels (wrong size or corrupt RLE)");
  return out;
}

PackedCounts read_packed_counts(const char* op, const at::Tensor& counts,
                                const at::Tensor& run_counts, int64_t height, int64_t width) {
  check_image_size(op, "image", height, width);
  check_counts_tensor(op, "counts", counts);
  check_counts_tensor(op, "run_counts", run_counts);
  const at::Tensor lengths = run_counts.to(at::kLong).contiguous();
  const int64_t* length = lengths.const_data_ptr<int64_t>();
  const int64_t n = lengths.numel();
  PackedCounts packed;
  packed.offsets.resize(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(length[i] >= 0, op, ": run_counts[", i, "] = ", length[i], " is negative");
    packed.offsets[i + 1] = packed.offsets[i] + length[i];
  }
  TORCH_CHECK(packed.offsets[n] == counts.numel(), op, ": run_counts sum to ", packed.offsets[n],
              " but counts holds ", counts.numel(), " runs");
  append_counts(op, counts, packed.values);
  const int64_t area = height * width;
  for (int64_t i = 0; i < n; ++i) {
    int64_t sum = 0;
    for (int64_t j = packed.offsets[i]; j < packed.offsets[i + 1]; ++j) {
      sum += packed.values[j];
    }
    TORCH_CHECK(sum == area, op, ": the counts of RLE ", i, " sum to ", sum, " but a ", height,
                "x", width, " mask has ", area, " pixels (wrong size or corrupt RLE)");
  }
  return packed;
}

Counts merge_counts(const std::vector<Counts>& rles, bool intersect) {
  if (rles.empty()) {
    return {};
  }
  Counts merged = rles[0];
  Counts next;
  for (size_t i = 1; i < rles.size(); ++i) {
    // Walk both run lists at once; a run ends wherever the combined value flips. This is
    // pycocotools' loop, including its handling of empty runs, so the output is identical.
    const Counts& a = merged;
    const Counts& b = rles[i];
    next.clear();
    // An RLE of a zero-pixel mask may have no runs at all; read it as one empty run.
    uint32_t ca = a.empty() ? 0 : a[0], cb = b.empty() ? 0 : b[0], cc = 0;
    size_t ia = 1, ib = 1;
    bool va = false, vb = false, v = false;
    bool more = true;
    while (more) {
      const uint32_t c = std::min(ca, cb);
      cc += c;
      ca -= c;
      if (ca == 0 && ia < a.size()) {
        ca = a[ia++];
        va = !va;
      }
      cb -= c;
      if (cb == 0 && ib < b.size()) {
        cb = b[ib++];
        vb = !vb;
      }
      more = ca + cb > 0;
      const bool previous = v;
      v = intersect ? (va && vb) : (va || vb);
      if (v != previous || !more) {
        next.push_back(cc);
        cc = 0;
      }
    }
    merged.swap(next);
  }
  return merged;
}

void paint_counts(const uint32_t* counts, int64_t num_counts, int64_t height, int64_t width,
                  uint8_t* image) {
  // Runs go down the columns but the image is row-major: writing them pixel by pixel would touch
  // one cache line per pixel. Instead the runs are memset into a column-major scratch window
  // over the mask's bounding box, which is then transposed into the image in cache-sized tiles.
  int64_t row0 = height, row1 = -1, col0 = width, col1 = -1;
  int64_t start = 0;
  for (int64_t j = 0; j < num_counts; start += counts[j], ++j) {
    if (j % 2 == 0 || counts[j] == 0) {
      continue;
    }
    const int64_t last = start + counts[j] - 1;
    col0 = std::min(col0, start / height);
    col1 = std::max(col1, last / height);
    if (start / height != last / height) {
      row0 = 0;
      row1 = height - 1;
    } else {
      row0 = std::min(row0, start % height);
      row1 = std::max(row1, last % height);
    }
  }
  if (col1 < 0) {
    return;
  }
  const int64_t rows = row1 - row0 + 1, cols = col1 - col0 + 1;
  thread_local std::vector<uint8_t> window;
  window.assign(static_cast<size_t>(rows * cols), 0);
  start = 0;
  for (int64_t j = 0; j < num_counts; start += counts[j], ++j) {
    if (j % 2 == 0) {
      continue;
    }
    for (int64_t position = start, end = start + counts[j]; position < end;) {
      const int64_t column = position / height;
      const int64_t stop = std::min(end, (column + 1) * height);
      std::memset(window.data() + (column - col0) * rows + (position - column * height - row0), 1,
                  static_cast<size_t>(stop - position));
      position = stop;
    }
  }
  constexpr int64_t kTile = 32;
  for (int64_t c_tile = 0; c_tile < cols; c_tile += kTile) {
    const int64_t c_end = std::min(cols, c_tile + kTile);
    for (int64_t r_tile = 0; r_tile < rows; r_tile += kTile) {
      const int64_t r_end = std::min(rows, r_tile + kTile);
      for (int64_t r = r_tile; r < r_end; ++r) {
        uint8_t* out = image + (row0 + r) * width + col0;
        const uint8_t* in = window.data() + r;
        for (int64_t c = c_tile; c < c_end; ++c) {
          out[c] |= in[c * rows];
        }
      }
    }
  }
}

void check_finite_boxes(const char* op, const at::Tensor& boxes) {
  if (!boxes.isfinite().all().item<bool>()) {
    const int64_t bad = boxes.isfinite().all(1).logical_not().nonzero()[0][0].item<int64_t>();
    TORCH_CHECK(false, op, ": box ", bad, " has a non-finite coordinate: ", boxes[bad]);
  }
}

std::vector<int64_t> read_crop_boxes(const char* op, const at::Tensor& boxes,
                                     const at::Tensor& inds, int64_t num_masks, int64_t out_h,
                                     int64_t out_w) {
  check_image_size(op, "output", out_h, out_w);
  TORCH_CHECK(out_h > 0 && out_w > 0, op, ": the output size must be positive, got ", out_h, "x",
              out_w);
  TORCH_CHECK(boxes.device().is_cpu() && boxes.dim() == 2 && boxes.size(1) == 4 &&
                  (boxes.scalar_type() == at::kFloat || boxes.scalar_type() == at::kDouble),
              op, ": expected boxes as a (N, 4) float32 or float64 tensor of x1, y1, x2, y2, "
              "got ", boxes.scalar_type(), " with shape ", boxes.sizes());
  check_finite_boxes(op, boxes);
  TORCH_CHECK(inds.device().is_cpu() && inds.dim() == 1 &&
                  at::isIntegralType(inds.scalar_type(), false) && inds.numel() == boxes.size(0),
              op, ": expected inds as a 1-D integer tensor with one mask index per box (",
              boxes.size(0), "), got ", inds.scalar_type(), " with shape ", inds.sizes());
  const at::Tensor values = inds.to(at::kLong).contiguous();
  std::vector<int64_t> index(values.const_data_ptr<int64_t>(),
                             values.const_data_ptr<int64_t>() + values.numel());
  for (size_t i = 0; i < index.size(); ++i) {
    TORCH_CHECK(index[i] >= 0 && index[i] < num_masks, op, ": inds[", i, "] = ", index[i],
                " is out of range for ", num_masks, " masks");
  }
  return index;
}

void check_ordered_boxes(const char* op, const at::Tensor& boxes) {
  const at::Tensor rois = boxes.contiguous();
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), "check_ordered_boxes", [&] {
    const scalar_t* roi = rois.const_data_ptr<scalar_t>();
    for (int64_t i = 0; i < rois.size(0); ++i) {
      const scalar_t* b = roi + 4 * i;
      TORCH_CHECK(b[2] >= b[0] && b[3] >= b[1], op, ": box ", i, " (", b[0], ", ", b[1], ", ",
                  b[2], ", ", b[3], ") must have x2 >= x1 and y2 >= y1 (mmcv's roi_align "
                  "refuses negative sizes)");
    }
  });
}

std::vector<int64_t> run_starts(const PackedCounts& rles) {
  std::vector<int64_t> starts(rles.values.size());
  for (int64_t r = 0; r < rles.size(); ++r) {
    int64_t position = 0;
    for (int64_t j = rles.offsets[r]; j < rles.offsets[r + 1]; ++j) {
      starts[j] = position;
      position += rles.values[j];
    }
  }
  return starts;
}

at::Tensor counts_to_tensor(const Counts& counts) {
  at::Tensor out = at::empty({static_cast<int64_t>(counts.size())}, at::kInt);
  if (!counts.empty()) {
    std::memcpy(out.mutable_data_ptr<int32_t>(), counts.data(), counts.size() * sizeof(uint32_t));
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> pack_counts(const std::vector<Counts>& rles) {
  int64_t total = 0;
  for (const Counts& rle : rles) {
    total += static_cast<int64_t>(rle.size());
  }
  at::Tensor counts = at::empty({total}, at::kInt);
  at::Tensor run_counts = at::empty({static_cast<int64_t>(rles.size())}, at::kLong);
  int32_t* out = counts.mutable_data_ptr<int32_t>();
  int64_t* lengths = run_counts.mutable_data_ptr<int64_t>();
  for (size_t i = 0; i < rles.size(); ++i) {
    if (!rles[i].empty()) {  // an empty tensor's data pointer may be null: memcpy(null) is UB
      std::memcpy(out, rles[i].data(), rles[i].size() * sizeof(uint32_t));
    }
    out += rles[i].size();
    lengths[i] = static_cast<int64_t>(rles[i].size());
  }
  return {counts, run_counts};
}

void check_mask_batch(const char* op, const at::Tensor& masks) {
  TORCH_CHECK(masks.dim() == 3 && (masks.scalar_type() == at::kByte ||
                                   masks.scalar_type() == at::kBool),
              op, ": expected masks as a (N, height, width) uint8 or bool tensor, got ",
              masks.scalar_type(), " with shape ", masks.sizes());
  check_image_size(op, "mask", masks.size(1), masks.size(2));
}

void RunWriter::flush() {
  if (end_ > begin_) {
    counts_.push_back(static_cast<uint32_t>(begin_ - background_begin_));
    counts_.push_back(static_cast<uint32_t>(end_ - begin_));
    background_begin_ = end_;
    begin_ = end_;
  }
}

void RunWriter::finish(int64_t area) {
  flush();
  // pycocotools ends with the last run: no empty background run after a foreground one, but one
  // run (possibly empty) when there is no foreground at all.
  if (counts_.empty() || background_begin_ < area) {
    counts_.push_back(static_cast<uint32_t>(area - background_begin_));
  }
}

void encode_rows(const uint8_t* mask, int64_t height, int64_t width, Counts& counts) {
  // Flips: pixels whose foreground bit differs from the pixel above (above row 0: background).
  // Found row by row, then grouped by column with a counting sort, which keeps each column's
  // rows in order.
  thread_local std::vector<int64_t> flip_column, flip_row, column_end, rows;
  flip_column.clear();
  flip_row.clear();
  auto compare = [&](const uint8_t* row, const uint8_t* above, int64_t x, int64_t y) {
    if ((row[x] != 0) != (above != nullptr && above[x] != 0)) {
      flip_column.push_back(x);
      flip_row.push_back(y);
    }
  };
  constexpr int64_t kWord = sizeof(uint64_t);
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = mask + y * width;
    const uint8_t* above = y > 0 ? row - width : nullptr;
    int64_t x = 0;
    for (; x + kWord <= width; x += kWord) {
      uint64_t here = 0, there = 0;
      std::memcpy(&here, row + x, kWord);
      if (above != nullptr) {
        std::memcpy(&there, above + x, kWord);
      }
      if (here != there) {
        for (int64_t k = x; k < x + kWord; ++k) {
          compare(row, above, k, y);
        }
      }
    }
    for (; x < width; ++x) {
      compare(row, above, x, y);
    }
  }
  column_end.assign(static_cast<size_t>(width) + 1, 0);
  for (const int64_t x : flip_column) {
    ++column_end[x + 1];
  }
  for (int64_t x = 0; x < width; ++x) {
    column_end[x + 1] += column_end[x];
  }
  rows.resize(flip_row.size());
  for (size_t j = 0; j < flip_row.size(); ++j) {
    rows[column_end[flip_column[j]]++] = flip_row[j];  // column_end[x] ends as column x's end
  }
  RunWriter writer(counts);
  int64_t j = 0;
  for (int64_t x = 0; x < width; ++x) {
    // A column's flips alternate background -> foreground -> background from its top.
    for (; j < column_end[x]; j += 2) {
      const int64_t end = j + 1 < column_end[x] ? rows[j + 1] : height;
      writer.foreground(x * height + rows[j], x * height + end);
    }
    j = column_end[x];
  }
  writer.finish(height * width);
}

void encode_columns(const uint8_t* mask, int64_t area, Counts& counts) {
  counts.clear();
  bool value = false;
  uint32_t run = 0;
  for (int64_t i = 0; i < area; ++i) {
    // pycocotools starts a new run whenever the byte changes; for a 0/1 mask that is the same
    // as here, where any non-zero byte is foreground.
    if ((mask[i] != 0) != value) {
      counts.push_back(run);
      run = 0;
      value = !value;
    }
    ++run;
  }
  counts.push_back(run);
}

}  // namespace mmdet_ext::masks
