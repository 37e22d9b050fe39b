/*
 * test_quant.c - tests of the element types: the traits table, fp16/bf16 conversions, and every block
 * format's dequantizer, quantizer and dot product.
 *
 * Layout correctness is pinned by known-answer tests: blocks built byte by byte, with the floats they
 * must dequantize to computed by hand from the layout documented in quant.h (which follows GGUF/ggml),
 * so a layout mistake cannot pass by round-tripping through kiln's own quantizer. Quantizer quality is
 * pinned by round-trip error bounds on Gaussian data (measured values are printed; bounds leave ~30%
 * margin). Dot products are checked against the float dot of the dequantized rows.
 */
#include "harness.h"

#include "tensor/dtype.h"
#include "tensor/quant.h"

#include <float.h>
#include <stddef.h>
#include <stdint.h>

/* ---- deterministic random numbers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void) {
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Uniform in (0, 1]. */
static double rng_unit(void) { return ((double)(rng_u64() >> 11) + 1.0) * 0x1p-53; }

/* Standard normal (Box-Muller). */
static float rng_gauss(void) {
    double u = rng_unit(), v = rng_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void fill_gauss(float *x, int64_t n, float sigma) {
    for (int64_t i = 0; i < n; i++) x[i] = sigma * rng_gauss();
}

/* ---- helpers ---- */

static const kn_dtype weight_types[] = {KN_F32,  KN_F16,  KN_BF16, KN_Q4_0, KN_Q4_1, KN_Q5_0,   KN_Q5_1,   KN_Q8_0,
                                        KN_Q4_K, KN_Q5_K, KN_Q6_K, KN_Q2_K, KN_Q3_K, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4};
static const kn_dtype all_types[] = {KN_F32,  KN_F16,  KN_BF16, KN_Q4_0,   KN_Q4_1,   KN_Q5_0,
                                     KN_Q5_1, KN_Q8_0, KN_Q8_1, KN_Q4_K,   KN_Q5_K,   KN_Q6_K,
                                     KN_Q8_K, KN_Q2_K, KN_Q3_K, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4};
#define N_WEIGHT_TYPES (int)(sizeof weight_types / sizeof weight_types[0])
#define N_ALL_TYPES    (int)(sizeof all_types / sizeof all_types[0])

static double rms(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

static double rmse(const float *x, const float *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    return sqrt(s / (double)n);
}

static double dot_d(const float *x, const float *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * y[i];
    return s;
}

#define GUARD 64

/* Quantizes x (n elements) to type t and dequantizes into y. Returns 0, or -1 if the quantizer wrote
 * past its row (GUARD canary bytes after the row). */
static int roundtrip(kn_dtype t, const float *x, float *y, int64_t n) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    size_t bytes = kn_row_bytes(t, n);
    unsigned char *q = malloc(bytes + GUARD);
    if (!q) return -1;
    memset(q + bytes, 0xA5, GUARD);
    tr->from_float(x, q, n);
    y[n] = 12345.0f; /* canary for the dequantizer */
    tr->to_float(q, y, n);
    int bad = y[n] != 12345.0f;
    for (int i = 0; i < GUARD; i++) bad |= q[bytes + i] != 0xA5;
    free(q);
    return bad ? -1 : 0;
}

static int all_finite(const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(y[i])) return 0;
    return 1;
}

/* ---- structs and table ---- */

static void test_struct_sizes(void) {
    static const struct {
        kn_dtype t;
        size_t size;
        int block;
        size_t bytes;
    } want[] = {
        {KN_Q4_0, sizeof(kn_block_q4_0), 32, 18},
        {KN_Q4_1, sizeof(kn_block_q4_1), 32, 20},
        {KN_Q5_0, sizeof(kn_block_q5_0), 32, 22},
        {KN_Q5_1, sizeof(kn_block_q5_1), 32, 24},
        {KN_Q8_0, sizeof(kn_block_q8_0), 32, 34},
        {KN_Q8_1, sizeof(kn_block_q8_1), 32, 36},
        {KN_Q4_K, sizeof(kn_block_q4_k), 256, 144},
        {KN_Q5_K, sizeof(kn_block_q5_k), 256, 176},
        {KN_Q6_K, sizeof(kn_block_q6_k), 256, 210},
        {KN_Q8_K, sizeof(kn_block_q8_k), 256, 292},
        {KN_F32, 4, 1, 4},
        {KN_F16, 2, 1, 2},
        {KN_BF16, 2, 1, 2},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kn_type_traits *tr = kn_type_traits_get(want[i].t);
        CHECKF(tr != NULL, "type %d", want[i].t);
        CHECKF(tr->block_size == want[i].block && tr->block_bytes == want[i].bytes && want[i].size == want[i].bytes,
               "%s: block %d bytes %zu struct %zu", tr->name, tr->block_size, tr->block_bytes, want[i].size);
        CHECK(tr->to_float && tr->from_float);
    }
    /* field offsets as in GGUF files */
    CHECK(offsetof(kn_block_q5_0, qh) == 2 && offsetof(kn_block_q5_0, qs) == 6);
    CHECK(offsetof(kn_block_q5_1, qh) == 4 && offsetof(kn_block_q5_1, qs) == 8);
    CHECK(offsetof(kn_block_q8_1, s) == 2 && offsetof(kn_block_q8_1, qs) == 4);
    CHECK(offsetof(kn_block_q4_k, scales) == 4 && offsetof(kn_block_q4_k, qs) == 16);
    CHECK(offsetof(kn_block_q5_k, qh) == 16 && offsetof(kn_block_q5_k, qs) == 48);
    CHECK(offsetof(kn_block_q6_k, qh) == 128 && offsetof(kn_block_q6_k, scales) == 192 &&
          offsetof(kn_block_q6_k, d) == 208);
    CHECK(offsetof(kn_block_q8_k, qs) == 4 && offsetof(kn_block_q8_k, bsums) == 260);
}

