// Schemas of every tensor op in the mmdet_ext namespace. Kernels live one file per device and
// register themselves with TORCH_LIBRARY_IMPL, so adding a backend never touches this file.
#include <torch/library.h>

TORCH_LIBRARY(mmdet_ext, m) {
  // data: Tensor[N] uint8, the encoded file bytes (JPEG, PNG, BMP, ... whatever OpenCV reads).
  // flags: cv::ImreadModes (IMREAD_COLOR, IMREAD_GRAYSCALE, IMREAD_UNCHANGED, optionally
  // | IMREAD_IGNORE_ORIENTATION). scale_denom (1, 2, 4, 8): a JPEG is decoded at 1/scale_denom
  // of its size, as IMREAD_REDUCED_*_N; other formats ignore it. Returns Tensor[H, W, C] uint8,
  // channels in OpenCV order (BGR). Corrupt JPEG data is an error (csrc/io/jpeg_decoder.cpp).
  m.def("decode_image(Tensor data, int flags, int scale_denom=1) -> Tensor");
  // image Tensor[H, W, C] uint8 (C <= 4) resized to (out_height, out_width) with cv::resize
  // (interpolation: cv::InterpolationFlags, 0 nearest .. 4 lanczos), then flipped (0 none,
  // 1 horizontal, 2 vertical, 3 diagonal), returned channel-planar: Tensor[C, out_h, out_w].
  // Equals mmcv.imflip(mmcv.imresize(...)).transpose(2, 0, 1).
  m.def("warp_image(Tensor image, int out_height, int out_width, int interpolation, int flip) "
        "-> Tensor");
  // images Tensor[B, C, H, W] uint8 (padded batch), mean/std Tensor[C] (output channel order),
  // image_sizes Tensor[B, 2] int64 (each image's height, width before padding). Returns
  // Tensor[B, C, H, W] float32: channels reversed if asked, (x - mean) / std inside each image,
  // pad_value outside. Equals mmdet's DetDataPreprocessor on the unpadded images.
  m.def("normalize_batch(Tensor images, Tensor mean, Tensor std, bool reverse_channels, "
        "Tensor image_sizes, float pad_value) -> Tensor");

  // Instance masks (csrc/masks/), bit-exact with pycocotools. An RLE is COCO's: run lengths of
  // the mask read column by column, zeros first; `counts` Tensor[K] int32 or int64, returned as
  // int32. Batched ops pack N RLEs back to back: counts [sum K_i] + run_counts [N] (the K_i).
  // Polygons: coords float64 [2 * points] (x0, y0, x1, y1, ... in px), part_lengths [P] (number
  // of coordinates of each part), part_counts [N] (number of parts of each instance).
  // Masks come back as Tensor[..., H, W] uint8 in {0, 1}, row-major.
  m.def("rle_encode(Tensor mask) -> Tensor");
  m.def("rle_decode(Tensor counts, int height, int width) -> Tensor");
  m.def("rle_decode_batch(Tensor counts, Tensor run_counts, int height, int width) -> Tensor");
  // The compressed COCO string (ASCII 48-111) as Tensor[L] uint8.
  m.def("rle_to_string(Tensor counts) -> Tensor");
  m.def("rle_from_string(Tensor data, int height, int width) -> Tensor");
  m.def("rle_merge(Tensor counts, Tensor run_counts, int height, int width, bool intersect=False) "
        "-> Tensor");
  // Tensor[] int64, the number of foreground pixels.
  m.def("rle_area(Tensor counts) -> Tensor");
  // Tensor[4] float64, (x, y, w, h) as pycocotools' toBbox.
  m.def("rle_to_bbox(Tensor counts, int height, int width) -> Tensor");
  // boxes Tensor[N, 4] float32/float64 (x1, y1, x2, y2 in px), inds Tensor[N]: box i crops mask
  // inds[i]. Returns Tensor[N, out_height, out_width] uint8, as mmdet's BitmapMasks /
  // PolygonMasks.crop_and_resize(boxes, (out_height, out_width), inds).to_ndarray().
  m.def("rle_crop_and_resize(Tensor counts, Tensor run_counts, int height, int width, "
        "Tensor boxes, Tensor inds, int out_height, int out_width) -> Tensor");
  // frPyObjects(parts, height, width) + merge: the union of the parts of one instance.
  m.def("rle_from_polygons(Tensor coords, Tensor part_lengths, int height, int width) -> Tensor");
  m.def("polygons_to_masks(Tensor coords, Tensor part_lengths, Tensor part_counts, int height, "
        "int width) -> Tensor");
  m.def("polygons_crop_and_resize(Tensor coords, Tensor part_lengths, Tensor part_counts, "
        "Tensor boxes, Tensor inds, int out_height, int out_width) -> Tensor");
}
