// CPU kernels of the polygon mask ops: COCO polygons to RLE (pycocotools frPyObjects + merge),
// to full-size masks, and cropped and resized into boxes for the Mask R-CNN mask head (mmdet's
// PolygonMasks.crop_and_resize(...).to_ndarray()). The rasteriser itself is device-neutral
// (../polygon_raster.h), shared with the CUDA kernels.
#include <algorithm>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "../packed_polygons.h"
#include "../polygon_raster.h"
#include "../rle_codec.h"

namespace mmdet_ext {
namespace {

using masks::BoxFrame;
using masks::Counts;
using masks::GridPoint;
using masks::PackedPolygons;

// rleFrPoly's output as RLE counts: the toggles of every edge, sorted.
class PolygonRasterizer {
 public:
  PolygonRasterizer(int64_t height, int64_t width) : height_(height), width_(width) {}

  // pycocotools' rleFrPoly for one part of `num_points` (x, y) pairs; needs height * width > 0.
  Counts rasterize(const double* xy, int64_t num_points) {
    toggles_.clear();
    points_.resize(num_points + 1);
    for (int64_t j = 0; j < num_points; ++j) {
      points_[j] = masks::to_grid(xy[2 * j], xy[2 * j + 1]);
    }
    points_[num_points] = points_[0];
    auto vertex = [&](int64_t k) { return points_[k]; };
    auto emit = [&](int64_t toggle) { toggles_.push_back(static_cast<uint32_t>(toggle)); };
    for (int64_t j = 0; j < num_points; ++j) {
      masks::emit_edge_toggles(vertex, j, height_, width_, emit);
    }
    return counts_from_toggles();
  }

 private:
  // Sorted toggle positions (plus the image end) to run lengths; coinciding toggles cancel in
  // pairs, exactly as rleFrPoly merges its zero-length runs.
  Counts counts_from_toggles() {
    toggles_.push_back(static_cast<uint32_t>(height_ * width_));
    std::sort(toggles_.begin(), toggles_.end());
    uint32_t previous = 0;
    for (uint32_t& t : toggles_) {
      const uint32_t position = t;
      t -= previous;
      previous = position;
    }
    Counts counts;
    counts.reserve(toggles_.size());
    size_t j = 0;
    counts.push_back(toggles_[j++]);
    while (j < toggles_.size()) {
      if (toggles_[j] > 0) {
        counts.push_back(toggles_[j++]);
      } else {
        ++j;
        if (j < toggles_.size()) {
          counts.back() += toggles_[j++];
        }
      }
    }
    return counts;
  }

  int64_t height_, width_;
  std::vector<GridPoint> points_;
  std::vector<uint32_t> toggles_;
};

at::Tensor rle_from_polygons_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                 int64_t height, int64_t width) {
  constexpr const char* op = "rle_from_polygons";
  masks::check_image_size(op, "image", height, width);
  const PackedPolygons polygons = masks::read_polygons(op, coords, part_lengths, nullptr);
  const int64_t area = height * width;
  const int64_t num_parts = polygons.part_range.back();
  if (area == 0 || num_parts == 0) {
    return masks::counts_to_tensor({static_cast<uint32_t>(area)});
  }
  PolygonRasterizer rasterizer(height, width);
  std::vector<Counts> parts;
  parts.reserve(num_parts);
  for (int64_t p = 0; p < num_parts; ++p) {
    parts.push_back(rasterizer.rasterize(polygons.part(p), polygons.num_points(p)));
  }
  return masks::counts_to_tensor(masks::merge_counts(parts, false));
}

// Paints every instance into its image of `images` (n x height x width, zeroed by the caller).
void paint_polygons(const PackedPolygons& polygons, int64_t height, int64_t width,
                    uint8_t* images) {
  if (height * width == 0) {
    return;
  }
  // Full-size masks: sorted toggles to runs, painted run by run, visit only the foreground.
  at::parallel_for(0, polygons.num_instances(), 1, [&](int64_t begin, int64_t end) {
    PolygonRasterizer rasterizer(height, width);
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t p = polygons.part_range[i]; p < polygons.part_range[i + 1]; ++p) {
        const Counts counts = rasterizer.rasterize(polygons.part(p), polygons.num_points(p));
        masks::paint_counts(counts.data(), static_cast<int64_t>(counts.size()), height, width,
                            images + i * height * width);
      }
    }
  });
}

