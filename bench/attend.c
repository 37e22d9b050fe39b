/*
 * attend.c - micro-benchmark of the decode attention kernels (kn_attend_fn) on one thread: one token's
 * attention over n cached positions, as a decode step calls it, for every layer of a model-shaped cache:
 * one call per KV head (its group of query heads sharing the K and V loads) and one call for -G KV heads
 * (default: all of them; one sweep reading the heads of each position side by side), alternating.
 *
 *   hot:  one layer's cache, called again and again (it stays in the caches): the kernel's compute.
 *   cold: L layers' caches, far larger than the caches together, one pass over them per repetition
 *         (the server's batched decode step: every row's cache, every layer, read once).
 * The cache is paged as the server's (kv_pool.h): pages of -b positions (16 by default, KN_KVP_BLOCK),
 * each holding those positions' K rows of every layer, then their V rows, the pages in shuffled order;
 * -b 0 keeps one contiguous cache (a page of all n positions).
 * Reported as ns per (token, layer) and GB/s of K and V read, in this thread's CPU time (time slices
 * given to other processes left out, not their share of the caches and memory); the SIMD kernel sets
 * the CPU runs and both ways of calling alternate within each repetition and the median of the
 * repetitions is printed.
 *
 * Usage: build/bench/attend [-n POSITIONS] [-d HEAD_DIM] [-g QUERY_HEADS_PER_KV] [-k KV_HEADS] [-l LAYERS]
 *                           [-G KV_HEADS_PER_CALL] [-f KV_FORMAT (f16, bf16, q8_0, q4_0, tq4, tq3, f32)] [-r REPS]
 */
#include "tensor/kernels.h"
#include "tensor/kvq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* time slices given to others left out */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

typedef struct shape {
    int n, hd, g, nkv, layers, bt; /* bt: positions per page */
    kn_kvt fmt;
    size_t head_bytes, row_bytes; /* one head vector; one position (every KV head) */
} shape;

/* One token's attention over layer l of the paged cache (pages[n / bt], each [K: layers][bt][row_bytes]
 * then [V: layers][bt][row_bytes], a row = nkv head vectors), `per` KV heads a call (one sweep over the
 * positions each); q[nkv * g][hd] -> out. */
static void attend_layer(kn_attend_fn f, const shape *s, int per, const uint8_t *const *pages, int l, const float *q,
                         float *out) {
    const size_t plane = (size_t)s->bt * s->row_bytes;
    for (int h = 0; h < s->nkv; h += per) {
        const size_t head = (size_t)h * s->head_bytes;
        const kn_attend_rows rows = {.kb = pages,
                                     .vb = pages,
                                     .koff = (size_t)l * plane + head,
                                     .voff = ((size_t)s->layers + (size_t)l) * plane + head,
                                     .kstride = s->row_bytes,
                                     .vstride = s->row_bytes,
                                     .first = 0,
                                     .bt = s->bt,
                                     .nkv = s->nkv - h < per ? s->nkv - h : per,
                                     .khead = s->head_bytes,
                                     .vhead = s->head_bytes};
        f(&rows, s->n, q + (size_t)h * s->g * s->hd, s->g, s->hd, 0.125f, out + (size_t)h * s->g * s->hd);
    }
}

