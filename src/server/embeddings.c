/*
 * embeddings.c - POST /v1/embeddings (OpenAI's embeddings API), and the pieces Ollama's /api/embed
 * and /api/embeddings share with it (ollama.c): a request's inputs read into token lists, and one
 * call of the engine's embeddings (kiln_engine_embed) with its errors mapped to HTTP.
 *
 * /v1/embeddings takes `input` as a string, a list of strings, a list of token ids or a list of such
 * lists (texts are tokenized with the model's special tokens, e.g. bert's [CLS] and [SEP]; ids are
 * used as given), `encoding_format` "float" (default) or "base64" (the little-endian float32 bytes),
 * `dimensions` (the first N values, renormalized; at most the model's width), and kiln's `truncate`
 * (default false: an input over the model's limit is a 400 naming the limit; true keeps its first
 * tokens). The inputs of one request run as one batch on the engine, between generation steps.
 */
#include "server.h"

#include <stdlib.h>
#include <string.h>

#define BAD(r, param, ...) srv_send_error(r, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

void srv_embed_inputs_free(srv_embed_inputs *in) {
    for (size_t i = 0; i < in->n; i++) free(in->tok[i]);
    free(in->tok);
    free(in->len);
    memset(in, 0, sizeof *in);
}

/* Tokenizes text[len] with the model's special tokens into a malloc'd array; NULL after sending
 * the error. */
static kiln_token *tokenize_text(srv_req *r, const char *param, size_t idx, const char *text, size_t len,
                                 size_t *n_out) {
    const kiln_model *m = r->server->model;
    size_t cap = len + 8, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        kiln_token *t = malloc(cap * sizeof *t);
        if (!t) break;
        const kiln_status st = kiln_tokenize(m, text, len, true, false, t, cap, &n);
        if (st == KILN_OK) {
            *n_out = n;
            return t;
        }
        free(t);
        if (st != KILN_ERR_BUFFER_SMALL) {
            BAD(r, param, "input %zu cannot be tokenized: %s", idx, kiln_model_last_error(m));
            return NULL;
        }
        cap = n;
    }
    srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return NULL;
}

/* One input: a non-empty string, or a non-empty array of token ids (checked against the vocabulary
 * by the engine). */
static bool read_one(srv_req *r, const char *param, json_t *v, size_t idx, srv_embed_inputs *in) {
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) {
            BAD(r, param, "'%s'[%zu] is an empty string; every input needs some text", param, idx);
            return false;
        }
        in->tok[idx] = tokenize_text(r, param, idx, json_string_value(v), json_string_length(v), &in->len[idx]);
        return in->tok[idx] != NULL;
    }
    const size_t n = json_array_size(v);
    if (!json_is_array(v) || n == 0) {
        BAD(r, param, "'%s' must be a string, an array of strings, an array of token ids or an array of such arrays",
            param);
        return false;
    }
    if (!(in->tok[idx] = malloc(n * sizeof(kiln_token)))) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        const long long id = json_integer_value(t);
        if (!json_is_integer(t) || id < 0 || id >= kiln_model_n_vocab(r->server->model)) {
            BAD(r, param, "'%s': input %zu, token %zu is not a token id in [0, %d)", param, idx, i,
                kiln_model_n_vocab(r->server->model));
            return false;
        }
        in->tok[idx][i] = (kiln_token)id;
    }
    in->len[idx] = n;
    return true;
}

