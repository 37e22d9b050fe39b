/*
 * test_tokenizer_json.c - the tokenizer built from a Hugging Face tokenizer.json (kn_tokenizer_load_hf):
 * small WordPiece and Unigram tokenizers whose expected ids come from Hugging Face's tokenizers (its
 * JS port), the split behaviours, the Unicode normalization forms, tokenizer_config.json, and the
 * loader's errors (the JSON path of malformed input, unsupported types, size caps). The real
 * tokenizer.json files of released models are compared with the oracle in
 * tests/cli/test_tokenizer_json.sh.
 */
#include "harness.h"
#include "text/tok_json.h"
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <string.h>

/* A BERT-style WordPiece tokenizer: BertNormalizer, BertPreTokenizer, [CLS] A [SEP]. */
static const char WP_JSON[] =
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"[PAD]\",\"single_word\":false,\"lstrip"
    "\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":1,\"content\":\"[UNK]\",\"si"
    "ngle_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":2,"
    "\"content\":\"[CLS]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\""
    "special\":true},{\"id\":3,\"content\":\"[SEP]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":fal"
    "se,\"normalized\":false,\"special\":true}],\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\""
    ":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},\"pre_tokenizer\":{\"t"
    "ype\":\"BertPreTokenizer\"},\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Specia"
    "lToken\":{\"id\":\"[CLS]\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToke"
    "n\":{\"id\":\"[SEP]\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{}},\"decoder\":{\"type\":\"Wor"
    "dPiece\",\"prefix\":\"##\",\"cleanup\":true},\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\""
    ",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,\"vocab\":{\"[PAD]\":0,\"[UNK]"
    "\":1,\"[CLS]\":2,\"[SEP]\":3,\"hello\":4,\",\":5,\"world\":6,\"!\":7,\"un\":8,\"##aff\":9,\"##able\":"
    "10,\"cafe\":11,\"\xe4\xb8\xad"
    "\":12,\"\xe6\x96\x87"
    "\":13,\"##s\":14,\"a\":15,\"##b\":16}}}";
/* A Unigram tokenizer: NFKC + Replace(regex), Metaspace(split), A </s>. */
static const char UG_JSON[] =
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"single_word\":false,\"lstrip"
    "\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":1,\"content\":\"</s>\",\"sin"
    "gle_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normaliz"
    "er\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Replace\",\"pattern\":{\""
    "Regex\":\" {2,}\"},\"content\":\" \"}]},\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81"
    ""
    "\",\"prepend_scheme\":\"always\",\"split\":true},\"post_processor\":{\"type\":\"TemplateProcessing\","
    "\"single\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\""
    ":0}}],\"pair\":[],\"special_tokens\":{}},\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81"
    ""
    "\",\"prepend_scheme\":\"always\",\"split\":true},\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab"
    "\":[[\"<unk>\",0.0],[\"</s>\",0.0],[\"\xe2\x96\x81"
    "\",-2.0],[\"\xe2\x96\x81"
    "he\",-3.0],[\"llo\",-"
    "3.5],[\"\xe2\x96\x81"
    "hello\",-4.0],[\"h\",-5.0],[\"e\",-5.0],[\"l\",-5.0],[\"o\",-5.0],[\"\xe2\x96\x81"
    ""
    "w\",-4.0],[\"or\",-4.5],[\"ld\",-4.5],[\"\xe2\x96\x81"
    "world\",-6.5],[\"w\",-5.0],[\"r\",-5.0],[\"d\""
    ",-5.0],[\"1\",-6.0],[\"2\",-6.0],[\"\xe2\x96\x81"
    "12\",-5.0]]}}";

static kn_tokenizer *load(const char *json, const char *cfg) {
    kn_tokenizer *t = NULL;
    kiln_status st = kn_tokenizer_load_hf(json, strlen(json), cfg, cfg ? strlen(cfg) : 0, &t);
    if (st) printf("  load: %s\n", kn_error_msg());
    return t;
}

