/*
 * kernels_avx2.c - assembles the AVX2+FMA kernel set (x86-64): attention over F16/F32 KV rows
 * (here: SIMD row helpers in the reference's order, run by attend.c's blocked attention), the
 * legacy and float formats (kernels_avx2_legacy.c), the K formats (kernels_avx2_k.c) and the panel
 * kernels of repacked matrices (kernels_avx2_p16.c). Two sets come from here: "avx2" (vpmaddubsw /
 * vpmaddwd integer products) and "avx2vnni" (256-bit vpdpbusd, on CPUs with AVX-VNNI); both give the
 * same bits. The AVX-512 set starts from the best of them.
 */
#include "tensor/kernels.h"

#include <math.h>

bool kn__avx2_legacy_vnni(kn_kernels *k, bool use_vnni); /* kernels_avx2_legacy.c */

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* dot of n F16 values with n floats, in the reference's order (attend.c): two 8-wide FMA chains
 * holding lanes index % 16, reduced as kn_reduce16, then the tail one product at a time. */
static float kv_dot_f16(const void *k, const float *q, int n) {
    const uint16_t *h = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))), _mm256_loadu_ps(q + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i + 8))), _mm256_loadu_ps(q + i + 8),
                             a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))), _mm256_loadu_ps(q + i), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += kn_fp16_to_fp32(h[i]) * q[i];
    return s;
}

static float kv_dot_f32(const void *k, const float *q, int n) {
    const float *f = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(f + i), _mm256_loadu_ps(q + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(f + i + 8), _mm256_loadu_ps(q + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(f + i), _mm256_loadu_ps(q + i), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += f[i] * q[i];
    return s;
}

static void kv_axpy_f16(float a, const void *v, float *y, int n) {
    const uint16_t *h = v;
    const __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, kn_fp16_to_fp32(h[i]), y[i]);
}

static void kv_axpy_f32(float a, const void *v, float *y, int n) {
    const float *f = v;
    const __m256 av = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(f + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, f[i], y[i]);
}

/* The blocked attention of attend.c over these row helpers (bit-identical to the reference): the
 * set's attention for head sizes kernels_avx2_attn.c does not specialize. */
void kn__avx2_attend_rows_f16(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                              float *out);
void kn__avx2_attend_rows_f32(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                              float *out);
void kn__avx2_attend_rows_f16(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                              float *out) {
    kn_attend_blocked(kv_dot_f16, kv_axpy_f16, r, n, q, nq, hd, scale, out);
}
void kn__avx2_attend_rows_f32(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                              float *out) {
    kn_attend_blocked(kv_dot_f32, kv_axpy_f32, r, n, q, nq, hd, scale, out);
}
#endif

void kn_kernels_init_avx2_vnni(kn_kernels *k, bool vnni) {
    vnni = vnni && kn_cpu_features()->avxvnni;
    k->name = vnni ? "avx2vnni" : "avx2";
#if defined(__x86_64__)
    kn_avx2_init_attn(k);
    k->glu = kn_glu_avx2;                   /* act.c */
    k->sumexp = kn_sumexp_avx2;             /* sumexp.c */
    k->logits_clean = kn_logits_clean_avx2; /* logit_scan.c */
    k->argmax = kn_argmax_avx2;
    k->above = kn_above_avx2;
#endif
    kn_avx2_init_legacy(k);
#if defined(__x86_64__)
    kn__avx2_legacy_vnni(k, vnni);
#endif
    kn_avx2_init_kquants(k);
    kn_avx2_init_lowbit(k);
    kn_avx2_init_p16(k, vnni);
}

void kn_kernels_init_avx2(kn_kernels *k) { kn_kernels_init_avx2_vnni(k, true); }
