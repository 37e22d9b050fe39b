/*
 * pool.h - the model pool of `kiln serve`: which model a request names, which models are loaded,
 * and (without isolation) the engines of the loaded models in this process. The design is at the
 * top of pool.c.
 */
#ifndef KILN_SERVER_POOL_H
#define KILN_SERVER_POOL_H

#include "server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SRV_POOL_MAX     32 /* models the pool knows at once (entry 0 is the default model) */
#define SRV_POOL_ALIASES 64 /* --model-alias at most */

/* Where a model of the pool stands (srv_pool_entry.state). */
typedef enum srv_pool_state {
    SRV_POOL_UNLOADED = 0, /* known, not loaded */
    SRV_POOL_LOADING,      /* its engine is being started (or restarted after a crash) */
    SRV_POOL_READY,        /* serving */
    SRV_POOL_UNLOADING,    /* being unloaded to make room (least recently used) */
    SRV_POOL_FAILED,       /* its last load failed (error says why); the next request tries again */
} srv_pool_state;

/* One model the pool knows. The table lives in memory shared with the engines' child processes
 * (read-only there); only the pool's owner (the supervisor, or the single process) writes it. */
typedef struct srv_pool_entry {
    char id[192];          /* the id clients see and name it by */
    char path[1024];       /* the file (or model directory) to load */
    uint64_t bytes;        /* planned memory: weights, KV of its rows, prompt cache */
    uint32_t state;        /* srv_pool_state */
    uint32_t in_flight;    /* requests being served */
    uint32_t loads;        /* times loaded */
    uint32_t restarts;     /* engine restarts after a crash (isolated) */
    int32_t pid;           /* its engine's process (isolated), else 0 */
    double last_used_ms;   /* CLOCK_MONOTONIC ms of its last request */
    double loading_since;  /* CLOCK_MONOTONIC ms the current load started */
    char error[256];       /* why the last load failed, or "" */
    int64_t keep_alive_ms; /* how long it stays loaded once idle (Ollama's keep_alive, set by the last
                              request that gave one): < 0 for ever (the default), 0 unloads it at once */
    double expires_ms;     /* CLOCK_MONOTONIC ms it is unloaded at, idle; 0 while in use or kept for ever */
} srv_pool_entry;

typedef struct srv_pool_table {
    uint32_t n; /* entries in use */
    uint32_t max_models;
    uint64_t memory;
    srv_pool_entry e[SRV_POOL_MAX];
} srv_pool_table;

/* What `kiln serve` tells the pool (resolved once). Callbacks run in the pool owner's process and,
 * for resolve, in engine children too. */
typedef struct srv_pool_config {
    const char *default_id, *default_path; /* the default model (entry 0) */
    uint64_t default_bytes;
    /* --model-alias NAME=MODEL: alias_name[i] stands for alias_target[i] (any name resolve takes) */
    const char *alias_name[SRV_POOL_ALIASES], *alias_target[SRV_POOL_ALIASES];
    size_t n_aliases;
    unsigned max_models;     /* loaded at most at once (0: no count limit) */
    uint64_t memory;         /* planned bytes of loaded models at most (the last one always loads) */
    unsigned load_timeout_s; /* a request waits this long for its model to load, then 503 */
    /* Resolves a name `kiln ls` knows (its friendly name, the id of a discovered file, its path,
     * or ORG/NAME[:QUANT] of the Hugging Face cache) into the model's id (cap idc), file (cap pathc,
     * the realpath) and planned bytes. False when no local model has that name. */
    bool (*resolve)(const char *name, char *id, size_t idc, char *path, size_t pathc, uint64_t *bytes);
    /* Without isolation: loads the model at path into s (model, engine, model_id, n_ctx,
     * fingerprint; s->cfg is set), false after printing why; and frees what load made (after its
     * engine is shut down). */
    bool (*load)(srv *s, const char *path);
    void (*unload)(srv *s);
} srv_pool_config;

/* Sets the pool up (before any request, before the supervisor forks): the table (shared memory),
 * entry 0 the default model. main is the single process's server (NULL under isolation, where
 * the supervisor owns the table). False when out of memory. */
bool srv_pool_init(const srv_pool_config *cfg, srv *main);
/* Releases what the pool holds (the table, the servers of models other than the default, whose
 * engines must be gone). */
void srv_pool_free(void);
const srv_pool_config *srv_pool_cfg(void);
/* The table (shared; readers copy what they need). NULL before srv_pool_init. */
srv_pool_table *srv_pool_table_get(void);
/* In an engine's child process: this process serves entry idx only (its srv is s), and the table
 * is read-only here. */
void srv_pool_set_child(size_t idx, srv *s);
/* Whether responses must close their connection (an isolated engine: the supervisor routes each
 * request, so a connection carries one). */
bool srv_pool_close_connections(void);

/* ---- names ----------------------------------------------------------------------------------- */

/* What a request's model name means. */
typedef enum srv_pool_name {
    SRV_NAME_DEFAULT, /* absent, empty, "default", or a hosted API's model (gpt-*, claude-*, ...): the
                         default model */
    SRV_NAME_FOUND,   /* a local model (id, path filled) */
    SRV_NAME_UNKNOWN, /* no model of that name */
} srv_pool_name;

/* Resolves a model name (aliases, ":latest", the known entries, then config.resolve, remembered
 * for a while). Thread-safe. */
