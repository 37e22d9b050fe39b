/*
 * quant.h - the quantized block formats kiln reads from GGUF files, and their scalar reference kernels.
 *
 * Every block struct is byte-compatible with the block of the same name in GGUF/ggml files: same field
 * order, same size (checked by _Static_assert), same bit layout. fp16 fields are stored as raw IEEE
 * binary16 bits (kn_half) and decoded with kn_fp16_to_fp32. Multi-byte fields are little-endian in files;
 * kiln assumes a little-endian host, as GGUF tooling does.
 *
 * The layout of each format is documented at its struct below, in terms of "element e of the block"
 * (e = 0 .. block_size-1, the order of the dequantized floats). The reference kernels in quant_legacy.c,
 * quant_k.c, quant_lowbit.c (Q2_K, Q3_K) and quant_nl.c (IQ4_NL, IQ4_XS, MXFP4) implement exactly that
 * documentation; SIMD kernels must match them (see dtype.h).
 *
 * Kernel conventions, shared by every function declared here:
 *   n is a count of elements and must be a non-negative multiple of the format's block size; whole
 *   blocks are processed (a partial tail, which callers must not pass, is ignored, never over-read).
 *   to_float  writes n floats.
 *   from_float reads n floats and writes n/block_size blocks. Non-finite input never causes undefined
 *             behaviour; scales that would overflow fp16 saturate to +-65504.
 *   vec_dot   returns the dot product of a weight row with an activation row of the stated format.
 */
#ifndef KN_QUANT_H
#define KN_QUANT_H

/*
 * Order of operations of the reference dot products. Integer partial sums are exact; the float steps
 * follow an order chosen so that SIMD kernels can reproduce it at full speed (fmaf is a fused
 * multiply-add, one rounding, as vfmadd*ps computes it). SIMD kernel sets are tested against these
 * functions with explicit tolerances (tests/unit/test_kernels_*.c); most agree to the last bits.
 *
 *  Float weights (F32, F16, BF16) x F32 activations: 16 lanes, lane = element index % 16,
 *      acc[e % 16] = fmaf(w[e], x[e], acc[e % 16])   for e = 0, 1, ..., n-1 in order,
 *    then kn_reduce16(acc).
 *  Q4_0, Q8_0 x Q8_0, block b of 32 elements (code = q-8, q):
 *      p    = sum of code[e] * xq[e] over the block (exact)
 *      acc  = fmaf((float)p, fp16(w.d) * fp16(x.d), acc)   for b in order, from acc = 0; result acc.
 *    One float step per block is what the 16-row panel kernels (pack.h) compute per lane.
 *  Q5_0 x Q8_0, block b of 32 elements (code = q-16):
 *      p[j] = sum of code[e] * xq[e] over e = 4j .. 4j+3   (j = 0..7)
 *      s    = fp16(w.d) * fp16(x.d)
 *      acc[(b & 1) * 8 + j] = fmaf((float)p[j], s, acc[(b & 1) * 8 + j])   for b in order,
 *    result kn_reduce16(acc).
 *  Q4_1, Q5_1 x Q8_1: their scale and min terms nearly cancel, so they are combined per block
 *    before accumulating: sum += (float)sumi * (fp16(w.d) * fp16(x.d)) + fp16(w.m) * fp16(x.s).
 *  K formats x Q8_K, super-block i:
 *      Q4_K / Q5_K: S1 = sum_j sc[j] * (sum over sub-block j of q[e] * xq[e]),
 *                   S2 = sum_j m[j] * (x.bsums[2j] + x.bsums[2j+1])            (exact integers)
 *                   sa = fmaf((float)S1, fp16(w.d) * x.d, sa);
 *                   sm = fmaf((float)S2, fp16(w.dmin) * x.d, sm);    result = sa - sm
 *      Q6_K:        S  = sum_j sc[j] * (sum over sub-block j of (q[e] - 32) * xq[e])
 *                   sa = fmaf((float)S, fp16(w.d) * x.d, sa);        result = sa
 *      Q2_K:        as Q4_K over 16 sub-blocks of 16 (S2 = sum_j m[j] * x.bsums[j]).
 *      Q3_K:        S  = sum_j (sc[j] - 32) * (sum over sub-block j of q[e] * xq[e]), q in -4..3, 16 sub-blocks
 *                   sa = fmaf((float)S, fp16(w.d) * x.d, sa);        result = sa
 *      IQ4_XS:      S  = sum_j (ls[j] - 32) * (sum over sub-block j of kv[q[e]] * xq[e]), 8 sub-blocks
 *                   sa = fmaf((float)S, fp16(w.d) * x.d, sa);        result = sa
 *  MLX8, MLX8_F32 x Q8_0 (q unsigned 0..255, scale d, bias m), block b of 32 elements:
 *      p  = sum of (q[e] - 128) * xq[e],  sx = sum of xq[e] over the block (exact), xd = fp16(x.d)
 *      acc = fmaf((float)p, d * xd, acc);  acc = fmaf((float)sx * xd, fmaf(d, 128, m), acc)
 *    for b in order, from acc = 0; result acc (quant_mlx.c; (float)sx * xd is exact).
 *  IQ4_NL, MXFP4 x Q8_0: as Q4_0 with code = kv[q] (the format's table) and, for MXFP4,
 *      acc = fmaf((float)p, e8m0_half(w.e) * fp16(x.d), acc).
 *    The activation quants of these five formats must be in -127..127 (what kiln's Q8_0 / Q8_K quantizers
 *    write; -128 never occurs): SIMD kernels multiply |code| by the activation with code's sign applied.
 *  kn_reduce16 adds the upper half of the lanes onto the lower half, 8 then 4, 2 and 1 wide (the
 *  order of a 512 -> 256 -> 128 -> 64 -> 32-bit horizontal reduction).
 * Activation quantizers round to nearest with ties away from zero (roundf), which SIMD code emulates.
 */
