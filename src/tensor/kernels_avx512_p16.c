/*
 * kernels_avx512_p16.c - AVX-512 VNNI panel kernels for Q4_0, Q8_0, IQ4_NL, MXFP4, MLX8, Q4_K, Q5_K and Q6_K matrices
 * in the 16-row panel layout of pack.h: one weight row per 32-bit lane, so a zmm register holds 4 consecutive codes of
 * 16 rows and one vpdpbusd against 4 activation quants broadcast to every lane advances 16 dot products. The table
 * formats IQ4_NL and MXFP4 are Q4_0's kernel with the nibbles looked up in the format's table plus 128 (vpshufb; their
 * Q8X rows carry the offset 128) and, for MXFP4, E8M0 scales.
 *
 * Per block column b of the panel and token t the kernel forms the exact integer dot product
 *     p = c[t][b] + sum over the 8 dword quads j of vpdpbusd(codes quad j, x quads j broadcast)
 * (c = -off * sum(x quants) turns the unsigned codes into the signed weights, see pack.h), then one
 * float step acc = fma((float)p, dw * dx, acc): exactly the reference vec_dot of quant.h, bit for bit,
 * whatever the number of tokens or panels in the call. Decode (one or two tokens) reads the panels one
 * after the other, each as a single sequential stream (the integer chain split in two so its latency
 * hides under the loads; Q4_K prefetches 4 groups ahead, Q5_K 2, Q6_K 1, their unpacking being heavier;
 * the K formats' integer sums are per sub-block, scaled, see their tiles). Prefill takes up to two panels
 * and 8 tokens per call (a long prefill 5, TILE_PF; the K formats at most 5 at a time) with the
 * quads outer: each activation broadcast then feeds two vpdpbusd, which halves the loads per multiply
 * that bound a one-panel tile. The 8-token calls are for a few tokens in all (kn_p16_tile): a server's
 * 8-row decode step streams every panel from memory once, with all its tokens' work to hide it under.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI      static inline __attribute__((always_inline))
#define UNROLL  _Pragma("GCC unroll 8")
#define TILE_T  8 /* tokens per kernel call at most */
#define TILE_PF 5 /* tokens per call of a long prefill (p16_tile_pf); Q4_K's widest gemm */

/* A prefill tile's first pass over its panels streams them from memory; the token tiles after it (the
 * matmul runs every token tile of a block over the same panels, kn_matmul) find them in the caches. With
 * few tokens (a server's batched decode step: 8 rows are an 8-token prefill) that stream is most of the
 * time, so the first pass prefetches PF_PREFILL bytes ahead of each block column (one pass over both
 * halves: it reads memory all along; the AVX2 kernels' half passes prefetch the next panel instead).
 * kn_p16_first_call(w) (pack.h) tells it by the panels' address. The later passes do not prefetch: on
 * 512 tokens that cost 5-10%. Every format does (Q4_K a piece of its group per sub-block); Q8_0, which
 * gained nothing from it while an 8-token run took 5 + 3 tokens, runs 1.2x faster with it in one 8-token
 * pass (and 0.8x without). */
#define PF_PREFILL 2048

/* The 8 code vectors of the nibble codes at qs (pack.h; a Q4_0 group's after d): W[j] holds the codes of
 * elements 4j .. 4j+3 of each row's block, unsigned 0..15. */
