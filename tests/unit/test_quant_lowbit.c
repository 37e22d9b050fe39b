/*
 * test_quant_lowbit.c - known answers for the block formats Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4.
 *
 * Two kinds of known answers pin each layout (so a layout mistake cannot pass by round-tripping through
 * kiln's own quantizer; the generic round-trip, dot-product and edge-input tests of all formats are in
 * test_quant.c):
 *   - blocks built byte by byte, whose floats are computed in the test from the layout as GGUF defines it
 *     (the element/byte/bit mapping written out here, with a few values worked out by hand);
 *   - one fixed block per format (byte i = (i * 37 + 11) & 255, then its scale fields set) with values
 *     that GGUF's reference dequantizer (ggml, built out of tree) printed for the same bytes, recorded
 *     below as constants. The same out-of-tree check found kiln's dequantizers bit-identical to ggml's on
 *     200 random blocks of each format.
 * Dot products are checked on blocks whose integer sums are known exactly.
 */
#include "harness.h"

#include "base/base.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* ---- GGUF's dequantized values of the fixed blocks ---- */

static void fixed_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((i * 37 + 11) & 255);
}

typedef struct known {
    int idx;
    float v;
} known;

static void check_known(const char *name, const float *y, int n, const known *k, size_t nk, double sum) {
    for (size_t i = 0; i < nk; i++)
        CHECKF(y[k[i].idx] == k[i].v, "%s y[%d] = %.9g, GGUF gives %.9g", name, k[i].idx, y[k[i].idx], k[i].v);
    double s = 0;
    for (int i = 0; i < n; i++) s += y[i];
    CHECKF(s == sum, "%s sum %.9g, GGUF gives %.9g", name, s, sum);
}

static void test_gguf_fixed_blocks(void) {
    uint8_t q[256];
    float y[256];
    const kn_half h05 = kn_fp32_to_fp16(0.5f), h025 = kn_fp32_to_fp16(0.25f);

    fixed_bytes(q, sizeof(kn_block_q2_k));
    memcpy(q + offsetof(kn_block_q2_k, d), &h05, 2);
    memcpy(q + offsetof(kn_block_q2_k, dmin), &h025, 2);
    kn_q2_k_to_float(q, y, 256);
    const known k2[] = {{0, 16.5f},   {1, 0.0f},     {17, -0.75f}, {31, -0.75f},
                        {100, 10.0f}, {129, -0.75f}, {200, 4.0f},  {255, 2.25f}};
    check_known("Q2_K", y, 256, k2, KN_ARRAY_LEN(k2), 1029.5);

    fixed_bytes(q, sizeof(kn_block_q3_k));
    memcpy(q + offsetof(kn_block_q3_k, d), &h05, 2);
    kn_q3_k_to_float(q, y, 256);
    const known k3[] = {{0, 40.5f}, {1, -54.0f}, {17, 64.0f}, {31, 32.0f}, {100, 0.0f}, {200, 12.5f}, {255, 21.0f}};
    check_known("Q3_K", y, 256, k3, KN_ARRAY_LEN(k3), 479.0);
    CHECK(y[129] == 0.0f && signbit(y[129])); /* GGUF gives -0: a negative scale times quant 0 */

    fixed_bytes(q, sizeof(kn_block_iq4_nl));
    memcpy(q, &h05, 2);
    kn_iq4_nl_to_float(q, y, 32);
    const known kn[] = {{0, -17.5f}, {1, 12.5f}, {17, -5.0f}, {31, 0.5f}};
    check_known("IQ4_NL", y, 32, kn, KN_ARRAY_LEN(kn), -128.5);

    fixed_bytes(q, sizeof(kn_block_iq4_xs));
    memcpy(q, &h05, 2);
    kn_iq4_xs_to_float(q, y, 256);
    const known kx[] = {{0, 32.5f},   {1, -0.5f},  {17, 17.5f},   {31, 17.5f},
                        {100, 20.0f}, {129, 4.5f}, {200, 570.0f}, {255, -8.0f}};
    check_known("IQ4_XS", y, 256, kx, KN_ARRAY_LEN(kx), -5502.5);

    fixed_bytes(q, sizeof(kn_block_mxfp4));
    q[0] = 130;
    kn_mxfp4_to_float(q, y, 32);
    const known km[] = {{0, 0.0f}, {1, 24.0f}, {17, 24.0f}, {31, 24.0f}};
    check_known("MXFP4", y, 32, km, KN_ARRAY_LEN(km), 100.0);
}

