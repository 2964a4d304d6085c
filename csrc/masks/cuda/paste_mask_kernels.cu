// CUDA kernel of paste_masks_to_rle: mmdet's test-time mask pasting and thresholding on a GPU,
// straight to COCO RLE (column_runs.cuh), so only the runs come back to the host. Each pixel is
// computed by the device-neutral arithmetic of ../paste_mask.h that the CPU kernel runs, so the
// two agree bit for bit; the arguments are checked on the host by the same code (the boxes are
// read back for it, which waits for the stream).
#include <tuple>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../paste_mask.h"
#include "../../cuda_launch.cuh"
#include "column_runs.cuh"

namespace mmdet_ext {
namespace {

using masks::PasteBox;
using masks::PasteTap;

// One column of a pasted mask: the rows of its box's span, each thresholded on the fly.
struct PastedColumn {
  int64_t begin, end;
  const float* mask;
  int mask_height, mask_width;
  PasteBox box;
  PasteTap tap;
  float threshold;

  __device__ bool operator()(int64_t y) const {
    const PasteTap row = box.row_tap(y, mask_height);
    return row.valid && masks::paste_value(mask, mask_height, mask_width, row, tap) >= threshold;
  }
};

// The pasted masks as a column_runs Source; columns outside the box's span, or that sample no
// mask cell, are background.
struct PastedMasks {
  const float* masks;
  const float* boxes;
  int64_t height, width;
  int mask_height, mask_width;
  float threshold;
  bool skip_empty;

  __device__ PastedColumn column(int64_t i, int64_t x) const {
    const PasteBox box(boxes + 4 * i, height, width, skip_empty);
    const PasteTap tap = box.column_tap(x, mask_width);
    const bool sampled = tap.valid && x >= box.columns.begin && x < box.columns.end;
    const int64_t cells = static_cast<int64_t>(mask_height) * mask_width;
    return {sampled ? box.rows.begin : 0, sampled ? box.rows.end : 0, masks + i * cells,
            mask_height, mask_width, box, tap, threshold};
  }
};

std::tuple<at::Tensor, at::Tensor> paste_masks_to_rle_cuda(const at::Tensor& masks,
                                                           const at::Tensor& boxes,
                                                           int64_t height, int64_t width,
                                                           double threshold, bool skip_empty) {
  constexpr const char* op = "paste_masks_to_rle";
  cuda::check_same_cuda_device(op, masks, boxes, "boxes");
  const masks::PasteArgs args = masks::read_paste_args(op, masks, boxes.cpu(), height, width,
                                                       threshold);
  const c10::cuda::CUDAGuard guard(masks.device());
  const at::Tensor probabilities = masks.contiguous();
  const at::Tensor rois = boxes.contiguous();
  const PastedMasks source{probabilities.const_data_ptr<float>(),
                           rois.const_data_ptr<float>(),
                           height,
                           width,
                           args.mask_height,
                           args.mask_width,
                           args.threshold,
                           skip_empty};
  return cuda::column_runs(source, args.num_masks, masks.device());
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) {
  m.impl("paste_masks_to_rle", &paste_masks_to_rle_cuda);
}

}  // namespace mmdet_ext
