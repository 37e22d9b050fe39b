/*
 * grammar_decode.c - what a grammar constraint costs decode throughput in a full batch.
 *
 * Runs batches of B generations (default 8) on one engine (kiln_engine, continuous batching) and
 * measures decode throughput while all B rows are generating: the window from the moment the last
 * row produced its first token to the moment the first row produced its last one, and the tokens
 * all rows produced inside it. Three kinds of batch alternate in every round, so that the host's
 * drift (shared machines move 20-40% within minutes) hits them alike:
 *   free         B unconstrained rows
 *   control      B unconstrained rows again: its ratio to free shows the noise of the run
 *   constrained  B rows under one compiled grammar (by default the schema below; --json-mode,
 *                --schema or --gbnf)
 *   mixed        B/2 constrained rows and B/2 free rows in the same batch
 * It prints one line per batch, then the medians over the rounds and the ratio of each kind to the
 * free batches of the same round (median of the per-round ratios), by the wall clock and by the
 * process's CPU time (which leaves out the time the engine waited for a core on a busy machine).
 * Because those ratios carry the host's noise (the control batch shows how much), the matchers'
 * own cost is also measured directly: after each batch, every constrained row's tokens are replayed
 * through a fresh matcher (kn_gmatch_mask before each token, kn_gmatch_accept), and that time is
 * given as a share of the batch's decode time. It leaves out the masked sampling itself.
 *
 * Sampling is the library default (temperature 0.8, top-k 40, ...) with a fixed seed per row, or
 * greedy with --greedy. Free rows ignore end-of-generation; a constrained row ends when its text is
 * a complete sentence, which would empty the batch early: the default constraint is therefore a
 * JSON Schema whose instances are long (an object with an array of at least 40 small objects, each
 * a string and an integer), so every row runs to max_tokens through keys, strings, numbers and
 * punctuation. Rows that end early are printed; the window only counts the time all B rows ran.
 *
 * usage: grammar_decode -m MODEL.gguf [-t THREADS] [-n TOKENS] [-r ROUNDS] [-b ROWS] [-c CTX]
 *                       [--json-mode | --schema FILE | --gbnf FILE] [--greedy]
 * bench/grammar/run.sh decode makes the model (the Llama-3.2-1B shape with the real Llama 3
 * tokenizer) and runs this; docs/benchmarks.md records the figures.
 */
#include "kiln.h"
#include "sample/gmask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROWS   64
#define MAX_ROUNDS 100

/* The default constraint: long instances of varied JSON (see the top of the file). */
static const char LONG_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"minItems\":40,\"items\":{"
    "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"count\":{\"type\":\"integer\"}},"
    "\"required\":[\"name\",\"count\"],\"additionalProperties\":false}}},\"required\":[\"items\"],"
    "\"additionalProperties\":false}";

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "grammar_decode: %s: %s\n", what, kiln_last_error());
    exit(1);
}

/* The process's CPU time (all threads). With one compute thread it is the wall time minus the
 * time the process waited for a core, which on a busy shared machine is most of the noise. */
static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One row's tokens and the wall-clock and CPU times at which they arrived. */
typedef struct row {
    double *t, *c;
    kiln_token *tok;
    int n, cap;
} row;

static int on_token(const kiln_token_event *ev, void *user) {
    row *r = user;
    if (ev->token >= 0 && r->n < r->cap) {
        r->c[r->n] = cpu_ns();
        r->tok[r->n] = ev->token;
        r->t[r->n++] = now_ns();
    }
    return 0;
}

/* The matcher time of one constrained row, measured again outside the engine: a fresh matcher (as
 * the row had) computes the mask before each of the row's tokens and accepts it. Nanoseconds. */
static double replay_matcher(const kiln_grammar *g, const kn_vtrie *trie, const row *r) {
    kn_gmatch *m = NULL;
    if (kn_gmatch_new(g, trie, false, &m)) return 0;
    double t = 0;
    for (int i = 0; i < r->n; i++) {
        int32_t n_allowed;
        double t0 = now_ns();
        kn_gmatch_mask(m, &n_allowed);
        kiln_status st = kn_gmatch_accept(m, r->tok[i]);
        t += now_ns() - t0;
        if (st) break;
    }
    kn_gmatch_free(m);
    return t;
}

