/*
 * quant_mlx.c - scalar reference kernels of kiln's own MLX 8-bit formats (quant.h): MLX8 (fp16 scale
 * and bias) and MLX8_F32 (fp32 scale and bias). They hold MLX's 8-bit affine quantization,
 * w = scale * q + bias with q unsigned 0..255, exactly: a Hugging Face directory quantized by MLX is
 * repacked into them at load (model/hf.c), one MLX group of 32, 64 or 128 becoming 1, 2 or 4 blocks
 * with the group's scale and bias.
 *
 * These are the source of truth for the SIMD kernels. The dot with Q8_0 activations (numerics
 * contract in quant.h) is Q4_1's with the codes centred: per block, in order,
 *     p   = sum of (q[e] - 128) * xq[e]                        (exact integer)
 *     sx  = sum of xq[e]                                        (exact integer)
 *     acc = fmaf((float)p, d * x.d, acc);  acc = fmaf((float)sx * x.d, m + 128 d, acc)
 * (m + 128 d as fmaf(d, 128, m); (float)sx * x.d is exact: 12 bits times fp16's 11). Centring keeps
 * the two terms small (MLX's bias is about -128 times the scale, so d * sum(q x) and m * sum(x) would
 * nearly cancel), and one step per block is what a kernel with one row per lane (pack.h) takes at the
 * speed of Q8_0's.
 */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

/* Scale and bias of a block of either format as fp32 (exact). */
static inline void mlx8_dm(const void *blk, bool f32, float *d, float *m) {
    if (f32) {
        const kn_block_mlx8_f32 *b = blk;
        *d = b->d;
        *m = b->m;
    } else {
        const kn_block_mlx8 *b = blk;
        *d = kn_fp16_to_fp32(b->d);
        *m = kn_fp16_to_fp32(b->m);
    }
}

static void to_float(const void *src, float *dst, int64_t n, bool f32) {
    const size_t bs = f32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8);
    for (int64_t i = 0; i < n / KN_QK_MLX8; i++) {
        const uint8_t *blk = (const uint8_t *)src + (size_t)i * bs;
        float d, m;
        mlx8_dm(blk, f32, &d, &m);
        const uint8_t *qs = blk + bs - KN_QK_MLX8;
        for (int e = 0; e < KN_QK_MLX8; e++) {
            const float s = d * (float)qs[e]; /* MLX's formula: scale * q, then + bias */
            dst[i * KN_QK_MLX8 + e] = s + m;
        }
    }
}

/* The reference quantizer (for tests and the model generator): per block of 32, the scale spans the
 * block's range, d = (max - min) / 255 and m = min (both stored in the format's precision), and each
 * element rounds to the nearest level of the stored d and m. */
static void from_float(const float *src, void *dst, int64_t n, bool f32) {
    const size_t bs = f32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8);
    for (int64_t i = 0; i < n / KN_QK_MLX8; i++) {
        const float *x = src + i * KN_QK_MLX8;
        uint8_t *blk = (uint8_t *)dst + (size_t)i * bs;
        float lo = INFINITY, hi = -INFINITY;
        for (int e = 0; e < KN_QK_MLX8; e++) {
            if (!isfinite(x[e])) continue;
            if (x[e] < lo) lo = x[e];
            if (x[e] > hi) hi = x[e];
        }
        if (!(lo <= hi)) lo = hi = 0.0f; /* no finite element */
        float d, m;
        if (f32) {
            kn_block_mlx8_f32 *b = (kn_block_mlx8_f32 *)blk;
            b->d = (hi - lo) / 255.0f;
            b->m = lo;
        } else {
            kn_block_mlx8 *b = (kn_block_mlx8 *)blk;
            b->d = kn_fp32_to_fp16_scale((hi - lo) / 255.0f);
            b->m = kn_fp32_to_fp16_sat(lo);
        }
        mlx8_dm(blk, f32, &d, &m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *qs = blk + bs - KN_QK_MLX8;
        for (int e = 0; e < KN_QK_MLX8; e++) qs[e] = (uint8_t)kn_round_clamp((x[e] - m) * id, 0, 255);
    }
}

static float vec_dot(int64_t n, const void *w, const void *x, bool f32) {
    const size_t bs = f32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8);
    const kn_block_q8_0 *xb = x;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / KN_QK_MLX8; i++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)i * bs;
        const uint8_t *qs = blk + bs - KN_QK_MLX8;
        float d, m;
        mlx8_dm(blk, f32, &d, &m);
        int32_t p = 0, sx = 0;
        for (int e = 0; e < KN_QK_MLX8; e++) {
            p += ((int32_t)qs[e] - 128) * xb[i].qs[e];
            sx += xb[i].qs[e];
        }
        const float xd = kn_fp16_to_fp32(xb[i].d);
        acc = fmaf((float)p, d * xd, acc);
        acc = fmaf((float)sx * xd, fmaf(d, 128.0f, m), acc);
    }
    return acc;
}

void kn_mlx8_to_float(const void *src, float *dst, int64_t n) { to_float(src, dst, n, false); }
void kn_mlx8_from_float(const float *src, void *dst, int64_t n) { from_float(src, dst, n, false); }
float kn_mlx8_vec_dot_q8_0(int64_t n, const void *w, const void *x) { return vec_dot(n, w, x, false); }
void kn_mlx8_f32_to_float(const void *src, float *dst, int64_t n) { to_float(src, dst, n, true); }
void kn_mlx8_f32_from_float(const float *src, void *dst, int64_t n) { from_float(src, dst, n, true); }
float kn_mlx8_f32_vec_dot_q8_0(int64_t n, const void *w, const void *x) { return vec_dot(n, w, x, true); }
