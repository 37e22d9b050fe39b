/*
 * kernels_avx2_attn.c - AVX2 attention kernel (kn_attend_fn) for the query heads of one or several KV heads:
 * the blocked online softmax of attend.c, 16 positions per block, bit-identical to the reference; the KV
 * heads of a call (kn_attend_rows.nkv) take each block in turn, so that one sweep reads a position's heads
 * together.
 *
 * A position's score is its dot product kept as two 8-lane fma accumulators (lanes = element index % 16,
 * as the reference row dot), added lane to lane (kn_reduce16's first step); 8 positions are then
 * reduced at once by a transposing tree whose additions are kn_reduce16's next steps (lanes i + 4, i + 2,
 * i + 1), each K chunk loaded (and converted) once for up to four query heads of a KV head. The block's
 * exponentials are one vector evaluation of kn_expf_ref's steps; V rows are accumulated in position
 * order with fused multiply-adds, each V chunk loaded once for a group of up to 4 heads (the heads of a
 * KV head share the K and V rows, which stay in L1 between heads). Head sizes that are not a multiple
 * of 16 (or above 256) take the blocked attention over the AVX2 row helpers.
 *
 * Every KV format of kvq.h has a kernel here: the same algorithm over a loader that turns 8 elements
 * of a head vector into floats exactly as kn_kvq_elem does (BF16 shifted, Q8_0 / Q4_0 codes times
 * their block's fp16 scale, TQ4 / TQ3 centroids looked up by permutes and times the vector's scale),
 * so the quantized cache is read directly, without a dequantized copy. The quantized and BF16
 * formats are specialized for the common head sizes; others take the reference kernel. Rows are
 * found through kn_attend_rows (kernels.h): the 16 K and V row addresses of each block of positions,
 * so the blocks of a paged cache are read in place with the same float steps.
 */
#include "tensor/expf_simd.h"
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AI     static inline __attribute__((always_inline))
#define MAX_HD 256
#define UNROLL _Pragma("GCC unroll 16")
#define VG     4 /* heads per V pass at most */
#define KG     4 /* heads per K pass at most */

/* Lane p of the result = the rest of kn_reduce16 for position p, given r[p] = its 16 lanes already
 * folded to 8 (lane i = acc[i] + acc[i + 8]): lanes i + 4 onto i, then i + 2, then i + 1. */
