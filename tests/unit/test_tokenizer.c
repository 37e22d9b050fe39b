/*
 * test_tokenizer.c - the tokenizers against llama.cpp's conformance vectors and their contracts.
 *
 * Conformance: every ggml-vocab-NAME.gguf in tokenizer-tests/llama.cpp-vocab that has .inp/.out
 * vectors (generated with the Hugging Face tokenizers) is run on all its cases with
 * add_special=false, parse_special=false and must match exactly (one PASS/FAIL line per vocab).
 * Then: encoding and decoding of stories260K, round trips, the incremental detokenizer, special
 * tokens, buffer and edge-case contracts, rejection of inconsistent metadata, and speed on 1 MB.
 */
#include "harness.h"

#include "text/tokenizer.h"

#include <dirent.h>
#include <stdint.h>

#define VOCAB_DIR "tokenizer-tests/llama.cpp-vocab"
#define SEP       "\n__ggml_vocab_test__\n"

/* ---- helpers ---------------------------------------------------------------------------------- */

/* Opens a GGUF and builds its tokenizer; NULL (after printing why) on failure. */
static kn_tokenizer *load_tok(const char *path) {
    kn_gguf g;
    if (kn_gguf_open(path, &g) != KILN_OK) {
        printf("  cannot open %s: %s\n", path, kn_error_msg());
        return NULL;
    }
    kn_tokenizer *t = NULL;
    kiln_status st = kn_tokenizer_load(&g, &t);
    if (st) printf("  cannot load the tokenizer of %s: %s\n", path, kn_error_msg());
    kn_gguf_close(&g);
    return t;
}

/* Tokenizes into a malloc'd array (exact size query first). */
static int32_t *tokenize(const kn_tokenizer *t, const char *s, size_t len, bool add_special, bool parse_special,
                         size_t *n) {
    size_t need = 0;
    kiln_status st = kn_tokenize(t, s, len, add_special, parse_special, NULL, 0, &need);
    if (st != KILN_OK && st != KILN_ERR_BUFFER_SMALL) return NULL;
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids) return NULL;
    st = kn_tokenize(t, s, len, add_special, parse_special, ids, need, n);
    if (st != KILN_OK || *n != need) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* Concatenated pieces of ids (malloc'd, NUL-terminated). */
static char *detokenize(const kn_tokenizer *t, const int32_t *ids, size_t n, bool render_special, size_t *len) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += kn_token_piece(t, ids[i], render_special, NULL, 0);
    char *s = malloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += kn_token_piece(t, ids[i], render_special, s + o, total - o);
    s[o] = 0;
    *len = o;
    return s;
}

/* Splits the .inp file into cases (the file ends with a separator). Returns the count. */
static size_t split_cases(char *inp, size_t len, char ***cases, size_t **lens) {
    size_t cap = 64, n = 0;
    *cases = malloc(cap * sizeof **cases);
    *lens = malloc(cap * sizeof **lens);
    size_t sl = strlen(SEP);
    char *p = inp, *end = inp + len;
    while (p < end) {
        char *q = memmem(p, (size_t)(end - p), SEP, sl);
        if (!q) break; /* text after the last separator (none in these files) is ignored */
        if (n == cap) {
            cap *= 2;
            *cases = realloc(*cases, cap * sizeof **cases);
            *lens = realloc(*lens, cap * sizeof **lens);
        }
        (*cases)[n] = p;
        (*lens)[n] = (size_t)(q - p);
        n++;
        p = q + sl;
    }
    return n;
}

