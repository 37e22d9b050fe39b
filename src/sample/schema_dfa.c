/*
 * schema_dfa.c - deterministic automata over code points (kn_dfa, schema_internal.h): building them
 * (states and transitions under KN_DFA_MAX_STATES and KN_DFA_MAX_TRANS), trimming and minimizing them
 * (with schema_dfa_min.c's classes), and the operations every string constraint of a schema combines
 * with: literal sets, length ranges, intersection and complement. kn_dfa_regex (schema_regex.c) makes
 * them from patterns; schema_dfa_emit.c writes them out as GBNF.
 */
#include "sample/schema_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- int-sequence maps ----------------------------------------------------------------------- */

static uint64_t ihash(const int *k, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)k[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

void kn_sort_u64(uint64_t *v, size_t n, uint64_t *tmp) {
    if (n < 64) {
        for (size_t i = 1; i < n; i++) {
            uint64_t x = v[i];
            size_t j = i;
            for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        return;
    }
    uint64_t any = 0, all = ~(uint64_t)0;
    for (size_t i = 0; i < n; i++) any |= v[i], all &= v[i];
    const uint64_t varies = any ^ all; /* the bits not the same in every value */
    uint64_t *src = v, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        if (!(varies >> shift & 255)) continue;
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++) count[(src[i] >> shift & 255) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++) dst[count[src[i] >> shift & 255]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != v) memcpy(v, src, n * sizeof *v);
}

void kn_imap_free(kn_imap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys ? m->keys[i] : NULL);
    free(m->keys);
    free(m->vals);
}

int kn_imap_get(const kn_imap *m, const int *k, int n) {
    if (!m->cap) return -1;
    for (size_t i = ihash(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        int *e = m->keys[i];
        if (!e) return -1;
        if (e[0] == n && !memcmp(e + 1, k, (size_t)n * sizeof *k)) return m->vals[i];
    }
}

/* Maps k[0..n) to v (k not already there); returns the map's own copy of the key (its length first,
 * then the ints, kept until kn_imap_free), NULL when out of memory. */
const int *kn_imap_put(kn_imap *m, const int *k, int n, int v) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        int **nk = calloc(nc, sizeof *nk);
        int *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return NULL;
        }
        for (size_t i = 0; i < m->cap; i++) {
            int *e = m->keys[i];
            if (!e) continue;
            size_t j = ihash(e + 1, e[0]) & (nc - 1);
            while (nk[j]) j = (j + 1) & (nc - 1);
            nk[j] = e;
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
    }
    int *e = malloc((size_t)(n + 1) * sizeof *e);
    if (!e) return NULL;
    e[0] = n;
    memcpy(e + 1, k, (size_t)n * sizeof *k);
    size_t j = ihash(k, n) & (m->cap - 1);
    while (m->keys[j]) j = (j + 1) & (m->cap - 1);
    m->keys[j] = e;
    m->vals[j] = v;
    m->n++;
    return e;
}

/* ---- code points --------------------------------------------------------------------------- */

uint32_t kn_cp_next(const char *text, size_t len, size_t *pos) {
    const unsigned char *s = (const unsigned char *)text + *pos;
    size_t left = len - *pos;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if ((size_t)n > left) n = 1;
    if (n > 1) {
        c &= 0x3F >> (n - 1);
        for (int i = 1; i < n; i++) c = (c << 6) | (s[i] & 0x3F);
    }
    *pos += (size_t)n;
    return c;
}

/* ---- DFA building blocks --------------------------------------------------------------------- */

void kn_dfa_free(kn_dfa *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) free(d->s[i].tr);
    free(d->s);
    free(d);
}

/* Set when kn_dfa_add_state or kn_dfa_add_tr refuses past KN_DFA_MAX_STATES or KN_DFA_MAX_TRANS;
 * cleared as each operation of kn_dfa_toobig's list, and kn_dfa_regex's subset construction, starts. */
static _Thread_local bool tl_toobig;

bool kn_dfa_toobig(void) { return tl_toobig; }

void kn_dfa_toobig_clear(void) { tl_toobig = false; }

