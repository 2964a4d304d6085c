// CPU kernel of mmdet_ext::average_floor: floor((a + b) / 2) of two uint8 tensors of one shape,
// which is what mmdet's CachedMixUp makes of two 8-bit images, (0.5 * a + 0.5 * b) truncated to
// uint8 (both halves and their sum are exact in float32). numpy needs four passes and two
// temporaries for it ((a & b) + ((a ^ b) >> 1)); here one pass, 16 bytes at a time with SSE2:
// pavgb rounds up, (a + b + 1) >> 1, less the bit it added where a + b is odd, (a ^ b) & 1.
#include <torch/library.h>
#include <torch/types.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace mmdet_ext {
namespace {

at::Tensor average_floor_cpu(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu() && a.scalar_type() == at::kByte &&
              b.scalar_type() == at::kByte, "average_floor: expected two CPU uint8 tensors, got ",
              a.scalar_type(), " on ", a.device(), " and ", b.scalar_type(), " on ", b.device());
  TORCH_CHECK(a.sizes() == b.sizes(), "average_floor: the tensors' shapes differ: ", a.sizes(),
              " and ", b.sizes());
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  at::Tensor out = at::empty(a.sizes(), a.options());
  const uint8_t* p = x.const_data_ptr<uint8_t>();
  const uint8_t* q = y.const_data_ptr<uint8_t>();
  uint8_t* o = out.data_ptr<uint8_t>();
  const int64_t count = x.numel();
  int64_t i = 0;
#ifdef __SSE2__
  const __m128i one = _mm_set1_epi8(1);
  for (; i + 16 <= count; i += 16) {
    const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    const __m128i odd = _mm_and_si128(_mm_xor_si128(u, v), one);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm_sub_epi8(_mm_avg_epu8(u, v), odd));
  }
#endif
  for (; i < count; ++i) o[i] = static_cast<uint8_t>((p[i] + q[i]) >> 1);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mmdet_ext, CPU, m) {
  m.impl("average_floor", &average_floor_cpu);
}

}  // namespace mmdet_ext
