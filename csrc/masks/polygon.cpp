// CPU kernels of the polygon mask ops: COCO polygons to RLE (pycocotools frPyObjects + merge),
// to full-size masks, and cropped and resized into boxes for the Mask R-CNN mask head (mmdet's
// PolygonMasks.crop_and_resize(...).to_ndarray()). Bit-exact with pycocotools' rleFrPoly.
#include <algorithm>
#include <cmath>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "rle.h"

namespace mmdet_ext {
namespace {

using masks::Counts;

// pycocotools casts (scale * coordinate + .5) to int; beyond this magnitude that and its edge
// arithmetic would overflow, and no image comes close (the 5x grid then spans 2^27 cells).
constexpr double kMaxCoordinate = 1 << 24;
// rleFrPoly traces the boundary on a grid 5x finer than the pixels.
constexpr double kScale = 5;

struct GridPoint {
  int u, v;
};

// One polygon edge on the fine grid as rleFrPoly walks it: points t = 0 .. length() along the
// longer axis, endpoints included, the other coordinate rounded as (int)(c + .5); the walk runs
// from t = length() down to 0 when the edge is flipped.
class Edge {
 public:
  Edge(int x0, int y0, int x1, int y1) {
    const int dx = std::abs(x1 - x0), dy = std::abs(y1 - y0);
    shallow_ = dx >= dy;
    flip_ = shallow_ ? x0 > x1 : y0 > y1;
    if (flip_) {
      std::swap(x0, x1);
      std::swap(y0, y1);
    }
    xs_ = x0;
    ys_ = y0;
    length_ = shallow_ ? dx : dy;
    // pycocotools divides 0 by 0 for a zero-length edge and casts the NaN to int. Its single
    // point then only meets neighbours with the same u, except at negative u, where the
    // transition is dropped anyway, so any slope gives the same mask; 0 avoids the UB.
    slope_ = length_ == 0 ? 0.0
                          : shallow_ ? static_cast<double>(y1 - y0) / dx
                                     : static_cast<double>(x1 - x0) / dy;
  }

  int length() const { return length_; }
  bool flipped() const { return flip_; }
  // Whether u grows with t (it is monotone in t; constant for a vertical steep edge).
  bool u_increasing() const { return shallow_ || slope_ > 0; }

  int u(int t) const { return shallow_ ? t + xs_ : static_cast<int>(xs_ + slope_ * t + .5); }
  int v(int t) const { return shallow_ ? static_cast<int>(ys_ + slope_ * t + .5) : t + ys_; }
  GridPoint at(int t) const { return {u(t), v(t)}; }
  GridPoint first() const { return at(flip_ ? length_ : 0); }
  GridPoint last() const { return at(flip_ ? 0 : length_); }

  // First t in [0, length()] with u(t) past x (> x if u grows, <= x if it shrinks),
  // length() + 1 if none: where the boundary crosses the fine-grid column x.
  int crossing(int64_t x) const {
    const bool up = u_increasing();
    auto past = [&](int t) { return up ? u(t) > x : u(t) <= x; };
    int t;
    if (shallow_) {
      t = static_cast<int>(std::clamp<int64_t>(x + 1 - xs_, 0, length_ + 1));
    } else {  // solve xs + slope * t + .5 = x + 1, then step to the exact integer answer
      const double estimate = std::ceil((x + .5 - xs_) / slope_);
      t = static_cast<int>(std::clamp(estimate, 0.0, static_cast<double>(length_ + 1)));
    }
    while (t > 0 && past(t - 1)) {
      --t;
    }
    while (t <= length_ && !past(t)) {
      ++t;
    }
    return t;
  }

 private:
  bool shallow_, flip_;
  int xs_, ys_, length_;
  double slope_;
};

class PolygonRasterizer {
 public:
  PolygonRasterizer(int64_t height, int64_t width) : height_(height), width_(width) {}

  // pycocotools' rleFrPoly for one part of `num_points` (x, y) pairs; needs height * width > 0.
  Counts rasterize(const double* xy, int64_t num_points) {
    toggles_.clear();
    points_.resize(num_points + 1);
    for (int64_t j = 0; j < num_points; ++j) {
      points_[j] = {static_cast<int>(kScale * xy[2 * j] + .5),
                    static_cast<int>(kScale * xy[2 * j + 1] + .5)};
    }
    points_[num_points] = points_[0];
    GridPoint previous{};
    for (int64_t j = 0; j < num_points; ++j) {
      const Edge edge(points_[j].u, points_[j].v, points_[j + 1].u, points_[j + 1].v);
      const GridPoint first = edge.first();
      if (j > 0 && first.u != previous.u) {  // the walk is not closed: no step into edge 0
        add_transition(previous, first);
      }
      add_edge_transitions(edge);
      previous = edge.last();
    }
    return counts_from_toggles();
  }

