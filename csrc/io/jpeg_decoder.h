// Strict JPEG decoding on libjpeg(-turbo), with OpenCV's settings, for image_decoder.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <opencv2/core/mat.hpp>

namespace mmdet_ext {

// What cv::imdecode would make of the JPEG's components.
enum class JpegOutput {
  kBgr,        // IMREAD_COLOR
  kGray,       // IMREAD_GRAYSCALE
  kUnchanged,  // IMREAD_UNCHANGED: BGR for a colour JPEG, gray for a grayscale one
};

struct DecodedJpeg {
  cv::Mat image;        // not yet rotated
  int orientation = 1;  // EXIF orientation as OpenCV reads it (1 = as stored; 0 = none read)
};

// Version of the libjpeg headers compiled against: libjpeg-turbo's own ("2.1.5"), else the
// libjpeg API version ("62", "80", ...).
std::string libjpeg_version();

// The JPEG signature cv::imdecode recognises (SOI followed by a marker).
bool is_jpeg(const uint8_t* data, int64_t size);

// Decodes a JPEG at 1/scale_denom of its size (scale_denom in {1, 2, 4, 8}). Any libjpeg error
// or warning (corrupt entropy-coded data, premature end of data, ...) throws c10::Error, and so
// does a header declaring more than `max_pixels` pixels. Reads the EXIF orientation only when
// `read_orientation`.
//
// Returns std::nullopt for what this decoder leaves to cv::imdecode: 4-component (CMYK/YCCK)
// JPEGs, whose entropy-coded data has then already been checked here, and JPEGs that libjpeg
// cannot decode at 8 bits per sample (12-bit).
std::optional<DecodedJpeg> decode_jpeg(const uint8_t* data, int64_t size, JpegOutput output,
                                       int scale_denom, bool read_orientation,
                                       int64_t max_pixels);

}  // namespace mmdet_ext
