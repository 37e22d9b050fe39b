/*
 * prefix.c - the prefix cache's RAM tier (see prefix.h).
 *
 * Entries live in one doubly linked list in LRU order. Lookups scan it and compare token prefixes:
 * even a cache of hundreds of thousands of tokens scans in well under a millisecond, far less than
 * computing one token of KV. K/V are copied outside the lock; an entry being copied holds a
 * reference, and an entry dropped meanwhile (evicted or superseded) is freed by its last user.
 */
#include "cache/prefix.h"

#include <stdlib.h>
#include <string.h>

struct kn_pc_entry {
    kn_pc_entry *prev, *next;
    int32_t *tokens;             /* [n] */
    int32_t n;
    kn_dtype type;
    int32_t n_layer, kv_dim;
    uint8_t *k, *v;              /* [n_layer][n][kv_dim] elements of type */
    size_t bytes;
    int refs;                    /* copies in progress */
    bool linked;                 /* in the list (else dropped, freed when refs reach 0) */
};

void kn_pc_init(kn_prefix_cache *pc, size_t budget) {
    memset(pc, 0, sizeof *pc);
    pthread_mutex_init(&pc->mu, NULL);
    pc->budget = budget;
}

static void entry_free(kn_pc_entry *e) {
    free(e->tokens);
    free(e->k);
    free(e->v);
    free(e);
}

/* Unlinks e (lock held); frees it unless a copy is in progress. */
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
    if (pc->head == e) return;
    e->prev->next = e->next;
    if (e->next) e->next->prev = e->prev;
    push_front_locked(pc, e);
}

void kn_pc_free(kn_prefix_cache *pc) {
    while (pc->head) drop_locked(pc, pc->head);
    pthread_mutex_destroy(&pc->mu);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static size_t row_bytes(const kn_kv *kv) { return (size_t)kv->kv_dim * kv->elt; }

int32_t kn_pc_restore(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, int32_t max_use, kn_kv *kv) {
    if (!pc->budget) return 0;
    pthread_mutex_lock(&pc->mu);
    kn_pc_entry *best = NULL;
    int32_t m = 0;
    for (kn_pc_entry *e = pc->head; e; e = e->next) {   /* most recent first: it wins ties */
        if (e->type != kv->type || e->n_layer != kv->n_layer || e->kv_dim != kv->kv_dim) continue;
        int32_t c = common_prefix(e->tokens, e->n, tokens, KN_MIN(n, max_use));
        if (c > m) {
            m = c;
            best = e;
        }
    }
    if (m > kv->n_ctx) m = kv->n_ctx;
    if (!best || m <= 0) {
        pc->misses++;
        pthread_mutex_unlock(&pc->mu);
        return 0;
    }
    pc->hits++;
    pc->hit_tokens += (uint64_t)m;
    best->refs++;
    touch_locked(pc, best);
    pthread_mutex_unlock(&pc->mu);

    const size_t rb = row_bytes(kv);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        const size_t src = (size_t)l * (size_t)best->n * rb, dst = (size_t)l * (size_t)kv->n_ctx * rb;
        memcpy(kv->k + dst, best->k + src, (size_t)m * rb);
        memcpy(kv->v + dst, best->v + src, (size_t)m * rb);
    }
    kv->n_past = m;

    pthread_mutex_lock(&pc->mu);
    if (--best->refs == 0 && !best->linked) entry_free(best);
    pthread_mutex_unlock(&pc->mu);
    return m;
}

void kn_pc_publish(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, const kn_kv *kv, int32_t min_tokens) {
    if (!pc->budget || n < KN_MAX(min_tokens, 1) || n > kv->n_past) return;
    const size_t rb = row_bytes(kv), per_layer = (size_t)n * rb;
    const size_t bytes = 2 * (size_t)kv->n_layer * per_layer + (size_t)n * sizeof(int32_t) + sizeof(kn_pc_entry);
    if (bytes > pc->budget) return;
    /* Already covered by an entry (the same tokens or more)? Then only refresh its recency. */
    pthread_mutex_lock(&pc->mu);
    for (kn_pc_entry *e = pc->head; e; e = e->next) {
        if (e->n >= n && e->type == kv->type && common_prefix(e->tokens, e->n, tokens, n) == n) {
            touch_locked(pc, e);
            pthread_mutex_unlock(&pc->mu);
            return;
        }
    }
    pthread_mutex_unlock(&pc->mu);

    kn_pc_entry *ne = kn_calloc(1, sizeof *ne);
    if (!ne) return;
    ne->n = n;
    ne->type = kv->type;
    ne->n_layer = kv->n_layer;
    ne->kv_dim = kv->kv_dim;
    ne->bytes = bytes;
    ne->tokens = malloc((size_t)n * sizeof *ne->tokens);
    ne->k = malloc((size_t)kv->n_layer * per_layer);
    ne->v = malloc((size_t)kv->n_layer * per_layer);
    if (!ne->tokens || !ne->k || !ne->v) {
        KN_LOGW("prefix cache: out of memory storing %d tokens", n);
        entry_free(ne);
        return;
    }
    memcpy(ne->tokens, tokens, (size_t)n * sizeof *tokens);
    for (int32_t l = 0; l < kv->n_layer; l++) {
        const size_t src = (size_t)l * (size_t)kv->n_ctx * rb, dst = (size_t)l * per_layer;
        memcpy(ne->k + dst, kv->k + src, per_layer);
        memcpy(ne->v + dst, kv->v + src, per_layer);
    }

    pthread_mutex_lock(&pc->mu);
    for (kn_pc_entry *e = pc->head, *next; e; e = next) {
        next = e->next;
        if (e->type != ne->type) continue;
        const int32_t c = common_prefix(e->tokens, e->n, tokens, n);
        if (c == n) {                       /* covered meanwhile by a concurrent publish */
            pthread_mutex_unlock(&pc->mu);
            entry_free(ne);
            return;
        }
        if (c == e->n) drop_locked(pc, e);   /* superseded: the new entry extends it */
    }
    ne->linked = true;
    push_front_locked(pc, ne);
    pc->bytes += bytes;
    pc->n_entries++;
    while (pc->bytes > pc->budget && pc->head) {
        kn_pc_entry *tail = pc->head;
        while (tail->next) tail = tail->next;
        drop_locked(pc, tail);
        pc->evictions++;
    }
    pthread_mutex_unlock(&pc->mu);
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
