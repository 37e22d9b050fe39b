/*
 * grammar_mask.c - token-mask speed of constrained decoding on real vocabularies.
 *
 * For each vocabulary (a GGUF file, vocabulary-only is enough) and each JSON Schema of the test
 * material (default ../shared/data/json-schemas: {"schema": ..., "tests": [{"valid", "data"}]}),
 * the schema is compiled (kiln_grammar_compile, KILN_GRAMMAR_JSON_SCHEMA) and every valid instance
 * is replayed token by token: its compact JSON text is tokenized with the vocabulary, and at each
 * position the matcher's mask is computed (kn_gmatch_mask, timed), the instance's next token is
 * checked against it, and the token is accepted (kn_gmatch_accept, timed); after the last token
 * the mask must allow end-of-generation. Each instance gets a fresh matcher, as each generation
 * does. "Time to first mask" is compile + matcher + first mask of a schema, from its text.
 *
 * A valid instance whose token the mask refuses while kiln_grammar_accepts takes its text is a
 * correctness bug of the mask: such tokens are counted and the first ones printed. Instances the
 * compiled grammar itself rejects are counted apart (a schema conversion question, not a mask one).
 *
 * Single thread. Output: one markdown table row per vocabulary (times per token in microseconds,
 * time to first mask in milliseconds), then the counts. bench/grammar/run.sh builds the Qwen3 and
 * Llama 3 vocabularies and runs this; docs/benchmarks.md records the figures.
 *
 * usage: grammar_mask [-d DIR] [-v] [--strict] [--only SUBSTR] [--dump FILE] [--tokens-only]
 *                     NAME=VOCAB.gguf ...
 *   -v             print the schemas that do not compile and the instances their grammar rejects
 *   --strict       compile the schemas in strict mode (additionalProperties false by default)
 *   --only SUBSTR  only the schema files whose name contains SUBSTR
 *   --dump FILE    write "NAME<TAB>schema file<TAB>instance<TAB>compact JSON<TAB>token ids" per valid
 *                  instance (bench/grammar/check.mjs compares them with the reference tokenizers)
 *   --tokens-only  tokenize and dump only: no grammar, no timing
 */
#include "json_span.h"
#include "model/model.h"
#include "sample/gmask.h"
#include "text/tokenizer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FILE  (8u << 20)
#define MAX_SHOWN 20 /* disallowed tokens printed per vocabulary */
#define MAX_PIECE 64

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* This thread's CPU time: unlike the wall clock, it leaves out the time the thread waited for a
 * core on a busy machine (a system call, so it is read outside the wall-clock interval). */
static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "grammar_mask: out of memory\n");
        exit(1);
    }
    return q;
}

/* ---- samples ----------------------------------------------------------------------------------- */

typedef struct samples {
    double *v;
    size_t n, cap;
    bool sorted;
} samples;

static void add(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
    s->sorted = false;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (nearest rank), 0 for no samples. */
static double quantile(samples *s, double q) {
    if (!s->n) return 0;
    if (!s->sorted) qsort(s->v, s->n, sizeof *s->v, cmp_double);
    s->sorted = true;
    size_t k = (size_t)(q * (double)s->n);
    return s->v[k < s->n ? k : s->n - 1];
}

static double mean(const samples *s) {
    double t = 0;
    for (size_t i = 0; i < s->n; i++) t += s->v[i];
    return s->n ? t / (double)s->n : 0;
}

/* ---- inputs ------------------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *p = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > MAX_FILE) break;
            p = xrealloc(p, cap);
        }
        size_t k = fread(p + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    if (!p || n + 1 > cap) {
        free(p);
        return NULL;
    }
    p[n] = 0;
    *len = n;
    return p;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The *.json names in dir, sorted. */
static char **list_schemas(const char *dir, size_t *n) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "grammar_mask: cannot open %s\n", dir);
        exit(1);
    }
    char **v = NULL;
    size_t cap = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
        if (*n == cap) v = xrealloc(v, (cap = cap ? cap * 2 : 128) * sizeof *v);
        v[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, *n, sizeof *v, cmp_str);
    return v;
}

/* ---- one vocabulary ---------------------------------------------------------------------------- */

typedef struct opts {
    const char *dir, *only, *dump;
    bool verbose, strict, tokens_only;
} opts;

#define N_SLOWEST 10

typedef struct slow_mask {
    double us;
    char where[200];
} slow_mask;