AI __m256 reduce8x8(const __m256 r[8]) {
    __m256 b[4], c[2];
    UNROLL for (int i = 0; i < 4; i++) /* [r[2i] lanes 0..3 + 4..7 | r[2i+1] the same] */
        b[i] = _mm256_add_ps(_mm256_permute2f128_ps(r[2 * i], r[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(r[2 * i], r[2 * i + 1], 0x31));
    UNROLL for (int i = 0; i < 2; i++) /* lanes i + 2 onto i */
        c[i] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 1 onto lane 0: positions 0 2 4 6 | 1 3 5 7 */
    const __m256 d = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* kn_reduce16 of the 16 lanes lo (0..7) and hi (8..15). */
AI float reduce16(__m256 lo, __m256 hi) {
    const __m256 v = _mm256_add_ps(lo, hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The largest of the 16 lanes lo (0..7) and hi (8..15), NaN lanes left out (as the reference's
 * `s > m ? s : m` from -inf): vmaxps returns its second operand when either is NaN. */
AI float max16(__m256 lo, __m256 hi) {
    __m256 v = _mm256_max_ps(hi, _mm256_max_ps(lo, _mm256_set1_ps(-INFINITY)));
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm256_cvtss_f32(v);
}

/* Elements i .. i + 7 (i a multiple of 8) of a K or V head vector p of NC * 16 elements, as fp32:
 * kn_kvq_elem's values (a quantized element is one float product, scale times code or centroid).
 * B = kn_kvq_block(NC * 16): 32 for an even NC, else 16. */
#define BLK(NC) ((NC) % 2 == 0 ? 32 : 16)
AI float ld_scale(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
AI __m256 ld_f16(const uint8_t *p, int i, const int NC) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
}
AI __m256 ld_f32(const uint8_t *p, int i, const int NC) { return _mm256_loadu_ps((const float *)p + i); }
AI __m256 ld_bf16(const uint8_t *p, int i, const int NC) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
AI __m256 ld_q8_0(const uint8_t *p, int i, const int NC) {
    const uint8_t *blk = p + (size_t)(i / BLK(NC)) * (2 + BLK(NC));
    const __m256 q =
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + i % BLK(NC)))));
    return _mm256_mul_ps(_mm256_set1_ps(ld_scale(blk)), q);
}
AI __m256 ld_q4_0(const uint8_t *p, int i, const int NC) {
    const int j = i % BLK(NC), h = BLK(NC) / 2;
    const uint8_t *blk = p + (size_t)(i / BLK(NC)) * (2 + BLK(NC) / 2);
    __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + (j < h ? j : j - h))));
    if (j >= h) c = _mm256_srli_epi32(c, 4);
    c = _mm256_sub_epi32(_mm256_and_si256(c, _mm256_set1_epi32(15)), _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_set1_ps(ld_scale(blk)), _mm256_cvtepi32_ps(c));
}
AI __m256 ld_tq4(const uint8_t *p, int i, const int NC) {
    uint32_t b;
    memcpy(&b, p + 2 + i / 2, 4);
    const __m256i idx =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)b), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                         _mm256_set1_epi32(15));
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kn_tq4_centroids), idx);
    const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kn_tq4_centroids + 8), idx);
    const __m256 c = _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    return _mm256_mul_ps(_mm256_set1_ps(ld_scale(p)), c);
}
AI __m256 ld_tq3(const uint8_t *p, int i, const int NC) {
    const uint8_t *g = p + 2 + 3 * (i / 8);
    const uint32_t b = (uint32_t)g[0] | (uint32_t)g[1] << 8 | (uint32_t)g[2] << 16;
    const __m256i idx =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)b), _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21)),
                         _mm256_set1_epi32(7));
    return _mm256_mul_ps(_mm256_set1_ps(ld_scale(p)), _mm256_permutevar8x32_ps(_mm256_loadu_ps(kn_tq3_centroids), idx));
}

/* The V pass of one block for GN heads o[GN][ostride] (in memory between blocks), 16 elements at a time:
 * positions j < cnt in order, out_h = fma(w[h][j], v_j, out_h), each V chunk loaded (and converted)
 * once for the GN heads (GN a constant at each call, so that no head is tested in the loop). */
#define DEFINE_VPASS(NAME, LD)                                                                                         \
    AI void NAME(float *o, int ostride, const float *wj, const uint8_t *const *vp, int cnt, const int NC,              \
                 const int GN) {                                                                                       \
        for (int c = 0; c < NC; c++) {                                                                                 \
            __m256 R[VG][2];                                                                                           \
            UNROLL for (int g = 0; g < GN; g++) {                                                                      \
                R[g][0] = _mm256_load_ps(o + g * ostride + 16 * c);                                                    \
                R[g][1] = _mm256_load_ps(o + g * ostride + 16 * c + 8);                                                \
            }                                                                                                          \
            for (int j = 0; j < cnt; j++) {                                                                            \
                const __m256 V0 = LD(vp[j], 16 * c, NC), V1 = LD(vp[j], 16 * c + 8, NC);                               \
                UNROLL for (int g = 0; g < GN; g++) {                                                                  \
                    const __m256 a = _mm256_set1_ps(wj[16 * g + j]);                                                   \
                    R[g][0] = _mm256_fmadd_ps(a, V0, R[g][0]);                                                         \
                    R[g][1] = _mm256_fmadd_ps(a, V1, R[g][1]);                                                         \
                }                                                                                                      \
            }                                                                                                          \
            UNROLL for (int g = 0; g < GN; g++) {                                                                      \
                _mm256_store_ps(o + g * ostride + 16 * c, R[g][0]);                                                    \
                _mm256_store_ps(o + g * ostride + 16 * c + 8, R[g][1]);                                                \
            }                                                                                                          \
        }                                                                                                              \
    }

