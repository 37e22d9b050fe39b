/*
 * kernels_avx2_p16.c - AVX2 panel kernels (pack.h) for Q4_0, Q4_1, Q8_0, IQ4_NL, MXFP4, MLX8 (MLX8_F32), Q4_K,
 * Q5_K and Q6_K matrices, in two variants that give the same bits: with AVX-VNNI (256-bit vpdpbusd, Alder Lake and
 * later, Zen 5) and without it (vpmaddubsw + vpmaddwd, every AVX2 CPU).
 *
 * A ymm register holds 4 consecutive codes of the 8 rows of one half of a panel (the lower or upper 32
 * bytes of each 64-byte vector of pack.h), one row per 32-bit lane; one integer product of it with 4
 * activation quants broadcast to every lane advances 8 dot products. Per block (or sub-block) and
 * token the kernels form the exact integer sums of the reference (quant.h), then take its float steps
 * per lane, so every output is the reference vec_dot bit for bit, whatever the tile:
 *   VNNI:  a vpdpbusd chain over the quads of a block, started at the exact offset correction
 *          c = -off * sum(x) of the Q8X row (unsigned codes w + off, pack.h; Q4_1's codes are unsigned
 *          as stored: no correction, and its float step adds the min term, acc + (p * (d dx) + m sx));
 *   plain: vpmaddubsw of unsigned codes and signed quants gives int16 pairs, summed in int16 over as
 *          many quads as cannot overflow (codes <= 15: 8 quads, 8 * 2 * 15 * 127 < 2^15; codes <= 31:
 *          4 quads; codes <= 63: 2 quads), then vpmaddwd by 1 (or by the sub-block scale, which also
 *          does the K formats' scale multiply exactly). Q8_0's codes (w + 128) would overflow int16
 *          pairs: its plain kernel multiplies |w| by sign(x, w) (pairs <= 2 * 128 * 127) instead, and
 *          so do IQ4_NL's (table values up to 127; a vpmaddwd per quad) and MXFP4's (values up to 12:
 *          8 quads of pairs <= 2 * 12 * 127 sum in int16, one vpmaddwd per block).
 * MLX8 is Q8_0's kernel with the codes q stored unsigned (q - 128 centred through the offset correction,
 * or flipped for plain) and, per block, the reference's offset term fma(xs, fma(d, 128, m), acc) from the
 * Q8XM row's xs. The table formats IQ4_NL and MXFP4 are Q4_0's kernel with the nibbles looked up in the format's table
 * (vpshufb; plus 128 for VNNI, whose Q8X rows carry the offset 128) and, for MXFP4, E8M0 scales.
 * Shapes: decode (1 or 2 tokens) walks each panel once, both halves per quad, so the panel is one
 * sequential stream, software-prefetched about 1 KB ahead (PF_DIST); prefill (3 .. TILE_T tokens) takes one half at a
 * time with all the tokens, each code vector unpacked once and used by every token (the activation rows stay in L1
 * across halves and panels), the first call over new panels prefetching the next panel (kn_p16_first_call). A call
 * takes up to KN_P16_PANELS panels.
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
#define TILE_T 6 /* tokens per kernel call at most */
#define VNNI   __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PLAIN

/* Decode streams each panel once from memory; the hardware prefetchers alone leave one core at 60-75%
 * of its read bandwidth here (measured on Zen 2, 2026-12-04: docs/benchmarks.md). So a decode tile (and
 * the first half's pass of a prefill tile, which streams the panel when tokens are few) prefetches the bytes PF_DIST
 * ahead of the piece of a group it starts on, a piece of about 300 bytes at a time (a burst of a whole 2304-byte K
 * group at once lost), which gained 10-50% in tg. Q6_K's 3360-byte groups prefetch a whole group ahead: its decode
 * read 14 GB/s at 1024 bytes, 17-18 at 3360, 16 at 5120 (Zen 5, 2026-12-05). */
#define PF_DIST(GB)   ((GB) > 3000 ? (GB) : (GB) > 400 && (GB) < 1000 ? 768 : 1024) /* Q8_0 groups: 768 measured best */
#define PF_PIECES(GB) ((GB) > 400 ? 2 : 1) /* Q4_0 / Q8_0 group; K groups: 8 pieces */
/* Except the decode of the 4-bit legacy groups (Q4_0, Q4_1, IQ4_NL, MXFP4: under 400 bytes) on AMD Zen 5
 * and later (family 0x1A), whose hardware prefetchers keep one core's stream ahead alone: there 1B Q4_0
 * decode ran 1.2x faster (1 and 2 threads) without the software prefetch, Q8_0 level, Q4_K_M and the
 * prefill's first pass slower (2026-12-05, docs/benchmarks.md). Set once by kn_avx2_init_p16. */
static bool g_pf_dec4 = true;
#define PF_DEC(GB) ((GB) >= 400 || g_pf_dec4)

/* A prefill's first call over a pair of panels streams them from memory; the calls after it (the matmul
 * runs every token tile of a block over the same panels, kn_matmul) find them in the caches. With few
 * tokens (a server's batched decode step: 8 rows are a 6-token and a 2-token call) that stream is most
 * of the time, and when only the first half's pass read memory (1 KB ahead, as decode) the core waited
 * on it there and left the memory idle through the other passes. So the first call's passes prefetch the
 * next panel instead, half of its bytes during each half's pass, block for block (the panel after the
 * call's last one is the next call's first: a thread's panels lie in order); the later calls do not
 * prefetch. kn_p16_first_call(w) (pack.h) tells the first call. 8 tokens times a 75 MB matrix ran 1.1x
 * (Q4_0) to 1.3x (Q8_0) faster, 256 tokens level (Zen 5, docs/benchmarks.md 2026-12-06 day). */

AI __m256i bc32(const uint8_t *p) { return _mm256_set1_epi32(kn_ld_i32(p)); }
AI __m256i ld256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI __m256 ld_ph8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* ---- integer engines: S accumulates the exact products of code vectors with broadcast quads ----
 * Each engine is (ZERO, STEP, SUM): S = ZERO; STEP(S, W, A, bx) per quad (A: W's helper vector, |w| for
 * Q8_0 plain, else unused); SUM(S) = the int32 lanes. *_S16: as many steps as int16 holds (see top). */
