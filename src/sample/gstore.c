/*
 * gstore.c - the matcher's state store: a pushdown automaton over a grammar program
 * (grammar_prog.h), determinized lazily.
 *
 * A parser stack is a persistent linked list of program positions: node (pos, parent) with parent
 * another node or -1 (the bottom). Nodes are interned (hash-consed) in a table, so equal stacks have
 * equal ids and stacks share their tails. A parser state is the sorted set of the stacks the parser
 * may be in, interned too (dense int32 ids); its stacks all have a terminal on top (the "ready"
 * stacks), and the empty stack, when reachable, is kept as a flag: the state is accepting.
 *
 * Stepping a state over byte b advances every ready stack whose terminal matches b and expands the
 * results until every top is a terminal again: a rule reference pushes the return position and
 * continues at each alternative of the rule (a reference that ends its alternative is a tail call:
 * the frame is replaced, so right recursion such as x* runs in constant depth), and the end of an
 * alternative pops to the parent. The expansion is a worklist over node ids with a per-step visited
 * mark, so shared work is done once; the program has no left recursion, so it terminates. Counter
 * frames (grammar_prog.h) are nodes with a negative position holding the value: a push op adds one,
 * a guard replaces the nearest one (and the frames above it), and popping one is like an end.
 *
 * Each state has a lazily allocated table of its 256 transitions (0 = not computed, 1 = dead,
 * else next state + 2; a state not stepped yet shares an all-unknown table), so a repeated
 * kn_gstore_step is a bounds check and two loads: that fast path is inline in grammar.h (token masks
 * call it millions of times), and kn_gstore_step_slow below is the rest. Memory is
 * counted: kn_gstore_full() says the cap is reached (the owner then calls kn_gstore_compact at a
 * point where it holds a single state), and steps fail (KN_GS_DEAD with kn_gstore_failed()) only
 * past twice the cap, or when a state would hold more than KN_GS_MAX_STACKS stacks (a property of
 * the grammar, told apart from memory by kn_gstore_fail_status).
 *
 * kn_gprog_check runs a store over a program the compiler has just built and walks its first
 * states, so that a grammar too ambiguous to start is refused when it is compiled.
 */
#include "sample/grammar_prog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The transitions of a state not stepped yet: all unknown (read-only, shared). */
static const int32_t gs_unknown[256];

#define GS_FAIL        INT32_MIN
#define GS_MAX_VISITS  (16 * KN_GS_MAX_STACKS) /* nodes one step may expand */
#define GS_SLAB_TABLES 16                      /* transition tables per allocation */
#define GS_DEFAULT_CAP ((size_t)64 << 20)
#define GS_MIN_CAP     ((size_t)64 << 10)

typedef struct gs_slot {
    uint64_t key; /* (pos << 32 | (uint32_t)par), GS_NO_KEY = empty */
    int32_t id;
    int32_t pad;
} gs_slot;

#define GS_NO_KEY UINT64_MAX

/* A counter frame is a stack node whose position is negative: GS_COUNTER(value). A guard looks for
 * its counter at most GS_COUNTER_DEPTH frames down. */
#define GS_COUNTER(v)       (-2 - (v))
#define GS_COUNTER_VALUE(p) (-2 - (p))
#define GS_COUNTER_DEPTH    64

struct kn_gstore {
    kn_gstore_head h; /* trans[cap_states] (gs_unknown until the state's first step) and n_states */

    const kiln_grammar *g;
    const kn_gprog *p;

    /* stack nodes: (npos, npar), interned through node_tab */
    int32_t *npos, *npar;
    uint32_t *seen; /* the step (epoch) that last visited each node */
    size_t n_nodes, cap_nodes;
    gs_slot *node_tab; /* open addressing over (pos, par) keys */
    size_t node_tab_cap;
    int node_tab_bits; /* node_tab_cap = 1 << node_tab_bits */

    /* states: the ready stacks pool[soff .. soff + scnt), accepting flag, interned through state_tab */
    uint32_t *soff;
    int32_t *scnt;
    uint8_t *sacc;
    int32_t *canon; /* kn_gstore_canon's answer for span canon_span, -1 = not known */
    int32_t canon_span;
    size_t cap_states;
    int32_t *pool;
    size_t n_pool, cap_pool;
    int32_t *state_tab;
    size_t state_tab_cap;

    /* transition tables, GS_SLAB_TABLES per slab */
    int32_t **slabs;
    size_t n_slabs, cap_slabs, slab_used;

    /* scratch of one step */
    int32_t *work, *out;
    size_t n_work, cap_work, n_out, cap_out;
    uint32_t epoch;
    size_t visits;
    bool acc;

    int32_t start; /* -2 until computed */
    size_t bytes, cap, hard;
    const char *failed;
    bool ambiguous; /* the failure was a property of the grammar (too many stacks, a counter too deep), not memory */
    char failed_buf[128];
};