/* The scores of one block of cnt positions for GH query heads q[GH][hd] (GH a constant at each call:
 * 1, 2 or KG), times scale, positions 0..7 in s[g][0] and 8..15 in s[g][1]: each K chunk is loaded (and
 * converted) once for the GH heads, every head's products and sums in the one-head order. */
#define DEFINE_KPASS(NAME, LD)                                                                                         \
    AI void NAME(__m256 s[][2], const uint8_t *const *kp, int cnt, const float *q, int hd, float scale, const int NC,  \
                 const int GH) {                                                                                       \
        for (int half = 0; half < 2; half++) {                                                                         \
            __m256 r[KG][8];                                                                                           \
            UNROLL for (int j = 0; j < 8; j++) {                                                                       \
                __m256 a[KG][2];                                                                                       \
                UNROLL for (int g = 0; g < GH; g++) a[g][0] = a[g][1] = _mm256_setzero_ps();                           \
                if (8 * half + j < cnt) {                                                                              \
                    const uint8_t *kr = kp[8 * half + j];                                                              \
                    UNROLL for (int c = 0; c < NC; c++) {                                                              \
                        const __m256 K0 = LD(kr, 16 * c, NC), K1 = LD(kr, 16 * c + 8, NC);                             \
                        UNROLL for (int g = 0; g < GH; g++) {                                                          \
                            const float *qh = q + (size_t)g * hd + 16 * c;                                             \
                            a[g][0] = _mm256_fmadd_ps(K0, _mm256_loadu_ps(qh), a[g][0]);                               \
                            a[g][1] = _mm256_fmadd_ps(K1, _mm256_loadu_ps(qh + 8), a[g][1]);                           \
                        }                                                                                              \
                    }                                                                                                  \
                }                                                                                                      \
                UNROLL for (int g = 0; g < GH; g++) r[g][j] = _mm256_add_ps(a[g][0], a[g][1]);                         \
            }                                                                                                          \
            UNROLL for (int g = 0; g < GH; g++) s[g][half] = _mm256_mul_ps(reduce8x8(r[g]), _mm256_set1_ps(scale));    \
        }                                                                                                              \
    }

/* Attention of nkv * nq heads with NC = hd / 16 pairs of vectors per row. Per block of 16 positions, for
 * each KV head in turn: its query heads' scores (8 positions at a time, KG heads a K pass), each head's
 * online-softmax step and weights w[h][16] (the block's largest score a vector maximum, as the AVX-512
 * kernel's); then the V pass, 16 elements at a time for up to VG heads. Every head's float steps are the
 * one-head algorithm's. */
