/*
 * hub_http.c - the Hugging Face Hub's HTTP API over libcurl (linked into the kiln binary only):
 * the model-info request (file list with sizes and LFS sha256, the commit a revision points at)
 * and file downloads from ENDPOINT/REPO/resolve/COMMIT/PATH into a file, resumed with HTTP Range
 * requests, or into memory.
 *
 * Every request follows redirects (the Hub sends large files to a CDN; curl drops the token when
 * the host changes), gives up connecting after 30 s and a transfer that moves nothing for 60 s,
 * and is retried on a dropped connection, a timeout, 429 or 5xx with growing pauses (0.5 s, 1 s,
 * 2 s, ... at most 8 tries; 3 when nothing answers at all), a download resuming from what it has. HF_TOKEN (else
 * HUGGING_FACE_HUB_TOKEN, else the token file huggingface-cli login writes) is sent as a bearer
 * token. SIGINT / SIGTERM set a flag that stops the transfer (the partial file stays, resumable);
 * SIGXFSZ is ignored so that a file-size limit is a write error like a full disk.
 */
#include "hub.h"
#include "kiln.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRIES   8
#define MAX_TOKEN   4096
#define ERRBODY_MAX 400

static volatile sig_atomic_t g_interrupted;
static char g_endpoint[1024];
static char g_auth[MAX_TOKEN + 32]; /* "Authorization: Bearer TOKEN" or "" */

static void on_signal(int sig) {
    g_interrupted = 1;
    (void)sig;
}

bool hub_interrupted(void) { return g_interrupted != 0; }

/* A token from the environment or the token file, without surrounding white space, into buf. */
static void load_token(char *buf, size_t cap) {
    buf[0] = '\0';
    const char *v = getenv("HF_TOKEN");
    if (!v || !*v) v = getenv("HUGGING_FACE_HUB_TOKEN");
    char file[MAX_TOKEN];
    if (!v || !*v) {
        const char *p = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME"), *h = getenv("HOME");
        char path[2048];
        if (p && *p) snprintf(path, sizeof path, "%s", p);
        else if (home && *home) snprintf(path, sizeof path, "%s/token", home);
        else if (h && *h) snprintf(path, sizeof path, "%s/.cache/huggingface/token", h);
        else return;
        FILE *f = fopen(path, "r");
        if (!f) return;
        size_t n = fread(file, 1, sizeof file - 1, f);
        fclose(f);
        file[n] = '\0';
        v = file;
    }
    while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\n' || v[n - 1] == '\r')) n--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e) return; /* not a header value */
    if (n && n < cap) {
        memcpy(buf, v, n);
        buf[n] = '\0';
    }
}

bool hub_http_init(void) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return false;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
    const char *ep = getenv("HF_ENDPOINT");
    snprintf(g_endpoint, sizeof g_endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    size_t n = strlen(g_endpoint);
    while (n > 1 && g_endpoint[n - 1] == '/') g_endpoint[--n] = '\0';
    char tok[MAX_TOKEN];
    load_token(tok, sizeof tok);
    if (tok[0]) snprintf(g_auth, sizeof g_auth, "Authorization: Bearer %s", tok);
    return true;
}

void hub_http_cleanup(void) { curl_global_cleanup(); }

const char *hub_endpoint(void) { return g_endpoint; }

/* Where a response goes: a file (fd >= 0) or memory. */
typedef struct sink {
    int fd;
    uint64_t base;       /* the file's size when the attempt began: the Range start asked for */
    uint64_t total;      /* the whole file's size, for progress (0: unknown) */
    bool decided;        /* the first body byte of the final response was seen */
    bool range_bad;      /* a 206 that does not start where asked */
    long status;         /* the final response's HTTP status */
    int64_t range_start; /* from Content-Range; -1 without one */
    int werr;            /* errno of a failed write */
    char *mem;           /* memory sink: malloc'd, NUL-terminated */
    size_t len, cap, max;
    bool mem_full; /* max bytes arrived (a prefix fetch ends here on purpose) */
    char errbody[ERRBODY_MAX + 1];
    size_t errlen;
    char errcode[64]; /* X-Error-Code */
    char errmsg[256]; /* X-Error-Message */
    hub_progress_fn progress;
    void *user;
    CURL *curl;
} sink;

