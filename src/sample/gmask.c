/*
 * gmask.c - the token mask of a constrained generation (see gmask.h; the trie's layout in vtrie.h).
 *
 * A mask is computed by one preorder walk of the vocabulary trie together with the grammar's state
 * store: each node's state is its parent's stepped over the node's byte, a dead state skips the
 * node's whole subtree, and the tokens that end at a live node are allowed. Allowed tokens are
 * collected as ranges of sorted indices (a subtree is one range) and scattered into the bitmap by
 * id at the end: the allowed ones onto zeros, or, when most are allowed, the disallowed ones off
 * the bitmap of all tokens with text.
 *
 * Two things make it fast on large vocabularies:
 *   - Whole subtrees at once. Inside a string, a number, a run of letters, a parser state moves the
 *     same way on every byte of a class: to itself (a loop: [a-z]*), or to one next state (a bounded
 *     repetition: [a-z]{0,30}). When every character a node's subtree holds (its summary) moves the
 *     state S to one and the same live state S1, and S1 does the same for the summary, and so on for
 *     as many characters as the subtree's longest token has bytes (or until the chain comes back to
 *     itself), every token of the subtree is allowed without visiting it. Multi-byte characters
 *     count when every well-formed UTF-8 character with one of the subtree's lead bytes leads from
 *     the state to that same next state (checked once per state and lead byte by exploring the
 *     store over the continuation bytes: a kind of characters at once, by lead byte when a class
 *     such as \p{L} splits it) and the subtree's texts are well-formed UTF-8. A node inside a
 *     character counts too when every way of ending the character leads to one state (the
 *     store steps a range of continuation bytes at once), from which the rest of the texts
 *     chain. What each state does with each ASCII byte is learnt lazily (a few classes of bytes
 *     by destination), as summaries ask for it; the walk also uses it to skip asking the store
 *     again. A chain that held is remembered by its first state, so that the next summaries
 *     within it pass at once.
 *   - A cache of masks by parser state (direct-mapped, bounded), since states recur: inside a
 *     string, between the items of an array. State ids change when the store is compacted, so the
 *     cache and the learnt classes are cleared then. A state holding counts (a string with a
 *     maxLength) is first replaced by the state with each count at the first value of its class
 *     (kn_gstore_canon: values that no guard tells apart within a token's length), so that its
 *     masks recur too while the count is far from its bounds.
 * KN_GMATCH_PLAIN keeps the reference: each token's text stepped byte by byte, which the tests
 * compare against the fast path bit for bit.
 */
#include "sample/vtrie.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CACHE_CAP  ((size_t)4 << 20) /* bytes of cached masks */
#define CACHE_SLOTS_MIN    16
#define CACHE_SLOTS_MAX    4096
#define INFO_CHUNK         512   /* state infos per allocation (they never move: pointers stay valid) */
#define INFO_MAX           32768 /* state infos at most; cleared between walks beyond half of it */
#define UTF8_STEPS_MAX     8192  /* store steps one UTF-8 closure check may take */
#define UTF8_VISITED_SLOTS 2048  /* (state, validator state) pairs it may remember (power of two) */

#define N_CLASSES 4 /* destinations of ASCII bytes remembered per state */
#define UNKNOWN   INT32_MIN
#define RUN_LOOP  UINT32_MAX

/* What is known of where a parser state goes: its ASCII bytes grouped by destination state. */
typedef struct state_info {
    int32_t state;
    int32_t n_cls;              /* classes in use */
    int32_t dest[N_CLASSES];    /* a live destination */
    uint64_t cls[N_CLASSES][2]; /* the ASCII bytes that lead there */
    uint64_t tested[2];         /* ASCII bytes asked about: in a class, dead, or beyond N_CLASSES */
    int32_t utf8_dest;          /* the state the multi-byte characters of the lead bytes in u8_ok lead to */
    uint64_t u8_ok;             /* lead bytes (kn_u8_lead_bit) whose every character leads to utf8_dest */
    uint64_t u8_bad;            /* lead bytes known not to */
    uint16_t u8_split;          /* kinds (kn_u8_kind) whose characters go different ways: asked by lead byte */
    /* a chain of subtree_ok that held: every summary within these ASCII and lead bytes keeps the
     * state alive for run_len characters (RUN_LOOP: any number; 0: nothing known) */
    uint64_t run_ascii[2];
    uint64_t run_leads;
    uint32_t run_len;
    int8_t end_q;     /* char_end's memo: the validator state it was asked for (-1: none) */
    int32_t end_dest; /* and its answer */
} state_info;

