/*
 * pool.c - the model pool of `kiln serve` (pool.h): one server, many models.
 *
 * Names. A request names its model in the body's top-level "model" (Ollama's routes also "name").
 * It goes to the default model (-m, or the one kiln chose) when the field is absent or empty, is
 * "default", or names a hosted API's model (gpt-*, chatgpt-*, o1/o3/o4*, claude-*, text-embedding-*):
 * clients that hard-code those keep working as they did with one model. Any other name is looked up
 * in order: --model-alias names, ":latest" dropped (Ollama's tag), the models the pool already knows
 * (by id or path), then what `kiln ls` finds (its friendly name, a discovered file's id or path, or
 * ORG/NAME[:QUANT] of the Hugging Face cache; srv_pool_config.resolve). A name nothing answers to
 * gets 404 model_not_found in the API's error shape, pointing at GET /v1/models. Results are
 * remembered for a few seconds, so a stream of unknown names costs no directory scan each.
 *
 * Loading. Models load on first use and stay loaded while --max-models and --models-memory allow
 * (each model's planned memory: weights, the KV of its rows, its prompt cache); to make room, the
 * least recently used model with no request in flight is unloaded (a model that alone exceeds the
 * memory still loads when nothing else is loaded: estimates are advisory). A request for a model
 * being loaded waits for it, up to --model-load-timeout, then gets 503 saying so; a load that fails
 * answers 500 with the reason, and the next request tries again. Each model has its own engine and
 * caches (the prefix cache in its engine; the SSD tier's files are keyed by the model's fingerprint).
 *
 * Isolation (isolate.h). Each loaded model is its own engine child process, so a crash of one model
 * fails only its own requests and restarts only its engine (backoff and give-up per model, as
 * before for the one engine). The supervisor must know the target model before it hands a
 * connection over, and it never consumes a byte: it peeks at the request (recv MSG_PEEK, with the
 * socket's receive buffer raised to hold a typical request) until the head and the declared body
 * are in, reads "model" from the body, and hands the socket to that model's child, which reads the
 * request from the socket itself as before. A request too large to be held whole in the socket is
 * routed by the part the socket holds (a "model" before the long "messages" routes it; otherwise
 * it goes to the default model, and if it named another, that engine answers 400 saying so; a
 * declared body over --max-body-mb is handed over at once, for the engine's 413). While it holds a
 * connection the supervisor applies the engine's per-address connection limit and request timeout
 * itself, and answers "Expect: 100-continue" so that such a client sends its body to be read. An
 * engine child answers each request with "Connection: close", so that every request reaches the
 * supervisor to be routed (a loopback handshake is small next to a generation). Requests that name
 * no model (/v1/models, /stats, /tokenize, ...) go to the default model when it is loaded, else the
 * most recently used loaded model. The table of models (srv_pool_table) lives in memory shared with
 * the children, read-only there, so any engine can list every model and its state; only the
 * supervisor writes it.
 *
 * Keep-alive. Ollama's generation and embedding routes carry keep_alive (ollama.c): how long their
 * model stays loaded once idle (0: unloaded right after the response; negative, or absent: kept,
 * kiln's default). The pool's owner reads it from the body (srv_pool_body_keep: the supervisor from
 * the peeked request, which must be whole; without isolation srv_pool_enter) and keeps it in the
 * model's entry; a model with no request in flight and an idle engine for that long is unloaded (the
 * supervisor's loop, or without isolation a thread of this file). Ollama's unload call (keep_alive 0,
 * no prompt) for a model that is not loaded is answered without loading it; GET /health and
 * /api/ps load nothing either when no model is loaded.
 *
 * Without isolation (--no-isolation) all engines live in this process: srv_pool_enter loads the
 * model on the request's own thread (others wait on a condition), and each model has its own srv
 * (the model, the engine, its counters); entry 0's is the server's own.
 */
#include "pool.h"

#include "isolate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>

#define NAME_CACHE      64    /* names remembered */
#define NAME_FOUND_MS   10000 /* how long a found name is remembered */
#define NAME_UNKNOWN_MS 2000  /* ... and an unknown one */

static srv_pool_config g_cfg;
static srv_pool_table *g_tab;
static srv *g_main;               /* the single process's server; NULL in the supervisor and in children */
static srv *g_slot[SRV_POOL_MAX]; /* without isolation: each entry's server (0: g_main) */
static int g_child = -1;          /* in an engine child: the entry it serves */
static srv *g_child_srv;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static _Thread_local int t_entered = -1; /* the entry the calling thread's request holds */
static pthread_t g_reaper;               /* without isolation: unloads models whose keep-alive ran out */
static bool g_reaper_on, g_reaper_stop;

typedef struct cached_name {
    char name[256], id[192], path[1024];
    uint64_t bytes;
    srv_pool_name kind;
    double at;
} cached_name;
static cached_name g_names[NAME_CACHE];
static size_t g_next_name;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void copy(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src ? src : ""); }

