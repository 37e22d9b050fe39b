/*
 * kernels_avx512_k.c - AVX-512 (F, BW, VL, VNNI) kernels for the K weight formats (Q4_K, Q5_K, Q6_K)
 * and their activation quantizer (Q8_K). Tested against the scalar reference in quant_k.c (the source
 * of truth) by tests/unit/test_kernels_k.c; entries left unset keep the previous set's kernel.
 *
 * GEMM tiles (up to 4 weight rows x 4 tokens). For every 256-element super-block a tile call:
 *   1. prepares each token once: its 256 int8 quants loaded as four 64-byte vectors permuted to the
 *      element order of the weight vectors (below), its bsums, and its fp32 scale broadcast;
 *   2. unpacks each weight row once: the quants become four vectors of 64 unsigned bytes (0..15,
 *      0..31 or 0..63), the sub-block scales become four vectors of int32 lanes (one scale per lane,
 *      matching the lanes of the vpdpbusd results), d (and dmin) are broadcast;
 *   3. for every (row, token): vpdpbusd of quants x activations gives 16 int32 lanes, each a sum of 4
 *      products (|sum| < 2^15, so it is exact as an int16); vpdpwssd multiplies each lane by its
 *      sub-block scale and accumulates, exactly, in int32. The terms that do not depend on the weight
 *      quants (Q4_K/Q5_K mins, Q6_K's -32 offset) come from the Q8_K bsums, as in the reference. The
 *      super-block's integer sums are converted to float, scaled by d (and dmin) and then by the
 *      token's d, and accumulated into a 16-lane float accumulator owned by that (row, token) alone.
 *   4. at the end each accumulator is reduced horizontally in one fixed order.
 * Every output therefore sees the same sequence of operations whatever the tile shape (the tile
 * contract of kernels.h): tile calls equal 1x1 calls bit for bit. The integer part is exact; results
 * differ from the scalar reference only by float rounding of the per-super-block terms.
 *
 * Element order of the weight vectors: Q4_K/Q5_K vector k holds the low (k even) or high (k odd)
 * nibbles of qs[64(k/2) .. 64(k/2)+63], i.e. sub-blocks 2(k/2)*2 + (k&1) (bytes 0..31) and that + 2
 * (bytes 32..63). Q6_K vector k holds elements 32k .. 32k+31 and 128+32k .. 128+32k+31. Decode (one
 * token) reads each weight row sequentially, four rows in flight, no gathers.
 */
#include "tensor/kernels.h"
#include "tensor/quant.h"

#if defined(__x86_64__)
#include <float.h>
#include <math.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include <immintrin.h>

#define KI static inline __attribute__((always_inline))

/* Sum of the 16 lanes of v, always in the same order (the final reduction of every output). */
KI float hsum16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* The two fp16 values at p (d, dmin of a Q4_K/Q5_K block) as floats in lanes 0 and 1 (exact). */
KI __m128 load_2xf16(const void *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
}

/* Unpacks the 12 packed scale bytes of a Q4_K/Q5_K block (see kn_k_scale_min) into 16 bytes
 * sc[0..7], m[0..7]. Reads 16 bytes at `scales`: the caller guarantees 4 readable bytes after them
 * (in both block types the scales are followed by more of the block). */
KI __m128i k4_scales(const uint8_t *scales) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)scales);
    const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x3F));                      /* sc0..3 | m0..3 */
    const __m128i x2 = _mm_shuffle_epi32(raw, 0xAA);                                 /* bytes 8..11 everywhere */
    const __m128i t = _mm_and_si128(_mm_srlv_epi32(x2, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0F));
    const __m128i u = _mm_and_si128(_mm_srli_epi32(raw, 2), _mm_set1_epi8(0x30));     /* top 2 bits -> bits 4,5 */
    const __m128i hi = _mm_or_si128(t, u);                                           /* sc4..7 | m4..7 */
    return _mm_unpacklo_epi32(lo, hi);
}

/* ---- Q4_K and Q5_K ---- */

/* One token's super-block, prepared for Q4_K/Q5_K rows. */
typedef struct tok_k4 {
    __m512i y[4]; /* y[k] pairs with weight vector k (see the top of the file) */
    __m256i b;    /* int32 lane j: bsums[2j] + bsums[2j+1], the sum of sub-block j */
    __m512 dy;    /* the token's scale, broadcast */
} tok_k4;