int kn_dfa_add_state(kn_dfa *d, bool acc) {
    if (d->n >= KN_DFA_MAX_STATES) {
        tl_toobig = true;
        return -1;
    }
    if (d->n == d->cap) {
        int nc = d->cap ? d->cap * 2 : 16;
        kn_dstate *s = realloc(d->s, (size_t)nc * sizeof *s);
        if (!s) return -1;
        d->s = s;
        d->cap = nc;
    }
    d->s[d->n] = (kn_dstate){.acc = acc};
    return d->n++;
}

bool kn_dfa_add_tr(kn_dfa *d, int st, uint32_t lo, uint32_t hi, int to) {
    kn_dstate *s = &d->s[st];
    if (s->ntr && s->tr[s->ntr - 1].to == to && s->tr[s->ntr - 1].hi + 1 == lo) {
        s->tr[s->ntr - 1].hi = hi;
        return true;
    }
    if (d->ntr >= KN_DFA_MAX_TRANS) {
        tl_toobig = true;
        return false;
    }
    if (s->ntr == s->cap) {
        int nc = s->cap ? s->cap * 2 : 4;
        kn_dtrans *t = realloc(s->tr, (size_t)nc * sizeof *t);
        if (!t) return false;
        s->tr = t;
        s->cap = nc;
    }
    s->tr[s->ntr++] = (kn_dtrans){lo, hi, to};
    d->ntr++;
    return true;
}

int kn_dfa_next(const kn_dfa *d, int st, uint32_t c) {
    const kn_dstate *s = &d->s[st];
    int lo = 0, hi = s->ntr - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < s->tr[mid].lo) hi = mid - 1;
        else if (c > s->tr[mid].hi) lo = mid + 1;
        else return s->tr[mid].to;
    }
    return -1;
}

/* ---- DFA operations -------------------------------------------------------------------------- */

/* live[i] = state i of d can reach an accepting state (live has d->n entries): a search backwards
 * from the accepting states over the reversed transitions, linear in states plus transitions (a
 * fixpoint over the states took a round per state of a chain such as [a-z]{3000}). False when out
 * of memory. */
static bool co_reachable(const kn_dfa *d, bool *live) {
    const int n = d->n;
    size_t nt = 0;
    for (int i = 0; i < n; i++) nt += (size_t)d->s[i].ntr;
    int *first = calloc((size_t)n + 1, sizeof *first); /* reversed edges into i: from[first[i] .. first[i+1]) */
    int *from = malloc((nt + 1) * sizeof *from), *stack = malloc(((size_t)n + 1) * sizeof *stack);
    const bool ok = first && from && stack;
    if (ok) {
        for (int i = 0; i < n; i++)
            for (int k = 0; k < d->s[i].ntr; k++) first[d->s[i].tr[k].to + 1]++;
        for (int i = 0; i < n; i++) first[i + 1] += first[i];
        int *fill = stack; /* the next free slot of each state's run, borrowed before the search */
        memcpy(fill, first, (size_t)n * sizeof *fill);
        for (int i = 0; i < n; i++)
            for (int k = 0; k < d->s[i].ntr; k++) from[fill[d->s[i].tr[k].to]++] = i;
        int top = 0;
        for (int i = 0; i < n; i++)
            if ((live[i] = d->s[i].acc)) stack[top++] = i;
        while (top) {
            const int t = stack[--top];
            for (int e = first[t]; e < first[t + 1]; e++)
                if (!live[from[e]]) live[from[e]] = true, stack[top++] = from[e];
        }
    }
    free(first);
    free(from);
    free(stack);
    return ok;
}

/* Removes states that are unreachable or cannot reach acceptance, then merges equivalent states
 * (kn_dfa_classes). The start stays state 0; an empty language leaves one non-accepting state. Takes d. */