/* True when text encodes (with the post-processor's tokens) to exactly want[0..n). */
static bool encodes(const kn_tokenizer *t, const char *text, const int32_t *want, size_t n) {
    int32_t got[64];
    size_t cnt = 0;
    if (kn_tokenize(t, text, strlen(text), true, true, got, 64, &cnt) != KILN_OK) return false;
    bool ok = cnt == n && memcmp(got, want, n * sizeof *want) == 0;
    if (!ok) {
        printf("  %s ->", text);
        for (size_t i = 0; i < cnt; i++) printf(" %d", got[i]);
        printf("\n");
    }
    return ok;
}

static void test_wordpiece(void) {
    kn_tokenizer *t = load(WP_JSON, NULL);
    CHECK(t);
    CHECK(encodes(t, "Hello, World!", (int32_t[]){2, 4, 5, 6, 7, 3}, 6));
    CHECK(encodes(t, "unaffable caf\xc3\xa9s", (int32_t[]){2, 8, 9, 10, 11, 14, 3}, 7));
    CHECK(encodes(t, "  H\xc3\x89LLO\xe4\xb8\xad\xe6\x96\x87 x", (int32_t[]){2, 4, 12, 13, 1, 3}, 6));
    CHECK(encodes(t, "ab abb", (int32_t[]){2, 15, 16, 15, 16, 16, 3}, 7));
    /* clean_text drops every character: lowercasing and NFD then see an empty text with no buffer
     * (UBSan: a zero offset applied to NULL; fuzz_tokenizer_json) */
    CHECK(encodes(t, "\x01\x02", (int32_t[]){2, 3}, 2));
    CHECK(kn_tok_bos(t) == 2 && kn_tok_add_bos(t) && kn_tok_add_eos(t));
    /* decode: "##" pieces join the word before, the first space of the text is dropped */
    int32_t ids[] = {8, 9, 10, 11};
    kn_detok d;
    kn_detok_init(&d, t, true, false);
    char out[64];
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        size_t k;
        const char *p = kn_detok_push(&d, ids[i], &k);
        memcpy(out + n, p, k);
        n += k;
    }
    CHECK(n == 14 && memcmp(out, "unaffable cafe", 14) == 0);
    kn_tokenizer_free(t);
}

static void test_unigram(void) {
    kn_tokenizer *t = load(UG_JSON, NULL);
    CHECK(t);
    CHECK(encodes(t, "hello world", (int32_t[]){5, 13, 1}, 3));
    CHECK(encodes(t, "hello  world 12", (int32_t[]){5, 13, 19, 1}, 4));
    /* NFKC: fullwidth letters and the fi ligature; the unknown "fi" is one fused <unk> */
    CHECK(encodes(t, "\xef\xbd\x88\xef\xbd\x85\xef\xbd\x8c\xef\xbd\x8c\xef\xbd\x8f \xef\xac\x81",
                  (int32_t[]){5, 2, 0, 1}, 4));
    CHECK(encodes(t, "xyz hello", (int32_t[]){2, 0, 5, 1}, 4));
    CHECK(kn_tok_eos(t) == 1 && kn_tok_add_eos(t) && !kn_tok_add_bos(t));
    kn_tokenizer_free(t);
}

/* A Unigram vocabulary whose pieces share prefixes with gaps ("abcd" without "abc"), tie in score
 * ("ab" against "a" + "b"), span multi-byte characters, repeat a text (the lowest id is the piece),
 * and cover some bytes only (<0x63>, <0xC3>, <0xA9>) for byte_fallback. */
static const char UG_REF_JSON[] =
    "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"byte_fallback\":true,\"vocab\":[[\"<unk>\",0],"
    "[\"a\",-1],[\"b\",-1],[\"ab\",-2],[\"abcd\",-2.5],[\"bcd\",-2],[\"d\",-1.5],[\"\xc3\xa9\",-1],"
    "[\"a\xc3\xa9\",-1.5],[\"\xe4\xb8\xad\",-2],[\"\xe4\xb8\xad\xe6\x96\x87\",-3],[\"\xe6\x96\x87\",-2],"
    "[\"\xe2\x96\x81\",-1],[\"\xe2\x96\x81"
    "a\",-1.5],[\"ab\",-0.5],[\"dd\",-2.9],[\"<0x63>\",-4],"
    "[\"<0xC3>\",-4],[\"<0xA9>\",-4]]}}";

