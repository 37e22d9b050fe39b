/*
 * kernels_avx512_attn.c - AVX-512 attention kernel (kn_attend_fn): the blocked online softmax of
 * attend.c, 16 positions per block, bit-identical to the reference; the KV heads of a call
 * (kn_attend_rows.nkv) take each block in turn, so that one sweep reads a position's heads together.
 *
 * A block's 16 scores come from 16 dot products kept as 16-lane fma accumulators (lane = element
 * index % 16, as the reference row dot of attend.c) and reduced all at once by a transposing tree whose every
 * addition is one of kn_reduce16's (upper 8 lanes onto the lower 8, then 4, 2, 1); the exponentials
 * of the block are one vector evaluation of kn_expf_ref's steps; V rows are accumulated in position
 * order with fused multiply-adds. Head sizes that are not a multiple of 16 (or above 256) use the
 * reference kernel.
 *
 * Every KV format of kvq.h has a kernel here: the same algorithm over a loader that turns 16 elements
 * of a head vector into floats exactly as kn_kvq_elem does (BF16 shifted, Q8_0 / Q4_0 codes times
 * their block's fp16 scale, TQ4 / TQ3 centroids looked up by a permute and times the vector's scale),
 * so the quantized cache is read directly, without a dequantized copy of the cache: with several query
 * heads, a block's 16 K rows are converted once into floats in L1 (KF) and every head's K pass reads them
 * there (hot: F16 1.1-1.5x, TQ4 1.4-1.5x; the AVX2 kernel's F16 pass measured 13-16% slower that way, so
 * it converts per head). The quantized and BF16 formats are specialized for the common head sizes;
 * others take the reference kernel. Rows are found through kn_attend_rows (kernels.h): the 16 K and V
 * row addresses of each block of positions, so the blocks of a paged cache are read in place with the
 * same float steps.
 */
#include "tensor/expf_simd.h"
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#include <immintrin.h>
#include <math.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
/* KF (a block's K rows converted once for all the heads) is written for the positions j < cnt before
 * any head reads them; GCC does not follow the two guards to the same condition. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define AI     static inline __attribute__((always_inline))
#define MAX_HD 256
#define UNROLL _Pragma("GCC unroll 16")

/* Lane p of the result = kn_reduce16 of a[p], for 16 accumulators. The tree leaves position
 * k + 4j in lane 4k + j; the final permutation puts position p in lane p. */
AI __m512 reduce16x16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    UNROLL for (int i = 0; i < 8; i++) /* lanes i + 8 onto i: [r1 of a[2i] | r1 of a[2i+1]] */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    UNROLL for (int i = 0; i < 4; i++) /* lanes i + 4 onto i: quarter q = position 4i + q */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    UNROLL for (int i = 0; i < 2; i++) /* lanes i + 2 onto i */
        d[i] = _mm512_add_ps(
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c[2 * i]), _mm512_castps_pd(c[2 * i + 1]))),
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c[2 * i]), _mm512_castps_pd(c[2 * i + 1]))));
    /* lane 1 onto lane 0 */
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, e);
}

/* Elements i .. i + 15 (i a multiple of 16) of a K or V head vector p of NC * 16 elements, as fp32:
 * kn_kvq_elem's values (a quantized element is one float product, scale times code or centroid).
 * B = kn_kvq_block(NC * 16): 32 for an even NC, else 16. */
