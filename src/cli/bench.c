/*
 * bench.c - `kiln bench`: prompt-processing (pp) and token-generation (tg) throughput, reported like
 * llama-bench: for each thread count, a pp test (one forward pass over P prompt tokens from an
 * empty context) and a tg test (N tokens decoded one at a time from an empty context), each run once
 * as a warm-up and then R times; the table gives the median and the min..max spread of tokens/s.
 * Token ids are fixed pseudo-random values, so runs are comparable. With -d D a test first evaluates
 * D tokens untimed (as llama-bench's depth) and its runs then follow one another in that context
 * (run r starts after D + r * N tokens): decode speed at a long context, where the KV cache type
 * matters, without refilling the context for every run.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Parses "1,2,4" into up to cap positive ints; returns the count, or -1 when malformed. */
static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > KILN_N_THREADS_MAX || n == cap) return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

/* Empties the session and evaluates toks[0 .. depth) untimed in chunks of batch; false on failure. */
static bool fill(kiln_session *s, const kiln_token *toks, int depth, int batch) {
    kiln_session_reset(s);
    for (int i = 0; i < depth; i += batch)
        if (kiln_session_eval(s, toks + i, (size_t)(depth - i < batch ? depth - i : batch), false)) return false;
    return true;
}

/* One timed run: tokens/s of a pp run (pp > 0) or a tg run (tg > 0), from an empty context (depth
 * 0) or after the tokens already in the session. -1 on failure. */
static double run_once(kiln_session *s, const kiln_token *toks, int pp, int tg, int depth) {
    if (depth == 0) kiln_session_reset(s);
    toks += kiln_session_n_past(s);
    double t0 = now_s();
    if (pp > 0) {
        if (kiln_session_eval(s, toks, (size_t)pp, false)) return -1;
        return pp / (now_s() - t0);
    }
    for (int i = 0; i < tg; i++)
        if (kiln_session_eval(s, &toks[i], 1, false)) return -1;
    return tg / (now_s() - t0);
}

#define DEFAULT_PP      512 /* prompt tokens of the pp test */
#define DEFAULT_TG      128 /* generated tokens of the tg test */
#define DEFAULT_REPS    5
#define MAX_TOKENS_TEST (1 << 16) /* -p and -n at most */
#define MAX_REPS        1000
#define MAX_THREAD_LIST 16     /* thread counts in one -t list */
#define TOKENS_SEED     12345u /* of the LCG drawing the test tokens (Numerical Recipes' constants) */