static inline float kn_reduce16(float acc[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) acc[i] += acc[i + w];
    return acc[0];
}

#include "tensor/dtype.h"

#include <math.h>
#include <stdint.h>

/* Raw IEEE binary16 bits, as stored in GGUF blocks. */
typedef uint16_t kn_half;

#define KN_QK4_0 32
#define KN_QK4_1 32
#define KN_QK5_0 32
#define KN_QK5_1 32
#define KN_QK8_0 32
#define KN_QK8_1 32
#define KN_QK_K  256 /* super-block size of the K formats */

/* ---------------------------------------------------------------------------------------------------
 * Legacy formats: blocks of 32 elements with one (or two) fp16 scales.
 * Nibble layout shared by Q4_0, Q4_1, Q5_0, Q5_1: element e < 16 is the LOW nibble of qs[e], element
 * e >= 16 is the HIGH nibble of qs[e - 16].
 * 5-bit formats: bit 4 of element e is bit (e % 8) of qh[e / 8] (i.e. bit e of qh read as a little-endian
 * uint32).
 * ------------------------------------------------------------------------------------------------- */

/* Q4_0: x[e] = d * (q[e] - 8), q in 0..15. 18 bytes / 32 elements. */
typedef struct kn_block_q4_0 {
    kn_half d;
    uint8_t qs[KN_QK4_0 / 2];
} kn_block_q4_0;
_Static_assert(sizeof(kn_block_q4_0) == 18, "Q4_0 block must be 18 bytes");

/* Q4_1: x[e] = d * q[e] + m, q in 0..15. 20 bytes / 32 elements. */
typedef struct kn_block_q4_1 {
    kn_half d;
    kn_half m;
    uint8_t qs[KN_QK4_1 / 2];
} kn_block_q4_1;
_Static_assert(sizeof(kn_block_q4_1) == 20, "Q4_1 block must be 20 bytes");

