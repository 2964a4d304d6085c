// CPU kernel of mmdet_ext::decode_images_into: a batch of encoded images decoded on a few native
// threads straight into one preallocated buffer, channel-planar, each image at its offset, and,
// when asked, resized and flipped on the way. Why: one call per batch decodes into the very
// buffer that crosses to the training process, so no per-image tensor is allocated and nothing
// is copied after decoding. It runs on the batched fetch's own executor, DecodeQueue
// (io/decode_queue.h): every image checked (plan_decode), then all pushed and waited for. Every
// image is decoded exactly as decode_image decodes it (decode_image_to_mat, image_decoder.h) and
// warped exactly as warp_image warps it (warp_into_planar, transforms/warp_planar.h).
#include <c10/util/Optional.h>

#include <torch/library.h>
#include <torch/types.h>

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
#include <algorithm>
#include <string>
#include <vector>

#include "../decode_one_planar.h"
#include "../decode_queue.h"
#include "../image_decoder.h"
#else
#include "optional_libraries.h"
#endif

namespace mmdet_ext {
namespace {

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)

void decode_images_into_cpu(at::TensorList data, int64_t flags, at::IntArrayRef scale_denoms,
                            c10::optional<int64_t> max_pixels, const at::Tensor& out,
                            at::IntArrayRef offsets, at::IntArrayRef shapes,
                            int64_t num_threads, at::OptionalIntArrayRef warps,
                            int64_t interpolation, at::OptionalIntArrayRef slot_hw) {
  const int64_t count = static_cast<int64_t>(data.size());
  TORCH_CHECK(out.device().is_cpu() && out.scalar_type() == at::kByte && out.dim() == 1 &&
                  out.is_contiguous(),
              "decode_images_into: out must be a contiguous 1-D CPU uint8 tensor, got ",
              out.scalar_type(), " ", out.sizes(), " on ", out.device());
  TORCH_CHECK(static_cast<int64_t>(scale_denoms.size()) == count &&
                  static_cast<int64_t>(offsets.size()) == count &&
                  static_cast<int64_t>(shapes.size()) == 3 * count,
              "decode_images_into: ", count, " images need ", count, " scale_denoms, ", count,
              " offsets and ", 3 * count, " shape values, got ", scale_denoms.size(), ", ",
              offsets.size(), " and ", shapes.size());
  TORCH_CHECK(!warps.has_value() || static_cast<int64_t>(warps->size()) == 3 * count,
              "decode_images_into: ", count, " images need ", 3 * count,
              " warp values (out_height, out_width, flip each), got ", warps->size());
  TORCH_CHECK(!slot_hw.has_value() || (slot_hw->size() == 2 && (*slot_hw)[0] > 0 &&
                                        (*slot_hw)[1] > 0),
              "decode_images_into: slot_hw must be (height, width), both > 0, got ",
              slot_hw.has_value() ? c10::str(*slot_hw) : std::string());
  // Every argument is checked before any image is decoded: a bad one never writes out of bounds.
  const int64_t limit = max_pixels.value_or(kDefaultMaxPixels);
  std::vector<DecodeTask> tasks;
  tasks.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const at::Tensor& bytes = data[i];
    TORCH_CHECK(bytes.device().is_cpu() && bytes.scalar_type() == at::kByte &&
                    bytes.dim() == 1 && bytes.is_contiguous(),
                "decode_images_into: image ", i, ": expected contiguous 1-D CPU uint8 encoded "
                "bytes, got ", bytes.scalar_type(), " ", bytes.sizes(), " on ", bytes.device());
    tasks.push_back(plan_decode(
        "decode_images_into", i, bytes.data_ptr<uint8_t>(), bytes.numel(),
        out.data_ptr<uint8_t>(), out.numel(), offsets[i], flags, scale_denoms[i], limit,
        shapes.data() + 3 * i, warps.has_value() ? warps->data() + 3 * i : nullptr, nullptr,
        interpolation, slot_hw.has_value() ? slot_hw->data() : nullptr));
  }
  // The calling thread decodes too (in wait), so the queue gets one thread fewer.
  DecodeQueue queue(std::clamp<int64_t>(num_threads, 1, std::max<int64_t>(count, 1)) - 1);
  for (const DecodeTask& task : tasks) queue.push(task);
  std::vector<std::pair<int64_t, std::string>> errors = queue.wait();
  std::sort(errors.begin(), errors.end());
  std::string failed;
  for (const auto& [image, error] : errors) failed += c10::str("\n  image ", image, ": ", error);
  TORCH_CHECK(failed.empty(), "decode_images_into: these images were not decoded:", failed);
}

#else

void decode_images_into_cpu(at::TensorList, int64_t, at::IntArrayRef, c10::optional<int64_t>,
                            const at::Tensor&, at::IntArrayRef, at::IntArrayRef, int64_t,
                            at::OptionalIntArrayRef, int64_t, at::OptionalIntArrayRef) {
#ifdef MMDET_EXT_WITH_OPENCV
  fail_built_without("decode_images_into", "libjpeg");
#else
  fail_built_without("decode_images_into", "OpenCV");
#endif
}

#endif

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("decode_images_into", &decode_images_into_cpu);
}

}  // namespace mmdet_ext
