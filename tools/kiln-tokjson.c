/*
 * kiln-tokjson.c - tokenizes with a Hugging Face tokenizer.json directly (no model): the tool behind
 * the tokenizer conformance test (tests/cli/test_tokenizer_json.sh) and the load-time measurement.
 *
 *   kiln-tokjson TOKENIZER.json [TOKENIZER_CONFIG.json]
 *       reads one JSON string per line on stdin and writes one JSON object per line on stdout:
 *       {"ids": [...], "decoded": "..."}: ids with the post-processor's special tokens (special tokens
 *       in the text are recognized, as the tokenizers library does), decoded the text the ids of the
 *       same text without the post-processor's tokens decode to through kiln's detokenizer.
 *   kiln-tokjson --info TOKENIZER.json [CONFIG]   prints vocabulary size, BOS / EOS / EOG ids, the
 *       chat template's length and the SHA-256 of TOKENIZER.json.
 *   kiln-tokjson --bench N TOKENIZER.json [CONFIG]  loads the file N times and prints the fastest load.
 * Errors (a load error names the JSON path) go to stderr with exit status 1.
 */
#include "base/base.h"
#include "base/sha256.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kiln-tokjson: cannot open '%s'\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "kiln-tokjson: cannot read '%s'\n", path);
        exit(1);
    }
    fclose(f);
    p[n] = 0;
    *len = (size_t)n;
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static kn_tokenizer *load(const char *json, size_t jl, const char *cfg, size_t cl) {
    kn_tokenizer *t;
    kiln_status st = kn_tokenizer_load_hf(json, jl, cfg, cl, &t);
    if (st) {
        fprintf(stderr, "kiln-tokjson: %s (%s)\n", kn_error_msg(), kiln_status_str(st));
        exit(1);
    }
    return t;
}

/* Tokenizes text; returns a malloc'd array and its length. */
static int32_t *encode(const kn_tokenizer *t, const char *s, size_t n, bool add_special, size_t *cnt) {
    size_t cap = n + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    kiln_status st = kn_tokenize(t, s, n, add_special, true, ids, cap, cnt);
    if (st == KILN_ERR_BUFFER_SMALL) {
        cap = *cnt;
        ids = realloc(ids, cap * sizeof *ids);
        st = kn_tokenize(t, s, n, add_special, true, ids, cap, cnt);
    }
    if (st) {
        fprintf(stderr, "kiln-tokjson: tokenize: %s\n", kn_error_msg());
        exit(1);
    }
    return ids;
}

int main(int argc, char **argv) {
    int a = 1, bench = 0;
    bool info = false;
    if (a < argc && strcmp(argv[a], "--info") == 0) info = true, a++;
    else if (a + 1 < argc && strcmp(argv[a], "--bench") == 0) bench = atoi(argv[a + 1]), a += 2;
    if (a >= argc || argc - a > 2) {
        fprintf(stderr, "usage: kiln-tokjson [--info | --bench N] TOKENIZER.json [TOKENIZER_CONFIG.json]\n");
        return 2;
    }
    size_t jl, cl = 0;
    char *json = read_file(argv[a], &jl), *cfg = a + 1 < argc ? read_file(argv[a + 1], &cl) : NULL;
    if (bench > 0) {
        double best = 1e9, best_cpu = 1e9;
        int n_vocab = 0;
        for (int i = 0; i < bench; i++) {
            double t0 = now();
            clock_t c0 = clock();
            kn_tokenizer *t = load(json, jl, cfg, cl);
            double dt = now() - t0, dc = (double)(clock() - c0) / CLOCKS_PER_SEC;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
            n_vocab = kn_tok_n_vocab(t);
            kn_tokenizer_free(t);
        }
        printf("%s: %zu bytes, %d tokens, fastest load of %d: %.3f s wall, %.3f s CPU\n", argv[a], jl, n_vocab, bench,
               best, best_cpu);
        return 0;
    }
    kn_tokenizer *t = load(json, jl, cfg, cl);
    if (info) {
        uint8_t h[32];
        const int32_t *eos;
        size_t ne = kn_tok_eos_ids(t, &eos);
        const char *tmpl = kn_tok_chat_template(t, NULL);
        printf("vocab %d bos %d eos %d add_bos %d add_eos %d eog", kn_tok_n_vocab(t), kn_tok_bos(t), kn_tok_eos(t),
               kn_tok_add_bos(t), kn_tok_add_eos(t));
        for (size_t i = 0; i < ne; i++) printf(" %d", eos[i]);
        printf(" template %zu sha256 ", tmpl ? strlen(tmpl) : 0);
        kn_sha256 sh; /* of the tokenizer.json bytes, as a model's fingerprint hashes the file */
        kn_sha256_init(&sh);
        kn_sha256_update(&sh, json, jl);
        kn_sha256_final(&sh, h);
        for (int i = 0; i < 32; i++) printf("%02x", h[i]);
        printf("\n");
        kn_tokenizer_free(t);
        return 0;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t ln;
    while ((ln = getline(&line, &lcap, stdin)) > 0) {
        json_error_t err;
        json_t *v = json_loadb(line, (size_t)ln, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        if (!json_is_string(v)) {
            fprintf(stderr, "kiln-tokjson: stdin: not a JSON string per line: %s\n", err.text);
            return 1;
        }
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        size_t cnt, cnt2;
        int32_t *ids = encode(t, s, n, true, &cnt);
        int32_t *raw = encode(t, s, n, false, &cnt2);
        /* decode the ids without the post-processor's tokens */
        char *dec = malloc(cnt2 * 3 * (KN_TOK_MAX_PIECE + 8) + 16);
        size_t dn = 0;
        kn_detok d;
        kn_detok_init(&d, t, true, true);
        for (size_t i = 0; i < cnt2; i++) {
            size_t k;
            const char *p = kn_detok_push(&d, raw[i], &k);
            memcpy(dec + dn, p, k);
            dn += k;
        }
        size_t k;
        const char *p = kn_detok_flush(&d, &k);
        memcpy(dec + dn, p, k);
        dn += k;
        json_t *o = json_object(), *arr = json_array();
        for (size_t i = 0; i < cnt; i++) json_array_append_new(arr, json_integer(ids[i]));
        json_object_set_new(o, "ids", arr);
        json_object_set_new(o, "decoded", json_stringn(dec, dn));
        char *outs = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        printf("%s\n", outs);
        free(outs);
        json_decref(o);
        json_decref(v);
        free(ids);
        free(raw);
        free(dec);
    }
    free(line);
    kn_tokenizer_free(t);
    free(json);
    free(cfg);
    return 0;
}
