/*
 * fuzz_grammar.c - libFuzzer harness of the grammar compilers (GBNF, JSON Schema, JSON mode) and of
 * the token mask computed from a compiled grammar.
 *
 * Feeds: the first byte picks the compiler and its options (bits 0-1: GBNF, JSON Schema, JSON
 * Schema in strict mode, GBNF as a lazy grammar whose trigger is the text's first line; bit 2:
 * the vocabulary with special tokens; bit 3: strip the first token's leading space); then the
 * grammar or schema text up to the first NUL; then a sample. A grammar that compiles has its GBNF
 * text compiled again (it must compile), is asked whether the sample is a sentence, and drives a
 * matcher over stories260K's vocabulary (bit 4: over a small vocabulary of UTF-8 pieces instead)
 * beside the reference matcher (KN_GMATCH_PLAIN: every token stepped byte by byte): each sample
 * byte picks one of the allowed tokens of the current mask (whose popcount must equal the count
 * the matcher gives, and which must equal the reference's bit for bit), for up to 32 steps, then
 * the rest of the sample is fed as bytes. Seeds: the grammars of tests/grammars and small schemas
 * (tests/fuzz/corpus/grammar/).
 */
#include "fuzz.h"

#include "sample/vtrie.h"

static kiln_model *vocab;
static kn_vtrie *utf8_vocab;

/* Every string of one or two pieces over ASCII (quotes, a backslash, a newline among them), UTF-8
 * characters whose lead bytes a class such as \p{L} splits (é and ×, 中 and the hexagram ䷀, ア
 * and the ideographic space), a stray continuation byte and a cut character, a few longer runs,
 * and an empty end-of-generation token: the paths of the mask that stories260K's vocabulary,
 * nearly all ASCII, leaves alone. NULL when memory runs out. */
static kn_vtrie *make_utf8_vocab(void) {
    static const char *const pieces[] = {"a", "Z", "7",  " ",  "_",  "\"", "\\", "\n",   "é",       "\xc3\x97",
                                         "д", "α", "中", "䷀", "ア", "　", "😀",  "\x80", "\xe4\xb8"};
    static const char *const longer[] = {"中中中中", "ééé", "aaaaaaaa", " 中 a", "\xe3\x80\x80\xe3\x82\xa2"};
    enum { A = sizeof pieces / sizeof *pieces, N = A + A * A + sizeof longer / sizeof *longer + 1 };
    static char buf[N][16];
    static const char *text[N];
    static uint32_t len[N];
    int32_t n = 0;
    for (int i = 0; i < A; i++) snprintf(buf[n++], 16, "%s", pieces[i]);
    for (int i = 0; i < A; i++)
        for (int j = 0; j < A; j++) snprintf(buf[n++], 16, "%s%s", pieces[i], pieces[j]);
    for (size_t i = 0; i < sizeof longer / sizeof *longer; i++) snprintf(buf[n++], 16, "%s", longer[i]);
    buf[n++][0] = 0;
    for (int32_t i = 0; i < n; i++) {
        text[i] = buf[i];
        len[i] = (uint32_t)strlen(buf[i]);
    }
    const int32_t eog[] = {n - 1};
    kn_vtrie *t = NULL;
    return kn_vtrie_new(n, text, len, eog, 1, &t) == KILN_OK ? t : NULL;
}

/* The n-th allowed token (mod the count) of mask over n_vocab tokens. */
static int32_t pick(const uint64_t *mask, int32_t n_vocab, int32_t n_allowed, uint8_t b) {
    int32_t want = b % n_allowed;
    for (int32_t t = 0; t < n_vocab; t++)
        if (mask[t / 64] >> (t % 64) & 1) {
            if (want-- == 0) return t;
        }
    abort(); /* fewer bits set than the count said */
}

