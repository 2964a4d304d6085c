// pycocotools' polygon rasteriser (rleFrPoly), device-neutral: the CPU kernels (cpu/) and the CUDA
// kernels (cuda/) both call these functions, so both are bit-exact with pycocotools by the same
// code. Header-only because nvcc must see the bodies to compile them for the GPU.
//
// rleFrPoly walks a polygon's boundary on a grid 5x finer than the pixels, and every step of the
// walk that crosses a pixel centre column "toggles" the pixel below the boundary there: pixel p
// (column-major index x * height + y) is foreground iff an odd number of toggles are <= p. The
// CPU turns sorted toggles into RLE counts; a toggle bitset plus a running parity per column
// (paint_toggle_column) gives the same pixels without sorting, which is what a GPU block does.
#pragma once

#include <cmath>
#include <cstdint>

#include "../host_device.h"

namespace mmdet_ext::masks {

// pycocotools casts (scale * coordinate + .5) to int; beyond this magnitude that and its edge
// arithmetic would overflow, and no image comes close (the 5x grid then spans 2^27 cells).
constexpr double kMaxCoordinate = 1 << 24;
// rleFrPoly traces the boundary on a grid 5x finer than the pixels.
constexpr double kGridScale = 5;

struct GridPoint {
  int u, v;
};

MMDET_EXT_HOST_DEVICE inline GridPoint to_grid(double x, double y) {
  return {static_cast<int>(kGridScale * x + .5), static_cast<int>(kGridScale * y + .5)};
}

MMDET_EXT_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

MMDET_EXT_HOST_DEVICE inline int64_t ceil_div_signed(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// One polygon edge on the fine grid as rleFrPoly walks it: points t = 0 .. length() along the
// longer axis, endpoints included, the other coordinate rounded as (int)(c + .5); the walk runs
// from t = length() down to 0 when the edge is flipped.
class Edge {
 public:
  MMDET_EXT_HOST_DEVICE Edge(GridPoint from, GridPoint to) {
    int x0 = from.u, y0 = from.v, x1 = to.u, y1 = to.v;
    const int dx = x1 > x0 ? x1 - x0 : x0 - x1, dy = y1 > y0 ? y1 - y0 : y0 - y1;
    shallow_ = dx >= dy;
    flip_ = shallow_ ? x0 > x1 : y0 > y1;
    if (flip_) {
      const int x = x0, y = y0;
      x0 = x1;
      y0 = y1;
      x1 = x;
      y1 = y;
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

  MMDET_EXT_HOST_DEVICE int length() const { return length_; }
  MMDET_EXT_HOST_DEVICE bool flipped() const { return flip_; }
  // Whether u grows with t (it is monotone in t; constant for a vertical steep edge).
  MMDET_EXT_HOST_DEVICE bool u_increasing() const { return shallow_ || slope_ > 0; }

  MMDET_EXT_HOST_DEVICE int u(int t) const {
    return shallow_ ? t + xs_ : static_cast<int>(xs_ + slope_ * t + .5);
  }
  MMDET_EXT_HOST_DEVICE int v(int t) const {
    return shallow_ ? static_cast<int>(ys_ + slope_ * t + .5) : t + ys_;
  }
  MMDET_EXT_HOST_DEVICE GridPoint at(int t) const { return {u(t), v(t)}; }
  MMDET_EXT_HOST_DEVICE GridPoint first() const { return at(flip_ ? length_ : 0); }
  MMDET_EXT_HOST_DEVICE GridPoint last() const { return at(flip_ ? 0 : length_); }

  // First t in [0, length()] with u(t) past x (> x if u grows, <= x if it shrinks),
  // length() + 1 if none: where the boundary crosses the fine-grid column x.
  MMDET_EXT_HOST_DEVICE int crossing(int64_t x) const {
    const bool up = u_increasing();
    auto past = [&](int t) { return up ? u(t) > x : u(t) <= x; };
    int t;
    if (shallow_) {
      const int64_t guess = x + 1 - xs_;
      t = static_cast<int>(guess < 0 ? 0 : guess > length_ + 1 ? length_ + 1 : guess);
    } else {  // solve xs + slope * t + .5 = x + 1, then step to the exact integer answer
      const double estimate = ceil((x + .5 - xs_) / slope_);
      const double limit = static_cast<double>(length_ + 1);
      t = static_cast<int>(estimate < 0.0 ? 0.0 : estimate > limit ? limit : estimate);
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

// The toggle a step p -> q of the walk makes, or -1: pycocotools keeps a step that changes u only
// where the fine-grid column is a pixel centre inside the image, and toggles the pixel below the
// boundary there. Toggles lie in [0, height * width].
MMDET_EXT_HOST_DEVICE inline int64_t step_toggle(GridPoint p, GridPoint q, int64_t height,
                                                 int64_t width) {
  double xd = q.u < p.u ? q.u : q.u - 1;
  xd = (xd + .5) / kGridScale - .5;
  if (floor(xd) != xd || xd < 0 || xd > static_cast<double>(width - 1)) {
    return -1;
  }
  double yd = q.v < p.v ? q.v : p.v;
  yd = (yd + .5) / kGridScale - .5;
  if (yd < 0) {
    yd = 0;
  } else if (yd > height) {
    yd = static_cast<double>(height);
  }
  yd = ceil(yd);
  return static_cast<int64_t>(xd) * height + static_cast<int64_t>(yd);
}

// Calls emit(toggle) for the steps of edge j of a closed part of `num_points` vertices
// (vertex(k) gives vertex k on the grid; vertex(num_points) must equal vertex(0)): the step from
// edge j - 1's last point into edge j, then the steps inside edge j. Edges are independent, so a
// GPU gives each to its own thread; together they emit exactly rleFrPoly's toggles.
//
// Inside an edge only the steps that span a pixel centre column 5 c + 2 inside the image can be
// kept; u is monotone along the edge, so exactly one step spans each such column: visit those
// steps only, O(1) each, instead of every point of the edge.
template <typename Vertex, typename Emit>
MMDET_EXT_HOST_DEVICE void emit_edge_toggles(const Vertex& vertex, int64_t j, int64_t height,
                                             int64_t width, const Emit& emit) {
  const Edge edge(vertex(j), vertex(j + 1));
  if (j > 0) {  // the walk is not closed: no step into edge 0
    const GridPoint previous = Edge(vertex(j - 1), vertex(j)).last();
    const GridPoint first = edge.first();
    if (first.u != previous.u) {
      const int64_t toggle = step_toggle(previous, first, height, width);
      if (toggle >= 0) {
        emit(toggle);
      }
    }
  }
  const int u0 = edge.u(0), u1 = edge.u(edge.length());
  if (u0 == u1) {
    return;
  }
  const int64_t u_min = u0 < u1 ? u0 : u1, u_max = u0 < u1 ? u1 : u0;
  // columns x = 5 c + 2 with u_min <= x < u_max and 0 <= c < width
  const int64_t c_low = ceil_div_signed(u_min - 2, 5), c_high = floor_div(u_max - 3, 5);
  const int64_t c_first = c_low > 0 ? c_low : 0;
  const int64_t c_last = c_high < width - 1 ? c_high : width - 1;
  for (int64_t c = c_first; c <= c_last; ++c) {
    const int t = edge.crossing(5 * c + 2);
    if (t == 0 || t > edge.length()) {
      continue;
    }
    const GridPoint before = edge.at(t - 1), after = edge.at(t);
    const int64_t toggle = edge.flipped() ? step_toggle(after, before, height, width)
                                          : step_toggle(before, after, height, width);
    if (toggle >= 0) {
      emit(toggle);
    }
  }
}

// mmdet's PolygonMasks.crop_and_resize for box (x1, y1, x2, y2) of type T (numpy >= 2 rules):
// w = max(x2 - x1, 1) and out_w / w are computed in T, the float64 polygon is shifted by x1 and
// then multiplied by the scale, each rounded to float64. The identity frame (0, 0, 1, 1) leaves
// coordinates exactly as they are.
struct BoxFrame {
  double x1 = 0, y1 = 0, x_scale = 1, y_scale = 1;

  template <typename T>
  MMDET_EXT_HOST_DEVICE static BoxFrame of_box(const T* box, int64_t out_h, int64_t out_w) {
    const T w = box[2] - box[0] > static_cast<T>(1) ? static_cast<T>(box[2] - box[0])
                                                     : static_cast<T>(1);
    const T h = box[3] - box[1] > static_cast<T>(1) ? static_cast<T>(box[3] - box[1])
                                                     : static_cast<T>(1);
    BoxFrame frame;
    frame.x1 = box[0];
    frame.y1 = box[1];
    frame.x_scale = static_cast<T>(static_cast<T>(out_w) / w);
    frame.y_scale = static_cast<T>(static_cast<T>(out_h) / h);
    return frame;
  }

  MMDET_EXT_HOST_DEVICE double x(double value) const { return (value - x1) * x_scale; }
  MMDET_EXT_HOST_DEVICE double y(double value) const { return (value - y1) * y_scale; }
};

// --- toggle bitsets: bit i of 32-bit words toggles column-major pixel i and every later one ----

// Words of a bitset holding every toggle of a height x width image (toggles reach height * width).
MMDET_EXT_HOST_DEVICE inline int64_t toggle_words(int64_t height, int64_t width) {
  return (height * width + 1 + 31) / 32;
}

MMDET_EXT_HOST_DEVICE inline uint32_t toggle_bit(const uint32_t* bits, int64_t i) {
  return (bits[i >> 5] >> (i & 31)) & 1u;
}

// XOR of the toggles of column x (pixels x * height .. x * height + height - 1).
MMDET_EXT_HOST_DEVICE inline uint32_t toggle_column_parity(const uint32_t* bits, int64_t x,
                                                           int64_t height) {
  uint32_t parity = 0;
  for (int64_t i = x * height; i < (x + 1) * height; ++i) {
    parity ^= toggle_bit(bits, i);
  }
  return parity;
}

// Sets out[y * width + x] (row-major) to 1 where column x is foreground; `carry` is the XOR of
// every toggle before the column. Leaves background pixels untouched, so painting several parts
// into one image gives their union (pycocotools merges an instance's parts by union).
MMDET_EXT_HOST_DEVICE inline void paint_toggle_column(const uint32_t* bits, int64_t x,
                                                      int64_t height, int64_t width,
                                                      uint32_t carry, uint8_t* out) {
  uint32_t inside = carry;
  for (int64_t y = 0; y < height; ++y) {
    inside ^= toggle_bit(bits, x * height + y);
    if (inside) {
      out[y * width + x] = 1;
    }
  }
}

}  // namespace mmdet_ext::masks
