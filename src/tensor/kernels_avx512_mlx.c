/*
 * kernels_avx512_mlx.c - AVX-512 (F, BW, VL, VNNI) GEMM tile kernels for kiln's MLX 8-bit formats,
 * MLX8 and MLX8_F32 (quant.h) x Q8_0 activations, bit-identical to the scalar reference (quant_mlx.c;
 * tested in tests/unit/test_kernels_mlx.c).
 *
 * A row is processed in groups of 8 blocks (256 elements); a last partial group is copied into a
 * zero-padded stack buffer and processed like a full one (a zero block changes no lane: both of its
 * products are exactly 0, and a lane is never -0). The quants of a group are rearranged as for Q8_0
 * (kernels_avx512_legacy.c): qword b of Z[j] holds elements 8j .. 8j+7 of block b, so int32 lanes 2b
 * and 2b + 1 of a vpdpbusd belong to block b, elements e % 8 < 4 and e % 8 >= 4 - the reference's
 * lanes. The weight bytes are unsigned already (q in 0..255), so per (row, token) four vpdpbusd give
 * the lanes' exact p; the activations' lane sums sx come once per token and group (vpdpbusd with
 * ones). The float part is the reference's, lane for lane:
 *     acc = fma(float(p), d * x.d, acc);   acc = fma(float(sx), m * x.d, acc)
 * and the result is the reference's kn_reduce16 order (512 -> 256 -> 128 -> 64 -> 32 bits). The
 * tile contract of kernels.h holds: each output's float operations depend only on its row and token.
 */
#include "tensor/kernels.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#include "tensor/quant.h"

#include <immintrin.h>
#include <string.h>

#define AI     static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

/* See prefetch_next_tile in kernels_avx512_legacy.c: while a one-token tile is computed, the rows of
 * the caller's next tile are prefetched as one sequential stream. */
AI void prefetch_next_tile(const uint8_t *w, size_t ws, int nr, size_t off, int len) {
    const uintptr_t p = (uintptr_t)w + (uintptr_t)nr * ws + off;
    for (int l = 0; l < len; l += 64) _mm_prefetch((const char *)(p + (uintptr_t)l), _MM_HINT_T0);
}