bool srv_pool_init(const srv_pool_config *cfg, srv *main) {
    g_cfg = *cfg;
    void *m = mmap(NULL, sizeof *g_tab, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    g_tab = m;
    memset(g_tab, 0, sizeof *g_tab);
    g_tab->n = 1;
    g_tab->max_models = cfg->max_models;
    g_tab->memory = cfg->memory;
    srv_pool_entry *e = &g_tab->e[0];
    copy(e->id, sizeof e->id, cfg->default_id);
    copy(e->path, sizeof e->path, cfg->default_path);
    e->bytes = cfg->default_bytes;
    e->state = main ? SRV_POOL_READY : SRV_POOL_UNLOADED;
    e->loads = main ? 1 : 0;
    e->last_used_ms = now_ms();
    e->keep_alive_ms = SRV_POOL_KEEP_FOREVER;
    g_main = main;
    g_slot[0] = main;
    return true;
}

void srv_pool_free(void) {
    if (g_reaper_on) {
        pthread_mutex_lock(&g_mu);
        g_reaper_stop = true;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        pthread_join(g_reaper, NULL);
        g_reaper_on = g_reaper_stop = false;
    }
    for (size_t i = 1; i < SRV_POOL_MAX; i++) {
        if (!g_slot[i]) continue;
        srv_stats_destroy(&g_slot[i]->stats);
        free(g_slot[i]);
        g_slot[i] = NULL;
    }
    g_slot[0] = g_main = NULL;
    if (g_tab && g_child < 0) munmap(g_tab, sizeof *g_tab);
    g_tab = NULL;
}

const srv_pool_config *srv_pool_cfg(void) { return &g_cfg; }

srv_pool_table *srv_pool_table_get(void) { return g_tab; }

void srv_pool_set_child(size_t idx, srv *s) {
    g_child = (int)idx;
    g_child_srv = s;
    if (g_tab) mprotect(g_tab, sizeof *g_tab, PROT_READ);
}

bool srv_pool_close_connections(void) { return g_child >= 0; }

/* ---- names ----------------------------------------------------------------------------------- */

/* Names of hosted APIs' models, which clients send by default: they mean "the model you serve". */
static bool hosted_name(const char *n) {
    static const char *const prefixes[] = {"gpt-", "chatgpt-", "claude-", "text-embedding-"};
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++)
        if (strncmp(n, prefixes[k], strlen(prefixes[k])) == 0) return true;
    return (n[0] == 'o' && (n[1] == '1' || n[1] == '3' || n[1] == '4') && (n[2] == 0 || n[2] == '-')) ||
           strcmp(n, "default") == 0;
}

/* The entry whose id or path is name (lock held), or -1. */
static int find_entry(const char *name) {
    for (uint32_t i = 0; g_tab && i < g_tab->n; i++)
        if (strcmp(g_tab->e[i].id, name) == 0 || strcmp(g_tab->e[i].path, name) == 0) return (int)i;
    return -1;
}

/* Looks name up without aliases or tags (g_mu held); fills id/path/bytes when found. */
static srv_pool_name lookup(const char *name, char *id, size_t idc, char *path, size_t pathc, uint64_t *bytes) {
    const int k = find_entry(name);
    if (k >= 0) {
        copy(id, idc, g_tab->e[k].id);
        copy(path, pathc, g_tab->e[k].path);
        *bytes = g_tab->e[k].bytes;
        return SRV_NAME_FOUND;
    }
    const double t = now_ms();
    for (size_t i = 0; i < NAME_CACHE; i++) {
        const cached_name *c = &g_names[i];
        if (!c->name[0] || strcmp(c->name, name) != 0) continue;
        if (t - c->at > (c->kind == SRV_NAME_FOUND ? NAME_FOUND_MS : NAME_UNKNOWN_MS)) break;
        copy(id, idc, c->id);
        copy(path, pathc, c->path);
        *bytes = c->bytes;
        return c->kind;
    }
    cached_name c = {.kind = SRV_NAME_UNKNOWN, .at = t};
    if (strlen(name) >= sizeof c.name) return SRV_NAME_UNKNOWN;
    copy(c.name, sizeof c.name, name);
    /* the directory scan runs unlocked: other requests go on meanwhile */
    pthread_mutex_unlock(&g_mu);
    const bool found =
        g_cfg.resolve && g_cfg.resolve(name, c.id, sizeof c.id, c.path, sizeof c.path, &c.bytes) && c.id[0];
    pthread_mutex_lock(&g_mu);
    if (found) c.kind = SRV_NAME_FOUND;
    size_t slot = g_next_name++ % NAME_CACHE;
    for (size_t i = 0; i < NAME_CACHE; i++)
        if (strcmp(g_names[i].name, name) == 0) slot = i;
    g_names[slot] = c;
    copy(id, idc, c.id);
    copy(path, pathc, c.path);
    *bytes = c.bytes;
    return c.kind;
}

