/*
 * test_gmask.c - token masks of constrained output (sample/gmask.h): the vocabulary trie's layout,
 * exact masks on small synthetic vocabularies (tokens that end inside a UTF-8 character,
 * end-of-generation only when the text is a sentence, the first space of a SentencePiece text),
 * and the fast path (trie walk, whole subtrees, mask cache) equal to the reference (every token
 * stepped byte by byte) bit for bit, on several grammars over real vocabularies, also when the
 * state store is compacted under a tiny memory cap, inside counted strings at every count, and
 * inside strings of Unicode classes that split a kind of characters (by lead byte, inside a
 * character) on synthetic vocabularies and a real one of 102,400 tokens.
 */
#include "harness.h"

#include "model/model.h"
#include "sample/grammar_prog.h"
#include "sample/vtrie.h"

#include <pthread.h>

/* ---- grammars --------------------------------------------------------------------------------- */

static const char *JSON_GBNF =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" "
    "ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* Code points beyond ASCII: Greek and Cyrillic letters, CJK ideographs, any character in quotes. */
static const char *UTF8_GBNF = "root ::= word (\" \" word){0,6} \".\"? quote?\n"
                               "word ::= [α-ωΑ-Ωа-яА-Я]+ | [一-龥]{1,8} | [a-z]+\n"
                               "quote ::= \" «\" [^»\\n]{0,30} \"»\"\n";

/* Literals that tokens cross: a token may cover the end of one element and the start of the next. */
static const char *SPAN_GBNF = "root ::= \"once\" \" upon\" \" a\" (\" time\" | \" tim\" [e]? \"e\") \",\" tail\n"
                               "tail ::= \" there\" \" was\" [ ]? \"a\"? [a-z ]{0,12} \".\"\n";

/* Alternatives sharing prefixes, recursion, bounded repetitions without loops. */
static const char *ALT_GBNF = "root ::= item (\", \" item){0,5}\n"
                              "item ::= \"cat\" | \"category\" | \"dog\" | \"do\" | \"door\" | num | \"(\" root \")\"\n"
                              "num  ::= [1-9] [0-9]{0,3} | \"0\"\n";

static kiln_grammar *compile(const char *gbnf) {
    kiln_grammar *g = NULL;
    if (kiln_grammar_compile(gbnf, strlen(gbnf), NULL, &g)) printf("  compile failed: %s\n", kiln_last_error());
    return g;
}

/* ---- vocabularies ------------------------------------------------------------------------------ */

static kiln_model *load_vocab(const char *rel) {
    if (!kt_exists(kt_data(rel))) return NULL;
    kiln_model_params p = kiln_model_default_params();
    p.vocab_only = true;
    kiln_model *m = NULL;
    if (kiln_model_load(kt_data(rel), &p, &m)) printf("  load failed: %s\n", kiln_last_error());
    return m;
}

#define STORIES   "models/stories260K/stories260K.gguf"
#define VOCAB_SPM "tokenizer-tests/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"
#define VOCAB_BPE "tokenizer-tests/llama.cpp-vocab/ggml-vocab-gpt-2.gguf"
#define VOCAB_CJK "tokenizer-tests/llama.cpp-vocab/ggml-vocab-deepseek-llm.gguf"

static bool bit(const uint64_t *mask, int32_t id) { return mask[id >> 6] >> (id & 63) & 1; }

/* A trie over explicit tokens (texts NUL-terminated unless len given). */
static kn_vtrie *synth(int32_t n, const char *const *text, const int32_t *eog, int32_t n_eog) {
    uint32_t len[64];
    for (int32_t i = 0; i < n; i++) len[i] = (uint32_t)strlen(text[i]);
    kn_vtrie *t = NULL;
    if (kn_vtrie_new(n, text, len, eog, n_eog, &t)) printf("  trie failed: %s\n", kn_error_msg());
    return t;
}

/* ---- the trie ------------------------------------------------------------------------------------ */

/* Every node's token ranges hold exactly the tokens whose text has the node's path as prefix (or
 * equals it), and sorted order is byte order. */
static bool trie_consistent(const kn_vtrie *t, char *why, size_t cap) {
    static uint8_t path[KN_VTRIE_MAX_TEXT + 1];
    for (int32_t k = 1; k < t->n_text; k++) {
        const int32_t a = t->order[k - 1], b = t->order[k];
        const uint32_t la = t->tok_len[a], lb = t->tok_len[b];
        const int c = memcmp(t->text + t->tok_off[a], t->text + t->tok_off[b], KN_MIN(la, lb));
        if (c > 0 || (c == 0 && la > lb)) return snprintf(why, cap, "tokens %d, %d out of order", a, b), false;
    }
    for (uint32_t i = 1; i < t->n_nodes; i++) {
        const kn_vnode *n = &t->nodes[i];
        path[n->depth - 1] = n->byte;
        if (n->skip <= i || n->skip > t->n_nodes) return snprintf(why, cap, "node %u skips to %u", i, n->skip), false;
        for (uint32_t k = n->lo; k < t->nodes[n->skip].lo; k++) {
            const int32_t id = t->order[k];
            const bool ends = k < t->nodes[i + 1].lo;
            if (t->tok_len[id] < n->depth || memcmp(t->text + t->tok_off[id], path, n->depth) ||
                ends != (t->tok_len[id] == n->depth))
                return snprintf(why, cap, "token %d misplaced under node %u", id, i), false;
        }
    }
    return true;
}

static void test_trie_layout_synthetic(void) {
    const char *text[] = {"b", "ab", "a", "abc", "", "ab", "\xe4\xb8\xad", "\xe4", "zz", "a\"", "b"};
    const int32_t eog[] = {4};
    kn_vtrie *t = synth(11, text, eog, 1);
    CHECK(t);
    char why[128] = "";
    CHECKF(trie_consistent(t, why, sizeof why), "%s", why);
    CHECK(t->n_text == 10); /* the empty EOG token has no text */
    CHECK(t->max_depth == 3);
    /* duplicates share a node and sort by id */
    CHECK(t->order[0] == 2 && t->order[1] == 9 && t->order[2] == 1 && t->order[3] == 5 && t->order[4] == 3);
    kn_vtrie_free(t);

    /* bad input */
    uint32_t len[2] = {1, KN_VTRIE_MAX_TEXT + 1};
    const char *two[2] = {"x", "y"};
    CHECK(kn_vtrie_new(2, two, len, NULL, 0, &t) == KILN_ERR_INVALID_ARG && !t);
    len[1] = 1;
    const int32_t bad_eog[] = {2};
    CHECK(kn_vtrie_new(2, two, len, bad_eog, 1, &t) == KILN_ERR_INVALID_ARG && !t);
    CHECK(kn_vtrie_new(0, NULL, NULL, NULL, 0, &t) == KILN_OK && t && t->n_nodes == 1);
    kn_vtrie_free(t);
}

