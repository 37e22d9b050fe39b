/*
 * schema.c - placeholder until the JSON Schema converter lands: every schema is refused (fail closed).
 */
#include "sample/schema.h"

kiln_status kn_schema_to_gbnf(const char *json, size_t len, bool strict, char **gbnf) {
    (void)json;
    (void)len;
    (void)strict;
    *gbnf = NULL;
    return kn_error(KILN_ERR_UNSUPPORTED, "JSON Schema constraints are not supported yet");
}

const char *kn_json_object_gbnf(void) { return "root ::= \"{}\"\n"; }
