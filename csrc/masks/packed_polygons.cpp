// Checks and indexing of packed polygon batches (see packed_polygons.h).
#include "packed_polygons.h"

#include <algorithm>
#include <cmath>

#include <ATen/Dispatch.h>
#include <c10/util/Exception.h>

#include "polygon_raster.h"

namespace mmdet_ext::masks {
namespace {

std::vector<int64_t> read_lengths(const char* op, const char* name, const at::Tensor& lengths) {
  TORCH_CHECK(lengths.device().is_cpu() && lengths.dim() == 1 &&
                  at::isIntegralType(lengths.scalar_type(), false),
              op, ": expected ", name, " as a 1-D integer tensor, got ", lengths.scalar_type(),
              " with shape ", lengths.sizes());
  const at::Tensor values = lengths.to(at::kLong).contiguous();
  return {values.const_data_ptr<int64_t>(), values.const_data_ptr<int64_t>() + values.numel()};
}

void check_coordinate(const char* op, double c, int64_t index) {
  TORCH_CHECK(std::isfinite(c), op, ": polygon coordinate ", index, " is ", c,
              "; coordinates must be finite");
  TORCH_CHECK(std::abs(c) <= kMaxCoordinate, op, ": polygon coordinate ", index, " = ", c,
              " is beyond +-2^24 px, which the rasterizer's 32-bit arithmetic cannot represent");
}

}  // namespace

PackedPolygons read_polygons(const char* op, const at::Tensor& coords,
                             const at::Tensor& part_lengths, const at::Tensor* part_counts) {
  TORCH_CHECK(coords.device().is_cpu() && coords.dim() == 1 &&
                  at::isFloatingType(coords.scalar_type()),
              op, ": expected coords as a 1-D float64 tensor (x0, y0, x1, y1, ...), got ",
              coords.scalar_type(), " with shape ", coords.sizes());
  PackedPolygons polygons;
  polygons.coords = coords.to(at::kDouble).contiguous();
  const std::vector<int64_t> lengths = read_lengths(op, "part_lengths", part_lengths);
  polygons.part_offset.assign(1, 0);
  for (size_t p = 0; p < lengths.size(); ++p) {
    TORCH_CHECK(lengths[p] > 0 && lengths[p] % 2 == 0, op, ": part ", p, " has ", lengths[p],
                " coordinates; a polygon part needs a positive, even number (x, y pairs)");
    polygons.part_offset.push_back(polygons.part_offset.back() + lengths[p]);
  }
  TORCH_CHECK(polygons.part_offset.back() == coords.numel(), op, ": part_lengths sum to ",
              polygons.part_offset.back(), " but coords holds ", coords.numel(), " values");
  const double* xy = polygons.coords.const_data_ptr<double>();
  for (int64_t i = 0; i < coords.numel(); ++i) {
    check_coordinate(op, xy[i], i);
  }
  const int64_t num_parts = static_cast<int64_t>(lengths.size());
  polygons.part_range.assign(1, 0);
  if (part_counts == nullptr) {
    polygons.part_range.push_back(num_parts);
    return polygons;
  }
  for (int64_t count : read_lengths(op, "part_counts", *part_counts)) {
    TORCH_CHECK(count >= 0, op, ": part_counts holds the negative count ", count);
    polygons.part_range.push_back(polygons.part_range.back() + count);
  }
  TORCH_CHECK(polygons.part_range.back() == num_parts, op, ": part_counts sum to ",
              polygons.part_range.back(), " but part_lengths describes ", num_parts, " parts");
  return polygons;
}

void check_crop_frames(const char* op, const PackedPolygons& polygons, const at::Tensor& boxes,
                       const std::vector<int64_t>& index, int64_t out_h, int64_t out_w) {
  // BoxFrame maps x to (x - x1) * scale with scale > 0: monotone, also after rounding, so an
  // instance's extreme coordinates map to the extremes of its mapped coordinates.
  const int64_t n = polygons.num_instances();
  std::vector<double> x_min(n, 0), x_max(n, 0), y_min(n, 0), y_max(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    bool first = true;
    for (int64_t p = polygons.part_range[i]; p < polygons.part_range[i + 1]; ++p) {
      const double* xy = polygons.part(p);
      for (int64_t k = 0; k < polygons.num_points(p); ++k) {
        const double x = xy[2 * k], y = xy[2 * k + 1];
        x_min[i] = first ? x : std::min(x_min[i], x);
        x_max[i] = first ? x : std::max(x_max[i], x);
        y_min[i] = first ? y : std::min(y_min[i], y);
        y_max[i] = first ? y : std::max(y_max[i], y);
        first = false;
      }
    }
  }
  const at::Tensor rois = boxes.contiguous();
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), "check_crop_frames", [&] {
    const scalar_t* roi = rois.const_data_ptr<scalar_t>();
    for (size_t b = 0; b < index.size(); ++b) {
      const BoxFrame frame = BoxFrame::of_box(roi + 4 * b, out_h, out_w);
      const int64_t i = index[b];
      const double extremes[] = {frame.x(x_min[i]), frame.x(x_max[i]), frame.y(y_min[i]),
                                 frame.y(y_max[i])};
      for (double c : extremes) {
        TORCH_CHECK(std::abs(c) <= kMaxCoordinate, op, ": box ", b, " maps polygon instance ",
                    i, " to coordinate ", c, ", beyond +-2^24 px, which the rasterizer's "
                    "32-bit arithmetic cannot represent");
      }
    }
  });
}

}  // namespace mmdet_ext::masks