static void test_trie_of_models(void) {
    const char *rels[] = {STORIES, VOCAB_SPM, VOCAB_BPE};
    int n_done = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(rels); i++) {
        kiln_model *m = load_vocab(rels[i]);
        if (!m) continue;
        const kn_vtrie *t = kn_model_vtrie(m);
        CHECK(t && t == kn_model_vtrie(m));
        CHECK(t->n_vocab == m->hp.n_vocab);
        char why[128] = "";
        CHECKF(trie_consistent(t, why, sizeof why), "%s: %s", rels[i], why);
        /* texts are the detokenizer's pieces; EOG and control tokens have none */
        char buf[KN_TOK_MAX_PIECE];
        for (int32_t id = 0; id < t->n_vocab; id++) {
            const size_t k = kn_token_piece(m->tok, id, false, buf, sizeof buf);
            if (kn_tok_is_eog(m->tok, id)) {
                CHECK(t->tok_len[id] == 0 && bit(t->eog_bits, id));
            } else {
                CHECKF(t->tok_len[id] == k && !memcmp(t->text + t->tok_off[id], buf, k), "%s token %d", rels[i], id);
            }
        }
        CHECK(t->n_eog >= 1);
        kiln_model_free(m);
        n_done++;
    }
    if (!n_done) SKIP("no vocabularies under %s", kt_data(""));
}

/* The first build is thread-safe: threads asking at once get one trie. */
static void *ask_trie(void *arg) { return (void *)kn_model_vtrie(arg); }

static void test_trie_first_build_threads(void) {
    kiln_model *m = load_vocab(VOCAB_SPM);
    if (!m) SKIP("no %s", VOCAB_SPM);
    pthread_t th[4];
    void *got[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, ask_trie, m) == 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], &got[i]);
    CHECK(got[0] && got[0] == got[1] && got[1] == got[2] && got[2] == got[3]);
    kiln_model_free(m);
}

/* ---- exact masks on synthetic vocabularies ------------------------------------------------------ */

/* Tokens that end inside a character are allowed when the bytes so far can still become one the
 * grammar accepts; a token that starts with a continuation byte only after the right lead byte. */
static void test_mid_utf8_tokens(void) {
    /* 中 = e4 b8 ad, 文 = e6 96 87 */
    const char *text[] = {"\xe4", "\xe4\xb8", "\xb8\xad", "\xad", "中", "中文", "\xe6\x96", "\x87", "文", "a", "<e>"};
    const int32_t eog[] = {10};
    kn_vtrie *t = synth(11, text, eog, 1);
    kiln_grammar *g = compile("root ::= \"中\" [文字]?\n");
    CHECK(t && g);
    for (int plain = 0; plain < 2; plain++) {
        kn_gmatch_opts o = {.flags = plain ? KN_GMATCH_PLAIN : 0};
        kn_gmatch *m;
        CHECK(kn_gmatch_new_ex(g, t, false, &o, &m) == KILN_OK);
        int32_t n;
        const uint64_t *mask = kn_gmatch_mask(m, &n);
        CHECK(n == 4 && bit(mask, 0) && bit(mask, 1) && bit(mask, 4) && bit(mask, 5));
        CHECK(kn_gmatch_accept(m, 2) == KILN_ERR_INVALID_ARG);  /* a continuation first */
        CHECK(kn_gmatch_accept(m, 10) == KILN_ERR_INVALID_ARG); /* end before a sentence */
        CHECK(kn_gmatch_accept(m, 0) == KILN_OK);               /* e4 */
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 1 && bit(mask, 2)); /* b8 ad completes 中; "\xad" alone cannot follow e4 */
        CHECK(kn_gmatch_accept(m, 2) == KILN_OK);
        CHECK(kn_gmatch_accepting(m) && !kn_gmatch_final(m));
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 3 && bit(mask, 6) && bit(mask, 8) && bit(mask, 10)); /* e6 96, 文, EOG */
        CHECK(kn_gmatch_accept(m, 6) == KILN_OK);
        CHECK(!kn_gmatch_accepting(m));
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 1 && bit(mask, 7));
        CHECK(kn_gmatch_accept(m, 7) == KILN_OK);
        CHECK(kn_gmatch_accepting(m) && kn_gmatch_final(m));
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 1 && bit(mask, 10)); /* only the end */
        kn_gmatch_free(m);
    }
    kiln_grammar_free(g);
    kn_vtrie_free(t);
}

/* End-of-generation tokens are allowed exactly when the text so far is a sentence; control tokens
 * without text never. */
static void test_eog_only_when_accepting(void) {
    const char *text[] = {"a", "b", "c", "ab", "", "", "bc"};
    const int32_t eog[] = {4, 6}; /* an EOG token with text is still only an end */
    kn_vtrie *t = synth(7, text, eog, 2);
    kiln_grammar *g = compile("root ::= \"ab\" | \"abc\"\n");
    CHECK(t && g);
    kn_gmatch *m;
    CHECK(kn_gmatch_new(g, t, false, &m) == KILN_OK);
    int32_t n;
    const uint64_t *mask = kn_gmatch_mask(m, &n);
    CHECK(n == 2 && bit(mask, 0) && bit(mask, 3) && !bit(mask, 4) && !bit(mask, 5) && !bit(mask, 6));
    CHECK(kn_gmatch_accept(m, 5) == KILN_ERR_INVALID_ARG); /* no text */
    CHECK(kn_gmatch_accept(m, 0) == KILN_OK);
    mask = kn_gmatch_mask(m, &n);
    CHECK(n == 1 && bit(mask, 1)); /* "bc" is an end token, not text */
    CHECK(kn_gmatch_accept(m, 1) == KILN_OK);
    CHECK(kn_gmatch_accepting(m) && !kn_gmatch_final(m));
    mask = kn_gmatch_mask(m, &n);
    CHECK(n == 3 && bit(mask, 2) && bit(mask, 4) && bit(mask, 6));
    CHECK(kn_gmatch_accept(m, 4) == KILN_OK);
    CHECK(kn_gmatch_accept(m, 2) == KILN_OK);
    CHECK(kn_gmatch_final(m));
    mask = kn_gmatch_mask(m, &n);
    CHECK(n == 2 && bit(mask, 4) && bit(mask, 6));
    kn_gmatch_free(m);
    kiln_grammar_free(g);
    kn_vtrie_free(t);
}

