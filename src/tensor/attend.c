/*
 * attend.c - the reference attention kernel (kn_attend_fn, kernels.h): query heads, one after the
 * other, over the cached K/V rows of positions 0 .. n-1 of their KV head, with an online softmax
 * taken in blocks of 16 positions, and the exponential (kn_expf_ref) that every kernel set computes
 * with the same float steps.
 *
 * The algorithm, which the SIMD versions reproduce bit for bit:
 *   m = -inf; lsum[16] = 0; out[hd] = 0
 *   for each block of positions p0 = 0, 16, 32, ... (the last may be partial, cnt < 16):
 *     s[j]  = dot(k[p0 + j], q) * scale               (the reference row dot below)
 *     bm    = max over j < cnt of s[j]
 *     if bm > m: c = expf(m - bm); lsum[*] *= c; out[*] *= c; m = bm
 *     w[j]  = expf(s[j] - m)                          (j < cnt; the other lanes add 0)
 *     lsum[j] += w[j]; then for j in order: out[i] = fmaf(w[j], v[p0 + j][i], out[i])   (axpy)
 *   out[*] *= 1 / kn_reduce16(lsum)
 * kn_attend_softcap_ref adds one step, s[j] = cap * tanh(s[j] / cap), right after the scaling.
 * No T x T score matrix exists: a block's 16 scores live in registers. kn_attend_blocked runs it over
 * any row helpers that compute the reference's bits (the AVX2 set passes its SIMD ones).
 *
 * A call of several KV heads (kn_attend_rows.nkv) sweeps the blocks once: each block's rows are taken
 * by every head in turn, with the same float steps per head as a call of its own.
 *
 * Every KV format of kvq.h has reference row helpers here: an element's value is kn_kvq_elem's
 * (a quantized element is one float product, scale times code or centroid), and the dot and axpy
 * steps are the F16 ones above over those values. kn_attend_kv_ref runs any pair of K and V formats
 * (with their own row strides); kn_kernels_attend picks a set's kernel for one format. Rows are found
 * through a kn_attend_rows (kernels.h), 16 row addresses per block of positions, so a paged cache is
 * read in place with the same float steps as a contiguous one.
 */
#include "tensor/kernels.h"
#include "tensor/kvq.h"
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

float kn_expf_ref(float x) {
    if (!(x >= KN_EXPF_MIN)) return 0.0f; /* also -inf and NaN */
    if (x > KN_EXPF_MAX) x = KN_EXPF_MAX;
    const float n = rintf(x * 1.44269504088896341f); /* round to nearest even */
    float r = fmaf(n, -0.693359375f, x);             /* x - n ln2, in two steps */
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float y = fmaf(p, r * r, r) + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in -126 .. 127 */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

/* Element i of an F16 (f16) or F32 row at any byte address. */
static inline float row_elem(const void *r, int i, bool f16) {
    if (f16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)r + 2 * (size_t)i, 2);
        return kn_fp16_to_fp32(h);
    }
    float f;
    memcpy(&f, (const uint8_t *)r + 4 * (size_t)i, 4);
    return f;
}

/* Reference row helpers, in the order the SIMD versions compute (so every kernel set gives the same
 * bits): a dot product puts the first n - n % 8 products in 16 lanes by index % 16 with fused
 * multiply-adds, reduces the lanes by kn_reduce16, then adds the remaining products one by one;
 * axpy is y[i] = fmaf(a, v[i], y[i]). Rows may start at any byte (a paged cache's rows do not need to
 * be aligned). */
static float dot_ref(const void *k, const float *q, int n, bool f16) {
    float acc[16] = {0};
    const int body = n - n % 8;
    for (int i = 0; i < body; i++) acc[i & 15] = fmaf(row_elem(k, i, f16), q[i], acc[i & 15]);
    float s = kn_reduce16(acc);
    for (int i = body; i < n; i++) s += row_elem(k, i, f16) * q[i];
    return s;
}
static float dot_f16_ref(const void *k, const float *q, int n) { return dot_ref(k, q, n, true); }
static float dot_f32_ref(const void *k, const float *q, int n) { return dot_ref(k, q, n, false); }
static void axpy_f16_ref(float a, const void *v, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(a, row_elem(v, i, true), y[i]);
}
static void axpy_f32_ref(float a, const void *v, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(a, row_elem(v, i, false), y[i]);
}

