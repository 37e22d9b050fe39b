/*
 * kernels_avx2_mlx.c - AVX2+FMA+F16C GEMM tile kernels (with AVX-VNNI where the CPU has it) for kiln's
 * MLX 8-bit formats, MLX8 and MLX8_F32 (quant.h) x Q8_0 activations, bit-identical to the scalar
 * reference (quant_mlx.c; tested in tests/unit/test_kernels_mlx.c).
 *
 * A row is processed in groups of 4 blocks (128 elements), laid out as for Q8_0
 * (kernels_avx2_legacy.c): qword k of Z[j] holds elements 8j .. 8j+7 of block ord[k],
 * ord = (0, 2, 1, 3), so int32 lanes 2k and 2k + 1 are the reference's two lanes of block ord[k]
 * (elements e % 8 < 4 and e % 8 >= 4). The reference has 16 lanes, two per block for 8 blocks in turn:
 * groups alternate between two 8-lane accumulators (blocks b % 8 < 4, then >= 4), whose lanes are put
 * back in the reference's order (an exact permutation) before its kn_reduce16. A last partial group is
 * copied into a zero-padded stack buffer (a zero block changes no lane).
 * Exact lane sums p of q * x: with AVX-VNNI a chain of vpdpbusd on the unsigned q; without it
 * vpmaddubsw + vpmaddwd on the signed q - 128 (|q - 128| * sign(x, q - 128): int16 pairs of at most
 * 128 * 127 * 2, as activation quants lie in -127 .. 127) plus 128 * sx, where sx, the lanes' sums of
 * the activation quants, is computed once per token and group. Both give the same integers. The float
 * part is the reference's, lane for lane:
 *     acc = fma(float(p), d * x.d, acc);   acc = fma(float(sx), m * x.d, acc)
 * The tile contract of kernels.h holds: each output's float operations depend only on its row and token.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI          static inline __attribute__((always_inline))
#define UNROLL      _Pragma("GCC unroll 4")
#define VNNI_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))

/* See prefetch_next_tile in kernels_avx2_legacy.c. */
AI void prefetch_next_tile(const uint8_t *w, size_t ws, int nr, size_t off, int len) {
    const uintptr_t p = (uintptr_t)w + (uintptr_t)nr * ws + off;
    for (int l = 0; l < len; l += 64) _mm_prefetch((const char *)(p + (uintptr_t)l), _MM_HINT_T0);
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

AI __m256i ldu(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The 32 bytes of 4 blocks (block k's at p + k * stride) in the group layout. */
AI void group_q8(const uint8_t *p, size_t stride, __m256i Z[4]) {
    const __m256i X0 = ldu(p), X1 = ldu(p + stride), X2 = ldu(p + 2 * stride), X3 = ldu(p + 3 * stride);
    const __m256i U0 = _mm256_unpacklo_epi64(X0, X2), U1 = _mm256_unpacklo_epi64(X1, X3);
    const __m256i V0 = _mm256_unpackhi_epi64(X0, X2), V1 = _mm256_unpackhi_epi64(X1, X3);
    Z[0] = _mm256_permute2x128_si256(U0, U1, 0x20);
    Z[1] = _mm256_permute2x128_si256(V0, V1, 0x20);
    Z[2] = _mm256_permute2x128_si256(U0, U1, 0x31);
    Z[3] = _mm256_permute2x128_si256(V0, V1, 0x31);
}

/* 4 fp32 values in block order (0, 1, 2, 3) to the group's lanes: 2k and 2k + 1 get block ord[k]'s. */
AI __m256 pairs4(__m128 v) {
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_setr_epi32(0, 0, 2, 2, 1, 1, 3, 3));
}

/* The dwords at p + k * stride, k < 4, in block order. */
AI __m128i dwords4(const uint8_t *p, size_t stride) {
    return _mm_setr_epi32((int)ld32(p), (int)ld32(p + stride), (int)ld32(p + 2 * stride), (int)ld32(p + 3 * stride));
}

/* The low (hi = 0) or high (hi = 1) fp16 halves of 4 dwords as fp32. */
AI __m128 half4(__m128i v, int hi) {
    const __m128i lo = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i up = _mm_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    return _mm_cvtph_ps(_mm_shuffle_epi8(v, hi ? up : lo));
}

typedef struct wgrp {
    __m256i q[4]; /* group layout: q (VNNI) or q - 128 (signed) */
    __m256 d, m;  /* block scales and biases, lanes 2k, 2k+1 */
} wgrp;

typedef struct xgrp {
    __m256i q[4]; /* signed quants, group layout */
    __m256i sxi;  /* the lanes' sums of quants */
    __m256 sx;    /* the same as fp32 */
    __m256 d;     /* block scales */
} xgrp;

/* Weight loaders: the group of 4 blocks at p; SIGNED: q - 128 for the non-VNNI dot. */
AI void w_mlx8(const uint8_t *p, wgrp *W, const int SIGNED) {
    group_q8(p + 4, sizeof(kn_block_mlx8), W->q);
    const __m128i g = dwords4(p, sizeof(kn_block_mlx8));
    W->d = pairs4(half4(g, 0));
    W->m = pairs4(half4(g, 1));
    if (SIGNED) UNROLL for (int j = 0; j < 4; j++) W->q[j] = _mm256_xor_si256(W->q[j], _mm256_set1_epi8((char)0x80));
}

AI void w_mlx8_f32(const uint8_t *p, wgrp *W, const int SIGNED) {
    group_q8(p + 8, sizeof(kn_block_mlx8_f32), W->q);
    W->d = pairs4(_mm_castsi128_ps(dwords4(p, sizeof(kn_block_mlx8_f32))));
    W->m = pairs4(_mm_castsi128_ps(dwords4(p + 4, sizeof(kn_block_mlx8_f32))));
    if (SIGNED) UNROLL for (int j = 0; j < 4; j++) W->q[j] = _mm256_xor_si256(W->q[j], _mm256_set1_epi8((char)0x80));
}

/* Q8_0 activations: quants, scales, lane sums. */
AI void x_q8_0(const uint8_t *p, xgrp *X) {
    group_q8(p + 2, sizeof(kn_block_q8_0), X->q);
    X->d = pairs4(half4(dwords4(p, sizeof(kn_block_q8_0)), 0));
    const __m256i ones = _mm256_set1_epi8(1);
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(ones, X->q[0]), _mm256_maddubs_epi16(ones, X->q[1]));
    s = _mm256_add_epi16(s, _mm256_add_epi16(_mm256_maddubs_epi16(ones, X->q[2]), _mm256_maddubs_epi16(ones, X->q[3])));
    X->sxi = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
    X->sx = _mm256_cvtepi32_ps(X->sxi);
}

/* The float part of a group for one (row, token) accumulator, from the exact lane sums p. */
AI __m256 acc_grp(__m256i p, const wgrp *W, const xgrp *X, __m256 acc) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(W->d, X->d), acc);
    return _mm256_fmadd_ps(X->sx, _mm256_mul_ps(W->m, X->d), acc);
}