AI void codes_nib(const uint8_t *qs, __m512i W[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    UNROLL for (int j = 0; j < 4; j++) {
        const __m512i p = _mm512_loadu_si512(qs + 64 * j);
        W[j] = _mm512_and_si512(p, m4);
        W[j + 4] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
    }
}
AI void codes_q4_0(const uint8_t *g, __m512i W[8]) { codes_nib(g + 32, W); }
/* Q4_1's: after d and m, unsigned 0..15 (the codes of d * q + m). */
AI void codes_q4_1(const uint8_t *g, __m512i W[8]) { codes_nib(g + 64, W); }

/* The 8 code vectors of a Q8_0 group: stored ready to use (w + 128). */
AI void codes_q8_0(const uint8_t *g, __m512i W[8]) {
    UNROLL for (int j = 0; j < 8; j++) W[j] = _mm512_loadu_si512(g + 32 + 64 * j);
}

/* The 8 code vectors of an MLX8 / MLX8_F32 group: the unsigned q as stored, after d and m. */
AI void codes_mlx8(const uint8_t *g, __m512i W[8]) {
    UNROLL for (int j = 0; j < 8; j++) W[j] = _mm512_loadu_si512(g + 64 + 64 * j);
}
AI void codes_mlx8_f32(const uint8_t *g, __m512i W[8]) {
    UNROLL for (int j = 0; j < 8; j++) W[j] = _mm512_loadu_si512(g + 128 + 64 * j);
}
AI __m512i code1_mlx8(const uint8_t *g, int j) { return _mm512_loadu_si512(g + 64 + 64 * j); }
AI __m512i code1_mlx8_f32(const uint8_t *g, int j) { return _mm512_loadu_si512(g + 128 + 64 * j); }

/* Code vector j alone (prefill), of a Q4_0 or Q8_0 group, or of a table format's: its nibbles (after d
 * for IQ4_NL, after e for MXFP4) looked up in the format's table plus 128. */
AI __m512i nib512(const uint8_t *qs, int j) {
    const __m512i v = _mm512_loadu_si512(qs + 64 * (j % 4)), m4 = _mm512_set1_epi8(0x0F);
    return j < 4 ? _mm512_and_si512(v, m4) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
}
AI __m512i table_of(const int8_t *values) {
    const __m128i v = _mm_loadu_si128((const __m128i *)values);
    return _mm512_broadcast_i32x4(_mm_xor_si128(v, _mm_set1_epi8((char)0x80)));
}
AI __m512i code1_q4_0(const uint8_t *g, int j) { return nib512(g + 32, j); }
AI __m512i code1_q4_1(const uint8_t *g, int j) { return nib512(g + 64, j); }
AI __m512i code1_q8_0(const uint8_t *g, int j) { return _mm512_loadu_si512(g + 32 + 64 * j); }
AI __m512i code1_iq4_nl(const uint8_t *g, int j) {
    return _mm512_shuffle_epi8(table_of(kn_iq4nl_values), nib512(g + 32, j));
}
AI __m512i code1_mxfp4(const uint8_t *g, int j) {
    return _mm512_shuffle_epi8(table_of(kn_mxfp4_values), nib512(g + 16, j));
}

/* The 8 code vectors of an IQ4_NL / MXFP4 group. */
AI void codes_iq4_nl(const uint8_t *g, __m512i W[8]) { UNROLL for (int j = 0; j < 8; j++) W[j] = code1_iq4_nl(g, j); }
AI void codes_mxfp4(const uint8_t *g, __m512i W[8]) { UNROLL for (int j = 0; j < 8; j++) W[j] = code1_mxfp4(g, j); }

/* The 16 rows' block scales of the group at g as fp32: fp16 d, fp32 d (MLX8_F32), or half the E8M0 value
 * of the exponent bytes (kn_e8m0_half, exactly). */
AI __m512 dw_f16(const uint8_t *g) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g)); }
AI __m512 dw_f32(const uint8_t *g) { return _mm512_loadu_ps((const float *)g); }
/* The offsets m of an MLX8 (fp16) or MLX8_F32 (fp32) group. */
AI __m512 mw_f16(const uint8_t *g) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32))); }
AI __m512 mw_f32(const uint8_t *g) { return _mm512_loadu_ps((const float *)(g + 64)); }
AI __m512 dw_e8m0(const uint8_t *g) {
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)g));
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23); /* 2^(e - 128), e >= 2 */
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);            /* subnormal, e <= 1 */
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), small, big));
}

/* The exact integer dot product of the 16 rows' block with the activation block at xb (Q8X: the chain
 * starts at its c; Q8X1, ADD_C 0: at 0), the chain of 8 vpdpbusd run as two chains of 4 (integer sums:
 * the result is the same) so that its latency hides under the loads of a decode. */
AI __m512i block_dot(const __m512i W[8], const uint8_t *xb, const int ADD_C) {
    __m512i s0 = ADD_C ? _mm512_set1_epi32(kn_ld_i32(xb + 36)) : _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    UNROLL for (int j = 0; j < 8; j += 2) {
        s0 = _mm512_dpbusd_epi32(s0, W[j], _mm512_set1_epi32(kn_ld_i32(xb + 4 * j)));
        s1 = _mm512_dpbusd_epi32(s1, W[j + 1], _mm512_set1_epi32(kn_ld_i32(xb + 4 * j + 4)));
    }
    return _mm512_add_epi32(s0, s1);
}

/* TILE(n, w, x, xs, out, ldo, NP, NT) specialized for the panel count NP and each token count NT. */
#define P16_NT(TILE, NP)                                                                                               \
    switch (nt) {                                                                                                      \
        case 1: TILE(n, w, x, xs, out, ldo, NP, 1); break;                                                             \
        case 2: TILE(n, w, x, xs, out, ldo, NP, 2); break;                                                             \
        case 3: TILE(n, w, x, xs, out, ldo, NP, 3); break;                                                             \
        case 4: TILE(n, w, x, xs, out, ldo, NP, 4); break;                                                             \
        case 5: TILE(n, w, x, xs, out, ldo, NP, 5); break;                                                             \
        case 6: TILE(n, w, x, xs, out, ldo, NP, 6); break;                                                             \
        case 7: TILE(n, w, x, xs, out, ldo, NP, 7); break;                                                             \
        default: TILE(n, w, x, xs, out, ldo, NP, 8); break;                                                            \
    }

/* The kn_p16_fn NAME over TILE. */
#define P16_ENTRY(NAME, TILE)                                                                                          \
    static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,             \
                     size_t ldo) {                                                                                     \
        if (np >= 2) P16_NT(TILE, 2) else P16_NT(TILE, 1)                                                              \
    }

/* Float steps of a block (MODE), the reference's: M_LEG acc = fma((float)p, dw * dx, acc); M_MIN (Q4_1,
 * Q8X1 rows) acc = acc + ((float)p * (dw * dx) + mw * sx); M_MLX (MLX8, Q8XM rows) the M_LEG step, then
 * acc = fma(xs, fma(dw, 128, mw), acc), the offset term of the centred codes. */