/* With strip_first_space the first token's leading space is not output: " hi" is allowed where the
 * grammar starts with "hi", once. */
static void test_strip_first_space(void) {
    const char *text[] = {" hi", "hi", " ", "  hi", " h", "i", " there", "x"};
    kn_vtrie *t = synth(8, text, NULL, 0);
    kiln_grammar *g = compile("root ::= \"hi\" \" there\"?\n");
    CHECK(t && g);
    for (int plain = 0; plain < 2; plain++) {
        kn_gmatch_opts o = {.flags = plain ? KN_GMATCH_PLAIN : 0};
        kn_gmatch *m;
        CHECK(kn_gmatch_new_ex(g, t, true, &o, &m) == KILN_OK);
        int32_t n;
        const uint64_t *mask = kn_gmatch_mask(m, &n);
        /* " hi", "hi", " " (nothing is output), " h"; not "  hi" (one space stays) */
        CHECK(n == 4 && bit(mask, 0) && bit(mask, 1) && bit(mask, 2) && bit(mask, 4) && !bit(mask, 3));
        CHECK(kn_gmatch_accept(m, 0) == KILN_OK);
        CHECK(kn_gmatch_accepting(m));
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 2 && bit(mask, 6) && bit(mask, 2)); /* now spaces are text: " there", " " */
        kn_gmatch_free(m);

        CHECK(kn_gmatch_new_ex(g, t, false, &o, &m) == KILN_OK);
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 1 && bit(mask, 1)); /* without: only "hi" */
        kn_gmatch_free(m);

        /* a stripped " " is consumed: the next token's space counts */
        CHECK(kn_gmatch_new_ex(g, t, true, &o, &m) == KILN_OK);
        CHECK(kn_gmatch_accept(m, 2) == KILN_OK);
        mask = kn_gmatch_mask(m, &n);
        CHECK(n == 1 && bit(mask, 1));
        kn_gmatch_free(m);
    }
    kiln_grammar_free(g);
    kn_vtrie_free(t);
}

/* ---- the fast path against the reference -------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

enum { N_VARIANTS = 4 };
static const unsigned VARIANT[N_VARIANTS] = {KN_GMATCH_PLAIN, 0, KN_GMATCH_NO_CACHE, KN_GMATCH_NO_SUBTREE};

typedef struct walk_result {
    int masks;        /* masks compared */
    int accepted_eog; /* walks that ended by an allowed end token */
    kn_gmatch_stats fast;
    char why[256];
} walk_result;

/* Runs the reference and every fast variant in lockstep along `walks` random paths of at most
 * `steps` tokens each (a token drawn from the allowed ones, biased towards ending), comparing every
 * mask bit for bit. store_cap applies to every matcher. */
static bool lockstep(const kiln_grammar *g, const kn_vtrie *t, bool strip, uint64_t seed, int walks, int steps,
                     size_t store_cap, walk_result *res) {
    memset(res, 0, sizeof *res);
    for (int w = 0; w < walks; w++) {
        kn_gmatch *m[N_VARIANTS] = {0};
        bool ok = true;
        for (int v = 0; v < N_VARIANTS && ok; v++) {
            kn_gmatch_opts o = {.flags = VARIANT[v], .store_cap = store_cap};
            ok = kn_gmatch_new_ex(g, t, strip, &o, &m[v]) == KILN_OK;
        }
        for (int s = 0; s < steps && ok; s++) {
            int32_t n[N_VARIANTS];
            const uint64_t *mask[N_VARIANTS];
            for (int v = 0; v < N_VARIANTS; v++) mask[v] = kn_gmatch_mask(m[v], &n[v]);
            for (int v = 1; v < N_VARIANTS && ok; v++) {
                if (n[v] != n[0] || memcmp(mask[v], mask[0], (size_t)t->words * 8)) {
                    int32_t id = 0;
                    while (id < t->n_vocab && bit(mask[v], id) == bit(mask[0], id)) id++;
                    snprintf(res->why, sizeof res->why,
                             "walk %d step %d: variant %u allows %d tokens, the reference %d; first difference: token "
                             "%d (reference %d)",
                             w, s, VARIANT[v], n[v], n[0], id, id < t->n_vocab ? bit(mask[0], id) : -1);
                    ok = false;
                }
            }
            res->masks++;
            if (!ok || !n[0]) break;
            /* pick: an end token with probability 1/4 when allowed, else a uniform allowed token */
            const bool end_ok = t->n_eog && bit(mask[0], t->eog[0]);
            if (end_ok && (n[0] == 1 || rng_next(&seed) % 4 == 0)) {
                res->accepted_eog++;
                break;
            }
            const int32_t n_text = n[0] - (end_ok ? t->n_eog : 0);
            if (n_text <= 0) break;
            int32_t k = (int32_t)(rng_next(&seed) % (uint64_t)n_text), pick = -1;
            for (int32_t id = 0; id < t->n_vocab && pick < 0; id++)
                if (bit(mask[0], id) && !(t->n_eog && bit(t->eog_bits, id)) && k-- <= 0) pick = id;
            if (pick < 0) break; /* only ends were left */
            for (int v = 0; v < N_VARIANTS && ok; v++) {
                if (kn_gmatch_accept(m[v], pick) != KILN_OK) {
                    snprintf(res->why, sizeof res->why, "walk %d: variant %u refused allowed token %d", w, VARIANT[v],
                             pick);
                    ok = false;
                }
            }
        }
        kn_gmatch_stats st;
        kn_gmatch_get_stats(m[1], &st);
        res->fast.masks += st.masks;
        res->fast.cache_hits += st.cache_hits;
        res->fast.subtrees += st.subtrees;
        res->fast.inside += st.inside;
        res->fast.plain += st.plain;
        res->fast.nodes += st.nodes;
        res->fast.compactions += st.compactions;
        for (int v = 0; v < N_VARIANTS; v++) kn_gmatch_free(m[v]);
        if (!ok) {
            if (!res->why[0]) snprintf(res->why, sizeof res->why, "a matcher could not be created");
            return false;
        }
    }
    return true;
}

