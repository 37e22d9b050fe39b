/*
 * bench.c - `kiln bench`: prompt-processing (pp) and token-generation (tg) throughput, reported like
 * llama-bench: for each thread count, a pp test (one forward pass over P prompt tokens from an
 * empty context) and a tg test (N tokens decoded one at a time from an empty context), each run once
 * as a warm-up and then R times; the table gives the median and the min..max spread of tokens/s.
 * Token ids are fixed pseudo-random values, so runs are comparable. With -d D a test first evaluates
 * D tokens untimed (as llama-bench's depth) and its runs then follow one another in that context
 * (run r starts after D + r * N tokens): decode speed at a long context, where the KV cache type
 * matters, without refilling the context for every run.
 *
 * With --spec METHOD (and --draft-model, --spec-max) a generation test replaces them for each
 * thread count: N tokens generated greedily (or with the sampling flags given, one seed for both),
 * end of text ignored, from the prompt of -f FILE (the text tokenized, BOS added; without -f the
 * pseudo-random tokens of the pp test) with no speculation and with the method, alternating within
 * each repetition so that both see the same machine load; the table gives each one's median
 * tokens/s, the method's acceptance and the speedup.
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

/* One generation of tg tokens from prompt[n] with sampling sp (sessions s0 without speculation, s1 with);
 * tokens/s into *tps, proposals and acceptances added to *prop and *acc. False on failure. */