int main(int argc, char **argv) {
    shape s = {.n = 256, .hd = 64, .g = 4, .nkv = 8, .layers = 128, .bt = 16, .fmt = KN_KVT_F16};
    int reps = 7, per = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-n")) s.n = atoi(v);
        else if (!strcmp(a, "-d")) s.hd = atoi(v);
        else if (!strcmp(a, "-g")) s.g = atoi(v);
        else if (!strcmp(a, "-k")) s.nkv = atoi(v);
        else if (!strcmp(a, "-l")) s.layers = atoi(v);
        else if (!strcmp(a, "-b")) s.bt = atoi(v);
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else if (!strcmp(a, "-G")) per = atoi(v);
        else if (!strcmp(a, "-f")) {
            int t = 0;
            while (t < KN_KVT_COUNT && strcmp(kn_kvq_traits_get((kn_kvt)t)->name, v)) t++;
            s.fmt = (kn_kvt)t;
            if (t == KN_KVT_COUNT) {
                fprintf(stderr, "attend: unknown KV format '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: attend [-n N] [-d HD] [-g G] [-k KV_HEADS] [-l LAYERS] [-G PER_CALL] [-b PAGE] [-f FMT] "
                    "[-r REPS]\n");
            return 2;
        }
    }
    if (per == 0) per = s.nkv;
    while (per * s.g > KN_ATTEND_MAX_HEADS) per--;
    if (s.n < 1 || s.hd < 16 || s.hd > 1024 || s.g < 1 || s.g > KN_ATTEND_MAX_Q || s.nkv < 1 || s.layers < 1 ||
        s.bt < 0 || reps < 1 || per < 1 || per > s.nkv) {
        fprintf(stderr, "attend: a size is out of range\n");
        return 2;
    }
    s.head_bytes = kn_kvq_head_bytes(s.fmt, s.hd);
    s.row_bytes = s.head_bytes * (size_t)s.nkv;
    if (s.bt == 0) s.bt = s.n;
    const int n_pages = (s.n + s.bt - 1) / s.bt;
    const size_t plane = (size_t)s.bt * s.row_bytes, page_bytes = 2 * (size_t)s.layers * plane;
    const size_t layer_bytes = 2 * (size_t)s.n * s.row_bytes; /* K and V read per layer */
    uint8_t *cache = malloc(page_bytes * (size_t)n_pages);
    const uint8_t **pages = malloc(sizeof *pages * (size_t)n_pages);
    float *q = malloc(sizeof(float) * (size_t)s.nkv * s.g * s.hd),
          *out = malloc(sizeof(float) * (size_t)s.nkv * s.g * s.hd);
    float *tmp = malloc(sizeof(float) * (size_t)s.hd);
    if (!cache || !pages || !q || !out || !tmp) return 1;
    uint32_t seed = 1;
    for (int i = 0; i < n_pages; i++) pages[i] = cache + (size_t)i * page_bytes;
    for (int i = n_pages - 1; i > 0; i--) { /* shuffled, as a pool hands them out over time */
        seed = seed * 1664525u + 1013904223u;
        const int j = (int)((seed >> 8) % (uint32_t)(i + 1));
        const uint8_t *t = pages[i];
        pages[i] = pages[j], pages[j] = t;
    }
    for (size_t r = 0; r < page_bytes * (size_t)n_pages / s.row_bytes; r++)
        for (int h = 0; h < s.nkv; h++) {
            for (int i = 0; i < s.hd; i++) tmp[i] = frand(&seed);
            kn_kvq_store(s.fmt, tmp, cache + r * s.row_bytes + (size_t)h * s.head_bytes, s.hd);
        }
    for (int i = 0; i < s.nkv * s.g * s.hd; i++) q[i] = frand(&seed);

    const kn_kernels *sets[3];
    int ns = 0;
    const char *names[] = {"avx2", "avx512", "neon+dotprod"};
    for (int i = 0; i < 3; i++)
        if (kn_kernels_named(names[i])) sets[ns++] = kn_kernels_named(names[i]);
    const int hot_calls = (int)(2e8 / ((double)s.n * s.g * s.nkv * s.hd)) + 1; /* ~10 ms */
    const int pers[2] = {1, per}, nm = per > 1 ? 2 : 1;                        /* the ways of calling */
    double *hot = malloc(sizeof(double) * (size_t)(2 * ns * reps)),
           *cold = malloc(sizeof(double) * (size_t)(2 * ns * reps));
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < ns; k++)
            for (int w = 0; w < nm; w++) {
                const kn_attend_fn f = kn_kernels_attend(sets[k], s.fmt);
                const int i = (k * 2 + w) * reps + r;
                attend_layer(f, &s, pers[w], pages, 0, q, out); /* warm */
                double t0 = now_s();
                for (int c = 0; c < hot_calls; c++) attend_layer(f, &s, pers[w], pages, 0, q, out);
                hot[i] = (now_s() - t0) / hot_calls;
                t0 = now_s();
                for (int l = 0; l < s.layers; l++) attend_layer(f, &s, pers[w], pages, l, q, out);
                cold[i] = (now_s() - t0) / s.layers;
            }
    printf("attention of one token: %d positions, head dim %d, %d query heads per KV head, %d KV heads, %s, pages of "
           "%d positions; "
           "cold: %d layers (%.0f MB)\n\n",
           s.n, s.hd, s.g, s.nkv, kn_kvq_traits_get(s.fmt)->name, s.bt, s.layers, (double)layer_bytes * s.layers / 1e6);
    printf("| set | KV heads a call | hot ns/layer | hot GB/s | cold ns/layer | cold GB/s |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k < ns; k++)
        for (int w = 0; w < nm; w++) {
            const int i = (k * 2 + w) * reps;
            qsort(hot + i, (size_t)reps, sizeof(double), cmp_d);
            qsort(cold + i, (size_t)reps, sizeof(double), cmp_d);
            const double h = hot[i + reps / 2], c = cold[i + reps / 2];
            printf("| %s | %d | %.0f | %.1f | %.0f | %.1f |\n", sets[k]->name, pers[w], h * 1e9, layer_bytes / h / 1e9,
                   c * 1e9, layer_bytes / c / 1e9);
        }
    free(cache), free(pages), free(q), free(out), free(tmp), free(hot), free(cold);
    return 0;
}
