/*
 * kernels_avx512_p16_mlx.c - AVX-512 VNNI panel kernels (pack.h) for MLX8 and MLX8_F32 matrices times Q8XM
 * activation rows, bit-identical to the scalar reference kn_mlx8_vec_dot_q8_0 / kn_mlx8_f32_vec_dot_q8_0
 * (quant_mlx.c; tested in tests/unit/test_pack_mlx.c).
 *
 * One weight row per 32-bit lane: a zmm register holds 4 consecutive quants of the 16 rows of a panel.
 * The reference keeps 16 float lanes per (row, token), lane 2k + h a chain over the blocks of class
 * k = b % 8, elements e % 8 < 4 (h = 0) or >= 4 (h = 1); the panel holds its blocks class by class
 * (pack_mlx.c), so the kernel runs each class's two chains front to back:
 *   p_h  = sum over the quads j = h, h + 2, h + 4, h + 6 of vpdpbusd(q quad j, x quad j broadcast)
 *          (q unsigned 0..255 and x signed: vpdpbusd's operands as they are; exact)
 *   acc_h = fma((float)p_h, d * x.d, acc_h);  acc_h = fma((float)s_h, m * x.d, acc_h)
 * with s_h the Q8XM row's sums of the quants, and keeps each class's two accumulators per (row, token)
 * in a stack buffer; the 16 lanes are then added in kn_reduce16's order. Every output is thus the
 * reference's float operations on the reference's integers, whatever the panels and tokens of the call.
 * Decode (1 or 2 tokens) takes the panels one after the other, each one sequential stream; prefill
 * takes two panels and up to PT tokens per pass, so each activation broadcast feeds two vpdpbusd.
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
#define PT     3 /* tokens per prefill pass over two panels (register budget: 4 * 2 * PT vectors) */

/* Scale (f = 0) or bias (f = 1) of the 16 rows of the group at g as fp32. */
AI __m512 dm16(const uint8_t *g, int f, const int F32) {
    return F32 ? _mm512_loadu_ps(g + 64 * f) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32 * f)));
}

/* NP panels (pb bytes apart) at w times NT Q8XM rows at x (xs bytes apart):
 * out[t * ldo + 16 q + l] = reference dot of row l of panel q with row t. GB: bytes of a group. */
AI void tile(int64_t n, const uint8_t *w, size_t pb, const uint8_t *x, size_t xs, float *out, size_t ldo, const int NP,
             const int NT, const int F32) {
    const size_t GB = F32 ? 16 * sizeof(kn_block_mlx8_f32) : 16 * sizeof(kn_block_mlx8), QO = F32 ? 128 : 64;
    const int64_t nb = n / KN_QK_MLX8;
    __m512 L[16][KN_P16_PANELS][PT]; /* the reference's 16 lanes of each (panel, token) */
    int64_t pos = 0;
    for (int k = 0; k < 8; k++) {
        const int64_t cnt = nb / 8 + (k < nb % 8);
        __m512 acc[KN_P16_PANELS][PT][2];
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) acc[q][t][0] = acc[q][t][1] =
            _mm512_setzero_ps();
        for (int64_t i = 0; i < cnt; i++, pos++) {
            const uint8_t *g = w + (size_t)pos * GB, *xb = x + (size_t)pos * KN_Q8XM_BLOCK;
            __m512i p[KN_P16_PANELS][PT][2];
            UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) p[q][t][0] = p[q][t][1] =
                _mm512_setzero_si512();
            UNROLL for (int j = 0; j < 8; j++) {
                __m512i W[KN_P16_PANELS];
                UNROLL for (int q = 0; q < NP; q++) W[q] = _mm512_loadu_si512(g + q * pb + QO + 64 * j);
                UNROLL for (int t = 0; t < NT; t++) {
                    const __m512i bx = _mm512_set1_epi32(kn_ld_i32(xb + t * xs + 4 * j));
                    UNROLL for (int q = 0; q < NP; q++) p[q][t][j & 1] = _mm512_dpbusd_epi32(p[q][t][j & 1], W[q], bx);
                }
            }
            UNROLL for (int q = 0; q < NP; q++) {
                const __m512 d = dm16(g + q * pb, 0, F32), m = dm16(g + q * pb, 1, F32);
                UNROLL for (int t = 0; t < NT; t++) {
                    const uint8_t *xt = xb + t * xs;
                    const __m512 xd = _mm512_set1_ps(kn_ld_f32(xt + 32));
                    const __m512 ds = _mm512_mul_ps(d, xd), ms = _mm512_mul_ps(m, xd);
                    UNROLL for (int h = 0; h < 2; h++) {
                        __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p[q][t][h]), ds, acc[q][t][h]);
                        acc[q][t][h] = _mm512_fmadd_ps(_mm512_set1_ps(kn_ld_f32(xt + 36 + 4 * h)), ms, a);
                    }
                }
            }
        }
        UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) {
            L[2 * k][q][t] = acc[q][t][0];
            L[2 * k + 1][q][t] = acc[q][t][1];
        }
    }
    UNROLL for (int q = 0; q < NP; q++) UNROLL for (int t = 0; t < NT; t++) {
        __m512 a[8];
        UNROLL for (int i = 0; i < 8; i++) a[i] = _mm512_add_ps(L[i][q][t], L[i + 8][q][t]);
        UNROLL for (int i = 0; i < 4; i++) a[i] = _mm512_add_ps(a[i], a[i + 4]);
        UNROLL for (int i = 0; i < 2; i++) a[i] = _mm512_add_ps(a[i], a[i + 2]);
        _mm512_storeu_ps(out + (size_t)t * ldo + 16 * q, _mm512_add_ps(a[0], a[1]));
    }
}

