/*
 * test_grammar_fuzz.c - hostile constraint text: mutated JSON Schemas and GBNF grammars compile or
 * fail cleanly, and what compiles behaves.
 *
 * 10,000 cases (KILN_FUZZ_N overrides), deterministic from one seed (KILN_FUZZ_SEED overrides):
 * the JSON Schemas of the test material (../shared/data/json-schemas, those up to 16 KB) and a
 * corpus of GBNF grammars (written below, plus the .gbnf files of tests/grammars when that folder
 * exists), each mutated by one of: byte flips, truncation, spliced keywords or GBNF fragments, deep
 * nesting, huge numbers, bogus $refs, giant repetition bounds, or left as they are. Every case goes
 * through kiln_grammar_compile:
 *   - a failure must be an error status with a message (kiln_last_error non-empty);
 *   - a success must give GBNF text (kiln_grammar_gbnf) that compiles again by itself to a grammar
 *     that answers kiln_grammar_accepts like the first on a few probe strings (and the same way
 *     twice), and a matcher over a small byte vocabulary whose masks are consistent: the count
 *     matches the bitmap, an allowed token is accepted, a refused one is not.
 * Crashes, hangs and leaks are what the sanitizer build (make asan) looks for here. Set
 * KILN_FUZZ_TRACE=1 to print each case before it runs (to find the one that crashed).
 */
#include "harness.h"
#include "json_span.h"
#include "kiln.h"
#include "sample/gmask.h"

#include <dirent.h>
#include <stdint.h>

#define N_CASES_DEFAULT 10000
#define MAX_CORPUS      256
#define MAX_TEXT        (1u << 20) /* KILN_GRAMMAR_MAX_TEXT */
/* Schemas larger than this are left out of the corpus: a few 50-70 KB schemas take a quarter to a
 * half second each to compile and would be most of the run (test_schema compiles every one). */
#define MAX_SCHEMA      (16u << 10)

/* ---- deterministic randomness ------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- corpora ----------------------------------------------------------------------------------- */

/* GBNF grammars written for this test: the constructs of the dialect, one grammar each. */
static const char *const GBNF_CORPUS[] = {
    /* arithmetic with precedence */
    "root ::= expr\n"
    "expr ::= term ((\"+\" | \"-\") term)*\n"
    "term ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= number | \"(\" expr \")\"\n"
    "number ::= [0-9]+ (\".\" [0-9]+)?\n",
    /* JSON values with bounded whitespace */
    "root ::= value\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\")\n"
    "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n",
    /* a shopping list, one item per line */
    "root ::= item{1,10}\n"
    "item ::= \"- \" qty \" \" name \"\\n\"\n"
    "qty ::= [1-9] [0-9]?\n"
    "name ::= [a-z]+ (\" \" [a-z]+)*\n",
    /* yes / no with comments */
    "# an answer\n"
    "root ::= answer # the only rule that matters\n"
    "answer ::= (\"yes\" | \"no\") \".\"?\n",
    /* dates and times */
    "root ::= date \"T\" time\n"
    "date ::= [0-9]{4} \"-\" ([0] [1-9] | [1] [0-2]) \"-\" ([0-2] [0-9] | [3] [01])\n"
    "time ::= ([01] [0-9] | [2] [0-3]) \":\" [0-5] [0-9] (\":\" [0-5] [0-9])? \"Z\"\n",
    /* unicode classes, escapes, any character, negation */
    "root ::= greeting \" \" .+ \"\\u00e9\" [\\u0400-\\u04FF]* [^\\n]? \"\\U0001F600\"?\n"
    "greeting ::= \"h\\x69\" | \"\\u3053\\u3093\"\n",
    /* a tiny programming language with nested blocks */
    "root ::= stmt+\n"
    "stmt ::= ident \" = \" expr \";\\n\" | \"if \" expr \" {\\n\" stmt* \"}\\n\"\n"
    "expr ::= ident | [0-9]+ | \"(\" expr \" \" op \" \" expr \")\"\n"
    "op ::= \"+\" | \"-\" | \"<\" | \"==\"\n"
    "ident ::= [a-zA-Z_] [a-zA-Z0-9_-]{0,15}\n",
    /* chess-like moves */
    "root ::= move (\" \" move){0,5}\n"
    "move ::= piece? ([a-h] [1-8])? \"x\"? [a-h] [1-8] (\"+\" | \"#\")? | \"O-O\" \"-O\"?\n"
    "piece ::= [KQRBN]\n",
};