static void test_traits_table(void) {
    static const int32_t bad[] = {-1, -2, INT32_MIN, 4, 5, 16, 24, 31, 34, KN_DTYPE_COUNT, 1000, INT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECKF(kn_type_traits_get(bad[i]) == NULL, "id %d", bad[i]);
        CHECKF(!kn_dtype_is_weight(bad[i]), "id %d", bad[i]);
        const char *nm = kn_dtype_name(bad[i]);
        CHECKF(nm != NULL && nm[0], "id %d", bad[i]);
    }
    CHECK(strcmp(kn_dtype_name(10), "Q2_K") == 0 && strcmp(kn_dtype_name(39), "MXFP4") == 0);
    CHECK(strcmp(kn_dtype_name(16), "IQ2_XXS") == 0 && strcmp(kn_dtype_name(34), "TQ1_0") == 0);
    CHECK(strcmp(kn_dtype_name(-7), "type -7") == 0);
    CHECK(strcmp(kn_dtype_name(4), "type 4") == 0);
    CHECK(strcmp(kn_dtype_name(INT32_MIN), "type -2147483648") == 0);
    CHECK(strcmp(kn_dtype_name(KN_Q4_K), "Q4_K") == 0 && strcmp(kn_dtype_name(KN_BF16), "BF16") == 0);

    static const struct {
        kn_dtype t, act;
        bool weight;
    } want[] = {{KN_F32, KN_F32, true},     {KN_F16, KN_F32, true},     {KN_BF16, KN_F32, true},
                {KN_Q4_0, KN_Q8_0, true},   {KN_Q4_1, KN_Q8_1, true},   {KN_Q5_0, KN_Q8_0, true},
                {KN_Q5_1, KN_Q8_1, true},   {KN_Q8_0, KN_Q8_0, true},   {KN_Q8_1, KN_Q8_1, false},
                {KN_Q4_K, KN_Q8_K, true},   {KN_Q5_K, KN_Q8_K, true},   {KN_Q6_K, KN_Q8_K, true},
                {KN_Q8_K, KN_Q8_K, false},  {KN_Q2_K, KN_Q8_K, true},   {KN_Q3_K, KN_Q8_K, true},
                {KN_IQ4_NL, KN_Q8_0, true}, {KN_IQ4_XS, KN_Q8_K, true}, {KN_MXFP4, KN_Q8_0, true}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kn_type_traits *tr = kn_type_traits_get(want[i].t);
        CHECK(tr != NULL);
        CHECKF(tr->vec_dot_type == want[i].act, "%s", tr->name);
        CHECKF(kn_dtype_is_weight(want[i].t) == want[i].weight, "%s", tr->name);
        CHECKF((tr->vec_dot != NULL) == want[i].weight, "%s", tr->name);
        CHECKF(strcmp(kn_dtype_name(want[i].t), tr->name) == 0, "%s", tr->name);
    }

    CHECK(kn_row_bytes(KN_F32, 3) == 12);
    CHECK(kn_row_bytes(KN_BF16, 7) == 14);
    CHECK(kn_row_bytes(KN_Q4_0, 64) == 36);
    CHECK(kn_row_bytes(KN_Q4_0, 33) == 0);
    CHECK(kn_row_bytes(KN_Q4_K, 4096) == 16 * 144);
    CHECK(kn_row_bytes(KN_Q6_K, 128) == 0);
    CHECK(kn_row_bytes(KN_Q8_0, -32) == 0);
    CHECK(kn_row_bytes(KN_Q8_0, 0) == 0);
    CHECK(kn_row_bytes((kn_dtype)16, 256) == 0);
    CHECK(kn_row_bytes(KN_Q2_K, 512) == 168 && kn_row_bytes(KN_Q3_K, 256) == 110 &&
          kn_row_bytes(KN_IQ4_XS, 256) == 136);
    CHECK(kn_row_bytes(KN_IQ4_NL, 64) == 36 && kn_row_bytes(KN_MXFP4, 64) == 34 && kn_row_bytes(KN_MXFP4, 48) == 0);
    CHECK(kn_row_bytes(KN_F32, INT64_MAX) == 0 || sizeof(size_t) > 8); /* overflow is reported as 0 */
}