struct kn_gmatch {
    const kn_vtrie *t;
    kn_gstore *store;
    int32_t cur;    /* the state of the text so far */
    bool strip;     /* the next token's leading space is not output */
    unsigned flags; /* KN_GMATCH_* */
    const char *err;
    char errbuf[KN_ERRMSG_MAX];
    kiln_status err_st; /* the matcher's failure in errbuf: KILN_ERR_NOMEM or KILN_ERR_UNSUPPORTED */
    int32_t *st;        /* [max_depth + 1] states along the walk's path */
    uint32_t *rng;      /* allowed ranges of sorted indices, pairs [a, b) */
    size_t n_rng;       /* pairs */
    size_t cap_rng;     /* pairs */
    uint64_t *mask;     /* [words] the last mask when it is not in the cache */
    /* the mask cache, direct-mapped by state id */
    uint32_t c_slots; /* a power of two; 0 = no cache */
    int32_t *c_state; /* [c_slots] -1 = empty */
    int32_t *c_count; /* [c_slots] allowed tokens */
    uint64_t *c_bits; /* [c_slots][words] */
    /* what is known of states: entries in chunks, found through an open-addressing table of index + 1 */
    state_info *li_chunk[INFO_MAX / INFO_CHUNK];
    uint32_t li_n;
    uint32_t *li_tab;
    uint32_t li_tab_cap;
    state_info **lp; /* [max_depth + 1] the info of each state on the walk's path, or NULL */
    /* the UTF-8 closure check's scratch */
    uint64_t visited[UTF8_VISITED_SLOTS];
    uint64_t todo[UTF8_VISITED_SLOTS];
    kn_gmatch_stats stats;
};

/* ---- creation ---------------------------------------------------------------------------------- */

static void clear_infos(kn_gmatch *m) {
    memset(m->li_tab, 0, m->li_tab_cap * sizeof *m->li_tab);
    m->li_n = 0;
}

static void clear_cache(kn_gmatch *m) {
    for (uint32_t i = 0; i < m->c_slots; i++) m->c_state[i] = -1;
}

kiln_status kn_gmatch_new_ex(const kiln_grammar *g, const kn_vtrie *t, bool strip_first_space,
                             const kn_gmatch_opts *opts, kn_gmatch **out) {
    *out = NULL;
    if (!g || !t) return kn_error(KILN_ERR_INVALID_ARG, "a grammar matcher needs a grammar and a vocabulary trie");
    const kn_gmatch_opts o = opts ? *opts : (kn_gmatch_opts){0};
    kn_gmatch *m = kn_calloc(1, sizeof *m);
    if (!m) return kn_error(KILN_ERR_NOMEM, "out of memory for a grammar matcher");
    m->t = t;
    m->flags = o.flags;
    m->strip = strip_first_space;
    kiln_status st = kn_gstore_new(g, o.store_cap, &m->store);
    if (st) {
        free(m);
        return st;
    }
    m->cur = kn_gstore_start(m->store);
    if (m->cur < 0) {
        const char *why = kn_gstore_failed(m->store);
        kiln_status fst = kn_gstore_fail_status(m->store);
        kiln_status st2 = why ? kn_error(fst ? fst : KILN_ERR_NOMEM, "the grammar matcher failed: %s", why)
                              : kn_error(KILN_ERR_INVALID_ARG, "the grammar's language is empty");
        kn_gstore_free(m->store);
        free(m);
        return st2;
    }
    const size_t W = (size_t)KN_MAX(t->words, 1);
    m->mask = kn_calloc(W, sizeof *m->mask);
    m->st = kn_calloc((size_t)t->max_depth + 1, sizeof *m->st);
    m->cap_rng = 256;
    m->rng = kn_calloc(m->cap_rng * 2, sizeof *m->rng);
    m->lp = kn_calloc((size_t)t->max_depth + 1, sizeof *m->lp);
    m->li_tab_cap = 256;
    m->li_tab = kn_calloc(m->li_tab_cap, sizeof *m->li_tab);
    bool ok = m->mask && m->st && m->rng && m->lp && m->li_tab;
    if (ok && !(o.flags & (KN_GMATCH_PLAIN | KN_GMATCH_NO_CACHE))) {
        const size_t cap = o.cache_cap ? o.cache_cap : DEFAULT_CACHE_CAP;
        uint32_t slots = CACHE_SLOTS_MIN;
        while (slots < CACHE_SLOTS_MAX && (size_t)slots * 2 * W * sizeof(uint64_t) <= cap) slots *= 2;
        m->c_slots = slots;
        m->c_state = kn_calloc(slots, sizeof *m->c_state);
        m->c_count = kn_calloc(slots, sizeof *m->c_count);
        m->c_bits = kn_calloc((size_t)slots * W, sizeof *m->c_bits);
        ok = m->c_state && m->c_count && m->c_bits;
    }
    if (!ok) {
        kn_gmatch_free(m);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a grammar matcher");
    }
    clear_infos(m);
    clear_cache(m);
    *out = m;
    return KILN_OK;
}

kiln_status kn_gmatch_new(const kiln_grammar *g, const kn_vtrie *t, bool strip_first_space, kn_gmatch **out) {
    return kn_gmatch_new_ex(g, t, strip_first_space, NULL, out);
}