typedef struct result {
    samples mask, mask_cpu, accept, ttfm, compile, first;
    slow_mask slowest[N_SLOWEST]; /* the slowest masks, slowest first */
    int schemas, compiled, instances, tokens, rejected, disallowed, accept_failed, eog_refused, stuck, shown;
    double trie_ms;
} result;

static void print_piece(const kiln_model *m, int32_t tok) {
    char buf[MAX_PIECE];
    size_t n = 0;
    if (kiln_token_piece(m, tok, true, buf, sizeof buf, &n) != KILN_OK && n > sizeof buf) n = sizeof buf;
    putchar('\'');
    for (size_t i = 0; i < n && i < sizeof buf; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 || c == '\'' || c == '\\' || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

/* Replays one valid instance text[len] (tokens tok[n]) through a fresh matcher for g over trie. */
static void replay(result *r, const kiln_model *m, const kn_vtrie *trie, const kiln_grammar *g, const char *file,
                   size_t inst, const char *text, size_t len, const int32_t *tok, size_t n, bool accepted) {
    /* a SentencePiece vocabulary writes the text's first word with a leading space that the output
     * does not have (the detokenizer drops it at the start of a text) */
    char first[MAX_PIECE];
    size_t fl = 0;
    if (n) kiln_token_piece(m, tok[0], false, first, sizeof first, &fl);
    const bool strip = n && fl > 0 && first[0] == ' ' && len > 0 && text[0] != ' ';
    kn_gmatch *gm = NULL;
    if (kn_gmatch_new(g, trie, strip, &gm)) {
        fprintf(stderr, "grammar_mask: kn_gmatch_new: %s\n", kiln_last_error());
        exit(1);
    }
    const int32_t eos = kn_tok_eos(m->tok), eot = kn_tok_eot(m->tok);
    size_t at = 0; /* bytes of text before token i (with the stripped space counted) */
    for (size_t i = 0; i <= n; i++) {
        int32_t n_allowed = 0;
        double c0 = cpu_ns(), t0 = now_ns();
        const uint64_t *mask = kn_gmatch_mask(gm, &n_allowed);
        double t1 = now_ns(), c1 = cpu_ns();
        const double us = (t1 - t0) / 1e3;
        add(&r->mask, us);
        add(&r->mask_cpu, (c1 - c0) / 1e3);
        if (i == 0) add(&r->first, us);
        if (us > r->slowest[N_SLOWEST - 1].us) {
            int k = N_SLOWEST - 1;
            for (; k > 0 && r->slowest[k - 1].us < us; k--) r->slowest[k] = r->slowest[k - 1];
            r->slowest[k].us = us;
            size_t from = at > 40 ? at - 40 : 0, upto = at < len ? at : len;
            snprintf(r->slowest[k].where, sizeof r->slowest[k].where,
                     "%s #%zu token %zu of %zu, %d allowed, after ...%.*s", file, inst, i, n, n_allowed,
                     (int)(upto - from), text + from);
        }
        if (n_allowed == 0) {
            r->stuck++;
            if (r->shown++ < MAX_SHOWN)
                printf("  stuck: %s #%zu at token %zu of %zu: %s\n", file, inst, i, n,
                       kn_gmatch_error(gm) ? kn_gmatch_error(gm) : "no token allowed");
            break;
        }
        if (i == n) {
            bool eog =
                (eos >= 0 && (mask[eos / 64] >> (eos % 64) & 1)) || (eot >= 0 && (mask[eot / 64] >> (eot % 64) & 1));
            if (accepted && (!eog || !kn_gmatch_accepting(gm))) {
                r->eog_refused++;
                if (r->shown++ < MAX_SHOWN) printf("  end-of-generation refused after %s #%zu\n", file, inst);
            }
            break;
        }
        r->tokens++;
        if (!(mask[tok[i] / 64] >> (tok[i] % 64) & 1)) {
            if (accepted) {
                r->disallowed++;
                if (r->shown++ < MAX_SHOWN) {
                    printf("  DISALLOWED: %s #%zu token %zu of %zu, id %d ", file, inst, i, n, tok[i]);
                    print_piece(m, tok[i]);
                    printf(" (%d allowed) in %.*s\n", n_allowed, (int)(len < 160 ? len : 160), text);
                }
            }
            break;
        }
        char piece[MAX_PIECE];
        size_t pl = 0;
        kiln_token_piece(m, tok[i], false, piece, sizeof piece, &pl);
        at += pl;
        t0 = now_ns();
        kiln_status st = kn_gmatch_accept(gm, tok[i]);
        t1 = now_ns();
        add(&r->accept, (t1 - t0) / 1e3);
        if (st) {
            r->accept_failed++;
            if (r->shown++ < MAX_SHOWN)
                printf("  accept failed: %s #%zu token %zu: %s\n", file, inst, i, kiln_last_error());
            break;
        }
    }
    kn_gmatch_free(gm);
}

static void run_schema(result *r, const opts *o, const kiln_model *m, const kn_vtrie *trie, const char *name,
                       FILE *dump, const char *vname) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", o->dir, name);
    size_t len;
    char *text = read_file(path, &len);
    kn_jspan root = {text, text ? len : 0}, schema, tests;
    if (!text || !kn_jspan_member(root, "schema", &schema) || !kn_jspan_member(root, "tests", &tests)) {
        if (o->verbose) printf("  %s: not a schema file, skipped\n", name);
        free(text);
        return;
    }
    r->schemas++;
    const kiln_grammar_params gp = {.kind = KILN_GRAMMAR_JSON_SCHEMA, .strict = o->strict};
    kiln_grammar *g = NULL;
    double t0 = now_ns();
    kiln_status st = o->tokens_only ? KILN_ERR_UNSUPPORTED : kiln_grammar_compile(schema.p, schema.n, &gp, &g);
    double t1 = now_ns();
    if (st == KILN_OK) {
        kn_gmatch *gm = NULL;
        int32_t n_allowed = 0;
        if (kn_gmatch_new(g, trie, false, &gm) == KILN_OK) kn_gmatch_mask(gm, &n_allowed);
        double t2 = now_ns();
        kn_gmatch_free(gm);
        r->compiled++;
        add(&r->compile, (t1 - t0) / 1e6);
        add(&r->ttfm, (t2 - t0) / 1e6);
    } else if (o->verbose && !o->tokens_only) {
        printf("  %s: does not compile: %s\n", name, kiln_last_error());
    }
    size_t n_tests = kn_jspan_len(tests), tok_cap = 0;
    int32_t *tok = NULL;
    char *compact = NULL;
    for (size_t i = 0; i < n_tests; i++) {
        kn_jspan t, valid, data;
        if (!kn_jspan_elem(tests, i, &t) || !kn_jspan_member(t, "valid", &valid) || !kn_jspan_is_true(valid) ||
            !kn_jspan_member(t, "data", &data))
            continue;
        compact = xrealloc(compact, data.n + 1);
        size_t cl = kn_jspan_compact(data, compact);
        size_t n = 0;
        while ((st = kiln_tokenize(m, compact, cl, false, false, tok, tok_cap, &n)) == KILN_ERR_BUFFER_SMALL)
            tok = xrealloc(tok, (tok_cap = n) * sizeof *tok);
        if (st) {
            fprintf(stderr, "grammar_mask: tokenize: %s\n", kiln_model_last_error(m));
            exit(1);
        }
        if (dump) {
            fprintf(dump, "%s\t%s\t%zu\t%s\t", vname, name, i, compact);
            for (size_t k = 0; k < n; k++) fprintf(dump, k ? " %d" : "%d", tok[k]);
            fputc('\n', dump);
        }
        if (!g) continue;
        r->instances++;
        bool accepted = kiln_grammar_accepts(g, compact, cl);
        if (!accepted) {
            r->rejected++;
            if (o->verbose)
                printf("  %s #%zu: the grammar rejects the valid instance %.*s\n", name, i, (int)(cl < 200 ? cl : 200),
                       compact);
        }
        replay(r, m, trie, g, name, i, compact, cl, tok, n, accepted);
    }
    free(tok);
    free(compact);
    kiln_grammar_free(g);
    free(text);
}

/* Runs every schema over the vocabulary spec ("NAME=PATH"), prints the details and writes the
 * table row to row[cap]. */
static void run_vocab(const opts *o, char **files, size_t n_files, const char *spec, FILE *dump, char *row,
                      size_t cap) {
    const char *eq = strchr(spec, '=');
    char name[64];
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - spec) : 0, spec);
    const char *path = eq ? eq + 1 : spec;
    kiln_model_params mp = kiln_model_default_params();
    mp.vocab_only = true;
    kiln_model *m = NULL;
    if (kiln_model_load(path, &mp, &m)) {
        fprintf(stderr, "grammar_mask: %s: %s\n", path, kiln_last_error());
        exit(1);
    }
    if (!name[0]) snprintf(name, sizeof name, "%s", path);
    result r;
    memset(&r, 0, sizeof r);
    double t0 = now_ns();
    const kn_vtrie *trie = o->tokens_only ? NULL : kn_model_vtrie(m);
    r.trie_ms = (now_ns() - t0) / 1e6;
    if (!trie && !o->tokens_only) {
        fprintf(stderr, "grammar_mask: %s: no token trie: %s\n", path, kiln_last_error());
        exit(1);
    }
    printf("%s (%s): %d tokens, trie built in %.1f ms\n", name, path, kiln_model_n_vocab(m), r.trie_ms);
    for (size_t i = 0; i < n_files; i++)
        if (!o->only || strstr(files[i], o->only)) run_schema(&r, o, m, trie, files[i], dump, name);
    snprintf(row, cap,
             "| %s | %d | %d / %d | %d | %d | %.1f | %.1f | %.1f | %.0f | %.1f | %.2f | %.2f | %.2f | %d | %d |", name,
             kiln_model_n_vocab(m), r.compiled, r.schemas, r.instances, r.tokens, quantile(&r.mask, 0.5),
             quantile(&r.mask, 0.99), mean(&r.mask), quantile(&r.mask, 1.0), quantile(&r.accept, 0.5),
             quantile(&r.ttfm, 0.5), quantile(&r.ttfm, 0.99), quantile(&r.ttfm, 1.0), r.disallowed, r.rejected);
    printf("%s\n", row);
    printf("  %s: mask CPU time median %.1f us, p99 %.1f us, max %.0f us; the slowest masks (wall clock):\n", name,
           quantile(&r.mask_cpu, 0.5), quantile(&r.mask_cpu, 0.99), quantile(&r.mask_cpu, 1.0));
    for (int k = 0; k < N_SLOWEST && r.slowest[k].us > 0; k++)
        printf("    %10.0f us  %s\n", r.slowest[k].us, r.slowest[k].where);
    int slow_first = 0;
    for (size_t k = 0; k < r.ttfm.n; k++) slow_first += r.ttfm.v[k] > 10.0;
    printf("  %s: compile alone median %.2f ms (max %.2f); first mask over 10 ms: %d schemas; first mask of an "
           "instance median %.1f us (p99 %.1f); accept p99 %.1f us; end-of-generation refused %d, accept failed %d, "
           "stuck %d\n\n",
           name, quantile(&r.compile, 0.5), quantile(&r.compile, 1.0), slow_first, quantile(&r.first, 0.5),
           quantile(&r.first, 0.99), quantile(&r.accept, 0.99), r.eog_refused, r.accept_failed, r.stuck);
    fflush(stdout);
    free(r.mask.v);
    free(r.mask_cpu.v);
    free(r.accept.v);
    free(r.ttfm.v);
    free(r.compile.v);
    free(r.first.v);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    opts o = {.dir = "../shared/data/json-schemas"};
    const char **specs = calloc((size_t)argc, sizeof *specs);
    int n_specs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) o.dir = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) o.only = argv[++i];
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) o.dump = argv[++i];
        else if (strcmp(argv[i], "-v") == 0) o.verbose = true;
        else if (strcmp(argv[i], "--strict") == 0) o.strict = true;
        else if (strcmp(argv[i], "--tokens-only") == 0) o.tokens_only = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: grammar_mask [-d DIR] [-v] [--strict] [--only SUBSTR] [--dump FILE] "
                            "[--tokens-only] NAME=VOCAB.gguf ...\n");
            return 2;
        } else specs[n_specs++] = argv[i];
    }
    size_t n_files;
    char **files = list_schemas(o.dir, &n_files);
    FILE *dump = o.dump ? fopen(o.dump, "w") : NULL;
    if (o.dump && !dump) {
        fprintf(stderr, "grammar_mask: cannot write %s\n", o.dump);
        return 1;
    }
    char(*rows)[512] = calloc((size_t)n_specs + 1, sizeof *rows);
    for (int i = 0; i < n_specs; i++) run_vocab(&o, files, n_files, specs[i], dump, rows[i], sizeof rows[i]);
    if (dump) fclose(dump);
    printf("| vocabulary | tokens | schemas compiled | valid instances | tokens replayed | mask median us | "
           "mask p99 us | mask mean us | mask max us | accept median us | first mask median ms | p99 ms | max ms | "
           "disallowed | rejected by grammar |\n");
    printf(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n_specs; i++) printf("%s\n", rows[i]);
    free(rows);
    free(specs);
    for (size_t i = 0; i < n_files; i++) free(files[i]);
    free(files);
    return 0;
}
