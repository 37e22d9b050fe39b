/*
 * pack.c - the 16-row panel layout of Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K / IQ4_NL / IQ4_XS / MXFP4 / MLX8 matrices
 * (see pack.h): repacking at load, reading a row back, and the activation rows of the panel kernels. Plain C: the
 * layout is a byte format, not an instruction set. The reference for the panel kernels is the plain vec_dot of quant.h
 * on rows read back with kn_p16_row_plain (tests/unit/test_pack.c).
 *
 * Every format is described by its block's fields (offset and size in the plain block); packing
 * spreads each field over the 16 rows of a panel as pack.h says, unpacking gathers it back.
 */
#include "tensor/pack.h"

#include "base/base.h"
#include "tensor/quant.h"

#include <string.h>

bool kn_p16_type(kn_dtype t) {
    return t == KN_Q4_0 || t == KN_Q4_1 || t == KN_Q8_0 || t == KN_Q4_K || t == KN_Q5_K || t == KN_Q6_K ||
           t == KN_IQ4_NL || t == KN_IQ4_XS || t == KN_MXFP4 || t == KN_MLX8 || t == KN_MLX8_F32;
}

typedef struct field {
    uint16_t off, size; /* bytes in the plain block */
    uint32_t flip;      /* xor applied to each dword (Q8_0 quants: +128) */
} field;

typedef struct layout {
    int n_fields;
    field f[5];
    int block_elems;    /* elements per block */
    size_t block_bytes; /* bytes per plain block; a group is 16 of them */
} layout;

static inline __attribute__((always_inline)) layout layout_of(kn_dtype t) {
    switch (t) {
        case KN_Q4_0: return (layout){2, {{0, 2, 0}, {2, 16, 0}}, 32, sizeof(kn_block_q4_0)};
        case KN_Q4_1: return (layout){3, {{0, 2, 0}, {2, 2, 0}, {4, 16, 0}}, 32, sizeof(kn_block_q4_1)};
        case KN_Q8_0: return (layout){2, {{0, 2, 0}, {2, 32, 0x80808080u}}, 32, sizeof(kn_block_q8_0)};
        case KN_Q4_K: return (layout){4, {{0, 2, 0}, {2, 2, 0}, {4, 12, 0}, {16, 128, 0}}, 256, sizeof(kn_block_q4_k)};
        case KN_Q5_K:
            return (layout){
                5, {{0, 2, 0}, {2, 2, 0}, {4, 12, 0}, {16, 32, 0}, {48, 128, 0}}, 256, sizeof(kn_block_q5_k)};
        case KN_IQ4_NL: return (layout){2, {{0, 2, 0}, {2, 16, 0}}, 32, sizeof(kn_block_iq4_nl)};
        case KN_MXFP4: return (layout){2, {{0, 1, 0}, {1, 16, 0}}, 32, sizeof(kn_block_mxfp4)};
        case KN_MLX8: return (layout){3, {{0, 2, 0}, {2, 2, 0}, {4, 32, 0}}, 32, sizeof(kn_block_mlx8)};
        case KN_MLX8_F32: return (layout){3, {{0, 4, 0}, {4, 4, 0}, {8, 32, 0}}, 32, sizeof(kn_block_mlx8_f32)};
        case KN_IQ4_XS:
            return (layout){4, {{0, 2, 0}, {2, 2, 0}, {4, 4, 0}, {8, 128, 0}}, 256, sizeof(kn_block_iq4_xs)};
        default: /* KN_Q6_K */
            return (layout){4, {{0, 128, 0}, {128, 64, 0}, {192, 16, 0}, {208, 2, 0}}, 256, sizeof(kn_block_q6_k)};
    }
}

/* Copies row l's block from plain bytes to its group (to_group) or from the group to plain bytes:
 * src is the plain block and dst the group, or the other way round. Every copy has a constant size
 * (1, 2 or 4 bytes), so none is a call: a model's load repacks every matrix through here. */
