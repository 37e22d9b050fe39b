/*
 * test_kernels_mlx.c - kiln's MLX 8-bit weight formats (MLX8: fp16 scale and bias, MLX8_F32: fp32):
 * known answers of the scalar reference (dequantization is MLX's scale * q + bias; the dot is
 * d * sum((q - 128) x) + (m + 128 d) * sum(x), block by block as quant.h says), and the GEMM tile kernels
 * of every SIMD kernel set this CPU can run against it (kernel_check.h): AVX2 with and without AVX-VNNI
 * (built here from the reference set, so they are tested on AVX-512 machines too; the AVX-512 set keeps
 * them), within 1e-6 of |w| |x| as the other block formats' tiles (their integer sums are exact, only
 * the fp32 accumulation order differs), also at the extremes of the integer paths (q = 0 and 255
 * against activation quants of +-127) and on rows that end at an inaccessible page. The panel kernels,
 * bit-identical to the reference, are tested in test_pack_mlx.c, the ARM64 kernels
 * (kernels_neon_mlx.c, bit-identical) in test_kernels_neon.c.
 */
#include "kernel_check.h"

#include "tensor/quant.h"

#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

bool kn__avx2_legacy_vnni(kn_kernels *k, bool use_vnni);

static kn_kernels set_avx2, set_avx2_vnni, set_best;
static bool have_avx2, have_avx2_vnni, have_avx512;

static void make_sets(void) {
    const kn_cpu *c = kn_cpu_features();
    const kn_kernels *best = kn_kernels_get(KN_KERNELS_AUTO);
    have_avx2 = c->avx2 && c->fma && c->f16c;
    if (have_avx2) {
        set_avx2 = *kn_kernels_get(KN_KERNELS_REF);
        set_avx2.name = "avx2";
        kn_avx2_init_legacy(&set_avx2);
        set_avx2_vnni = set_avx2;
        set_avx2_vnni.name = "avx2+vnni";
        have_avx2_vnni = kn__avx2_legacy_vnni(&set_avx2_vnni, true);
        kn__avx2_legacy_vnni(&set_avx2, false);
    }
    have_avx512 = strcmp(best->name, "avx512") == 0;
    if (have_avx512) set_best = *best;
}

/* ---- the reference: known answers ---- */

static void test_block_layout(void) {
    CHECK(kn_type_traits_get(KN_MLX8)->block_bytes == 36 && kn_type_traits_get(KN_MLX8)->block_size == 32);
    CHECK(kn_type_traits_get(KN_MLX8_F32)->block_bytes == 40 && kn_type_traits_get(KN_MLX8_F32)->block_size == 32);
    CHECK(kn_type_traits_get(KN_MLX8)->vec_dot_type == KN_Q8_0);
    CHECK(kn_row_bytes(KN_MLX8, 64) == 72 && kn_row_bytes(KN_MLX8_F32, 64) == 80);
}

static void test_dequant_known(void) {
    kn_block_mlx8 b[2];
    kn_block_mlx8_f32 bf;
    b[0].d = kn_fp32_to_fp16(0.5f);
    b[0].m = kn_fp32_to_fp16(-3.0f);
    b[1].d = kn_fp32_to_fp16(0.25f);
    b[1].m = kn_fp32_to_fp16(1.0f);
    bf.d = 0.1f; /* not an fp16 value: the reason for MLX8_F32 */
    bf.m = -12.7f;
    for (int e = 0; e < 32; e++) {
        b[0].qs[e] = (uint8_t)(8 * e);
        b[1].qs[e] = (uint8_t)(255 - e);
        bf.qs[e] = (uint8_t)(e * 7 + 3);
    }
    float out[64], of[32];
    kn_mlx8_to_float(b, out, 64);
    kn_mlx8_f32_to_float(&bf, of, 32);
    bool ok = true;
    for (int e = 0; e < 32; e++) {
        ok = ok && out[e] == 0.5f * (float)(8 * e) - 3.0f && out[32 + e] == 0.25f * (float)(255 - e) + 1.0f;
        const float s = 0.1f * (float)(e * 7 + 3);
        ok = ok && of[e] == s + -12.7f;
    }
    CHECK(ok);
    CHECK(out[0] == -3.0f && out[31] == 0.5f * 248 - 3.0f && out[63] == 0.25f * 224 + 1.0f);
}