/* Parses one line of ids from the .out file; returns the count; *p advances past the newline. */
static size_t parse_ids(char **p, char *end, int32_t *ids, size_t cap) {
    size_t n = 0;
    while (*p < end && **p != '\n') {
        if (**p == ' ') {
            (*p)++;
            continue;
        }
        char *e;
        long v = strtol(*p, &e, 10);
        if (e == *p) {
            (*p)++;
            continue;
        }
        if (n < cap) ids[n] = (int32_t)v;
        n++;
        *p = e;
    }
    if (*p < end) (*p)++;
    return n;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    printf("  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 64; i++) printf(" %d", ids[i]);
    printf("%s\n", n > 64 ? " ..." : "");
}

/* ---- conformance ------------------------------------------------------------------------------ */

static char g_vocab[400];   /* vocab file name for the current conformance run */
static char g_vectors[400]; /* name of the .inp/.out pair to use */

static void run_named(void (*fn)(void), const char *name) {
    kt_cur_failed = kt_cur_skipped = 0;
    fflush(stdout);
    fn();
    if (kt_cur_failed) {
        printf("FAIL %s\n", name);
        kt_fail++;
    } else if (kt_cur_skipped) {
        printf("SKIP %s: %s\n", name, kt_skip_why);
        kt_skip++;
    } else {
        printf("PASS %s\n", name);
        kt_pass++;
    }
    fflush(stdout);
}

static void conformance(void) {
    char path[1600], inp_path[1600], out_path[1600];
    snprintf(path, sizeof path, "%s/%s", kt_data(VOCAB_DIR), g_vocab);
    snprintf(inp_path, sizeof inp_path, "%s/%s.inp", kt_data(VOCAB_DIR), g_vectors);
    snprintf(out_path, sizeof out_path, "%s/%s.out", kt_data(VOCAB_DIR), g_vectors);
    size_t inp_len = 0, out_len = 0;
    char *inp = kt_read_file(inp_path, &inp_len), *outf = kt_read_file(out_path, &out_len);
    kn_tokenizer *t = load_tok(path);
    char **cases = NULL;
    size_t *lens = NULL;
    int32_t *expect = malloc(65536 * sizeof *expect);
    bool ok = inp && outf && t && expect;
    size_t n_cases = ok ? split_cases(inp, inp_len, &cases, &lens) : 0;
    char *op = outf, *oend = outf ? outf + out_len : NULL;
    size_t bad_case = SIZE_MAX;
    for (size_t c = 0; ok && c < n_cases; c++) {
        size_t n_exp = parse_ids(&op, oend, expect, 65536);
        size_t n_got = 0;
        int32_t *got = tokenize(t, cases[c], lens[c], false, false, &n_got);
        bool same = got && n_got == n_exp && memcmp(got, expect, n_got * sizeof *got) == 0;
        if (!same && bad_case == SIZE_MAX) {
            bad_case = c;
            printf("  %s: case %zu mismatch, text \"%.*s\"\n", g_vocab, c, (int)KN_MIN(lens[c], 200), cases[c]);
            print_ids("expected", expect, n_exp);
            if (got) print_ids("got     ", got, n_got);
            else printf("  tokenize failed: %s\n", kn_error_msg());
        }
        free(got);
    }
    if (ok && op != oend) printf("  %s: .out has more lines than .inp has cases\n", g_vocab);
    bool lines_ok = ok && op == oend;
    free(inp);
    free(outf);
    free(cases);
    free(lens);
    free(expect);
    kn_tokenizer_free(t);
    CHECK(ok);
    CHECKF(n_cases == 46, "%zu cases", n_cases);
    CHECK(lines_ok);
    CHECKF(bad_case == SIZE_MAX, "first mismatch at case %zu", bad_case);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One conformance run per vocab with vectors; returns the number of vocabs found. */
static int run_conformance_all(void) {
    DIR *d = opendir(kt_data(VOCAB_DIR));
    if (!d) return 0;
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "ggml-vocab-", 11) == 0 && l > 5 && strcmp(e->d_name + l - 5, ".gguf") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int ran = 0;
    for (int i = 0; i < n; i++) {
        char p1[512], p2[512];
        snprintf(p1, sizeof p1, "%s/%s.inp", kt_data(VOCAB_DIR), names[i]);
        snprintf(p2, sizeof p2, "%s/%s.out", kt_data(VOCAB_DIR), names[i]);
        if (kt_exists(p1) && kt_exists(p2)) {
            snprintf(g_vocab, sizeof g_vocab, "%s", names[i]);
            snprintf(g_vectors, sizeof g_vectors, "%s", names[i]);
            char label[300];
            snprintf(label, sizeof label, "conformance_%.*s", (int)(strlen(names[i]) - 16), names[i] + 11);
            run_named(conformance, label);
            ran++;
        }
        free(names[i]);
    }
    return ran;
}

static int g_n_conformance;
static void test_conformance_found(void) {
    if (!kt_exists(kt_data(VOCAB_DIR))) SKIP("no %s", kt_data(VOCAB_DIR));
    CHECKF(g_n_conformance >= 10, "only %d vocabs with vectors", g_n_conformance);
}

/* llama-2-tiny-random has the Llama 2 vocabulary: the llama-spm vectors apply. */
static void test_conformance_llama2_tiny(void) {
    char rel[128];
    snprintf(rel, sizeof rel, "models/llama-2-tiny-random/llama-2-tiny-random.gguf");
    if (!kt_exists(kt_data(rel))) SKIP("no %s", rel);
    snprintf(g_vocab, sizeof g_vocab, "../../%s", rel);
    snprintf(g_vectors, sizeof g_vectors, "ggml-vocab-llama-spm.gguf");
    conformance();
}

/* ---- stories260K: SPM with byte fallback ------------------------------------------------------- */

#define STORIES "models/stories260K/stories260K.gguf"

static kn_tokenizer *stories(void) { return load_tok(kt_data(STORIES)); }

static void test_stories_encode_decode(void) {
    if (!kt_exists(kt_data(STORIES))) SKIP("no %s", STORIES);
    kn_tokenizer *t = stories();
    CHECK(t);
    CHECK(kn_tok_n_vocab(t) == 512);
    int32_t bos = kn_tok_bos(t);
    CHECK(bos >= 0 && kn_tok_add_bos(t));
    CHECK(kn_tok_find(t, "<s>", 3) == bos);
    CHECK(kn_tok_is_eog(t, kn_tok_eos(t)) && !kn_tok_is_eog(t, bos));
    CHECK(kn_tok_is_special(t, bos));
    size_t n = 0;
    const char *text = "Once upon a time";
    int32_t *ids = tokenize(t, text, strlen(text), true, false, &n);
    /* expected: an independent implementation of llama2.c run.c's encode over the same vocab */
    static const char *const pieces[] = {"\xe2\x96\x81Once", "\xe2\x96\x81upon",
                                         "\xe2\x96\x81"
                                         "a",
                                         "\xe2\x96\x81time"};
    bool ok = ids && n == 5 && ids[0] == bos;
    for (size_t i = 0; ok && i < 4; i++) ok = ids[i + 1] == kn_tok_find(t, pieces[i], strlen(pieces[i]));
    if (!ok && ids) print_ids("got", ids, n);
    size_t dl = 0;
    char *dec = ok ? detokenize(t, ids, n, false, &dl) : NULL;
    bool dec_ok = dec && strcmp(dec, " Once upon a time") == 0; /* pieces keep the dummy prefix */
    /* the incremental detokenizer strips it after BOS */
    kn_detok d;
    kn_detok_init(&d, t, false, false);
    char acc[256] = "";
    size_t al = 0;
    for (size_t i = 0; ok && i < n; i++) {
        size_t l;
        const char *o = kn_detok_push(&d, ids[i], &l);
        memcpy(acc + al, o, l);
        al += l;
    }
    acc[al] = 0;
    free(ids);
    free(dec);
    kn_tokenizer_free(t);
    CHECK(ok);
    CHECK(dec_ok);
    CHECKF(strcmp(acc, text) == 0, "detok gave \"%s\"", acc);
}

/* Feeds ids one at a time; checks that every chunk is complete UTF-8 and returns the text. */
static char *detok_stream(const kn_tokenizer *t, const int32_t *ids, size_t n, bool at_start, bool *chunks_ok) {
    kn_detok d;
    kn_detok_init(&d, t, at_start, false);
    char *acc = malloc(n * 16 + 16);
    size_t al = 0;
    *chunks_ok = true;
    for (size_t i = 0; i <= n; i++) {
        size_t l;
        const char *o = i < n ? kn_detok_push(&d, ids[i], &l) : kn_detok_flush(&d, &l);
        /* a chunk must start at a character boundary and end with a complete character */
        for (size_t k = 0; k < l;) {
            unsigned char c = (unsigned char)o[k];
            size_t cl = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            if (cl == 0 || k + cl > l) {
                *chunks_ok = false;
                break;
            }
            for (size_t j = 1; j < cl; j++)
                if (((unsigned char)o[k + j] & 0xC0) != 0x80) *chunks_ok = false;
            k += cl;
        }
        memcpy(acc + al, o, l);
        al += l;
    }
    acc[al] = 0;
    return acc;
}

static void test_detok_utf8_byte_fallback(void) {
    if (!kt_exists(kt_data(STORIES))) SKIP("no %s", STORIES);
    kn_tokenizer *t = stories();
    CHECK(t);
    const char *text = "h\xc3\xa9llo \xf0\x9f\x98\x80 \xe4\xb8\x96\xe7\x95\x8c"; /* héllo 😀 世界 */
    size_t n = 0;
    int32_t *ids = tokenize(t, text, strlen(text), true, false, &n);
    int n_byte_tokens = 0;
    for (size_t i = 0; ids && i < n; i++) {
        char buf[8];
        size_t l = kn_token_piece(t, ids[i], false, buf, sizeof buf);
        if (l == 1 && (unsigned char)buf[0] >= 0x80) n_byte_tokens++;
    }
    bool chunks_ok = false;
    char *s = ids ? detok_stream(t, ids, n, false, &chunks_ok) : NULL;
    /* every byte of the text as its own <0xNN> token */
    int32_t bytes[64];
    size_t nb = 0;
    bytes[nb++] = kn_tok_bos(t);
    bool have_bytes = true;
    for (const char *p = text; *p; p++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)*p);
        bytes[nb] = kn_tok_find(t, name, 6);
        if (bytes[nb] < 0) have_bytes = false;
        nb++;
    }
    bool chunks2_ok = false;
    char *s2 = have_bytes ? detok_stream(t, bytes, nb, false, &chunks2_ok) : NULL;
    free(ids);
    kn_tokenizer_free(t);
    bool eq1 = s && strcmp(s, text) == 0, eq2 = s2 && strcmp(s2, text) == 0;
    free(s);
    free(s2);
    CHECKF(n_byte_tokens >= 10, "%d byte-fallback tokens", n_byte_tokens);
    CHECK(chunks_ok);
    CHECK(eq1);
    CHECK(have_bytes);
    CHECK(chunks2_ok);
    CHECK(eq2);
}

