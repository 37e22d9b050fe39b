/*
 * kernels_avx2_p16_lowbit.c - AVX2 panel kernels (pack.h) for the table formats IQ4_NL, MXFP4 (x Q8XC) and
 * IQ4_XS (x Q8KC), in two variants that give the same bits: with AVX-VNNI (256-bit vpdpbusd) and without
 * it (vpmaddubsw + vpmaddwd, every AVX2 CPU).
 *
 * A ymm register holds 4 consecutive codes of the 8 rows of one half of a panel (the lower or upper 32
 * bytes of each 64-byte vector of pack.h), one row per 32-bit lane. A code vector is the nibbles looked
 * up in the format's table with vpshufb, once per call, and used by every token of the call:
 *   VNNI:  the table values plus 128 (unsigned); vpdpbusd started at the activation's offset c[j]
 *          (-128 times the sum of the quants it multiplies, pack.h) gives the exact signed sum;
 *   plain: the signed table values w; vpmaddubsw(|w|, sign(x, w)) gives exact int16 pairs (activation
 *          quants are in -127..127, quant.h), vpmaddwd by 1 (or by the sub-block scale) the int32 sums.
 * Numerics (quant.h), so that every output is the reference vec_dot bit for bit:
 *   IQ4_NL, MXFP4: the reference keeps 16 float lanes per row, lane (b & 1) * 8 + j accumulating
 *     fma((float)p_j, s_b, .) over the blocks b of its parity, p_j the exact sum of quad j and
 *     s_b = dw * dx the block's scale product. Here lane L of a row is a vector accumulator over the 8
 *     rows of a half; the 16 lanes x tokens do not fit in registers, so the blocks are walked in chunks
 *     and each chunk in passes over (parity, a group of quads), the accumulators of a pass in registers
 *     and parked in memory between passes (a quad's codes are still looked up once). The scale products
 *     of a chunk are formed once, before its passes. At the end the 16 lanes are added as kn_reduce16
 *     does (lane i += lane i + 8, then 4, 2, 1), element-wise over the rows.
 *   IQ4_XS: per super-block the exact S = sum_j (ls_j - 32) * (dot of sub-block j), then
 *     sa = fma((float)S, dw * dx, sa), as kn_q4_k's panel kernels do.
 * One half (8 rows) at a time with all the tokens of the call; a call takes up to KN_P16_PANELS panels.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI     static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define TILE_T 6  /* tokens per tile at most (the set's p16_tile_t) */
#define CHUNK  32 /* blocks per chunk of the IQ4_NL / MXFP4 kernels (even) */
#define VNNI   __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PLAIN

AI __m256i bc32(const uint8_t *p) { return _mm256_set1_epi32(kn_ld_i32(p)); }
AI __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The lookup table of a format for vpshufb in both 128-bit lanes: the values (plain) or the values plus
 * 128 (VNNI). */
AI __m256i table_of(const int8_t *values, int vnni) {
    const __m128i v = _mm_loadu_si128((const __m128i *)values);
    return _mm256_broadcastsi128_si256(vnni ? _mm_xor_si128(v, _mm_set1_epi8((char)0x80)) : v);
}

/* The table codes of quad j (elements 4j .. 4j+3 of each row's 32) of half h of the 4 qs vectors at qs. */
AI __m256i codes(const uint8_t *qs, int j, int h, __m256i lut) {
    const __m256i v = ld256(qs + 64 * (j % 4) + 32 * h), m4 = _mm256_set1_epi8(0x0F);
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(j < 4 ? v : _mm256_srli_epi16(v, 4), m4));
}

