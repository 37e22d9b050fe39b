/*
 * kernels_avx2_p16_mlx.c - AVX2 panel kernels (pack.h) for MLX8 and MLX8_F32 matrices times Q8XM activation
 * rows, in two variants that give the same bits: with AVX-VNNI (256-bit vpdpbusd) and without it
 * (vpmaddubsw + vpmaddwd); both bit-identical to the scalar reference kn_mlx8_vec_dot_q8_0 /
 * kn_mlx8_f32_vec_dot_q8_0 (quant_mlx.c; tested in tests/unit/test_pack_mlx.c).
 *
 * A ymm register holds 4 consecutive quants of the 8 rows of one half of a panel (the lower or upper 32
 * bytes of each 64-byte vector of pack.h), one row per 32-bit lane. The reference's lane 2k + h is a chain
 * over the blocks of class k = b % 8, elements e % 8 < 4 (h = 0) or >= 4 (h = 1); the panel holds its
 * blocks class by class (pack_mlx.c), so the kernel runs each class's two chains front to back:
 *   p_h   = exact sum over the quads j = h, h + 2, h + 4, h + 6 of q quad j times x quad j
 *   acc_h = fma((float)p_h, d * x.d, acc_h);  acc_h = fma((float)s_h, m * x.d, acc_h)
 * (s_h: the Q8XM row's sums of the quants). VNNI: vpdpbusd of the unsigned q (0..255) and the signed x.
 * Plain: the int16 pairs of vpmaddubsw would overflow with q up to 255, so it sums (q - 128) * x as
 * |q - 128| * sign(x, q - 128) (pairs of at most 2 * 128 * 127) and forms (float)p_h exactly as
 * fma((float)s_h, 128, (float)that) (every term an integer below 2^24). Each class's two accumulators
 * per (row, token) go to a stack buffer; the 16 lanes are then added in kn_reduce16's order.
 * Decode (1 or 2 tokens) takes both halves of a panel at once, the panel one sequential stream;
 * prefill one half at a time with PT tokens per pass.
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
#define PT     2 /* tokens per prefill pass over one half panel (register budget) */
#define VNNI   __attribute__((target("avx2,fma,f16c,avxvnni")))
#define PLAIN

/* Scale (f = 0) or bias (f = 1) of the 8 rows of half hh of the group at g as fp32. */
AI __m256 dm8(const uint8_t *g, int f, int hh, const int F32) {
    return F32 ? _mm256_loadu_ps((const float *)(g + 64 * f + 32 * hh))
               : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 32 * f + 16 * hh)));
}

/* Integer engines: V (VNNI) sums q * x; P (plain) sums (q - 128) * x, W then holding q - 128 and A |q - 128|. */
#define V_LOADW(W, A, p)   ((void)(A), W = _mm256_loadu_si256((const __m256i *)(p)))
#define V_STEP(S, W, A, B) S = _mm256_dpbusd_avx_epi32(S, W, B)
#define P_LOADW(W, A, p)                                                                                               \
    (W = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p)), _mm256_set1_epi8((char)0x80)),                     \
     A = _mm256_abs_epi8(W))
#define P_STEP(S, W, A, B)                                                                                             \
    do {                                                                                                               \
        S = _mm256_add_epi32(                                                                                          \
            S, _mm256_madd_epi16(_mm256_maddubs_epi16(A, _mm256_sign_epi8(B, W)), _mm256_set1_epi16(1)));              \
        KN_CHAIN(S);                                                                                                   \
    } while (0)

/* NAME##_tile: halves h0 .. h0 + NH - 1 of the panel at w (NH = 2: rows 0..15, else rows 8 h0 ..) times
 * NT Q8XM rows, out[t * ldo + 8 (h - h0) + i]. SIGNED: the engine sums (q - 128) * x. */