/* Q5_0: x[e] = d * (q[e] - 16), q in 0..31 (low 4 bits in qs, bit 4 in qh). 22 bytes / 32 elements. */
typedef struct kn_block_q5_0 {
    kn_half d;
    uint8_t qh[4];
    uint8_t qs[KN_QK5_0 / 2];
} kn_block_q5_0;
_Static_assert(sizeof(kn_block_q5_0) == 22, "Q5_0 block must be 22 bytes");

/* Q5_1: x[e] = d * q[e] + m, q in 0..31. 24 bytes / 32 elements. */
typedef struct kn_block_q5_1 {
    kn_half d;
    kn_half m;
    uint8_t qh[4];
    uint8_t qs[KN_QK5_1 / 2];
} kn_block_q5_1;
_Static_assert(sizeof(kn_block_q5_1) == 24, "Q5_1 block must be 24 bytes");

/* Q8_0: x[e] = d * qs[e]. 34 bytes / 32 elements. A weight format and the activation format of
 * Q4_0 / Q5_0 / Q8_0 weights. */
typedef struct kn_block_q8_0 {
    kn_half d;
    int8_t qs[KN_QK8_0];
} kn_block_q8_0;
_Static_assert(sizeof(kn_block_q8_0) == 34, "Q8_0 block must be 34 bytes");

/* Q8_1: x[e] = d * qs[e], and s = d * sum(qs) (both fp16). 36 bytes / 32 elements. Activation format of
 * Q4_1 / Q5_1 weights: s lets the weight's offset m be applied once per block (m * s). */
typedef struct kn_block_q8_1 {
    kn_half d;
    kn_half s;
    int8_t qs[KN_QK8_1];
} kn_block_q8_1;
_Static_assert(sizeof(kn_block_q8_1) == 36, "Q8_1 block must be 36 bytes");

/* ---------------------------------------------------------------------------------------------------
 * K formats: super-blocks of 256 elements made of sub-blocks, each sub-block with its own small integer
 * scale (and min) that is itself scaled by the fp16 super-block scale d (and dmin). IQ4_XS has the same
 * shape with table-coded quants; IQ4_NL and MXFP4 are 32-element blocks with table-coded quants.
 * ------------------------------------------------------------------------------------------------- */

/*
 * Q4_K: 8 sub-blocks of 32. x[e] = d * sc[j] * q[e] - dmin * m[j], j = e / 32, q in 0..15, and
 * sc[j], m[j] are 6-bit values packed into scales[12] (see kn_k_scale_min).
 * Quants: the block is 4 chunks of 64 elements; chunk c (elements 64c .. 64c+63) uses qs[32c .. 32c+31]:
 * element 64c + l (l < 32) is the LOW nibble of qs[32c + l], element 64c + 32 + l is its HIGH nibble.
 * Equivalently element 32j + l of sub-block j is nibble (j & 1) of qs[32(j / 2) + l].
 * 144 bytes / 256 elements.
 */
typedef struct kn_block_q4_k {
    kn_half d;
    kn_half dmin;
    uint8_t scales[12];
    uint8_t qs[KN_QK_K / 2];
} kn_block_q4_k;
_Static_assert(sizeof(kn_block_q4_k) == 144, "Q4_K block must be 144 bytes");

/*
 * Q5_K: as Q4_K with 5-bit quants, q in 0..31. Low 4 bits are laid out exactly as Q4_K's qs; bit 4 of
 * element 32j + l (sub-block j, l < 32) is bit j of qh[l] (so chunk c's low-nibble half uses bit 2c and
 * its high-nibble half bit 2c+1).
 * 176 bytes / 256 elements.
 */
typedef struct kn_block_q5_k {
    kn_half d;
    kn_half dmin;
    uint8_t scales[12];
    uint8_t qh[KN_QK_K / 8];
    uint8_t qs[KN_QK_K / 2];
} kn_block_q5_k;
_Static_assert(sizeof(kn_block_q5_k) == 176, "Q5_K block must be 176 bytes");

