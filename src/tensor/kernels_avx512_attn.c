/*
 * kernels_avx512_attn.c - AVX-512 attention kernel (kn_attend_fn): the blocked online softmax of
 * attend.c, 16 positions per block, bit-identical to the reference.
 *
 * A block's 16 scores come from 16 dot products kept as 16-lane fma accumulators (lane = element
 * index % 16, as the reference row dot of attend.c) and reduced all at once by a transposing tree whose every
 * addition is one of kn_reduce16's (upper 8 lanes onto the lower 8, then 4, 2, 1); the exponentials
 * of the block are one vector evaluation of kn_expf_ref's steps; V rows are accumulated in position
 * order with fused multiply-adds. Head sizes that are not a multiple of 16 (or above 256) use the
 * reference kernel.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#include <immintrin.h>
#include <math.h>

#define AI static inline __attribute__((always_inline))
#define MAX_HD 256

/* kn_expf_ref on 16 lanes, the same float steps. */
AI __m512 expf16(__m512 x) {
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

/* Lane p of the result = kn_reduce16 of a[p], for 16 accumulators. The tree leaves position
 * k + 4j in lane 4k + j; the final permutation puts position p in lane p. */
AI __m512 reduce16x16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) /* lanes i + 8 onto i: [r1 of a[2i] | r1 of a[2i+1]] */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++) /* lanes i + 4 onto i: quarter q = position 4i + q */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++) /* lanes i + 2 onto i */
        d[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[2 * i]), _mm512_castps_pd(c[2 * i + 1]))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[2 * i]), _mm512_castps_pd(c[2 * i + 1]))));
    /* lane 1 onto lane 0 */
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, e);
}

/* 16 elements of a K or V row as fp32. */
AI __m512 ld_f16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
AI __m512 ld_f32(const uint8_t *p) { return _mm512_loadu_ps((const float *)p); }

#define DEFINE_ATTEND(NAME, LD, ES, REF)                                                            \
    static void NAME(const uint8_t *k, const uint8_t *v, size_t stride, int32_t n, const float *q, int hd, \
                     float scale, float *out) {                                                     \
        if (hd % 16 != 0 || hd > MAX_HD) {                                                          \
            REF(k, v, stride, n, q, hd, scale, out);                                                \
            return;                                                                                 \
        }                                                                                           \
        const int nc = hd / 16;                                                                     \
        __m512 Q[MAX_HD / 16], O[MAX_HD / 16];                                                      \
        for (int c = 0; c < nc; c++) {                                                              \
            Q[c] = _mm512_loadu_ps(q + 16 * c);                                                     \
            O[c] = _mm512_setzero_ps();                                                             \
        }                                                                                           \
        float m = -INFINITY;                                                                        \
        __m512 lsum = _mm512_setzero_ps();                                                          \
        for (int32_t p0 = 0; p0 < n; p0 += 16) {                                                    \
            const int cnt = n - p0 < 16 ? (int)(n - p0) : 16;                                       \
            const __mmask16 valid = (__mmask16)((1u << cnt) - 1);                                   \
            __m512 acc[16];                                                                         \
            for (int j = 0; j < 16; j++) {                                                          \
                acc[j] = _mm512_setzero_ps();                                                       \
                if (j < cnt) {                                                                      \
                    const uint8_t *kr = k + (size_t)(p0 + j) * stride;                              \
                    for (int c = 0; c < nc; c++) acc[j] = _mm512_fmadd_ps(LD(kr + 16 * (ES) * c), Q[c], acc[j]); \
                }                                                                                   \
            }                                                                                       \
            __m512 sv = _mm512_mul_ps(reduce16x16(acc), _mm512_set1_ps(scale));                     \
            sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid, sv);                          \
            const float bm = _mm512_reduce_max_ps(sv);                                              \
            if (bm > m) {                                                                           \
                const __m512 cv = expf16(_mm512_set1_ps(m - bm));                                   \
                lsum = _mm512_mul_ps(lsum, cv);                                                     \
                for (int c = 0; c < nc; c++) O[c] = _mm512_mul_ps(O[c], cv);                        \
                m = bm;                                                                             \
            }                                                                                       \
            const __m512 w = expf16(_mm512_sub_ps(sv, _mm512_set1_ps(m)));                          \
            lsum = _mm512_add_ps(lsum, w);                                                          \
            float wj[16];                                                                           \
            _mm512_storeu_ps(wj, w);                                                                \
            for (int j = 0; j < cnt; j++) {                                                         \
                const uint8_t *vr = v + (size_t)(p0 + j) * stride;                                  \
                const __m512 a = _mm512_set1_ps(wj[j]);                                             \
                for (int c = 0; c < nc; c++) O[c] = _mm512_fmadd_ps(a, LD(vr + 16 * (ES) * c), O[c]); \
            }                                                                                       \
        }                                                                                           \
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(lsum));                       \
        for (int c = 0; c < nc; c++) _mm512_storeu_ps(out + 16 * c, _mm512_mul_ps(O[c], inv));      \
    }

DEFINE_ATTEND(attend_f16, ld_f16, 2, kn_attend_f16_ref)
DEFINE_ATTEND(attend_f32, ld_f32, 4, kn_attend_f32_ref)

/* Fills the attention kernels of k (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI. */
void kn_avx512_init_attn(kn_kernels *k) {
    k->attend_f16 = attend_f16;
    k->attend_f32 = attend_f32;
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_attn(kn_kernels *k) { (void)k; }
#endif
