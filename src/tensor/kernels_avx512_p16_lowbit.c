/*
 * kernels_avx512_p16_lowbit.c - AVX-512 VNNI panel kernels (pack.h) for the table formats IQ4_NL, MXFP4
 * (x Q8XC) and IQ4_XS (x Q8KC): one weight row per 32-bit lane, so a zmm register holds 4 consecutive codes
 * of the 16 rows of a panel.
 *
 * A code vector is the nibbles looked up in the format's table plus 128 (unsigned) with vpshufb, once per
 * call, and used by every token of the call; vpdpbusd of it with 4 activation quants broadcast to every
 * lane, started at the activation's offset c[j] (-128 times the sum of those quants, pack.h), gives the
 * exact signed sum. The float steps are the reference's (quant.h), so every output is the reference
 * vec_dot bit for bit, whatever the tile:
 *   IQ4_NL, MXFP4: 16 float lanes per row, lane (b & 1) * 8 + j accumulating fma((float)p_j, s_b, .)
 *     over the blocks b of its parity (p_j the exact sum of quad j, s_b = dw * dx); each lane is a zmm
 *     accumulator over the 16 rows. The blocks are walked in chunks, each chunk in passes over (parity,
 *     a group of quads) with that pass's accumulators in registers, parked in memory between passes; the
 *     scale products of a chunk are formed once before its passes. At the end the 16 lanes are added as
 *     kn_reduce16 does (lane i += lane i + 8, then 4, 2, 1), element-wise over the rows.
 *   IQ4_XS: per super-block the exact S = sum_j (ls_j - 32) * (dot of sub-block j), then
 *     sa = fma((float)S, dw * dx, sa).
 * A call takes up to KN_P16_PANELS panels, one after the other, with all its tokens.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI     static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define TILE_T 5  /* tokens per tile at most (the set's p16_tile_t) */
#define CHUNK  32 /* blocks per chunk of the IQ4_NL / MXFP4 kernels (even) */

AI __m512i bc32(const uint8_t *p) { return _mm512_set1_epi32(kn_ld_i32(p)); }
AI __m512i ld512(const uint8_t *p) { return _mm512_loadu_si512(p); }

/* The lookup table of a format plus 128, for vpshufb in every 128-bit lane. */
AI __m512i table_of(const int8_t *values) {
    const __m128i v = _mm_loadu_si128((const __m128i *)values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
}

/* The table codes (+128) of quad j (elements 4j .. 4j+3 of each row's 32) of the 4 qs vectors at qs. */
AI __m512i codes(const uint8_t *qs, int j, __m512i lut) {
    const __m512i v = ld512(qs + 64 * (j % 4)), m4 = _mm512_set1_epi8(0x0F);
    return _mm512_shuffle_epi8(lut, _mm512_and_si512(j < 4 ? v : _mm512_srli_epi16(v, 4), m4));
}

/* Half the E8M0 values (kn_e8m0_half) of the 16 exponent bytes at p, one per lane. */
AI __m512 e8m0_half16(const uint8_t *p) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), small, big));
}

/* ---- IQ4_NL / MXFP4: groups of GB bytes per block column: scale field | qs (4 vectors) ---- */

/* The panel at w (nb block columns) times NT Q8XC rows, out[t * ldo + l]. MX: MXFP4 (E8M0 scales), else
 * IQ4_NL (fp16). QG: quads per pass. */
AI void nl_tile(int64_t nb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int MX,
                const int NT, const int QG) {
    const size_t GB = 16 * (MX ? sizeof(kn_block_mxfp4) : sizeof(kn_block_iq4_nl)), QO = MX ? 16 : 32;
    const __m512i lut = table_of(MX ? kn_mxfp4_values : kn_iq4nl_values);
    __m512 lane[16][TILE_T], sc[CHUNK][TILE_T];
    UNROLL for (int L = 0; L < 16; L++) UNROLL for (int t = 0; t < NT; t++) lane[L][t] = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < nb; c0 += CHUNK) {
        const int cn = (int)(nb - c0 < CHUNK ? nb - c0 : CHUNK);
        for (int i = 0; i < cn; i++) { /* the scale products s_b of the chunk */
            const uint8_t *g = w + (size_t)(c0 + i) * GB, *xb = x + (size_t)(c0 + i) * KN_Q8XC_BLOCK;
            const __m512 dw = MX ? e8m0_half16(g) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
            UNROLL for (int t = 0; t < NT; t++) sc[i][t] =
                _mm512_mul_ps(dw, _mm512_set1_ps(kn_ld_f32(xb + t * xs + 32)));
        }
        for (int par = 0; par < 2; par++)
            for (int j0 = 0; j0 < 8; j0 += QG) {
                __m512 acc[8][TILE_T];
                UNROLL for (int q = 0; q < QG; q++) UNROLL for (int t = 0; t < NT; t++) acc[q][t] =
                    lane[8 * par + j0 + q][t];
                for (int i = par; i < cn; i += 2) { /* c0 is even: block c0 + i has parity par */
                    const uint8_t *qs = w + (size_t)(c0 + i) * GB + QO, *xb = x + (size_t)(c0 + i) * KN_Q8XC_BLOCK;
                    UNROLL for (int q = 0; q < QG; q++) {
                        const int j = j0 + q;
                        const __m512i W = codes(qs, j, lut);
                        UNROLL for (int t = 0; t < NT; t++) {
                            const uint8_t *xt = xb + t * xs;
                            const __m512i p = _mm512_dpbusd_epi32(bc32(xt + 36 + 4 * j), W, bc32(xt + 4 * j));
                            acc[q][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc[i][t], acc[q][t]);
                        }
                    }
                }
                UNROLL for (int q = 0; q < QG; q++) UNROLL for (int t = 0; t < NT; t++) lane[8 * par + j0 + q][t] =
                    acc[q][t];
            }
    }
    UNROLL for (int t = 0; t < NT; t++) { /* kn_reduce16, lane-wise */
        UNROLL for (int L = 0; L < 8; L++) lane[L][t] = _mm512_add_ps(lane[L][t], lane[L + 8][t]);
        UNROLL for (int L = 0; L < 4; L++) lane[L][t] = _mm512_add_ps(lane[L][t], lane[L + 4][t]);
        UNROLL for (int L = 0; L < 2; L++) lane[L][t] = _mm512_add_ps(lane[L][t], lane[L + 2][t]);
        _mm512_storeu_ps(out + (size_t)t * ldo, _mm512_add_ps(lane[0][t], lane[1][t]));
    }
}