void kn_gmatch_free(kn_gmatch *m) {
    if (!m) return;
    kn_gstore_free(m->store);
    free(m->mask);
    free(m->st);
    free(m->rng);
    free(m->lp);
    free(m->li_tab);
    for (size_t i = 0; i < KN_ARRAY_LEN(m->li_chunk); i++) free(m->li_chunk[i]);
    free(m->c_state);
    free(m->c_count);
    free(m->c_bits);
    free(m);
}

/* ---- what states do ------------------------------------------------------------------------------ */

static uint32_t hash_state(int32_t s) { return (uint32_t)s * 0x9E3779B1u; }

static state_info *info_at(kn_gmatch *m, uint32_t i) { return &m->li_chunk[i / INFO_CHUNK][i % INFO_CHUNK]; }

/* The info of state s (created empty when new); NULL when memory runs out or INFO_MAX entries
 * exist. Entries never move until clear_infos. */
static state_info *info_of(kn_gmatch *m, int32_t s) {
    uint32_t mask = m->li_tab_cap - 1, h = hash_state(s) & mask;
    for (; m->li_tab[h]; h = (h + 1) & mask) {
        state_info *e = info_at(m, m->li_tab[h] - 1);
        if (e->state == s) return e;
    }
    if (m->li_n == INFO_MAX) return NULL;
    if (2 * (m->li_n + 1) > m->li_tab_cap) { /* a table twice as large, re-filled from the entries */
        uint32_t *nt = kn_calloc((size_t)m->li_tab_cap * 2, sizeof *nt);
        if (!nt) return NULL;
        free(m->li_tab);
        m->li_tab = nt;
        m->li_tab_cap *= 2;
        mask = m->li_tab_cap - 1;
        for (uint32_t i = 0; i < m->li_n; i++) {
            uint32_t k = hash_state(info_at(m, i)->state) & mask;
            while (m->li_tab[k]) k = (k + 1) & mask;
            m->li_tab[k] = i + 1;
        }
        for (h = hash_state(s) & mask; m->li_tab[h];) h = (h + 1) & mask;
    }
    if (!m->li_chunk[m->li_n / INFO_CHUNK] &&
        !(m->li_chunk[m->li_n / INFO_CHUNK] = malloc(INFO_CHUNK * sizeof(state_info))))
        return NULL;
    state_info *e = info_at(m, m->li_n);
    *e = (state_info){.state = s, .utf8_dest = UNKNOWN, .end_q = -1};
    m->li_tab[h] = ++m->li_n;
    return e;
}

/* The known destination of ASCII byte b from the state of info e, or UNKNOWN (not asked yet, dead,
 * or beyond the classes). */
static inline int32_t known_dest(const state_info *e, uint8_t b) {
    const uint64_t bit = 1ull << (b & 63);
    if (!(e->tested[b >> 6] & bit)) return UNKNOWN;
    for (int32_t k = 0; k < e->n_cls; k++)
        if (e->cls[k][b >> 6] & bit) return e->dest[k];
    return UNKNOWN;
}

/* Asks the store where ASCII byte b leads from e's state and files the answer. */
static void learn(kn_gmatch *m, state_info *e, uint8_t b) {
    const uint64_t bit = 1ull << (b & 63);
    e->tested[b >> 6] |= bit;
    m->stats.probes++;
    const int32_t d = kn_gstore_step(m->store, e->state, b);
    if (d < 0) return;
    for (int32_t k = 0; k < e->n_cls; k++)
        if (e->dest[k] == d) {
            e->cls[k][b >> 6] |= bit;
            return;
        }
    if (e->n_cls == N_CLASSES) return;
    e->dest[e->n_cls] = d;
    e->cls[e->n_cls][0] = e->cls[e->n_cls][1] = 0;
    e->cls[e->n_cls++][b >> 6] |= bit;
}

/* The one live state every byte of ascii[2] (not empty) leads to from e's state, or UNKNOWN when
 * they lead to different states or one is dead. Asks the store only as far as needed. */
static int32_t common_dest(kn_gmatch *m, state_info *e, const uint64_t ascii[2]) {
    int32_t k = -1; /* the class the bytes asked about so far are all in */
    for (int w = 0; w < 2 && k < 0; w++) {
        const uint64_t t = ascii[w] & e->tested[w];
        if (!t) continue;
        const uint64_t one = t & -t;
        for (int32_t j = 0; j < e->n_cls; j++)
            if (e->cls[j][w] & one) k = j;
        if (k < 0) return UNKNOWN; /* dead or beyond the classes */
    }
    for (int w = 0; w < 2; w++)
        if (k >= 0 && (ascii[w] & e->tested[w] & ~e->cls[k][w])) return UNKNOWN;
    for (int w = 0; w < 2; w++) {
        uint64_t need = ascii[w] & ~e->tested[w];
        while (need) {
            const int bit = __builtin_ctzll(need);
            need &= need - 1;
            learn(m, e, (uint8_t)(w * 64 + bit));
            const int32_t d = known_dest(e, (uint8_t)(w * 64 + bit));
            if (d == UNKNOWN || (k >= 0 && d != e->dest[k])) return UNKNOWN;
            if (k < 0)
                for (int32_t j = 0; j < e->n_cls; j++)
                    if (e->dest[j] == d) k = j;
        }
    }
    return k >= 0 ? e->dest[k] : UNKNOWN;
}