static void test_dot_known(void) {
    /* two blocks: weights d = 1, m = -128 (w = q - 128), x.d = 0.5; the dot is exactly computable */
    kn_block_mlx8 w[2];
    kn_block_q8_0 x[2];
    double want = 0;
    for (int i = 0; i < 2; i++) {
        w[i].d = kn_fp32_to_fp16(1.0f);
        w[i].m = kn_fp32_to_fp16(-128.0f);
        x[i].d = kn_fp32_to_fp16(0.5f);
        for (int e = 0; e < 32; e++) {
            w[i].qs[e] = (uint8_t)((e * 37 + i * 11) & 255);
            x[i].qs[e] = (int8_t)((e * 13 + i * 5) % 255 - 127);
            want += ((double)w[i].qs[e] - 128.0) * 0.5 * x[i].qs[e];
        }
    }
    CHECKF(kn_mlx8_vec_dot_q8_0(64, w, x) == (float)want, "got %.9g want %.9g", kn_mlx8_vec_dot_q8_0(64, w, x), want);
    /* all-maximal codes against +-127: the integer sums are at their extremes and stay exact */
    for (int e = 0; e < 32; e++) {
        w[0].qs[e] = 255;
        x[0].qs[e] = 127;
        w[1].qs[e] = 0;
        x[1].qs[e] = -127;
    }
    want = 32 * (127.0 * 0.5 * 127) + 32 * (-128.0 * 0.5 * -127);
    CHECKF(kn_mlx8_vec_dot_q8_0(64, w, x) == (float)want, "got %.9g want %.9g", kn_mlx8_vec_dot_q8_0(64, w, x), want);
    /* d = 0.5, m = -63 (w = q / 2 - 63): the offset term fma(d, 128, m) = 1 is not zero; every step exact */
    want = 0;
    for (int i = 0; i < 2; i++) {
        w[i].d = kn_fp32_to_fp16(0.5f);
        w[i].m = kn_fp32_to_fp16(-63.0f);
        x[i].d = kn_fp32_to_fp16(0.25f);
        for (int e = 0; e < 32; e++) {
            w[i].qs[e] = (uint8_t)((e * 53 + i * 7) & 255);
            x[i].qs[e] = (int8_t)((e * 29 + i * 3) % 255 - 127);
            want += (0.5 * w[i].qs[e] - 63.0) * 0.25 * x[i].qs[e];
        }
    }
    CHECKF(kn_mlx8_vec_dot_q8_0(64, w, x) == (float)want, "got %.9g want %.9g", kn_mlx8_vec_dot_q8_0(64, w, x), want);
}

/* The reference quantizer round-trips: each value within half a step (plus the stored m's rounding). */
static void test_quantize_roundtrip(void) {
    enum { N = 256 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)kc_gauss();
    uint8_t buf[N / 32 * 40];
    for (int f32 = 0; f32 < 2; f32++) {
        const kn_type_traits *tr = kn_type_traits_get(f32 ? KN_MLX8_F32 : KN_MLX8);
        tr->from_float(x, buf, N);
        tr->to_float(buf, y, N);
        double worst = 0;
        for (int b = 0; b < N / 32; b++) {
            float lo = x[32 * b], hi = x[32 * b];
            for (int e = 0; e < 32; e++) {
                lo = fminf(lo, x[32 * b + e]);
                hi = fmaxf(hi, x[32 * b + e]);
            }
            for (int e = 0; e < 32; e++) worst = fmax(worst, fabs(y[32 * b + e] - x[32 * b + e]) / (hi - lo));
        }
        CHECKF(worst < 0.5 / 255 + 2e-3, "%s: worst error %.3g of the block range", tr->name, worst);
    }
}

