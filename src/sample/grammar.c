/*
 * grammar.c - the compiled grammar object: kn_gbnf_compile wraps the program the GBNF compiler
 * builds (gbnf.c) with the source text and an atomic reference count, so one compiled grammar is
 * shared read-only by every generation that uses it; kiln_grammar_accepts runs a temporary state
 * store (gstore.c) over a whole text.
 */
#include "sample/grammar_prog.h"

#include <stdlib.h>
#include <string.h>

kiln_status kn_gbnf_compile(const char *text, size_t len, kiln_grammar **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    /* the text is kept and printed as a C string (kiln_grammar_gbnf): a NUL byte, even in a
     * comment, would cut it short */
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (nul) {
        size_t line = 1, col = 1;
        for (const char *p = text; p < nul; p++) col = *p == '\n' ? (line++, 1) : col + 1;
        return kn_error(KILN_ERR_INVALID_ARG, "line %zu, column %zu: a NUL byte", line, col);
    }
    kiln_grammar *g = kn_calloc(1, sizeof *g);
    if (!g) return KILN_ERR_NOMEM;
    kiln_status st = kn_gbnf_parse(text, len, &g->prog);
    if (st) {
        free(g);
        return st;
    }
    g->gbnf = malloc(len + 1);
    if (!g->gbnf) {
        kn_gprog_free(&g->prog);
        free(g);
        return kn_error(KILN_ERR_NOMEM, "out of memory copying the grammar");
    }
    if (len) memcpy(g->gbnf, text, len);
    g->gbnf[len] = 0;
    g->gbnf_len = len;
    atomic_init(&g->refs, 1);
    *out = g;
    return KILN_OK;
}

void kn_grammar_retain(const kiln_grammar *g) {
    if (g) atomic_fetch_add_explicit(&((kiln_grammar *)g)->refs, 1, memory_order_relaxed);
}

void kiln_grammar_free(kiln_grammar *g) {
    if (!g) return;
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
    kn_gprog_free(&g->prog);
    free(g->gbnf);
    free(g);
}

const char *kiln_grammar_gbnf(const kiln_grammar *g) { return g ? g->gbnf : ""; }

/* Runs a store over the text, compacting it whenever it fills (only the current state matters). */
bool kiln_grammar_accepts(const kiln_grammar *g, const char *text, size_t len) {
    if (!g || (!text && len)) return false;
    kn_gstore *s;
    if (kn_gstore_new(g, 0, &s)) return false;
    int32_t st = kn_gstore_start(s);
    for (size_t i = 0; i < len && st != KN_GS_DEAD; i++) {
        st = kn_gstore_step(s, st, (uint8_t)text[i]);
        if (st != KN_GS_DEAD && kn_gstore_full(s)) st = kn_gstore_compact(s, st);
    }
    bool ok = st != KN_GS_DEAD && kn_gstore_accepting(s, st);
    kn_gstore_free(s);
    return ok;
}