static void compare_on(const char *rel, int walks, int steps) {
    kiln_model *m = load_vocab(rel);
    if (!m) SKIP("no %s", rel);
    const kn_vtrie *t = kn_model_vtrie(m);
    CHECK(t);
    const char *grammars[] = {JSON_GBNF, UTF8_GBNF, SPAN_GBNF, ALT_GBNF};
    const char *names[] = {"json", "utf8", "span", "alt"};
    uint64_t subtrees = 0, hits = 0, plain = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(grammars); i++) {
        kiln_grammar *g = compile(grammars[i]);
        CHECK(g);
        walk_result r;
        const bool strip = kn_tok_strips_first_space(m->tok) && i % 2 == 0;
        const bool ok = lockstep(g, t, strip, 0x9E3779B97F4A7C15ull + i, walks, steps, 0, &r);
        kiln_grammar_free(g);
        CHECKF(ok, "%s, %s grammar: %s", rel, names[i], r.why);
        CHECKF(r.masks >= walks * 2, "%s, %s grammar: only %d masks", rel, names[i], r.masks);
        subtrees += r.fast.subtrees;
        hits += r.fast.cache_hits;
        plain += r.fast.plain;
        if (getenv("KT_VERBOSE"))
            printf("  %s %s: %d masks, eog %d, fast: %llu masks %llu hits %llu subtrees %llu nodes\n", rel, names[i],
                   r.masks, r.accepted_eog, (unsigned long long)r.fast.masks, (unsigned long long)r.fast.cache_hits,
                   (unsigned long long)r.fast.subtrees, (unsigned long long)r.fast.nodes);
    }
    CHECK(subtrees > 0); /* the fast paths were taken, so the comparison means something */
    CHECK(hits > 0);
    CHECK(plain > 0);
    kiln_model_free(m);
}

/* Strings under Unicode classes (the patterns of bench/grammar/patterns) over a vocabulary of
 * 102,400 tokens, a third of them Chinese: lead bytes the classes hold whole, lead bytes they split
 * (the hexagrams beside the commonest ideographs, CJK punctuation beside kana), nodes inside a
 * character; every mask equals the reference's. */
static void test_fast_equals_reference_unicode_classes(void) {
    kiln_model *m = load_vocab(VOCAB_CJK);
    if (!m) SKIP("no %s", VOCAB_CJK);
    const kn_vtrie *t = kn_model_vtrie(m);
    CHECK(t);
    static const char *patterns[] = {"^[\\\\p{L}\\\\p{N} _-]{1,20}$", "^\\\\p{Lu}[\\\\p{L}\\\\p{M}' -]{0,39}$",
                                     "^\\\\P{Z}[^\\\\n]{0,58}\\\\P{Z}$", "^#[\\\\p{L}\\\\p{N}_]{1,30}$"};
    kiln_grammar_params p = kiln_grammar_default_params();
    p.kind = KILN_GRAMMAR_JSON_SCHEMA;
    uint64_t subtrees = 0, inside = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(patterns); i++) {
        char schema[256];
        snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\"}", patterns[i]);
        kiln_grammar *g = NULL;
        CHECKF(kiln_grammar_compile(schema, strlen(schema), &p, &g) == KILN_OK, "%s: %s", schema, kiln_last_error());
        walk_result r;
        const bool ok = lockstep(g, t, false, 1234 + i, 3, 25, 0, &r);
        kiln_grammar_free(g);
        CHECKF(ok, "%s: %s", schema, r.why);
        subtrees += r.fast.subtrees;
        inside += r.fast.inside;
    }
    CHECK(subtrees > 0 && inside > 0);
    kiln_model_free(m);
}

static void test_fast_equals_reference_stories(void) { compare_on(STORIES, 12, 40); }
static void test_fast_equals_reference_spm(void) { compare_on(VOCAB_SPM, 4, 30); }
static void test_fast_equals_reference_bpe(void) { compare_on(VOCAB_BPE, 4, 30); }

/* Every string of 1 to 3 pieces of an alphabet into buf, from n on; returns the new count. */
static int32_t strings_of(const char *const *alpha, int a, char (*buf)[16], int32_t n) {
    for (int i = 0; i < a; i++) snprintf(buf[n++], 16, "%s", alpha[i]);
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) snprintf(buf[n++], 16, "%s%s", alpha[i], alpha[j]);
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++)
            for (int k = 0; k < a; k++) snprintf(buf[n++], 16, "%s%s%s", alpha[i], alpha[j], alpha[k]);
    return n;
}

/* A trie over every string of 1 to 3 of the a pieces (into buf, listed in text), then the n_extra
 * texts of extra, then an empty end-of-generation token; NULL on failure. */
static kn_vtrie *pieces_trie(const char *const *pieces, int a, const char *const *extra, int n_extra, char (*buf)[16],
                             const char **text) {
    int32_t n = strings_of(pieces, a, buf, 0);
    for (int32_t i = 0; i < n; i++) text[i] = buf[i];
    for (int i = 0; i < n_extra; i++) text[n++] = extra[i];
    text[n++] = "";
    uint32_t *len = malloc((size_t)n * sizeof *len);
    if (!len) return NULL;
    for (int32_t i = 0; i < n; i++) len[i] = (uint32_t)strlen(text[i]);
    const int32_t eog[] = {n - 1};
    kn_vtrie *t = NULL;
    if (kn_vtrie_new(n, text, len, eog, 1, &t)) t = NULL;
    free(len);
    return t;
}