#define V_ZERO()           _mm256_setzero_si256()
#define V_STEP(S, W, A, B) S = _mm256_dpbusd_avx_epi32(S, W, B)
#define V_SUM(S)           (S)
#define P_STEP(S, W, A, B)                                                                                             \
    do {                                                                                                               \
        S = _mm256_add_epi16(S, _mm256_maddubs_epi16(W, B));                                                           \
        KN_CHAIN(S);                                                                                                   \
    } while (0)
#define P_SUM(S) _mm256_madd_epi16(S, _mm256_set1_epi16(1))
/* MXFP4 plain: W signed (|w| <= 12), A = |W|: the int16 pairs of 8 quads cannot overflow. */
#define Q_STEP(S, W, A, B)                                                                                             \
    do {                                                                                                               \
        S = _mm256_add_epi16(S, _mm256_maddubs_epi16(A, _mm256_sign_epi8(B, W)));                                      \
        KN_CHAIN(S);                                                                                                   \
    } while (0)
/* Q8_0 plain: W holds the signed weights, A = |W|. Every plain step keeps its sum a chain (KN_CHAIN, pack.h). */
#define S_STEP(S, W, A, B)                                                                                             \
    do {                                                                                                               \
        S = _mm256_add_epi32(                                                                                          \
            S, _mm256_madd_epi16(_mm256_maddubs_epi16(A, _mm256_sign_epi8(B, W)), _mm256_set1_epi16(1)));              \
        KN_CHAIN(S);                                                                                                   \
    } while (0)

/* ---- Q4_0 / Q4_1 / Q8_0: groups of GB bytes per block column: d (16 lanes fp16) | m (Q4_1) | codes ---- */

/* Code vector j (elements 4j .. 4j+3 of each row's block) of half h of the group at g; *A its helper.
 * code_nib reads the nibble formats' codes at qs: after d (Q4_0), after d and m (Q4_1). */
AI __m256i code_nib(const uint8_t *qs, int j, int h) {
    const __m256i v = ld256(qs + 64 * (j % 4) + 32 * h), m4 = _mm256_set1_epi8(0x0F);
    return j < 4 ? _mm256_and_si256(v, m4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
}
AI __m256i code_q4_0(const uint8_t *g, int j, int h, __m256i *A) {
    (void)A;
    return code_nib(g + 32, j, h);
}
AI __m256i code_q4_1(const uint8_t *g, int j, int h, __m256i *A) {
    (void)A;
    return code_nib(g + 64, j, h);
}
/* 8-bit codes stored unsigned at qs (Q8_0: w + 128 after d; MLX8: q after d and m, MLX8_F32 after their
 * fp32 d and m): code_u8 as stored (VNNI), code_s8 centred (the top bit flipped: Q8_0's w, MLX8's
 * q - 128) with *A = |code|. */
AI __m256i code_u8(const uint8_t *qs, int j, int h) { return ld256(qs + 64 * j + 32 * h); }
AI __m256i code_s8(const uint8_t *qs, int j, int h, __m256i *A) {
    const __m256i w = _mm256_xor_si256(code_u8(qs, j, h), _mm256_set1_epi8((char)0x80));
    *A = _mm256_abs_epi8(w);
    return w;
}
AI __m256i code_q8_0(const uint8_t *g, int j, int h, __m256i *A) { return (void)A, code_u8(g + 32, j, h); }
AI __m256i code_q8_0s(const uint8_t *g, int j, int h, __m256i *A) { return code_s8(g + 32, j, h, A); }
AI __m256i code_mlx8(const uint8_t *g, int j, int h, __m256i *A) { return (void)A, code_u8(g + 64, j, h); }
AI __m256i code_mlx8s(const uint8_t *g, int j, int h, __m256i *A) { return code_s8(g + 64, j, h, A); }
AI __m256i code_mlx8_f32(const uint8_t *g, int j, int h, __m256i *A) { return (void)A, code_u8(g + 128, j, h); }
AI __m256i code_mlx8_f32s(const uint8_t *g, int j, int h, __m256i *A) { return code_s8(g + 128, j, h, A); }
/* The table formats: the format's values (signed, *A = |w|) or the values plus 128 (_u: VNNI) looked up
 * from the nibbles at qs, after d (IQ4_NL) or after e (MXFP4). */
AI __m256i table_code(const int8_t *values, const uint8_t *qs, int j, int h, __m256i *A, int vnni) {
    const __m128i v = _mm_loadu_si128((const __m128i *)values);
    const __m256i lut = _mm256_broadcastsi128_si256(vnni ? _mm_xor_si128(v, _mm_set1_epi8((char)0x80)) : v);
    const __m256i w = _mm256_shuffle_epi8(lut, code_nib(qs, j, h));
    if (!vnni) *A = _mm256_abs_epi8(w);
    return w;
}
AI __m256i code_iq4_nl(const uint8_t *g, int j, int h, __m256i *A) {
    return table_code(kn_iq4nl_values, g + 32, j, h, A, 0);
}
AI __m256i code_iq4_nl_u(const uint8_t *g, int j, int h, __m256i *A) {
    return table_code(kn_iq4nl_values, g + 32, j, h, A, 1);
}
AI __m256i code_mxfp4(const uint8_t *g, int j, int h, __m256i *A) {
    return table_code(kn_mxfp4_values, g + 16, j, h, A, 0);
}
AI __m256i code_mxfp4_u(const uint8_t *g, int j, int h, __m256i *A) {
    return table_code(kn_mxfp4_values, g + 16, j, h, A, 1);
}

/* The block scales of half h of the group at g as fp32: fp16 d (dw_f16), fp32 d (dw_f32: MLX8_F32), or
 * half the E8M0 value of the exponent bytes (dw_e8m0: kn_e8m0_half, exactly); the second field, the
 * offsets m of Q4_1 and MLX8 (mw_f16) or MLX8_F32 (mw_f32). */
AI __m256 dw_f16(const uint8_t *g, int h) { return ld_ph8(g + 16 * h); }
AI __m256 dw_f32(const uint8_t *g, int h) { return _mm256_loadu_ps((const float *)(g + 32 * h)); }
AI __m256 mw_f16(const uint8_t *g, int h) { return ld_ph8(g + 32 + 16 * h); }
AI __m256 mw_f32(const uint8_t *g, int h) { return _mm256_loadu_ps((const float *)(g + 64 + 32 * h)); }
AI __m256 dw_e8m0(const uint8_t *g, int h) {
    int64_t v;
    memcpy(&v, g + 8 * h, 8);
    const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23); /* 2^(e - 128), e >= 2 */
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);            /* subnormal, e <= 1 */
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, big, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

