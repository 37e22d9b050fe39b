/*
 * grammar_api.c - kiln_grammar_compile: one entry point for the three kinds of constraint.
 *
 * A JSON Schema and JSON mode become GBNF text (schema.h) first; every kind then compiles through
 * kn_gbnf_compile, so the grammar a schema runs is exactly the one kiln_grammar_gbnf prints.
 */
#include "sample/grammar.h"
#include "sample/schema.h"

#include <stdlib.h>
#include <string.h>

kiln_grammar_params kiln_grammar_default_params(void) {
    return (kiln_grammar_params){.kind = KILN_GRAMMAR_GBNF, .strict = false, .triggers = NULL, .n_triggers = 0};
}

/* Gives the compiled *out the triggers of p (a lazy grammar); on failure frees it. */
static kiln_status with_triggers(const kiln_grammar_params *p, kiln_grammar **out) {
    kiln_status st = kn_grammar_set_triggers(*out, p->triggers, p->n_triggers);
    if (st) {
        kiln_grammar_free(*out);
        *out = NULL;
    }
    return st;
}

kiln_status kiln_grammar_compile(const char *text, size_t len, const kiln_grammar_params *params, kiln_grammar **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    const kiln_grammar_params p = params ? *params : kiln_grammar_default_params();
    kiln_status st;
    if (p.kind == KILN_GRAMMAR_JSON_OBJECT) {
        const char *g = kn_json_object_gbnf();
        st = kn_gbnf_compile(g, strlen(g), out);
        return st ? st : with_triggers(&p, out);
    }
    if (p.kind != KILN_GRAMMAR_GBNF && p.kind != KILN_GRAMMAR_JSON_SCHEMA)
        return kn_error(KILN_ERR_INVALID_ARG, "unknown grammar kind %d", (int)p.kind);
    if (!text && len) return kn_error(KILN_ERR_INVALID_ARG, "the grammar text is NULL");
    if (len > KILN_GRAMMAR_MAX_TEXT)
        return kn_error(KILN_ERR_INVALID_ARG, "the %s is %zu bytes; at most %u are accepted",
                        p.kind == KILN_GRAMMAR_GBNF ? "grammar" : "schema", len, KILN_GRAMMAR_MAX_TEXT);
    if (p.kind == KILN_GRAMMAR_GBNF) {
        st = kn_gbnf_compile(text ? text : "", len, out);
        return st ? st : with_triggers(&p, out);
    }
    char *gbnf = NULL;
    kn_schema_info info;
    st = kn_schema_to_gbnf_info(text ? text : "", len, p.strict, &gbnf, &info);
    if (st) return st;
    st = kn_gbnf_compile(gbnf, strlen(gbnf), out);
    free(gbnf);
    if (!st && info.approx && (st = kn_grammar_set_approx(*out, info.approx_what))) {
        kiln_grammar_free(*out);
        *out = NULL;
    }
    /* The conversion keeps a schema no finite value satisfies (a required property whose $ref leads
     * back to an enclosing schema); the grammar's own check finds its root matches nothing. */
    if (st == KILN_ERR_INVALID_ARG && strstr(kiln_last_error(), "rule 'root' matches no text"))
        return kn_error(st, "schema #: no finite JSON value satisfies it (each needs another nested inside it, as "
                            "through a required property whose $ref leads back to an enclosing schema)");
    return st ? st : with_triggers(&p, out);
}