 private:
  // A step between consecutive boundary points that changes u crosses a pixel column; pycocotools
  // keeps it only where the fine-grid column is a pixel centre inside the image, and toggles the
  // pixel below the boundary there.
  void add_transition(GridPoint p, GridPoint q) {
    double xd = q.u < p.u ? q.u : q.u - 1;
    xd = (xd + .5) / kScale - .5;
    if (std::floor(xd) != xd || xd < 0 || xd > static_cast<double>(width_ - 1)) {
      return;
    }
    double yd = std::min(q.v, p.v);
    yd = (yd + .5) / kScale - .5;
    if (yd < 0) {
      yd = 0;
    } else if (yd > height_) {
      yd = static_cast<double>(height_);
    }
    yd = std::ceil(yd);
    toggles_.push_back(static_cast<uint32_t>(static_cast<int>(xd) * static_cast<int>(height_) +
                                             static_cast<int>(yd)));
  }

  // Steps inside one edge. add_transition keeps a step only if the fine-grid column it reports,
  // which lies in [min u, max u) of the step, is a pixel centre 5 c + 2 inside the image. u is
  // monotone along the edge, so exactly one step spans each such column: visit those steps
  // only, O(1) each, instead of every point of the edge.
  void add_edge_transitions(const Edge& edge) {
    const int u0 = edge.u(0), u1 = edge.u(edge.length());
    if (u0 == u1) {
      return;
    }
    const int64_t u_min = std::min(u0, u1), u_max = std::max(u0, u1);
    // columns x = 5 c + 2 with u_min <= x < u_max and 0 <= c < width
    const int64_t c_first = std::max<int64_t>(0, ceil_div(u_min - 2, 5));
    const int64_t c_last = std::min<int64_t>(width_ - 1, floor_div(u_max - 3, 5));
    for (int64_t c = c_first; c <= c_last; ++c) {
      const int t = edge.crossing(5 * c + 2);
      if (t == 0 || t > edge.length()) {
        continue;
      }
      const GridPoint before = edge.at(t - 1), after = edge.at(t);
      if (edge.flipped()) {
        add_transition(after, before);
      } else {
        add_transition(before, after);
      }
    }
  }

  static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
  static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

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

// Checked, flattened polygons of a batch of instances.
struct Polygons {
  at::Tensor coords;                 // float64 [total_points * 2]
  std::vector<int64_t> part_offset;  // [P + 1], into coords
  std::vector<int64_t> part_range;   // [N + 1], instance i owns parts [range[i], range[i + 1])