/* ---- fp16 / bf16 ---- */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_fp16_known(void) {
    /* decode */
    CHECK(kn_fp16_to_fp32(0x3C00) == 1.0f);
    CHECK(kn_fp16_to_fp32(0xC000) == -2.0f);
    CHECK(kn_fp16_to_fp32(0x3555) == 0.333251953125f);
    CHECK(kn_fp16_to_fp32(0x7BFF) == 65504.0f);
    CHECK(kn_fp16_to_fp32(0x0400) == 0x1p-14f);   /* smallest normal */
    CHECK(kn_fp16_to_fp32(0x0001) == 0x1p-24f);   /* smallest subnormal */
    CHECK(kn_fp16_to_fp32(0x03FF) == 0x3FFp-24f); /* largest subnormal */
    CHECK(kn_fp16_to_fp32(0x8001) == -0x1p-24f);
    CHECK(fbits(kn_fp16_to_fp32(0x0000)) == 0x00000000u);
    CHECK(fbits(kn_fp16_to_fp32(0x8000)) == 0x80000000u); /* -0 */
    CHECK(kn_fp16_to_fp32(0x7C00) == INFINITY);
    CHECK(kn_fp16_to_fp32(0xFC00) == -INFINITY);
    CHECK(isnan(kn_fp16_to_fp32(0x7E00)) && isnan(kn_fp16_to_fp32(0x7C01)) && isnan(kn_fp16_to_fp32(0xFE00)));

    /* encode, including round half to even */
    CHECK(kn_fp32_to_fp16(1.0f) == 0x3C00);
    CHECK(kn_fp32_to_fp16(-2.0f) == 0xC000);
    CHECK(kn_fp32_to_fp16(0.0f) == 0x0000);
    CHECK(kn_fp32_to_fp16(-0.0f) == 0x8000);
    CHECK(kn_fp32_to_fp16(1.0f + 0x1p-11f) == 0x3C00);            /* tie, even is 1.0 */
    CHECK(kn_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01); /* just above the tie */
    CHECK(kn_fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3C02);        /* tie, even is up */
    CHECK(kn_fp32_to_fp16(65504.0f) == 0x7BFF);
    CHECK(kn_fp32_to_fp16(65519.0f) == 0x7BFF);
    CHECK(kn_fp32_to_fp16(65520.0f) == 0x7C00); /* tie between 65504 and 2^16: even is inf */
    CHECK(kn_fp32_to_fp16(-1e10f) == 0xFC00);
    CHECK(kn_fp32_to_fp16(INFINITY) == 0x7C00 && kn_fp32_to_fp16(-INFINITY) == 0xFC00);
    CHECK(kn_fp32_to_fp16(0x1p-14f) == 0x0400);
    CHECK(kn_fp32_to_fp16(0x1p-24f) == 0x0001);
    CHECK(kn_fp32_to_fp16(0x1p-25f) == 0x0000); /* tie, even is 0 */
    CHECK(kn_fp32_to_fp16(-0x1p-25f) == 0x8000);
    CHECK(kn_fp32_to_fp16(0x1.0002p-25f) == 0x0001);       /* just above the tie */
    CHECK(kn_fp32_to_fp16(3 * 0x1p-25f) == 0x0002);        /* tie 1.5 -> 2 */
    CHECK(kn_fp32_to_fp16(5 * 0x1p-25f) == 0x0002);        /* tie 2.5 -> 2 */
    CHECK(kn_fp32_to_fp16(0x1p-14f - 0x1p-25f) == 0x0400); /* tie 1023.5 -> 1024: smallest normal */
    CHECK(kn_fp32_to_fp16(1e-10f) == 0x0000);
    CHECK(kn_fp32_to_fp16(FLT_MIN) == 0x0000);
    CHECK(kn_fp32_to_fp16(0x1p-149f) == 0x0000); /* fp32 subnormal */
    uint16_t nan = kn_fp32_to_fp16(NAN);
    CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x03FF) != 0);
    nan = kn_fp32_to_fp16(bitsf(0x7F800001u)); /* signalling NaN with a low payload stays NaN */
    CHECK((nan & 0x7C00) == 0x7C00 && (nan & 0x0200) != 0);
    CHECK(kn_fp32_to_fp16_sat(1e9f) == 0x7BFF && kn_fp32_to_fp16_sat(-1e9f) == 0xFBFF);
    CHECK(kn_fp32_to_fp16_sat(INFINITY) == 0x7BFF && kn_fp32_to_fp16_sat(1.0f) == 0x3C00);
}

/* Every fp16 value survives fp16 -> fp32 -> fp16; random fp32 values round to the nearest fp16 (ties to
 * even), checked against the neighbours in double precision. */
static void test_fp16_exhaustive(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kn_fp16_to_fp32((uint16_t)h);
        uint16_t back = kn_fp32_to_fp16(f);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF))
            CHECKF(isnan(f) && (back & 0x7C00) == 0x7C00 && (back & 0x3FF), "h=%04x", h);
        else CHECKF(back == h, "h=%04x back=%04x", h, back);
    }
    for (int i = 0; i < 200000; i++) {
        /* random bit patterns biased to the fp16 range: exponents 2^-27 .. 2^17 */
        uint32_t u = (uint32_t)rng_u64();
        uint32_t e = 100 + (uint32_t)(rng_u64() % 45);
        u = (u & 0x807FFFFFu) | (e << 23);
        float f = bitsf(u);
        uint16_t h = kn_fp32_to_fp16(f);
        double v = kn_fp16_to_fp32(h), a = fabs((double)f);
        if (a >= 65520.0) {
            CHECKF((h & 0x7FFF) == 0x7C00, "%a -> %04x", (double)f, h);
            continue;
        }
        CHECKF((h & 0x8000) == ((u >> 16) & 0x8000), "sign of %a", (double)f);
        double err = fabs(v - f);
        uint16_t mag = h & 0x7FFF;
        double up = mag < 0x7BFF ? fabs(kn_fp16_to_fp32((uint16_t)(mag + 1))) : 65536.0;
        double dn = mag > 0 ? fabs(kn_fp16_to_fp32((uint16_t)(mag - 1))) : -fabs(kn_fp16_to_fp32(1));
        CHECKF(err <= fabs(up - a) && err <= fabs(a - dn), "%a -> %04x not nearest", (double)f, h);
        if (err == fabs(up - a) || err == fabs(a - dn)) CHECKF((h & 1) == 0, "%a tie -> odd %04x", (double)f, h);
    }
}