/* Quads per pass for NT tokens: the accumulators of a pass (QG x NT) stay in registers. */
#define NL_QG(NT) ((NT) <= 2 ? 8 : 4)

/* ---- IQ4_XS: super-block groups (pack.h): d | scales_h | scales_l | qs (32 vectors) ---- */

/* The 8 sub-block scales ls_j - 32 of the 16 rows of the group at g, as int32 lanes. */
AI void xs_scales(const uint8_t *g, __m512i ls[8]) {
    const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(g + 32)));
    const __m512i sl = ld512(g + 64);
    UNROLL for (int j = 0; j < 8; j++) {
        const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0x0F));
        const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4);
        ls[j] = _mm512_sub_epi32(_mm512_or_si512(lo, hi), _mm512_set1_epi32(32));
    }
}

/* The panel at w (nsb super-blocks) times NT Q8KC rows: per sub-block j the vpdpbusd chain from c[j],
 * times ls_j into S. */
AI void xs_tile(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int MX,
                const int NT, const int QG) {
    (void)MX, (void)QG;
    const size_t GB = 16 * sizeof(kn_block_iq4_xs);
    const __m512i lut = table_of(kn_iq4nl_values);
    __m512 sa[TILE_T];
    UNROLL for (int t = 0; t < NT; t++) sa[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8KC_BLOCK;
        __m512i ls[8], sumi[TILE_T];
        xs_scales(g, ls);
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        UNROLL for (int j = 0; j < 8; j++) {
            __m512i S[TILE_T];
            UNROLL for (int t = 0; t < NT; t++) S[t] = bc32(xsb + t * xs + 260 + 4 * j);
            UNROLL for (int q = 0; q < 8; q++) {
                const __m512i W = codes(g + 128 + 256 * j, q, lut);
                UNROLL for (int t = 0; t < NT; t++) S[t] =
                    _mm512_dpbusd_epi32(S[t], W, bc32(xsb + t * xs + 32 * j + 4 * q));
            }
            UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(S[t], ls[j]));
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        UNROLL for (int t = 0; t < NT; t++) {
            const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(kn_ld_f32(xsb + t * xs + 256)));
            sa[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), s, sa[t]);
        }
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * ldo, sa[t]);
}

/* ---- entries (kn_p16_fn): every panel, tokens in tiles of at most TILE_T ---- */

#define T_CASE(TILE, MX, N)                                                                                            \
    case N:                                                                                                            \
        TILE(nb, p, xt, xs, o, ldo, MX, N, NL_QG(N));                                                                  \
        break;
#define DEFINE_ENTRY(NAME, TILE, MX, BLOCK_ELEMS, GROUP_BYTES)                                                         \
    static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,             \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / (BLOCK_ELEMS);                                                                          \
        const size_t pb = (size_t)nb * (GROUP_BYTES);                                                                  \
        for (int q = 0; q < np; q++)                                                                                   \
            for (int t0 = 0; t0 < nt; t0 += TILE_T) {                                                                  \
                const uint8_t *p = w + q * pb, *xt = x + (size_t)t0 * xs;                                              \
                float *o = out + (size_t)t0 * ldo + 16 * q;                                                            \
                switch (nt - t0 < TILE_T ? nt - t0 : TILE_T) {                                                         \
                    T_CASE(TILE, MX, 1)                                                                                \
                    T_CASE(TILE, MX, 2)                                                                                \
                    T_CASE(TILE, MX, 3)                                                                                \
                    T_CASE(TILE, MX, 4)                                                                                \
                    default: TILE(nb, p, xt, xs, o, ldo, MX, 5, NL_QG(5)); break;                                      \
                }                                                                                                      \
            }                                                                                                          \
    }

DEFINE_ENTRY(p16_iq4_nl, nl_tile, 0, 32, 16 * sizeof(kn_block_iq4_nl))
DEFINE_ENTRY(p16_mxfp4, nl_tile, 1, 32, 16 * sizeof(kn_block_mxfp4))
DEFINE_ENTRY(p16_iq4_xs, xs_tile, 0, 256, 16 * sizeof(kn_block_iq4_xs))

/* Fills the IQ4_NL, IQ4_XS and MXFP4 panel kernels of k (kernels.h). Called only on CPUs with AVX-512
 * F/BW/VL/VNNI, after kn_avx512_init_p16 (whose p16_tile_t, 5, the kernels take). */
void kn_avx512_init_p16_lowbit(kn_kernels *k) {
    k->p16[KN_IQ4_NL] = p16_iq4_nl;
    k->p16[KN_IQ4_XS] = p16_iq4_xs;
    k->p16[KN_MXFP4] = p16_mxfp4;
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_p16_lowbit(kn_kernels *k) { (void)k; }
#endif
