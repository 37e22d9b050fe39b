/*
 * kernels_neon_mlx.c - ARM64 NEON GEMM tile kernels of kiln's MLX 8-bit formats (MLX8: fp16 scale and
 * bias, MLX8_F32: fp32; x Q8_0 activations), with the dotprod extension: what MLX-quantized 8-bit
 * Hugging Face models load as. Registered with the other block formats when the CPU reports dotprod
 * (kn_neon_init_dotprod); the file is built for ARMv8.2-A+dotprod code.
 *
 * Bit identity with the reference (quant_mlx.c; quant.h's numerics contract): per block and token the
 * exact integers p = sum (q - 128) x (SDOT on the codes with the top bit flipped) and sx = sum x (SDOT
 * with ones), then the reference's two fmas, in block order.
 *
 * A tile runs row by row: a weight block is unpacked once and taken against every token of the tile
 * (up to 4, each with its own accumulator), so the tile contract (kernels.h) holds: each output's
 * operations depend only on its own row and token.
 */
#include "tensor/kernels.h"

#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#include "tensor/kernels_neon_q.h"

/* NAME: the kn_gemm_fn of the format whose block (BT) holds d, m (as fp32 through DM) and qs[32]. */
#define GEMM_MLX(NAME, BT, DM)                                                                                         \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / KN_QK_MLX8;                                                                             \
        const int8x16_t ones = vdupq_n_s8(1);                                                                          \
        const uint8x16_t top = vdupq_n_u8(0x80);                                                                       \
        for (int r = 0; r < nr; r++) {                                                                                 \
            const BT *a = (const BT *)(const void *)(w + (size_t)r * ws);                                              \
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                                   \
            for (int64_t i = 0; i < nb; i++) {                                                                         \
                const int8x16_t c0 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(a[i].qs), top));                            \
                const int8x16_t c1 = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(a[i].qs + 16), top));                       \
                float d, m;                                                                                            \
                DM(&a[i], d, m);                                                                                       \
                const float mo = fmaf(d, 128.0f, m);                                                                   \
                for (int t = 0; t < nt; t++) {                                                                         \
                    const kn_block_q8_0 *b = (const kn_block_q8_0 *)(const void *)(x + (size_t)t * xs) + i;            \
                    const int8x16_t x0 = vld1q_s8(b->qs), x1 = vld1q_s8(b->qs + 16);                                   \
                    const int32_t sx = vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), ones, x0), ones, x1));           \
                    const float xd = h2f(b->d);                                                                        \
                    acc[t] = fmaf((float)dot32(c0, c1, b->qs), d * xd, acc[t]);                                        \
                    acc[t] = fmaf((float)sx * xd, mo, acc[t]);                                                         \
                }                                                                                                      \
            }                                                                                                          \
            for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = acc[t];                                    \
        }                                                                                                              \
    }

#define DM_F16(blk, d, m) ((d) = h2f((blk)->d), (m) = h2f((blk)->m))
#define DM_F32(blk, d, m) ((d) = (blk)->d, (m) = (blk)->m)
GEMM_MLX(gemm_mlx8, kn_block_mlx8, DM_F16)
GEMM_MLX(gemm_mlx8_f32, kn_block_mlx8_f32, DM_F32)
#endif

/* Fills the MLX8 and MLX8_F32 kernels of k (called by kn_neon_init_dotprod on dotprod CPUs). */
bool kn_neon_init_mlx(kn_kernels *k) {
#if defined(__aarch64__)
    k->gemm[KN_MLX8] = gemm_mlx8;
    k->gemm[KN_MLX8_F32] = gemm_mlx8_f32;
    return true;
#else
    (void)k;
    return false;
#endif
}