static void test_bf16(void) {
    CHECK(kn_bf16_to_fp32(0x3F80) == 1.0f);
    CHECK(kn_bf16_to_fp32(0x4049) == 3.140625f);
    CHECK(kn_bf16_to_fp32(0xC000) == -2.0f);
    CHECK(kn_bf16_to_fp32(0x7F7F) == 0x1.FEp127f); /* max */
    CHECK(kn_bf16_to_fp32(0x0001) == 0x1p-133f);   /* smallest subnormal */
    CHECK(fbits(kn_bf16_to_fp32(0x8000)) == 0x80000000u);
    CHECK(kn_bf16_to_fp32(0x7F80) == INFINITY && kn_bf16_to_fp32(0xFF80) == -INFINITY);
    CHECK(isnan(kn_bf16_to_fp32(0x7FC0)) && isnan(kn_bf16_to_fp32(0x7F81)));

    CHECK(kn_fp32_to_bf16(1.0f) == 0x3F80);
    CHECK(kn_fp32_to_bf16(-0.0f) == 0x8000);
    CHECK(kn_fp32_to_bf16(3.14159265f) == 0x4049);
    CHECK(kn_fp32_to_bf16(1.0f + 0x1p-8f) == 0x3F80);            /* tie, even is down */
    CHECK(kn_fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);        /* tie, even is up */
    CHECK(kn_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81); /* above the tie */
    CHECK(kn_fp32_to_bf16(FLT_MAX) == 0x7F80);                   /* rounds past the largest: inf */
    CHECK(kn_fp32_to_bf16(0x1.FEp127f) == 0x7F7F);
    CHECK(kn_fp32_to_bf16(INFINITY) == 0x7F80 && kn_fp32_to_bf16(-INFINITY) == 0xFF80);
    CHECK(kn_fp32_to_bf16(0x1p-133f) == 0x0001);
    CHECK(kn_fp32_to_bf16(0x1p-134f) == 0x0000);          /* tie, even is 0 */
    CHECK(kn_fp32_to_bf16(bitsf(0x7F800001u)) != 0x7F80); /* NaN with a low payload stays NaN */
    CHECK(isnan(kn_bf16_to_fp32(kn_fp32_to_bf16(bitsf(0x7F800001u)))));
    CHECK(isnan(kn_bf16_to_fp32(kn_fp32_to_bf16(NAN))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kn_bf16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        CHECKF(kn_fp32_to_bf16(f) == h, "bf16 %04x", h);
    }
}

/* ---- known answers: hand-built blocks ---- */

/* fp16 bits used below: 0x3000 = 0.125, 0x3400 = 0.25, 0x3800 = 0.5, 0x3C00 = 1, 0x4000 = 2,
 * 0xBC00 = -1. Expected values are exact in fp32, so they are compared with ==. */

static void test_kat_q4_0(void) {
    kn_block_q4_0 b;
    b.d = 0x3800;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    kn_q4_0_to_float(&b, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECKF(y[j] == 0.5f * (float)(j - 8), "y[%d] = %g", j, y[j]);                /* low nibbles */
        CHECKF(y[16 + j] == 0.5f * (float)(7 - j), "y[%d] = %g", 16 + j, y[16 + j]); /* high nibbles */
    }
    CHECK(y[0] == -4.0f && y[15] == 3.5f && y[16] == 3.5f && y[31] == -4.0f);
}

static void test_kat_q4_1(void) {
    kn_block_q4_1 b;
    b.d = 0x3400;
    b.m = 0xBC00;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    kn_q4_1_to_float(&b, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECKF(y[j] == 0.25f * (float)j - 1.0f, "y[%d] = %g", j, y[j]);
        CHECKF(y[16 + j] == 0.25f * (float)(15 - j) - 1.0f, "y[%d] = %g", 16 + j, y[16 + j]);
    }
    CHECK(y[0] == -1.0f && y[15] == 2.75f && y[16] == 2.75f && y[31] == -1.0f);
}

/* qh bytes {0x0F, 0xF0, 0x00, 0xFF}: bit e of the little-endian word is bit 4 of element e. */
static const uint8_t kat_qh5[4] = {0x0F, 0xF0, 0x00, 0xFF};
static const int kat_hb5[32] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1,
                                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};

static void test_kat_q5_0(void) {
    kn_block_q5_0 b;
    b.d = 0x3C00;
    memcpy(b.qh, kat_qh5, 4);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    kn_q5_0_to_float(&b, y, 32);
    for (int e = 0; e < 32; e++) {
        int lo = e < 16 ? e : 31 - e; /* (15 - (e - 16)) for the high nibbles */
        CHECKF(y[e] == (float)(lo + 16 * kat_hb5[e] - 16), "y[%d] = %g", e, y[e]);
    }
    CHECK(y[0] == 0.0f && y[4] == -12.0f && y[15] == 15.0f && y[16] == 15.0f - 16.0f && y[31] == 0.0f);
}

static void test_kat_q5_1(void) {
    kn_block_q5_1 b;
    b.d = 0x3800;
    b.m = 0x4000;
    memcpy(b.qh, kat_qh5, 4);
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    kn_q5_1_to_float(&b, y, 32);
    for (int e = 0; e < 32; e++) {
        int lo = e < 16 ? e : 31 - e;
        CHECKF(y[e] == 0.5f * (float)(lo + 16 * kat_hb5[e]) + 2.0f, "y[%d] = %g", e, y[e]);
    }
    CHECK(y[0] == 10.0f && y[4] == 4.0f && y[31] == 10.0f && y[17] == 9.0f);
}

static void test_kat_q8_0_q8_1(void) {
    kn_block_q8_0 a;
    a.d = 0x3000;
    for (int e = 0; e < 32; e++) a.qs[e] = (int8_t)(e * 8 - 128);
    kn_block_q8_1 b;
    b.d = 0x3800;
    b.s = 0x4000;
    for (int e = 0; e < 32; e++) b.qs[e] = (int8_t)(e - 16);
    float y[32], z[32];
    kn_q8_0_to_float(&a, y, 32);
    kn_q8_1_to_float(&b, z, 32);
    for (int e = 0; e < 32; e++) {
        CHECKF(y[e] == 0.125f * (float)(e * 8 - 128), "q8_0 y[%d] = %g", e, y[e]);
        CHECKF(z[e] == 0.5f * (float)(e - 16), "q8_1 y[%d] = %g", e, z[e]);
    }
    CHECK(y[0] == -16.0f && y[31] == 15.0f && z[0] == -8.0f);
}