/* Header lines: a new status line starts a new response (a redirect's headers are forgotten). */
static size_t on_header(char *buf, size_t size, size_t n, void *userp) {
    sink *s = userp;
    const size_t len = size * n;
    char line[512];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, buf, k);
    line[k] = '\0';
    while (k && (line[k - 1] == '\r' || line[k - 1] == '\n')) line[--k] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) {
        s->range_start = -1;
        s->errcode[0] = s->errmsg[0] = '\0';
    } else if (strncasecmp(line, "content-range:", 14) == 0) {
        const char *p = line + 14;
        while (*p == ' ') p++;
        if (strncasecmp(p, "bytes ", 6) == 0) s->range_start = strtoll(p + 6, NULL, 10);
    } else if (strncasecmp(line, "x-error-code:", 13) == 0) {
        const char *p = line + 13;
        while (*p == ' ') p++;
        snprintf(s->errcode, sizeof s->errcode, "%.63s", p);
    } else if (strncasecmp(line, "x-error-message:", 16) == 0) {
        const char *p = line + 16;
        while (*p == ' ') p++;
        snprintf(s->errmsg, sizeof s->errmsg, "%.255s", p);
    }
    return len;
}

static bool write_all(int fd, const char *p, size_t n, int *err) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            *err = w < 0 ? errno : ENOSPC;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static size_t on_body(char *buf, size_t size, size_t n, void *userp) {
    sink *s = userp;
    const size_t len = size * n;
    if (!s->decided) { /* the final response's first body bytes: its status is known now */
        s->decided = true;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
        if (s->fd >= 0 && s->status == 200 && s->base > 0) { /* the Range was ignored: start over */
            if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                s->werr = errno;
                return 0;
            }
            s->base = 0;
        }
        if (s->fd >= 0 && s->status == 206 && s->range_start != (int64_t)s->base) {
            s->range_bad = true;
            return 0;
        }
    }
    if (s->status < 200 || s->status >= 300) { /* keep the start of an error reply for the message */
        size_t k = len < ERRBODY_MAX - s->errlen ? len : ERRBODY_MAX - s->errlen;
        memcpy(s->errbody + s->errlen, buf, k);
        s->errlen += k;
        s->errbody[s->errlen] = '\0';
        return len;
    }
    if (s->fd >= 0) {
        if (!write_all(s->fd, buf, len, &s->werr)) return 0;
        return len;
    }
    size_t k = len;
    if (s->len + k > s->max) {
        k = s->max - s->len;
        s->mem_full = true;
    }
    if (s->len + k + 1 > s->cap) {
        size_t nc = s->cap ? s->cap : 65536;
        while (nc < s->len + k + 1) nc *= 2;
        char *m = realloc(s->mem, nc);
        if (!m) {
            s->werr = ENOMEM;
            return 0;
        }
        s->mem = m;
        s->cap = nc;
    }
    memcpy(s->mem + s->len, buf, k);
    s->len += k;
    s->mem[s->len] = '\0';
    return s->mem_full ? 0 : len;
}

/* Curl calls this about once a second and on every chunk: progress, and Ctrl-C. */
static int on_progress(void *userp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    sink *s = userp;
    (void)dltotal, (void)ultotal, (void)ulnow;
    if (g_interrupted) return 1;
    if (s->progress && s->decided && s->status / 100 == 2) s->progress(s->user, s->base + (uint64_t)dlnow, s->total);
    return 0;
}