KI void prep_tok_k4(const kn_block_q8_k *y, tok_k4 *T) {
    const __m512i y0 = _mm512_loadu_si512(y->qs), y1 = _mm512_loadu_si512(y->qs + 64);
    const __m512i y2 = _mm512_loadu_si512(y->qs + 128), y3 = _mm512_loadu_si512(y->qs + 192);
    T->y[0] = _mm512_shuffle_i64x2(y0, y1, 0x44); /* elements 0..31, 64..95 */
    T->y[1] = _mm512_shuffle_i64x2(y0, y1, 0xEE); /* 32..63, 96..127 */
    T->y[2] = _mm512_shuffle_i64x2(y2, y3, 0x44); /* 128..159, 192..223 */
    T->y[3] = _mm512_shuffle_i64x2(y2, y3, 0xEE); /* 160..191, 224..255 */
    T->b = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
    T->dy = _mm512_set1_ps(y->d);
}

/* One weight row's super-block, unpacked. */
typedef struct row_k4 {
    __m512i q[4];  /* quants as unsigned bytes, in the order of tok_k4.y */
    __m512i s[4];  /* int32 lanes: the 6-bit scale of each lane's sub-block */
    __m256i m;     /* int32 lane j: the 6-bit min of sub-block j */
    __m512 d, dmin;
} row_k4;

/* Unpacks the scales, d and dmin shared by Q4_K and Q5_K, and the 4-bit quants of qs[128]. */
KI void unpack_k4(const uint8_t *dd, const uint8_t *scales, const uint8_t *qs, row_k4 *R) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i z0 = _mm512_loadu_si512(qs), z1 = _mm512_loadu_si512(qs + 64);
    R->q[0] = _mm512_and_si512(z0, m4);
    R->q[1] = _mm512_and_si512(_mm512_srli_epi16(z0, 4), m4);
    R->q[2] = _mm512_and_si512(z1, m4);
    R->q[3] = _mm512_and_si512(_mm512_srli_epi16(z1, 4), m4);
    const __m512i sm = _mm512_cvtepu8_epi32(k4_scales(scales)); /* lanes: sc0..7, m0..7 */
    R->s[0] = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), sm);
    R->s[1] = _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), sm);
    R->s[2] = _mm512_permutexvar_epi32(_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6), sm);
    R->s[3] = _mm512_permutexvar_epi32(_mm512_setr_epi32(5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7), sm);
    R->m = _mm512_extracti64x4_epi64(sm, 1);
    const __m128 f = load_2xf16(dd);
    R->d = _mm512_broadcastss_ps(f);
    R->dmin = _mm512_broadcastss_ps(_mm_movehdup_ps(f));
}

/* Adds 16 to the quants of a Q5_K row whose high bit (qh[l] bit j for sub-block j) is set. */
KI void add_high_q5k(const uint8_t *qh, row_k4 *R) {
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    const __m512i sixteen = _mm512_set1_epi8(16);
    static const uint8_t first[4] = {0, 1, 4, 5}; /* sub-block of bytes 0..31 of vector k; +2 for 32..63 */
    for (int k = 0; k < 4; k++) {
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1u << first[k])),
                                               _mm256_set1_epi8((char)(1u << (first[k] + 2))), 1);
        R->q[k] = _mm512_mask_add_epi8(R->q[k], _mm512_test_epi8_mask(h, bit), R->q[k], sixteen);
    }
}

/* acc + dy * (d * sum_j sc_j dot_j - dmin * sum_j m_j bsum_j) for one row and one token, lane-wise. */
KI __m512 dot_k4(const row_k4 *R, const tok_k4 *T, __m512 acc) {
    const __m512i z = _mm512_setzero_si512();
    __m512i ia = _mm512_madd_epi16(_mm512_dpbusd_epi32(z, R->q[0], T->y[0]), R->s[0]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[1], T->y[1]), R->s[1]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[2], T->y[2]), R->s[2]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[3], T->y[3]), R->s[3]);
    const __m256i mv = _mm256_madd_epi16(R->m, T->b);
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(ia), R->d);
    f = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(mv)), R->dmin, f);
    return _mm512_fmadd_ps(f, T->dy, acc);
}

