/*
 * ssd_index.c - the SSD cache's SQLite index (see ssd_index.h).
 *
 * Schema (user_version 1):
 *   entries(file TEXT PRIMARY KEY, key TEXT, n_tokens INTEGER, tokens BLOB (i32 little-endian),
 *           bytes INTEGER, last_use INTEGER)  + an index on last_use for the LRU order.
 * The database runs in WAL mode with synchronous=FULL: a committed row survives a crash of the
 * process and of the machine, and commits happen only on the SSD tier's writer thread, so the
 * syncs never hold up the scheduler. The database is opened with a quick_check; one that fails it
 * is set aside and rebuilt from the files by the tier's start-up scan.
 */
#include "cache/ssd_index.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kn_ssdx {
    sqlite3 *db;
    sqlite3_stmt *put, *del, *touch, *oldest, *each;
};

static const char *const schema =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS entries("
    "  file TEXT PRIMARY KEY, key TEXT NOT NULL, n_tokens INTEGER NOT NULL, tokens BLOB NOT NULL,"
    "  bytes INTEGER NOT NULL, last_use INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS entries_lru ON entries(last_use);"
    "PRAGMA user_version=1;";

static kiln_status db_error(sqlite3 *db, const char *what) {
    return kn_error(KILN_ERR_IO, "SSD cache index: %s: %s", what, db ? sqlite3_errmsg(db) : "cannot open");
}

static void finalize(kn_ssdx *x) {
    sqlite3_finalize(x->put);
    sqlite3_finalize(x->del);
    sqlite3_finalize(x->touch);
    sqlite3_finalize(x->oldest);
    sqlite3_finalize(x->each);
    x->put = x->del = x->touch = x->oldest = x->each = NULL;
}

void kn_ssdx_close(kn_ssdx *x) {
    if (!x) return;
    finalize(x);
    sqlite3_close(x->db);
    free(x);
}

/* The result of PRAGMA quick_check is the single row "ok" for a sound database. */
static bool sound(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    bool ok = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL) == SQLITE_OK &&
              sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) &&
              strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
    sqlite3_finalize(st);
    return ok;
}

/* Opens path and prepares everything; false (x->db may be set) on any failure. */
static bool try_open(kn_ssdx *x, const char *path) {
    if (sqlite3_open_v2(path, &x->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
        SQLITE_OK)
        return false;
    sqlite3_busy_timeout(x->db, 5000);
    if (!sound(x->db) || sqlite3_exec(x->db, schema, NULL, NULL, NULL) != SQLITE_OK) return false;
    return sqlite3_prepare_v2(x->db,
                              "INSERT OR REPLACE INTO entries(file, key, n_tokens, tokens, bytes, last_use) "
                              "VALUES(?, ?, ?, ?, ?, ?)",
                              -1, &x->put, NULL) == SQLITE_OK &&
           sqlite3_prepare_v2(x->db, "DELETE FROM entries WHERE file = ?", -1, &x->del, NULL) == SQLITE_OK &&
           sqlite3_prepare_v2(x->db, "UPDATE entries SET last_use = ? WHERE file = ?", -1, &x->touch, NULL) ==
               SQLITE_OK &&
           sqlite3_prepare_v2(x->db,
                              "SELECT file, key, bytes FROM entries WHERE file != ? ORDER BY last_use, rowid LIMIT 1",
                              -1, &x->oldest, NULL) == SQLITE_OK &&
           sqlite3_prepare_v2(
               x->db, "SELECT file, key, n_tokens, tokens, bytes, last_use FROM entries ORDER BY last_use, rowid", -1,
               &x->each, NULL) == SQLITE_OK;
}

kiln_status kn_ssdx_open(const char *path, const char *broken_path, kn_ssdx **out, bool *recreated) {
    *out = NULL;
    *recreated = false;
    kn_ssdx *x = kn_calloc(1, sizeof *x);
    if (!x) return KILN_ERR_NOMEM;
    if (!try_open(x, path)) {
        /* Keep the broken database for inspection and start afresh; the files get re-indexed. */
        KN_LOGW("SSD cache index %s is unusable (%s); rebuilding it from the cache files", path,
                x->db ? sqlite3_errmsg(x->db) : "cannot open");
        finalize(x);
        sqlite3_close(x->db);
        x->db = NULL;
        char side[4096];
        if (rename(path, broken_path) != 0) unlink(path);
        snprintf(side, sizeof side, "%s-wal", path);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", path);
        unlink(side);
        *recreated = true;
        if (!try_open(x, path)) {
            kiln_status st = db_error(x->db, path);
            kn_ssdx_close(x);
            return st;
        }
    }
    *out = x;
    return KILN_OK;
}

kiln_status kn_ssdx_each(kn_ssdx *x, int (*fn)(void *user, const kn_ssdx_row *row), void *user) {
    sqlite3_stmt *st = x->each;
    sqlite3_reset(st);
    int rc;
    int32_t *tok = NULL;
    size_t cap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        kn_ssdx_row r = {0};
        r.file = (const char *)sqlite3_column_text(st, 0);
        r.key = (const char *)sqlite3_column_text(st, 1);
        const int64_t n = sqlite3_column_int64(st, 2);
        const void *blob = sqlite3_column_blob(st, 3);
        const int blen = sqlite3_column_bytes(st, 3);
        const int64_t bytes = sqlite3_column_int64(st, 4);
        r.last_use = sqlite3_column_int64(st, 5);
        r.bytes = bytes > 0 ? (uint64_t)bytes : 0;
        if (!r.file || !r.key) continue; /* NOT NULL columns: only a damaged row lacks them */
        if (n > 0 && n <= (1 << 24) && blob && (int64_t)blen == 4 * n && bytes > 0) {
            if ((size_t)n > cap) {
                int32_t *t = realloc(tok, (size_t)n * sizeof *t);
                if (!t) {
                    free(tok);
                    sqlite3_reset(st);
                    return kn_error(KILN_ERR_NOMEM, "out of memory reading the SSD cache index");
                }
                tok = t;
                cap = (size_t)n;
            }
            const uint8_t *b = blob;
            for (int64_t i = 0; i < n; i++)
                tok[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                                   (uint32_t)b[4 * i + 3] << 24);
            r.tokens = tok;
            r.n_tokens = (int32_t)n;
        }
        if (fn(user, &r)) break;
    }
    free(tok);
    kiln_status s = rc == SQLITE_ROW || rc == SQLITE_DONE ? KILN_OK : db_error(x->db, "reading");
    sqlite3_reset(st);
    return s;
}

