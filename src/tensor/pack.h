/*
 * pack.h - the 16-row panel layout ("P16") of Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 and
 * MLX8 / MLX8_F32 weight matrices, and the activation formats of the panel kernels.
 *
 * SIMD kernels that put one weight row in each 32-bit lane of a 512-bit register want the 16 rows of a
 * panel side by side: then one sequential stream of bytes feeds a whole panel (decode reads the matrix
 * front to back once), and one vpdpbusd multiplies 4 consecutive weights of 16 rows by 4 activation
 * quants broadcast to every lane (a 256-bit register: the 8 rows of one half of a panel, the lower or
 * upper 32 bytes of each 64-byte vector below). Matrices whose kernel set has panel kernels (kn_kernels.p16) and whose
 * row count is a multiple of 16 are repacked into this layout when the model is copied into memory; the
 * packed matrix has exactly the bytes of the plain one (kn_weight.packed says which layout it holds).
 *
 * Layout. A panel is rows 16p .. 16p+15 and occupies the bytes of those 16 plain rows. Inside it, block
 * column b (block b of every row: 32 elements, 256 for Q4_K) is a group of bytes, groups in order of b.
 * A group holds the fields of the format's block in their order, each field spread over the 16 rows:
 * a 2-byte field (an fp16 scale) as 16 lanes of 2 bytes (lane l = row 16p+l); a field of 4k bytes as k
 * vectors of 64 bytes, dword l of vector j holding bytes 4j .. 4j+3 of row l's field.
 *   Q4_0 (288 bytes): d | qs (4 vectors: low nibbles elements 4j .. 4j+3, high nibbles 16+4j ..)
 *   Q4_1 (320 bytes): d | m | qs (4 vectors, as Q4_0; the codes are the unsigned q of d * q + m)
 *   Q8_0 (544 bytes): d | qs (8 vectors) stored with the top bit flipped: unsigned codes w + 128
 *   Q4_K (2304 bytes): d | dmin | scales (3 vectors) | qs (32 vectors: vector 8c + q holds
 *        qs[32c + 4q .. +3]: low nibbles are elements 4q .. 4q+3 of sub-block 2c, high nibbles of 2c+1)
 *   Q5_K (2816 bytes): d | dmin | scales (3 vectors) | qh (8 vectors: vector q holds qh[4q .. +3], bit s
 *        of a byte is bit 4 of element 4q + i of sub-block s) | qs (32 vectors, as Q4_K)
 *   Q6_K (3360 bytes): ql (32 vectors) | qh (16 vectors) | scales (4 vectors) | d, each vector j holding
 *        bytes 4j .. 4j+3 of the field (quant.h: element 128h + 32k + 4m + i takes nibble k / 2 of ql
 *        vector 16h + 8(k & 1) + m and bits 2k, 2k+1 of qh vector 8h + m)
 *   IQ4_NL (288 bytes): d | qs (4 vectors), as Q4_0 (the nibbles index the table instead of q - 8)
 *   MXFP4 (272 bytes): e (16 lanes of 1 byte: a 1-byte field is lane l = byte l of a 16-byte run) |
 *        qs (4 vectors), as Q4_0
 *   MLX8 (576 bytes): d | m | qs (8 vectors: the unsigned q of d * q + m, as stored)
 *   MLX8_F32 (640 bytes): d | m (each 16 lanes of 4 bytes: one vector) | qs (8 vectors), as MLX8
 *   IQ4_XS (2176 bytes): d | scales_h (16 lanes of 2 bytes) | scales_l (1 vector) | qs (32 vectors:
 *        vector 4j + m holds qs[16j + 4m .. +3]: low nibbles are elements 4m .. 4m+3 of sub-block j,
 *        high nibbles 16 + 4m .. 16 + 4m + 3)
 *
 * Activation rows for panel kernels:
 *   Q8X (Q4_0, Q8_0, IQ4_NL, MXFP4 weights), per 32 elements: {int8 qs[32]; float d; int32 c} (40 bytes):
 *     qs and d are exactly the Q8_0 quantization (d the stored fp16 scale as fp32), c = -off * sum(qs)
 *     with the weight codes' offset off (8 for Q4_0, 128 for the others: Q8_0's w + 128, the table
 *     formats' table value + 128): a chain of vpdpbusd started at c yields the exact integer dot
 *     product of the signed weights with the quants.
 *   Q8X1 (Q4_1 weights), per 32 elements: {int8 qs[32]; float d; float s} (40 bytes): the Q8_1
 *     quantization with its fp16 d and s (d times the sum of the quants) as fp32.
 *   Q8KX (Q4_K, Q5_K weights), per 256 elements: {int8 qs[256]; float d; int16 bs[8]} (276 bytes): the
 *     Q8_K quantization, with bs[j] = bsums[2j] + bsums[2j + 1] (the sum of sub-block j's 32 quants).
 *   Q8KC (IQ4_XS weights), per 256 elements: {int8 qs[256]; float d; int32 c[8]} (292 bytes): the Q8_K
 *     quantization and c[j] = -128 * (the sum of sub-block j's 32 quants): a vpdpbusd chain of the table
 *     values plus 128 started at c[j] yields sub-block j's exact signed sum.
 *   Q8K6 (Q6_K weights), per 256 elements: {int8 qs[256]; float d; int16 bsums[16]} (292 bytes): the
 *     Q8_K quantization with its 16 sums (Q6_K's sub-blocks are 16 elements).
 *
 *   Q8XM (MLX8, MLX8_F32 weights), per 32 elements: {int8 qs[32]; float d; int32 c; float xs} (44 bytes):
 *     Q8X with off = 128 (c turns the unsigned q into q - 128), and xs = d * sum(qs), exact.
 *
 * Numerics: a panel kernel's output for (row, token) is exactly the reference vec_dot of quant.h, bit
 * for bit (the integer sums are exact, and the float steps per block are the reference's).
 */
