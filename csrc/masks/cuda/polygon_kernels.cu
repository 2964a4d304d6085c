// CUDA kernels of the polygon mask ops that run in the training step: full-size masks
// (LazyInstanceMasks.to_tensor on a GPU) and the Mask R-CNN targets (crop_and_resize). Bit-exact
// with the CPU kernels: both run the device-neutral rasteriser of ../polygon_raster.h.
//
// One block per output image. For each part of the instance: the threads share out its edges and
// XOR their toggles into a bitset, then its columns, each painted with the running parity from
// the XOR of every earlier column (a scan over the columns' parities). Arguments are checked on
// the host by the same code as on the CPU; the index arrays are small.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../packed_polygons.h"
#include "../polygon_raster.h"
#include "../rle_codec.h"
#include "../../cuda_launch.cuh"

namespace mmdet_ext {
namespace {

using masks::BoxFrame;

struct PolygonsOnDevice {
  const double* coords;
  const int64_t* part_offset;  // [P + 1]
  const int64_t* part_range;   // [N + 1]
};

// Paints the union of `instance`'s parts, mapped by `frame`, into the height x width `image`.
// scratch: toggle_words(height, width) + width words of this block's own.
__device__ void paint_instance(const PolygonsOnDevice& polygons, int64_t instance,
                               const BoxFrame& frame, int64_t height, int64_t width,
                               uint32_t* scratch, uint8_t* image) {
  const int64_t words = masks::toggle_words(height, width);
  uint32_t* bits = scratch;
  uint32_t* carry = scratch + words;  // per column: XOR of the toggles before it
  for (int64_t p = polygons.part_range[instance]; p < polygons.part_range[instance + 1]; ++p) {
    const double* xy = polygons.coords + polygons.part_offset[p];
    const int64_t n = (polygons.part_offset[p + 1] - polygons.part_offset[p]) / 2;
    for (int64_t k = threadIdx.x; k < words; k += blockDim.x) {
      bits[k] = 0;
    }
    __syncthreads();
    auto vertex = [&](int64_t k) {
      k = k == n ? 0 : k;
      return masks::to_grid(frame.x(xy[2 * k]), frame.y(xy[2 * k + 1]));
    };
    auto emit = [&](int64_t toggle) {
      atomicXor(bits + (toggle >> 5), 1u << (toggle & 31));
    };
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      masks::emit_edge_toggles(vertex, j, height, width, emit);
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < width; x += blockDim.x) {
      carry[x] = masks::toggle_column_parity(bits, x, height);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // exclusive XOR scan; width is at most a few thousand
      uint32_t before = 0;
      for (int64_t x = 0; x < width; ++x) {
        const uint32_t own = carry[x];
        carry[x] = before;
        before ^= own;
      }
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < width; x += blockDim.x) {
      masks::paint_toggle_column(bits, x, height, width, carry[x], image);
    }
    __syncthreads();
  }
}

// Image i: instance instance_of[i] (i itself when null) through box i (identity when null).
template <typename T>
__global__ void rasterize_kernel(PolygonsOnDevice polygons, const int64_t* instance_of,
                                 const T* boxes, int64_t height, int64_t width,
                                 int64_t scratch_words, uint32_t* scratch, uint8_t* images) {
  const int64_t i = blockIdx.x;
  const BoxFrame frame =
      boxes == nullptr ? BoxFrame{} : BoxFrame::of_box(boxes + 4 * i, height, width);
  const int64_t instance = instance_of == nullptr ? i : instance_of[i];
  paint_instance(polygons, instance, frame, height, width, scratch + i * scratch_words,
                 images + i * height * width);
}

// Uploads the checked batch and rasterises out.size(0) images into `out` (zeroed here; boxes
// undefined: full size). `coords` are the op's input: on out's device they are used there, on
// the host the checked copy in `polygons` is uploaded without blocking.
void rasterize_into(const at::Tensor& coords, const masks::PackedPolygons& polygons,
                    const std::vector<int64_t>* index, const at::Tensor& boxes,
                    const at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(out.device());
  const int64_t num_images = out.size(0), height = out.size(1), width = out.size(2);
  out.zero_();
  if (num_images == 0 || height * width == 0) {
    return;
  }
  const at::Tensor xy = coords.device() == out.device()
                            ? coords.to(at::kDouble).contiguous()
                            : cuda::to_device(polygons.coords, out.device());
  const at::Tensor part_offset = cuda::to_device(polygons.part_offset, out.device());
  const at::Tensor part_range = cuda::to_device(polygons.part_range, out.device());
  const at::Tensor instance_of =
      index == nullptr ? at::Tensor() : cuda::to_device(*index, out.device());
  const int64_t scratch_words = masks::toggle_words(height, width) + width;
  at::Tensor scratch = at::empty({num_images, scratch_words}, out.options().dtype(at::kInt));
  const PolygonsOnDevice view{xy.const_data_ptr<double>(), part_offset.const_data_ptr<int64_t>(),
                              part_range.const_data_ptr<int64_t>()};
  const int64_t* instances = index == nullptr ? nullptr : instance_of.const_data_ptr<int64_t>();
  auto* scratch_data = reinterpret_cast<uint32_t*>(scratch.mutable_data_ptr<int32_t>());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor rois = boxes.defined() ? boxes.contiguous() : at::empty({0, 4}, xy.options());
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), "rasterize_polygons", [&] {
    const scalar_t* box_data = boxes.defined() ? rois.const_data_ptr<scalar_t>() : nullptr;
    rasterize_kernel<scalar_t><<<num_images, cuda::kThreadsPerBlock, 0, stream>>>(
        view, instances, box_data, height, width, scratch_words, scratch_data,
        out.mutable_data_ptr<uint8_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor polygons_to_masks_cuda(const at::Tensor& coords, const at::Tensor& part_lengths,
                                  const at::Tensor& part_counts, int64_t height, int64_t width) {
  constexpr const char* op = "polygons_to_masks";
  TORCH_CHECK(coords.is_cuda(), op, ": expected coords on a CUDA device, got ", coords.device());
  masks::check_image_size(op, "image", height, width);
  const at::Tensor counts_host = part_counts.cpu();
  const masks::PackedPolygons polygons =
      masks::read_polygons(op, coords.cpu(), part_lengths.cpu(), &counts_host);
  at::Tensor out = at::empty({polygons.num_instances(), height, width},
                             coords.options().dtype(at::kByte));
  rasterize_into(coords, polygons, nullptr, at::Tensor(), out);
  return out;
}

// The polygons may be on the host (read there, no wait) or on out's GPU (read back first, which
// waits for the stream: keep them on the host where you can).
void polygons_to_masks_into_cuda(const at::Tensor& coords, const at::Tensor& part_lengths,
                                 const at::Tensor& part_counts, const at::Tensor& out) {
  constexpr const char* op = "polygons_to_masks_into";
  TORCH_CHECK(out.is_cuda(), op, ": expected out on a CUDA device, got ", out.device());
  TORCH_CHECK(coords.is_cpu() || coords.device() == out.device(), op,
              ": expected coords on the host or on out's device (", out.device(), "), got ",
              coords.device());
  masks::masks_out_size(op, out);
  const at::Tensor counts_host = part_counts.cpu();
  const masks::PackedPolygons polygons =
      masks::read_polygons(op, coords.cpu(), part_lengths.cpu(), &counts_host);
  masks::check_masks_out_count(op, out, polygons.num_instances());
  rasterize_into(coords, polygons, nullptr, at::Tensor(), out);
}

at::Tensor polygons_crop_and_resize_cuda(const at::Tensor& coords,
                                         const at::Tensor& part_lengths,
                                         const at::Tensor& part_counts, const at::Tensor& boxes,
                                         const at::Tensor& inds, int64_t out_h, int64_t out_w) {
  constexpr const char* op = "polygons_crop_and_resize";
  cuda::check_same_cuda_device(op, coords, boxes, "boxes");
  const at::Tensor counts_host = part_counts.cpu(), boxes_host = boxes.cpu();
  const masks::PackedPolygons polygons =
      masks::read_polygons(op, coords.cpu(), part_lengths.cpu(), &counts_host);
  const std::vector<int64_t> index = masks::read_crop_boxes(
      op, boxes_host, inds.cpu(), polygons.num_instances(), out_h, out_w);
  masks::check_crop_frames(op, polygons, boxes_host, index, out_h, out_w);
  at::Tensor out = at::empty({boxes.size(0), out_h, out_w}, coords.options().dtype(at::kByte));
  rasterize_into(coords, polygons, &index, boxes, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) {
  m.impl("polygons_to_masks", &polygons_to_masks_cuda);
  m.impl("polygons_to_masks_into", &polygons_to_masks_into_cuda);
  m.impl("polygons_crop_and_resize", &polygons_crop_and_resize_cuda);
}

}  // namespace mmdet_ext
