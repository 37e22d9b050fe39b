/*
 * schema_regex_dfa.c - the subset construction: a pattern's NFA (schema_regex.c) made a deterministic
 * automaton over code point ranges.
 *
 * A DFA state is the epsilon closure of a set of NFA states (the ^ and $ assertions hold only at the
 * start and end of the whole string). Its successors are found by cutting the code points at the ends
 * of its states' classes: the intervals held by the same set of classes lead to the same state, so each
 * distinct set is followed once. The construction is bounded in its states and transitions
 * (KN_DFA_MAX_STATES, KN_DFA_MAX_TRANS), its steps (KN_DFA_MAX_WORK) and the NFA states its states
 * hold in all (KN_DFA_MAX_HELD), so that no pattern costs more than a fraction of a second; the result
 * is trimmed and minimized (schema_dfa_min.c).
 */
#include "sample/schema_internal.h"

#include <stdlib.h>
#include <string.h>

/* Marks over n items that all clear in O(1): item i is marked when v[i] == gen. */
typedef struct stamps {
    uint32_t *v;
    uint32_t gen;
    size_t n;
} stamps;

static bool stamps_init(stamps *m, size_t n) {
    m->v = calloc(n ? n : 1, sizeof *m->v);
    m->gen = 0;
    m->n = n;
    return m->v != NULL;
}

/* Clears every mark. */
static void stamps_clear(stamps *m) {
    if (++m->gen == 0) {
        memset(m->v, 0, m->n * sizeof *m->v);
        m->gen = 1;
    }
}

/* Sorts v[0..n) of values in [0, KN_REGEX_MAX_NFA) ascending; scratch has room for n ints. A radix
 * sort, a byte a pass: the subset construction sorts every set it reaches, thousands of positions
 * each in the costliest patterns, where qsort's comparisons were most of the time. */
