/*
 * test_f16c.c - the row conversions of dtype.h (kn_fp32_to_fp16_row, kn_fp16_to_fp32_row,
 * kn_fp32_to_bf16_row), which use F16C / AVX2 on x86 and NEON on ARM64, against the scalar
 * conversions bit for bit:
 *   - fp16 -> fp32 over all 65536 inputs (NaN comes out quiet with its payload, as IEEE 754 says);
 *   - fp32 -> fp16 and fp32 -> bf16 over every combination of the top 23 bits (sign, exponent and
 *     the 14 mantissa bits every rounding decision and NaN payload depends on) with five patterns of
 *     the low 9 bits (zero, one, the middle, all ones, random), which covers every tie, every
 *     rounding carry, the subnormal and overflow boundaries and NaN; with KILN_TEST_EXHAUSTIVE=1
 *     every one of the 2^32 fp32 inputs instead;
 *   - the KV store of the F16 and BF16 formats (kvq.h) writes the scalar bits, also at an odd
 *     address and for head sizes that leave a scalar tail; the Q8_0 store gives the bytes of its
 *     definition (roundf of x / d), ties and their neighbours included.
 * The summary line of each SIMD check says which path ran; on a CPU (or build) without it the check
 * is skipped with the reason.
 */
#include "harness.h"

#include "tensor/dtype.h"
#include "tensor/kernels.h"
#include "tensor/kvq.h"

#include <stdint.h>

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The SIMD path the row conversions take here (NULL: the scalar loop only). */
static const char *simd_path(bool bf16) {
#if defined(__x86_64__) || defined(__i386__)
    const kn_cpu *c = kn_cpu_features();
    if (bf16) return c->avx2 ? "AVX2" : NULL;
    return c->f16c ? "F16C" : NULL;
#elif defined(__aarch64__)
    (void)bf16;
    return "NEON";
#else
    (void)bf16;
    return NULL;
#endif
}

static bool exhaustive(void) {
    const char *e = getenv("KILN_TEST_EXHAUSTIVE");
    return e && *e && strcmp(e, "0") != 0;
}

static void test_fp16_to_fp32_row(void) {
    static uint16_t h[65536];
    static float f[65536];
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    /* the scalar conversion quiets a NaN, keeping its payload (0x7C01: signalling, payload 1) */
    CHECK(fbits(kn_fp16_to_fp32(0x7C01)) == 0x7FC02000u && fbits(kn_fp16_to_fp32(0xFE00)) == 0xFFC00000u);
    /* odd lengths and offsets too, so that both the vector body and the scalar tail are compared */
    kn_fp16_to_fp32_row(h, f, 65536);
    kn_fp16_to_fp32_row(h + 1, f + 1, 13);
    for (uint32_t i = 0; i < 65536; i++)
        CHECKF(fbits(f[i]) == fbits(kn_fp16_to_fp32((uint16_t)i)), "h=%04x: %08x vs %08x", i, fbits(f[i]),
               fbits(kn_fp16_to_fp32((uint16_t)i)));
    const char *p = simd_path(false);
    if (!p) SKIP("no F16C / NEON here: compared the scalar loop with itself");
    printf("  fp16 -> fp32: %s path, all 65536 inputs\n", p);
}

/* Compares row(x) with scalar(x) over the inputs hi << 9 | lo for every hi < 2^23 and the low
 * patterns (all 512 when exhaustive); returns the first mismatch's input, or 0 (input 0 always agrees,
 * both give +0). */
static uint32_t sweep(void (*row)(const float *, uint16_t *, int64_t), uint16_t (*scalar)(float), uint64_t *count) {
    enum { CHUNK = 4096 };
    static float x[CHUNK];
    static uint16_t y[CHUNK];
    uint32_t lows[512];
    int nlow = 0;
    const bool all = exhaustive();
    if (all) {
        for (uint32_t l = 0; l < 512; l++) lows[nlow++] = l;
    } else {
        lows[0] = 0, lows[1] = 1, lows[2] = 0x100, lows[3] = 0x1FF, lows[4] = 0x0A5;
        nlow = 5;
    }
    uint64_t n = 0, rng = 0x9E3779B97F4A7C15ULL;
    for (int li = 0; li < nlow; li++) {
        for (uint32_t hi0 = 0; hi0 < (1u << 23); hi0 += CHUNK) {
            for (int j = 0; j < CHUNK; j++) {
                uint32_t lo = lows[li];
                if (!all && li == 4) { /* a random low pattern per input */
                    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                    lo = (uint32_t)rng & 0x1FFu;
                }
                x[j] = bitsf((hi0 + (uint32_t)j) << 9 | lo);
            }
            row(x, y, CHUNK);
            for (int j = 0; j < CHUNK; j++)
                if (y[j] != scalar(x[j])) return fbits(x[j]);
            n += CHUNK;
        }
    }
    *count = n;
    return 0;
}

