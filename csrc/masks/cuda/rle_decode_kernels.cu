// CUDA kernels of the RLE decode ops that run in the training step (CPU twins:
// ../cpu/rle_decode_kernels.cpp, ../cpu/rle_crop_and_resize_kernel.cpp): decoding to full-size
// masks (LazyInstanceMasks.to_tensor on a GPU) and the Mask R-CNN targets of crowd RLEs
// (rle_crop_and_resize, which decodes its masks with the same kernel first, so it lives here).
// Bit-exact with the CPU kernels: decoding is exact by construction, and the crop runs the
// device-neutral roi_align of ../roi_align_binary.h. Arguments are checked on the host by the
// same code as on the CPU (counts arrive as a short list of run lengths).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../rle_codec.h"
#include "../roi_align_binary.h"
#include "../../cuda_launch.cuh"

namespace mmdet_ext {
namespace {

// Runs of N RLEs on the device: run j of RLE i starts at starts[j] (column-major pixel index),
// j in [offsets[i], offsets[i + 1]); odd runs are foreground.
struct RunsOnDevice {
  const int64_t* starts;
  const int64_t* offsets;
};

// Pixel p of RLE i: the run holding it is the last one starting at or before p (empty runs share
// their start with the next run, so they are never the last).
__device__ uint8_t rle_pixel(const RunsOnDevice& runs, int64_t i, int64_t p) {
  int64_t low = runs.offsets[i], high = runs.offsets[i + 1];  // answer in [low, high)
  while (high - low > 1) {
    const int64_t mid = low + (high - low) / 2;
    if (runs.starts[mid] <= p) {
      low = mid;
    } else {
      high = mid;
    }
  }
  return static_cast<uint8_t>((low - runs.offsets[i]) & 1);
}

// Row r of the output is row r % height of mask r / height.
__global__ void decode_kernel(RunsOnDevice runs, int64_t num_masks, int64_t height,
                              int64_t width, uint8_t* images) {
  const int64_t rows = num_masks * height;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t i = r / height, y = r % height;
    uint8_t* row = images + r * width;
    for (int64_t x = threadIdx.x; x < width; x += blockDim.x) {
      row[x] = rle_pixel(runs, i, x * height + y);  // row-major output, column-major runs
    }
  }
}

// Checked RLEs uploaded: starts and offsets as int64 on the device.
struct UploadedRuns {
  at::Tensor starts, offsets;
  RunsOnDevice view() const {
    return {starts.const_data_ptr<int64_t>(), offsets.const_data_ptr<int64_t>()};
  }
};

UploadedRuns upload(const masks::PackedCounts& rles, const at::Device& device) {
  return {cuda::to_device(masks::run_starts(rles), device),
          cuda::to_device(rles.offsets, device)};
}

// Writes every pixel of `out` (num_masks x height x width uint8 on the current device).
void decode_into(const UploadedRuns& runs, int64_t num_masks, int64_t height, int64_t width,
                 const at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  decode_kernel<<<cuda::blocks_for_rows(num_masks * height), cuda::kThreadsPerBlock, 0,
                  c10::cuda::getCurrentCUDAStream()>>>(runs.view(), num_masks, height, width,
                                                      out.mutable_data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The counts may be on the host (read there, no wait) or on out's GPU (read back first, which
// waits for the stream: keep them on the host where you can).
void rle_decode_batch_into_cuda(const at::Tensor& counts, const at::Tensor& run_counts,
                                const at::Tensor& out) {
  constexpr const char* op = "rle_decode_batch_into";
  TORCH_CHECK(out.is_cuda(), op, ": expected out on a CUDA device, got ", out.device());
  TORCH_CHECK(counts.is_cpu() || counts.device() == out.device(), op,
              ": expected counts on the host or on out's device (", out.device(), "), got ",
              counts.device());
  const auto [height, width] = masks::masks_out_size(op, out);
  const masks::PackedCounts rles =
      masks::read_packed_counts(op, counts.cpu(), run_counts.cpu(), height, width);
  masks::check_masks_out_count(op, out, rles.size());
  const c10::cuda::CUDAGuard guard(out.device());
  decode_into(upload(rles, out.device()), rles.size(), height, width, out);
}

at::Tensor rle_decode_batch_cuda(const at::Tensor& counts, const at::Tensor& run_counts,
                                 int64_t height, int64_t width) {
  constexpr const char* op = "rle_decode_batch";
  TORCH_CHECK(counts.is_cuda(), op, ": expected counts on a CUDA device, got ", counts.device());
  const masks::PackedCounts rles =
      masks::read_packed_counts(op, counts.cpu(), run_counts.cpu(), height, width);
  const c10::cuda::CUDAGuard guard(counts.device());
  at::Tensor out = at::empty({rles.size(), height, width}, counts.options().dtype(at::kByte));
  decode_into(upload(rles, counts.device()), rles.size(), height, width, out);
  return out;
}

at::Tensor rle_decode_cuda(const at::Tensor& counts, int64_t height, int64_t width) {
  const at::Tensor one = at::full({1}, counts.size(0), at::kLong);
  return rle_decode_batch_cuda(counts, one, height, width)[0];
}

// Block b takes box i = b (grid-stride over boxes); its threads share out the box's out_h x out_w
// cells (at most 2^31 - 1, checked on the host), so a cell's row and column are 32-bit
// divisions. Cell (ph, pw) of box i: mmdet's BitmapMasks.crop_and_resize of mask inds[i].
template <typename T>
__global__ void crop_and_resize_kernel(const uint8_t* masks_data, int64_t height, int64_t width,
                                       const T* boxes, const int64_t* mask_of, int64_t num_boxes,
                                       int out_h, int out_w, uint8_t* out) {
  const int cells = out_h * out_w;
  for (int64_t i = blockIdx.x; i < num_boxes; i += gridDim.x) {
    const masks::RoiAlignBox<T> box(boxes + 4 * i, out_h, out_w);
    const uint8_t* mask = masks_data + mask_of[i] * height * width;
    auto sample_y = [&](int p, int s) {
      return masks::axis_sample<T>(box.start_h, box.bin_h, box.grid_h, p, s,
                                   static_cast<int>(height));
    };
    auto sample_x = [&](int p, int s) {
      return masks::axis_sample<T>(box.start_w, box.bin_w, box.grid_w, p, s,
                                   static_cast<int>(width));
    };
    auto pixel = [&](int y, int x) { return mask[y * width + x]; };
    uint8_t* cell_out = out + i * cells;
    for (int cell = threadIdx.x; cell < cells; cell += blockDim.x) {
      cell_out[cell] = masks::roi_align_cell(box, cell / out_w, cell % out_w, sample_y, sample_x,
                                             pixel);
    }
  }
}

at::Tensor rle_crop_and_resize_cuda(const at::Tensor& counts, const at::Tensor& run_counts,
                                    int64_t height, int64_t width, const at::Tensor& boxes,
                                    const at::Tensor& inds, int64_t out_h, int64_t out_w) {
  constexpr const char* op = "rle_crop_and_resize";
  cuda::check_same_cuda_device(op, counts, boxes, "boxes");
  const at::Tensor boxes_host = boxes.cpu();
  const masks::PackedCounts rles =
      masks::read_packed_counts(op, counts.cpu(), run_counts.cpu(), height, width);
  const std::vector<int64_t> mask_index =
      masks::read_crop_boxes(op, boxes_host, inds.cpu(), rles.size(), out_h, out_w);
  masks::check_ordered_boxes(op, boxes_host);
  const c10::cuda::CUDAGuard guard(counts.device());
  const int64_t n = boxes.size(0);
  at::Tensor out = at::empty({n, out_h, out_w}, counts.options().dtype(at::kByte));
  if (n == 0 || height == 0 || width == 0) {
    // A 0-pixel mask: every sample falls outside it, so mmcv (and the CPU kernel) give zeros;
    // the kernel would read the empty decode.
    return out.zero_();
  }
  // Crowd RLEs are few per image, so decoding each once at full size costs less than finding
  // runs per sample; the samples then read pixels as mmcv's roi_align reads the bitmap.
  at::Tensor full = at::empty({rles.size(), height, width}, counts.options().dtype(at::kByte));
  decode_into(upload(rles, counts.device()), rles.size(), height, width, full);
  const at::Tensor mask_of = cuda::to_device(mask_index, counts.device());
  const at::Tensor rois = boxes.contiguous();
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), op, [&] {
    crop_and_resize_kernel<scalar_t><<<cuda::blocks_for_rows(n), cuda::kThreadsPerBlock, 0,
                                       c10::cuda::getCurrentCUDAStream()>>>(
        full.const_data_ptr<uint8_t>(), height, width, rois.const_data_ptr<scalar_t>(),
        mask_of.const_data_ptr<int64_t>(), n, static_cast<int>(out_h), static_cast<int>(out_w),
        out.mutable_data_ptr<uint8_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) {
  m.impl("rle_decode", &rle_decode_cuda);
  m.impl("rle_decode_batch", &rle_decode_batch_cuda);
  m.impl("rle_decode_batch_into", &rle_decode_batch_into_cuda);
  m.impl("rle_crop_and_resize", &rle_crop_and_resize_cuda);
}

}  // namespace mmdet_ext
