/*
 * kernels_neon.c - the ARM64 NEON kernel set: the float weight formats (F32, F16, BF16 x F32
 * activations), attention over F16/F32 KV rows (Q8_0 and TQ4 ones in kernels_neon_attn.c), the
 * Q8_0 / Q8_1 / Q8_K activation quantizers, and the assembly of the set (the integer kernels of the
 * block formats are in kernels_neon_q.c and kernels_neon_lowbit.c and need the dotprod extension,
 * without which those types keep the reference kernels; kernels_neon_mm.c replaces most of them
 * where the CPU also has i8mm).
 *
 * Every kernel here is bit-identical to the scalar reference (tests/unit/test_kernels_neon.c checks
 * it with zero tolerance), by computing the reference's float operations in the reference's order:
 *   float formats: the 16 lanes of quant.h held in four 4-lane registers a0..a3 (lane = element %
 *     16), one fused multiply-add per element in element order, a tail of n % 16 elements added to
 *     its lanes one at a time, then kn_reduce16's pairing (8, 4, 2, 1 wide);
 *   attention: attend.c's blocked softmax run over row helpers in attend.c's order (kn_attend_blocked);
 *   quantizers: the same absolute maximum (a maximum is exact in any order), the scale through the
 *     same scalar functions, and rounding to nearest with ties away from zero (vcvtaq, which is
 *     roundf), clamped, with NaN products going to the lowest level as kn_round_clamp does.
 * Only intrinsics with an explicit fused or plain operation touch floats, and the C parts are built
 * without contraction (-std=c11), so the compiler cannot change a rounding.
 *
 * Tile contract (kernels.h): each output is computed by the same function of its own row and token,
 * whatever the tile, so a tile call equals 1x1 calls bit for bit.
 */
#include "tensor/kernels.h"

#include "base/cpu.h"

#if defined(__aarch64__)
#include "tensor/quant.h"

#include <arm_neon.h>
#include <float.h>
#include <math.h>

/* ---- float formats ---- */

/* kn_reduce16 over lanes a0 (0..3), a1 (4..7), a2 (8..11), a3 (12..15). */
static inline float reduce16(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
    a0 = vaddq_f32(a0, a2); /* lanes i < 8: acc[i] += acc[i + 8] */
    a1 = vaddq_f32(a1, a3);
    a0 = vaddq_f32(a0, a1);                                        /* i < 4: acc[i] += acc[i + 4] */
    float32x2_t s = vadd_f32(vget_low_f32(a0), vget_high_f32(a0)); /* i < 2: acc[i] += acc[i + 2] */
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}

/* Four weights from element i on, widened to fp32 (exactly). */
static inline float32x4_t load_f32(const void *w, int64_t i) { return vld1q_f32((const float *)w + i); }
static inline float32x4_t load_f16(const void *w, int64_t i) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)w + i)));
}
static inline float32x4_t load_bf16(const void *w, int64_t i) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)w + i), 16));
}
static inline float one_f32(const void *w, int64_t i) { return ((const float *)w)[i]; }
static inline float one_f16(const void *w, int64_t i) { return kn_fp16_to_fp32(((const uint16_t *)w)[i]); }
static inline float one_bf16(const void *w, int64_t i) { return kn_bf16_to_fp32(((const uint16_t *)w)[i]); }

/* The dot product of a float-format weight row with an F32 activation row (the order of dtype.c's
 * vec_dot), and its GEMM tile. */
#define FLOAT_DOT(NAME, LOAD, ONE)                                                                                     \
    static float NAME##_dot(int64_t n, const void *w, const float *x) {                                                \
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;                                                 \
        int64_t i = 0;                                                                                                 \
        for (; i + 16 <= n; i += 16) {                                                                                 \
            a0 = vfmaq_f32(a0, LOAD(w, i), vld1q_f32(x + i));                                                          \
            a1 = vfmaq_f32(a1, LOAD(w, i + 4), vld1q_f32(x + i + 4));                                                  \
            a2 = vfmaq_f32(a2, LOAD(w, i + 8), vld1q_f32(x + i + 8));                                                  \
            a3 = vfmaq_f32(a3, LOAD(w, i + 12), vld1q_f32(x + i + 12));                                                \
        }                                                                                                              \
        if (i < n) {                                                                                                   \
            float acc[16];                                                                                             \
            vst1q_f32(acc, a0);                                                                                        \
            vst1q_f32(acc + 4, a1);                                                                                    \
            vst1q_f32(acc + 8, a2);                                                                                    \
            vst1q_f32(acc + 12, a3);                                                                                   \
            for (int64_t j = i; j < n; j++) acc[j - i] = fmaf(ONE(w, j), x[j], acc[j - i]);                            \
            return kn_reduce16(acc);                                                                                   \
        }                                                                                                              \
        return reduce16(a0, a1, a2, a3);                                                                               \
    }                                                                                                                  \
    static void NAME##_gemm(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,       \
                            float *out, size_t ldo) {                                                                  \
        for (int t = 0; t < nt; t++)                                                                                   \
            for (int r = 0; r < nr; r++)                                                                               \
                out[(size_t)t * ldo + (size_t)r] =                                                                     \
                    NAME##_dot(n, w + (size_t)r * ws, (const float *)(const void *)(x + (size_t)t * xs));              \
    }