typedef struct batch_result {
    double tps;         /* tokens per second while all rows ran; 0 when the window is empty */
    double cpu_tps;     /* the same tokens per second of process CPU time */
    double match_share; /* the constrained rows' matcher time (replayed) over the batch's decode time */
    double mean_tokens; /* tokens per row */
    int at_length;      /* rows that ran to max_tokens */
} batch_result;

typedef struct cfg {
    kiln_engine *engine;
    const kn_vtrie *trie;
    const kiln_grammar *grammar;
    const kiln_token *prompt;
    size_t n_prompt;
    int rows, n_gen;
    bool greedy;
} cfg;

/* Runs one batch of c->rows generations, the first n_constrained of them under the grammar. */
static batch_result run_batch(const cfg *c, int n_constrained, uint64_t seed) {
    row rows[MAX_ROWS];
    kiln_request *req[MAX_ROWS];
    for (int i = 0; i < c->rows; i++) {
        rows[i] = (row){.t = calloc((size_t)c->n_gen + 1, sizeof(double)),
                        .c = calloc((size_t)c->n_gen + 1, sizeof(double)),
                        .tok = calloc((size_t)c->n_gen + 1, sizeof(kiln_token)),
                        .n = 0,
                        .cap = c->n_gen + 1};
        if (!rows[i].t || !rows[i].c || !rows[i].tok) die("out of memory");
        kiln_generate_params gp = kiln_generate_default_params();
        gp.max_tokens = c->n_gen;
        gp.sampling.seed = seed + (uint64_t)i;
        if (c->greedy) gp.sampling.temperature = 0;
        gp.on_token = on_token;
        gp.user = &rows[i];
        if (i < n_constrained) gp.grammar = c->grammar;
        else gp.ignore_eos = true;
        if (kiln_engine_submit(c->engine, c->prompt, c->n_prompt, &gp, &req[i])) die("kiln_engine_submit");
    }
    batch_result br = {0, 0, 0, 0, 0};
    for (int i = 0; i < c->rows; i++) {
        kiln_generate_result res;
        kiln_status st = kiln_request_wait(req[i], &res);
        if (st) {
            fprintf(stderr, "grammar_decode: request %d: %s (%s)\n", i, kiln_status_str(st), res.error);
            exit(1);
        }
        if (res.stop == KILN_STOP_LENGTH) br.at_length++;
        kiln_request_free(req[i]);
    }
    double start = 0, end = 1e300, cpu_start = 0, cpu_end = 0;
    for (int i = 0; i < c->rows; i++) {
        br.mean_tokens += rows[i].n;
        if (rows[i].n < 2) end = 0;
        else {
            if (rows[i].t[0] > start) start = rows[i].t[0], cpu_start = rows[i].c[0];
            if (rows[i].t[rows[i].n - 1] < end) end = rows[i].t[rows[i].n - 1], cpu_end = rows[i].c[rows[i].n - 1];
        }
    }
    br.mean_tokens /= c->rows;
    if (end > start) {
        long count = 0;
        for (int i = 0; i < c->rows; i++)
            for (int k = 0; k < rows[i].n; k++) count += rows[i].t[k] > start && rows[i].t[k] <= end;
        br.tps = (double)count / ((end - start) / 1e9);
        if (cpu_end > cpu_start) br.cpu_tps = (double)count / ((cpu_end - cpu_start) / 1e9);
    }
    /* what the matchers cost: their time replayed, over the time of the whole decode (first token
     * to last, all rows) */
    double match = 0, first = 1e300, last = 0;
    for (int i = 0; i < c->rows; i++) {
        if (i < n_constrained) match += replay_matcher(c->grammar, c->trie, &rows[i]);
        if (rows[i].n) {
            if (rows[i].t[0] < first) first = rows[i].t[0];
            if (rows[i].t[rows[i].n - 1] > last) last = rows[i].t[rows[i].n - 1];
        }
    }
    if (last > first) br.match_share = match / (last - first);
    for (int i = 0; i < c->rows; i++) free(rows[i].t), free(rows[i].c), free(rows[i].tok);
    return br;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "grammar_decode: cannot open %s\n", path);
        exit(1);
    }
    char *p = malloc(KILN_GRAMMAR_MAX_TEXT + 1);
    if (!p) die("out of memory");
    *len = fread(p, 1, KILN_GRAMMAR_MAX_TEXT + 1, f);
    fclose(f);
    if (*len > KILN_GRAMMAR_MAX_TEXT) {
        fprintf(stderr, "grammar_decode: %s is too large\n", path);
        exit(1);
    }
    p[*len] = 0;
    return p;
}

