// The part of a bilinear resize that a crop keeps, computed alone (mmdet_ext::resize_part, and
// warp_planar.h's resize of a crop's kept part; the reference both are checked against: cv::resize,
// tests/test_resize_crop.py and tests/test_warp_image.py).
#pragma once

#ifdef MMDET_EXT_WITH_OPENCV
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace mmdet_ext {

// cv::resize's bilinear arithmetic on 8-bit images (INTER_LINEAR, its fixed-point path), for a
// part of the output only: the pixels it computes are those cv::resize computes there, bit for
// bit, but the rows and columns outside the part are never computed. Why: a crop after the
// resize (mmdet's RandomCrop in large scale jitter) keeps about half of an image resized by up
// to 2x, RTMDet's RandomCrop a quarter of its mosaic resized by 0.5 to 2 on average); cv::resize
// cannot compute a part (its tables depend on the whole output size).
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

// One source row resampled along x at the part's columns (`taps`), `cn` channels interleaved,
// `width` source pixels: kChannels values per tap written to `out` (3-channel rows with SSE2 may
// write one int past the last tap's: the buffer holds one more).
template <int kChannels>
inline void resample_row(const uint8_t* src, const std::vector<Tap>& taps, int cn, int width,
                         int* out) {
  const int channels = kChannels > 0 ? kChannels : cn;
  const size_t count = taps.size();
  size_t t = 0;
#ifdef __SSE2__
  if constexpr (kChannels == 3) {
    // A tap's two pixels are the 6 bytes at its source: one 8-byte load, the second pixel
    // interleaved with the first (p0c0 p1c0 p0c1 p1c1 p0c2 p1c2), widened to 16 bits and
    // multiplied by (w0, w1) pairwise (pmaddwd): the three sums s0 * w0 + s1 * w1 at once. The
    // load reads 2 bytes past the second pixel, so taps within 3 pixels of the row's end, and
    // the edge taps (one pixel), are left to the loop below.
    const __m128i zero = _mm_setzero_si128();
    for (; t < count; ++t) {
      const Tap& tap = taps[t];
      if (tap.edge || tap.source + 3 > width) break;
      const __m128i bytes =
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + tap.source * 3));
      const __m128i pairs = _mm_unpacklo_epi8(bytes, _mm_srli_epi64(bytes, 24));
      const __m128i weights = _mm_set1_epi32(static_cast<int>(
          (static_cast<uint32_t>(static_cast<uint16_t>(tap.weight1)) << 16) |
          static_cast<uint16_t>(tap.weight0)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + t * 3),
                       _mm_madd_epi16(_mm_unpacklo_epi8(pairs, zero), weights));
    }
  }
#endif
  out += t * channels;
  for (; t < count; ++t) {
    const Tap& tap = taps[t];
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

inline void resample_row(const uint8_t* src, const std::vector<Tap>& taps, int cn, int width,
                         int* out) {
  if (cn == 3) return resample_row<3>(src, taps, cn, width, out);
  if (cn == 1) return resample_row<1>(src, taps, cn, width, out);
  resample_row<0>(src, taps, cn, width, out);
}

// Two resampled rows blended into one output row of `count` values. A resampled value is at most
// 255 * 2048, so shifted right by 4 it fits 16 bits, and (v * weight) >> 16 is the high half of a
// 16-bit product: SSE2 does 8 at a time (pmulhw), as OpenCV's own vector path does.
inline void blend_rows(const int* row0, const int* row1, int weight0, int weight1, int count,
                       uint8_t* out) {
  int x = 0;
#ifdef __SSE2__
  const __m128i w0 = _mm_set1_epi16(static_cast<short>(weight0));
  const __m128i w1 = _mm_set1_epi16(static_cast<short>(weight1));
  const __m128i two = _mm_set1_epi16(2);
  const auto half = [](const int* row) {
    const __m128i lo = _mm_srai_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)), 4);
    const __m128i hi =
        _mm_srai_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 4)), 4);
    return _mm_packs_epi32(lo, hi);
  };
  for (; x + 16 <= count; x += 16) {
    __m128i sums[2];
    for (int i = 0; i < 2; ++i) {
      const __m128i sum = _mm_add_epi16(_mm_mulhi_epi16(half(row0 + x + 8 * i), w0),
                                        _mm_mulhi_epi16(half(row1 + x + 8 * i), w1));
      sums[i] = _mm_srai_epi16(_mm_add_epi16(sum, two), 2);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x), _mm_packus_epi16(sums[0], sums[1]));
  }
#endif
  for (; x < count; ++x) {
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
// computes_like_resize says cv::resize computes it this way. `src` may be a window of a larger
// image, its part at `origin` of a `full`-sized image (an empty `full`: `src` is all of it;
// RTMDet's mosaic paints only the window of its canvas that the kept part reads): the part is
// then what the resize of the full image holds there. Returns false, writing nothing, where the
// window lacks a pixel the part reads.
inline bool resize_part(const cv::Mat& src, cv::Size out_size, cv::Rect keep, cv::Mat& dst,
                        cv::Size full = cv::Size(), cv::Point origin = cv::Point()) {
  if (full.empty()) full = src.size();
  const int cn = src.channels();
  const double scale_x = 1. / (static_cast<double>(out_size.width) / full.width);
  const double scale_y = 1. / (static_cast<double>(out_size.height) / full.height);
  std::vector<Tap> columns;
  columns.reserve(keep.width);
  for (int d = keep.x; d < keep.x + keep.width; ++d) {
    Tap tap = column_tap(d, scale_x, full.width);
    tap.source -= origin.x;  // in the window's columns
    if (tap.source < 0 || tap.source + (tap.edge ? 0 : 1) >= src.cols) return false;
    columns.push_back(tap);
  }
  const int last = full.height - 1;
  const auto rows_of = [&](int d) {  // the two source rows output row d reads, in the window's
    const int source = row_tap(d, scale_y).source;
    return std::make_pair(std::min(std::max(source, 0), last) - origin.y,
                          std::min(std::max(source + 1, 0), last) - origin.y);
  };
  if (rows_of(keep.y).first < 0 || rows_of(keep.y + keep.height - 1).second >= src.rows) {
    return false;  // (the rows read only grow with d)
  }
  const int count = keep.width * cn;
  const size_t slot = static_cast<size_t>(count) + 1;  // resample_row may write one past
  thread_local std::vector<int> buffer;
  if (buffer.size() < 2 * slot) buffer.resize(2 * slot);
  int* slots[2] = {buffer.data(), buffer.data() + slot};
  int slot_row[2] = {-1, -1};  // the source row each slot holds resampled
  auto resampled = [&](int row, int keep_slot) -> int {
    for (int i = 0; i < 2; ++i) {
      if (slot_row[i] == row) return i;
    }
    const int i = keep_slot == 0 ? 1 : 0;
    resample_row(src.ptr<uint8_t>(row), columns, cn, src.cols, slots[i]);
    slot_row[i] = row;
    return i;
  };
  for (int d = keep.y; d < keep.y + keep.height; ++d) {
    const Tap tap = row_tap(d, scale_y);
    const auto [row0, row1] = rows_of(d);
    const int held = slot_row[0] == row1 ? 0 : (slot_row[1] == row1 ? 1 : -1);
    const int slot0 = resampled(row0, held);
    const int slot1 = resampled(row1, slot0);
    blend_rows(slots[slot0], slots[slot1], tap.weight0, tap.weight1, count,
               dst.ptr<uint8_t>(d - keep.y));
  }
  return true;
}

}  // namespace linear_part

}  // namespace mmdet_ext
#endif  // MMDET_EXT_WITH_OPENCV
