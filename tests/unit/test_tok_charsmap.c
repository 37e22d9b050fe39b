/*
 * test_tok_charsmap.c - the Precompiled normalizer (SentencePiece's precompiled charsmap) of a
 * tokenizer.json. The test builds its own charsmaps: a small double-array trie builder below (each
 * trie node gets its own block of 256 units) over hand-written NFKC rules (full-width letters, the fi
 * ligature, a circled digit, a composed accent, a deleted control character). Expectations are
 * derived by hand from those rules and from how the tokenizers library applies them (grapheme
 * clusters under 6 bytes looked up whole, by their shortest matching prefix). Malformed charsmaps
 * (every truncation, every single-byte change, bad sizes, offsets and base64) load or fail with
 * KILN_ERR_FORMAT and never crash. End to end, a Unigram tokenizer.json with a Precompiled normalizer
 * gives the ids the NFKC one of test_tokenizer_json.c gives. The comparison with SentencePiece's own
 * normalizer on a real charsmap is tests/cli/test_tok_charsmap.sh.
 */
#include "harness.h"
#include "text/tok_tj.h"

#include <string.h>

typedef struct rule {
    const char *from, *to;
} rule;

/* NFKC facts: U+FF21 -> A, U+FF42 -> b, U+FF48.. -> h e l o, U+FB01 -> fi, U+2460 -> 1,
 * e U+0301 -> U+00E9, U+00A0 -> space; DEL is deleted (SentencePiece's rule sets drop controls). */
static const rule RULES[] = {
    {"\xef\xbc\xa1", "A"},     {"\xef\xbd\x82", "b"}, {"\xef\xbd\x88", "h"},  {"\xef\xbd\x85", "e"},
    {"\xef\xbd\x8c", "l"},     {"\xef\xbd\x8f", "o"}, {"\xef\xac\x81", "fi"}, {"\xe2\x91\xa0", "1"},
    {"e\xcc\x81", "\xc3\xa9"}, {"\xc2\xa0", " "},     {"\x7f", ""},
};
#define N_RULES (sizeof RULES / sizeof RULES[0])

/* Builds a charsmap of rules[0..n) into buf; returns its length. Trie node k has its children in
 * units [256 (k + 1), 256 (k + 2)); unit 0 points at the root's block. */
static size_t build(const rule *rules, size_t n, uint8_t *buf, size_t cap) {
    enum { MAXN = 64 };
    int child[MAXN][256];
    int term[MAXN];
    int nodes = 1;
    memset(child, 0, sizeof child);
    for (int k = 0; k < MAXN; k++) term[k] = -1;
    char blob[512];
    size_t nb = 0;
    for (size_t r = 0; r < n; r++) {
        int at = 0;
        for (const uint8_t *p = (const uint8_t *)rules[r].from; *p; p++) {
            if (!child[at][*p]) child[at][*p] = nodes++;
            at = child[at][*p];
        }
        term[at] = (int)nb;
        size_t l = strlen(rules[r].to);
        memcpy(blob + nb, rules[r].to, l + 1);
        nb += l + 1;
    }
    size_t n_unit = 256 * ((size_t)nodes + 1);
    uint32_t *u = calloc(n_unit, sizeof *u);
    u[0] = 256u << 10; /* root block at 256 */
    for (int k = 0; k < nodes; k++) {
        uint32_t base = 256u * (uint32_t)(k + 1);
        if (term[k] >= 0) u[base] = 0x80000000u | (uint32_t)term[k];
        for (int c = 1; c < 256; c++) {
            int m = child[k][c];
            if (!m) continue;
            uint32_t pos = base ^ (uint32_t)c, mbase = 256u * (uint32_t)(m + 1);
            u[pos] = (uint32_t)c | (term[m] >= 0 ? 1u << 8 : 0) | ((pos ^ mbase) << 10);
        }
    }
    size_t total = 4 + n_unit * 4 + nb;
    if (total > cap) {
        free(u);
        return 0;
    }
    uint32_t ts = (uint32_t)(n_unit * 4);
    for (int b = 0; b < 4; b++) buf[b] = (uint8_t)(ts >> (8 * b));
    for (size_t i = 0; i < n_unit; i++)
        for (int b = 0; b < 4; b++) buf[4 + i * 4 + b] = (uint8_t)(u[i] >> (8 * b));
    memcpy(buf + 4 + n_unit * 4, blob, nb);
    free(u);
    return total;
}

static uint8_t CM[1 << 16];
static size_t cm_len;

static bool normalizes(const kn_tj_charsmap *cm, const char *in, size_t n, const char *want, size_t wn) {
    kn_bvec out = {0};
    bool ok =
        kn_tj_charsmap_apply(cm, in, n, &out) == KILN_OK && out.n == wn && (wn == 0 || memcmp(out.v, want, wn) == 0);
    if (!ok) {
        printf("  got '");
        for (size_t i = 0; i < out.n; i++) printf("%c", out.v[i] >= 32 && out.v[i] < 127 ? out.v[i] : '.');
        printf("' (%zu bytes), want %zu bytes\n", out.n, wn);
    }
    free(out.v);
    return ok;
}
#define NORM(cm, in, want) normalizes(cm, in, sizeof in - 1, want, sizeof want - 1)