#define M_LEG 0
#define M_MIN 1
#define M_MLX 2

/* One block's float step (MODE) into *acc for the token whose block is xb: p its integer sum, dw and mw
 * the group's scales and offsets (mo = fma(dw, 128, mw) for M_MLX). */
AI void leg_step(const int MODE, __m512 *acc, __m512i p, __m512 dw, __m512 mw, __m512 mo, const uint8_t *xb) {
    const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(kn_ld_f32(xb + 32)));
    if (MODE == M_MIN) {
        const __m512 ms = _mm512_mul_ps(mw, _mm512_set1_ps(kn_ld_f32(xb + 36)));
        *acc = _mm512_add_ps(*acc, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), s), ms));
        return;
    }
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, *acc);
    if (MODE == M_MLX) *acc = _mm512_fmadd_ps(_mm512_set1_ps(kn_ld_f32(xb + 40)), mo, *acc);
}

/* Q4_0 / Q4_1 / Q8_0 / IQ4_NL / MXFP4 / MLX8: NP panels of GB bytes per block column times NT tokens of XB
 * bytes per block (Q8X; Q8X1 for Q4_1, Q8XM for MLX8); CODES unpacks a group, CODE1 one code vector of it,
 * DW its scales, MW its offsets (Q4_1, MLX8); MODE the float steps (leg_step).
 *   NT <= 2 (decode): panel after panel through NAME_dec, the block's 8 code vectors unpacked once
 *     and the integer chain split in two, so a panel streams at the memory's pace (a separate
 *     function: inlined twice into the two-panel entry, decode measured 15% slower).
 *   NT >= 3 (prefill): quad j outer, so each activation broadcast feeds NP vpdpbusd and the NP x NT
 *     integer chains (independent) keep both dot-product pipes busy; loads, not multiplies, bound a
 *     one-panel tile. */
#define DEFINE_P16(NAME, GB, XB, CODES, CODE1, DW, MW, MODE)                                                           \
    static void NAME##_dec(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,           \
                           const int NT) {                                                                             \
        __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};                                                    \
        for (int64_t b = 0; b < n / 32; b++) {                                                                         \
            const uint8_t *g = w + (size_t)b * (GB);                                                                   \
            const __m512 dw = DW(g), mw = MODE != M_LEG ? MW(g) : dw;                                                  \
            const __m512 mo = MODE == M_MLX ? _mm512_fmadd_ps(dw, _mm512_set1_ps(128.0f), mw) : mw;                    \
            __m512i W[8];                                                                                              \
            CODES(g, W);                                                                                               \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                const uint8_t *xb = x + (size_t)t * xs + (size_t)b * (XB);                                             \
                leg_step(MODE, &acc[t], block_dot(W, xb, MODE != M_MIN), dw, mw, mo, xb);                              \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * ldo, acc[t]);                           \
    }                                                                                                                  \
    AI void NAME##_tile(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,              \
                        const int NP, const int NT) {                                                                  \
        const int64_t nb = n / 32;                                                                                     \
        const size_t pb = (size_t)nb * (GB); /* bytes of a panel */                                                    \
        if (NT <= 2) {                                                                                                 \
            for (int q = 0; q < NP; q++) NAME##_dec(n, w + q * pb, x, xs, out + 16 * q, ldo, NT);                      \
            return;                                                                                                    \
        }                                                                                                              \
        const bool stream = kn_p16_first_call(w);                                                                      \
        __m512 acc[KN_P16_PANELS][TILE_T];                                                                             \
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) acc[q][t] = _mm512_setzero_ps();       \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *g = w + (size_t)b * (GB), *xb = x + (size_t)b * (XB);                                       \
            if (stream) UNROLL for (int q = 0; q < NP; q++) kn_prefetch_piece(g + q * pb, GB, PF_PREFILL);             \
            __m512i p[KN_P16_PANELS][TILE_T];                                                                          \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                const __m512i c =                                                                                      \
                    MODE != M_MIN ? _mm512_set1_epi32(kn_ld_i32(xb + t * xs + 36)) : _mm512_setzero_si512();           \
                UNROLL for (int q = 0; q < NP; q++) p[q][t] = c;                                                       \
            }                                                                                                          \
            UNROLL for (int j = 0; j < 8; j++) {                                                                       \
                __m512i W[KN_P16_PANELS];                                                                              \
                UNROLL for (int q = 0; q < NP; q++) W[q] = CODE1(g + q * pb, j);                                       \
                UNROLL for (int t = 0; t < NT; t++) {                                                                  \
                    const __m512i bx = _mm512_set1_epi32(kn_ld_i32(xb + t * xs + 4 * j));                              \
                    UNROLL for (int q = 0; q < NP; q++) p[q][t] = _mm512_dpbusd_epi32(p[q][t], W[q], bx);              \
                }                                                                                                      \
            }                                                                                                          \
            UNROLL for (int q = 0; q < NP; q++) {                                                                      \
                const uint8_t *gq = g + q * pb;                                                                        \
                const __m512 dw = DW(gq), mw = MODE != M_LEG ? MW(gq) : dw;                                            \
                const __m512 mo = MODE == M_MLX ? _mm512_fmadd_ps(dw, _mm512_set1_ps(128.0f), mw) : mw;                \
                UNROLL for (int t = 0; t < NT; t++) leg_step(MODE, &acc[q][t], p[q][t], dw, mw, mo, xb + t * xs);      \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++)                                        \
            _mm512_storeu_ps(out + (size_t)t * ldo + 16 * q, acc[q][t]);                                               \
    }                                                                                                                  \
    P16_ENTRY(NAME, NAME##_tile)

#define GB_(T) (16 * sizeof(T))
DEFINE_P16(p16_q4_0, GB_(kn_block_q4_0), KN_Q8X_BLOCK, codes_q4_0, code1_q4_0, dw_f16, dw_f16, M_LEG)
DEFINE_P16(p16_q4_1, GB_(kn_block_q4_1), KN_Q8X_BLOCK, codes_q4_1, code1_q4_1, dw_f16, mw_f16, M_MIN)
DEFINE_P16(p16_q8_0, GB_(kn_block_q8_0), KN_Q8X_BLOCK, codes_q8_0, code1_q8_0, dw_f16, dw_f16, M_LEG)
DEFINE_P16(p16_iq4_nl, GB_(kn_block_iq4_nl), KN_Q8X_BLOCK, codes_iq4_nl, code1_iq4_nl, dw_f16, dw_f16, M_LEG)
DEFINE_P16(p16_mxfp4, GB_(kn_block_mxfp4), KN_Q8X_BLOCK, codes_mxfp4, code1_mxfp4, dw_e8m0, dw_f16, M_LEG)
DEFINE_P16(p16_mlx8, GB_(kn_block_mlx8), KN_Q8XM_BLOCK, codes_mlx8, code1_mlx8, dw_f16, mw_f16, M_MLX)
DEFINE_P16(p16_mlx8_f32, GB_(kn_block_mlx8_f32), KN_Q8XM_BLOCK, codes_mlx8_f32, code1_mlx8_f32, dw_f32, mw_f32, M_MLX)

/* ---- Q4_K: super-blocks of 256 with 8 sub-blocks, 6-bit scales and mins (quant.h) ---- */

/* Byte k (0..3) of each dword lane of v, as int32 lanes. */
AI __m512i byte_of(__m512i v, const int k) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * k), _mm512_set1_epi32(0xFF));
}