/* ---- memory --------------------------------------------------------------------------------- */

static bool gs_fail(kn_gstore *s, const char *why) {
    if (!s->failed) {
        snprintf(s->failed_buf, sizeof s->failed_buf, "%s", why);
        s->failed = s->failed_buf;
    }
    return false;
}

#define GS_TOO_AMBIGUOUS "too many parser stacks (the grammar is too ambiguous)"
#define GS_TOO_DEEP      "a counter guard is more than 64 parser frames above its counter"

/* Fails for a property of the grammar: a state would hold more stacks than the matcher allows
 * (GS_TOO_AMBIGUOUS), or a guard's counter is too deep (GS_TOO_DEEP). */
static bool gs_fail_grammar(kn_gstore *s, const char *why) {
    if (!s->failed) s->ambiguous = true;
    return gs_fail(s, why);
}

/* Resizes *buf from old to n elements of elt bytes (new bytes zeroed), counting the difference
 * against the hard limit. */
static bool gs_resize(kn_gstore *s, void **buf, size_t old, size_t n, size_t elt) {
    if (n > SIZE_MAX / elt / 2) return gs_fail(s, "out of memory in the grammar state store");
    if (n > old && s->bytes + (n - old) * elt > s->hard)
        return gs_fail(s, "the grammar state store is full (its memory cap is reached)");
    void *nb = realloc(*buf, n * elt);
    if (!nb) return gs_fail(s, "out of memory in the grammar state store");
    if (n > old) memset((char *)nb + old * elt, 0, (n - old) * elt);
    *buf = nb;
    s->bytes = s->bytes + n * elt - old * elt;
    return true;
}

static size_t gs_next_cap(size_t cap, size_t need, size_t min) {
    size_t nc = cap ? cap : min;
    while (nc < need) nc *= 2;
    return nc;
}

static uint32_t gs_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static inline uint64_t gs_node_key(int32_t pos, int32_t par) { return (uint64_t)(uint32_t)pos << 32 | (uint32_t)par; }

/* Fibonacci hashing: the top bits of key times 2^64 / phi. */
static inline size_t gs_node_slot(uint64_t key, int bits) {
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> (64 - bits));
}

static uint32_t gs_state_hash(const int32_t *ids, int32_t n, bool acc) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n << 1 ^ acc;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001b3ull + (h >> 29);
    return gs_mix(h);
}

/* ---- nodes ---------------------------------------------------------------------------------- */

/* Rebuilds the node table with room for twice the nodes. */
static bool gs_node_rehash(kn_gstore *s) {
    int bits = s->node_tab_cap ? s->node_tab_bits + 1 : 10;
    size_t nc = (size_t)1 << bits, mask = nc - 1;
    gs_slot *nt = NULL;
    if (!gs_resize(s, (void **)&nt, 0, nc, sizeof *nt)) return false;
    for (size_t i = 0; i < nc; i++) nt[i].key = GS_NO_KEY;
    for (size_t i = 0; i < s->n_nodes; i++) {
        uint64_t key = gs_node_key(s->npos[i], s->npar[i]);
        size_t h = gs_node_slot(key, bits);
        while (nt[h].key != GS_NO_KEY) h = (h + 1) & mask;
        nt[h].key = key;
        nt[h].id = (int32_t)i;
    }
    free(s->node_tab);
    s->bytes -= s->node_tab_cap * sizeof *nt;
    s->node_tab = nt;
    s->node_tab_cap = nc;
    s->node_tab_bits = bits;
    return true;
}

/* Appends node (pos, par) in slot h of the node table. */
static int32_t gs_node_add(kn_gstore *s, size_t h, uint64_t key, int32_t pos, int32_t par) {
    if (s->n_nodes == s->cap_nodes) {
        size_t nc = gs_next_cap(s->cap_nodes, s->n_nodes + 1, 256);
        if (nc > INT32_MAX) return gs_fail(s, "too many parser stacks"), GS_FAIL;
        if (!gs_resize(s, (void **)&s->npos, s->cap_nodes, nc, sizeof *s->npos) ||
            !gs_resize(s, (void **)&s->npar, s->cap_nodes, nc, sizeof *s->npar) ||
            !gs_resize(s, (void **)&s->seen, s->cap_nodes, nc, sizeof *s->seen))
            return GS_FAIL;
        s->cap_nodes = nc;
    }
    int32_t id = (int32_t)s->n_nodes++;
    s->npos[id] = pos;
    s->npar[id] = par;
    s->seen[id] = 0;
    s->node_tab[h].key = key;
    s->node_tab[h].id = id;
    return id;
}