/* Float steps of a block (MODE): M_LEG acc = fma((float)p, dw * dx, acc); M_MIN (Q4_1, Q8X1 rows)
 * acc = acc + ((float)p * (dw * dx) + mw * sx); M_MLX (MLX8, Q8XM rows) acc = fma((float)p, dw * dx, acc)
 * then acc = fma(xs, fma(dw, 128, mw), acc), the reference's steps. */
#define M_LEG 0
#define M_MIN 1
#define M_MLX 2

/* NAME##_tile: halves h0 .. h0+NH-1 of the panel at w (NH = 2: rows 0..15, else rows 8 h0 ..) times NT
 * activation rows of XB bytes per block, out[t * ldo + 8 (h - h0) + i]. Per block: the exact integer
 * sum p of each (half, token) through the engine (ZERO, STEP, SUM), plus the row's offset correction c
 * when ADD_C, then the float steps of MODE with dw = DW(group, half), mw = MW(group, half). A prefill
 * pass (NH = 1) given pf prefetches GB / 2 bytes from it per block (the next panel's half: see
 * kn_p16_first_call above), as the K tiles below do per sub-block. */
#define DEFINE_LEG(NAME, ATTR, GB, XB, CODE, DW, MW, ZERO, STEP, SUM, ADD_C, MODE)                                     \
    ATTR AI void NAME##_tile(int64_t nb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,        \
                             const uint8_t *pf, const int h0, const int NH, const int NT) {                            \
        __m256 acc[2][TILE_T];                                                                                         \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) acc[h][t] = _mm256_setzero_ps();       \
        for (int64_t b = 0; b < nb; b++) {                                                                             \
            const uint8_t *g = w + (size_t)b * (GB), *xb = x + (size_t)b * (XB);                                       \
            __m256i S[2][TILE_T];                                                                                      \
            UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) S[h][t] = ZERO();                  \
            if (pf) kn_prefetch_piece(pf + (size_t)b * ((GB) / 2), (GB) / 2, 0); /* prefill only */                    \
            UNROLL for (int j = 0; j < 8; j++) {                                                                       \
                if (NH == 2 && PF_DEC(GB) && j % (8 / PF_PIECES(GB)) == 0)                                             \
                    kn_prefetch_piece(g + (j / (8 / PF_PIECES(GB))) * ((GB) / PF_PIECES(GB)), (GB) / PF_PIECES(GB),    \
                                      PF_DIST(GB));                                                                    \
                __m256i W[2], A[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};                                 \
                UNROLL for (int h = 0; h < NH; h++) W[h] = CODE(g, j, h0 + h, &A[h]);                                  \
                UNROLL for (int t = 0; t < NT; t++) {                                                                  \
                    const __m256i bx = bc32(xb + t * xs + 4 * j);                                                      \
                    UNROLL for (int h = 0; h < NH; h++) STEP(S[h][t], W[h], A[h], bx);                                 \
                }                                                                                                      \
            }                                                                                                          \
            UNROLL for (int h = 0; h < NH; h++) {                                                                      \
                const __m256 dw = DW(g, h0 + h), mw = MODE != M_LEG ? MW(g, h0 + h) : dw;                              \
                const __m256 mo = MODE == M_MLX ? _mm256_fmadd_ps(dw, _mm256_set1_ps(128.0f), mw) : mw;                \
                UNROLL for (int t = 0; t < NT; t++) {                                                                  \
                    const uint8_t *xt = xb + t * xs;                                                                   \
                    __m256i p = SUM(S[h][t]);                                                                          \
                    if (ADD_C) p = _mm256_add_epi32(p, bc32(xt + 36));                                                 \
                    const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(kn_ld_f32(xt + 32)));                            \
                    if (MODE == M_MIN) {                                                                               \
                        const __m256 ms = _mm256_mul_ps(mw, _mm256_set1_ps(kn_ld_f32(xt + 36)));                       \
                        acc[h][t] =                                                                                    \
                            _mm256_add_ps(acc[h][t], _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p), s), ms));      \
                    } else acc[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[h][t]);                           \
                    if (MODE == M_MLX) acc[h][t] = _mm256_fmadd_ps(_mm256_set1_ps(kn_ld_f32(xt + 40)), mo, acc[h][t]); \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++)                                        \
            _mm256_storeu_ps(out + (size_t)t * ldo + 8 * h, acc[h][t]);                                                \
    }

#define GB_(T) (16 * sizeof(T))
#define XB_    KN_Q8X_BLOCK
DEFINE_LEG(q4_0_v, VNNI, GB_(kn_block_q4_0), XB_, code_q4_0, dw_f16, dw_f16, V_ZERO, V_STEP, V_SUM, 1, M_LEG)
DEFINE_LEG(q4_1_v, VNNI, GB_(kn_block_q4_1), XB_, code_q4_1, dw_f16, mw_f16, V_ZERO, V_STEP, V_SUM, 0, M_MIN)
DEFINE_LEG(q8_0_v, VNNI, GB_(kn_block_q8_0), XB_, code_q8_0, dw_f16, dw_f16, V_ZERO, V_STEP, V_SUM, 1, M_LEG)
DEFINE_LEG(iq4_nl_v, VNNI, GB_(kn_block_iq4_nl), XB_, code_iq4_nl_u, dw_f16, dw_f16, V_ZERO, V_STEP, V_SUM, 1, M_LEG)
DEFINE_LEG(mxfp4_v, VNNI, GB_(kn_block_mxfp4), XB_, code_mxfp4_u, dw_e8m0, dw_f16, V_ZERO, V_STEP, V_SUM, 1, M_LEG)
DEFINE_LEG(mlx8_v, VNNI, GB_(kn_block_mlx8), KN_Q8XM_BLOCK, code_mlx8, dw_f16, mw_f16, V_ZERO, V_STEP, V_SUM, 1, M_MLX)
DEFINE_LEG(mlx8_f32_v, VNNI, GB_(kn_block_mlx8_f32), KN_Q8XM_BLOCK, code_mlx8_f32, dw_f32, mw_f32, V_ZERO, V_STEP,
           V_SUM, 1, M_MLX)
