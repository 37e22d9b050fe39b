/*
 * gstore.c - what the grammar matcher's steps cost (src/sample/gstore.c), on the corpus grammars
 * of tests/grammars and generated texts in their languages. For each grammar, the best and the
 * median of ROUNDS rounds of:
 *
 *   compile   kn_gbnf_compile of the grammar text (µs);
 *   cached    kn_gstore_step on a memoized transition, along the text (each step needs the previous
 *             one: load latency) and over the text's (state, byte) pairs listed beforehand
 *             (independent steps, as a token-trie walk makes them) (ns per step);
 *   uncached  kn_gstore_step_slow over the text's distinct (state, byte) pairs: the expansion and
 *             interning a step does the first time, its target state already known (ns per step);
 *   first     a fresh store walking the text, each step at a distinct pair's first occurrence
 *             timed alone (less the clock's cost): the first-time cost including new states and
 *             their transition tables (ns per step).
 *
 * Usage: build/bench/gstore [-r ROUNDS] [-n BYTES]   (defaults 7, 200000; run from the repository
 *        root, where tests/grammars is)
 */
#include "base/base.h"
#include "sample/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 64

static double best(const double *v, int n) {
    double b = v[0];
    for (int i = 1; i < n; i++) b = v[i] < b ? v[i] : b;
    return b;
}

/* The median (sorts v). */
static double med(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return v[n / 2];
}

/* A JSON text of about n bytes: objects, arrays, strings with escapes and UTF-8, numbers. */
static size_t gen_json(char *t, size_t n) {
    size_t k = (size_t)sprintf(t, "[");
    for (int i = 0; k < n; i++)
        k += (size_t)sprintf(t + k,
                             "%s{\"id\": %d, \"name\": \"item %d caf\xc3\xa9 \\u00e9\", \"tags\": [\"a\", \"bc\"], "
                             "\"ok\": %s, \"v\": %d.%de-%d}",
                             i ? ",\n  " : "", i, i * 7, i % 2 ? "true" : "false", i, i % 10, i % 5);
    return k + (size_t)sprintf(t + k, "]");
}

/* A C-like program of about n bytes in the language of c.gbnf. */
static size_t gen_c(char *t, size_t n) {
    size_t k = 0;
    for (int i = 0; k < n; i++)
        k += (size_t)sprintf(t + k,
                             "int f%d(int a, float b) {\n  int x = a * %d + b;\n  // step %d\n  while (x < %d) "
                             "{ x = x + g(x, 2); }\n  if (x >= a) { return x; } else { return -b; }\n}\n",
                             i, i, i, i * 3);
    return k;
}

static double now_ns(void) { return kn_now_ms() * 1e6; }

