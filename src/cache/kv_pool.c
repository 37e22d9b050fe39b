/*
 * kv_pool.c - the block pool of paged KV (see kv_pool.h): a reference count per block, a stack of
 * free blocks, block memory made on first need and kept, and reservations, all under one lock.
 */
#include "cache/kv_pool.h"

#include <stdlib.h>
#include <string.h>

kiln_status kn_kvp_init(kn_kv_pool *p, size_t blk_bytes, int32_t cap) {
    memset(p, 0, sizeof *p);
    if (!blk_bytes || cap <= 0)
        return kn_error(KILN_ERR_INVALID_ARG, "a KV pool of %d blocks of %zu bytes", cap, blk_bytes);
    p->bt = KN_KVP_BLOCK;
    p->blk_bytes = blk_bytes;
    p->cap = cap;
    pthread_mutex_init(&p->mu, NULL);
    p->data = kn_calloc((size_t)cap, sizeof *p->data);
    p->refs = kn_calloc((size_t)cap, sizeof *p->refs);
    p->free_ids = kn_calloc((size_t)cap, sizeof *p->free_ids);
    if (!p->data || !p->refs || !p->free_ids) {
        kn_kvp_free(p);
        return kn_error(KILN_ERR_NOMEM, "out of memory for a KV pool of %d blocks", cap);
    }
    return KILN_OK;
}

void kn_kvp_free(kn_kv_pool *p) {
    if (!p->cap) return; /* never initialized (or freed) */
    for (int32_t i = 0; p->data && i < p->n_made; i++) kn_free_aligned(p->data[i]);
    pthread_mutex_destroy(&p->mu);
    free(p->data);
    free(p->refs);
    free(p->free_ids);
    memset(p, 0, sizeof *p);
}

/* Makes the memory of one more block (lock held); false when the capacity is reached or memory is
 * out. */
static bool make_locked(kn_kv_pool *p) {
    if (p->n_made >= p->cap) return false;
    uint8_t *d = kn_alloc_aligned(p->blk_bytes);
    if (!d) return false;
    p->data[p->n_made] = d;
    p->free_ids[p->n_free++] = p->n_made++;
    return true;
}

static int32_t alloc_locked(kn_kv_pool *p, bool reserved) {
    if (reserved && p->reserved > 0) p->reserved--;
    else if (p->cap - p->used - p->reserved <= 0) return -1;
    if (!p->n_free && !make_locked(p)) return -1;
    const int32_t id = p->free_ids[--p->n_free];
    p->refs[id] = 1;
    p->used++;
    return id;
}

int32_t kn_kvp_alloc(kn_kv_pool *p, bool reserved) {
    pthread_mutex_lock(&p->mu);
    const int32_t id = alloc_locked(p, reserved);
    pthread_mutex_unlock(&p->mu);
    return id;
}

void kn_kvp_ref(kn_kv_pool *p, int32_t id) {
    pthread_mutex_lock(&p->mu);
    p->refs[id]++;
    pthread_mutex_unlock(&p->mu);
}

static void unref_locked(kn_kv_pool *p, int32_t id) {
    if (--p->refs[id] == 0) {
        p->free_ids[p->n_free++] = id;
        p->used--;
    }
}

void kn_kvp_unref(kn_kv_pool *p, int32_t id) {
    pthread_mutex_lock(&p->mu);
    unref_locked(p, id);
    pthread_mutex_unlock(&p->mu);
}

int32_t kn_kvp_refs(kn_kv_pool *p, int32_t id) {
    pthread_mutex_lock(&p->mu);
    const int32_t r = p->refs[id];
    pthread_mutex_unlock(&p->mu);
    return r;
}

int32_t kn_kvp_cow(kn_kv_pool *p, int32_t src, bool reserved) {
    pthread_mutex_lock(&p->mu);
    const int32_t id = alloc_locked(p, reserved);
    if (id >= 0) {
        /* src stays referenced (by the caller) until the copy is made: it cannot be freed meanwhile,
         * and a shared block is never written, so the copy needs no lock. */
        pthread_mutex_unlock(&p->mu);
        memcpy(p->data[id], p->data[src], p->blk_bytes);
        pthread_mutex_lock(&p->mu);
        unref_locked(p, src);
        p->cow++;
    }
    pthread_mutex_unlock(&p->mu);
    return id;
}

kiln_status kn_kvp_reserve(kn_kv_pool *p, int32_t n) {
    if (n <= 0) return KILN_OK;
    pthread_mutex_lock(&p->mu);
    kiln_status st = p->cap - p->used - p->reserved >= n ? KILN_OK : KILN_ERR_BUSY;
    while (!st && p->n_free < p->reserved + n)
        if (!make_locked(p)) st = KILN_ERR_NOMEM; /* the room exists: only memory lacks */
    if (!st) p->reserved += n;
    pthread_mutex_unlock(&p->mu);
    if (st == KILN_ERR_NOMEM) kn_error(st, "out of memory for the KV cache: %d blocks of %zu bytes", n, p->blk_bytes);
    return st;
}

void kn_kvp_unreserve(kn_kv_pool *p, int32_t n) {
    if (n <= 0) return;
    pthread_mutex_lock(&p->mu);
    p->reserved -= KN_MIN(n, p->reserved);
    pthread_mutex_unlock(&p->mu);
}

int32_t kn_kvp_available(kn_kv_pool *p) {
    pthread_mutex_lock(&p->mu);
    const int32_t a = p->cap - p->used - p->reserved;
    pthread_mutex_unlock(&p->mu);
    return a;
}

void kn_kvp_get_stats(kn_kv_pool *p, kn_kvp_stats *out) {
    memset(out, 0, sizeof *out);
    if (!p || !p->data) return;
    pthread_mutex_lock(&p->mu);
    out->total = p->cap;
    out->used = p->used;
    out->reserved = p->reserved;
    out->made = p->n_made;
    out->cow = p->cow;
    for (int32_t i = 0; i < p->n_made; i++) out->shared += p->refs[i] > 1;
    pthread_mutex_unlock(&p->mu);
}
