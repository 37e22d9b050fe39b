/*
 * kernels.c - micro-benchmark of the quantized GEMM kernels on one thread, side by side in one run:
 * the plain-layout tile kernels (kn_kernels.gemm, 4 rows x 4 tokens) against the 16-row panel kernels
 * (kn_kernels.p16) on the same Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K / IQ4_NL / IQ4_XS / MXFP4 matrices (KILN_KERNELS
 * picks the set; for a type the set keeps plain, the panel kernel of the best AVX2 set runs beside its plain
 * kernel); the types without panel kernels (Q2_K, Q3_K, and the float formats F32, F16, BF16) get the plain
 * figures only.
 *
 *   decode (1 token): a stack of matrices far larger than the caches, each read once per pass;
 *                     reported as GB/s of weights streamed.
 *   prefill (N tokens): one matrix against N activation rows, blocked as kn_matmul does (64 tokens
 *                     per block); reported as GOP/s (2 x rows x cols x N per call).
 * Variants alternate within each repetition and the median of the repetitions is printed, because
 * these machines are shared and noisy.
 *
 * Usage: build/bench/kernels [-r REPS] [-n PREFILL_TOKENS] [-c COLS (matrix width, default 8192)] [-t cpu]
 *                            [-T TYPE,...]
 * (-t cpu times the thread's CPU time instead of the wall clock: on a loaded machine it leaves out the
 * time slices given to others, though not their share of the caches and memory bandwidth; -T runs only
 * the types named, e.g. -T Q6_K,Q4_K)
 */
#include "tensor/kernels.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_cpu_clock; /* -t cpu: time this thread's CPU time (a shared machine's time slices left out) */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

/* y[N][rows] = W x^T with the plain tile kernel, loop order of kn_matmul (token blocks of 64). */
static void run_plain(const kn_kernels *k, kn_dtype t, const uint8_t *w, int64_t rows, int64_t cols, const uint8_t *xq,
                      int64_t N, float *y) {
    const kn_gemm_fn g = kn_kernels_gemm(k, t);
    const size_t rb = kn_row_bytes(t, cols), xs = kn_row_bytes(kn_type_traits_get(t)->vec_dot_type, cols);
    for (int64_t b0 = 0; b0 < N; b0 += 64) {
        const int64_t b1 = b0 + 64 < N ? b0 + 64 : N;
        for (int64_t r0 = 0; r0 < rows; r0 += 4)
            for (int64_t n = b0; n < b1; n += 4) {
                const int nt = (int)(b1 - n < 4 ? b1 - n : 4);
                g(cols, w + (size_t)r0 * rb, rb, 4, xq + (size_t)n * xs, xs, nt, y + n * rows + r0, (size_t)rows);
            }
    }
}

/* The same with the panel kernel on the packed matrix and Q8X activations. */
static void run_p16(const kn_kernels *k, kn_dtype t, const uint8_t *w, int64_t rows, int64_t cols, const uint8_t *xq,
                    int64_t N, float *y) {
    const kn_p16_fn g = k->p16[t];
    const size_t pb = kn_row_bytes(t, cols) * KN_P16_ROWS, xs = kn_q8x_row_bytes(t, cols);
    for (int64_t b0 = 0; b0 < N; b0 += 64) {
        const int64_t b1 = b0 + 64 < N ? b0 + 64 : N;
        const int T = kn_p16_tile(k, b1 - b0);
        for (int64_t p = 0; p < rows / KN_P16_ROWS; p += KN_P16_PANELS) {
            const int np = (int)(rows / KN_P16_ROWS - p < KN_P16_PANELS ? rows / KN_P16_ROWS - p : KN_P16_PANELS);
            for (int64_t n = b0; n < b1; n += T) {
                const int nt = (int)(b1 - n < T ? b1 - n : T);
                g(cols, w + (size_t)p * pb, np, xq + (size_t)n * xs, xs, nt, y + n * rows + p * KN_P16_ROWS,
                  (size_t)rows);
            }
        }
    }
}

/* True when name is one of the comma-separated names of list. */
static bool listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, name, n) == 0) return true;
        p += len + (p[len] == ',');
    }
    return false;
}

