/*
 * kernels_avx512_lowbit.c - AVX-512 (F, BW, VL, VNNI) GEMM tiles of the low-bit formats Q2_K, Q3_K and
 * IQ4_XS (x Q8_K). Every output is bit-identical to the scalar reference of quant_lowbit.c / quant_nl.c
 * (the float steps of quant.h, the integer parts exact); tests/unit/test_kernels_lowbit.c checks it.
 * (IQ4_NL and MXFP4, blocks of 32 with one scale, run Q4_0's kernels with a table:
 * kernels_avx512_legacy.c.)
 *
 * The scheme is that of the AVX2 file (kernels_avx2_lowbit.c) on 64-byte vectors: each weight row's
 * block is decoded once for all tokens of the tile. Vector k holds elements 64k .. 64k+63 (four
 * Q2_K/Q3_K sub-blocks of 16 or two IQ4_XS sub-blocks of 32); vpmaddubsw gives int16 pair sums, vpdpwssd
 * multiplies them by the sub-block scale of their lane (vpermw from the 16 scales) and accumulates in
 * int32. IQ4_XS's signed table values use |code| times the activation with code's sign applied (vpsubb
 * under the mask of negative codes), exact because activation quants are in -127..127 (quant.h).
 * Entries left unset keep the previous set's kernel.
 */
#include "tensor/kernels.h"
#include "tensor/quant.h"

#if defined(__x86_64__)
#include <string.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
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

KI int32_t hsum256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

KI int32_t hsum512(__m512i v) {
    return hsum256(_mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

/* Low nibbles and high nibbles of two 16-byte groups a, b as [lo(a) | hi(a) | lo(b) | hi(b)]: the
 * indices of elements 0..31 of group a, then of group b (legacy nibble layout). */
KI __m512i nibbles2(__m128i a, __m128i b) {
    const __m256i raw = _mm256_set_m128i(b, a), m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); /* lo(a) lo(b) hi(a) hi(b) */
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

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
    __m512i q[4];     /* Q2_K, Q3_K: unsigned quants (Q3_K: q + 4); IQ4_XS: |table value| */
    __mmask64 neg[4]; /* IQ4_XS: the negative table values */
    __m512i s[4];     /* int16 lane i of vector k: the scale of element 64k + 2i's sub-block */
    __m256i s16;      /* Q2_K: the 16 mins; Q3_K: the 16 scales sc - 32 (int16 lanes) */
    float d, dmin;    /* fp16 super-block scales */
} row_lb;

/* Vector k of the 2-bit fields of qs[64] (Q2_K, Q3_K): elements 64k + i are bits 2j of qs[32(k / 2) + i % 32]
 * with j = 2(k & 1) + i / 32. */
KI __m512i bits2(const uint8_t *qs, int k) {
    const __m512i src = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * (k >> 1))));
    const __m512i cnt =
        _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * (k & 1))), _mm256_set1_epi16((short)(4 * (k & 1) + 2)), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(src, cnt), _mm512_set1_epi8(3));
}

/* Scale vectors from the 16 int16 sub-block scales (sub-blocks of 16 elements). */
KI void scales16(__m256i sc, __m512i s[4]) {
    const __m512i z = _mm512_castsi256_si512(sc);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i idx = _mm512_inserti64x4(
            _mm512_castsi256_si512(
                _mm256_set_m128i(_mm_set1_epi16((short)(4 * k + 1)), _mm_set1_epi16((short)(4 * k)))),
            _mm256_set_m128i(_mm_set1_epi16((short)(4 * k + 3)), _mm_set1_epi16((short)(4 * k + 2))), 1);
        s[k] = _mm512_permutexvar_epi16(idx, z);
    }
}