/* A synthetic vocabulary of every string of 1 to 3 bytes over an alphabet of ASCII and pieces of
 * UTF-8 characters, plus every string of 1 to 3 characters over a well-formed alphabet, so every
 * subtree summary case (ill-formed, truncated, multi-byte, all inside a loop) occurs. */
static void test_fast_equals_reference_synthetic(void) {
    static const char *bytes[] = {"a", "z", " ", "\"", "\\", "\xce", "\xb1", "\xe4", "\xb8", "\xad", "\xc2", "\xbb"};
    static const char *chars[] = {"a", " ", "α", "中"};
    enum { A = 12, B = 4, N = A + A * A + A * A * A + B + B * B + B * B * B };
    static char buf[N][16];
    static const char *text[N + 2];
    int32_t n = strings_of(chars, B, buf, strings_of(bytes, A, buf, 0));
    for (int32_t i = 0; i < n; i++) text[i] = buf[i];
    text[n++] = "";
    text[n++] = "\xe4\xb8\xad\xce\xb1";
    uint32_t len[KN_ARRAY_LEN(text)];
    for (int32_t i = 0; i < n; i++) len[i] = (uint32_t)strlen(text[i]);
    const int32_t eog[] = {n - 2};
    kn_vtrie *t = NULL;
    CHECK(kn_vtrie_new(n, text, len, eog, 1, &t) == KILN_OK);
    char why[128] = "";
    CHECKF(trie_consistent(t, why, sizeof why), "%s", why);
    const char *grammars[] = {JSON_GBNF, UTF8_GBNF, "root ::= \"\\\"\" [^\"\\\\]* \"\\\"\" [a-z ]*\n",
                              "root ::= [a-z α中]{0,9} \"»\"?\n", "root ::= (. | \"\\\\\\\"\")*\n"};
    uint64_t subtrees = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(grammars); i++) {
        kiln_grammar *g = compile(grammars[i]);
        CHECK(g);
        walk_result r;
        const bool ok = lockstep(g, t, i == 1, 7 + i, 10, 25, 0, &r);
        kiln_grammar_free(g);
        CHECKF(ok, "grammar %zu: %s", i, r.why);
        subtrees += r.fast.subtrees + r.fast.plain; /* whole subtrees, or all plain tokens, at once */
    }
    CHECK(subtrees > 0);
    kn_vtrie_free(t);
}

/* A vocabulary where a third of the tokens are exceptions to plain string text (quotes, backslashes,
 * control bytes, stray UTF-8 bytes): inside free and bounded strings the fast path allows the plain
 * tokens at once and walks only the exception trie, and its masks equal the reference's. */
static void test_plain_tokens_and_exceptions(void) {
    static const char *pieces[] = {"a", "Z", " ", "-", "é", "中", "\"", "\\", "\n", "\x01", "\xb1", "\xe4\xb8", "\x7f"};
    enum { A = 13, N = A + A * A + A * A * A + 1 };
    static char buf[N][16];
    static const char *text[N];
    kn_vtrie *t = pieces_trie(pieces, A, NULL, 0, buf, text);
    CHECK(t);
    CHECK(t->exc && t->n_plain > 0 && t->exc->n_text > t->n_text / 4);
    CHECK(t->n_plain + t->exc->n_text == t->n_text);
    const char *grammars[] = {JSON_GBNF, "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]* \"\\\"\"\n",
                              "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,7} \"\\\"\" \" \"?\n",
                              "root ::= ([^\"\\\\] | \"\\\\\" [nt\"])*\n"};
    uint64_t plain = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(grammars); i++) {
        kiln_grammar *g = compile(grammars[i]);
        CHECKF(g, "grammar %zu", i);
        walk_result r;
        const bool ok = lockstep(g, t, false, 99 + i, 8, 20, 0, &r);
        kiln_grammar_free(g);
        CHECKF(ok, "grammar %zu: %s", i, r.why);
        CHECKF(i == 0 || r.fast.plain > 0, "grammar %zu: the plain path was never taken", i);
        plain += r.fast.plain;
    }
    CHECK(plain > 0);
    kn_vtrie_free(t);
}

/* Store steps of the first mask after text, with the given variant flags; -1 on failure. */
static long long steps_after(const kiln_grammar *g, const kn_vtrie *t, const char *text, unsigned flags) {
    kn_gmatch_opts o = {.flags = flags};
    kn_gmatch *m = NULL;
    if (kn_gmatch_new_ex(g, t, false, &o, &m) != KILN_OK) return -1;
    int32_t n = 0;
    long long steps = -1;
    if (kn_gmatch_feed(m, text, strlen(text)) == KILN_OK && kn_gmatch_mask(m, &n) && n > 0) {
        kn_gmatch_stats st;
        kn_gmatch_get_stats(m, &st);
        steps = (long long)st.nodes;
    }
    kn_gmatch_free(m);
    return steps;
}

/* Character classes that split a kind of UTF-8 characters (\p{L} holds é but not ×, ア but not the
 * ideographic space, 中 but not the hexagram ䷀; \P{Z} the reverse for the space): the fast path
 * tells multi-byte characters apart by lead byte, so its masks must equal the reference's where a
 * lead byte's characters go different ways; and where each lead byte's characters all go one way
 * (д, 是, 말 are letters, as is every character with their lead bytes), whole subtrees of them are
 * accepted at once: the first mask inside a string of letters and digits, or of anything but
 * separators, steps the store a tenth as often as a walk of every node. */