int main(int argc, char **argv) {
    int reps = 5;
    int64_t NP = 256, cols = 8192;
    const char *only = NULL; /* -T: comma-separated type names */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-r") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-n") == 0) NP = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "-c") == 0) cols = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "-t") == 0) g_cpu_clock = strcmp(argv[i + 1], "cpu") == 0;
        else if (strcmp(argv[i], "-T") == 0) only = argv[i + 1];
    }
    if (reps < 1 || reps > 100 || NP < 1 || NP > 4096 || cols < 256 || cols > 65536 || cols % 256) {
        fprintf(stderr,
                "usage: kernels [-r REPS 1..100] [-n TOKENS 1..4096] [-c COLS, a multiple of 256] [-t cpu|wall] "
                "[-T TYPE,...]\n");
        return 2;
    }
    const kn_kernels *k = kn_kernels_get(KN_KERNELS_AUTO);
    if (!k->p16[KN_Q4_0]) {
        printf("kernel set %s has no panel kernels\n", k->name);
        return 0;
    }
    const kn_dtype types[] = {KN_Q4_0, KN_Q4_1,   KN_Q8_0,   KN_Q4_K,  KN_Q5_K, KN_Q6_K, KN_Q2_K,
                              KN_Q3_K, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4, KN_F32,  KN_F16,  KN_BF16};
    const int64_t rows = 2048;
    printf("kernel set %s, one thread, matrices %lld x %lld, %d repetitions (median), %s time\n", k->name,
           (long long)rows, (long long)cols, reps, g_cpu_clock ? "CPU" : "wall-clock");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const kn_dtype t = types[ti];
        const kn_type_traits *tr = kn_type_traits_get(t);
        if (only && !listed(only, tr->name)) continue;
        /* a type the set keeps plain: its panels as the best AVX2 set has them, for comparison */
        const kn_kernels *a2 = kn_kernels_named("avx2vnni") ? kn_kernels_named("avx2vnni") : kn_kernels_named("avx2");
        const kn_kernels *ps = k->p16[t] ? k : a2;
        const kn_dtype at = tr->vec_dot_type;
        const int panel = ps->p16[t] != NULL;
        const kn_from_float_fn aq = kn_kernels_quantize(k, at);
        const size_t mb = kn_row_bytes(t, cols) * (size_t)rows;
        /* matrices enough for about 226 MB (24 in Q4_0 at the default width), at least 2 */
        const int64_t fit = (int64_t)(((size_t)226 << 20) / mb), stack = fit > 2 ? fit : 2;
        uint8_t *plain = malloc(mb * stack), *packed = malloc(mb * stack);
        float *f = malloc(sizeof(float) * (size_t)cols * (size_t)NP),
              *y = malloc(sizeof(float) * (size_t)rows * (size_t)NP);
        uint8_t *xq = malloc(kn_row_bytes(at, cols) * (size_t)NP),
                *xx = malloc((panel ? kn_q8x_row_bytes(t, cols) : 1) * (size_t)NP);
        if (!plain || !packed || !f || !y || !xq || !xx) return 1;
        unsigned s = 12345;
        for (int64_t i = 0; i < cols; i++) f[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
        tr->from_float(f, plain, cols); /* every row the same: quantized once */
        for (int64_t r = 1; r < rows; r++)
            memcpy(plain + (size_t)r * kn_row_bytes(t, cols), plain, kn_row_bytes(t, cols));
        for (int64_t m = 1; m < stack; m++) memcpy(plain + (size_t)m * mb, plain, mb);
        for (int64_t m = 0; panel && m < stack; m++)
            kn_p16_pack(t, plain + (size_t)m * mb, rows, cols, packed + (size_t)m * mb);
        for (int64_t i = cols; i < cols * NP; i++) f[i] = f[i % cols] * (float)(1 + i / cols % 3);
        for (int64_t n = 0; n < NP; n++) {
            aq(f + n * cols, xq + (size_t)n * kn_row_bytes(at, cols), cols);
            if (panel) kn_q8x_quantize(t, aq, f + n * cols, xx + (size_t)n * kn_q8x_row_bytes(t, cols), cols);
        }
        double dp[100], dk[100], pp[100], pk[100];
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            for (int64_t m = 0; m < stack; m++) run_plain(k, t, plain + (size_t)m * mb, rows, cols, xq, 1, y);
            double t1 = now_s();
            for (int64_t m = 0; panel && m < stack; m++) run_p16(ps, t, packed + (size_t)m * mb, rows, cols, xx, 1, y);
            double t2 = now_s();
            dp[r] = (double)(mb * stack) / (t1 - t0) / 1e9;
            dk[r] = (double)(mb * stack) / (t2 - t1) / 1e9;
            t0 = now_s();
            run_plain(k, t, plain, rows, cols, xq, NP, y);
            t1 = now_s();
            if (panel) run_p16(ps, t, packed, rows, cols, xx, NP, y);
            t2 = now_s();
            const double ops = 2.0 * (double)rows * (double)cols * (double)NP;
            pp[r] = ops / (t1 - t0) / 1e9;
            pk[r] = ops / (t2 - t1) / 1e9;
        }
        const double a = median(dp, reps), b = median(dk, reps), c = median(pp, reps), d = median(pk, reps);
        if (!panel) {
            printf("%s decode  (1 token):  plain %6.1f GB/s\n", tr->name, a);
            printf("%s prefill (%lld tokens): plain %6.1f GOP/s\n", tr->name, (long long)NP, c);
            free(plain), free(packed), free(f), free(y), free(xq), free(xx);
            continue;
        }
        printf("%s decode  (1 token):  plain %6.1f GB/s   panel %6.1f GB/s   ratio %.2f%s\n", tr->name, a, b, b / a,
               ps == k ? "" : " (panel kernel of the AVX2 set)");
        printf("%s prefill (%lld tokens): plain %6.1f GOP/s  panel %6.1f GOP/s  ratio %.2f\n", tr->name, (long long)NP,
               c, d, d / c);
        free(plain), free(packed), free(f), free(y), free(xq), free(xx);
    }
    return 0;
}
