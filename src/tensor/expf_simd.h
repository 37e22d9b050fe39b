/*
 * expf_simd.h - kn_expf_ref (kernels.h) on vector lanes, the same float steps lane by lane, for the
 * kernels that exponentiate (attention's softmax, the gated activations): 8 lanes with AVX2 + FMA,
 * 16 with AVX-512F, 4 with ARM64 NEON. Each function carries its own target attribute, so a file
 * may include this header whatever its own target pragma; call them only where the CPU has the set.
 *
 * The steps: 0 below KN_EXPF_MIN (and for NaN), x clamped to KN_EXPF_MAX, n = round-to-even(x /
 * ln 2), r = x - n ln 2 in two fused steps, a degree-6 polynomial by fused steps, times 2^n built in
 * the exponent bits. Only fused or plain IEEE operations touch a float, so every lane is the scalar
 * function's value bit for bit.
 */
#ifndef KN_EXPF_SIMD_H
#define KN_EXPF_SIMD_H

#include "tensor/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* kn_expf_ref on 8 lanes (AVX2 + FMA). */
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 kn_expf8(__m256 x) {
    const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(KN_EXPF_MIN), _CMP_GE_OQ); /* false for NaN */
    x = _mm256_min_ps(x, _mm256_set1_ps(KN_EXPF_MAX));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(ok, _mm256_mul_ps(y, _mm256_castsi256_ps(bits)));
}

/* kn_expf_ref on 16 lanes (AVX-512F). */
static inline __attribute__((always_inline, target("avx512f"))) __m512 kn_expf16(__m512 x) {
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(KN_EXPF_MIN), _CMP_GE_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(KN_EXPF_MAX));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(ok, y, _mm512_castsi512_ps(bits));
}

#elif defined(__aarch64__)
#include <arm_neon.h>

/* kn_expf_ref on 4 lanes (NEON): vrndnq is round-to-nearest-even, vfmaq one fused step. */
static inline __attribute__((always_inline)) float32x4_t kn_expf4(float32x4_t x) {
    const uint32x4_t ok = vcgeq_f32(x, vdupq_n_f32(KN_EXPF_MIN)); /* false for NaN */
    x = vminq_f32(x, vdupq_n_f32(KN_EXPF_MAX));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmaq_f32(x, n, vdupq_n_f32(-0.693359375f));
    r = vfmaq_f32(r, n, vdupq_n_f32(2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    const float32x4_t y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
    const int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t v = vmulq_f32(y, vreinterpretq_f32_s32(bits));
    return vreinterpretq_f32_u32(vandq_u32(ok, vreinterpretq_u32_f32(v)));
}
#endif

#endif
