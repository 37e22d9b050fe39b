/*
 * gcount.c - which values of a counter a grammar program treats alike (grammar_prog.h), so that a
 * token mask computed at one count serves the others (kn_gstore_canon, gmask.c).
 *
 * A counter's value matters only through the comparisons lo <= v <= hi of its guards. Take the
 * boundaries of the program's guards (0, every lo and every hi + 1) in order: two values between
 * the same two boundaries, each at least D below the next one, compare alike at every guard for
 * the next D increments, whatever they are. D is what a text of n bytes can add to one counter,
 * at most n times the program's count step: the largest sum of increments on a path the parser
 * takes between two bytes, through counter operations, rule calls, ends of alternatives and
 * returns (no byte consumed). Counters only grow (increments are not negative), so nothing else
 * can bring a value back below a boundary.
 *
 * The count step is a longest path in the graph of those moves: a node per program position, and
 * a call and a return node per rule (a reference goes to its rule's call node, which goes to the
 * rule's alternatives; an alternative's end goes to its rule's return node, which goes to the
 * position after every reference to the rule: a superset of the real returns, which only makes
 * the bound larger). Tarjan's strongly connected components come out in reverse topological
 * order, so each component's longest path is known once its successors' are; an increment inside
 * a component is a cycle that adds without bound (a rule that counts after calling itself, say)
 * and leaves the step unbounded: then no two values are treated alike.
 */
#include "sample/grammar_prog.h"

#include <stdlib.h>
#include <string.h>

/* Programs longer than this are not analysed (about 40 bytes a position; kiln's own grammars with
 * counters are a few thousand positions): their count step stays unknown. */
#define CG_MAX_ELEM (1 << 20)

/* The graph of the moves between bytes, in compressed rows. */
typedef struct cgraph {
    int32_t n;    /* nodes: positions, then a call node and a return node per rule */
    int32_t *off; /* [n + 1] */
    int32_t *to;  /* [off[n]] */
    int32_t *w;   /* [off[n]] the increment a move adds */
} cgraph;

/* One move from -> to adding w: counted (g->to NULL) or stored at g->to[*k] (moves come in order
 * of their source node). */
static void cg_move(cgraph *g, int32_t *k, int32_t from, int32_t to, int32_t w) {
    if (!g->to) {
        g->off[from + 1]++;
        return;
    }
    g->to[*k] = to;
    g->w[*k] = w;
    (*k)++;
}

/* Every move of program p, in order of its source node: end_rule[] the rule of each alternative's
 * end, ret_sites[ret_off[r] .. ret_off[r + 1]) the references to rule r. */
static void cg_moves(const kn_gprog *p, const int32_t *end_rule, const int32_t *ret_off, const int32_t *ret_sites,
                     cgraph *g) {
    const int32_t ne = p->n_elem, nr = p->n_rule;
    int32_t k = 0;
    for (int32_t q = 0; q < ne; q++) {
        const int32_t e = p->elem[q];
        if (e == KN_GP_END) cg_move(g, &k, q, ne + nr + end_rule[q], 0);
        else if (KN_GP_IS_OP(e)) {
            const kn_gop *o = &p->op[e - KN_GP_OP_BASE];
            cg_move(g, &k, q, q + 1, o->push ? 0 : o->inc);
        } else if (e < 0) cg_move(g, &k, q, ne + KN_GP_RULE(e), 0);
    }
    for (int32_t r = 0; r < nr; r++) /* a rule's call node: its alternatives */
        for (int32_t a = p->alt_off[r]; a < p->alt_off[r + 1]; a++) cg_move(g, &k, ne + r, p->alt_pos[a], 0);
    for (int32_t r = 0; r < nr; r++) /* its return node: after each reference to it */
        for (int32_t a = ret_off[r]; a < ret_off[r + 1]; a++) cg_move(g, &k, ne + nr + r, ret_sites[a] + 1, 0);
}

/* Builds the graph of program p into g; false when memory runs out. */
static bool cg_build(const kn_gprog *p, cgraph *g) {
    const int32_t ne = p->n_elem, nr = p->n_rule;
    const int64_t n64 = (int64_t)ne + 2 * (int64_t)nr;
    if (n64 >= INT32_MAX / 2) return false;
    const int32_t n = (int32_t)n64;
    int32_t *end_rule = malloc(((size_t)ne + 1) * sizeof *end_rule);
    int32_t *ret_off = calloc((size_t)nr + 1, sizeof *ret_off);
    int32_t *ret_sites = NULL, *fill = NULL;
    g->off = calloc((size_t)n + 1, sizeof *g->off);
    g->to = g->w = NULL;
    bool ok = end_rule && ret_off && g->off;
    if (ok) {
        /* the rule of each alternative's end, and the reference sites of each rule */
        for (int32_t r = 0; r < nr; r++)
            for (int32_t k = p->alt_off[r]; k < p->alt_off[r + 1]; k++) {
                int32_t q = p->alt_pos[k];
                while (p->elem[q] != KN_GP_END) q++;
                end_rule[q] = r;
            }
        for (int32_t q = 0; q < ne; q++)
            if (p->elem[q] < KN_GP_END) ret_off[KN_GP_RULE(p->elem[q]) + 1]++;
        for (int32_t r = 0; r < nr; r++) ret_off[r + 1] += ret_off[r];
        ret_sites = malloc(((size_t)ret_off[nr] + 1) * sizeof *ret_sites);
        fill = malloc(((size_t)nr + 1) * sizeof *fill);
        ok = ret_sites && fill;
    }
    if (ok) {
        memcpy(fill, ret_off, (size_t)nr * sizeof *fill);
        for (int32_t q = 0; q < ne; q++)
            if (p->elem[q] < KN_GP_END) ret_sites[fill[KN_GP_RULE(p->elem[q])]++] = q;
        cg_moves(p, end_rule, ret_off, ret_sites, g); /* counted */
        for (int32_t v = 0; v < n; v++) g->off[v + 1] += g->off[v];
        g->to = malloc(((size_t)g->off[n] + 1) * sizeof *g->to);
        g->w = malloc(((size_t)g->off[n] + 1) * sizeof *g->w);
        ok = g->to && g->w;
    }
    if (ok) cg_moves(p, end_rule, ret_off, ret_sites, g); /* stored */
    free(end_rule), free(ret_off), free(ret_sites), free(fill);
    g->n = n;
    return ok;
}

