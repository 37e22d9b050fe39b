/*
 * ssd.c - the prefix cache's SSD tier (see ssd.h): start-up checks, the writer thread, restore,
 * quarantine and the byte cap.
 *
 * Directory layout: DIR/<16 hex>.kv cache files (the name is a hash of the key and the tokens, so
 * rewriting the same tokens replaces the file atomically), DIR/<name>.tmp.<pid> files being
 * written, DIR/index.sqlite (+ -wal, -shm) the index, DIR/quarantine/ refused files (the newest
 * QUARANTINE_KEEP of them; quarantined files do not count against the byte cap).
 *
 * Threads and locks: s->mu guards the job queue, the in-memory list of this key's entries (token
 * lists for longest-prefix lookup), the byte total and the counters. Only the writer thread uses
 * the index after start-up (restore queues its index updates as jobs), so the index needs no lock
 * and its syncs never stall the caller of kn_ssd_restore. No lock is held during file I/O, and
 * s->mu is never held while calling out (release callbacks, the idle hook).
 */
#include "cache/ssd.h"

#include "base/checksum.h"
#include "base/sha256.h"
#include "cache/ssd_index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_LEN        19 /* 16 hex + ".kv" */
#define MIN_MATCH       4  /* fewer shared tokens are not worth a file read */
#define MAX_TRIES       4  /* files tried per restore when some fail their checks */
#define QUARANTINE_KEEP 32 /* refused files kept for inspection in quarantine/ */

typedef struct ssd_ent {
    char file[NAME_LEN + 1];
    int32_t *tokens; /* [n] */
    int32_t n;
    uint64_t bytes;
} ssd_ent;

typedef enum { JOB_WRITE, JOB_TOUCH, JOB_FORGET } job_kind;

typedef struct ssd_job {
    struct ssd_job *next;
    job_kind kind;
    kn_ssd_src src;          /* JOB_WRITE */
    char file[NAME_LEN + 1]; /* JOB_TOUCH, JOB_FORGET */
    int64_t when;            /* JOB_TOUCH */
    uint64_t seq;
} ssd_job;

struct kn_ssd {
    char *dir;
    int dirfd, qdirfd;
    kn_ssdf_key key;
    char key_id[33];
    uint64_t max_bytes;
    bool verify;
    size_t max_pending;
    kn_ssdx *index;

    pthread_mutex_t mu;
    pthread_cond_t wake;    /* writer: a job, a kick, or stop (CLOCK_MONOTONIC) */
    pthread_cond_t done_cv; /* flushers: a job finished */
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    ssd_job *head, *tail;
    uint64_t seq_queued, seq_done;
    int32_t pending_writes;
    size_t pending_outside;
    bool kicked;
    kn_ssd_idle_fn idle_fn;
    void *idle_user;

    ssd_ent *ents; /* this key's files */
    int32_t n_ents, cap_ents;
    uint64_t total_bytes; /* all indexed files */
    uint64_t hits, hit_tokens, writes, evictions, quarantined, errors, dropped;
};

/* ---- small helpers ------------------------------------------------------------------------------ */

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    const int32_t n = na < nb ? na : nb;
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* True for the name of a cache file: 16 lowercase hex digits and ".kv". */
static bool is_entry_name(const char *f) {
    if (strlen(f) != NAME_LEN || strcmp(f + 16, ".kv") != 0) return false;
    for (int i = 0; i < 16; i++)
        if (!((f[i] >= '0' && f[i] <= '9') || (f[i] >= 'a' && f[i] <= 'f'))) return false;
    return true;
}

/* Whether the writer of a temporary file is gone: no such process, or one that has ended and waits
 * to be reaped (a zombie: an engine process of `kiln serve` killed with its supervisor stays one
 * until the system reaps it, and writes nothing more). */
static bool writer_gone(long pid) {
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *e = strrchr(buf, ')'); /* "pid (comm) S ...": the state follows the last ')' */
    return e && e[1] == ' ' && (e[2] == 'Z' || e[2] == 'X');
}

/* A temporary file "<entry name>.tmp.<pid>"; *pid gets the writer's process id. */
static bool is_temp_name(const char *f, long *pid) {
    if (strlen(f) <= NAME_LEN + 5 || strncmp(f + NAME_LEN, ".tmp.", 5) != 0) return false;
    char name[NAME_LEN + 1];
    memcpy(name, f, NAME_LEN);
    name[NAME_LEN] = 0;
    if (!is_entry_name(name)) return false;
    char *end;
    errno = 0;
    *pid = strtol(f + NAME_LEN + 5, &end, 10);
    return !errno && !*end && *pid > 0;
}