/* Remembers the pair (state, validator state q) as seen; false when it was seen already or the
 * table is full (*full then set). */
static bool visit(kn_gmatch *m, int32_t state, int q, bool *full) {
    const uint64_t key = ((uint64_t)(uint32_t)state << 4 | (uint64_t)q) + 1;
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & (UTF8_VISITED_SLOTS - 1);
    for (uint32_t probes = 0; probes < UTF8_VISITED_SLOTS; probes++) {
        if (m->visited[h] == key) return false;
        if (!m->visited[h]) {
            m->visited[h] = key;
            return true;
        }
        h = (h + 1) & (UTF8_VISITED_SLOTS - 1);
    }
    *full = true;
    return false;
}

/* The continuation bytes that may come next in each state of the UTF-8 validator (vtrie.h) inside a
 * character: every one of them leads to the same next validator state. */
static const uint8_t U8_CONT[KN_U8_STATES][2] = {{0, 0},       {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF},
                                                 {0xA0, 0xBF}, {0x80, 0x9F}, {0x90, 0xBF}, {0x80, 0x8F}};

/* Files dest, reached over a byte that leaves the validator in state q2, in an exploration of
 * utf8_leads_dest: a character's end must be *to (set by the first), a state inside one is queued
 * once. False when the exploration fails: dest dead, a second end, or the visited table full. */
static bool file_dest(kn_gmatch *m, int32_t dest, int q2, int32_t *to, size_t *n_todo) {
    bool full = false;
    if (dest < 0) return false;
    if (q2 == KN_U8_BOUNDARY) {
        if (*to == UNKNOWN) *to = dest;
        return dest == *to;
    }
    if (visit(m, dest, q2, &full)) m->todo[(*n_todo)++] = (uint64_t)(uint32_t)dest << 4 | (uint64_t)q2;
    return !full;
}

/* The one live state every well-formed multi-byte UTF-8 character with a lead byte in [lo, hi] (one
 * kind's, kn_u8_kind) leads to from state s (every prefix alive on the way), or KN_GS_DEAD when
 * there is none. Explores the store over (state, validator state) pairs, each over its whole range
 * of next bytes in one step where the state takes them alike (kn_gstore_step_range), byte by byte
 * where not; gives up (KN_GS_DEAD) beyond UTF8_STEPS_MAX steps or UTF8_VISITED_SLOTS pairs. */
static int32_t utf8_leads_dest(kn_gmatch *m, int32_t s, int lo, int hi) {
    memset(m->visited, 0, sizeof m->visited);
    size_t n_todo = 0, steps = 0;
    int32_t to = UNKNOWN;
    bool ok = true;
    for (bool first = true; ok && (first || n_todo); first = false) {
        int32_t s1 = s;
        int q = KN_U8_BOUNDARY, a = lo, b = hi;
        if (!first) {
            const uint64_t item = m->todo[--n_todo];
            s1 = (int32_t)(item >> 4);
            q = (int)(item & 15);
            a = U8_CONT[q][0];
            b = U8_CONT[q][1];
        }
        const int q2 = kn_u8_next(q, (uint8_t)a); /* the same for every byte of [a, b] */
        const int32_t d = kn_gstore_step_range(m->store, s1, (uint8_t)a, (uint8_t)b);
        steps++;
        if (d != KN_GS_MIXED) {
            ok = file_dest(m, d, q2, &to, &n_todo);
            continue;
        }
        for (int c = a; ok && c <= b; c++) {
            ok = ++steps <= UTF8_STEPS_MAX && file_dest(m, kn_gstore_step(m->store, s1, (uint8_t)c), q2, &to, &n_todo);
        }
    }
    m->stats.probes += steps;
    return ok && to != UNKNOWN ? to : KN_GS_DEAD;
}

/* The one live state every multi-byte character with a lead byte in `leads` (kn_u8_lead_bit) leads
 * to from e's state, or UNKNOWN. A kind's lead bytes are explored together first (once per state:
 * inside a string every character goes the same way); a kind whose characters go different ways
 * (a class such as \p{L}) is then explored one lead byte at a time, as the summaries ask. */
