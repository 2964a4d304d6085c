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

struct SectionEntry {
  char name[kMaxSectionName];  // NUL-padded
  int32_t dtype;               // c10::ScalarType of the elements
  int32_t ndim;                // 1 or 2
  int64_t shape[2];
  uint64_t offset;  // from the start of the file, multiple of kAlignment
  uint64_t nbytes;
};

// Fast 64-bit checksum (not cryptographic): detects truncation, torn writes and bit rot.
uint64_t checksum64(const uint8_t* data, uint64_t size);

}  // namespace store
}  // namespace mmdet_ext
