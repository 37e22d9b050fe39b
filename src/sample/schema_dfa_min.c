/*
 * schema_dfa_min.c - the equivalence classes of an automaton's states: Hopcroft's partition
 * refinement over code point ranges, the step that minimizes every string automaton of a schema.
 *
 * The states that can reach acceptance start in two blocks (accepting, not); the others, and every
 * missing transition, form the implicit dead block, which never splits and is never a splitter. A
 * splitter block B divides every block X by the signature of each state of X towards B: the merged
 * code point ranges on which it moves into B (the empty signature for states with no transition
 * into B). A divided X keeps its largest part and the others go on the work list, so each state is
 * in a splitter O(log n) times and the whole costs O(m log n log m) for m transitions, a chain of
 * 6000 states included (Moore's refinement took a round per state of a chain: quadratic).
 */
#include "sample/schema_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A state with a transition into the splitter, and its signature towards it. */
typedef struct touch {
    int q, blk;     /* the state and its block before the split */
    const int *sig; /* lo, hi pairs of the merged ranges into the splitter */
    int len;        /* ints in sig */
} touch;

static bool sig_eq(const touch *a, const touch *b) {
    return a->len == b->len && !memcmp(a->sig, b->sig, (size_t)a->len * sizeof *a->sig);
}

/* Orders by block, then signature (length, then ints): a block's states of one signature adjoin. */
static int touch_cmp(const void *pa, const void *pb) {
    const touch *a = pa, *b = pb;
    if (a->blk != b->blk) return a->blk < b->blk ? -1 : 1;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return memcmp(a->sig, b->sig, (size_t)a->len * sizeof *a->sig);
}

int kn_dfa_classes(const kn_dfa *d, const bool *live, int *cls) {
    const int n = d->n;
    size_t m = 0; /* transitions between live states */
    for (int i = 0; i < n; i++)
        for (int k = 0; live[i] && k < d->s[i].ntr; k++) m += live[d->s[i].tr[k].to];
    int *first = calloc((size_t)n + 1, sizeof *first); /* reversed edges into t: rin[first[t] .. first[t+1]) */
    uint64_t *rin = malloc((m + 1) * sizeof *rin);     /* (source << 32) | transition index */
    uint64_t *pre = malloc((m + 1) * sizeof *pre);     /* the reversed edges into one splitter */
    uint64_t *pre_tmp = malloc((m + 1) * sizeof *pre_tmp);
    int *sig = malloc((2 * m + 1) * sizeof *sig);
    touch *tl = malloc(((size_t)n + 1) * sizeof *tl);
    int *elems = malloc(((size_t)n + 1) * sizeof *elems); /* the states, block by block */
    int *loc = malloc(((size_t)n + 1) * sizeof *loc);     /* loc[q]: q's index in elems */
    int *bfirst = malloc(((size_t)n + 2) * sizeof *bfirst), *bend = malloc(((size_t)n + 2) * sizeof *bend);
    int *work = malloc(((size_t)n + 2) * sizeof *work); /* the splitters to come */
    int *cut = malloc(((size_t)n + 3) * sizeof *cut);   /* where the parts of a divided block start */
    int nb = -1;
    if (!first || !rin || !pre || !pre_tmp || !sig || !tl || !elems || !loc || !bfirst || !bend || !work || !cut)
        goto done;
    for (int i = 0; i < n; i++)
        for (int k = 0; live[i] && k < d->s[i].ntr; k++)
            if (live[d->s[i].tr[k].to]) first[d->s[i].tr[k].to + 1]++;
    for (int i = 0; i < n; i++) first[i + 1] += first[i];
    memcpy(loc, first, (size_t)n * sizeof *loc); /* the next free slot of each run, before loc's use */
    for (int i = 0; i < n; i++)
        for (int k = 0; live[i] && k < d->s[i].ntr; k++)
            if (live[d->s[i].tr[k].to]) rin[loc[d->s[i].tr[k].to]++] = (uint64_t)i << 32 | (uint32_t)k;
    nb = 0;
    int nw = 0, pos = 0;
    for (int acc = 1; acc >= 0; acc--) {
        const int start = pos;
        for (int i = 0; i < n; i++) {
            if (!live[i]) cls[i] = -1;
            else if (d->s[i].acc == (acc == 1)) elems[pos] = i, loc[i] = pos++, cls[i] = nb;
        }
        if (pos > start) bfirst[nb] = start, bend[nb] = pos, work[nw++] = nb++;
    }
    while (nw) {
        const int B = work[--nw];
        size_t np = 0;
        for (int p = bfirst[B]; p < bend[B]; p++)
            for (int e = first[elems[p]]; e < first[elems[p] + 1]; e++) pre[np++] = rin[e];
        kn_sort_u64(pre, np, pre_tmp); /* by source, then transition: ranges in order */
        int nt = 0, ns = 0;
        for (size_t a = 0; a < np;) {
            const int q = (int)(pre[a] >> 32), off = ns;
            for (; a < np && (int)(pre[a] >> 32) == q; a++) {
                const kn_dtrans *t = &d->s[q].tr[(uint32_t)pre[a]];
                if (ns > off && (uint32_t)sig[ns - 1] + 1 == t->lo) sig[ns - 1] = (int)t->hi;
                else sig[ns++] = (int)t->lo, sig[ns++] = (int)t->hi;
            }
            tl[nt++] = (touch){q, cls[q], sig + off, ns - off};
        }
        qsort(tl, (size_t)nt, sizeof *tl, touch_cmp);
        for (int a = 0, b; a < nt; a = b) {
            const int X = tl[a].blk;
            for (b = a; b < nt && tl[b].blk == X;) b++;
            const int cnt = b - a, f0 = bfirst[X], size = bend[X] - f0;
            /* the parts: each signature's run of the touched states, then the untouched rest */
            int nparts = 0;
            for (int s = a, e; s < b; s = e) {
                for (e = s + 1; e < b && sig_eq(&tl[s], &tl[e]);) e++;
                cut[nparts++] = f0 + (s - a);
            }
            if (cnt < size) cut[nparts++] = f0 + cnt;
            cut[nparts] = f0 + size;
            if (nparts == 1) continue;
            for (int i = 0; i < cnt; i++) { /* the touched states to the front, signature by signature */
                const int q = tl[a + i].q, p = f0 + i, o = elems[p];
                elems[loc[q]] = o, loc[o] = loc[q];
                elems[p] = q, loc[q] = p;
            }
            int keep = 0; /* X keeps its largest part; the others are new blocks and splitters */
            for (int i = 1; i < nparts; i++)
                if (cut[i + 1] - cut[i] > cut[keep + 1] - cut[keep]) keep = i;
            for (int i = 0; i < nparts; i++) {
                if (i == keep) {
                    bfirst[X] = cut[i], bend[X] = cut[i + 1];
                    continue;
                }
                bfirst[nb] = cut[i], bend[nb] = cut[i + 1];
                for (int p = cut[i]; p < cut[i + 1]; p++) cls[elems[p]] = nb;
                work[nw++] = nb++;
            }
        }
    }
done:
    free(first);
    free(rin);
    free(pre);
    free(pre_tmp);
    free(sig);
    free(tl);
    free(elems);
    free(loc);
    free(bfirst);
    free(bend);
    free(work);
    free(cut);
    return nb;
}