int main(int argc, char **argv) {
    const char *model = NULL, *schema = NULL, *gbnf = NULL;
    int threads = 1, n_gen = 128, rounds = 5, n_rows = 8, n_ctx = 512;
    bool greedy = false, json_mode = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--greedy") == 0) greedy = true;
        else if (strcmp(a, "--json-mode") == 0) json_mode = true;
        else if (!v) goto usage;
        else if (strcmp(a, "-m") == 0) model = v, i++;
        else if (strcmp(a, "--schema") == 0) schema = v, i++;
        else if (strcmp(a, "--gbnf") == 0) gbnf = v, i++;
        else if (strcmp(a, "-t") == 0) threads = atoi(v), i++;
        else if (strcmp(a, "-n") == 0) n_gen = atoi(v), i++;
        else if (strcmp(a, "-r") == 0) rounds = atoi(v), i++;
        else if (strcmp(a, "-b") == 0) n_rows = atoi(v), i++;
        else if (strcmp(a, "-c") == 0) n_ctx = atoi(v), i++;
        else goto usage;
    }
    if (!model || threads < 1 || n_gen < 2 || rounds < 1 || rounds > MAX_ROUNDS || n_rows < 2 || n_rows > MAX_ROWS ||
        n_ctx < n_gen + 64 || (schema && gbnf) || (json_mode && (schema || gbnf)))
        goto usage;

    kiln_grammar_params gparams = kiln_grammar_default_params();
    const char *kind = "JSON Schema: an object with an array of at least 40 {name, count} objects";
    char *text = NULL;
    size_t len = 0;
    if (schema || gbnf) {
        text = read_text(schema ? schema : gbnf, &len);
        gparams.kind = schema ? KILN_GRAMMAR_JSON_SCHEMA : KILN_GRAMMAR_GBNF;
        kind = schema ? schema : gbnf;
    } else if (json_mode) {
        gparams.kind = KILN_GRAMMAR_JSON_OBJECT;
        kind = "JSON mode";
    } else {
        gparams.kind = KILN_GRAMMAR_JSON_SCHEMA;
    }
    kiln_grammar *grammar = NULL;
    if (kiln_grammar_compile(text ? text : LONG_SCHEMA, text ? len : strlen(LONG_SCHEMA), &gparams, &grammar))
        die("kiln_grammar_compile");
    free(text);

    kiln_model *m = NULL;
    if (kiln_model_load(model, NULL, &m)) die(model);
    kiln_engine_params ep = kiln_engine_default_params();
    ep.max_rows = n_rows;
    ep.n_threads = threads;
    ep.n_ctx = n_ctx;
    ep.prompt_cache = 0;
    kiln_engine *e = NULL;
    if (kiln_engine_new(m, &ep, &e)) die("kiln_engine_new");
    static const char prompt_text[] = "Describe a cat as a JSON object with its name, age and favourite toys:";
    kiln_token prompt[256];
    size_t n_prompt = 0;
    if (kiln_tokenize(m, prompt_text, strlen(prompt_text), true, false, prompt, 256, &n_prompt)) die("kiln_tokenize");

    printf("model %s (%s), %d rows, %d tokens per row, %d thread(s), constraint: %s, %s\n", model, kiln_model_desc(m),
           n_rows, n_gen, threads, kind, greedy ? "greedy" : "sampled (library defaults)");
    const kn_vtrie *trie = kn_model_vtrie(m);
    if (!trie) die("kn_model_vtrie");
    cfg c = {.engine = e,
             .trie = trie,
             .grammar = grammar,
             .prompt = prompt,
             .n_prompt = n_prompt,
             .rows = n_rows,
             .n_gen = n_gen,
             .greedy = greedy};
    enum { KINDS = 4 };
    static const char *const names[KINDS] = {"free", "control", "constrained", "mixed"};
    const int n_con[KINDS] = {0, 0, n_rows, n_rows / 2};
    double tps[KINDS][MAX_ROUNDS], ratio[KINDS][MAX_ROUNDS], toks[KINDS] = {0};
    double ctps[KINDS][MAX_ROUNDS], cratio[KINDS][MAX_ROUNDS], share[KINDS][MAX_ROUNDS];
    int ended[KINDS] = {0}, valid[KINDS] = {0};
    run_batch(&c, n_rows / 2, 999); /* warm-up: page in the weights, allocate the rows' KV */
    for (int r = 0; r < rounds; r++) {
        batch_result br[KINDS];
        for (int k = 0; k < KINDS; k++) {
            int kk = (k + r) % KINDS; /* rotate the order from round to round */
            br[kk] = run_batch(&c, n_con[kk], (uint64_t)r * 1000);
            printf("round %d %-11s %8.2f tok/s in the full batch (%8.2f per CPU second), %.1f tokens per row, %d of %d "
                   "rows to max_tokens, matchers %.2f%% of the decode time\n",
                   r, names[kk], br[kk].tps, br[kk].cpu_tps, br[kk].mean_tokens, br[kk].at_length, n_rows,
                   100 * br[kk].match_share);
            fflush(stdout);
        }
        for (int k = 0; k < KINDS; k++) {
            toks[k] += br[k].mean_tokens;
            ended[k] += n_rows - br[k].at_length;
            if (br[k].tps > 0 && br[0].tps > 0 && br[k].cpu_tps > 0 && br[0].cpu_tps > 0) {
                tps[k][valid[k]] = br[k].tps;
                ctps[k][valid[k]] = br[k].cpu_tps;
                cratio[k][valid[k]] = br[k].cpu_tps / br[0].cpu_tps;
                share[k][valid[k]] = br[k].match_share;
                ratio[k][valid[k]++] = br[k].tps / br[0].tps;
            }
        }
    }
    printf(
        "\n| batch (%d rows) | tok/s median | ratio to free | tok per CPU-s median | ratio to free (CPU) | matchers' "
        "share of the decode time | tokens per row | rows ended before max_tokens |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        n_rows);
    for (int k = 0; k < KINDS; k++)
        printf("| %s | %.2f | %.3f | %.2f | %.3f | %.2f%% | %.1f | %d of %d |\n", names[k], median(tps[k], valid[k]),
               median(ratio[k], valid[k]), median(ctps[k], valid[k]), median(cratio[k], valid[k]),
               100 * median(share[k], valid[k]), toks[k] / rounds, ended[k], rounds * n_rows);
    printf("(ratios: the median over the rounds of each batch's figure over the same round's free batch)\n");
    kiln_engine_free(e);
    kiln_grammar_free(grammar);
    kiln_model_free(m);
    return 0;
usage:
    fprintf(stderr,
            "usage: grammar_decode -m MODEL.gguf [-t THREADS] [-n TOKENS] [-r ROUNDS (1..%d)] [-b ROWS (2..%d)] "
            "[-c CTX (>= TOKENS + 64)] [--json-mode | --schema FILE | --gbnf FILE] [--greedy]\n",
            MAX_ROUNDS, MAX_ROWS);
    return 2;
}