/* The id of stack node (pos, par), created when new; GS_FAIL when memory runs out. */
static inline int32_t gs_node(kn_gstore *s, int32_t pos, int32_t par) {
    if (__builtin_expect(s->n_nodes * 2 >= s->node_tab_cap, 0) && !gs_node_rehash(s)) return GS_FAIL;
    uint64_t key = gs_node_key(pos, par);
    size_t mask = s->node_tab_cap - 1, h = gs_node_slot(key, s->node_tab_bits);
    for (;; h = (h + 1) & mask) {
        const gs_slot *e = &s->node_tab[h];
        if (e->key == key) return e->id;
        if (e->key == GS_NO_KEY) return gs_node_add(s, h, key, pos, par);
    }
}

/* ---- states --------------------------------------------------------------------------------- */

static bool gs_state_rehash(kn_gstore *s) {
    size_t nc = s->state_tab_cap ? s->state_tab_cap * 2 : 256;
    int32_t *nt = NULL;
    if (!gs_resize(s, (void **)&nt, 0, nc, sizeof *nt)) return false;
    memset(nt, 0xff, nc * sizeof *nt);
    for (int32_t i = 0; i < s->h.n_states; i++) {
        const int32_t *ids = s->scnt[i] ? s->pool + s->soff[i] : NULL; /* no pool yet: only empty states */
        size_t h = gs_state_hash(ids, s->scnt[i], s->sacc[i]) & (nc - 1);
        while (nt[h] >= 0) h = (h + 1) & (nc - 1);
        nt[h] = i;
    }
    free(s->state_tab);
    s->bytes -= s->state_tab_cap * sizeof *nt;
    s->state_tab = nt;
    s->state_tab_cap = nc;
    return true;
}

/* The id of the state with stacks ids[n] (sorted) and accepting flag acc; GS_FAIL on failure. */
static int32_t gs_state(kn_gstore *s, const int32_t *ids, int32_t n, bool acc) {
    if ((size_t)s->h.n_states * 2 >= s->state_tab_cap && !gs_state_rehash(s)) return GS_FAIL;
    size_t mask = s->state_tab_cap - 1, h = gs_state_hash(ids, n, acc) & mask;
    for (int32_t id; (id = s->state_tab[h]) >= 0; h = (h + 1) & mask)
        if (s->scnt[id] == n && s->sacc[id] == acc &&
            (!n || !memcmp(s->pool + s->soff[id], ids, (size_t)n * sizeof *ids)))
            return id;
    if ((size_t)s->h.n_states == s->cap_states) {
        size_t nc = gs_next_cap(s->cap_states, (size_t)s->h.n_states + 1, 64);
        if (nc > INT32_MAX / 2) return gs_fail(s, "too many parser states"), GS_FAIL;
        if (!gs_resize(s, (void **)&s->h.trans, s->cap_states, nc, sizeof *s->h.trans) ||
            !gs_resize(s, (void **)&s->soff, s->cap_states, nc, sizeof *s->soff) ||
            !gs_resize(s, (void **)&s->scnt, s->cap_states, nc, sizeof *s->scnt) ||
            !gs_resize(s, (void **)&s->sacc, s->cap_states, nc, sizeof *s->sacc) ||
            !gs_resize(s, (void **)&s->canon, s->cap_states, nc, sizeof *s->canon))
            return GS_FAIL;
        s->cap_states = nc;
    }
    if (s->n_pool + (size_t)n > s->cap_pool) {
        size_t nc = gs_next_cap(s->cap_pool, s->n_pool + (size_t)n, 1024);
        if (nc > UINT32_MAX) return gs_fail(s, "too many parser stacks"), GS_FAIL;
        if (!gs_resize(s, (void **)&s->pool, s->cap_pool, nc, sizeof *s->pool)) return GS_FAIL;
        s->cap_pool = nc;
    }
    int32_t id = s->h.n_states++;
    if (n) memcpy(s->pool + s->n_pool, ids, (size_t)n * sizeof *ids);
    s->soff[id] = (uint32_t)s->n_pool;
    s->scnt[id] = n;
    s->sacc[id] = acc;
    s->canon[id] = -1;
    s->h.trans[id] = (int32_t *)gs_unknown;
    s->n_pool += (size_t)n;
    s->state_tab[h] = id;
    return id;
}

/* Gives state its (zeroed) transition table. */
static bool gs_table(kn_gstore *s, int32_t state) {
    if (!s->n_slabs || s->slab_used == GS_SLAB_TABLES) {
        if (s->n_slabs == s->cap_slabs) {
            size_t nc = gs_next_cap(s->cap_slabs, s->n_slabs + 1, 16);
            if (!gs_resize(s, (void **)&s->slabs, s->cap_slabs, nc, sizeof *s->slabs)) return false;
            s->cap_slabs = nc;
        }
        int32_t *slab = NULL;
        if (!gs_resize(s, (void **)&slab, 0, (size_t)GS_SLAB_TABLES * 256, sizeof *slab)) return false;
        s->slabs[s->n_slabs++] = slab;
        s->slab_used = 0;
    }
    s->h.trans[state] = s->slabs[s->n_slabs - 1] + s->slab_used++ * 256;
    return true;
}