DEFINE_LEG(q4_0_p, PLAIN, GB_(kn_block_q4_0), XB_, code_q4_0, dw_f16, dw_f16, V_ZERO, P_STEP, P_SUM, 1, M_LEG)
DEFINE_LEG(q4_1_p, PLAIN, GB_(kn_block_q4_1), XB_, code_q4_1, dw_f16, mw_f16, V_ZERO, P_STEP, P_SUM, 0, M_MIN)
DEFINE_LEG(q8_0_p, PLAIN, GB_(kn_block_q8_0), XB_, code_q8_0s, dw_f16, dw_f16, V_ZERO, S_STEP, V_SUM, 0, M_LEG)
DEFINE_LEG(iq4_nl_p, PLAIN, GB_(kn_block_iq4_nl), XB_, code_iq4_nl, dw_f16, dw_f16, V_ZERO, S_STEP, V_SUM, 0, M_LEG)
DEFINE_LEG(mxfp4_p, PLAIN, GB_(kn_block_mxfp4), XB_, code_mxfp4, dw_e8m0, dw_f16, V_ZERO, Q_STEP, P_SUM, 0, M_LEG)
DEFINE_LEG(mlx8_p, PLAIN, GB_(kn_block_mlx8), KN_Q8XM_BLOCK, code_mlx8s, dw_f16, mw_f16, V_ZERO, S_STEP, V_SUM, 0,
           M_MLX)
DEFINE_LEG(mlx8_f32_p, PLAIN, GB_(kn_block_mlx8_f32), KN_Q8XM_BLOCK, code_mlx8_f32s, dw_f32, mw_f32, V_ZERO, S_STEP,
           V_SUM, 0, M_MLX)

/* ---- K formats: super-block groups; per sub-block s the exact sum times the sub-block scale ---- */

/* Byte k of each dword lane of v as int32 (unsigned), and the same in both int16 halves. */
AI __m256i byte_of(__m256i v, int k) { return _mm256_and_si256(_mm256_srli_epi32(v, 8 * k), _mm256_set1_epi32(0xFF)); }
AI __m256i byte_of16(__m256i v, int k) {
    const __m256i b = byte_of(v, k);
    return _mm256_or_si256(b, _mm256_slli_epi32(b, 16));
}
/* Signed byte k of each dword lane as int32, and the same in both int16 halves. */
AI __m256i sbyte_of(__m256i v, int k) { return _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * k), 24); }
AI __m256i sbyte_of16(__m256i v, int k) {
    const __m256i b = sbyte_of(v, k);
    return _mm256_blend_epi16(b, _mm256_slli_epi32(b, 16), 0xAA);
}
/* Bytes k, k+1 of each dword lane as the int16 pair (unsigned), for vpmaddwd with int16 pairs. */
AI __m256i bytes_as_words(__m256i v, int k) {
    return _mm256_or_si256(byte_of(v, k), _mm256_slli_epi32(byte_of(v, k + 1), 16));
}
/* Signed bytes k, k+1 (k even) of each dword lane as an int16 pair. */
AI __m256i sbytes_as_words(__m256i v, int k) {
    const __m256i lo = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8), hi = _mm256_srai_epi16(v, 8); /* b0 b2 | b1 b3 */
    return k == 0 ? _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA)
                  : _mm256_blend_epi16(_mm256_srli_epi32(lo, 16), hi, 0xAA);
}

/* Q4_K / Q5_K group (pack.h) fields of half h: the 6-bit scales sc[0] (sub-blocks 0..3, a byte each) and
 * sc[1] (4..7); the mins as int16 pairs mp[k] = (m[2k], m[2k+1]). */
AI void k4_scales(const uint8_t *g, int h, __m256i sc[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m2 = _mm256_set1_epi8(0x30);
    const __m256i S0 = ld256(g + 64 + 32 * h), S2 = ld256(g + 192 + 32 * h);
    sc[0] = _mm256_and_si256(S0, m6);
    sc[1] = _mm256_or_si256(_mm256_and_si256(S2, m4), _mm256_and_si256(_mm256_srli_epi32(S0, 2), m2));
}
AI void k4_mins(const uint8_t *g, int h, __m256i mp[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x3F), m2 = _mm256_set1_epi8(0x30);
    const __m256i S1 = ld256(g + 128 + 32 * h), S2 = ld256(g + 192 + 32 * h);
    const __m256i mn0 = _mm256_and_si256(S1, m6);
    const __m256i mn1 =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(S2, 4), m4), _mm256_and_si256(_mm256_srli_epi32(S1, 2), m2));
    mp[0] = bytes_as_words(mn0, 0), mp[1] = bytes_as_words(mn0, 2), mp[2] = bytes_as_words(mn1, 0),
    mp[3] = bytes_as_words(mn1, 2);
}

/* Code vector of quad j of sub-block s, half h. Q4_K: nibble s % 2 of qs vector 8 (s / 2) + j (at QS);
 * Q5_K adds bit s of qh vector j (at QH) as bit 4. Q6_K (sub-blocks of 16: s = 0..15, j = 0..3): element
 * 16 s + 4 j = 128 hh + 32 k + 4 m with hh = s / 8, k = (s / 2) % 4, m = 4 (s % 2) + j. */
