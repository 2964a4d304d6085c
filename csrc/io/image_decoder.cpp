// decode_image_to_mat: input checks, JPEGs through the strict libjpeg decoder, everything else
// (and the JPEGs it leaves alone) through cv::imdecode.
#include "image_decoder.h"

#include <algorithm>
#include <cstdint>

#include <c10/util/Exception.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "exif_orientation.h"
#include "jpeg_decoder.h"

namespace mmdet_ext {
namespace {

// libjpeg fills the missing rows of a truncated JPEG with gray and only warns, so OpenCV returns a
// plausible-looking image: silent wrong data. A complete JPEG ends with the EOI marker (FF D9),
// which never occurs inside entropy-coded data (0xFF is stuffed as FF 00), so look for it near
// the end (some writers append a few padding bytes). The strict decoder would refuse these too,
// but this names the cause.
bool is_truncated_jpeg(const uint8_t* data, int64_t size) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return false;  // not a JPEG
  const int64_t tail_start = std::max<int64_t>(2, size - 1024);
  for (int64_t i = size - 2; i >= tail_start; --i) {
    if (data[i] == 0xFF && data[i + 1] == 0xD9) return false;
  }
  return true;
}

// The image as cv::imdecode shows it for `orientation` (OpenCV's ApplyExifOrientation: transpose
// and/or flip; 1 and unknown values return `image` itself).
cv::Mat apply_exif_orientation(const cv::Mat& image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  cv::Mat upright;
  if (orientation <= 4) {
    // 2: mirror left-right, 3: rotate 180, 4: mirror top-bottom
    cv::flip(image, upright, orientation == 2 ? 1 : orientation == 3 ? -1 : 0);
    return upright;
  }
  cv::Mat transposed;
  cv::transpose(image, transposed);
  if (orientation == 5) return transposed;
  // 6: rotate 90 clockwise, 7: transpose + rotate 180, 8: rotate 90 counter-clockwise
  cv::flip(transposed, upright, orientation == 6 ? 1 : orientation == 7 ? -1 : 0);
  return upright;
}

bool is_supported_flag(int64_t flags) {
  if (flags == cv::IMREAD_UNCHANGED) return true;  // -1: every bit set, so test it before masking
  const int64_t base = flags & ~static_cast<int64_t>(cv::IMREAD_IGNORE_ORIENTATION);
  return base == cv::IMREAD_COLOR || base == cv::IMREAD_GRAYSCALE;
}

JpegOutput jpeg_output(int64_t flags) {
  if (flags == cv::IMREAD_UNCHANGED) return JpegOutput::kUnchanged;
  return (flags & cv::IMREAD_COLOR) != 0 ? JpegOutput::kBgr : JpegOutput::kGray;
}

// The cv::imdecode flags for a JPEG the strict decoder hands back: IMREAD_REDUCED_* for the
// scale. There is no reduced IMREAD_UNCHANGED; for the 4-component JPEGs that come this way
// it is BGR without EXIF rotation, i.e. IMREAD_REDUCED_COLOR_N | IMREAD_IGNORE_ORIENTATION.
int reduced_jpeg_flags(int64_t flags, int64_t scale_denom) {
  if (scale_denom == 1) return static_cast<int>(flags);
  const int reduced = static_cast<int>(scale_denom) * 8;  // 16, 32, 64: IMREAD_REDUCED_*_N bits
  if (flags == cv::IMREAD_UNCHANGED) {
    return cv::IMREAD_COLOR | reduced | cv::IMREAD_IGNORE_ORIENTATION;
  }
  return static_cast<int>(flags) | reduced;
}

cv::Mat imdecode(const uint8_t* data, int64_t size, int flags) {
  // cv::imdecode only reads the buffer; the Mat header just has no const constructor
  const cv::Mat encoded(1, static_cast<int>(size), CV_8UC1, const_cast<uint8_t*>(data));
  cv::Mat decoded = cv::imdecode(encoded, flags);
  TORCH_CHECK(!decoded.empty(), "decode_image: OpenCV could not decode the ", size,
              "-byte buffer (unknown format, truncated or corrupt data)");
  TORCH_CHECK(decoded.depth() == CV_8U, "decode_image: only 8-bit images are supported, the "
              "buffer decodes to OpenCV depth ", decoded.depth(), " (16-bit PNG/TIFF?)");
  return decoded;
}

}  // namespace

cv::Mat decode_image_to_mat(const uint8_t* data, int64_t size, int64_t flags,
                            int64_t scale_denom, int64_t max_pixels) {
  TORCH_CHECK(size > 0, "decode_image: the buffer is empty (zero-byte file?)");
  TORCH_CHECK(size <= INT32_MAX, "decode_image: the buffer has ", size,
              " bytes, more than OpenCV reads (2^31 - 1)");
  TORCH_CHECK(is_supported_flag(flags), "decode_image: unsupported imread flags ", flags,
              "; expected IMREAD_COLOR, IMREAD_GRAYSCALE or IMREAD_UNCHANGED, optionally with "
              "IMREAD_IGNORE_ORIENTATION");
  TORCH_CHECK(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8,
              "decode_image: scale_denom must be 1, 2, 4 or 8, got ", scale_denom);
  TORCH_CHECK(max_pixels > 0, "decode_image: max_pixels must be positive, got ", max_pixels);
  TORCH_CHECK(!is_truncated_jpeg(data, size), "decode_image: truncated JPEG (", size,
              " bytes, no end-of-image marker): the file was cut short");

  cv::Mat image;
  if (is_jpeg(data, size)) {
    // cv::imdecode rotates by EXIF unless told not to, and never for IMREAD_UNCHANGED
    const bool rotate = flags != cv::IMREAD_UNCHANGED &&
                        (flags & cv::IMREAD_IGNORE_ORIENTATION) == 0;
    std::optional<DecodedJpeg> jpeg = decode_jpeg(data, size, jpeg_output(flags),
                                                  static_cast<int>(scale_denom), rotate, max_pixels);
    image = jpeg ? apply_exif_orientation(jpeg->image, jpeg->orientation)
                 : imdecode(data, size, reduced_jpeg_flags(flags, scale_denom));
  } else {
    image = imdecode(data, size, static_cast<int>(flags));  // scale_denom: JPEG only
    // OpenCV's own limit (2^30) has already kept the allocation bounded.
    TORCH_CHECK(int64_t{image.rows} * image.cols <= max_pixels, "decode_image: the image is ",
                image.cols, "x", image.rows, " pixels, more than max_pixels=", max_pixels,
                " (decompression bomb?); raise max_pixels if it is genuine");
  }
  return image.isContinuous() ? image : image.clone();
}

}  // namespace mmdet_ext