static const char *const SCHEMA_SPLICES[] = {
    "\"$ref\":\"#/definitions/nope\"",
    "\"$ref\":\"#\"",
    "\"$ref\":\"https://example.com/schema.json\"",
    "\"$ref\":\"#/$defs/a/~2\"",
    "\"$ref\":\"\"",
    "\"$ref\":5",
    "\"$ref\":\"#/properties/%ZZ\"",
    "\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"",
    "\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/b\"",
    "\"type\":\"foo\"",
    "\"type\":[]",
    "\"type\":[\"string\",\"integer\",\"null\",\"array\",\"object\",\"boolean\",\"number\"]",
    "\"pattern\":\"(a\"",
    "\"pattern\":\"^(a|b)*[\\\\p{L}]{2,}$\"",
    "\"pattern\":\"(a{1000}){1000}\"",
    "\"pattern\":\"a{99999}\"",
    "\"pattern\":\"(?<=x)y\"",
    "\"minItems\":-1",
    "\"minItems\":100000,\"maxItems\":1000000",
    "\"minItems\":5,\"maxItems\":2",
    "\"minLength\":1000000",
    "\"maxLength\":4000000000",
    "\"minLength\":18446744073709551616",
    "\"minimum\":1e308,\"maximum\":-1e308",
    "\"minimum\":1e999999",
    "\"exclusiveMinimum\":-99999999999999999999999999,\"type\":\"integer\"",
    "\"multipleOf\":0",
    "\"enum\":[]",
    "\"enum\":[1,\"a\",null,{\"x\":[1,2]},[true]]",
    "\"const\":{\"a\":[1,{\"b\":null}]}",
    "\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]",
    "\"anyOf\":[]",
    "\"oneOf\":[{},{\"not\":{}}]",
    "\"not\":{\"type\":\"string\"}",
    "\"items\":false",
    "\"prefixItems\":[{\"type\":\"string\"},true,false]",
    "\"additionalProperties\":{\"$ref\":\"#\"}",
    "\"properties\":{\"\":{},\"\\u0000\":{\"type\":\"null\"}},\"required\":[\"\",\"missing\"]",
    "\"required\":[1,2]",
    "\"format\":\"date-time\"",
    "\"format\":\"no-such-format\"",
    "\"nullable\":true",
    "\"if\":{},\"then\":{},\"else\":{}",
    "\"patternProperties\":{\"^x\":{}}",
    "\"dependentRequired\":{\"a\":[\"b\"]}",
};

static const char *const GBNF_SPLICES[] = {
    "::=",
    "|",
    "(",
    ")",
    "*",
    "+",
    "?",
    "{1,}",
    "{,3}",
    "{3,1}",
    "{99999999}",
    "{4294967296}",
    "\"\\x",
    "[^",
    "\\u",
    "\"\\U0011FFFF\"",
    "[z-a]",
    "root ::= root\n",
    "a ::= b\nb ::= a\n",
    "undefined-rule",
    "\n",
    "root ::= x\n",
    ".",
    "\"\"",
    "[]",
    "[^]",
    "# comment",
    "\\",
    "x ::= x \"a\"\n",
    "(\"a\"{1000}){1000}",
    "[a-z]{100000}",
    "\"\\xFF\\xFE\"",
    "::= ::=",
    "ws ::= ws*\n",
};

typedef struct corpus {
    char *text[MAX_CORPUS];
    size_t len[MAX_CORPUS];
    char *probe[MAX_CORPUS]; /* a valid instance (schemas), or NULL */
    int n;
} corpus;

