/*
 * pack_mlx.c - the 16-row panel layout of MLX8 and MLX8_F32 matrices (pack.h): repacking at load, reading
 * a row back, and the Q8XM activation rows of their panel kernels. Plain C: the layout is a byte format.
 *
 * The reference dot of these formats (quant_mlx.c) keeps 16 float lanes, two per block b % 8; each lane
 * is a chain over the blocks b = k, k + 8, k + 16, ... of its class k = b % 8. The panel layout stores
 * the block columns in class order (all of class 0, then class 1, ...), so that a kernel walks each
 * chain front to back with two accumulators per row and token, and the whole panel is still one
 * sequential stream. The activation rows follow the same order.
 */
#include "tensor/pack.h"

#include "tensor/quant.h"

#include <string.h>

bool kn_p16_mlx_type(kn_dtype t) { return t == KN_MLX8 || t == KN_MLX8_F32; }

/* Bytes of the scale (and of the bias) of one block. */
static size_t scale_bytes(kn_dtype t) { return t == KN_MLX8_F32 ? 4 : 2; }

static size_t block_bytes(kn_dtype t) { return t == KN_MLX8_F32 ? sizeof(kn_block_mlx8_f32) : sizeof(kn_block_mlx8); }

int64_t kn_p16_mlx_pos(int64_t b, int64_t nb) {
    const int64_t k = b % 8, full = nb / 8, rem = nb % 8;
    /* class j < k holds full + (j < rem) blocks */
    return k * full + (k < rem ? k : rem) + b / 8;
}

/* Copies row l's block between its plain bytes and its group (to_group: plain -> group). */
static void move_block(kn_dtype t, const uint8_t *src, uint8_t *dst, int l, bool to_group) {
    const size_t sb = scale_bytes(t), G = KN_P16_ROWS * sb;
    for (int f = 0; f < 2; f++) { /* d, m: lane l of a run of 16 values */
        const size_t g = f * G + sb * (size_t)l, b = f * sb;
        memcpy(dst + (to_group ? g : b), src + (to_group ? b : g), sb);
    }
    for (int j = 0; j < 8; j++) { /* quants: dword l of vector j */
        const size_t g = 2 * G + 64 * (size_t)j + 4 * (size_t)l, b = 2 * sb + 4 * (size_t)j;
        memcpy(dst + (to_group ? g : b), src + (to_group ? b : g), 4);
    }
}

void kn_p16_mlx_pack(kn_dtype t, const uint8_t *src, int64_t rows, int64_t cols, uint8_t *dst) {
    const size_t bb = block_bytes(t), gb = KN_P16_ROWS * bb;
    const int64_t nb = cols / KN_QK_MLX8;
    const size_t rb = (size_t)nb * bb;
    for (int64_t p = 0; p < rows / KN_P16_ROWS; p++) {
        uint8_t *panel = dst + (size_t)p * KN_P16_ROWS * rb;
        for (int l = 0; l < KN_P16_ROWS; l++) {
            const uint8_t *row = src + (size_t)(p * KN_P16_ROWS + l) * rb;
            for (int64_t b = 0; b < nb; b++)
                move_block(t, row + (size_t)b * bb, panel + (size_t)kn_p16_mlx_pos(b, nb) * gb, l, true);
        }
    }
}

void kn_p16_mlx_row_plain(kn_dtype t, const uint8_t *data, int64_t cols, int64_t r, uint8_t *out) {
    const size_t bb = block_bytes(t), gb = KN_P16_ROWS * bb;
    const int64_t nb = cols / KN_QK_MLX8;
    const uint8_t *panel = data + (size_t)(r / KN_P16_ROWS) * KN_P16_ROWS * (size_t)nb * bb;
    for (int64_t b = 0; b < nb; b++)
        move_block(t, panel + (size_t)kn_p16_mlx_pos(b, nb) * gb, out + (size_t)b * bb, (int)(r % KN_P16_ROWS), false);
}

void kn_p16_mlx_row_f32(kn_dtype t, const uint8_t *data, int64_t cols, int64_t r, float *out) {
    const size_t bb = block_bytes(t), gb = KN_P16_ROWS * bb;
    const int64_t nb = cols / KN_QK_MLX8;
    const kn_type_traits *tr = kn_type_traits_get(t);
    const uint8_t *panel = data + (size_t)(r / KN_P16_ROWS) * KN_P16_ROWS * (size_t)nb * bb;
    for (int64_t b = 0; b < nb; b++) { /* one block at a time: no row buffer */
        uint8_t blk[sizeof(kn_block_mlx8_f32)];
        move_block(t, panel + (size_t)kn_p16_mlx_pos(b, nb) * gb, blk, (int)(r % KN_P16_ROWS), false);
        tr->to_float(blk, out + KN_QK_MLX8 * b, KN_QK_MLX8);
    }
}

size_t kn_q8xm_row_bytes(int64_t n) { return (size_t)(n / KN_QK_MLX8) * KN_Q8XM_BLOCK; }

void kn_q8xm_quantize(kn_from_float_fn q, const float *x, uint8_t *dst, int64_t n) {
    const int64_t nb = n / KN_QK_MLX8;
    for (int64_t b = 0; b < nb; b++) {
        kn_block_q8_0 k;
        q(x + b * KN_QK_MLX8, &k, KN_QK_MLX8);
        int32_t s[2] = {0, 0};
        for (int e = 0; e < KN_QK_MLX8; e++) s[(e % 8) >= 4] += k.qs[e];
        const float v[3] = {kn_fp16_to_fp32(k.d), (float)s[0], (float)s[1]};
        uint8_t *o = dst + (size_t)kn_p16_mlx_pos(b, nb) * KN_Q8XM_BLOCK;
        memcpy(o, k.qs, 32);
        memcpy(o + 32, v, sizeof v);
    }
}