static void test_rules(void) {
    cm_len = build(RULES, N_RULES, CM, sizeof CM);
    CHECK(cm_len > 0);
    kn_tj_charsmap *cm = NULL;
    CHECK(kn_tj_charsmap_parse(CM, cm_len, "t", &cm) == KILN_OK && cm);
    CHECK(NORM(cm, "\xef\xbc\xa1\xef\xbd\x82\xef\xac\x81Z", "AbfiZ")); /* full-width, ligature */
    CHECK(NORM(cm, "\xe2\x91\xa0\xc2\xa0x", "1 x"));                   /* circled digit, NBSP */
    CHECK(NORM(cm, "cafe\xcc\x81!", "caf\xc3\xa9!"));                  /* a two-character key */
    CHECK(NORM(cm,
               "a\x7f"
               "b",
               "ab"));                                   /* deletion */
    CHECK(NORM(cm, "xyz \xff\xc3 e", "xyz \xff\xc3 e")); /* nothing matches */
    CHECK(NORM(cm, "a\0\xef\xbd\x82", "a\0b"));          /* NUL passes */
    CHECK(NORM(cm, "", ""));
    /* a cluster under 6 bytes is replaced whole by its shortest matching prefix's replacement: the
     * accent on a full-width letter goes, and so does a second accent after a composed pair */
    CHECK(NORM(cm, "\xef\xbc\xa1\xcc\x81-", "A-"));
    CHECK(NORM(cm, "e\xcc\x81\xcc\x81", "\xc3\xa9"));
    /* 6 bytes or more: character by character */
    CHECK(NORM(cm, "\xef\xbd\x82\xcc\x81\xcc\x81", "b\xcc\x81\xcc\x81"));
    /* nothing attaches to a control character, so the accent after DEL stays */
    CHECK(NORM(cm, "\x7f\xcc\x81", "\xcc\x81"));
    kn_tj_charsmap_free(cm);
}

static bool fails(const uint8_t *d, size_t n, const char *part) {
    kn_tj_charsmap *cm = NULL;
    kiln_status st = kn_tj_charsmap_parse(d, n, "t", &cm);
    bool ok = st == KILN_ERR_FORMAT && !cm && strstr(kn_error_msg(), part);
    if (!ok) printf("  got %d '%s', want '%s'\n", (int)st, kn_error_msg(), part);
    kn_tj_charsmap_free(cm);
    return ok;
}

static void test_malformed(void) {
    cm_len = build(RULES, N_RULES, CM, sizeof CM);
    CHECK(cm_len > 0);
    static uint8_t d[sizeof CM];
    memcpy(d, CM, cm_len);
    CHECK(fails(d, 3, "too short"));
    d[0] ^= 1; /* trie size 4k + 1 */
    CHECK(fails(d, cm_len, "multiple of 4"));
    memcpy(d, CM, cm_len);
    d[3] = 0x40; /* a trie larger than the data */
    CHECK(fails(d, cm_len, "larger"));
    memcpy(d, CM, cm_len);
    d[cm_len - 2] = 0xC3; /* "...\xC3\0": a cut character in the strings */
    CHECK(fails(d, cm_len, "UTF-8"));
    /* a leaf whose offset is past the strings: the leaf of the first rule's key is the last value
     * written at a node block start with bit 31 */
    memcpy(d, CM, cm_len);
    size_t n_unit = ((size_t)d[1] << 8 | d[0] | (size_t)d[2] << 16) / 4;
    size_t leaf = 0;
    for (size_t i = 256; i < n_unit && !leaf; i += 256)
        if (d[4 + i * 4 + 3] & 0x80) leaf = i;
    CHECK(leaf);
    d[4 + leaf * 4 + 2] = 0x7F; /* value += 0x7F0000 */
    CHECK(fails(d, cm_len, "past its strings"));
    memcpy(d, CM, cm_len);
    /* point the leaf of "e U+0301" (replacement "\xc3\xa9") one byte into its character */
    kn_tj_charsmap *cm = NULL;
    for (size_t i = 256; i < n_unit; i += 256) {
        uint32_t u = (uint32_t)d[4 + i * 4] | (uint32_t)d[4 + i * 4 + 1] << 8 | (uint32_t)d[4 + i * 4 + 2] << 16 |
                     (uint32_t)d[4 + i * 4 + 3] << 24;
        if (!(u & 0x80000000u)) continue;
        uint32_t v = u & 0x7FFFFFFFu;
        if (d[4 + n_unit * 4 + v] == 0xC3) {
            d[4 + i * 4] = (uint8_t)(v + 1);
            break;
        }
    }
    CHECK(fails(d, cm_len, "inside a character"));
    /* every truncation and every single-byte change either loads or fails cleanly, and what loads
     * normalizes without reading out of bounds (the sanitizer build checks that) */
    const char text[] = "\xef\xbc\xa1\xef\xbd\x82 cafe\xcc\x81 \xef\xac\x81\x7f\xe2\x91\xa0";
    size_t loaded = 0, refused = 0;
    for (size_t k = 0; k < cm_len; k++) {
        kiln_status st = kn_tj_charsmap_parse(CM, k, "t", &cm);
        CHECK(st == KILN_OK || st == KILN_ERR_FORMAT);
        kn_tj_charsmap_free(cm);
    }
    for (size_t k = 0; k < cm_len; k++) {
        if (CM[k] == 0 && k % 61) continue; /* most of the trie is empty units: a sample of those */
        memcpy(d, CM, cm_len);
        static const uint8_t XOR[] = {0x01, 0x80, 0xFF, 0x10};
        d[k] ^= XOR[k % 4];
        kiln_status st = kn_tj_charsmap_parse(d, cm_len, "t", &cm);
        CHECK(st == KILN_OK || st == KILN_ERR_FORMAT);
        if (st == KILN_OK) {
            kn_bvec out = {0};
            CHECK(kn_tj_charsmap_apply(cm, text, sizeof text - 1, &out) == KILN_OK);
            free(out.v);
            loaded++;
        } else {
            refused++;
        }
        kn_tj_charsmap_free(cm);
        cm = NULL;
    }
    CHECK(loaded > 0 && refused > 0);
}

