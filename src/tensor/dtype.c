/*
 * dtype.c - the type-traits table (indexed by GGUF type id), type names, row sizes, the float element
 * types (F32, F16, BF16) and the scalar fp16 / bf16 conversions.
 *
 * The table is the one place that maps a type id read from a file to its block geometry and kernels;
 * everything else asks kn_type_traits_get. Quantized kernels live in quant_legacy.c, quant_k.c,
 * quant_lowbit.c and quant_nl.c; the float types' kernels live here: their vec_dot takes an F32
 * activation row and converts the weight element by element (the order of quant.h).
 *
 * The fp16 / bf16 conversions work on the bit patterns with integer arithmetic: exact for every input,
 * round to nearest with ties to even, infinities and NaN preserved (NaN stays a quiet NaN), subnormals
 * produced and consumed; no undefined behaviour and no dependence on the FPU rounding mode.
 */
#include "tensor/dtype.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- scalar conversions ---- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float kn_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant << 13)); /* inf, NaN (payload kept) */
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in fp32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

uint16_t kn_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: keep the top payload bits, force the quiet bit */
        return (uint16_t)(sign | 0x7C00u | 0x0200u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) /* >= 65520 (half-way above 65504, the largest fp16) rounds to inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) {
        /* below 2^-14: an fp16 subnormal (or zero), value = r * 2^-24 */
        if (a <= 0x33000000u) return sign; /* <= 2^-25, half of the smallest subnormal: ties to 0 */
        uint32_t e = a >> 23;              /* 102 .. 112 */
        uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126 - e; /* m * 2^(e-150) / 2^-24 = m >> (126 - e); shift is 14 .. 24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++; /* may carry into the smallest normal: fine */
        return (uint16_t)(sign | r);
    }
    /* normal: rebias the exponent, keep 10 mantissa bits, round on the 13 dropped bits */
    uint32_t h = ((a >> 23) - (127 - 15)) << 10 | ((a >> 13) & 0x3FFu);
    uint32_t rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry bumps the exponent correctly */
    return (uint16_t)(sign | h);
}

kn_half kn_fp32_to_fp16_sat(float v) {
    if (v > 65504.0f) return 0x7BFFu;
    if (v < -65504.0f) return 0xFBFFu;
    return kn_fp32_to_fp16(v);
}

kn_half kn_fp32_to_fp16_scale(float v) {
    kn_half h = kn_fp32_to_fp16_sat(v);
    /* a normal fp16 is within 2^-11 relative of v: keep it. Only a subnormal can lose more; then take
     * the next value away from zero (sign-magnitude bits: +1 is one step up in magnitude). */
    if (fabsf(kn_fp16_to_fp32(h)) < fabsf(v) * (1.0f - 0x1p-11f) && (h & 0x7FFFu) < 0x7BFFu) h++;
    return h;
}

float kn_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kn_fp32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x0040u); /* quiet NaN */
    /* round to nearest even on the 16 dropped bits; overflow past the largest finite gives inf */
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---- float element types ---- */

static void f32_to_float(const void *src, float *dst, int64_t n) {
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f32_from_float(const float *src, void *dst, int64_t n) {
    if (n > 0) memcpy(dst, src, (size_t)n * sizeof(float));
}

static float f32_vec_dot(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    float acc[16] = {0}; /* canonical order: 16 lanes, see quant.h */
    for (int64_t i = 0; i < n; i++) acc[i & 15] = fmaf(a[i], b[i], acc[i & 15]);
    return kn_reduce16(acc);
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kn_fp16_to_fp32(s[i]);
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = kn_fp32_to_fp16(src[i]);
}

static float f16_vec_dot(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    float acc[16] = {0}; /* canonical order: 16 lanes, see quant.h */
    for (int64_t i = 0; i < n; i++) acc[i & 15] = fmaf(kn_fp16_to_fp32(a[i]), b[i], acc[i & 15]);
    return kn_reduce16(acc);
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kn_bf16_to_fp32(s[i]);
}

static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = kn_fp32_to_bf16(src[i]);
}

static float bf16_vec_dot(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    float acc[16] = {0}; /* canonical order: 16 lanes, see quant.h */
    for (int64_t i = 0; i < n; i++) acc[i & 15] = fmaf(kn_bf16_to_fp32(a[i]), b[i], acc[i & 15]);
    return kn_reduce16(acc);
}

/* ---- the table ---- */