AI __m512i ld2x32(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The 32 bytes of 8 blocks (block k's at p + k * stride) in the group layout (see above). */
AI void group_q8(const uint8_t *p, size_t stride, __m512i Z[4]) {
    const __m512i A = ld2x32(p, p + stride), B = ld2x32(p + 2 * stride, p + 3 * stride);
    const __m512i C = ld2x32(p + 4 * stride, p + 5 * stride), D = ld2x32(p + 6 * stride, p + 7 * stride);
    const __m512i i01 = _mm512_set_epi64(13, 9, 5, 1, 12, 8, 4, 0);
    const __m512i i23 = _mm512_set_epi64(15, 11, 7, 3, 14, 10, 6, 2);
    const __m512i P = _mm512_permutex2var_epi64(A, i01, B), Q = _mm512_permutex2var_epi64(A, i23, B);
    const __m512i R = _mm512_permutex2var_epi64(C, i01, D), S = _mm512_permutex2var_epi64(C, i23, D);
    Z[0] = _mm512_shuffle_i64x2(P, R, 0x44);
    Z[1] = _mm512_shuffle_i64x2(P, R, 0xEE);
    Z[2] = _mm512_shuffle_i64x2(Q, S, 0x44);
    Z[3] = _mm512_shuffle_i64x2(Q, S, 0xEE);
}

/* Block scales without a gather (as kernels_avx512_legacy.c reads them): the fp16 values at p + k * S + o
 * (k < 8; S, o even constants) as fp32, each in lanes 2k and 2k + 1, read without touching bytes outside
 * the group's 8 * S bytes. Each value is picked by vpermt2w from one of two 128-byte windows of the
 * group: A = [0, 128) when it lies there, else B = [SC_B, SC_B + 128). SC_IDX is its word index in its
 * window, SC_KB the mask of lanes from B. */
#define SC_B(S, o)      ((8 * (S)-128) < (4 * (S) + (o)) ? (8 * (S)-128) : (4 * (S) + (o)))
#define SC_INA(S, o, k) ((k) * (S) + (o) + 2 <= 128)
#define SC_IDX(S, o, k) (SC_INA(S, o, k) ? ((k) * (S) + (o)) / 2 : ((k) * (S) + (o)-SC_B(S, o)) / 2)
#define SC_KB(S, o, k)  (SC_INA(S, o, k) ? 0u : 3u << (2 * (k)))
#define SC_TABLE(S, o)                                                                                                 \
    {                                                                                                                  \
        SC_IDX(S, o, 0), SC_IDX(S, o, 0), SC_IDX(S, o, 1), SC_IDX(S, o, 1), SC_IDX(S, o, 2), SC_IDX(S, o, 2),          \
            SC_IDX(S, o, 3), SC_IDX(S, o, 3), SC_IDX(S, o, 4), SC_IDX(S, o, 4), SC_IDX(S, o, 5), SC_IDX(S, o, 5),      \
            SC_IDX(S, o, 6), SC_IDX(S, o, 6), SC_IDX(S, o, 7), SC_IDX(S, o, 7)                                         \
    }
#define SC_MASK(S, o)                                                                                                  \
    (__mmask32)(SC_KB(S, o, 0) | SC_KB(S, o, 1) | SC_KB(S, o, 2) | SC_KB(S, o, 3) | SC_KB(S, o, 4) | SC_KB(S, o, 5) |  \
                SC_KB(S, o, 6) | SC_KB(S, o, 7))
#define SC_FITS(S, o, k) (SC_INA(S, o, k) || ((k) * (S) + (o) >= SC_B(S, o) && (k) * (S) + (o) + 2 <= SC_B(S, o) + 128))
#define SC_OK(S, o)                                                                                                    \
    (8 * (S) >= 128 && SC_B(S, o) >= 0 && SC_B(S, o) % 2 == 0 && SC_B(S, o) + 128 <= 8 * (S) && SC_FITS(S, o, 0) &&    \
     SC_FITS(S, o, 1) && SC_FITS(S, o, 2) && SC_FITS(S, o, 3) && SC_FITS(S, o, 4) && SC_FITS(S, o, 5) &&               \
     SC_FITS(S, o, 6) && SC_FITS(S, o, 7))
_Static_assert(SC_OK(36, 0) && SC_OK(36, 2) && SC_OK(34, 0), "scale windows");

typedef struct sc_table {
    uint16_t idx[32];
} sc_table;

static const sc_table sc_mlx8_d = {SC_TABLE(36, 0)}, sc_mlx8_m = {SC_TABLE(36, 2)}, sc_q8_0_d = {SC_TABLE(34, 0)};

#define SCALES8(p, S, o, table) scales8(p, &(table), SC_B(S, o), SC_MASK(S, o))
AI __m512 scales8(const uint8_t *p, const sc_table *t, int b, __mmask32 kb) {
    const __m512i idx = _mm512_loadu_si512(t->idx);
    __m512i h = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), idx, _mm512_loadu_si512(p + 64));
    if (kb)
        h = _mm512_mask_mov_epi16(
            h, kb, _mm512_permutex2var_epi16(_mm512_loadu_si512(p + b), idx, _mm512_loadu_si512(p + b + 64)));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* 8 fp32 values, value k in lanes 2k and 2k + 1. */
AI __m512 pairs(__m256 v) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                 _mm512_castps256_ps512(v));
}

/* Byte offsets k * stride, k < 8. */
AI __m256i offsets8(int stride) {
    return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
}

typedef struct wgrp {
    __m512i q[4]; /* q, unsigned, group layout */
    __m512 d, m;  /* block scales and biases, lanes 2b, 2b+1 */
} wgrp;

typedef struct xgrp {
    __m512i q[4]; /* signed quants, group layout */
    __m512 d;     /* block scales */
    __m512 sx;    /* the lanes' sums of quants */
} xgrp;

/* Weight loaders: the group of 8 blocks at p. MLX8: fp16 d, m at offsets 0 and 2 (SCALES8); MLX8_F32:
 * fp32 d, m in the block's first 8 bytes (one gather of those qwords). */
AI void w_mlx8(const uint8_t *p, wgrp *W) {
    group_q8(p + 4, sizeof(kn_block_mlx8), W->q);
    W->d = SCALES8(p, 36, 0, sc_mlx8_d);
    W->m = SCALES8(p, 36, 2, sc_mlx8_m);
}

AI void w_mlx8_f32(const uint8_t *p, wgrp *W) {
    group_q8(p + 8, sizeof(kn_block_mlx8_f32), W->q);
    const __m512i g = _mm512_i32gather_epi64(offsets8(sizeof(kn_block_mlx8_f32)), (const long long *)p, 1);
    W->d = pairs(_mm256_castsi256_ps(_mm512_cvtepi64_epi32(g)));
    W->m = pairs(_mm256_castsi256_ps(_mm512_cvtepi64_epi32(_mm512_srli_epi64(g, 32))));
}

/* Q8_0 activations: quants, scales (the fp16 at each block's start), lane sums. */
AI void x_q8_0(const uint8_t *p, xgrp *X) {
    group_q8(p + 2, sizeof(kn_block_q8_0), X->q);
    X->d = SCALES8(p, 34, 0, sc_q8_0_d);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i s = _mm512_setzero_si512();
    UNROLL for (int j = 0; j < 4; j++) s = _mm512_dpbusd_epi32(s, ones, X->q[j]);
    X->sx = _mm512_cvtepi32_ps(s);
}

