// CUDA kernel of rle_encode_batch (CPU twin: ../cpu/rle_encode_kernels.cpp): a batch of masks
// encoded at test time, so that only their runs come back to the host (column_runs.cuh); exact
// by construction. The masks are checked on the host by the same code as on the CPU.
#include <tuple>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../rle_codec.h"
#include "column_runs.cuh"

namespace mmdet_ext {
namespace {

// rle_encode_batch's masks as a column_runs Source: non-zero bytes are foreground.
struct ByteColumn {
  int64_t begin, end;
  const uint8_t* top;
  int64_t stride;
  __device__ bool operator()(int64_t y) const { return top[y * stride] != 0; }
};

struct ByteMasks {
  const uint8_t* data;
  int64_t height, width;
  __device__ ByteColumn column(int64_t mask, int64_t x) const {
    return {0, height, data + mask * height * width + x, width};
  }
};

std::tuple<at::Tensor, at::Tensor> rle_encode_batch_cuda(const at::Tensor& masks) {
  constexpr const char* op = "rle_encode_batch";
  TORCH_CHECK(masks.is_cuda(), op, ": expected the masks on a CUDA device, got ", masks.device());
  masks::check_mask_batch(op, masks);
  const c10::cuda::CUDAGuard guard(masks.device());
  const at::Tensor rows = masks.contiguous();
  const ByteMasks source{static_cast<const uint8_t*>(rows.const_data_ptr()), rows.size(1),
                         rows.size(2)};
  return cuda::column_runs(source, rows.size(0), masks.device());
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) {
  m.impl("rle_encode_batch", &rle_encode_batch_cuda);
}

}  // namespace mmdet_ext
