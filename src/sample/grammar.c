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
    return kn_gbnf_compile_ex(text, len, 0, out);
}

kiln_status kn_gbnf_compile_ex(const char *text, size_t len, unsigned flags, kiln_grammar **out) {
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
    kiln_status st = kn_gbnf_parse_ex(text, len, flags, &g->prog);
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
    for (size_t i = 0; i < g->n_triggers; i++) free(g->triggers[i]);
    free(g->triggers);
    free(g->gbnf);
    free(g->approx);
    free(g);
}

/* Whether some sentence of g's language begins with text[len]. */
static bool viable_prefix(const kiln_grammar *g, const char *text, size_t len, kiln_status *st) {
    kn_gstore *s;
    if ((*st = kn_gstore_new(g, 0, &s))) return false;
    int32_t state = kn_gstore_start(s);
    for (size_t i = 0; i < len && state != KN_GS_DEAD; i++) state = kn_gstore_step(s, state, (uint8_t)text[i]);
    if (state == KN_GS_DEAD && kn_gstore_failed(s)) *st = kn_gstore_fail_status(s);
    kn_gstore_free(s);
    return state != KN_GS_DEAD;
}

kiln_status kn_grammar_set_triggers(kiln_grammar *g, const char *const *triggers, size_t n) {
    if (!n) return KILN_OK;
    if (!triggers) return kn_error(KILN_ERR_INVALID_ARG, "triggers is NULL with n_triggers %zu", n);
    if (n > KILN_GRAMMAR_MAX_TRIGGERS)
        return kn_error(KILN_ERR_INVALID_ARG, "%zu triggers; at most %d are accepted", n, KILN_GRAMMAR_MAX_TRIGGERS);
    for (size_t i = 0; i < n; i++) {
        const size_t len = triggers[i] ? strlen(triggers[i]) : 0;
        if (len == 0 || len > KILN_GRAMMAR_MAX_TRIGGER_LEN)
            return kn_error(KILN_ERR_INVALID_ARG, "trigger %zu is %s; a trigger has 1 to %d bytes", i,
                            triggers[i] ? "empty or too long" : "NULL", KILN_GRAMMAR_MAX_TRIGGER_LEN);
        kiln_status st = KILN_OK;
        if (!viable_prefix(g, triggers[i], len, &st))
            return st ? kn_error(st, "trigger %zu: the grammar matcher failed", i)
                      : kn_error(KILN_ERR_INVALID_ARG, "trigger %zu (\"%s\") does not begin a sentence of the grammar",
                                 i, triggers[i]);
    }
    if (!(g->triggers = kn_calloc(n, sizeof *g->triggers))) return KILN_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!(g->triggers[g->n_triggers] = strdup(triggers[i])))
            return kn_error(KILN_ERR_NOMEM, "out of memory copying the triggers");
        g->n_triggers++;
        g->trigger_max = KN_MAX(g->trigger_max, strlen(triggers[i]));
    }
    return KILN_OK;
}

size_t kn_grammar_trigger_max(const kiln_grammar *g) { return g ? g->trigger_max : 0; }

bool kn_grammar_find_trigger(const kiln_grammar *g, const char *text, size_t len, size_t *start) {
    bool found = false;
    size_t best_end = 0, best_start = 0;
    for (size_t i = 0; g && i < g->n_triggers; i++) {
        const size_t tl = strlen(g->triggers[i]);
        const char *hit = len >= tl ? memmem(text, len, g->triggers[i], tl) : NULL;
        if (!hit) continue;
        const size_t s = (size_t)(hit - text), e = s + tl;
        if (!found || e < best_end || (e == best_end && s < best_start)) {
            found = true;
            best_end = e;
            best_start = s;
        }
    }
    if (found) *start = best_start;
    return found;
}

const char *kiln_grammar_gbnf(const kiln_grammar *g) { return g ? g->gbnf : ""; }

kiln_status kn_grammar_set_approx(kiln_grammar *g, const char *what) {
    if (!what || !*what) return KILN_OK;
    char *copy = kn_strdup(what);
    if (!copy) return kn_error(KILN_ERR_NOMEM, "out of memory");
    free(g->approx);
    g->approx = copy;
    return KILN_OK;
}

const char *kiln_grammar_approximation(const kiln_grammar *g) { return g ? g->approx : NULL; }

/* Runs a store over the text, compacting it whenever it fills (only the current state matters). */
bool kiln_grammar_accepts(const kiln_grammar *g, const char *text, size_t len) {
    if (!g || (!text && len)) return false;
    size_t from = 0;
    if (g->n_triggers) { /* lazy: free text up to the trigger, a sentence from it on */
        if (!kn_grammar_find_trigger(g, text, len, &from)) return true;
        text += from;
        len -= from;
    }
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