/* The group's contribution to one (row, token) accumulator (the reference's two steps per lane). */
AI __m512 dot_grp(const wgrp *W, const xgrp *X, __m512 acc) {
    __m512i s = _mm512_setzero_si512();
    UNROLL for (int j = 0; j < 4; j++) s = _mm512_dpbusd_epi32(s, W->q[j], X->q[j]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(W->d, X->d), acc);
    return _mm512_fmadd_ps(X->sx, _mm512_mul_ps(W->m, X->d), acc);
}

/* kn_reduce16 of the 16 lanes. */
AI float reduce16(__m512 v) {
    const __m256 a =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
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

/* GEMM tile kernel NAME (kn_gemm_fn contract, kernels.h) for weight blocks of WB bytes unpacked by
 * LOADW; n is a multiple of 32 (a partial block is ignored). */
#define DEFINE_GEMM_MLX(NAME, WB, LOADW)                                                                               \
    AI void NAME##_group(const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, __m512 acc[4][4], const int NR,     \
                         const int NT) {                                                                               \
        xgrp X[4];                                                                                                     \
        UNROLL for (int t = 0; t < NT; t++) x_q8_0(x + (size_t)t * xs, &X[t]);                                         \
        UNROLL for (int r = 0; r < NR; r++) {                                                                          \
            wgrp W;                                                                                                    \
            LOADW(w + (size_t)r * ws, &W);                                                                             \
            UNROLL for (int t = 0; t < NT; t++) acc[r][t] = dot_grp(&W, &X[t], acc[r][t]);                             \
        }                                                                                                              \
    }                                                                                                                  \
    AI void NAME##_tile(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *out, size_t ldo,   \
                        const int NR, const int NT) {                                                                  \
        __m512 acc[4][4];                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();       \
        const int64_t nb = n / 32, ng = nb / 8;                                                                        \
        const int rem = (int)(nb % 8);                                                                                 \
        for (int64_t g = 0; g < ng; g++) {                                                                             \
            if (NT == 1) prefetch_next_tile(w, ws, NR, (size_t)g *NR * 8 * (WB), NR * 8 * (WB));                       \
            NAME##_group(w + (size_t)g * 8 * (WB), ws, x + (size_t)g * 8 * 34, xs, acc, NR, NT);                       \
        }                                                                                                              \
        if (rem) {                                                                                                     \
            uint8_t tw[4][8 * (WB)], tx[4][8 * 34];                                                                    \
            const size_t off = (size_t)ng * 8;                                                                         \
            UNROLL for (int r = 0; r < NR; r++) {                                                                      \
                memset(tw[r], 0, sizeof tw[r]);                                                                        \
                memcpy(tw[r], w + (size_t)r * ws + off * (WB), (size_t)rem * (WB));                                    \
            }                                                                                                          \
            UNROLL for (int t = 0; t < NT; t++) {                                                                      \
                memset(tx[t], 0, sizeof tx[t]);                                                                        \
                memcpy(tx[t], x + (size_t)t * xs + off * 34, (size_t)rem * 34);                                        \
            }                                                                                                          \
            NAME##_group(&tw[0][0], sizeof tw[0], &tx[0][0], sizeof tx[0], acc, NR, NT);                               \
        }                                                                                                              \
        UNROLL for (int r = 0; r < NR; r++) UNROLL for (int t = 0; t < NT; t++) out[(size_t)t * ldo + (size_t)r] =     \
            reduce16(acc[r][t]);                                                                                       \
    }                                                                                                                  \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        TILE_SWITCH(NAME##_CALL)                                                                                       \
    }

_Static_assert(sizeof(kn_block_q8_0) == 34, "Q8_0 activation blocks are 34 bytes");
#define gemm_mlx8_CALL(R, T)     gemm_mlx8_tile(n, w, ws, x, xs, out, ldo, R, T)
#define gemm_mlx8_f32_CALL(R, T) gemm_mlx8_f32_tile(n, w, ws, x, xs, out, ldo, R, T)
DEFINE_GEMM_MLX(gemm_mlx8, 36, w_mlx8)
DEFINE_GEMM_MLX(gemm_mlx8_f32, 40, w_mlx8_f32)

/* Fills k with this file's kernels (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI. */
void kn_avx512_init_mlx(kn_kernels *k) {
    k->gemm[KN_MLX8] = gemm_mlx8;
    k->gemm[KN_MLX8_F32] = gemm_mlx8_f32;
    kn_avx512_init_p16_mlx(k);
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_mlx(kn_kernels *k) { (void)k; }
#endif