/* The row helpers of the other formats: the same steps over kn_kvq_elem's values. */
#define KVQ_ROWS(NAME, T)                                                                                              \
    static float dot_##NAME(const void *k, const float *q, int n) {                                                    \
        float acc[16] = {0};                                                                                           \
        const int body = n - n % 8;                                                                                    \
        for (int i = 0; i < body; i++) acc[i & 15] = fmaf(kn_kvq_elem(T, k, i, n), q[i], acc[i & 15]);                 \
        float s = kn_reduce16(acc);                                                                                    \
        for (int i = body; i < n; i++) s += kn_kvq_elem(T, k, i, n) * q[i];                                            \
        return s;                                                                                                      \
    }                                                                                                                  \
    static void axpy_##NAME(float a, const void *v, float *y, int n) {                                                 \
        for (int i = 0; i < n; i++) y[i] = fmaf(a, kn_kvq_elem(T, v, i, n), y[i]);                                     \
    }
KVQ_ROWS(bf16, KN_KVT_BF16)
KVQ_ROWS(q8_0, KN_KVT_Q8_0)
KVQ_ROWS(q4_0, KN_KVT_Q4_0)
KVQ_ROWS(tq4, KN_KVT_TQ4)
KVQ_ROWS(tq3, KN_KVT_TQ3)

static const struct {
    kn_kv_dot_fn dot;
    kn_kv_axpy_fn axpy;
} g_rows[KN_KVT_COUNT] = {
    [KN_KVT_F16] = {dot_f16_ref, axpy_f16_ref}, [KN_KVT_F32] = {dot_f32_ref, axpy_f32_ref},
    [KN_KVT_BF16] = {dot_bf16, axpy_bf16},      [KN_KVT_Q8_0] = {dot_q8_0, axpy_q8_0},
    [KN_KVT_Q4_0] = {dot_q4_0, axpy_q4_0},      [KN_KVT_TQ4] = {dot_tq4, axpy_tq4},
    [KN_KVT_TQ3] = {dot_tq3, axpy_tq3},
};

/* The algorithm above for the nkv * nq heads of a call, q[nkv][nq][hd] -> out[nkv][nq][hd], over the
 * rows *r locates: one sweep over the blocks of positions, each block's rows taken by every KV head in
 * turn (each head's float steps are the one-head algorithm's). */
static void attend_heads(kn_kv_dot_fn dot, kn_kv_axpy_fn axpy, const kn_attend_rows *r, int32_t n, const float *q,
                         int nq, int hd, float scale, float cap, float *out) {
    const int nkv = kn_attend_nkv(r), nh = nkv * nq;
    float m[KN_ATTEND_MAX_HEADS], lsum[KN_ATTEND_MAX_HEADS][16], s[16];
    for (int h = 0; h < nh; h++) m[h] = -INFINITY;
    memset(lsum, 0, sizeof lsum);
    memset(out, 0, (size_t)nh * (size_t)hd * sizeof(float));
    for (int32_t p0 = 0; p0 < n; p0 += 16) {
        const int cnt = n - p0 < 16 ? (int)(n - p0) : 16;
        const uint8_t *kp0[16], *vp0[16];
        kn_attend_rows_at(r, p0, cnt, kp0, vp0);
        for (int h = 0; h < nh; h++) {
            const size_t g = (size_t)(h / nq);
            const float *qh = q + (size_t)h * hd;
            float *oh = out + (size_t)h * hd;
            float bm = -INFINITY;
            for (int j = 0; j < cnt; j++) {
                s[j] = dot(kp0[j] + g * r->khead, qh, hd) * scale;
                if (cap > 0) s[j] = cap * tanhf(s[j] / cap);
                bm = s[j] > bm ? s[j] : bm;
            }
            if (bm > m[h]) {
                const float c = kn_expf_ref(m[h] - bm);
                for (int j = 0; j < 16; j++) lsum[h][j] *= c;
                for (int i = 0; i < hd; i++) oh[i] *= c;
                m[h] = bm;
            }
            for (int j = 0; j < cnt; j++) {
                const float w = kn_expf_ref(s[j] - m[h]);
                lsum[h][j] += w;
                axpy(w, vp0[j] + g * r->vhead, oh, hd);
            }
        }
    }
    for (int h = 0; h < nh; h++) {
        const float inv = 1.0f / kn_reduce16(lsum[h]);
        for (int i = 0; i < hd; i++) out[(size_t)h * hd + i] *= inv;
    }
}