/* Hex id of a key: the first 16 bytes of SHA-256 over its fields. */
static void key_id(const kn_ssdf_key *k, char out[33]) {
    kn_sha256 h;
    kn_sha256_init(&h);
    kn_sha256_update(&h, k->model, 32);
    kn_sha256_update(&h, k->tokenizer, 32);
    const uint32_t f[3] = {k->kv_type, k->n_layer, k->kv_dim};
    kn_sha256_update(&h, f, sizeof f);
    uint8_t d[32];
    kn_sha256_final(&h, d);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[32] = 0;
}

/* The file name of tokens[n] under this key. */
static void entry_name(const kn_ssd *s, const int32_t *tokens, int32_t n, char out[NAME_LEN + 1]) {
    kn_hash64 h;
    kn_hash64_init(&h, 0x5353444e414d45ull);
    kn_hash64_update(&h, s->key_id, 32);
    kn_hash64_update(&h, tokens, (size_t)n * sizeof *tokens);
    snprintf(out, NAME_LEN + 1, "%016llx.kv", (unsigned long long)kn_hash64_final(&h));
}

/* Counts an I/O failure and logs it: the first few, then every hundredth. */
static void count_error(kn_ssd *s, const char *what, const char *file, const char *why) {
    pthread_mutex_lock(&s->mu);
    const uint64_t n = ++s->errors;
    pthread_mutex_unlock(&s->mu);
    if (n <= 5 || n % 100 == 0)
        KN_LOGW("SSD cache %s: %s %s: %s (%llu errors so far)", s->dir, what, file, why, (unsigned long long)n);
}

/* ---- the in-memory list (lock held) ------------------------------------------------------------- */

static int32_t find_ent_locked(const kn_ssd *s, const char *file) {
    for (int32_t i = 0; i < s->n_ents; i++)
        if (strcmp(s->ents[i].file, file) == 0) return i;
    return -1;
}

/* Removes entry i (its bytes leave the total). */
static void remove_ent_locked(kn_ssd *s, int32_t i) {
    s->total_bytes -= KN_MIN(s->total_bytes, s->ents[i].bytes);
    free(s->ents[i].tokens);
    s->ents[i] = s->ents[--s->n_ents];
}

/* Adds an entry with a copy of tokens; false when out of memory (the file then just is not used
 * by this process; it stays indexed). Its bytes join the total either way. */
static bool add_ent_locked(kn_ssd *s, const char *file, const int32_t *tokens, int32_t n, uint64_t bytes) {
    s->total_bytes += bytes;
    if (s->n_ents == s->cap_ents) {
        const int32_t cap = s->cap_ents ? 2 * s->cap_ents : 64;
        ssd_ent *e = realloc(s->ents, (size_t)cap * sizeof *e);
        if (!e) return false;
        s->ents = e;
        s->cap_ents = cap;
    }
    ssd_ent *e = &s->ents[s->n_ents];
    if (!(e->tokens = malloc((size_t)n * sizeof *tokens))) return false;
    memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
    memcpy(e->file, file, NAME_LEN + 1);
    e->n = n;
    e->bytes = bytes;
    s->n_ents++;
    return true;
}

/* ---- jobs ------------------------------------------------------------------------------------- */

/* Appends a job (lock held) and wakes the writer. */
static void push_locked(kn_ssd *s, ssd_job *j) {
    j->seq = ++s->seq_queued;
    j->next = NULL;
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    pthread_cond_signal(&s->wake);
}

/* Queues an index update (touch or forget) for the writer; dropped silently when out of memory
 * (the index then lags, which start-up repairs). */
static void push_index_job(kn_ssd *s, job_kind kind, const char *file, int64_t when) {
    ssd_job *j = calloc(1, sizeof *j);
    if (!j) return;
    j->kind = kind;
    memcpy(j->file, file, NAME_LEN + 1);
    j->when = when;
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->stop)) free(j);
    else push_locked(s, j);
    pthread_mutex_unlock(&s->mu);
}

bool kn_ssd_enqueue(kn_ssd *s, const kn_ssd_src *src) {
    ssd_job *j = calloc(1, sizeof *j);
    if (!j) return false;
    j->kind = JOB_WRITE;
    j->src = *src;
    pthread_mutex_lock(&s->mu);
    const bool refuse =
        atomic_load(&s->stop) || (src->outside_bytes && s->pending_outside + src->outside_bytes > s->max_pending);
    if (refuse) {
        s->dropped++;
        pthread_mutex_unlock(&s->mu);
        free(j);
        return false;
    }
    s->pending_writes++;
    s->pending_outside += src->outside_bytes;
    push_locked(s, j);
    pthread_mutex_unlock(&s->mu);
    return true;
}

