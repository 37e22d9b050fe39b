/*
 * sampling.c - micro-benchmark of what choosing a token costs beside the model: the sampler chain
 * (kn_sampler_sample) under common settings, and the logprobs of a step (kn_logprobs), per token, on
 * one thread, over vocabularies of the sizes models ship with.
 *
 * The logits are synthetic rows of two shapes: "zipf", a language model's usual shape (the token of
 * rank k at logit -1.2 ln k plus noise, ranks scattered over the ids: a few likely tokens, a long
 * tail), "flat" (normal, sd 2: top-p must walk thousands of candidates, the worst case for it) and
 * "masked" (zipf with all but 30 tokens at -inf, as a grammar's mask leaves a row: fewer candidates
 * than top-k, so even the defaults take the whole-vocabulary path).
 * Settings: greedy; the defaults (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8); top-k off with
 * the other defaults; top-k and min-p off (top-p 0.95 alone); everything off (temperature 1, a plain
 * draw over the vocabulary); logprobs with 0 and 5 alternatives (KILN_KERNELS picks the set that sums
 * the exponentials). Each figure is the median over -r repetitions of a pass over 16 rows, timed in
 * the thread's CPU time (a busy machine's other work does not count).
 *
 * Usage: build/bench/sampling [-r REPS] [-V VOCAB,...]
 */
#include "sample/logprobs.h"
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROWS = 16, MAX_REPS = 64 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t g_rng = 0x853C49E6748FEA9BULL;
static double urand(void) { /* [0, 1) */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ULL) >> 11) * 0x1.0p-53;
}

static float normal(void) { return (float)(sqrt(-2 * log(1 - urand())) * cos(6.283185307179586 * urand())); }

static const char *const shape_names[] = {"zipf", "flat", "masked"};

/* rows[ROWS][V] of the shape (0 zipf, 1 flat, 2 masked). */
static void fill(float *rows, int V, int shape) {
    int *perm = malloc((size_t)V * sizeof *perm);
    for (int i = 0; i < V; i++) perm[i] = i;
    for (int r = 0; r < ROWS; r++) {
        float *l = rows + (size_t)r * V;
        if (shape == 1) {
            for (int i = 0; i < V; i++) l[i] = 2.0f * normal();
            continue;
        }
        for (int i = V - 1; i > 0; i--) { /* the ranks scattered over the ids */
            const int j = (int)(urand() * (i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int k = 0; k < V; k++) l[perm[k]] = -1.2f * logf((float)(k + 1)) + 0.3f * normal();
        if (shape == 2)
            for (int k = 30; k < V; k++) l[perm[k]] = -INFINITY;
    }
    free(perm);
}

typedef struct setting {
    const char *name;
    float temperature, top_p, min_p;
    int top_k, logprobs; /* logprobs >= 0: time kn_logprobs with that many alternatives instead */
} setting;

/* Median microseconds per token of the setting over the rows. */
static double time_setting(const setting *st, const float *rows, int V, int reps) {
    kiln_sampler_params p = kiln_sampler_default_params();
    p.temperature = st->temperature;
    p.top_k = st->top_k;
    p.top_p = st->top_p;
    p.min_p = st->min_p;
    p.seed = 1;
    kn_sampler s;
    if (kn_sampler_init(&s, &p, V)) return -1;
    const kn_kernels *ks = kn_kernels_get(KN_KERNELS_AUTO);
    kiln_top_logprob top[KILN_MAX_TOP_LOGPROBS];
    double t[MAX_REPS];
    volatile float sink = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_s();
        for (int i = 0; i < ROWS; i++) {
            const float *l = rows + (size_t)i * V;
            if (st->logprobs >= 0) sink += kn_logprobs(ks, l, V, i, (size_t)st->logprobs, top);
            else sink += (float)kn_sampler_sample(&s, l);
        }
        t[r] = (now_s() - t0) / ROWS * 1e6;
    }
    (void)sink;
    kn_sampler_free(&s);
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    int reps = 9;
    const char *vocabs = "32000,128256,201088";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-V")) vocabs = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [-r REPS] [-V VOCAB,...]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS) reps = reps < 1 ? 1 : MAX_REPS;
    const setting settings[] = {
        {"greedy", 0.0f, 0.95f, 0.05f, 40, -1},
        {"defaults (k 40, p 0.95, min-p 0.05, t 0.8)", 0.8f, 0.95f, 0.05f, 40, -1},
        {"top-k off (p 0.95, min-p 0.05)", 0.8f, 0.95f, 0.05f, 0, -1},
        {"top-p 0.95 alone", 0.8f, 0.95f, 0.0f, 0, -1},
        {"no truncation (t 1)", 1.0f, 1.0f, 0.0f, 0, -1},
        {"logprobs, 0 alternatives", 0, 0, 0, 0, 0},
        {"logprobs, 5 alternatives", 0, 0, 0, 0, 5},
    };
    const int ns = (int)(sizeof settings / sizeof settings[0]);
    printf("kernel set %s, median of %d passes over %d rows, microseconds per token\n\n",
           kn_kernels_get(KN_KERNELS_AUTO)->name, reps, ROWS);
    printf("| vocabulary | shape |");
    for (int k = 0; k < ns; k++) printf(" %s |", settings[k].name);
    printf("\n| ---: | --- |");
    for (int k = 0; k < ns; k++) printf(" ---: |");
    printf("\n");
    for (const char *v = vocabs; *v;) {
        const int V = atoi(v);
        if (V < 2) break;
        float *rows = malloc((size_t)ROWS * (size_t)V * sizeof *rows);
        if (!rows) return 1;
        for (int shape = 0; shape < 3; shape++) {
            fill(rows, V, shape);
            printf("| %d | %s |", V, shape_names[shape]);
            for (int k = 0; k < ns; k++) printf(" %.1f |", time_setting(&settings[k], rows, V, reps));
            printf("\n");
            fflush(stdout);
        }
        free(rows);
        v = strchr(v, ',');
        if (!v) break;
        v++;
    }
    return 0;
}