#define BLK(NC) ((NC) % 2 == 0 ? 32 : 16)
AI float ld_scale(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
AI __m512 ld_f16(const uint8_t *p, int i, const int NC) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
}
AI __m512 ld_f32(const uint8_t *p, int i, const int NC) { return _mm512_loadu_ps((const float *)p + i); }
AI __m512 ld_bf16(const uint8_t *p, int i, const int NC) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
AI __m512 ld_q8_0(const uint8_t *p, int i, const int NC) {
    const uint8_t *blk = p + (size_t)(i / BLK(NC)) * (2 + BLK(NC));
    const __m512 q =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2 + i % BLK(NC)))));
    return _mm512_mul_ps(_mm512_set1_ps(ld_scale(blk)), q);
}
AI __m512 ld_q4_0(const uint8_t *p, int i, const int NC) {
    const uint8_t *blk = p + (size_t)(i / BLK(NC)) * (2 + BLK(NC) / 2);
    __m128i b;
    if (BLK(NC) == 32) { /* 16 low (i % 32 == 0) or high nibbles of qs[0 .. 15] */
        b = _mm_loadu_si128((const __m128i *)(blk + 2));
        if (i % 32) b = _mm_srli_epi16(b, 4);
        b = _mm_and_si128(b, _mm_set1_epi8(15));
    } else { /* the whole block: low nibbles of qs[0 .. 7], then their high nibbles */
        const __m128i x = _mm_loadl_epi64((const __m128i *)(blk + 2));
        b = _mm_unpacklo_epi64(_mm_and_si128(x, _mm_set1_epi8(15)),
                               _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(15)));
    }
    const __m512i c = _mm512_sub_epi32(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_set1_ps(ld_scale(blk)), _mm512_cvtepi32_ps(c));
}
AI __m512 ld_tq4(const uint8_t *p, int i, const int NC) {
    const __m128i x = _mm_loadl_epi64((const __m128i *)(p + 2 + i / 2));
    const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(x, 4), _mm_set1_epi8(15));
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    return _mm512_mul_ps(_mm512_set1_ps(ld_scale(p)), _mm512_permutexvar_ps(idx, _mm512_loadu_ps(kn_tq4_centroids)));
}
AI __m512 ld_tq3(const uint8_t *p, int i, const int NC) {
    const uint8_t *g = p + 2 + 3 * (i / 8);
    const uint32_t b0 = (uint32_t)g[0] | (uint32_t)g[1] << 8 | (uint32_t)g[2] << 16;
    const uint32_t b1 = (uint32_t)g[3] | (uint32_t)g[4] << 8 | (uint32_t)g[5] << 16;
    const __m512i w =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)b0)), _mm256_set1_epi32((int)b1), 1);
    const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(7));
    const __m512 t = _mm512_castps256_ps512(_mm256_loadu_ps(kn_tq3_centroids));
    return _mm512_mul_ps(_mm512_set1_ps(ld_scale(p)), _mm512_permutexvar_ps(idx, t));
}

/* Heads whose output accumulators share the registers in the V pass: NC vectors per head, at most 16
 * in all, at most KN_ATTEND_MAX_Q heads. */
#define VGROUP(NC) ((NC) >= 16 ? 1 : 16 / (NC) > KN_ATTEND_MAX_Q ? KN_ATTEND_MAX_Q : 16 / (NC))

/* The V pass of one block for GN heads o[GN][ostride] (in memory between blocks): positions j < cnt
 * in order, out_h = fma(w[h][j], v_j, out_h), each V row loaded (and converted) once for the GN heads. */