/* The kn_p16_fn of format F32 (0: MLX8, 1: MLX8_F32): decode panel by panel, prefill in passes of up to
 * PT tokens over NP panels together. */
AI void entry(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out, size_t ldo,
              const int F32) {
    const size_t pb = (size_t)(n / KN_QK_MLX8) * 16 * (F32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8));
    if (nt <= 2) {
        for (int q = 0; q < np; q++) {
            if (nt == 1) tile(n, w + q * pb, pb, x, xs, out + 16 * q, ldo, 1, 1, F32);
            else tile(n, w + q * pb, pb, x, xs, out + 16 * q, ldo, 1, 2, F32);
        }
        return;
    }
    for (int t0 = 0; t0 < nt;) {
        const int left = nt - t0, c = left >= PT ? PT : left;
        const uint8_t *xt = x + (size_t)t0 * xs;
        float *o = out + (size_t)t0 * ldo;
        if (np >= 2) {
            if (c == 3) tile(n, w, pb, xt, xs, o, ldo, 2, 3, F32);
            else if (c == 2) tile(n, w, pb, xt, xs, o, ldo, 2, 2, F32);
            else tile(n, w, pb, xt, xs, o, ldo, 2, 1, F32);
        } else {
            if (c == 3) tile(n, w, pb, xt, xs, o, ldo, 1, 3, F32);
            else if (c == 2) tile(n, w, pb, xt, xs, o, ldo, 1, 2, F32);
            else tile(n, w, pb, xt, xs, o, ldo, 1, 1, F32);
        }
        t0 += c;
    }
}

static void p16_mlx8(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out, size_t ldo) {
    entry(n, w, np, x, xs, nt, out, ldo, 0);
}
static void p16_mlx8_f32(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,
                         size_t ldo) {
    entry(n, w, np, x, xs, nt, out, ldo, 1);
}

/* Fills the MLX8 / MLX8_F32 panel kernels of k (kernels.h). Called only on CPUs with AVX-512 F/BW/VL/VNNI. */
void kn_avx512_init_p16_mlx(kn_kernels *k) {
    k->p16[KN_MLX8] = p16_mlx8;
    k->p16[KN_MLX8_F32] = p16_mlx8_f32;
}

#else /* not x86-64: the set is never selected */
void kn_avx512_init_p16_mlx(kn_kernels *k) { (void)k; }
#endif
