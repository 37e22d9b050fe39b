/*
 * test_attend.c - the attention kernels (kn_attend_fn, src/tensor/attend.c):
 *   - kn_expf_ref against the C library's expf: within 2 ulp over the range attention uses, 0 below
 *     KN_EXPF_MIN and for -inf / NaN;
 *   - the reference kernel against a plain double-precision softmax-weighted sum (relative 1e-5);
 *   - the best set's and every set's this CPU runs (avx2, avx2vnni, avx512) against the reference bit for bit
 * (tolerance 0: the blocked algorithm is specified to the float step), for F16 and F32 caches, head sizes 8 .. 256
 * (multiples of 16 take the AVX-512 vector path, others the reference one), lengths around the 16-position blocks and 1
 * .. KN_ATTEND_MAX_Q query heads per call (each head's output equals a one-head call's), and 2 .. 4 KV heads per
 * call (rows of several heads) against one reference call per KV head.
 */
#include "harness.h"

#include "tensor/kernels.h"

#include <stdint.h>

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static float frand(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((double)((rng * 2685821657736338717ULL) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static int ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? ia - ib : ib - ia;
}

static void test_expf(void) {
    int worst = 0;
    for (float x = -86.9f; x <= 10.0f; x += 0.0137f) {
        const int u = ulps(kn_expf_ref(x), expf(x));
        worst = u > worst ? u : worst;
    }
    printf("  largest difference from expf: %d ulp\n", worst);
    CHECK(worst <= 2);
    CHECK(kn_expf_ref(0.0f) == 1.0f);
    CHECK(kn_expf_ref(-INFINITY) == 0.0f);
    CHECK(kn_expf_ref(NAN) == 0.0f);
    CHECK(kn_expf_ref(-100.0f) == 0.0f);
    CHECK(isfinite(kn_expf_ref(1000.0f)));
}

/* n positions of K and V rows of hd elements (stride hd + 8 elements) in F16 or F32. */
typedef struct kvbuf {
    uint8_t *k, *v;
    float *kf, *vf; /* the same values as floats */
    size_t stride;
} kvbuf;

static void kv_make(kvbuf *b, int n, int hd, bool f16) {
    const int es = f16 ? 2 : 4, row = hd + 8;
    b->stride = (size_t)row * (size_t)es;
    b->k = malloc(b->stride * (size_t)n);
    b->v = malloc(b->stride * (size_t)n);
    b->kf = malloc(sizeof(float) * (size_t)(n * row));
    b->vf = malloc(sizeof(float) * (size_t)(n * row));
    for (int i = 0; i < n * row; i++) {
        float kv = frand() * 3.0f, vv = frand();
        if (f16) {
            uint16_t hk = kn_fp32_to_fp16(kv), hv = kn_fp32_to_fp16(vv);
            memcpy(b->k + (size_t)i * 2, &hk, 2);
            memcpy(b->v + (size_t)i * 2, &hv, 2);
            kv = kn_fp16_to_fp32(hk);
            vv = kn_fp16_to_fp32(hv);
        } else {
            memcpy(b->k + (size_t)i * 4, &kv, 4);
            memcpy(b->v + (size_t)i * 4, &vv, 4);
        }
        b->kf[i] = kv;
        b->vf[i] = vv;
    }
}

static void kv_free(kvbuf *b) { free(b->k), free(b->v), free(b->kf), free(b->vf); }

static void test_ref_vs_double(void) {
    const int hd = 64, n = 300, row = hd + 8;
    for (int f16 = 0; f16 < 2; f16++) {
        kvbuf b;
        kv_make(&b, n, hd, f16);
        float q[64], out[64];
        for (int i = 0; i < hd; i++) q[i] = frand();
        const uint8_t *kk = b.k, *vv = b.v;
        const kn_attend_rows r = kn_attend_rows_flat(&kk, &vv, b.stride, b.stride);
        (f16 ? kn_attend_f16_ref : kn_attend_f32_ref)(&r, n, q, 1, hd, 0.125f, out);
        double s[300], mx = -1e300, sum = 0, want[64] = {0};
        for (int p = 0; p < n; p++) {
            s[p] = 0;
            for (int i = 0; i < hd; i++) s[p] += (double)b.kf[p * row + i] * q[i];
            s[p] *= 0.125;
            mx = s[p] > mx ? s[p] : mx;
        }
        for (int p = 0; p < n; p++) sum += exp(s[p] - mx);
        for (int p = 0; p < n; p++)
            for (int i = 0; i < hd; i++) want[i] += exp(s[p] - mx) / sum * b.vf[p * row + i];
        double err = 0, norm = 0;
        for (int i = 0; i < hd; i++) err = fmax(err, fabs(out[i] - want[i])), norm = fmax(norm, fabs(want[i]));
        kv_free(&b);
        CHECKF(err <= 1e-5 * fmax(norm, 1e-3), "f16=%d: max error %g (scale %g)", f16, err, norm);
    }
}

/* Every output of set's attention kernels equals the reference's, bit for bit: nq query heads in one
 * call against one one-head reference call per head. */
static int check_set(const kn_kernels *best) {
    const int hds[] = {8, 16, 48, 64, 80, 128, 256};
    const int ns[] = {1, 2, 15, 16, 17, 31, 33, 100, 517};
    const int nqs[] = {1, 3, 4, 7, KN_ATTEND_MAX_Q};
    enum { MAXQ = KN_ATTEND_MAX_Q, MAXHD = 256 };
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
            for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
                const int hd = hds[a], n = ns[c], nq = nqs[(a + c) % (sizeof nqs / sizeof nqs[0])];
                kvbuf b;
                kv_make(&b, n, hd, f16);
                float q[MAXQ * MAXHD], o1[MAXQ * MAXHD], o2[MAXQ * MAXHD];
                for (int i = 0; i < nq * hd; i++) q[i] = frand() * 2.0f;
                const uint8_t *kk = b.k, *vv = b.v;
                const kn_attend_rows r = kn_attend_rows_flat(&kk, &vv, b.stride, b.stride);
                for (int h = 0; h < nq; h++)
                    (f16 ? kn_attend_f16_ref : kn_attend_f32_ref)(&r, n, q + h * hd, 1, hd, 0.3f, o1 + h * hd);
                (f16 ? best->attend_f16 : best->attend_f32)(&r, n, q, nq, hd, 0.3f, o2);
                kv_free(&b);
                if (memcmp(o1, o2, sizeof(float) * (size_t)(nq * hd)) != 0) {
                    printf("  %s f16=%d hd=%d n=%d nq=%d: differs (%.9g vs %.9g)\n", best->name, f16, hd, n, nq, o1[0],
                           o2[0]);
                    return -1;
                }
            }
    return 0;
}

/* Several KV heads in one call (rows of nkv heads, hd + 4 elements apart) equal one reference call per
 * KV head, bit for bit. */
static int check_set_heads(const kn_kernels *set) {
    const int hds[] = {8, 48, 64, 128, 256};
    const int ns[] = {1, 16, 17, 100};
    const int nkvs[] = {2, 3, 4}, nqs[] = {1, 4, KN_ATTEND_MAX_Q};
    enum { MAXHD = 256 };
    static float q[KN_ATTEND_MAX_HEADS * MAXHD], o1[KN_ATTEND_MAX_HEADS * MAXHD], o2[KN_ATTEND_MAX_HEADS * MAXHD];
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
            for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++)
                for (size_t k = 0; k < sizeof nkvs / sizeof nkvs[0]; k++) {
                    const int hd = hds[a], n = ns[c], nkv = nkvs[k], nq = nqs[(a + c + k) % 3], nh = nkv * nq;
                    kvbuf b;
                    kv_make(&b, n, nkv * (hd + 4), f16);
                    for (int i = 0; i < nh * hd; i++) q[i] = frand() * 2.0f;
                    const uint8_t *kk = b.k, *vv = b.v;
                    kn_attend_rows r = kn_attend_rows_flat(&kk, &vv, b.stride, b.stride);
                    r.nkv = nkv, r.khead = r.vhead = (size_t)(hd + 4) * (f16 ? 2 : 4);
                    for (int g = 0; g < nkv; g++) {
                        const kn_attend_rows one = kn_attend_rows_head(&r, g);
                        (f16 ? kn_attend_f16_ref : kn_attend_f32_ref)(&one, n, q + g * nq * hd, nq, hd, 0.3f,
                                                                      o1 + g * nq * hd);
                    }
                    (f16 ? set->attend_f16 : set->attend_f32)(&r, n, q, nq, hd, 0.3f, o2);
                    kv_free(&b);
                    if (memcmp(o1, o2, sizeof(float) * (size_t)(nh * hd)) != 0) {
                        printf("  %s f16=%d hd=%d n=%d nkv=%d nq=%d: differs\n", set->name, f16, hd, n, nkv, nq);
                        return -1;
                    }
                }
    return 0;
}

static int check_set_all(const kn_kernels *set) { return check_set(set) || check_set_heads(set) ? -1 : 0; }

static void test_ref_heads(void) { CHECK(check_set_heads(kn_kernels_get(KN_KERNELS_REF)) == 0); }

static void test_best_equals_ref(void) {
    const kn_kernels *best = kn_kernels_get(KN_KERNELS_AUTO);
    if (best->attend_f16 == kn_attend_f16_ref) SKIP("kernel set %s uses the reference attention", best->name);
    CHECK(check_set_all(best) == 0);
}

static void test_avx2_equals_ref(void) { kt_check_named_set("avx2", "attention", check_set_all); }
static void test_avx2vnni_equals_ref(void) { kt_check_named_set("avx2vnni", "attention", check_set_all); }
static void test_avx512_equals_ref(void) { kt_check_named_set("avx512", "attention", check_set_all); }

int main(void) {
    RUN(test_expf);
    RUN(test_ref_vs_double);
    RUN(test_ref_heads);
    RUN(test_best_equals_ref);
    RUN(test_avx2_equals_ref);
    RUN(test_avx2vnni_equals_ref);
    RUN(test_avx512_equals_ref);
    return kt_summary();
}