#define DEFINE_VPASS(NAME, LD)                                                                                         \
    AI void NAME(float *o, size_t ostride, const float *wj, const uint8_t *const *vp, int cnt, const int NC,           \
                 const int GN) {                                                                                       \
        __m512 R[16];                                                                                                  \
        UNROLL for (int h = 0; h < GN; h++) UNROLL for (int c = 0; c < NC; c++) R[h * NC + c] =                        \
            _mm512_load_ps(o + h * ostride + 16 * c);                                                                  \
        for (int j = 0; j < cnt; j++) {                                                                                \
            const uint8_t *vr = vp[j];                                                                                 \
            __m512 V[16];                                                                                              \
            UNROLL for (int c = 0; c < NC; c++) V[c] = LD(vr, 16 * c, NC);                                             \
            UNROLL for (int h = 0; h < GN; h++) {                                                                      \
                const __m512 a = _mm512_set1_ps(wj[16 * h + j]);                                                       \
                UNROLL for (int c = 0; c < NC; c++) R[h * NC + c] = _mm512_fmadd_ps(a, V[c], R[h * NC + c]);           \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int h = 0; h < GN; h++) UNROLL for (int c = 0; c < NC; c++)                                        \
            _mm512_store_ps(o + h * ostride + 16 * c, R[h * NC + c]);                                                  \
    }

/* Attention of nkv * nq heads with NC = hd / 16 vectors per row (a constant where the entry specializes
 * it, so the per-head vectors stay in registers). Per block of 16 positions, for each KV head g in
 * turn: each of its query heads' 16 scores (its K pass, reading the block's K rows of head g from L1
 * after the first query head), its online-softmax step and weights w[h][16]; then the V pass for
 * groups of VGROUP(NC) heads. Every head's float steps are the one-head algorithm's, in the same order. */
#define DEFINE_ATTEND(NAME, LD, FMT)                                                                                   \
    DEFINE_VPASS(NAME##_vpass, LD)                                                                                     \
    AI void NAME##_nc(const kn_attend_rows *rw, int32_t n, const float *q, int nq, int hd, float scale, float *out,    \
                      const int NC) {                                                                                  \
        const int G = VGROUP(NC), nkv = kn_attend_nkv(rw), nh = nkv * nq;                                              \
        _Alignas(64) float O[KN_ATTEND_MAX_HEADS * MAX_HD], wj[KN_ATTEND_MAX_HEADS][16];                               \
        float m[KN_ATTEND_MAX_HEADS];                                                                                  \
        __m512 lsum[KN_ATTEND_MAX_HEADS];                                                                              \
        for (int h = 0; h < nh; h++) {                                                                                 \
            m[h] = -INFINITY;                                                                                          \
            lsum[h] = _mm512_setzero_ps();                                                                             \
            UNROLL for (int c = 0; c < NC; c++) _mm512_store_ps(O + h * hd + 16 * c, _mm512_setzero_ps());             \
        }                                                                                                              \
        /* K rows in a format other than F32 are converted once per block into KF for all the heads */                 \
        _Alignas(64) float KF[16 * MAX_HD];                                                                            \
        const bool conv = nq > 1 && FMT != KN_KVT_F32;                                                                 \
        const size_t hb = kn_kvq_head_bytes(FMT, hd);                                                                  \
        for (int32_t p = 16; p < 16 * KN_ATTEND_PF_BLOCKS; p += 16) kn_attend_prefetch(rw, p, n, hb);                  \
        for (int32_t p0 = 0; p0 < n; p0 += 16) {                                                                       \
            const int cnt = n - p0 < 16 ? (int)(n - p0) : 16;                                                          \
            const __mmask16 valid = (__mmask16)((1u << cnt) - 1);                                                      \
            const uint8_t *kp[16], *vp[16];                                                                            \
            kn_attend_rows_at(rw, p0, cnt, kp, vp);                                                                    \
            kn_attend_prefetch(rw, p0 + 16 * KN_ATTEND_PF_BLOCKS, n, hb);                                              \
            for (int g = 0; g < nkv; g++) {                                                                            \
                if (g > 0)                                                                                             \
                    for (int j = 0; j < cnt; j++) kp[j] += rw->khead, vp[j] += rw->vhead;                              \
                if (conv)                                                                                              \
                    UNROLL for (int j = 0; j < 16; j++) if (j < cnt) UNROLL for (int c = 0; c < NC; c++)               \
                        _mm512_store_ps(KF + 16 * (NC * j + c), LD(kp[j], 16 * c, NC));                                \
                for (int h = g * nq; h < (g + 1) * nq; h++) {                                                          \
                    const float *qh = q + (size_t)h * hd;                                                              \
                    __m512 acc[16];                                                                                    \
                    UNROLL for (int j = 0; j < 16; j++) {                                                              \
                        acc[j] = _mm512_setzero_ps();                                                                  \
                        if (j < cnt)                                                                                   \
                            UNROLL for (int c = 0; c < NC; c++) acc[j] =                                               \
                                _mm512_fmadd_ps(conv ? _mm512_load_ps(KF + 16 * (NC * j + c)) : LD(kp[j], 16 * c, NC), \
                                                _mm512_loadu_ps(qh + 16 * c), acc[j]);                                 \
                    }                                                                                                  \
                    __m512 sv = _mm512_mul_ps(reduce16x16(acc), _mm512_set1_ps(scale));                                \
                    sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid, sv);                                     \
                    const float bm = _mm512_reduce_max_ps(sv);                                                         \
                    if (bm > m[h]) {                                                                                   \
                        const __m512 cv = kn_expf16(_mm512_set1_ps(m[h] - bm));                                        \
                        lsum[h] = _mm512_mul_ps(lsum[h], cv);                                                          \
                        UNROLL for (int c = 0; c < NC; c++) _mm512_store_ps(                                           \
                            O + h * hd + 16 * c, _mm512_mul_ps(_mm512_load_ps(O + h * hd + 16 * c), cv));              \
                        m[h] = bm;                                                                                     \
                    }                                                                                                  \
                    const __m512 w = kn_expf16(_mm512_sub_ps(sv, _mm512_set1_ps(m[h])));                               \
                    lsum[h] = _mm512_add_ps(lsum[h], w);                                                               \
                    _mm512_store_ps(wj[h], w);                                                                         \
                }                                                                                                      \
                int h = g * nq;                                                                                        \
                for (; h + G <= (g + 1) * nq; h += G) NAME##_vpass(O + h * hd, (size_t)hd, wj[h], vp, cnt, NC, G);     \
                for (; h < (g + 1) * nq; h++) NAME##_vpass(O + h * hd, (size_t)hd, wj[h], vp, cnt, NC, 1);             \
            }                                                                                                          \
        }                                                                                                              \
        for (int h = 0; h < nh; h++) {                                                                                 \
            const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(lsum[h]));                                   \
            UNROLL for (int c = 0; c < NC; c++) _mm512_storeu_ps(                                                      \
                out + (size_t)h * hd + 16 * c, _mm512_mul_ps(_mm512_load_ps(O + h * hd + 16 * c), inv));               \
        }                                                                                                              \
    }

