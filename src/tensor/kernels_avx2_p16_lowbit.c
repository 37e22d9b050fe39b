/*
 * kernels_avx2_p16_lowbit.c - AVX2 panel kernels (pack.h) for IQ4_XS (x Q8KC), in two variants that give
 * the same bits: with AVX-VNNI (256-bit vpdpbusd) and without it (vpmaddubsw + vpmaddwd, every AVX2 CPU).
 * (IQ4_NL and MXFP4, blocks of 32 with one scale, are Q4_0's kernel with a table: kernels_avx2_p16.c.)
 *
 * A ymm register holds 4 consecutive codes of the 8 rows of one half of a panel (the lower or upper 32
 * bytes of each 64-byte vector of pack.h), one row per 32-bit lane. A code vector is the nibbles looked
 * up in the table with vpshufb, once per call, and used by every token of the call:
 *   VNNI:  the table values plus 128 (unsigned); vpdpbusd started at the activation's offset c[j]
 *          (-128 times the sum of the quants it multiplies, pack.h) gives the exact signed sum;
 *   plain: the signed table values w; vpmaddubsw(|w|, sign(x, w)) gives exact int16 pairs (activation
 *          quants are in -127..127, quant.h), vpmaddwd by the sub-block scale the int32 sums.
 * Numerics (quant.h), so that every output is the reference vec_dot bit for bit: per super-block the
 * exact S = sum_j (ls_j - 32) * (dot of sub-block j), then sa = fma((float)S, dw * dx, sa), as the
 * Q4_K panel kernels do. Decode takes both halves (16 rows) of a panel at once, prefill one half (8 rows) at
 * a time with all the tokens of the call; a call takes up to KN_P16_PANELS panels.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <immintrin.h>

#define AI     static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define TILE_T 6 /* tokens per tile at most (the set's p16_tile_t) */
#define VNNI   __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PLAIN

AI __m256i bc32(const uint8_t *p) { return _mm256_set1_epi32(kn_ld_i32(p)); }
AI __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The IQ4_NL table for vpshufb in both 128-bit lanes: the values (plain) or the values plus 128 (VNNI). */
AI __m256i table_of(int vnni) {
    const __m128i v = _mm_loadu_si128((const __m128i *)kn_iq4nl_values);
    return _mm256_broadcastsi128_si256(vnni ? _mm_xor_si128(v, _mm_set1_epi8((char)0x80)) : v);
}

/* The table codes of quad j (elements 4j .. 4j+3 of each row's 32) of half h of the 4 qs vectors at qs. */
AI __m256i codes(const uint8_t *qs, int j, int h, __m256i lut) {
    const __m256i v = ld256(qs + 64 * (j % 4) + 32 * h), m4 = _mm256_set1_epi8(0x0F);
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(j < 4 ? v : _mm256_srli_epi16(v, 4), m4));
}

/* ---- IQ4_XS: super-block groups (pack.h): d | scales_h | scales_l | qs (32 vectors) ---- */

/* The scale ls_j - 32 of sub-block j of half h of the group at g, as int32 lanes. */
AI __m256i xs_scale(const uint8_t *g, int h, int j) {
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * h)));
    const __m256i sl = ld256(g + 64 + 32 * h);
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0x0F));
    const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4);
    return _mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32));
}

/* Decode look-ahead: sub-block j's piece (GB / 8 bytes) of the group PF_AHEAD bytes on (kernels_avx2_p16.c
 * measured 1 KB best for the K formats' groups of a similar size). */
#define PF_AHEAD 1024

/* NAME##_tile: halves h0 .. h0+NH-1 of the panel at w (NH = 2: rows 0..15, else rows 8 h0 ..) times NT
 * Q8KC rows, out[t * ldo + 8 (h - h0) + i]. Sub-block j's contribution for one (half, token): VNNI:
 * sumi += ls * (vpdpbusd chain from c[j]); plain: sumi += vpmaddwd(pairs, ls in both int16 halves) quad by
 * quad. Decode (NH = 2) walks each group once, both halves per quad, prefetching ahead: one sequential
 * stream per panel; the first prefill call over a panel prefetches the next one through pf, as the
 * kernels of kernels_avx2_p16.c do. */
