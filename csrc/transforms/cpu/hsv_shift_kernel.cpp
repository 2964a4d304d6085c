// CPU kernel of mmdet_ext::hsv_shift: mmdet's YOLOXHSVRandomAug between its two cvtColors, the
// 8-bit HSV image's hue moved round the circle, (h + gh) mod 180 (numpy's floor modulo of the
// int16 sum), and its saturation and value moved and clipped to 0..255. mmdet casts the image to
// int16 and makes three more images for it; cv2.LUT with a three-channel table does it in one
// pass but slowly (0.5 ms at 640x640). Here one pass, 48 bytes (16 pixels) at a time with SSE2,
// in bytes, the same operations for every lane with its channel's constants: saturation and
// value are the saturating sum with the positive part of their gain less the negative part
// (both 0 in hue lanes); a hue h, its gain g taken mod 180 first (0..179), becomes h + g, less
// 180 where h >= 180 - g (in bytes mod 256: the result is in 0..254), and, for the hues of
// 180..255 cvtColor never makes, less 180 once more where that is still >= 180 (the 180s are 0
// in the other lanes). Gains are the int16 draws mmdet makes; the Python side keeps them in
// -255..255.
#include <torch/library.h>
#include <torch/types.h>

#include <algorithm>

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
// a >= b, bytes as unsigned.
inline __m128i at_least(__m128i a, __m128i b) { return _mm_cmpeq_epi8(_mm_max_epu8(a, b), a); }

// The constants of one 16-byte phase of a 48-byte block (its lanes' channels).
struct Phase {
  __m128i up;     // saturation/value lanes: the positive part of the gain; else 0
  __m128i down;   // saturation/value lanes: the negative part of the gain; else 0
  __m128i add;    // hue lanes: g; else 0
  __m128i wrap;   // hue lanes: 180 - g; else 0 (never used: `turn` is 0 there)
  __m128i turn;   // hue lanes: 180; else 0
};

inline __m128i shift_phase(__m128i x, const Phase& c) {
  const __m128i y = _mm_subs_epu8(_mm_adds_epu8(x, c.up), c.down);
  const __m128i h =
      _mm_sub_epi8(_mm_add_epi8(y, c.add), _mm_and_si128(at_least(y, c.wrap), c.turn));
  return _mm_sub_epi8(h, _mm_and_si128(at_least(h, c.turn), c.turn));
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
  Phase phases[3];
  for (int r = 0; r < 3; ++r) {
    alignas(16) uint8_t up[16], down[16], add[16], wrap[16], turn[16];
    for (int k = 0; k < 16; ++k) {
      const int channel = (16 * r + k) % 3;
      const int gain = shift[channel];
      up[k] = static_cast<uint8_t>(channel == 0 ? 0 : std::max(gain, 0));
      down[k] = static_cast<uint8_t>(channel == 0 ? 0 : std::max(-gain, 0));
      add[k] = static_cast<uint8_t>(channel == 0 ? gain : 0);
      wrap[k] = static_cast<uint8_t>(channel == 0 ? 180 - gain : 0);
      turn[k] = static_cast<uint8_t>(channel == 0 ? 180 : 0);
    }
    const auto load = [](const uint8_t* v) {
      return _mm_load_si128(reinterpret_cast<const __m128i*>(v));
    };
    phases[r] = Phase{load(up), load(down), load(add), load(wrap), load(turn)};
  }
  for (; i + 48 <= count; i += 48) {
    for (int r = 0; r < 3; ++r) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16 * r));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i + 16 * r),
                       shift_phase(x, phases[r]));
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