AI __m256i code_k4(const uint8_t *qs, int s, int j, int h) {
    const __m256i v = ld256(qs + 64 * (8 * (s / 2) + j) + 32 * h), m4 = _mm256_set1_epi8(0x0F);
    return _mm256_and_si256(s % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
}
AI __m256i code_k5(const uint8_t *qs, const uint8_t *qh, int s, int j, int h) {
    const __m256i H = ld256(qh + 64 * j + 32 * h);
    const __m256i hb = _mm256_slli_epi16(_mm256_srli_epi16(H, s), 4); /* bit s -> bit 4 (of each byte, s < 8) */
    return _mm256_or_si256(code_k4(qs, s, j, h), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}
AI __m256i code_k6(const uint8_t *g, int s, int j, int h) {
    const int hh = s / 8, k = (s / 2) % 4, m = 4 * (s % 2) + j;
    const __m256i L = ld256(g + 64 * (16 * hh + 8 * (k & 1) + m) + 32 * h);
    const __m256i H = ld256(g + 2048 + 64 * (8 * hh + m) + 32 * h);
    const __m256i lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(L, 4) : L, _mm256_set1_epi8(0x0F));
    const __m256i hi = k == 0   ? _mm256_slli_epi16(H, 4)
                       : k == 1 ? _mm256_slli_epi16(H, 2)
                       : k == 2 ? H
                                : _mm256_srli_epi16(H, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
}

/* Sub-block scale application: sumi += (exact sum S of the sub-block) * sc, sc the scale vector
 * (VNNI: int32 lanes; plain: int16 halves, the int16 pair sums multiplied by vpmaddwd). */
#define V_SCALE(sumi, S, sc32, sc16) ((void)(sc16), sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(S, sc32)))
#define P_SCALE(sumi, S, sc32, sc16) ((void)(sc32), sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(S, sc16)))

/* Q4_K / Q5_K tile: halves h0 .. h0+NH-1 of the panel at w times NT Q8KX rows (kn_p16_fn outputs).
 * Per super-block and (half, token):
 *   sumi = sum_s sc[s] * (exact dot of sub-block s)  in pieces of QPS quads (engine ZERO/STEP, SCALE)
 *   summ = sum_k madd(mp[k], bs pair k)
 *   sa = fma((float)sumi, d * xd, sa); sm = fma((float)summ, dmin * xd, sm); out = sa - sm
 * as kn_q4_k_vec_dot_q8_k / kn_q5_k_vec_dot_q8_k. */
#define DEFINE_K45(NAME, ATTR, Q5, QPS, ZERO, STEP, SCALE)                                                             \
    ATTR AI void NAME##_tile(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,       \
                             const uint8_t *pf, const int h0, const int NH, const int NT) {                            \
        const size_t GB = 16 * (Q5 ? sizeof(kn_block_q5_k) : sizeof(kn_block_q4_k));                                   \
        __m256 sa[2][TILE_T], sm[2][TILE_T];                                                                           \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sa[h][t] = sm[h][t] =                  \
            _mm256_setzero_ps();                                                                                       \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                         \
            const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8KX_BLOCK;                             \
            const uint8_t *qs = g + (Q5 ? 768 : 256), *qh = g + 256;                                                   \
            __m256i sc[2][2], sumi[2][TILE_T];                                                                         \
            UNROLL for (int h = 0; h < NH; h++) {                                                                      \
                k4_scales(g, h0 + h, sc[h]);                                                                           \
                UNROLL for (int t = 0; t < NT; t++) sumi[h][t] = _mm256_setzero_si256();                               \
            }                                                                                                          \
            /* sub-blocks in pairs, the pair loop rolled (s % 2, the nibble, stays constant): unrolled over all 8,     \
             * GCC hoisted their loads and scales and spilled (Q5_K prefill 1.45x, decode 1.1x rolled) */              \
            _Pragma("GCC unroll 1") for (int s2 = 0; s2 < 8; s2 += 2) UNROLL for (int s1 = 0; s1 < 2; s1++) {          \
                const int s = s2 + s1;                                                                                 \
                if (NH == 2) kn_prefetch_piece(g + s * (GB / 8), GB / 8, PF_DIST(GB));                                 \
                else if (pf) kn_prefetch_piece(pf + (size_t)sb * (GB / 2) + s * (GB / 16), GB / 16, 0);                \
                UNROLL for (int j0 = 0; j0 < 8; j0 += QPS) {                                                           \
                    __m256i S[2][TILE_T];                                                                              \
                    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) S[h][t] = ZERO();          \
                    UNROLL for (int j = j0; j < j0 + QPS; j++) {                                                       \
                        __m256i W[2];                                                                                  \
                        UNROLL for (int h = 0; h < NH; h++) W[h] =                                                     \
                            Q5 ? code_k5(qs, qh, s, j, h0 + h) : code_k4(qs, s, j, h0 + h);                            \
                        UNROLL for (int t = 0; t < NT; t++) {                                                          \
                            const __m256i bx = bc32(xsb + t * xs + 32 * s + 4 * j);                                    \
                            UNROLL for (int h = 0; h < NH; h++) STEP(S[h][t], W[h], W[h], bx);                         \
                        }                                                                                              \
                    }                                                                                                  \
                    UNROLL for (int h = 0; h < NH; h++) {                                                              \
                        const __m256i v = sc[h][s / 4];                                                                \
                        const __m256i s32 = byte_of(v, s % 4), s16 = byte_of16(v, s % 4);                              \
                        UNROLL for (int t = 0; t < NT; t++) SCALE(sumi[h][t], S[h][t], s32, s16);                      \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
            UNROLL for (int h = 0; h < NH; h++) {                                                                      \
                __m256i mp[4];                                                                                         \
                k4_mins(g, h0 + h, mp);                                                                                \
                const __m256 dw = ld_ph8(g + 16 * (h0 + h)), dmin = ld_ph8(g + 32 + 16 * (h0 + h));                    \
                UNROLL for (int t = 0; t < NT; t++) {                                                                  \
                    const uint8_t *xb = xsb + t * xs;                                                                  \
                    __m256i summ = _mm256_madd_epi16(mp[0], bc32(xb + 260));                                           \
                    UNROLL for (int k = 1; k < 4; k++) summ =                                                          \
                        _mm256_add_epi32(summ, _mm256_madd_epi16(mp[k], bc32(xb + 260 + 4 * k)));                      \
                    const __m256 xd = _mm256_set1_ps(kn_ld_f32(xb + 256));                                             \
                    sa[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[h][t]), _mm256_mul_ps(dw, xd), sa[h][t]);       \
                    sm[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_mul_ps(dmin, xd), sm[h][t]);           \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++)                                        \
            _mm256_storeu_ps(out + (size_t)t * ldo + 8 * h, _mm256_sub_ps(sa[h][t], sm[h][t]));                        \
    }

DEFINE_K45(q4_k_v, VNNI, 0, 8, V_ZERO, V_STEP, V_SCALE)
DEFINE_K45(q4_k_p, PLAIN, 0, 8, V_ZERO, P_STEP, P_SCALE)
DEFINE_K45(q5_k_v, VNNI, 1, 8, V_ZERO, V_STEP, V_SCALE)
DEFINE_K45(q5_k_p, PLAIN, 1, 4, V_ZERO, P_STEP, P_SCALE)

/* The end of a Q6_K super-block in K6 tiles (sumi, sa, g, xsb, h0, NH, NT in scope): per (half, token)
 *   corr = sum_k madd((sc[2k], sc[2k+1]), (bsums[2k], bsums[2k+1]));  sa = fma((float)(sumi - 32 corr), d xd, sa) */
#define K6_FINISH                                                                                                      \
    UNROLL for (int h = 0; h < NH; h++) {                                                                              \
        const __m256i V0 = ld256(g + 3072 + 32 * (h0 + h)), V1 = ld256(g + 3072 + 64 + 32 * (h0 + h));                 \
        const __m256i V2 = ld256(g + 3072 + 128 + 32 * (h0 + h)), V3 = ld256(g + 3072 + 192 + 32 * (h0 + h));          \
        const __m256i scp[8] = {sbytes_as_words(V0, 0), sbytes_as_words(V0, 2), sbytes_as_words(V1, 0),                \
                                sbytes_as_words(V1, 2), sbytes_as_words(V2, 0), sbytes_as_words(V2, 2),                \
                                sbytes_as_words(V3, 0), sbytes_as_words(V3, 2)};                                       \
        const __m256 dw = ld_ph8(g + 3328 + 16 * (h0 + h));                                                            \
        UNROLL for (int t = 0; t < NT; t++) {                                                                          \
            const uint8_t *xb = xsb + t * xs;                                                                          \
            __m256i corr = _mm256_madd_epi16(scp[0], bc32(xb + 260));                                                  \
            UNROLL for (int k = 1; k < 8; k++) corr =                                                                  \
                _mm256_add_epi32(corr, _mm256_madd_epi16(scp[k], bc32(xb + 260 + 4 * k)));                             \
            const __m256i si = _mm256_sub_epi32(sumi[h][t], _mm256_slli_epi32(corr, 5));                               \
            const __m256 xd = _mm256_set1_ps(kn_ld_f32(xb + 256));                                                     \
            sa[h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(dw, xd), sa[h][t]);                       \
        }                                                                                                              \
    }

/* Q6_K tile (group: ql | qh | scales | d, pack.h) times NT Q8K6 rows. Per super-block and (half, token):
 *   sumi = sum_s sc[s] * (exact dot of the codes q of sub-block s)   (16 sub-blocks of 4 quads)
 *   corr = sum_k madd((sc[2k], sc[2k+1]), (bsums[2k], bsums[2k+1]));  sumi -= 32 * corr
 *   sa = fma((float)sumi, d * xd, sa)
 * which is kn_q6_k_vec_dot_q8_k's integer sum_s sc[s] * (dot_s - 32 bsums[s]) and float step.
 *   NAME_dec (decode: both halves, 1 or 2 tokens) takes the sub-blocks in pairs that share their code bytes:
 *     s0 = 8 hh + 2 k + par and s0 + 4 (k = 0, 1) read the low and the high nibbles of the same ql vectors
 *     and bit fields k and k + 2 of the same qh vectors, so each load serves two code vectors (half the
 *     loads; the integer sums do not depend on the order of the sub-blocks), and it prefetches as the Q4_K /
 *     Q5_K tiles do, a whole group ahead (PF_DIST): 0.92-1.29x the plain kernel's decode rate where it
 *     was 0.55x without these (AVX2 and AVX-VNNI, Zen 5).
 *   NAME_tile (prefill: one half, up to TILE_T tokens) takes them in order, a sub-block's 4 quads at a time
 *     for every token (the pairs' accumulators would not fit in registers). */
#define DEFINE_K6(NAME, ATTR, QPS, ZERO, STEP, SCALE)                                                                  \
    ATTR AI void NAME##_dec(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,        \
                            const int NT) {                                                                            \
        const int NH = 2, h0 = 0;                                                                                      \
        const size_t GB = 16 * sizeof(kn_block_q6_k);                                                                  \
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);                                       \
        __m256 sa[2][TILE_T];                                                                                          \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sa[h][t] = _mm256_setzero_ps();        \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                         \
            const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8K6_BLOCK;                             \
            __m256i sumi[2][TILE_T];                                                                                   \
            UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sumi[h][t] =                       \
                _mm256_setzero_si256();                                                                                \
            _Pragma("GCC unroll 1") for (int hh = 0; hh < 2; hh++) UNROLL for (int pk = 0; pk < 4; pk++) {             \
                const int par = pk >> 1, k = pk & 1; /* compile-time: only hh varies at run time */                    \
                const int s0 = 8 * hh + 2 * k + par, s1 = s0 + 4;                                                      \
                kn_prefetch_piece(g + (4 * hh + pk) * (GB / 8), GB / 8, PF_DIST(GB));                                  \
                __m256i c32[2][2], c16[2][2];                                                                          \
                UNROLL for (int h = 0; h < NH; h++) {                                                                  \
                    const __m256i v0 = ld256(g + 3072 + 64 * (s0 / 4) + 32 * h);                                       \
                    const __m256i v1 = ld256(g + 3072 + 64 * (s1 / 4) + 32 * h);                                       \
                    c32[h][0] = sbyte_of(v0, s0 % 4), c16[h][0] = sbyte_of16(v0, s0 % 4);                              \
                    c32[h][1] = sbyte_of(v1, s1 % 4), c16[h][1] = sbyte_of16(v1, s1 % 4);                              \
                }                                                                                                      \
                UNROLL for (int j0 = 0; j0 < 4; j0 += QPS) {                                                           \
                    __m256i S[2][2][TILE_T];                                                                           \
                    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) S[h][0][t] = S[h][1][t] =  \
                        ZERO();                                                                                        \
                    UNROLL for (int j = j0; j < j0 + QPS; j++) {                                                       \
                        const int m = 4 * par + j;                                                                     \
                        __m256i Wa[2], Wb[2];                                                                          \
                        UNROLL for (int h = 0; h < NH; h++) {                                                          \
                            const __m256i L = ld256(g + 64 * (16 * hh + 8 * k + m) + 32 * h);                          \
                            const __m256i H = ld256(g + 2048 + 64 * (8 * hh + m) + 32 * h);                            \
                            const __m256i Ha = k ? _mm256_slli_epi16(H, 2) : _mm256_slli_epi16(H, 4);                  \
                            const __m256i Hb = k ? _mm256_srli_epi16(H, 2) : H;                                        \
                            Wa[h] = _mm256_or_si256(_mm256_and_si256(L, m4), _mm256_and_si256(Ha, m30));               \
                            Wb[h] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L, 4), m4),                     \
                                                    _mm256_and_si256(Hb, m30));                                        \
                        }                                                                                              \
                        UNROLL for (int t = 0; t < NT; t++) {                                                          \
                            const __m256i ba = bc32(xsb + t * xs + 16 * s0 + 4 * j);                                   \
                            const __m256i bb = bc32(xsb + t * xs + 16 * s1 + 4 * j);                                   \
                            UNROLL for (int h = 0; h < NH; h++) {                                                      \
                                STEP(S[h][0][t], Wa[h], Wa[h], ba);                                                    \
                                STEP(S[h][1][t], Wb[h], Wb[h], bb);                                                    \
                            }                                                                                          \
                        }                                                                                              \
                    }                                                                                                  \
                    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) {                          \
                        SCALE(sumi[h][t], S[h][0][t], c32[h][0], c16[h][0]);                                           \
                        SCALE(sumi[h][t], S[h][1][t], c32[h][1], c16[h][1]);                                           \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
            K6_FINISH                                                                                                  \
        }                                                                                                              \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++)                                        \
            _mm256_storeu_ps(out + (size_t)t * ldo + 8 * h, sa[h][t]);                                                 \
    }                                                                                                                  \
    ATTR AI void NAME##_tile(int64_t nsb, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,       \
                             const uint8_t *pf, const int h0, const int NH, const int NT) {                            \
        if (NH == 2) {                                                                                                 \
            NAME##_dec(nsb, w, x, xs, out, ldo, NT);                                                                   \
            return;                                                                                                    \
        }                                                                                                              \
        const size_t GB = 16 * sizeof(kn_block_q6_k);                                                                  \
        __m256 sa[2][TILE_T];                                                                                          \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sa[h][t] = _mm256_setzero_ps();        \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                         \
            const uint8_t *g = w + (size_t)sb * GB, *xsb = x + (size_t)sb * KN_Q8K6_BLOCK;                             \
            __m256i sumi[2][TILE_T];                                                                                   \
            UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) sumi[h][t] =                       \
                _mm256_setzero_si256();                                                                                \
            _Pragma("GCC unroll 16") for (int s = 0; s < 16; s++) {                                                    \
                __m256i sc32[2], sc16[2];                                                                              \
                if (pf) kn_prefetch_piece(pf + (size_t)sb * (GB / 2) + s * (GB / 32), GB / 32, 0);                     \
                UNROLL for (int h = 0; h < NH; h++) {                                                                  \
                    const __m256i v = ld256(g + 3072 + 64 * (s / 4) + 32 * (h0 + h));                                  \
                    sc32[h] = sbyte_of(v, s % 4), sc16[h] = sbyte_of16(v, s % 4);                                      \
                }                                                                                                      \
                UNROLL for (int j0 = 0; j0 < 4; j0 += QPS) {                                                           \
                    __m256i S[2][TILE_T];                                                                              \
                    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++) S[h][t] = ZERO();          \
                    UNROLL for (int j = j0; j < j0 + QPS; j++) {                                                       \
                        __m256i W[2];                                                                                  \
                        UNROLL for (int h = 0; h < NH; h++) W[h] = code_k6(g, s, j, h0 + h);                           \
                        UNROLL for (int t = 0; t < NT; t++) {                                                          \
                            const __m256i bx = bc32(xsb + t * xs + 16 * s + 4 * j);                                    \
                            UNROLL for (int h = 0; h < NH; h++) STEP(S[h][t], W[h], W[h], bx);                         \
                        }                                                                                              \
                    }                                                                                                  \
                    UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++)                            \
                        SCALE(sumi[h][t], S[h][t], sc32[h], sc16[h]);                                                  \
                }                                                                                                      \
            }                                                                                                          \
            K6_FINISH                                                                                                  \
        }                                                                                                              \
        UNROLL for (int h = 0; h < NH; h++) UNROLL for (int t = 0; t < NT; t++)                                        \
            _mm256_storeu_ps(out + (size_t)t * ldo + 8 * h, sa[h][t]);                                                 \
    }

