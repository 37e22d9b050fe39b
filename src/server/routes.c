/*
 * routes.c - request routing (and which API's error shape a URL's responses take) and the small
 * routes of `kiln serve`: /health, /v1/models, /metrics, /stats, /admin/cache/flush, and
 * llama-server's helpers /tokenize, /detokenize and /apply-template with llama-server's request and
 * response shapes. Ollama's /api/ routes are ollama.c's.
 */
#include "isolate.h"
#include "pool.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *model_object(srv *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:i, s:i, s:I, s:I}}", "id", s->model_id, "object", "model",
                     "created", (json_int_t)s->started, "owned_by", "kiln", "meta", "arch", kiln_model_arch(s->model),
                     "n_ctx", s->n_ctx, "n_ctx_train", kiln_model_n_ctx_train(s->model), "n_params",
                     (json_int_t)kiln_model_n_params(s->model), "size", (json_int_t)kiln_model_size_bytes(s->model));
}

/* The model pool's models (pool.h) after the served one, then the other models `kiln ls` finds
 * (not loaded; a request may name them): each with "loaded" and "state". */
static void models(srv_req *r) {
    srv *s = r->server;
    json_t *data = json_array(), *own = model_object(s);
    if (own) {
        json_object_set_new(own, "loaded", json_true());
        json_object_set_new(own, "state", json_string("ready"));
        json_array_append_new(data, own);
    }
    srv_pool_list_models(data, s->model_id, s->started);
    json_t *local = s->cfg.list_models ? s->cfg.list_models(NULL) : NULL;
    size_t i, k;
    json_t *o, *d;
    json_array_foreach(local, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *file = json_string_value(json_object_get(o, "path"));
        if (!name) continue;
        char *real = file ? realpath(file, NULL) : NULL;
        bool listed = false; /* by id, or as a file the pool knows under another name */
        json_array_foreach(data, k, d) {
            const char *did = json_string_value(json_object_get(d, "id"));
            listed |= did && strcmp(did, name) == 0;
        }
        const srv_pool_table *t = srv_pool_table_get();
        for (uint32_t e = 0; t && real && e < t->n && e < SRV_POOL_MAX; e++)
            listed |= strncmp(t->e[e].path, real, sizeof t->e[e].path) == 0;
        free(real);
        if (listed) continue;
        json_array_append_new(data,
                              json_pack("{s:s, s:s, s:I, s:s, s:b, s:s}", "id", name, "object", "model", "created",
                                        (json_int_t)s->started, "owned_by", "kiln", "loaded", 0, "state", "unloaded"));
    }
    json_decref(local);
    srv_send_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void model_by_id(srv_req *r, const char *id) {
    if (strcmp(id, r->server->model_id) == 0) {
        srv_send_json(r, 200, model_object(r->server));
        return;
    }
    char mid[192], path[1024];
    uint64_t bytes;
    if (srv_pool_resolve(id, mid, sizeof mid, path, sizeof path, &bytes) != SRV_NAME_FOUND) {
        srv_send_json(r, 404, srv_pool_unknown_body(r->api, id));
        return;
    }
    srv_send_json(r, 200,
                  json_pack("{s:s, s:s, s:I, s:s}", "id", mid, "object", "model", "created",
                            (json_int_t)r->server->started, "owned_by", "kiln"));
}

/* A token's text as a JSON value: a string when it is valid UTF-8, else its bytes as an array. */
static json_t *piece_value(const kiln_model *m, kiln_token t) {
    char buf[256];
    size_t n = 0;
    if (kiln_token_piece(m, t, true, buf, sizeof buf, &n) != KILN_OK) n = 0;
    json_t *s = json_stringn(buf, n);
    if (s) return s;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

static void tokenize(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    json_t *content = json_object_get(req, "content");
    bool add_special = false, parse_special = true, with_pieces = false;
    if (!json_is_string(content)) {
        srv_send_error(r, 400, "invalid_request_error", "content", "invalid_type", "'content' must be a string");
    } else if (srv_get_bool(r, req, "add_special", &add_special) &&
               srv_get_bool(r, req, "parse_special", &parse_special) &&
               srv_get_bool(r, req, "with_pieces", &with_pieces)) {
        const kiln_model *m = r->server->model;
        size_t len = json_string_length(content), n = 0;
        kiln_token *ids = malloc((len + 2) * sizeof *ids);
        kiln_status st;
        if (!ids) {
            srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        } else if ((st = kiln_tokenize(m, json_string_value(content), len, add_special, parse_special, ids, len + 2,
                                       &n)) != KILN_OK) {
            srv_send_tokenize_error(r, "content", st);
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, with_pieces
                                               ? json_pack("{s:i, s:o}", "id", ids[i], "piece", piece_value(m, ids[i]))
                                               : json_integer(ids[i]));
            srv_send_json(r, 200, json_pack("{s:o}", "tokens", arr));
        }
        free(ids);
    }
    json_decref(req);
}

static void detokenize(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    json_t *toks = json_object_get(req, "tokens");
    const kiln_model *m = r->server->model;
    int32_t n_vocab = kiln_model_n_vocab(m);
    if (!json_is_array(toks)) {
        srv_send_error(r, 400, "invalid_request_error", "tokens", "invalid_type",
                       "'tokens' must be an array of token ids");
        json_decref(req);
        return;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    size_t i;
    json_t *v;
    bool ok = f != NULL;
    json_array_foreach(toks, i, v) {
        if (!ok) break;
        json_int_t t = json_is_integer(v) ? json_integer_value(v) : -1;
        if (t < 0 || t >= n_vocab) {
            srv_send_error(r, 400, "invalid_request_error", "tokens", "invalid_value",
                           "tokens[%zu] is not a token id in [0, %d)", i, n_vocab);
            ok = false;
            break;
        }
        char buf[256];
        size_t n = 0;
        if (kiln_token_piece(m, (kiln_token)t, false, buf, sizeof buf, &n) == KILN_OK) fwrite(buf, 1, n, f);
    }
    if (f) fclose(f);
    if (ok) {
        /* Token bytes may not form valid UTF-8 (a split character): replace what is invalid. */
        json_t *s = json_stringn(out, len);
        if (!s) {
            for (size_t k = 0; k < len; k++)
                if ((unsigned char)out[k] >= 0x80) out[k] = '?';
            s = json_stringn(out, len);
        }
        srv_send_json(r, 200, json_pack("{s:o}", "content", s));
    } else if (!f) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
    }
    free(out);
    json_decref(req);
}

void srv_apply_template(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    size_t len;
    char *prompt = srv_render_chat(r, req, &len);
    if (prompt) srv_send_json(r, 200, json_pack("{s:s%}", "prompt", prompt, len));
    free(prompt);
    json_decref(req);
}

static void metrics(srv_req *r) {
    kiln_engine_stats es;
    kiln_engine_get_stats(r->server->engine, &es);
    char *t = srv_stats_prometheus(&r->server->stats, &es, atomic_load(&r->server->conns));
    unsigned restarts;
    if (t && srv_iso_child(&restarts)) { /* isolated: the engine's restarts (isolate.h) */
        char *u = NULL;
        if (asprintf(&u,
                     "%s# HELP kiln_engine_restarts_total Engine processes restarted after a crash.\n"
                     "# TYPE kiln_engine_restarts_total counter\nkiln_engine_restarts_total %u\n",
                     t, restarts) < 0)
            u = NULL;
        free(t);
        t = u;
    }
    if (!t) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    srv_send_text(r, 200, "text/plain; version=0.0.4", t, strlen(t));
    free(t);
}

static void stats(srv_req *r) {
    srv *s = r->server;
    kiln_engine_stats es;
    kiln_engine_get_stats(s->engine, &es);
    json_t *j = srv_stats_json(&s->stats, &es, atomic_load(&s->conns));
    if (j) {
        json_object_set_new(j, "model", json_string(s->model_id));
        json_object_set_new(j, "n_ctx", json_integer(s->n_ctx));
        unsigned restarts;
        if (srv_iso_child(&restarts)) json_object_set_new(j, "engine_restarts", json_integer(restarts));
        json_t *pool = srv_pool_stats_json();
        if (pool) json_object_set_new(j, "pool", pool);
    }
    srv_send_json(r, 200, j);
}

#define FLUSH_WAIT_MS 60000 /* how long POST /admin/cache/flush waits for pending writes */

/* POST /admin/cache/flush: returns once every cached prefix is durable on SSD (or at once without
 * an SSD cache): 200 {"flushed": true, "ssd_cache": bool, "entries", "bytes", "pending"}; 503
 * when writes are still pending after FLUSH_WAIT_MS (they continue). The API key guards it like
 * every route but /health. */
static void cache_flush(srv_req *r) {
    kiln_engine *e = r->server->engine;
    const kiln_status st = kiln_engine_flush_cache(e, FLUSH_WAIT_MS);
    kiln_engine_stats es;
    kiln_engine_get_stats(e, &es);
    if (st) {
        srv_send_error(r, 503, "server_error", NULL, "flush_timeout", "the SSD cache flush did not finish: %s",
                       kiln_last_error());
        return;
    }
    srv_send_json(r, 200,
                  json_pack("{s:b, s:b, s:i, s:I, s:i}", "flushed", 1, "ssd_cache", es.ssd_enabled, "entries",
                            es.ssd_entries, "bytes", (json_int_t)es.ssd_bytes, "pending", es.ssd_pending));
}

typedef struct route {
    const char *method;
    const char *path;
    void (*fn)(srv_req *r);
} route;

static void health(srv_req *r) { srv_send_json(r, 200, json_pack("{s:s}", "status", "ok")); }

static const route routes[] = {
    {"GET", "/health", health},
    {"GET", "/v1/health", health},
    {"GET", "/v1/models", models},
    {"GET", "/models", models},
    {"POST", "/v1/chat/completions", srv_chat_completions},
    {"POST", "/chat/completions", srv_chat_completions},
    {"POST", "/v1/completions", srv_completions},
    {"POST", "/completions", srv_completions},
    {"POST", "/tokenize", tokenize},
    {"POST", "/detokenize", detokenize},
    {"POST", "/apply-template", srv_apply_template},
    {"GET", "/metrics", metrics},
    {"GET", "/stats", stats},
    {"POST", "/admin/cache/flush", cache_flush},
    {"POST", "/v1/messages", srv_messages},
    {"POST", "/v1/messages/count_tokens", srv_messages_count_tokens},
    {"POST", "/v1/responses", srv_responses},
    {"POST", "/v1/embeddings", srv_embeddings},
    {"POST", "/embeddings", srv_embeddings},
};

srv_api srv_route_api(const char *url) {
    if (strncmp(url, "/api/", 5) == 0) return SRV_API_OLLAMA;
    return strncmp(url, "/v1/messages", 12) == 0 && (url[12] == 0 || url[12] == '/') ? SRV_API_ANTHROPIC
                                                                                     : SRV_API_OPENAI;
}

/* Routes a request whose model (if any) has been chosen. */
static void dispatch(srv_req *r) {
    if (srv_ollama_route(r)) return;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(r->url, routes[i].path) != 0) continue;
        path_known = true;
        if (strcmp(r->method, routes[i].method) == 0 ||
            (strcmp(r->method, "HEAD") == 0 && routes[i].method[0] == 'G')) {
            routes[i].fn(r);
            return;
        }
    }
    if (strncmp(r->url, "/v1/models/", 11) == 0 && r->url[11] && strcmp(r->method, "GET") == 0) {
        model_by_id(r, r->url + 11);
        return;
    }
    if (strncmp(r->url, "/v1/responses/", 14) == 0 && r->url[14] && !strchr(r->url + 14, '/') &&
        (strcmp(r->method, "GET") == 0 || strcmp(r->method, "DELETE") == 0)) {
        srv_response_by_id(r, r->url + 14);
        return;
    }
    if (path_known) {
        srv_send_error(r, 405, "invalid_request_error", NULL, "method_not_allowed", "%s is not allowed on %s",
                       r->method, r->url);
        return;
    }
    srv_send_error(r, 404, "invalid_request_error", NULL, "not_found", "unknown route: %s %s", r->method, r->url);
}

void srv_route(srv_req *r) {
    if (!srv_pool_enter(r)) return; /* the model it names (pool.h), or the error sent */
    dispatch(r);
    srv_pool_leave(r);
}