/* Bytes k and k+1 of each dword lane of v as two int16 halves of the lane. */
AI __m512i bytes_as_words(__m512i v, const int k) {
    return _mm512_or_si512(byte_of(v, k), _mm512_slli_epi32(byte_of(v, k + 1), 16));
}

/* The group at g's 6-bit sub-block scales (kn_k_scale_min): sc[0] for sub-blocks 0..3 and sc[1] for
 * 4..7, one byte per sub-block in each row's dword. S0 = scale bytes 0..3, S1 = 4..7, S2 = 8..11. */
AI void q4_k_scales(const uint8_t *g, __m512i sc[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m2 = _mm512_set1_epi8(0x30);
    const __m512i S0 = _mm512_loadu_si512(g + 64), S2 = _mm512_loadu_si512(g + 192);
    sc[0] = _mm512_and_si512(S0, m6);
    sc[1] = _mm512_or_si512(_mm512_and_si512(S2, m4), _mm512_and_si512(_mm512_srli_epi32(S0, 2), m2));
}

/* The group at g's 6-bit mins as int16 pairs mp[k] = (m[2k], m[2k+1]) for vpdpwssd. */
AI void q4_k_mins(const uint8_t *g, __m512i mp[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m6 = _mm512_set1_epi8(0x3F), m2 = _mm512_set1_epi8(0x30);
    const __m512i S1 = _mm512_loadu_si512(g + 128), S2 = _mm512_loadu_si512(g + 192);
    const __m512i mn0 = _mm512_and_si512(S1, m6);
    const __m512i mn1 =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(S2, 4), m4), _mm512_and_si512(_mm512_srli_epi32(S1, 2), m2));
    mp[0] = bytes_as_words(mn0, 0), mp[1] = bytes_as_words(mn0, 2), mp[2] = bytes_as_words(mn1, 0),
    mp[3] = bytes_as_words(mn1, 2);
}

/* The fp16 scales d and dmin of the group at g (16 rows each) as fp32. */
AI void q4_k_d(const uint8_t *g, __m512 *dw, __m512 *dmin) {
    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
    *dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32)));
}

/* The float step of one super-block for the token whose Q8KX block is xb, given its integer sum sumi
 * and the group's mins mp and scales dw, dmin:
 *   summ = sum_j m[j] * bs[j];  sa = fma((float)sumi, d * xd, sa);  sm = fma((float)summ, dmin * xd, sm) */
