// The EXIF orientation of a JPEG as OpenCV 4.11's imdecode reads it, so that decode_image rotates
// exactly the images cv2.imdecode rotates (image_decoder.cpp applies it), and the nvJPEG decode
// leaves to the CPU exactly those (jpeg_frame.cpp). Needs no library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mmdet_ext {

// Orientation (1..8 by the EXIF spec, anything else means "as stored") from the payload of the
// JPEG's first APP1 segment, which OpenCV takes for EXIF without checking its "Exif\0\0" header.
// Returns 1 when the payload holds no readable orientation.
int read_exif_orientation(const uint8_t* app1, size_t size);

}  // namespace mmdet_ext