/* ---- blocks built byte by byte ---- */

static void test_struct_layouts(void) {
    CHECK(sizeof(kn_block_q2_k) == 84 && offsetof(kn_block_q2_k, qs) == 16 && offsetof(kn_block_q2_k, d) == 80 &&
          offsetof(kn_block_q2_k, dmin) == 82);
    CHECK(sizeof(kn_block_q3_k) == 110 && offsetof(kn_block_q3_k, qs) == 32 && offsetof(kn_block_q3_k, scales) == 96 &&
          offsetof(kn_block_q3_k, d) == 108);
    CHECK(sizeof(kn_block_iq4_nl) == 18 && offsetof(kn_block_iq4_nl, qs) == 2);
    CHECK(sizeof(kn_block_iq4_xs) == 136 && offsetof(kn_block_iq4_xs, scales_h) == 2 &&
          offsetof(kn_block_iq4_xs, scales_l) == 4 && offsetof(kn_block_iq4_xs, qs) == 8);
    CHECK(sizeof(kn_block_mxfp4) == 17 && offsetof(kn_block_mxfp4, qs) == 1);
    /* GGUF type ids and names */
    CHECK(KN_Q2_K == 10 && KN_Q3_K == 11 && KN_IQ4_NL == 20 && KN_IQ4_XS == 23 && KN_MXFP4 == 39);
    CHECK(!strcmp(kn_dtype_name(KN_IQ4_NL), "IQ4_NL") && !strcmp(kn_dtype_name(KN_MXFP4), "MXFP4"));
    CHECK(kn_type_traits_get(KN_IQ4_XS)->block_size == 256 && kn_type_traits_get(KN_MXFP4)->block_size == 32);
}

static void test_kat_q2_k(void) {
    kn_block_q2_k b;
    b.d = 0x3800;                                                              /* 0.5 */
    b.dmin = 0x3400;                                                           /* 0.25 */
    for (int j = 0; j < 16; j++) b.scales[j] = (uint8_t)(j | ((15 - j) << 4)); /* sc = j, m = 15 - j */
    for (int i = 0; i < 64; i++) b.qs[i] = (uint8_t)(i * 5 + 3);
    float y[256];
    kn_q2_k_to_float(&b, y, 256);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                /* element 128h + 32k + l: bits 2k, 2k+1 of qs[32h + l]; sub-block (element / 16) */
                int e = 128 * h + 32 * k + l, j = e / 16, q = (b.qs[32 * h + l] >> (2 * k)) & 3;
                float want = 0.5f * (float)j * (float)q - 0.25f * (float)(15 - j);
                CHECKF(y[e] == want, "Q2_K y[%d] = %g want %g", e, y[e], want);
            }
    /* by hand: qs[0] = 3 -> q(0) = 3, q(32) = 0; qs[1] = 8 -> q(1) = 0, q(33) = 2 */
    CHECK(y[0] == 0.5f * 0 * 3 - 0.25f * 15 && y[1] == -3.75f && y[33] == 0.5f * 2 * 2 - 0.25f * 13);
}

