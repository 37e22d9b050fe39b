/*
 * kernels_avx512_p16_lowbit.c - AVX-512 VNNI panel kernels (pack.h) for IQ4_XS (x Q8KC): one weight row
 * per 32-bit lane, so a zmm register holds 4 consecutive codes of the 16 rows of a panel. (IQ4_NL and
 * MXFP4, blocks of 32 with one scale, are Q4_0's kernel with a table: kernels_avx512_p16.c.)
 *
 * A code vector is the nibbles looked up in the table plus 128 (unsigned) with vpshufb, once per call,
 * and used by every token of the call; vpdpbusd of it with 4 activation quants broadcast to every lane,
 * started at the activation's offset c[j] (-128 times the sum of those quants, pack.h), gives the exact
 * signed sum of sub-block j. The float steps are the reference's (quant.h), so every output is the
 * reference vec_dot bit for bit, whatever the tile: per super-block the exact
 * S = sum_j (ls_j - 32) * (dot of sub-block j), then sa = fma((float)S, dw * dx, sa).
 * A call takes up to KN_P16_PANELS panels, one after the other, with all its tokens.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <immintrin.h>

#define AI     static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define TILE_T 5 /* tokens per tile at most (the set's p16_tile_pf); a call of more loops over tiles */

AI __m512i bc32(const uint8_t *p) { return _mm512_set1_epi32(kn_ld_i32(p)); }
AI __m512i ld512(const uint8_t *p) { return _mm512_loadu_si512(p); }

/* The IQ4_NL table plus 128, for vpshufb in every 128-bit lane. */
AI __m512i table_of(void) {
    const __m128i v = _mm_loadu_si128((const __m128i *)kn_iq4nl_values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
}

/* The table codes (+128) of quad j (elements 4j .. 4j+3 of each row's 32) of the 4 qs vectors at qs. */
AI __m512i codes(const uint8_t *qs, int j, __m512i lut) {
    const __m512i v = ld512(qs + 64 * (j % 4)), m4 = _mm512_set1_epi8(0x0F);
    return _mm512_shuffle_epi8(lut, _mm512_and_si512(j < 4 ? v : _mm512_srli_epi16(v, 4), m4));
}

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
AI void xs_tile(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NT) {
    const size_t GB = 16 * sizeof(kn_block_iq4_xs);
    const __m512i lut = table_of();
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

#define T_CASE(TILE, N)                                                                                                \
    case N:                                                                                                            \
        TILE(nb, p, xt, xs, o, ldo, N);                                                                                \
        break;
#define DEFINE_ENTRY(NAME, TILE, BLOCK_ELEMS, GROUP_BYTES)                                                             \
    static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,             \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / (BLOCK_ELEMS);                                                                          \
        const size_t pb = (size_t)nb * (GROUP_BYTES);                                                                  \
        for (int q = 0; q < np; q++)                                                                                   \
            for (int t0 = 0; t0 < nt; t0 += TILE_T) {                                                                  \
                const uint8_t *p = w + q * pb, *xt = x + (size_t)t0 * xs;                                              \
                float *o = out + (size_t)t0 * ldo + 16 * q;                                                            \
                switch (nt - t0 < TILE_T ? nt - t0 : TILE_T) {                                                         \
                    T_CASE(TILE, 1)                                                                                    \
                    T_CASE(TILE, 2)                                                                                    \
                    T_CASE(TILE, 3)                                                                                    \
                    T_CASE(TILE, 4)                                                                                    \
                    default: TILE(nb, p, xt, xs, o, ldo, 5); break;                                                    \
                }                                                                                                      \
            }                                                                                                          \
    }

DEFINE_ENTRY(p16_iq4_xs, xs_tile, 256, 16 * sizeof(kn_block_iq4_xs))

/* Fills the IQ4_XS panel kernel of k (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI, after
 * kn_avx512_init_p16 (calls of up to its p16_tile_t tokens, taken in tiles of TILE_T). */
void kn_avx512_init_p16_lowbit(kn_kernels *k) { k->p16[KN_IQ4_XS] = p16_iq4_xs; }

#else /* not x86-64: the set is never selected */
void kn_avx512_init_p16_lowbit(kn_kernels *k) { (void)k; }
#endif