static int32_t utf8_dest(kn_gmatch *m, state_info *e, uint64_t leads) {
    static const uint8_t kind_lead[KN_U8_KINDS][2] = {{0xC2, 0xDF}, {0xE0, 0xE0}, {0xE1, 0xEC}, {0xED, 0xED},
                                                      {0xEE, 0xEF}, {0xF0, 0xF0}, {0xF1, 0xF3}, {0xF4, 0xF4}};
    if (leads & e->u8_bad) return UNKNOWN;
    for (uint64_t todo = leads & ~e->u8_ok; todo; todo = leads & ~e->u8_ok) {
        const int lead = KN_U8_LEAD_FIRST + __builtin_ctzll(todo);
        const int k = kn_u8_kind((uint8_t)lead);
        const bool whole = !(e->u8_split >> k & 1);
        const int lo = whole ? kind_lead[k][0] : lead, hi = whole ? kind_lead[k][1] : lead;
        const uint64_t span = (kn_u8_lead_bit((uint8_t)hi) << 1) - kn_u8_lead_bit((uint8_t)lo);
        const int32_t d = utf8_leads_dest(m, e->state, lo, hi); /* (leaves the infos alone) */
        if (d >= 0 && (!e->u8_ok || d == e->utf8_dest)) {
            e->utf8_dest = d;
            e->u8_ok |= span;
            continue;
        }
        if (d < 0 && whole && lo < hi) {
            e->u8_split |= (uint16_t)(1u << k); /* its lead bytes one by one */
            continue;
        }
        e->u8_bad |= d < 0 ? kn_u8_lead_bit((uint8_t)lead) : span;
        return UNKNOWN;
    }
    return e->utf8_dest;
}

/* The class of e's ASCII bytes that lead to state d (none: zeros). */
static const uint64_t *class_to(const state_info *e, int32_t d) {
    static const uint64_t none[2];
    for (int32_t k = 0; k < e->n_cls; k++)
        if (e->dest[k] == d) return e->cls[k];
    return none;
}

/* Whether every text of `below` characters at most over the ASCII bytes and lead bytes of sum
 * keeps state s alive: each character the summary allows moves s to one live state s1, s1 to one
 * live s2, and so on for `below` characters, or until the chain reaches a state that goes to
 * itself. *sic is s's info when known (else NULL), and is set to it. A chain that holds is
 * remembered in s's info as the characters every one of its steps takes alike (the intersection of
 * the classes it went through), so that the summaries of the next subtrees within them pass at
 * once: the siblings of a walk through a string ask the same state about a few hundred summaries
 * of the same characters. */
static bool chain_ok(kn_gmatch *m, int32_t s, const kn_vsum *sum, uint32_t below, state_info **sic) {
    const bool has_ascii = sum->ascii[0] | sum->ascii[1];
    const uint64_t leads = sum->leads;
    if (!has_ascii && !leads) return true; /* the texts only end a character */
    state_info *e = *sic;
    if (!e && !(e = *sic = info_of(m, s))) return false;
    if (below <= e->run_len && !(sum->ascii[0] & ~e->run_ascii[0]) && !(sum->ascii[1] & ~e->run_ascii[1]) &&
        !(leads & ~e->run_leads))
        return true;
    state_info *const first = e;
    uint64_t ascii[2] = {~0ull, ~0ull}, alike_leads = ~0ull; /* what every step so far takes alike */
    uint32_t len = 0;
    for (; len < below; len++) {
        if (len && !(e = info_of(m, s))) return false;
        int32_t next = has_ascii ? common_dest(m, e, sum->ascii) : UNKNOWN;
        if (has_ascii && next == UNKNOWN) return false;
        if (leads) {
            const int32_t u = utf8_dest(m, e, leads);
            if (u == UNKNOWN || (has_ascii && u != next)) return false;
            next = u;
        }
        const uint64_t *c = class_to(e, next);
        ascii[0] &= c[0];
        ascii[1] &= c[1];
        alike_leads &= e->utf8_dest == next ? e->u8_ok : 0;
        if (next == s) { /* a loop: any number of characters more */
            len = RUN_LOOP;
            break;
        }
        s = next;
    }
    if (len == below && below >= KN_VTRIE_BELOW_MAX) return false; /* a saturated depth needs a loop */
    if (len >= first->run_len || !first->run_len) {
        first->run_ascii[0] = ascii[0];
        first->run_ascii[1] = ascii[1];
        first->run_leads = alike_leads;
        first->run_len = len;
    }
    return true;
}

/* The one live state every way of ending the character begun in state s leads to, the character's
 * remaining bytes allowed by validator state q (inside a character), or KN_GS_DEAD; remembered in
 * e, s's info, for the last q asked. */
static int32_t char_end(kn_gmatch *m, state_info *e, int q) {
    if (e->end_q == q) return e->end_dest;
    e->end_q = (int8_t)q;
    int32_t s = e->state;
    while (q != KN_U8_BOUNDARY && s >= 0) {
        s = kn_gstore_step_range(m->store, s, U8_CONT[q][0], U8_CONT[q][1]);
        m->stats.probes++;
        q = kn_u8_next(q, U8_CONT[q][0]);
    }
    e->end_dest = s < 0 ? KN_GS_DEAD : s; /* (KN_GS_MIXED: the bytes go different ways) */
    return e->end_dest;
}

