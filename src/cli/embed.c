/*
 * embed.c - `kiln embed`: the embedding vector of a text (-p TEXT), or of every line of standard
 * input (or -f FILE), from an embedding model (bert, nomic-bert, a Qwen3-Embedding file). All texts
 * run as one kiln_engine_embed call, the batch the server would run. Prints one JSON array per
 * text (default), or with --plain the numbers separated by spaces, one text per line.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lines of standard input longer than this are read in full; the whole input is capped. */
#define MAX_INPUT_BYTES ((size_t)256 << 20)

/* Splits text into its non-empty lines (in place: each newline becomes a NUL), at most cap; returns
 * how many. */
static size_t split_lines(char *text, size_t len, char **lines, size_t cap) {
    size_t n = 0;
    char *p = text, *end = text + len;
    while (p < end && n < cap) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        if (e > p && e[-1] == '\r') e[-1] = 0;
        *e = 0;
        if (*p) lines[n++] = p;
        p = e + 1;
    }
    return n;
}

/* Reads all of standard input into a malloc'd NUL-terminated buffer (NULL when it exceeds the cap
 * or memory runs out). */
static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= MAX_INPUT_BYTES) break;
            char *b = realloc(buf, cap * 2);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        const size_t k = fread(buf + n, 1, cap - 1 - n, stdin);
        n += k;
        if (k == 0) {
            buf[n] = 0;
            *len = n;
            return buf;
        }
    }
    free(buf);
    return NULL;
}

int cli_embed(int argc, char **argv) {
    cli_common c;
    cli_common_init(&c);
    bool plain = false, truncate = false;
    kiln_embed_params ep = kiln_embed_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("embed", false);
            return 0;
        }
        if (strcmp(a, "--plain") == 0) plain = true;
        else if (strcmp(a, "--json") == 0) plain = false;
        else if (strcmp(a, "--no-normalize") == 0) ep.normalize = false;
        else if (strcmp(a, "--truncate") == 0) truncate = true;
        else if (strcmp(a, "--dimensions") == 0 && i + 1 < argc) {
            int d;
            if (!cli_int("--dimensions", argv[++i], 1, 1 << 20, &d)) return CLI_EXIT_USAGE;
            ep.dimensions = d;
        } else if (cli_parse_common(argc, argv, &i, &c) != 1) {
            fprintf(stderr, "kiln embed: unknown or incomplete option '%s'\n", a);
            cli_usage("embed", true);
            return CLI_EXIT_USAGE;
        }
    }
    ep.truncate = truncate;
    if (c.prompt && c.file) {
        fprintf(stderr, "kiln embed: give either -p or -f, not both\n");
        return CLI_EXIT_USAGE;
    }
    cli_setup_log(c.verbose);
    char *text = NULL;
    size_t len = 0;
    if (c.file) text = cli_read_file(c.file, &len);
    else if (!c.prompt) text = read_stdin(&len);
    if (!c.prompt && !text) {
        fprintf(stderr, "kiln embed: cannot read the input%s%s\n", c.file ? " from " : "", c.file ? c.file : "");
        return CLI_EXIT_FAIL;
    }
    char **lines = malloc(KILN_EMBED_MAX_INPUTS * sizeof *lines);
    size_t n = 0;
    if (lines && c.prompt) lines[n++] = (char *)c.prompt;
    else if (lines) n = split_lines(text, len, lines, KILN_EMBED_MAX_INPUTS);
    int rc = CLI_EXIT_FAIL;
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_token **tok = NULL;
    size_t *lens = NULL;
    float *out = NULL;
    if (!lines) goto done;
    if (n == 0) {
        fprintf(stderr, "kiln embed: no text (give -p TEXT, or lines on standard input)\n");
        rc = CLI_EXIT_USAGE;
        goto done;
    }
    if (!(m = cli_load_model(&c, false))) goto done;
    if (!kiln_model_is_embedding(m)) {
        fprintf(stderr,
                "kiln embed: %s (%s) is a text-generation model, not an embedding model: it names no pooling; use an "
                "embedding model (bert, nomic-bert, Qwen3-Embedding)\n",
                c.model, kiln_model_arch(m));
        goto done;
    }
    kiln_engine_params p = kiln_engine_default_params();
    p.n_ctx = c.ctx;
    p.n_threads = c.threads;
    p.max_rows = 1;
    p.prompt_cache = 0;
    if (kiln_engine_new(m, &p, &e) != KILN_OK) {
        fprintf(stderr, "kiln embed: %s\n", kiln_last_error());
        goto done;
    }
    tok = calloc(n, sizeof *tok);
    lens = calloc(n, sizeof *lens);
    if (!tok || !lens) goto done;
    for (size_t i = 0; i < n; i++) {
        const size_t l = strlen(lines[i]), cap = l + 8;
        if (!(tok[i] = malloc(cap * sizeof **tok))) goto done;
        if (kiln_tokenize(m, lines[i], l, true, false, tok[i], cap, &lens[i]) != KILN_OK) {
            fprintf(stderr, "kiln embed: text %zu: %s\n", i + 1, kiln_model_last_error(m));
            goto done;
        }
    }
    const size_t dim = (size_t)(ep.dimensions ? ep.dimensions : kiln_model_n_embd(m));
    if (!(out = malloc(n * dim * sizeof *out))) goto done;
    kiln_embed_result res;
    if (kiln_engine_embed(e, (const kiln_token *const *)tok, lens, n, &ep, out, n * dim, &res) != KILN_OK) {
        fprintf(stderr, "kiln embed: %s\n", kiln_last_error());
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        fputs(plain ? "" : "[", stdout);
        for (size_t j = 0; j < dim; j++) printf("%s%.9g", j ? (plain ? " " : ", ") : "", out[i * dim + j]);
        fputs(plain ? "\n" : "]\n", stdout);
    }
    if (c.verbose)
        fprintf(stderr, "kiln embed: %zu texts, %lld tokens, %d values each (%s pooling)\n", n, (long long)res.n_tokens,
                res.dim, kiln_model_pooling(m));
    rc = fflush(stdout) == 0 ? 0 : CLI_EXIT_FAIL;
done:
    for (size_t i = 0; tok && i < n; i++) free(tok[i]);
    free(tok);
    free(lens);
    free(out);
    kiln_engine_free(e);
    kiln_model_free(m);
    free(lines);
    free(text);
    return rc;
}