DEFINE_ATTEND(attn_f16, ld_f16, KN_KVT_F16)
DEFINE_ATTEND(attn_f32, ld_f32, KN_KVT_F32)
DEFINE_ATTEND(attn_bf16, ld_bf16, KN_KVT_BF16)
DEFINE_ATTEND(attn_q8_0, ld_q8_0, KN_KVT_Q8_0)
DEFINE_ATTEND(attn_q4_0, ld_q4_0, KN_KVT_Q4_0)
DEFINE_ATTEND(attn_tq4, ld_tq4, KN_KVT_TQ4)
DEFINE_ATTEND(attn_tq3, ld_tq3, KN_KVT_TQ3)

/* The kn_attend_fn NAME: NAME##_nc specialized for each head size of 16 .. 128 elements in steps of 16
 * and for 256; other head sizes take the reference kernel. */
#define DEFINE_ENTRY(NAME, IMPL, REF)                                                                                  \
    static void NAME(const kn_attend_rows *rw, int32_t n, const float *q, int nq, int hd, float scale, float *out) {   \
        switch (hd) {                                                                                                  \
            case 16: IMPL(rw, n, q, nq, hd, scale, out, 1); break;                                                     \
            case 32: IMPL(rw, n, q, nq, hd, scale, out, 2); break;                                                     \
            case 48: IMPL(rw, n, q, nq, hd, scale, out, 3); break;                                                     \
            case 64: IMPL(rw, n, q, nq, hd, scale, out, 4); break;                                                     \
            case 80: IMPL(rw, n, q, nq, hd, scale, out, 5); break;                                                     \
            case 96: IMPL(rw, n, q, nq, hd, scale, out, 6); break;                                                     \
            case 112: IMPL(rw, n, q, nq, hd, scale, out, 7); break;                                                    \
            case 128: IMPL(rw, n, q, nq, hd, scale, out, 8); break;                                                    \
            case 256: IMPL(rw, n, q, nq, hd, scale, out, 16); break;                                                   \
            default: REF(rw, n, q, nq, hd, scale, out);                                                                \
        }                                                                                                              \
    }