static void test_detok_invalid_bytes(void) {
    if (!kt_exists(kt_data(STORIES))) SKIP("no %s", STORIES);
    kn_tokenizer *t = stories();
    CHECK(t);
    int32_t b[256];
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b[i] = kn_tok_find(t, name, 6);
    }
    kn_detok d;
    kn_detok_init(&d, t, true, false);
    size_t l;
    const char *o = kn_detok_push(&d, b[0xFF], &l); /* never valid */
    bool r1 = l == 3 && memcmp(o, "\xef\xbf\xbd", 3) == 0;
    o = kn_detok_push(&d, b[0xC3], &l); /* lead byte: waits */
    bool r2 = l == 0 && d.n_pending == 1;
    o = kn_detok_push(&d, b['A'], &l); /* not a continuation */
    bool r3 = l == 4 && memcmp(o,
                               "\xef\xbf\xbd"
                               "A",
                               4) == 0;
    o = kn_detok_push(&d, b[0xE4], &l);
    o = kn_detok_push(&d, b[0xB8], &l);
    bool r4 = l == 0 && d.n_pending == 2;
    o = kn_detok_flush(&d, &l); /* truncated character at the end */
    bool r5 = l == 3 && memcmp(o, "\xef\xbf\xbd", 3) == 0 && d.n_pending == 0;
    o = kn_detok_push(&d, b[0xED], &l); /* surrogate: ED A0 80 */
    o = kn_detok_push(&d, b[0xA0], &l);
    bool r6 = l == 6 && memcmp(o, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0;
    o = kn_detok_push(&d, -1, &l);
    bool r7 = l == 0;
    o = kn_detok_push(&d, 1 << 30, &l);
    bool r8 = l == 0;
    kn_tokenizer_free(t);
    CHECK(r1);
    CHECK(r2);
    CHECK(r3);
    CHECK(r4);
    CHECK(r5);
    CHECK(r6);
    CHECK(r7);
    CHECK(r8);
}