/* Whether every token of a subtree with summary sum and at most `below` bytes per token keeps state
 * s alive (chain_ok over the summary's characters). Texts that begin inside a character (the node
 * is inside one) first end it: every way of ending it must lead to one state, from which the rest
 * of the texts chain. *sic as chain_ok's. */
static bool subtree_ok(kn_gmatch *m, int32_t s, const kn_vsum *sum, uint32_t below, state_info **sic) {
    if (sum->valid & 1u << KN_U8_BOUNDARY) return chain_ok(m, s, sum, below, sic);
    const unsigned inside = sum->valid & ~(1u << KN_U8_BOUNDARY);
    if (!inside || (!*sic && !(*sic = info_of(m, s)))) return false; /* not UTF-8 from any state */
    const int32_t d = char_end(m, *sic, __builtin_ctz(inside));
    if (d < 0) return false;
    state_info *de = NULL;
    m->stats.inside++;
    return chain_ok(m, d, sum, below < KN_VTRIE_BELOW_MAX ? below - 1 : below, &de);
}

/* ---- the walk ----------------------------------------------------------------------------------- */

/* Appends the sorted range [a, b) to the allowed ranges (merging with the last one). */
static bool add_range(kn_gmatch *m, uint32_t a, uint32_t b) {
    if (a >= b) return true;
    if (m->n_rng && m->rng[2 * m->n_rng - 1] == a) {
        m->rng[2 * m->n_rng - 1] = b;
        return true;
    }
    if (m->n_rng == m->cap_rng) {
        uint32_t *nr = realloc(m->rng, m->cap_rng * 4 * sizeof *nr);
        if (!nr) return false;
        m->rng = nr;
        m->cap_rng *= 2;
    }
    m->rng[2 * m->n_rng] = a;
    m->rng[2 * m->n_rng + 1] = b;
    m->n_rng++;
    return true;
}

/* Records the matcher's failure: status st (KILN_ERR_NOMEM or KILN_ERR_UNSUPPORTED), message why. */
static void set_failed(kn_gmatch *m, kiln_status st, const char *why) {
    snprintf(m->errbuf, sizeof m->errbuf, "%s", why);
    m->err = m->errbuf;
    m->err_st = st;
}

/* Records the store's failure (kn_gstore_failed, kn_gstore_fail_status). */
static void store_failed(kn_gmatch *m, const char *why) {
    kiln_status st = kn_gstore_fail_status(m->store);
    set_failed(m, st ? st : KILN_ERR_NOMEM, why);
}

/* Walks trie t (the matcher's, or its exception trie) from state s0 and collects the allowed ranges
 * of t's sorted indices; false on failure (m->err set). */
static bool walk(kn_gmatch *m, const kn_vtrie *t, int32_t s0, bool strip) {
    const kn_vnode *nd = t->nodes;
    const bool subtrees = !(m->flags & KN_GMATCH_NO_SUBTREE);
    int32_t *st = m->st;
    state_info **lp = m->lp;
    m->n_rng = 0;
    if (m->li_n > INFO_MAX / 2) clear_infos(m);
    st[0] = s0;
    lp[0] = NULL;
    if (subtrees && nd[0].sum && subtree_ok(m, s0, &t->sums[nd[0].sum], nd[0].below, &lp[0])) {
        m->stats.subtrees++;
        return add_range(m, 0, (uint32_t)t->n_text);
    }
    const uint32_t end = t->n_nodes;
    uint64_t steps = 0;
    for (uint32_t i = 1; i < end;) {
        const kn_vnode *n = &nd[i];
        const int32_t parent = st[n->depth - 1];
        state_info *pl = lp[n->depth - 1];
        int32_t s = UNKNOWN;
        if (strip && n->depth == 1 && n->byte == ' ') {
            s = parent; /* the first token's leading space is not output */
        } else if (pl && n->byte < 128) {
            s = known_dest(pl, n->byte); /* learnt already: no need to ask the store */
        }
        if (s == UNKNOWN) {
            s = kn_gstore_step(m->store, parent, n->byte);
            steps++;
        }
        if (s < 0) {
            const char *why = kn_gstore_failed(m->store);
            if (why) {
                m->stats.nodes += steps;
                store_failed(m, why);
                return false;
            }
            i = n->skip;
            continue;
        }
        st[n->depth] = s;
        lp[n->depth] = s == parent ? pl : NULL;
        if (subtrees && n->sum && subtree_ok(m, s, &t->sums[n->sum], n->below, &lp[n->depth])) {
            m->stats.subtrees++;
            if (!add_range(m, n->lo, nd[n->skip].lo)) goto nomem;
            i = n->skip;
            continue;
        }
        if (!add_range(m, n->lo, nd[i + 1].lo)) goto nomem;
        i++;
    }
    m->stats.nodes += steps;
    return true;
nomem:
    m->stats.nodes += steps;
    set_failed(m, KILN_ERR_NOMEM, "out of memory computing a token mask");
    return false;
}