/*
 * Q6_K: 16 sub-blocks of 16. x[e] = d * scales[e / 16] * (q[e] - 32), q in 0..63, scales signed 8-bit.
 * The block is 2 halves of 128; write element e = 128h + 32k + l (h in 0..1, k in 0..3, l in 0..31):
 *   low 4 bits of q[e]: ql[64h + 32(k & 1) + l], the LOW nibble for k = 0, 1 and the HIGH nibble for
 *                       k = 2, 3;
 *   high 2 bits of q[e]: bits 2k, 2k+1 of qh[32h + l].
 * 210 bytes / 256 elements.
 */
typedef struct kn_block_q6_k {
    uint8_t ql[KN_QK_K / 2];
    uint8_t qh[KN_QK_K / 4];
    int8_t scales[KN_QK_K / 16];
    kn_half d;
} kn_block_q6_k;
_Static_assert(sizeof(kn_block_q6_k) == 210, "Q6_K block must be 210 bytes");

/*
 * Q2_K: 16 sub-blocks of 16. x[e] = d * sc[j] * q[e] - dmin * m[j], j = e / 16, q in 0..3; sc[j] is the
 * low nibble of scales[j] and m[j] its high nibble. The block is 2 halves of 128; write element
 * e = 128h + 32k + l (h in 0..1, k in 0..3, l in 0..31): q[e] = bits 2k, 2k+1 of qs[32h + l].
 * 84 bytes / 256 elements.
 */
typedef struct kn_block_q2_k {
    uint8_t scales[KN_QK_K / 16];
    uint8_t qs[KN_QK_K / 4];
    kn_half d;
    kn_half dmin;
} kn_block_q2_k;
_Static_assert(sizeof(kn_block_q2_k) == 84, "Q2_K block must be 84 bytes");

/*
 * Q3_K: 16 sub-blocks of 16. x[e] = d * (sc[j] - 32) * q[e], j = e / 16, q in -4..3, sc[j] a 6-bit value
 * (see kn_q3k_scale). With e = 128h + 32k + l as in Q2_K: the low 2 bits of q[e] + 4 are bits 2k, 2k+1 of
 * qs[32h + l], and q[e] = low2 when bit 4h + k of hmask[l] is set, low2 - 4 when it is clear.
 * 110 bytes / 256 elements.
 */
typedef struct kn_block_q3_k {
    uint8_t hmask[KN_QK_K / 8];
    uint8_t qs[KN_QK_K / 4];
    uint8_t scales[12];
    kn_half d;
} kn_block_q3_k;
_Static_assert(sizeof(kn_block_q3_k) == 110, "Q3_K block must be 110 bytes");

/* The 6-bit scale (0..63, used as sc - 32) of sub-block j (0..15) of a Q3_K block: low 4 bits are the
 * low nibble of scales[j] (j < 8) or the high nibble of scales[j - 8] (j >= 8); high 2 bits are bits
 * 2(j / 4), 2(j / 4) + 1 of scales[8 + j % 4]. */