/* The reference segmentation: every piece of every length (kn_tok_lookup) at every character
 * boundary, Viterbi with the earlier candidate kept on ties, unknown characters as bytes when all
 * have a byte token, else one unknown token. */
static void ref_unigram(const kn_tokenizer *t, const char *w, size_t n, kn_ivec *out) {
    double best[64];
    int32_t from[64], tok[64];
    for (size_t i = 0; i <= n; i++) best[i] = -1e300, from[i] = tok[i] = -1;
    best[0] = 0;
    for (size_t s = 0, cl; s < n; s += cl) {
        kn_utf8_decode((const uint8_t *)w + s, n - s, &cl);
        bool single = false;
        for (size_t e = s + cl, adv; e <= n; e += adv) {
            const int32_t id = kn_tok_lookup(t, w + s, e - s);
            if (id >= 0 && (t->tok[id].attr & KN_ATTR_NORMAL)) {
                single |= e == s + cl;
                if (best[s] + t->tok[id].score > best[e])
                    best[e] = best[s] + t->tok[id].score, from[e] = (int32_t)s, tok[e] = id;
            }
            if (e == n) break;
            kn_utf8_decode((const uint8_t *)w + e, n - e, &adv);
        }
        const double unk = best[s] + t->tj->unigram_min_score - 10.0;
        if (!single && unk > best[s + cl]) best[s + cl] = unk, from[s + cl] = (int32_t)s, tok[s + cl] = -1;
    }
    size_t ends[64], k = 0;
    for (size_t e = n; e > 0; e = (size_t)from[e]) ends[k++] = e;
    while (k-- > 0) {
        const size_t e = ends[k], s = (size_t)from[e];
        bool bytes = tok[e] < 0;
        for (size_t b = s; b < e && bytes; b++) bytes = t->byte_tok[(uint8_t)w[b]] >= 0;
        if (tok[e] >= 0) kn_ivec_push(out, tok[e]);
        else if (bytes)
            for (size_t b = s; b < e; b++) kn_ivec_push(out, t->byte_tok[(uint8_t)w[b]]);
        else kn_ivec_push(out, t->unk);
    }
}

/* A random string of 1..max_parts of the np parts into out (room for max_parts of the longest); its
 * length. */
static size_t random_text(uint64_t *rng, const char *const *parts, int np, int max_parts, char *out) {
    size_t n = 0;
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    for (int k = 1 + (int)((*rng >> 33) % (uint64_t)max_parts); k > 0; k--) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        const char *p = parts[(*rng >> 33) % (uint64_t)np];
        memcpy(out + n, p, strlen(p));
        n += strlen(p);
    }
    return n;
}

/* kn_unigram_encode against the reference over 20,000 random words of up to 12 parts (letters,
 * accented and CJK characters, the metaspace, a stray byte). */
static void test_unigram_reference(void) {
    kn_tokenizer *t = load(UG_REF_JSON, NULL);
    CHECK(t);
    if (!t) return;
    static const char *const parts[] = {
        "a", "b", "c", "d", "\xc3\xa9", "\xe4\xb8\xad", "\xe6\x96\x87", "\xe2\x96\x81", "z", "\xff"};
    uint64_t rng = 7;
    int bad = 0;
    for (int it = 0; it < 20000 && bad < 3; it++) {
        char w[48];
        const size_t n = random_text(&rng, parts, sizeof parts / sizeof *parts, 12, w);
        kn_ivec got = {0}, want = {0};
        CHECK(kn_unigram_encode(t, w, n, &got) == KILN_OK);
        ref_unigram(t, w, n, &want);
        if (got.n != want.n || memcmp(got.v, want.v, got.n * sizeof *got.v)) {
            printf("  word %d (%zu bytes): %zu tokens, the reference %zu\n", it, n, got.n, want.n);
            bad++;
        }
        free(got.v);
        free(want.v);
    }
    CHECK(bad == 0);
    kn_tokenizer_free(t);
}

