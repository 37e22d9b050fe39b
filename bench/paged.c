/*
 * paged.c - paged KV against one contiguous cache per row (kiln_engine_params.kv_paging), side by
 * side on one model:
 *   1. memory: 8 rows whose prompts share a P-token prefix (published by a first request), each
 *      with 5 tokens of its own, generating 4 tokens; the peak of pool blocks used while they run
 *      (paged) against the KV the rows hold with paging off (8 full rows allocated, and the bytes of
 *      the positions they fill), and one row alone;
 *   2. decode speed at depth D: one row whose D-token prompt is in the prefix cache (a warm-up
 *      request published it), generating N tokens; tokens/s of the generation (result.gen_ms), the
 *      two engines alternating every repetition so a shared machine's load falls on both alike.
 * Usage: paged MODEL [-P PREFIX] [-D DEPTH] [-n N] [-r REPS] [-t THREADS]
 * Prints markdown tables.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct watch {
    kiln_engine *e;
    int32_t max_blocks;
    uint64_t max_kv_bytes;
} watch;

/* on_token: the peak of pool blocks used and of row KV memory (runs on the engine's thread). */
static int on_token(const kiln_token_event *ev, void *user) {
    (void)ev;
    watch *w = user;
    kiln_engine_stats st;
    kiln_engine_get_stats(w->e, &st);
    if (st.kv_blocks_used > w->max_blocks) w->max_blocks = st.kv_blocks_used;
    if (st.kv_bytes > w->max_kv_bytes) w->max_kv_bytes = st.kv_bytes;
    return 0;
}

static kiln_engine *engine(kiln_model *m, bool paged, int32_t n_ctx, int rows, int threads) {
    kiln_engine_params ep = kiln_engine_default_params();
    ep.kv_paging = paged;
    ep.n_ctx = n_ctx;
    ep.max_rows = rows;
    ep.prefill_chunk = 256;
    ep.n_threads = threads;
    ep.prompt_cache = 4ull << 30;
    kiln_engine *e = NULL;
    if (kiln_engine_new(m, &ep, &e)) fprintf(stderr, "paged: %s\n", kiln_last_error());
    return e;
}

/* Runs k requests prompt[0..n) + 5 tokens of their own (max tokens each) on e, watched; waits. */
static bool run_rows(kiln_engine *e, const kiln_token *prompt, int32_t n, int k, int max, watch *w,
                     kiln_generate_result *res) {
    static kiln_token p[8][1 << 15];
    kiln_request *r[8];
    kiln_generate_params gp = kiln_generate_default_params();
    gp.sampling.temperature = 0;
    gp.ignore_eos = true;
    gp.max_tokens = max;
    gp.on_token = w ? on_token : NULL;
    gp.user = w;
    for (int i = 0; i < k; i++) {
        memcpy(p[i], prompt, (size_t)n * sizeof *prompt);
        for (int j = 0; j < 5; j++) p[i][n + j] = 100 + i * 7 + j;
        if (kiln_engine_submit(e, p[i], (size_t)n + 5, &gp, &r[i])) return false;
    }
    bool ok = true;
    for (int i = 0; i < k; i++) {
        ok &= kiln_request_wait(r[i], res) == KILN_OK;
        kiln_request_free(r[i]);
    }
    return ok;
}

int main(int argc, char **argv) {
    int P = 2000, D = 4096, N = 64, reps = 5, threads = 1;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] == '-' && !v) return fprintf(stderr, "paged: %s needs a value\n", a), 2;
        if (strcmp(a, "-P") == 0) P = atoi(argv[++i]);
        else if (strcmp(a, "-D") == 0) D = atoi(argv[++i]);
        else if (strcmp(a, "-n") == 0) N = atoi(argv[++i]);
        else if (strcmp(a, "-r") == 0) reps = atoi(argv[++i]);
        else if (strcmp(a, "-t") == 0) threads = atoi(argv[++i]);
        else model = a;
    }
    if (!model || P < 16 || P > 30000 || D < 16 || D > 30000 || N < 2 || reps < 1 || reps > 64)
        return fprintf(stderr, "usage: paged MODEL [-P PREFIX] [-D DEPTH] [-n N] [-r REPS] [-t THREADS]\n"), 2;
    kiln_model *m;
    if (kiln_model_load(model, NULL, &m)) return fprintf(stderr, "paged: %s\n", kiln_last_error()), 1;
    const int32_t V = kiln_model_n_vocab(m);
    static kiln_token prompt[1 << 15];
    for (int i = 0; i < 32768; i++) prompt[i] = 1 + (kiln_token)((i * 131u + 7u) % (unsigned)(V - 1));

    /* 1. memory */
    const int32_t ctx = (P + 9 + 15) / 16 * 16 + 64;
    printf("## Memory: 8 rows sharing a %d-token prefix (5 own tokens, 4 generated each), -c %d\n\n", P, ctx);
    printf("| KV | one row | 8 rows | 8 rows / one row |\n| --- | ---: | ---: | ---: |\n");
    for (int paged = 1; paged >= 0; paged--) {
        uint64_t bytes[2];
        for (int k8 = 0; k8 < 2; k8++) {
            kiln_engine *e = engine(m, paged, ctx, 8, threads);
            if (!e) return 1;
            watch w = {.e = e};
            if (k8 && !run_rows(e, prompt, P - 5, 1, 1, NULL, NULL)) return 1; /* publishes the prefix */
            if (!run_rows(e, prompt, P, k8 ? 8 : 1, 4, &w, NULL)) return 1;
            kiln_engine_stats st;
            kiln_engine_get_stats(e, &st);
            bytes[k8] = paged ? (uint64_t)w.max_blocks * st.kv_block_bytes : w.max_kv_bytes;
            kiln_engine_free(e);
        }
        printf("| %s | %.1f MiB | %.1f MiB | %.2fx |\n", paged ? "paged (pool blocks used)" : "contiguous (rows held)",
               (double)bytes[0] / 1048576.0, (double)bytes[1] / 1048576.0, (double)bytes[1] / (double)bytes[0]);
    }

    /* 2. decode at depth D */
    kiln_engine *e[2] = {engine(m, false, D + 128, 1, threads), engine(m, true, D + 128, 1, threads)};
    if (!e[0] || !e[1]) return 1;
    for (int k = 0; k < 2; k++)
        if (!run_rows(e[k], prompt, D - 5, 1, 1, NULL, NULL)) return 1; /* the prompt into the cache */
    double tps[2][64];
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < 2; j++) {
            const int k = (r + j) % 2;
            kiln_generate_result res;
            if (!run_rows(e[k], prompt, D - 5, 1, N, NULL, &res)) return 1;
            tps[k][r] = (double)(res.n_generated - 1) / (res.gen_ms / 1000.0);
        }
    printf("\n## Decode at depth %d: one row, %d tokens, %d thread(s), %d repetitions alternating\n\n", D, N, threads,
           reps);
    printf("| KV | median t/s | min | max |\n| --- | ---: | ---: | ---: |\n");
    double med[2];
    for (int k = 0; k < 2; k++) {
        qsort(tps[k], (size_t)reps, sizeof(double), cmp_double);
        med[k] = tps[k][reps / 2];
        printf("| %s | %.2f | %.2f | %.2f |\n", k ? "paged" : "contiguous", med[k], tps[k][0], tps[k][reps - 1]);
    }
    printf("\npaged / contiguous: %.3f\n", med[1] / med[0]);
    kiln_engine_free(e[0]);
    kiln_engine_free(e[1]);
    kiln_model_free(m);
    return 0;
}