static void test_fp32_to_fp16_row(void) {
    uint64_t n = 0;
    const uint32_t bad = sweep(kn_fp32_to_fp16_row, kn_fp32_to_fp16, &n);
    CHECKF(bad == 0, "fp32 %08x (scalar %04x)", bad, kn_fp32_to_fp16(bitsf(bad)));
    /* a few values through odd lengths (scalar tails) */
    const float v[11] = {1.0f,
                         -0.0f,
                         65520.0f,
                         65519.0f,
                         0x1p-25f,
                         0x1.0002p-25f,
                         3 * 0x1p-25f,
                         bitsf(0x7F800001u),
                         -INFINITY,
                         0x1p-14f - 0x1p-25f,
                         1.0f + 3 * 0x1p-11f};
    uint16_t h[11];
    for (int len = 1; len <= 11; len++) {
        kn_fp32_to_fp16_row(v, h, len);
        for (int i = 0; i < len; i++) CHECKF(h[i] == kn_fp32_to_fp16(v[i]), "len %d, i %d", len, i);
    }
    CHECK(h[2] == 0x7C00 && h[3] == 0x7BFF && h[4] == 0x0000 && h[5] == 0x0001 && h[6] == 0x0002 && h[7] == 0x7E00);
    const char *p = simd_path(false);
    if (!p) SKIP("no F16C / NEON here: compared the scalar loop with itself");
    printf("  fp32 -> fp16: %s path, %llu inputs%s\n", p, (unsigned long long)n, exhaustive() ? " (all)" : "");
}

static void test_fp32_to_bf16_row(void) {
    uint64_t n = 0;
    const uint32_t bad = sweep(kn_fp32_to_bf16_row, kn_fp32_to_bf16, &n);
    CHECKF(bad == 0, "fp32 %08x", bad);
    const char *p = simd_path(true);
    if (!p) SKIP("no AVX2 / NEON here: compared the scalar loop with itself");
    printf("  fp32 -> bf16: %s path, %llu inputs%s\n", p, (unsigned long long)n, exhaustive() ? " (all)" : "");
}

/* The F16 and BF16 KV stores write what the scalar conversions give, at even and odd addresses. */
static void test_kv_store_16(void) {
    static const int hds[] = {1, 7, 8, 64, 100, 129};
    float x[129];
    uint8_t buf[2 * 129 + 2];
    uint64_t s = 12345;
    for (int i = 0; i < 129; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = bitsf((uint32_t)(s >> 32)); /* any bits: NaN, inf, subnormals included */
        if (i % 3 == 0) x[i] = (float)((int64_t)(s >> 40) - (1 << 23)) * 0x1p-20f;
    }
    for (int f = 0; f < 2; f++) {
        const kn_kvt t = f ? KN_KVT_BF16 : KN_KVT_F16;
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            const int hd = hds[hi];
            for (int off = 0; off < 2; off++) {
                memset(buf, 0xEE, sizeof buf);
                kn_kvq_store(t, x, buf + off, hd);
                for (int i = 0; i < hd; i++) {
                    uint16_t got, want = f ? kn_fp32_to_bf16(x[i]) : kn_fp32_to_fp16(x[i]);
                    memcpy(&got, buf + off + 2 * i, 2);
                    CHECKF(got == want, "%s hd %d off %d i %d: %04x vs %04x", f ? "bf16" : "f16", hd, off, i, got,
                           want);
                }
                CHECK(buf[off + 2 * hd] == 0xEE && (off == 0 || buf[0] == 0xEE)); /* nothing outside */
            }
        }
    }
}

/* The Q8_0 KV store against its definition (kvq.h: d = max|x| / 127, q = roundf(x / d), fp16 d), written
 * here with the libm calls: random blocks, and blocks whose codes land exactly on the ties k + 1/2 and
 * one float either side of them. */
static void test_kv_store_q8(void) {
    enum { B = 32 };
    float x[B];
    uint8_t got[2 + B], want[2 + B];
    uint64_t s = 777;
    for (int it = 0; it < 3000; it++) {
        for (int j = 0; j < B; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            const float u = (float)((int64_t)(s >> 33) - (1LL << 30)) * 0x1p-30f; /* [-1, 1) */
            if (it % 3 == 0) x[j] = u * 4.0f;
            else { /* with x[0] = 127, d = 1 exactly: x itself is the code, on or next to a tie */
                const float k = (float)((int)(u * 126.0f)) + (u < 0 ? -0.5f : 0.5f);
                const int side = (int)(s >> 20) % 3;
                x[j] = side == 0 ? k : side == 1 ? nextafterf(k, 0.0f) : nextafterf(k, 2 * k);
            }
        }
        if (it % 3) x[0] = 127.0f;
        if (it == 1) x[1] = 0.5f, x[2] = -0.5f, x[3] = 0x1.fffffep-2f, x[4] = -0x1.fffffep-2f, x[5] = 126.5f;
        float amax = 0;
        for (int j = 0; j < B; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        const uint16_t dh = kn_fp32_to_fp16(d);
        memcpy(want, &dh, 2);
        for (int j = 0; j < B; j++) want[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
        kn_kvq_store(KN_KVT_Q8_0, x, got, B);
        CHECKF(memcmp(got, want, sizeof got) == 0, "block %d", it);
    }
}

int main(void) {
    RUN(test_fp16_to_fp32_row);
    RUN(test_fp32_to_fp16_row);
    RUN(test_fp32_to_bf16_row);
    RUN(test_kv_store_16);
    RUN(test_kv_store_q8);
    return kt_summary();
}
