// Schemas of every tensor op in the mmdet_ext namespace. Kernels live in each subject's cpu/ and
// cuda/ folders and register themselves with TORCH_LIBRARY_IMPL, so the dispatcher picks the
// kernel of the tensors' device and adding a backend never touches this file.
//
// Each op's contract (shapes, dtypes, units, the reference it is bit-exact with) is written once,
// in the docstring of its typed Python wrapper, named beside each schema below.
#include <torch/library.h>

TORCH_LIBRARY(mmdet_ext, m) {
  // mmdet_ext/ops/image.py: decode_image. max_pixels None: kDefaultMaxPixels (io/image_decoder.h).
  m.def("decode_image(Tensor data, int flags, int scale_denom=1, int? max_pixels=None, "
        "bool planar=False) -> Tensor");
  // mmdet_ext/ops/image.py: decode_images_into, a batch decoded channel-planar into one buffer
  // (warps: out_height, out_width, flip per image, to resize and flip them as warp_image does;
  // slot_hw: each image into the top left of a [C, H, W] slot of a padded batch instead).
  m.def("decode_images_into(Tensor[] data, int flags, int[] scale_denoms, int? max_pixels, "
        "Tensor(a!) out, int[] offsets, int[] shapes, int num_threads=1, int[]? warps=None, "
        "int interpolation=1, int[]? slot_hw=None) -> ()");
  // mmdet_ext/ops/gpu_decode.py: decode_jpegs_into, the JPEGs nvJPEG may take decoded on the GPU
  // into out (CUDA only); returns which it decoded.
  m.def("decode_jpegs_into(Tensor[] data, Tensor(a!) out, int[] offsets, int[] shapes) -> Tensor");

  // mmdet_ext/ops/pixels.py: warp_image, resize_part, average_floor, hsv_shift,
  // normalize_batch, resize_normalize_batch.
  m.def("warp_image(Tensor image, int out_height, int out_width, int interpolation, int flip, "
        "int[]? keep=None) -> Tensor");
  m.def("resize_part(Tensor image, int out_height, int out_width, int[] keep, int[] source=[]) "
        "-> Tensor");
  m.def("average_floor(Tensor a, Tensor b) -> Tensor");
  m.def("hsv_shift(Tensor hsv, int[] gains) -> Tensor");
  m.def("normalize_batch(Tensor images, Tensor mean, Tensor std, bool reverse_channels, "
        "Tensor image_sizes, float pad_value) -> Tensor");
  m.def("resize_normalize_batch(Tensor data, Tensor image_shapes, Tensor out_shapes, "
        "Tensor flips, int interpolation, Tensor mean, Tensor std, bool reverse_channels, "
        "int batch_height, int batch_width, float pad_value, ScalarType? dtype=None) -> Tensor");

  // mmdet_ext/ops/masks.py: COCO RLE and polygon ops (its module docstring: the packed forms).
  m.def("rle_encode(Tensor mask) -> Tensor");
  m.def("rle_encode_batch(Tensor masks) -> (Tensor counts, Tensor run_counts)");
  m.def("rle_decode(Tensor counts, int height, int width) -> Tensor");
  m.def("rle_decode_batch(Tensor counts, Tensor run_counts, int height, int width) -> Tensor");
  m.def("rle_decode_batch_into(Tensor counts, Tensor run_counts, Tensor(a!) out) -> ()");
  m.def("rle_to_string(Tensor counts) -> Tensor");
  m.def("rle_from_string(Tensor data, int height, int width) -> Tensor");
  m.def("rle_merge(Tensor counts, Tensor run_counts, int height, int width, bool intersect=False) "
        "-> Tensor");
  m.def("rle_area(Tensor counts) -> Tensor");
  m.def("rle_to_bbox(Tensor counts, int height, int width) -> Tensor");
  m.def("rle_crop_and_resize(Tensor counts, Tensor run_counts, int height, int width, "
        "Tensor boxes, Tensor inds, int out_height, int out_width) -> Tensor");
  m.def("rle_from_polygons(Tensor coords, Tensor part_lengths, int height, int width) -> Tensor");
  m.def("polygons_to_masks(Tensor coords, Tensor part_lengths, Tensor part_counts, int height, "
        "int width) -> Tensor");
  m.def("polygons_to_masks_into(Tensor coords, Tensor part_lengths, Tensor part_counts, "
        "Tensor(a!) out) -> ()");
  m.def("polygons_crop_and_resize(Tensor coords, Tensor part_lengths, Tensor part_counts, "
        "Tensor boxes, Tensor inds, int out_height, int out_width) -> Tensor");
  // Predicted masks (FCNMaskHead at test time) pasted into the image and thresholded, as RLEs.
  m.def("paste_masks_to_rle(Tensor masks, Tensor boxes, int height, int width, float threshold, "
        "bool skip_empty=True) -> (Tensor counts, Tensor run_counts)");
}