#define DEFINE_ATTEND(NAME, LD, FMT)                                                                                   \
    DEFINE_KPASS(NAME##_kpass, LD)                                                                                     \
    DEFINE_VPASS(NAME##_vpass, LD)                                                                                     \
    AI void NAME##_nc(const kn_attend_rows *rw, int32_t n, const float *q, int nq, int hd, float scale, float *out,    \
                      const int NC) {                                                                                  \
        const int nkv = kn_attend_nkv(rw), nh = nkv * nq;                                                              \
        _Alignas(32) float O[KN_ATTEND_MAX_HEADS * MAX_HD], wj[KN_ATTEND_MAX_HEADS][16], sc[16];                       \
        float m[KN_ATTEND_MAX_HEADS];                                                                                  \
        __m256 lsum[KN_ATTEND_MAX_HEADS][2];                                                                           \
        for (int h = 0; h < nh; h++) {                                                                                 \
            m[h] = -INFINITY;                                                                                          \
            lsum[h][0] = lsum[h][1] = _mm256_setzero_ps();                                                             \
            for (int c = 0; c < 2 * NC; c++) _mm256_store_ps(O + h * hd + 8 * c, _mm256_setzero_ps());                 \
        }                                                                                                              \
        const size_t hb = kn_kvq_head_bytes(FMT, hd);                                                                  \
        for (int32_t p = 16; p < 16 * KN_ATTEND_PF_BLOCKS; p += 16) kn_attend_prefetch(rw, p, n, hb);                  \
        for (int32_t p0 = 0; p0 < n; p0 += 16) {                                                                       \
            const int cnt = n - p0 < 16 ? (int)(n - p0) : 16;                                                          \
            const uint8_t *kp[16], *vp[16];                                                                            \
            kn_attend_rows_at(rw, p0, cnt, kp, vp);                                                                    \
            kn_attend_prefetch(rw, p0 + 16 * KN_ATTEND_PF_BLOCKS, n, hb);                                              \
            for (int kvh = 0; kvh < nkv; kvh++) {                                                                      \
                if (kvh > 0)                                                                                           \
                    for (int j = 0; j < cnt; j++) kp[j] += rw->khead, vp[j] += rw->vhead;                              \
                const int he = (kvh + 1) * nq;                                                                         \
                for (int h0 = kvh * nq, gh; h0 < he; h0 += gh) {                                                       \
                    __m256 S[KG][2];                                                                                   \
                    const float *qg = q + (size_t)h0 * hd;                                                             \
                    if (he - h0 >= KG) NAME##_kpass(S, kp, cnt, qg, hd, scale, NC, gh = KG);                           \
                    else if (he - h0 >= 2) NAME##_kpass(S, kp, cnt, qg, hd, scale, NC, gh = 2);                        \
                    else NAME##_kpass(S, kp, cnt, qg, hd, scale, NC, gh = 1);                                          \
                    for (int g = 0; g < gh; g++) {                                                                     \
                        const int h = h0 + g;                                                                          \
                        __m256 *s2 = S[g];                                                                             \
                        if (cnt < 16) { /* the positions past the end: score -inf, weight 0 */                         \
                            _mm256_storeu_ps(sc, s2[0]);                                                               \
                            _mm256_storeu_ps(sc + 8, s2[1]);                                                           \
                            for (int j = cnt; j < 16; j++) sc[j] = -INFINITY;                                          \
                            s2[0] = _mm256_loadu_ps(sc);                                                               \
                            s2[1] = _mm256_loadu_ps(sc + 8);                                                           \
                        }                                                                                              \
                        const float bm = max16(s2[0], s2[1]);                                                          \
                        if (bm > m[h]) {                                                                               \
                            const __m256 cv = _mm256_set1_ps(kn_expf_ref(m[h] - bm));                                  \
                            lsum[h][0] = _mm256_mul_ps(lsum[h][0], cv);                                                \
                            lsum[h][1] = _mm256_mul_ps(lsum[h][1], cv);                                                \
                            for (int c = 0; c < 2 * NC; c++)                                                           \
                                _mm256_store_ps(O + h * hd + 8 * c,                                                    \
                                                _mm256_mul_ps(_mm256_load_ps(O + h * hd + 8 * c), cv));                \
                            m[h] = bm;                                                                                 \
                        }                                                                                              \
                        const __m256 mv = _mm256_set1_ps(m[h]);                                                        \
                        const __m256 w0 = kn_expf8(_mm256_sub_ps(s2[0], mv));                                          \
                        const __m256 w1 = kn_expf8(_mm256_sub_ps(s2[1], mv));                                          \
                        lsum[h][0] = _mm256_add_ps(lsum[h][0], w0);                                                    \
                        lsum[h][1] = _mm256_add_ps(lsum[h][1], w1);                                                    \
                        _mm256_storeu_ps(wj[h], w0);                                                                   \
                        _mm256_storeu_ps(wj[h] + 8, w1);                                                               \
                    }                                                                                                  \
                }                                                                                                      \
                for (int h0 = kvh * nq; h0 < he; h0 += VG) {                                                           \
                    switch (he - h0 < VG ? he - h0 : VG) {                                                             \
                        case 1: NAME##_vpass(O + h0 * hd, hd, wj[h0], vp, cnt, NC, 1); break;                          \
                        case 2: NAME##_vpass(O + h0 * hd, hd, wj[h0], vp, cnt, NC, 2); break;                          \
                        case 3: NAME##_vpass(O + h0 * hd, hd, wj[h0], vp, cnt, NC, 3); break;                          \
                        default: NAME##_vpass(O + h0 * hd, hd, wj[h0], vp, cnt, NC, VG); break;                        \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        for (int h = 0; h < nh; h++) {                                                                                 \
            const __m256 inv = _mm256_set1_ps(1.0f / reduce16(lsum[h][0], lsum[h][1]));                                \
            for (int c = 0; c < 2 * NC; c++)                                                                           \
                _mm256_storeu_ps(out + (size_t)h * hd + 8 * c,                                                         \
                                 _mm256_mul_ps(_mm256_load_ps(O + h * hd + 8 * c), inv));                              \
        }                                                                                                              \
    }

DEFINE_ATTEND(attn_f16, ld_f16, KN_KVT_F16)
DEFINE_ATTEND(attn_f32, ld_f32, KN_KVT_F32)
DEFINE_ATTEND(attn_bf16, ld_bf16, KN_KVT_BF16)
DEFINE_ATTEND(attn_q8_0, ld_q8_0, KN_KVT_Q8_0)
DEFINE_ATTEND(attn_q4_0, ld_q4_0, KN_KVT_Q4_0)
DEFINE_ATTEND(attn_tq4, ld_tq4, KN_KVT_TQ4)
DEFINE_ATTEND(attn_tq3, ld_tq3, KN_KVT_TQ3)

/* The kn_attend_fn NAME: NAME##_nc specialized for head sizes 16 .. 128 in steps of 16 and 256; other
 * head sizes take FALLBACK. */
#define DEFINE_ENTRY(NAME, IMPL, FALLBACK)                                                                             \
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
            default: FALLBACK(rw, n, q, nq, hd, scale, out);                                                           \
        }                                                                                                              \
    }

/* The blocked attention over the AVX2 row helpers (kernels_avx2.c), for the other head sizes. */
void kn__avx2_attend_rows_f16(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                              float *out);
void kn__avx2_attend_rows_f32(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,
                              float *out);

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

DEFINE_ENTRY(attend_f16, attn_f16_nc, kn__avx2_attend_rows_f16)
DEFINE_ENTRY(attend_f32, attn_f32_nc, kn__avx2_attend_rows_f32)
DEFINE_ENTRY_Q(attend_bf16, attn_bf16_nc, ref_bf16)
DEFINE_ENTRY_Q(attend_q8_0, attn_q8_0_nc, ref_q8_0)
DEFINE_ENTRY_Q(attend_q4_0, attn_q4_0_nc, ref_q4_0)
DEFINE_ENTRY_Q(attend_tq4, attn_tq4_nc, ref_tq4)
DEFINE_ENTRY_Q(attend_tq3, attn_tq3_nc, ref_tq3)

/* Fills the attention kernels of k (kernels.h). Called only on CPUs with AVX2, FMA and F16C. */
void kn_avx2_init_attn(kn_kernels *k) {
    k->attend_f16 = attend_f16;
    k->attend_f32 = attend_f32;
    k->attend_kv[KN_KVT_BF16] = attend_bf16;
    k->attend_kv[KN_KVT_Q8_0] = attend_q8_0;
    k->attend_kv[KN_KVT_Q4_0] = attend_q4_0;
    k->attend_kv[KN_KVT_TQ4] = attend_tq4;
    k->attend_kv[KN_KVT_TQ3] = attend_tq3;
}

#else /* not x86-64: the set is never selected */
void kn_avx2_init_attn(kn_kernels *k) { (void)k; }
#endif