kn_dfa *kn_dfa_trim_min(kn_dfa *d) {
    if (!d) return NULL;
    int n = d->n;
    bool *live = calloc((size_t)n + 1, sizeof *live);
    int *cls = malloc(((size_t)n + 1) * sizeof *cls);
    kn_dfa *out = calloc(1, sizeof *out);
    int nclasses = -1;
    bool ok = live && cls && out && co_reachable(d, live) && (nclasses = kn_dfa_classes(d, live, cls)) >= 0;
    if (!ok) goto done;
    /* build: class of the start first */
    int *order = calloc((size_t)nclasses + 1, sizeof *order);
    int *rep = malloc(((size_t)nclasses + 1) * sizeof *rep);
    if (!order || !rep) {
        free(order);
        free(rep);
        ok = false;
        goto done;
    }
    for (int c = 0; c < nclasses; c++) order[c] = -1, rep[c] = -1;
    if (!live[0]) {
        ok = kn_dfa_add_state(out, false) == 0;
        free(order);
        free(rep);
        goto done;
    }
    int nn = 0;
    /* BFS from the start to number classes in reach order */
    int *queue = malloc(((size_t)nclasses + 1) * sizeof *queue);
    if (!queue) {
        free(order);
        free(rep);
        ok = false;
        goto done;
    }
    int qh = 0, qt = 0;
    order[cls[0]] = nn++;
    rep[cls[0]] = 0;
    queue[qt++] = 0;
    while (qh < qt) {
        int i = queue[qh++];
        for (int k = 0; k < d->s[i].ntr; k++) {
            int t = d->s[i].tr[k].to;
            if (!live[t] || order[cls[t]] >= 0) continue;
            order[cls[t]] = nn++;
            rep[cls[t]] = t;
            queue[qt++] = t;
        }
    }
    for (int c = 0; c < nn && ok; c++) ok = kn_dfa_add_state(out, false) >= 0;
    for (int c = 0; c < nclasses && ok; c++) {
        if (order[c] < 0) continue;
        int i = rep[c], o = order[c];
        out->s[o].acc = d->s[i].acc;
        for (int k = 0; k < d->s[i].ntr && ok; k++) {
            const kn_dtrans *t = &d->s[i].tr[k];
            if (!live[t->to]) continue;
            ok = kn_dfa_add_tr(out, o, t->lo, t->hi, order[cls[t->to]]);
        }
    }
    free(queue);
    free(order);
    free(rep);
done:
    free(live);
    free(cls);
    kn_dfa_free(d);
    if (!ok) {
        kn_dfa_free(out);
        return NULL;
    }
    return out;
}

kn_dfa *kn_dfa_literals(const char *const *s, const size_t *len, int n) {
    tl_toobig = false;
    kn_dfa *d = calloc(1, sizeof *d);
    if (!d || kn_dfa_add_state(d, false) < 0) goto fail;
    for (int i = 0; i < n; i++) {
        size_t pos = 0;
        int st = 0;
        while (pos < len[i]) {
            uint32_t c = kn_cp_next(s[i], len[i], &pos);
            int to = kn_dfa_next(d, st, c);
            if (to < 0) {
                to = kn_dfa_add_state(d, false);
                if (to < 0) goto fail;
                /* insert in order */
                kn_dstate *ds = &d->s[st];
                if (!kn_dfa_add_tr(d, st, c, c, to)) goto fail;
                ds = &d->s[st];
                for (int k = ds->ntr - 1; k > 0 && ds->tr[k].lo < ds->tr[k - 1].lo; k--) {
                    kn_dtrans t = ds->tr[k];
                    ds->tr[k] = ds->tr[k - 1];
                    ds->tr[k - 1] = t;
                }
            }
            st = to;
        }
        d->s[st].acc = true;
    }
    return kn_dfa_trim_min(d);
fail:
    kn_dfa_free(d);
    return NULL;
}

kn_dfa *kn_dfa_length(long min, long max) {
    long k = max >= 0 ? max : min;
    if ((tl_toobig = k >= KN_DFA_MAX_STATES) || min < 0) return NULL;
    kn_dfa *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    for (long i = 0; i <= k; i++)
        if (kn_dfa_add_state(d, i >= min) < 0) goto fail;
    for (long i = 0; i <= k; i++) {
        int to = i < k ? (int)i + 1 : (max < 0 ? (int)k : -1);
        if (to < 0) continue;
        if (!kn_dfa_add_tr(d, (int)i, 0, KN_CP_MAX, to)) goto fail;
    }
    return kn_dfa_trim_min(d);
fail:
    kn_dfa_free(d);
    return NULL;
}