void kn_ssd_kick(kn_ssd *s) {
    pthread_mutex_lock(&s->mu);
    s->kicked = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

void kn_ssd_set_idle_hook(kn_ssd *s, kn_ssd_idle_fn fn, void *user) {
    pthread_mutex_lock(&s->mu);
    s->idle_fn = fn;
    s->idle_user = user;
    pthread_mutex_unlock(&s->mu);
}

/* ---- quarantine and deletion -------------------------------------------------------------------- */

/* Keeps quarantine/ from growing without bound: beyond QUARANTINE_KEEP files the oldest (by
 * modification time) are deleted. */
static void trim_quarantine(kn_ssd *s) {
    struct qf {
        char name[256];
        int64_t mtime;
    } *v = NULL;
    size_t n = 0, cap = 0;
    const int dfd = dup(s->qdirfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d && dfd >= 0) close(dfd);
    for (struct dirent *de; d && (de = readdir(d));) {
        struct stat sb;
        if (de->d_name[0] == '.' || strlen(de->d_name) >= sizeof v->name ||
            fstatat(s->qdirfd, de->d_name, &sb, 0) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            struct qf *w = realloc(v, (cap = cap ? 2 * cap : 128) * sizeof *v);
            if (!w) break;
            v = w;
        }
        snprintf(v[n].name, sizeof v[n].name, "%s", de->d_name);
        v[n++].mtime = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    }
    if (d) closedir(d);
    while (n > QUARANTINE_KEEP) { /* a handful of extra files at most: pick the oldest each time */
        size_t oldest = 0;
        for (size_t i = 1; i < n; i++)
            if (v[i].mtime < v[oldest].mtime) oldest = i;
        unlinkat(s->qdirfd, v[oldest].name, 0);
        v[oldest] = v[--n];
    }
    free(v);
}

/* Moves file into quarantine/ (or deletes it when that fails) and counts it. Does not touch the
 * index or the list. */
static void quarantine_file(kn_ssd *s, const char *file, kn_ssdf_result why) {
    KN_LOGW("SSD cache %s: %s is %s; moved to quarantine/ and never loaded", s->dir, file, kn_ssdf_result_str(why));
    if (renameat(s->dirfd, file, s->qdirfd, file) != 0) {
        unlinkat(s->dirfd, file, 0);
    } else {
        utimensat(s->qdirfd, file, NULL, 0); /* its age in quarantine/ counts from now */
        trim_quarantine(s);
    }
    pthread_mutex_lock(&s->mu);
    s->quarantined++;
    pthread_mutex_unlock(&s->mu);
}

/* Deletes the least recently used files (of any key) until the total fits the cap; `keep` (may be
 * NULL) is spared. Writer thread (or start-up) only. */
static void enforce_cap(kn_ssd *s, const char *keep) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const bool over = s->total_bytes > s->max_bytes;
        pthread_mutex_unlock(&s->mu);
        if (!over) return;
        char file[64], key[64];
        uint64_t bytes = 0;
        if (kn_ssdx_oldest(s->index, keep, file, sizeof file, key, sizeof key, &bytes)) return;
        if (kn_ssdx_delete(s->index, file)) return; /* no progress possible */
        if (is_entry_name(file)) unlinkat(s->dirfd, file, 0);
        pthread_mutex_lock(&s->mu);
        const int32_t i = find_ent_locked(s, file);
        if (i >= 0) remove_ent_locked(s, i);
        else s->total_bytes -= KN_MIN(s->total_bytes, bytes);
        s->evictions++;
        pthread_mutex_unlock(&s->mu);
    }
}

/* ---- writing (writer thread) ------------------------------------------------------------------- */

typedef struct gone {
    char file[NAME_LEN + 1];
} gone;

/* Writes one entry: skip when a file already covers it, else write the file atomically, index
 * it, retire the files it supersedes and keep the cap. Always calls src->release. */