/* Q4_K / Q5_K scales: sc = {1,2,3,4,33,34,35,63}, m = {5,6,7,8,17,48,0,63}, packed by hand:
 *   bytes 0-3: sc[0..3] | (sc[4..7] >> 4) << 6   = 0x81 0x82 0x83 0xC4
 *   bytes 4-7: m[0..3]  | (m[4..7] >> 4) << 6    = 0x45 0xC6 0x07 0xC8
 *   bytes 8-11: (sc[4..7] & 15) | (m[4..7] & 15) << 4 = 0x11 0x02 0x03 0xFF */
static const uint8_t kat_kscales[12] = {0x81, 0x82, 0x83, 0xC4, 0x45, 0xC6, 0x07, 0xC8, 0x11, 0x02, 0x03, 0xFF};
static const uint8_t kat_sc[8] = {1, 2, 3, 4, 33, 34, 35, 63};
static const uint8_t kat_m[8] = {5, 6, 7, 8, 17, 48, 0, 63};

static void test_kat_k_scales(void) {
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kn_k_scale_min(j, kat_kscales, &sc, &m);
        CHECKF(sc == kat_sc[j] && m == kat_m[j], "j=%d sc=%d m=%d", j, sc, m);
    }
    uint8_t packed[12];
    kn_k_pack_scale_min(kat_sc, kat_m, packed);
    CHECK(memcmp(packed, kat_kscales, 12) == 0);
}

static void test_kat_q4_k(void) {
    kn_block_q4_k b;
    b.d = 0x3800;    /* 0.5 */
    b.dmin = 0x3400; /* 0.25 */
    memcpy(b.scales, kat_kscales, 12);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)i;
    float y[256];
    kn_q4_k_to_float(&b, y, 256);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            /* chunk c: low nibbles of qs[32c + l] (= l & 15) are sub-block 2c, high nibbles
             * (= (32c + l) >> 4 = 2c + l/16) are sub-block 2c + 1 */
            float lo = 0.5f * kat_sc[2 * c] * (float)(l & 15) - 0.25f * kat_m[2 * c];
            float hi = 0.5f * kat_sc[2 * c + 1] * (float)(2 * c + l / 16) - 0.25f * kat_m[2 * c + 1];
            CHECKF(y[64 * c + l] == lo, "y[%d] = %g want %g", 64 * c + l, y[64 * c + l], lo);
            CHECKF(y[64 * c + 32 + l] == hi, "y[%d] = %g want %g", 64 * c + 32 + l, y[64 * c + 32 + l], hi);
        }
    }
    CHECK(y[0] == -1.25f && y[100] == 2.0f && y[255] == 204.75f && y[200] == 0.5f * 35 * 8 - 0.0f);
}

static void test_kat_q5_k(void) {
    kn_block_q5_k b;
    b.d = 0x3800;
    b.dmin = 0x3400;
    memcpy(b.scales, kat_kscales, 12);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)i;
    /* qh[l] = 0x55 (bits 0,2,4,6: the low-nibble sub-blocks 0,2,4,6) for l < 16, 0xAA (odd sub-blocks)
     * for l >= 16 */
    for (int l = 0; l < 32; l++) b.qh[l] = l < 16 ? 0x55 : 0xAA;
    float y[256];
    kn_q5_k_to_float(&b, y, 256);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int hb_lo = l < 16, hb_hi = l >= 16;
            float lo = 0.5f * kat_sc[2 * c] * (float)((l & 15) + 16 * hb_lo) - 0.25f * kat_m[2 * c];
            float hi = 0.5f * kat_sc[2 * c + 1] * (float)(2 * c + l / 16 + 16 * hb_hi) - 0.25f * kat_m[2 * c + 1];
            CHECKF(y[64 * c + l] == lo, "y[%d] = %g want %g", 64 * c + l, y[64 * c + l], lo);
            CHECKF(y[64 * c + 32 + l] == hi, "y[%d] = %g want %g", 64 * c + 32 + l, y[64 * c + 32 + l], hi);
        }
    }
    /* y[0]: sc 1, m 5, q = 0 + 16 -> 8 - 1.25; y[255]: sc 63, m 63, q = 7 + 16 -> 0.5*63*23 - 15.75 */
    CHECK(y[0] == 6.75f && y[255] == 708.75f && y[16] == -1.25f + 0.5f * 0.0f);
}

static void test_kat_q6_k(void) {
    kn_block_q6_k b;
    for (int i = 0; i < 128; i++) b.ql[i] = (uint8_t)i;
    /* qh[32h + l]: h = 0: 0xE4 (2-bit fields 0,1,2,3 for k = 0..3) for l < 16, 0x1B (3,2,1,0) for l >= 16;
     *             h = 1: 0x00 for l < 16, 0xFF for l >= 16 */
    static const uint8_t qhv[2][2] = {{0xE4, 0x1B}, {0x00, 0xFF}};
    static const int hbits[2][2][4] = {{{0, 1, 2, 3}, {3, 2, 1, 0}}, {{0, 0, 0, 0}, {3, 3, 3, 3}}};
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) b.qh[32 * h + l] = qhv[h][l >= 16];
    for (int j = 0; j < 16; j++) b.scales[j] = (int8_t)(j - 8);
    b.d = 0x3800;
    float y[256];
    kn_q6_k_to_float(&b, y, 256);
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                int e = 128 * h + 32 * k + l;
                int byte = 64 * h + 32 * (k & 1) + l; /* = ql[byte] */
                int lo = k < 2 ? (byte & 15) : (byte >> 4);
                int q = lo | (hbits[h][l >= 16][k] << 4);
                float want = 0.5f * (float)(e / 16 - 8) * (float)(q - 32);
                CHECKF(y[e] == want, "y[%d] = %g want %g", e, y[e], want);
            }
        }
    }
    /* y[0]: q = 0, sc -8 -> 0.5*-8*-32 = 128; y[255]: ql[127] >> 4 = 7, hi 3 -> q 55, sc 7 -> 80.5;
     * y[80] (h0 k2 l16): ql[16] >> 4 = 1, hi 1 -> q 17, sc -3 -> 22.5 */
    CHECK(y[0] == 128.0f && y[255] == 80.5f && y[80] == 22.5f);
}

