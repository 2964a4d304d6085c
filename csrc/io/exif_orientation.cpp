// EXIF orientation, read the way OpenCV 4.11 does (modules/imgcodecs: ExifReader), quirks
// included: an image cv2.imdecode shows upright must come out of decode_image upright too, and
// one it leaves alone must stay alone.
#include "exif_orientation.h"

#include <optional>

namespace mmdet_ext {
namespace {

// TIFF tags whose values ExifReader reads, and so bounds-checks, on its way through IFD0.
enum Tag : uint16_t {
  kImageDescription = 0x010E,
  kMake = 0x010F,
  kModel = 0x0110,
  kOrientation = 0x0112,
  kXResolution = 0x011A,
  kYResolution = 0x011B,
  kResolutionUnit = 0x0128,
  kSoftware = 0x0131,
  kDateTime = 0x0132,
  kWhitePoint = 0x013E,
  kPrimaryChromaticities = 0x013F,
  kYCbCrCoefficients = 0x0211,
  kYCbCrPositioning = 0x0213,
  kReferenceBlackWhite = 0x0214,
  kCopyright = 0x8298,
};

constexpr size_t kTiffHeaderOffset = 6;  // "Exif\0\0" before the TIFF header
constexpr size_t kEntrySize = 12;        // tag, type, count, value or offset

struct OutOfBounds {};

// ExifReader's reads: little-endian only for an "II" header, big-endian otherwise (even for a
// malformed one), and a read past the end stops the parse.
class TiffReader {
 public:
  TiffReader(const uint8_t* data, size_t size)
      : data_(data), size_(size), little_(data[0] == 'I' && (size == 1 || data[1] == 'I')) {}

  uint16_t u16(size_t offset) const {
    if (offset + 1 >= size_) throw OutOfBounds{};
    const uint16_t a = data_[offset], b = data_[offset + 1];
    return little_ ? a | (b << 8) : (a << 8) | b;
  }

  uint32_t u32(size_t offset) const {
    if (offset + 3 >= size_) throw OutOfBounds{};
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const uint32_t byte = data_[offset + (little_ ? 3 - i : i)];
      value = (value << 8) | byte;
    }
    return value;
  }

  // An ASCII value: inline when at most 4 bytes (ExifReader then looks at offset 8 of the TIFF
  // data, not of the entry -- harmless here, only the bounds check matters).
  void check_string(size_t entry) const {
    const size_t length = u32(entry + 4);
    const size_t start = length > 4 ? u32(entry + 8) : 8;
    if (start > size_ || start + length > size_) throw OutOfBounds{};
  }

  void check_rationals(size_t entry, int count) const {
    uint32_t offset = u32(entry + 8);
    for (int i = 0; i < count; ++i, offset += 8) {
      u32(offset);
      u32(size_t{offset} + 4);
    }
  }


 private:
  const uint8_t* data_;
  size_t size_;
  bool little_;
};

}  // namespace

int read_exif_orientation(const uint8_t* app1, size_t size) {
  if (size <= kTiffHeaderOffset) return 1;
  const TiffReader tiff(app1 + kTiffHeaderOffset, size - kTiffHeaderOffset);
  // ExifReader keeps the entries it parsed before a bad one, and the first of duplicate tags.
  std::optional<int> orientation;
  try {
    if (tiff.u16(2) != 0x2A) return 1;
    uint32_t entry = tiff.u32(4);
    const size_t count = tiff.u16(entry);
    entry += 2;
    for (size_t i = 0; i < count; ++i, entry += kEntrySize) {
      const size_t at = entry;
      switch (tiff.u16(at)) {
        case kImageDescription:
        case kMake:
        case kModel:
        case kSoftware:
        case kDateTime:
        case kCopyright:
          tiff.check_string(at);
          break;
        case kOrientation: {
          const int value = tiff.u16(at + 8);
          if (!orientation) orientation = value;
          break;
        }
        case kResolutionUnit:
        case kYCbCrPositioning:
          tiff.u16(at + 8);
          break;
        case kXResolution:
        case kYResolution:
          tiff.check_rationals(at, 1);
          break;
        case kWhitePoint:
          tiff.check_rationals(at, 2);
          break;
        case kYCbCrCoefficients:
          tiff.check_rationals(at, 3);
          break;
        case kPrimaryChromaticities:
        case kReferenceBlackWhite:
          tiff.check_rationals(at, 6);
          break;
        default:
          break;
      }
    }
  } catch (const OutOfBounds&) {
    // as ExifReader: stop here, keep what was read
  }
  return orientation.value_or(1);
}

}  // namespace mmdet_ext