static bool gen_once(kiln_session *s, const kiln_token *prompt, size_t n, int tg, const kiln_sampler_params *sp,
                     double *tps, long *prop, long *acc) {
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = tg;
    gp.ignore_eos = true;
    gp.sampling = *sp;
    kiln_generate_result res;
    if (kiln_generate_tokens(s, prompt, n, &gp, &res)) return false;
    *tps = res.gen_ms > 0 ? res.n_generated * 1000.0 / res.gen_ms : 0;
    *prop += res.n_spec_proposed;
    *acc += res.n_spec_accepted;
    return true;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The generation test of --spec (see the file comment) at thread count threads. */
static int spec_test(kiln_model *m, kiln_model *draft, const cli_common *c, const cli_spec *spec, const char *name,
                     const kiln_token *prompt, size_t n, int tg, int reps, int threads, bool json) {
    kiln_session *s[2] = {NULL, NULL};
    int rc = 0;
    double *t = malloc(sizeof *t * (size_t)reps * 2);
    for (int k = 0; k < 2 && t; k++) {
        kiln_session_params sp = kiln_session_default_params();
        sp.n_ctx = (int32_t)n + tg + 1;
        sp.n_threads = threads;
        sp.kv_type = c->kv_type;
        sp.spec = k ? spec->method : KILN_SPEC_NONE;
        sp.draft_model = k ? draft : NULL;
        sp.spec_max = spec->max;
        if (kiln_session_new(m, &sp, &s[k])) {
            fprintf(stderr, "kiln bench: cannot create a session: %s\n", kiln_last_error());
            rc = CLI_EXIT_FAIL;
        }
    }
    long prop = 0, acc = 0, unused = 0;
    double warm;
    kiln_sampler_params smp = kiln_sampler_default_params(); /* greedy unless sampling flags are given */
    smp.temperature = 0;
    if (c->sp_set) smp = cli_sampler_params(c, m);
    for (int k = 0; !rc && k < 2; k++) /* warm-up */
        if (!gen_once(s[k], prompt, n, tg, &smp, &warm, k ? &prop : &unused, k ? &acc : &unused)) rc = CLI_EXIT_FAIL;
    prop = acc = 0;
    for (int r = 0; !rc && r < reps; r++)
        for (int k0 = 0; k0 < 2; k0++) {
            const int k = r % 2 ? 1 - k0 : k0; /* none first in even repetitions, the method first in odd */
            if (!gen_once(s[k], prompt, n, tg, &smp, &t[k * reps + r], k ? &prop : &unused, k ? &acc : &unused))
                rc = CLI_EXIT_FAIL;
        }
    if (rc && t) fprintf(stderr, "kiln bench: %s\n", kiln_last_error());
    if (!rc && t) {
        const double base = median(t, reps), with = median(t + reps, reps);
        const int nt = kiln_session_n_threads(s[1]);
        if (json)
            printf("{\"model\": \"%s\", \"test\": \"gen%d\", \"spec\": \"%s\", \"threads\": %d, \"reps\": %d, "
                   "\"prompt_tokens\": %zu, \"tps_none\": %.3f, \"tps_spec\": %.3f, \"speedup\": %.3f, "
                   "\"proposed\": %ld, \"accepted\": %ld}\n",
                   name, tg, kiln_spec_method_name(spec->method), nt, reps, n, base, with, base > 0 ? with / base : 0,
                   prop, acc);
        else
            printf("| %s | %d | gen%d, prompt %zu | none %.2f t/s | %s %.2f t/s | accepted %ld of %ld (%.0f%%) | "
                   "x%.2f |\n",
                   name, nt, tg, n, base, kiln_spec_method_name(spec->method), with, acc, prop,
                   prop ? 100.0 * acc / prop : 0.0, base > 0 ? with / base : 0);
        fflush(stdout);
    }
    kiln_session_free(s[0]);
    kiln_session_free(s[1]);
    free(t);
    return rc;
}

int cli_bench(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    int pp = DEFAULT_PP, tg = DEFAULT_TG, reps = DEFAULT_REPS, threads[MAX_THREAD_LIST], n_threads = 0, depth = 0;
    bool json = false;
    cli_spec spec = {0};
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
        int r = cli_parse_spec(argc, argv, &i, &spec, "bench");
        if (r == 0) r = cli_parse_common(argc, argv, &i, &c);
        if (r == 1) continue;
        if (r == 0) fprintf(stderr, "kiln bench: unknown option '%s'\n", a);
        cli_usage("bench", true);
        return CLI_EXIT_USAGE;
    }
    if (pp == 0 && tg == 0) {
        fprintf(stderr, "kiln bench: nothing to do (-p 0 and -n 0)\n");
        return CLI_EXIT_USAGE;
    }
    if (!cli_spec_resolve(&spec, "bench")) return CLI_EXIT_USAGE;
    const bool spec_on = spec.method_given || spec.draft;
    if (spec_on && tg == 0) {
        fprintf(stderr, "kiln bench: --spec needs tokens to generate (-n)\n");
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    kiln_model *m = cli_load_model(&c, false);
    if (!m) return CLI_EXIT_FAIL;
    bool draft_ok = true;
    kiln_model *draft = cli_load_draft(&spec, &c, "bench", &draft_ok);
    kiln_token *text_ids = NULL;
    size_t n_text = 0;
    if (draft_ok && spec_on && c.file) {
        size_t flen;
        char *text = cli_read_file(c.file, &flen);
        if (!text || kiln_tokenize(m, text, flen, true, false, NULL, 0, &n_text) != KILN_ERR_BUFFER_SMALL ||
            !(text_ids = malloc(sizeof *text_ids * (n_text + 1))) ||
            kiln_tokenize(m, text, flen, true, false, text_ids, n_text + 1, &n_text) != KILN_OK) {
            fprintf(stderr, "kiln bench: cannot tokenize '%s'\n", c.file);
            draft_ok = false;
        }
        free(text);
    }
    if (!draft_ok) {
        free(text_ids);
        kiln_model_free(draft);
        kiln_model_free(m);
        return CLI_EXIT_FAIL;
    }
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
    if (!json && !spec_on) {
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
        for (int test = 0; test < 2 && !spec_on; test++) { /* with --spec: the generation test alone */
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
        if (spec_on) {
            const kiln_token *pr = text_ids ? text_ids : toks;
            const size_t n = text_ids ? n_text : (size_t)(pp > 0 ? pp : 1);
            if ((rc = spec_test(m, draft, &c, &spec, name, pr, n, tg, reps, threads[ti], json))) goto done;
        }
    }
done:
    free(text_ids);
    kiln_model_free(draft);
    free(toks);
    free(tps);
    kiln_model_free(m);
    return rc;
}
