/*
 * ssd_index.h - the SSD cache's index: an SQLite database (DIR/index.sqlite) with one row per
 * cache file: its name, the key of the model it belongs to, its token ids, its size and when it
 * was last used. The index is what start-up reads and what keeps the LRU order under the byte cap;
 * the files stay the ground truth (a row without its file is dropped, a valid file without a row
 * is re-indexed). Used by one thread at a time (the SSD tier's writer after start-up).
 */
#ifndef KN_SSD_INDEX_H
#define KN_SSD_INDEX_H

#include "base/base.h"

typedef struct kn_ssdx kn_ssdx;

/* One row. Strings and tokens point into SQLite's memory during a callback only. */
typedef struct kn_ssdx_row {
    const char *file;      /* file name inside the cache directory */
    const char *key;       /* hex id of (model, tokenizer, KV format) */
    const int32_t *tokens; /* [n_tokens] */
    int32_t n_tokens;
    uint64_t bytes;   /* file size */
    int64_t last_use; /* unix time in ms */
} kn_ssdx_row;

/* Opens (creating when missing) the index at path. A file that is not a usable database (corrupt,
 * or another program's) is renamed to broken_path and a fresh index is created in its place;
 * *recreated tells. KILN_ERR_IO with SQLite's message when even that fails. */
kiln_status kn_ssdx_open(const char *path, const char *broken_path, kn_ssdx **out, bool *recreated);
void kn_ssdx_close(kn_ssdx *x);

/* Calls fn for every row (oldest use first). Rows whose columns are malformed (a token blob of
 * the wrong length, a negative size) are passed with tokens NULL so the caller drops them. fn must
 * not modify the index; it returns non-zero to stop. */
kiln_status kn_ssdx_each(kn_ssdx *x, int (*fn)(void *user, const kn_ssdx_row *row), void *user);

/* Inserts or replaces the row of row->file. */
kiln_status kn_ssdx_put(kn_ssdx *x, const kn_ssdx_row *row);
kiln_status kn_ssdx_delete(kn_ssdx *x, const char *file);
kiln_status kn_ssdx_touch(kn_ssdx *x, const char *file, int64_t last_use);
/* The least recently used row other than `except` (may be NULL): its file name (cap bytes),
 * key (kcap bytes) and size. KILN_ERR_INVALID_ARG when there is none. */
kiln_status kn_ssdx_oldest(kn_ssdx *x, const char *except, char *file, size_t cap, char *key, size_t kcap,
                           uint64_t *bytes);
/* Groups the following calls into one transaction (one sync at commit). */
kiln_status kn_ssdx_begin(kn_ssdx *x);
kiln_status kn_ssdx_commit(kn_ssdx *x);

#endif