/* Splits "a-b--c" at "-" with behaviour b; compares the pieces joined by '|'. */
static bool split_is(kn_tj_behavior b, bool invert, const char *want) {
    const char *s = "a-b--c";
    kn_spanvec v = {0};
    if (kn_tj_split(NULL, "-", 1, b, invert, s, strlen(s), 0, &v)) return false;
    char got[64];
    size_t n = 0;
    for (size_t i = 0; i < v.n; i++) {
        if (i) got[n++] = '|';
        memcpy(got + n, s + v.v[i].off, v.v[i].len);
        n += v.v[i].len;
    }
    got[n] = 0;
    free(v.v);
    if (strcmp(got, want) != 0) printf("  behaviour %d: %s, want %s\n", (int)b, got, want);
    return strcmp(got, want) == 0;
}

static void test_split_behaviors(void) {
    CHECK(split_is(KN_TJB_REMOVED, false, "a|b|c"));
    CHECK(split_is(KN_TJB_ISOLATED, false, "a|-|b|-|-|c"));
    CHECK(split_is(KN_TJB_MERGED_PREV, false, "a-|b-|-|c"));
    CHECK(split_is(KN_TJB_MERGED_NEXT, false, "a|-b|--c"));
    CHECK(split_is(KN_TJB_CONTIGUOUS, false, "a|-|b|--|c"));
    CHECK(split_is(KN_TJB_REMOVED, true, "-|--"));
}

static bool form_is(const char *in, bool compose, bool compat, const char *want) {
    kn_bvec out = {0};
    bool ok = kn_tj_unicode_form(in, strlen(in), compose, compat, &out) == KILN_OK && out.n == strlen(want) &&
              memcmp(out.v, want, out.n) == 0;
    free(out.v);
    return ok;
}

static void test_unicode_forms(void) {
    /* e + combining acute <-> e-acute; Angstrom sign -> A-ring (a singleton); Hangul jamo <-> syllable */
    CHECK(form_is("cafe\xcc\x81", true, false, "caf\xc3\xa9"));
    CHECK(form_is("caf\xc3\xa9", false, false, "cafe\xcc\x81"));
    CHECK(form_is("\xe2\x84\xab", true, false, "\xc3\x85"));
    CHECK(form_is("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", true, false, "\xea\xb0\x81"));
    CHECK(form_is("\xea\xb0\x81", false, false, "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"));
    /* canonical order: dot below (220) before dot above (230), then composed */
    CHECK(form_is("q\xcc\x87\xcc\xa3", false, false, "q\xcc\xa3\xcc\x87"));
    CHECK(form_is("d\xcc\x87\xcc\xa3", true, false, "\xe1\xb8\x8d\xcc\x87"));
    /* compatibility: the fi ligature, fullwidth A, superscript two */
    CHECK(form_is("\xef\xac\x81\xef\xbc\xa1\xc2\xb2", true, true, "fiA2"));
    CHECK(form_is("\xef\xac\x81", true, false, "\xef\xac\x81"));
    /* ill-formed bytes pass through */
    CHECK(form_is("a\xff"
                  "e\xcc\x81",
                  true, false, "a\xff\xc3\xa9"));
}

/* A base letter and k rounds of the marks acute (230), grave below (220) and tilde overlay (1), in
 * that order: canonical ordering puts every overlay first, then the below, then the above marks
 * (stable, the equal ones in place), and NFC composes the first acute with the a. Thousands of
 * marks in a row take a linear pass (a quadratic sort took seconds on a run of 40,000). */
static void test_long_mark_runs(void) {
    enum { K = 30000 };
    char *in = malloc(1 + 6 * (size_t)K + 1), *nfd = malloc(1 + 6 * (size_t)K + 1),
         *nfc = malloc(2 + 6 * (size_t)K + 1);
    if (!in || !nfd || !nfc) abort();
    size_t n = 0;
    in[n++] = 'a';
    for (int k = 0; k < K; k++) n += (size_t)sprintf(in + n, "\xcc\x81\xcc\x96\xcc\xb4");
    static const char *const order[] = {"\xcc\xb4", "\xcc\x96", "\xcc\x81"};
    size_t d = 0, c = 0;
    nfd[d++] = 'a';
    c += (size_t)sprintf(nfc, "\xc3\xa1"); /* the a with the first acute */
    for (int o = 0; o < 3; o++)
        for (int k = 0; k < K; k++) {
            d += (size_t)sprintf(nfd + d, "%s", order[o]);
            if (o < 2 || k > 0) c += (size_t)sprintf(nfc + c, "%s", order[o]);
        }
    CHECK(form_is(in, false, false, nfd));
    CHECK(form_is(in, true, false, nfc));
    free(in);
    free(nfd);
    free(nfc);
}

