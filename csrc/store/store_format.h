// On-disk layout of an annotation store file (*.mdxstore): a fixed header, a table of named
// sections, then the sections' bytes, each aligned to 64 bytes. The store knows nothing about
// COCO: it holds named, typed 1-D/2-D arrays; mmdet_ext/datasets/annotation_store.py gives them
// their meaning. Everything is little-endian (x86-64 / aarch64 native).
#pragma once

#include <cstdint>

namespace mmdet_ext {
namespace store {

constexpr char kMagic[8] = {'M', 'M', 'D', 'X', 'S', 'T', 'O', 'R'};
// Bump when the layout of the header, the section table or a section's meaning changes.
constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kAlignment = 64;
constexpr int kMaxSectionName = 32;
constexpr int kKeyBytes = 32;  // e.g. SHA-256 of the source annotation file

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t num_sections;
  uint64_t file_size;         // total bytes; a shorter file was truncated
  uint64_t payload_checksum;  // checksum64 of every byte after the header
  uint8_t key[kKeyBytes];     // identifies what the store was built from
  uint64_t header_checksum;   // checksum64 of this header with this field set to 0
};

// A section's element type as the file records it. The codes are those of c10::ScalarType, which
// the format's first writer stored, fixed here so the format does not depend on the torch it is
// built with (torch < 2.3 has no uint16/uint32 tensors). Not bool: its bytes other than 0 and 1
// are not valid values.
constexpr int32_t kUInt8 = 0, kInt8 = 1, kInt16 = 2, kInt32 = 3, kInt64 = 4, kFloat16 = 5,
                  kFloat32 = 6, kFloat64 = 7, kUInt16 = 27, kUInt32 = 28;

// Bytes per element of a supported element type code, 0 for any other code.
inline uint64_t element_size(int32_t dtype) {
  switch (dtype) {
    case kUInt8: case kInt8: return 1;
    case kInt16: case kUInt16: case kFloat16: return 2;
    case kInt32: case kUInt32: case kFloat32: return 4;
    case kInt64: case kFloat64: return 8;
    default: return 0;
  }
}

struct SectionEntry {
  char name[kMaxSectionName];  // NUL-padded
  int32_t dtype;               // element type code (above)
  int32_t ndim;                // 1 or 2
  int64_t shape[2];
  uint64_t offset;  // from the start of the file, multiple of kAlignment
  uint64_t nbytes;
};

// Fast 64-bit checksum (not cryptographic): detects truncation, torn writes and bit rot.
uint64_t checksum64(const uint8_t* data, uint64_t size);

}  // namespace store
}  // namespace mmdet_ext
