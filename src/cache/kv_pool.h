/*
 * kv_pool.h - the block pool of paged KV: fixed-size blocks of KV memory, one pool per engine,
 * reference-counted, from which rows and the prefix cache draw.
 *
 * A block holds every layer's K and V rows of KN_KVP_BLOCK consecutive positions in the engine's
 * KV format (layout in kv.h). A row's KV is a table of blocks (kn_kv with a pool); the prefix cache
 * holds references to the blocks of the sequences it keeps, so a prefix hit maps blocks into a row
 * instead of copying them (kv.h: a block shared by several holders is copied before it is written).
 *
 * Capacity is a number of blocks (cap). Block memory is allocated the first time a block is needed
 * and kept for reuse (freed blocks go to a free list), so an engine never holds more than its peak.
 * Reservations let the scheduler admit a row only when the blocks it may still need exist: reserved
 * blocks count against the capacity until they are allocated (kn_kvp_alloc with reserved set) or
 * handed back. Thread-safe (the scheduler and the SSD writer release blocks).
 */
#ifndef KN_KV_POOL_H
#define KN_KV_POOL_H

#include "base/base.h"

#include <pthread.h>

/* Positions per block. 16 is the attention kernels' group of positions (attend.c): a group then
 * spans at most two blocks, and a shared prefix wastes at most 15 positions per row in its partial
 * last block (the part a row copies when it writes there); 32 would halve the table and the
 * reference counting but double that copy. */
#define KN_KVP_BLOCK 16

typedef struct kn_kv_pool {
    pthread_mutex_t mu;
    int32_t bt;        /* positions per block */
    size_t blk_bytes;  /* bytes of one block */
    int32_t cap;       /* blocks at most */
    int32_t n_made;    /* blocks whose memory exists (<= cap) */
    uint8_t **data;    /* [cap] block memory (NULL until made) */
    int32_t *refs;     /* [cap] references (0: free) */
    int32_t *free_ids; /* [cap] made blocks with no reference (a stack) */
    int32_t n_free;    /* entries of free_ids */
    int32_t used;      /* blocks with references */
    int32_t reserved;  /* blocks promised to rows and not allocated yet */
    uint64_t cow;      /* blocks copied because they were shared when written */
} kn_kv_pool;

typedef struct kn_kvp_stats {
    int32_t total, used, shared, reserved, made;
    uint64_t cow;
} kn_kvp_stats;

/* A pool of cap blocks of blk_bytes each (nothing is allocated yet). KILN_ERR_INVALID_ARG for a
 * non-positive size, KILN_ERR_NOMEM when the tables cannot be allocated. */
kiln_status kn_kvp_init(kn_kv_pool *p, size_t blk_bytes, int32_t cap);
/* Frees every block's memory (blocks still referenced are freed too: the owners go first). */
void kn_kvp_free(kn_kv_pool *p);

/* A block with one reference, or -1 when the pool is exhausted (or out of memory). reserved: the
 * block comes out of a reservation (kn_kvp_reserve), which shrinks by one. */
int32_t kn_kvp_alloc(kn_kv_pool *p, bool reserved);
/* The memory of block id (stable while it has references). */
static inline uint8_t *kn_kvp_data(const kn_kv_pool *p, int32_t id) { return p->data[id]; }
/* Another reference to block id. */
void kn_kvp_ref(kn_kv_pool *p, int32_t id);
/* Drops a reference; the block is free once none is left. */
void kn_kvp_unref(kn_kv_pool *p, int32_t id);
/* The references block id has now. */
int32_t kn_kvp_refs(kn_kv_pool *p, int32_t id);
/* Copies block src into a new block (from a reservation when reserved) that replaces one reference
 * to src, for a holder about to write a shared block; the new block's id, or -1 (src untouched). */
int32_t kn_kvp_cow(kn_kv_pool *p, int32_t src, bool reserved);

/* Promises n blocks (their memory made now, so that an allocation out of a reservation cannot
 * fail). KILN_OK when cap - used - reserved >= n and the memory exists; KILN_ERR_BUSY (no message)
 * when the pool lacks room now (blocks in use may be freed later); KILN_ERR_NOMEM (with the message)
 * when the blocks' memory cannot be allocated. Nothing is reserved on failure. */
kiln_status kn_kvp_reserve(kn_kv_pool *p, int32_t n);
/* Hands back n promised blocks that were not used. */
void kn_kvp_unreserve(kn_kv_pool *p, int32_t n);
/* Blocks neither used nor reserved. */
int32_t kn_kvp_available(kn_kv_pool *p);

void kn_kvp_get_stats(kn_kv_pool *p, kn_kvp_stats *out);

#endif
