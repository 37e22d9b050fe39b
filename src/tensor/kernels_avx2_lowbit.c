/*
 * kernels_avx2_lowbit.c - AVX2 (+FMA, F16C) GEMM tiles of the low-bit formats Q2_K, Q3_K and IQ4_XS
 * (x Q8_K). Every output is bit-identical to the scalar reference of quant_lowbit.c / quant_nl.c, which
 * fixes the order of every float operation (quant.h); the integer parts are exact, so only the float
 * steps need to follow the reference, and they do, one (row, token) at a time.
 * tests/unit/test_kernels_lowbit.c checks it. (IQ4_NL and MXFP4, blocks of 32 with one scale, run
 * Q4_0's kernels with a table: kernels_avx2_legacy.c.)
 *
 * Tiles (up to 4 rows x 4 tokens): each weight row's block is decoded once for all tokens of the tile
 * into byte vectors in element order (32 elements each):
 *   Q2_K / Q3_K: unsigned quants (Q3_K as q + 4, 0..7) and per-vector int16 sub-block scales (lanes
 *     0..7 for the first 16 elements, 8..15 for the next 16; scale_pair); vpmaddubsw x activations,
 *     vpmaddwd by the scales, int32 adds, one horizontal sum per super-block. Q3_K's +4 is taken back with the bsums:
 *     S = sum_j (sc_j - 32) (sum (q + 4) y - 4 bsums_j). Q2_K's mins: sum_j m_j bsums_j.
 *   IQ4_XS: the table values (signed) through vpshufb; the products use vpmaddubsw(|code|, sign(code) * y),
 *     exact because activation quants are in -127..127 (quant.h).
 * Entries left unset keep the previous set's kernel.
 */
#include "tensor/kernels.h"
#include "tensor/quant.h"

#if defined(__x86_64__)
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#define KI static inline __attribute__((always_inline))

/* Calls BODY(KIND, nt, ...) with nt as a constant 1..4 (the tile contract's range), so that each copy
 * keeps its per-token accumulators in registers. */
#define TILE_NT(BODY, KIND, ...)                                                                                       \
    switch (nt) {                                                                                                      \
        case 1: BODY(KIND, 1, __VA_ARGS__); break;                                                                     \
        case 2: BODY(KIND, 2, __VA_ARGS__); break;                                                                     \
        case 3: BODY(KIND, 3, __VA_ARGS__); break;                                                                     \
        case 4: BODY(KIND, 4, __VA_ARGS__); break;                                                                     \
        default: break;                                                                                                \
    }

/* Sum of the 8 int32 lanes (exact integers: any order). */
KI int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* The 32 table values of a 16-byte legacy nibble group (element e < 16: low nibble of qs[e], e >= 16:
 * high nibble of qs[e - 16]) in element order. */
KI __m256i table32(const uint8_t *qs, __m128i lut) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(raw, m4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    return _mm256_set_m128i(_mm_shuffle_epi8(lut, hi), _mm_shuffle_epi8(lut, lo));
}

/* Sub-block scales. A row keeps its 16 int16 sub-block scales (sub-block j of 16 elements, Q2_K / Q3_K; or
 * the 8 of 32, IQ4_XS) as two vectors sp[0], sp[1] holding scales 0..7 and 8..15 in both 128-bit halves;
 * vector k of 32 elements takes its scales with one in-lane vpshufb at use: the scale of its first 16
 * elements in int16 lanes 0..7 and of the next 16 in lanes 8..15 (Q2_K, Q3_K: sub-blocks 2k and 2k + 1),
 * or sub-block k's in all 16 (IQ4_XS). Kept as 16 ready vectors they spilled the decoded row to the stack
 * and cost 8 cross-lane vpermd per super-block: decode 1.25x slower (docs/benchmarks.md, 2026-12-05). */
KI void scale_halves(__m256i s16, __m256i sp[2]) {
    sp[0] = _mm256_permute2x128_si256(s16, s16, 0x00);
    sp[1] = _mm256_permute2x128_si256(s16, s16, 0x11);
}
/* The vpshufb index that puts int16 lane a of a 128-bit half in every lane of the low half and lane b in
 * every lane of the high half. */
