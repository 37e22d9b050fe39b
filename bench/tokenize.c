/*
 * tokenize.c - micro-benchmark of text -> tokens (kn_tokenize) on one thread: what a long prompt or
 * an embedding request pays before the model runs.
 *
 * Tokenizers: the vocabularies of the test data (../shared/data/tokenizer-tests/llama.cpp-vocab, or
 * $KILN_TEST_DATA): SentencePiece (llama-spm), byte-level BPE (gpt-2) and WordPiece (bert-bge), and
 * the WordPiece tokenizer.json of the fuzzing seeds (tests/fuzz/corpus/tokenizer_json/wp_json:
 * BertNormalizer with lowercasing and accent stripping, the per-character normalizers of the Hugging
 * Face pipeline), and a Unigram tokenizer.json made here from llama-spm's pieces and scores (the size
 * and shape of XLM-RoBERTa's or T5's vocabulary). Texts, 256 KB each: "ascii" (English prose),
 * "mixed" (the same with accented Latin, a dash and CJK every few words) and "cjk" (Japanese prose,
 * no spaces: one long word for the pre-tokenizers that split at spaces). A second table times the
 * normalization forms NFC and NFKC alone (as Qwen's tokenizer.json asks for NFC), with the quick
 * check and the full way side by side. Each figure is the best of -r passes over the
 * text, in MB of text a second and millions of tokens a second, timed in the thread's CPU time.
 *
 * Usage: build/bench/tokenize [-r REPS] [FILE...]   (run from the repository root)
 *   FILE: more tokenizers, each a GGUF file's vocabulary or (named *.json) a tokenizer.json, e.g. a
 *   model's GGUF and the tokenizer.json `build/kiln-hf` writes from it (the same vocabulary, the two
 *   loaders' encoders).
 */
#include "model/gguf.h"
#include "text/tok_internal.h"
#include "text/tok_tj.h"
#include "text/tokenizer.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEXT_BYTES (256u << 10)

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A TEXT_BYTES text of repeated `unit`s (malloc'd, NUL-terminated); *len its length. */
static char *make_text(const char *unit, size_t *len) {
    const size_t ul = strlen(unit);
    char *s = malloc(TEXT_BYTES + 1);
    if (!s) exit(1);
    size_t n = 0;
    while (n + ul <= TEXT_BYTES) {
        memcpy(s + n, unit, ul);
        n += ul;
    }
    s[n] = 0;
    *len = n;
    return s;
}

static kn_tokenizer *load_gguf(const char *path) {
    kn_gguf g;
    if (kn_gguf_open(path, &g) != KILN_OK) return NULL;
    kn_tokenizer *t = NULL;
    if (kn_tokenizer_load(&g, &t) != KILN_OK) t = NULL;
    kn_gguf_close(&g);
    return t;
}

/* A tokenizer.json file, or the tokenizer.json part (up to the first NUL) of a fuzzing seed. */
static kn_tokenizer *load_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        kn_error(KILN_ERR_IO, "cannot open '%s'", path);
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0, r;
    do {
        if (cap - n < 65536 && !(buf = realloc(buf, cap = 2 * cap + 65536))) exit(1);
        n += r = fread(buf + n, 1, cap - n - 1, f);
    } while (r > 0);
    fclose(f);
    buf[n] = 0;
    kn_tokenizer *t = NULL;
    if (kn_tokenizer_load_hf(buf, strlen(buf), NULL, 0, &t) != KILN_OK) t = NULL;
    free(buf);
    return t;
}

/* A Unigram tokenizer.json over spm's pieces and scores (a vocabulary of the size and shape of a
 * SentencePiece unigram model's, such as XLM-RoBERTa's or T5's): the control and unknown tokens as
 * special added tokens, a Metaspace pre-tokenizer and decoder. NULL when it cannot be made. */