static const kn_type_traits traits[KN_DTYPE_COUNT] = {
    [KN_F32] = {"F32", 1, sizeof(float), KN_F32, f32_to_float, f32_from_float, f32_vec_dot},
    [KN_F16] = {"F16", 1, sizeof(uint16_t), KN_F32, f16_to_float, f16_from_float, f16_vec_dot},
    [KN_BF16] = {"BF16", 1, sizeof(uint16_t), KN_F32, bf16_to_float, bf16_from_float, bf16_vec_dot},
    [KN_Q4_0] = {"Q4_0", KN_QK4_0, sizeof(kn_block_q4_0), KN_Q8_0, kn_q4_0_to_float, kn_q4_0_from_float,
                 kn_q4_0_vec_dot_q8_0},
    [KN_Q4_1] = {"Q4_1", KN_QK4_1, sizeof(kn_block_q4_1), KN_Q8_1, kn_q4_1_to_float, kn_q4_1_from_float,
                 kn_q4_1_vec_dot_q8_1},
    [KN_Q5_0] = {"Q5_0", KN_QK5_0, sizeof(kn_block_q5_0), KN_Q8_0, kn_q5_0_to_float, kn_q5_0_from_float,
                 kn_q5_0_vec_dot_q8_0},
    [KN_Q5_1] = {"Q5_1", KN_QK5_1, sizeof(kn_block_q5_1), KN_Q8_1, kn_q5_1_to_float, kn_q5_1_from_float,
                 kn_q5_1_vec_dot_q8_1},
    [KN_Q8_0] = {"Q8_0", KN_QK8_0, sizeof(kn_block_q8_0), KN_Q8_0, kn_q8_0_to_float, kn_q8_0_from_float,
                 kn_q8_0_vec_dot_q8_0},
    [KN_Q8_1] = {"Q8_1", KN_QK8_1, sizeof(kn_block_q8_1), KN_Q8_1, kn_q8_1_to_float, kn_q8_1_from_float, NULL},
    [KN_Q4_K] = {"Q4_K", KN_QK_K, sizeof(kn_block_q4_k), KN_Q8_K, kn_q4_k_to_float, kn_q4_k_from_float,
                 kn_q4_k_vec_dot_q8_k},
    [KN_Q5_K] = {"Q5_K", KN_QK_K, sizeof(kn_block_q5_k), KN_Q8_K, kn_q5_k_to_float, kn_q5_k_from_float,
                 kn_q5_k_vec_dot_q8_k},
    [KN_Q6_K] = {"Q6_K", KN_QK_K, sizeof(kn_block_q6_k), KN_Q8_K, kn_q6_k_to_float, kn_q6_k_from_float,
                 kn_q6_k_vec_dot_q8_k},
    [KN_Q2_K] = {"Q2_K", KN_QK_K, sizeof(kn_block_q2_k), KN_Q8_K, kn_q2_k_to_float, kn_q2_k_from_float,
                 kn_q2_k_vec_dot_q8_k},
    [KN_Q3_K] = {"Q3_K", KN_QK_K, sizeof(kn_block_q3_k), KN_Q8_K, kn_q3_k_to_float, kn_q3_k_from_float,
                 kn_q3_k_vec_dot_q8_k},
    [KN_Q8_K] = {"Q8_K", KN_QK_K, sizeof(kn_block_q8_k), KN_Q8_K, kn_q8_k_to_float, kn_q8_k_from_float, NULL},
    [KN_IQ4_NL] = {"IQ4_NL", KN_QK4_NL, sizeof(kn_block_iq4_nl), KN_Q8_0, kn_iq4_nl_to_float, kn_iq4_nl_from_float,
                   kn_iq4_nl_vec_dot_q8_0},
    [KN_IQ4_XS] = {"IQ4_XS", KN_QK_K, sizeof(kn_block_iq4_xs), KN_Q8_K, kn_iq4_xs_to_float, kn_iq4_xs_from_float,
                   kn_iq4_xs_vec_dot_q8_k},
    [KN_MXFP4] = {"MXFP4", KN_QK_MXFP4, sizeof(kn_block_mxfp4), KN_Q8_0, kn_mxfp4_to_float, kn_mxfp4_from_float,
                  kn_mxfp4_vec_dot_q8_0},
    [KN_MLX8] = {"MLX8", KN_QK_MLX8, sizeof(kn_block_mlx8), KN_Q8_0, kn_mlx8_to_float, kn_mlx8_from_float,
                 kn_mlx8_vec_dot_q8_0},
    [KN_MLX8_F32] = {"MLX8_F32", KN_QK_MLX8, sizeof(kn_block_mlx8_f32), KN_Q8_0, kn_mlx8_f32_to_float,
                     kn_mlx8_f32_from_float, kn_mlx8_f32_vec_dot_q8_0},
};

/* Names of GGUF type ids kiln does not support, for error messages (ids whose types were removed from
 * the format have none and print as "type N"). */
static const char *const other_names[KN_DTYPE_COUNT] = {
    [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [21] = "IQ3_S", [22] = "IQ2_S", [24] = "I8",
    [25] = "I16",     [26] = "I32",    [27] = "I64",     [28] = "F64",   [29] = "IQ1_M", [34] = "TQ1_0", [35] = "TQ2_0",
};

const kn_type_traits *kn_type_traits_get(int32_t t) {
    if (t < 0 || t >= KN_DTYPE_COUNT) return NULL;
    return traits[t].name ? &traits[t] : NULL;
}

const char *kn_dtype_name(int32_t t) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    if (tr) return tr->name;
    if (t >= 0 && t < KN_DTYPE_COUNT && other_names[t]) return other_names[t];
    /* a small per-thread ring, so two names in one message do not overwrite each other */
    static _Thread_local char buf[4][24];
    static _Thread_local unsigned slot;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "type %ld", (long)t);
    return b;
}

size_t kn_row_bytes(kn_dtype t, int64_t n) {
    const kn_type_traits *tr = kn_type_traits_get((int32_t)t);
    if (!tr || n < 0 || n % tr->block_size != 0) return 0;
    uint64_t blocks = (uint64_t)(n / tr->block_size);
    if (blocks > SIZE_MAX / tr->block_bytes) return 0; /* overflow: no such row can exist */
    return (size_t)blocks * tr->block_bytes;
}

bool kn_dtype_is_weight(int32_t t) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    return tr && tr->vec_dot;
}