static void test_kat_q8_k(void) {
    kn_block_q8_k b;
    b.d = 0.5f;
    for (int e = 0; e < 256; e++) b.qs[e] = (int8_t)(e - 128);
    memset(b.bsums, 0, sizeof b.bsums);
    float y[256];
    kn_q8_k_to_float(&b, y, 256);
    for (int e = 0; e < 256; e++) CHECKF(y[e] == 0.5f * (float)(e - 128), "y[%d] = %g", e, y[e]);
}

/* A hand-built dot product: Q4_0 block of the KAT above (values 0.5*(j-8), 0.5*(7-j), j = 0..15) against
 * a Q8_0 block of all-ones quants with d = 2: 2 * 0.5 * (sum_j (j-8) + sum_j (7-j)) = (-8) + (-8) = -16.
 * Against quants = 1 for the first half only: 2 * 0.5 * sum_j (j - 8) = -8. */
static void test_kat_vec_dot(void) {
    kn_block_q4_0 w;
    w.d = 0x3800;
    for (int j = 0; j < 16; j++) w.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    kn_block_q8_0 x;
    x.d = 0x4000;
    for (int e = 0; e < 32; e++) x.qs[e] = 1;
    CHECK(kn_q4_0_vec_dot_q8_0(32, &w, &x) == -16.0f);
    for (int e = 16; e < 32; e++) x.qs[e] = 0;
    CHECK(kn_q4_0_vec_dot_q8_0(32, &w, &x) == -8.0f);
    /* Q6_K block with all quants 33 (value +1 * d * sc) and sc = 1, d = 1, against Q8_K quants all 2
     * with d = 0.25: 256 * 1 * 2 * 0.25 = 128 (bsums = 32 each) */
    kn_block_q6_k q6;
    memset(&q6, 0, sizeof q6);
    for (int i = 0; i < 128; i++) q6.ql[i] = 0x11; /* low 4 bits 1 for every element */
    for (int i = 0; i < 64; i++) q6.qh[i] = 0xAA;  /* 2-bit high part 2 for every element: q = 33 */
    for (int j = 0; j < 16; j++) q6.scales[j] = 1;
    q6.d = 0x3C00;
    kn_block_q8_k a;
    a.d = 0.25f;
    for (int e = 0; e < 256; e++) a.qs[e] = 2;
    for (int j = 0; j < 16; j++) a.bsums[j] = 32;
    CHECK(kn_q6_k_vec_dot_q8_k(256, &q6, &a) == 128.0f);
}

/* ---- quantizer quality ---- */

/* Relative RMSE bound (rmse / rms(x)) on N(0,1) data, per type: the value measured with this file's
 * data (printed by test_roundtrip_rmse) plus ~30%. */
static double rmse_bound(kn_dtype t) {
    switch (t) {
        case KN_F32: return 0.0;
        case KN_F16: return 2.8e-4;   /* measured 2.1e-4 */
        case KN_BF16: return 2.2e-3;  /* measured 1.65e-3 */
        case KN_Q4_0: return 0.113;   /* measured 0.0867 */
        case KN_Q4_1: return 0.102;   /* measured 0.0784 */
        case KN_Q5_0: return 0.056;   /* measured 0.0432 */
        case KN_Q5_1: return 0.049;   /* measured 0.0379 */
        case KN_Q8_0: return 0.007;   /* measured 0.0054 */
        case KN_Q8_1: return 0.007;   /* measured 0.0054 */
        case KN_Q4_K: return 0.092;   /* measured 0.0706 */
        case KN_Q5_K: return 0.045;   /* measured 0.0349 */
        case KN_Q6_K: return 0.022;   /* measured 0.0171 */
        case KN_Q8_K: return 0.0093;  /* measured 0.0072 (one scale per 256: larger than Q8_0's) */
        case KN_Q2_K: return 0.35;    /* measured 0.268 */
        case KN_Q3_K: return 0.19;    /* measured 0.144 */
        case KN_IQ4_NL: return 0.096; /* measured 0.0739 */
        case KN_IQ4_XS: return 0.097; /* measured 0.0747 */
        case KN_MXFP4: return 0.144;  /* measured 0.111 (power-of-two scales) */
        default: return 0.0;
    }
}

static void test_roundtrip_rmse(void) {
    const int64_t n = 256 * 128;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)(n + 1));
    CHECK(x && y);
    fill_gauss(x, n, 1.0f);
    double r = rms(x, n), rel[N_ALL_TYPES];
    int rc[N_ALL_TYPES];
    for (int i = 0; i < N_ALL_TYPES; i++) {
        rc[i] = roundtrip(all_types[i], x, y, n);
        rel[i] = rmse(x, y, n) / r;
        printf("  %-5s relative RMSE %.5f (bound %.4f)\n", kn_dtype_name(all_types[i]), rel[i],
               rmse_bound(all_types[i]));
    }
    free(x);
    free(y);
    for (int i = 0; i < N_ALL_TYPES; i++) {
        CHECKF(rc[i] == 0, "%s wrote outside its row", kn_dtype_name(all_types[i]));
        CHECKF(rel[i] <= rmse_bound(all_types[i]), "%s: %g", kn_dtype_name(all_types[i]), rel[i]);
    }
}