/* Turns the allowed ranges of the exception trie into the bitmap by id, over every plain token
 * allowed; returns the count of allowed tokens with text. */
static int32_t scatter_exc(kn_gmatch *m, uint64_t *mask) {
    const kn_vtrie *t = m->t, *x = t->exc;
    memcpy(mask, t->plain_bits, (size_t)t->words * sizeof *mask);
    int64_t count = t->n_plain;
    for (size_t r = 0; r < m->n_rng; r++) {
        for (uint32_t k = m->rng[2 * r]; k < m->rng[2 * r + 1]; k++)
            mask[x->order[k] >> 6] |= 1ull << (x->order[k] & 63);
        count += m->rng[2 * r + 1] - m->rng[2 * r];
    }
    return (int32_t)count;
}

/* Whether every plain token (vtrie.h) keeps state s alive, so that only the exceptions need a walk. */
static bool plain_ok(kn_gmatch *m, int32_t s) {
    const kn_vtrie *t = m->t;
    if (!t->exc || (m->flags & KN_GMATCH_NO_SUBTREE)) return false;
    for (int g = 0; g < 2; g++) {
        state_info *e = NULL;
        if (t->plain_below[g] && !subtree_ok(m, s, &t->plain_sum[g], t->plain_below[g], &e)) return false;
    }
    return true;
}

/* Turns the allowed ranges into the bitmap by id; returns the count of allowed tokens with text. */
static int32_t scatter(kn_gmatch *m, uint64_t *mask) {
    const kn_vtrie *t = m->t;
    const int32_t *order = t->order;
    const size_t W = (size_t)t->words;
    int64_t count = 0;
    for (size_t r = 0; r < m->n_rng; r++) count += m->rng[2 * r + 1] - m->rng[2 * r];
    if (2 * count <= t->n_text) {
        memset(mask, 0, W * sizeof *mask);
        for (size_t r = 0; r < m->n_rng; r++)
            for (uint32_t k = m->rng[2 * r]; k < m->rng[2 * r + 1]; k++) mask[order[k] >> 6] |= 1ull << (order[k] & 63);
    } else {
        memcpy(mask, t->text_bits, W * sizeof *mask);
        uint32_t prev = 0;
        for (size_t r = 0; r <= m->n_rng; r++) {
            const uint32_t a = r < m->n_rng ? m->rng[2 * r] : (uint32_t)t->n_text;
            for (uint32_t k = prev; k < a; k++) mask[order[k] >> 6] &= ~(1ull << (order[k] & 63));
            if (r < m->n_rng) prev = m->rng[2 * r + 1];
        }
    }
    return (int32_t)count;
}

/* The reference mask: every token's text stepped through the store byte by byte. Returns the count
 * of allowed tokens with text, or -1 on failure (m->err set). */
static int32_t plain_mask(kn_gmatch *m, int32_t s0, bool strip, uint64_t *mask) {
    const kn_vtrie *t = m->t;
    memset(mask, 0, (size_t)t->words * sizeof *mask);
    int32_t count = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const uint8_t *p = t->text + t->tok_off[id];
        uint32_t len = t->tok_len[id];
        if (!len) continue;
        if (strip && p[0] == ' ') {
            p++;
            len--;
        }
        int32_t s = s0;
        for (uint32_t k = 0; k < len && s >= 0; k++) s = kn_gstore_step(m->store, s, p[k]);
        if (s < 0) {
            const char *why = kn_gstore_failed(m->store);
            if (why) {
                store_failed(m, why);
                return -1;
            }
            continue;
        }
        mask[id >> 6] |= 1ull << (id & 63);
        count++;
    }
    return count;
}

/* Adds the end-of-generation tokens when state s is accepting; returns how many were added. */
static int32_t add_eog(kn_gmatch *m, int32_t s, uint64_t *mask) {
    if (!m->t->n_eog || !kn_gstore_accepting(m->store, s)) return 0;
    for (int32_t i = 0; i < m->t->n_eog; i++) mask[m->t->eog[i] >> 6] |= 1ull << (m->t->eog[i] & 63);
    return m->t->n_eog;
}