srv_pool_name srv_pool_resolve(const char *name, char *id, size_t idc, char *path, size_t pathc, uint64_t *bytes) {
    *bytes = 0;
    if (idc) id[0] = 0;
    if (pathc) path[0] = 0;
    if (!name || !*name) return SRV_NAME_DEFAULT;
    for (size_t i = 0; i < g_cfg.n_aliases; i++)
        if (strcmp(g_cfg.alias_name[i], name) == 0) {
            name = g_cfg.alias_target[i];
            break;
        }
    pthread_mutex_lock(&g_mu);
    srv_pool_name k = lookup(name, id, idc, path, pathc, bytes);
    const size_t n = strlen(name);
    if (k == SRV_NAME_UNKNOWN && n > 7 && strcmp(name + n - 7, ":latest") == 0) {
        char bare[256];
        if (n - 7 < sizeof bare) {
            memcpy(bare, name, n - 7);
            bare[n - 7] = 0;
            k = lookup(bare, id, idc, path, pathc, bytes);
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (k == SRV_NAME_UNKNOWN && hosted_name(name)) return SRV_NAME_DEFAULT;
    /* the default model by its own id or path */
    if (k == SRV_NAME_FOUND && g_tab && strcmp(path, g_tab->e[0].path) == 0) return SRV_NAME_DEFAULT;
    return k;
}

/* The entry of path (lock held), added when new; -2 when the table is full of loaded models. */
static int entry_of(const char *id, const char *path, uint64_t bytes) {
    for (uint32_t i = 0; i < g_tab->n; i++)
        if (strcmp(g_tab->e[i].path, path) == 0) return (int)i;
    int k = -1;
    if (g_tab->n < SRV_POOL_MAX) k = (int)g_tab->n++;
    else /* reuse the least recently used entry that is not loaded */
        for (uint32_t i = 1; i < g_tab->n; i++)
            if ((g_tab->e[i].state == SRV_POOL_UNLOADED || g_tab->e[i].state == SRV_POOL_FAILED) &&
                !g_tab->e[i].in_flight && (!g_slot[i] || !g_slot[i]->model) &&
                (k < 0 || g_tab->e[i].last_used_ms < g_tab->e[k].last_used_ms))
                k = (int)i;
    if (k < 0) return -2;
    srv_pool_entry *e = &g_tab->e[k];
    memset(e, 0, sizeof *e);
    copy(e->id, sizeof e->id, id);
    copy(e->path, sizeof e->path, path);
    e->bytes = bytes;
    e->keep_alive_ms = SRV_POOL_KEEP_FOREVER;
    return k;
}

int srv_pool_index(const char *name) {
    char id[192], path[1024];
    uint64_t bytes;
    const srv_pool_name k = srv_pool_resolve(name, id, sizeof id, path, sizeof path, &bytes);
    if (k == SRV_NAME_DEFAULT) return 0;
    if (k == SRV_NAME_UNKNOWN) return -1;
    pthread_mutex_lock(&g_mu);
    const int i = entry_of(id, path, bytes);
    pthread_mutex_unlock(&g_mu);
    return i;
}

int srv_pool_any(void) {
    if (!g_tab || g_tab->e[0].state == SRV_POOL_READY) return 0;
    int best = -1;
    for (uint32_t i = 1; i < g_tab->n; i++)
        if (g_tab->e[i].state == SRV_POOL_READY && (best < 0 || g_tab->e[i].last_used_ms > g_tab->e[best].last_used_ms))
            best = (int)i;
    return best < 0 ? 0 : best;
}

/* ---- reading a request's start ----------------------------------------------------------------- */

/* Skips whitespace from p (< end). */
static const char *ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* The end of the JSON string starting at p (at the opening quote): just past the closing quote,
 * or NULL when it is cut short. */
static const char *str_end(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

/* The end of the JSON value at p (a string, a number, a literal, an object or an array), or NULL
 * when it is cut short or malformed. */
static const char *value_end(const char *p, const char *end) {
    if (p >= end) return NULL;
    if (*p == '"') return str_end(p, end);
    if (*p != '{' && *p != '[') {
        while (p < end && !strchr(",}] \t\r\n", *p)) p++;
        return p < end ? p : NULL;
    }
    int depth = 0;
    while (p < end) {
        if (*p == '"') {
            if (!(p = str_end(p, end))) return NULL;
            continue;
        }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') {
            if (--depth == 0) return p + 1;
        }
        p++;
    }
    return NULL;
}

/* The string literal s..e (quotes included) decoded into out (cap); false when it is not one. */
static bool decode_string(const char *s, const char *e, char *out, size_t cap) {
    json_t *v = json_loadb(s, (size_t)(e - s), JSON_DECODE_ANY, NULL);
    const bool ok =
        json_is_string(v) && json_string_length(v) < cap && !memchr(json_string_value(v), 0, json_string_length(v));
    if (ok) memcpy(out, json_string_value(v), json_string_length(v) + 1);
    json_decref(v);
    return ok;
}

void srv_pool_body_model(const char *body, size_t n, bool whole, bool name_too, char *out, size_t cap) {
    const char *p = body, *end = body + n;
    char name[256] = "";
    out[0] = 0;
    if (whole) { /* a body that is not JSON names no model: its route answers 400 */
        json_t *j = json_loadb(body, n, 0, NULL);
        json_t *m = json_object_get(j, "model");
        if (name_too && (!m || json_is_null(m))) m = json_object_get(j, "name");
        if (json_is_string(m) && json_string_length(m) < cap && !memchr(json_string_value(m), 0, json_string_length(m)))
            memcpy(out, json_string_value(m), json_string_length(m) + 1);
        json_decref(j);
        return;
    }
    p = ws(p, end);
    if (p >= end || *p != '{') return;
    p = ws(p + 1, end);
    while (p < end && *p == '"') {
        const char *k = p, *ke = str_end(p, end);
        if (!ke) return;
        p = ws(ke, end);
        if (p >= end || *p != ':') return;
        p = ws(p + 1, end);
        const char *v = p, *ve = value_end(p, end);
        if (!ve) break;
        const size_t kl = (size_t)(ke - k);
        if (*v == '"' && kl == 7 && memcmp(k, "\"model\"", 7) == 0) {
            if (decode_string(v, ve, out, cap) && out[0]) return;
            out[0] = 0;
        } else if (*v == '"' && name_too && kl == 6 && memcmp(k, "\"name\"", 6) == 0) {
            if (!decode_string(v, ve, name, sizeof name)) name[0] = 0;
        }
        p = ws(ve, end);
        if (p < end && *p == ',') p = ws(p + 1, end);
        else break;
    }
    if (name[0]) copy(out, cap, name);
}

/* ---- keep_alive ---------------------------------------------------------------------------------- */

#define KEEP_MAX_MS 3.15576e12 /* a century: longer is for ever */

/* A Go-style duration, [-+]?(D[.D]UNIT)+ with the units ns, us (µs), ms, s, m, h, or "0", or (as
 * kiln's leniency) a plain number of seconds: its milliseconds in *ms. False when malformed. */
static bool parse_duration(const char *p, double *ms) {
    bool neg = false;
    if (*p == '-' || *p == '+') neg = *p++ == '-';
    if (!*p) return false;
    double total = 0;
    bool first = true;
    while (*p) {
        double v = 0, scale = 1;
        bool digits = false;
        while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0'), digits = true;
        if (*p == '.') {
            for (p++; *p >= '0' && *p <= '9'; p++) v += (*p - '0') * (scale /= 10), digits = true;
        }
        if (!digits) return false;
        static const struct {
            const char *name;
            double ms;
        } units[] = {{"ns", 1e-6}, {"us", 1e-3}, {"\xc2\xb5s", 1e-3}, {"\xce\xbcs", 1e-3},
                     {"ms", 1},    {"s", 1e3},   {"m", 6e4},          {"h", 3.6e6}};
        size_t best = 0, best_len = 0;
        for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
            const size_t l = strlen(units[k].name);
            if (l > best_len && strncmp(p, units[k].name, l) == 0) best = k, best_len = l;
        }
        if (!best_len) {
            if (first && !*p) { /* "300": seconds; "0" too */
                total = v * 1e3;
                break;
            }
            return false;
        }
        total += v * units[best].ms;
        if (total > KEEP_MAX_MS) total = KEEP_MAX_MS * 2; /* no overflow from a long string */
        p += best_len;
        first = false;
    }
    *ms = neg ? -total : total;
    return true;
}

bool srv_pool_keep_alive_parse(const json_t *v, int64_t *ms) {
    double d = 0;
    if (json_is_number(v)) d = json_number_value(v) * 1e3;
    else if (!json_is_string(v) || json_string_length(v) >= 64 ||
             memchr(json_string_value(v), 0, json_string_length(v)) || !parse_duration(json_string_value(v), &d))
        return false;
    if (d < 0 || d > KEEP_MAX_MS || d != d) *ms = SRV_POOL_KEEP_FOREVER;
    else *ms = (int64_t)d;
    return true;
}

/* The path of url without its query. */
static bool path_is(const char *url, const char *path) {
    const size_t n = strlen(path);
    return strncmp(url, path, n) == 0 && (url[n] == 0 || url[n] == '?');
}

void srv_pool_body_keep(const char *url, const char *body, size_t n, srv_pool_keep *out) {
    memset(out, 0, sizeof *out);
    const bool chat = path_is(url, "/api/chat"), gen = path_is(url, "/api/generate");
    if (!chat && !gen && !path_is(url, "/api/embed") && !path_is(url, "/api/embeddings")) return;
    json_t *j = json_loadb(body, n, 0, NULL);
    json_t *v = json_object_get(j, "keep_alive");
    int64_t ms = SRV_POOL_KEEP_FOREVER;
    if (json_is_object(j) && (!v || json_is_null(v) || srv_pool_keep_alive_parse(v, &ms))) {
        out->applies = true;
        out->ms = ms;
        out->chat = chat;
        if (ms == 0 && chat) {
            json_t *m = json_object_get(j, "messages");
            out->unload = !m || json_is_null(m) || (json_is_array(m) && json_array_size(m) == 0);
        } else if (ms == 0 && gen) {
            json_t *p = json_object_get(j, "prompt");
            out->unload = !p || json_is_null(p) || (json_is_string(p) && json_string_length(p) == 0);
        }
    }
    json_decref(j);
}

double srv_pool_expires_unix(const srv_pool_entry *e) {
    if (e->keep_alive_ms < 0) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const double t = now_ms(), real = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    const double at = e->expires_ms > 0 ? e->expires_ms : t + (double)e->keep_alive_ms;
    return real + (at > t ? at - t : 0) / 1e3;
}

/* The value of header h (lowercase name, with the colon) in head[0..n), or NULL; *len its length. */
static const char *header(const char *head, size_t n, const char *h, size_t *len) {
    const size_t hl = strlen(h);
    for (const char *p = head; p && p < head + n;) {
        const char *eol = memchr(p, '\n', (size_t)(head + n - p));
        if (!eol) break;
        if ((size_t)(eol - p) > hl && strncasecmp(p, h, hl) == 0) {
            const char *v = p + hl;
            while (v < eol && (*v == ' ' || *v == '\t')) v++;
            const char *ve = eol;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ')) ve--;
            *len = (size_t)(ve - v);
            return v;
        }
        p = eol + 1;
    }
    return NULL;
}

bool srv_pool_peek_request(const char *buf, size_t n, bool stalled, size_t max_body, srv_pool_peek *out) {
    memset(out, 0, sizeof *out);
    const char *he = NULL;
    for (size_t i = 0; i + 3 < n && !he; i++)
        if (memcmp(buf + i, "\r\n\r\n", 4) == 0) he = buf + i + 4;
    if (!he) {
        if (!stalled) return false;
        return true; /* a head that never ends: the engine's HTTP layer answers it */
    }
    /* the request line: METHOD SP URL SP VERSION */
    const char *sp1 = memchr(buf, ' ', (size_t)(he - buf));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(he - sp1 - 1)) : NULL;
    char url[64] = "";
    if (sp2) {
        const size_t ul = (size_t)(sp2 - sp1 - 1);
        memcpy(url, sp1 + 1, ul < sizeof url - 1 ? ul : sizeof url - 1);
        url[ul < sizeof url - 1 ? ul : sizeof url - 1] = 0;
        const size_t ml = (size_t)(sp1 - buf);
        const bool get = (ml == 3 && memcmp(buf, "GET", 3) == 0) || (ml == 4 && memcmp(buf, "HEAD", 4) == 0);
        out->health = get && (strcmp(url, "/health") == 0 || strcmp(url, "/v1/health") == 0);
        out->ps = get && path_is(url, "/api/ps");
    }
    out->api = (uint32_t)srv_route_api(url);
    size_t len = 0;
    const char *cl = header(buf, (size_t)(he - buf), "content-length:", &len);
    const char *te = header(buf, (size_t)(he - buf), "transfer-encoding:", &len);
    const char *body = he;
    size_t want = 0;
    if (te) { /* chunked: the first chunk's size line is skipped; routed by what is there */
        const char *eol = memchr(he, '\n', (size_t)(buf + n - he));
        if (!eol && !stalled) return false;
        body = eol ? eol + 1 : buf + n;
        want = (size_t)-1;
    } else if (cl) {
        errno = 0;
        const unsigned long long v = strtoull(cl, NULL, 10);
        want = errno == ERANGE || v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    }
    const size_t have = (size_t)(buf + n - body);
    out->complete = have >= want;
    /* a body over the limit is not waited for: the engine answers 413 at once */
    if (!out->complete && !stalled && want <= max_body) {
        size_t el = 0;
        const char *ex = header(buf, (size_t)(he - buf), "expect:", &el);
        out->expect_continue = ex && el == 12 && strncasecmp(ex, "100-continue", 12) == 0;
        return false;
    }
    const size_t blen = have < want ? have : want;
    srv_json_alloc_begin();
    srv_pool_body_model(body, blen, out->complete && !te, out->api == SRV_API_OLLAMA, out->model, sizeof out->model);
    if (out->complete && !te && out->api == SRV_API_OLLAMA) srv_pool_body_keep(url, body, blen, &out->keep);
    out->nomem = srv_json_alloc_failures() != 0;
    return true;
}

