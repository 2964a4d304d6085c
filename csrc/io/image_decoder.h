// Decoding an encoded image (JPEG, PNG, BMP, ...) into a cv::Mat, bit-exact with the
// opencv-python wheel's cv2.imdecode, for every op that needs pixels from file bytes.
//
// JPEGs go through libjpeg(-turbo) directly (jpeg_decoder.h) so that corrupt entropy-coded data,
// which libjpeg reports only as a warning and OpenCV decodes into garbage, is an error. The rest
// goes through cv::imdecode.
#pragma once

#include <cstdint>

#include <opencv2/core/mat.hpp>

namespace mmdet_ext {

// OpenCV's default CV_IO_MAX_IMAGE_PIXELS: imdecode refuses larger images, so do we.
constexpr int64_t kMaxDecodedPixels = int64_t{1} << 30;

// Decodes `size` bytes at `data`. `flags`: cv::IMREAD_COLOR (BGR), IMREAD_GRAYSCALE or
// IMREAD_UNCHANGED, the first two optionally | IMREAD_IGNORE_ORIENTATION; EXIF orientation is
// applied exactly as cv::imdecode does (not for IMREAD_UNCHANGED). `scale_denom` (1, 2, 4 or 8)
// decodes a JPEG at 1/scale_denom of its size in the DCT domain, as IMREAD_REDUCED_COLOR_N /
// IMREAD_REDUCED_GRAYSCALE_N do; other formats ignore it and come back at full size (read the
// shape of the result).
//
// Returns a continuous 8-bit Mat of 1 or 3 channels (4 for PNG/TIFF with alpha under
// IMREAD_UNCHANGED). Throws c10::Error (TORCH_CHECK) on empty, truncated, corrupt or
// undecodable input, unsupported flags, and images of more than kMaxDecodedPixels pixels (for a
// JPEG: declared pixels, whatever scale_denom).
cv::Mat decode_image_to_mat(const uint8_t* data, int64_t size, int64_t flags,
                            int64_t scale_denom);

}  // namespace mmdet_ext