static inline __attribute__((always_inline)) void move_block(const layout *L, const uint8_t *src, uint8_t *dst, int l,
                                                             bool to_group) {
    size_t goff = 0;
    for (int i = 0; i < L->n_fields; i++) {
        const field *f = &L->f[i];
        if (f->size <= 2) { /* a 2-byte (1-byte) field is lane l of a 32-byte (16-byte) run */
            const size_t g = goff + f->size * (size_t)l, b = f->off;
            if (f->size == 2) memcpy(dst + (to_group ? g : b), src + (to_group ? b : g), 2);
            else dst[to_group ? g : b] = src[to_group ? b : g];
        } else { /* a 4k-byte field is dword l of k vectors */
            for (int j = 0; j < f->size / 4; j++) {
                const size_t g = goff + 64 * (size_t)j + 4 * (size_t)l, b = (size_t)f->off + 4 * (size_t)j;
                uint32_t v;
                memcpy(&v, src + (to_group ? b : g), 4);
                v ^= f->flip;
                memcpy(dst + (to_group ? g : b), &v, 4);
            }
        }
        goff += (size_t)KN_P16_ROWS * f->size;
    }
}

/* kn_p16_pack with the layout inlined as a constant (one copy of this loop per type). */
static inline __attribute__((always_inline)) void pack_as(const layout L, const uint8_t *src, int64_t rows,
                                                          int64_t cols, uint8_t *dst) {
    const int64_t nb = cols / L.block_elems;
    const size_t rb = (size_t)nb * L.block_bytes, gb = KN_P16_ROWS * L.block_bytes;
    for (int64_t p = 0; p < rows / KN_P16_ROWS; p++) {
        uint8_t *panel = dst + (size_t)p * KN_P16_ROWS * rb;
        for (int l = 0; l < KN_P16_ROWS; l++) { /* row by row: each source row read in order */
            const uint8_t *row = src + (size_t)(p * KN_P16_ROWS + l) * rb;
            for (int64_t b = 0; b < nb; b++)
                move_block(&L, row + (size_t)b * L.block_bytes, panel + (size_t)b * gb, l, true);
        }
    }
}

void kn_p16_pack(kn_dtype t, const uint8_t *src, int64_t rows, int64_t cols, uint8_t *dst) {
    switch (t) { /* each type's layout a constant: the load of a 1B Q4_0 model packed 700 MB at 0.8 GB/s */
        case KN_Q4_0: pack_as(layout_of(KN_Q4_0), src, rows, cols, dst); break;
        case KN_Q4_1: pack_as(layout_of(KN_Q4_1), src, rows, cols, dst); break;
        case KN_Q8_0: pack_as(layout_of(KN_Q8_0), src, rows, cols, dst); break;
        case KN_Q4_K: pack_as(layout_of(KN_Q4_K), src, rows, cols, dst); break;
        case KN_Q5_K: pack_as(layout_of(KN_Q5_K), src, rows, cols, dst); break;
        case KN_Q6_K: pack_as(layout_of(KN_Q6_K), src, rows, cols, dst); break;
        default: pack_as(layout_of(t), src, rows, cols, dst); break; /* the formats of fewer models */
    }
}

void kn_p16_row_plain(kn_dtype t, const uint8_t *data, int64_t cols, int64_t r, uint8_t *out) {
    const layout L = layout_of(t);
    const int64_t nb = cols / L.block_elems;
    const size_t rb = (size_t)nb * L.block_bytes, gb = KN_P16_ROWS * L.block_bytes;
    const uint8_t *panel = data + (size_t)(r / KN_P16_ROWS) * KN_P16_ROWS * rb;
    for (int64_t b = 0; b < nb; b++)
        move_block(&L, panel + (size_t)b * gb, out + (size_t)b * L.block_bytes, (int)(r % KN_P16_ROWS), false);
}

void kn_p16_row_f32(kn_dtype t, const uint8_t *data, int64_t cols, int64_t r, float *out) {
    const layout L = layout_of(t);
    const kn_type_traits *tr = kn_type_traits_get(t);
    const size_t rb = (size_t)(cols / L.block_elems) * L.block_bytes, gb = KN_P16_ROWS * L.block_bytes;
    const uint8_t *panel = data + (size_t)(r / KN_P16_ROWS) * KN_P16_ROWS * rb;
    for (int64_t b = 0; b < cols / L.block_elems; b++) { /* one block at a time: no row buffer */
        uint8_t blk[sizeof(kn_block_q6_k)];              /* the largest block of the formats */
        move_block(&L, panel + (size_t)b * gb, blk, (int)(r % KN_P16_ROWS), false);
        tr->to_float(blk, out + (int64_t)L.block_elems * b, L.block_elems);
    }
}

