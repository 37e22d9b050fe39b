/*
 * responses_db.c - the stored responses' SQLite database (see responses_db.h).
 *
 * Schema: responses(id TEXT PRIMARY KEY, created_at INTEGER, response TEXT, messages TEXT), in WAL
 * mode with synchronous=NORMAL (a committed row survives a crash of the process). The rowid gives
 * the order of storing: after each insert the oldest rows leave until at most max_rows remain and
 * their JSON takes at most max_bytes (the memory store's limits). Any SQLite error after opening is
 * reported on stderr and the call fails; the caller still has its memory store.
 */
#include "responses_db.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bool tried;
static sqlite3 *db; /* NULL: memory only */
static size_t rows_max, bytes_max;

static const char *const schema = "PRAGMA journal_mode=WAL;"
                                  "PRAGMA synchronous=NORMAL;"
                                  "CREATE TABLE IF NOT EXISTS responses("
                                  "  id TEXT PRIMARY KEY, created_at INTEGER NOT NULL,"
                                  "  response TEXT NOT NULL, messages TEXT NOT NULL);";

static void warn(const char *what) {
    fprintf(stderr, "kiln serve: warning: stored responses: %s: %s\n", what, db ? sqlite3_errmsg(db) : "?");
}

void srv_rdb_open(const char *dir, size_t max_rows, size_t max_bytes) {
    pthread_mutex_lock(&mu);
    if (tried || !dir) {
        tried = true;
        pthread_mutex_unlock(&mu);
        return;
    }
    tried = true;
    rows_max = max_rows;
    bytes_max = max_bytes;
    char *path = NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "kiln serve: warning: stored responses: cannot create %s: %s; kept in memory only\n", dir,
                strerror(errno));
    } else if (asprintf(&path, "%s/responses.sqlite", dir) >= 0) {
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
                SQLITE_OK ||
            sqlite3_busy_timeout(db, 2000) != SQLITE_OK || sqlite3_exec(db, schema, NULL, NULL, NULL) != SQLITE_OK) {
            fprintf(stderr, "kiln serve: warning: stored responses: cannot use %s: %s; kept in memory only\n", path,
                    db ? sqlite3_errmsg(db) : "out of memory");
            sqlite3_close(db);
            db = NULL;
        }
    }
    free(path);
    pthread_mutex_unlock(&mu);
}

/* A statement on db (lock held), or NULL after a warning. */
static sqlite3_stmt *prepare(const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        warn("prepare");
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

/* Drops the oldest rows until the limits hold (lock held, inside a transaction); false on error. */
static bool evict(void) {
    sqlite3_stmt *sum = prepare("SELECT count(*), total(length(CAST(response AS BLOB)) + "
                                "length(CAST(messages AS BLOB))) FROM responses");
    sqlite3_stmt *del = prepare("DELETE FROM responses WHERE rowid = (SELECT min(rowid) FROM responses)");
    bool ok = sum && del;
    for (int guard = 0; ok && guard < 100000; guard++) {
        sqlite3_reset(sum);
        if (sqlite3_step(sum) != SQLITE_ROW) {
            ok = false;
            break;
        }
        const sqlite3_int64 n = sqlite3_column_int64(sum, 0);
        const double bytes = sqlite3_column_double(sum, 1);
        if (n <= 1 || ((size_t)n <= rows_max && bytes <= (double)bytes_max)) break;
        sqlite3_reset(del);
        ok = sqlite3_step(del) == SQLITE_DONE;
    }
    if (!ok) warn("evict");
    sqlite3_finalize(sum);
    sqlite3_finalize(del);
    return ok;
}

bool srv_rdb_put(const char *id, long created_at, const char *response, const char *messages) {
    pthread_mutex_lock(&mu);
    bool ok = false;
    if (db && sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = prepare("INSERT OR REPLACE INTO responses(id, created_at, response, messages) "
                                   "VALUES(?, ?, ?, ?)");
        ok = st && sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) == SQLITE_OK &&
             sqlite3_bind_int64(st, 2, created_at) == SQLITE_OK &&
             sqlite3_bind_text(st, 3, response, -1, SQLITE_STATIC) == SQLITE_OK &&
             sqlite3_bind_text(st, 4, messages, -1, SQLITE_STATIC) == SQLITE_OK && sqlite3_step(st) == SQLITE_DONE;
        if (st && !ok) warn("store");
        sqlite3_finalize(st);
        ok = ok && evict();
        if (sqlite3_exec(db, ok ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) {
            if (ok) warn("commit");
            ok = false;
        }
    } else if (db) warn("begin");
    pthread_mutex_unlock(&mu);
    return ok;
}

char *srv_rdb_get(const char *id, int which) {
    pthread_mutex_lock(&mu);
    char *out = NULL;
    sqlite3_stmt *st = db ? prepare(which ? "SELECT messages FROM responses WHERE id = ?"
                                          : "SELECT response FROM responses WHERE id = ?")
                          : NULL;
    if (st && sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) == SQLITE_OK) {
        const int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && sqlite3_column_text(st, 0)) out = strdup((const char *)sqlite3_column_text(st, 0));
        else if (rc != SQLITE_DONE && rc != SQLITE_ROW) warn("read");
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&mu);
    return out;
}

bool srv_rdb_delete(const char *id) {
    pthread_mutex_lock(&mu);
    bool found = false;
    sqlite3_stmt *st = db ? prepare("DELETE FROM responses WHERE id = ?") : NULL;
    if (st && sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_DONE) found = sqlite3_changes(db) > 0;
        else warn("delete");
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&mu);
    return found;
}