static int bench(const char *file, size_t (*gen)(char *, size_t), size_t n, int rounds) {
    char path[256];
    snprintf(path, sizeof path, "tests/grammars/%s", file);
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "%s: cannot open (run from the repository root)\n", path), 1;
    static char src[1 << 16];
    size_t slen = fread(src, 1, sizeof src, f);
    fclose(f);
    char *text = malloc(n + 1024);
    int32_t *ps = malloc((n + 1024) * sizeof *ps);
    uint8_t *pb = malloc(n + 1024);
    size_t *first_at = malloc((n + 1024) * sizeof *first_at);
    if (!text || !ps || !pb || !first_at) return 1;
    size_t tl = gen(text, n);
    double t_comp[MAX_ROUNDS], t_dep[MAX_ROUNDS], t_ind[MAX_ROUNDS], t_unc[MAX_ROUNDS], t_first[MAX_ROUNDS];
    size_t n_pairs = 0;
    int32_t n_states = 0;
    volatile int32_t sink = 0;
    for (int r = 0; r < rounds; r++) {
        double a = now_ns();
        kiln_grammar *g;
        if (kn_gbnf_compile(src, slen, &g)) return fprintf(stderr, "%s: %s\n", file, kn_error_msg()), 1;
        t_comp[r] = (now_ns() - a) / 1e3;
        kn_gstore *fresh, *warm;
        if (kn_gstore_new(g, 0, &fresh) || kn_gstore_new(g, 0, &warm)) return 1;
        /* the walk's distinct (state, byte) pairs, and where in the text each first occurs */
        int32_t s = kn_gstore_start(warm);
        n_pairs = 0;
        uint64_t *seen = NULL;
        int32_t cap = 0;
        for (size_t i = 0; i < tl; i++) {
            if (s >= cap) {
                int32_t nc = cap ? cap * 2 : 1024;
                while (s >= nc) nc *= 2;
                uint64_t *ns = realloc(seen, (size_t)nc * 32);
                if (!ns) return 1;
                seen = ns;
                memset(seen + (size_t)cap * 4, 0, (size_t)(nc - cap) * 32);
                cap = nc;
            }
            uint8_t b = (uint8_t)text[i];
            if (!(seen[(size_t)s * 4 + (b >> 6)] >> (b & 63) & 1)) {
                seen[(size_t)s * 4 + (b >> 6)] |= 1ull << (b & 63);
                ps[n_pairs] = s, pb[n_pairs] = b, first_at[n_pairs++] = i;
            }
            s = kn_gstore_step(warm, s, b);
            if (s + 1 > n_states) n_states = s + 1;
        }
        free(seen);
        if (!kn_gstore_accepting(warm, s)) return fprintf(stderr, "%s: the text is not accepted\n", file), 1;
        /* first time: a fresh store (same ids: the store is deterministic) walks the text, and each
         * step at a first occurrence is timed alone, less the clock's own cost */
        double clock_cost = now_ns();
        for (int k = 0; k < 1000; k++) sink += (int32_t)now_ns();
        clock_cost = (now_ns() - clock_cost) / 1001;
        double t = 0;
        s = kn_gstore_start(fresh);
        for (size_t i = 0, k = 0; i < tl; i++) {
            if (k < n_pairs && first_at[k] == i) {
                a = now_ns();
                s = kn_gstore_step(fresh, s, (uint8_t)text[i]);
                t += now_ns() - a - clock_cost;
                k++;
            } else {
                s = kn_gstore_step(fresh, s, (uint8_t)text[i]);
            }
        }
        t_first[r] = t / (double)n_pairs;
        /* cached, dependent */
        a = now_ns();
        s = kn_gstore_start(warm);
        for (size_t i = 0; i < tl; i++) s = kn_gstore_step(warm, s, (uint8_t)text[i]);
        t_dep[r] = (now_ns() - a) / (double)tl;
        sink += s;
        /* cached, independent: the walk's steps listed beforehand, in text order */
        int32_t *st = malloc(tl * sizeof *st);
        if (!st) return 1;
        s = kn_gstore_start(warm);
        for (size_t i = 0; i < tl; i++) st[i] = s, s = kn_gstore_step(warm, s, (uint8_t)text[i]);
        a = now_ns();
        for (size_t i = 0; i < tl; i++) sink += kn_gstore_step(warm, st[i], (uint8_t)text[i]);
        t_ind[r] = (now_ns() - a) / (double)tl;
        free(st);
        /* uncached: the slow path over the distinct pairs */
        a = now_ns();
        for (size_t i = 0; i < n_pairs; i++) sink += kn_gstore_step_slow(warm, ps[i], pb[i]);
        t_unc[r] = (now_ns() - a) / (double)n_pairs;
        kn_gstore_free(fresh);
        kn_gstore_free(warm);
        kiln_grammar_free(g);
    }
    printf("| %s | %zu | %d | %zu | %.1f / %.1f | %.2f / %.2f | %.2f / %.2f | %.0f / %.0f | %.0f / %.0f |\n", file, tl,
           n_states, n_pairs, best(t_comp, rounds), med(t_comp, rounds), best(t_dep, rounds), med(t_dep, rounds),
           best(t_ind, rounds), med(t_ind, rounds), best(t_unc, rounds), med(t_unc, rounds), best(t_first, rounds),
           med(t_first, rounds));
    free(text), free(ps), free(pb), free(first_at);
    return 0;
}

int main(int argc, char **argv) {
    int rounds = 7;
    size_t n = 200000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n = (size_t)atol(argv[i + 1]);
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || n < 1000 || n > (64u << 20))
        return fprintf(stderr, "usage: %s [-r ROUNDS (1..%d)] [-n BYTES (1000..64Mi)]\n", argv[0], MAX_ROUNDS), 2;
    printf("best / median of %d rounds\n\n", rounds);
    printf(
        "| grammar | text bytes | states | distinct steps | compile µs | cached dependent ns | cached independent ns "
        "| uncached ns | first time ns |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    return bench("json.gbnf", gen_json, n, rounds) || bench("c.gbnf", gen_c, n, rounds);
}
