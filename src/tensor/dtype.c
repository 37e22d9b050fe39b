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
 * round to nearest with ties to even, infinities and NaN preserved (a NaN comes out quiet, its top
 * payload bits kept, as IEEE 754 conversions and the F16C / NEON instructions do), subnormals produced
 * and consumed; no undefined behaviour and no dependence on the FPU rounding mode. The row forms use
 * those instructions where the CPU has them (F16C with its rounding given in the instruction, not
 * taken from MXCSR; NEON under the default FPCR, round to nearest even, no flush to zero), and
 * test_f16c checks them against the scalar ones over every fp16 and a dense sample of fp32 inputs
 * (every fp32 input with KILN_TEST_EXHAUSTIVE=1).
 */
#include "tensor/dtype.h"
#include "tensor/kernels.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KN_DTYPE_X86 1
#elif defined(__aarch64__)
#include <arm_neon.h>
#define KN_DTYPE_NEON 1
#endif

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
    if (exp == 0x1F) /* inf; NaN with its payload kept and the quiet bit set */
        return bits_f32(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
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

/* ---- row conversions ---- */

#ifdef KN_DTYPE_X86
/* 8 at a time with F16C; the immediate asks for round to nearest even whatever MXCSR says (an fp32
 * subnormal input, which DAZ would flush, converts to a signed zero either way). */
__attribute__((target("avx,f16c"))) static int64_t fp16_from_f16c(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}

__attribute__((target("avx,f16c"))) static int64_t fp16_to_f16c(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    return i;
}

/* kn_fp32_to_bf16 on 8 lanes with AVX2 integer arithmetic (no bf16 instruction rounds subnormals). */
__attribute__((target("avx2"))) static int64_t bf16_from_avx2(const float *x, uint16_t *y, int64_t n) {
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x400000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs), inf);
        const __m256i r = _mm256_add_epi32(v, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(v, 16), one)));
        const __m256i h = _mm256_srli_epi32(_mm256_blendv_epi8(r, _mm256_or_si256(v, quiet), nan), 16);
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08); /* lanes 0, 2: the 8 halves */
        _mm_storeu_si128((__m128i *)(y + i), _mm256_castsi256_si128(p));
    }
    return i;
}
#endif

void kn_fp32_to_fp16_row(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
#ifdef KN_DTYPE_X86
    if (n >= 8 && kn_cpu_features()->f16c) i = fp16_from_f16c(x, y, n);
#elif defined(KN_DTYPE_NEON)
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
#endif
    for (; i < n; i++) y[i] = kn_fp32_to_fp16(x[i]);
}

void kn_fp16_to_fp32_row(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
#ifdef KN_DTYPE_X86
    if (n >= 8 && kn_cpu_features()->f16c) i = fp16_to_f16c(x, y, n);
#elif defined(KN_DTYPE_NEON)
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
#endif
    for (; i < n; i++) y[i] = kn_fp16_to_fp32(x[i]);
}

void kn_fp32_to_bf16_row(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
#ifdef KN_DTYPE_X86
    if (n >= 8 && kn_cpu_features()->avx2) i = bf16_from_avx2(x, y, n);
#elif defined(KN_DTYPE_NEON)
    const uint32x4_t abs = vdupq_n_u32(0x7FFFFFFFu), inf = vdupq_n_u32(0x7F800000u), bias = vdupq_n_u32(0x7FFFu);
    const uint32x4_t one = vdupq_n_u32(1), quiet = vdupq_n_u32(0x400000u);
    for (; i + 4 <= n; i += 4) {
        const uint32x4_t v = vreinterpretq_u32_f32(vld1q_f32(x + i));
        const uint32x4_t nan = vcgtq_u32(vandq_u32(v, abs), inf);
        const uint32x4_t r = vaddq_u32(v, vaddq_u32(bias, vandq_u32(vshrq_n_u32(v, 16), one)));
        vst1_u16(y + i, vshrn_n_u32(vbslq_u32(nan, vorrq_u32(v, quiet), r), 16));
    }
#endif
    for (; i < n; i++) y[i] = kn_fp32_to_bf16(x[i]);
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

static void f16_to_float(const void *src, float *dst, int64_t n) { kn_fp16_to_fp32_row(src, dst, n); }

static void f16_from_float(const float *src, void *dst, int64_t n) { kn_fp32_to_fp16_row(src, dst, n); }

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

static void bf16_from_float(const float *src, void *dst, int64_t n) { kn_fp32_to_bf16_row(src, dst, n); }

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
