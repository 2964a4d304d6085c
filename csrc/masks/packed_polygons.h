// A batch of COCO polygon instances in the packed form of mmdet_ext/ops/masks.py (coords,
// part_lengths, part_counts), checked and indexed on the host for the kernels of every device.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mmdet_ext::masks {

struct PackedPolygons {
  at::Tensor coords;                 // float64 [total_points * 2], on the host
  std::vector<int64_t> part_offset;  // [P + 1], into coords
  std::vector<int64_t> part_range;   // [N + 1], instance i owns parts [range[i], range[i + 1])

  int64_t num_instances() const { return static_cast<int64_t>(part_range.size()) - 1; }
  const double* part(int64_t p) const {
    return coords.const_data_ptr<double>() + part_offset[p];
  }
  int64_t num_points(int64_t p) const { return (part_offset[p + 1] - part_offset[p]) / 2; }
};

// Checks and unpacks host tensors: finite coordinates within +-kMaxCoordinate, positive even
// part lengths that cover coords, part counts that cover the parts. part_counts null: all parts
// form one instance.
PackedPolygons read_polygons(const char* op, const at::Tensor& coords,
                             const at::Tensor& part_lengths, const at::Tensor* part_counts);

// Checks that box i maps instance index[i] into coordinates the rasteriser can represent
// (within +-kMaxCoordinate), as the kernels map them (BoxFrame). boxes: host (N, 4) float32 or
// float64, already checked by read_crop_boxes.
void check_crop_frames(const char* op, const PackedPolygons& polygons, const at::Tensor& boxes,
                       const std::vector<int64_t>& index, int64_t out_h, int64_t out_w);

}  // namespace mmdet_ext::masks