KI __m256i pick16(int a, int b) {
    return _mm256_set_m128i(_mm_set1_epi16((short)(2 * b | (2 * b + 1) << 8)),
                            _mm_set1_epi16((short)(2 * a | (2 * a + 1) << 8)));
}
KI __m256i scale_pair(const __m256i sp[2], int k) { /* sub-blocks 2k, 2k + 1 of 16 */
    return _mm256_shuffle_epi8(sp[k >> 2], pick16((2 * k) & 7, (2 * k + 1) & 7));
}
KI __m256i scale_one(const __m256i sp[2], int k) { return _mm256_shuffle_epi8(sp[0], pick16(k, k)); } /* 32 */

/* The 16 Q3_K sub-block scales minus 32 as int16 lanes (kn_q3k_scale): low nibbles from bytes 0..7
 * (j < 8: low nibble of byte j, j >= 8: high nibble of byte j - 8), bits 4-5 from bits 2(j / 4) of byte
 * 8 + j % 4, which a 32-bit shift of those 4 bytes by 2(j / 4) brings to byte j. */
KI __m256i q3k_scales(const uint8_t *scales) {
    uint64_t lo8;
    uint32_t h;
    memcpy(&lo8, scales, 8);
    memcpy(&h, scales + 8, 4);
    const __m128i l = _mm_cvtsi64_si128((long long)lo8), m4 = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(l, _mm_srli_epi16(l, 4)), m4);
    const __m128i hi =
        _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)h), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32)));
}

/* ---- Q2_K, Q3_K, IQ4_XS (super-blocks of 256, Q8_K activations) ---- */

enum { K_Q2 = 0, K_Q3 = 1, K_IQ4XS = 2 };

/* One weight row's super-block, decoded for all tokens of the tile. */
typedef struct row_lb {
    __m256i q[8];  /* Q2_K, Q3_K: unsigned quants (Q3_K: q + 4); IQ4_XS: |table value| */
    __m256i c[8];  /* IQ4_XS: the signed table values (for the sign of the activations) */
    __m256i sp[2]; /* the int16 sub-block scales, halves duplicated (scale_halves) */
    __m256i s16;   /* Q2_K: the 16 mins; Q3_K: the 16 scales sc - 32 (int16 lanes) */
    float d, dmin; /* fp16 super-block scales */
} row_lb;

KI void decode_row(int kind, const uint8_t *blk, row_lb *R) {
    const __m256i m3 = _mm256_set1_epi8(3);
    if (kind == K_Q2 || kind == K_Q3) {
        const uint8_t *qs = blk + (kind == K_Q2 ? offsetof(kn_block_q2_k, qs) : offsetof(kn_block_q3_k, qs));
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)qs), q1 = _mm256_loadu_si256((const __m256i *)(qs + 32));
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) /* vector k = elements 32k .. 32k+31: bits 2(k & 3) of qs[32(k / 4) + l] */
            R->q[k] = _mm256_and_si256(_mm256_srli_epi16(k < 4 ? q0 : q1, 2 * (k & 3)), m3);
    }
    if (kind == K_Q2) {
        const kn_block_q2_k *b = (const kn_block_q2_k *)blk;
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0F);
        scale_halves(_mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)), R->sp);
        R->s16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        R->d = _cvtsh_ss(b->d);
        R->dmin = _cvtsh_ss(b->dmin);
    } else if (kind == K_Q3) {
        const kn_block_q3_k *b = (const kn_block_q3_k *)blk;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask), one = _mm256_set1_epi8(1);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) /* bit k of hmask[l] adds 4 */
            R->q[k] = _mm256_or_si256(R->q[k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, k), one), 2));
        R->s16 = q3k_scales(b->scales);
        scale_halves(R->s16, R->sp);
        R->d = _cvtsh_ss(b->d);
    } else {
        const kn_block_iq4_xs *b = (const kn_block_iq4_xs *)blk;
        const __m128i lut = _mm_loadu_si128((const __m128i *)kn_iq4nl_values);
        int16_t ls[8];
        for (int j = 0; j < 8; j++) {
            R->c[j] = table32(b->qs + 16 * j, lut);
            R->q[j] = _mm256_abs_epi8(R->c[j]);
            ls[j] =
                (int16_t)((((b->scales_l[j >> 1] >> (4 * (j & 1))) & 0x0F) | (((b->scales_h >> (2 * j)) & 3) << 4)) -
                          32);
        }
        R->sp[0] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ls));
        R->d = _cvtsh_ss(b->d);
    }
}