static inline int kn_q3k_scale(int j, const uint8_t scales[12]) {
    int lo = j < 8 ? (scales[j] & 0x0F) : (scales[j - 8] >> 4);
    int hi = (scales[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return lo | (hi << 4);
}

/* Inverse of kn_q3k_scale: packs sc[16] (each 0..63) into scales[12]. */
static inline void kn_q3k_pack_scales(const uint8_t sc[16], uint8_t scales[12]) {
    for (int j = 0; j < 8; j++) scales[j] = (uint8_t)((sc[j] & 0x0F) | ((sc[j + 8] & 0x0F) << 4));
    for (int j = 0; j < 4; j++)
        scales[8 + j] = (uint8_t)(((sc[j] >> 4) & 3) | (((sc[j + 4] >> 4) & 3) << 2) | (((sc[j + 8] >> 4) & 3) << 4) |
                                  (((sc[j + 12] >> 4) & 3) << 6));
}

/* The 16 levels of IQ4_NL and IQ4_XS (a non-uniform 4-bit grid, denser near zero). */
extern const int8_t kn_iq4nl_values[16];
/* The 16 levels of MXFP4: the E2M1 values times 2 (index 8 is -0). */
extern const int8_t kn_mxfp4_values[16];

/* IQ4_NL: x[e] = d * kn_iq4nl_values[q[e]], q in 0..15 in the legacy nibble layout (element e < 16 is
 * the low nibble of qs[e], element e >= 16 the high nibble of qs[e - 16]). 18 bytes / 32 elements. */
#define KN_QK4_NL 32
typedef struct kn_block_iq4_nl {
    kn_half d;
    uint8_t qs[KN_QK4_NL / 2];
} kn_block_iq4_nl;
_Static_assert(sizeof(kn_block_iq4_nl) == 18, "IQ4_NL block must be 18 bytes");

/*
 * IQ4_XS: 8 sub-blocks of 32. x[e] = d * (ls[j] - 32) * kn_iq4nl_values[q[e]], j = e / 32. ls[j] (6 bits)
 * = nibble (j & 1) of scales_l[j / 2] | (bits 2j, 2j+1 of scales_h) << 4. Sub-block j's quants are
 * qs[16j .. 16j+15] in the legacy nibble layout (element 32j + l: low nibble of qs[16j + l] for l < 16,
 * high nibble of qs[16j + l - 16] for l >= 16). 136 bytes / 256 elements.
 */
typedef struct kn_block_iq4_xs {
    kn_half d;
    uint16_t scales_h;
    uint8_t scales_l[KN_QK_K / 64];
    uint8_t qs[KN_QK_K / 2];
} kn_block_iq4_xs;
_Static_assert(sizeof(kn_block_iq4_xs) == 136, "IQ4_XS block must be 136 bytes");

/* MXFP4 (the OCP microscaling FP4 format): x[e] = kn_e8m0_half(e) * kn_mxfp4_values[q[e]], q in 0..15
 * in the legacy nibble layout; e is a power-of-two exponent (E8M0). 17 bytes / 32 elements. */
#define KN_QK_MXFP4 32
typedef struct kn_block_mxfp4 {
    uint8_t e;
    uint8_t qs[KN_QK_MXFP4 / 2];
} kn_block_mxfp4;
_Static_assert(sizeof(kn_block_mxfp4) == 17, "MXFP4 block must be 17 bytes");

/* Half the value of an E8M0 exponent byte, 2^(e - 128) (the table holds doubled E2M1 values), exact for
 * every e (e = 0, 1 give fp32 subnormals). */
static inline float kn_e8m0_half(uint8_t e) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* MLX8, MLX8_F32 (kiln's own, never in a file; see quant_mlx.c): x[e] = d * q[e] + m, q in 0..255 (one
 * byte per element, element e at qs[e]): MLX's 8-bit affine quantization held exactly. MLX8 stores d
 * and m as fp16 (36 bytes / 32 elements), MLX8_F32 as fp32 (40 bytes), for sources whose scales or biases
 * fp16 cannot hold exactly. Both take Q8_0 activations. */
#define KN_QK_MLX8 32
typedef struct kn_block_mlx8 {
    kn_half d;
    kn_half m;
    uint8_t qs[KN_QK_MLX8];
} kn_block_mlx8;
_Static_assert(sizeof(kn_block_mlx8) == 36, "MLX8 block must be 36 bytes");
typedef struct kn_block_mlx8_f32 {
    float d;
    float m;
    uint8_t qs[KN_QK_MLX8];
} kn_block_mlx8_f32;
_Static_assert(sizeof(kn_block_mlx8_f32) == 40, "MLX8_F32 block must be 40 bytes");

/* Q8_K: x[e] = d * qs[e] with an fp32 d; bsums[j] = sum of qs[16j .. 16j+15]. Activation format of the K
 * weight formats (bsums apply Q4_K/Q5_K mins and Q6_K's -32 offset per sub-block). 292 bytes / 256. */
typedef struct kn_block_q8_k {
    float d;
    int8_t qs[KN_QK_K];
    int16_t bsums[KN_QK_K / 16];
} kn_block_q8_k;
_Static_assert(sizeof(kn_block_q8_k) == 292, "Q8_K block must be 292 bytes");

/*
 * The 6-bit scale sc and min m of sub-block j (0..7) of a Q4_K / Q5_K block, from its packed scales[12]:
 *   j < 4:  sc = low 6 bits of scales[j],  m = low 6 bits of scales[j + 4];
 *   j >= 4: sc = low nibble of scales[j + 4] | (top 2 bits of scales[j - 4]) << 4,
 *           m  = high nibble of scales[j + 4] | (top 2 bits of scales[j]) << 4.
 */
static inline void kn_k_scale_min(int j, const uint8_t scales[12], uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = (uint8_t)(scales[j] & 63);
        *m = (uint8_t)(scales[j + 4] & 63);
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* Inverse of kn_k_scale_min: packs 6-bit sc[8] and m[8] (each 0..63) into scales[12]. */
static inline void kn_k_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[12]) {
    for (int j = 0; j < 4; j++) {
        scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        scales[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        scales[j + 8] = (uint8_t)((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
    }
}

/* ---- reference kernels (see the conventions at the top of this file) ---- */

/* quant_legacy.c */
void kn_q4_0_to_float(const void *src, float *dst, int64_t n);
void kn_q4_0_from_float(const float *src, void *dst, int64_t n);
float kn_q4_0_vec_dot_q8_0(int64_t n, const void *w, const void *x);

void kn_q4_1_to_float(const void *src, float *dst, int64_t n);
void kn_q4_1_from_float(const float *src, void *dst, int64_t n);
float kn_q4_1_vec_dot_q8_1(int64_t n, const void *w, const void *x);

void kn_q5_0_to_float(const void *src, float *dst, int64_t n);
void kn_q5_0_from_float(const float *src, void *dst, int64_t n);
float kn_q5_0_vec_dot_q8_0(int64_t n, const void *w, const void *x);

void kn_q5_1_to_float(const void *src, float *dst, int64_t n);
void kn_q5_1_from_float(const float *src, void *dst, int64_t n);
float kn_q5_1_vec_dot_q8_1(int64_t n, const void *w, const void *x);

void kn_q8_0_to_float(const void *src, float *dst, int64_t n);
void kn_q8_0_from_float(const float *src, void *dst, int64_t n);
float kn_q8_0_vec_dot_q8_0(int64_t n, const void *w, const void *x);

void kn_q8_1_to_float(const void *src, float *dst, int64_t n);
void kn_q8_1_from_float(const float *src, void *dst, int64_t n);

/* quant_k.c */
void kn_q4_k_to_float(const void *src, float *dst, int64_t n);
void kn_q4_k_from_float(const float *src, void *dst, int64_t n);
float kn_q4_k_vec_dot_q8_k(int64_t n, const void *w, const void *x);

void kn_q5_k_to_float(const void *src, float *dst, int64_t n);
void kn_q5_k_from_float(const float *src, void *dst, int64_t n);
float kn_q5_k_vec_dot_q8_k(int64_t n, const void *w, const void *x);

void kn_q6_k_to_float(const void *src, float *dst, int64_t n);
void kn_q6_k_from_float(const float *src, void *dst, int64_t n);
float kn_q6_k_vec_dot_q8_k(int64_t n, const void *w, const void *x);

void kn_q8_k_to_float(const void *src, float *dst, int64_t n);
void kn_q8_k_from_float(const float *src, void *dst, int64_t n);

/* quant_lowbit.c */
void kn_q2_k_to_float(const void *src, float *dst, int64_t n);
void kn_q2_k_from_float(const float *src, void *dst, int64_t n);
float kn_q2_k_vec_dot_q8_k(int64_t n, const void *w, const void *x);

void kn_q3_k_to_float(const void *src, float *dst, int64_t n);
void kn_q3_k_from_float(const float *src, void *dst, int64_t n);
float kn_q3_k_vec_dot_q8_k(int64_t n, const void *w, const void *x);

/* quant_nl.c */
void kn_iq4_nl_to_float(const void *src, float *dst, int64_t n);
void kn_iq4_nl_from_float(const float *src, void *dst, int64_t n);
float kn_iq4_nl_vec_dot_q8_0(int64_t n, const void *w, const void *x);

void kn_iq4_xs_to_float(const void *src, float *dst, int64_t n);
void kn_iq4_xs_from_float(const float *src, void *dst, int64_t n);
float kn_iq4_xs_vec_dot_q8_k(int64_t n, const void *w, const void *x);

void kn_mxfp4_to_float(const void *src, float *dst, int64_t n);
void kn_mxfp4_from_float(const float *src, void *dst, int64_t n);
float kn_mxfp4_vec_dot_q8_0(int64_t n, const void *w, const void *x);

/* quant_mlx.c */
void kn_mlx8_to_float(const void *src, float *dst, int64_t n);
void kn_mlx8_from_float(const float *src, void *dst, int64_t n);
float kn_mlx8_vec_dot_q8_0(int64_t n, const void *w, const void *x);
void kn_mlx8_f32_to_float(const void *src, float *dst, int64_t n);
void kn_mlx8_f32_from_float(const float *src, void *dst, int64_t n);
float kn_mlx8_f32_vec_dot_q8_0(int64_t n, const void *w, const void *x);

/* ---- helpers shared by the quantizers ---- */

/* quant_k.c (documented there): the sub-block fitting steps of the K-format quantizers, shared with
 * quant_lowbit.c and quant_nl.c. */
float kn_quant_sanitize(const float *x, float *out, int n);
float kn_fit_scale_min(int n, int nmax, const float *x, uint8_t *L, float *mn);
float kn_fit_scale_sym(int n, int lo, int hi, const float *x, int8_t *L);
void kn_importance_d(const float *x, double *w, int n);
double kn_round_affine(int n, int nmax, const float *x, const double *w, float ds, float dm, uint8_t *L);
double kn_round_sym(int n, int lo, int hi, const float *x, const double *w, float ds, int8_t *L);

/* fp16 bits of v, with finite values beyond the fp16 range saturated to +-65504 instead of becoming
 * infinite (a block scale must stay finite). NaN stays NaN. */
kn_half kn_fp32_to_fp16_sat(float v); /* dtype.c */

/* fp16 bits for a block scale: v rounded to nearest, except where that loses more than 2^-11 of |v|
 * (only possible when the scale is an fp16 subnormal, where one step is a large relative change): then
 * the next value away from zero, so the element that set the scale does not clip. Finite values beyond
 * the fp16 range saturate to +-65504. */
kn_half kn_fp32_to_fp16_scale(float v); /* dtype.c */

/* v rounded to the nearest integer (halves away from zero) and clamped to [lo, hi]; NaN gives lo.
 * Never undefined behaviour, whatever v is. */
static inline int kn_round_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo; /* also catches NaN */
    if (v >= (float)hi) return hi;
    /* roundf without the library call: lo < v < hi, so truncation fits an int and v - t is exact */
    int t = (int)v;
    float f = v - (float)t;
    if (f >= 0.5f) t++;
    else if (f <= -0.5f) t--;
    return t;
}

#endif /* KN_QUANT_H */