#define DEFINE_XS(NAME, ATTR, VN)                                                                                      \
    ATTR AI void NAME##_tile(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,       \
                             const uint8_t *pf, const int h0, const int NH, const int NT) {                            \
        const size_t GB = 16 * sizeof(kn_block_iq4_xs);                                                                \
        const __m256i lut = table_of(VN);                                                                              \
        __m256 sa[2][TILE_T];                                                                                          \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sa[h][t] = _mm256_setzero_ps();        \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                         \
            const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8KC_BLOCK;                             \
            __m256i sumi[2][TILE_T];                                                                                   \
            UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sumi[h][t] =                       \
                _mm256_setzero_si256();                                                                                \
            _Pragma("GCC unroll 1") for (int j = 0; j < 8; j++) {                                                      \
                if (NH == 2) kn_prefetch_piece(g + j * (GB / 8), GB / 8, PF_AHEAD);                                    \
                else if (pf) kn_prefetch_piece(pf + (size_t)sb * (GB / 2) + j * (GB / 16), GB / 16, 0);                \
                __m256i ls[2], ls16[2], S[2][TILE_T];                                                                  \
                UNROLL for (int h = 0; h < NH; h++) {                                                                  \
                    ls[h] = xs_scale(g, h0 + h, j);                                                                    \
                    ls16[h] = _mm256_or_si256(_mm256_and_si256(ls[h], _mm256_set1_epi32(0xFFFF)),                      \
                                              _mm256_slli_epi32(ls[h], 16));                                           \
                    UNROLL for (int t = 0; t < NT; t++) S[h][t] = VN ? bc32(xsb + t * xs + 260 + 4 * j) : sumi[h][t];  \
                }                                                                                                      \
                UNROLL for (int q = 0; q < 8; q++) {                                                                   \
                    __m256i W[2], A[2];                                                                                \
                    UNROLL for (int h = 0; h < NH; h++) {                                                              \
                        W[h] = codes(g + 128 + 256 * j, q, h0 + h, lut);                                               \
                        A[h] = VN ? W[h] : _mm256_abs_epi8(W[h]);                                                      \
                    }                                                                                                  \
                    UNROLL for (int t = 0; t < NT; t++) {                                                              \
                        const __m256i bx = bc32(xsb + t * xs + 32 * j + 4 * q);                                        \
                        UNROLL for (int h = 0; h < NH; h++) {                                                          \
                            if (VN) S[h][t] = _mm256_dpbusd_avx_epi32(S[h][t], W[h], bx);                              \
                            else {                                                                                     \
                                S[h][t] = _mm256_add_epi32(                                                            \
                                    S[h][t], _mm256_madd_epi16(_mm256_maddubs_epi16(A[h], _mm256_sign_epi8(bx, W[h])), \
                                                               ls16[h]));                                              \
                                KN_CHAIN(S[h][t]);                                                                     \
                            }                                                                                          \
                        }                                                                                              \
                    }                                                                                                  \
                }                                                                                                      \
                UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sumi[h][t] =                   \
                    VN ? _mm256_add_epi32(sumi[h][t], _mm256_mullo_epi32(S[h][t], ls[h])) : S[h][t];                   \
            }                                                                                                          \
            UNROLL for (int h = 0; h < NH; h++) {                                                                      \
                const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * (h0 + h))));              \
                UNROLL for (int t = 0; t < NT; t++) {                                                                  \
                    const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(kn_ld_f32(xsb + t * xs + 256)));                 \
                    sa[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[h][t]), s, sa[h][t]);                           \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++)                                        \
            _mm256_storeu_ps(out + (size_t)t * ldo + 8 * h, sa[h][t]);                                                 \
    }

DEFINE_XS(iq4_xs_v, VNNI, 1)
DEFINE_XS(iq4_xs_p, PLAIN, 0)

/* ---- entries (kn_p16_fn): every panel; decode (nt <= 2) both halves at once, prefill one half at a time
 * with tokens in tiles of at most TILE_T ---- */

#define T_CASE(NAME, N)                                                                                                \
    case N:                                                                                                            \
        NAME##_tile(nb, p, xt, xs, o, ldo, pf, h, 1, N);                                                               \
        break;
#define DEFINE_ENTRY(NAME, ATTR, BLOCK_ELEMS, GROUP_BYTES)                                                             \
    ATTR static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,        \
                          size_t ldo) {                                                                                \
        const int64_t nb = n / (BLOCK_ELEMS);                                                                          \
        const size_t pb = (size_t)nb * (GROUP_BYTES);                                                                  \
        const bool stream = nt > 2 && kn_p16_first_call(w);                                                            \
        for (int q = 0; q < np; q++) {                                                                                 \
            if (nt <= 2) {                                                                                             \
                if (nt == 1) NAME##_tile(nb, w + q * pb, x, xs, out + 16 * q, ldo, NULL, 0, 2, 1);                     \
                else NAME##_tile(nb, w + q * pb, x, xs, out + 16 * q, ldo, NULL, 0, 2, 2);                             \
                continue;                                                                                              \
            }                                                                                                          \
            for (int h = 0; h < 2; h++)                                                                                \
                for (int t0 = 0; t0 < nt; t0 += TILE_T) {                                                              \
                    const uint8_t *p = w + q * pb, *xt = x + (size_t)t0 * xs;                                          \
                    const uint8_t *pf = stream && t0 == 0 ? p + pb + h * (pb / 2) : NULL; /* next panel's half h */    \
                    float *o = out + (size_t)t0 * ldo + 16 * q + 8 * h;                                                \
                    switch (nt - t0 < TILE_T ? nt - t0 : TILE_T) {                                                     \
                        T_CASE(NAME, 1)                                                                                \
                        T_CASE(NAME, 2)                                                                                \
                        T_CASE(NAME, 3)                                                                                \
                        T_CASE(NAME, 4)                                                                                \
                        T_CASE(NAME, 5)                                                                                \
                        default: NAME##_tile(nb, p, xt, xs, o, ldo, pf, h, 1, 6); break;                               \
                    }                                                                                                  \
                }                                                                                                      \
        }                                                                                                              \
    }

DEFINE_ENTRY(iq4_xs_v, VNNI, 256, 16 * sizeof(kn_block_iq4_xs))
DEFINE_ENTRY(iq4_xs_p, PLAIN, 256, 16 * sizeof(kn_block_iq4_xs))

/* Fills the IQ4_XS panel kernel of k: the AVX-VNNI one when vnni (the caller checked the CPU), else the
 * plain AVX2 one. Called only on CPUs with AVX2, FMA and F16C, after kn_avx2_init_p16 (whose
 * p16_tile_t, 6, the kernels take). */
void kn_avx2_init_p16_lowbit(kn_kernels *k, bool vnni) { k->p16[KN_IQ4_XS] = vnni ? iq4_xs_v : iq4_xs_p; }

#else /* not x86-64: the set is never selected */
void kn_avx2_init_p16_lowbit(kn_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