static void do_write(kn_ssd *s, const kn_ssd_src *src) {
    const int64_t now = wall_ms();
    char file[NAME_LEN + 1] = "";
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < s->n_ents; i++) {
        const ssd_ent *e = &s->ents[i];
        if (e->n >= src->n && common_prefix(e->tokens, e->n, src->tokens, src->n) == src->n) {
            memcpy(file, e->file, sizeof file);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (file[0]) { /* covered: only its recency changes */
        kn_ssdx_touch(s->index, file, now);
        src->release(src->user, true);
        return;
    }
    const uint64_t size = kn_ssdf_file_size(&s->key, (uint32_t)src->n);
    if (!size || size > s->max_bytes) {
        src->release(src->user, false);
        return;
    }
    entry_name(s, src->tokens, src->n, file);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", file, (long)getpid());
    kiln_status st = KILN_OK;
    const char *step = "writing";
    const int fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) st = kn_error(KILN_ERR_IO, "%s", strerror(errno)), step = "creating";
    uint8_t *gk = NULL, *gv = NULL; /* an entry in pool blocks: its rows gathered here */
    const uint8_t *k = src->k, *v = src->v;
    if (!st && !k) {
        uint64_t kr, vr;
        kn_ssdf_rows(&s->key, &kr, &vr);
        gk = malloc((size_t)(kr * s->key.n_layer) * (size_t)src->n);
        gv = malloc((size_t)(vr * s->key.n_layer) * (size_t)src->n);
        if (gk && gv) src->gather(src->user, gk, gv);
        else st = kn_error(KILN_ERR_NOMEM, "out of memory"), step = "gathering";
        k = gk, v = gv;
    }
    if (!st) st = kn_ssdf_write(fd, &s->key, src->tokens, (uint32_t)src->n, k, v, &s->stop);
    free(gk);
    free(gv);
    if (!st && fsync(fd) != 0) st = kn_error(KILN_ERR_IO, "%s", strerror(errno)), step = "syncing";
    if (fd >= 0 && close(fd) != 0 && !st) st = kn_error(KILN_ERR_IO, "%s", strerror(errno)), step = "closing";
    if (!st && renameat(s->dirfd, tmp, s->dirfd, file) != 0)
        st = kn_error(KILN_ERR_IO, "%s", strerror(errno)), step = "renaming";
    if (!st && fsync(s->dirfd) != 0)
        st = kn_error(KILN_ERR_IO, "%s", strerror(errno)), step = "syncing the directory of";
    if (st) {
        unlinkat(s->dirfd, tmp, 0);
        if (st != KILN_ERR_CANCELLED) count_error(s, step, tmp, kn_error_msg());
        src->release(src->user, false);
        return;
    }

    /* The file is durable. Update the list first (restores see it at once), then the index. */
    gone *old = NULL;
    int32_t n_old = 0;
    pthread_mutex_lock(&s->mu);
    old = malloc((size_t)(s->n_ents + 1) * sizeof *old);
    for (int32_t i = 0; i < s->n_ents;) {
        const ssd_ent *e = &s->ents[i];
        const bool same = strcmp(e->file, file) == 0;
        const bool superseded = e->n < src->n && common_prefix(e->tokens, e->n, src->tokens, src->n) == e->n;
        if (same || (superseded && old)) {
            if (!same) memcpy(old[n_old++].file, e->file, NAME_LEN + 1);
            remove_ent_locked(s, i);
        } else {
            i++;
        }
    }
    if (!add_ent_locked(s, file, src->tokens, src->n, size)) KN_LOGW("SSD cache: out of memory listing %s", file);
    s->writes++;
    pthread_mutex_unlock(&s->mu);

    const kn_ssdx_row row = {
        .file = file, .key = s->key_id, .tokens = src->tokens, .n_tokens = src->n, .bytes = size, .last_use = now};
    kiln_status ist = kn_ssdx_begin(s->index);
    if (!ist) ist = kn_ssdx_put(s->index, &row);
    for (int32_t i = 0; !ist && i < n_old; i++) ist = kn_ssdx_delete(s->index, old[i].file);
    if (!ist) ist = kn_ssdx_commit(s->index);
    else kn_ssdx_commit(s->index);
    if (ist) {
        /* The file stays valid; the next start-up re-indexes it. */
        count_error(s, "indexing", file, kn_error_msg());
    }
    for (int32_t i = 0; i < n_old; i++) unlinkat(s->dirfd, old[i].file, 0);
    free(old);
    enforce_cap(s, file);
    src->release(src->user, true);
}

/* One job on the writer thread: a write (released unwritten when stopping) or an index update. */
static void run_job(kn_ssd *s, ssd_job *j) {
    switch (j->kind) {
        case JOB_WRITE:
            if (atomic_load(&s->stop)) j->src.release(j->src.user, false);
            else do_write(s, &j->src);
            break;
        case JOB_TOUCH: kn_ssdx_touch(s->index, j->file, j->when); break;
        case JOB_FORGET: kn_ssdx_delete(s->index, j->file); break;
    }
}

/* The writer thread: runs queued jobs in order (flushes wait on seq_done), and between jobs runs
 * the idle hook when kicked or when its last answer comes due; sleeps otherwise. Exits when
 * stop is set, leaving the rest of the queue to kn_ssd_close. */