static void test_detok_leading_space(void) {
    if (!kt_exists(kt_data(STORIES))) SKIP("no %s", STORIES);
    kn_tokenizer *t = stories();
    CHECK(t);
    int32_t once = kn_tok_find(t, "\xe2\x96\x81Once", 7), bos = kn_tok_bos(t);
    kn_detok d;
    size_t l;
    const char *o;
    kn_detok_init(&d, t, true, false); /* start of stream */
    o = kn_detok_push(&d, once, &l);
    bool a = l == 4 && memcmp(o, "Once", 4) == 0;
    o = kn_detok_push(&d, once, &l); /* later pieces keep their space */
    bool b = l == 5 && memcmp(o, " Once", 5) == 0;
    o = kn_detok_push(&d, bos, &l); /* BOS starts a new text */
    bool c = l == 0;
    o = kn_detok_push(&d, once, &l);
    bool e = l == 4 && memcmp(o, "Once", 4) == 0;
    kn_detok_init(&d, t, false, false); /* mid-stream: no stripping */
    o = kn_detok_push(&d, once, &l);
    bool f = l == 5 && memcmp(o, " Once", 5) == 0;
    kn_detok_init(&d, t, false, true); /* rendering specials shows BOS, still strips */
    o = kn_detok_push(&d, bos, &l);
    bool g = l == 3 && memcmp(o, "<s>", 3) == 0;
    o = kn_detok_push(&d, once, &l);
    bool h = l == 4 && memcmp(o, "Once", 4) == 0;
    kn_tokenizer_free(t);
    CHECK(once >= 0);
    CHECK(a);
    CHECK(b);
    CHECK(c);
    CHECK(e);
    CHECK(f);
    CHECK(g);
    CHECK(h);
}

/* ---- round trips -------------------------------------------------------------------------------- */

static const char *const BPE_VOCABS[] = {"gpt-2",          "mpt",          "falcon",  "starcoder", "refact",
                                         "deepseek-coder", "deepseek-llm", "gpt-neox"};
static const char *const SPM_VOCABS[] = {"llama-spm", "phi-3", "baichuan"};

static char *vocab_path(const char *name) {
    static char p[1024];
    snprintf(p, sizeof p, "%s/ggml-vocab-%s.gguf", kt_data(VOCAB_DIR), name);
    return p;
}

/* GPT-2's byte-to-unicode mapping, written out independently of the library. */
static uint32_t gpt2_byte_char(int b) {
    int n = 0;
    for (int x = 0; x < 256; x++) {
        bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
        if (x == b) return printable ? (uint32_t)x : 256u + (uint32_t)n;
        if (!printable) n++;
    }
    return 0;
}

/* True if every byte value has a token whose piece is exactly that byte (so arbitrary bytes,
 * including ill-formed UTF-8, survive a round trip). */
static bool all_bytes_representable(const kn_tokenizer *t, bool spm) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        size_t nl;
        if (spm) nl = (size_t)snprintf(name, sizeof name, "<0x%02X>", b);
        else {
            uint32_t cp = gpt2_byte_char(b);
            if (cp < 0x80) {
                name[0] = (char)cp;
                nl = 1;
            } else {
                name[0] = (char)(0xC0 | (cp >> 6));
                name[1] = (char)(0x80 | (cp & 0x3F));
                nl = 2;
            }
        }
        int32_t id = kn_tok_find(t, name, nl);
        char piece[8];
        if (id < 0 || kn_token_piece(t, id, false, piece, sizeof piece) != 1 || (unsigned char)piece[0] != b)
            return false;
    }
    return true;
}

static void test_round_trip(void) {
    char inp_path[1024];
    snprintf(inp_path, sizeof inp_path, "%s/ggml-vocab-gpt-2.gguf.inp", kt_data(VOCAB_DIR));
    size_t inp_len = 0;
    char *inp = kt_read_file(inp_path, &inp_len);
    if (!inp) SKIP("no %.200s", inp_path);
    char **cases;
    size_t *lens;
    size_t n_cases = split_cases(inp, inp_len, &cases, &lens);
    /* extra cases: ill-formed UTF-8 must come back byte for byte from the byte-level vocabs */
    const char *extra[] = {"\xff\xfe\xc3(\x80 abc \xed\xa0\x80 \xf4\x90\x80\x80", "a\0b"};
    size_t extra_len[] = {strlen(extra[0]), 3};
    int failures = 0, checked = 0;
    for (size_t v = 0; v < KN_ARRAY_LEN(BPE_VOCABS) + KN_ARRAY_LEN(SPM_VOCABS); v++) {
        bool spm = v >= KN_ARRAY_LEN(BPE_VOCABS);
        const char *name = spm ? SPM_VOCABS[v - KN_ARRAY_LEN(BPE_VOCABS)] : BPE_VOCABS[v];
        if (!kt_exists(vocab_path(name))) continue;
        kn_tokenizer *t = load_tok(vocab_path(name));
        if (!t) {
            failures++;
            continue;
        }
        bool bytes_ok = all_bytes_representable(t, spm);
        printf("  %s: %s\n", name,
               bytes_ok ? "all 256 bytes representable (ill-formed UTF-8 cases included)"
                        : "some bytes have no token (ill-formed UTF-8 cases skipped)");
        for (size_t c = 0; c < n_cases + (bytes_ok ? 2 : 0); c++) {
            const char *x = c < n_cases ? cases[c] : extra[c - n_cases];
            size_t xl = c < n_cases ? lens[c] : extra_len[c - n_cases];
            size_t n = 0, dl = 0;
            int32_t *ids = tokenize(t, x, xl, false, false, &n);
            char *dec = ids ? detokenize(t, ids, n, false, &dl) : NULL;
            /* SPM: the pieces carry the dummy-prefix space */
            bool ok = dec && (spm && xl ? (dl == xl + 1 && dec[0] == ' ' && memcmp(dec + 1, x, xl) == 0)
                                        : (dl == xl && memcmp(dec, x, xl) == 0));
            if (!ok && failures++ < 5)
                printf("  %s case %zu: round trip gave \"%.*s\" for \"%.*s\"\n", name, c, (int)dl, dec ? dec : "",
                       (int)xl, x);
            checked++;
            free(ids);
            free(dec);
        }
        kn_tokenizer_free(t);
    }
    free(cases);
    free(lens);
    free(inp);
    CHECK(checked > 0);
    CHECKF(failures == 0, "%d round-trip failures", failures);
}

