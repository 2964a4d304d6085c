// What a JPEG's markers say before its scan data, read without a decoder, and whether the GPU
// decode (nvJPEG, io/cuda/nvjpeg_decode.cpp) may take the file: only where it can give the image
// cv2.imdecode(IMREAD_COLOR) gives in layout, size and orientation. Everything else stays with
// the CPU decoder, which is cv2's bit for bit. Needs no library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace mmdet_ext {

struct JpegFrame {
  int sof_marker = 0;  // 0xC0..0xCF: the frame's coding process
  int precision = 0;   // bits per sample
  int components = 0;
  int height = 0;
  int width = 0;
  int orientation = 1;         // of the first APP1 segment, as OpenCV reads it
  bool adobe_segment = false;  // an APP14 "Adobe" segment (its colour transform decides RGB/YCC)
  bool rgb_component_ids = false;  // components named 'R', 'G', 'B': libjpeg reads them as RGB
  bool ends_with_eoi = false;  // the last two bytes are the EOI marker
};

// The frame of `data`, or the reason it has none that can be read (not a JPEG, corrupt markers,
// no frame header before the scan).
std::optional<JpegFrame> read_jpeg_frame(const uint8_t* data, size_t size, std::string* why);

// Why nvJPEG must not decode this file to a (height, width) BGR image, or nullopt when it may: a
// baseline 8-bit (SOF0/SOF1), Huffman-coded, 3-component JPEG of that size, without EXIF
// rotation, an Adobe segment or RGB component names (libjpeg's colour-space rules), ending with EOI (a truncated file goes to the CPU
// decoder, which refuses it by name).
std::optional<std::string> gpu_decode_refusal(const uint8_t* data, size_t size, int64_t height,
                                              int64_t width);

}  // namespace mmdet_ext