size_t kn_q8x_row_bytes(kn_dtype t, int64_t n) {
    if (t == KN_MLX8 || t == KN_MLX8_F32) return (size_t)(n / 32) * KN_Q8XM_BLOCK;
    if (t == KN_Q6_K) return (size_t)(n / KN_QK_K) * KN_Q8K6_BLOCK;
    if (t == KN_IQ4_XS) return (size_t)(n / KN_QK_K) * KN_Q8KC_BLOCK;
    return t == KN_Q4_K || t == KN_Q5_K ? (size_t)(n / KN_QK_K) * KN_Q8KX_BLOCK : (size_t)(n / 32) * KN_Q8X_BLOCK;
}

void kn_q8x_quantize(kn_dtype t, kn_from_float_fn q, const float *x, uint8_t *dst, int64_t n) {
    if (t == KN_Q6_K) {
        for (int64_t b = 0; b < n / KN_QK_K; b++) {
            kn_block_q8_k k;
            q(x + b * KN_QK_K, &k, KN_QK_K);
            uint8_t *o = dst + (size_t)b * KN_Q8K6_BLOCK;
            memcpy(o, k.qs, KN_QK_K);
            memcpy(o + KN_QK_K, &k.d, 4);
            memcpy(o + KN_QK_K + 4, k.bsums, sizeof k.bsums);
        }
        return;
    }
    if (t == KN_Q4_K || t == KN_Q5_K) {
        for (int64_t b = 0; b < n / KN_QK_K; b++) {
            kn_block_q8_k k;
            q(x + b * KN_QK_K, &k, KN_QK_K);
            uint8_t *o = dst + (size_t)b * KN_Q8KX_BLOCK;
            memcpy(o, k.qs, KN_QK_K);
            memcpy(o + KN_QK_K, &k.d, 4);
            for (int j = 0; j < 8; j++) {
                const int16_t bs = (int16_t)(k.bsums[2 * j] + k.bsums[2 * j + 1]); /* |bs| <= 32 * 128 */
                memcpy(o + KN_QK_K + 4 + 2 * j, &bs, 2);
            }
        }
        return;
    }
    if (t == KN_IQ4_XS) { /* Q8KC: the quants, d, and -128 times the sum of each sub-block */
        for (int64_t b = 0; b < n / KN_QK_K; b++) {
            uint8_t *o = dst + (size_t)b * KN_Q8KC_BLOCK;
            kn_block_q8_k kb;
            q(x + b * KN_QK_K, &kb, KN_QK_K);
            memcpy(o, kb.qs, KN_QK_K);
            memcpy(o + KN_QK_K, &kb.d, 4);
            for (int j = 0; j < 8; j++) {
                int32_t sum = 0;
                for (int e = 0; e < 32; e++) sum += kb.qs[32 * j + e];
                const int32_t c = -128 * sum;
                memcpy(o + KN_QK_K + 4 + 4 * j, &c, 4);
            }
        }
        return;
    }
    if (t == KN_Q4_1) { /* Q8X1: the Q8_1 quants, d and s as fp32 */
        for (int64_t b = 0; b < n / 32; b++) {
            kn_block_q8_1 k;
            q(x + b * 32, &k, 32);
            uint8_t *o = dst + (size_t)b * KN_Q8X_BLOCK;
            const float d = kn_fp16_to_fp32(k.d), s = kn_fp16_to_fp32(k.s);
            memcpy(o, k.qs, 32);
            memcpy(o + 32, &d, 4);
            memcpy(o + 36, &s, 4);
        }
        return;
    }
    /* Q8X (Q8XM: and xs = sum * d, exact: a sum of 32 quants has 12 bits, d 11) */
    const int32_t off = t == KN_Q4_0 ? 8 : 128;
    const bool mlx = t == KN_MLX8 || t == KN_MLX8_F32;
    const size_t xb = mlx ? KN_Q8XM_BLOCK : KN_Q8X_BLOCK;
    for (int64_t b = 0; b < n / 32; b++) {
        kn_block_q8_0 k;
        q(x + b * 32, &k, 32);
        uint8_t *o = dst + (size_t)b * xb;
        int32_t sum = 0;
        for (int e = 0; e < 32; e++) sum += k.qs[e];
        const float d = kn_fp16_to_fp32(k.d), xs = (float)sum * d;
        const int32_t c = -off * sum;
        memcpy(o, k.qs, 32);
        memcpy(o + 32, &d, 4);
        memcpy(o + 36, &c, 4);
        if (mlx) memcpy(o + 40, &xs, 4);
    }
}
