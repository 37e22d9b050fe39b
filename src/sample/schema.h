/*
 * schema.h - JSON Schema and JSON mode to GBNF.
 *
 * kiln_grammar_compile turns a JSON Schema into GBNF text with kn_schema_to_gbnf and compiles that
 * (grammar.h), so a schema's grammar can be printed (kiln grammar --print-gbnf) and runs through the
 * same matcher as a hand-written one. The JSON the grammars produce allows JSON's whitespace but
 * bounded (a model cannot emit spaces forever) and wide enough for pretty-printed instances.
 */
#ifndef KN_SCHEMA_H
#define KN_SCHEMA_H

#include "base/base.h"

/* Converts the JSON Schema json[len] into GBNF text (*gbnf, malloc'd, NUL-terminated; root rule
 * "root"). strict: additionalProperties defaults to false. Fails closed: KILN_ERR_INVALID_ARG for
 * text that is not JSON or not a schema, a remote $ref, a keyword kiln cannot enforce (neither
 * exactly nor in a documented approximation), a pattern outside the supported regex subset; the
 * kn_error message names the JSON pointer and keyword. */
kiln_status kn_schema_to_gbnf(const char *json, size_t len, bool strict, char **gbnf);

#define KN_SCHEMA_ERRMSG_MAX 400

/* What a conversion did besides succeeding. */
typedef struct kn_schema_info {
    bool approx;                            /* some keyword was enforced approximately */
    char approx_what[KN_SCHEMA_ERRMSG_MAX]; /* the first such: "#/pointer/keyword: how" */
    int rules;                              /* rules written */
} kn_schema_info;

/* kn_schema_to_gbnf, also filling *info (may be NULL). */
kiln_status kn_schema_to_gbnf_info(const char *json, size_t len, bool strict, char **gbnf, kn_schema_info *info);

/* The GBNF of JSON mode: any JSON object (static text). */
const char *kn_json_object_gbnf(void);

#endif