FLOAT_DOT(f32, load_f32, one_f32)
FLOAT_DOT(f16, load_f16, one_f16)
FLOAT_DOT(bf16, load_bf16, one_bf16)

/* ---- attention row helpers (attend.c's order) ---- */

/* sum k[i] q[i]: the first n - n % 8 products in 16 lanes (index % 16), kn_reduce16, then the rest
 * one by one (a plain multiply and add, as the reference). */
#define KV_DOT(NAME, LOAD, ONE)                                                                                        \
    static float NAME(const void *k, const float *q, int n) {                                                          \
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;                                                 \
        int i = 0;                                                                                                     \
        for (; i + 16 <= n; i += 16) {                                                                                 \
            a0 = vfmaq_f32(a0, LOAD(k, i), vld1q_f32(q + i));                                                          \
            a1 = vfmaq_f32(a1, LOAD(k, i + 4), vld1q_f32(q + i + 4));                                                  \
            a2 = vfmaq_f32(a2, LOAD(k, i + 8), vld1q_f32(q + i + 8));                                                  \
            a3 = vfmaq_f32(a3, LOAD(k, i + 12), vld1q_f32(q + i + 12));                                                \
        }                                                                                                              \
        if (i + 8 <= n) {                                                                                              \
            a0 = vfmaq_f32(a0, LOAD(k, i), vld1q_f32(q + i));                                                          \
            a1 = vfmaq_f32(a1, LOAD(k, i + 4), vld1q_f32(q + i + 4));                                                  \
            i += 8;                                                                                                    \
        }                                                                                                              \
        float s = reduce16(a0, a1, a2, a3);                                                                            \
        for (; i < n; i++) {                                                                                           \
            const float p = ONE(k, i) * q[i];                                                                          \
            s += p;                                                                                                    \
        }                                                                                                              \
        return s;                                                                                                      \
    }
KV_DOT(kv_dot_f16, load_f16, one_f16)
KV_DOT(kv_dot_f32, load_f32, one_f32)

/* y[i] = fma(a, v[i], y[i]). */
#define KV_AXPY(NAME, LOAD, ONE)                                                                                       \
    static void NAME(float a, const void *v, float *y, int n) {                                                        \
        const float32x4_t av = vdupq_n_f32(a);                                                                         \
        int i = 0;                                                                                                     \
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), av, LOAD(v, i)));                      \
        for (; i < n; i++) y[i] = fmaf(a, ONE(v, i), y[i]);                                                            \
    }
KV_AXPY(kv_axpy_f16, load_f16, one_f16)
KV_AXPY(kv_axpy_f32, load_f32, one_f32)

static void attend_f16(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out) {
    kn_attend_blocked(kv_dot_f16, kv_axpy_f16, r, n, q, nq, hd, scale, out);
}
static void attend_f32(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out) {
    kn_attend_blocked(kv_dot_f32, kv_axpy_f32, r, n, q, nq, hd, scale, out);
}

/* ---- activation quantizers ---- */

/* |v| with NaN lanes replaced by 0 (the reference's `fabsf(x) > amax` never takes a NaN). */
static inline float32x4_t abs_no_nan(float32x4_t v) {
    return vreinterpretq_f32_u32(vandq_u32(vceqq_f32(v, v), vreinterpretq_u32_f32(vabsq_f32(v))));
}

/* kn_round_clamp(v, -127, 127) per lane: round half away from zero, clamp, NaN -> -127. */
static inline int32x4_t round_clamp127(float32x4_t v) {
    int32x4_t q = vcvtaq_s32_f32(v);
    q = vminq_s32(vmaxq_s32(q, vdupq_n_s32(-127)), vdupq_n_s32(127));
    return vbslq_s32(vceqq_f32(v, v), q, vdupq_n_s32(-127));
}