/* Half the E8M0 values (kn_e8m0_half) of 8 exponent bytes at p, one per lane. */
AI __m256 e8m0_half8(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, big, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

/* The exact sum of quad j for one token: W the code vector (A = |W| for plain), x the activation block. */
#define V_QUAD(W, A, xb, j) ((void)(A), _mm256_dpbusd_avx_epi32(bc32((xb) + 36 + 4 * (j)), W, bc32((xb) + 4 * (j))))
#define P_QUAD(W, A, xb, j)                                                                                            \
    _mm256_madd_epi16(_mm256_maddubs_epi16(A, _mm256_sign_epi8(bc32((xb) + 4 * (j)), W)), _mm256_set1_epi16(1))

/* ---- IQ4_NL / MXFP4: groups of GB bytes per block column: scale field (SO bytes) | qs (4 vectors) ---- */

/* NAME##_tile: half h of the panel at w (nb block columns) times NT Q8XC rows, out[t * ldo + i] for the
 * panel's rows 8h + i. MX: MXFP4 (E8M0 scales), else IQ4_NL (fp16). QG: quads per pass. */
#define DEFINE_NL(NAME, ATTR, MX, VN, QUAD)                                                                            \
    ATTR AI void NAME##_tile(int64_t nb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,        \
                             const int h, const int NT, const int QG) {                                                \
        const size_t GB = 16 * (MX ? sizeof(kn_block_mxfp4) : sizeof(kn_block_iq4_nl)), QO = MX ? 16 : 32;             \
        const __m256i lut = table_of(MX ? kn_mxfp4_values : kn_iq4nl_values, VN);                                      \
        __m256 lane[16][TILE_T], sc[CHUNK][TILE_T];                                                                    \
        UNROLL for (int L = 0; L < 16; L++) UNROLL for (int t = 0; t < NT; t++) lane[L][t] = _mm256_setzero_ps();      \
        for (int64_t c0 = 0; c0 < nb; c0 += CHUNK) {                                                                   \
            const int cn = (int)(nb - c0 < CHUNK ? nb - c0 : CHUNK);                                                   \
            for (int i = 0; i < cn; i++) { /* the scale products s_b of the chunk */                                   \
                const uint8_t *g = w + (size_t)(c0 + i) * GB, *xb = x + (size_t)(c0 + i) * KN_Q8XC_BLOCK;              \
                const __m256 dw =                                                                                      \
                    MX ? e8m0_half8(g + 8 * h) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));      \
                UNROLL for (int t = 0; t < NT; t++) sc[i][t] =                                                         \
                    _mm256_mul_ps(dw, _mm256_set1_ps(kn_ld_f32(xb + t * xs + 32)));                                    \
            }                                                                                                          \
            for (int par = 0; par < 2; par++)                                                                          \
                for (int j0 = 0; j0 < 8; j0 += QG) {                                                                   \
                    __m256 acc[8][TILE_T];                                                                             \
                    UNROLL for (int q = 0; q < QG; q++) UNROLL for (int t = 0; t < NT; t++) acc[q][t] =                \
                        lane[8 * par + j0 + q][t];                                                                     \
                    for (int i = (int)((c0 + par) & 1); i < cn; i += 2) {                                              \
                        const uint8_t *qs = w + (size_t)(c0 + i) * GB + QO,                                            \
                                      *xb = x + (size_t)(c0 + i) * KN_Q8XC_BLOCK;                                      \
                        UNROLL for (int q = 0; q < QG; q++) {                                                          \
                            const __m256i W = codes(qs, j0 + q, h, lut), A = VN ? W : _mm256_abs_epi8(W);              \
                            UNROLL for (int t = 0; t < NT; t++) {                                                      \
                                const __m256i p = QUAD(W, A, xb + t * xs, j0 + q);                                     \
                                acc[q][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc[i][t], acc[q][t]);               \
                            }                                                                                          \
                        }                                                                                              \
                    }                                                                                                  \
                    UNROLL for (int q = 0; q < QG; q++) UNROLL for (int t = 0; t < NT; t++)                            \
                        lane[8 * par + j0 + q][t] = acc[q][t];                                                         \
                }                                                                                                      \
        }                                                                                                              \
        UNROLL for (int t = 0; t < NT; t++) { /* kn_reduce16, lane-wise */                                             \
            UNROLL for (int L = 0; L < 8; L++) lane[L][t] = _mm256_add_ps(lane[L][t], lane[L + 8][t]);                 \
            UNROLL for (int L = 0; L < 4; L++) lane[L][t] = _mm256_add_ps(lane[L][t], lane[L + 4][t]);                 \
            UNROLL for (int L = 0; L < 2; L++) lane[L][t] = _mm256_add_ps(lane[L][t], lane[L + 2][t]);                 \
            _mm256_storeu_ps(out + (size_t)t * ldo, _mm256_add_ps(lane[0][t], lane[1][t]));                            \
        }                                                                                                              \
    }