#define DEFINE_TILE(NAME, ATTR, F32, LOADW, STEP, SIGNED)                                                              \
    ATTR AI void NAME##_tile(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out, size_t ldo,         \
                             const int h0, const int NH, const int NT) {                                               \
        const size_t GB = F32 ? 16 * sizeof(kn_block_mlx8_f32) : 16 * sizeof(kn_block_mlx8), QO = F32 ? 128 : 64;      \
        const int64_t nb = n / KN_QK_MLX8;                                                                             \
        __m256 L[16][2][PT]; /* the reference's 16 lanes of each (half, token) */                                      \
        int64_t pos = 0;                                                                                               \
        for (int k = 0; k < 8; k++) {                                                                                  \
            const int64_t cnt = nb / 8 + (k < nb % 8);                                                                 \
            __m256 acc[2][PT][2];                                                                                      \
            UNROLL for (int u = 0; u < NH; u++) UNROLL for (int t = 0; t < NT; t++) acc[u][t][0] = acc[u][t][1] =      \
                _mm256_setzero_ps();                                                                                   \
            for (int64_t i = 0; i < cnt; i++, pos++) {                                                                 \
                const uint8_t *g = w + (size_t)pos * GB, *xb = x + (size_t)pos * KN_Q8XM_BLOCK;                        \
                __m256i p[2][PT][2];                                                                                   \
                UNROLL for (int u = 0; u < NH; u++) UNROLL for (int t = 0; t < NT; t++) p[u][t][0] = p[u][t][1] =      \
                    _mm256_setzero_si256();                                                                            \
                UNROLL for (int j = 0; j < 8; j++) {                                                                   \
                    __m256i W[2], A[2];                                                                                \
                    UNROLL for (int u = 0; u < NH; u++) LOADW(W[u], A[u], g + QO + 64 * j + 32 * (h0 + u));            \
                    UNROLL for (int t = 0; t < NT; t++) {                                                              \
                        const __m256i bx = _mm256_set1_epi32(kn_ld_i32(xb + t * xs + 4 * j));                          \
                        UNROLL for (int u = 0; u < NH; u++) STEP(p[u][t][j & 1], W[u], A[u], bx);                      \
                    }                                                                                                  \
                }                                                                                                      \
                UNROLL for (int u = 0; u < NH; u++) {                                                                  \
                    const __m256 d = dm8(g, 0, h0 + u, F32), m = dm8(g, 1, h0 + u, F32);                               \
                    UNROLL for (int t = 0; t < NT; t++) {                                                              \
                        const uint8_t *xt = xb + t * xs;                                                               \
                        const __m256 xd = _mm256_set1_ps(kn_ld_f32(xt + 32));                                          \
                        const __m256 ds = _mm256_mul_ps(d, xd), ms = _mm256_mul_ps(m, xd);                             \
                        UNROLL for (int h = 0; h < 2; h++) {                                                           \
                            const __m256 s = _mm256_set1_ps(kn_ld_f32(xt + 36 + 4 * h));                               \
                            __m256 pf = _mm256_cvtepi32_ps(p[u][t][h]);                                                \
                            if (SIGNED) pf = _mm256_fmadd_ps(s, _mm256_set1_ps(128.0f), pf);                           \
                            acc[u][t][h] = _mm256_fmadd_ps(s, ms, _mm256_fmadd_ps(pf, ds, acc[u][t][h]));              \
                        }                                                                                              \
                    }                                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
            UNROLL for (int u = 0; u < NH; u++) UNROLL for (int t = 0; t < NT; t++) {                                  \
                L[2 * k][u][t] = acc[u][t][0];                                                                         \
                L[2 * k + 1][u][t] = acc[u][t][1];                                                                     \
            }                                                                                                          \
        }                                                                                                              \
        UNROLL for (int u = 0; u < NH; u++) UNROLL for (int t = 0; t < NT; t++) {                                      \
            __m256 a[8];                                                                                               \
            UNROLL for (int i = 0; i < 8; i++) a[i] = _mm256_add_ps(L[i][u][t], L[i + 8][u][t]);                       \
            UNROLL for (int i = 0; i < 4; i++) a[i] = _mm256_add_ps(a[i], a[i + 4]);                                   \
            UNROLL for (int i = 0; i < 2; i++) a[i] = _mm256_add_ps(a[i], a[i + 2]);                                   \
            _mm256_storeu_ps(out + (size_t)t * ldo + 8 * u, _mm256_add_ps(a[0], a[1]));                                \
        }                                                                                                              \
    }                                                                                                                  \
    ATTR static void NAME(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,        \
                          size_t ldo) {                                                                                \
        const size_t pb = (size_t)(n / KN_QK_MLX8) * 16 * (F32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8));   \
        for (int q = 0; q < np; q++) {                                                                                 \
            const uint8_t *pw = w + q * pb;                                                                            \
            if (nt == 1) NAME##_tile(n, pw, x, xs, out + 16 * q, ldo, 0, 2, 1);                                        \
            else if (nt == 2) NAME##_tile(n, pw, x, xs, out + 16 * q, ldo, 0, 2, 2);                                   \
            else                                                                                                       \
                for (int h = 0; h < 2; h++)                                                                            \
                    for (int t0 = 0; t0 < nt; t0 += PT) {                                                              \
                        const uint8_t *xt = x + (size_t)t0 * xs;                                                       \
                        float *o = out + (size_t)t0 * ldo + 16 * q + 8 * h;                                            \
                        if (nt - t0 >= 2) NAME##_tile(n, pw, xt, xs, o, ldo, h, 1, 2);                                 \
                        else NAME##_tile(n, pw, xt, xs, o, ldo, h, 1, 1);                                              \
                    }                                                                                                  \
        }                                                                                                              \
    }

DEFINE_TILE(mlx8_v, VNNI, 0, V_LOADW, V_STEP, 0)
DEFINE_TILE(mlx8_f32_v, VNNI, 1, V_LOADW, V_STEP, 0)
DEFINE_TILE(mlx8_p, PLAIN, 0, P_LOADW, P_STEP, 1)
DEFINE_TILE(mlx8_f32_p, PLAIN, 1, P_LOADW, P_STEP, 1)

/* Fills the MLX8 / MLX8_F32 panel kernels of k (kernels.h): the AVX-VNNI ones when vnni (the caller checked
 * the CPU), else the plain AVX2 ones. Called only on CPUs with AVX2, FMA and F16C. */
void kn_avx2_init_p16_mlx(kn_kernels *k, bool vnni) {
    k->p16[KN_MLX8] = vnni ? mlx8_v : mlx8_p;
    k->p16[KN_MLX8_F32] = vnni ? mlx8_f32_v : mlx8_f32_p;
}

#else /* not x86-64: the set is never selected */
void kn_avx2_init_p16_mlx(kn_kernels *k, bool vnni) { (void)k, (void)vnni; }
#endif