/* Sizes of k = 1..9 blocks: every element is round-tripped (no tail dropped, nothing written past the
 * row), and quantizing one block at a time gives the same bytes as the whole row. */
static void test_odd_sizes(void) {
    for (int i = 0; i < N_ALL_TYPES; i++) {
        kn_dtype t = all_types[i];
        const kn_type_traits *tr = kn_type_traits_get(t);
        int bs = tr->block_size == 1 ? 32 : tr->block_size;
        for (int k = 1; k <= 9; k++) {
            int64_t n = (int64_t)bs * k + (tr->block_size == 1 ? k : 0); /* float types: odd lengths too */
            float x[256 * 9 + 16], y[256 * 9 + 17];
            fill_gauss(x, n, 1.0f);
            CHECKF(roundtrip(t, x, y, n) == 0, "%s n=%lld overran", tr->name, (long long)n);
            double rel = rmse(x, y, n) / rms(x, n);
            CHECKF(rel <= 1.6 * rmse_bound(t) + 1e-7, "%s n=%lld rel %g", tr->name, (long long)n, rel);
            size_t bytes = kn_row_bytes(t, n);
            unsigned char *whole = malloc(bytes), *parts = malloc(bytes);
            CHECK(whole && parts);
            tr->from_float(x, whole, n);
            for (int64_t b = 0; b < n / tr->block_size; b++)
                tr->from_float(x + b * tr->block_size, parts + b * tr->block_bytes, tr->block_size);
            int same = memcmp(whole, parts, bytes) == 0;
            free(whole);
            free(parts);
            CHECKF(same, "%s n=%lld: blockwise quantization differs", tr->name, (long long)n);
        }
    }
}

/* ---- dot products ---- */

static void test_vec_dot(void) {
    for (int i = 0; i < N_WEIGHT_TYPES; i++) {
        kn_dtype t = weight_types[i];
        const kn_type_traits *tw = kn_type_traits_get(t);
        const kn_type_traits *ta = kn_type_traits_get(tw->vec_dot_type);
        CHECK(tw->vec_dot && ta);
        int bs = tw->block_size > ta->block_size ? tw->block_size : ta->block_size;
        if (bs == 1) bs = 32;
        double worst_tight = 0, worst_loose = 0;
        for (int k = 1; k <= 9; k++) {
            int64_t n = (int64_t)bs * k;
            float w[2304], x[2304], wd[2305], xd[2305];
            fill_gauss(w, n, 1.0f);
            fill_gauss(x, n, 0.5f);
            if (k == 5)
                for (int64_t j = 0; j < n; j++) x[j] += 0.7f; /* activations with a mean: exercises mins / s */
            unsigned char wq[2304 * 4], xq[2304 * 4];
            tw->from_float(w, wq, n);
            ta->from_float(x, xq, n);
            tw->to_float(wq, wd, n);
            ta->to_float(xq, xd, n);
            double got = tw->vec_dot(n, wq, xq);
            double scale = sqrt(dot_d(wd, wd, n) * dot_d(x, x, n));
            double tight = fabs(got - dot_d(wd, xd, n)) / scale; /* vs both rows dequantized */
            double loose = fabs(got - dot_d(wd, x, n)) / scale;  /* vs original activations */
            if (tight > worst_tight) worst_tight = tight;
            if (loose > worst_loose) worst_loose = loose;
            /* Q8_1's s is fp16, so m * s carries a 2^-11 relative rounding of one term per block */
            double tight_tol = tw->vec_dot_type == KN_Q8_1 ? 2e-3 : 2e-5;
            CHECKF(tight <= tight_tol, "%s n=%lld: %g vs dequantized %g (rel %g)", tw->name, (long long)n, got,
                   dot_d(wd, xd, n), tight);
            CHECKF(loose <= 0.01, "%s n=%lld: %g vs float %g (rel %g)", tw->name, (long long)n, got, dot_d(wd, x, n),
                   loose);
        }
        printf("  %-5s vec_dot worst rel error: %.2e vs dequantized rows, %.2e vs f32 activations\n", tw->name,
               worst_tight, worst_loose);
    }
}

/* Q8_K's bsums are the sums of each 16 quants; Q8_1's s is d * sum(qs). */
static void test_activation_sums(void) {
    float x[512];
    fill_gauss(x, 512, 2.0f);
    kn_block_q8_k k[2];
    kn_q8_k_from_float(x, k, 512);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += k[b].qs[16 * j + l];
            CHECKF(k[b].bsums[j] == s, "block %d bsums[%d] %d != %d", b, j, k[b].bsums[j], s);
        }
    kn_block_q8_1 q[16];
    kn_q8_1_from_float(x, q, 512);
    for (int b = 0; b < 16; b++) {
        int s = 0;
        for (int l = 0; l < 32; l++) s += q[b].qs[l];
        double want = (double)kn_fp16_to_fp32(q[b].d) * s;
        CHECKF(fabs(kn_fp16_to_fp32(q[b].s) - want) <= fabs(want) * 0x1p-11 + 1e-7, "block %d s", b);
    }
}

/* ---- edge inputs ---- */

static void test_zero_rows(void) {
    float x[512] = {0}, y[513], ones[512];
    for (int i = 0; i < 512; i++) ones[i] = 1.0f;
    for (int i = 0; i < N_ALL_TYPES; i++) {
        kn_dtype t = all_types[i];
        const kn_type_traits *tr = kn_type_traits_get(t);
        CHECK(roundtrip(t, x, y, 512) == 0);
        for (int j = 0; j < 512; j++) CHECKF(y[j] == 0.0f, "%s y[%d] = %g", tr->name, j, y[j]);
        if (tr->vec_dot) {
            const kn_type_traits *ta = kn_type_traits_get(tr->vec_dot_type);
            unsigned char wq[512 * 4], xq[512 * 4];
            tr->from_float(x, wq, 512);
            ta->from_float(ones, xq, 512);
            CHECKF(tr->vec_dot(512, wq, xq) == 0.0f, "%s zero weights", tr->name);
            tr->from_float(ones, wq, 512);
            ta->from_float(x, xq, 512);
            CHECKF(tr->vec_dot(512, wq, xq) == 0.0f, "%s zero activations", tr->name);
        }
    }
}