/* ---- SIMD sets: within TOL of |w| |x| of the reference ---- */

#define TOL 1e-6

static void check_type(const kn_kernels *set, bool have, const char *why, kn_dtype t) {
    if (!have) SKIP("%s", why);
    CHECKF(kc_check_type(set, t, TOL) == 0, "%s %s", set->name, kn_type_traits_get(t)->name);
}

#define NO_AVX2 "CPU lacks AVX2+FMA+F16C"
#define NO_VNNI "CPU lacks AVX-VNNI"
#define NO_512  "CPU lacks AVX-512 F/BW/VL/VNNI"

static void test_avx2_mlx8(void) { check_type(&set_avx2, have_avx2, NO_AVX2, KN_MLX8); }
static void test_avx2_mlx8_f32(void) { check_type(&set_avx2, have_avx2, NO_AVX2, KN_MLX8_F32); }
static void test_avx2_vnni_mlx8(void) { check_type(&set_avx2_vnni, have_avx2_vnni, NO_VNNI, KN_MLX8); }
static void test_avx2_vnni_mlx8_f32(void) { check_type(&set_avx2_vnni, have_avx2_vnni, NO_VNNI, KN_MLX8_F32); }
static void test_best_mlx8(void) { check_type(&set_best, have_avx512, NO_512, KN_MLX8); }
static void test_best_mlx8_f32(void) { check_type(&set_best, have_avx512, NO_512, KN_MLX8_F32); }

/* Extreme codes and activations (all q = 0 or 255, quants +-127, mixed signs) over 4 rows of 9 blocks:
 * every set is within TOL of sum |w x| of the reference (an integer sum that saturated would be off by
 * far more). */
static int extremes(const kn_kernels *set, kn_dtype t) {
    const int64_t n = 32 * 9;
    const size_t wrb = kn_row_bytes(t, n), arb = kn_row_bytes(KN_Q8_0, n);
    uint8_t w[4 * 9 * 40], x[4 * 9 * 34];
    const bool f32 = t == KN_MLX8_F32;
    for (int r = 0; r < 4; r++)
        for (int b = 0; b < 9; b++) {
            uint8_t *blk = w + (size_t)r * wrb + (size_t)b * (f32 ? 40 : 36);
            if (f32) {
                const float dm[2] = {0.01f * (float)(b + 1), -1.3f * (float)r};
                memcpy(blk, dm, 8);
            } else {
                const kn_half dm[2] = {kn_fp32_to_fp16(0.01f * (float)(b + 1)), kn_fp32_to_fp16(-1.3f * (float)r)};
                memcpy(blk, dm, 4);
            }
            for (int e = 0; e < 32; e++) blk[(f32 ? 8 : 4) + e] = ((r + b + e / 5) & 1) ? 255 : 0;
        }
    for (int tk = 0; tk < 4; tk++)
        for (int b = 0; b < 9; b++) {
            kn_block_q8_0 *xb = (kn_block_q8_0 *)(x + (size_t)tk * arb) + b;
            xb->d = kn_fp32_to_fp16(0.003f * (float)(tk + 1));
            for (int e = 0; e < 32; e++) xb->qs[e] = (int8_t)(((tk + e / 3 + b) & 1) ? 127 : -127);
        }
    float ref[16], got[16], wf[4][32 * 9], xf[4][32 * 9];
    kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), t)(n, w, wrb, 4, x, arb, 4, ref, 4);
    kn_kernels_gemm(set, t)(n, w, wrb, 4, x, arb, 4, got, 4);
    for (int k = 0; k < 4; k++) {
        kn_type_traits_get(t)->to_float(w + (size_t)k * wrb, wf[k], n);
        kn_q8_0_to_float(x + (size_t)k * arb, xf[k], n);
    }
    for (int r = 0; r < 4; r++)
        for (int tk = 0; tk < 4; tk++) {
            double mag = 0;
            for (int64_t e = 0; e < n; e++) mag += fabs((double)wf[r][e] * xf[tk][e]);
            if (fabs((double)got[tk * 4 + r] - ref[tk * 4 + r]) > TOL * mag) return -1;
        }
    return 0;
}

