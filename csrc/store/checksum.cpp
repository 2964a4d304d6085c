#include <cstring>

#include "store_format.h"

namespace mmdet_ext {
namespace store {
namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t mix(uint64_t lane, uint64_t word) {
  return rotl(lane + word * kPrime2, 31) * kPrime1;
}

}  // namespace

// Four independent lanes over 32-byte blocks keep the CPU's multipliers busy (several GB/s), so
// validating a store on open costs little next to reading it.
uint64_t checksum64(const uint8_t* data, uint64_t size) {
  uint64_t lanes[4] = {kPrime1 + kPrime2, kPrime2, 0, 0 - kPrime1};
  uint64_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int lane = 0; lane < 4; ++lane) {
      uint64_t word;
      std::memcpy(&word, data + i + 8 * lane, 8);
      lanes[lane] = mix(lanes[lane], word);
    }
  }
  uint64_t hash = rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18);
  hash ^= size * kPrime1;
  for (; i < size; ++i) {
    hash = rotl(hash ^ (data[i] * kPrime1), 11) * kPrime2;
  }
  hash ^= hash >> 33;
  hash *= kPrime2;
  hash ^= hash >> 29;
  return hash;
}

}  // namespace store
}  // namespace mmdet_ext