static kn_tokenizer *unigram_from(const kn_tokenizer *spm) {
    json_t *vocab = json_array(), *added = json_array();
    for (int32_t id = 0; id < spm->n_vocab; id++) {
        const kn_tok_info *ti = &spm->tok[id];
        json_array_append_new(vocab,
                              json_pack("[s#f]", spm->text + ti->text_off, (int)ti->text_len, (double)ti->score));
        if (ti->attr & (KN_ATTR_CONTROL | KN_ATTR_UNKNOWN))
            json_array_append_new(added,
                                  json_pack("{sissbsbsbsbsb}", "id", (int)id, "content", spm->text + ti->text_off,
                                            "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
    }
    json_t *meta = json_pack("{sssssssb}", "type", "Metaspace", "replacement", "\xe2\x96\x81", "prepend_scheme",
                             "always", "split", 1);
    json_t *root = json_pack("{sssosOsos{sssisosb}}", "version", "1.0", "added_tokens", added, "pre_tokenizer", meta,
                             "decoder", json_deep_copy(meta), "model", "type", "Unigram", "unk_id", (int)spm->unk,
                             "vocab", vocab, "byte_fallback", 0);
    json_decref(meta);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    kn_tokenizer *t = NULL;
    if (!text || kn_tokenizer_load_hf(text, strlen(text), NULL, 0, &t) != KILN_OK) t = NULL;
    free(text);
    return t;
}

/* True when path names a tokenizer.json (ends in ".json"). */
static bool is_json(const char *path) {
    const size_t n = strlen(path);
    return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

/* One row: the best of reps passes of text through t. */
static void run(const char *name, const kn_tokenizer *t, const char *text_name, const char *text, size_t len,
                int reps) {
    static int32_t ids[TEXT_BYTES];
    double best = 1e30;
    size_t n = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = cpu_s();
        if (kn_tokenize(t, text, len, false, false, ids, TEXT_BYTES, &n) != KILN_OK) {
            printf("| %s | %s | failed: %s | |\n", name, text_name, kn_error_msg());
            return;
        }
        const double d = cpu_s() - t0;
        if (d < best) best = d;
    }
    printf("| %s | %s | %.2f | %.2f | %zu |\n", name, text_name, (double)len / best / 1e6, (double)n / best / 1e6, n);
}

/* One row of the normalization forms alone: NFC and NFKC of text with the quick check (quiet
 * characters copied) and the full way (every character decomposed, reordered, composed), best of reps. */
static void run_forms(const char *text_name, const char *text, size_t len, int reps) {
    kn_bvec out = {0};
    double mbs[4];
    for (int k = 0; k < 4; k++) {
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            const double t0 = cpu_s();
            const kiln_status st = k & 1 ? kn_tj_unicode_form_full(text, len, true, k >> 1, &out)
                                         : kn_tj_unicode_form(text, len, true, k >> 1, &out);
            const double d = cpu_s() - t0;
            if (st != KILN_OK) exit(1);
            if (d < best) best = d;
        }
        mbs[k] = (double)len / best / 1e6;
    }
    printf("| %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |\n", text_name, mbs[0], mbs[1], mbs[0] / mbs[1], mbs[2],
           mbs[3], mbs[2] / mbs[3]);
    free(out.v);
}

int main(int argc, char **argv) {
    int reps = 7;
    const char *extra[16];
    int n_extra = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && n_extra < 16) extra[n_extra++] = argv[i];
        else {
            fprintf(stderr, "usage: %s [-r REPS] [FILE.gguf | tokenizer.json]... (at most 16)\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    const char *root = getenv("KILN_TEST_DATA");
    if (!root || !*root) root = "../shared/data";
    size_t ascii_len, mixed_len, cjk_len;
    char *ascii = make_text("The quick brown fox jumps over the lazy dog, and then it runs away. ", &ascii_len);
    char *mixed = make_text("The Quick brown fox, naïve café — 東京 déjà vu! Ünïcödé text. ", &mixed_len);
    char *cjk = make_text("東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。", &cjk_len);
    static const struct {
        const char *name, *file; /* a GGUF vocabulary under root, or a tokenizer.json seed in the tree */
        bool json;
        bool unigram; /* the GGUF vocabulary's pieces and scores as a Unigram tokenizer.json */
    } toks[] = {
        {"llama-spm (SentencePiece)", "tokenizer-tests/llama.cpp-vocab/ggml-vocab-llama-spm.gguf", false, false},
        {"gpt-2 (byte-level BPE)", "tokenizer-tests/llama.cpp-vocab/ggml-vocab-gpt-2.gguf", false, false},
        {"bert-bge (WordPiece)", "tokenizer-tests/llama.cpp-vocab/ggml-vocab-bert-bge.gguf", false, false},
        {"tokenizer.json WordPiece + BertNormalizer", "tests/fuzz/corpus/tokenizer_json/wp_json", true, false},
        {"tokenizer.json Unigram (llama-spm's pieces)", "tokenizer-tests/llama.cpp-vocab/ggml-vocab-llama-spm.gguf",
         false, true},
    };
    printf("| tokenizer | text | MB/s | M tokens/s | tokens |\n| --- | --- | ---: | ---: | ---: |\n");
    for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
        char path[1024];
        if (toks[i].json) snprintf(path, sizeof path, "%s", toks[i].file);
        else snprintf(path, sizeof path, "%s/%s", root, toks[i].file);
        kn_tokenizer *t = toks[i].json ? load_json(path) : load_gguf(path);
        if (t && toks[i].unigram) {
            kn_tokenizer *u = unigram_from(t);
            kn_tokenizer_free(t);
            t = u;
        }
        if (!t) {
            printf("| %s | | cannot load %s | | |\n", toks[i].name, path);
            continue;
        }
        run(toks[i].name, t, "ascii", ascii, ascii_len, reps);
        run(toks[i].name, t, "mixed", mixed, mixed_len, reps);
        run(toks[i].name, t, "cjk", cjk, cjk_len, reps);
        kn_tokenizer_free(t);
    }
    for (int i = 0; i < n_extra; i++) {
        kn_tokenizer *t = is_json(extra[i]) ? load_json(extra[i]) : load_gguf(extra[i]);
        if (!t) {
            printf("| %s | | cannot load: %s | | |\n", extra[i], kn_error_msg());
            continue;
        }
        run(extra[i], t, "ascii", ascii, ascii_len, reps);
        run(extra[i], t, "mixed", mixed, mixed_len, reps);
        run(extra[i], t, "cjk", cjk, cjk_len, reps);
        kn_tokenizer_free(t);
    }
    printf("\n| text | NFC MB/s | NFC full way | ratio | NFKC MB/s | NFKC full way | ratio |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    run_forms("ascii", ascii, ascii_len, reps);
    run_forms("mixed", mixed, mixed_len, reps);
    run_forms("cjk", cjk, cjk_len, reps);
    free(ascii);
    free(mixed);
    free(cjk);
    return 0;
}