AI void q4_k_step(const __m512i mp[4], __m512 dw, __m512 dmin, __m512i sumi, const uint8_t *xb, __m512 *sa,
                  __m512 *sm) {
    __m512i summ = _mm512_setzero_si512();
    UNROLL for (int k = 0; k < 4; k++) summ =
        _mm512_dpwssd_epi32(summ, mp[k], _mm512_set1_epi32(kn_ld_i32(xb + 260 + 4 * k)));
    const __m512 xd = _mm512_set1_ps(kn_ld_f32(xb + 256));
    *sa = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dw, xd), *sa);
    *sm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(dmin, xd), *sm);
}

/* Q5_K: the codes W of sub-block s with bit 4 set where bit s of the qh bytes H is (the nibbles leave it
 * clear, so an add is an or). */
AI __m512i k5_high(__m512i W, __m512i H, int s) {
    const __mmask64 b = _mm512_test_epi8_mask(H, _mm512_set1_epi8((char)(1 << s)));
    return _mm512_mask_add_epi8(W, b, W, _mm512_set1_epi8(0x10));
}

/* Bytes of a Q4_K / Q5_K group (pack.h) and the offset of its qs vectors. */
#define GB_K45(Q5) (16 * ((Q5) ? sizeof(kn_block_q5_k) : sizeof(kn_block_q4_k)))
#define QS_K45(Q5) ((Q5) ? 768 : 256)

/* The super-block group at g (pack.h; Q5 selects Q5_K's, whose codes take a fifth bit from qh) times NT
 * Q8KX activation rows:
 *   sumi = sum_j sc[j] * (exact dot of sub-block j)        (vpdpbusd chains, vpmulld)
 *   summ = sum_j m[j] * bs[j]                              (vpdpwssd on int16 pairs)
 *   sa = fma((float)sumi, d * xd, sa); sm = fma((float)summ, dmin * xd, sm)
 * as the reference kn_q4_k_vec_dot_q8_k / kn_q5_k_vec_dot_q8_k, whose result is sa - sm. */
AI void q4_k_tile(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NT,
                  const int Q5) {
    __m512 sa[TILE_T], sm[TILE_T];
    UNROLL for (int t = 0; t < NT; t++) sa[t] = sm[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t sb = 0; sb < n / 256; sb++) {
        const uint8_t *g = w + (size_t)sb * GB_K45(Q5);
        /* the group 4 ahead: measured +11-18% on Q4_K decode (none on Q4_0); Q5_K's (2816 bytes) 2 ahead:
         * 1.25-1.37x the plain kernel's decode of a 2048-wide matrix, 0.80-1.08x 4 ahead (Zen 5) */
        if (sb + (Q5 ? 2 : 4) < n / 256)
            for (int c = 0; c < (int)GB_K45(Q5); c += 64)
                _mm_prefetch((const char *)(g + (Q5 ? 2 : 4) * GB_K45(Q5) + c), _MM_HINT_T0);
        __m512i sc[2], mp[4];
        q4_k_scales(g, sc);
        __m512i sumi[TILE_T];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) { /* sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles) */
            const __m512i sca = byte_of(sc[c / 2], 2 * (c % 2)), scb = byte_of(sc[c / 2], 2 * (c % 2) + 1);
            __m512i Wl[8], Wh[8];
            UNROLL for (int q = 0; q < 8; q++) {
                const __m512i p = _mm512_loadu_si512(g + QS_K45(Q5) + 64 * (8 * c + q));
                Wl[q] = _mm512_and_si512(p, m4);
                Wh[q] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
                if (Q5) {
                    const __m512i H = _mm512_loadu_si512(g + 256 + 64 * q);
                    Wl[q] = k5_high(Wl[q], H, 2 * c), Wh[q] = k5_high(Wh[q], H, 2 * c + 1);
                }
            }
            UNROLL for (int t = 0; t < NT; t++) {
                const uint8_t *xq = x + (size_t)t * xs + (size_t)sb * KN_Q8KX_BLOCK + 64 * c;
                __m512i il = _mm512_setzero_si512(), ih = _mm512_setzero_si512();
                UNROLL for (int q = 0; q < 8; q++) {
                    il = _mm512_dpbusd_epi32(il, Wl[q], _mm512_set1_epi32(kn_ld_i32(xq + 4 * q)));
                    ih = _mm512_dpbusd_epi32(ih, Wh[q], _mm512_set1_epi32(kn_ld_i32(xq + 32 + 4 * q)));
                }
                sumi[t] = _mm512_add_epi32(sumi[t],
                                           _mm512_add_epi32(_mm512_mullo_epi32(il, sca), _mm512_mullo_epi32(ih, scb)));
            }
        }
        __m512 dw, dmin;
        q4_k_mins(g, mp);
        q4_k_d(g, &dw, &dmin);
        UNROLL for (int t = 0; t < NT; t++)
            q4_k_step(mp, dw, dmin, sumi[t], x + (size_t)t * xs + (size_t)sb * KN_Q8KX_BLOCK, &sa[t], &sm[t]);
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * ldo, _mm512_sub_ps(sa[t], sm[t]));
}

/* Prefill form of q4_k_tile for NP panels x NT tokens (NT >= 3): sub-block s and quad j outer, so each
 * activation broadcast feeds NP vpdpbusd and the NP x NT chains are independent; the same integer sums
 * and float steps as q4_k_tile. */