/* The quick check (quiet characters copied, cutting the text) against the full way, over 50,000
 * random strings of characters that decompose, reorder, compose (Latin, Hangul, kana, Kannada,
 * Greek with iota subscript), only under the compatibility forms (the fi ligature, fullwidth A),
 * sit beyond the BMP (an emoji, a musical note that decomposes), and ill-formed bytes. */
static void test_unicode_quick_check(void) {
    static const char *const parts[] = {"a",
                                        "e",
                                        "A",
                                        " ",
                                        "\xcc\x81",
                                        "\xcc\x96",
                                        "\xcc\xb4",
                                        "\xcc\xa7",
                                        "\xcd\x85",
                                        "\xc3\xa9",
                                        "\xe1\xba\xb9",
                                        "\xe2\x84\xab",
                                        "\xc3\x85",
                                        "\xef\xac\x81",
                                        "\xef\xbc\xa1",
                                        "\xe1\x84\x80",
                                        "\xe1\x85\xa1",
                                        "\xe1\x86\xa8",
                                        "\xea\xb0\x80",
                                        "\xea\xb0\x81",
                                        "\xe3\x81\x8b",
                                        "\xe3\x82\x99",
                                        "\xe3\x81\x8c",
                                        "\xe0\xb3\x86",
                                        "\xe0\xb3\x82",
                                        "\xe0\xb3\x95",
                                        "\xce\xb1",
                                        "\xe1\xbe\xb3",
                                        "\xe6\x9d\xb1",
                                        "\xf0\x9f\x98\x80",
                                        "\xf0\x9d\x85\x9e",
                                        "\xff",
                                        "\xe4\xb8",
                                        "\xd0\xb8",
                                        "\xd0\xb9",
                                        "\xcc\x86"};
    enum { NP = sizeof parts / sizeof *parts };
    uint64_t rng = 11;
    int bad = 0;
    for (int it = 0; it < 50000 && bad < 3; it++) {
        char s[128];
        const size_t n = random_text(&rng, parts, NP, 16, s);
        for (int form = 0; form < 4; form++) {
            kn_bvec q = {0}, f = {0};
            CHECK(kn_tj_unicode_form(s, n, form & 1, form >> 1, &q) == KILN_OK);
            CHECK(kn_tj_unicode_form_full(s, n, form & 1, form >> 1, &f) == KILN_OK);
            if (q.n != f.n || memcmp(q.v, f.v, q.n)) {
                printf("  string %d, form %d: %zu bytes, the full way %zu\n", it, form, q.n, f.n);
                bad++;
            }
            free(q.v);
            free(f.v);
        }
    }
    CHECK(bad == 0);
}

static void test_config(void) {
    const char *cfg = "{\"bos_token\": {\"content\": \"</s>\"}, \"eos_token\": \"<unk>\", \"add_bos_token\": true,"
                      " \"chat_template\": [{\"name\": \"default\", \"template\": \"{{ x }}\"},"
                      " {\"name\": \"tool_use\", \"template\": \"{{ tools }}\"}], \"model_max_length\": 1e30}";
    kn_tokenizer *t = load(UG_JSON, cfg);
    CHECK(t);
    CHECK(kn_tok_bos(t) == 1 && kn_tok_eos(t) == 0);
    CHECK(kn_tok_chat_template(t, NULL) && strcmp(kn_tok_chat_template(t, NULL), "{{ x }}") == 0);
    CHECK(kn_tok_chat_template(t, "tool_use") && strcmp(kn_tok_chat_template(t, "tool_use"), "{{ tools }}") == 0);
    CHECK(!kn_tok_chat_template(t, "rag"));
    const int32_t *eos;
    CHECK(kn_tok_eos_ids(t, &eos) >= 1 && eos[0] == 0);
    kn_tokenizer_free(t);
    /* a string template */
    t = load(UG_JSON, "{\"chat_template\": \"hi\"}");
    CHECK(t && strcmp(kn_tok_chat_template(t, NULL), "hi") == 0);
    kn_tokenizer_free(t);
}