static void corpus_add(corpus *c, const char *text, size_t len, const char *probe, size_t probe_len) {
    if (c->n == MAX_CORPUS) return;
    c->text[c->n] = malloc(len + 1);
    memcpy(c->text[c->n], text, len);
    c->text[c->n][len] = 0;
    c->len[c->n] = len;
    c->probe[c->n] = NULL;
    if (probe) {
        c->probe[c->n] = malloc(probe_len + 1);
        kn_jspan_compact((kn_jspan){probe, probe_len}, c->probe[c->n]);
    }
    c->n++;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Adds every file of dir ending in ext; schema files contribute their "schema" and one valid
 * instance. Sorted by name, so the cases do not depend on the directory order. */
static void load_dir(corpus *c, const char *dir, const char *ext, bool schemas) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[1024];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 1024;) {
        size_t l = strlen(e->d_name), el = strlen(ext);
        if (l > el && strcmp(e->d_name + l - el, ext) == 0) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        char *text = kt_read_file(path, &len);
        if (text && !schemas) corpus_add(c, text, len, NULL, 0);
        kn_jspan root = {text, len}, schema, tests, t, valid, data;
        if (text && schemas && kn_jspan_member(root, "schema", &schema) && schema.n <= MAX_SCHEMA) {
            const char *probe = NULL;
            size_t probe_len = 0;
            for (size_t k = 0; kn_jspan_member(root, "tests", &tests) && kn_jspan_elem(tests, k, &t); k++)
                if (kn_jspan_member(t, "valid", &valid) && kn_jspan_is_true(valid) &&
                    kn_jspan_member(t, "data", &data)) {
                    probe = data.p;
                    probe_len = data.n;
                    break;
                }
            corpus_add(c, schema.p, schema.n, probe, probe_len);
        }
        free(text);
        free(names[i]);
    }
}

static void corpus_free(corpus *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->text[i]);
        free(c->probe[i]);
    }
    c->n = 0;
}

/* ---- mutations --------------------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

enum {
    M_NONE,
    M_FLIP,
    M_TRUNCATE,
    M_SPLICE,
    M_NEST,
    M_NUMBER,
    M_REF,
    M_REPEAT,
    M_COUNT,
};
static const char *const M_NAMES[M_COUNT] = {"none", "flip", "truncate", "splice", "nest", "number", "ref", "repeat"};

/* A position just after a '{' of a schema text (so a spliced member stays in an object), or 0. */
static size_t after_brace(const char *s, size_t n) {
    size_t k = 0, pos = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '{' && below(++k) == 0) pos = i + 1;
    return pos;
}

/* Inserts member text at a random object of schema s[n] (the text then has a "member," prefix). */
static void splice_member(buf *out, const char *s, size_t n, const char *member) {
    size_t at = after_brace(s, n);
    put(out, s, at);
    if (at) {
        puts_(out, member);
        /* an empty object gets no trailing comma */
        size_t k = at;
        while (k < n && (s[k] == ' ' || s[k] == '\n')) k++;
        if (k < n && s[k] != '}') puts_(out, ",");
    }
    put(out, s + at, n - at);
}

static void nest(buf *out, const char *s, size_t n, bool schema) {
    static const size_t depths[] = {10, 100, 1000, 5000, 100000};
    size_t depth = depths[below(KN_ARRAY_LEN(depths))];
    if (!schema) {
        /* root ::= ((((...)))) around the first rule's body, or a deep group of its own */
        puts_(out, "root ::= ");
        for (size_t i = 0; i < depth; i++) puts_(out, "(");
        puts_(out, "\"a\"");
        for (size_t i = 0; i < depth; i++) puts_(out, below(4) ? ")" : ")?");
        puts_(out, "\n");
        const char *body = strstr(s, "\n");
        if (body) put(out, body, n - (size_t)(body - s)); /* the other rules (root then repeats: an error) */
        return;
    }
    static const char *const wrap[][2] = {
        {"{\"type\":\"array\",\"items\":", "}"},
        {"{\"anyOf\":[", ",{\"type\":\"null\"}]}"},
        {"{\"type\":\"object\",\"properties\":{\"a\":", "},\"required\":[\"a\"]}"},
        {"[", "]"},
        {"{\"allOf\":[", "]}"},
    };
    size_t w = below(KN_ARRAY_LEN(wrap));
    for (size_t i = 0; i < depth && out->n < MAX_TEXT; i++) puts_(out, wrap[w][0]);
    put(out, s, n);
    for (size_t i = 0; i < depth && out->n < 2 * MAX_TEXT; i++) puts_(out, wrap[w][1]);
}