at::Tensor polygons_to_masks_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                 const at::Tensor& part_counts, int64_t height, int64_t width) {
  constexpr const char* op = "polygons_to_masks";
  masks::check_image_size(op, "image", height, width);
  const PackedPolygons polygons = masks::read_polygons(op, coords, part_lengths, &part_counts);
  at::Tensor out = at::zeros({polygons.num_instances(), height, width}, at::kByte);
  paint_polygons(polygons, height, width, out.mutable_data_ptr<uint8_t>());
  return out;
}

// polygons_to_masks written into a given [N, H, W] uint8 tensor (its CUDA twin is what lets the
// packed polygons stay on the host while the masks are made on a GPU).
void polygons_to_masks_into_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                const at::Tensor& part_counts, const at::Tensor& out) {
  constexpr const char* op = "polygons_to_masks_into";
  TORCH_CHECK(out.device().is_cpu(), op, ": expected out on the CPU, got ", out.device());
  const auto [height, width] = masks::masks_out_size(op, out);
  const PackedPolygons polygons = masks::read_polygons(op, coords, part_lengths, &part_counts);
  masks::check_masks_out_count(op, out, polygons.num_instances());
  out.zero_();
  paint_polygons(polygons, height, width, out.mutable_data_ptr<uint8_t>());
}

// Paints the union of one instance's parts, mapped into a box, into an out_h x out_w image
// through a toggle bitset: the same device-neutral steps a CUDA block runs
// (cuda/polygon_kernels.cu), here in one thread.
void paint_instance_in_box(const PackedPolygons& polygons, int64_t instance,
                           const BoxFrame& frame, int64_t out_h, int64_t out_w,
                           std::vector<uint32_t>& bits, uint8_t* image) {
  for (int64_t p = polygons.part_range[instance]; p < polygons.part_range[instance + 1]; ++p) {
    const double* xy = polygons.part(p);
    const int64_t n = polygons.num_points(p);
    auto vertex = [&](int64_t k) {
      k = k == n ? 0 : k;
      return masks::to_grid(frame.x(xy[2 * k]), frame.y(xy[2 * k + 1]));
    };
    auto emit = [&](int64_t toggle) { bits[toggle >> 5] ^= 1u << (toggle & 31); };
    std::fill(bits.begin(), bits.end(), 0u);
    for (int64_t j = 0; j < n; ++j) {
      masks::emit_edge_toggles(vertex, j, out_h, out_w, emit);
    }
    uint32_t carry = 0;
    for (int64_t x = 0; x < out_w; ++x) {
      masks::paint_toggle_column(bits.data(), x, out_h, out_w, carry, image);
      carry ^= masks::toggle_column_parity(bits.data(), x, out_h);
    }
  }
}

at::Tensor polygons_crop_and_resize_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                        const at::Tensor& part_counts, const at::Tensor& boxes,
                                        const at::Tensor& inds, int64_t out_h, int64_t out_w) {
  constexpr const char* op = "polygons_crop_and_resize";
  const PackedPolygons polygons = masks::read_polygons(op, coords, part_lengths, &part_counts);
  const std::vector<int64_t> index =
      masks::read_crop_boxes(op, boxes, inds, polygons.num_instances(), out_h, out_w);
  masks::check_crop_frames(op, polygons, boxes, index, out_h, out_w);
  const int64_t n = boxes.size(0);
  const at::Tensor rois = boxes.contiguous();
  at::Tensor out = at::zeros({n, out_h, out_w}, at::kByte);
  uint8_t* images = out.mutable_data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), "polygons_crop_and_resize", [&] {
    const scalar_t* roi = rois.const_data_ptr<scalar_t>();
    at::parallel_for(0, n, masks::kBoxesPerTask, [&](int64_t begin, int64_t end) {
      std::vector<uint32_t> bits(masks::toggle_words(out_h, out_w));
      for (int64_t i = begin; i < end; ++i) {
        const BoxFrame frame = BoxFrame::of_box(roi + 4 * i, out_h, out_w);
        paint_instance_in_box(polygons, index[i], frame, out_h, out_w, bits,
                              images + i * out_h * out_w);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_from_polygons", &rle_from_polygons_cpu);
  m.impl("polygons_to_masks", &polygons_to_masks_cpu);
  m.impl("polygons_to_masks_into", &polygons_to_masks_into_cpu);
  m.impl("polygons_crop_and_resize", &polygons_crop_and_resize_cpu);
}

}  // namespace mmdet_ext