static void b64(const uint8_t *d, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        out[k++] = A[v >> 18];
        out[k++] = A[(v >> 12) & 63];
        out[k++] = i + 1 < n ? A[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[k] = 0;
}

/* The Unigram tokenizer of test_tokenizer_json.c with Precompiled in place of NFKC. */
static const char UG_HEAD[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"</s>\","
    "\"special\":true}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Precompiled\","
    "\"precompiled_charsmap\":\"";
static const char UG_TAIL[] =
    "\"},{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}]},\"pre_tokenizer\":{"
    "\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
    "{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{}},\"decoder\":{\"type\":"
    "\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"always\",\"split\":true},\"model\":{"
    "\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0.0],[\"</s>\",0.0],[\"\xe2\x96\x81\",-2.0],"
    "[\"\xe2\x96\x81he\",-3.0],[\"llo\",-3.5],[\"\xe2\x96\x81hello\",-4.0],[\"h\",-5.0],[\"e\",-5.0],"
    "[\"l\",-5.0],[\"o\",-5.0],[\"\xe2\x96\x81w\",-4.0],[\"or\",-4.5],[\"ld\",-4.5],[\"\xe2\x96\x81world\","
    "-6.5],[\"w\",-5.0],[\"r\",-5.0],[\"d\",-5.0],[\"1\",-6.0],[\"2\",-6.0],[\"\xe2\x96\x81"
    "12\",-5.0]]}}";

static char *ug_json(const char *charsmap_b64) {
    size_t n = strlen(UG_HEAD) + strlen(charsmap_b64) + strlen(UG_TAIL) + 1;
    char *j = malloc(n);
    snprintf(j, n, "%s%s%s", UG_HEAD, charsmap_b64, UG_TAIL);
    return j;
}

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

static void test_tokenizer_json(void) {
    cm_len = build(RULES, N_RULES, CM, sizeof CM);
    CHECK(cm_len > 0);
    static char enc[sizeof CM * 4 / 3 + 8];
    b64(CM, cm_len, enc);
    char *json = ug_json(enc);
    kn_tokenizer *t = NULL;
    kiln_status st = kn_tokenizer_load_hf(json, strlen(json), NULL, 0, &t);
    free(json);
    CHECKF(st == KILN_OK, "%s", kn_error_msg());
    CHECK(encodes(t, "hello world", (int32_t[]){5, 13, 1}, 3));
    CHECK(encodes(t, "hello  world 12", (int32_t[]){5, 13, 19, 1}, 4));
    /* full-width letters and the fi ligature; the unknown "fi" is one fused <unk> */
    CHECK(encodes(t, "\xef\xbd\x88\xef\xbd\x85\xef\xbd\x8c\xef\xbd\x8c\xef\xbd\x8f \xef\xac\x81",
                  (int32_t[]){5, 2, 0, 1}, 4));
    /* NBSP becomes a space, DEL goes */
    CHECK(encodes(t, "hel\x7flo\xc2\xa0world", (int32_t[]){5, 13, 1}, 3));
    kn_tokenizer_free(t);

    /* the loader's errors name the step */
    static const struct {
        const char *b64, *part;
    } BAD[] = {{"!!!!", "not valid base64"}, {"AAAA", "too short"}, {"QUFBQUFBQUE=", "multiple of 4"}, {"", "no "}};
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        json = ug_json(BAD[i].b64);
        st = kn_tokenizer_load_hf(json, strlen(json), NULL, 0, &t);
        free(json);
        CHECKF(st == KILN_ERR_FORMAT && !t && strstr(kn_error_msg(), BAD[i].part) &&
                   strstr(kn_error_msg(), "normalizer.normalizers[0]"),
               "%s: %s", BAD[i].b64, kn_error_msg());
    }
}

int main(void) {
    RUN(test_rules);
    RUN(test_malformed);
    RUN(test_tokenizer_json);
    return kt_summary();
}
