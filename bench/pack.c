/*
 * pack.c - micro-benchmark of the load's repack of quantized matrices into 16-row panels
 * (kn_p16_pack, src/tensor/pack.c): GB/s of plain rows packed per type, on one thread, the best of
 * -r passes over a matrix of -R rows by -C columns (the destination already touched, so the figure
 * is the repack's own, not the kernel's first-touch zeroing of fresh pages that a real load adds).
 * A model's load packs every matrix of these types once, spread over the cores (src/model/model.c).
 *
 * Usage: build/bench/pack [-r REPS] [-R ROWS] [-C COLS]   (COLS a multiple of 256; default 2048 x 8192)
 */
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int reps = 5;
    int64_t rows = 2048, cols = 8192;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-R")) rows = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-C")) cols = atoll(argv[i + 1]);
    }
    if (reps < 1 || rows < 16 || rows % 16 || cols < 256 || cols % 256) {
        fprintf(stderr, "usage: %s [-r REPS] [-R ROWS, a multiple of 16] [-C COLS, a multiple of 256]\n", argv[0]);
        return 2;
    }
    const kn_dtype types[] = {KN_Q4_0, KN_Q8_0, KN_Q4_K, KN_Q5_K, KN_Q6_K, KN_IQ4_XS};
    printf(
        "one thread, best of %d passes over %lld x %lld\n\n| type | MB | ms | GB/s |\n| --- | ---: | ---: | ---: |\n",
        reps, (long long)rows, (long long)cols);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const size_t n = kn_row_bytes(types[k], cols) * (size_t)rows;
        uint8_t *src = malloc(n), *dst = malloc(n);
        if (!src || !dst) return 1;
        for (size_t i = 0; i < n; i++) src[i] = (uint8_t)((i * 2654435761u) >> 13);
        memset(dst, 0, n);
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = now_s();
            kn_p16_pack(types[k], src, rows, cols, dst);
            const double t = now_s() - t0;
            best = t < best ? t : best;
        }
        printf("| %s | %.1f | %.2f | %.2f |\n", kn_dtype_name(types[k]), (double)n / 1e6, best * 1e3,
               (double)n / best / 1e9);
        free(src);
        free(dst);
    }
    return 0;
}