kn_dfa *kn_dfa_and(const kn_dfa *a, const kn_dfa *b) {
    tl_toobig = false;
    kn_dfa *d = calloc(1, sizeof *d);
    kn_imap map = {0};
    int *pairs = NULL; /* pairs[2i], pairs[2i+1]: the states of a and b of product state i */
    int cappairs = 0;
    if (!d) return NULL;
    int key[2] = {0, 0};
    if (kn_dfa_add_state(d, a->s[0].acc && b->s[0].acc) < 0 || !kn_imap_put(&map, key, 2, 0)) goto fail;
    cappairs = 64;
    pairs = malloc((size_t)cappairs * 2 * sizeof *pairs);
    if (!pairs) goto fail;
    pairs[0] = pairs[1] = 0;
    for (int cur = 0; cur < d->n; cur++) {
        const kn_dstate *x = &a->s[pairs[2 * cur]], *y = &b->s[pairs[2 * cur + 1]];
        int i = 0, j = 0;
        while (i < x->ntr && j < y->ntr) {
            const kn_dtrans *p = &x->tr[i], *q = &y->tr[j];
            uint32_t lo = p->lo > q->lo ? p->lo : q->lo, hi = p->hi < q->hi ? p->hi : q->hi;
            if (lo <= hi) {
                key[0] = p->to;
                key[1] = q->to;
                int id = kn_imap_get(&map, key, 2);
                if (id < 0) {
                    id = kn_dfa_add_state(d, a->s[p->to].acc && b->s[q->to].acc);
                    if (id < 0 || !kn_imap_put(&map, key, 2, id)) goto fail;
                    if (id >= cappairs) {
                        int nc = cappairs * 2;
                        int *np = realloc(pairs, (size_t)nc * 2 * sizeof *np);
                        if (!np) goto fail;
                        pairs = np;
                        cappairs = nc;
                    }
                    pairs[2 * id] = p->to;
                    pairs[2 * id + 1] = q->to;
                    /* d->s may have moved: refresh x and y do not depend on d */
                }
                if (!kn_dfa_add_tr(d, cur, lo, hi, id)) goto fail;
            }
            if (p->hi < q->hi) i++;
            else j++;
        }
    }
    kn_imap_free(&map);
    free(pairs);
    return kn_dfa_trim_min(d);
fail:
    kn_imap_free(&map);
    free(pairs);
    kn_dfa_free(d);
    return NULL;
}

kn_dfa *kn_dfa_not(const kn_dfa *a) {
    tl_toobig = false;
    kn_dfa *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    for (int i = 0; i <= a->n; i++)
        if (kn_dfa_add_state(d, i == a->n ? true : !a->s[i].acc) < 0) goto fail;
    int dead = a->n;
    for (int i = 0; i < a->n; i++) {
        uint32_t next = 0;
        for (int k = 0; k < a->s[i].ntr; k++) {
            const kn_dtrans *t = &a->s[i].tr[k];
            if (t->lo > next && !kn_dfa_add_tr(d, i, next, t->lo - 1, dead)) goto fail;
            if (!kn_dfa_add_tr(d, i, t->lo, t->hi, t->to)) goto fail;
            next = t->hi + 1;
        }
        if (next <= KN_CP_MAX && !kn_dfa_add_tr(d, i, next, KN_CP_MAX, dead)) goto fail;
    }
    if (!kn_dfa_add_tr(d, dead, 0, KN_CP_MAX, dead)) goto fail;
    return kn_dfa_trim_min(d);
fail:
    kn_dfa_free(d);
    return NULL;
}

bool kn_dfa_is_empty(const kn_dfa *d) { return d->n == 1 && !d->s[0].acc && d->s[0].ntr == 0; }

bool kn_dfa_is_all(const kn_dfa *d) {
    /* minimized: "all strings" is one accepting state looping on every code point */
    return d->n == 1 && d->s[0].acc && d->s[0].ntr == 1 && d->s[0].tr[0].lo == 0 && d->s[0].tr[0].hi == KN_CP_MAX;
}

bool kn_dfa_match(const kn_dfa *d, const char *s, size_t n) {
    size_t pos = 0;
    int st = 0;
    while (pos < n && st >= 0) st = kn_dfa_next(d, st, kn_cp_next(s, n, &pos));
    return st >= 0 && d->s[st].acc;
}
