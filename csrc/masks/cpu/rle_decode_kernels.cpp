// CPU kernels of rle_decode, rle_decode_batch and rle_decode_batch_into (CUDA twins:
// ../cuda/rle_decode_kernels.cu): COCO RLE runs painted into uint8 masks, as pycocotools'
// decode does.
#include <cstdint>

#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "../rle_codec.h"

namespace mmdet_ext {
namespace {

using masks::Counts;

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

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_decode", &rle_decode_cpu);
  m.impl("rle_decode_batch", &rle_decode_batch_cpu);
  m.impl("rle_decode_batch_into", &rle_decode_batch_into_cpu);
}

}  // namespace mmdet_ext
