// Decoding an encoded image (JPEG, PNG, BMP, ...) into a cv::Mat, bit-exact with the
// opencv-python wheel's cv2.imdecode, for every op that needs pixels from file bytes. The op's
// contract (what the flags, scale and limit mean) is decode_image's docstring in
// mmdet_ext/ops/image.py; this header adds only what C++ callers need to know.
//
// JPEGs go through libjpeg(-turbo) directly (jpeg_decoder.h) so that corrupt entropy-coded data,
// which libjpeg reports only as a warning and OpenCV decodes into garbage, is an error. The rest
// goes through cv::imdecode.
//
// kDefaultMaxPixels is in every build; decode_image_to_mat only in builds with OpenCV and libjpeg
// (optional_libraries.h).
#pragma once

#include <cstdint>

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
#include <opencv2/core/mat.hpp>
#endif

namespace mmdet_ext {

// The one image pixel limit (2^28 = 16384 x 16384), Python's mmdet_ext.io.DEFAULT_MAX_PIXELS
// (read through _C.default_max_pixels): the default of decode_image, the header checks, the
// loading transforms and dataset validation. Below OpenCV's own CV_IO_MAX_IMAGE_PIXELS (2^30).
constexpr int64_t kDefaultMaxPixels = int64_t{1} << 28;

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)

// Decodes `size` bytes at `data`. `flags`: cv::ImreadModes (IMREAD_COLOR, IMREAD_GRAYSCALE or
// IMREAD_UNCHANGED, the first two optionally | IMREAD_IGNORE_ORIENTATION).
//
// Returns a continuous 8-bit Mat of 1 or 3 channels (4 for PNG/TIFF with alpha under
// IMREAD_UNCHANGED). Throws c10::Error (TORCH_CHECK) on empty, truncated, corrupt or
// undecodable input, unsupported flags, and images of more than `max_pixels` pixels (a JPEG's
// declared size is checked before decoding, whatever scale_denom; other formats after).
cv::Mat decode_image_to_mat(const uint8_t* data, int64_t size, int64_t flags,
                            int64_t scale_denom, int64_t max_pixels);

#endif

}  // namespace mmdet_ext
