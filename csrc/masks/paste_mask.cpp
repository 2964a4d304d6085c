// Argument checks of paste_masks_to_rle, shared by its CPU and CUDA kernels (see paste_mask.h).
#include "paste_mask.h"

#include <cmath>

#include <c10/util/Exception.h>

#include "rle_codec.h"

namespace mmdet_ext::masks {

namespace {

// Mask sides up to 2^24 cells: the kernels compare cell indices as float32, exact up to there.
constexpr int64_t kMaxMaskSide = int64_t{1} << 24;

}  // namespace

PasteArgs read_paste_args(const char* op, const at::Tensor& masks, const at::Tensor& boxes,
                          int64_t height, int64_t width, double threshold) {
  TORCH_CHECK(masks.dim() == 3 && masks.scalar_type() == at::kFloat, op,
              ": expected masks as a (N, M_h, M_w) float32 tensor of probabilities (mmdet "
              "pastes in float32: convert others with .float()), got ",
              masks.scalar_type(), " with shape ", masks.sizes());
  TORCH_CHECK(masks.size(1) > 0 && masks.size(2) > 0 && masks.size(1) <= kMaxMaskSide &&
                  masks.size(2) <= kMaxMaskSide,
              op, ": expected masks of 1 to 2^24 cells a side, got ", masks.size(1), "x",
              masks.size(2));
  TORCH_CHECK(boxes.device().is_cpu() && boxes.dim() == 2 && boxes.size(1) == 4 &&
                  boxes.scalar_type() == at::kFloat,
              op, ": expected boxes as a (N, 4) float32 tensor of x1, y1, x2, y2 in output "
              "pixels, got ", boxes.scalar_type(), " with shape ", boxes.sizes());
  TORCH_CHECK(boxes.size(0) == masks.size(0), op, ": expected one box per mask, got ",
              boxes.size(0), " boxes for ", masks.size(0), " masks");
  check_finite_boxes(op, boxes);
  check_image_size(op, "image", height, width);
  const float cut = static_cast<float>(threshold);
  TORCH_CHECK(std::isfinite(threshold) && cut > 0.0f, op,
              ": expected a finite threshold > 0 (mmdet's mask_thr_binary, 0.5 in its configs), "
              "got ", threshold, " (as float32: ", cut, "). mmdet's negative thresholds make "
              "soft uint8 masks, which have no binary RLE, and at 0 every pixel it pastes would "
              "be foreground");
  return {masks.size(0), static_cast<int>(masks.size(1)), static_cast<int>(masks.size(2)), cut};
}

}  // namespace mmdet_ext::masks