/* ---- error bodies ------------------------------------------------------------------------------ */

json_t *srv_pool_error_body(uint32_t api, unsigned status, const char *code, const char *msg) {
    if (api == SRV_API_OLLAMA) return json_pack("{s:s}", "error", msg);
    if (api == SRV_API_ANTHROPIC) return srv_anthropic_error(status, msg);
    return json_pack("{s:{s:s, s:s, s:s, s:s}}", "error", "message", msg, "type",
                     status < 500 ? "invalid_request_error" : "server_error", "param", "model", "code", code);
}

/* The words of a 404 for name. */
static void unknown_message(uint32_t api, const char *name, char *out, size_t cap) {
    char safe[300];
    srv_text_sanitize(safe, sizeof safe, name, strlen(name), false);
    if (api == SRV_API_OLLAMA)
        snprintf(out, cap, "model '%s' not found: GET /api/tags lists the models this server can run", safe);
    else
        snprintf(out, cap,
                 "the model '%s' does not exist: GET /v1/models lists the models this server can serve (`kiln ls` "
                 "on its machine; --model-alias adds names)",
                 safe);
}

json_t *srv_pool_unknown_body(uint32_t api, const char *name) {
    char msg[512];
    unknown_message(api, name, msg, sizeof msg);
    return srv_pool_error_body(api, 404, "model_not_found", msg);
}

