// Decoding one encoded image straight into a planar [C, H, W] place of a larger buffer, resized
// and flipped on the way when asked: what decode_images_into (one call per batch) and
// DecodeQueue (one image at a time, decode_queue.cpp) do to each image. Needs OpenCV and libjpeg
// (setup.py compiles decode_one_planar.cpp only with both).
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace mmdet_ext {

// Resize and flip of one image: out_height, out_width, flip (warp_planar.h's codes).
struct Warp {
  const int64_t* out_hw_flip;
  int interpolation;
};

// Where an image goes in `out`: its planes plane_step bytes apart, its rows row_step apart.
struct Layout {
  int64_t plane_step;
  int64_t row_step;
};

// Decodes one image (`size` encoded bytes at `data`) into `out` at `dst` as [C, H, W]; throws when it is not `shape` (C, H, W).
// With a warp, writes it resized and flipped instead, [C, out_height, out_width]. `layout` says
// how far apart its planes and rows lie (packed, or a slot of a padded batch).
void decode_one_planar(const uint8_t* data, int64_t size, int64_t flags, int64_t scale_denom,
                       int64_t max_pixels, const int64_t* shape, const Warp* warp,
                       const Layout& layout, uint8_t* dst);

// Checks the arguments of one image and returns where its planes and rows go: `shape` (C, H, W
// as decoded), `warp` (out_height, out_width, flip; null: none) with `interpolation`, `slot_hw`
// (the slot of a padded batch it is written into, height and width; null: packed), and that it
// fits in an output of `out_bytes` at `offset`. Errors start with `op` and name `image`. Why
// here: decode_images_into and DecodeQueue write the same way and refuse the same arguments.
Layout place_image(const char* op, const std::string& image, const int64_t* shape,
                   const int64_t* warp, int64_t interpolation, const int64_t* slot_hw,
                   int64_t offset, int64_t out_bytes);

// An exception's message without a c10 backtrace.
std::string error_text(const std::exception& err);

}  // namespace mmdet_ext
