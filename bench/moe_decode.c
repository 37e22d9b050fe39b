/*
 * moe_decode.c - the mixture-of-experts FFN of one decode step, alone, on a real-shaped model
 * (tools/kiln-gen presets qwen3-30b-a3b, gpt-oss-20b, cut to a few layers): the grouped path
 * (kn_moe_ffn: every routed expert's gate/up in one parallel run, down in one) against the plain
 * one-expert-at-a-time path (kn_moe_ffn_plain: two runs per expert), interleaved in one run.
 *
 * Per step: a fresh random row per layer (so each step routes to other experts, as decode does), the
 * MoE FFN of every MoE layer. Reported per variant: the median time of a step's MoE FFNs, and the GB/s
 * of the bytes it must read (the router and the routed experts' gate, up and down rows); that figure
 * set against the machine's read bandwidth (bench/probe) says how close the FFN is to its ceiling.
 * token_mb adds the other matrices a decode step reads (attention, the output head): the bytes per
 * token of the whole decode, whose ceiling is bandwidth / token_mb tokens/s (kiln bench's tg).
 *
 * Usage: build/bench/moe_decode MODEL.gguf [-t THREADS] [-r STEPS] [-n TOKENS per step (default 1)] [-c]
 * (-c times the calling thread's CPU time instead of the wall clock: with -t 1 on a loaded machine it
 * leaves out the time slices given to others, though not their share of the memory bandwidth)
 */
#include "kiln.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_cpu_clock; /* -c: this thread's CPU time (one thread on a loaded machine: others' slices left out) */

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

/* xorshift: the random activation rows */
static float rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Bytes one step must read in layer l: the router and each expert routed to (from s->moe_start). */
static double step_bytes(const kiln_model *m, const kn_scratch *s, int l) {
    const kn_moe *moe = &m->layers[l].moe;
    double b = (double)moe->router.rows * (double)moe->router.row_bytes;
    const double per = (double)moe->n_ff * ((double)moe->gate.row_bytes + (double)moe->up.row_bytes) +
                       (double)m->hp.n_embd * (double)moe->down.row_bytes;
    for (int e = 0; e < moe->n_expert; e++) b += s->moe_start[e + 1] > s->moe_start[e] ? per : 0;
    return b;
}

/* Bytes of every matrix a decode step reads whole besides the MoE FFNs (attention, dense FFNs, the
 * output head; the token embedding gives one row). */
static double other_bytes(const kiln_model *m) {
    double b = (double)m->output.rows * (double)m->output.row_bytes;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const kn_weight *lw[KN_LAYER_MAX_WEIGHTS];
        const int nw = kn_layer_weights(&m->layers[l], lw, KN_LAYER_MAX_WEIGHTS);
        const kn_moe *moe = &m->layers[l].moe;
        for (int i = 0; i < nw; i++)
            if (lw[i] != &moe->router && lw[i] != &moe->gate && lw[i] != &moe->up && lw[i] != &moe->down)
                b += (double)lw[i]->rows * (double)lw[i]->row_bytes;
    }
    return b;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int threads = 1, steps = 20, N = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c")) g_cpu_clock = 1;
        else path = argv[i];
    }
    if (!path || threads < 1 || steps < 1 || steps > 10000 || N < 1 || N > 512) {
        fprintf(stderr, "usage: moe_decode MODEL.gguf [-t THREADS] [-r STEPS] [-n TOKENS]\n");
        return 2;
    }
    kiln_model *m = NULL;
    if (kiln_model_load(path, NULL, &m) != KILN_OK) {
        fprintf(stderr, "moe_decode: %s\n", kiln_last_error());
        return 1;
    }
    kn_scratch s;
    if (kn_scratch_init(&s, m, N, 16, threads) != KILN_OK) {
        fprintf(stderr, "moe_decode: %s\n", kiln_last_error());
        return 1;
    }
    const int64_t d = m->hp.n_embd;
    int n_moe = 0;
    for (int l = 0; l < m->hp.n_layer; l++) n_moe += m->layers[l].ffn == KN_FFN_MOE;
    double *t_grouped = calloc((size_t)steps, sizeof(double)), *t_plain = calloc((size_t)steps, sizeof(double));
    double *b_step = calloc((size_t)steps, sizeof(double));
    if (!n_moe || !t_grouped || !t_plain || !b_step) {
        fprintf(stderr, "moe_decode: no MoE layer in %s (or out of memory)\n", path);
        return 1;
    }
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int r = 0; r < steps; r++) {
        const uint64_t step_seed = seed + (uint64_t)r * 7919;
        for (int v = 0; v < 2; v++) { /* the same rows for both variants, the order alternating per step */
            const int grouped = (r & 1) ^ v;
            uint64_t rs = step_seed;
            double t = 0, bytes = 0;
            for (int l = 0; l < m->hp.n_layer; l++) {
                if (m->layers[l].ffn != KN_FFN_MOE) continue;
                for (int64_t i = 0; i < N * d; i++) s.xb[i] = rnd(&rs);
                const double t0 = now_s();
                if (grouped) kn_moe_ffn(m, &s, l, N);
                else kn_moe_ffn_plain(m, &s, l, N);
                t += now_s() - t0;
                bytes += step_bytes(m, &s, l);
            }
            if (grouped) t_grouped[r] = t;
            else t_plain[r] = t;
            b_step[r] = bytes;
        }
    }
    double ratio[10000];
    for (int r = 0; r < steps; r++) ratio[r] = t_plain[r] / t_grouped[r];
    const double bytes = median(b_step, steps), tg = median(t_grouped, steps), tp = median(t_plain, steps);
    printf("{\"model\": \"%s\", \"threads\": %d, \"tokens\": %d, \"moe_layers\": %d, \"steps\": %d, "
           "\"clock\": \"%s\",\n",
           path, threads, N, n_moe, steps, g_cpu_clock ? "cpu" : "wall");
    printf(" \"mb_per_step\": %.1f, \"grouped_ms\": %.2f, \"plain_ms\": %.2f, \"grouped_gbs\": %.1f, "
           "\"plain_gbs\": %.1f, \"speedup_median\": %.3f,\n \"token_mb\": %.1f}\n",
           bytes / 1e6, tg * 1e3, tp * 1e3, bytes / tg / 1e9, bytes / tp / 1e9, median(ratio, steps),
           (bytes + other_bytes(m)) / 1e6);
    free(t_grouped);
    free(t_plain);
    free(b_step);
    kn_scratch_free(&s);
    kiln_model_free(m);
    return 0;
}