/* Loading text fails with status st and a message containing `part`. */
static bool fails(const char *json, const char *cfg, kiln_status st, const char *part) {
    kn_tokenizer *t = NULL;
    kiln_status got = kn_tokenizer_load_hf(json, strlen(json), cfg, cfg ? strlen(cfg) : 0, &t);
    bool ok = got == st && !t && strstr(kn_error_msg(), part);
    if (!ok) printf("  got %d '%s', want %d with '%s'\n", (int)got, kn_error_msg(), (int)st, part);
    kn_tokenizer_free(t);
    return ok;
}

static void test_errors(void) {
    CHECK(fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,}}}", NULL, KILN_ERR_FORMAT, "model.vocab"));
    CHECK(fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\", 7]}}", NULL,
                KILN_ERR_FORMAT, "model.merges[1]"));
    CHECK(fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Precompiled\"}}",
                NULL, KILN_ERR_FORMAT, "normalizer (Precompiled) has no precompiled_charsmap"));
    CHECK(fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"post_processor\": {\"type\": "
                "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<nope>\"}}]}}",
                NULL, KILN_ERR_FORMAT, "post_processor.single[0]"));
    CHECK(
        fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}}}", NULL, KILN_ERR_FORMAT, "model.vocab"));
    CHECK(fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", "[1, 2]", KILN_ERR_FORMAT,
                "tokenizer_config.json"));
    CHECK(fails("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}} x", NULL, KILN_ERR_FORMAT, "after"));
    CHECK(fails("\"\\ud800\"", NULL, KILN_ERR_FORMAT, "not an object"));
    /* nesting beyond the cap */
    char deep[300];
    memset(deep, '[', 200);
    deep[200] = 0;
    CHECK(fails(deep, NULL, KILN_ERR_FORMAT, "nested too deeply"));
    /* the size cap */
    kn_tokenizer *t = NULL;
    CHECK(kn_tokenizer_load_hf("{}", (size_t)1 << 40, NULL, 0, &t) == KILN_ERR_FORMAT && !t);
}

/* A Unigram score beyond a float's range is held as the float's extreme, so the lowest score and the
 * unknown step below it stay finite: "z" (unknown) once made the end of "abz" unreachable, and the
 * segmentation's walk back read before its arrays (fuzz_tokenizer_json). A score that is not a finite
 * number (1e400) is refused. */
static void test_unigram_extreme_scores(void) {
    kn_tokenizer *t = load("{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],[\"a\",-1],"
                           "[\"b\",-5.7e69],[\"ab\",-3]]}}",
                           NULL);
    CHECK(t);
    CHECK(t && encodes(t, "abz", (int32_t[]){3, 0}, 2));
    CHECK(t && encodes(t, "zbz", (int32_t[]){0, 2, 0}, 3));
    kn_tokenizer_free(t);
    CHECK(fails("{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"<unk>\",0],[\"b\",-1e400]]}}", NULL, KILN_ERR_FORMAT,
                "model.vocab[1] is not a [piece, score] pair with a finite score"));
}

/* Encoding text fails with KILN_ERR_INVALID_ARG and a message containing `part`. */
static bool encode_fails(const kn_tokenizer *t, const char *text, const char *part) {
    int32_t got[64];
    size_t cnt = 0;
    kiln_status st = kn_tokenize(t, text, strlen(text), false, false, got, 64, &cnt);
    bool ok = st == KILN_ERR_INVALID_ARG && strstr(kn_error_msg(), part);
    if (!ok) printf("  %s: got %d '%s', want INVALID_ARG with '%s'\n", text, (int)st, kn_error_msg(), part);
    return ok;
}