/* Sleeps ms milliseconds, waking early on Ctrl-C. */
static void pause_ms(long ms) {
    while (ms > 0 && !g_interrupted) {
        const long step = ms < 100 ? ms : 100;
        struct timespec ts = {0, step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

static void set_error(hub_error *e, hub_fail kind, long http, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_error(hub_error *e, hub_fail kind, long http, const char *fmt, ...) {
    e->kind = kind;
    e->http = http;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

/* Performs a GET of url into s, with the retries described at the top. what names the object for
 * messages ("repository acme/x", "file x.gguf"). For a file sink the Range start is the file's
 * size at each try, and size (when known) is what the finished file must hold. */
static hub_fail perform(const char *url, sink *s, uint64_t size, const char *what, size_t range_max, hub_error *e) {
    CURL *c = curl_easy_init();
    if (!c) {
        set_error(e, HUB_NOMEM, 0, "cannot start an HTTP request");
        return HUB_NOMEM;
    }
    char agent[64], range[64];
    snprintf(agent, sizeof agent, "kiln/%s", kiln_version());
    hub_fail result = HUB_NET;
    for (int attempt = 0; attempt < MAX_TRIES; attempt++) {
        if (attempt) pause_ms(500L << (attempt - 1 < 4 ? attempt - 1 : 4));
        if (g_interrupted) {
            result = HUB_INTERRUPT;
            break;
        }
        s->decided = s->range_bad = s->mem_full = false;
        s->status = 0;
        s->range_start = -1;
        s->werr = 0;
        s->errlen = 0;
        s->errbody[0] = s->errcode[0] = s->errmsg[0] = '\0';
        if (s->fd >= 0) {
            struct stat st;
            if (fstat(s->fd, &st) != 0) {
                e->err = errno;
                set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
                result = HUB_WRITE;
                break;
            }
            s->base = (uint64_t)st.st_size;
            if (size && s->base == size) { /* already whole */
                result = HUB_OK;
                break;
            }
            if (size && s->base > size) { /* longer than the file: not a prefix of it */
                if (ftruncate(s->fd, 0) != 0) {
                    e->err = errno;
                    set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
                    result = HUB_WRITE;
                    break;
                }
                s->base = 0;
            }
            if (lseek(s->fd, 0, SEEK_END) < 0) {
                e->err = errno;
                set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
                result = HUB_WRITE;
                break;
            }
        } else {
            s->len = 0;
        }
        curl_easy_reset(c);
        struct curl_slist *hdr = NULL;
        if (g_auth[0]) hdr = curl_slist_append(hdr, g_auth);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_USERAGENT, agent);
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, s);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, s);
        if (s->fd >= 0 && s->base > 0) {
            snprintf(range, sizeof range, "%llu-", (unsigned long long)s->base);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        } else if (range_max) {
            snprintf(range, sizeof range, "0-%zu", range_max - 1);
            curl_easy_setopt(c, CURLOPT_RANGE, range);
        }
        s->curl = c;
        const CURLcode rc = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        s->status = status;
        curl_slist_free_all(hdr);
        if (g_interrupted) {
            set_error(e, HUB_INTERRUPT, 0, "interrupted");
            result = HUB_INTERRUPT;
            break;
        }
        if (s->werr) {
            e->err = s->werr;
            set_error(e, HUB_WRITE, 0, "%s", strerror(s->werr));
            result = HUB_WRITE;
            break;
        }
        if (s->mem_full) {
            result = HUB_OK;
            break;
        }
        if (s->range_bad) { /* the server sent another range than asked: start the file over */
            if (ftruncate(s->fd, 0) != 0) {
                e->err = errno;
                set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
                result = HUB_WRITE;
                break;
            }
            set_error(e, HUB_BADREPLY, status, "%s: the server answered another byte range than asked", what);
            result = HUB_BADREPLY;
            continue;
        }
        if (rc != CURLE_OK) {
            set_error(e, HUB_NET, 0, "%s: %s", what, curl_easy_strerror(rc));
            result = HUB_NET;
            if (rc == CURLE_OUT_OF_MEMORY) break;
            /* nothing listening or no such host: a few tries only */
            if ((rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) && attempt >= 2) break;
            continue; /* dropped connection, timeout, DNS hiccup: try again */
        }
        if (status == 416 && s->fd >= 0) { /* nothing after the asked start */
            if (!size && s->base > 0) {
                result = HUB_OK;
                break;
            }
            if (ftruncate(s->fd, 0) != 0) {
                e->err = errno;
                set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
                result = HUB_WRITE;
                break;
            }
            continue;
        }
        const char *detail = s->errmsg[0] ? s->errmsg : "";
        if (status == 401 || status == 403) {
            if (strcasecmp(s->errcode, "RepoNotFound") == 0) {
                set_error(e, HUB_NOTFOUND, status, "%s was not found (or it is private: set HF_TOKEN)", what);
                result = HUB_NOTFOUND;
            } else {
                set_error(e, HUB_AUTH, status,
                          "%s needs access (HTTP %ld%s%s): set HF_TOKEN to a token of an account that has accepted "
                          "the model's licence on its Hugging Face page",
                          what, status, *detail ? ": " : "", detail);
                result = HUB_AUTH;
            }
            break;
        }
        if (status == 404) {
            if (strcasecmp(s->errcode, "RevisionNotFound") == 0)
                set_error(e, HUB_NOTFOUND, status, "%s: no such revision", what);
            else set_error(e, HUB_NOTFOUND, status, "%s was not found (HTTP 404)", what);
            result = HUB_NOTFOUND;
            break;
        }
        if (status == 429 || status >= 500) {
            set_error(e, HUB_HTTP, status, "%s: HTTP %ld from the server", what, status);
            result = HUB_HTTP;
            continue;
        }
        if (status != 200 && status != 206) {
            set_error(e, HUB_HTTP, status, "%s: HTTP %ld%s%s", what, status, *detail ? ": " : "", detail);
            result = HUB_HTTP;
            break;
        }
        if (s->fd >= 0 && size) { /* a reply that ended early without an error: resume it */
            struct stat st;
            if (fstat(s->fd, &st) == 0 && (uint64_t)st.st_size < size) {
                set_error(e, HUB_NET, 0, "%s: the connection ended early", what);
                result = HUB_NET;
                continue;
            }
        }
        result = HUB_OK;
        break;
    }
    curl_easy_cleanup(c);
    if (result == HUB_OK) e->kind = HUB_OK;
    else if (result == HUB_INTERRUPT) set_error(e, HUB_INTERRUPT, 0, "interrupted");
    return result;
}

/* s escaped for a URL (malloc'd); with keep_slash, '/' stays as it is (a path in the repository). */
static char *escape(const char *s, bool keep_slash) {
    size_t cap = strlen(s) * 3 + 1, o = 0;
    char *r = malloc(cap);
    if (!r) return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~", *p) ||
            (keep_slash && *p == '/'))
            r[o++] = (char)*p;
        else o += (size_t)snprintf(r + o, cap - o, "%%%02X", *p);
    }
    r[o] = '\0';
    return r;
}

