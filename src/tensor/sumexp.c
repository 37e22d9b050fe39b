/*
 * sumexp.c - the normalizer of a softmax (kn_sumexp_fn, kernels.h): sum_i e_i over a logits row,
 * e_i = kn_expf_ref((x[i] - sub) * scale) (each stored when asked), the sum in double. Element i goes
 * to lane i % 16 (in index order within a lane) and the 16 lanes are then added from 0 to 15. Each
 * SIMD set keeps the lanes in registers (AVX2: 4 x 4 doubles, AVX-512: 2 x 8, NEON: 8 x 2) and hands
 * the last n % 16 elements and the lanes to the reference's steps, so every set returns the
 * reference's bits.
 */
#include "tensor/expf_simd.h"
#include "tensor/kernels.h"

#define LANES 16

/* Adds elements i.. n - 1 (i a multiple of LANES) to their lanes, then the lanes in order. */
static double finish(double acc[LANES], const float *x, int64_t i, int64_t n, float sub, float scale, float *e) {
    for (; i < n; i++) {
        const float v = kn_expf_ref((x[i] - sub) * scale);
        if (e) e[i] = v;
        acc[i % LANES] += (double)v;
    }
    double s = 0.0;
    for (int j = 0; j < LANES; j++) s += acc[j];
    return s;
}

double kn_sumexp_ref(const float *x, int64_t n, float sub, float scale, float *e) {
    double acc[LANES] = {0};
    return finish(acc, x, 0, n, sub, scale, e);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) double kn_sumexp_avx2(const float *x, int64_t n, float sub, float scale, float *e) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    const __m256 s = _mm256_set1_ps(sub), k = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        const __m256 e0 = kn_expf8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s), k));
        const __m256 e1 = kn_expf8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s), k));
        if (e) {
            _mm256_storeu_ps(e + i, e0);
            _mm256_storeu_ps(e + i + 8, e1);
        }
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
    }
    double acc[LANES];
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    _mm256_storeu_pd(acc + 8, a2);
    _mm256_storeu_pd(acc + 12, a3);
    return finish(acc, x, i, n, sub, scale, e);
}

__attribute__((target("avx512f"))) double kn_sumexp_avx512(const float *x, int64_t n, float sub, float scale,
                                                           float *e) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0;
    const __m512 s = _mm512_set1_ps(sub), k = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        const __m512 v = kn_expf16(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), s), k));
        if (e) _mm512_storeu_ps(e + i, v);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
    double acc[LANES];
    _mm512_storeu_pd(acc, a0);
    _mm512_storeu_pd(acc + 8, a1);
    return finish(acc, x, i, n, sub, scale, e);
}

#elif defined(__aarch64__)
double kn_sumexp_neon(const float *x, int64_t n, float sub, float scale, float *e) {
    float64x2_t a[LANES / 2];
    for (int j = 0; j < LANES / 2; j++) a[j] = vdupq_n_f64(0.0);
    const float32x4_t s = vdupq_n_f32(sub), k = vdupq_n_f32(scale);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int q = 0; q < 4; q++) {
            const float32x4_t v = kn_expf4(vmulq_f32(vsubq_f32(vld1q_f32(x + i + 4 * q), s), k));
            if (e) vst1q_f32(e + i + 4 * q, v);
            a[2 * q] = vaddq_f64(a[2 * q], vcvt_f64_f32(vget_low_f32(v)));
            a[2 * q + 1] = vaddq_f64(a[2 * q + 1], vcvt_high_f64_f32(v));
        }
    double acc[LANES];
    for (int j = 0; j < LANES / 2; j++) vst1q_f64(acc + 2 * j, a[j]);
    return finish(acc, x, i, n, sub, scale, e);
}
#endif