static void *writer_main(void *arg) {
    kn_ssd *s = arg;
    double next_idle = -1; /* kn_now_ms when the idle hook is due again; < 0: not before a kick */
    pthread_mutex_lock(&s->mu);
    while (!atomic_load(&s->stop)) {
        ssd_job *j = s->head;
        if (j) {
            s->head = j->next;
            if (!s->head) s->tail = NULL;
            pthread_mutex_unlock(&s->mu);
            run_job(s, j);
            pthread_mutex_lock(&s->mu);
            if (j->kind == JOB_WRITE) {
                s->pending_writes--;
                s->pending_outside -= j->src.outside_bytes;
            }
            s->seq_done = j->seq;
            pthread_cond_broadcast(&s->done_cv);
            free(j);
            continue;
        }
        const double now = kn_now_ms();
        if (s->idle_fn && (s->kicked || (next_idle >= 0 && now >= next_idle))) {
            s->kicked = false;
            kn_ssd_idle_fn fn = s->idle_fn;
            void *user = s->idle_user;
            pthread_mutex_unlock(&s->mu);
            const double dt = fn(user, now);
            pthread_mutex_lock(&s->mu);
            next_idle = dt < 0 ? -1 : now + KN_MAX(dt, 1.0);
            continue;
        }
        if (next_idle < 0) {
            pthread_cond_wait(&s->wake, &s->mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            const double wait_ms = next_idle - now;
            const long long ns = (long long)ts.tv_nsec + (long long)(wait_ms * 1e6);
            ts.tv_sec += (time_t)(ns / 1000000000LL);
            ts.tv_nsec = (long)(ns % 1000000000LL);
            pthread_cond_timedwait(&s->wake, &s->mu, &ts);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

kiln_status kn_ssd_flush(kn_ssd *s, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (timeout_ms >= 0) {
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    }
    kiln_status st = KILN_OK;
    pthread_mutex_lock(&s->mu);
    const uint64_t target = s->seq_queued;
    while (s->seq_done < target) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&s->done_cv, &s->mu);
        } else if (pthread_cond_timedwait(&s->done_cv, &s->mu, &ts) != 0 && s->seq_done < target) {
            st = kn_error(KILN_ERR_BUSY, "%d SSD cache writes are still pending after %d ms", s->pending_writes,
                          timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- restore (caller's thread) ------------------------------------------------------------------- */

int32_t kn_ssd_restore(kn_ssd *s, const int32_t *tokens, int32_t n, int32_t min_len, kn_kv *kv) {
    /* Only a cache of this tier's KV format (and layout) is served: anything else is a miss. */
    if (kn_kv_format_code(&kv->fmt, kv->head_dim) != s->key.kv_type || (uint32_t)kv->n_layer != s->key.n_layer ||
        (uint32_t)kv->kv_dim != s->key.kv_dim)
        return 0;
    n = KN_MIN(n, kv->n_ctx);
    for (int attempt = 0; attempt < MAX_TRIES; attempt++) {
        char file[NAME_LEN + 1];
        int32_t m = KN_MAX(min_len, MIN_MATCH - 1);
        int32_t best = -1;
        pthread_mutex_lock(&s->mu);
        for (int32_t i = 0; i < s->n_ents; i++) {
            const int32_t c = common_prefix(s->ents[i].tokens, s->ents[i].n, tokens, n);
            if (c > m) m = c, best = i;
        }
        if (best < 0) {
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        memcpy(file, s->ents[best].file, sizeof file);
        /* Opened under the lock so the writer cannot delete it in between (an open file stays
         * readable after an unlink). */
        const int fd = openat(s->dirfd, file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) { /* gone (deleted behind our back): forget it, not a quarantine */
            remove_ent_locked(s, best);
            pthread_mutex_unlock(&s->mu);
            push_index_job(s, JOB_FORGET, file, 0);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        const double t0 = kn_now_ms();
        kn_ssdf_header h;
        kn_ssdf_result r = kn_ssdf_read_header(fd, &s->key, &h);
        /* The header checks out; it must also hold the tokens the list promised. */
        if (!r && (h.n_tokens < (uint32_t)m || common_prefix(h.tokens, m, tokens, m) != m)) {
            kn_ssdf_header_free(&h);
            r = KN_SSDF_CORRUPT;
        }
        if (!r && !kv->pool) {
            const size_t n_ctx = (size_t)kv->n_ctx;
            r = kn_ssdf_read_rows(fd, &h, (uint32_t)m, kv->k, n_ctx * kv->k_row, kv->v, n_ctx * kv->v_row, s->verify);
            kn_ssdf_header_free(&h);
        } else if (!r) { /* a paged cache: through a buffer of m positions, then into its blocks */
            const size_t kl = (size_t)m * kv->k_row, vl = (size_t)m * kv->v_row;
            uint8_t *bk = malloc(kl * (size_t)kv->n_layer), *bv = malloc(vl * (size_t)kv->n_layer);
            r = bk && bv ? kn_ssdf_read_rows(fd, &h, (uint32_t)m, bk, kl, bv, vl, s->verify) : KN_SSDF_NOMEM;
            kn_ssdf_header_free(&h);
            if (!r) {
                kn_kv_reset(kv);
                if (kn_kv_put_rows(kv, m, bk, kl, bv, vl) != KILN_OK) r = KN_SSDF_NOMEM;
            }
            free(bk);
            free(bv);
        }
        close(fd);
        if (!r) {
            kv->n_past = m;
            KN_LOGD("SSD cache: restored %d tokens from %s in %.1f ms", m, file, kn_now_ms() - t0);
            pthread_mutex_lock(&s->mu);
            s->hits++;
            s->hit_tokens += (uint64_t)m;
            pthread_mutex_unlock(&s->mu);
            push_index_job(s, JOB_TOUCH, file, wall_ms());
            return m;
        }
        if (r == KN_SSDF_IO || r == KN_SSDF_NOMEM) { /* the file may be fine: leave it */
            count_error(s, "reading", file, kn_ssdf_result_str(r));
            return 0;
        }
        pthread_mutex_lock(&s->mu);
        const int32_t i = find_ent_locked(s, file);
        if (i >= 0) remove_ent_locked(s, i);
        pthread_mutex_unlock(&s->mu);
        quarantine_file(s, file, r);
        push_index_job(s, JOB_FORGET, file, 0);
    }
    return 0;
}

/* ---- start-up ------------------------------------------------------------------------------------ */

/* mkdir -p: creates path and its missing parents. */
static kiln_status make_dirs(const char *path) {
    char *p = kn_strdup(path);
    if (!p) return KILN_ERR_NOMEM;
    kiln_status st = KILN_OK;
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        const char saved = *c;
        *c = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            st = kn_error(KILN_ERR_IO, "cannot create the SSD cache directory %s: %s", p, strerror(errno));
            break;
        }
        *c = saved;
        if (!saved) break;
    }
    free(p);
    return st;
}

typedef struct row_copy {
    char file[64];
    char key[64];
    int32_t *tokens; /* NULL: a malformed row */
    int32_t n;
    uint64_t bytes;
    int64_t last_use;
} row_copy;

typedef struct rows {
    row_copy *v;
    size_t n, cap;
    bool nomem;
} rows;

static int collect_row(void *user, const kn_ssdx_row *r) {
    rows *rs = user;
    if (rs->n == rs->cap) {
        const size_t cap = rs->cap ? 2 * rs->cap : 64;
        row_copy *v = realloc(rs->v, cap * sizeof *v);
        if (!v) return rs->nomem = true, 1;
        rs->v = v;
        rs->cap = cap;
    }
    row_copy *c = &rs->v[rs->n];
    memset(c, 0, sizeof *c);
    snprintf(c->file, sizeof c->file, "%s", r->file);
    snprintf(c->key, sizeof c->key, "%s", r->key);
    c->n = r->n_tokens;
    c->bytes = r->bytes;
    c->last_use = r->last_use;
    if (r->tokens) {
        if (!(c->tokens = malloc((size_t)r->n_tokens * sizeof *c->tokens))) return rs->nomem = true, 1;
        memcpy(c->tokens, r->tokens, (size_t)r->n_tokens * sizeof *c->tokens);
    }
    rs->n++;
    return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Checks one indexed row of this key: its file must exist, have the row's size, a sound header
 * of this key and the row's tokens. Returns true when the entry was listed. */
static bool check_row(kn_ssd *s, const row_copy *r) {
    const int fd = openat(s->dirfd, r->file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT) { /* there but unreadable: keep the row, skip the file */
            count_error(s, "opening", r->file, strerror(errno));
            return false;
        }
        kn_ssdx_delete(s->index, r->file);
        return false;
    }
    kn_ssdf_header h;
    kn_ssdf_result res = kn_ssdf_read_header(fd, &s->key, &h);
    close(fd);
    if (!res) {
        if (h.n_tokens != (uint32_t)r->n || h.file_size != r->bytes ||
            common_prefix(h.tokens, (int32_t)h.n_tokens, r->tokens, r->n) != r->n)
            res = KN_SSDF_CORRUPT;
        kn_ssdf_header_free(&h);
    }
    if (res == KN_SSDF_IO || res == KN_SSDF_NOMEM) { /* unreadable now: keep the row, skip the file */
        count_error(s, "reading", r->file, kn_ssdf_result_str(res));
        return false;
    }
    if (res) {
        quarantine_file(s, r->file, res);
        kn_ssdx_delete(s->index, r->file);
        return false;
    }
    pthread_mutex_lock(&s->mu);
    add_ent_locked(s, r->file, r->tokens, r->n, r->bytes);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* Indexes a valid cache file that has no row (its writer died between rename and index), or
 * quarantines it. */
static void adopt(kn_ssd *s, const char *file) {
    const int fd = openat(s->dirfd, file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat sb;
    const int64_t mtime = fstat(fd, &sb) == 0 ? (int64_t)sb.st_mtime * 1000 : wall_ms();
    kn_ssdf_header h;
    const kn_ssdf_result res = kn_ssdf_read_header(fd, NULL, &h);
    close(fd);
    if (res == KN_SSDF_IO || res == KN_SSDF_NOMEM) return;
    if (res) {
        quarantine_file(s, file, res);
        return;
    }
    char kid[33];
    key_id(&h.key, kid);
    const kn_ssdx_row row = {.file = file,
                             .key = kid,
                             .tokens = h.tokens,
                             .n_tokens = (int32_t)h.n_tokens,
                             .bytes = h.file_size,
                             .last_use = mtime};
    if (!kn_ssdx_put(s->index, &row)) {
        pthread_mutex_lock(&s->mu);
        if (strcmp(kid, s->key_id) == 0) add_ent_locked(s, file, h.tokens, (int32_t)h.n_tokens, h.file_size);
        else s->total_bytes += h.file_size;
        pthread_mutex_unlock(&s->mu);
    }
    kn_ssdf_header_free(&h);
}

/* Reads the index and reconciles it with the directory (see ssd.h). */
static kiln_status load(kn_ssd *s) {
    rows rs = {0};
    kiln_status st = kn_ssdx_each(s->index, collect_row, &rs);
    if (!st && rs.nomem) st = kn_error(KILN_ERR_NOMEM, "out of memory reading the SSD cache index");
    const char **known = st ? NULL : malloc((rs.n + 1) * sizeof *known);
    if (!st && !known) st = kn_error(KILN_ERR_NOMEM, "out of memory reading the SSD cache index");
    size_t n_known = 0;
    if (!st) kn_ssdx_begin(s->index);
    for (size_t i = 0; !st && i < rs.n; i++) {
        const row_copy *r = &rs.v[i];
        if (!is_entry_name(r->file) || !r->tokens) { /* a damaged row: the scan below re-adopts its file */
            kn_ssdx_delete(s->index, r->file);
            continue;
        }
        if (strcmp(r->key, s->key_id) != 0) { /* another model's: only its existence matters */
            struct stat sb;
            if (fstatat(s->dirfd, r->file, &sb, 0) != 0) {
                kn_ssdx_delete(s->index, r->file);
                continue;
            }
            s->total_bytes += r->bytes;
            known[n_known++] = r->file;
            continue;
        }
        if (check_row(s, r)) known[n_known++] = r->file;
    }
    if (!st) {
        qsort(known, n_known, sizeof *known, cmp_name);
        DIR *d = NULL;
        const int dfd = dup(s->dirfd);
        if (dfd >= 0 && !(d = fdopendir(dfd))) close(dfd);
        for (struct dirent *de; d && (de = readdir(d));) {
            long pid;
            const char *name = de->d_name;
            if (is_temp_name(name, &pid)) {
                if (pid != (long)getpid() && writer_gone(pid)) unlinkat(s->dirfd, name, 0);
            } else if (is_entry_name(name) && !bsearch(&name, known, n_known, sizeof *known, cmp_name)) {
                adopt(s, name);
            }
        }
        if (d) closedir(d);
        kn_ssdx_commit(s->index);
    }
    for (size_t i = 0; i < rs.n; i++) free(rs.v[i].tokens);
    free(rs.v);
    free(known);
    return st;
}

kiln_status kn_ssd_open(const kn_ssd_params *p, kn_ssd **out) {
    *out = NULL;
    if (!p->dir || !*p->dir) return kn_error(KILN_ERR_INVALID_ARG, "the SSD cache directory is empty");
    if (!p->max_bytes) return kn_error(KILN_ERR_INVALID_ARG, "the SSD cache size must be positive");
    uint64_t k_row, v_row;
    if (!kn_ssdf_rows(&p->key, &k_row, &v_row))
        return kn_error(KILN_ERR_INVALID_ARG, "the SSD cache does not know KV format %u", p->key.kv_type);
    kiln_status st = make_dirs(p->dir);
    if (st) return st;
    kn_ssd *s = kn_calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->dirfd = s->qdirfd = -1;
    s->key = p->key;
    key_id(&s->key, s->key_id);
    s->max_bytes = p->max_bytes;
    s->verify = p->verify;
    s->max_pending = p->max_pending;
    atomic_init(&s->stop, false);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_cond_init(&s->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!(s->dir = kn_strdup(p->dir))) st = KILN_ERR_NOMEM;
    if (!st && (s->dirfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        st = kn_error(KILN_ERR_IO, "cannot open the SSD cache directory %s: %s", p->dir, strerror(errno));
    if (!st) { /* a directory we cannot write into is useless: say so now, not at the first write */
        char probe[64];
        snprintf(probe, sizeof probe, ".probe.%ld", (long)getpid());
        const int fd = openat(s->dirfd, probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        const int err = fd < 0 || write(fd, "k", 1) != 1 ? errno : 0;
        /* full (not unwritable): what it holds still serves, writes fail until there is room */
        if (err == ENOSPC || err == EDQUOT || err == EFBIG)
            KN_LOGW("the SSD cache directory %s is full (%s): cached prefixes are restored, new ones not written "
                    "until there is room",
                    p->dir, strerror(err));
        else if (err)
            st = kn_error(KILN_ERR_IO, "the SSD cache directory %s is not writable: %s", p->dir, strerror(err));
        if (fd >= 0) close(fd);
        unlinkat(s->dirfd, probe, 0);
    }
    if (!st && mkdirat(s->dirfd, "quarantine", 0755) != 0 && errno != EEXIST)
        st = kn_error(KILN_ERR_IO, "cannot create %s/quarantine: %s", p->dir, strerror(errno));
    if (!st && (s->qdirfd = openat(s->dirfd, "quarantine", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        st = kn_error(KILN_ERR_IO, "cannot open %s/quarantine: %s", p->dir, strerror(errno));
    if (!st) {
        char *path = NULL, *broken = NULL;
        bool recreated = false;
        if (asprintf(&path, "%s/index.sqlite", p->dir) < 0) path = NULL;
        if (asprintf(&broken, "%s/quarantine/index.sqlite.%lld", p->dir, (long long)wall_ms()) < 0) broken = NULL;
        st = path && broken ? kn_ssdx_open(path, broken, &s->index, &recreated)
                            : kn_error(KILN_ERR_NOMEM, "out of memory opening the SSD cache");
        if (recreated) s->quarantined++;
        free(path);
        free(broken);
    }
    if (!st) st = load(s);
    if (!st) enforce_cap(s, NULL);
    if (!st && pthread_create(&s->thread, NULL, writer_main, s) != 0)
        st = kn_error(KILN_ERR_INTERNAL, "cannot start the SSD cache writer thread");
    s->thread_started = st == KILN_OK;
    if (st) {
        kn_ssd_close(s);
        return st;
    }
    KN_LOGI("SSD cache %s: %d entries of this model, %.2f of %.2f GB in use", s->dir, s->n_ents,
            (double)s->total_bytes / 1e9, (double)s->max_bytes / 1e9);
    *out = s;
    return KILN_OK;
}

void kn_ssd_close(kn_ssd *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->stop, true);
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    for (ssd_job *j = s->head, *next; j; j = next) {
        next = j->next;
        if (j->kind == JOB_WRITE) j->src.release(j->src.user, false);
        free(j);
    }
    kn_ssdx_close(s->index);
    if (s->dirfd >= 0) close(s->dirfd);
    if (s->qdirfd >= 0) close(s->qdirfd);
    for (int32_t i = 0; i < s->n_ents; i++) free(s->ents[i].tokens);
    free(s->ents);
    free(s->dir);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->done_cv);
    free(s);
}

const char *kn_ssd_dir(const kn_ssd *s) { return s->dir; }

void kn_ssd_get_stats(kn_ssd *s, kn_ssd_stats *out) {
    pthread_mutex_lock(&s->mu);
    out->entries = s->n_ents;
    out->pending = s->pending_writes;
    out->bytes = s->total_bytes;
    out->budget = s->max_bytes;
    out->hits = s->hits;
    out->hit_tokens = s->hit_tokens;
    out->writes = s->writes;
    out->evictions = s->evictions;
    out->quarantined = s->quarantined;
    out->errors = s->errors;
    out->dropped = s->dropped;
    pthread_mutex_unlock(&s->mu);
}