  const double* part(int64_t p) const { return coords.const_data_ptr<double>() + part_offset[p]; }
  int64_t num_points(int64_t p) const { return (part_offset[p + 1] - part_offset[p]) / 2; }
};

std::vector<int64_t> read_lengths(const char* op, const char* name, const at::Tensor& lengths) {
  TORCH_CHECK(lengths.device().is_cpu() && lengths.dim() == 1 &&
                  at::isIntegralType(lengths.scalar_type(), false),
              op, ": expected ", name, " as a 1-D integer CPU tensor, got ",
              lengths.scalar_type(), " with shape ", lengths.sizes(), " on ", lengths.device());
  const at::Tensor values = lengths.to(at::kLong).contiguous();
  return {values.const_data_ptr<int64_t>(), values.const_data_ptr<int64_t>() + values.numel()};
}

void check_coordinate(const char* op, double c, int64_t index) {
  TORCH_CHECK(std::isfinite(c), op, ": polygon coordinate ", index, " is ", c,
              "; coordinates must be finite");
  TORCH_CHECK(std::abs(c) <= kMaxCoordinate, op, ": polygon coordinate ", index, " = ", c,
              " is beyond +-2^24 px, which the rasterizer's 32-bit arithmetic cannot represent");
}

// part_counts undefined: all parts form one instance.
Polygons read_polygons(const char* op, const at::Tensor& coords, const at::Tensor& part_lengths,
                       const at::Tensor* part_counts) {
  TORCH_CHECK(coords.device().is_cpu() && coords.dim() == 1 &&
                  at::isFloatingType(coords.scalar_type()),
              op, ": expected coords as a 1-D float64 CPU tensor (x0, y0, x1, y1, ...), got ",
              coords.scalar_type(), " with shape ", coords.sizes(), " on ", coords.device());
  Polygons polygons;
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

at::Tensor rle_from_polygons_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                 int64_t height, int64_t width) {
  constexpr const char* op = "rle_from_polygons";
  masks::check_image_size(op, "image", height, width);
  const Polygons polygons = read_polygons(op, coords, part_lengths, nullptr);
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

// Paints the union of instance i's parts (coordinates passed through `transform`) into `image`.
template <typename Transform>
void paint_instance(const Polygons& polygons, int64_t i, int64_t height, int64_t width,
                    PolygonRasterizer& rasterizer, std::vector<double>& buffer,
                    Transform transform, uint8_t* image) {
  for (int64_t p = polygons.part_range[i]; p < polygons.part_range[i + 1]; ++p) {
    const int64_t n = polygons.num_points(p);
    buffer.assign(polygons.part(p), polygons.part(p) + 2 * n);
    transform(buffer);
    const Counts counts = rasterizer.rasterize(buffer.data(), n);
    masks::paint_counts(counts.data(), static_cast<int64_t>(counts.size()), height, width, image);
  }
}

at::Tensor polygons_to_masks_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                 const at::Tensor& part_counts, int64_t height, int64_t width) {
  constexpr const char* op = "polygons_to_masks";
  masks::check_image_size(op, "image", height, width);
  const Polygons polygons = read_polygons(op, coords, part_lengths, &part_counts);
  const int64_t n = static_cast<int64_t>(polygons.part_range.size()) - 1;
  at::Tensor out = at::zeros({n, height, width}, at::kByte);
  if (height * width == 0) {
    return out;
  }
  uint8_t* images = out.mutable_data_ptr<uint8_t>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    PolygonRasterizer rasterizer(height, width);
    std::vector<double> buffer;
    for (int64_t i = begin; i < end; ++i) {
      paint_instance(polygons, i, height, width, rasterizer, buffer, [](std::vector<double>&) {},
                     images + i * height * width);
    }
  });
  return out;
}

// mmdet's PolygonMasks.crop_and_resize for box (x1, y1, x2, y2) of type T (numpy >= 2 rules):
// w = max(x2 - x1, 1) and out_w / w are computed in T, the float64 polygon is shifted by x1 and
// then multiplied by the scale, each rounded to float64.
template <typename T>
struct BoxFrame {
  double x1, y1, x_scale, y_scale;

  BoxFrame(const T* box, int64_t out_h, int64_t out_w) {
    const T w = std::max(static_cast<T>(box[2] - box[0]), static_cast<T>(1));
    const T h = std::max(static_cast<T>(box[3] - box[1]), static_cast<T>(1));
    x1 = box[0];
    y1 = box[1];
    x_scale = static_cast<T>(static_cast<T>(out_w) / w);
    y_scale = static_cast<T>(static_cast<T>(out_h) / h);
  }
};

at::Tensor polygons_crop_and_resize_cpu(const at::Tensor& coords, const at::Tensor& part_lengths,
                                        const at::Tensor& part_counts, const at::Tensor& boxes,
                                        const at::Tensor& inds, int64_t out_h, int64_t out_w) {
  constexpr const char* op = "polygons_crop_and_resize";
  const Polygons polygons = read_polygons(op, coords, part_lengths, &part_counts);
  const int64_t num_instances = static_cast<int64_t>(polygons.part_range.size()) - 1;
  const std::vector<int64_t> index =
      masks::read_crop_boxes(op, boxes, inds, num_instances, out_h, out_w);
  const int64_t n = boxes.size(0);
  const at::Tensor rois = boxes.contiguous();
  at::Tensor out = at::zeros({n, out_h, out_w}, at::kByte);
  uint8_t* images = out.mutable_data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES(rois.scalar_type(), "polygons_crop_and_resize", [&] {
    const scalar_t* roi = rois.const_data_ptr<scalar_t>();
    at::parallel_for(0, n, masks::kBoxesPerTask, [&](int64_t begin, int64_t end) {
      PolygonRasterizer rasterizer(out_h, out_w);
      std::vector<double> buffer;
      for (int64_t i = begin; i < end; ++i) {
        const BoxFrame<scalar_t> frame(roi + 4 * i, out_h, out_w);
        auto to_box = [&](std::vector<double>& xy) {
          for (size_t k = 0; k < xy.size(); k += 2) {
            xy[k] = (xy[k] - frame.x1) * frame.x_scale;
            xy[k + 1] = (xy[k + 1] - frame.y1) * frame.y_scale;
            check_coordinate(op, xy[k], static_cast<int64_t>(k));
            check_coordinate(op, xy[k + 1], static_cast<int64_t>(k + 1));
          }
        };
        paint_instance(polygons, index[i], out_h, out_w, rasterizer, buffer, to_box,
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
  m.impl("polygons_crop_and_resize", &polygons_crop_and_resize_cpu);
}

}  // namespace mmdet_ext