AI void q4_k_gemm(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NP,
                  const int NT, const int Q5) {
    const size_t GB = GB_K45(Q5), pb = (size_t)(n / 256) * GB;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const bool stream = kn_p16_first_call(w);
    __m512 sa[KN_P16_PANELS][TILE_T], sm[KN_P16_PANELS][TILE_T];
    UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) sa[q][t] = sm[q][t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < n / 256; sb++) {
        const uint8_t *xs0 = x + (size_t)sb * KN_Q8KX_BLOCK;
        __m512i sc[KN_P16_PANELS][2];
        UNROLL for (int q = 0; q < NP; q++) q4_k_scales(w + q * pb + (size_t)sb * GB, sc[q]);
        __m512i sumi[KN_P16_PANELS][TILE_T];
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) sumi[q][t] = _mm512_setzero_si512();
        for (int s8 = 0; s8 < 8; s8++) { /* sub-block: low nibbles of vectors 8(s8/2) .. +7 when even */
            const uint8_t *qs = w + (size_t)sb * GB + QS_K45(Q5) + 64 * 8 * (s8 / 2);
            if (stream)
                UNROLL for (int q = 0; q < NP; q++)
                    kn_prefetch_piece(w + q * pb + (size_t)sb * GB + s8 * (GB / 8), GB / 8, PF_PREFILL);
            __m512i is[KN_P16_PANELS][TILE_T];
            UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) is[q][t] = _mm512_setzero_si512();
            UNROLL for (int j = 0; j < 8; j++) {
                __m512i W[KN_P16_PANELS];
                UNROLL for (int q = 0; q < NP; q++) {
                    const __m512i v = _mm512_loadu_si512(qs + q * pb + 64 * j);
                    W[q] = _mm512_and_si512(s8 % 2 ? _mm512_srli_epi16(v, 4) : v, m4);
                    if (Q5) W[q] = k5_high(W[q], _mm512_loadu_si512(w + q * pb + (size_t)sb * GB + 256 + 64 * j), s8);
                }
                UNROLL for (int t = 0; t < NT; t++) {
                    const __m512i bx = _mm512_set1_epi32(kn_ld_i32(xs0 + t * xs + 32 * s8 + 4 * j));
                    UNROLL for (int q = 0; q < NP; q++) is[q][t] = _mm512_dpbusd_epi32(is[q][t], W[q], bx);
                }
            }
            UNROLL for (int q = 0; q < NP; q++) {
                const __m512i scs = byte_of(sc[q][s8 / 4], s8 % 4);
                UNROLL for (int t = 0; t < NT; t++) sumi[q][t] =
                    _mm512_add_epi32(sumi[q][t], _mm512_mullo_epi32(is[q][t], scs));
            }
        }
        UNROLL for (int q = 0; q < NP; q++) {
            const uint8_t *g = w + q * pb + (size_t)sb * GB;
            __m512i mp[4];
            __m512 dw, dmin;
            q4_k_mins(g, mp);
            q4_k_d(g, &dw, &dmin);
            UNROLL for (int t = 0; t < NT; t++) q4_k_step(mp, dw, dmin, sumi[q][t], xs0 + t * xs, &sa[q][t], &sm[q][t]);
        }
    }
    UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(out + (size_t)t * ldo + 16 * q, _mm512_sub_ps(sa[q][t], sm[q][t]));
}

/* NP panels x NT tokens (NT <= TILE_PF): panel after panel for decode, q4_k_gemm for prefill. */
AI void q4_k_tiles(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NP,
                   const int NT, const int Q5) {
    if (NT >= 3) {
        q4_k_gemm(n, w, x, xs, out, ldo, NP, NT, Q5);
        return;
    }
    const size_t pb = (size_t)(n / 256) * GB_K45(Q5);
    UNROLL for (int q = 0; q < NP; q++) q4_k_tile(n, w + q * pb, x, xs, out + 16 * q, ldo, NT, Q5);
}

/* Q4_K's integer and float accumulators of more than TILE_PF tokens would not fit the registers: the
 * first TILE_PF tokens, then the others. */
AI void q4_k_split(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NP,
                   const int NT, const int Q5) {
    q4_k_tiles(n, w, x, xs, out, ldo, NP, NT < TILE_PF ? NT : TILE_PF, Q5);
    if (NT > TILE_PF) q4_k_tiles(n, w, x + TILE_PF * xs, xs, out + TILE_PF * ldo, ldo, NP, NT - TILE_PF, Q5);
}
#define Q4_K_SPLIT(n, w, x, xs, out, ldo, NP, NT) q4_k_split(n, w, x, xs, out, ldo, NP, NT, 0)
#define Q5_K_SPLIT(n, w, x, xs, out, ldo, NP, NT) q4_k_split(n, w, x, xs, out, ldo, NP, NT, 1)

P16_ENTRY(p16_q4_k, Q4_K_SPLIT)
P16_ENTRY(p16_q5_k, Q5_K_SPLIT)

/* ---- Q6_K: super-blocks of 256 with 16 sub-blocks of 16, 6-bit codes, int8 scales (quant.h) ---- */

/* Byte k (0..3) of each dword lane of v, sign-extended to int32; bytes k and k+1 so, as two int16
 * halves of the lane. */
