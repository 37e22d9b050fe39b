/*
 * test_gbnf.c - the GBNF compiler (gbnf.c, grammar.c): what it accepts and refuses, with the exact
 * "line L, column C" of each error; UTF-8 classes checked code point by code point against a
 * reference; repetition bounds; the corpus grammars of tests/grammars with texts inside and outside
 * their languages; and mutated grammars that must compile or fail cleanly.
 */
#include "harness.h"
#include "sample/grammar_prog.h"

/* Compiles g (NUL-terminated); NULL with the message printed on failure. */
static kiln_grammar *compile(const char *g) {
    kiln_grammar *gr = NULL;
    if (kn_gbnf_compile(g, strlen(g), &gr)) {
        printf("  compile failed: %s\n", kn_error_msg());
        return NULL;
    }
    return gr;
}

static bool accepts(const kiln_grammar *g, const char *s) { return kiln_grammar_accepts(g, s, strlen(s)); }

static void test_literals(void) {
    kiln_grammar *g = compile("root ::= \"ab\" | \"c\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"");
    CHECK(g);
    CHECK(accepts(g, "ab"));
    CHECK(accepts(g, "c\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80"));
    CHECK(!accepts(g, "a"));
    CHECK(!accepts(g, "abc"));
    CHECK(!accepts(g, ""));
    CHECK(strcmp(kiln_grammar_gbnf(g), "root ::= \"ab\" | \"c\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"") == 0);
    kiln_grammar_free(g);
}

static void test_repetition(void) {
    kiln_grammar *g = compile("root ::= \"a\"{3} \"b\"{2,} \"c\"{0,2} \"d\"? \"e\"+ \"f\"* \"g\"{1,3}");
    CHECK(g);
    CHECK(accepts(g, "aaabbeg"));
    CHECK(accepts(g, "aaabbbbbccdeeeefffggg"));
    CHECK(!accepts(g, "aabbeg"));     /* a{3} */
    CHECK(!accepts(g, "aaabeg"));     /* b{2,} */
    CHECK(!accepts(g, "aaabbccceg")); /* c{0,2} */
    CHECK(!accepts(g, "aaabbddeg"));  /* d? */
    CHECK(!accepts(g, "aaabbg"));     /* e+ */
    CHECK(!accepts(g, "aaabbegggg")); /* g{1,3} */
    kiln_grammar_free(g);
    /* a postfix operator applies to everything since the last item began: "ab"{2}* repeats "abab" */
    CHECK((g = compile("root ::= \"ab\"{2}* \"x\"{0}")));
    CHECK(accepts(g, ""));
    CHECK(accepts(g, "abababab"));
    CHECK(!accepts(g, "ababab"));
    CHECK(!accepts(g, "x"));
    kiln_grammar_free(g);
    CHECK((g = compile("root ::= ( \"a\" | \"bc\" ){2,3} x{ 1 , }\nx ::= [0-9]")));
    CHECK(accepts(g, "abc1"));
    CHECK(accepts(g, "bcbca123"));
    CHECK(!accepts(g, "a1"));
    CHECK(!accepts(g, "aaaa1"));
    CHECK(!accepts(g, "aa"));
    kiln_grammar_free(g);
    /* operators in a row are one: e++ is e+, e?? is e?, any other mix e* (forty '+' compile: nested
     * they were refused as too ambiguous, and twelve cost the matcher 150 times a plain class) */
    static const struct {
        const char *ops;
        bool empty, one, many;
    } rows[] = {{"++", false, true, true}, {"??", true, true, false}, {"? ?", true, true, false},
                {"+?", true, true, true},  {"?+", true, true, true},  {"*+", true, true, true},
                {"+ *", true, true, true}, {"?*?", true, true, true}, {"+++{2}", false, false, true}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char text[64];
        snprintf(text, sizeof text, "root ::= \"<\" \"a\"%s \">\"", rows[i].ops);
        CHECKF((g = compile(text)), "%s: %s", text, kiln_last_error());
        if (!g) continue;
        CHECKF(accepts(g, "<>") == rows[i].empty, "%s and no a", text);
        CHECKF(accepts(g, "<a>") == rows[i].one, "%s and one a", text);
        CHECKF(accepts(g, "<aaaa>") == rows[i].many, "%s and four", text);
        kiln_grammar_free(g);
    }
    char plus40[128] = "root ::= [a-z ]";
    for (int i = 0; i < 40; i++) strcat(plus40, "+");
    CHECKF((g = compile(plus40)), "%s", kiln_last_error());
    CHECK(g && accepts(g, "ab c") && !accepts(g, ""));
    kiln_grammar_free(g);
}

static void test_refcount(void) {
    kiln_grammar *g = compile("root ::= [a-z]+");
    CHECK(g);
    kn_grammar_retain(g);
    kiln_grammar_free(g); /* one reference left */
    CHECK(accepts(g, "abc"));
    kiln_grammar_free(g);
    kiln_grammar_free(NULL);
    CHECK(!kiln_grammar_accepts(NULL, "a", 1));
}

/* kiln_grammar_compile fails closed: an error, *out NULL, the message kept. */
static void test_fail_closed(void) {
    kiln_grammar *g = (kiln_grammar *)1;
    kiln_grammar_params p = kiln_grammar_default_params();
    CHECK(kiln_grammar_compile("root ::= nope", 13, &p, &g) == KILN_ERR_INVALID_ARG);
    CHECK(g == NULL);
    CHECK(strstr(kiln_last_error(), "line 1, column 10: undefined rule 'nope'"));
    CHECK(kiln_grammar_compile("root ::= \"x\"", 12, NULL, &g) == KILN_OK && g);
    kiln_grammar_free(g);
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* Each error kind, with the exact message (its place first). */
static void test_errors(void) {
    static const struct {
        const char *gbnf, *msg;
    } cases[] = {
        {"root ::= \"abc", "line 1, column 10: unterminated string literal"},
        {"root ::= [abc", "line 1, column 10: unterminated character class"},
        {"root ::= \"\\q\"", "line 1, column 11: unknown escape '\\' followed by 'q'"},
        {"root ::= \"\\x4\"", "line 1, column 11: the escape \\x needs 2 hex digits"},
        {"root ::= [\\u12G4]", "line 1, column 11: the escape \\u needs 4 hex digits"},
        {"root ::= \"\\uD800\"", "line 1, column 11: the escape \\uD800 is a UTF-16 surrogate, not a character"},
        {"root ::= \"\\U00110000\"", "line 1, column 11: the escape \\U00110000 is beyond U+10FFFF"},
        {"root ::= \"a\"{3,2}", "line 1, column 13: bad repetition bounds {3,2}: the minimum is above the maximum"},
        {"root ::= \"a\"{2", "line 1, column 15: expected ',' or '}' in the repetition, found the end of the grammar"},
        {"root ::= \"a\"{,2}", "line 1, column 14: expected a number after '{', found ','"},
        {"root ::= \"a\"{1,2 x", "line 1, column 18: expected '}' to close the repetition, found 'x'"},
        {"root \"a\"", "line 1, column 6: expected '::=' after the rule name 'root', found '\"'"},
        {"root ::= \"a\"\n  ::= \"b\"", "line 2, column 3: expected a rule name, found ':'"},
        {"root ::= foo", "line 1, column 10: undefined rule 'foo'"},
        {"\n\n  root ::= \"a\" |\n   \"b\" x-1\n", "line 4, column 8: undefined rule 'x-1'"},
        {"foo ::= \"a\"", "line 1, column 1: the grammar has no rule named 'root' (where matching starts)"},
        {"# only a comment\n", "line 1, column 1: the grammar has no rule named 'root' (where matching starts)"},
        {"root ::= root \"a\"",
         "line 1, column 10: left recursion in rule 'root': it can reach itself without matching a byte"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a",
         "line 3, column 12: left recursion in rule 'a': it can reach itself without matching a byte"},
        {"root ::= x\nx ::= y? y\ny ::= \"\" | x \"z\"",
         "line 3, column 12: left recursion in rule 'x': it can reach itself without matching a byte"},
        {"root ::= (\"a\"?)*",
         "line 1, column 16: left recursion in rule 'root': it can reach itself without matching a byte"},
        {"root ::= \"a\" )", "line 1, column 14: unexpected ')' in rule 'root'"},
        {"root ::= ( \"a\"", "line 1, column 15: expected ')' to close the group opened at line 1, column 10, found "
                             "the end of the grammar"},
        {"root ::= *", "line 1, column 10: nothing to repeat before '*'"},
        {"root ::= \"\"+", "line 1, column 12: nothing to repeat before '+'"},
        {"root ::= [z-a]", "line 1, column 11: bad range in character class: U+007A-U+0061 is backwards"},
        {"root ::= []", "line 1, column 10: empty character class"},
        {"root ::= \"\xff\"", "line 1, column 11: invalid UTF-8"},
        {"root ::= \"\xc0\x80\"", "line 1, column 11: invalid UTF-8"},     /* overlong */
        {"root ::= \"\xed\xa0\x80\"", "line 1, column 11: invalid UTF-8"}, /* a surrogate */
        {"root ::= \"é\" ü", "line 1, column 14: unexpected 'ü' in rule 'root'"},
        {"root ::= \"a\"\nroot ::= \"b\"",
         "line 2, column 1: rule 'root' is defined twice (first at line 1, column 1)"},
        {"root ::= x\nx ::= \"a\" x", "line 1, column 1: rule 'root' matches no text: each alternative recurses "
                                      "forever or needs a character no class "
                                      "allows"},
        {"root ::= [^\\x00-\\U0010FFFF]", "line 1, column 1: rule 'root' matches no text: each alternative recurses "
                                          "forever or needs a character no class "
                                          "allows"},
        {"root ::= <think>",
         "line 1, column 10: token references (<...>) are not supported: write the text as a literal"},
        {"root ::= \"a\"{10001}", "line 1, column 14: repetition bound 10001 is above the limit of 10000"},
        {"root ::= \"a\"{0,99999999999999999999}",
         "line 1, column 16: repetition bound 99999999999999999999 is above the "
         "limit of 10000"},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        kiln_grammar *g = (kiln_grammar *)1;
        kiln_status st = kn_gbnf_compile(cases[i].gbnf, strlen(cases[i].gbnf), &g);
        CHECKF(st == KILN_ERR_INVALID_ARG && g == NULL, "case %zu: status %d", i, (int)st);
        CHECKF(strcmp(kn_error_msg(), cases[i].msg) == 0, "case %zu: got \"%s\"", i, kn_error_msg());
    }
}

/* Counters (@count, @+N{lo,hi}, @{lo,hi}): lengths without a rule per length, nested counters, a
 * guard with no counter below it, and the errors of the syntax. */
static void test_counters(void) {
    kiln_grammar *g = compile("root ::= \"<\" @count s\ns ::= @{2,4} \">\" | [a-z] @+1{0,4} s");
    CHECK(g);
    CHECK(accepts(g, "<ab>") && accepts(g, "<abcd>"));
    CHECK(!accepts(g, "<a>") && !accepts(g, "<abcde>") && !accepts(g, "<>") && !accepts(g, "<ab"));
    kiln_grammar_free(g);
    /* groups of one or two a's, two or three groups: the inner counter pops with its group */
    CHECK((g = compile("root ::= @count (grp @+1{0,3})+ @{2,3}\ngrp ::= \"(\" @count (\"a\" @+1{0,2})+ \")\"")));
    CHECK(accepts(g, "(a)(aa)") && accepts(g, "(a)(a)(aa)"));
    CHECK(!accepts(g, "(a)") && !accepts(g, "(aaa)(a)") && !accepts(g, "(a)(a)(a)(a)") && !accepts(g, "()(a)"));
    kiln_grammar_free(g);
    /* a guard with no counter below it stops its stack */
    CHECK((g = compile("root ::= \"a\" @{0,0} | \"b\"")));
    CHECK(accepts(g, "b") && !accepts(g, "a"));
    kiln_grammar_free(g);
    /* the frames above the counter are rebuilt by a guard: a counted item inside a helper rule */
    CHECK((g = compile("root ::= @count x* \".\"\nx ::= y \"-\"\ny ::= \"a\" @+1{0,2}")));
    CHECK(accepts(g, "a-a-.") && !accepts(g, "a-a-a-."));
    kiln_grammar_free(g);
    /* a guard looks for its counter at most 64 frames down: deeper, the matcher fails with a message
     * (the work of a step stays bounded), at 64 it still counts */
    CHECK((g = compile("root ::= @count x\nx ::= \"(\" x \")\" | \"a\" @+1{0,3}")));
    kn_gstore *st = NULL;
    CHECK(kn_gstore_new(g, 0, &st) == KILN_OK);
    int32_t q = kn_gstore_start(st);
    for (int i = 0; i < 100 && q != KN_GS_DEAD; i++) {
        q = kn_gstore_step(st, q, '(');
        int32_t a = kn_gstore_step(st, q, 'a');
        CHECKF((a != KN_GS_DEAD) == (i < 64), "depth %d: %s", i + 1, kn_gstore_failed(st) ? kn_gstore_failed(st) : "-");
    }
    CHECK(kn_gstore_failed(st) && strstr(kn_gstore_failed(st), "counter guard is more than 64"));
    CHECK(kn_gstore_fail_status(st) == KILN_ERR_UNSUPPORTED);
    kn_gstore_free(st);
    kiln_grammar_free(g);
    static const struct {
        const char *gbnf, *msg;
    } bad[] = {
        {"root ::= @{5,3} \"a\"", "line 1, column 10: bad counter guard {5,3}: the minimum is above the maximum"},
        {"root ::= @x", "line 1, column 11: expected '@count', '@+N{lo,hi}' or '@{lo,hi}', found 'x'"},
        {"root ::= @counter", "line 1, column 11: expected '@count', '@+N{lo,hi}' or '@{lo,hi}', found 'c'"},
        {"root ::= @+{1,2}", "line 1, column 12: expected a number after '@+', found '{'"},
        {"root ::= @{1}", "line 1, column 13: expected '{lo,hi}' in a counter guard, found '}'"},
        {"root ::= @{1,16777217}", "line 1, column 14: counter bound 16777217 is above the limit of 16777216"},
        {"root ::= @count x\nx ::= @{0,1} x | \"a\"",
         "line 2, column 14: left recursion in rule 'x': it can reach itself without matching a byte"},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(bad); i++) {
        kiln_grammar *gr = (kiln_grammar *)1;
        kiln_status rc = kn_gbnf_compile(bad[i].gbnf, strlen(bad[i].gbnf), &gr);
        CHECKF(rc == KILN_ERR_INVALID_ARG && gr == NULL, "case %zu: status %d", i, (int)rc);
        CHECKF(strcmp(kn_error_msg(), bad[i].msg) == 0, "case %zu: got \"%s\"", i, kn_error_msg());
    }
}

/* The caps: text size, nesting depth, program size; each fails with a message, no crash. */
static void test_limits(void) {
    size_t n = KILN_GRAMMAR_MAX_TEXT + 1;
    char *big = malloc(n + 1);
    CHECK(big);
    memset(big, ' ', n);
    memcpy(big, "root ::= \"a\"", 12);
    kiln_grammar *g = NULL;
    kiln_status st = kn_gbnf_compile(big, n, &g);
    free(big);
    CHECK(st == KILN_ERR_INVALID_ARG && !g);
    CHECK(strstr(kn_error_msg(), "at most 1048576"));

    char deep[1024];
    int k = snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < KN_GBNF_MAX_NESTING; i++) deep[k++] = '(';
    k += snprintf(deep + k, sizeof deep - (size_t)k, "\"x\"");
    for (int i = 0; i < KN_GBNF_MAX_NESTING; i++) deep[k++] = ')';
    deep[k] = 0;
    CHECK((g = compile(deep))); /* exactly at the cap */
    CHECK(accepts(g, "x"));
    kiln_grammar_free(g);
    k = snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i <= KN_GBNF_MAX_NESTING; i++) deep[k++] = '(';
    deep[k] = 0;
    CHECK(kn_gbnf_compile(deep, strlen(deep), &g) == KILN_ERR_INVALID_ARG);
    CHECKF(strcmp(kn_error_msg(), "line 1, column 110: groups are nested more than 100 deep") == 0, "%s",
           kn_error_msg());

    /* 420 x 10,000 copies: over the program cap of 4,194,304 elements */
    size_t cap = 420 * 12 + 64;
    char *wide = malloc(cap);
    CHECK(wide);
    k = snprintf(wide, cap, "root ::=");
    for (int i = 0; i < 420; i++) k += snprintf(wide + k, cap - (size_t)k, " \"a\"{10000}");
    st = kn_gbnf_compile(wide, (size_t)k, &g);
    free(wide);
    CHECK(st == KILN_ERR_INVALID_ARG);
    CHECKF(strstr(kn_error_msg(), "the grammar is too large: more than 4194304 program elements"), "%s",
           kn_error_msg());

    /* large but within the caps: x{0,10000} runs in constant depth and accepts 10,000, not 10,001 */
    CHECK((g = compile("root ::= \"<\" \"a\"{0,10000} \">\"")));
    char *run = malloc(10004);
    CHECK(run);
    run[0] = '<';
    memset(run + 1, 'a', 10001);
    run[10001] = '>';
    CHECK(kiln_grammar_accepts(g, run, 10002));
    run[10001] = 'a';
    run[10002] = '>';
    CHECK(!kiln_grammar_accepts(g, run, 10003));
    free(run);
    kiln_grammar_free(g);
}

/* Comments, line breaks inside groups and after '|' or '::=', CRLF, empty alternatives, names. */
static void test_syntax(void) {
    kiln_grammar *g = compile("# a comment\r\n"
                              "root ::=   # the start\r\n"
                              "  ( a-1 |\r\n"
                              "    \"b\"   # inside a group\n"
                              "    B2 )\r\n"
                              "a-1 ::= \"a\" |\n"
                              "  # nothing\n"
                              "  \"\"\n"
                              "\n"
                              "B2 ::= [\\]\\[\\\\-] .\n");
    CHECK(g);
    CHECK(accepts(g, "a"));
    CHECK(accepts(g, ""));
    CHECK(accepts(g, "b]x"));
    CHECK(accepts(g, "b[\xe2\x82\xac"));
    CHECK(accepts(g, "b-\n"));
    CHECK(accepts(g, "b\\\\"));
    CHECK(!accepts(g, "bx"));
    CHECK(!accepts(g, "b]"));
    CHECK(!accepts(g, "b]\xe2\x82")); /* a partial character is not a character */
    kiln_grammar_free(g);
    /* '-' first or last in a class is itself; "\x80" is U+0080 (two bytes), as in llama.cpp */
    CHECK((g = compile("root ::= [-a] [b-] \"\\x80\"")));
    CHECK(accepts(g, "--\xc2\x80"));
    CHECK(accepts(g, "ab\xc2\x80"));
    CHECK(!accepts(g, "ab\x80"));
    kiln_grammar_free(g);
    /* an alternative that needs an impossible character is dropped, the others stay */
    CHECK((g = compile("root ::= \"a\" | [^\\x00-\\U0010FFFF] \"b\"")));
    CHECK(accepts(g, "a"));
    CHECK(!accepts(g, "b"));
    kiln_grammar_free(g);
}

/* ---- UTF-8 ----------------------------------------------------------------------------------- */

typedef struct cls_case {
    const char *gbnf; /* root ::= one class */
    bool neg;
    uint32_t r[8][2]; /* ranges as written (before negation); {0,0} ends unless first */
    int n;
} cls_case;

static int utf8_enc(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) return o[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return o[0] = (uint8_t)(0xC0 | cp >> 6), o[1] = (uint8_t)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (uint8_t)(0xE0 | cp >> 12), o[1] = (uint8_t)(0x80 | (cp >> 6 & 63)),
               o[2] = (uint8_t)(0x80 | (cp & 63)), 3;
    o[0] = (uint8_t)(0xF0 | cp >> 18), o[1] = (uint8_t)(0x80 | (cp >> 12 & 63)),
    o[2] = (uint8_t)(0x80 | (cp >> 6 & 63));
    o[3] = (uint8_t)(0x80 | (cp & 63));
    return 4;
}

/* Whether the store accepts bytes b[n] from its start state as a whole sentence. */
static bool store_accepts(kn_gstore *s, const uint8_t *b, int n) {
    int32_t st = kn_gstore_start(s);
    for (int i = 0; i < n && st >= 0; i++) st = kn_gstore_step(s, st, b[i]);
    return st >= 0 && kn_gstore_accepting(s, st);
}

/* Every code point U+0000..U+10FFFF (and the surrogates, encoded as if they were characters) against
 * the class's definition. */
static void test_utf8_classes(void) {
    static const cls_case cases[] = {
        {"root ::= [\\x70-\\u0900]", false, {{0x70, 0x900}}, 1},
        {"root ::= [\\u07F0-\\u0801\\uFFF0-\\U00010010]", false, {{0x7F0, 0x801}, {0xFFF0, 0x10010}}, 2},
        {"root ::= [^\\x00-\\x7F]", true, {{0, 0x7F}}, 1},
        {"root ::= [^a-z\\u00e9\\U0001F600-\\U0001F64F]", true, {{'a', 'z'}, {0xE9, 0xE9}, {0x1F600, 0x1F64F}}, 3},
        {"root ::= [\\uD7FF-\\uE000]", false, {{0xD7FF, 0xE000}}, 1},
        {"root ::= [\\U0010FFFF\\x00]", false, {{0x10FFFF, 0x10FFFF}, {0, 0}}, 2},
        {"root ::= .", true, {{0, 0}}, 0},
        {"root ::= [ぁ-ゟ一-鿿]", false, {{0x3041, 0x309F}, {0x4E00, 0x9FFF}}, 2},
        {"root ::= [\\u0410-\\u0412\\u0415-\\u0417\\u0440]",
         false,
         {{0x410, 0x412}, {0x415, 0x417}, {0x440, 0x440}},
         3},
        {"root ::= [^\\u0080-\\u07FF\\U00010000-\\U0010FFFF]", true, {{0x80, 0x7FF}, {0x10000, 0x10FFFF}}, 2},
        {"root ::= [\\x00-\\U0010FFFF]", false, {{0, 0x10FFFF}}, 1},
        {"root ::= [\\u0FFF-\\u1000\\u3FFF-\\u4040\\U0003FFFF-\\U00040001]",
         false,
         {{0xFFF, 0x1000}, {0x3FFF, 0x4040}, {0x3FFFF, 0x40001}},
         3},
    };
    for (size_t c = 0; c < KN_ARRAY_LEN(cases); c++) {
        kiln_grammar *g = compile(cases[c].gbnf);
        CHECKF(g, "case %zu", c);
        kn_gstore *s;
        CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
        kiln_grammar_free(g);
        for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
            bool in = false;
            for (int k = 0; k < cases[c].n; k++) in |= cp >= cases[c].r[k][0] && cp <= cases[c].r[k][1];
            bool want = (in != cases[c].neg) && !(cp >= 0xD800 && cp <= 0xDFFF);
            uint8_t b[4];
            int n = utf8_enc(cp, b);
            bool got = store_accepts(s, b, n);
            if (got != want) {
                kn_gstore_free(s);
                CHECKF(got == want, "case %zu (%s): U+%04X %s", c, cases[c].gbnf, cp, got ? "accepted" : "rejected");
            }
        }
        CHECKF(!kn_gstore_failed(s), "%s", kn_gstore_failed(s));
        kn_gstore_free(s);
    }
}

/* Reference UTF-8 validity of one whole character b[n]. */
static bool utf8_valid_char(const uint8_t *b, int n) {
    uint32_t cp;
    if (n == 1) return b[0] < 0x80;
    if (n == 2) {
        if ((b[0] & 0xE0) != 0xC0 || (b[1] & 0xC0) != 0x80) return false;
        cp = (uint32_t)(b[0] & 0x1F) << 6 | (b[1] & 0x3F);
        return cp >= 0x80;
    }
    if (n == 3) {
        if ((b[0] & 0xF0) != 0xE0 || (b[1] & 0xC0) != 0x80 || (b[2] & 0xC0) != 0x80) return false;
        cp = (uint32_t)(b[0] & 0x0F) << 12 | (uint32_t)(b[1] & 0x3F) << 6 | (b[2] & 0x3F);
        return cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if ((b[0] & 0xF8) != 0xF0 || (b[1] & 0xC0) != 0x80 || (b[2] & 0xC0) != 0x80 || (b[3] & 0xC0) != 0x80) return false;
    cp = (uint32_t)(b[0] & 0x07) << 18 | (uint32_t)(b[1] & 0x3F) << 12 | (uint32_t)(b[2] & 0x3F) << 6 | (b[3] & 0x3F);
    return cp >= 0x10000 && cp <= 0x10FFFF;
}

/* '.' accepts exactly the valid UTF-8 characters: every 1-, 2- and 3-byte string, and every 4-byte
 * string with a lead byte F0..F7 and continuation bytes from a set that covers the boundaries. */
static void test_utf8_invalid(void) {
    kiln_grammar *g = compile("root ::= .");
    CHECK(g);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    kiln_grammar_free(g);
    uint8_t b[4];
    for (uint32_t x = 0; x < (1u << 24); x++) {
        b[0] = (uint8_t)(x >> 16), b[1] = (uint8_t)(x >> 8), b[2] = (uint8_t)x;
        if (x < 256) {
            b[0] = (uint8_t)x;
            CHECKF(store_accepts(s, b, 1) == utf8_valid_char(b, 1), "%02X", b[0]);
        }
        if (x < 65536) {
            b[0] = (uint8_t)(x >> 8), b[1] = (uint8_t)x;
            CHECKF(store_accepts(s, b, 2) == utf8_valid_char(b, 2), "%02X %02X", b[0], b[1]);
            b[0] = (uint8_t)(x >> 16), b[1] = (uint8_t)(x >> 8);
        }
        if (b[0] >= 0xE0 && b[0] < 0xF0) /* other leads are refused at the first byte (checked above) */
            CHECKF(store_accepts(s, b, 3) == utf8_valid_char(b, 3), "%02X %02X %02X", b[0], b[1], b[2]);
    }
    static const uint8_t cont[] = {0x00, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF};
    for (int lead = 0xF0; lead <= 0xF7; lead++)
        for (size_t i = 0; i < sizeof cont; i++)
            for (size_t j = 0; j < sizeof cont; j++)
                for (size_t k = 0; k < sizeof cont; k++) {
                    b[0] = (uint8_t)lead, b[1] = cont[i], b[2] = cont[j], b[3] = cont[k];
                    CHECKF(store_accepts(s, b, 4) == utf8_valid_char(b, 4), "%02X %02X %02X %02X", b[0], b[1], b[2],
                           b[3]);
                }
    kn_gstore_free(s);
}

/* A token may end inside a character: the state after its first bytes is alive, not accepting, and
 * only the right continuation bytes follow. */
static void test_partial_characters(void) {
    kiln_grammar *g = compile("root ::= \"é\" [ぁ-ゟ]+ \"\\U0001F600\"?");
    CHECK(g);
    kn_gstore *s;
    CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
    static const uint8_t text[] = {0xC3, 0xA9, 0xE3, 0x81, 0x82, 0xE3, 0x82, 0x9F, 0xF0, 0x9F, 0x98, 0x80};
    static const bool acc_after[] = {false, false, false, false, true, false, false, true, false, false, false, true};
    int32_t st = kn_gstore_start(s);
    for (size_t i = 0; i < sizeof text; i++) {
        CHECK(kn_gstore_step(s, st, 0x41) == KN_GS_DEAD); /* 'A' never continues */
        st = kn_gstore_step(s, st, text[i]);
        CHECKF(st >= 0, "byte %zu", i);
        CHECKF(kn_gstore_accepting(s, st) == acc_after[i], "byte %zu", i);
    }
    CHECK(kn_gstore_final(s, st));
    CHECK(kn_gstore_step(s, kn_gstore_step(s, kn_gstore_start(s), 0xC3), 0xC3) == KN_GS_DEAD);
    CHECK(kiln_grammar_accepts(g, "éあゟ", strlen("éあゟ")));
    CHECK(!kiln_grammar_accepts(g, "é\xe3\x81", 5));
    kn_gstore_free(s);
    kiln_grammar_free(g);
}

/* ---- the corpus ------------------------------------------------------------------------------ */

typedef struct corpus {
    const char *file;
    const char *yes[8], *no[8];
} corpus;

static const corpus k_corpus[] = {
    {"json.gbnf",
     {"{\"a\": [1, 2.5e3, true, null, \"x\\u00e9\"]}", "  [ ]  ", "{}", "-0.5E+12",
      "{\n  \"k\": {\n    \"n\": [\n      1,\n      {}\n    ]\n  }\n}", "\"\\\"quoted\\\" \xe2\x82\xac\"", "false",
      "0"},
     {"{\"a\" 1}", "[1,]", "01", "\"\x01\"", "{\"a\":1}}", "tru", "[                      1]", "1.e5"}},
    {"arithmetic.gbnf",
     {"1 + 2 = 3\n", "x*(y-2) = 4\n(1)=1\n", "-a / -b = 0.5\n", "((((z)))) = 1\n"},
     {"1 + = 3\n", "1 = 1", "x = y\n", "(1 = 1\n", "\n"}},
    {"list.gbnf",
     {"- one\n", "- one\n- two\n", "- caf\xc3\xa9 \xe2\x80\xa6\n"},
     {"", "- one", "-one\n", "- one\n-two\n", "- a\xe2\x80\xa8z\n", "- a\xc2\x85z\n", "- \n"}},
    {"c.gbnf",
     {"int main(int argc) { int x = 1; while (x < 10) { x = x + f(x, 2); } /* done */ return x; }",
      "void f() {}\nfloat g(float a, int b) {\n  // comment\n  if (a >= b) { return a; } else { return -b; }\n}\n", "",
      "char c(){/***/}"},
     {"int f( { }", "int 1f() {}", "int f() { x = ; }", "int f() { /* open }", "intf() {}"}},
    {"chess.gbnf",
     {"1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n4. O-O exd4+", "1. e4", "1. d4 d5\n2. c4 dxc4\n3. e8=Q#\n", "1. O-O-O Nbd7"},
     {"1. e9", "2. e4", "1. e4 e5 e6", "1. Ze4", "1. e4\n\n"}},
    {"japanese.gbnf",
     {"こんにちは　世界、カタカナ", "\xf0\xa0\x80\x8b\xf0\xa0\x80\x8b ひらがな", "ＡＢＣ", "日本語"},
     {"abc", "", "こんにちは  世界", "ひらがな ", "\xf0\xa0\x80"}},
};

static char *read_grammar(const char *file, size_t *len) {
    char path[256];
    snprintf(path, sizeof path, "tests/grammars/%s", file);
    return kt_read_file(path, len);
}

static void test_corpus(void) {
    for (size_t i = 0; i < KN_ARRAY_LEN(k_corpus); i++) {
        size_t len;
        char *text = read_grammar(k_corpus[i].file, &len);
        CHECKF(text, "tests/grammars/%s is missing (run from the repository root)", k_corpus[i].file);
        kiln_grammar *g = NULL;
        kiln_status st = kn_gbnf_compile(text, len, &g);
        free(text);
        CHECKF(st == KILN_OK, "%s: %s", k_corpus[i].file, kn_error_msg());
        for (int k = 0; k < 8 && k_corpus[i].yes[k]; k++)
            CHECKF(accepts(g, k_corpus[i].yes[k]), "%s should accept \"%s\"", k_corpus[i].file, k_corpus[i].yes[k]);
        for (int k = 0; k < 8 && k_corpus[i].no[k]; k++)
            CHECKF(!accepts(g, k_corpus[i].no[k]), "%s should reject \"%s\"", k_corpus[i].file, k_corpus[i].no[k]);
        kiln_grammar_free(g);
    }
}

/* ---- mutations ------------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* After a random walk of up to n bytes over bytes that continue the language, checks the store's
 * promises: a live state either accepts or can go on; final means accepting with no way on. */
static bool walk_ok(const kiln_grammar *g, uint64_t *rng, int n) {
    kn_gstore *s;
    if (kn_gstore_new(g, 0, &s)) return false;
    int32_t st = kn_gstore_start(s);
    bool ok = st >= 0;
    for (int i = 0; ok && i < n; i++) {
        int32_t next[256];
        int m = 0;
        uint8_t opts[256];
        for (int b = 0; b < 256; b++)
            if ((next[b] = kn_gstore_step(s, st, (uint8_t)b)) >= 0) opts[m++] = (uint8_t)b;
        if (kn_gstore_failed(s)) break; /* a pathological grammar: refused, not a broken promise */
        if (kn_gstore_final(s, st) != (kn_gstore_accepting(s, st) && m == 0)) ok = false;
        if (!m) {
            ok = ok && kn_gstore_accepting(s, st);
            break;
        }
        st = next[opts[rng_next(rng) % (uint64_t)m]];
    }
    kn_gstore_free(s);
    return ok;
}

/* Thousands of mutated corpus grammars compile or fail with a placed message; those that compile
 * run and keep the store's promises. */
static void test_mutations(void) {
    static const char *const bits[] = {"(",    ")",         "|",       "*",    "+",   "?",  "{2,1}", "{3}",  "{0,}",
                                       "\"",   "[",         "]",       "\\",   "::=", "\n", "root",  "x",    "[^",
                                       "-",    " ",         "#",       "\\u",  "{",   "}",  ".",     "\\x4", "\xc3",
                                       "\xa9", "root ::= ", "x ::= x", "\"\"", "()",  "<",  "\r\n"};
    char *texts[KN_ARRAY_LEN(k_corpus)];
    size_t lens[KN_ARRAY_LEN(k_corpus)];
    for (size_t i = 0; i < KN_ARRAY_LEN(k_corpus); i++) {
        texts[i] = read_grammar(k_corpus[i].file, &lens[i]);
        CHECK(texts[i]);
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    char *buf = malloc(1 << 16);
    CHECK(buf);
    int compiled = 0, failed = 0;
    for (int it = 0; it < 3000; it++) {
        size_t which = rng_next(&rng) % KN_ARRAY_LEN(k_corpus), n = lens[which];
        memcpy(buf, texts[which], n);
        int muts = 1 + (int)(rng_next(&rng) % 4);
        for (int m = 0; m < muts; m++) {
            size_t at = n ? rng_next(&rng) % n : 0, k = 1 + rng_next(&rng) % 8;
            switch (rng_next(&rng) % 4) {
                case 0: /* delete a span */
                    if (at + k > n) k = n - at;
                    memmove(buf + at, buf + at + k, n - at - k);
                    n -= k;
                    break;
                case 1: { /* insert a piece of syntax */
                    const char *b = bits[rng_next(&rng) % KN_ARRAY_LEN(bits)];
                    size_t bl = strlen(b);
                    if (n + bl >= (1 << 16)) break;
                    memmove(buf + at + bl, buf + at, n - at);
                    memcpy(buf + at, b, bl);
                    n += bl;
                    break;
                }
                case 2: /* duplicate a span */
                    if (at + k > n) k = n - at;
                    if (n + k >= (1 << 16)) break;
                    memmove(buf + at + k, buf + at, n - at);
                    n += k;
                    break;
                default: /* any byte */
                    if (n) buf[at] = (char)rng_next(&rng);
            }
        }
        kiln_grammar *g = NULL;
        kiln_status st = kn_gbnf_compile(buf, n, &g);
        if (st) {
            CHECKF(st == KILN_ERR_INVALID_ARG && !g, "iteration %d: status %d", it, (int)st);
            CHECKF(strncmp(kn_error_msg(), "line ", 5) == 0, "iteration %d: %s", it, kn_error_msg());
            failed++;
            continue;
        }
        compiled++;
        CHECK(kiln_grammar_gbnf(g)[n] == 0 && memcmp(kiln_grammar_gbnf(g), buf, n) == 0);
        for (size_t k = 0; k < KN_ARRAY_LEN(k_corpus); k++)
            for (int y = 0; y < 8 && k_corpus[k].yes[y]; y++) accepts(g, k_corpus[k].yes[y]);
        bool ok = walk_ok(g, &rng, 64);
        kiln_grammar_free(g);
        CHECKF(ok, "iteration %d: the store broke a promise on:\n%.*s", it, (int)n, buf);
    }
    for (size_t i = 0; i < KN_ARRAY_LEN(k_corpus); i++) free(texts[i]);
    free(buf);
    CHECKF(compiled > 100 && failed > 100, "compiled %d, failed %d", compiled, failed);
}

/* ---- left factoring and the ambiguity check -------------------------------------------------- */

/* A grammar object around the program of text compiled with kn_gbnf_parse_ex flags. */
static kiln_grammar *wrap(const char *text, size_t len, unsigned flags) {
    kiln_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    if (kn_gbnf_parse_ex(text, len, flags, &g->prog)) {
        printf("  compile failed: %s\n", kn_error_msg());
        free(g);
        return NULL;
    }
    atomic_init(&g->refs, 1);
    return g;
}

/* Random walks over the bytes either grammar lets continue: at every step both must let the same
 * bytes continue and agree on accepting, so they have the same live prefixes and the same
 * sentences along the walks. Returns the steps taken (-1 at the first disagreement, printed). */
static int same_language_walks(const kiln_grammar *a, const kiln_grammar *b, uint64_t *rng, int walks, int n) {
    kn_gstore *sa, *sb;
    if (kn_gstore_new(a, 0, &sa)) return -1;
    if (kn_gstore_new(b, 0, &sb)) return kn_gstore_free(sa), -1;
    int steps = 0;
    for (int w = 0; w < walks && steps >= 0; w++) {
        int32_t x = kn_gstore_start(sa), y = kn_gstore_start(sb);
        for (int i = 0; i < n && steps >= 0; i++) {
            if (x < 0 || y < 0 || kn_gstore_accepting(sa, x) != kn_gstore_accepting(sb, y)) {
                printf("  walk %d, byte %d: states %d / %d, accepting %d / %d\n", w, i, x, y,
                       kn_gstore_accepting(sa, x), kn_gstore_accepting(sb, y));
                steps = -1;
                break;
            }
            int32_t nx[256], ny[256];
            uint8_t opts[256];
            int m = 0;
            for (int c = 0; c < 256; c++) {
                nx[c] = kn_gstore_step(sa, x, (uint8_t)c);
                ny[c] = kn_gstore_step(sb, y, (uint8_t)c);
                if ((nx[c] >= 0) != (ny[c] >= 0)) {
                    printf("  walk %d, byte %d: 0x%02x continues in only one (%d / %d)\n", w, i, c, nx[c], ny[c]);
                    steps = -1;
                    break;
                }
                if (nx[c] >= 0) opts[m++] = (uint8_t)c;
            }
            if (steps < 0 || !m) break;
            int c = opts[rng_next(rng) % (uint64_t)m];
            x = nx[c], y = ny[c];
            steps++;
        }
    }
    if (kn_gstore_failed(sa) || kn_gstore_failed(sb)) steps = -1;
    kn_gstore_free(sa);
    kn_gstore_free(sb);
    return steps;
}

/* The factored program (the default) and the program as written accept the same language: on
 * the corpus grammars (their texts in and out of the language, and random walks). */
static void test_factoring_corpus(void) {
    uint64_t rng = 12345;
    for (size_t i = 0; i < KN_ARRAY_LEN(k_corpus); i++) {
        size_t len;
        char *text = read_grammar(k_corpus[i].file, &len);
        CHECK(text);
        kiln_grammar *f = wrap(text, len, 0), *u = wrap(text, len, KN_GBNF_NO_FACTOR | KN_GBNF_NO_CHECK);
        free(text);
        CHECK(f && u);
        for (int k = 0; k < 8 && k_corpus[i].yes[k]; k++) CHECK(accepts(f, k_corpus[i].yes[k]));
        for (int k = 0; k < 8 && k_corpus[i].no[k]; k++) CHECK(!accepts(f, k_corpus[i].no[k]));
        int steps = same_language_walks(f, u, &rng, 20, 80);
        CHECKF(steps > 100, "%s: %d steps", k_corpus[i].file, steps);
        kiln_grammar_free(f);
        kiln_grammar_free(u);
    }
}

/* A random literal over a small alphabet (with a two-byte character), 0..maxlen characters. */
static size_t random_literal(uint64_t *rng, char *out, int maxlen) {
    static const char *const alpha[] = {"a", "b", "c", "\xc3\xa9"};
    int n = (int)(rng_next(rng) % (uint64_t)(maxlen + 1));
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *c = alpha[rng_next(rng) % 4];
        memcpy(out + k, c, strlen(c));
        k += strlen(c);
    }
    out[k] = 0;
    return k;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool in_set(char **set, size_t n, const char *s) { return bsearch(&s, set, n, sizeof *set, cmp_str) != NULL; }

/* Random enum grammars (sets of literals that share prefixes, contain one another and the empty
 * string) in several settings: the factored program agrees with the unfactored one on random
 * walks, with the set itself (brute force) on every literal and near misses, and its states hold
 * at most one stack per next byte. */
static void test_factoring_random_enums(void) {
    uint64_t rng = 0xfeedface;
    static const char *const forms[] = {
        "root ::= e\n",
        "root ::= \"<\" e \">\" | \"<\" e \"]\"\n",
        "root ::= (\"[\" e \"]\")* \"!\"\n",
        "root ::= x \"1\" | x \"2\" | x e | y\nx ::= \"ab\" | \"a\" | \"\\xe9\"\ny ::= \"a\"+ \"z\"\n",
        "root ::= e \",\" e\n",
    };
    char *text = malloc(1 << 16), lit[64];
    char **set = malloc(400 * sizeof *set);
    CHECK(text && set);
    for (int it = 0; it < 60; it++) {
        int form = it % (int)KN_ARRAY_LEN(forms);
        size_t n = 1 + rng_next(&rng) % 300, k = (size_t)snprintf(text, 1 << 16, "%se ::= ", forms[form]);
        size_t n_set = 0;
        for (size_t i = 0; i < n; i++) {
            size_t l = random_literal(&rng, lit, 6);
            k += (size_t)snprintf(text + k, (1 << 16) - k, "%s\"%s\"", i ? " | " : "", lit);
            set[n_set] = malloc(l + 1);
            memcpy(set[n_set++], lit, l + 1);
        }
        text[k++] = '\n';
        qsort(set, n_set, sizeof *set, cmp_str);
        kiln_grammar *f = wrap(text, k, 0), *u = wrap(text, k, KN_GBNF_NO_FACTOR | KN_GBNF_NO_CHECK);
        CHECK(f && u);
        int steps = same_language_walks(f, u, &rng, 10, 40);
        CHECKF(steps > 0, "form %d, %zu literals: %d steps\n%.*s", form, n, steps, (int)k, text);
        if (form == 0) {
            for (size_t i = 0; i < n_set; i++) {
                CHECKF(accepts(f, set[i]), "rejects \"%s\"", set[i]);
                size_t l = strlen(set[i]);
                snprintf(lit, sizeof lit, "%sb", set[i]); /* one byte more */
                CHECK(accepts(f, lit) == in_set(set, n_set, lit));
                if (l) { /* one byte fewer, one byte changed */
                    snprintf(lit, sizeof lit, "%.*s", (int)l - 1, set[i]);
                    CHECK(accepts(f, lit) == in_set(set, n_set, lit));
                    snprintf(lit, sizeof lit, "%s", set[i]);
                    lit[l - 1] = lit[l - 1] == 'c' ? 'a' : 'c';
                    CHECK(accepts(f, lit) == in_set(set, n_set, lit));
                }
            }
            /* a walk along each literal: never more stacks than the alphabet's first bytes (4) */
            kn_gstore *s;
            CHECK(kn_gstore_new(f, 0, &s) == KILN_OK);
            int most = 0;
            for (size_t i = 0; i < n_set; i++) {
                int32_t st = kn_gstore_start(s);
                for (size_t j = 0; st >= 0; j++) {
                    most = KN_MAX(most, kn_gstore_n_stacks(s, st));
                    if (!set[i][j]) break;
                    st = kn_gstore_step(s, st, (uint8_t)set[i][j]);
                }
                CHECK(st >= 0 && kn_gstore_accepting(s, st));
            }
            CHECKF(most <= 4, "%d stacks in a state of an enum of %zu literals", most, n_set);
            kn_gstore_free(s);
        }
        kiln_grammar_free(f);
        kiln_grammar_free(u);
        for (size_t i = 0; i < n_set; i++) free(set[i]);
    }
    free(text);
    free(set);
}

/* Literal i of the word enums: one of four prefixes, i in base 7 over "aeioxyz", and an "é" on
 * every third (all distinct). */
static size_t enum_word(int i, char *out) {
    static const char *const pre[] = {"US-", "EUR-", "icon-", ""};
    size_t k = (size_t)sprintf(out, "%s", pre[i % 4]);
    char d[16];
    int n = 0;
    for (int v = i; n == 0 || v; v /= 7) d[n++] = "aeioxyz"[v % 7];
    while (n) out[k++] = d[--n];
    if (i % 3 == 0) k += (size_t)sprintf(out + k, "\xc3\xa9");
    out[k] = 0;
    return k;
}

/* root ::= "0" | "1" | ... | "9999" (10,000 numbers) and 50,000 words: they compile, every literal
 * is accepted and every near miss is judged as the set says; the start state and the state after
 * any byte hold few stacks. */
static void test_big_enums(void) {
    for (int which = 0; which < 2; which++) {
        int n = which ? 50000 : 10000;
        size_t cap = (size_t)n * 24 + 64, k = 0;
        char *text = malloc(cap), w[40];
        char **set = malloc((size_t)n * sizeof *set);
        CHECK(text && set);
        k = (size_t)snprintf(text, cap, "root ::= ");
        for (int i = 0; i < n; i++) {
            size_t l = which ? enum_word(i, w) : (size_t)sprintf(w, "%d", i);
            k += (size_t)snprintf(text + k, cap - k, "%s\"%s\"", i ? " | " : "", w);
            set[i] = malloc(l + 1);
            memcpy(set[i], w, l + 1);
        }
        qsort(set, (size_t)n, sizeof *set, cmp_str);
        kiln_grammar *g = NULL;
        CHECKF(kn_gbnf_compile(text, k, &g) == KILN_OK, "%d literals: %s", n, kn_error_msg());
        int wrong = 0, most = 0;
        kn_gstore *s;
        CHECK(kn_gstore_new(g, 0, &s) == KILN_OK);
        for (int i = 0; i < n; i++) {
            if (!accepts(g, set[i])) wrong++;
            size_t l = strlen(set[i]);
            char miss[3][48];
            snprintf(miss[0], 48, "%sa", set[i]);
            snprintf(miss[1], 48, "%.*s", (int)l - 1, set[i]);
            snprintf(miss[2], 48, "%s", set[i]);
            miss[2][0] = miss[2][0] == '9' ? 'x' : '9';
            for (int m = 0; m < 3; m++) {
                int32_t st = kn_gstore_start(s);
                for (const char *c = miss[m]; *c && st >= 0; c++) {
                    most = KN_MAX(most, kn_gstore_n_stacks(s, st));
                    st = kn_gstore_step(s, st, (uint8_t)*c);
                }
                if ((st >= 0 && kn_gstore_accepting(s, st)) != in_set(set, (size_t)n, miss[m])) wrong++;
            }
        }
        CHECK(!kn_gstore_failed(s));
        kn_gstore_free(s);
        CHECKF(wrong == 0, "%d literals: %d wrong answers", n, wrong);
        CHECKF(most <= 12, "%d literals: a state with %d stacks", n, most);
        kiln_grammar_free(g);
        for (int i = 0; i < n; i++) free(set[i]);
        free(set);
        free(text);
    }
}

/* A grammar too ambiguous for the matcher is refused when it compiles, naming where: at its start
 * (many nullable repetitions in a row, or many alternatives that each begin with their own
 * repetition), or after a few bytes; the limit itself compiles. */
static void test_ambiguity_refused(void) {
    kiln_grammar *g = NULL;
    const char *t = "root ::= (\"a\"?){5000}";
    CHECK(kn_gbnf_compile(t, strlen(t), &g) == KILN_ERR_INVALID_ARG && !g);
    CHECKF(strstr(kn_error_msg(), "line 1, column 1: the grammar is too ambiguous: its start state would hold more "
                                  "than 4096 parser stacks"),
           "%s", kn_error_msg());
    t = "# nullable\n\nroot ::= \"x\" (\"a\"?){5000}";
    CHECK(kn_gbnf_compile(t, strlen(t), &g) == KILN_ERR_INVALID_ARG && !g);
    CHECKF(strstr(kn_error_msg(), "line 3, column 1: the grammar is too ambiguous: after the text \"x\" its state"),
           "%s", kn_error_msg());
    size_t cap = 5000 * 24 + 64;
    char *text = malloc(cap);
    CHECK(text);
    int k = snprintf(text, cap, "root ::= ");
    for (int i = 0; i < 5000; i++) k += snprintf(text + k, cap - (size_t)k, "%s\"a\"* \"b%d\"", i ? " | " : "", i);
    CHECK(kn_gbnf_compile(text, (size_t)k, &g) == KILN_ERR_INVALID_ARG && !g);
    CHECKF(strstr(kn_error_msg(), "too ambiguous: its start state"), "%s", kn_error_msg());
    /* the same through kiln_grammar_compile: KILN_ERR_INVALID_ARG, what a server answers 400 to */
    CHECK(kiln_grammar_compile(text, (size_t)k, NULL, &g) == KILN_ERR_INVALID_ARG && !g);
    CHECK(strstr(kiln_last_error(), "too ambiguous"));
    free(text);
    t = "root ::= (\"a\"?){4096}";
    CHECK((g = compile(t)));
    CHECK(accepts(g, "") && accepts(g, "aaaa") && !accepts(g, "b"));
    kiln_grammar_free(g);
}

/* Program elements of grammar text g (-1 when it does not compile). */
static int32_t program_size(const char *g) {
    kn_gprog p;
    if (kn_gbnf_parse(g, strlen(g), &p) != KILN_OK) return -1;
    const int32_t n = p.n_elem;
    kn_gprog_free(&p);
    return n;
}

/* A multi-byte class written again is compiled once (one helper rule that every copy calls): 20
 * copies of a class of Greek, Cyrillic and kana cost about one copy and 20 calls; the language is
 * unchanged, a class and its negation stay apart, and so do classes one range apart. */
static void test_shared_classes(void) {
    static const char cls[] = "[a-z\u00e9\u0391-\u03A9\u0410-\u044F\u3041-\u3096]";
    char one[256], many[4096];
    snprintf(one, sizeof one, "root ::= %s", cls);
    size_t n = (size_t)snprintf(many, sizeof many, "root ::= %s", cls);
    for (int i = 1; i < 20; i++) n += (size_t)snprintf(many + n, sizeof many - n, " (\"-\" | %s)", cls);
    const int32_t p1 = program_size(one), p20 = program_size(many);
    CHECKF(p1 > 20 && p20 > 0 && p20 < p1 + 19 * 8, "one copy %d elements, twenty %d", p1, p20);
    kiln_grammar *g = compile(many);
    CHECK(g);
    char text[128];
    size_t k = 0, last = 0;
    for (int i = 0; i < 20; i++) {
        last = k;
        k += (size_t)snprintf(text + k, sizeof text - k, "%s",
                              i % 3 == 0   ? "\u0416"
                              : i % 3 == 1 ? "\xce\xa9"
                                           : "\xe3\x81\x82");
    }
    CHECK(g && kiln_grammar_accepts(g, text, k));
    text[last] = '-'; /* the last character replaced by the alternative "-" */
    CHECK(g && kiln_grammar_accepts(g, text, last + 1));
    CHECK(g && !kiln_grammar_accepts(g, "\u0416", 2)); /* 19 characters short */
    kiln_grammar_free(g);
    g = compile("root ::= [^a-z\u00e9] [a-z\u00e9] [^a-z\u00e9]");
    CHECK(g && accepts(g, "\xc3\xb1\xc3\xa9\xc3\xb1") && !accepts(g, "\xc3\xa9\xc3\xb1\xc3\xa9") && !accepts(g, "xyx"));
    kiln_grammar_free(g);
    g = compile("root ::= [\u0430-\u044F] [\u0430-\u044E] [\u0430-\u044F]");
    CHECK(g && accepts(g, "\xd1\x8f\xd1\x8e\xd1\x8f") && !accepts(g, "\xd1\x8f\xd1\x8f\xd1\x8f"));
    kiln_grammar_free(g);
}

int main(void) {
    RUN(test_literals);
    RUN(test_repetition);
    RUN(test_counters);
    RUN(test_refcount);
    RUN(test_errors);
    RUN(test_limits);
    RUN(test_syntax);
    RUN(test_utf8_classes);
    RUN(test_utf8_invalid);
    RUN(test_partial_characters);
    RUN(test_corpus);
    RUN(test_mutations);
    RUN(test_fail_closed);
    RUN(test_factoring_corpus);
    RUN(test_factoring_random_enums);
    RUN(test_big_enums);
    RUN(test_ambiguity_refused);
    RUN(test_shared_classes);
    return kt_summary();
}