bool srv_embed_inputs_read(srv_req *r, json_t *input, const char *param, srv_embed_inputs *in) {
    memset(in, 0, sizeof *in);
    if (!input || json_is_null(input)) {
        BAD(r, param, "'%s' is required", param);
        return false;
    }
    /* one input: a string, or an array of ids; else a list of inputs */
    const bool one = json_is_string(input) || (json_is_array(input) && json_is_integer(json_array_get(input, 0)));
    const size_t n = one ? 1 : json_array_size(input);
    if (!one && (!json_is_array(input) || n == 0)) {
        BAD(r, param, "'%s' must be a string, an array of strings, an array of token ids or an array of such arrays",
            param);
        return false;
    }
    if (n > KILN_EMBED_MAX_INPUTS) {
        BAD(r, param, "'%s' holds %zu inputs; at most %d are embedded in one request", param, n, KILN_EMBED_MAX_INPUTS);
        return false;
    }
    in->tok = calloc(n, sizeof *in->tok);
    in->len = calloc(n, sizeof *in->len);
    if (!in->tok || !in->len) {
        srv_embed_inputs_free(in);
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    in->n = n;
    for (size_t i = 0; i < n; i++) {
        if (!read_one(r, param, one ? input : json_array_get(input, i), i, in)) {
            srv_embed_inputs_free(in);
            return false;
        }
    }
    return true;
}

float *srv_embed_run(srv_req *r, const char *param, const srv_embed_inputs *in, const kiln_embed_params *p,
                     kiln_embed_result *res) {
    const srv *s = r->server;
    const size_t dim = (size_t)(p->dimensions ? p->dimensions : kiln_model_n_embd(s->model));
    if (!kiln_model_is_embedding(s->model)) {
        srv_send_error(r, 400, "invalid_request_error", "model", "model_not_embedding",
                       "the served model '%s' (%s) is a text-generation model, not an embedding model: it has no "
                       "pooling and makes no embeddings; serve an embedding model (bert, nomic-bert or a "
                       "Qwen3-Embedding file) for this route",
                       s->model_id, kiln_model_arch(s->model));
        return NULL;
    }
    if (p->dimensions < 0 || dim > (size_t)kiln_model_n_embd(s->model)) {
        BAD(r, "dimensions", "'dimensions' is %d; the model's embeddings have %d (the most it can return)",
            p->dimensions, kiln_model_n_embd(s->model));
        return NULL;
    }
    float *out = malloc(in->n * dim * sizeof(float));
    if (!out) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    const kiln_status st =
        kiln_engine_embed(s->engine, (const kiln_token *const *)in->tok, in->len, in->n, p, out, in->n * dim, res);
    if (st == KILN_OK) return out;
    free(out);
    if (st == KILN_ERR_CONTEXT_FULL)
        srv_send_error(r, 400, "invalid_request_error", param, "context_length_exceeded",
                       "%s (the model's limit for one input is %d tokens; send \"truncate\": true to keep the first "
                       "%d tokens instead)",
                       kiln_last_error(), kiln_engine_embed_max_tokens(s->engine),
                       kiln_engine_embed_max_tokens(s->engine));
    else if (st == KILN_ERR_BUSY) srv_send_error(r, 503, "server_error", NULL, NULL, "%s", kiln_last_error());
    else if (st == KILN_ERR_NOMEM || st == KILN_ERR_INTERNAL)
        srv_send_error(r, 500, "server_error", NULL, NULL, "%s", kiln_last_error());
    else srv_send_error(r, 400, "invalid_request_error", param, NULL, "%s", kiln_last_error());
    return NULL;
}

/* RFC 4648 base64 of n bytes into a malloc'd NUL-terminated string; NULL when out of memory. */
static char *base64(const uint8_t *b, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *p = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v =
            (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        *p++ = A[v >> 18 & 63];
        *p++ = A[v >> 12 & 63];
        *p++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *p++ = i + 2 < n ? A[v & 63] : '=';
    }
    *p = 0;
    return o;
}

json_t *srv_embed_vector(const float *v, size_t dim, bool b64) {
    if (b64) {
        uint8_t *bytes = malloc(dim * 4 + 1);
        if (!bytes) return NULL;
        for (size_t i = 0; i < dim; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) bytes[i * 4 + k] = (uint8_t)(u >> (8 * k)); /* little-endian */
        }
        char *s = base64(bytes, dim * 4);
        free(bytes);
        json_t *j = s ? json_string(s) : NULL;
        free(s);
        return j;
    }
    json_t *a = json_array();
    for (size_t i = 0; a && i < dim; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

void srv_embeddings(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    srv_embed_inputs in = {0};
    float *out = NULL;
    kiln_embed_params p = kiln_embed_default_params();
    json_t *fmt = json_object_get(req, "encoding_format"), *dims = json_object_get(req, "dimensions");
    bool b64 = false;
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0)) {
            BAD(r, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            goto done;
        }
        b64 = strcmp(f, "base64") == 0;
    }
    if (dims && !json_is_null(dims)) {
        const long long d = json_integer_value(dims);
        if (!json_is_integer(dims) || d < 1 || d > kiln_model_n_embd(r->server->model)) {
            BAD(r, "dimensions", "'dimensions' must be an integer from 1 to %d (the model's embedding width)",
                kiln_model_n_embd(r->server->model));
            goto done;
        }
        p.dimensions = (int32_t)d;
    }
    if (!srv_get_bool(r, req, "truncate", &p.truncate)) goto done;
    if (!srv_embed_inputs_read(r, json_object_get(req, "input"), "input", &in)) goto done;
    kiln_embed_result res;
    if (!(out = srv_embed_run(r, "input", &in, &p, &res))) goto done;
    json_t *data = json_array();
    for (size_t i = 0; data && i < in.n; i++) {
        json_t *e = srv_embed_vector(out + i * (size_t)res.dim, (size_t)res.dim, b64);
        json_array_append_new(
            data, json_pack("{s:s, s:I, s:o*}", "object", "embedding", "index", (json_int_t)i, "embedding", e));
    }
    srv_send_json(r, 200,
                  json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                            r->server->model_id, "usage", "prompt_tokens", (json_int_t)res.n_tokens, "total_tokens",
                            (json_int_t)res.n_tokens));
done:
    free(out);
    srv_embed_inputs_free(&in);
    json_decref(req);
}
