// CPU kernel of rle_merge: the union (or intersection) of RLEs of one size, pycocotools'
// merge (masks::merge_counts, ../rle_codec.h).
#include <cstdint>
#include <vector>

#include <torch/library.h>

#include "../rle_codec.h"

namespace mmdet_ext {
namespace {

using masks::Counts;

at::Tensor rle_merge_cpu(const at::Tensor& counts, const at::Tensor& run_counts, int64_t height,
                         int64_t width, bool intersect) {
  const masks::PackedCounts rles =
      masks::read_packed_counts("rle_merge", counts, run_counts, height, width);
  TORCH_CHECK(rles.size() > 0, "rle_merge: needs at least one RLE (run_counts is empty)");
  std::vector<Counts> list;
  list.reserve(rles.size());
  for (int64_t i = 0; i < rles.size(); ++i) {
    list.emplace_back(rles.data(i), rles.data(i) + rles.length(i));
  }
  return masks::counts_to_tensor(masks::merge_counts(list, intersect));
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("rle_merge", &rle_merge_cpu);
}

}  // namespace mmdet_ext