static void test_kat_q3_k(void) {
    kn_block_q3_k b;
    static const uint8_t sc_bytes[12] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xE4, 0x1B, 0x00, 0xFF};
    memcpy(b.scales, sc_bytes, 12);
    /* by hand from the packing: sub-block j's 6-bit scale = low 4 bits (scales[j] low nibble for j < 8, the
     * high nibble of scales[j - 8] for j >= 8) | bits 2(j/4).. of scales[8 + j % 4] as bits 4-5 */
    CHECK(kn_q3k_scale(0, b.scales) == 0);   /* 0x0 | (0xE4 & 3) << 4 */
    CHECK(kn_q3k_scale(3, b.scales) == 54);  /* 0x6 | (0xFF & 3) << 4 */
    CHECK(kn_q3k_scale(4, b.scales) == 24);  /* 0x8 | ((0xE4 >> 2) & 3) << 4 */
    CHECK(kn_q3k_scale(8, b.scales) == 33);  /* 0x1 | ((0xE4 >> 4) & 3) << 4 */
    CHECK(kn_q3k_scale(10, b.scales) == 5);  /* 0x5 | ((0x00 >> 4) & 3) << 4 */
    CHECK(kn_q3k_scale(13, b.scales) == 11); /* 0xB | ((0x1B >> 6) & 3) << 4 */
    CHECK(kn_q3k_scale(15, b.scales) == 63); /* 0xF | ((0xFF >> 6) & 3) << 4 */
    uint8_t sc[16], packed[12];
    for (int j = 0; j < 16; j++) sc[j] = (uint8_t)kn_q3k_scale(j, b.scales);
    kn_q3k_pack_scales(sc, packed);
    CHECK(memcmp(packed, sc_bytes, 12) == 0);

    b.d = 0x4000; /* 2 */
    for (int l = 0; l < 32; l++) b.hmask[l] = (uint8_t)(l * 7 + 1);
    for (int i = 0; i < 64; i++) b.qs[i] = (uint8_t)(255 - i * 3);
    float y[256];
    kn_q3_k_to_float(&b, y, 256);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                /* low 2 bits: bits 2k of qs[32h + l]; bit 4h + k of hmask[l] set: as is, clear: minus 4 */
                int e = 128 * h + 32 * k + l, j = e / 16;
                int q = ((b.qs[32 * h + l] >> (2 * k)) & 3) - (((b.hmask[l] >> (4 * h + k)) & 1) ? 0 : 4);
                float want = 2.0f * (float)(sc[j] - 32) * (float)q;
                CHECKF(y[e] == want, "Q3_K y[%d] = %g want %g", e, y[e], want);
            }
    /* by hand: element 0: qs[0] = 255 -> 3, hmask[0] = 1 bit 0 set -> q = 3; scale 0 - 32: 2 * -32 * 3 */
    CHECK(y[0] == -192.0f);
    /* element 255 = 128 + 96 + 31: qs[63] = 66 = 0b01000010, bits 6-7 -> 1; hmask[31] = 218 = 0b11011010,
     * bit 7 set -> q = 1; scale 15 = 63 - 32 = 31 -> 62 */
    CHECK(y[255] == 62.0f);
}

static void test_kat_iq4_nl(void) {
    kn_block_iq4_nl b;
    b.d = 0x3800; /* 0.5 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    kn_iq4_nl_to_float(&b, y, 32);
    for (int e = 0; e < 32; e++) {
        int idx = e < 16 ? e : 15 - (e - 16); /* low nibbles: elements 0..15, high: 16..31 */
        CHECKF(y[e] == 0.5f * (float)kn_iq4nl_values[idx], "IQ4_NL y[%d] = %g", e, y[e]);
    }
    CHECK(y[0] == -63.5f && y[15] == 56.5f && y[16] == 56.5f && y[31] == -63.5f && y[8] == 0.5f);
}

