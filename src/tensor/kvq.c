/*
 * kvq.c - store and read back one KV head vector in each KV format (see kvq.h): plain F16 / F32 /
 * BF16, the GGUF-style Q8_0 and Q4_0 blocks along the head dimension, and the TurboQuant MSE
 * formats TQ4 / TQ3 (norm plus one Lloyd-Max centroid index per rotated coordinate).
 */
#include "tensor/kvq.h"

#include "tensor/dtype.h"

#include <math.h>
#include <string.h>

/* Lloyd-Max quantizer of N(0, 1) (positive half, mirrored): the fixed point of "centroid = mean of
 * its interval, boundary = midpoint of neighbours"; test_kvq derives them again. */
const float kn_tq4_centroids[16] = {-2.7326f, -2.0690f, -1.6180f, -1.2562f, -0.9423f, -0.6568f, -0.3880f, -0.1284f,
                                    0.1284f,  0.3880f,  0.6568f,  0.9423f,  1.2562f,  1.6180f,  2.0690f,  2.7326f};
const float kn_tq3_centroids[8] = {-2.1519f, -1.3439f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3439f, 2.1519f};

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* roundf(v) (half away from zero) as an int8 code, inline (roundf is a library call on baseline x86-64): for
 * |v| < 128 the integer part t is exact and so is v - t, so comparing it with 1/2 decides as roundf does;
 * anything else takes roundf itself. */
static inline int8_t round_code(float v) {
    if (!(fabsf(v) < 128.0f)) return (int8_t)roundf(v);
    const int t = (int)v;
    const float f = v - (float)t;
    return (int8_t)(t + (f >= 0.5f) - (f <= -0.5f)); /* no branch: the halves fall either way */
}

/* Q8_0 of one block x[b]: d = max|x| / 127, q = round(x / d). (The max is fmaxf's: amax is never NaN, and
 * a NaN element leaves it as fmaxf does.) */
