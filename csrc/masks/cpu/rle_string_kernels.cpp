// CPU kernels of rle_to_string and rle_from_string: COCO's compressed RLE string form
// (pycocotools' rleToString / rleFrString). CPU only: the string is file and json data.
#include <cstdint>
#include <cstring>
#include <string>

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../rle_codec.h"

namespace mmdet_ext {
namespace {

using masks::Counts;

// pycocotools' rleToString: each count (from the fourth on, minus the count two before it) as a
// little-endian sequence of 5-bit groups, 0x20 = more groups follow, 0x10 of the last group =
// sign, offset by 48 into printable ASCII.
at::Tensor rle_to_string_cpu(const at::Tensor& counts) {
  const Counts runs = masks::read_runs("rle_to_string", counts);
  std::string text;
  text.reserve(runs.size() * 2);
  for (size_t i = 0; i < runs.size(); ++i) {
    int64_t x = runs[i];
    if (i > 2) {
      x -= runs[i - 2];
    }
    bool more = true;
    while (more) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) {
        c |= 0x20;
      }
      text.push_back(static_cast<char>(c + 48));
    }
  }
  at::Tensor out = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  if (!text.empty()) {  // an empty tensor's data pointer may be null: memcpy(null) is UB
    std::memcpy(out.mutable_data_ptr<uint8_t>(), text.data(), text.size());
  }
  return out;
}

// pycocotools' rleFrString, with the checks it lacks: it reads past the end of a truncated
// string and shifts 32-bit ints past their width for over-long values.
at::Tensor rle_from_string_cpu(const at::Tensor& data, int64_t height, int64_t width) {
  TORCH_CHECK(data.device().is_cpu() && data.dim() == 1 && data.scalar_type() == at::kByte,
              "rle_from_string: expected the RLE string as a 1-D uint8 CPU tensor of ASCII "
              "bytes, got ", data.scalar_type(), " with shape ", data.sizes(), " on ",
              data.device());
  masks::check_image_size("rle_from_string", "image", height, width);
  const at::Tensor bytes = data.contiguous();
  const uint8_t* s = bytes.const_data_ptr<uint8_t>();
  const int64_t n = bytes.numel();
  constexpr int kMaxGroups = 7;  // 35 bits: enough for any delta of two 31-bit counts
  Counts runs;
  int64_t sum = 0;
  int64_t p = 0;
  while (p < n) {
    const int64_t first = p;
    int64_t x = 0;
    int groups = 0;
    bool more = true;
    while (more) {
      TORCH_CHECK(p < n, "rle_from_string: the string ends inside the value that starts at byte ",
                  first, " (its last character has the continuation bit 0x20 set; truncated?)");
      const int c = static_cast<int>(s[p]) - 48;
      TORCH_CHECK(c >= 0 && c < 64, "rle_from_string: byte ", p, " (value ",
                  static_cast<int>(s[p]), ") is not a COCO RLE character (ASCII 48-111)");
      TORCH_CHECK(groups < kMaxGroups, "rle_from_string: the value starting at byte ", first,
                  " is longer than ", kMaxGroups, " characters; corrupt RLE string?");
      x |= static_cast<int64_t>(c & 0x1f) << (5 * groups);
      more = (c & 0x20) != 0;
      ++p;
      ++groups;
      if (!more && (c & 0x10)) {
        x |= static_cast<int64_t>(~uint64_t{0} << (5 * groups));  // sign-extend
      }
    }
    if (runs.size() > 2) {
      x += runs[runs.size() - 2];
    }
    TORCH_CHECK(x >= 0 && x <= masks::kMaxPixels, "rle_from_string: the value starting at byte ",
                first, " decodes to run length ", x, ", outside [0, 2^31 - 1]; corrupt RLE?");
    runs.push_back(static_cast<uint32_t>(x));
    sum += x;
  }
  TORCH_CHECK(sum == height * width, "rle_from_string: the decoded runs sum to ", sum,
              " but a ", height, "x", width, " mask has ", height * width,
              " pixels (wrong size or corrupt RLE string)");
  return masks::counts_to_tensor(runs);
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_to_string", &rle_to_string_cpu);
  m.impl("rle_from_string", &rle_from_string_cpu);
}

}  // namespace mmdet_ext