static void test_class_splits_lead_bytes(void) {
    static const char *mixed[] = {"a",  "7",  " ",  "_", "д", "是", "é", "\xc3\x97", "\xe3\x80\x80",
                                  "ア", "中", "䷀", "😀"};
    static const char *whole[] = {"a", "Z", "7", "д", "是", "말"};
    /* the whole ones, then under "a" characters whose lead bytes are split: a state learns of 是's
     * lead byte (under "7") before it meets ䷀'s, which shares its kind */
    static const char *extra[] = {"\"", "a䷀", "a\xc3\x97", "a\xe3\x80\x80"};
    enum { A = 13, B = 6, N = A + A * A + A * A * A + 2, NB = B + B * B + B * B * B + 5 };
    static char buf[N][16], bufb[NB][16], bufc[NB][16];
    static const char *text[N], *textb[NB], *textc[NB];
    kn_vtrie *t = pieces_trie(mixed, A, extra, 1, buf, text);
    kn_vtrie *tb = pieces_trie(whole, B, extra, 1, bufb, textb);
    kn_vtrie *tc = pieces_trie(whole, B, extra, 4, bufc, textc);
    CHECK(t && tb && tc);
    static const char *schemas[] = {
        "{\"type\":\"string\",\"pattern\":\"^[\\\\p{L}\\\\p{N} _-]{1,20}$\"}",
        "{\"type\":\"string\",\"pattern\":\"^\\\\P{Z}[^\\\\n]{0,18}\\\\P{Z}$\"}",
        "{\"type\":\"string\",\"pattern\":\"^[\\\\p{Lo}\\\\p{Nd}]*$\"}",
        "{\"type\":\"string\",\"pattern\":\"^[\\\\p{L}\\\\p{N} _-]*$\"}",
    };
    kiln_grammar_params p = kiln_grammar_default_params();
    p.kind = KILN_GRAMMAR_JSON_SCHEMA;
    uint64_t inside = 0;
    for (size_t i = 0; i < KN_ARRAY_LEN(schemas); i++) {
        kiln_grammar *g = NULL;
        CHECKF(kiln_grammar_compile(schemas[i], strlen(schemas[i]), &p, &g) == KILN_OK, "schema %zu: %s", i,
               kiln_last_error());
        if (!g) continue;
        walk_result r;
        bool ok = lockstep(g, t, false, 31 + i, 12, 30, 0, &r);
        CHECKF(ok, "schema %zu, mixed lead bytes: %s", i, r.why);
        inside += r.fast.inside;
        ok = lockstep(g, tb, false, 77 + i, 12, 30, 0, &r);
        CHECKF(ok, "schema %zu, whole lead bytes: %s", i, r.why);
        ok = lockstep(g, tc, false, 91 + i, 12, 30, 0, &r);
        CHECKF(ok, "schema %zu, whole lead bytes and split ones under \"a\": %s", i, r.why);
        const long long fast = steps_after(g, tb, "\"", 0), all = steps_after(g, tb, "\"", KN_GMATCH_NO_SUBTREE);
        CHECKF(fast >= 0 && all > 0 && (i == 2 || fast * 10 < all),
               "schema %zu: %lld store steps, %lld without subtrees", i, fast, all);
        if (getenv("KT_VERBOSE")) printf("  schema %zu: %lld store steps, %lld without subtrees\n", i, fast, all);
        kiln_grammar_free(g);
    }
    CHECK(inside > 0); /* subtrees were asked about from inside a character */
    kn_vtrie_free(t);
    kn_vtrie_free(tb);
    kn_vtrie_free(tc);
}

/* Feeds text and then fill repeated (at most n_fill times, until the grammar refuses it) one byte at
 * a time to the reference and each fast variant, comparing their masks at every byte; *hits gets
 * the cache hits of the cached fast variant. False with why[] filled on a difference. */
static bool sweep(const kiln_grammar *g, const kn_vtrie *t, const char *text, char fill, int n_fill, uint64_t *hits,
                  char *why, size_t cap) {
    kn_gmatch *m[N_VARIANTS] = {0};
    bool ok = true;
    for (int v = 0; v < N_VARIANTS && ok; v++) {
        kn_gmatch_opts o = {.flags = VARIANT[v]};
        ok = kn_gmatch_new_ex(g, t, false, &o, &m[v]) == KILN_OK;
    }
    if (!ok) snprintf(why, cap, "a matcher could not be created");
    const size_t n_text = strlen(text);
    bool done = false;
    for (size_t k = 0; ok && !done && k < n_text + (size_t)n_fill; k++) {
        int32_t n[N_VARIANTS];
        const uint64_t *mask[N_VARIANTS];
        for (int v = 0; v < N_VARIANTS; v++) mask[v] = kn_gmatch_mask(m[v], &n[v]);
        for (int v = 1; v < N_VARIANTS && ok; v++)
            if (n[v] != n[0] || memcmp(mask[v], mask[0], (size_t)t->words * 8)) {
                snprintf(why, cap, "after %zu bytes: variant %u allows %d tokens, the reference %d", k, VARIANT[v],
                         n[v], n[0]);
                ok = false;
            }
        const char b = k < n_text ? text[k] : fill;
        for (int v = 0; v < N_VARIANTS && ok && !done; v++)
            if (kn_gmatch_feed(m[v], &b, 1) != KILN_OK) {
                if (v == 0 && k >= n_text) done = true; /* the fill ran into the bound */
                else {
                    snprintf(why, cap, "after %zu bytes: variant %u refused the byte", k, VARIANT[v]);
                    ok = false;
                }
            }
    }
    kn_gmatch_stats st;
    kn_gmatch_get_stats(m[1], &st);
    *hits = st.cache_hits;
    for (int v = 0; v < N_VARIANTS; v++) kn_gmatch_free(m[v]);
    return ok;
}

/* Strings with a maxLength and other counted grammars: the fast path replaces a state by the one
 * whose counts sit at the first value of their class (kn_gstore_canon) and finds its mask in the
 * cache; every mask must still equal the reference's, at every count up to the bounds (a class one
 * value too long shows there: the vocabulary's longest tokens are pure filler), and on random walks.
 * One grammar counts after a call to itself (its count step is unbounded): nothing is merged there. */
#define PARENS10 "(((((((((("
#define PARENS80 PARENS10 PARENS10 PARENS10 PARENS10 PARENS10 PARENS10 PARENS10 PARENS10