/* The kn_attend_fn NAME of a quantized or BF16 format: NAME##_nc specialized for the common head sizes
 * 48, 64, 96, 128 and 256 (fewer copies than the F16 / F32 ones); other head sizes take FALLBACK. */
#define DEFINE_ENTRY_Q(NAME, IMPL, FALLBACK)                                                                           \
    static void NAME(const kn_attend_rows *rw, int32_t n, const float *q, int nq, int hd, float scale, float *out) {   \
        switch (hd) {                                                                                                  \
            case 48: IMPL(rw, n, q, nq, hd, scale, out, 3); break;                                                     \
            case 64: IMPL(rw, n, q, nq, hd, scale, out, 4); break;                                                     \
            case 96: IMPL(rw, n, q, nq, hd, scale, out, 6); break;                                                     \
            case 128: IMPL(rw, n, q, nq, hd, scale, out, 8); break;                                                    \
            case 256: IMPL(rw, n, q, nq, hd, scale, out, 16); break;                                                   \
            default: FALLBACK(rw, n, q, nq, hd, scale, out);                                                           \
        }                                                                                                              \
    }

/* The reference kernel of a quantized format, for the other head sizes. */
#define REF_FALLBACK(NAME, T)                                                                                          \
    static void NAME(const kn_attend_rows *rw, int32_t n, const float *q, int nq, int hd, float scale, float *out) {   \
        kn_attend_kv_ref(T, T, rw, n, q, nq, hd, scale, 0.0f, out);                                                    \
    }
REF_FALLBACK(ref_bf16, KN_KVT_BF16)
REF_FALLBACK(ref_q8_0, KN_KVT_Q8_0)
REF_FALLBACK(ref_q4_0, KN_KVT_Q4_0)
REF_FALLBACK(ref_tq4, KN_KVT_TQ4)
REF_FALLBACK(ref_tq3, KN_KVT_TQ3)

DEFINE_ENTRY(attend_f16, attn_f16_nc, kn_attend_f16_ref)
DEFINE_ENTRY(attend_f32, attn_f32_nc, kn_attend_f32_ref)
DEFINE_ENTRY_Q(attend_bf16, attn_bf16_nc, ref_bf16)
DEFINE_ENTRY_Q(attend_q8_0, attn_q8_0_nc, ref_q8_0)
DEFINE_ENTRY_Q(attend_q4_0, attn_q4_0_nc, ref_q4_0)
DEFINE_ENTRY_Q(attend_tq4, attn_tq4_nc, ref_tq4)
DEFINE_ENTRY_Q(attend_tq3, attn_tq3_nc, ref_tq3)

/* Fills the attention kernels of k (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI. */
void kn_avx512_init_attn(kn_kernels *k) {
    k->attend_f16 = attend_f16;
    k->attend_f32 = attend_f32;
    k->attend_kv[KN_KVT_BF16] = attend_bf16;
    k->attend_kv[KN_KVT_Q8_0] = attend_q8_0;
    k->attend_kv[KN_KVT_Q4_0] = attend_q4_0;
    k->attend_kv[KN_KVT_TQ4] = attend_tq4;
    k->attend_kv[KN_KVT_TQ3] = attend_tq3;
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_attn(kn_kernels *k) { (void)k; }
#endif