/* Quads per pass for NT tokens: the accumulators of a pass (QG x NT) stay in registers. */
#define NL_QG(NT) ((NT) <= 2 ? 4 : (NT) <= 4 ? 2 : 1)

DEFINE_NL(iq4_nl_v, VNNI, 0, 1, V_QUAD)
DEFINE_NL(iq4_nl_p, PLAIN, 0, 0, P_QUAD)
DEFINE_NL(mxfp4_v, VNNI, 1, 1, V_QUAD)
DEFINE_NL(mxfp4_p, PLAIN, 1, 0, P_QUAD)

/* ---- IQ4_XS: super-block groups (pack.h): d | scales_h | scales_l | qs (32 vectors) ---- */

/* The 8 sub-block scales ls_j - 32 of half h of the group at g, as int32 lanes. */
AI void xs_scales(const uint8_t *g, int h, __m256i ls[8]) {
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * h)));
    const __m256i sl = ld256(g + 64 + 32 * h);
    UNROLL for (int j = 0; j < 8; j++) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0x0F));
        const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4);
        ls[j] = _mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32));
    }
}

/* Sub-block j's contribution for one token: VNNI: sumi += ls * (vpdpbusd chain from c[j]); plain:
 * sumi += vpmaddwd(pairs, ls in both int16 halves) quad by quad. */
#define DEFINE_XS(NAME, ATTR, VN)                                                                                      \
    ATTR AI void NAME##_tile(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,       \
                             const int h, const int NT, const int QG) {                                                \
        (void)QG;                                                                                                      \
        const size_t GB = 16 * sizeof(kn_block_iq4_xs);                                                                \
        const __m256i lut = table_of(kn_iq4nl_values, VN);                                                             \
        __m256 sa[TILE_T];                                                                                             \
        UNROLL for (int t = 0; t < NT; t++) sa[t] = _mm256_setzero_ps();                                               \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                         \
            const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8KC_BLOCK;                             \
            __m256i ls[8], sumi[TILE_T];                                                                               \
            xs_scales(g, h, ls);                                                                                       \
            UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm256_setzero_si256();                                      \
            UNROLL for (int j = 0; j < 8; j++) {                                                                       \
                const __m256i ls16 =                                                                                   \
                    _mm256_or_si256(_mm256_and_si256(ls[j], _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(ls[j], 16)); \
                __m256i S[TILE_T];                                                                                     \
                UNROLL for (int t = 0; t < NT; t++) S[t] = VN ? bc32(xsb + t * xs + 260 + 4 * j) : sumi[t];            \
                UNROLL for (int q = 0; q < 8; q++) {                                                                   \
                    const __m256i W = codes(g + 128 + 256 * j, q, h, lut), A = VN ? W : _mm256_abs_epi8(W);            \
                    UNROLL for (int t = 0; t < NT; t++) {                                                              \
                        const __m256i bx = bc32(xsb + t * xs + 32 * j + 4 * q);                                        \
                        if (VN) S[t] = _mm256_dpbusd_avx_epi32(S[t], W, bx);                                           \
                        else {                                                                                         \
                            S[t] = _mm256_add_epi32(                                                                   \
                                S[t], _mm256_madd_epi16(_mm256_maddubs_epi16(A, _mm256_sign_epi8(bx, W)), ls16));      \
                            KN_CHAIN(S[t]);                                                                            \
                        }                                                                                              \
                    }                                                                                                  \
                }                                                                                                      \
                UNROLL for (int t = 0; t < NT; t++) sumi[t] =                                                          \
                    VN ? _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(S[t], ls[j])) : S[t];                            \
            }                                                                                                          \
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));                         \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(kn_ld_f32(xsb + t * xs + 256)));                     \
                sa[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]), s, sa[t]);                                        \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int t = 0; t < NT; t++) _mm256_storeu_ps(out + (size_t)t * ldo, sa[t]);                            \
    }