static void test_counted_masks_equal_reference(void) {
    static const char *pieces[] = {"a", "b", "\"", "\\", " ", "é", ","};
    static const char *filler[] = {"aaaaaaa", "aaaaaaaa"}; /* the longest token: 8 bytes of filler */
    enum { A = 7, N = A + A * A + A * A * A + 3 };
    static char buf[N][16];
    static const char *text[N];
    kn_vtrie *t = pieces_trie(pieces, A, filler, 2, buf, text);
    CHECK(t && t->max_depth == 8);
    static const struct {
        const char *src, *prefix;
        bool schema, merged; /* whether masks at different counts must share cache entries */
    } cases[] = {
        {"{\"type\":\"string\",\"maxLength\":40}", "\"", true, true},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":30}", "\"", true, true},
        {"{\"type\":\"string\",\"pattern\":\"^(ab|a)*$\",\"maxLength\":33}", "\"", true, true},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"maxLength\":36},\"y\":{\"type\":\"array\","
         "\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":9},\"maxItems\":3}},\"required\":[\"x\",\"y\"]}",
         "{\"x\":\"", true, true},
        {"root ::= @count (w @+1{0,6})* @{1,6}\nw ::= \"\\\"\" @count ([ab] @+1{0,30})* @{2,30} \"\\\"\"\n", "\"",
         false, true},
        {"root ::= @count r\nr ::= \"a\" r @+1{0,30} | \"b\"\n", "", false, false},
        /* a counted string 80 frames deep: only the top frames' counters move, and they do */
        {"root ::= \"(\" root \")\" | \"\\\"\" @count ([ab] @+1{0,40})* \"\\\"\"\n", PARENS80 "\"", false, true},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        kiln_grammar_params p = kiln_grammar_default_params();
        if (cases[i].schema) p.kind = KILN_GRAMMAR_JSON_SCHEMA;
        kiln_grammar *g = NULL;
        CHECKF(kiln_grammar_compile(cases[i].src, strlen(cases[i].src), &p, &g) == KILN_OK, "case %zu: %s", i,
               kiln_last_error());
        if (!g) continue;
        CHECKF((g->prog.count_step >= 0) == cases[i].merged, "case %zu: count step %d", i, g->prog.count_step);
        char why[256] = "";
        uint64_t hits = 0;
        CHECKF(sweep(g, t, cases[i].prefix, 'a', 45, &hits, why, sizeof why), "case %zu: %s", i, why);
        if (cases[i].merged) CHECKF(hits >= 10, "case %zu: %llu cache hits in the sweep", i, (unsigned long long)hits);
        walk_result r;
        const bool ok = lockstep(g, t, false, 4242 + i, 12, 40, 0, &r);
        CHECKF(ok, "case %zu: %s", i, r.why);
        kiln_grammar_free(g);
    }
    kn_vtrie_free(t);
}

/* Under a tiny store cap the store is compacted (state ids change) again and again: masks stay
 * equal to the reference, and the cache keeps working after each compaction. */
static void test_cache_survives_compaction(void) {
    kiln_model *m = load_vocab(VOCAB_SPM);
    if (!m) SKIP("no %s", VOCAB_SPM);
    const kn_vtrie *t = kn_model_vtrie(m);
    kiln_grammar *g = compile(JSON_GBNF);
    CHECK(t && g);
    walk_result r;
    const bool ok = lockstep(g, t, false, 12345, 3, 60, 1, &r); /* the smallest cap the store takes */
    kiln_grammar_free(g);
    kiln_model_free(m);
    CHECKF(ok, "%s", r.why);
    CHECKF(r.fast.compactions > 0, "no compaction in %d masks", r.masks);
    CHECK(r.fast.cache_hits > 0);
}

/* A JSON document tokenized by the model's own tokenizer is allowed token by token, and the end
 * exactly at its end. */
static void test_tokenized_document_allowed(void) {
    kiln_model *m = load_vocab(VOCAB_BPE);
    if (!m) SKIP("no %s", VOCAB_BPE);
    const kn_vtrie *t = kn_model_vtrie(m);
    kiln_grammar *g = compile(JSON_GBNF);
    CHECK(t && g);
    const char *doc =
        "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"tags\": [\"math\", \"\\u00e9crit\", true, null],\n"
        "  \"ratio\": -0.25e3, \"nested\": {\"ok\": false, \"text\": \"naïve café 東京\"}}";
    int32_t ids[256];
    size_t n = 0;
    CHECK(kn_tokenize(m->tok, doc, strlen(doc), false, false, ids, 256, &n) == KILN_OK);
    kn_gmatch *gm;
    CHECK(kn_gmatch_new(g, t, false, &gm) == KILN_OK);
    for (size_t i = 0; i < n; i++) {
        int32_t k;
        const uint64_t *mask = kn_gmatch_mask(gm, &k);
        CHECKF(bit(mask, ids[i]), "token %zu (%d) not allowed", i, ids[i]);
        CHECK(!bit(mask, t->eog[0]));
        CHECK(kn_gmatch_accept(gm, ids[i]) == KILN_OK);
    }
    int32_t k;
    const uint64_t *mask = kn_gmatch_mask(gm, &k);
    CHECK(bit(mask, t->eog[0]) && kn_gmatch_accepting(gm));
    kn_gmatch_free(gm);
    kiln_grammar_free(g);
    kiln_model_free(m);
}

/* A grammar no token can continue: the mask is empty and says why; not a matcher failure. */
static void test_stuck_grammar(void) {
    const char *text[] = {"a", "b"};
    kn_vtrie *t = synth(2, text, NULL, 0);
    kiln_grammar *g = compile("root ::= \"a\" \"c\"\n");
    CHECK(t && g);
    kn_gmatch *m;
    CHECK(kn_gmatch_new(g, t, false, &m) == KILN_OK);
    CHECK(kn_gmatch_accept(m, 0) == KILN_OK);
    int32_t n = -1;
    kn_gmatch_mask(m, &n);
    CHECK(n == 0 && kn_gmatch_error(m) && !kn_gmatch_failed(m));
    kn_gmatch_mask(m, &n); /* again, from the cache */
    CHECK(n == 0 && kn_gmatch_error(m));
    kn_gmatch_free(m);
    kiln_grammar_free(g);
    kn_vtrie_free(t);
}

/* A JSON Schema with an enum of 5,000 strings (compiled through kiln_grammar_compile): where the
 * value begins, every value is allowed as one token and near misses are not, the fast masks equal
 * the reference along random walks, and a whole object ends accepted. */
