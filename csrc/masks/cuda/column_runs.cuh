// COCO RLEs of N masks made on a GPU without writing the masks: each thread walks one column of
// one mask, top to bottom, and records where the column-major pixel sequence flips between
// background and foreground; the run lengths are the distances between flips. Used by
// rle_encode_batch (pixels read from uint8 masks, rle_encode_kernels.cu) and paste_masks_to_rle
// (pixels computed from the predicted masks, paste_mask_kernels.cu).
//
// A Source has int64_t members `height` and `width` and
//   __device__ Column column(int64_t mask, int64_t x) const;
// a Column has int64_t members `begin` <= `end` within [0, height] (the rows outside [begin, end)
// are background) and
//   __device__ bool operator()(int64_t y) const;  // pixel (x, y) is foreground, y in [begin, end)
#pragma once

#include <tuple>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include "../../cuda_launch.cuh"

namespace mmdet_ext::cuda {
// Internal linkage: each .cu file that includes this header gets its own kernels.
namespace {

template <typename Column>
__device__ bool column_pixel(const Column& column, int64_t y) {
  return y >= column.begin && y < column.end && column(y);
}

// The flips of column x of a mask: pixels that differ from the pixel before them in COCO's
// order (the bottom of column x - 1; background before the first pixel). Writes their positions
// (x * height + y) to `out` unless it is null; returns how many there are.
template <typename Source>
__device__ int64_t column_flips(const Source& source, int64_t mask, int64_t x, int64_t* out) {
  const int64_t height = source.height;
  bool previous = x > 0 && column_pixel(source.column(mask, x - 1), height - 1);
  const auto column = source.column(mask, x);
  int64_t flips = 0;
  auto flip = [&](int64_t y) {
    if (out != nullptr) {
      out[flips] = x * height + y;
    }
    ++flips;
    previous = !previous;
  };
  if (previous && column.begin > 0) {
    flip(0);  // the background rows above the column's range
  }
  for (int64_t y = column.begin; y < column.end; ++y) {
    if (column(y) != previous) {
      flip(y);
    }
  }
  if (previous && column.end < height) {
    flip(column.end);  // the background rows below it
  }
  return flips;
}

// Block b walks tiles of kThreadsPerBlock adjacent columns of one mask (grid-stride over the
// tiles), so the threads of a warp read adjacent bytes of a row; one division per tile. Counts
// each column's flips into `flips` [N * width], or, with `starts` (where each column's flips go
// in `positions`), writes them.
template <typename Source>
__global__ void column_flips_kernel(Source source, int64_t num_masks, const int64_t* starts,
                                    int64_t* flips, int64_t* positions) {
  const int64_t width = source.width;
  const int64_t tiles_per_mask = (width + blockDim.x - 1) / blockDim.x;
  for (int64_t tile = blockIdx.x; tile < num_masks * tiles_per_mask; tile += gridDim.x) {
    const int64_t mask = tile / tiles_per_mask;
    const int64_t x = (tile - mask * tiles_per_mask) * blockDim.x + threadIdx.x;
    if (x < width) {
      const int64_t g = mask * width + x;
      if (starts == nullptr) {
        flips[g] = column_flips(source, mask, x, nullptr);
      } else {
        column_flips(source, mask, x, positions + starts[g]);
      }
    }
  }
}

// Mask i's runs from its flips positions[first[i], first[i] + count[i]): run k spans from flip
// k - 1 (or the first pixel) to flip k (or the end of the mask); run counts[first[i] + i + k].
__global__ void runs_from_flips_kernel(const int64_t* positions, const int64_t* first,
                                       const int64_t* count, int64_t num_masks, int64_t area,
                                       int32_t* counts) {
  for (int64_t i = blockIdx.x; i < num_masks; i += gridDim.x) {
    const int64_t* flip = positions + first[i];
    const int64_t n = count[i];
    int32_t* out = counts + first[i] + i;
    for (int64_t k = threadIdx.x; k <= n; k += blockDim.x) {
      const int64_t begin = k > 0 ? flip[k - 1] : 0;
      const int64_t end = k < n ? flip[k] : area;
      out[k] = static_cast<int32_t>(end - begin);
    }
  }
}

// The packed RLEs (counts int32, run_counts int64, on `device`, the current device) of the N
// masks of `source`. Reading the number of flips back to size the result waits for the stream.
template <typename Source>
std::tuple<at::Tensor, at::Tensor> column_runs(const Source& source, int64_t num_masks,
                                               const at::Device& device) {
  const at::TensorOptions longs = at::TensorOptions().device(device).dtype(at::kLong);
  const at::TensorOptions ints = longs.dtype(at::kInt);
  const int64_t area = source.height * source.width;
  if (num_masks == 0 || area == 0) {  // pycocotools: one empty run per 0-pixel mask
    return {at::zeros({num_masks}, ints), at::ones({num_masks}, longs)};
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t tiles = num_masks * ((source.width + kThreadsPerBlock - 1) / kThreadsPerBlock);
  at::Tensor flips = at::empty({num_masks * source.width}, longs);
  column_flips_kernel<<<blocks_for_rows(tiles), kThreadsPerBlock, 0, stream>>>(
      source, num_masks, nullptr, flips.mutable_data_ptr<int64_t>(), nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor starts = flips.cumsum(0) - flips;
  const at::Tensor per_mask = flips.view({num_masks, source.width}).sum(1);
  const at::Tensor first = per_mask.cumsum(0) - per_mask;
  const int64_t total = per_mask.sum().item<int64_t>();
  at::Tensor positions = at::empty({total}, longs);
  column_flips_kernel<<<blocks_for_rows(tiles), kThreadsPerBlock, 0, stream>>>(
      source, num_masks, starts.const_data_ptr<int64_t>(), nullptr,
      positions.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor counts = at::empty({total + num_masks}, ints);
  runs_from_flips_kernel<<<blocks_for_rows(num_masks), kThreadsPerBlock, 0, stream>>>(
      positions.const_data_ptr<int64_t>(), first.const_data_ptr<int64_t>(),
      per_mask.const_data_ptr<int64_t>(), num_masks, area, counts.mutable_data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {counts, per_mask + 1};
}

}  // namespace
}  // namespace mmdet_ext::cuda