const uint64_t *kn_gmatch_mask(kn_gmatch *m, int32_t *n_allowed) {
    m->err = NULL;
    m->stats.masks++;
    /* the state whose counters sit at the first values of their classes: the same mask, so a
     * string with a maxLength finds its masks in the cache while far from its bounds */
    const int32_t s = (m->flags & KN_GMATCH_PLAIN) ? m->cur : kn_gstore_canon(m->store, m->cur, m->t->max_depth);
    const bool cached = m->c_slots && !m->strip; /* the first mask with a stripped space is its own */
    uint64_t *mask = m->mask;
    if (cached) {
        const uint32_t slot = (uint32_t)s & (m->c_slots - 1);
        mask = m->c_bits + (size_t)slot * (size_t)m->t->words;
        if (m->c_state[slot] == s) {
            m->stats.cache_hits++;
            *n_allowed = m->c_count[slot];
            if (!*n_allowed) m->err = "no token of the vocabulary can continue the grammar's text here";
            return mask;
        }
        m->c_state[slot] = -1;
    }
    int32_t count;
    if (m->flags & KN_GMATCH_PLAIN) {
        count = plain_mask(m, s, m->strip, mask);
    } else {
        if (m->li_n > INFO_MAX / 2) clear_infos(m);
        if (!m->strip && plain_ok(m, s)) {
            m->stats.plain++;
            count = walk(m, m->t->exc, s, false) ? scatter_exc(m, mask) : -1;
        } else count = walk(m, m->t, s, m->strip) ? scatter(m, mask) : -1;
    }
    if (count < 0) {
        memset(mask, 0, (size_t)m->t->words * sizeof *mask);
        *n_allowed = 0;
        return mask;
    }
    count += add_eog(m, s, mask);
    if (cached) {
        const uint32_t slot = (uint32_t)s & (m->c_slots - 1);
        m->c_state[slot] = s;
        m->c_count[slot] = count;
    }
    *n_allowed = count;
    if (!count) m->err = "no token of the vocabulary can continue the grammar's text here";
    return mask;
}

/* ---- advancing ---------------------------------------------------------------------------------- */

/* Steps the current state over p[len] into *out; the status kn_gmatch_accept returns for tok. */
static kiln_status step_bytes(kn_gmatch *m, const uint8_t *p, size_t len, int32_t tok, int32_t *out) {
    int32_t s = m->cur;
    for (size_t k = 0; k < len; k++) {
        s = kn_gstore_step(m->store, s, p[k]);
        if (s < 0) {
            const char *why = kn_gstore_failed(m->store);
            if (why) {
                store_failed(m, why);
                return kn_error(m->err_st, "the grammar matcher failed: %s", why);
            }
            if (tok < 0) return kn_error(KILN_ERR_INVALID_ARG, "the text does not continue the grammar's text");
            return kn_error(KILN_ERR_INVALID_ARG, "token %d does not continue the grammar's text", tok);
        }
    }
    *out = s;
    return KILN_OK;
}

/* Makes s the current state, compacting the store when it is full. */
static kiln_status move_to(kn_gmatch *m, int32_t s) {
    m->cur = s;
    m->strip = false;
    if (kn_gstore_full(m->store)) { /* only the current state matters: forget the rest */
        m->cur = kn_gstore_compact(m->store, s);
        clear_cache(m);
        clear_infos(m);
        m->stats.compactions++;
        if (m->cur < 0) {
            const char *why = kn_gstore_failed(m->store);
            store_failed(m, why ? why : "the grammar's state store could not be compacted");
            return kn_error(m->err_st, "the grammar matcher failed: %s", m->errbuf);
        }
    }
    return KILN_OK;
}

kiln_status kn_gmatch_feed(kn_gmatch *m, const char *text, size_t len) {
    m->err = NULL;
    int32_t s = m->cur;
    kiln_status st = step_bytes(m, (const uint8_t *)text, len, -1, &s);
    return st ? st : move_to(m, s);
}

kiln_status kn_gmatch_accept(kn_gmatch *m, int32_t tok) {
    m->err = NULL;
    const kn_vtrie *t = m->t;
    if (tok < 0 || tok >= t->n_vocab) return kn_error(KILN_ERR_INVALID_ARG, "token %d is outside the vocabulary", tok);
    if (t->eog_bits[tok >> 6] >> (tok & 63) & 1) {
        if (kn_gstore_accepting(m->store, m->cur)) return KILN_OK;
        return kn_error(KILN_ERR_INVALID_ARG, "end of generation (token %d) before the grammar's text is complete",
                        tok);
    }
    const uint8_t *p = t->text + t->tok_off[tok];
    uint32_t len = t->tok_len[tok];
    if (!len) return kn_error(KILN_ERR_INVALID_ARG, "token %d has no text; the grammar does not allow it", tok);
    if (m->strip && p[0] == ' ') {
        p++;
        len--;
    }
    int32_t s = m->cur;
    kiln_status st = step_bytes(m, p, len, tok, &s);
    return st ? st : move_to(m, s);
}

bool kn_gmatch_accepting(const kn_gmatch *m) { return kn_gstore_accepting(m->store, m->cur); }
bool kn_gmatch_final(kn_gmatch *m) { return kn_gstore_final(m->store, m->cur); }
const char *kn_gmatch_error(const kn_gmatch *m) { return m->err; }
bool kn_gmatch_failed(const kn_gmatch *m) { return m->err == m->errbuf; }
kiln_status kn_gmatch_fail_status(const kn_gmatch *m) { return m->err == m->errbuf ? m->err_st : KILN_OK; }
void kn_gmatch_get_stats(const kn_gmatch *m, kn_gmatch_stats *out) { *out = m->stats; }