static void store_q8(const float *x, uint8_t *blk, int b) {
    float amax = 0;
    for (int j = 0; j < b; j++) {
        const float a = fabsf(x[j]);
        amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    put16(blk, kn_fp32_to_fp16(d));
    for (int j = 0; j < b; j++) blk[2 + j] = (uint8_t)round_code(x[j] * id);
}

/* x / d + 8 rounded, within 0 .. 15. */
static int nib(float u) {
    const int a = (int)(u + 8.5f);
    return a > 15 ? 15 : a < 0 ? 0 : a;
}

/* Q4_0 of one block x[b]: d = (the element of largest magnitude) / -8, nibble = x / d + 8 clamped. */
static void store_q4(const float *x, uint8_t *blk, int b) {
    float amax = 0, max = 0;
    for (int j = 0; j < b; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    put16(blk, kn_fp32_to_fp16(d));
    if (b == 1) { /* hd odd: one element per block, in the low nibble */
        blk[2] = (uint8_t)nib(x[0] * id);
        return;
    }
    for (int j = 0; j < b / 2; j++) blk[2 + j] = (uint8_t)(nib(x[j] * id) | nib(x[j + b / 2] * id) << 4);
}

/* Index of the centroid nearest to u (centroids c[n] ascending). */
static int nearest(const float *c, int n, float u) {
    int i = 0;
    while (i + 1 < n && u > 0.5f * (c[i] + c[i + 1])) i++;
    return i;
}

/* TQ4 / TQ3: each coordinate's nearest centroid of x / s, s = |x| / sqrt(hd) first; then s becomes
 * the least-squares scale of the chosen centroids and the codes are chosen again for it (one more
 * round): a fit at least as close as the plain norm's, which matters for small heads. */
static void store_tq(const float *x, uint8_t *dst, int hd, int bits) {
    const float *c = bits == 4 ? kn_tq4_centroids : kn_tq3_centroids;
    const int nc = 1 << bits;
    double ss = 0;
    for (int i = 0; i < hd; i++) ss += (double)x[i] * x[i];
    float s = (float)sqrt(ss / hd); /* TurboQuant's scale: the norm over sqrt(hd) */
    uint8_t idx[KN_KVQ_MAX_HD];
    for (int pass = 0; pass < 2; pass++) {
        /* codes for scale s, then the least-squares scale of those codes (never a worse fit) */
        const float is = s > 0 ? 1.0f / s : 0.0f;
        double xc = 0, cc = 0;
        for (int i = 0; i < hd; i++) {
            idx[i] = (uint8_t)nearest(c, nc, x[i] * is);
            xc += (double)x[i] * c[idx[i]];
            cc += (double)c[idx[i]] * c[idx[i]];
        }
        if (cc > 0 && xc > 0) s = (float)(xc / cc);
    }
    put16(dst, kn_fp32_to_fp16(s));
    uint8_t *q = dst + 2;
    memset(q, 0, bits == 4 ? ((size_t)hd + 1) / 2 : (3 * (size_t)hd + 7) / 8);
    for (int i = 0; i < hd; i++) {
        if (bits == 4) {
            q[i / 2] |= (uint8_t)(idx[i] << (4 * (i & 1)));
        } else {
            const unsigned v = idx[i], bit = 3u * (unsigned)i;
            q[bit / 8] |= (uint8_t)(v << (bit % 8));
            if (bit % 8 > 5) q[bit / 8 + 1] |= (uint8_t)(v >> (8 - bit % 8));
        }
    }
}

/* ---- per format: head bytes, store, element ------------------------------------------------------ */

static size_t bytes_16(int hd) { return 2 * (size_t)hd; }
static size_t bytes_32(int hd) { return 4 * (size_t)hd; }
static size_t bytes_q8(int hd) { return (size_t)hd / (size_t)kn_kvq_block(hd) * 2 + (size_t)hd; }
static size_t bytes_q4(int hd) { return (size_t)hd / (size_t)kn_kvq_block(hd) * 2 + ((size_t)hd + 1) / 2; }
static size_t bytes_tq4(int hd) { return 2 + ((size_t)hd + 1) / 2; }
static size_t bytes_tq3(int hd) { return 2 + (3 * (size_t)hd + 7) / 8; }

/* The 16-bit formats through the row conversions (dtype.h: F16C / NEON where the CPU has them, the
 * same bits as the scalar ones); straight into d when it is 2-aligned (always, unless an odd-sized
 * format precedes it in the row), else through a buffer. */
static void st_16(const float *x, uint8_t *d, int hd, void (*row)(const float *, uint16_t *, int64_t)) {
    if (((uintptr_t)d & 1) == 0) {
        row(x, (uint16_t *)(void *)d, hd);
        return;
    }
    uint16_t buf[64];
    for (int i = 0; i < hd; i += 64) {
        const int m = hd - i < 64 ? hd - i : 64;
        row(x + i, buf, m);
        memcpy(d + 2 * (size_t)i, buf, 2 * (size_t)m);
    }
}
static void st_f16(const float *x, uint8_t *d, int hd) { st_16(x, d, hd, kn_fp32_to_fp16_row); }
static void st_bf16(const float *x, uint8_t *d, int hd) { st_16(x, d, hd, kn_fp32_to_bf16_row); }
static void st_f32(const float *x, uint8_t *d, int hd) { memcpy(d, x, (size_t)hd * 4); }
static void st_q8(const float *x, uint8_t *d, int hd) {
    const int b = kn_kvq_block(hd);
    for (int i = 0; i < hd; i += b) store_q8(x + i, d + (size_t)(i / b) * (2 + (size_t)b), b);
}
static void st_q4(const float *x, uint8_t *d, int hd) {
    const int b = kn_kvq_block(hd);
    for (int i = 0; i < hd; i += b) store_q4(x + i, d + (size_t)(i / b) * (2 + (size_t)(b + 1) / 2), b);
}
static void st_tq4(const float *x, uint8_t *d, int hd) { store_tq(x, d, hd, 4); }
static void st_tq3(const float *x, uint8_t *d, int hd) { store_tq(x, d, hd, 3); }

static float el_f16(const uint8_t *p, int i, int hd) { return kn_fp16_to_fp32(get16(p + 2 * i)); }
static float el_bf16(const uint8_t *p, int i, int hd) { return kn_bf16_to_fp32(get16(p + 2 * i)); }
static float el_f32(const uint8_t *p, int i, int hd) {
    float f;
    memcpy(&f, p + 4 * (size_t)i, 4);
    return f;
}
static float el_q8(const uint8_t *p, int i, int hd) {
    const int b = kn_kvq_block(hd);
    const uint8_t *blk = p + (size_t)(i / b) * (2 + (size_t)b);
    return kn_fp16_to_fp32(get16(blk)) * (float)(int8_t)blk[2 + i % b];
}
static float el_q4(const uint8_t *p, int i, int hd) {
    const int b = kn_kvq_block(hd), j = i % b, h = b > 1 ? b / 2 : 1;
    const uint8_t *blk = p + (size_t)(i / b) * (2 + (size_t)(b + 1) / 2);
    const int q = j < h ? blk[2 + j] & 15 : blk[2 + j - h] >> 4;
    return kn_fp16_to_fp32(get16(blk)) * (float)(q - 8);
}
static float el_tq4(const uint8_t *p, int i, int hd) {
    return kn_fp16_to_fp32(get16(p)) * kn_tq4_centroids[(p[2 + i / 2] >> (4 * (i & 1))) & 15];
}
static float el_tq3(const uint8_t *p, int i, int hd) {
    const unsigned bit = 3u * (unsigned)i;
    unsigned v = p[2 + bit / 8] >> (bit % 8);
    if (bit % 8 > 5) v |= (unsigned)p[2 + bit / 8 + 1] << (8 - bit % 8);
    return kn_fp16_to_fp32(get16(p)) * kn_tq3_centroids[v & 7];
}

/* The table of KV formats: adding one is an entry here (and its enum value and kernels). */
/* clang-format off */
static const kn_kvq_traits g_traits[KN_KVT_COUNT] = {
    [KN_KVT_F16]  = {"f16",  "IEEE half, 16 bits",                    KN_KVQ_ROT_OFF,    bytes_16,  st_f16,  el_f16},
    [KN_KVT_F32]  = {"f32",  "IEEE single, 32 bits",                  KN_KVQ_ROT_OFF,    bytes_32,  st_f32,  el_f32},
    [KN_KVT_BF16] = {"bf16", "bfloat16, 16 bits",                     KN_KVQ_ROT_OFF,    bytes_16,  st_bf16, el_bf16},
    [KN_KVT_Q8_0] = {"q8_0", "8-bit blocks of 32, fp16 scale",        KN_KVQ_ROT_ON,     bytes_q8,  st_q8,   el_q8},
    [KN_KVT_Q4_0] = {"q4_0", "4-bit blocks of 32, fp16 scale",        KN_KVQ_ROT_ON,     bytes_q4,  st_q4,   el_q4},
    [KN_KVT_TQ4]  = {"tq4",  "TurboQuant 4-bit Lloyd-Max, fp16 norm", KN_KVQ_ROT_ALWAYS, bytes_tq4, st_tq4,  el_tq4},
    [KN_KVT_TQ3]  = {"tq3",  "TurboQuant 3-bit Lloyd-Max, fp16 norm", KN_KVQ_ROT_ALWAYS, bytes_tq3, st_tq3,  el_tq3},
};
/* clang-format on */

const kn_kvq_traits *kn_kvq_traits_get(kn_kvt t) { return (unsigned)t < KN_KVT_COUNT ? &g_traits[t] : NULL; }

size_t kn_kvq_head_bytes(kn_kvt t, int hd) {
    return (unsigned)t < KN_KVT_COUNT && hd > 0 ? g_traits[t].head_bytes(hd) : 0;
}

void kn_kvq_store(kn_kvt t, const float *x, void *dst, int hd) { g_traits[t].store(x, dst, hd); }

float kn_kvq_elem(kn_kvt t, const void *head, int i, int hd) { return g_traits[t].elem(head, i, hd); }

void kn_kvq_load(kn_kvt t, const void *head, float *out, int hd) {
    for (int i = 0; i < hd; i++) out[i] = g_traits[t].elem(head, i, hd);
}