AI __m512i sbyte_of(__m512i v, const int k) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * k), 24); }
AI __m512i sbytes_as_words(__m512i v, const int k) {
    return _mm512_or_si512(_mm512_and_si512(sbyte_of(v, k), _mm512_set1_epi32(0xFFFF)),
                           _mm512_slli_epi32(sbyte_of(v, k + 1), 16));
}

/* Code vector j (quad j, 0..3) of sub-block s of the group at g (ql | qh | scales | d, pack.h): the low
 * or high nibbles of a ql vector with a 2-bit field of a qh vector above them, unsigned 0..63. */
AI __m512i code_k6(const uint8_t *g, const int s, const int j) {
    const int hh = s / 8, k = (s / 2) % 4, m = 4 * (s % 2) + j;
    const __m512i L = _mm512_loadu_si512(g + 64 * (16 * hh + 8 * (k & 1) + m));
    const __m512i H = _mm512_loadu_si512(g + 2048 + 64 * (8 * hh + m));
    const __m512i lo = _mm512_and_si512(k >> 1 ? _mm512_srli_epi16(L, 4) : L, _mm512_set1_epi8(0x0F));
    const __m512i hi = k == 0   ? _mm512_slli_epi16(H, 4)
                       : k == 1 ? _mm512_slli_epi16(H, 2)
                       : k == 2 ? H
                                : _mm512_srli_epi16(H, 2);
    return _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
}

/* The float step of one super-block for the token whose Q8K6 block is xb, given its integer sum sumi
 * and the group g's scales:
 *   corr = sum_k (sc[2k], sc[2k+1]) . (bsums[2k], bsums[2k+1]);  sa = fma((float)(sumi - 32 corr), d * xd, sa)
 * which makes kn_q6_k_vec_dot_q8_k's integer sum_s sc[s] * (dot_s - 32 bsums[s]) and float step. */
AI void q6_k_step(const uint8_t *g, __m512i sumi, const uint8_t *xb, __m512 *sa) {
    __m512i corr = _mm512_setzero_si512();
    UNROLL for (int k = 0; k < 8; k++) {
        const __m512i sc = sbytes_as_words(_mm512_loadu_si512(g + 3072 + 64 * (k / 2)), 2 * (k % 2));
        corr = _mm512_dpwssd_epi32(corr, sc, _mm512_set1_epi32(kn_ld_i32(xb + 260 + 4 * k)));
    }
    const __m512i si = _mm512_sub_epi32(sumi, _mm512_slli_epi32(corr, 5));
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 3328)));
    *sa = _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(dw, _mm512_set1_ps(kn_ld_f32(xb + 256))), *sa);
}

/* Decode: the panel at w times NT (1 or 2) Q8K6 rows, sumi = sum_s sc[s] * (exact dot of sub-block s)
 * with the sub-blocks in the pairs that share their code bytes: s0 = 8 hh + 2 k + par and s0 + 4 read the
 * low and the high nibbles of the same ql vectors and the 2-bit fields k and k + 2 of the same qh vectors,
 * so each load serves two code vectors (the integer sums do not depend on the order of the sub-blocks).
 * It prefetches a whole group ahead, as the AVX2 panels do. */
AI void q6_k_tile(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NT) {
    const size_t GB = 16 * sizeof(kn_block_q6_k);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 sa[TILE_T];
    UNROLL for (int t = 0; t < NT; t++) sa[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < n / 256; sb++) {
        const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8K6_BLOCK;
        __m512i sumi[TILE_T];
        UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 1") for (int hh = 0; hh < 2; hh++) UNROLL for (int pk = 0; pk < 4; pk++) {
            const int par = pk >> 1, k = pk & 1; /* compile-time: only hh varies at run time */
            const int s0 = 8 * hh + 2 * k + par, s1 = s0 + 4;
            kn_prefetch_piece(g + (4 * hh + pk) * (GB / 8), GB / 8, GB);
            const __m512i ca = sbyte_of(_mm512_loadu_si512(g + 3072 + 64 * (s0 / 4)), s0 % 4);
            const __m512i cb = sbyte_of(_mm512_loadu_si512(g + 3072 + 64 * (s1 / 4)), s1 % 4);
            __m512i Sa[TILE_T], Sb[TILE_T];
            UNROLL for (int t = 0; t < NT; t++) Sa[t] = Sb[t] = _mm512_setzero_si512();
            UNROLL for (int j = 0; j < 4; j++) {
                const int m = 4 * par + j;
                const __m512i L = _mm512_loadu_si512(g + 64 * (16 * hh + 8 * k + m));
                const __m512i H = _mm512_loadu_si512(g + 2048 + 64 * (8 * hh + m));
                const __m512i Ha = k ? _mm512_slli_epi16(H, 2) : _mm512_slli_epi16(H, 4);
                const __m512i Hb = k ? _mm512_srli_epi16(H, 2) : H;
                const __m512i Wa = _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_and_si512(Ha, m30));
                const __m512i Wb =
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4), _mm512_and_si512(Hb, m30));
                UNROLL for (int t = 0; t < NT; t++) {
                    const uint8_t *xq = xsb + t * xs + 4 * j;
                    Sa[t] = _mm512_dpbusd_epi32(Sa[t], Wa, _mm512_set1_epi32(kn_ld_i32(xq + 16 * s0)));
                    Sb[t] = _mm512_dpbusd_epi32(Sb[t], Wb, _mm512_set1_epi32(kn_ld_i32(xq + 16 * s1)));
                }
            }
            UNROLL for (int t = 0; t < NT; t++) sumi[t] = _mm512_add_epi32(
                sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(Sa[t], ca), _mm512_mullo_epi32(Sb[t], cb)));
        }
        UNROLL for (int t = 0; t < NT; t++) q6_k_step(g, sumi[t], xsb + t * xs, &sa[t]);
    }
    UNROLL for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + (size_t)t * ldo, sa[t]);
}