/* The longest path of g's moves from any node (Tarjan's components, iteratively): -1 when a cycle
 * adds, -2 when memory runs out. Sums are capped at KN_GBNF_MAX_COUNT + 1 (no counter can go
 * further anyway). */
static int64_t cg_longest(const cgraph *g) {
    const int32_t n = g->n;
    int32_t *index = malloc(((size_t)n + 1) * sizeof *index), *low = malloc(((size_t)n + 1) * sizeof *low);
    int32_t *comp = malloc(((size_t)n + 1) * sizeof *comp), *stk = malloc(((size_t)n + 1) * sizeof *stk);
    int32_t *call = malloc(((size_t)n + 1) * sizeof *call), *edge = malloc(((size_t)n + 1) * sizeof *edge);
    int32_t *best = malloc(((size_t)n + 1) * sizeof *best); /* by component */
    int64_t result = 0;
    if (!index || !low || !comp || !stk || !call || !edge || !best) {
        result = -2;
        goto done;
    }
    const int32_t cap = KN_GBNF_MAX_COUNT + 1;
    for (int32_t v = 0; v < n; v++) index[v] = -1;
    int32_t next_index = 0, sp = 0, n_comp = 0;
    for (int32_t root = 0; root < n && result >= 0; root++) {
        if (index[root] >= 0) continue;
        int32_t depth = 0;
        call[depth] = root, edge[depth] = g->off[root];
        index[root] = low[root] = next_index++;
        stk[sp++] = root, comp[root] = -1;
        while (depth >= 0 && result >= 0) {
            const int32_t v = call[depth];
            if (edge[depth] < g->off[v + 1]) {
                const int32_t u = g->to[edge[depth]++];
                if (index[u] < 0) { /* descend */
                    index[u] = low[u] = next_index++;
                    stk[sp++] = u, comp[u] = -1;
                    call[++depth] = u, edge[depth] = g->off[u];
                } else if (comp[u] < 0 && index[u] < low[v]) low[v] = index[u]; /* on the stack */
                continue;
            }
            if (low[v] == index[v]) { /* v roots a component: pop it, then its longest path */
                const int32_t c = n_comp++, top = sp;
                do comp[stk[--sp]] = c;
                while (stk[sp] != v);
                int32_t b = 0;
                for (int32_t i = sp; i < top && result >= 0; i++)
                    for (int32_t k = g->off[stk[i]]; k < g->off[stk[i] + 1]; k++) {
                        const int32_t cu = comp[g->to[k]];
                        if (cu == c) {
                            if (g->w[k] > 0) result = -1; /* a cycle that adds */
                        } else {
                            const int64_t via = KN_MIN((int64_t)best[cu] + g->w[k], cap);
                            if (via > b) b = (int32_t)via;
                        }
                    }
                best[c] = b;
                if (b > result && result >= 0) result = b;
            }
            if (--depth >= 0 && low[v] < low[call[depth]]) low[call[depth]] = low[v];
        }
    }
done:
    free(index), free(low), free(comp), free(stk), free(call), free(edge), free(best);
    return result;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Fills in p's count step and guard boundaries (bound[] has room for 2 * n_op + 1 values); false
 * when memory runs out. */
bool kn_gprog_count_facts(kn_gprog *p, int32_t *bound) {
    p->count_step = -1;
    p->n_bound = 0;
    p->bound = bound;
    if (!p->n_op) return true;
    int32_t n = 0;
    bound[n++] = 0;
    for (int32_t i = 0; i < p->n_op; i++)
        if (!p->op[i].push) bound[n++] = p->op[i].lo, bound[n++] = p->op[i].hi + 1;
    qsort(bound, (size_t)n, sizeof *bound, cmp_i32);
    int32_t u = 0;
    for (int32_t i = 0; i < n; i++)
        if (!u || bound[i] != bound[u - 1]) bound[u++] = bound[i];
    p->n_bound = u;
    if (p->n_elem > CG_MAX_ELEM) return true; /* the step unknown: no values alike */
    cgraph g = {0};
    int64_t step = cg_build(p, &g) ? cg_longest(&g) : -2;
    free(g.off), free(g.to), free(g.w);
    if (step == -2) return false;
    p->count_step = step < 0 ? -1 : (int32_t)step;
    return true;
}

int32_t kn_gprog_count_class(const kn_gprog *p, int32_t v, int64_t ahead) {
    if (p->count_step < 0 || !p->n_bound) return v;
    int32_t lo = 0, hi = p->n_bound; /* the last boundary <= v: bound[0] = 0 <= v */
    while (hi - lo > 1) {
        const int32_t mid = (lo + hi) / 2;
        if (p->bound[mid] <= v) lo = mid;
        else hi = mid;
    }
    const int64_t next = lo + 1 < p->n_bound ? p->bound[lo + 1] : INT64_MAX;
    return (int64_t)v + ahead < next ? p->bound[lo] : v;
}