/* Without VNNI: sum (q - 128) * x + 128 * sx. */
AI __m256 dot_signed(const wgrp *W, const xgrp *X, __m256 acc) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i s = _mm256_slli_epi32(X->sxi, 7);
    UNROLL for (int j = 0; j < 4; j++) s = _mm256_add_epi32(
        s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(W->q[j]), _mm256_sign_epi8(X->q[j], W->q[j])), one));
    return acc_grp(s, W, X, acc);
}

VNNI_TARGET AI __m256 dot_vnni(const wgrp *W, const xgrp *X, __m256 acc) {
    __m256i s = _mm256_setzero_si256();
    UNROLL for (int j = 0; j < 4; j++) s = _mm256_dpbusd_avx_epi32(s, W->q[j], X->q[j]);
    return acc_grp(s, W, X, acc);
}

/* kn_reduce16 of the reference lanes held as a (blocks b % 8 < 4) and b (>= 4), group order. */
AI float reduce16(__m256 a, __m256 b) {
    const __m256i ord = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    const __m256 v = _mm256_add_ps(_mm256_permutevar8x32_ps(a, ord), _mm256_permutevar8x32_ps(b, ord));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define TILE_SWITCH(TILE)                                                                                              \
    switch ((nr - 1) * 4 + (nt - 1)) {                                                                                 \
        case 0: TILE(1, 1); break;                                                                                     \
        case 1: TILE(1, 2); break;                                                                                     \
        case 2: TILE(1, 3); break;                                                                                     \
        case 3: TILE(1, 4); break;                                                                                     \
        case 4: TILE(2, 1); break;                                                                                     \
        case 5: TILE(2, 2); break;                                                                                     \
        case 6: TILE(2, 3); break;                                                                                     \
        case 7: TILE(2, 4); break;                                                                                     \
        case 8: TILE(3, 1); break;                                                                                     \
        case 9: TILE(3, 2); break;                                                                                     \
        case 10: TILE(3, 3); break;                                                                                    \
        case 11: TILE(3, 4); break;                                                                                    \
        case 12: TILE(4, 1); break;                                                                                    \
        case 13: TILE(4, 2); break;                                                                                    \
        case 14: TILE(4, 3); break;                                                                                    \
        default: TILE(4, 4); break;                                                                                    \
    }

/* GEMM tile kernel NAME (target attributes ATTR; kn_gemm_fn contract, kernels.h) for weight blocks of
 * WB bytes unpacked by LOADW(p, W, SIGNED), dot DOT; n is a multiple of 32 (a partial block is
 * ignored). Tokens are processed in passes of at most 2 (register budget). */
#define DEFINE_GEMM_MLX(NAME, ATTR, WB, LOADW, SIGNED, DOT)                                                            \
    ATTR AI void NAME##_group(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, __m256 acc[4][2],              \
                              const int NR, const int NT) {                                                            \
        xgrp X[2];                                                                                                     \
        UNROLL for (int t = 0; t < NT; t++) x_q8_0(x + (size_t)t * xs, &X[t]);                                         \
        UNROLL for (int r = 0; r < NR; r++) {                                                                          \
            wgrp W;                                                                                                    \
            LOADW(w + (size_t)r * ws, &W, SIGNED);                                                                     \
            UNROLL for (int t = 0; t < NT; t++) acc[r][t] = DOT(&W, &X[t], acc[r][t]);                                 \
        }                                                                                                              \
    }                                                                                                                  \
    ATTR AI void NAME##_pass(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out,          \
                             size_t ldo, const int NR, const int NT, const int PF) {                                   \
        __m256 acc[2][4][2]; /* [block parity][row][token] */                                                          \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[0][r][t] = acc[1][r][t] =          \
            _mm256_setzero_ps();                                                                                       \
        const int64_t nb = n / 32, ng = nb / 4;                                                                        \
        const int rem = (int)(nb % 4);                                                                                 \
        for (int64_t g = 0; g < ng; g++) {                                                                             \
            if (PF) prefetch_next_tile(w, ws, NR, (size_t)g *NR * 4 * (WB), NR * 4 * (WB));                            \
            NAME##_group(w + (size_t)g * 4 * (WB), ws, x + (size_t)g * 4 * 34, xs, acc[g & 1], NR, NT);                \
        }                                                                                                              \
        if (rem) {                                                                                                     \
            uint8_t tw[4][4 * (WB)], tx[2][4 * 34];                                                                    \
            const size_t off = (size_t)ng * 4;                                                                         \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                memset(tw[r], 0, sizeof tw[r]);                                                                        \
                memcpy(tw[r], w + (size_t)r * ws + off * (WB), (size_t)rem * (WB));                                    \
            }                                                                                                          \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                memset(tx[t], 0, sizeof tx[t]);                                                                        \
                memcpy(tx[t], x + (size_t)t * xs + off * 34, (size_t)rem * 34);                                        \
            }                                                                                                          \
            NAME##_group(&tw[0][0], sizeof tw[0], &tx[0][0], sizeof tx[0], acc[ng & 1], NR, NT);                       \
        }                                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) out[(size_t)t * ldo + (size_t)r] =     \
            reduce16(acc[0][r][t], acc[1][r][t]);                                                                      \
    }                                                                                                                  \
    ATTR AI void NAME##_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out,          \
                             size_t ldo, const int NR, const int NT) {                                                 \
        NAME##_pass(n, w, ws, x, xs, out, ldo, NR, NT < 2 ? NT : 2, NT == 1);                                          \
        if (NT > 2) NAME##_pass(n, w, ws, x + 2 * xs, xs, out + 2 * ldo, ldo, NR, NT - 2, 0);                          \
    }                                                                                                                  \
    ATTR static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,         \
                          float *out, size_t ldo) {                                                                    \
        TILE_SWITCH(NAME##_CALL)                                                                                       \
    }

_Static_assert(sizeof(kn_block_q8_0) == 34, "Q8_0 activation blocks are 34 bytes");
#define CALL(NAME, R, T)              NAME##_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_mlx8_CALL(R, T)          CALL(gemm_mlx8, R, T)
#define gemm_mlx8_f32_CALL(R, T)      CALL(gemm_mlx8_f32, R, T)
#define gemm_mlx8_vnni_CALL(R, T)     CALL(gemm_mlx8_vnni, R, T)
#define gemm_mlx8_f32_vnni_CALL(R, T) CALL(gemm_mlx8_f32_vnni, R, T)
#define NOATTR

DEFINE_GEMM_MLX(gemm_mlx8, NOATTR, 36, w_mlx8, 1, dot_signed)
DEFINE_GEMM_MLX(gemm_mlx8_f32, NOATTR, 40, w_mlx8_f32, 1, dot_signed)
DEFINE_GEMM_MLX(gemm_mlx8_vnni, VNNI_TARGET, 36, w_mlx8, 0, dot_vnni)
DEFINE_GEMM_MLX(gemm_mlx8_f32_vnni, VNNI_TARGET, 40, w_mlx8_f32, 0, dot_vnni)

/* Fills k with this file's kernels (kernels.h): the AVX-VNNI ones where vnni (and the CPU has it). Called
 * only on CPUs with AVX2, FMA and F16C. */
void kn_avx2_init_mlx(kn_kernels *k, bool vnni) {
    const bool v = vnni && kn_cpu_features()->avxvnni;
    k->gemm[KN_MLX8] = v ? gemm_mlx8_vnni : gemm_mlx8;
    k->gemm[KN_MLX8_F32] = v ? gemm_mlx8_f32_vnni : gemm_mlx8_f32;
    kn_avx2_init_p16_mlx(k, v);
}

#else /* not x86-64: the set is never selected */
void kn_avx2_init_mlx(kn_kernels *k, bool vnni) {
    (void)k;
    (void)vnni;
}
#endif