/* A number of s[n] replaced by a huge or odd one. */
static void huge_number(buf *out, const char *s, size_t n, bool schema) {
    static const char *const nums[] = {
        "1e999999",   "99999999999999999999999999", "-0",          "1.5e-400", "18446744073709551616",
        "4294967297", "-9223372036854775809",       "0.0000000001"};
    const char *num = nums[below(KN_ARRAY_LEN(nums))];
    size_t k = 0, at = n;
    for (size_t i = 0; i < n; i++)
        if (s[i] >= '0' && s[i] <= '9' && (i == 0 || !(s[i - 1] >= '0' && s[i - 1] <= '9')) && below(++k) == 0) at = i;
    if (at == n) {
        if (schema) {
            char member[128];
            snprintf(member, sizeof member, "\"maxLength\":%s,\"minimum\":%s", num, num);
            splice_member(out, s, n, member);
        } else {
            put(out, s, n);
            puts_(out, "\nx ::= \"a\"{");
            puts_(out, num);
            puts_(out, "}\n");
        }
        return;
    }
    size_t end = at;
    while (end < n && ((s[end] >= '0' && s[end] <= '9') || s[end] == '.' || s[end] == 'e' || s[end] == 'E')) end++;
    put(out, s, at);
    puts_(out, num);
    put(out, s + end, n - end);
}

/* Builds case text from corpus text s[n] with mutation kind m. */
static void mutate(buf *out, const char *s, size_t n, int m, bool schema) {
    out->n = 0;
    put(out, "", 0);
    switch (m) {
        case M_NONE: put(out, s, n); break;
        case M_FLIP: {
            put(out, s, n);
            size_t flips = 1 + below(8);
            for (size_t i = 0; i < flips && out->n; i++) out->p[below(out->n)] ^= (char)(1u << below(8));
            break;
        }
        case M_TRUNCATE: put(out, s, below(n + 1)); break;
        case M_SPLICE:
            if (schema) splice_member(out, s, n, SCHEMA_SPLICES[below(KN_ARRAY_LEN(SCHEMA_SPLICES))]);
            else {
                size_t at = below(n + 1);
                put(out, s, at);
                puts_(out, GBNF_SPLICES[below(KN_ARRAY_LEN(GBNF_SPLICES))]);
                put(out, s + at, n - at);
            }
            break;
        case M_NEST: nest(out, s, n, schema); break;
        case M_NUMBER: huge_number(out, s, n, schema); break;
        case M_REF:
            if (schema) splice_member(out, s, n, SCHEMA_SPLICES[below(9)]); /* the $ref entries */
            else {
                /* a reference to a rule that does not exist, or a cycle through the root */
                put(out, s, n);
                puts_(out, below(2) ? "\nextra ::= missing-rule\n" : "\nloop ::= loop-b \"x\"\nloop-b ::= loop\n");
            }
            break;
        case M_REPEAT:
            if (schema) {
                static const char *const reps[] = {
                    "\"type\":\"array\",\"minItems\":100000,\"maxItems\":1000000",
                    "\"type\":\"string\",\"minLength\":1000000",
                    "\"type\":\"string\",\"maxLength\":4000000000",
                    "\"type\":\"string\",\"pattern\":\"^(ab{2,9999}){1,99999}$\"",
                    "\"type\":\"object\",\"minProperties\":100000",
                    "\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1000},\"minItems\":1000",
                };
                splice_member(out, s, n, reps[below(KN_ARRAY_LEN(reps))]);
            } else {
                static const char *const reps[] = {
                    "x{1000000}", "(\"a\"{1000}){1000}",     "[a-z]{4294967296}", "(\"ab\" | [0-9]{2,65535}){0,65535}",
                    "x{0,0}",     "x{18446744073709551617,}"};
                put(out, s, n);
                puts_(out, "\nrep ::= ");
                puts_(out, reps[below(KN_ARRAY_LEN(reps))]);
                puts_(out, "\nx ::= \"x\"\n");
            }
            break;
    }
    if (out->n > MAX_TEXT + 1024) out->n = MAX_TEXT + 1024; /* longer texts are refused by size alone */
}