KI void decode_row(int kind, const uint8_t *blk, row_lb *R) {
    if (kind == K_Q2) {
        const kn_block_q2_k *b = (const kn_block_q2_k *)blk;
        const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0F);
        for (int k = 0; k < 4; k++) R->q[k] = bits2(b->qs, k);
        scales16(_mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)), R->s);
        R->s16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
        R->d = _cvtsh_ss(b->d);
        R->dmin = _cvtsh_ss(b->dmin);
    } else if (kind == K_Q3) {
        const kn_block_q3_k *b = (const kn_block_q3_k *)blk;
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->hmask));
        for (int k = 0; k < 4; k++) {
            /* bit 2k (elements 64k .. 64k+31) or 2k+1 (the next 32) of hmask[l] adds 4 */
            const __m512i cnt =
                _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * k)), _mm256_set1_epi16((short)(2 * k + 1)), 1);
            const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hm, cnt), _mm512_set1_epi8(1));
            R->q[k] = _mm512_or_si512(bits2(b->qs, k), _mm512_slli_epi16(hb, 2));
        }
        R->s16 = q3k_scales(b->scales);
        scales16(R->s16, R->s);
        R->d = _cvtsh_ss(b->d);
    } else {
        const kn_block_iq4_xs *b = (const kn_block_iq4_xs *)blk;
        const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kn_iq4nl_values));
        /* the 8 scales ls - 32: nibble (j & 1) of scales_l[j / 2] | bits 2j, 2j+1 of scales_h << 4 */
        uint32_t sl;
        memcpy(&sl, b->scales_l, 4);
        const __m128i l = _mm_cvtsi32_si128((int)sl), m4 = _mm_set1_epi8(0x0F);
        const __m128i nib =
            _mm_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4)));
        const __m128i hh =
            _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16((short)b->scales_h), _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)),
                          _mm_set1_epi16(3));
        const __m512i ls =
            _mm512_castsi128_si512(_mm_sub_epi16(_mm_or_si128(nib, _mm_slli_epi16(hh, 4)), _mm_set1_epi16(32)));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i c =
                _mm512_shuffle_epi8(lut, nibbles2(_mm_loadu_si128((const __m128i *)(b->qs + 32 * k)),
                                                  _mm_loadu_si128((const __m128i *)(b->qs + 32 * k + 16))));
            R->q[k] = _mm512_abs_epi8(c);
            R->neg[k] = _mm512_movepi8_mask(c);
            /* int16 lanes 0..15: ls[2k], 16..31: ls[2k+1] */
            const __m512i idx =
                _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * k)), _mm256_set1_epi16((short)(2 * k + 1)), 1);
            R->s[k] = _mm512_permutexvar_epi16(idx, ls);
        }
        R->d = _cvtsh_ss(b->d);
    }
}

/* The exact integer sums of (row, token) for one super-block: *s1 = S (Q3_K, IQ4_XS) or S1 (Q2_K), and
 * for Q2_K *s2 = S2 (quant.h). */
KI void dot_row(int kind, const row_lb *R, const kn_block_q8_k *y, int32_t *s1, int32_t *s2) {
    __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i yq = _mm512_loadu_si512(y->qs + 64 * k);
        if (kind == K_IQ4XS) yq = _mm512_mask_sub_epi8(yq, R->neg[k], _mm512_setzero_si512(), yq);
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(R->q[k], yq), R->s[k]);
    }
    *s1 = hsum512(acc);
    if (kind != K_IQ4XS) {
        const int32_t sb = hsum256(_mm256_madd_epi16(R->s16, _mm256_loadu_si256((const __m256i *)y->bsums)));
        if (kind == K_Q2) *s2 = sb;
        else *s1 -= 4 * sb; /* Q3_K: sum (q + 4) y - 4 sum y per sub-block */
    }
}

#include "tensor/kernels_lowbit.h"

#pragma GCC pop_options

void kn_avx512_init_lowbit(kn_kernels *k) {
    k->gemm[KN_Q2_K] = gemm_q2_k;
    k->gemm[KN_Q3_K] = gemm_q3_k;
    k->gemm[KN_IQ4_XS] = gemm_iq4_xs;
}

#else
void kn_avx512_init_lowbit(kn_kernels *k) { (void)k; }
#endif