DEFINE_K6(q6_k_v, VNNI, 4, V_ZERO, V_STEP, V_SCALE)
DEFINE_K6(q6_k_p, PLAIN, 2, V_ZERO, P_STEP, P_SCALE)

/* ---- entries (kn_p16_fn) ---- */

/* NAME##_tile over the np panels of the call: decode (nt <= 2) both halves of a panel at once, prefill
 * one half at a time. NB: blocks (or super-blocks) per row; PB: bytes of a panel. */
#define P16_NT(NAME, H, NT_)                                                                                           \
    switch (NT_) {                                                                                                     \
        case 3: NAME##_tile(nb, p, x, xs, o, ldo, pf, H, 1, 3); break;                                                 \
        case 4: NAME##_tile(nb, p, x, xs, o, ldo, pf, H, 1, 4); break;                                                 \
        case 5: NAME##_tile(nb, p, x, xs, o, ldo, pf, H, 1, 5); break;                                                 \
        default: NAME##_tile(nb, p, x, xs, o, ldo, pf, H, 1, 6); break;                                                \
    }
#define DEFINE_ENTRY(NAME, ATTR, BLOCK_ELEMS, GROUP_BYTES)                                                             \
    ATTR static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,        \
                          size_t ldo) {                                                                                \
        const int64_t nb = n / (BLOCK_ELEMS);                                                                          \
        const size_t pb = (size_t)nb * (GROUP_BYTES);                                                                  \
        const bool stream = nt > 2 && kn_p16_first_call(w);                                                            \
        for (int q = 0; q < np; q++) {                                                                                 \
            const uint8_t *p = w + q * pb;                                                                             \
            if (nt <= 2) {                                                                                             \
                if (nt == 1) NAME##_tile(nb, p, x, xs, out + 16 * q, ldo, NULL, 0, 2, 1);                              \
                else NAME##_tile(nb, p, x, xs, out + 16 * q, ldo, NULL, 0, 2, 2);                                      \
                continue;                                                                                              \
            }                                                                                                          \
            for (int h = 0; h < 2; h++) {                                                                              \
                float *o = out + 16 * q + 8 * h;                                                                       \
                const uint8_t *pf = stream ? p + pb + h * (pb / 2) : NULL; /* the next panel's half h */               \
                P16_NT(NAME, h, nt)                                                                                    \
            }                                                                                                          \
        }                                                                                                              \
    }