/* ---- routing in an engine's process ------------------------------------------------------------ */

/* Whether the engine of s is idle (no request running or queued). */
static bool engine_idle(srv *s) {
    if (!s || !s->engine) return true;
    kiln_engine_stats es;
    kiln_engine_get_stats(s->engine, &es);
    return es.active == 0 && es.queued == 0;
}

/* The loaded models' count and planned bytes (lock held). */
static void loaded(unsigned *count, uint64_t *bytes) {
    *count = 0;
    *bytes = 0;
    for (uint32_t i = 0; i < g_tab->n; i++) {
        const uint32_t st = g_tab->e[i].state;
        if (st == SRV_POOL_LOADING || st == SRV_POOL_READY || st == SRV_POOL_UNLOADING) {
            (*count)++;
            *bytes += g_tab->e[i].bytes;
        }
    }
}

/* Makes room for entry k (lock held, without isolation): unloads least recently used idle models
 * until --max-models and --models-memory allow k. False when it cannot (every other loaded model
 * is busy): the caller waits. */
static bool make_room(int k) {
    for (;;) {
        unsigned n;
        uint64_t b;
        loaded(&n, &b);
        if (n == 0) return true;
        const bool count_ok = !g_tab->max_models || n < g_tab->max_models;
        const bool mem_ok = !g_tab->memory || b + g_tab->e[k].bytes <= g_tab->memory;
        if (count_ok && mem_ok) return true;
        int victim = -1;
        for (uint32_t i = 0; i < g_tab->n; i++) {
            const srv_pool_entry *e = &g_tab->e[i];
            if ((int)i == k || e->state != SRV_POOL_READY || e->in_flight || !engine_idle(g_slot[i])) continue;
            if (victim < 0 || e->last_used_ms < g_tab->e[victim].last_used_ms) victim = (int)i;
        }
        if (victim < 0) return false;
        srv_pool_entry *v = &g_tab->e[victim];
        v->state = SRV_POOL_UNLOADING;
        srv *s = g_slot[victim];
        pthread_mutex_unlock(&g_mu);
        fprintf(stderr, "kiln serve: unloading model '%s' (least recently used) to make room for '%s'\n", v->id,
                g_tab->e[k].id);
        if (s && s->engine) kiln_engine_shutdown(s->engine, 0);
        if (s) g_cfg.unload(s);
        pthread_mutex_lock(&g_mu);
        v->state = SRV_POOL_UNLOADED;
        pthread_cond_broadcast(&g_cv);
    }
}

