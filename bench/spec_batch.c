/*
 * spec_batch.c - aggregate generation throughput of an engine with R rows, without speculation and
 * with a speculative method, side by side: each repetition submits R greedy requests (end of text
 * ignored, N new tokens each) to an engine without speculation and to one with the method, in
 * alternating order, and times each batch from submission to the last completion. Request i's prompt
 * is the text of FILE (tokenized, BOS added) with i tokens dropped from its front (so rows differ), or
 * pseudo-random tokens without FILE. The warm-up puts every prompt in the prefix cache, so the timed
 * batches prefill one token per row and measure generation. Next to the wall-clock rate it reports
 * the process's CPU time per generated token for each engine (only the engine being timed runs, the
 * other's threads sleep): on a shared, loaded machine the wall clock mostly measures the load, while
 * the CPU time shows the work (and any spinning) an engine does itself.
 *
 * Usage: spec_batch MODEL --spec ngram|draft [--draft-model D] [--spec-max K] [-R ROWS] [-n N]
 *                   [-r REPS] [-t THREADS] [-f FILE]
 * Prints one markdown table row: rows, none t/s, method t/s, acceptance, speedup, then the median CPU
 * ms per token of each engine and their ratio.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[*len] = 0;
    return buf;
}

/* Runs R requests on e; aggregate generated tokens/s, the process's CPU ms per generated token into
 * *cpu_ms. Adds proposals and acceptances. */
static double run_batch(kiln_engine *e, kiln_token **prompts, const size_t *n, int R, int N, long *prop, long *acc,
                        double *cpu_ms) {
    kiln_request *req[256];
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = N;
    gp.ignore_eos = true;
    gp.sampling.temperature = 0;
    const double t0 = now_s(), c0 = cpu_s();
    for (int i = 0; i < R; i++)
        if (kiln_engine_submit(e, prompts[i], n[i], &gp, &req[i])) return -1;
    long toks = 0;
    for (int i = 0; i < R; i++) {
        kiln_generate_result res;
        if (kiln_request_wait(req[i], &res)) return -1;
        toks += res.n_generated;
        *prop += res.n_spec_proposed;
        *acc += res.n_spec_accepted;
        kiln_request_free(req[i]);
    }
    const double wall = now_s() - t0;
    *cpu_ms = toks ? 1e3 * (cpu_s() - c0) / (double)toks : 0;
    return (double)toks / wall;
}

int main(int argc, char **argv) {
    const char *model = NULL, *draft_path = NULL, *file = NULL, *method = "ngram";
    int R = 8, N = 64, reps = 3, threads = 0, kmax = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v && a[0] == '-') {
            fprintf(stderr, "spec_batch: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--spec") == 0) method = v, i++;
        else if (strcmp(a, "--draft-model") == 0) draft_path = v, i++;
        else if (strcmp(a, "--spec-max") == 0) kmax = atoi(v), i++;
        else if (strcmp(a, "-R") == 0) R = atoi(v), i++;
        else if (strcmp(a, "-n") == 0) N = atoi(v), i++;
        else if (strcmp(a, "-r") == 0) reps = atoi(v), i++;
        else if (strcmp(a, "-t") == 0) threads = atoi(v), i++;
        else if (strcmp(a, "-f") == 0) file = v, i++;
        else if (a[0] != '-') model = a;
        else {
            fprintf(stderr, "spec_batch: unknown option %s\n", a);
            return 2;
        }
    }
    kiln_spec_method m_spec;
    if (!model || R < 1 || R > 256 || N < 1 || reps < 1 || kiln_spec_method_parse(method, &m_spec)) {
        fprintf(stderr, "usage: spec_batch MODEL --spec ngram|draft [--draft-model D] [-R ROWS] [-n N] [-r REPS] "
                        "[-t THREADS] [-f FILE]\n");
        return 2;
    }
    kiln_model *m = NULL, *d = NULL;
    if (kiln_model_load(model, NULL, &m) || (draft_path && kiln_model_load(draft_path, NULL, &d))) {
        fprintf(stderr, "spec_batch: %s\n", kiln_last_error());
        return 1;
    }
    kiln_token *base = NULL;
    size_t nb = 0;
    if (file) {
        size_t len;
        char *text = read_file(file, &len);
        if (!text) return 1;
        kiln_tokenize(m, text, len, true, false, NULL, 0, &nb);
        base = malloc(sizeof *base * (nb + 1));
        if (kiln_tokenize(m, text, len, true, false, base, nb + 1, &nb)) return 1;
        free(text);
    } else {
        nb = 200;
        base = malloc(sizeof *base * nb);
        uint32_t x = 12345u;
        for (size_t i = 0; i < nb; i++) {
            x = x * 1664525u + 1013904223u;
            base[i] = (kiln_token)((x >> 8) % (uint32_t)kiln_model_n_vocab(m));
        }
    }
    kiln_token *prompts[256];
    size_t n[256];
    for (int i = 0; i < R; i++) {
        const size_t drop = (size_t)i < nb / 2 ? (size_t)i : 0;
        prompts[i] = base + drop;
        n[i] = nb - drop;
    }
    kiln_engine *e[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        kiln_engine_params ep = kiln_engine_default_params();
        ep.n_ctx = (int32_t)nb + N + 8;
        ep.max_rows = R;
        ep.n_threads = threads;
        ep.prompt_cache = (uint64_t)1 << 30;
        ep.spec = k ? m_spec : KILN_SPEC_NONE;
        ep.draft_model = k ? d : NULL;
        ep.spec_max = kmax;
        if (kiln_engine_new(m, &ep, &e[k])) {
            fprintf(stderr, "spec_batch: %s\n", kiln_last_error());
            return 1;
        }
    }
    long prop = 0, acc = 0, unused = 0;
    double *t = calloc((size_t)reps * 4, sizeof *t), *c = t + 2 * reps, ignored;
    run_batch(e[0], prompts, n, R, N, &unused, &unused, &ignored); /* warm-up */
    run_batch(e[1], prompts, n, R, N, &unused, &unused, &ignored);
    for (int r = 0; r < reps; r++)
        for (int k0 = 0; k0 < 2; k0++) {
            const int k = r % 2 ? 1 - k0 : k0;
            t[k * reps + r] =
                run_batch(e[k], prompts, n, R, N, k ? &prop : &unused, k ? &acc : &unused, &c[k * reps + r]);
        }
    for (int k = 0; k < 4; k++) qsort(t + k * reps, (size_t)reps, sizeof *t, cmp_double);
    const double a = t[reps / 2], b = t[reps + reps / 2], ca = c[reps / 2], cb = c[reps + reps / 2];
    printf(
        "| %s | rows %d | gen%d, prompt %zu | none %.2f t/s | %s %.2f t/s | accepted %ld of %ld (%.0f%%) | x%.2f |\n",
        strrchr(model, '/') ? strrchr(model, '/') + 1 : model, R, N, nb, a, method, b, acc, prop,
        prop ? 100.0 * acc / prop : 0.0, a > 0 ? b / a : 0);
    printf("| cpu ms/token: none %.1f | %s %.1f | x%.3f |\n", ca, method, cb, cb > 0 ? ca / cb : 0);
    kiln_engine_free(e[0]);
    kiln_engine_free(e[1]);
    kiln_model_free(d);
    kiln_model_free(m);
    free(base);
    free(t);
    return 0;
}
