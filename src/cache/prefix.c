/*
 * prefix.c - the prefix cache's RAM tier (see prefix.h).
 *
 * Entries live in one doubly linked list in LRU order. Lookups scan it and compare token prefixes:
 * even a cache of hundreds of thousands of tokens scans in well under a millisecond, far less than
 * computing one token of KV. K/V are copied outside the lock; an entry being copied holds a
 * reference, and an entry dropped meanwhile (evicted or superseded) is freed by its last user.
 * The same reference keeps an entry alive while the SSD writer holds it (an evicted entry then
 * lives on, outside the budget, until its file is written; the writer caps those bytes).
 * A paged entry (from a cache with a pool) holds a reference to each block of its positions instead
 * of a copy; a restore into a cache of the same pool maps them (kn_kv_map), any other pairing of
 * entry and cache copies rows; the SSD writer gathers a paged entry's rows on its own thread.
 * Lock order: the cache's lock may be held while kn_ssd_enqueue takes the SSD tier's; the SSD
 * tier never calls back into the cache (entry_released, idle_hook) with its own lock held.
 */
#include "cache/prefix.h"

#include <stdlib.h>
#include <string.h>

struct kn_pc_entry {
    kn_pc_entry *prev, *next;
    kn_prefix_cache *pc;
    int32_t *tokens; /* [n] */
    int32_t n;
    kn_kv_format fmt; /* the KV format of its rows (an entry serves only caches of the same) */
    int32_t n_layer, kv_dim, head_dim;
    uint8_t *k, *v;   /* [n_layer][n][k_row], [n_layer][n][v_row] (kv.h), or NULL when paged */
    kn_kv_pool *pool; /* paged: its rows lie in pool blocks ids[n_ids], one reference each */
    int32_t *ids;
    int32_t n_ids;
    uint8_t **blk; /* [n_ids] the blocks' memory */
    kn_kv view;    /* paged: a cache of n positions over those blocks (reading only; owns nothing) */
    size_t bytes;
    int refs;                /* copies in progress + SSD jobs holding it */
    bool linked;             /* in the list (else dropped, freed when refs reach 0) */
    bool on_ssd;             /* a file covers its tokens (written, or restored from one) */
    bool queued;             /* handed to the SSD writer, not released yet */
    bool ssd_failed;         /* its last write failed: idle demotion does not retry it */
    bool in_limbo;           /* evicted, in pc->limbo until the SSD writer is done with it */
    double last_used;        /* kn_now_ms of its creation or last hit */
    kn_pc_entry *spill_next; /* chain of entries being handed to the SSD writer */
};

void kn_pc_init(kn_prefix_cache *pc, size_t budget) {
    memset(pc, 0, sizeof *pc);
    pthread_mutex_init(&pc->mu, NULL);
    pc->budget = budget;
}

static void entry_free(kn_pc_entry *e) {
    for (int32_t i = 0; e->ids && i < e->n_ids; i++) kn_kvp_unref(e->pool, e->ids[i]);
    free(e->ids);
    free(e->blk);
    free(e->tokens);
    free(e->k);
    free(e->v);
    free(e);
}

/* Unlinks e (lock held); frees it unless a copy or an SSD job holds it. */
static void drop_locked(kn_prefix_cache *pc, kn_pc_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else pc->head = e->next;
    if (e->next) e->next->prev = e->prev;
    e->prev = e->next = NULL;
    e->linked = false;
    pc->bytes -= e->bytes;
    pc->n_entries--;
    if (!e->refs) entry_free(e);
}

static void push_front_locked(kn_prefix_cache *pc, kn_pc_entry *e) {
    e->prev = NULL;
    e->next = pc->head;
    if (pc->head) pc->head->prev = e;
    pc->head = e;
}

static void touch_locked(kn_prefix_cache *pc, kn_pc_entry *e) {
    e->last_used = kn_now_ms();
    if (pc->head == e) return;
    e->prev->next = e->next;
    if (e->next) e->next->prev = e->prev;
    push_front_locked(pc, e);
}

static void limbo_unlink_locked(kn_prefix_cache *pc, kn_pc_entry *e);

