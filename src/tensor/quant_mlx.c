/*
 * quant_mlx.c - scalar reference kernels of kiln's own MLX 8-bit formats (quant.h): MLX8 (fp16 scale
 * and bias) and MLX8_F32 (fp32 scale and bias). They hold MLX's 8-bit affine quantization,
 * w = scale * q + bias with q unsigned 0..255, exactly: a Hugging Face directory quantized by MLX is
 * repacked into them at load (model/hf.c), one MLX group of 32, 64 or 128 becoming 1, 2 or 4 blocks
 * with the group's scale and bias.
 *
 * These are the source of truth for the SIMD kernels, which reproduce them bit for bit. The dot with
 * Q8_0 activations (numerics contract in quant.h) keeps 16 float lanes: block b's elements e with
 * e % 8 < 4 go to lane 2 (b % 8), the others to lane 2 (b % 8) + 1, and per block and lane
 *     p   = sum of q[e] * xq[e] over the lane's 16 elements   (exact integer)
 *     sx  = sum of xq[e] over the same elements                (exact integer)
 *     acc = fmaf((float)p, d * x.d, acc);  acc = fmaf((float)sx, m * x.d, acc)
 * so that d * sum(q * x) + m * sum(x) comes out of one vector of integer dot products per group of 8
 * blocks; the result is kn_reduce16 of the lanes.
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
    float acc[16] = {0};
    for (int64_t i = 0; i < n / KN_QK_MLX8; i++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)i * bs;
        const uint8_t *qs = blk + bs - KN_QK_MLX8;
        float d, m;
        mlx8_dm(blk, f32, &d, &m);
        const float xd = kn_fp16_to_fp32(xb[i].d), ds = d * xd, ms = m * xd;
        for (int h = 0; h < 2; h++) {
            int32_t p = 0, sx = 0;
            for (int e = 4 * h; e < KN_QK_MLX8; e += 8)
                for (int k = e; k < e + 4; k++) {
                    p += (int32_t)qs[k] * xb[i].qs[k];
                    sx += xb[i].qs[k];
                }
            float *a = &acc[2 * (i & 7) + h];
            *a = fmaf((float)p, ds, *a);
            *a = fmaf((float)sx, ms, *a);
        }
    }
    return kn_reduce16(acc);
}

void kn_mlx8_to_float(const void *src, float *dst, int64_t n) { to_float(src, dst, n, false); }
void kn_mlx8_from_float(const float *src, void *dst, int64_t n) { from_float(src, dst, n, false); }
float kn_mlx8_vec_dot_q8_0(int64_t n, const void *w, const void *x) { return vec_dot(n, w, x, false); }
void kn_mlx8_f32_to_float(const void *src, float *dst, int64_t n) { to_float(src, dst, n, true); }
void kn_mlx8_f32_from_float(const float *src, void *dst, int64_t n) { from_float(src, dst, n, true); }
float kn_mlx8_f32_vec_dot_q8_0(int64_t n, const void *w, const void *x) { return vec_dot(n, w, x, true); }
