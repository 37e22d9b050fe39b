/*
 * kernel_check.h - shared checks of SIMD kernel sets against the scalar reference, used by
 * test_kernels_*.c. For a weight type and sizes it builds random weight rows (quantized with the
 * reference quantizer) and random activation rows, then checks:
 *   1. the set's activation quantizer against the reference quantizer (dequantized values within
 *      one quantization step; identical bytes when tol == 0);
 *   2. every output of the set's GEMM tile against the reference GEMM on the same bytes, within
 *      tol x |w| x |x| (the scale of the dot product); bit-identical when tol == 0, which is what
 *      the numerics contract of quant.h promises;
 *   3. the tile contract: a 4x4 (or partial) tile call is bit-identical to 1x1 calls.
 */
#ifndef KT_KERNEL_CHECK_H
#define KT_KERNEL_CHECK_H

#include "harness.h"
#include "tensor/kernels.h"

#include <stdint.h>

static uint64_t kc_state = 0x9E3779B97F4A7C15ULL;
static double kc_gauss(void) {
    /* xorshift64* + Box-Muller: deterministic across runs */
    double u[2];
    for (int i = 0; i < 2; i++) {
        kc_state ^= kc_state >> 12;
        kc_state ^= kc_state << 25;
        kc_state ^= kc_state >> 27;
        u[i] = ((kc_state * 2685821657736338717ULL) >> 11) * 0x1.0p-53;
    }
    return sqrt(-2.0 * log(u[0] + 1e-300)) * cos(6.283185307179586 * u[1]);
}

