// CPU kernel of mmdet_ext::hsv_shift: mmdet's YOLOXHSVRandomAug between its two cvtColors, the
// 8-bit HSV image's hue moved round the circle, (h + gh) mod 180 (numpy's floor modulo of the
// int16 sum), and its saturation and value moved and clipped to 0..255. mmdet casts the image to
// int16 and makes three more images for it; cv2.LUT with a three-channel table does it in one
// pass but slowly (0.5 ms at 640x640). Here one pass, 48 bytes (16 pixels) at a time with SSE2:
// each byte widened to 16 bits with its channel's gain added (the hue's taken mod 180 first),
// the hue lanes brought back under 180 by at most two subtractions (a hue byte is < 256 and its
// gain < 180), and the 16-bit lanes packed back with unsigned saturation, which is the clip of
// the other two. Gains are the int16 draws mmdet makes; the Python side keeps them in -255..255.
#include <torch/library.h>
#include <torch/types.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace mmdet_ext {
namespace {

inline int hue_gain(int64_t gain) { return static_cast<int>(((gain % 180) + 180) % 180); }

inline uint8_t shifted(uint8_t value, int channel, const int gains[3]) {
  const int moved = value + gains[channel];
  if (channel == 0) return static_cast<uint8_t>(moved % 180);  // moved >= 0: gains[0] >= 0
  return static_cast<uint8_t>(moved < 0 ? 0 : (moved > 255 ? 255 : moved));
}

#ifdef __SSE2__
// 8 bytes starting at channel `first` (of 0, 1, 2) widened with the gains added and the hues
// brought under 180; `gain`, `hue_180`, `hue_179` are the lanes' constants for that phase.
inline __m128i shift_lanes(__m128i wide, __m128i gain, __m128i hue_180, __m128i hue_179) {
  __m128i v = _mm_add_epi16(wide, gain);
  v = _mm_sub_epi16(v, _mm_and_si128(_mm_cmpgt_epi16(v, hue_179), hue_180));
  return _mm_sub_epi16(v, _mm_and_si128(_mm_cmpgt_epi16(v, hue_179), hue_180));
}
#endif

at::Tensor hsv_shift_cpu(const at::Tensor& hsv, at::IntArrayRef gains) {
  TORCH_CHECK(hsv.device().is_cpu() && hsv.scalar_type() == at::kByte && hsv.dim() >= 1 &&
              hsv.size(-1) == 3, "hsv_shift: expected a CPU uint8 tensor of 3 channels [..., 3], "
              "got ", hsv.scalar_type(), " of shape ", hsv.sizes(), " on ", hsv.device());
  TORCH_CHECK(gains.size() == 3, "hsv_shift: expected 3 gains (hue, saturation, value), got ",
              gains.size());
  for (const int64_t gain : gains) {
    TORCH_CHECK(gain >= -255 && gain <= 255, "hsv_shift: each gain must be in -255..255, got ",
                gains);
  }
  const int shift[3] = {hue_gain(gains[0]), static_cast<int>(gains[1]),
                        static_cast<int>(gains[2])};
  const at::Tensor src = hsv.contiguous();
  at::Tensor out = at::empty(hsv.sizes(), hsv.options());
  const uint8_t* p = src.const_data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  const int64_t count = src.numel();
  int64_t i = 0;
#ifdef __SSE2__
  // Lane constants for the 6 phases of 8 lanes in a 48-byte block: lane k of phase j is byte
  // 8 * j + k, channel (8 * j + k) % 3.
  __m128i gain[6], hue_180[6], hue_179[6];
  for (int j = 0; j < 6; ++j) {
    alignas(16) int16_t g[8], h180[8], h179[8];
    for (int k = 0; k < 8; ++k) {
      const int channel = (8 * j + k) % 3;
      g[k] = static_cast<int16_t>(shift[channel]);
      h180[k] = channel == 0 ? 180 : 0;
      h179[k] = channel == 0 ? 179 : 32767;  // never exceeded: no subtraction off the hue
    }
    gain[j] = _mm_load_si128(reinterpret_cast<const __m128i*>(g));
    hue_180[j] = _mm_load_si128(reinterpret_cast<const __m128i*>(h180));
    hue_179[j] = _mm_load_si128(reinterpret_cast<const __m128i*>(h179));
  }
  const __m128i zero = _mm_setzero_si128();
  for (; i + 48 <= count; i += 48) {
    for (int r = 0; r < 3; ++r) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16 * r));
      const __m128i low = shift_lanes(_mm_unpacklo_epi8(bytes, zero), gain[2 * r],
                                      hue_180[2 * r], hue_179[2 * r]);
      const __m128i high = shift_lanes(_mm_unpackhi_epi8(bytes, zero), gain[2 * r + 1],
                                       hue_180[2 * r + 1], hue_179[2 * r + 1]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i + 16 * r), _mm_packus_epi16(low, high));
    }
  }
#endif
  for (; i < count; ++i) o[i] = shifted(p[i], static_cast<int>(i % 3), shift);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("hsv_shift", &hsv_shift_cpu);
}

}  // namespace mmdet_ext