void kn_attend_blocked(kn_kv_dot_fn dot, kn_kv_axpy_fn axpy, const kn_attend_rows *r, int32_t n, const float *q, int nq,
                       int hd, float scale, float *out) {
    attend_heads(dot, axpy, r, n, q, nq, hd, scale, 0.0f, out);
}

void kn_attend_f16_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out) {
    kn_attend_blocked(dot_f16_ref, axpy_f16_ref, r, n, q, nq, hd, scale, out);
}

void kn_attend_f32_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float *out) {
    kn_attend_blocked(dot_f32_ref, axpy_f32_ref, r, n, q, nq, hd, scale, out);
}

void kn_attend_softcap_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale, float cap,
                           bool f16, float *out) {
    attend_heads(f16 ? dot_f16_ref : dot_f32_ref, f16 ? axpy_f16_ref : axpy_f32_ref, r, n, q, nq, hd, scale, cap, out);
}

void kn_attend_kv_ref(kn_kvt tk, kn_kvt tv, const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd,
                      float scale, float cap, float *out) {
    attend_heads(g_rows[tk].dot, g_rows[tv].axpy, r, n, q, nq, hd, scale, cap, out);
}

/* The reference kn_attend_fn of each quantized format. */
#define REF_ENTRY(NAME, T)                                                                                             \
    static void attend_##NAME##_ref(const kn_attend_rows *r, int32_t n, const float *q, int nq, int hd, float scale,   \
                                    float *out) {                                                                      \
        kn_attend_kv_ref(T, T, r, n, q, nq, hd, scale, 0.0f, out);                                                     \
    }
REF_ENTRY(bf16, KN_KVT_BF16)
REF_ENTRY(q8_0, KN_KVT_Q8_0)
REF_ENTRY(q4_0, KN_KVT_Q4_0)
REF_ENTRY(tq4, KN_KVT_TQ4)
REF_ENTRY(tq3, KN_KVT_TQ3)

kn_attend_fn kn_attend_ref_for(kn_kvt t) {
    static const kn_attend_fn ref[KN_KVT_COUNT] = {
        [KN_KVT_F16] = kn_attend_f16_ref, [KN_KVT_F32] = kn_attend_f32_ref, [KN_KVT_BF16] = attend_bf16_ref,
        [KN_KVT_Q8_0] = attend_q8_0_ref,  [KN_KVT_Q4_0] = attend_q4_0_ref,  [KN_KVT_TQ4] = attend_tq4_ref,
        [KN_KVT_TQ3] = attend_tq3_ref,
    };
    return (unsigned)t < KN_KVT_COUNT ? ref[t] : NULL;
}

kn_attend_fn kn_kernels_attend(const kn_kernels *ks, kn_kvt t) {
    if ((unsigned)t >= KN_KVT_COUNT) return NULL;
    if (ks->attend_kv[t]) return ks->attend_kv[t];
    if (t == KN_KVT_F16 && ks->attend_f16) return ks->attend_f16;
    if (t == KN_KVT_F32 && ks->attend_f32) return ks->attend_f32;
    return kn_attend_ref_for(t);
}
