/*
 * act.c - the gated activations of a feed-forward block, gate[i] = act(gate[i]) * up[i] (kn_glu_fn,
 * kernels.h): SiLU, and GELU in its tanh form. The scalar reference and each SIMD set's version,
 * which compute the same bits. The exponential is kn_expf_ref's (expf_simd.h on lanes); every other
 * step is one IEEE operation, in this order:
 *   SiLU: e = exp(-g); s = 1 / (1 + e); out = (g * s) * up
 *   GELU: v = c * (g + ((0.044715 * g) * g) * g), c = sqrt(2 / pi); e = exp(2 * v);
 *         out = ((0.5 * g) * (2 - 2 / (e + 1))) * up
 * (0.5 g (1 + tanh v) with tanh v = 1 - 2 / (e^2v + 1): one exponential, no tanhf). A vector loop
 * leaves the last n % width elements to the reference, which gives them the same bits.
 */
#include "tensor/expf_simd.h"
#include "tensor/kernels.h"

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */

void kn_glu_ref(float *gate, const float *up, int64_t n, bool gelu) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        if (gelu) {
            const float e = kn_expf_ref(2.0f * (GELU_C * (g + 0.044715f * g * g * g)));
            gate[i] = 0.5f * g * (2.0f - 2.0f / (e + 1.0f)) * up[i];
        } else {
            gate[i] = g * (1.0f / (1.0f + kn_expf_ref(-g))) * up[i];
        }
    }
}

#if defined(__x86_64__)
#define AVX2_ATTR   __attribute__((target("avx2,fma")))
#define AVX512_ATTR __attribute__((target("avx512f")))
#define AI2         static inline __attribute__((always_inline, target("avx2,fma")))
#define AI512       static inline __attribute__((always_inline, target("avx512f")))

AI2 __m256 silu8(__m256 g) {
    const __m256 e = kn_expf8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f))) /* -g */;
    return _mm256_mul_ps(g, _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
}
AI2 __m256 gelu8(__m256 g) {
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), g), g);
    const __m256 v = _mm256_mul_ps(_mm256_set1_ps(GELU_C), _mm256_add_ps(g, cube));
    const __m256 e = kn_expf8(_mm256_mul_ps(_mm256_set1_ps(2.0f), v));
    const __m256 t = _mm256_sub_ps(_mm256_set1_ps(2.0f),
                                   _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), t);
}

AVX2_ATTR void kn_glu_avx2(float *gate, const float *up, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(gelu ? gelu8(g) : silu8(g), _mm256_loadu_ps(up + i)));
    }
    kn_glu_ref(gate + i, up + i, n - i, gelu);
}

AI512 __m512 silu16(__m512 g) {
    const __m512 e =
        kn_expf16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN))));
    return _mm512_mul_ps(g, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
}
AI512 __m512 gelu16(__m512 g) {
    const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), g), g), g);
    const __m512 v = _mm512_mul_ps(_mm512_set1_ps(GELU_C), _mm512_add_ps(g, cube));
    const __m512 e = kn_expf16(_mm512_mul_ps(_mm512_set1_ps(2.0f), v));
    const __m512 t = _mm512_sub_ps(_mm512_set1_ps(2.0f),
                                   _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), g), t);
}

AVX512_ATTR void kn_glu_avx512(float *gate, const float *up, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(gelu ? gelu16(g) : silu16(g), _mm512_loadu_ps(up + i)));
    }
    kn_glu_ref(gate + i, up + i, n - i, gelu);
}

#elif defined(__aarch64__)
static inline float32x4_t silu4(float32x4_t g) {
    const float32x4_t e = kn_expf4(vnegq_f32(g));
    return vmulq_f32(g, vdivq_f32(vdupq_n_f32(1.0f), vaddq_f32(vdupq_n_f32(1.0f), e)));
}
static inline float32x4_t gelu4(float32x4_t g) {
    const float32x4_t cube = vmulq_f32(vmulq_f32(vmulq_f32(vdupq_n_f32(0.044715f), g), g), g);
    const float32x4_t v = vmulq_f32(vdupq_n_f32(GELU_C), vaddq_f32(g, cube));
    const float32x4_t e = kn_expf4(vmulq_f32(vdupq_n_f32(2.0f), v));
    const float32x4_t t = vsubq_f32(vdupq_n_f32(2.0f), vdivq_f32(vdupq_n_f32(2.0f), vaddq_f32(e, vdupq_n_f32(1.0f))));
    return vmulq_f32(vmulq_f32(vdupq_n_f32(0.5f), g), t);
}

void kn_glu_neon(float *gate, const float *up, int64_t n, bool gelu) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t g = vld1q_f32(gate + i);
        vst1q_f32(gate + i, vmulq_f32(gelu ? gelu4(g) : silu4(g), vld1q_f32(up + i)));
    }
    kn_glu_ref(gate + i, up + i, n - i, gelu);
}
#endif