/* A server for entry k (lock held): entry 0's is the main one; others copy its configuration. */
static srv *slot_of(int k) {
    if (g_slot[k]) return g_slot[k];
    srv *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = g_main->cfg;
    s->started = g_main->started;
    srv_stats_init(&s->stats);
    atomic_init(&s->stopping, false);
    atomic_init(&s->conns, 0);
    g_slot[k] = s;
    return s;
}

/* Waits on the pool's condition until deadline (CLOCK_MONOTONIC ms); false once it has passed. */
static bool wait_until(double deadline) {
    const double left = deadline - now_ms();
    if (left <= 0) return false;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const double wait = left < 100 ? left : 100; /* wakes up to look at the engines' idleness too */
    ts.tv_nsec += (long)(wait * 1e6);
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    return true;
}

/* Without isolation: holds entry k for a request, loading it when needed. 0, or the HTTP status of
 * the failure (msg says why). */
static unsigned acquire(int k, char *msg, size_t cap) {
    const double deadline = now_ms() + 1000.0 * (g_cfg.load_timeout_s ? g_cfg.load_timeout_s : 1);
    pthread_mutex_lock(&g_mu);
    srv_pool_entry *e = &g_tab->e[k];
    e->in_flight++;
    bool tried = false;
    for (;;) {
        if (e->state == SRV_POOL_READY) break;
        if (e->state == SRV_POOL_FAILED && tried) {
            snprintf(msg, cap, "the model '%s' could not be loaded: %s", e->id, e->error);
            e->in_flight--;
            pthread_mutex_unlock(&g_mu);
            return 500;
        }
        if ((e->state == SRV_POOL_UNLOADED || e->state == SRV_POOL_FAILED) && make_room(k)) {
            srv *s = slot_of(k);
            if (!s) {
                snprintf(msg, cap, "out of memory");
                e->in_flight--;
                pthread_mutex_unlock(&g_mu);
                return 500;
            }
            e->state = SRV_POOL_LOADING;
            e->loading_since = now_ms();
            char path[sizeof e->path];
            copy(path, sizeof path, e->path);
            pthread_mutex_unlock(&g_mu);
            fprintf(stderr, "kiln serve: loading model '%s' (%s)\n", e->id, path);
            const bool ok = g_cfg.load(s, path);
            pthread_mutex_lock(&g_mu);
            e->state = ok ? SRV_POOL_READY : SRV_POOL_FAILED;
            if (ok) e->loads++, e->error[0] = 0;
            else snprintf(e->error, sizeof e->error, "%s (see the server's log)", kiln_last_error());
            tried = true;
            pthread_cond_broadcast(&g_cv);
            continue;
        }
        if (e->state == SRV_POOL_FAILED) tried = true;
        if (!wait_until(deadline)) {
            snprintf(msg, cap,
                     "the model '%s' is not ready after %u s (it is loading, or waiting for memory while the other "
                     "loaded models serve requests); try again later",
                     e->id, g_cfg.load_timeout_s);
            e->in_flight--;
            pthread_mutex_unlock(&g_mu);
            return 503;
        }
    }
    e->last_used_ms = now_ms();
    pthread_mutex_unlock(&g_mu);
    return 0;
}