DEFINE_ENTRY(q4_0_v, VNNI, 32, 16 * sizeof(kn_block_q4_0))
DEFINE_ENTRY(q8_0_v, VNNI, 32, 16 * sizeof(kn_block_q8_0))
DEFINE_ENTRY(q4_0_p, PLAIN, 32, 16 * sizeof(kn_block_q4_0))
DEFINE_ENTRY(q4_1_v, VNNI, 32, 16 * sizeof(kn_block_q4_1))
DEFINE_ENTRY(q4_1_p, PLAIN, 32, 16 * sizeof(kn_block_q4_1))
DEFINE_ENTRY(q8_0_p, PLAIN, 32, 16 * sizeof(kn_block_q8_0))
DEFINE_ENTRY(iq4_nl_v, VNNI, 32, 16 * sizeof(kn_block_iq4_nl))
DEFINE_ENTRY(iq4_nl_p, PLAIN, 32, 16 * sizeof(kn_block_iq4_nl))
DEFINE_ENTRY(mxfp4_v, VNNI, 32, 16 * sizeof(kn_block_mxfp4))
DEFINE_ENTRY(mxfp4_p, PLAIN, 32, 16 * sizeof(kn_block_mxfp4))
DEFINE_ENTRY(mlx8_v, VNNI, 32, 16 * sizeof(kn_block_mlx8))
DEFINE_ENTRY(mlx8_p, PLAIN, 32, 16 * sizeof(kn_block_mlx8))
DEFINE_ENTRY(mlx8_f32_v, VNNI, 32, 16 * sizeof(kn_block_mlx8_f32))
DEFINE_ENTRY(mlx8_f32_p, PLAIN, 32, 16 * sizeof(kn_block_mlx8_f32))
DEFINE_ENTRY(q4_k_v, VNNI, 256, 16 * sizeof(kn_block_q4_k))
DEFINE_ENTRY(q4_k_p, PLAIN, 256, 16 * sizeof(kn_block_q4_k))
DEFINE_ENTRY(q5_k_v, VNNI, 256, 16 * sizeof(kn_block_q5_k))
DEFINE_ENTRY(q5_k_p, PLAIN, 256, 16 * sizeof(kn_block_q5_k))
DEFINE_ENTRY(q6_k_v, VNNI, 256, 16 * sizeof(kn_block_q6_k))
DEFINE_ENTRY(q6_k_p, PLAIN, 256, 16 * sizeof(kn_block_q6_k))

