// Decoding one encoded image straight into a planar [C, H, W] place of a larger buffer, resized
// and flipped on the way when asked: the one per-image routine of every CPU batch decode, which
// DecodeQueue (decode_queue.h) runs, for the batched fetch and for decode_images_into alike.
// Needs OpenCV and libjpeg (setup.py compiles decode_one_planar.cpp only with both).
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace mmdet_ext {

// Resize and flip of one image: the size it is resized to, warp_planar.h's flip code, cv2's
// interpolation code, and the part of the resized image kept (y, x, height, width: a crop
// between the resize and the flip; the whole of it where there is none).
struct Warp {
  int64_t out_height;
  int64_t out_width;
  int64_t flip;
  int64_t interpolation;
  int64_t keep[4];
};

// Where an image goes in its buffer: its planes plane_step bytes apart, its rows row_step apart.
struct Layout {
  int64_t plane_step;
  int64_t row_step;
};

// One image to decode, checked (plan_decode): its encoded bytes, what it must decode to, the
// warp if any, and where it goes. Raw pointers, not tensors (see DecodeQueue): whoever made it
// keeps both buffers alive until it is decoded.
struct DecodeTask {
  int64_t tag;  // the caller's name for the image, returned with its error
  const uint8_t* data;
  int64_t data_size;
  uint8_t* dst;
  int64_t flags;
  int64_t scale_denom;
  int64_t max_pixels;
  int64_t shape[3];  // C, H, W as decoded
  bool warped;       // resized and flipped with `warp`
  Warp warp;
  Layout layout;  // packed, or a slot of a padded batch
};

// Checks the arguments of one image and returns its task: `shape` (C, H, W as decoded), `warp`
// (out_height, out_width, flip; null: none) with `interpolation` and `keep` (the part of the
// resized image written, y, x, height, width; null: all of it), `slot_hw` (the slot of a padded
// batch it is written into, height and width; null: packed), and that it fits in `out` (of
// `out_bytes`) at `offset`. Errors start with `op` and name the image by `tag`. The one check of
// every batch decode's arguments, made before anything is written.
DecodeTask plan_decode(const char* op, int64_t tag, const uint8_t* data, int64_t data_size,
                       uint8_t* out, int64_t out_bytes, int64_t offset, int64_t flags,
                       int64_t scale_denom, int64_t max_pixels, const int64_t* shape,
                       const int64_t* warp, const int64_t* keep, int64_t interpolation,
                       const int64_t* slot_hw);

// Decodes `task` into its place (with its warp, resized, the part kept and flipped, [C, height,
// width] of that part); returns "" or the error's text, without a c10 backtrace. Never throws.
std::string run_decode(const DecodeTask& task);

}  // namespace mmdet_ext