/* ---- checks of a compiled grammar --------------------------------------------------------------- */

/* A small vocabulary: every byte, and some multi-byte tokens that cross JSON and GBNF boundaries. */
static const char *const MULTI[] = {"{\"", "\":", "\",\"", "true", "false", "null",  "},",       "[]",
                                    "12",  "3.5", "e+",    "  ",   "\n ",   "\\u00", "\xc3\xa9", "\xe2\x82",
                                    "ab",  "yes", "- 1 ",  "O-O",  "20",    "T1",    ":0",       "Z"};
static kn_vtrie *vocab_trie;
static int32_t n_vocab;

static void make_vocab(void) {
    n_vocab = 256 + (int32_t)KN_ARRAY_LEN(MULTI) + 1; /* + one end-of-generation token */
    const char *text[512];
    uint32_t len[512];
    static char bytes[256];
    for (int b = 0; b < 256; b++) {
        bytes[b] = (char)b;
        text[b] = &bytes[b];
        len[b] = 1;
    }
    for (size_t i = 0; i < KN_ARRAY_LEN(MULTI); i++) {
        text[256 + i] = MULTI[i];
        len[256 + i] = (uint32_t)strlen(MULTI[i]);
    }
    const int32_t eog = n_vocab - 1;
    text[eog] = "";
    len[eog] = 0;
    if (kn_vtrie_new(n_vocab, text, len, &eog, 1, &vocab_trie) != KILN_OK) vocab_trie = NULL;
}

static int popcount_mask(const uint64_t *mask) {
    int n = 0;
    for (int32_t w = 0; w < (n_vocab + 63) / 64; w++) n += __builtin_popcountll(mask[w]);
    return n;
}

static bool allowed(const uint64_t *mask, int32_t t) { return (mask[t / 64] >> (t % 64)) & 1; }

/* Walks a matcher for g over the small vocabulary for a few steps (lowest allowed token, or a
 * random allowed one), checking the mask against kn_gmatch_accept. Returns a failure text or NULL. */
static const char *walk_matcher(const kiln_grammar *g) {
    if (!vocab_trie) return NULL;
    kn_gmatch *m = NULL;
    if (kn_gmatch_new(g, vocab_trie, false, &m) != KILN_OK)
        return kiln_last_error()[0] ? NULL : "kn_gmatch_new failed silently";
    const char *why = NULL;
    for (int step = 0; step < 8 && !why; step++) {
        int32_t n_allowed = -1;
        const uint64_t *mask = kn_gmatch_mask(m, &n_allowed);
        if (!mask) {
            why = "no mask";
            break;
        }
        if (n_allowed != popcount_mask(mask)) {
            why = "the allowed count differs from the bitmap";
            break;
        }
        if (n_allowed == 0) break; /* stuck (e.g. an empty language): nothing more to check */
        /* a refused token is refused by accept, and leaves the state as it was */
        for (int32_t t = 0; t < n_vocab - 1; t++)
            if (!allowed(mask, t)) {
                if (kn_gmatch_accept(m, t) == KILN_OK) why = "a token outside the mask was accepted";
                break;
            }
        if (why) break;
        mask = kn_gmatch_mask(m, &n_allowed);
        int32_t pick = -1, k = (int32_t)below((size_t)n_allowed);
        for (int32_t t = 0; t < n_vocab && pick < 0; t++)
            if (allowed(mask, t) && k-- == 0) pick = t;
        if (pick == n_vocab - 1) {
            if (!kn_gmatch_accepting(m)) why = "end-of-generation allowed in a state that does not accept";
            break;
        }
        if (kn_gmatch_accept(m, pick) != KILN_OK) why = "an allowed token was refused by accept";
    }
    kn_gmatch_free(m);
    return why;
}

/* ---- the test ---------------------------------------------------------------------------------- */

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

