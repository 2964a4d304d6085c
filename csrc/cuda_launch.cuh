// What every CUDA kernel host function of mmdet_ext needs: the launch shape, and moving the small
// host-side index arrays (checked on the host by the same code as on the CPU) to the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace mmdet_ext::cuda {

// Threads per block: one block per box or instance walks its polygon edges and columns.
constexpr int kThreadsPerBlock = 128;

// Blocks for a grid-stride loop over `n` rows, one row per block at a time (capped: the loop
// covers the rest). The kernels find a row's indices with a few 64-bit divisions per row, then
// its threads walk the row's columns: no division per element.
inline int blocks_for_rows(int64_t n) {
  return static_cast<int>(n < 65535 ? (n > 0 ? n : 1) : 65535);
}

// `values` on `device`, staged in pinned host memory and copied without blocking the host. A
// copy from pageable memory is synchronous: the host would wait for everything queued on the
// stream before it, a prefetched non_blocking pixel copy included. The caching host allocator
// keeps the staging buffer until the copy has run (it records an event on the current stream).
template <typename T>
at::Tensor to_device(const std::vector<T>& values, const at::Device& device) {
  at::Tensor staged = at::empty(
      {static_cast<int64_t>(values.size())},
      at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value).pinned_memory(true));
  std::copy(values.begin(), values.end(), staged.mutable_data_ptr<T>());
  return staged.to(device, /*non_blocking=*/true);
}

// `values` on `device`: as they are when already there, else through pinned host memory as
// above (a tensor on another GPU is read back first, which waits for its stream).
inline at::Tensor to_device(const at::Tensor& values, const at::Device& device) {
  if (values.device() == device) {
    return values.contiguous();
  }
  return values.cpu().contiguous().pin_memory().to(device, /*non_blocking=*/true);
}

// The CUDA kernels take their pixel data (`data`) and boxes on one GPU; index tensors may be
// anywhere (they are read on the host).
inline void check_same_cuda_device(const char* op, const at::Tensor& data,
                                   const at::Tensor& other, const char* other_name) {
  TORCH_CHECK(data.is_cuda() && other.is_cuda() && data.device() == other.device(), op,
              ": expected the data and ", other_name, " on one CUDA device, got ", data.device(),
              " and ", other.device());
}

}  // namespace mmdet_ext::cuda