/* ENDPOINT/REPO/resolve/COMMIT/PATH (malloc'd). */
static char *resolve_url(const char *repo, const char *commit, const char *path) {
    char *p = escape(path, true), *c = escape(commit, false), *url = NULL;
    if (p && c && asprintf(&url, "%s/%s/resolve/%s/%s", g_endpoint, repo, c, p) < 0) url = NULL;
    free(p);
    free(c);
    return url;
}

static bool is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* A path from a listing that is safe to create under a snapshot: relative, no "." or ".."
 * component, no empty component, no backslash or control character, at most 1000 bytes. */
static bool safe_path(const char *p) {
    const size_t n = strlen(p);
    if (!n || n > 1000 || p[0] == '/' || p[n - 1] == '/') return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == '\\' || p[i] == 0x7f) return false;
    for (const char *c = p; c;) {
        const char *e = strchr(c, '/');
        const size_t k = e ? (size_t)(e - c) : strlen(c);
        if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.')) return false;
        c = e ? e + 1 : NULL;
    }
    return true;
}

void hub_repo_free(hub_repo *r) {
    for (size_t i = 0; i < r->n; i++) free(r->files[i].path);
    free(r->files);
    free(r->id);
    free(r->commit);
    memset(r, 0, sizeof *r);
}

hub_fail hub_model_info(const char *repo, const char *rev, hub_repo *out, hub_error *e) {
    memset(out, 0, sizeof *out);
    memset(e, 0, sizeof *e);
    char *r = escape(rev, false), *url = NULL, what[300];
    if (!r || asprintf(&url, "%s/api/models/%s/revision/%s?blobs=true", g_endpoint, repo, r) < 0) url = NULL;
    free(r);
    if (!url) {
        set_error(e, HUB_NOMEM, 0, "out of memory");
        return HUB_NOMEM;
    }
    snprintf(what, sizeof what, "repository %s (revision %s)", repo, rev);
    sink s = {.fd = -1, .max = HUB_MAX_INFO};
    hub_fail f = perform(url, &s, 0, what, 0, e);
    free(url);
    if (f == HUB_OK && s.mem_full) {
        set_error(e, HUB_BADREPLY, 0, "%s: the file list is larger than %u MiB", what, HUB_MAX_INFO >> 20);
        f = HUB_BADREPLY;
    }
    if (f != HUB_OK) {
        free(s.mem);
        return f;
    }
    json_error_t jerr;
    json_t *root = json_loadb(s.mem ? s.mem : "", s.len, 0, &jerr);
    free(s.mem);
    const char *sha = json_string_value(json_object_get(root, "sha"));
    json_t *sib = json_object_get(root, "siblings");
    if (!root || !sha || !is_hex(sha, 40) || !json_is_array(sib)) {
        set_error(e, HUB_BADREPLY, 0, "%s: the Hub's reply is not a model description%s%s", what, root ? "" : ": ",
                  root ? "" : jerr.text);
        json_decref(root);
        return HUB_BADREPLY;
    }
    size_t n = json_array_size(sib);
    if (n > HUB_MAX_FILES) n = HUB_MAX_FILES;
    out->id = strdup(repo);
    out->commit = strdup(sha);
    out->files = calloc(n ? n : 1, sizeof *out->files);
    if (!out->id || !out->commit || !out->files) {
        json_decref(root);
        hub_repo_free(out);
        set_error(e, HUB_NOMEM, 0, "out of memory");
        return HUB_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(sib, i);
        const char *name = json_string_value(json_object_get(o, "rfilename"));
        if (!name || !safe_path(name)) continue; /* nothing kiln could store safely */
        hub_file *hf = &out->files[out->n];
        json_t *lfs = json_object_get(o, "lfs");
        const char *sha256 = json_string_value(json_object_get(lfs, "sha256"));
        const char *blob = json_string_value(json_object_get(o, "blobId"));
        json_int_t size = json_integer_value(json_object_get(o, "size"));
        if (json_is_integer(json_object_get(lfs, "size"))) size = json_integer_value(json_object_get(lfs, "size"));
        if (sha256 && is_hex(sha256, 64)) {
            snprintf(hf->sha256, sizeof hf->sha256, "%s", sha256);
            snprintf(hf->blob_id, sizeof hf->blob_id, "%s", sha256);
        } else if (blob && is_hex(blob, 40)) {
            snprintf(hf->blob_id, sizeof hf->blob_id, "%s", blob);
        } else {
            continue; /* no name to store its content under */
        }
        hf->size = size > 0 ? (uint64_t)size : 0;
        if (!(hf->path = strdup(name))) {
            json_decref(root);
            hub_repo_free(out);
            set_error(e, HUB_NOMEM, 0, "out of memory");
            return HUB_NOMEM;
        }
        out->n++;
    }
    json_decref(root);
    return HUB_OK;
}

