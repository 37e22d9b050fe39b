/*
 * grammar.c - placeholder until the GBNF compiler lands: every grammar is refused (fail closed).
 */
#include "sample/grammar.h"

kiln_status kn_gbnf_compile(const char *text, size_t len, kiln_grammar **out) {
    (void)text;
    (void)len;
    *out = NULL;
    return kn_error(KILN_ERR_UNSUPPORTED, "grammars are not supported yet");
}

void kn_grammar_retain(const kiln_grammar *g) { (void)g; }
void kiln_grammar_free(kiln_grammar *g) { (void)g; }
const char *kiln_grammar_gbnf(const kiln_grammar *g) {
    (void)g;
    return "";
}
bool kiln_grammar_accepts(const kiln_grammar *g, const char *text, size_t len) {
    (void)g;
    (void)text;
    (void)len;
    return false;
}
