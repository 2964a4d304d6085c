// CPU kernel of mmdet_ext::decode_image: OpenCV's imdecode into a tensor that owns the cv::Mat,
// so the pixels are never copied after decoding.
#include <algorithm>
#include <memory>

#include <opencv2/imgcodecs.hpp>
#include <torch/library.h>
#include <torch/types.h>

namespace mmdet_ext {
namespace {

// libjpeg fills the missing rows of a truncated JPEG with gray and only warns, so OpenCV returns a
// plausible-looking image: silent wrong data. A complete JPEG ends with the EOI marker (FF D9),
// which never occurs inside entropy-coded data (0xFF is stuffed as FF 00), so look for it near
// the end (some writers append a few padding bytes).
bool is_truncated_jpeg(const uint8_t* data, int64_t size) {
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return false;  // not a JPEG
  const int64_t tail_start = std::max<int64_t>(2, size - 1024);
  for (int64_t i = size - 2; i >= tail_start; --i) {
    if (data[i] == 0xFF && data[i + 1] == 0xD9) return false;
  }
  return true;
}

bool is_supported_flag(int64_t flags) {
  if (flags == cv::IMREAD_UNCHANGED) return true;  // -1: every bit set, so test it before masking
  const int64_t base = flags & ~static_cast<int64_t>(cv::IMREAD_IGNORE_ORIENTATION);
  return base == cv::IMREAD_COLOR || base == cv::IMREAD_GRAYSCALE;
}

at::Tensor decode_image_cpu(const at::Tensor& data, int64_t flags) {
  TORCH_CHECK(data.device().is_cpu(), "decode_image: expected the encoded bytes on the CPU, got ",
              data.device());
  TORCH_CHECK(data.scalar_type() == at::kByte && data.dim() == 1,
              "decode_image: expected a 1-D uint8 tensor of encoded bytes, got ",
              data.scalar_type(), " with shape ", data.sizes());
  TORCH_CHECK(data.numel() > 0, "decode_image: the buffer is empty (zero-byte file?)");
  TORCH_CHECK(is_supported_flag(flags), "decode_image: unsupported imread flags ", flags,
              "; expected IMREAD_COLOR, IMREAD_GRAYSCALE or IMREAD_UNCHANGED, optionally with "
              "IMREAD_IGNORE_ORIENTATION");

  const at::Tensor bytes = data.contiguous();
  TORCH_CHECK(!is_truncated_jpeg(bytes.data_ptr<uint8_t>(), bytes.numel()),
              "decode_image: truncated JPEG (", bytes.numel(),
              " bytes, no end-of-image marker): the file was cut short");
  const cv::Mat encoded(1, static_cast<int>(bytes.numel()), CV_8UC1, bytes.data_ptr<uint8_t>());
  auto decoded = std::make_shared<cv::Mat>(cv::imdecode(encoded, static_cast<int>(flags)));
  TORCH_CHECK(!decoded->empty(), "decode_image: OpenCV could not decode the ", bytes.numel(),
              "-byte buffer (unknown format, truncated or corrupt data)");
  TORCH_CHECK(decoded->depth() == CV_8U, "decode_image: only 8-bit images are supported, the "
              "buffer decodes to OpenCV depth ", decoded->depth(), " (16-bit PNG/TIFF?)");
  if (!decoded->isContinuous()) {
    *decoded = decoded->clone();
  }

  const int64_t height = decoded->rows;
  const int64_t width = decoded->cols;
  const int64_t channels = decoded->channels();
  // The deleter keeps the Mat (and its pixel buffer) alive exactly as long as the tensor.
  return torch::from_blob(
      decoded->data, {height, width, channels}, [decoded](void*) mutable { decoded.reset(); },
      torch::TensorOptions().dtype(torch::kUInt8));
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("decode_image", &decode_image_cpu);
}

}  // namespace mmdet_ext