#ifndef KN_PACK_H
#define KN_PACK_H

#include "tensor/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Unaligned little-endian loads of 4 bytes at p, as the panel kernels read scalar fields of a group or
 * an activation block. */
static inline int32_t kn_ld_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline float kn_ld_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* Pins the vector v to one register at this point. A panel kernel's per-token sums are chains
 * (S += product, quad after quad); integer addition being associative, GCC may rewrite such a chain
 * into a tree, computing every product of a block first and parking them on the stack, which cost
 * the plain AVX2 kernels 20-50% of their prefill speed (docs/benchmarks.md, 2026-12-04 night). */
#define KN_CHAIN(v) __asm__("" : "+x"(v))

/* Prefetches (into L1) the cache lines of the gb bytes at g + dist: a decode panel kernel's look-ahead
 * on the sequential stream of its panel (never faults; the address is formed as an integer, as it may
 * lie past the matrix). Always inlined: a call that only prefetches could be deleted as free of effects. */
__attribute__((always_inline)) static inline void kn_prefetch_piece(const uint8_t *g, size_t gb, size_t dist) {
    const uintptr_t a = (uintptr_t)g + dist;
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + gb; l += 64) __builtin_prefetch((const void *)l, 0, 3);
}

/* True when w, the panels of a prefill call of a panel kernel, differ from those of this thread's
 * previous prefill call into the same kernel file (each file that includes this has its own record):
 * the first call over a pair of panels streams them from memory, the matmul's later token tiles over
 * them find them in the caches (kn_matmul runs every token tile of a block over the same panels). */
static inline bool kn_p16_first_call(const uint8_t *w) {
    static _Thread_local const uint8_t *last;
    const bool first = w != last;
    last = w;
    return first;
}

#define KN_P16_ROWS   16
#define KN_Q8X_BLOCK  40  /* bytes of a Q8X (Q8X1) activation block of 32: qs[32], float d, int32 c (float s) */
#define KN_Q8KX_BLOCK 276 /* bytes of a Q8KX activation block of 256: qs[256], float d, int16 bs[8] */
#define KN_Q8KC_BLOCK 292 /* bytes of a Q8KC activation block of 256: qs[256], float d, int32 c[8] */
#define KN_Q8K6_BLOCK 292 /* bytes of a Q8K6 activation block of 256: qs[256], float d, int16 bsums[16] */
#define KN_Q8XM_BLOCK 44  /* bytes of a Q8XM activation block of 32 (MLX8): qs[32], float d, int32 c, float xs */

#define KN_P16_PANELS 2 /* panels per panel-kernel call at most */

/* Panel kernel: np consecutive panels (1 <= np <= KN_P16_PANELS) of one matrix at w times nt
 * activation rows (1 <= nt <= the set's p16_tile_t): for t < nt and l < 16 * np,
 *   out[t * ldo + l] = dot(row l of the panels at w, activation row t at x + t * xs)
 * over n elements (n a multiple of the block size); activation rows in the weight type's format.
 * Several panels per call let one activation broadcast feed several vpdpbusd. */
typedef void (*kn_p16_fn)(int64_t n, const uint8_t *w, int np, const uint8_t *x, size_t xs, int nt, float *out,
                          size_t ldo);

/* True when matrices of type t have a panel layout (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4,
 * MLX8, MLX8_F32). */
bool kn_p16_type(kn_dtype t);

/* Repacks a rows x cols matrix of type t (kn_p16_type(t), rows % 16 == 0, whole blocks) from the
 * plain row-major bytes at src into the panel layout at dst (the same number of bytes; src and dst must
 * not overlap). */
void kn_p16_pack(kn_dtype t, const uint8_t *src, int64_t rows, int64_t cols, uint8_t *dst);

/* Dequantizes row r of a packed rows x cols matrix of type t at data into out[cols]. */
void kn_p16_row_f32(kn_dtype t, const uint8_t *data, int64_t cols, int64_t r, float *out);

/* Copies row r of a packed matrix back into plain blocks (row_bytes bytes at out). */
void kn_p16_row_plain(kn_dtype t, const uint8_t *data, int64_t cols, int64_t r, uint8_t *out);

/* Bytes of one activation row of n elements for panel kernels of weight type t. */
size_t kn_q8x_row_bytes(kn_dtype t, int64_t n);

/* Quantizes n floats (whole blocks) into an activation row for panel kernels of weight type t, with q
 * the quantizer of t's vec_dot type (Q8_0, Q8_1 or Q8_K; the reference one or a SIMD one: both give
 * identical bytes). dst holds kn_q8x_row_bytes(t, n) bytes. */
void kn_q8x_quantize(kn_dtype t, kn_from_float_fn q, const float *x, uint8_t *dst, int64_t n);

#endif
