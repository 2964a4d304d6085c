// The EXIF orientation of a JPEG as OpenCV 4.11's imdecode reads it, and the transform it
// applies, so that decode_image rotates exactly the images cv2.imdecode rotates.
#pragma once

#include <cstddef>
#include <cstdint>

#include <opencv2/core/mat.hpp>

namespace mmdet_ext {

// Orientation (1..8 by the EXIF spec, anything else means "as stored") from the payload of the
// JPEG's first APP1 segment, which OpenCV takes for EXIF without checking its "Exif\0\0" header.
// Returns 1 when the payload holds no readable orientation.
int read_exif_orientation(const uint8_t* app1, size_t size);

// The image as cv::imdecode shows it for `orientation` (transpose and/or flip; 1 and unknown
// values return `image` itself).
cv::Mat apply_exif_orientation(const cv::Mat& image, int orientation);

}  // namespace mmdet_ext