/* Fills the panel kernels of k (kernels.h): the AVX-VNNI ones when vnni (the caller checked the CPU),
 * else the plain AVX2 ones. Called only on CPUs with AVX2, FMA and F16C. Q6_K's panels (selected since
 * 2026-12-05) decode at 0.92-1.06x the plain kernel's rate on a 2048-wide matrix (a 1B model's output)
 * and 1.18-1.29x on an 8192-wide one, and prefill at 1.0-1.5x (Zen 5: docs/benchmarks.md). */
void kn_avx2_init_p16(kn_kernels *k, bool vnni) {
    const kn_cpu *c = kn_cpu_features();
    g_pf_dec4 = !(c->amd && c->family >= 0x1A);
    k->p16_tile_t = k->p16_tile_pf = TILE_T;
    k->p16[KN_Q4_0] = vnni ? q4_0_v : q4_0_p;
    k->p16[KN_Q4_1] = vnni ? q4_1_v : q4_1_p;
    k->p16[KN_Q8_0] = vnni ? q8_0_v : q8_0_p;
    k->p16[KN_IQ4_NL] = vnni ? iq4_nl_v : iq4_nl_p;
    k->p16[KN_MXFP4] = vnni ? mxfp4_v : mxfp4_p;
    k->p16[KN_MLX8] = vnni ? mlx8_v : mlx8_p;
    k->p16[KN_MLX8_F32] = vnni ? mlx8_f32_v : mlx8_f32_p;
    k->p16[KN_Q4_K] = vnni ? q4_k_v : q4_k_p;
    k->p16[KN_Q5_K] = vnni ? q5_k_v : q5_k_p;
    k->p16[KN_Q6_K] = vnni ? q6_k_v : q6_k_p;
}

#else /* not x86-64: the set is never selected */
void kn_avx2_init_p16(kn_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