/* The exact integer sums of (row, token) for one super-block: *s1 = S (Q3_K, IQ4_XS) or S1 (Q2_K), and
 * for Q2_K *s2 = S2 (quant.h). */
KI void dot_row(int kind, const row_lb *R, const kn_block_q8_k *y, int32_t *s1, int32_t *s2) {
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        __m256i yq = _mm256_loadu_si256((const __m256i *)(y->qs + 32 * k));
        if (kind == K_IQ4XS) yq = _mm256_sign_epi8(yq, R->c[k]);
        const __m256i sc = kind == K_IQ4XS ? scale_one(R->sp, k) : scale_pair(R->sp, k);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(R->q[k], yq), sc));
    }
    *s1 = hsum_i32(acc);
    if (kind != K_IQ4XS) {
        const int32_t sb = hsum_i32(_mm256_madd_epi16(R->s16, _mm256_loadu_si256((const __m256i *)y->bsums)));
        if (kind == K_Q2) *s2 = sb;
        else *s1 -= 4 * sb; /* Q3_K: sum (q + 4) y - 4 sum y per sub-block */
    }
}

#include "tensor/kernels_lowbit.h"

/* Decode (one token) of Q3_K rows: each weight is used once, so nothing is gained by decoding a
 * super-block ahead of its use, and a decoded row (8 code vectors and the scales) spilled to the stack.
 * Here each vector of 32 codes is unpacked where it is multiplied: Q3_K decode 6.4 -> 8.2 GB/s (Q2_K,
 * lighter to unpack, measured faster through gemm_lb). The same integers and the same float steps as
 * gemm_lb, so the same bits. */
KI void dec_q3_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, float *out) {
    const int64_t nb = n / KN_QK_K;
    const kn_block_q8_k *y = (const kn_block_q8_k *)x;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    for (int r = 0; r < nr; r++) {
        const kn_block_q3_k *b = (const kn_block_q3_k *)(const void *)(w + (size_t)r * ws);
        float sa = 0.0f;
        for (int64_t i = 0; i < nb; i++) {
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)b[i].qs);
            const __m256i q1 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32));
            const __m256i hm = _mm256_loadu_si256((const __m256i *)b[i].hmask), s16 = q3k_scales(b[i].scales);
            __m256i sp[2], acc = _mm256_setzero_si256();
            scale_halves(s16, sp);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) { /* as decode_row; bit k of each hmask byte moved to bit 2 (+4) */
                const __m256i hk = k >= 2 ? _mm256_srli_epi16(hm, k - 2) : _mm256_slli_epi16(hm, 2 - k);
                const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(k < 4 ? q0 : q1, 2 * (k & 3)), m3),
                                                  _mm256_and_si256(hk, m4));
                const __m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].qs + 32 * k));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, yq), scale_pair(sp, k)));
            }
            /* S = sum (q + 4) y - 4 sum y per sub-block (dot_row), one horizontal sum */
            const __m256i bs = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)y[i].bsums));
            sa = fmaf((float)hsum_i32(_mm256_sub_epi32(acc, _mm256_slli_epi32(bs, 2))), _cvtsh_ss(b[i].d) * y[i].d, sa);
        }
        out[r] = sa;
    }
}

static void gemm_q3_k_avx2(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,
                           float *out, size_t ldo) {
    if (nt == 1) dec_q3_k(n, w, ws, nr, x, out);
    else gemm_q3_k(n, w, ws, nr, x, xs, nt, out, ldo);
}

#pragma GCC pop_options

void kn_avx2_init_lowbit(kn_kernels *k) {
    k->gemm[KN_Q2_K] = gemm_q2_k;
    k->gemm[KN_Q3_K] = gemm_q3_k_avx2;
    k->gemm[KN_IQ4_XS] = gemm_iq4_xs;
}

#else
void kn_avx2_init_lowbit(kn_kernels *k) { (void)k; }
#endif
