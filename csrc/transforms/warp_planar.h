// Resize then flip an interleaved 8-bit image and write it channel-planar: the one place both
// warp_image (one image, a new tensor) and decode_images_into (a batch, into one buffer) do it,
// so the two give the same bits. The arithmetic is OpenCV's cv::resize, the call mmcv.imresize
// makes (for the part a crop keeps of a bilinear resize, resize_part.h's copy of it, which
// computes that part alone); the flip (mmcv.imflip's cv::flip) only permutes pixels and is done while splitting the
// channels. Only in builds with OpenCV (optional_libraries.h).
#pragma once

#ifdef MMDET_EXT_WITH_OPENCV
#include <cstdint>
#include <cstring>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/core/hal/intrin.hpp>
#include <opencv2/imgproc.hpp>

#include <c10/util/Exception.h>

#include "resize_part.h"

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
    // Not cv::hal::split8u (Debian's OpenCV 4.6): where the width is a multiple of 32 it is 5 to
    // 10 times slower (800 rows of 1024: 2.0 ms against 0.28, mirrored after, a one-off C++
    // timing; LSJ's crops are 1024 wide), elsewhere about 20% faster (1067: 0.22 against 0.29).
    deinterleave_row3(src, in_order[0], in_order[1], in_order[2], width);
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
  if (keep.size() != out_size && interpolation == cv::INTER_LINEAR && src.depth() == CV_8U &&
      linear_part::computes_like_resize(src.size(), out_size)) {
    // a crop keeps part of a bilinear resize: only that part is computed (resize_part.h)
    kept = resize_scratch(keep.size(), src.type());
    TORCH_CHECK(linear_part::resize_part(src, out_size, keep, kept), "resize_part read outside");
  } else {
    if (out_size != src.size()) {
      kept = resize_scratch(out_size, src.type());
      const uint8_t* scratch = kept.data;
      cv::resize(src, kept, out_size, 0, 0, interpolation);
      TORCH_CHECK(kept.data == scratch, "OpenCV reallocated the resize output");
    }
    kept = kept(keep);  // a view: the crop copies nothing
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
