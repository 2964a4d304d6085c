// Resize then flip an interleaved 8-bit image and write it channel-planar: the one place both
// warp_image (one image, a new tensor) and decode_images_into (a batch, into one buffer) do it,
// so the two give the same bits. The arithmetic is OpenCV's cv::resize, the call mmcv.imresize
// makes; the flip (mmcv.imflip's cv::flip) only permutes pixels and is done while splitting the
// channels. Only in builds with OpenCV (optional_libraries.h).
#pragma once

#ifdef MMDET_EXT_WITH_OPENCV
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/core/hal/hal.hpp>
#include <opencv2/core/hal/intrin.hpp>
#include <opencv2/imgproc.hpp>

#include <c10/util/Exception.h>

namespace mmdet_ext {

// flip: 0 none, 1 horizontal, 2 vertical, 3 diagonal (both), mmcv's direction names in order;
// the same permutations as cv::flip's codes 1, 0 and -1, which mmcv.imflip calls.

// Refuses what warp_into_planar cannot do, naming `op`: an absurd output size, an interpolation
// that is not one of mmcv's five, a flip code out of range, a kept part (y, x, height, width;
// null: the whole image) that is empty or not inside the resized image.
inline void check_warp_arguments(const char* op, int64_t out_height, int64_t out_width,
                                 int64_t interpolation, int64_t flip,
                                 const int64_t* keep = nullptr) {
  TORCH_CHECK(out_height > 0 && out_width > 0 && out_height <= (1 << 15) &&
                  out_width <= (1 << 15),
              op, ": output size ", out_height, "x", out_width,
              " (h x w) must be within 1..32768 (an absurd resize target)");
  TORCH_CHECK(interpolation >= cv::INTER_NEAREST && interpolation <= cv::INTER_LANCZOS4, op,
              ": unknown interpolation ", interpolation,
              " (0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 lanczos)");
  TORCH_CHECK(flip >= 0 && flip <= 3, op, ": flip must be 0 (none), 1 (horizontal), "
              "2 (vertical) or 3 (diagonal), got ", flip);
  TORCH_CHECK(keep == nullptr || (keep[0] >= 0 && keep[1] >= 0 && keep[2] > 0 && keep[3] > 0 &&
                                  keep[0] + keep[2] <= out_height &&
                                  keep[1] + keep[3] <= out_width),
              op, ": the kept part (y, x, h, w) = (", keep ? keep[0] : 0, ", ",
              keep ? keep[1] : 0, ", ", keep ? keep[2] : 0, ", ", keep ? keep[3] : 0,
              ") must be non-empty and inside the ", out_height, "x", out_width,
              " resized image");
}

// The part of the resized image that is written: `keep` (y, x, height, width), or all of it.
inline cv::Rect kept_part(cv::Size out_size, const int64_t* keep) {
  if (keep == nullptr) return cv::Rect(cv::Point(0, 0), out_size);
  return cv::Rect(static_cast<int>(keep[1]), static_cast<int>(keep[0]),
                  static_cast<int>(keep[3]), static_cast<int>(keep[2]));
}

// Row `y` of a 3-channel interleaved image into three planes' rows, with OpenCV's 128-bit SIMD
// deinterleave (what cv::split runs inside), then the tail one pixel at a time.
inline void deinterleave_row3(const uint8_t* src, uint8_t* d0, uint8_t* d1, uint8_t* d2,
                              int width) {
  int x = 0;
#if CV_SIMD128
  for (; x + 16 <= width; x += 16) {
    cv::v_uint8x16 a, b, c;
    cv::v_load_deinterleave(src + 3 * x, a, b, c);
    cv::v_store(d0 + x, a);
    cv::v_store(d1 + x, b);
    cv::v_store(d2 + x, c);
  }
#endif
  for (; x < width; ++x) {
    d0[x] = src[3 * x];
    d1[x] = src[3 * x + 1];
    d2[x] = src[3 * x + 2];
  }
}

// dst[x] = src[width - 1 - x]. Eight bytes at a time: one byte swap reverses eight. Why not
// SIMD: a 16-byte reverse needs SSSE3, beyond x86-64's baseline that this builds for; the plain
// loop is not vectorised and costs 8x as much (1.9 against 0.22 ms for 2400 rows of 1333).
inline void mirror_copy(const uint8_t* src, uint8_t* dst, int width) {
  int x = 0;
  for (; x + 8 <= width; x += 8) {
    uint64_t eight;
    std::memcpy(&eight, src + width - x - 8, 8);
    eight = __builtin_bswap64(eight);
    std::memcpy(dst + x, &eight, 8);
  }
  for (; x < width; ++x) dst[x] = src[width - 1 - x];
}

// Row of an interleaved image of any channel count into its planes' row `y`, mirrored (plane
// pixel x is source pixel width - 1 - x: a horizontal flip) or not.
inline void deinterleave_row(const uint8_t* src, std::vector<cv::Mat>& planes, int y, int width,
                             bool mirrored) {
  const int channels = static_cast<int>(planes.size());
  if (channels == 1 && mirrored) {
    mirror_copy(src, planes[0].ptr<uint8_t>(y), width);
    return;
  }
  if (channels == 1) {
    std::memcpy(planes[0].ptr<uint8_t>(y), src, width);
    return;
  }
  if (channels == 3 && !mirrored) {
    deinterleave_row3(src, planes[0].ptr<uint8_t>(y), planes[1].ptr<uint8_t>(y),
                      planes[2].ptr<uint8_t>(y), width);
    return;
  }
  if (channels == 3) {  // deinterleaved in order into this thread's row, then mirrored out
    thread_local std::vector<uint8_t> row;
    if (row.size() < 3 * static_cast<size_t>(width)) row.resize(3 * static_cast<size_t>(width));
    uint8_t* in_order[] = {row.data(), row.data() + width, row.data() + 2 * width};
    // OpenCV's own deinterleave (cv::split's, dispatched to the widest SIMD the CPU has): into
    // this small row it is faster than deinterleave_row3 (into the planes themselves it is not).
    cv::hal::split8u(src, in_order, width, 3);
    for (int c = 0; c < 3; ++c) mirror_copy(in_order[c], planes[c].ptr<uint8_t>(y), width);
    return;
  }
  for (int c = 0; c < channels; ++c) {  // 2 or 4 channels: rare, one byte at a time
    uint8_t* dst = planes[c].ptr<uint8_t>(y);
    for (int x = 0; x < width; ++x) {
      dst[x] = src[(mirrored ? width - 1 - x : x) * channels + c];
    }
  }
}

// Writes the channels of `src` (interleaved) into `planes` (one 8-bit Mat each, of src's size,
// viewing the caller's memory), flipped by `flip` (the codes above) on the way: a flip
// only permutes pixels, so reading the source mirrored gives cv::flip's bits without a copy.
// Why not cv::split: into planes whose rows are further apart than their width (slots of a padded
// batch) it goes row by row through its generic iterator, about 7x slower than into continuous
// planes (0.64 against 0.08 ms for 853x800), and it cannot flip.
inline void split_into_planes(const cv::Mat& src, std::vector<cv::Mat>& planes, int flip = 0) {
  if (flip == 0 && (src.channels() == 1 || planes[0].isContinuous())) {
    if (src.channels() == 1) {
      src.copyTo(planes[0]);
    } else {
      cv::split(src, planes);
    }
    return;
  }
  const bool mirrored = flip == 1 || flip == 3;
  const bool upside_down = flip == 2 || flip == 3;
  for (int y = 0; y < src.rows; ++y) {
    deinterleave_row(src.ptr<uint8_t>(upside_down ? src.rows - 1 - y : y), planes, y, src.cols,
                     mirrored);
  }
}

// The resized image before it is split, in memory this thread reuses: a fresh cv::Mat per image
// would fault in every page of it again (about 3 MB for 1333x800), which cost as much as the
// resize itself. Grows to the largest image this thread has warped; freed when the thread ends.
inline cv::Mat resize_scratch(cv::Size size, int type) {
  thread_local std::vector<uint8_t> buffer;
  const size_t bytes = size.area() * CV_ELEM_SIZE(type);
  if (buffer.size() < bytes) buffer.resize(bytes);
  return cv::Mat(size, type, buffer.data());
}

// cv::resize's bilinear arithmetic on 8-bit images (INTER_LINEAR, its fixed-point path), for a
// part of the output only: the pixels it computes are those cv::resize computes there, bit for
// bit, but the rows and columns outside the part are never computed. Why: a crop after the
// resize (mmdet's RandomCrop in large scale jitter) keeps about half of an image resized by up
// to 2x; cv::resize cannot compute a part (its tables depend on the whole output size).
// The arithmetic, as OpenCV's resize.cpp has it: source coordinate (d + 0.5) * scale - 0.5 in
// double, rounded to float, floored; weights (1 - f) and f times 2048 rounded to short; along a
// row, s0 * w0 + s1 * w1 (a column left of the image: the first pixel, weights 2048 and 0; right
// of its last pixel: that pixel times 2048); down the columns, the two rows' values shifted
// right by 4, each times its weight shifted right by 16, summed, plus 2, shifted right by 2.
namespace linear_part {

constexpr int kWeightScale = 1 << 11;  // OpenCV's INTER_RESIZE_COEF_SCALE

struct Tap {
  int source;  // first source pixel (column) or row
  short weight0;
  short weight1;
  bool edge;  // a column at or past the last source pixel: that pixel times kWeightScale
};

// The source coordinate of output pixel `d` and its fraction, as cv::resize computes them.
inline void locate(int d, double scale, int* source, float* fraction) {
  float f = static_cast<float>((d + 0.5) * scale - 0.5);
  const int s = cvFloor(f);
  *source = s;
  *fraction = f - static_cast<float>(s);
}

inline Tap column_tap(int d, double scale, int width) {
  int s;
  float f;
  locate(d, scale, &s, &f);
  if (s < 0) s = 0, f = 0.f;
  const bool edge = s + 1 >= width;
  if (edge && s >= width - 1) s = width - 1, f = 0.f;
  return {s, cv::saturate_cast<short>((1.f - f) * kWeightScale),
          cv::saturate_cast<short>(f * kWeightScale), edge};
}

inline Tap row_tap(int d, double scale) {
  int s;
  float f;
  locate(d, scale, &s, &f);  // rows are clamped when read, their weights are not
  return {s, cv::saturate_cast<short>((1.f - f) * kWeightScale),
          cv::saturate_cast<short>(f * kWeightScale), false};
}

// One source row resampled along x at the part's columns (`taps`), `cn` channels interleaved.
template <int kChannels>
inline void resample_row(const uint8_t* src, const std::vector<Tap>& taps, int cn, int* out) {
  const int channels = kChannels > 0 ? kChannels : cn;
  for (const Tap& tap : taps) {
    const uint8_t* p = src + tap.source * channels;
    if (tap.edge) {
      for (int c = 0; c < channels; ++c) out[c] = p[c] * kWeightScale;
    } else {
      for (int c = 0; c < channels; ++c) {
        out[c] = p[c] * tap.weight0 + p[c + channels] * tap.weight1;
      }
    }
    out += channels;
  }
}

inline void resample_row(const uint8_t* src, const std::vector<Tap>& taps, int cn, int* out) {
  if (cn == 3) return resample_row<3>(src, taps, cn, out);
  if (cn == 1) return resample_row<1>(src, taps, cn, out);
  resample_row<0>(src, taps, cn, out);
}

// Two resampled rows blended into one output row of `count` values.
inline void blend_rows(const int* row0, const int* row1, int weight0, int weight1, int count,
                       uint8_t* out) {
  for (int x = 0; x < count; ++x) {
    const int v =
        ((((row0[x] >> 4) * weight0) >> 16) + (((row1[x] >> 4) * weight1) >> 16) + 2) >> 2;
    out[x] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
}

// Whether cv::resize of `src_size` to `out_size` with INTER_LINEAR takes the path above: not
// when the sizes are equal (a copy) or when it halves both sides exactly (its area filter).
inline bool computes_like_resize(cv::Size src_size, cv::Size out_size) {
  if (src_size == out_size) return false;
  const double scale_x = 1. / (static_cast<double>(out_size.width) / src_size.width);
  const double scale_y = 1. / (static_cast<double>(out_size.height) / src_size.height);
  const int iscale_x = cv::saturate_cast<int>(scale_x);
  const int iscale_y = cv::saturate_cast<int>(scale_y);
  const bool area_fast = std::abs(scale_x - iscale_x) < DBL_EPSILON &&
                         std::abs(scale_y - iscale_y) < DBL_EPSILON;
  return !(area_fast && iscale_x == 2 && iscale_y == 2);
}

// The part `keep` of `src` (8-bit, 1 to 4 channels) resized to `out_size` bilinearly, into `dst`
// (keep's size, src's type): what cv::resize(src, out_size, INTER_LINEAR)(keep) holds, where
// computes_like_resize says cv::resize computes it this way.
inline void resize_part(const cv::Mat& src, cv::Size out_size, cv::Rect keep, cv::Mat& dst) {
  const int cn = src.channels();
  const double scale_x = 1. / (static_cast<double>(out_size.width) / src.cols);
  const double scale_y = 1. / (static_cast<double>(out_size.height) / src.rows);
  std::vector<Tap> columns;
  columns.reserve(keep.width);
  for (int d = keep.x; d < keep.x + keep.width; ++d) {
    columns.push_back(column_tap(d, scale_x, src.cols));
  }
  const int count = keep.width * cn;
  thread_local std::vector<int> buffer;
  if (buffer.size() < 2 * static_cast<size_t>(count)) buffer.resize(2 * static_cast<size_t>(count));
  int* slots[2] = {buffer.data(), buffer.data() + count};
  int slot_row[2] = {-1, -1};  // the source row each slot holds resampled
  auto resampled = [&](int row, int keep_slot) -> int {
    for (int i = 0; i < 2; ++i) {
      if (slot_row[i] == row) return i;
    }
    const int i = keep_slot == 0 ? 1 : 0;
    resample_row(src.ptr<uint8_t>(row), columns, cn, slots[i]);
    slot_row[i] = row;
    return i;
  };
  const int last = src.rows - 1;
  for (int d = keep.y; d < keep.y + keep.height; ++d) {
    const Tap tap = row_tap(d, scale_y);
    const int row0 = std::min(std::max(tap.source, 0), last);
    const int row1 = std::min(std::max(tap.source + 1, 0), last);
    const int held = slot_row[0] == row1 ? 0 : (slot_row[1] == row1 ? 1 : -1);
    const int slot0 = resampled(row0, held);
    const int slot1 = resampled(row1, slot0);
    blend_rows(slots[slot0], slots[slot1], tap.weight0, tap.weight1, count,
               dst.ptr<uint8_t>(d - keep.y));
  }
}

}  // namespace linear_part

// Writes `src` (1 to 4 channels) resized to `out_size` with `interpolation` (cv::resize's flags),
// of which the part `keep` is kept (mmdet's RandomCrop after the resize: img[y:y+h, x:x+w]; the
// whole image by default), flipped by `flip`, as [C, h, w] at `dst`: plane c at
// dst + c * plane_step, its rows row_step bytes apart. Packed, the steps are h * w and w (the
// default, -1); larger ones write into a slot of a padded batch, whose padding is left as it is.
inline void warp_into_planar(const cv::Mat& src, cv::Size out_size, int interpolation, int flip,
                             uint8_t* dst, int64_t plane_step = -1, int64_t row_step = -1,
                             cv::Rect keep = cv::Rect()) {
  if (keep.empty()) keep = cv::Rect(cv::Point(0, 0), out_size);
  cv::Mat kept = src;
  if (interpolation == cv::INTER_LINEAR && keep.size() != out_size &&
      linear_part::computes_like_resize(src.size(), out_size)) {
    kept = resize_scratch(keep.size(), src.type());  // only the part kept is computed
    linear_part::resize_part(src, out_size, keep, kept);
  } else {
    cv::Mat warped = src;
    if (out_size != src.size()) {
      warped = resize_scratch(out_size, src.type());
      const uint8_t* scratch = warped.data;
      cv::resize(src, warped, out_size, 0, 0, interpolation);
      TORCH_CHECK(warped.data == scratch, "OpenCV reallocated the resize output");
    }
    kept = warped(keep);  // a view: the crop copies nothing
  }
  const int channels = src.channels();
  const size_t plane = plane_step < 0 ? static_cast<size_t>(keep.area())
                                      : static_cast<size_t>(plane_step);
  const size_t row = row_step < 0 ? static_cast<size_t>(keep.width)
                                  : static_cast<size_t>(row_step);
  std::vector<cv::Mat> planes;
  for (int c = 0; c < channels; ++c) {  // each plane views the caller's memory
    planes.emplace_back(keep.size(), CV_8UC1, dst + c * plane, row);
  }
  split_into_planes(kept, planes, flip);
  for (int c = 0; c < channels; ++c) {
    TORCH_CHECK(planes[c].data == dst + c * plane, "OpenCV reallocated output plane ", c);
  }
}

}  // namespace mmdet_ext
#endif