/* ---- special tokens, pieces, contracts ------------------------------------------------------------ */

static void test_parse_special(void) {
    if (!kt_exists(vocab_path("gpt-2"))) SKIP("no gpt-2 vocab");
    kn_tokenizer *t = load_tok(vocab_path("gpt-2"));
    CHECK(t);
    int32_t eot = kn_tok_find(t, "<|endoftext|>", 13);
    const char *text = "Hello<|endoftext|> world<|endoftext|><|endoftext|>";
    size_t n1 = 0, n2 = 0;
    int32_t *a = tokenize(t, text, strlen(text), false, true, &n1);
    int32_t *b = tokenize(t, text, strlen(text), false, false, &n2);
    int n_eot_a = 0, n_eot_b = 0;
    for (size_t i = 0; a && i < n1; i++) n_eot_a += a[i] == eot;
    for (size_t i = 0; b && i < n2; i++) n_eot_b += b[i] == eot;
    bool shape = a && n1 == 5 && a[1] == eot && a[3] == eot && a[4] == eot;
    /* the piece of a control token is empty unless rendered */
    char buf[32];
    size_t hidden = kn_token_piece(t, eot, false, buf, sizeof buf);
    size_t shown = kn_token_piece(t, eot, true, buf, sizeof buf);
    bool shown_ok = shown == 13 && memcmp(buf, "<|endoftext|>", 13) == 0;
    /* byte-level pieces: "\xc4\xa0the" (Ġthe) decodes to " the" */
    int32_t the = kn_tok_find(t, "\xc4\xa0the", 5);
    size_t tl = kn_token_piece(t, the, false, buf, sizeof buf);
    bool the_ok = tl == 4 && memcmp(buf, " the", 4) == 0;
    free(a);
    free(b);
    CHECK(eot >= 0 && kn_tok_is_eog(t, eot) && kn_tok_eos(t) == eot);
    kn_tokenizer_free(t);
    CHECK(shape);
    CHECK(n_eot_a == 3);
    CHECK(n_eot_b == 0 && n2 > n1);
    CHECK(hidden == 0);
    CHECK(shown_ok);
    CHECK(the_ok);
}

static void test_parse_special_spm(void) {
    if (!kt_exists(kt_data(STORIES))) SKIP("no %s", STORIES);
    kn_tokenizer *t = stories();
    CHECK(t);
    int32_t bos = kn_tok_bos(t), eos = kn_tok_eos(t);
    const char *text = "<s>Once</s>upon</s> a";
    size_t n = 0;
    int32_t *ids = tokenize(t, text, strlen(text), false, true, &n);
    /* "<s>" "▁Once" "</s>" "▁upon" "</s>" "▁" "▁a": as in llama.cpp, a space is prefixed to the text
     * after each special token */
    int32_t mark = kn_tok_find(t, "\xe2\x96\x81", 3);
    bool ok = ids && n == 7 && ids[0] == bos && ids[1] == kn_tok_find(t, "\xe2\x96\x81Once", 7) && ids[2] == eos &&
              ids[3] == kn_tok_find(t, "\xe2\x96\x81upon", 7) && ids[4] == eos && mark >= 0 && ids[5] == mark &&
              ids[6] == kn_tok_find(t,
                                    "\xe2\x96\x81"
                                    "a",
                                    4);
    if (!ok && ids) print_ids("got", ids, n);
    free(ids);
    ids = tokenize(t, text, strlen(text), false, false, &n);
    bool plain = ids && n > 4;
    for (size_t i = 0; ids && i < n; i++) plain = plain && ids[i] != bos && ids[i] != eos;
    free(ids);
    /* pieces: U+2581 -> space, <0x41> -> "A", control -> "" */
    char buf[16];
    size_t l1 = kn_token_piece(t, kn_tok_find(t, "\xe2\x96\x81Once", 7), false, buf, sizeof buf);
    bool p1 = l1 == 5 && memcmp(buf, " Once", 5) == 0;
    size_t l2 = kn_token_piece(t, kn_tok_find(t, "<0x41>", 6), false, buf, sizeof buf);
    bool p2 = l2 == 1 && buf[0] == 'A';
    bool p3 = kn_token_piece(t, bos, false, buf, sizeof buf) == 0 &&
              kn_token_piece(t, bos, true, buf, sizeof buf) == 3 && kn_token_piece(t, -5, true, buf, 16) == 0 &&
              kn_token_piece(t, 512, true, buf, 16) == 0;
    kn_tokenizer_free(t);
    CHECK(ok);
    CHECK(plain);
    CHECK(p1);
    CHECK(p2);
    CHECK(p3);
}

/* User-defined tokens are cut out even without parse_special; Phi-3's strip the whitespace after
 * them (llama.cpp's rule for that model family). */