/* The Q4_K (q5 = 0) or Q5_K (q5 = 1) tile over nb super-blocks; see the top of the file. */
KI void tile_k4(int q5, int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,
                float *out, size_t ldo) {
    __m512 acc[4][4];
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) acc[r][t] = _mm512_setzero_ps();
    tok_k4 T[4];
    row_k4 R;
    for (int64_t i = 0; i < nb; i++) {
        for (int t = 0; t < nt; t++) prep_tok_k4((const kn_block_q8_k *)(x + (size_t)t * xs) + i, &T[t]);
        for (int r = 0; r < nr; r++) {
            if (q5) {
                const kn_block_q5_k *b = (const kn_block_q5_k *)(w + (size_t)r * ws) + i;
                unpack_k4((const uint8_t *)&b->d, b->scales, b->qs, &R);
                add_high_q5k(b->qh, &R);
            } else {
                const kn_block_q4_k *b = (const kn_block_q4_k *)(w + (size_t)r * ws) + i;
                unpack_k4((const uint8_t *)&b->d, b->scales, b->qs, &R);
            }
            for (int t = 0; t < nt; t++) acc[r][t] = dot_k4(&R, &T[t], acc[r][t]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = hsum16(acc[r][t]);
}

/* Contract (kn_gemm_fn): Q4_K weight rows x Q8_K activation rows, n a multiple of 256, nr, nt <= 4.
 * The common shapes get their own inlined copy (loops unrolled); all copies compute every output
 * with the same operations, so the tile contract holds across them. */
static void gemm_q4_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    if (nr == 4 && nt == 1) tile_k4(0, nb, w, ws, 4, x, xs, 1, out, ldo);
    else if (nr == 4 && nt == 4) tile_k4(0, nb, w, ws, 4, x, xs, 4, out, ldo);
    else tile_k4(0, nb, w, ws, nr, x, xs, nt, out, ldo);
}

/* Contract (kn_gemm_fn): Q5_K weight rows x Q8_K activation rows; as gemm_q4_k. */
static void gemm_q5_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    if (nr == 4 && nt == 1) tile_k4(1, nb, w, ws, 4, x, xs, 1, out, ldo);
    else if (nr == 4 && nt == 4) tile_k4(1, nb, w, ws, 4, x, xs, 4, out, ldo);
    else tile_k4(1, nb, w, ws, nr, x, xs, nt, out, ldo);
}

/* ---- Q6_K ---- */

/* One token's super-block, prepared for Q6_K rows. */
typedef struct tok_q6k {
    __m512i y[4]; /* y[k]: elements 32k .. 32k+31 and 128+32k .. 128+32k+31 */
    __m512i nb;   /* int32 lane j: -bsums[j] */
    __m512 dy;
} tok_q6k;

KI void prep_tok_q6k(const kn_block_q8_k *y, tok_q6k *T) {
    const __m512i y0 = _mm512_loadu_si512(y->qs), y1 = _mm512_loadu_si512(y->qs + 64);
    const __m512i y2 = _mm512_loadu_si512(y->qs + 128), y3 = _mm512_loadu_si512(y->qs + 192);
    T->y[0] = _mm512_shuffle_i64x2(y0, y2, 0x44);
    T->y[1] = _mm512_shuffle_i64x2(y0, y2, 0xEE);
    T->y[2] = _mm512_shuffle_i64x2(y1, y3, 0x44);
    T->y[3] = _mm512_shuffle_i64x2(y1, y3, 0xEE);
    T->nb = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)y->bsums)));
    T->dy = _mm512_set1_ps(y->d);
}

typedef struct row_q6k {
    __m512i q[4];  /* quants 0..63 as unsigned bytes, in the order of tok_q6k.y */
    __m512i s[4];  /* int32 lanes (low 16 bits): the signed scale of each lane's sub-block */
    __m512i s32;   /* int32 lane j (low 16 bits): 32 * scales[j] */
    __m512 d;
} row_q6k;

KI void unpack_q6k(const kn_block_q6_k *b, row_q6k *R) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i z0 = _mm512_loadu_si512(b->ql), z1 = _mm512_loadu_si512(b->ql + 64);
    const __m512i a = _mm512_shuffle_i64x2(z0, z1, 0x44); /* ql[0..31], ql[64..95] */
    const __m512i c = _mm512_shuffle_i64x2(z0, z1, 0xEE); /* ql[32..63], ql[96..127] */
    const __m512i h = _mm512_loadu_si512(b->qh);           /* qh[0..31] (first half), qh[32..63] (second) */
    R->q[0] = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
    R->q[1] = _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
    R->q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4), _mm512_and_si512(h, m30));
    R->q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), m4), _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    const __m512i s = _mm512_and_si512(sc, lo16); /* (scale, 0) as int16 pairs */
    R->s[0] = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 8, 8, 8, 8, 9, 9, 9, 9), s);
    R->s[1] = _mm512_permutexvar_epi32(_mm512_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3, 10, 10, 10, 10, 11, 11, 11, 11), s);
    R->s[2] = _mm512_permutexvar_epi32(_mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 12, 12, 12, 12, 13, 13, 13, 13), s);
    R->s[3] = _mm512_permutexvar_epi32(_mm512_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7, 14, 14, 14, 14, 15, 15, 15, 15), s);
    R->s32 = _mm512_and_si512(_mm512_slli_epi32(sc, 5), lo16);
    uint16_t dh;
    memcpy(&dh, &b->d, sizeof dh);
    R->d = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(dh)));
}

