// CPU kernel of mmdet_ext::decode_images_into: a batch of encoded images decoded on a few native
// threads straight into one preallocated buffer, channel-planar, each image at its offset, and,
// when asked, resized and flipped on the way. Why: the batched fetch
// (mmdet_ext/datasets/batched_fetch.py) decodes a whole batch in one call with the GIL released,
// into the very buffer that crosses to the training process, so no per-image tensor is allocated
// and nothing is copied after decoding. Every image is decoded exactly as decode_image decodes it
// (decode_image_to_mat, image_decoder.h) and warped exactly as warp_image warps it
// (warp_into_planar, transforms/warp_planar.h).
#include <c10/util/Optional.h>

#include <torch/library.h>
#include <torch/types.h>

#if defined(MMDET_EXT_WITH_OPENCV) && defined(MMDET_EXT_WITH_LIBJPEG)
#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>

#include "../image_decoder.h"
#include "../decode_one_planar.h"
#include "transforms/warp_planar.h"
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
  // Every argument is checked before any thread starts: a bad one never writes out of bounds.
  std::vector<Layout> layouts(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const at::Tensor& bytes = data[i];
    TORCH_CHECK(bytes.device().is_cpu() && bytes.scalar_type() == at::kByte &&
                    bytes.dim() == 1 && bytes.is_contiguous(),
                "decode_images_into: image ", i, ": expected contiguous 1-D CPU uint8 encoded "
                "bytes, got ", bytes.scalar_type(), " ", bytes.sizes(), " on ", bytes.device());
    layouts[static_cast<size_t>(i)] = place_image(
        "decode_images_into", c10::str("image ", i), shapes.data() + 3 * i,
        warps.has_value() ? warps->data() + 3 * i : nullptr, interpolation,
        slot_hw.has_value() ? slot_hw->data() : nullptr, offsets[i], out.numel());
  }

  std::vector<std::string> errors(static_cast<size_t>(count));
  std::atomic<int64_t> next{0};
  uint8_t* base = out.data_ptr<uint8_t>();
  const int64_t limit = max_pixels.value_or(kDefaultMaxPixels);
  auto work = [&]() {
    for (int64_t i = next++; i < count; i = next++) {
      try {
        const Warp warp{warps.has_value() ? warps->data() + 3 * i : nullptr,
                        static_cast<int>(interpolation)};
        decode_one_planar(data[i].data_ptr<uint8_t>(), data[i].numel(), flags, scale_denoms[i],
                          limit, shapes.data() + 3 * i,
                          warps.has_value() ? &warp : nullptr, layouts[static_cast<size_t>(i)],
                          base + offsets[i]);
      } catch (const std::exception& err) {
        errors[static_cast<size_t>(i)] = error_text(err);
      }
    }
  };
  const int64_t threads = std::clamp<int64_t>(num_threads, 1, std::max<int64_t>(count, 1));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();  // the calling thread decodes too
  for (std::thread& thread : pool) thread.join();

  std::string failed;
  for (int64_t i = 0; i < count; ++i) {
    if (!errors[static_cast<size_t>(i)].empty()) {
      failed += c10::str("\n  image ", i, ": ", errors[static_cast<size_t>(i)]);
    }
  }
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
