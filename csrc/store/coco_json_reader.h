// Streaming reader of a COCO instances json into flat columns (mmdet_ext/datasets/native_coco.py
// turns them into an annotation store). Built only with rapidjson (header-only, Debian
// rapidjson-dev): its SAX Reader over a 64 KiB FileReadStream holds one buffer of the file at a
// time, so a multi-GB json is read in constant memory plus the columns themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

namespace mmdet_ext {
namespace store {

// The file is not a COCO json (not json, not UTF-8, not COCO's top-level layout). The message
// names the file and the byte offset or the key; Python raises it as AnnotationFileError.
class CocoJsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Called as progress(bytes_read, file_size) every few MB.
using ReadProgress = std::function<void(int64_t, int64_t)>;

// Reads `path` and returns named columns (1-D tensors, json order):
//   images: img_id, img_h, img_w (int64), img_name_len (int64), img_name_bytes (uint8),
//     img_start (int64 byte offset of the record), img_irregular (uint8);
//   annotations: ann_id, ann_image_id, ann_category_id (int64), ann_bbox (float64, 4 per
//     annotation), ann_area (float64), ann_iscrowd, ann_ignore, ann_kind (uint8: 0 no
//     segmentation, 1 polygons, 2 irregular), ann_nparts (int32), part_len (int32), coords
//     (float64), ann_start (int64, only with `record_starts`);
//   records Python must read itself (`{images,annotations,categories}_span`: int64 [start, end)
//     byte ranges, with their indices `*_span_index`): every category, and every image or
//     annotation that is "irregular": a field of an unexpected type, an RLE or mask_file
//     segmentation, anything the columns cannot hold exactly;
//   `top_keys` (uint8, NUL-separated top-level keys), `section_ends` (int64 [3], the byte offset
//     after each section's array, -1 where absent).
// Regular records hold exactly what Python's json module reads (numbers parsed with full
// precision, NaN/Infinity accepted as json.loads accepts them).
std::vector<std::pair<std::string, at::Tensor>> read_coco_json(const std::string& path,
                                                               bool record_starts,
                                                               const ReadProgress& progress);

}  // namespace store
}  // namespace mmdet_ext