_Static_assert(KN_REGEX_MAX_NFA <= 1 << 16, "sort_states sorts values of two bytes");
static void sort_states(int *v, int n, int *scratch) {
    if (n < 32) {
        for (int i = 1; i < n; i++) {
            int x = v[i], j = i;
            for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        return;
    }
    int *src = v, *dst = scratch;
    for (int shift = 0; shift < 16; shift += 8) { /* KN_REGEX_MAX_NFA < 2^16: two passes */
        int count[257] = {0};
        for (int i = 0; i < n; i++) count[((src[i] >> shift) & 255) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int i = 0; i < n; i++) dst[count[(src[i] >> shift) & 255]++] = src[i];
        int *t = src;
        src = dst;
        dst = t;
    }
    /* an even number of passes leaves the result in v */
}

/* Epsilon closure of set[0..*n) in place (set has room for a->n ints; mk has a->n items), sorted
 * when scratch (room for a->n ints) is given. */
static void closure(const kn_nfa *a, int *set, int *n, stamps *mk, int *scratch, bool bol, bool eol) {
    stamps_clear(mk);
    for (int i = 0; i < *n; i++) mk->v[set[i]] = mk->gen;
    for (int i = 0; i < *n; i++) {
        const kn_nstate *s = &a->s[set[i]];
        for (int k = 0; k < s->n; k++) {
            const kn_nedge *e = &s->e[k];
            bool follow = e->kind == KN_NE_EPS || (e->kind == KN_NE_BOL && bol) || (e->kind == KN_NE_EOL && eol);
            if (follow && mk->v[e->to] != mk->gen) {
                mk->v[e->to] = mk->gen;
                set[(*n)++] = e->to;
            }
        }
    }
    if (scratch) sort_states(set, *n, scratch);
}

/* ---- the intervals a state's classes cut -------------------------------------------------------- */

/* The code point intervals that the ranges of a list of classes cut, each with its signature (the
 * classes holding it), kept for the last PART_MEMO lists: the states of a counted class
 * ([\p{L}\p{M}' -]{0,39}: 40 states) leave by the same classes, whose thousands of ranges were sorted
 * and walked again in every state. */
#define PART_MEMO 8
typedef struct cpart {
    int *cls, nc;                  /* the classes (set indices), ascending: the key; NULL: an empty slot */
    uint32_t *lo, *hi;             /* [n_iv]: the intervals some class holds, ascending */
    int *sig, n_iv;                /* [n_iv]: the signature of each interval */
    int *sig_cls, *sig_off, n_sig; /* signature k holds the classes sig_cls[sig_off[k] .. sig_off[k + 1]) */
} cpart;

static void part_free(cpart *p) {
    free(p->cls);
    free(p->lo);
    free(p->hi);
    free(p->sig);
    free(p->sig_cls);
    free(p->sig_off);
    *p = (cpart){0};
}

/* Fills the empty p with the intervals that classes cls[0..nc) (ascending, nc > 0) of a cut; false when
 * memory runs out, or when *work (the subset construction's steps: a step per class per interval)
 * passes KN_DFA_MAX_WORK or the signatures would hold more than KN_DFA_MAX_HELD classes in all
 * (*too_complex); p is then to be freed. */
static bool part_build(const kn_nfa *a, cpart *p, const int *cls, int nc, size_t *work, bool *too_complex) {
    size_t nb = 0;
    for (int j = 0; j < nc; j++) nb += 2 * (size_t)a->sets[cls[j]].n;
    uint64_t *bounds = malloc((nb + 1) * sizeof *bounds), *tmp = malloc((nb + 1) * sizeof *tmp);
    int *cursor = calloc((size_t)nc, sizeof *cursor), *hits = malloc((size_t)nc * sizeof *hits);
    kn_imap sigs = {0};
    size_t cap_cls = (size_t)nc, n_cls = 0;
    p->cls = malloc((size_t)nc * sizeof *p->cls);
    p->lo = malloc((nb + 1) * sizeof *p->lo);
    p->hi = malloc((nb + 1) * sizeof *p->hi);
    p->sig = malloc((nb + 1) * sizeof *p->sig);
    p->sig_off = malloc((nb + 2) * sizeof *p->sig_off);
    p->sig_cls = malloc(cap_cls * sizeof *p->sig_cls);
    bool ok = bounds && tmp && cursor && hits && p->cls && p->lo && p->hi && p->sig && p->sig_off && p->sig_cls;
    if (!ok) goto done;
    memcpy(p->cls, cls, (size_t)nc * sizeof *cls);
    p->nc = nc;
    nb = 0;
    for (int j = 0; j < nc; j++) {
        const kn_cset *c = &a->sets[cls[j]];
        for (int r = 0; r < c->n; r++) {
            bounds[nb++] = c->r[r].lo;
            bounds[nb++] = (uint64_t)c->r[r].hi + 1;
        }
    }
    kn_sort_u64(bounds, nb, tmp);
    size_t u = 0;
    for (size_t i = 0; i < nb; i++)
        if (!u || bounds[u - 1] != bounds[i]) bounds[u++] = bounds[i];
    p->sig_off[0] = 0;
    for (size_t b = 0; b + 1 < u; b++) {
        const uint32_t lo = (uint32_t)bounds[b], hi = (uint32_t)bounds[b + 1] - 1;
        if ((*work += (size_t)nc) > KN_DFA_MAX_WORK || n_cls > KN_DFA_MAX_HELD) {
            *too_complex = true;
            ok = false;
            goto done;
        }
        /* the classes holding this interval: each class's ranges are sorted and the intervals come
         * in order, so a cursor per class walks its ranges once */
        int nh = 0;
        for (int j = 0; j < nc; j++) {
            const kn_cset *c = &a->sets[cls[j]];
            while (cursor[j] < c->n && c->r[cursor[j]].hi < lo) cursor[j]++;
            if (cursor[j] < c->n && c->r[cursor[j]].lo <= lo) hits[nh++] = cls[j];
        }
        if (!nh) continue;
        int k = kn_imap_get(&sigs, hits, nh);
        if (k < 0) {
            if (n_cls + (size_t)nh > cap_cls) {
                while (n_cls + (size_t)nh > cap_cls) cap_cls *= 2;
                int *g = realloc(p->sig_cls, cap_cls * sizeof *g);
                if (!g) {
                    ok = false;
                    goto done;
                }
                p->sig_cls = g;
            }
            k = p->n_sig;
            if (!kn_imap_put(&sigs, hits, nh, k)) {
                ok = false;
                goto done;
            }
            memcpy(p->sig_cls + n_cls, hits, (size_t)nh * sizeof *hits);
            n_cls += (size_t)nh;
            p->sig_off[++p->n_sig] = (int)n_cls;
        }
        p->lo[p->n_iv] = lo;
        p->hi[p->n_iv] = hi;
        p->sig[p->n_iv++] = k;
    }
done:
    free(bounds);
    free(tmp);
    free(cursor);
    free(hits);
    kn_imap_free(&sigs);
    return ok;
}

/* The partition of parts[PART_MEMO] keyed by cls[0..nc) (ascending), built into the slot *next names
 * when absent; NULL when part_build fails. */
static const cpart *part_get(const kn_nfa *a, cpart *parts, int *next, const int *cls, int nc, size_t *work,
                             bool *too_complex) {
    for (int q = 0; q < PART_MEMO; q++)
        if (parts[q].cls && parts[q].nc == nc && !memcmp(parts[q].cls, cls, (size_t)nc * sizeof *cls)) return &parts[q];
    cpart *p = &parts[*next];
    *next = (*next + 1) % PART_MEMO;
    part_free(p);
    if (!part_build(a, p, cls, nc, work, too_complex)) {
        part_free(p);
        return NULL;
    }
    return p;
}

/* Sorts the ints v[0..n) (>= 0) ascending; w has room for 2n values. */
static void sort_ints(int *v, int n, uint64_t *w) {
    for (int i = 0; i < n; i++) w[i] = (uint64_t)v[i];
    kn_sort_u64(w, (size_t)n, w + n);
    for (int i = 0; i < n; i++) v[i] = (int)w[i];
}

/* The contract is in schema_internal.h. A state's successors are found once per signature of the
 * intervals its classes cut (every interval held by the same classes leads to the same state). */
kn_dfa *kn_nfa_subset(const kn_nfa *a, int start, int final, bool *too_complex) {
    kn_dfa *d = calloc(1, sizeof *d);
    int *set = malloc((size_t)a->n * sizeof *set), *tmp = malloc((size_t)a->n * sizeof *tmp);
    const size_t nsets = (size_t)(a->nsets ? a->nsets : 1);
    int *classes = malloc(nsets * sizeof *classes);      /* the distinct classes leaving the current state */
    uint64_t *csort = malloc(2 * nsets * sizeof *csort); /* sort_ints' room */
    int *to = NULL;                                      /* [n_sig]: the state each signature leads to, -1: none */
    int cap_to = 0;
    cpart parts[PART_MEMO] = {{0}};
    int next_part = 0;
    stamps mark = {0}, seen = {0}, hit = {0}; /* over NFA states; over sets twice */
    kn_imap map = {0};
    const int **sets = NULL; /* sets[i]: the NFA set of DFA state i (len first; map's keys but the start's) */
    int *start_set = NULL;
    int capsets = 0;
    bool ok = d && set && tmp && classes && csort && stamps_init(&mark, (size_t)a->n) &&
              stamps_init(&seen, (size_t)a->nsets) && stamps_init(&hit, (size_t)a->nsets);
    if (!ok) goto done;
    /* the start state: ^ may hold here only */
    int n = 1;
    set[0] = start;
    closure(a, set, &n, &mark, tmp, true, false);
    {
        /* register the start state (^ holds there only). It stays out of the map: a later state of the
         * same NFA set is another state, since its acceptance is decided without ^ ("$^" accepts the
         * empty string only) */
        int m = n;
        memcpy(tmp, set, (size_t)n * sizeof *set);
        closure(a, tmp, &m, &mark, NULL, true, true);
        bool acc = false;
        for (int i = 0; i < m; i++) acc |= tmp[i] == final;
        capsets = 64;
        sets = malloc((size_t)capsets * sizeof *sets);
        start_set = malloc((size_t)(n + 1) * sizeof *start_set);
        if (!sets || !start_set || kn_dfa_add_state(d, acc) != 0) {
            ok = false;
            goto done;
        }
        start_set[0] = n;
        memcpy(start_set + 1, set, (size_t)n * sizeof *set);
        sets[0] = start_set;
    }
    /* worklist: states are processed in id order */
    size_t work = 0, held = (size_t)n; /* NFA states visited so far; held by the DFA's states */
    for (int cur = 0; cur < d->n; cur++) {
        int cn = sets[cur][0];
        const int *cs = sets[cur] + 1;
        int nc = 0;
        stamps_clear(&seen);
        for (int i = 0; i < cn; i++) {
            const kn_nstate *s = &a->s[cs[i]];
            for (int k = 0; k < s->n; k++)
                if (s->e[k].kind == KN_NE_SET && seen.v[s->e[k].set] != seen.gen) {
                    seen.v[s->e[k].set] = seen.gen;
                    classes[nc++] = s->e[k].set;
                }
        }
        if (!nc) continue;
        sort_ints(classes, nc, csort);
        const cpart *p = part_get(a, parts, &next_part, classes, nc, &work, too_complex);
        if (!p) {
            ok = false;
            goto done;
        }
        if (p->n_sig > cap_to) {
            int *nt = realloc(to, (size_t)p->n_sig * sizeof *nt);
            if (!nt) {
                ok = false;
                goto done;
            }
            to = nt;
            cap_to = p->n_sig;
        }
        /* the state each signature leads to, in the order the intervals first name them (so states
         * are numbered as the intervals reach them) */
        for (int k = 0; k < p->n_sig; k++) {
            to[k] = -1;
            stamps_clear(&hit);
            for (int i = p->sig_off[k]; i < p->sig_off[k + 1]; i++) hit.v[p->sig_cls[i]] = hit.gen;
            int m = 0;
            stamps_clear(&mark);
            for (int i = 0; i < cn; i++) {
                const kn_nstate *s = &a->s[cs[i]];
                for (int e = 0; e < s->n; e++) {
                    const kn_nedge *ed = &s->e[e];
                    if (ed->kind == KN_NE_SET && hit.v[ed->set] == hit.gen && mark.v[ed->to] != mark.gen) {
                        mark.v[ed->to] = mark.gen;
                        set[m++] = ed->to;
                    }
                }
            }
            if (!m) continue;
            closure(a, set, &m, &mark, tmp, false, false);
            if ((work += (size_t)cn + (size_t)m) > KN_DFA_MAX_WORK) {
                *too_complex = true;
                ok = false;
                goto done;
            }
            int id = kn_imap_get(&map, set, m);
            if (id < 0) {
                if ((held += (size_t)m) > KN_DFA_MAX_HELD) {
                    *too_complex = true;
                    ok = false;
                    goto done;
                }
                int mm = m;
                memcpy(tmp, set, (size_t)m * sizeof *set);
                closure(a, tmp, &mm, &mark, NULL, false, true);
                bool acc = false;
                for (int i = 0; i < mm; i++) acc |= tmp[i] == final;
                id = kn_dfa_add_state(d, acc);
                if (id < 0) {
                    ok = false;
                    goto done;
                }
                if (id >= capsets) {
                    int nc2 = capsets * 2;
                    const int **ns = realloc(sets, (size_t)nc2 * sizeof *ns);
                    if (!ns) {
                        ok = false;
                        goto done;
                    }
                    sets = ns;
                    capsets = nc2;
                }
                if (!(sets[id] = kn_imap_put(&map, set, m, id))) {
                    ok = false;
                    goto done;
                }
            }
            to[k] = id;
        }
        for (int i = 0; i < p->n_iv; i++)
            if (to[p->sig[i]] >= 0 && !kn_dfa_add_tr(d, cur, p->lo[i], p->hi[i], to[p->sig[i]])) {
                ok = false;
                goto done;
            }
    }
done:
    free(sets);
    free(start_set);
    kn_imap_free(&map);
    free(set);
    free(tmp);
    free(classes);
    free(csort);
    free(to);
    for (int q = 0; q < PART_MEMO; q++) part_free(&parts[q]);
    free(mark.v);
    free(seen.v);
    free(hit.v);
    if (!ok) {
        kn_dfa_free(d);
        return NULL;
    }
    return kn_dfa_trim_min(d);
}