/* Runs a prepared statement that returns no rows and resets it. */
static kiln_status run(kn_ssdx *x, sqlite3_stmt *st, const char *what) {
    const int rc = sqlite3_step(st);
    kiln_status s = rc == SQLITE_DONE ? KILN_OK : db_error(x->db, what);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return s;
}

kiln_status kn_ssdx_put(kn_ssdx *x, const kn_ssdx_row *r) {
    uint8_t *blob = malloc((size_t)r->n_tokens * 4);
    if (!blob) return kn_error(KILN_ERR_NOMEM, "out of memory writing the SSD cache index");
    for (int32_t i = 0; i < r->n_tokens; i++) {
        const uint32_t t = (uint32_t)r->tokens[i];
        blob[4 * i] = (uint8_t)t;
        blob[4 * i + 1] = (uint8_t)(t >> 8);
        blob[4 * i + 2] = (uint8_t)(t >> 16);
        blob[4 * i + 3] = (uint8_t)(t >> 24);
    }
    sqlite3_stmt *st = x->put;
    sqlite3_bind_text(st, 1, r->file, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, r->n_tokens);
    sqlite3_bind_blob(st, 4, blob, r->n_tokens * 4, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)r->bytes);
    sqlite3_bind_int64(st, 6, r->last_use);
    kiln_status s = run(x, st, "adding an entry");
    free(blob);
    return s;
}

kiln_status kn_ssdx_delete(kn_ssdx *x, const char *file) {
    sqlite3_bind_text(x->del, 1, file, -1, SQLITE_STATIC);
    return run(x, x->del, "deleting an entry");
}

kiln_status kn_ssdx_touch(kn_ssdx *x, const char *file, int64_t last_use) {
    sqlite3_bind_int64(x->touch, 1, last_use);
    sqlite3_bind_text(x->touch, 2, file, -1, SQLITE_STATIC);
    return run(x, x->touch, "updating an entry");
}

kiln_status kn_ssdx_oldest(kn_ssdx *x, const char *except, char *file, size_t cap, char *key, size_t kcap,
                           uint64_t *bytes) {
    sqlite3_stmt *st = x->oldest;
    sqlite3_bind_text(st, 1, except ? except : "", -1, SQLITE_STATIC);
    const int rc = sqlite3_step(st);
    kiln_status s = KILN_ERR_INVALID_ARG;
    if (rc == SQLITE_ROW) {
        const char *f = (const char *)sqlite3_column_text(st, 0), *k = (const char *)sqlite3_column_text(st, 1);
        const int64_t b = sqlite3_column_int64(st, 2);
        if (f && k) {
            snprintf(file, cap, "%s", f);
            snprintf(key, kcap, "%s", k);
            *bytes = b > 0 ? (uint64_t)b : 0;
            s = KILN_OK;
        }
    } else if (rc != SQLITE_DONE) {
        s = db_error(x->db, "finding the oldest entry");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return s;
}

kiln_status kn_ssdx_begin(kn_ssdx *x) {
    return sqlite3_exec(x->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? KILN_OK : db_error(x->db, "begin");
}

kiln_status kn_ssdx_commit(kn_ssdx *x) {
    if (sqlite3_exec(x->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return KILN_OK;
    kiln_status s = db_error(x->db, "commit");
    sqlite3_exec(x->db, "ROLLBACK", NULL, NULL, NULL);
    return s;
}
