// Resize then flip an interleaved 8-bit image and write it channel-planar: the one place both
// warp_image (one image, a new tensor) and decode_images_into (a batch, into one buffer) do it,
// so the two give the same bits. The arithmetic is OpenCV's (cv::resize, cv::flip), the calls
// mmcv.imresize and mmcv.imflip make. Only in builds with OpenCV (optional_libraries.h).
#pragma once

#ifdef MMDET_EXT_WITH_OPENCV
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/core/hal/intrin.hpp>
#include <opencv2/imgproc.hpp>

#include <c10/util/Exception.h>

namespace mmdet_ext {

// flip: 0 none, 1 horizontal, 2 vertical, 3 diagonal (both), mmcv's direction names in order.
inline constexpr int kWarpFlipCodes[] = {0, 1, 0, -1};  // cv::flip's codes for 1..3

// Refuses what warp_into_planar cannot do, naming `op`: an absurd output size, an interpolation
// that is not one of mmcv's five, a flip code out of range.
inline void check_warp_arguments(const char* op, int64_t out_height, int64_t out_width,
                                 int64_t interpolation, int64_t flip) {
  TORCH_CHECK(out_height > 0 && out_width > 0 && out_height <= (1 << 15) &&
                  out_width <= (1 << 15),
              op, ": output size ", out_height, "x", out_width,
              " (h x w) must be within 1..32768 (an absurd resize target)");
  TORCH_CHECK(interpolation >= cv::INTER_NEAREST && interpolation <= cv::INTER_LANCZOS4, op,
              ": unknown interpolation ", interpolation,
              " (0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 lanczos)");
  TORCH_CHECK(flip >= 0 && flip <= 3, op, ": flip must be 0 (none), 1 (horizontal), "
              "2 (vertical) or 3 (diagonal), got ", flip);
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

// Writes the channels of `src` (interleaved) into `planes` (one 8-bit Mat each, of src's size,
// viewing the caller's memory). Why not always cv::split: into planes whose rows are further
// apart than their width (slots of a padded batch) it goes row by row through its generic
// iterator, about 7x slower than into continuous planes (0.64 against 0.08 ms for 853x800);
// three channels (every batch decode: 'color') are then deinterleaved row by row here.
inline void split_into_planes(const cv::Mat& src, std::vector<cv::Mat>& planes) {
  if (src.channels() == 1) {
    src.copyTo(planes[0]);
    return;
  }
  if (planes[0].isContinuous()) {
    cv::split(src, planes);
    return;
  }
  TORCH_CHECK(src.channels() == 3, "planes with rows wider than the image hold 1 or 3 channels, "
              "got ", src.channels());
  for (int y = 0; y < src.rows; ++y) {
    deinterleave_row3(src.ptr<uint8_t>(y), planes[0].ptr<uint8_t>(y), planes[1].ptr<uint8_t>(y),
                      planes[2].ptr<uint8_t>(y), src.cols);
  }
}

// Writes `src` (1 to 4 channels) resized to `out_size` with `interpolation` (cv::resize's flags)
// and flipped by `flip` as [C, out_h, out_w] at `dst`: plane c at dst + c * plane_step, its rows
// row_step bytes apart. Packed, the steps are out_h * out_w and out_w (the default, -1); larger
// ones write into a slot of a padded batch, whose padding is left as it is.
inline void warp_into_planar(const cv::Mat& src, cv::Size out_size, int interpolation, int flip,
                             uint8_t* dst, int64_t plane_step = -1, int64_t row_step = -1) {
  cv::Mat warped = src;
  if (out_size != src.size()) {
    cv::resize(src, warped, out_size, 0, 0, interpolation);
  }
  if (flip != 0) {
    cv::Mat flipped;
    cv::flip(warped, flipped, kWarpFlipCodes[flip]);
    warped = flipped;
  }
  const int channels = src.channels();
  const size_t plane = plane_step < 0 ? static_cast<size_t>(out_size.area())
                                      : static_cast<size_t>(plane_step);
  const size_t row = row_step < 0 ? static_cast<size_t>(out_size.width)
                                  : static_cast<size_t>(row_step);
  std::vector<cv::Mat> planes;
  for (int c = 0; c < channels; ++c) {  // each plane views the caller's memory
    planes.emplace_back(out_size, CV_8UC1, dst + c * plane, row);
  }
  split_into_planes(warped, planes);
  for (int c = 0; c < channels; ++c) {
    TORCH_CHECK(planes[c].data == dst + c * plane, "OpenCV reallocated output plane ", c);
  }
}

}  // namespace mmdet_ext
#endif
