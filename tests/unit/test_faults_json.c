/*
 * test_faults_json.c - jansson out of memory while the library builds values: the JSON Schema
 * compiler and the tool-call grammar, with every jansson allocation from the N-th on failing (memory
 * truly exhausted: the library's allocator gives back its reserve and asks again, and that fails
 * too), for each N after the input's parse (a parse that meets such a failure is the business of
 * src/base/json.c and test_faults_alloc; jansson's lexer must not see one, see json.h).
 *
 * A value that could not be made is left out of the array or object it was built for; where the
 * result goes unchecked the compiler saw a smaller schema (a `required` name, an enum member, an
 * alternative of `not` gone) and wrote a looser grammar. Each N must give the reference grammar or
 * KILN_ERR_NOMEM, never another grammar (kn_json_mark / kn_json_failed_since).
 *
 * This program sets jansson's allocator before the library's first use, so the library's own
 * allocator stands on it (json.c) and its retry fails too.
 */
#include "harness.h"

#include "base/json.h"
#include "kiln.h"
#include "sample/schema.h"

static long j_calls, j_fail_from; /* jansson's allocations counted; the first to fail (0: none) */

static void *j_malloc(size_t n) {
    if (++j_calls >= j_fail_from && j_fail_from > 0) return NULL;
    return malloc(n);
}

/* The allocations jansson makes while parsing text with flags. */
static long parse_calls(const char *text, size_t flags) {
    json_error_t err;
    j_fail_from = 0;
    j_calls = 0;
    json_decref(kn_json_loads(text, flags, &err));
    return j_calls;
}

/* A schema whose compile builds values: allOf merged into one object (required names, enums
 * intersected), dependentRequired, if/then, and `not` rewritten into alternatives. */
static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"enum\":[\"x\",\"y\",\"w\"]},"
    "\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"boolean\"}},\"required\":[\"a\"],"
    "\"allOf\":[{\"required\":[\"b\"]},{\"properties\":{\"a\":{\"enum\":[\"y\",\"w\",\"z\"]}}}],"
    "\"dependentRequired\":{\"c\":[\"b\"]},\"if\":{\"properties\":{\"a\":{\"const\":\"y\"}}},"
    "\"then\":{\"required\":[\"c\"]},\"not\":{\"required\":[\"a\"],\"properties\":{\"a\":{\"const\":\"w\"}}},"
    "\"additionalProperties\":false}";

static void test_schema_exhausted(void) {
    char *want = NULL;
    CHECK(kn_schema_to_gbnf(SCHEMA, strlen(SCHEMA), false, &want) == KILN_OK);
    const long parse = parse_calls(SCHEMA, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY);
    j_calls = 0;
    char *g = NULL;
    CHECK(kn_schema_to_gbnf(SCHEMA, strlen(SCHEMA), false, &g) == KILN_OK && !strcmp(g, want));
    free(g);
    const long total = j_calls;
    CHECK(total > parse);
    long refused = 0, same = 0;
    for (long n = parse + 1; n <= total; n++) {
        j_calls = 0;
        j_fail_from = n;
        g = NULL;
        const kiln_status st = kn_schema_to_gbnf(SCHEMA, strlen(SCHEMA), false, &g);
        j_fail_from = 0;
        if (st == KILN_ERR_NOMEM && !g) {
            refused++;
            continue;
        }
        if (st != KILN_OK || strcmp(g, want)) printf("  from allocation %ld: status %d\n%s\n", n, st, g ? g : "");
        CHECK(st == KILN_OK && !strcmp(g, want));
        free(g);
        same++;
    }
    printf("# schema: %ld allocations after the parse's %ld: %ld out of memory, %ld the reference\n", total - parse,
           parse, refused, same);
    CHECK(refused > 0);
    free(want);
}

/* Tools of a JSON-arguments format (hermes: the parameters' schemas compiled) and of an XML-like one
 * (qwen3-coder: a string parameter's enum as a list of raw choices). */
static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"unit\"],\"$defs\":{\"d\":{\"type\":\"string\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"color\":{\"const\":\"red\"},\"size\":{\"$ref\":\"#/$defs/s\"}},\"required\":[\"color\"],"
    "\"$defs\":{\"s\":{\"enum\":[\"small\",\"large\"]}}}}}]";

static void tool_grammar_exhausted(const char *format) {
    kiln_tool_grammar_params p = kiln_tool_grammar_default_params();
    p.format = format;
    p.tools = TOOLS;
    p.choice = KILN_TOOL_CHOICE_REQUIRED;
    kiln_grammar *g = NULL;
    CHECK(kiln_tool_grammar(&p, &g) == KILN_OK);
    char *want = strdup(kiln_grammar_gbnf(g));
    kiln_grammar_free(g);
    const long parse = parse_calls(TOOLS, JSON_REJECT_DUPLICATES);
    j_calls = 0;
    CHECK(kiln_tool_grammar(&p, &g) == KILN_OK);
    kiln_grammar_free(g);
    const long total = j_calls;
    long refused = 0, same = 0;
    for (long n = parse + 1; n <= total; n++) {
        j_calls = 0;
        j_fail_from = n;
        g = NULL;
        const kiln_status st = kiln_tool_grammar(&p, &g);
        j_fail_from = 0;
        if (st == KILN_ERR_NOMEM && !g) {
            refused++;
            continue;
        }
        const bool ok = st == KILN_OK && !strcmp(kiln_grammar_gbnf(g), want);
        if (!ok) printf("  %s, from allocation %ld: status %d\n%s\n", format, n, st, g ? kiln_grammar_gbnf(g) : "");
        kiln_grammar_free(g);
        CHECK(ok);
        same++;
    }
    printf("# tool grammar (%s): %ld allocations after the parse's %ld: %ld out of memory, %ld the reference\n", format,
           total - parse, parse, refused, same);
    CHECK(refused > 0);
    free(want);
}

static void test_tool_grammar_hermes_exhausted(void) { tool_grammar_exhausted("hermes"); }
static void test_tool_grammar_xml_exhausted(void) { tool_grammar_exhausted("qwen3-coder"); }

int main(void) {
    kiln_set_log(NULL, NULL, KILN_LOG_ERROR);
    json_set_alloc_funcs(j_malloc, free); /* before the library's first use: its allocator stands on this */
    RUN(test_schema_exhausted);
    RUN(test_tool_grammar_hermes_exhausted);
    RUN(test_tool_grammar_xml_exhausted);
    return kt_summary();
}
