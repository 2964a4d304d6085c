#include "jpeg_frame.h"

#include "exif_orientation.h"

namespace mmdet_ext {
namespace {

constexpr uint8_t kSos = 0xDA;
constexpr uint8_t kApp1 = 0xE1;
constexpr uint8_t kApp14 = 0xEE;

// SOFn markers: C0..CF except C4 (DHT), C8 (JPG) and CC (DAC), which share the range.
bool is_sof(uint8_t marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

int big_endian16(const uint8_t* at) { return (at[0] << 8) | at[1]; }

}  // namespace

std::optional<JpegFrame> read_jpeg_frame(const uint8_t* data, size_t size, std::string* why) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) {
    *why = "not a JPEG";
    return std::nullopt;
  }
  JpegFrame frame;
  frame.ends_with_eoi = data[size - 2] == 0xFF && data[size - 1] == 0xD9;
  bool seen_app1 = false, seen_sof = false;
  size_t pos = 2;
  while (pos + 4 <= size) {
    if (data[pos] != 0xFF) {
      *why = "corrupt JPEG: no marker at byte " + std::to_string(pos);
      return std::nullopt;
    }
    const uint8_t marker = data[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length follows
      pos += 2;
      continue;
    }
    const size_t length = big_endian16(data + pos + 2);
    if (length < 2 || pos + 2 + length > size) {
      *why = "corrupt JPEG: a segment runs past the end of the file";
      return std::nullopt;
    }
    const uint8_t* payload = data + pos + 4;
    const size_t payload_size = length - 2;
    if (marker == kSos) break;
    if (is_sof(marker) && !seen_sof && payload_size >= 6) {
      seen_sof = true;
      frame.sof_marker = marker;
      frame.precision = payload[0];
      frame.height = big_endian16(payload + 1);
      frame.width = big_endian16(payload + 3);
      frame.components = payload[5];
      // 3 bytes per component (id, sampling, table) after the 6 above
      frame.rgb_component_ids = frame.components == 3 && payload_size >= 15 &&
                                payload[6] == 'R' && payload[9] == 'G' && payload[12] == 'B';
    } else if (marker == kApp1 && !seen_app1) {
      seen_app1 = true;  // OpenCV reads the first APP1, whatever it holds
      frame.orientation = read_exif_orientation(payload, payload_size);
    } else if (marker == kApp14 && payload_size >= 5 &&
               std::string(reinterpret_cast<const char*>(payload), 5) == "Adobe") {
      frame.adobe_segment = true;
    }
    pos += 2 + length;
  }
  if (!seen_sof) {
    *why = "corrupt JPEG: no frame header (SOF) before the scan data";
    return std::nullopt;
  }
  return frame;
}

std::optional<std::string> gpu_decode_refusal(const uint8_t* data, size_t size, int64_t height,
                                              int64_t width) {
  std::string why;
  const std::optional<JpegFrame> frame = read_jpeg_frame(data, size, &why);
  if (!frame) return why;
  if (frame->sof_marker != 0xC0 && frame->sof_marker != 0xC1) {
    return "not baseline Huffman-coded (SOF marker 0x" +
           std::string(1, "0123456789ABCDEF"[frame->sof_marker >> 4]) +
           std::string(1, "0123456789ABCDEF"[frame->sof_marker & 15]) + ")";
  }
  if (frame->precision != 8) return std::to_string(frame->precision) + "-bit samples";
  if (frame->components != 3) return std::to_string(frame->components) + " components";
  if (frame->orientation >= 2 && frame->orientation <= 8) {
    return "EXIF orientation " + std::to_string(frame->orientation);
  }
  if (frame->adobe_segment) return "an Adobe colour transform segment";
  if (frame->rgb_component_ids) return "RGB-coded components";
  if (!frame->ends_with_eoi) return "does not end with the EOI marker";
  if (frame->height != height || frame->width != width) {
    return "its frame is " + std::to_string(frame->width) + "x" + std::to_string(frame->height) +
           ", not " + std::to_string(width) + "x" + std::to_string(height);
  }
  return std::nullopt;
}

}  // namespace mmdet_ext