hub_fail hub_download(const char *repo, const char *commit, const hub_file *f, const char *dest,
                      hub_progress_fn progress, void *user, hub_error *e) {
    memset(e, 0, sizeof *e);
    char *url = resolve_url(repo, commit, f->path), what[1100];
    if (!url) {
        set_error(e, HUB_NOMEM, 0, "out of memory");
        return HUB_NOMEM;
    }
    snprintf(what, sizeof what, "file %s of %s", f->path, repo);
    const int fd = open(dest, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        e->err = errno;
        set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
        free(url);
        return HUB_WRITE;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) { /* two pulls of one file would interleave their bytes */
        set_error(e, HUB_BUSY, 0, "%s: another kiln pull is downloading it into %s", what, dest);
        close(fd);
        free(url);
        return HUB_BUSY;
    }
    sink s = {.fd = fd, .total = f->size, .progress = progress, .user = user};
    hub_fail r = perform(url, &s, f->size, what, 0, e);
    if (close(fd) != 0 && r == HUB_OK) {
        e->err = errno;
        set_error(e, HUB_WRITE, 0, "%s", strerror(errno));
        r = HUB_WRITE;
    }
    free(url);
    return r;
}

hub_fail hub_fetch_small(const char *repo, const char *commit, const char *path, size_t max_bytes, char **out,
                         size_t *len, hub_error *e) {
    memset(e, 0, sizeof *e);
    *out = NULL;
    *len = 0;
    char *url = resolve_url(repo, commit, path), what[1100];
    if (!url) {
        set_error(e, HUB_NOMEM, 0, "out of memory");
        return HUB_NOMEM;
    }
    snprintf(what, sizeof what, "file %s of %s", path, repo);
    sink s = {.fd = -1, .max = max_bytes ? max_bytes : HUB_MAX_SMALL};
    hub_fail r = perform(url, &s, 0, what, max_bytes, e);
    free(url);
    if (r == HUB_OK && s.mem_full && !max_bytes) {
        set_error(e, HUB_BADREPLY, 0, "%s is larger than %u MiB", what, HUB_MAX_SMALL >> 20);
        r = HUB_BADREPLY;
    }
    if (r != HUB_OK) {
        free(s.mem);
        return r;
    }
    if (!s.mem && !(s.mem = calloc(1, 1))) {
        set_error(e, HUB_NOMEM, 0, "out of memory");
        return HUB_NOMEM;
    }
    *out = s.mem;
    *len = s.len;
    return HUB_OK;
}
