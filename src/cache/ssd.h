/*
 * ssd.h - the prefix cache's SSD tier: KV entries kept as files in a directory, indexed in
 * SQLite, surviving restarts of the process.
 *
 * The RAM tier (prefix.c) hands entries to this tier (kn_ssd_enqueue): a background writer
 * thread writes each to a file (temporary file, fsync, rename, fsync of the directory, then an
 * index row), so callers never wait for a write. An entry whose tokens are already covered by a
 * file (the same tokens or more) only refreshes that file's last use; a new file supersedes the
 * files whose tokens are a prefix of its own; beyond the byte cap the least recently used files
 * are deleted (files of every model in the directory count against the cap).
 *
 * kn_ssd_restore reads the longest matching file into a row's KV. The header checksum (which
 * covers the token ids) is always checked; the tensor checksums are too, unless verify is off
 * (for benchmarks only: damaged tensor data is then loaded). A damaged, truncated or mismatched
 * file (another model, tokenizer, KV format or file format version) is moved to
 * DIR/quarantine, dropped from the index, counted, and never loaded; the caller then computes the
 * prefix normally. Start-up (kn_ssd_open) reads the index, drops rows whose file is gone, checks
 * the header of every file of this key (quarantining bad ones), re-indexes valid files that have
 * no row (written just before a crash) and deletes temporary files of dead processes.
 *
 * Files of other keys in the same directory (another model, or another KV type) are left alone.
 * One process per directory at a time is the supported use.
 */
#ifndef KN_SSD_H
#define KN_SSD_H

#include "cache/kv.h"
#include "cache/ssd_file.h"

typedef struct kn_ssd kn_ssd;

typedef struct kn_ssd_params {
    const char *dir;    /* created with its parents when missing; copied */
    uint64_t max_bytes; /* cap on the bytes of all cache files in dir */
    bool verify;        /* check tensor checksums at restore (false: benchmarks only) */
    kn_ssdf_key key;    /* the only entries this instance reads and writes */
    size_t max_pending; /* bytes of queued entries held outside the RAM tier (see src) */
} kn_ssd_params;

/* One entry handed to the writer. The memory stays valid until release is called (once, on the
 * writer's thread or in kn_ssd_close) with on_ssd telling whether a file now covers the tokens. */
typedef struct kn_ssd_src {
    const int32_t *tokens; /* [n] */
    int32_t n;
    const uint8_t *k, *v; /* [n_layer][n][k_row], [n_layer][n][v_row] in the key's KV format; NULL: gather */
    /* With k and v NULL (an entry whose KV lies in pool blocks): fills k and v, laid out as above,
       on the writer's thread from the entry's memory (valid until release). */
    void (*gather)(void *user, uint8_t *k, uint8_t *v);
    size_t outside_bytes; /* memory that only this job keeps alive (an entry evicted from RAM);
                             0 for an entry still in RAM */
    void (*release)(void *user, bool on_ssd);
    void *user;
} kn_ssd_src;

typedef struct kn_ssd_stats {
    int32_t entries; /* files of this key */
    int32_t pending; /* writes queued or in progress */
    uint64_t bytes;  /* bytes of all indexed files (every key) */
    uint64_t budget;
    uint64_t hits, hit_tokens, writes, evictions, quarantined, errors;
    uint64_t dropped; /* entries refused because too much was queued */
} kn_ssd_stats;

/* Called on the writer thread when kicked or when its last answer comes due: hands entries that
 * have been idle long enough to kn_ssd_enqueue and returns the ms until the next one will be, or
 * a negative value when none is waiting. */
typedef double (*kn_ssd_idle_fn)(void *user, double now_ms);

/* Opens the tier on p->dir (see the start-up steps above) and starts its writer. KILN_ERR_IO with
 * a message naming the directory when it cannot be created or written, or the index cannot be
 * opened. */
kiln_status kn_ssd_open(const kn_ssd_params *p, kn_ssd **out);
/* Stops the writer (a write in progress is abandoned and its temporary file removed), releases
 * every queued entry unwritten, closes the index. Call kn_ssd_flush first to keep them. */
void kn_ssd_close(kn_ssd *s);
const char *kn_ssd_dir(const kn_ssd *s);

/* Installs the idle hook (before any kick); fn may call kn_ssd_enqueue. */
void kn_ssd_set_idle_hook(kn_ssd *s, kn_ssd_idle_fn fn, void *user);
/* Asks the writer to run the idle hook soon (an entry was added or its deadline changed). */
void kn_ssd_kick(kn_ssd *s);

/* Queues src for writing; false (src not taken: the caller releases it) when closing, out of
 * memory, or when src->outside_bytes would pass max_pending. Never blocks on I/O. */
bool kn_ssd_enqueue(kn_ssd *s, const kn_ssd_src *src);

/* Finds the file sharing the longest prefix with tokens[0..n), and when that prefix is longer
 * than min_len (and at least a few tokens), reads its K/V into kv positions [0, m), sets
 * kv->n_past = m and returns m. A file that fails its checks is quarantined and the next best is
 * tried. Returns 0 (kv->n_past untouched) when nothing better than min_len was restored. kv must
 * have the key's layout; a paged cache (kv.h) gets the rows through a buffer, into blocks it owns.
 * Runs on the caller's thread; the only writes it causes are queued. */
int32_t kn_ssd_restore(kn_ssd *s, const int32_t *tokens, int32_t n, int32_t min_len, kn_kv *kv);

/* Waits until every job queued before this call is done (written and indexed, or failed).
 * timeout_ms < 0 waits without limit. KILN_ERR_BUSY when the time ran out first. */
kiln_status kn_ssd_flush(kn_ssd *s, int timeout_ms);

void kn_ssd_get_stats(kn_ssd *s, kn_ssd_stats *out);

#endif