static void test_user_defined_phi3(void) {
    if (!kt_exists(vocab_path("phi-3"))) SKIP("no phi-3 vocab");
    kn_tokenizer *t = load_tok(vocab_path("phi-3"));
    CHECK(t);
    int32_t slash_s = kn_tok_find(t, "</s>", 4), end = kn_tok_find(t, "<|end|>", 7);
    int32_t a = kn_tok_find(t,
                            "\xe2\x96\x81"
                            "a",
                            4),
            b = kn_tok_find(t,
                            "\xe2\x96\x81"
                            "b",
                            4);
    const char *text = "a</s>  b<|end|>\nb";
    size_t n1 = 0, n2 = 0;
    int32_t *x = tokenize(t, text, strlen(text), false, false, &n1);
    int32_t *y = tokenize(t, text, strlen(text), false, true, &n2);
    bool plain = x && n1 > 4 && x[0] == a && x[1] == slash_s && x[2] == b;
    for (size_t i = 0; x && i < n1; i++) plain = plain && x[i] != end;
    bool special = y && n2 == 5 && y[0] == a && y[1] == slash_s && y[2] == b && y[3] == end && y[4] == b;
    if (!special && y) print_ids("got", y, n2);
    bool eot = kn_tok_eot(t) == end && kn_tok_is_eog(t, end);
    free(x);
    free(y);
    kn_tokenizer_free(t);
    CHECK(plain);
    CHECK(special);
    CHECK(eot);
}

static void test_wordpiece_special(void) {
    if (!kt_exists(vocab_path("bert-bge"))) SKIP("no bert-bge vocab");
    kn_tokenizer *t = load_tok(vocab_path("bert-bge"));
    CHECK(t);
    const char *text = "Hello, WORLD!";
    size_t n = 0;
    int32_t *ids = tokenize(t, text, strlen(text), true, false, &n);
    int32_t cls = kn_tok_find(t, "[CLS]", 5), sep = kn_tok_find(t, "[SEP]", 5);
    const char *words[] = {"\xe2\x96\x81hello", "\xe2\x96\x81,", "\xe2\x96\x81world", "\xe2\x96\x81!"};
    bool ok = ids && n == 6 && ids[0] == cls && ids[5] == sep && kn_tok_bos(t) == cls;
    for (size_t i = 0; ok && i < 4; i++) ok = ids[i + 1] == kn_tok_find(t, words[i], strlen(words[i]));
    if (!ok && ids) print_ids("got", ids, n);
    free(ids);
    /* an unknown word is [UNK]; so is a word of more than 100 characters */
    char longw[160];
    memset(longw, 'a', 150);
    longw[150] = 0;
    ids = tokenize(t, longw, 150, false, false, &n);
    bool unk = ids && n == 1 && ids[0] == kn_tok_unk(t) && ids[0] >= 0;
    free(ids);
    kn_tokenizer_free(t);
    CHECK(ok);
    CHECK(unk);
}