/* Four lanes of int32 (each -127..127) narrowed to bytes, 16 at a time. */
static inline int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    return vcombine_s8(vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(b))),
                       vmovn_s16(vcombine_s16(vmovn_s32(c), vmovn_s32(d))));
}

/* One block of 32 as quant_legacy.c's quantize_q8_32: returns the fp16 scale, writes qs and the sum
 * of the quants. */
static kn_half q8_block(const float *x, int8_t qs[32], int *sum) {
    float32x4_t v[8], m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 8; i++) {
        v[i] = vld1q_f32(x + 4 * i);
        m = vmaxq_f32(m, abs_no_nan(v[i]));
    }
    const kn_half dh = kn_fp32_to_fp16_scale(vmaxvq_f32(m) / 127.0f);
    const float d = kn_fp16_to_fp32(dh);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32x4_t q[8], s = vdupq_n_s32(0);
    for (int i = 0; i < 8; i++) {
        q[i] = round_clamp127(vmulq_n_f32(v[i], id));
        s = vaddq_s32(s, q[i]);
    }
    vst1q_s8(qs, narrow16(q[0], q[1], q[2], q[3]));
    vst1q_s8(qs + 16, narrow16(q[4], q[5], q[6], q[7]));
    *sum = vaddvq_s32(s);
    return dh;
}
KN_Q8_QUANTIZERS(q8_block)

/* Q8_K as kn_q8_k_from_float: sanitise (NaN -> 0, +-inf -> +-FLT_MAX), d = amax / 127 kept finite,
 * quants against 127 / amax, bsums per 16. */
static void quantize_q8_k(const float *src, void *dst, int64_t n) {
    kn_block_q8_k *b = dst;
    const float32x4_t big = vdupq_n_f32(FLT_MAX), nbig = vdupq_n_f32(-FLT_MAX), zero = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        float32x4_t v[64], m = zero;
        for (int j = 0; j < 64; j++) {
            float32x4_t x = vld1q_f32(src + 4 * j);
            x = vbslq_f32(vceqq_f32(x, x), x, zero);
            v[j] = vminq_f32(vmaxq_f32(x, nbig), big);
            m = vmaxq_f32(m, vabsq_f32(v[j]));
        }
        const float amax = vmaxvq_f32(m);
        b[i].d = amax / 127.0f;
        while (isinf(b[i].d * 127.0f)) b[i].d = nextafterf(b[i].d, 0.0f);
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 16; j++) {
            const int8x16_t q =
                narrow16(round_clamp127(vmulq_n_f32(v[4 * j], id)), round_clamp127(vmulq_n_f32(v[4 * j + 1], id)),
                         round_clamp127(vmulq_n_f32(v[4 * j + 2], id)), round_clamp127(vmulq_n_f32(v[4 * j + 3], id)));
            vst1q_s8(b[i].qs + 16 * j, q);
            b[i].bsums[j] = (int16_t)vaddlvq_s8(q);
        }
    }
}
#endif

bool kn_neon_init_float(kn_kernels *k) {
#if defined(__aarch64__)
    k->gemm[KN_F32] = f32_gemm;
    k->gemm[KN_F16] = f16_gemm;
    k->gemm[KN_BF16] = bf16_gemm;
    k->attend_f16 = attend_f16;
    k->attend_f32 = attend_f32;
    kn_neon_init_attn(k);
    k->quantize[KN_Q8_0] = quantize_q8_0;
    k->quantize[KN_Q8_1] = quantize_q8_1;
    k->quantize[KN_Q8_K] = quantize_q8_k;
    return true;
#else
    (void)k;
    return false;
#endif
}

void kn_kernels_init_neon(kn_kernels *k) {
    k->name = "neon";
#if defined(__aarch64__)
    k->glu = kn_glu_neon;                   /* act.c */
    k->sumexp = kn_sumexp_neon;             /* sumexp.c */
    k->logits_clean = kn_logits_clean_neon; /* logit_scan.c */
    k->argmax = kn_argmax_neon;
    k->above = kn_above_neon;
#endif
    kn_neon_init_float(k);
    const kn_cpu *c = kn_cpu_features();
    if (c->dotprod) kn_neon_init_dotprod(k);
    if (c->dotprod && c->i8mm) kn_neon_init_i8mm(k);
}
