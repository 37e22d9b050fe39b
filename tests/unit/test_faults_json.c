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

/* The grammar text make gives for arg (a new string in *text), KILN_ERR_NOMEM or another status. */
typedef kiln_status (*maker)(const char *arg, char **text);

static kiln_status schema_gbnf(const char *schema, char **text) {
    return kn_schema_to_gbnf(schema, strlen(schema), false, text);
}

/* Runs make(arg) with jansson exhausted from each allocation after the parse of input (flags) on:
 * each must give the reference text or KILN_ERR_NOMEM with no text, and some must run out. */
static void run_exhausted(const char *name, maker make, const char *arg, const char *input, size_t flags) {
    char *want = NULL, *got = NULL;
    CHECK(make(arg, &want) == KILN_OK);
    const long parse = parse_calls(input, flags);
    j_calls = 0;
    CHECK(make(arg, &got) == KILN_OK && !strcmp(got, want));
    free(got);
    const long total = j_calls;
    CHECK(total > parse);
    long refused = 0, same = 0;
    for (long n = parse + 1; n <= total; n++) {
        j_calls = 0;
        j_fail_from = n;
        got = NULL;
        const kiln_status st = make(arg, &got);
        j_fail_from = 0;
        if (st == KILN_ERR_NOMEM && !got) {
            refused++;
            continue;
        }
        const bool ok = st == KILN_OK && !strcmp(got, want);
        if (!ok) printf("  %s, from allocation %ld: status %d\n%s\n", name, n, st, got ? got : "");
        free(got);
        CHECK(ok);
        same++;
    }
    printf("# %s: %ld allocations after the parse's %ld: %ld out of memory, %ld the reference\n", name, total - parse,
           parse, refused, same);
    CHECK(refused > 0);
    free(want);
}

static void test_schema_exhausted(void) {
    run_exhausted("schema", schema_gbnf, SCHEMA, SCHEMA, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY);
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

static kiln_status tool_gbnf(const char *format, char **text) {
    kiln_tool_grammar_params p = kiln_tool_grammar_default_params();
    p.format = format;
    p.tools = TOOLS;
    p.choice = KILN_TOOL_CHOICE_REQUIRED;
    kiln_grammar *g = NULL;
    const kiln_status st = kiln_tool_grammar(&p, &g);
    *text = st ? NULL : strdup(kiln_grammar_gbnf(g));
    kiln_grammar_free(g);
    return st || *text ? st : KILN_ERR_NOMEM;
}

static void test_tool_grammar_hermes_exhausted(void) {
    run_exhausted("tool grammar (hermes)", tool_gbnf, "hermes", TOOLS, JSON_REJECT_DUPLICATES);
}
static void test_tool_grammar_xml_exhausted(void) {
    run_exhausted("tool grammar (qwen3-coder)", tool_gbnf, "qwen3-coder", TOOLS, JSON_REJECT_DUPLICATES);
}

int main(void) {
    kiln_set_log(NULL, NULL, KILN_LOG_ERROR);
    json_set_alloc_funcs(j_malloc, free); /* before the library's first use: its allocator stands on this */
    RUN(test_schema_exhausted);
    RUN(test_tool_grammar_hermes_exhausted);
    RUN(test_tool_grammar_xml_exhausted);
    return kt_summary();
}