static void test_buffer_small_and_empty(void) {
    if (!kt_exists(kt_data(STORIES))) SKIP("no %s", STORIES);
    kn_tokenizer *t = stories();
    CHECK(t);
    int32_t out[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    size_t n = 99;
    kiln_status st = kn_tokenize(t, "Once upon a time", 16, true, false, out, 2, &n);
    bool small = st == KILN_ERR_BUFFER_SMALL && n == 5 && out[2] == -7;
    st = kn_tokenize(t, "Once upon a time", 16, true, false, NULL, 0, &n);
    bool query = st == KILN_ERR_BUFFER_SMALL && n == 5;
    st = kn_tokenize(t, "Once upon a time", 16, true, false, out, 5, &n);
    bool exact = st == KILN_OK && n == 5;
    st = kn_tokenize(t, "", 0, false, false, out, 8, &n);
    bool empty = st == KILN_OK && n == 0;
    st = kn_tokenize(t, NULL, 0, true, false, out, 8, &n);
    bool empty_bos = st == KILN_OK && n == 1 && out[0] == kn_tok_bos(t);
    st = kn_tokenize(t, NULL, 5, true, false, out, 8, &n);
    bool bad_arg = st == KILN_ERR_INVALID_ARG;
    /* a piece longer than the buffer: full length returned, only cap bytes written */
    char buf[4] = {'x', 'x', 'x', 'x'};
    size_t l = kn_token_piece(t, kn_tok_find(t, "\xe2\x96\x81Once", 7), false, buf, 2);
    bool piece_small = l == 5 && buf[0] == ' ' && buf[1] == 'O' && buf[2] == 'x';
    kn_tokenizer_free(t);
    CHECK(small);
    CHECK(query);
    CHECK(exact);
    CHECK(empty);
    CHECK(empty_bos);
    CHECK(bad_arg);
    CHECK(piece_small);
}

static void test_invalid_utf8_input(void) {
    const char *names[] = {"llama-spm", "gpt-2", "bert-bge", "deepseek-llm", "falcon"};
    unsigned seed = 12345;
    int loaded = 0;
    for (size_t v = 0; v < KN_ARRAY_LEN(names); v++) {
        if (!kt_exists(vocab_path(names[v]))) continue;
        kn_tokenizer *t = load_tok(vocab_path(names[v]));
        CHECK(t);
        loaded++;
        char buf[512];
        for (int round = 0; round < 50; round++) {
            size_t len = (size_t)(round * 7 % 500) + 1;
            for (size_t i = 0; i < len; i++) {
                seed = seed * 1103515245u + 12345u;
                buf[i] = (char)(seed >> 16);
            }
            size_t n = 0;
            int32_t *ids = tokenize(t, buf, len, true, true, &n);
            bool ok = ids != NULL;
            for (size_t i = 0; ids && i < n; i++) ok = ok && ids[i] >= 0 && ids[i] < kn_tok_n_vocab(t);
            free(ids);
            if (!ok) kn_tokenizer_free(t);
            CHECKF(ok, "%s round %d", names[v], round);
        }
        kn_tokenizer_free(t);
    }
    if (!loaded) SKIP("no vocabs");
}

/* ---- inconsistent metadata ---------------------------------------------------------------------- */

/* A tiny GGUF v3 writer for hand-made files (metadata only). */
typedef struct gw {
    unsigned char *b;
    size_t n, cap;
    uint64_t n_kv;
} gw;

static void gw_put(gw *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->b = realloc(w->b, w->cap);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void gw_u32(gw *w, uint32_t v) { gw_put(w, &v, 4); }
static void gw_u64(gw *w, uint64_t v) { gw_put(w, &v, 8); }
static void gw_str(gw *w, const char *s) {
    gw_u64(w, strlen(s));
    gw_put(w, s, strlen(s));
}
static void gw_key(gw *w, const char *k, uint32_t type) {
    gw_str(w, k);
    gw_u32(w, type);
    w->n_kv++;
}
static void gw_kv_str(gw *w, const char *k, const char *v) {
    gw_key(w, k, 8);
    gw_str(w, v);
}
static void gw_kv_u32(gw *w, const char *k, uint32_t v) {
    gw_key(w, k, 4);
    gw_u32(w, v);
}
static void gw_kv_bool(gw *w, const char *k, bool v) {
    unsigned char c = v;
    gw_key(w, k, 7);
    gw_put(w, &c, 1);
}
static void gw_kv_strs(gw *w, const char *k, const char *const *s, size_t n) {
    gw_key(w, k, 9);
    gw_u32(w, 8);
    gw_u64(w, n);
    for (size_t i = 0; i < n; i++) gw_str(w, s[i]);
}
static void gw_kv_i32s(gw *w, const char *k, const int32_t *v, size_t n) {
    gw_key(w, k, 9);
    gw_u32(w, 5);
    gw_u64(w, n);
    gw_put(w, v, 4 * n);
}
static void gw_kv_f32s(gw *w, const char *k, const float *v, size_t n) {
    gw_key(w, k, 9);
    gw_u32(w, 6);
    gw_u64(w, n);
    gw_put(w, v, 4 * n);
}

/* Writes header + w's key/values to a file in the scratch dir; loads its tokenizer. */
static kiln_status load_written(gw *w, const char *name, kn_tokenizer **t) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", kt_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    uint32_t ver = 3;
    uint64_t nt = 0;
    fwrite("GGUF", 1, 4, f);
    fwrite(&ver, 4, 1, f);
    fwrite(&nt, 8, 1, f);
    fwrite(&w->n_kv, 8, 1, f);
    fwrite(w->b, 1, w->n, f);
    fclose(f);
    free(w->b);
    memset(w, 0, sizeof *w);
    *t = NULL;
    kn_gguf g;
    kiln_status st = kn_gguf_open(path, &g);
    if (st) {
        printf("  %s: gguf: %s\n", name, kn_error_msg());
        return KILN_ERR_INTERNAL;
    }
    st = kn_tokenizer_load(&g, t);
    kn_gguf_close(&g);
    return st;
}

/* A small consistent BPE vocabulary: bytes a, b, c, their merges, and an end token. */
static const char *const MINI_TOKENS[] = {"a", "b", "c", "ab", "abc", "<|end|>", "\xc4\xa0"};
static const char *const MINI_MERGES[] = {"a b", "ab c"};
static const int32_t MINI_TYPES[] = {1, 1, 1, 1, 1, 3, 1};

typedef enum {
    BAD_NONE,
    BAD_TYPES_LEN,
    BAD_BOS,
    BAD_MERGE,
    BAD_NO_MODEL,
    BAD_MODEL,
    BAD_PRE,
    BAD_SCORES,
    BAD_TOKENS_TYPE,
    BAD_LONG_TOKEN,
    BAD_NO_MERGES,
    BAD_ADD_EOS,
    BAD_EMPTY_VOCAB
} bad_kind;

static void mini(gw *w, bad_kind bad) {
    size_t nt = KN_ARRAY_LEN(MINI_TOKENS);
    if (bad != BAD_NO_MODEL) gw_kv_str(w, "tokenizer.ggml.model", bad == BAD_MODEL ? "t5" : "gpt2");
    gw_kv_str(w, "tokenizer.ggml.pre", bad == BAD_PRE ? "no-such-pre" : "gpt-2");
    if (bad == BAD_TOKENS_TYPE) gw_kv_i32s(w, "tokenizer.ggml.tokens", MINI_TYPES, nt);
    else if (bad == BAD_EMPTY_VOCAB) gw_kv_strs(w, "tokenizer.ggml.tokens", MINI_TOKENS, 0);
    else if (bad == BAD_LONG_TOKEN) {
        static char longtok[2001];
        memset(longtok, 'x', 2000);
        const char *toks[KN_ARRAY_LEN(MINI_TOKENS)];
        memcpy(toks, MINI_TOKENS, sizeof toks);
        toks[2] = longtok;
        gw_kv_strs(w, "tokenizer.ggml.tokens", toks, nt);
    } else gw_kv_strs(w, "tokenizer.ggml.tokens", MINI_TOKENS, nt);
    gw_kv_i32s(w, "tokenizer.ggml.token_type", MINI_TYPES, bad == BAD_TYPES_LEN ? nt - 1 : nt);
    if (bad == BAD_SCORES) {
        float sc[3] = {0, 0, 0};
        gw_kv_f32s(w, "tokenizer.ggml.scores", sc, 3);
    }
    if (bad == BAD_MERGE) {
        const char *m[] = {"a b", "abc"};
        gw_kv_strs(w, "tokenizer.ggml.merges", m, 2);
    } else if (bad != BAD_NO_MERGES) {
        gw_kv_strs(w, "tokenizer.ggml.merges", MINI_MERGES, KN_ARRAY_LEN(MINI_MERGES));
    }
    gw_kv_u32(w, "tokenizer.ggml.bos_token_id", bad == BAD_BOS ? 7 : 5);
    if (bad != BAD_ADD_EOS) gw_kv_u32(w, "tokenizer.ggml.eos_token_id", 5);
    gw_kv_u32(w, "tokenizer.ggml.padding_token_id", 4294967295u);
    if (bad == BAD_ADD_EOS) gw_kv_bool(w, "tokenizer.ggml.add_eos_token", true);
}

static void test_bad_metadata(void) {
    gw w = {0};
    kn_tokenizer *t;
    mini(&w, BAD_NONE);
    kiln_status st = load_written(&w, "good", &t);
    CHECKF(st == KILN_OK, "good file: %s", kn_error_msg());
    size_t n = 0;
    int32_t *ids = tokenize(t, "abcab<|end|>c", 13, false, true, &n);
    bool ok = ids && n == 4 && ids[0] == 4 && ids[1] == 3 && ids[2] == 5 && ids[3] == 2;
    free(ids);
    bool eog = kn_tok_is_eog(t, 5) && kn_tok_eos(t) == 5;
    kn_tokenizer_free(t);
    CHECK(ok);
    CHECK(eog);

    static const struct {
        bad_kind kind;
        kiln_status want;
        const char *needle;
    } cases[] = {
        {BAD_TYPES_LEN, KILN_ERR_FORMAT, "token_type"},  {BAD_BOS, KILN_ERR_FORMAT, "bos_token_id"},
        {BAD_MERGE, KILN_ERR_FORMAT, "merges"},          {BAD_NO_MODEL, KILN_ERR_FORMAT, "tokenizer.ggml.model"},
        {BAD_MODEL, KILN_ERR_UNSUPPORTED, "t5"},         {BAD_PRE, KILN_ERR_UNSUPPORTED, "no-such-pre"},
        {BAD_SCORES, KILN_ERR_FORMAT, "scores"},         {BAD_TOKENS_TYPE, KILN_ERR_FORMAT, "tokens"},
        {BAD_LONG_TOKEN, KILN_ERR_FORMAT, "token 2"},    {BAD_NO_MERGES, KILN_ERR_FORMAT, "merges"},
        {BAD_ADD_EOS, KILN_ERR_FORMAT, "add_eos_token"}, {BAD_EMPTY_VOCAB, KILN_ERR_FORMAT, "tokens"},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        mini(&w, cases[i].kind);
        st = load_written(&w, name, &t);
        CHECKF(st == cases[i].want && t == NULL, "case %zu: status %d (%s)", i, st, kn_error_msg());
        CHECKF(strstr(kn_error_msg(), cases[i].needle) != NULL, "case %zu: message \"%s\"", i, kn_error_msg());
    }
}

/* ---- speed -------------------------------------------------------------------------------------- */

static void test_speed_1mb(void) {
    char inp_path[1024];
    snprintf(inp_path, sizeof inp_path, "%s/ggml-vocab-gpt-2.gguf.inp", kt_data(VOCAB_DIR));
    size_t inp_len = 0;
    char *inp = kt_read_file(inp_path, &inp_len);
    if (!inp) SKIP("no %.200s", inp_path);
    size_t len = 1 << 20;
    char *text = malloc(len);
    for (size_t o = 0; o < len; o += inp_len) memcpy(text + o, inp, KN_MIN(inp_len, len - o));
    free(inp);
    /* cut at a character boundary so the text is valid UTF-8 */
    while (len && ((unsigned char)text[len - 1] & 0xC0) == 0x80) len--;
    if (len && (unsigned char)text[len - 1] >= 0xC0) len--;
    const char *names[] = {"llama-spm", "gpt-2", "deepseek-llm", "falcon", "bert-bge", "mpt"};
    double worst = 0;
    for (size_t v = 0; v < KN_ARRAY_LEN(names); v++) {
        if (!kt_exists(vocab_path(names[v]))) continue;
        double t0 = kn_now_ms();
        kn_tokenizer *t = load_tok(vocab_path(names[v]));
        double t1 = kn_now_ms();
        CHECK(t);
        size_t n = 0;
        int32_t *ids = tokenize(t, text, len, true, true, &n);
        double t2 = kn_now_ms();
        printf("  %-13s load %6.1f ms, tokenize 1 MiB %7.1f ms (%zu tokens)\n", names[v], t1 - t0, t2 - t1, n);
        free(ids);
        kn_tokenizer_free(t);
        CHECK(ids != NULL);
        if (t2 - t1 > worst) worst = t2 - t1;
    }
    free(text);
    /* well under a second in an optimized build; the bound leaves room for sanitizer builds and
     * a noisy machine */
    CHECKF(worst < 3000, "%.0f ms", worst);
}

int main(void) {
    g_n_conformance = run_conformance_all();
    RUN(test_conformance_found);
    RUN(test_conformance_llama2_tiny);
    RUN(test_stories_encode_decode);
    RUN(test_detok_utf8_byte_fallback);
    RUN(test_detok_invalid_bytes);
    RUN(test_detok_leading_space);
    RUN(test_round_trip);
    RUN(test_parse_special);
    RUN(test_parse_special_spm);
    RUN(test_user_defined_phi3);
    RUN(test_wordpiece_special);
    RUN(test_buffer_small_and_empty);
    RUN(test_invalid_utf8_input);
    RUN(test_bad_metadata);
    RUN(test_speed_1mb);
    return kt_summary();
}