/* Text no piece covers, with no unknown token to stand for it, as the tokenizers library treats it:
 * Unigram without unk_id fails where a character with no piece of its own would take the unknown step
 * (byte_fallback or not: MissingUnkId), WordPiece's unk_token defaults to "[UNK]" and fails when its
 * vocabulary lacks it, a BPE naming an unk_token its vocabulary lacks fails, and a BPE naming none
 * drops the text. Nothing is dropped silently where the library would refuse. */
static void test_missing_unknown_token(void) {
    kn_tokenizer *t = load("{\"model\":{\"type\":\"Unigram\",\"byte_fallback\":true,\"vocab\":[[\"a\",-1],"
                           "[\"b\",-1],[\"<0x7A>\",-5],[\"cd\",-1]]}}",
                           NULL);
    CHECK(t && encodes(t, "ab", (int32_t[]){0, 1}, 2));
    CHECK(t && encode_fails(t, "abz", "cannot encode the text at U+007A"));
    CHECK(t && encode_fails(t, "cd", "U+0063")); /* "c" alone is no piece, though "cd" is */
    kn_tokenizer_free(t);

    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0,\"[UNK]\":1}},"
                     "\"pre_tokenizer\":{\"type\":\"Whitespace\"}}";
    t = load(wp, NULL);
    CHECK(t && encodes(t, "a b a", (int32_t[]){0, 1, 0}, 3));
    kn_tokenizer_free(t);
    t = load("{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"<unk>\",\"vocab\":{\"a\":0,\"[UNK]\":1}},"
             "\"pre_tokenizer\":{\"type\":\"Whitespace\"}}",
             NULL);
    CHECK(t && encodes(t, "a", (int32_t[]){0}, 1));
    CHECK(t && encode_fails(t, "a \xc3\xa9 a", "U+00E9"));
    kn_tokenizer_free(t);

    const char *bpe = "{\"model\":{\"type\":\"BPE\",%s\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}";
    char json[256];
    snprintf(json, sizeof json, bpe, "");
    t = load(json, NULL);
    CHECK(t && encodes(t, "abzb", (int32_t[]){2, 1}, 2));
    kn_tokenizer_free(t);
    snprintf(json, sizeof json, bpe, "\"unk_token\":\"<unk>\",");
    t = load(json, NULL);
    CHECK(t && encodes(t, "abb", (int32_t[]){2, 1}, 2));
    CHECK(t && encode_fails(t, "abzb", "U+007A"));
    CHECK(t && encode_fails(t, "ab\xff", "at the byte 0xFF"));
    kn_tokenizer_free(t);
}

static void test_json_reader(void) {
    const char *s = "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\ud83e\\udd99\\n\"], \"b\": {}}";
    kn_json j;
    CHECK(kn_json_parse(s, strlen(s), "t", 8, &j) == KILN_OK);
    int32_t a = kn_json_get(&j, 0, "a");
    CHECK(kn_json_type(&j, a) == KN_J_ARR && j.v[a].n == 5);
    int32_t e = j.v[a].first;
    int64_t iv;
    double dv;
    CHECK(kn_json_int(&j, e, 0, 10, &iv) && iv == 1);
    e = j.v[e].next;
    CHECK(!kn_json_int(&j, e, -10000, 10000, &iv) && kn_json_num(&j, e, &dv) && dv == -2500.0);
    e = j.v[e].next;
    CHECK(kn_json_bool(&j, e, false));
    e = j.v[j.v[e].next].next;
    size_t n;
    const char *str = kn_json_str(&j, e, &n);
    CHECK(str && n == 8 && memcmp(str, "x\xc3\xa9\xf0\x9f\xa6\x99\n", 8) == 0);
    CHECK(kn_json_type(&j, kn_json_get(&j, 0, "b")) == KN_J_OBJ && kn_json_get(&j, 0, "c") < 0);
    kn_json_free(&j);
}

int main(void) {
    RUN(test_json_reader);
    RUN(test_wordpiece);
    RUN(test_unigram);
    RUN(test_unigram_extreme_scores);
    RUN(test_missing_unknown_token);
    RUN(test_unigram_reference);
    RUN(test_split_behaviors);
    RUN(test_unicode_forms);
    RUN(test_long_mark_runs);
    RUN(test_unicode_quick_check);
    RUN(test_config);
    RUN(test_errors);
    return kt_summary();
}