/* Prefill form of q6_k_tile for NP panels x NT tokens (3 <= NT <= TILE_PF): sub-block s and quad j
 * outer, so each activation broadcast feeds NP vpdpbusd; the same integer sums and float steps. */
AI void q6_k_gemm(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NP,
                  const int NT) {
    const size_t GB = 16 * sizeof(kn_block_q6_k), pb = (size_t)(n / 256) * GB;
    const bool stream = kn_p16_first_call(w);
    __m512 sa[KN_P16_PANELS][TILE_T];
    UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) sa[q][t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < n / 256; sb++) {
        const uint8_t *xs0 = x + (size_t)sb * KN_Q8K6_BLOCK;
        __m512i sumi[KN_P16_PANELS][TILE_T];
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) sumi[q][t] = _mm512_setzero_si512();
        for (int s = 0; s < 16; s++) {
            if (stream)
                UNROLL for (int q = 0; q < NP; q++)
                    kn_prefetch_piece(w + q * pb + (size_t)sb * GB + s * (GB / 16), GB / 16, PF_PREFILL);
            __m512i is[KN_P16_PANELS][TILE_T];
            UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) is[q][t] = _mm512_setzero_si512();
            UNROLL for (int j = 0; j < 4; j++) {
                __m512i W[KN_P16_PANELS];
                UNROLL for (int q = 0; q < NP; q++) W[q] = code_k6(w + q * pb + (size_t)sb * GB, s, j);
                UNROLL for (int t = 0; t < NT; t++) {
                    const __m512i bx = _mm512_set1_epi32(kn_ld_i32(xs0 + t * xs + 16 * s + 4 * j));
                    UNROLL for (int q = 0; q < NP; q++) is[q][t] = _mm512_dpbusd_epi32(is[q][t], W[q], bx);
                }
            }
            UNROLL for (int q = 0; q < NP; q++) {
                const __m512i sc =
                    sbyte_of(_mm512_loadu_si512(w + q * pb + (size_t)sb * GB + 3072 + 64 * (s / 4)), s % 4);
                UNROLL for (int t = 0; t < NT; t++) sumi[q][t] =
                    _mm512_add_epi32(sumi[q][t], _mm512_mullo_epi32(is[q][t], sc));
            }
        }
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++)
            q6_k_step(w + q * pb + (size_t)sb * GB, sumi[q][t], xs0 + t * xs, &sa[q][t]);
    }
    UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++)
        _mm512_storeu_ps(out + (size_t)t * ldo + 16 * q, sa[q][t]);
}

/* NP panels x NT tokens: panel after panel for decode, q6_k_gemm for prefill in calls of at most
 * TILE_PF tokens (the accumulators of more would not fit the registers). */
AI void q6_k_tiles(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NP,
                   const int NT) {
    if (NT >= 3) {
        q6_k_gemm(n, w, x, xs, out, ldo, NP, NT < TILE_PF ? NT : TILE_PF);
        if (NT > TILE_PF) q6_k_gemm(n, w, x + TILE_PF * xs, xs, out + TILE_PF * ldo, ldo, NP, NT - TILE_PF);
        return;
    }
    const size_t pb = (size_t)(n / 256) * 16 * sizeof(kn_block_q6_k);
    UNROLL for (int q = 0; q < NP; q++) q6_k_tile(n, w + q * pb, x, xs, out + 16 * q, ldo, NT);
}

P16_ENTRY(p16_q6_k, q6_k_tiles)

/* Fills the panel kernels of k (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI. */
void kn_avx512_init_p16(kn_kernels *k) {
    k->p16_tile_t = TILE_T;
    k->p16_tile_pf = TILE_PF;
    k->p16[KN_Q4_0] = p16_q4_0;
    k->p16[KN_Q4_1] = p16_q4_1;
    k->p16[KN_Q8_0] = p16_q8_0;
    k->p16[KN_IQ4_NL] = p16_iq4_nl;
    k->p16[KN_MXFP4] = p16_mxfp4;
    k->p16[KN_MLX8] = p16_mlx8;
    k->p16[KN_MLX8_F32] = p16_mlx8_f32;
    k->p16[KN_Q4_K] = p16_q4_k;
    k->p16[KN_Q5_K] = p16_q5_k;
    k->p16[KN_Q6_K] = p16_q6_k;
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_p16(kn_kernels *k) { (void)k; }
#endif