/* Whether some model is ready (lock held). */
static bool any_ready(void) {
    for (uint32_t i = 0; i < g_tab->n; i++)
        if (g_tab->e[i].state == SRV_POOL_READY) return true;
    return false;
}

/* Without isolation, a thread started by the first keep_alive that can unload: every 200 ms (and
 * whenever the pool changes) it restarts the idle clock of each model in use (a request in flight,
 * or its engine still running or queueing a job: a stream outlives its request's handler) and
 * unloads the ready models idle past their keep-alive. Never while the server stops. */
static void *reaper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_mu);
    while (!g_reaper_stop) {
        const double t = now_ms();
        for (uint32_t i = 0; i < g_tab->n && !g_reaper_stop && !atomic_load(&g_main->stopping); i++) {
            srv_pool_entry *e = &g_tab->e[i];
            if (e->state != SRV_POOL_READY || e->keep_alive_ms < 0) continue;
            if (e->in_flight || !engine_idle(g_slot[i])) {
                e->expires_ms = 0;
                continue;
            }
            if (!e->expires_ms) e->expires_ms = t + (double)e->keep_alive_ms;
            if (t < e->expires_ms) continue;
            e->state = SRV_POOL_UNLOADING;
            e->expires_ms = 0;
            srv *s = g_slot[i];
            pthread_mutex_unlock(&g_mu);
            fprintf(stderr, "kiln serve: unloading model '%s' (idle for its keep_alive, %.3g s)\n", e->id,
                    (double)e->keep_alive_ms / 1e3);
            if (s && s->engine) kiln_engine_shutdown(s->engine, 0);
            if (s) g_cfg.unload(s);
            pthread_mutex_lock(&g_mu);
            e->state = SRV_POOL_UNLOADED;
            pthread_cond_broadcast(&g_cv);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        if (!g_reaper_stop) pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* Without isolation: what a request's keep_alive asks before its model is entered. False after
 * answering it: Ollama's unload call for a model that is not loaded (nothing to load), or GET
 * /api/ps while no model is loaded (no model is loaded to answer it). */
static bool keep_before(srv_req *r, const srv_pool_keep *keep, int k, const char *name) {
    pthread_mutex_lock(&g_mu);
    const bool ready = k >= 0 && g_tab->e[k].state == SRV_POOL_READY, some = any_ready();
    char id[sizeof g_tab->e[0].id] = "";
    if (k >= 0) copy(id, sizeof id, g_tab->e[k].id);
    if (keep->applies && keep->ms >= 0 && !g_reaper_on && pthread_create(&g_reaper, NULL, reaper, NULL) == 0)
        g_reaper_on = true;
    pthread_mutex_unlock(&g_mu);
    if (keep->unload && k >= 0 && !ready) {
        srv_send_json(r, 200, srv_ollama_unload_body(keep->chat, name[0] ? name : id));
        return false;
    }
    if (!some && !name[0] && (!strcmp(r->method, "GET") || !strcmp(r->method, "HEAD")) && path_is(r->url, "/api/ps")) {
        srv_send_json(r, 200, json_pack("{s:[]}", "models"));
        return false;
    }
    return true;
}

bool srv_pool_enter(srv_req *r) {
    t_entered = -1;
    if (!g_tab) return true;
    char name[256] = "";
    if (r->body_len) srv_pool_body_model(r->body, r->body_len, true, r->api == SRV_API_OLLAMA, name, sizeof name);
    if (g_child >= 0) { /* an engine child: the supervisor routed the request here */
        if (!name[0]) return true;
        char id[192], path[1024];
        uint64_t bytes;
        const srv_pool_name k = srv_pool_resolve(name, id, sizeof id, path, sizeof path, &bytes);
        if (k == SRV_NAME_UNKNOWN) {
            srv_send_json(r, 404, srv_pool_unknown_body(r->api, name));
            r->status = 404;
            return false;
        }
        const bool mine = k == SRV_NAME_DEFAULT ? g_child == 0 : strcmp(path, g_tab->e[g_child].path) == 0;
        if (!mine) {
            srv_send_error(r, 400, "invalid_request_error", "model", "model_not_routed",
                           "this request names the model '%s' but reached the engine of '%s': its body was too large "
                           "for the server to read \"model\" before handing it over; send \"model\" before the "
                           "long fields (\"messages\", \"input\") or a smaller request",
                           name, g_tab->e[g_child].id);
            return false;
        }
        return true;
    }
    if (!g_main) return true;
    if (!name[0] && (!strcmp(r->url, "/health") || !strcmp(r->url, "/v1/health")))
        return true; /* answered without a model: none is loaded for it */
    srv_pool_keep keep = {0};
    if (r->api == SRV_API_OLLAMA && r->body_len) srv_pool_body_keep(r->url, r->body, r->body_len, &keep);
    const int k = name[0] ? srv_pool_index(name) : srv_pool_any();
    if (!keep_before(r, &keep, k, name)) return false;
    if (k == -1) {
        srv_send_json(r, 404, srv_pool_unknown_body(r->api, name));
        return false;
    }
    char msg[512];
    if (k < 0) {
        srv_send_error(r, 503, "server_error", "model", "model_pool_full",
                       "the server knows %d models, all loaded or busy; try again later", SRV_POOL_MAX);
        return false;
    }
    const unsigned st = acquire(k, msg, sizeof msg);
    if (st) {
        srv_send_json(r, st, srv_pool_error_body(r->api, st, st == 503 ? "model_loading" : "model_load_failed", msg));
        return false;
    }
    pthread_mutex_lock(&g_mu);
    if (keep.applies) g_tab->e[k].keep_alive_ms = keep.ms;
    g_tab->e[k].expires_ms = 0; /* in use */
    pthread_mutex_unlock(&g_mu);
    t_entered = k;
    r->server = g_slot[k];
    return true;
}

void srv_pool_leave(srv_req *r) {
    if (t_entered < 0) return;
    pthread_mutex_lock(&g_mu);
    g_tab->e[t_entered].in_flight--;
    g_tab->e[t_entered].last_used_ms = now_ms();
    g_tab->e[t_entered].expires_ms = 0; /* the idle clock starts once its engine is idle too */
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    t_entered = -1;
    if (g_main) r->server = g_main;
}

/* ---- listings ---------------------------------------------------------------------------------- */

static const char *state_name(uint32_t st) {
    static const char *const names[] = {"unloaded", "loading", "ready", "unloading", "failed"};
    return st < sizeof names / sizeof names[0] ? names[st] : "unknown";
}

json_t *srv_pool_stats_json(void) {
    json_t *a = json_array();
    if (!g_tab || !a) return a ? json_pack("{s:o}", "models", a) : NULL;
    const double t = now_ms();
    for (uint32_t i = 0; i < g_tab->n && i < SRV_POOL_MAX; i++) {
        srv_pool_entry e = g_tab->e[i]; /* a copy: the supervisor may be writing */
        e.id[sizeof e.id - 1] = e.error[sizeof e.error - 1] = 0;
        json_t *o = json_pack("{s:s%, s:s, s:b, s:b, s:I, s:i, s:i, s:i}", "id", e.id, strlen(e.id), "state",
                              state_name(e.state), "loaded", e.state == SRV_POOL_READY, "default", i == 0, "bytes",
                              (json_int_t)e.bytes, "in_flight", (int)e.in_flight, "loads", (int)e.loads, "restarts",
                              (int)e.restarts);
        if (!o) continue;
        if (e.state == SRV_POOL_LOADING) json_object_set_new(o, "loading_s", json_real((t - e.loading_since) / 1e3));
        if (e.error[0]) json_object_set_new(o, "error", json_string(e.error));
        for (size_t k = 0; k < g_cfg.n_aliases; k++) {
            if (strcmp(g_cfg.alias_target[k], e.id) == 0 || strcmp(g_cfg.alias_target[k], e.path) == 0) {
                json_t *al = json_object_get(o, "aliases");
                if (!al) json_object_set_new(o, "aliases", al = json_array());
                json_array_append_new(al, json_string(g_cfg.alias_name[k]));
            }
        }
        json_array_append_new(a, o);
    }
    return json_pack("{s:i, s:I, s:o}", "max_models", (int)g_tab->max_models, "memory", (json_int_t)g_tab->memory,
                     "models", a);
}

void srv_pool_list_models(json_t *arr, const char *skip_id, long created) {
    for (uint32_t i = 0; g_tab && i < g_tab->n && i < SRV_POOL_MAX; i++) {
        srv_pool_entry e = g_tab->e[i];
        e.id[sizeof e.id - 1] = 0;
        if (skip_id && strcmp(e.id, skip_id) == 0) continue;
        json_t *o = json_pack("{s:s%, s:s, s:I, s:s, s:b, s:s}", "id", e.id, strlen(e.id), "object", "model", "created",
                              (json_int_t)created, "owned_by", "kiln", "loaded", e.state == SRV_POOL_READY, "state",
                              state_name(e.state));
        if (o) json_array_append_new(arr, o);
    }
}

void srv_pool_each(void (*fn)(srv *s, void *arg), void *arg) {
    if (g_child >= 0) {
        if (g_child_srv && g_child_srv->engine) fn(g_child_srv, arg);
        return;
    }
    pthread_mutex_lock(&g_mu); /* once the server stops, an unload under way finishes first */
    for (bool unloading = true; unloading && g_main && atomic_load(&g_main->stopping);) {
        unloading = false;
        for (uint32_t i = 0; i < g_tab->n; i++) unloading |= g_tab->e[i].state == SRV_POOL_UNLOADING;
        if (unloading) pthread_cond_wait(&g_cv, &g_mu);
    }
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < SRV_POOL_MAX; i++) {
        pthread_mutex_lock(&g_mu);
        srv *s = g_slot[i] && g_slot[i]->engine ? g_slot[i] : NULL;
        pthread_mutex_unlock(&g_mu);
        if (s) fn(s, arg);
    }
}