DEFINE_XS(iq4_xs_v, VNNI, 1)
DEFINE_XS(iq4_xs_p, PLAIN, 0)

/* ---- entries (kn_p16_fn): every panel, both halves, tokens in tiles of at most TILE_T ---- */

#define T_CASE(NAME, N)                                                                                                \
    case N:                                                                                                            \
        NAME##_tile(nb, p, xt, xs, o, ldo, h, N, NL_QG(N));                                                            \
        break;
#define DEFINE_ENTRY(NAME, ATTR, BLOCK_ELEMS, GROUP_BYTES)                                                             \
    ATTR static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,        \
                          size_t ldo) {                                                                                \
        const int64_t nb = n / (BLOCK_ELEMS);                                                                          \
        const size_t pb = (size_t)nb * (GROUP_BYTES);                                                                  \
        for (int q = 0; q < np; q++)                                                                                   \
            for (int h = 0; h < 2; h++)                                                                                \
                for (int t0 = 0; t0 < nt; t0 += TILE_T) {                                                              \
                    const uint8_t *p = w + q * pb, *xt = x + (size_t)t0 * xs;                                          \
                    float *o = out + (size_t)t0 * ldo + 16 * q + 8 * h;                                                \
                    switch (nt - t0 < TILE_T ? nt - t0 : TILE_T) {                                                     \
                        T_CASE(NAME, 1)                                                                                \
                        T_CASE(NAME, 2)                                                                                \
                        T_CASE(NAME, 3)                                                                                \
                        T_CASE(NAME, 4)                                                                                \
                        T_CASE(NAME, 5)                                                                                \
                        default: NAME##_tile(nb, p, xt, xs, o, ldo, h, 6, NL_QG(6)); break;                            \
                    }                                                                                                  \
                }                                                                                                      \
    }

DEFINE_ENTRY(iq4_nl_v, VNNI, 32, 16 * sizeof(kn_block_iq4_nl))
DEFINE_ENTRY(iq4_nl_p, PLAIN, 32, 16 * sizeof(kn_block_iq4_nl))
DEFINE_ENTRY(mxfp4_v, VNNI, 32, 16 * sizeof(kn_block_mxfp4))
DEFINE_ENTRY(mxfp4_p, PLAIN, 32, 16 * sizeof(kn_block_mxfp4))
DEFINE_ENTRY(iq4_xs_v, VNNI, 256, 16 * sizeof(kn_block_iq4_xs))
DEFINE_ENTRY(iq4_xs_p, PLAIN, 256, 16 * sizeof(kn_block_iq4_xs))

/* Fills the IQ4_NL, IQ4_XS and MXFP4 panel kernels of k: the AVX-VNNI ones when vnni (the caller checked
 * the CPU), else the plain AVX2 ones. Called only on CPUs with AVX2, FMA and F16C, after
 * kn_avx2_init_p16 (whose p16_tile_t, 6, the kernels take). */
void kn_avx2_init_p16_lowbit(kn_kernels *k, bool vnni) {
    k->p16[KN_IQ4_NL] = vnni ? iq4_nl_v : iq4_nl_p;
    k->p16[KN_IQ4_XS] = vnni ? iq4_xs_v : iq4_xs_p;
    k->p16[KN_MXFP4] = vnni ? mxfp4_v : mxfp4_p;
}

#else /* not x86-64: the set is never selected */
void kn_avx2_init_p16_lowbit(kn_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