/* acc + dy * d * sum_j sc_j (dot_j - 32 bsums_j) for one row and one token, lane-wise. */
KI __m512 dot_q6k(const row_q6k *R, const tok_q6k *T, __m512 acc) {
    const __m512i z = _mm512_setzero_si512();
    __m512i ia = _mm512_madd_epi16(R->s32, T->nb);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[0], T->y[0]), R->s[0]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[1], T->y[1]), R->s[1]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[2], T->y[2]), R->s[2]);
    ia = _mm512_dpwssd_epi32(ia, _mm512_dpbusd_epi32(z, R->q[3], T->y[3]), R->s[3]);
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(ia), R->d), T->dy, acc);
}

KI void tile_q6k(int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                 size_t ldo) {
    __m512 acc[4][4];
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) acc[r][t] = _mm512_setzero_ps();
    tok_q6k T[4];
    row_q6k R;
    for (int64_t i = 0; i < nb; i++) {
        for (int t = 0; t < nt; t++) prep_tok_q6k((const kn_block_q8_k *)(x + (size_t)t * xs) + i, &T[t]);
        for (int r = 0; r < nr; r++) {
            unpack_q6k((const kn_block_q6_k *)(w + (size_t)r * ws) + i, &R);
            for (int t = 0; t < nt; t++) acc[r][t] = dot_q6k(&R, &T[t], acc[r][t]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = hsum16(acc[r][t]);
}

/* Contract (kn_gemm_fn): Q6_K weight rows x Q8_K activation rows; as gemm_q4_k. */
static void gemm_q6_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    if (nr == 4 && nt == 1) tile_q6k(nb, w, ws, 4, x, xs, 1, out, ldo);
    else if (nr == 4 && nt == 4) tile_q6k(nb, w, ws, 4, x, xs, 4, out, ldo);
    else tile_q6k(nb, w, ws, nr, x, xs, nt, out, ldo);
}

/* ---- Q8_K quantizer ---- */

/* Contract (kn_from_float_fn): exactly kn_q8_k_from_float (same bytes for every input, NaN and
 * infinities included): inputs sanitised (NaN -> 0, +-inf -> +-FLT_MAX), d = amax / 127 in fp32
 * (stepped down while 127 d overflows), quants round(x * (127 / amax)) with halves away from zero,
 * clamped to [-127, 127] (a NaN product, 0 * inf when amax is tiny, gives -127 as kn_round_clamp
 * does), bsums the exact sums of 16 quants. */
static void quantize_q8_k(const float *src, void *dst, int64_t n) {
    kn_block_q8_k *b = dst;
    const __m512 big = _mm512_set1_ps(FLT_MAX), nbig = _mm512_set1_ps(-FLT_MAX);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        __m512 v[16];
        __m512 am = _mm512_setzero_ps();
        for (int g = 0; g < 16; g++) {
            __m512 x = _mm512_loadu_ps(src + 16 * g);
            x = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x); /* NaN -> 0 */
            x = _mm512_min_ps(_mm512_max_ps(x, nbig), big);                  /* +-inf -> +-FLT_MAX */
            v[g] = x;
            am = _mm512_max_ps(am, _mm512_abs_ps(x));
        }
        const float amax = _mm512_reduce_max_ps(am);
        float d = amax / 127.0f;
        while (isinf(d * 127.0f)) d = nextafterf(d, 0.0f);
        b[i].d = d;
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int g = 0; g < 16; g++) {
            /* max first: MAXPS returns its second operand when the first is NaN */
            const __m512 q = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[g], id), lo), hi);
            __m512 t = _mm512_roundscale_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(q, t)), half, _CMP_GE_OQ);
            const __m512 s1 = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(q), sign),
                                                                  _mm512_castps_si512(one)));
            t = _mm512_mask_add_ps(t, up, t, s1); /* halves (and above) away from zero, as roundf */
            const __m512i qi = _mm512_cvttps_epi32(t);
            _mm_storeu_si128((__m128i *)(b[i].qs + 16 * g), _mm512_cvtepi32_epi8(qi));
            b[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(qi);
        }
    }
}

#pragma GCC pop_options
#endif /* __x86_64__ */

/* Fills the K-format entries of k (called by kn_kernels_init_avx512 only on CPUs with AVX-512 F, BW,
 * VL and VNNI). */
void kn_avx512_init_kquants(kn_kernels *k) {
#if defined(__x86_64__)
    k->gemm[KN_Q4_K] = gemm_q4_k;
    k->gemm[KN_Q5_K] = gemm_q5_k;
    k->gemm[KN_Q6_K] = gemm_q6_k;
    k->quantize[KN_Q8_K] = quantize_q8_k;
#else
    (void)k;
#endif
}