void kn_pc_free(kn_prefix_cache *pc) {
    while (pc->head) drop_locked(pc, pc->head);
    while (pc->limbo) { /* only when the SSD tier was not closed first */
        kn_pc_entry *e = pc->limbo;
        limbo_unlink_locked(pc, e);
        entry_free(e);
    }
    pthread_mutex_destroy(&pc->mu);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Whether e's rows fit kv's layout: same format, layers and heads. */
static bool same_layout(const kn_pc_entry *e, const kn_kv *kv) {
    return kn_kv_format_eq(&e->fmt, &kv->fmt) && e->n_layer == kv->n_layer && e->kv_dim == kv->kv_dim &&
           e->head_dim == kv->head_dim;
}

/* ---- the SSD tier's side ----------------------------------------------------------------------- */

/* Evicted entries on their way to SSD stay findable (in pc->limbo, outside the budget) until
 * their file exists, so a request arriving meanwhile still hits. Lock held. */
static void limbo_push_locked(kn_prefix_cache *pc, kn_pc_entry *e) {
    e->in_limbo = true;
    e->prev = NULL;
    e->next = pc->limbo;
    if (pc->limbo) pc->limbo->prev = e;
    pc->limbo = e;
}

static void limbo_unlink_locked(kn_prefix_cache *pc, kn_pc_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else pc->limbo = e->next;
    if (e->next) e->next->prev = e->prev;
    e->prev = e->next = NULL;
    e->in_limbo = false;
}

/* Drops the SSD writer's reference on e (lock held); records whether a file now covers it. */
static void release_locked(kn_prefix_cache *pc, kn_pc_entry *e, bool on_ssd) {
    if (e->in_limbo) limbo_unlink_locked(pc, e);
    e->queued = false;
    if (on_ssd) e->on_ssd = true;
    e->ssd_failed = !on_ssd;
    if (--e->refs == 0 && !e->linked) entry_free(e);
}

/* The SSD writer is done with e (called on its thread). */
static void entry_released(void *user, bool on_ssd) {
    kn_pc_entry *e = user;
    kn_prefix_cache *pc = e->pc;
    pthread_mutex_lock(&pc->mu);
    release_locked(pc, e, on_ssd);
    pthread_mutex_unlock(&pc->mu);
}

/* The SSD writer's copy of a paged entry's rows (on its thread; the entry's blocks are never
 * written while it holds them). */
static void entry_gather(void *user, uint8_t *k, uint8_t *v) {
    const kn_pc_entry *e = user;
    kn_kv_get_rows(&e->view, e->n, k, (size_t)e->n * e->view.k_row, v, (size_t)e->n * e->view.v_row);
}

/* Hands a chain of entries (each with a reference taken and queued set) to the SSD writer (lock
 * held, so that a flush that finds an entry queued also finds its job in the writer's queue).
 * Entries out of RAM (evicted, or never linked) count against the writer's pending-memory cap.
 * kn_ssd_enqueue takes only the writer's lock and never calls back. */
static void spill_locked(kn_prefix_cache *pc, kn_pc_entry *chain) {
    for (kn_pc_entry *e = chain, *next; e; e = next) {
        next = e->spill_next;
        e->spill_next = NULL;
        const kn_ssd_src src = {.tokens = e->tokens,
                                .n = e->n,
                                .k = e->k,
                                .v = e->v,
                                .outside_bytes = e->linked ? 0 : e->bytes,
                                .gather = entry_gather,
                                .release = entry_released,
                                .user = e};
        if (!kn_ssd_enqueue(pc->ssd, &src)) release_locked(pc, e, false);
    }
}

/* Takes a reference on e for the SSD writer and chains it (lock held). */
static void chain_locked(kn_pc_entry *e, kn_pc_entry **chain) {
    e->refs++;
    e->queued = true;
    e->spill_next = *chain;
    *chain = e;
}

/* The writer's idle hook: entries unused for demote_idle_ms and not on SSD yet are written (they
 * stay in RAM). Returns the ms until the next one comes due, or -1. */
static double idle_hook(void *user, double now) {
    kn_prefix_cache *pc = user;
    kn_pc_entry *chain = NULL;
    double next = -1;
    pthread_mutex_lock(&pc->mu);
    for (kn_pc_entry *e = pc->head; e; e = e->next) {
        if (e->on_ssd || e->queued || e->ssd_failed) continue;
        const double due = e->last_used + pc->demote_idle_ms;
        if (due <= now) chain_locked(e, &chain);
        else if (next < 0 || due - now < next) next = due - now;
    }
    spill_locked(pc, chain);
    pthread_mutex_unlock(&pc->mu);
    return next;
}

void kn_pc_attach_ssd(kn_prefix_cache *pc, kn_ssd *ssd, double demote_idle_ms) {
    pc->ssd = ssd;
    pc->demote_idle_ms = demote_idle_ms;
    kn_ssd_set_idle_hook(ssd, idle_hook, pc);
}

void kn_pc_detach_ssd(kn_prefix_cache *pc) { pc->ssd = NULL; }

kiln_status kn_pc_flush(kn_prefix_cache *pc, int timeout_ms) {
    if (!pc->ssd) return KILN_OK;
    kn_pc_entry *chain = NULL;
    pthread_mutex_lock(&pc->mu);
    for (kn_pc_entry *e = pc->head; e; e = e->next)
        if (!e->on_ssd && !e->queued) chain_locked(e, &chain);
    spill_locked(pc, chain);
    pthread_mutex_unlock(&pc->mu);
    return kn_ssd_flush(pc->ssd, timeout_ms);
}

/* ---- lookup ------------------------------------------------------------------------------------ */

/* The entry sharing the longest prefix with tokens[0..n) (most recent first wins ties; then the
 * entries in limbo) in kv's layout; *m gets the length (0 and NULL on a miss). Lock held. */
static kn_pc_entry *find_locked(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, const kn_kv *kv, int32_t *m) {
    kn_pc_entry *best = NULL;
    *m = 0;
    for (int list = 0; list < 2; list++)
        for (kn_pc_entry *e = list ? pc->limbo : pc->head; e; e = e->next) {
            if (!same_layout(e, kv)) continue;
            const int32_t c = common_prefix(e->tokens, e->n, tokens, n);
            if (c > *m) {
                *m = c;
                best = e;
            }
        }
    return best;
}

int32_t kn_pc_restore(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, int32_t max_use, kn_kv *kv) {
    if (!pc->budget && !pc->ssd) return 0;
    const int32_t cap = KN_MIN(KN_MIN(n, max_use), kv->n_ctx);
    int32_t m = 0;
    pthread_mutex_lock(&pc->mu);
    kn_pc_entry *best = cap > 0 ? find_locked(pc, tokens, cap, kv, &m) : NULL;
    if (pc->ssd && cap > 0) {
        /* The SSD tier reads its match only when it is longer than RAM's. */
        pthread_mutex_unlock(&pc->mu);
        const int32_t ms = kn_ssd_restore(pc->ssd, tokens, cap, m, kv);
        if (ms > 0) {
            /* Not copied back into RAM here: the row publishes its whole sequence (this prefix
             * and more) when it ends, which does that anyway; an extra 2 x n_layer x ms rows
             * copied now would only lengthen the time to first token (measured: bench/prefix.sh). */
            pthread_mutex_lock(&pc->mu);
            pc->hits++;
            pc->hit_tokens += (uint64_t)ms;
            pthread_mutex_unlock(&pc->mu);
            return ms;
        }
        pthread_mutex_lock(&pc->mu);
        best = find_locked(pc, tokens, cap, kv, &m); /* the list may have changed meanwhile */
    }
    if (!best || m <= 0) {
        pc->misses++;
        pthread_mutex_unlock(&pc->mu);
        return 0;
    }
    pc->hits++;
    pc->hit_tokens += (uint64_t)m;
    best->refs++;
    if (best->linked) touch_locked(pc, best);
    pthread_mutex_unlock(&pc->mu);

    const size_t kr = kv->k_row, vr = kv->v_row, n_ctx = (size_t)kv->n_ctx, en = (size_t)best->n;
    if (best->pool && best->pool == kv->pool) {
        kn_kv_map(kv, best->ids, m); /* shared: the blocks are copied only where the row writes */
    } else if (best->pool) {         /* into a contiguous cache */
        kn_kv_get_rows(&best->view, m, kv->k, n_ctx * kr, kv->v, n_ctx * vr);
        kv->n_past = m;
    } else if (kv->pool) { /* a copied entry into a paged cache */
        kn_kv_reset(kv);
        if (kn_kv_put_rows(kv, m, best->k, en * kr, best->v, en * vr) != KILN_OK) m = 0, kv->n_past = 0;
    } else {
        for (int32_t l = 0; l < kv->n_layer; l++) {
            memcpy(kv->k + (size_t)l * n_ctx * kr, best->k + (size_t)l * en * kr, (size_t)m * kr);
            memcpy(kv->v + (size_t)l * n_ctx * vr, best->v + (size_t)l * en * vr, (size_t)m * vr);
        }
        kv->n_past = m;
    }

    pthread_mutex_lock(&pc->mu);
    const bool dead = --best->refs == 0 && !best->linked;
    pthread_mutex_unlock(&pc->mu);
    if (dead) entry_free(best);
    return m;
}

/* ---- eviction ---------------------------------------------------------------------------------- */

/* Evicts the least recently used entry (lock held; the list is not empty). Leaving RAM: to the SSD
 * writer (chained on *chain; where a file covers it already, that file's recency is refreshed),
 * unless a write of it is under way anyway; in limbo meanwhile. */
static void evict_tail_locked(kn_prefix_cache *pc, kn_pc_entry **chain) {
    kn_pc_entry *tail = pc->head;
    while (tail->next) tail = tail->next;
    const bool tail_held = pc->ssd != NULL;
    if (pc->ssd && !tail->queued) chain_locked(tail, chain);
    drop_locked(pc, tail);
    if (tail_held) limbo_push_locked(pc, tail);
    pc->evictions++;
}

bool kn_pc_evict_lru(kn_prefix_cache *pc) {
    kn_pc_entry *chain = NULL;
    pthread_mutex_lock(&pc->mu);
    const bool any = pc->head != NULL;
    if (any) evict_tail_locked(pc, &chain);
    if (pc->ssd) spill_locked(pc, chain);
    pthread_mutex_unlock(&pc->mu);
    return any;
}

/* ---- publishing -------------------------------------------------------------------------------- */

/* An entry too large for the budget (or any entry, with the RAM tier off) goes to the SSD writer
 * directly, when there is one. */
void kn_pc_publish(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, const kn_kv *kv, int32_t min_tokens) {
    if ((!pc->budget && !pc->ssd) || n < KN_MAX(min_tokens, 1) || n > kv->n_past) return;
    const size_t k_layer = (size_t)n * kv->k_row, v_layer = (size_t)n * kv->v_row;
    const int32_t n_ids = kv->pool ? (n + kv->bt - 1) / kv->bt : 0;
    const size_t data = kv->pool ? (size_t)n_ids * kv->blk_bytes : (size_t)kv->n_layer * (k_layer + v_layer);
    const size_t bytes = data + (size_t)n * sizeof(int32_t) + sizeof(kn_pc_entry);
    const bool fits = bytes <= pc->budget;
    if (!fits && !pc->ssd) return;
    /* Already covered by an entry (the same tokens or more)? Then only refresh its recency. */
    pthread_mutex_lock(&pc->mu);
    for (kn_pc_entry *e = pc->head; e; e = e->next) {
        if (e->n >= n && same_layout(e, kv) && common_prefix(e->tokens, e->n, tokens, n) == n) {
            touch_locked(pc, e);
            pthread_mutex_unlock(&pc->mu);
            return;
        }
    }
    pthread_mutex_unlock(&pc->mu);

    kn_pc_entry *ne = kn_calloc(1, sizeof *ne);
    if (!ne) return;
    ne->pc = pc;
    ne->n = n;
    ne->fmt = kv->fmt;
    ne->n_layer = kv->n_layer;
    ne->kv_dim = kv->kv_dim;
    ne->head_dim = kv->head_dim;
    ne->bytes = bytes;
    ne->last_used = kn_now_ms();
    ne->tokens = malloc((size_t)n * sizeof *ne->tokens);
    if (kv->pool) {
        ne->ids = malloc((size_t)n_ids * sizeof *ne->ids);
        ne->blk = malloc((size_t)n_ids * sizeof *ne->blk);
    } else {
        ne->k = malloc((size_t)kv->n_layer * k_layer);
        ne->v = malloc((size_t)kv->n_layer * v_layer);
    }
    if (!ne->tokens || (kv->pool ? !ne->ids || !ne->blk : !ne->k || !ne->v)) {
        KN_LOGW("prefix cache: out of memory storing %d tokens", n);
        free(ne->ids);
        ne->ids = NULL;
        entry_free(ne);
        return;
    }
    memcpy(ne->tokens, tokens, (size_t)n * sizeof *tokens);
    if (kv->pool) { /* the row's blocks, shared: a reference each, no copy */
        ne->pool = kv->pool;
        ne->n_ids = n_ids;
        for (int32_t i = 0; i < n_ids; i++) {
            kn_kvp_ref(kv->pool, kv->ids[i]);
            ne->ids[i] = kv->ids[i];
            ne->blk[i] = kv->blk[i];
        }
        ne->view = *kv; /* the shape; the blocks are the entry's */
        ne->view.n_ctx = n;
        ne->view.n_past = n;
        ne->view.n_blk = n_ids;
        ne->view.blk = ne->blk;
        ne->view.ids = ne->ids;
        ne->view.pool = NULL;
        ne->view.k = ne->view.v = NULL;
        ne->view.signs = NULL;
        ne->view.quota = 0;
    } else {
        for (int32_t l = 0; l < kv->n_layer; l++) {
            const size_t src = (size_t)l * (size_t)kv->n_ctx;
            memcpy(ne->k + (size_t)l * k_layer, kv->k + src * kv->k_row, k_layer);
            memcpy(ne->v + (size_t)l * v_layer, kv->v + src * kv->v_row, v_layer);
        }
    }
    if (!fits) { /* too large for RAM: straight to the SSD writer, which frees it when done */
        ne->refs = 1;
        ne->queued = true;
        pthread_mutex_lock(&pc->mu);
        spill_locked(pc, ne);
        pthread_mutex_unlock(&pc->mu);
        return;
    }

    kn_pc_entry *chain = NULL;
    pthread_mutex_lock(&pc->mu);
    for (kn_pc_entry *e = pc->head, *next; e; e = next) {
        next = e->next;
        if (!kn_kv_format_eq(&e->fmt, &ne->fmt) || e->n_layer != ne->n_layer || e->kv_dim != ne->kv_dim ||
            e->head_dim != ne->head_dim)
            continue;
        const int32_t c = common_prefix(e->tokens, e->n, tokens, n);
        if (c == n) { /* covered meanwhile by a concurrent publish */
            pthread_mutex_unlock(&pc->mu);
            entry_free(ne);
            return;
        }
        if (c == e->n) drop_locked(pc, e); /* superseded: the new entry extends it */
    }
    ne->linked = true;
    push_front_locked(pc, ne);
    pc->bytes += bytes;
    pc->n_entries++;
    while (pc->bytes > pc->budget && pc->head) evict_tail_locked(pc, &chain);
    if (pc->ssd) spill_locked(pc, chain);
    pthread_mutex_unlock(&pc->mu);
    if (pc->ssd) kn_ssd_kick(pc->ssd); /* the idle clock of the new entry starts */
}

void kn_pc_get_stats(kn_prefix_cache *pc, kn_pc_stats *out) {
    pthread_mutex_lock(&pc->mu);
    out->entries = pc->n_entries;
    out->bytes = pc->bytes;
    out->budget = pc->budget;
    out->hits = pc->hits;
    out->misses = pc->misses;
    out->hit_tokens = pc->hit_tokens;
    out->evictions = pc->evictions;
    pthread_mutex_unlock(&pc->mu);
}