static void test_schema_big_enum(void) {
    enum { N = 5000 };
    size_t cap = (size_t)N * 32 + 256, k = 0;
    char *schema = malloc(cap);
    /* tokens: printable ASCII bytes, each value quoted, the value without its closing quote, a miss */
    static char vals[2 * N + 1][32];
    const char *text[95 + 2 * N + 2];
    uint32_t len[95 + 2 * N + 2];
    CHECK(schema);
    int32_t n = 0;
    static char one[95][2];
    for (int c = 32; c < 127; c++) {
        one[c - 32][0] = (char)c;
        text[n] = one[c - 32], len[n++] = 1;
    }
    k = (size_t)snprintf(schema, cap, "{\"type\": \"object\", \"properties\": {\"icon\": {\"enum\": [");
    const int32_t first_value = n;
    for (int i = 0; i < N; i++) {
        char v[24];
        snprintf(v, sizeof v, "ic-%04d-%c", i, "abcdefg"[i % 7]);
        k += (size_t)snprintf(schema + k, cap - k, "%s\"%s\"", i ? ", " : "", v);
        snprintf(vals[2 * i], 32, "\"%s\"", v);
        snprintf(vals[2 * i + 1], 32, "\"%s", v);
        text[n] = vals[2 * i], len[n++] = (uint32_t)strlen(vals[2 * i]);
        text[n] = vals[2 * i + 1], len[n++] = (uint32_t)strlen(vals[2 * i + 1]);
    }
    k += (size_t)snprintf(schema + k, cap - k, "]}}, \"required\": [\"icon\"], \"additionalProperties\": false}");
    const int32_t miss = n;
    snprintf(vals[2 * N], 32, "\"ic-0001-a\""); /* 0001 ends in b */
    text[n] = vals[2 * N], len[n++] = (uint32_t)strlen(vals[2 * N]);
    const int32_t eog = n;
    text[n] = "", len[n++] = 0;
    kn_vtrie *t = NULL;
    CHECK(kn_vtrie_new(n, text, len, &eog, 1, &t) == KILN_OK);
    kiln_grammar_params gp = kiln_grammar_default_params();
    gp.kind = KILN_GRAMMAR_JSON_SCHEMA;
    kiln_grammar *g = NULL;
    CHECKF(kiln_grammar_compile(schema, k, &gp, &g) == KILN_OK, "%s", kiln_last_error());
    free(schema);
    kn_gmatch *m;
    CHECK(kn_gmatch_new(g, t, false, &m) == KILN_OK);
    for (const char *c = "{\"icon\":"; *c; c++) CHECKF(kn_gmatch_accept(m, *c - 32) == KILN_OK, "%s", kn_error_msg());
    int32_t allowed = 0;
    const uint64_t *mask = kn_gmatch_mask(m, &allowed);
    CHECKF(allowed > 2 * N && !kn_gmatch_error(m), "%d allowed: %s", allowed, kn_gmatch_error(m));
    int missing = 0;
    for (int32_t id = first_value; id < first_value + 2 * N; id++) missing += !bit(mask, id);
    CHECKF(missing == 0, "%d values not allowed", missing);
    CHECK(!bit(mask, miss) && bit(mask, '"' - 32) && !bit(mask, 'i' - 32) && !bit(mask, eog));
    CHECK(kn_gmatch_accept(m, first_value + 2 * 4321) == KILN_OK);
    CHECK(kn_gmatch_accept(m, '}' - 32) == KILN_OK && kn_gmatch_final(m));
    kn_gmatch_free(m);
    CHECK(kiln_grammar_accepts(g, "{\"icon\":\"ic-4999-b\"}", 20));
    CHECK(!kiln_grammar_accepts(g, "{\"icon\":\"ic-4999-a\"}", 20));
    CHECK(!kiln_grammar_accepts(g, "{\"icon\":\"ic-5000-c\"}", 20));
    walk_result res;
    CHECKF(lockstep(g, t, false, 77, 6, 12, 0, &res), "%s", res.why);
    kiln_grammar_free(g);
    kn_vtrie_free(t);
}

/* A state too ambiguous for the matcher, met after the bytes the compile-time check walks: the
 * mask is empty and the failure is the matcher's, classified KILN_ERR_UNSUPPORTED (the grammar's),
 * not KILN_ERR_NOMEM; accepting a token into it says the same. */
static void test_too_ambiguous_mid_text(void) {
    const char *text[] = {"x", "a", "b"};
    kn_vtrie *t = synth(3, text, NULL, 0);
    kiln_grammar *g = compile("root ::= \"x\"{100} (\"a\"?){5000} \"b\"\n");
    CHECK(t && g);
    kn_gmatch *m;
    CHECK(kn_gmatch_new(g, t, false, &m) == KILN_OK);
    for (int i = 0; i < 99; i++) CHECK(kn_gmatch_accept(m, 0) == KILN_OK);
    CHECK(kn_gmatch_fail_status(m) == KILN_OK);
    int32_t n = -1;
    kn_gmatch_mask(m, &n);
    CHECK(n == 0 && kn_gmatch_failed(m));
    CHECK(kn_gmatch_fail_status(m) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kn_gmatch_error(m), "too ambiguous"), "%s", kn_gmatch_error(m));
    CHECK(kn_gmatch_accept(m, 0) == KILN_ERR_UNSUPPORTED && kn_gmatch_fail_status(m) == KILN_ERR_UNSUPPORTED);
    CHECK(strstr(kn_error_msg(), "the grammar matcher failed: too many parser stacks"));
    kn_gmatch_free(m);
    kiln_grammar_free(g);
    kn_vtrie_free(t);
}

int main(void) {
    RUN(test_trie_layout_synthetic);
    RUN(test_trie_of_models);
    RUN(test_trie_first_build_threads);
    RUN(test_mid_utf8_tokens);
    RUN(test_eog_only_when_accepting);
    RUN(test_strip_first_space);
    RUN(test_fast_equals_reference_synthetic);
    RUN(test_plain_tokens_and_exceptions);
    RUN(test_class_splits_lead_bytes);
    RUN(test_counted_masks_equal_reference);
    RUN(test_fast_equals_reference_stories);
    RUN(test_fast_equals_reference_spm);
    RUN(test_fast_equals_reference_bpe);
    RUN(test_fast_equals_reference_unicode_classes);
    RUN(test_cache_survives_compaction);
    RUN(test_tokenized_document_allowed);
    RUN(test_stuck_grammar);
    RUN(test_schema_big_enum);
    RUN(test_too_ambiguous_mid_text);
    return kt_summary();
}
