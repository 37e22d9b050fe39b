/*
 * schema_dfa_len.c - a string automaton with a length range, without their product: the guards of
 * a counted string (schema_dfa_emit.c writes them as GBNF counter operations, grammar_prog.h).
 *
 * A string of min..max characters whose content is in an automaton's language is the automaton's
 * walk with a count of the characters so far. Entering state q with count k may go on exactly when
 * some accepted completion from q has a length L with min <= k + L <= max. The set of such k is
 * computed per state from the lengths of q's completions up to max (a bit per length: states times
 * max+1 bits, filled backwards from the accepting states, one pass per length over the edges).
 * When that set is an interval [lo, hi] for every state, a guard "count in [lo, hi]" on each entry
 * is exact, and every stack the matcher keeps can still be completed (its invariant). With no
 * minimum it always is one ([0, max - the shortest completion]); with a minimum a gap in q's
 * completion lengths wider than max - min could split it, and the caller then takes the product.
 */
#include "sample/schema_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Past this much work ((distinct edges + states) times max + 1: the lengths' passes, then one window
 * per state), the caller takes the product instead. A uri with maxLength 2083 is about 10^6; the
 * bound keeps a hostile schema's string at a few milliseconds and half a megabyte of bits. */
#define LEN_MAX_WORK 4000000L

/* The distinct targets of state q's transitions into t[] (at most q's transition count); their count. */
static int targets(const kn_dstate *q, int *t) {
    int n = 0;
    for (int i = 0; i < q->ntr; i++) {
        int k = 0;
        while (k < n && t[k] != q->tr[i].to) k++;
        if (k == n) t[n++] = q->tr[i].to;
    }
    return n;
}

kn_len_guards kn_dfa_len_guards(const kn_dfa *d, long min, long max, int *lo, int *hi) {
    if (max < 0 || min > max || d->n <= 0) return KN_LEN_NO;
    /* the distinct edges (q -> t), as reversed adjacency: pred[poff[t] .. poff[t+1]) */
    int most = 0;
    for (int q = 0; q < d->n; q++) most = d->s[q].ntr > most ? d->s[q].ntr : most;
    int *tg = malloc(((size_t)most + 1) * sizeof *tg);
    if (!tg) return KN_LEN_NOMEM;
    size_t ne = 0;
    for (int q = 0; q < d->n; q++) ne += (size_t)targets(&d->s[q], tg);
    if ((long)(ne + (size_t)d->n) > LEN_MAX_WORK / (max + 1)) return free(tg), KN_LEN_NO;
    int *poff = calloc((size_t)d->n + 1, sizeof *poff), *pred = malloc((ne ? ne : 1) * sizeof *pred);
    const size_t words = (size_t)max / 64 + 1, sw = (size_t)d->n / 64 + 1;
    uint64_t *reach = calloc((size_t)d->n * words, sizeof *reach); /* bit L of state q: a completion of length L */
    uint64_t *cur = calloc(sw, sizeof *cur), *nxt = malloc(sw * sizeof *nxt);
    kn_len_guards r = KN_LEN_NOMEM;
    if (!poff || !pred || !reach || !cur || !nxt) goto done;
    for (int q = 0; q < d->n; q++)
        for (int i = 0, n = targets(&d->s[q], tg); i < n; i++) poff[tg[i] + 1]++;
    for (int t = 0; t < d->n; t++) poff[t + 1] += poff[t];
    for (int q = 0; q < d->n; q++) /* (poff[t] is advanced while filling, then shifted back) */
        for (int i = 0, n = targets(&d->s[q], tg); i < n; i++) pred[poff[tg[i]]++] = q;
    for (int t = d->n; t > 0; t--) poff[t] = poff[t - 1];
    poff[0] = 0;
    /* lengths: cur = the states with a completion of length L */
    for (int q = 0; q < d->n; q++)
        if (d->s[q].acc) cur[q / 64] |= 1ull << (q % 64), reach[(size_t)q * words] |= 1;
    for (long L = 1; L <= max; L++) {
        memset(nxt, 0, sw * sizeof *nxt);
        bool any = false;
        for (int t = 0; t < d->n; t++) {
            if (!(cur[t / 64] >> (t % 64) & 1)) continue;
            for (int k = poff[t]; k < poff[t + 1]; k++) {
                int q = pred[k];
                nxt[q / 64] |= 1ull << (q % 64);
                reach[(size_t)q * words + (size_t)L / 64] |= 1ull << (L % 64);
                any = true;
            }
        }
        if (!any) break;
        uint64_t *sw_ = cur;
        cur = nxt, nxt = sw_;
    }
    /* per state: the counts k in [0, max] with a completion length in [min - k, max - k], found
     * with k going down from max: the window's right end grows by one each step, its left end
     * (min - k, once positive) too */
    r = KN_LEN_OK;
    for (int q = 0; q < d->n && r == KN_LEN_OK; q++) {
        const uint64_t *bits = reach + (size_t)q * words;
#define BIT(L) ((int)(bits[(L) / 64] >> ((L) % 64) & 1))
        long a = 0, b = -1, inside = 0;             /* the window [a, b] of lengths, and its set bits */
        int first = -1, last = -1;                  /* the allowed counts found, going down */
        for (long k = max; k >= (q ? 1 : 0); k--) { /* only the start is entered with count 0 */
            for (; b < max - k; b++) inside += BIT(b + 1);
            for (; a < min - k; a++) inside -= BIT(a);
            if (!inside) continue;
            if (last >= 0 && last != k + 1) r = KN_LEN_NO; /* a gap: not one interval */
            if (first < 0) first = (int)k;
            last = (int)k;
        }
#undef BIT
        lo[q] = first < 0 ? 1 : last;
        hi[q] = first < 0 ? 0 : first;
    }
    if (r == KN_LEN_OK && lo[0] > 0) r = KN_LEN_EMPTY; /* the start cannot be completed */
done:
    free(tg), free(poff), free(pred), free(reach), free(cur), free(nxt);
    return r;
}
