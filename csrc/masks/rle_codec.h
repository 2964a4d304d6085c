// COCO run-length encoding (RLE) helpers shared by the mask kernels of every device (cpu/, cuda/):
// argument checks, unpacking, merging and painting, all on the host.
//
// An RLE is the list of run lengths of a binary mask read in column-major (Fortran) order,
// starting with a run of zeros (possibly empty), exactly as pycocotools stores it. Counts are
// 32-bit like pycocotools' `uint`, so an image may have at most kMaxPixels pixels.
#pragma once

#include <cstdint>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mmdet_ext::masks {

using Counts = std::vector<uint32_t>;

// Crop-and-resize boxes handled per parallel task: one box (a 28x28 mask) takes microseconds.
constexpr int64_t kBoxesPerTask = 16;

// pycocotools indexes pixels with C `int` (x * h + y), so h * w must fit in int32.
constexpr int64_t kMaxPixels = std::numeric_limits<int32_t>::max();

// Refuses negative sizes and images of more than kMaxPixels pixels. `what` names the size in the
// message ("image", "output").
void check_image_size(const char* op, const char* what, int64_t height, int64_t width);

// The `out` of an `*_into` op: a contiguous uint8 [N, H, W] tensor whose H x W passes
// check_image_size. Returns {H, W}; check_masks_out_count then checks N against the input.
std::pair<int64_t, int64_t> masks_out_size(const char* op, const at::Tensor& out);
void check_masks_out_count(const char* op, const at::Tensor& out, int64_t num_masks);

// Checks a 1-D integer tensor of run lengths (each in [0, 2^31 - 1]) and returns it as 32-bit
// counts.
Counts read_runs(const char* op, const at::Tensor& counts);

// read_runs, and the runs must sum to height * width.
Counts read_counts(const char* op, const at::Tensor& counts, int64_t height, int64_t width);

// Several RLEs packed one after another: counts [K_total], run_counts [N] (K of each RLE).
struct PackedCounts {
  Counts values;
  std::vector<int64_t> offsets;  // [N + 1], RLE i is values[offsets[i], offsets[i + 1])

  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  const uint32_t* data(int64_t i) const { return values.data() + offsets[i]; }
  int64_t length(int64_t i) const { return offsets[i + 1] - offsets[i]; }
};

// Checks and unpacks a batch of RLEs of one image size; every RLE must sum to height * width.
PackedCounts read_packed_counts(const char* op, const at::Tensor& counts,
                                const at::Tensor& run_counts, int64_t height, int64_t width);

// pycocotools' rleMerge: union (or intersection) of same-size RLEs, merged left to right.
Counts merge_counts(const std::vector<Counts>& rles, bool intersect);

// Sets to 1 the foreground pixels of an RLE in a row-major (height, width) uint8 image and
// leaves the others untouched, so painting several RLEs into one image gives their union.
void paint_counts(const uint32_t* counts, int64_t num_counts, int64_t height, int64_t width,
                  uint8_t* image);

// Refuses boxes (N, 4) with a NaN or infinite coordinate, naming the first such box.
void check_finite_boxes(const char* op, const at::Tensor& boxes);

// Checks the arguments of a crop-and-resize op: a positive output size, boxes (N, 4) float32 or
// float64 with finite x1, y1, x2, y2, and one index in [0, num_masks) per box, returned.
std::vector<int64_t> read_crop_boxes(const char* op, const at::Tensor& boxes,
                                     const at::Tensor& inds, int64_t num_masks, int64_t out_h,
                                     int64_t out_w);

// Where each run of every RLE starts in its mask (column-major pixel index), [values.size()]:
// a box or a pixel then finds its runs by binary search instead of walking from the start.
std::vector<int64_t> run_starts(const PackedCounts& rles);

// mmcv's roi_align refuses boxes with x2 < x1 or y2 < y1; so do the RLE crop kernels. boxes:
// as read_crop_boxes accepts them.
void check_ordered_boxes(const char* op, const at::Tensor& boxes);

// 1-D int32 tensor holding `counts`.
at::Tensor counts_to_tensor(const Counts& counts);

// The packed form of N RLEs: counts int32 [sum K_i], run_counts int64 [N].
std::tuple<at::Tensor, at::Tensor> pack_counts(const std::vector<Counts>& rles);

// Checks a batch of masks to encode: (N, height, width) uint8 or bool, height x width within
// check_image_size.
void check_mask_batch(const char* op, const at::Tensor& masks);

// Counts of a mask given as its foreground spans in column-major pixel order: spans [begin, end)
// arrive in increasing order, non-empty and not overlapping; touching spans make one run. The
// counts start with a background run (possibly empty) and end with the last run, as pycocotools'
// rleEncode writes them.
class RunWriter {
 public:
  explicit RunWriter(Counts& counts) : counts_(counts) { counts_.clear(); }
  void foreground(int64_t begin, int64_t end) {
    if (begin == end_ && end_ > begin_) {
      end_ = end;
      return;
    }
    flush();
    begin_ = begin;
    end_ = end;
  }
  // Writes the last runs of a mask of `area` pixels.
  void finish(int64_t area);

 private:
  void flush();

  Counts& counts_;
  int64_t background_begin_ = 0;
  int64_t begin_ = 0, end_ = 0;  // the foreground span not yet written, if end_ > begin_
};

// pycocotools' rleEncode of a row-major height x width mask (non-zero bytes are foreground)
// into `counts`, without transposing it: pixels that differ from the one above them are found a
// machine word at a time (rows of a mask mostly repeat the row above), then walked column by
// column.
void encode_rows(const uint8_t* mask, int64_t height, int64_t width, Counts& counts);

// The same for a column-major (Fortran-ordered) mask of `area` pixels.
void encode_columns(const uint8_t* mask, int64_t area, Counts& counts);

}  // namespace mmdet_ext::masks
