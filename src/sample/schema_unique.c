/*
 * schema_unique.c - uniqueItems over a finite list of values, exactly.
 *
 * A context-free grammar cannot forbid repeats in general, but when an array's items are one of a
 * few listed values (a multi-select: {"items": {"enum": ["red", "green", "blue"]}, "uniqueItems":
 * true}) the arrays without repeats are a finite language: after each item, what may follow depends
 * only on the set of values written so far. One rule per such set S: a comma and a value not in S,
 * then the rule of S plus that value; or the end, once S holds minItems values. The count of written
 * values is |S|, so minItems and maxItems come for free. The rules grow as 2^k for k values: at most
 * MAX_ALTS alternatives in all (9 values without a maxItems, 16 values with maxItems 2), beyond which
 * the caller keeps the array without uniqueness and reports it.
 */
#include "sample/schema_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_VALUES 16   /* a rule name slot per set: 2^16 at most */
#define MAX_ALTS   4096 /* "," value rule alternatives in all */

/* The number of sets of m of k values. */
static double choose(int k, int m) {
    double r = 1;
    for (int i = 1; i <= m; i++) r = r * (k - m + i) / i;
    return r;
}

int ks_emit_unique(ctx *c, const json_t *vals, long lo, long hi, kn_sbuf *b) {
    const int k = (int)json_array_size(vals);
    if (lo > k) return 0;
    if (k == 0) {
        kn_sbuf_puts(b, "\"[\" ws \"]\"");
        return 1;
    }
    const int most = hi < 0 || hi > k ? k : (int)hi; /* values in an array at most (lo <= most) */
    double alts = 0;
    for (int m = 0; m < most; m++) alts += choose(k, m) * (k - m);
    if (k > MAX_VALUES || alts > MAX_ALTS) return -1;
    /* each value's text; a rule per set S of values written that may grow (|S| < most) */
    char **text = calloc((size_t)k, sizeof *text);
    const char **rule = calloc((size_t)1 << k, sizeof *rule);
    kn_sbuf t;
    kn_sbuf_init(&t, KN_SCHEMA_MAX_GBNF);
    bool ok = text && rule;
    for (int i = 0; ok && i < k; i++) {
        t.len = 0;
        ks_value_text(c, &t, json_array_get(vals, (size_t)i));
        ok = t.p && (text[i] = strdup(t.p));
    }
    for (uint32_t s = 1; ok && s < (1u << k); s++)
        if (__builtin_popcount(s) < most) ok = (rule[s] = kn_gout_name(&c->g, "unique")) != NULL;
    /* rule[S] ::= (the end, once S holds lo values) | "," ws value ws rule[S + value] | ... */
    for (uint32_t s = 1; ok && s < (1u << k); s++) {
        if (!rule[s]) continue;
        t.len = 0;
        const char *sep = __builtin_popcount(s) >= lo ? " | " : ""; /* "x ::= | a": an empty first one */
        for (int i = 0; i < k; i++)
            if (!(s >> i & 1)) {
                const char *next = rule[s | 1u << i];
                kn_sbuf_printf(&t, "%s\",\" ws %s ws%s%s", sep, text[i], next ? " " : "", next ? next : "");
                sep = " | ";
            }
        ok = t.p && !t.over && !t.nomem;
        if (ok) kn_gout_rule(&c->g, rule[s], t.p);
    }
    if (ok) {
        kn_sbuf_puts(b, "\"[\" ws (");
        for (int i = 0; i < k; i++)
            kn_sbuf_printf(b, "%s %s ws%s%s", i ? " |" : "", text[i], rule[1u << i] ? " " : "",
                           rule[1u << i] ? rule[1u << i] : "");
        kn_sbuf_printf(b, " )%s \"]\"", lo == 0 ? "?" : "");
    } else {
        ks_nomem(c);
    }
    for (int i = 0; text && i < k; i++) free(text[i]);
    free(text);
    free(rule);
    kn_sbuf_free(&t);
    return ok ? 1 : -1;
}