typedef struct counts {
    int compiled, failed, bad, by_kind[M_COUNT][2];
} counts;

static const char *const PROBES_FIXED[] = {"",      "{}",        "[]",  "null", "0",
                                           "\"a\"", "1+2*(3-4)", "yes", "root", "{\"a\":[1,2,{\"b\":null}]}"};

/* Compiles case text t[n] and checks what comes out (see the top of the file). Returns NULL, or
 * what went wrong (a static buffer). probe: a valid instance of the source schema, or NULL. */
static const char *run_case(const char *t, size_t n, bool schema, bool strict, const char *probe, counts *cnt, int m) {
    static char why[512];
    kiln_grammar_params gp = kiln_grammar_default_params();
    gp.kind = schema ? KILN_GRAMMAR_JSON_SCHEMA : KILN_GRAMMAR_GBNF;
    gp.strict = strict;
    kiln_grammar *g = NULL, *g2 = NULL;
    kiln_status st = kiln_grammar_compile(t, n, &gp, &g);
    if (st != KILN_OK) {
        cnt->failed++;
        cnt->by_kind[m][1]++;
        if (g) return "a failed compile returned a grammar";
        if (st != KILN_ERR_INVALID_ARG && st != KILN_ERR_UNSUPPORTED && st != KILN_ERR_NOMEM) {
            snprintf(why, sizeof why, "failed with status %s (%s)", kiln_status_str(st), kiln_last_error());
            return why;
        }
        return kiln_last_error()[0] ? NULL : "failed without a message";
    }
    cnt->compiled++;
    cnt->by_kind[m][0]++;
    const char *ret = NULL;
    const char *gbnf = kiln_grammar_gbnf(g);
    if (!gbnf || !gbnf[0]) {
        ret = "compiled, without GBNF text";
        goto done;
    }
    if (kiln_grammar_compile(gbnf, strlen(gbnf), NULL, &g2) != KILN_OK) {
        snprintf(why, sizeof why, "compiled, but its own GBNF text does not compile again: %s", kiln_last_error());
        ret = why;
        goto done;
    }
    /* probes: fixed strings, the schema's valid instance, a slice of the case text, random bytes */
    char rnd_bytes[64];
    for (size_t k = 0; k < sizeof rnd_bytes; k++) rnd_bytes[k] = (char)rnd();
    const char *probes[16];
    size_t plen[16], np = 0;
    for (size_t k = 0; k < KN_ARRAY_LEN(PROBES_FIXED); k++) {
        probes[np] = PROBES_FIXED[k];
        plen[np++] = strlen(PROBES_FIXED[k]);
    }
    if (probe) {
        probes[np] = probe;
        plen[np++] = strlen(probe);
    }
    probes[np] = t;
    plen[np++] = n < 200 ? n : 200;
    probes[np] = rnd_bytes;
    plen[np++] = below(sizeof rnd_bytes);
    for (size_t k = 0; k < np && !ret; k++) {
        bool a1 = kiln_grammar_accepts(g, probes[k], plen[k]);
        bool a2 = kiln_grammar_accepts(g, probes[k], plen[k]);
        bool a3 = kiln_grammar_accepts(g2, probes[k], plen[k]);
        if (a1 != a2 || a1 != a3) {
            snprintf(why, sizeof why, "kiln_grammar_accepts on '%.*s': %d, then %d, and %d by the recompiled GBNF",
                     (int)(plen[k] < 80 ? plen[k] : 80), probes[k], a1, a2, a3);
            ret = why;
        }
    }
    if (!ret) ret = walk_matcher(g);
done:
    kiln_grammar_free(g2);
    kiln_grammar_free(g);
    return ret;
}