srv_pool_name srv_pool_resolve(const char *name, char *id, size_t idc, char *path, size_t pathc, uint64_t *bytes);
/* The entry of the named model, added when new (owner only): its index, -1 for an unknown name,
 * -2 when the table is full of loaded models. The default model is 0. */
int srv_pool_index(const char *name);
/* The index of the entry to serve a request that names no model: the default when it is loaded,
 * else the most recently used loaded one, else the default. */
int srv_pool_any(void);

/* The model a request body names: its top-level "model" string (else, when name_too, "name").
 * whole: body[0..n) is the whole body, "" unless it is a valid JSON object; else it is the start
 * of one, cut short, read as far as it goes. "" when absent, not a string, or beyond the bytes
 * given. Writes at most cap bytes (NUL-terminated). */
void srv_pool_body_model(const char *body, size_t n, bool whole, bool name_too, char *out, size_t cap);

/* ---- keep_alive (Ollama) --------------------------------------------------------------------------- */

#define SRV_POOL_KEEP_FOREVER (-1) /* srv_pool_entry.keep_alive_ms: kept loaded (the default) */

/* Reads Ollama's keep_alive v into *ms: a number of seconds or a duration string ("30s", "5m",
 * "1h30m", "500ms"; a plain number in a string is seconds); 0 unloads the model after the response,
 * a negative value (or one beyond a century) keeps it loaded for ever (SRV_POOL_KEEP_FOREVER).
 * False when v is anything else (a bad string, a boolean, an object). */
bool srv_pool_keep_alive_parse(const json_t *v, int64_t *ms);

/* What an Ollama request body says of its model's keep-alive. */
typedef struct srv_pool_keep {
    bool applies; /* a generation or embedding route (/api/generate, /api/chat, /api/embed, /api/embeddings)
                     with a valid keep_alive or none: ms is to be applied to its model */
    int64_t ms;   /* its keep_alive, SRV_POOL_KEEP_FOREVER when absent */
    bool unload;  /* Ollama's unload call: keep_alive 0 and no prompt (generate) or messages (chat) */
    bool chat;    /* the route is /api/chat */
} srv_pool_keep;

/* Reads the keep-alive of a request to url whose whole body is body[0..n) (zeroed *out when the
 * route is not one of the above, the body is not a JSON object or keep_alive is invalid: the route
 * then answers 400 and the model's keep-alive stays as it was). */
void srv_pool_body_keep(const char *url, const char *body, size_t n, srv_pool_keep *out);

/* The Unix time (seconds) at which entry e is unloaded if it stays idle (a copy of the table's
 * entry): 0 when it is kept for ever. In use, counted from now. */
double srv_pool_expires_unix(const srv_pool_entry *e);

/* The answer to Ollama's unload call, {"model", "created_at", "response" or "message", "done": true,
 * "done_reason": "unload"} (ollama.c; the supervisor sends it itself for a model that is not
 * loaded). A new reference. */
json_t *srv_ollama_unload_body(bool chat, const char *model);

/* ---- a request head seen by the supervisor --------------------------------------------------- */

typedef struct srv_pool_peek {
    bool complete;        /* the head and the declared body are all in */
    bool health;          /* GET or HEAD of /health or /v1/health */
    bool expect_continue; /* (more needed) the client waits for "100 Continue" before its body */
    uint32_t api;         /* srv_api of the URL */
    char model[256];      /* the model the body names ("" when none) */
    bool ps;              /* GET or HEAD of /api/ps */
    srv_pool_keep keep;   /* the keep_alive of an Ollama request (complete body) */
    bool nomem;           /* an allocation failed while the body was read: model and keep are not to be
                             trusted (the request is answered 503, not routed by them) */
} srv_pool_peek;

/* Reads a request's start, buf[0..n) (bytes peeked from its socket): false when more bytes are
 * needed (and may come: !stalled; a declared body over max_body is not waited for); otherwise
 * fills *out, routing by what there is. jansson's allocations are counted (srv_json_alloc_install
 * first): one that failed sets out->nomem. */
bool srv_pool_peek_request(const char *buf, size_t n, bool stalled, size_t max_body, srv_pool_peek *out);

/* The error body of a request naming an unknown model (404), in its API's shape; a new reference. */
json_t *srv_pool_unknown_body(uint32_t api, const char *name);
/* The error body of a request whose model could not be served (503 or 500), in its API's shape. */
json_t *srv_pool_error_body(uint32_t api, unsigned status, const char *code, const char *msg);

/* ---- routing a request in an engine's process (routes.c) -------------------------------------- */

/* Picks the server of the model the request names and sets r->server to it: without isolation,
 * loading the model (waiting up to load_timeout_s, unloading the least recently used idle ones
 * when memory or --max-models asks); in an engine child, its own model. False after sending the
 * error (404 unknown model, 503 not ready in time, 500 load failed). Pair with srv_pool_leave. */
bool srv_pool_enter(srv_req *r);
void srv_pool_leave(srv_req *r);

/* The pool as JSON for /stats ({"max_models", "memory", "models": [{id, state, loaded, ...}]}), and
 * the entries as OpenAI model objects ({"id", "object", "created", "owned_by", "loaded", "state"})
 * appended to arr, skipping skip_id. */
json_t *srv_pool_stats_json(void);
void srv_pool_list_models(json_t *arr, const char *skip_id, long created);

/* Without isolation: calls fn on each loaded model's server (shutdown, flush). */
void srv_pool_each(void (*fn)(srv *s, void *arg), void *arg);

#endif