static void test_kat_iq4_xs(void) {
    kn_block_iq4_xs b;
    b.d = 0x3400; /* 0.25 */
    static const uint8_t sl[4] = {0x10, 0x32, 0x54, 0x76};
    memcpy(b.scales_l, sl, 4);
    b.scales_h = 0xE41B;
    /* by hand: ls[j] = nibble (j & 1) of scales_l[j / 2] | bits 2j, 2j+1 of scales_h << 4 */
    static const int ls[8] = {48, 33, 18, 3, 4, 21, 38, 55};
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 16; l++) b.qs[16 * j + l] = (uint8_t)(l | ((15 - l) << 4));
    float y[256];
    kn_iq4_xs_to_float(&b, y, 256);
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) {
            int idx = l < 16 ? l : 15 - (l - 16);
            float want = 0.25f * (float)(ls[j] - 32) * (float)kn_iq4nl_values[idx];
            CHECKF(y[32 * j + l] == want, "IQ4_XS y[%d] = %g want %g", 32 * j + l, y[32 * j + l], want);
        }
    CHECK(y[0] == -508.0f && y[47] == 28.25f && y[240] == 649.75f && y[64] == 444.5f);
}

static void test_kat_mxfp4(void) {
    /* E8M0 halves: 2^(e - 128), subnormal for e = 0, 1 */
    CHECK(kn_e8m0_half(0) == 0x1p-128f && kn_e8m0_half(1) == 0x1p-127f && kn_e8m0_half(2) == 0x1p-126f);
    CHECK(kn_e8m0_half(127) == 0.5f && kn_e8m0_half(128) == 1.0f && kn_e8m0_half(254) == 0x1p126f &&
          kn_e8m0_half(255) == 0x1p127f);
    kn_block_mxfp4 b;
    b.e = 127; /* half-scale 0.5: the levels are the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    kn_mxfp4_to_float(&b, y, 32);
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int e = 0; e < 32; e++) {
        int idx = e < 16 ? e : 15 - (e - 16);
        CHECKF(y[e] == e2m1[idx], "MXFP4 y[%d] = %g want %g", e, y[e], e2m1[idx]);
    }
    CHECK(y[7] == 6.0f && y[15] == -6.0f && y[16] == -6.0f && y[23] == 0.0f);
}

/* ---- dot products with exactly known sums ---- */

static void test_kat_vec_dot(void) {
    kn_block_q8_k a[2];
    for (int i = 0; i < 2; i++) {
        a[i].d = 1.0f;
        memset(a[i].qs, 1, sizeof a[i].qs);
        for (int j = 0; j < 16; j++) a[i].bsums[j] = 16;
    }
    /* Q2_K: q = 3, sc = 1, m = 2, d = dmin = 1: each element 3 - 2 = 1, times 1 -> 256 per block */
    kn_block_q2_k q2[2];
    for (int i = 0; i < 2; i++) {
        q2[i].d = q2[i].dmin = 0x3C00;
        memset(q2[i].scales, 0x21, 16);
        memset(q2[i].qs, 0xFF, 64);
    }
    CHECK(kn_q2_k_vec_dot_q8_k(512, q2, a) == 512.0f);
    /* Q3_K: low bits 1, high bit clear -> q = 1 - 4 = -3; scales 0 -> -32; d = 0.5: 0.5 * -32 * -3 = 48 */
    kn_block_q3_k q3;
    q3.d = 0x3800;
    memset(q3.hmask, 0, 32);
    memset(q3.qs, 0x55, 64);
    memset(q3.scales, 0, 12);
    CHECK(kn_q3_k_vec_dot_q8_k(256, &q3, a) == 48.0f * 256);
    /* IQ4_XS: index 0 (-127), ls = 33 (scale +1), d = 1: -127 per element */
    kn_block_iq4_xs x4;
    x4.d = 0x3C00;
    memset(x4.scales_l, 0x11, 4);
    x4.scales_h = 0xAAAA; /* bits 2j+1 set: ls = 1 | 2 << 4 = 33 */
    memset(x4.qs, 0, 128);
    CHECK(kn_iq4_xs_vec_dot_q8_k(256, &x4, a) == -127.0f * 256);

    kn_block_q8_0 b[3];
    for (int i = 0; i < 3; i++) {
        b[i].d = 0x3800; /* 0.5 */
        memset(b[i].qs, (uint8_t)(int8_t)-3, 32);
    }
    /* IQ4_NL: index 8 (value 1), d = 2: 2 * 1 * 0.5 * -3 * 32 = -96 per block */
    kn_block_iq4_nl nl[3];
    for (int i = 0; i < 3; i++) {
        nl[i].d = 0x4000;
        memset(nl[i].qs, 0x88, 16);
    }
    CHECK(kn_iq4_nl_vec_dot_q8_0(96, nl, b) == -288.0f);
    /* MXFP4: index 7 (12), e = 128 (half-scale 1): 12 * 0.5 * -3 * 32 = -576 per block */
    kn_block_mxfp4 mx[3];
    for (int i = 0; i < 3; i++) {
        mx[i].e = 128;
        memset(mx[i].qs, 0x77, 16);
    }
    CHECK(kn_mxfp4_vec_dot_q8_0(96, mx, b) == -1728.0f);
}

/* The quantizers write blocks whose dequantized values are the nearest the format offers on simple
 * inputs: values that are exactly representable come back exactly. */
static void test_exact_roundtrip(void) {
    float x[256], y[256];
    uint8_t q[1024];
    /* MXFP4: E2M1 values times a power of two are exact */
    static const float lv[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int i = 0; i < 32; i++) x[i] = ((i & 1) ? -1.0f : 1.0f) * lv[i % 8] * 0x1p-6f;
    kn_mxfp4_from_float(x, q, 32);
    kn_mxfp4_to_float(q, y, 32);
    for (int i = 0; i < 32; i++) CHECKF(y[i] == x[i], "MXFP4 x[%d] = %g came back %g", i, x[i], y[i]);
    /* IQ4_NL: table values times an fp16 scale are exact */
    for (int i = 0; i < 32; i++) x[i] = 0.125f * (float)kn_iq4nl_values[(i * 7) & 15];
    kn_iq4_nl_from_float(x, q, 32);
    kn_iq4_nl_to_float(q, y, 32);
    for (int i = 0; i < 32; i++) CHECKF(y[i] == x[i], "IQ4_NL x[%d] = %g came back %g", i, x[i], y[i]);
    /* Q3_K: integers -4..3 on one scale; Q2_K: integers 0..3. Every element lands on its own level: exact
     * up to the fp16 super-block scale times the integer sub-block scale (within 2^-10 here) */
    for (int i = 0; i < 256; i++) x[i] = (float)((i * 5) % 8 - 4);
    kn_q3_k_from_float(x, q, 256);
    kn_q3_k_to_float(q, y, 256);
    for (int i = 0; i < 256; i++) CHECKF(fabsf(y[i] - x[i]) <= 4e-3f, "Q3_K x[%d] = %g came back %g", i, x[i], y[i]);
    for (int i = 0; i < 256; i++) x[i] = (float)((i * 5) % 4);
    kn_q2_k_from_float(x, q, 256);
    kn_q2_k_to_float(q, y, 256);
    for (int i = 0; i < 256; i++) CHECKF(fabsf(y[i] - x[i]) <= 3e-3f, "Q2_K x[%d] = %g came back %g", i, x[i], y[i]);
}

int main(void) {
    RUN(test_struct_layouts);
    RUN(test_gguf_fixed_blocks);
    RUN(test_kat_q2_k);
    RUN(test_kat_q3_k);
    RUN(test_kat_iq4_nl);
    RUN(test_kat_iq4_xs);
    RUN(test_kat_mxfp4);
    RUN(test_kat_vec_dot);
    RUN(test_exact_roundtrip);
    return kt_summary();
}