/* Returns 0 when all checks pass; prints the first failure and returns -1 otherwise. */
static int kc_check_gemm(const kn_kernels *set, kn_dtype wtype, int64_t n, int nr, int nt, double tol) {
    const kn_type_traits *wt = kn_type_traits_get(wtype);
    const kn_dtype at = wt->vec_dot_type;
    const kn_type_traits *att = kn_type_traits_get(at);
    const size_t wrb = kn_row_bytes(wtype, n), arb = kn_row_bytes(at, n);
    float *wf = malloc(sizeof(float) * (size_t)(n * nr)), *xf = malloc(sizeof(float) * (size_t)(n * nt));
    uint8_t *w = malloc(wrb * (size_t)nr + 64), *xr = malloc(arb * (size_t)nt + 64),
            *xs = malloc(arb * (size_t)nt + 64);
    float *wd = malloc(sizeof(float) * (size_t)n), *xd = malloc(sizeof(float) * (size_t)n),
          *xd2 = malloc(sizeof(float) * (size_t)n);
    float out_ref[16], out_set[16], out_one[16];
    double wn[4] = {0}, xn[4] = {0};
    int rc = 0;
    for (int r = 0; r < nr; r++) {
        double scale = (r & 1) ? 0.02 : 1.5;
        for (int64_t i = 0; i < n; i++) wf[r * n + i] = (float)(kc_gauss() * scale);
        wt->from_float(wf + r * n, w + (size_t)r * wrb, n);
        wt->to_float(w + (size_t)r * wrb, wd, n);
        for (int64_t i = 0; i < n; i++) wn[r] += (double)wd[i] * wd[i];
    }
    kn_from_float_fn q = kn_kernels_quantize(set, at);
    for (int t = 0; t < nt; t++) {
        double scale = (t & 1) ? 3.0 : 0.1;
        for (int64_t i = 0; i < n; i++) xf[t * n + i] = (float)(kc_gauss() * scale);
        if (at == KN_F32) {
            memcpy(xr + (size_t)t * arb, xf + t * n, arb);
            memcpy(xs + (size_t)t * arb, xf + t * n, arb);
        } else {
            att->from_float(xf + t * n, xr + (size_t)t * arb, n);
            q(xf + t * n, xs + (size_t)t * arb, n);
            if (tol == 0 && memcmp(xr + (size_t)t * arb, xs + (size_t)t * arb, arb) != 0) {
                printf("  %s quantizer of %s: bytes differ from the reference (n=%lld)\n", set->name, att->name,
                       (long long)n);
                rc = -1;
                goto done;
            }
            /* the set's quantizer: within one step of the reference's dequantized values */
            att->to_float(xr + (size_t)t * arb, xd, n);
            att->to_float(xs + (size_t)t * arb, xd2, n);
            double amax = 0;
            for (int64_t i = 0; i < n; i++) amax = fmax(amax, fabs(xf[t * n + i]));
            for (int64_t i = 0; i < n; i++) {
                if (fabs(xd[i] - xd2[i]) > amax / 127.0 * 1.01 + 1e-6) {
                    printf("  %s quantizer of %s differs at %lld: ref %g set %g\n", set->name, att->name, (long long)i,
                           xd[i], xd2[i]);
                    rc = -1;
                    goto done;
                }
            }
        }
        for (int64_t i = 0; i < n; i++) xn[t] += (double)xf[t * n + i] * xf[t * n + i];
    }
    /* reference GEMM on the reference-quantized activations; the set's on its own quantization:
     * compare within tol. Then the set's GEMM on the reference bytes must match 1x1 calls exactly. */
    kn_gemm_fn ref = kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), wtype);
    kn_gemm_fn g = kn_kernels_gemm(set, wtype);
    ref(n, w, wrb, nr, xr, arb, nt, out_ref, 4);
    g(n, w, wrb, nr, xr, arb, nt, out_set, 4);
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            double scale = sqrt(wn[r] * xn[t]) + 1e-30;
            double err = fabs((double)out_set[t * 4 + r] - out_ref[t * 4 + r]) / scale;
            bool bad = tol == 0 ? memcmp(&out_set[t * 4 + r], &out_ref[t * 4 + r], sizeof(float)) != 0 : !(err <= tol);
            if (bad) {
                printf("  %s gemm %s n=%lld tile %dx%d (r=%d t=%d): set %.9g ref %.9g, err %.3g > tol %.3g\n",
                       set->name, wt->name, (long long)n, nr, nt, r, t, out_set[t * 4 + r], out_ref[t * 4 + r], err,
                       tol);
                rc = -1;
                goto done;
            }
            g(n, w + (size_t)r * wrb, wrb, 1, xr + (size_t)t * arb, arb, 1, &out_one[0], 1);
            if (memcmp(&out_one[0], &out_set[t * 4 + r], sizeof(float)) != 0) {
                printf("  %s gemm %s: tile %dx%d output (r=%d t=%d) %.9g differs from the 1x1 call %.9g\n", set->name,
                       wt->name, nr, nt, r, t, out_set[t * 4 + r], out_one[0]);
                rc = -1;
                goto done;
            }
        }
    }
done:
    free(wf);
    free(xf);
    free(w);
    free(xr);
    free(xs);
    free(wd);
    free(xd);
    free(xd2);
    return rc;
}

/* Runs kc_check_gemm over a spread of sizes (k blocks for k = 1..9 and a model-sized row) and every
 * tile shape up to 4x4. */
static int kc_check_type(const kn_kernels *set, kn_dtype wtype, double tol) {
    const kn_type_traits *wt = kn_type_traits_get(wtype);
    const int64_t bs = wt->block_size == 1 ? (kn_type_traits_get(wt->vec_dot_type)->block_size) : wt->block_size;
    const int64_t unit = bs < 16 ? 16 : bs;
    int64_t sizes[] = {unit, 2 * unit, 3 * unit, 5 * unit, 9 * unit, unit == 256 ? 2048 : 2048 + 32 * 3};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (int nr = 1; nr <= 4; nr++)
            for (int nt = 1; nt <= 4; nt++)
                if (kc_check_gemm(set, wtype, sizes[si], nr, nt, tol)) return -1;
    }
    /* float types also take row lengths that are not a multiple of 16 */
    if (wt->block_size == 1)
        for (int64_t n = 1; n < 40; n += 3)
            if (kc_check_gemm(set, wtype, n, 3, 2, tol)) return -1;
    return 0;
}

#endif