static void test_fuzz(void) {
    corpus schemas = {.n = 0}, grammars = {.n = 0};
    load_dir(&schemas, kt_data("json-schemas"), ".json", true);
    for (size_t i = 0; i < KN_ARRAY_LEN(GBNF_CORPUS); i++)
        corpus_add(&grammars, GBNF_CORPUS[i], strlen(GBNF_CORPUS[i]), NULL, 0);
    load_dir(&grammars, "tests/grammars", ".gbnf", false);
    make_vocab();
    const int n_cases = env_int("KILN_FUZZ_N", N_CASES_DEFAULT);
    rng_state = (uint64_t)env_int("KILN_FUZZ_SEED", 20261203);
    const bool trace = env_int("KILN_FUZZ_TRACE", 0) != 0;
    printf("  %d schemas, %d grammars, %d cases\n", schemas.n, grammars.n, n_cases);
    buf b = {NULL, 0, 0};
    counts cnt;
    memset(&cnt, 0, sizeof cnt);
    for (int i = 0; i < n_cases; i++) {
        /* as many schema cases as grammar cases (while there are schemas) */
        const bool schema = schemas.n > 0 && below(2) != 0;
        corpus *c = schema ? &schemas : &grammars;
        const int src = (int)below((size_t)c->n);
        const int m = (int)below(M_COUNT);
        const bool strict = schema && below(2);
        mutate(&b, c->text[src], c->len[src], m, schema);
        if (trace) printf("  case %d: %s %d, %s (%zu bytes)\n", i, schema ? "schema" : "grammar", src, M_NAMES[m], b.n);
        fflush(stdout);
        const char *why = run_case(b.p, b.n, schema, strict, schema ? c->probe[src] : NULL, &cnt, m);
        if (why && cnt.bad++ < 10) {
            printf("  case %d (%s %d, %s, %zu bytes): %s\n    text: ", i, schema ? "schema" : "grammar", src,
                   M_NAMES[m], b.n, why);
            for (size_t k = 0; k < b.n && k < 160; k++) {
                unsigned char ch = (unsigned char)b.p[k];
                if (ch < 0x20 || ch >= 0x7f) printf("\\x%02x", ch);
                else putchar(ch);
            }
            printf("\n");
        }
    }
    printf("  %d compiled, %d failed cleanly; by mutation (compiled/failed):", cnt.compiled, cnt.failed);
    for (int m = 0; m < M_COUNT; m++) printf(" %s %d/%d", M_NAMES[m], cnt.by_kind[m][0], cnt.by_kind[m][1]);
    printf("\n");
    free(b.p);
    kn_vtrie_free(vocab_trie);
    vocab_trie = NULL;
    corpus_free(&schemas);
    corpus_free(&grammars);
    CHECKF(cnt.bad == 0, "%d of %d cases went wrong (the first are listed above)", cnt.bad, n_cases);
}

/* The unmutated corpus grammars written above are valid GBNF: they must compile (a failing one
 * would make the fuzz cases built on it test nothing but the error path). */
static void test_corpus_compiles(void) {
    for (size_t i = 0; i < KN_ARRAY_LEN(GBNF_CORPUS); i++) {
        kiln_grammar *g = NULL;
        kiln_status st = kiln_grammar_compile(GBNF_CORPUS[i], strlen(GBNF_CORPUS[i]), NULL, &g);
        CHECKF(st == KILN_OK, "corpus grammar %zu: %s", i, kiln_last_error());
        kiln_grammar_free(g);
    }
    static const struct {
        size_t grammar;
        const char *text;
        bool ok;
    } cases[] = {
        {0, "1+2*(3.5-4)", true},
        {0, "1+", false},
        {2, "- 2 eggs\n- 10 green apples\n", true},
        {2, "- 0 eggs\n", false},
        {3, "yes.", true},
        {3, "maybe", false},
        {4, "2026-12-03T14:05Z", true},
        {4, "2026-13-03T14:05Z", false},
        {7, "e4 Nf3 O-O-O Qxd8#", true},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        kiln_grammar *g = NULL;
        const char *src = GBNF_CORPUS[cases[i].grammar];
        CHECK(kiln_grammar_compile(src, strlen(src), NULL, &g) == KILN_OK);
        bool ok = kiln_grammar_accepts(g, cases[i].text, strlen(cases[i].text));
        kiln_grammar_free(g);
        CHECKF(ok == cases[i].ok, "grammar %zu on '%s': %d", cases[i].grammar, cases[i].text, ok);
    }
}

int main(void) {
    RUN(test_corpus_compiles);
    RUN(test_fuzz);
    return kt_summary();
}