int cli_bench(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    int pp = DEFAULT_PP, tg = DEFAULT_TG, reps = DEFAULT_REPS, threads[MAX_THREAD_LIST], n_threads = 0, depth = 0;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("bench", false);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (strcmp(a, "-p") == 0 || strcmp(a, "--n-prompt") == 0) {
            if (!cli_int(a, v, 0, MAX_TOKENS_TEST, &pp)) return CLI_EXIT_USAGE;
            i++;
            continue;
        }
        if (strcmp(a, "-n") == 0 || strcmp(a, "--n-gen") == 0) {
            if (!cli_int(a, v, 0, MAX_TOKENS_TEST, &tg)) return CLI_EXIT_USAGE;
            i++;
            continue;
        }
        if (strcmp(a, "-d") == 0 || strcmp(a, "--depth") == 0) {
            if (!cli_int(a, v, 0, MAX_TOKENS_TEST, &depth)) return CLI_EXIT_USAGE;
            i++;
            continue;
        }
        if (strcmp(a, "-r") == 0 || strcmp(a, "--repetitions") == 0) {
            if (!cli_int(a, v, 1, MAX_REPS, &reps)) return CLI_EXIT_USAGE;
            i++;
            continue;
        }
        if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (!v || (n_threads = parse_list(v, threads, MAX_THREAD_LIST)) < 1) {
                fprintf(stderr, "kiln bench: -t takes a comma-separated list of thread counts, e.g. 1,2\n");
                return CLI_EXIT_USAGE;
            }
            i++;
            continue;
        }
        int r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1) continue;
        if (r == 0) fprintf(stderr, "kiln bench: unknown option '%s'\n", a);
        cli_usage("bench", true);
        return CLI_EXIT_USAGE;
    }
    if (pp == 0 && tg == 0) {
        fprintf(stderr, "kiln bench: nothing to do (-p 0 and -n 0)\n");
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    kiln_model *m = cli_load_model(&c, false);
    if (!m) return CLI_EXIT_FAIL;
    if (n_threads == 0) threads[n_threads++] = 0; /* the library default */
    const int n_ctx = depth + (depth > 0 ? reps + 1 : 1) * (pp > tg ? pp : tg) + 1;
    const int V = kiln_model_n_vocab(m);
    kiln_token *toks = malloc(sizeof *toks * (size_t)n_ctx);
    double *tps = malloc(sizeof *tps * (size_t)reps);
    int rc = 0;
    if (!toks || !tps) {
        rc = CLI_EXIT_FAIL;
        goto done;
    }
    uint32_t x = TOKENS_SEED;
    for (int i = 0; i < n_ctx; i++) {
        x = x * 1664525u + 1013904223u;
        toks[i] = (kiln_token)((x >> 8) % (uint32_t)V);
    }
    const char *name = strrchr(c.model, '/') ? strrchr(c.model, '/') + 1 : c.model;
    if (!json) {
        printf("| model | size | params | kernels | threads | test | t/s (median) | min .. max |\n");
        printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |\n");
    }
    for (int ti = 0; ti < n_threads; ti++) {
        kiln_session_params sp = kiln_session_default_params();
        sp.n_ctx = n_ctx;
        sp.n_batch = pp > 0 ? pp : depth > 0 ? 512 : 1;
        sp.n_threads = threads[ti];
        sp.kv_type = c.kv_type;
        sp.kv_type_v = c.kv_type_v;
        sp.kv_rotate = c.kv_rotate;
        kiln_session *s = NULL;
        if (kiln_session_new(m, &sp, &s)) {
            fprintf(stderr, "kiln bench: cannot create a session: %s\n", kiln_last_error());
            rc = CLI_EXIT_FAIL;
            goto done;
        }
        const int nt = kiln_session_n_threads(s);
        for (int test = 0; test < 2; test++) {
            int p = test == 0 ? pp : 0, g = test == 1 ? tg : 0;
            if (p == 0 && g == 0) continue;
            if ((depth > 0 && !fill(s, toks, depth, sp.n_batch)) || run_once(s, toks, p, g, depth) < 0) { /* warm-up */
                fprintf(stderr, "kiln bench: %s\n", kiln_session_last_error(s));
                rc = CLI_EXIT_FAIL;
                kiln_session_free(s);
                goto done;
            }
            for (int r = 0; r < reps; r++) tps[r] = run_once(s, toks, p, g, depth);
            qsort(tps, (size_t)reps, sizeof *tps, cmp_double);
            double med = reps % 2 ? tps[reps / 2] : 0.5 * (tps[reps / 2 - 1] + tps[reps / 2]);
            char testname[32];
            snprintf(testname, sizeof testname, "%s%d", test == 0 ? "pp" : "tg", test == 0 ? p : g);
            if (depth > 0) snprintf(testname + strlen(testname), sizeof testname - strlen(testname), " @ d%d", depth);
            if (json) {
                printf("{\"model\": \"%s\", \"kernels\": \"%s\", \"test\": \"%s\", \"threads\": %d, \"reps\": %d, "
                       "\"tps_median\": %.3f, \"tps_min\": %.3f, \"tps_max\": %.3f}\n",
                       name, kiln_model_kernels(m), testname, nt, reps, med, tps[0], tps[reps - 1]);
            } else {
                printf("| %s | %.1f MiB | %.2f M | %s | %d | %s | %.2f | %.2f .. %.2f |\n", name,
                       (double)kiln_model_size_bytes(m) / 1048576.0, (double)kiln_model_n_params(m) / 1e6,
                       kiln_model_kernels(m), nt, testname, med, tps[0], tps[reps - 1]);
            }
            fflush(stdout);
        }
        kiln_session_free(s);
    }
done:
    free(toks);
    free(tps);
    kiln_model_free(m);
    return rc;
}
