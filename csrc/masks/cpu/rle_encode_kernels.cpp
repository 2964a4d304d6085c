// CPU kernels of rle_encode (one mask) and rle_encode_batch (CUDA twin of the batch:
// ../cuda/rle_encode_kernels.cu): masks to COCO RLE runs, bit-exact with pycocotools' encode.
#include <cstdint>
#include <tuple>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../rle_codec.h"

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

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_encode", &rle_encode_cpu);
  m.impl("rle_encode_batch", &rle_encode_batch_cpu);
}

}  // namespace mmdet_ext