static void check_extremes(const kn_kernels *set, bool have, const char *why) {
    if (!have) SKIP("%s", why);
    CHECKF(extremes(set, KN_MLX8) == 0 && extremes(set, KN_MLX8_F32) == 0, "%s", set->name);
}

static void test_avx2_extremes(void) { check_extremes(&set_avx2, have_avx2, NO_AVX2); }
static void test_avx2_vnni_extremes(void) { check_extremes(&set_avx2_vnni, have_avx2_vnni, NO_VNNI); }
static void test_best_extremes(void) { check_extremes(&set_best, have_avx512, NO_512); }

/* ---- no reads outside the rows ---- */

/* Rows of type t ending exactly at an inaccessible page (or starting right after one): a kernel
 * reading outside its rows faults. */
static int bounds(const kn_kernels *set, kn_dtype t) {
    const int64_t lens[] = {32, 96, 256, 288, 1056};
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t n = lens[li];
        const size_t wrb = kn_row_bytes(t, n), arb = kn_row_bytes(KN_Q8_0, n);
        for (int end = 0; end < 2; end++) {
            uint8_t *map[2], *p[2];
            const size_t bytes[2] = {4 * wrb, 4 * arb};
            size_t len[2];
            for (int k = 0; k < 2; k++) {
                const size_t body = (bytes[k] + page - 1) / page * page;
                len[k] = body + 2 * page;
                map[k] = mmap(NULL, len[k], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (map[k] == MAP_FAILED || mprotect(map[k], page, PROT_NONE) ||
                    mprotect(map[k] + page + body, page, PROT_NONE))
                    return -1;
                p[k] = end ? map[k] + page + body - bytes[k] : map[k] + page;
            }
            float f[1056], out[16];
            for (int r = 0; r < 4; r++) {
                for (int64_t i = 0; i < n; i++) f[i] = (float)kc_gauss();
                kn_type_traits_get(t)->from_float(f, p[0] + (size_t)r * wrb, n);
                kn_q8_0_from_float(f, p[1] + (size_t)r * arb, n);
            }
            for (int nr = 1; nr <= 4; nr++)
                for (int nt = 1; nt <= 4; nt++) {
                    kn_kernels_gemm(set, t)(n, p[0] + (size_t)(4 - nr) * wrb, wrb, nr, p[1] + (size_t)(4 - nt) * arb,
                                            arb, nt, out, 4);
                    kn_kernels_gemm(set, t)(n, p[0], wrb, nr, p[1], arb, nt, out, 4);
                }
            munmap(map[0], len[0]);
            munmap(map[1], len[1]);
        }
    }
    return 0;
}

static void check_bounds(const kn_kernels *set, bool have, const char *why) {
    if (!have) SKIP("%s", why);
    CHECK(bounds(set, KN_MLX8) == 0 && bounds(set, KN_MLX8_F32) == 0);
}

static void test_avx2_bounds(void) { check_bounds(&set_avx2, have_avx2, NO_AVX2); }
static void test_avx2_vnni_bounds(void) { check_bounds(&set_avx2_vnni, have_avx2_vnni, NO_VNNI); }
static void test_best_bounds(void) { check_bounds(&set_best, have_avx512, NO_512); }

int main(void) {
    make_sets();
    RUN(test_block_layout);
    RUN(test_dequant_known);
    RUN(test_dot_known);
    RUN(test_quantize_roundtrip);
    RUN(test_avx2_mlx8);
    RUN(test_avx2_mlx8_f32);
    RUN(test_avx2_vnni_mlx8);
    RUN(test_avx2_vnni_mlx8_f32);
    RUN(test_best_mlx8);
    RUN(test_best_mlx8_f32);
    RUN(test_avx2_extremes);
    RUN(test_avx2_vnni_extremes);
    RUN(test_best_extremes);
    RUN(test_avx2_bounds);
    RUN(test_avx2_vnni_bounds);
    RUN(test_best_bounds);
    return kt_summary();
}