/* ---- expansion ------------------------------------------------------------------------------ */

static void gs_begin(kn_gstore *s) {
    if (++s->epoch == 0) { /* wrapped: forget every mark */
        memset(s->seen, 0, s->cap_nodes * sizeof *s->seen);
        s->epoch = 1;
    }
    s->n_work = s->n_out = s->visits = 0;
    s->acc = false;
}

static inline bool gs_push(kn_gstore *s, int32_t **v, size_t *n, size_t *cap, int32_t x) {
    if (__builtin_expect(*n == *cap, 0)) {
        size_t nc = gs_next_cap(*cap, *n + 1, 64);
        if (!gs_resize(s, (void **)v, *cap, nc, sizeof **v)) return false;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return true;
}

/* Queues node id for expansion unless this step has seen it. */
static inline bool gs_visit(kn_gstore *s, int32_t id) {
    if (id == GS_FAIL) return false;
    if (s->seen[id] == s->epoch) return true;
    s->seen[id] = s->epoch;
    if (++s->visits > GS_MAX_VISITS) return gs_fail_grammar(s, GS_TOO_AMBIGUOUS);
    return gs_push(s, &s->work, &s->n_work, &s->cap_work, id);
}

/* The node that continues at pos after counter op o, on the stack par (o at pos - 1); -1 when the
 * stack dies there (a guard fails or finds no counter), GS_FAIL when memory runs out or the counter
 * is deeper than GS_COUNTER_DEPTH frames. A guard rebuilds the frames above the counter it changes
 * (in kiln's own grammars, none or one; the bound keeps a step's work constant: a guard under
 * 20,000 nested frames took 18 s to accept 40 KB). */
static int32_t gs_counter_op(kn_gstore *s, const kn_gop *o, int32_t pos, int32_t par) {
    if (o->push) {
        int32_t c = gs_node(s, GS_COUNTER(0), par);
        return c == GS_FAIL ? GS_FAIL : gs_node(s, pos, c);
    }
    int32_t chain[GS_COUNTER_DEPTH]; /* the frames above the counter */
    int n = 0, c = par;
    for (; c >= 0 && s->npos[c] >= 0; c = s->npar[c]) {
        if (n == GS_COUNTER_DEPTH) return gs_fail_grammar(s, GS_TOO_DEEP), GS_FAIL;
        chain[n++] = s->npos[c];
    }
    if (c < 0) return -1;
    int32_t v = GS_COUNTER_VALUE(s->npos[c]) + o->inc;
    if (v < o->lo || v > o->hi) return -1;
    int32_t b = gs_node(s, GS_COUNTER(v), s->npar[c]);
    while (n && b != GS_FAIL) b = gs_node(s, chain[--n], b);
    return b == GS_FAIL ? GS_FAIL : gs_node(s, pos, b);
}

/* Expands the queued nodes until every stack has a terminal on top (into out) or is empty (acc). */
static bool gs_expand(kn_gstore *s) {
    const int32_t *elem = s->p->elem, *alt_off = s->p->alt_off, *alt_pos = s->p->alt_pos;
    while (s->n_work) {
        int32_t id = s->work[--s->n_work], pos = s->npos[id], par = s->npar[id];
        int32_t e = pos >= 0 ? elem[pos] : KN_GP_END; /* a counter frame pops like an end */
        if (e >= 0 && !KN_GP_IS_OP(e)) {
            if (s->n_out >= KN_GS_MAX_STACKS) return gs_fail_grammar(s, GS_TOO_AMBIGUOUS);
            if (!gs_push(s, &s->out, &s->n_out, &s->cap_out, id)) return false;
        } else if (e == KN_GP_END) {
            if (par < 0) s->acc = true;
            else if (!gs_visit(s, par)) return false;
        } else if (e >= 0) {
            int32_t next = gs_counter_op(s, &s->p->op[e - KN_GP_OP_BASE], pos + 1, par);
            if (next != -1 && !gs_visit(s, next)) return false;
        } else {
            int32_t r = KN_GP_RULE(e);
            if (elem[pos + 1] != KN_GP_END && (par = gs_node(s, pos + 1, par)) == GS_FAIL) return false;
            for (int32_t k = alt_off[r]; k < alt_off[r + 1]; k++)
                if (!gs_visit(s, gs_node(s, alt_pos[k], par))) return false;
        }
    }
    return true;
}

static void gs_sort(int32_t *v, size_t n) {
    for (size_t i = 1; i < n; i++) {
        int32_t x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

static int gs_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether v[0..n) is in descending order; reversed if so. */
static bool gs_reverse_descending(int32_t *v, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (v[i - 1] < v[i]) return false;
    for (size_t i = 0, j = n - 1; i < j; i++, j--) {
        int32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    return true;
}

/* The state of the expansion's result (KN_GS_DEAD when it is empty), GS_FAIL on failure. */
static int32_t gs_result(kn_gstore *s) {
    if (!s->n_out && !s->acc) return KN_GS_DEAD;
    /* the expansion pops its work list, so a rule's alternatives (stacks made in order) mostly come
     * out in descending order: the worst case of the insertion sort, 30 stacks of a class of
     * \p{L} at every character */
    if (s->n_out > 1 && !gs_reverse_descending(s->out, s->n_out)) {
        if (s->n_out <= 32) gs_sort(s->out, s->n_out);
        else qsort(s->out, s->n_out, sizeof *s->out, gs_cmp);
    }
    return gs_state(s, s->out, (int32_t)s->n_out, s->acc);
}

/* ---- the store ------------------------------------------------------------------------------ */

/* Frees every node, state and table (the scratch vectors stay). */
static void gs_clear(kn_gstore *s) {
    for (size_t i = 0; i < s->n_slabs; i++) free(s->slabs[i]);
    free(s->slabs), free(s->npos), free(s->npar), free(s->seen), free(s->node_tab);
    free(s->h.trans), free(s->soff), free(s->scnt), free(s->sacc), free(s->canon), free(s->pool), free(s->state_tab);
    s->slabs = NULL, s->npos = s->npar = NULL, s->seen = NULL, s->node_tab = NULL;
    s->h.trans = NULL, s->soff = NULL, s->scnt = NULL, s->sacc = NULL, s->canon = NULL, s->pool = NULL;
    s->state_tab = NULL;
    s->n_slabs = s->cap_slabs = s->slab_used = 0;
    s->n_nodes = s->cap_nodes = s->node_tab_cap = 0;
    s->node_tab_bits = 0;
    s->h.n_states = 0;
    s->cap_states = s->n_pool = s->cap_pool = s->state_tab_cap = 0;
    s->bytes = sizeof *s + (s->cap_work + s->cap_out) * sizeof(int32_t);
    s->epoch = 0;
    s->start = -2;
}

/* A store running program p (of grammar g, retained, or of no grammar object yet when g is NULL). */
static kn_gstore *gs_new(const kiln_grammar *g, const kn_gprog *p, size_t bytes_cap) {
    kn_gstore *s = kn_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->g = g;
    s->p = p;
    s->cap = bytes_cap ? bytes_cap : GS_DEFAULT_CAP;
    if (s->cap < GS_MIN_CAP) s->cap = GS_MIN_CAP;
    s->hard = s->cap <= SIZE_MAX / 2 ? s->cap * 2 : SIZE_MAX;
    gs_clear(s);
    kn_grammar_retain(g);
    return s;
}

kiln_status kn_gstore_new(const kiln_grammar *g, size_t bytes_cap, kn_gstore **out) {
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!g) return kn_error(KILN_ERR_INVALID_ARG, "the grammar is NULL");
    kn_gstore *s = gs_new(g, &g->prog, bytes_cap);
    if (!s) return KILN_ERR_NOMEM;
    *out = s;
    return KILN_OK;
}

void kn_gstore_free(kn_gstore *s) {
    if (!s) return;
    gs_clear(s);
    free(s->work), free(s->out);
    kiln_grammar_free((kiln_grammar *)s->g);
    free(s);
}

int32_t kn_gstore_start(kn_gstore *s) {
    if (s->start >= 0) return s->start;
    const kn_gprog *p = s->p;
    gs_begin(s);
    for (int32_t k = p->alt_off[p->root]; k < p->alt_off[p->root + 1]; k++)
        if (!gs_visit(s, gs_node(s, p->alt_pos[k], -1))) return KN_GS_DEAD;
    if (!gs_expand(s)) return KN_GS_DEAD;
    int32_t st = gs_result(s);
    if (st == GS_FAIL) return KN_GS_DEAD;
    if (st >= 0) s->start = st;
    return st;
}

/* The uncached step: advance the ready stacks whose terminal matches b, expand, intern, memoize. */
int32_t kn_gstore_step_slow(kn_gstore *s, int32_t state, uint8_t b) {
    if (state == KN_GS_DEAD) return KN_GS_DEAD;
    if (state < 0 || state >= s->h.n_states) return gs_fail(s, "invalid parser state"), KN_GS_DEAD;
    if (s->h.trans[state] == gs_unknown && !gs_table(s, state)) return KN_GS_DEAD;
    const kn_gprog *p = s->p;
    gs_begin(s);
    uint32_t off = s->soff[state];
    for (int32_t i = 0, n = s->scnt[state]; i < n; i++) {
        int32_t id = s->pool[off + (uint32_t)i], pos = s->npos[id];
        if (kn_gp_match(p, p->elem[pos], b) && !gs_visit(s, gs_node(s, pos + 1, s->npar[id]))) return KN_GS_DEAD;
    }
    if (!gs_expand(s)) return KN_GS_DEAD;
    int32_t next = gs_result(s);
    if (next == GS_FAIL) return KN_GS_DEAD;
    s->h.trans[state][b] = next + 2;
    return next;
}

int32_t kn_gstore_step_range(kn_gstore *s, int32_t state, uint8_t lo, uint8_t hi) {
    if (state < 0 || state >= s->h.n_states || lo > hi) return kn_gstore_step(s, state, lo);
    uint64_t range[4] = {0};
    for (int w = lo >> 6; w <= hi >> 6; w++) {
        const int a = w == lo >> 6 ? lo & 63 : 0, b = w == hi >> 6 ? hi & 63 : 63;
        range[w] = (b == 63 ? ~0ull : (1ull << (b + 1)) - 1) & ~((1ull << a) - 1);
    }
    const kn_gprog *p = s->p;
    const uint32_t off = s->soff[state];
    for (int32_t i = 0, n = s->scnt[state]; i < n; i++) {
        const uint64_t *set = p->set[p->elem[s->npos[s->pool[off + (uint32_t)i]]]];
        uint64_t in = 0, out = 0;
        for (int w = 0; w < 4; w++) {
            in |= set[w] & range[w];
            out |= range[w] & ~set[w];
        }
        if (in && out) return KN_GS_MIXED; /* this stack takes some of the bytes only */
    }
    const int32_t next = kn_gstore_step(s, state, lo);
    if (next < 0 && kn_gstore_failed(s)) return next;
    for (int b = lo + 1; b <= hi; b++) s->h.trans[state][b] = next + 2;
    return next;
}

bool kn_gstore_accepting(const kn_gstore *s, int32_t state) {
    return state >= 0 && state < s->h.n_states && s->sacc[state];
}

/* Exact because every ready stack can be completed (grammar_prog.h): a state with one can go on. */
bool kn_gstore_final(kn_gstore *s, int32_t state) { return kn_gstore_accepting(s, state) && s->scnt[state] == 0; }

size_t kn_gstore_bytes(const kn_gstore *s) { return s->bytes; }
bool kn_gstore_full(const kn_gstore *s) { return s->bytes >= s->cap; }
const char *kn_gstore_failed(const kn_gstore *s) { return s->failed; }

kiln_status kn_gstore_fail_status(const kn_gstore *s) {
    return !s->failed ? KILN_OK : s->ambiguous ? KILN_ERR_UNSUPPORTED : KILN_ERR_NOMEM;
}

/* Rebuilds the store around keep: its stacks are copied (parent chains first) into fresh tables,
 * and it becomes state 0. */
int32_t kn_gstore_compact(kn_gstore *s, int32_t keep) {
    if (keep < 0 || keep >= s->h.n_states) return gs_fail(s, "invalid parser state"), KN_GS_DEAD;
    int32_t cnt = s->scnt[keep];
    bool acc = s->sacc[keep];
    size_t old_n = s->n_nodes;
    int32_t *ids = malloc(((size_t)cnt + 1) * sizeof *ids), *map = malloc((old_n + 1) * sizeof *map);
    int32_t *chain = malloc((old_n + 1) * sizeof *chain);
    int32_t *opos = s->npos, *opar = s->npar;
    if (!ids || !map || !chain) {
        free(ids), free(map), free(chain);
        return gs_fail(s, "out of memory in the grammar state store"), KN_GS_DEAD;
    }
    if (cnt) memcpy(ids, s->pool + s->soff[keep], (size_t)cnt * sizeof *ids);
    memset(map, 0xff, old_n * sizeof *map);
    s->npos = s->npar = NULL; /* kept (as opos, opar) while the chains are copied */
    s->cap_nodes = 0;
    gs_clear(s);
    s->failed = NULL;
    s->ambiguous = false;
    int32_t st = 0;
    for (int32_t i = 0; i < cnt && st != GS_FAIL; i++) {
        size_t n = 0;
        int32_t c = ids[i];
        while (c >= 0 && map[c] < 0) chain[n++] = c, c = opar[c];
        int32_t base = c < 0 ? -1 : map[c];
        while (n && base != GS_FAIL) {
            c = chain[--n];
            base = map[c] = gs_node(s, opos[c], base);
        }
        if (base == GS_FAIL) st = GS_FAIL;
        else ids[i] = map[ids[i]];
    }
    if (st != GS_FAIL) {
        if (cnt <= 32) gs_sort(ids, (size_t)cnt);
        else qsort(ids, (size_t)cnt, sizeof *ids, gs_cmp);
        st = gs_state(s, ids, cnt, acc);
    }
    free(ids), free(map), free(chain), free(opos), free(opar);
    return st == GS_FAIL ? KN_GS_DEAD : st;
}

/* Stack id with the value of each counter frame among its top GS_COUNTER_DEPTH frames moved to its
 * class's first (kn_gprog_count_class with ahead), into *out: the frames above the deepest moved
 * counter rebuilt (their positions in s->work). Deeper counters keep their values (exact, only not
 * shared), so a new state's walk is bounded however deeply the text is nested. False on failure
 * (memory: the caller keeps the state as it is). */
static bool gs_canon_stack(kn_gstore *s, int32_t id, int64_t ahead, int32_t *out) {
    s->n_work = 0;
    size_t deepest = SIZE_MAX; /* index in work of the deepest counter whose value moves */
    for (int32_t c = id; c >= 0 && s->n_work < GS_COUNTER_DEPTH; c = s->npar[c]) {
        int32_t pos = s->npos[c];
        if (pos < -1) {
            int32_t v = GS_COUNTER_VALUE(pos), w = kn_gprog_count_class(s->p, v, ahead);
            if (w != v) pos = GS_COUNTER(w), deepest = s->n_work, *out = s->npar[c]; /* the tail below stays */
        }
        if (!gs_push(s, &s->work, &s->n_work, &s->cap_work, pos)) return false;
    }
    if (deepest == SIZE_MAX) {
        *out = id;
        return true;
    }
    for (size_t k = deepest + 1; k-- > 0;)
        if ((*out = gs_node(s, s->work[k], *out)) == GS_FAIL) return false;
    return true;
}

int32_t kn_gstore_canon(kn_gstore *s, int32_t state, int32_t span) {
    const kn_gprog *p = s->p;
    if (state < 0 || state >= s->h.n_states || !p->n_op || p->count_step < 0 || s->bytes >= s->cap || s->failed)
        return state;
    if (span != s->canon_span) {
        for (int32_t i = 0; i < s->h.n_states; i++) s->canon[i] = -1;
        s->canon_span = span;
    }
    if (s->canon[state] >= 0) return s->canon[state];
    const int64_t ahead = (int64_t)p->count_step * span;
    s->n_out = 0;
    bool ok = true;
    for (int32_t i = 0, n = s->scnt[state]; ok && i < n; i++) {
        int32_t id = -1;
        ok = gs_canon_stack(s, s->pool[s->soff[state] + (uint32_t)i], ahead, &id) &&
             gs_push(s, &s->out, &s->n_out, &s->cap_out, id);
    }
    int32_t c = state;
    if (ok) {
        if (s->n_out <= 32) gs_sort(s->out, s->n_out); /* stacks that now agree are one */
        else qsort(s->out, s->n_out, sizeof *s->out, gs_cmp);
        size_t u = 0;
        for (size_t i = 0; i < s->n_out; i++)
            if (!u || s->out[i] != s->out[u - 1]) s->out[u++] = s->out[i];
        c = gs_state(s, s->out, (int32_t)u, s->sacc[state]);
    }
    if (!ok || c == GS_FAIL) { /* memory: the state as it is (exact), and no failure left behind */
        s->failed = NULL;
        s->ambiguous = false;
        return state;
    }
    s->canon[state] = c;
    s->canon[c] = c; /* a class's first values stay */
    return c;
}

int32_t kn_gstore_n_stacks(const kn_gstore *s, int32_t state) {
    return state >= 0 && state < s->h.n_states ? s->scnt[state] : 0;
}

int32_t kn_gstore_depth(const kn_gstore *s, int32_t state) {
    int32_t best = 0;
    for (int32_t i = 0; i < kn_gstore_n_stacks(s, state); i++) {
        int32_t d = 0;
        for (int32_t c = s->pool[s->soff[state] + (uint32_t)i]; c >= 0; c = s->npar[c]) d++;
        if (d > best) best = d;
    }
    return best;
}

/* ---- the compile-time check ------------------------------------------------------------------- */

#define GS_CHECK_CAP ((size_t)16 << 20) /* memory of the check's store */

/* Appends text (escaped where not printable ASCII) to why[cap] at *k. */
static void gs_put_text(char *why, size_t cap, size_t *k, const uint8_t *text, int n) {
    for (int i = 0; i < n && *k + 8 < cap; i++) {
        uint8_t c = text[i];
        int w = c == '"' || c == '\\'   ? snprintf(why + *k, cap - *k, "\\%c", c)
                : c >= 0x20 && c < 0x7F ? snprintf(why + *k, cap - *k, "%c", c)
                                        : snprintf(why + *k, cap - *k, "\\x%02X", c);
        if (w > 0) *k += (size_t)w;
    }
}

/* A breadth-first walk from the start state: from each state, one byte of each class of bytes
 * that every ready stack treats alike (so one step stands for all of the class: they lead to the
 * same state), until KN_GS_CHECK_STATES states are seen. The classes come from a refinement of
 * the 256 bytes by the distinct byte sets of the state's stacks. */
kiln_status kn_gprog_check(const kn_gprog *p, char *why, size_t cap) {
    kn_gstore *s = gs_new(NULL, p, GS_CHECK_CAP);
    if (!s) return KILN_ERR_NOMEM;
    int32_t par[KN_GS_CHECK_STATES], depth[KN_GS_CHECK_STATES]; /* by state id: the walk's tree */
    uint8_t via[KN_GS_CHECK_STATES];
    uint32_t *set_seen = calloc((size_t)(p->n_set ? p->n_set : 1), sizeof *set_seen);
    kiln_status st = set_seen ? KILN_OK : KILN_ERR_NOMEM;
    int32_t start = st ? KN_GS_DEAD : kn_gstore_start(s);
    int32_t bad = -2, bad_byte = -1; /* the state whose step failed (-1: the start) and the byte */
    if (!st && start < 0 && s->ambiguous && !strcmp(s->failed, GS_TOO_AMBIGUOUS)) bad = -1;
    if (!st && start == 0) par[0] = -1, depth[0] = 0;
    for (int32_t q = 0; !st && bad == -2 && start == 0 && q < s->h.n_states && q < KN_GS_CHECK_STATES; q++) {
        uint64_t sig[256] = {0};
        const int32_t *ids = s->scnt[q] ? s->pool + s->soff[q] : NULL; /* no pool yet: only empty states */
        for (int32_t i = 0; i < s->scnt[q]; i++) {
            int32_t set = p->elem[s->npos[ids[i]]];
            if (set_seen[set] == (uint32_t)q + 1) continue;
            set_seen[set] = (uint32_t)q + 1;
            uint64_t h = ((uint64_t)set + 1) * 0x9e3779b97f4a7c15ull;
            for (int b = 0; b < 256; b++)
                if (kn_gp_match(p, set, (uint8_t)b)) sig[b] = (sig[b] ^ h) * 0xbf58476d1ce4e5b9ull + 1;
        }
        uint64_t cls[512] = {0}; /* the classes stepped so far (open addressing by signature) */
        for (int b = 0; b < 256 && bad == -2; b++) {
            if (!sig[b]) continue; /* no stack takes b */
            size_t h = gs_mix(sig[b]) & 511;
            while (cls[h] && cls[h] != sig[b]) h = (h + 1) & 511;
            if (cls[h]) continue; /* its class was stepped */
            cls[h] = sig[b];
            int32_t n0 = s->h.n_states, next = kn_gstore_step(s, q, (uint8_t)b);
            if (next < 0 && s->failed) {
                if (s->ambiguous && !strcmp(s->failed, GS_TOO_AMBIGUOUS)) bad = q, bad_byte = b;
                else
                    st = KILN_OK, q = KN_GS_CHECK_STATES; /* the check's memory, or a counter too deep (the
                                                             matcher says so when it happens): stop */
            } else if (next >= n0 && next < KN_GS_CHECK_STATES) {
                par[next] = q, via[next] = (uint8_t)b, depth[next] = depth[q] + 1;
            }
        }
    }
    if (!st && bad != -2) {
        size_t k = 0;
        if (bad < 0) {
            k = (size_t)snprintf(why, cap, "its start state ");
        } else {
            uint8_t text[KN_GS_CHECK_STATES + 1];
            int n = depth[bad] + 1;
            text[n - 1] = (uint8_t)bad_byte;
            for (int32_t c = bad, i = n - 2; c > 0; c = par[c]) text[i--] = via[c];
            k = (size_t)snprintf(why, cap, "after the text \"");
            gs_put_text(why, cap, &k, text, n);
            if (k < cap) k += (size_t)snprintf(why + k, cap - k, "\" its state ");
        }
        if (k < cap)
            snprintf(why + k, cap - k,
                     "would hold more than %d parser stacks (alternatives the matcher follows at once); merge "
                     "alternatives that begin alike or nest fewer optional repetitions",
                     KN_GS_MAX_STACKS);
        st = KILN_ERR_INVALID_ARG;
    } else if (!st && start < 0 && s->failed) {
        st = KILN_OK; /* the start state hit the check's memory cap: not the grammar's fault */
    }
    free(set_seen);
    kn_gstore_free(s);
    return st;
}
