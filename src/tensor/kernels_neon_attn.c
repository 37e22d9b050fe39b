/*
 * kernels_neon_attn.c - ARM64 NEON attention over the quantized KV formats Q8_0 and TQ4 (kvq.h): the
 * blocked online softmax of attend.c (kn_attend_blocked) over NEON row helpers that read the cache
 * directly, four elements at a time, exactly as kn_kvq_elem does: Q8_0 codes times their block's fp16
 * scale, TQ4 centroids looked up with a byte table (vqtbl4q over the 64 bytes of kn_tq4_centroids)
 * times the vector's fp16 scale; each element is that one float product.
 *
 * The row helpers compute the reference's bits (attend.c): the dot product puts the first n - n % 8
 * products in 16 lanes (element index % 16) with fused multiply-adds, reduces them in kn_reduce16's
 * order and adds the rest one by one (a plain multiply and add); axpy is y[i] = fma(a, v[i], y[i]).
 * Head sizes that are not a multiple of 16 take the reference kernel. Part of the plain neon set.
 */
#include "tensor/kernels.h"

#if defined(__aarch64__)
#include "tensor/kvq.h"
#include "tensor/quant.h"

#include <arm_neon.h>
#include <string.h>

/* fp16 bits at p to fp32 (exact). */
static inline float scale_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kn_fp16_to_fp32(h);
}

/* Elements i .. i + 3 (i a multiple of 4) of a Q8_0 head vector of hd elements (block B =
 * kn_kvq_block(hd), which 4 divides here): d * code. */
static inline float32x4_t ld4_q8_0(const uint8_t *p, int i, int b) {
    const uint8_t *blk = p + (size_t)(i / b) * (2 + (size_t)b);
    int32_t c4;
    memcpy(&c4, blk + 2 + i % b, 4);
    const int16x8_t w = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(c4)));
    return vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), scale_at(blk));
}

/* Elements i .. i + 3 (i a multiple of 4) of a TQ4 head vector: s * C[idx], idx in bytes 2 + i / 2 and
 * 3 + i / 2, low nibble first. */
static inline float32x4_t ld4_tq4(const uint8_t *p, int i, const uint8x16x4_t *tab) {
    static const uint8_t rep[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    static const uint8_t off[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    uint16_t w;
    memcpy(&w, p + 2 + i / 2, 2);
    const uint8x8_t b = vreinterpret_u8_u16(vdup_n_u16(w));
    const uint8x8_t idx = vzip1_u8(vand_u8(b, vdup_n_u8(15)), vshr_n_u8(b, 4)); /* idx 0..3 in bytes 0..3 */
    const uint8x16_t at = vaddq_u8(vshlq_n_u8(vqtbl1q_u8(vcombine_u8(idx, idx), vld1q_u8(rep)), 2), vld1q_u8(off));
    return vmulq_n_f32(vreinterpretq_f32_u8(vqtbl4q_u8(*tab, at)), scale_at(p));
}

static inline uint8x16x4_t tq4_table(void) {
    uint8x16x4_t t;
    t.val[0] = vld1q_u8((const uint8_t *)kn_tq4_centroids);
    t.val[1] = vld1q_u8((const uint8_t *)kn_tq4_centroids + 16);
    t.val[2] = vld1q_u8((const uint8_t *)kn_tq4_centroids + 32);
    t.val[3] = vld1q_u8((const uint8_t *)kn_tq4_centroids + 48);
    return t;
}

/* The row helpers of a format whose LD(p, i, ctx) loads 4 elements (n a multiple of 16, so the
 * reference's scalar tail is empty): dot in 16 lanes, kn_reduce16; axpy with fused multiply-adds. */
#define KV_ROWS(NAME, CTX, LD)                                                                                         \
    static float dot_##NAME(const void *kp, const float *q, int n) {                                                   \
        const uint8_t *k = kp;                                                                                         \
        CTX;                                                                                                           \
        float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;                                                 \
        for (int i = 0; i < n; i += 16) {                                                                              \
            a0 = vfmaq_f32(a0, LD(k, i, ctx), vld1q_f32(q + i));                                                       \
            a1 = vfmaq_f32(a1, LD(k, i + 4, ctx), vld1q_f32(q + i + 4));                                               \
            a2 = vfmaq_f32(a2, LD(k, i + 8, ctx), vld1q_f32(q + i + 8));                                               \
            a3 = vfmaq_f32(a3, LD(k, i + 12, ctx), vld1q_f32(q + i + 12));                                             \
        }                                                                                                              \
        a0 = vaddq_f32(a0, a2); /* kn_reduce16: lanes i + 8, then i + 4, i + 2, i + 1 */                               \
        a1 = vaddq_f32(a1, a3);                                                                                        \
        a0 = vaddq_f32(a0, a1);                                                                                        \
        const float32x2_t s = vadd_f32(vget_low_f32(a0), vget_high_f32(a0));                                           \
        return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);                                                              \
    }                                                                                                                  \
    static void axpy_##NAME(float a, const void *vp, float *y, int n) {                                                \
        const uint8_t *v = vp;                                                                                         \
        CTX;                                                                                                           \
        const float32x4_t av = vdupq_n_f32(a);                                                                         \
        for (int i = 0; i < n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), av, LD(v, i, ctx)));               \
    }
KV_ROWS(q8_0, const int ctx = kn_kvq_block(n), ld4_q8_0)
KV_ROWS(tq4, const uint8x16x4_t tab = tq4_table(); const uint8x16x4_t *ctx = &tab, ld4_tq4)

static void attend_q8_0(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out) {
    if (hd % 16) kn_attend_ref_for(KN_KVT_Q8_0)(r, n, q, nq, hd, scale, out);
    else kn_attend_blocked(dot_q8_0, axpy_q8_0, r, n, q, nq, hd, scale, out);
}
static void attend_tq4(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out) {
    if (hd % 16) kn_attend_ref_for(KN_KVT_TQ4)(r, n, q, nq, hd, scale, out);
    else kn_attend_blocked(dot_tq4, axpy_tq4, r, n, q, nq, hd, scale, out);
}
#endif

bool kn_neon_init_attn(kn_kernels *k) {
#if defined(__aarch64__)
    k->attend_kv[KN_KVT_Q8_0] = attend_q8_0;
    k->attend_kv[KN_KVT_TQ4] = attend_tq4;
    return true;
#else
    (void)k;
    return false;
#endif
}