static void drive(const kiln_grammar *g, const uint8_t flags, fz_in *sample) {
    const kn_vtrie *t = (flags & 16) ? utf8_vocab : (flags & 4) ? kn_model_vtrie_special(vocab) : kn_model_vtrie(vocab);
    if (!t) return;
    const kn_gmatch_opts plain = {.flags = KN_GMATCH_PLAIN};
    kn_gmatch *m = NULL, *ref = NULL;
    if (kn_gmatch_new(g, t, (flags & 8) != 0, &m) != KILN_OK) return;
    if (kn_gmatch_new_ex(g, t, (flags & 8) != 0, &plain, &ref) != KILN_OK) {
        kn_gmatch_free(m);
        return;
    }
    const int32_t n_vocab = t->n_vocab;
    for (int step = 0; step < 32 && sample->n; step++) {
        int32_t n_allowed = 0, n_ref = 0;
        const uint64_t *mask = kn_gmatch_mask(m, &n_allowed);
        const uint64_t *want = kn_gmatch_mask(ref, &n_ref);
        if (kn_gmatch_failed(m) || kn_gmatch_failed(ref)) break; /* the store's caps: no comparison */
        if (n_allowed != n_ref || (n_allowed && memcmp(mask, want, (size_t)t->words * sizeof *mask))) {
            fprintf(stderr, "step %d: the mask allows %d tokens, the reference %d\n", step, n_allowed, n_ref);
            abort();
        }
        if (!mask || n_allowed <= 0) break;
        int32_t count = 0;
        for (int32_t w = 0; w < (n_vocab + 63) / 64; w++) count += __builtin_popcountll(mask[w]);
        if (count != n_allowed) abort();
        int32_t tok = pick(mask, n_vocab, n_allowed, fz_byte(sample));
        const kiln_status st = kn_gmatch_accept(m, tok), st_ref = kn_gmatch_accept(ref, tok);
        if ((st != KILN_OK) != (st_ref != KILN_OK) && !kn_gmatch_failed(m) && !kn_gmatch_failed(ref))
            abort(); /* one refused the token, the other took it, neither at a cap */
        if (st != KILN_OK) break;
        (void)kn_gmatch_accepting(m);
        if (kn_gmatch_final(m)) break;
    }
    if (sample->n) (void)kn_gmatch_feed(m, (const char *)sample->p, sample->n);
    kn_gmatch_free(m);
    kn_gmatch_free(ref);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vocab) vocab = fz_model("models/stories260K/stories260K.gguf", true);
    if (!utf8_vocab && !(utf8_vocab = make_utf8_vocab())) return 0;
    if (size == 0) return 0;
    fz_in in = {data, size};
    const uint8_t flags = fz_byte(&in);
    const uint8_t *text;
    size_t len;
    fz_until_nul(&in, &text, &len);
    kiln_grammar_params p = kiln_grammar_default_params();
    const char *trigger[1];
    char first_line[KILN_GRAMMAR_MAX_TRIGGER_LEN + 1];
    switch (flags & 3) {
        case 0: p.kind = KILN_GRAMMAR_GBNF; break;
        case 1: p.kind = KILN_GRAMMAR_JSON_SCHEMA; break;
        case 2:
            p.kind = KILN_GRAMMAR_JSON_SCHEMA;
            p.strict = true;
            break;
        default: {
            p.kind = KILN_GRAMMAR_GBNF;
            const uint8_t *nl = memchr(text, '\n', len);
            size_t k = nl ? (size_t)(nl - text) : 0;
            if (k == 0 || k > KILN_GRAMMAR_MAX_TRIGGER_LEN) break;
            memcpy(first_line, text, k);
            first_line[k] = 0;
            trigger[0] = first_line;
            p.triggers = trigger;
            p.n_triggers = 1;
            text += k + 1;
            len -= k + 1;
            break;
        }
    }
    kiln_grammar *g = NULL;
    if (kiln_grammar_compile((const char *)text, len, &p, &g) != KILN_OK) return 0;
    const char *gbnf = kiln_grammar_gbnf(g);
    kiln_grammar *again = NULL;
    if (!gbnf || kiln_grammar_compile(gbnf, strlen(gbnf), NULL, &again) != KILN_OK) {
        fprintf(stderr, "the GBNF of a compiled grammar does not compile: %s\n%s\n", kiln_last_error(),
                gbnf ? gbnf : "(null)");
        abort();
    }
    kiln_grammar_free(again);
    (void)kiln_grammar_accepts(g, (const char *)in.p, in.n);
    drive(g, flags, &in);
    kiln_grammar_free(g);
    return 0;
}