static void test_constant_rows(void) {
    /* the last three put the block scales among fp16 subnormals, where one step of 2^-24 is a large
     * relative change of the scale: a looser bound there */
    static const float values[] = {1.0f, -1.0f, 0.37f, -123.5f, 3e4f, 1e-3f, -1e-3f, 1e-5f};
    float x[512], y[513];
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
        for (int j = 0; j < 512; j++) x[j] = values[v];
        for (int i = 0; i < N_ALL_TYPES; i++) {
            kn_dtype t = all_types[i];
            CHECK(roundtrip(t, x, y, 512) == 0);
            /* fp16-stored scales bound the error to about 2^-11 relative; bf16 to 2^-8. Measured worst:
             * 3.6e-4 (Q4_K), bf16 2.3e-3; subnormal scales 1.7e-2 (Q5_0 at 1e-5) */
            double tol = (fabsf(values[v]) < 0.01f ? 2.5e-2 : t == KN_BF16 ? 4e-3 : 2e-3) * fabs(values[v]);
            /* MXFP4's power-of-two scale and levels 0, 1, 2, 3, 4, 6, 8, 12: within 1/5 (between 8 and 12) */
            if (t == KN_MXFP4) tol = fabs(values[v]) / 5.0;
            for (int j = 0; j < 512; j++)
                CHECKF(fabs(y[j] - values[v]) <= tol, "%s const %g: y[%d] = %g", kn_dtype_name(t), values[v], j, y[j]);
        }
    }
}

/* Magnitudes: relative error is scale-free across the range the fp16 scales cover; far outside it
 * (and for inf / NaN input) the quantizers stay defined and their outputs finite. */
static void test_magnitudes(void) {
    static const float sigmas[] = {1e-2f, 1e4f};
    const int64_t n = 256 * 8;
    float x[256 * 8], y[256 * 8 + 1];
    for (size_t s = 0; s < sizeof sigmas / sizeof sigmas[0]; s++) {
        fill_gauss(x, n, sigmas[s]);
        for (int i = 0; i < N_ALL_TYPES; i++) {
            kn_dtype t = all_types[i];
            CHECK(roundtrip(t, x, y, n) == 0);
            double rel = rmse(x, y, n) / rms(x, n);
            CHECKF(rel <= 1.6 * rmse_bound(t) + 1e-7, "%s sigma %g: rel %g", kn_dtype_name(t), sigmas[s], rel);
        }
    }
    static const float extreme[] = {1e-30f, 1e-6f, 1e30f, FLT_MAX};
    for (size_t s = 0; s < sizeof extreme / sizeof extreme[0]; s++) {
        fill_gauss(x, n, 1.0f);
        for (int64_t j = 0; j < n; j++) {
            x[j] *= extreme[s];
            if (!isfinite(x[j])) x[j] = x[j] > 0 ? FLT_MAX : -FLT_MAX;
        }
        for (int i = 0; i < N_ALL_TYPES; i++) {
            kn_dtype t = all_types[i];
            CHECK(roundtrip(t, x, y, n) == 0);
            if (t == KN_F16 && extreme[s] > 1e5f) continue;      /* fp16 overflows to inf, correctly */
            if (t == KN_BF16 && extreme[s] == FLT_MAX) continue; /* FLT_MAX rounds to bf16 inf, correctly */
            CHECKF(all_finite(y, n), "%s scale %g: non-finite output", kn_dtype_name(t), extreme[s]);
            double amax = 0;
            for (int64_t j = 0; j < n; j++) amax = fmax(amax, fabs(x[j]));
            for (int64_t j = 0; j < n; j++)
                CHECKF(fabs(y[j]) <= 2.0 * amax + 1e-6, "%s scale %g: |y| too large", kn_dtype_name(t), extreme[s]);
        }
    }
    /* non-finite input: defined behaviour (run under UBSan), finite output for the block formats */
    fill_gauss(x, n, 1.0f);
    x[3] = NAN;
    x[40] = INFINITY;
    x[300] = -INFINITY;
    x[1000] = NAN;
    for (int i = 0; i < N_ALL_TYPES; i++) {
        kn_dtype t = all_types[i];
        const kn_type_traits *tr = kn_type_traits_get(t);
        CHECK(roundtrip(t, x, y, n) == 0);
        if (tr->block_size > 1) CHECKF(all_finite(y, n), "%s: non-finite output from non-finite input", tr->name);
    }
}

int main(void) {
    RUN(test_struct_sizes);
    RUN(test_traits_table);
    RUN(test_fp16_known);
    RUN(test_fp16_exhaustive);
    RUN(test_bf16);
    RUN(test_kat_q4_0);
    RUN(test_kat_q4_1);
    RUN(test_kat_q5_0);
    RUN(test_kat_q5_1);
    RUN(test_kat_q8_0_q8_1);
    RUN(test_kat_k_scales);
    RUN(test_kat_q4_k);
    RUN(test_kat_q5_k);
    RUN(test_kat_q6_k);
    RUN(test_kat_q8_k);
    RUN(test_kat_vec_dot);
    RUN(test_roundtrip_rmse);
    RUN(test_odd_sizes);
    RUN(test_vec_dot);
    RUN(test_activation_sums);
    RUN(test_zero_rows);
    RUN(test_constant_rows);
    RUN(test_magnitudes);
    return kt_summary();
}
