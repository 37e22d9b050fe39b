/*
 * dtype.h - tensor element types and the type-traits table that dispatches to their kernels.
 *
 * The enum values equal GGUF's ggml_type ids, so a type read from a file indexes the table directly.
 * Each supported type has a scalar reference implementation (the source of truth) of:
 *   to_float   dequantize n elements (n a multiple of block_size)
 *   from_float quantize n elements (the reference quantizer, used by the model generator and to
 *              quantize activations for vec_dot)
 *   vec_dot    dot product of n elements of a weight row of this type with an activation row already
 *              converted to vec_dot_type (Q8_0 / Q8_1 / Q8_K blocks, or F32 for float weights)
 * Block layouts are byte-compatible with GGUF files; see quant.h.
 */
#ifndef KN_DTYPE_H
#define KN_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kn_dtype {
    KN_F32 = 0,
    KN_F16 = 1,
    KN_Q4_0 = 2,
    KN_Q4_1 = 3,
    KN_Q5_0 = 6,
    KN_Q5_1 = 7,
    KN_Q8_0 = 8,
    KN_Q8_1 = 9,
    KN_Q2_K = 10,
    KN_Q3_K = 11,
    KN_Q4_K = 12,
    KN_Q5_K = 13,
    KN_Q6_K = 14,
    KN_Q8_K = 15,
    KN_IQ4_NL = 20,
    KN_IQ4_XS = 23,
    KN_BF16 = 30,
    KN_MXFP4 = 39,
    /* kiln's own formats, made at load and never read from a file (ids from KN_DTYPE_FILE_COUNT on) */
    KN_MLX8 = 40,     /* MLX 8-bit affine, fp16 scale and bias (quant.h) */
    KN_MLX8_F32 = 41, /* the same with fp32 scale and bias */
    KN_DTYPE_COUNT = 42
} kn_dtype;

#define KN_DTYPE_FILE_COUNT 40 /* type ids a GGUF file may use are below this */

typedef void (*kn_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*kn_from_float_fn)(const float *src, void *dst, int64_t n);
typedef float (*kn_vec_dot_fn)(int64_t n, const void *w, const void *x);

typedef struct kn_type_traits {
    const char *name;      /* "Q4_K", as in GGUF tooling */
    int32_t block_size;    /* elements per block (1 for float types) */
    size_t block_bytes;    /* bytes per block */
    kn_dtype vec_dot_type; /* format the activation row must be in for vec_dot */
    kn_to_float_fn to_float;
    kn_from_float_fn from_float;
    kn_vec_dot_fn vec_dot; /* NULL for activation-only types (Q8_1, Q8_K) */
} kn_type_traits;

/* Traits of t, or NULL when t is unknown or not supported by kiln. */
const kn_type_traits *kn_type_traits_get(int32_t t);
/* Name of t even when unsupported ("type 17"), for error messages; never NULL. */
const char *kn_dtype_name(int32_t t);
/* Bytes of a row of n elements of type t; 0 if n is not a multiple of the block size. */
size_t kn_row_bytes(kn_dtype t, int64_t n);
/* True if t may be a weight type (has vec_dot). */
bool kn_dtype_is_weight(int32_t t);

/* Scalar conversions (IEEE binary16 and bfloat16, round to nearest even). */
float kn_fp16_to_fp32(uint16_t h);
uint16_t kn_fp32_to_fp16(float f);
float kn_bf16_to_fp32(uint16_t h);
uint16_t kn_fp32_to_bf16(float f);

/* Row conversions, bit for bit the scalar ones above element by element (every input: normals,
 * subnormals, overflow to inf, NaN), for n >= 0 elements: y[i] = kn_fp32_to_fp16(x[i]),
 * kn_fp16_to_fp32(x[i]) or kn_fp32_to_bf16(x[i]). They use F16C (and AVX2 for bf16) on x86 where the
 * CPU has it, NEON on ARM64, and the scalar loop otherwise; the choice needs no kernel set because
 * every path gives the same bits. */
void kn_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n);
void kn_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n);
void kn_fp32_to_bf16_row(const float *x, uint16_t *y, int64_t n);

#endif
