/*
 * prefix.h - the prefix cache, RAM tier: KV of token sequences that earlier requests computed,
 * reused by later requests that start with the same tokens.
 *
 * An entry holds a token sequence and the K/V rows of its positions ([n_layer][n][row] each, in
 * the KV format of the cache it came from, which it carries: it only serves caches of the same
 * format, layers and heads). A cache belongs to one engine, so every entry shares its key's
 * fixed part (model fingerprint, KV format, adapter set: none yet); entries differ in tokens. A
 * lookup finds the entry sharing the longest common prefix with the prompt (capped so at least one
 * prompt token is always computed); any prefix of an entry is usable, because a position's K/V
 * depend only on the tokens up to it. Hence an entry covering prompt + reply also serves the next
 * chat turn that repeats only the prompt: the prompt boundary needs no entry of its own.
 *
 * Reuse copies the matched rows into the requester's KV (copy-on-use), so any number of requests
 * can start from one entry at once and the entry stays. Publishing copies a finished row's KV into
 * a new entry. With paged KV (a row whose cache has a pool, kv.h) nothing is copied: an entry holds
 * references to the row's blocks, and a hit maps them into the requester's cache (which copies a
 * block only when it writes into one it shares: the partial last block, or a block rewritten after
 * a speculative rollback), so 8 rows starting with one long prompt hold it once. Either way, an
 * entry whose tokens are a prefix of the new one is superseded (dropped), and one that already
 * covers the new tokens makes publishing a no-op. A byte budget is kept by evicting least-recently-
 * used entries (a paged entry counts its blocks; kn_pc_evict_lru gives blocks back to the pool on
 * demand). Thread-safe; entries are reference-counted while being copied.
 *
 * With an SSD tier attached (kn_pc_attach_ssd), the cache is the one place that decides between
 * the tiers: an entry evicted from RAM is handed, with a reference that keeps its memory valid,
 * to the SSD writer instead of being freed (and stays findable until its file exists; one too
 * large for the RAM budget goes there directly); an entry left unused for demote_idle_ms is
 * written too while it stays in RAM; a lookup takes the longer of the RAM match and the SSD
 * match (an SSD hit comes back into RAM when its row publishes its sequence at the end). The
 * caller (the scheduler) only asks kn_pc_restore and kn_pc_publish.
 */
#ifndef KN_PREFIX_H
#define KN_PREFIX_H

#include "cache/kv.h"
#include "cache/ssd.h"

#include <pthread.h>

typedef struct kn_pc_entry kn_pc_entry;

typedef struct kn_prefix_cache {
    pthread_mutex_t mu;
    kn_pc_entry *head; /* most recently used first */
    size_t budget;     /* bytes; 0 disables the cache */
    size_t bytes;      /* bytes held by entries */
    uint64_t clock;
    uint64_t hits, misses, hit_tokens, evictions;
    int32_t n_entries;
    kn_ssd *ssd;           /* the SSD tier, or NULL */
    kn_pc_entry *limbo;    /* evicted entries the SSD writer still holds (still findable) */
    double demote_idle_ms; /* write entries to SSD once unused this long */
} kn_prefix_cache;

typedef struct kn_pc_stats {
    int32_t entries;
    uint64_t bytes, budget, hits, misses, hit_tokens, evictions;
} kn_pc_stats;

void kn_pc_init(kn_prefix_cache *pc, size_t budget);
void kn_pc_free(kn_prefix_cache *pc);

/* Finds the longest cached prefix of tokens[0..n) no longer than max_use tokens, copies (or, for a
 * paged kv of the entry's pool, maps) its K/V into kv positions [0, m) (kv->n_past = m) and returns
 * m; 0 on a miss (kv untouched, or emptied when a copy into a paged kv found no blocks). Counts a hit
 * or a miss. entries of another KV format or layout are skipped (a miss). */
int32_t kn_pc_restore(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, int32_t max_use, kn_kv *kv);

/* Stores kv positions [0, n) under tokens[0..n) (copying them), evicting LRU entries to stay
 * within the budget (evicted entries go to the SSD tier, if any). Sequences shorter than min_tokens
 * are not stored; those larger than the budget go straight to the SSD tier, or nowhere. */
void kn_pc_publish(kn_prefix_cache *pc, const int32_t *tokens, int32_t n, const kn_kv *kv, int32_t min_tokens);

void kn_pc_get_stats(kn_prefix_cache *pc, kn_pc_stats *out);

/* Evicts the least recently used entry (to the SSD tier when attached, as for the budget), giving
 * its blocks back to their pool once nothing else holds them; false when the cache is empty. */
bool kn_pc_evict_lru(kn_prefix_cache *pc);

/* Attaches an SSD tier (before any other call from another thread). The cache does not own it:
 * the owner closes it (kn_ssd_close, which releases the entries its writer holds and stops the
 * idle hook), then calls kn_pc_detach_ssd, then kn_pc_free. */
void kn_pc_attach_ssd(kn_prefix_cache *pc, kn_ssd *ssd, double demote_idle_ms);
void kn_pc_detach_ssd(kn_prefix_cache *pc);

/* Hands every entry not yet on SSD to the writer, then waits up to timeout_ms (< 0: no limit)
 * until all queued writes are durable. KILN_OK at once without an SSD tier; KILN_ERR_BUSY when
 * writes are still pending at the deadline. */
kiln_status kn_pc_flush(kn_prefix_cache *pc, int timeout_ms);

#endif
