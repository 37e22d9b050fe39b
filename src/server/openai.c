/*
 * openai.c - POST /v1/chat/completions and POST /v1/completions in OpenAI's shapes.
 *
 * A request is validated field by field into one immutable set of generation parameters
 * (request value, else the server's flag, else the model's recommendation, else the library's
 * default); any invalid field is a 400 naming it, before anything is queued. An output
 * constraint (response_format, json_schema, grammar) is compiled here too (constraint.c). The prompt is rendered
 * (chat: the model's template), tokenized and checked against the context here, on the
 * connection's thread; the engine only generates. Output events are turned into the response on
 * the engine's thread: appended to the text (non-streaming) or formatted as server-sent events
 * ("data: {chunk}\n\n" ... "data: [DONE]\n\n") that the connection thread sends as they come.
 */
#include "server.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What a generation job needs to shape its output. Owned by the job (freed with it). */
typedef struct gen_out {
    bool chat;
    bool stream;
    bool include_usage;
    int logprobs; /* -1: none; else how many top alternatives per token */
    char id[48];
    long created;
    const kiln_model *model;
    const char *model_id;
    const char *fingerprint;
    char *text; /* non-streaming: the whole completion */
    size_t n_text, cap_text;
    json_t *lp;         /* non-streaming: logprob entries of every token */
    json_t *lp_pending; /* streaming: entries of tokens not yet sent with text */
    size_t text_offset; /* completions logprobs: byte offset of the next token */
    char *echo;         /* completions with echo: the prompt's text, which the choice's text starts with */
    size_t n_echo;
    bool echo_held; /* streaming echo with logprobs: the echo chunk waits for the prompt's logprobs */
    bool lp_first;  /* echo with logprobs: the prompt's first token's entry is still to come first */
    bool oom;
    kiln_chat_parser *parser; /* chat with tools or a reasoning format: the reply's parser, else NULL */
    bool parse_failed;        /* the parser refused input (past a limit): the rest is not parsed */
    int n;                    /* choices asked for per prompt (n; 1 unless the request says) */
    bool started;             /* an event came (the prompt is evaluated), under the job's lock */
    /* streaming n > 1: every choice's events go to one sink job (never submitted; a reference held)
     * with the choice's index; the sink's own gen_out counts the choices still running and sums
     * their usage, under the sink's lock */
    srv_job *sink;
    int index;
    int pending;
    kiln_generate_result total;
} gen_out;

/* The most choices one request may ask for (n); beyond: 400. */
#define SRV_MAX_CHOICES 16

static void gen_out_free(void *p) {
    gen_out *g = p;
    if (!g) return;
    free(g->text);
    free(g->echo);
    json_decref(g->lp);
    json_decref(g->lp_pending);
    kiln_chat_parser_free(g->parser);
    srv_job_unref(g->sink);
    free(g);
}

/* ---- ids ---------------------------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void srv_make_id(char *out, size_t cap, const char *prefix) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (atomic_fetch_add(&counter, 1) << 40);
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && n + 1 < cap; i++) out[n++] = al[splitmix(&x) % 62];
    out[n] = 0;
}

/* ---- field validation --------------------------------------------------------------------------- */

#define BAD(r, param, ...) srv_send_error(r, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

/* Sends 500 for an allocation failure; returns false so callers can `return oom(r);`. */
static bool oom(srv_req *r) {
    srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

/* Each getter leaves *out unchanged when the field is absent or null, returns false after sending
 * a 400 when it has the wrong type or range. */
static bool get_num(srv_req *r, json_t *o, const char *key, double lo, double hi, float *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) {
        BAD(r, key, "'%s' must be a number", key);
        return false;
    }
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        BAD(r, key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
        return false;
    }
    *out = (float)x;
    return true;
}

static bool get_int(srv_req *r, json_t *o, const char *key, long long lo, long long hi, long long *out) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) {
        BAD(r, key, "'%s' must be an integer", key);
        return false;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        BAD(r, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
        return false;
    }
    *out = x;
    return true;
}

/* stop: a string or an array of strings; empty strings are ignored. */
static bool get_stop(srv_req *r, json_t *o, srv_job *j) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return true;
    json_t *one[1] = {v};
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v)) {
        BAD(r, "stop", "'stop' must be a string or an array of strings");
        return false;
    }
    if (n > KILN_MAX_STOP) {
        BAD(r, "stop", "'stop' has %zu entries; at most %d are allowed", n, KILN_MAX_STOP);
        return false;
    }
    j->stop = calloc(n ? n : 1, sizeof *j->stop);
    if (!j->stop) return oom(r);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) {
            BAD(r, "stop", "stop[%zu] must be a string", i);
            return false;
        }
        size_t len = json_string_length(s);
        if (len == 0) continue;
        if (len > KILN_MAX_STOP_LEN || strlen(json_string_value(s)) != len) {
            BAD(r, "stop", "stop[%zu] must be 1 to %d bytes without NUL characters", i, KILN_MAX_STOP_LEN);
            return false;
        }
        if (!(j->stop[j->gp.n_stop] = strdup(json_string_value(s)))) return oom(r);
        j->gp.n_stop++;
    }
    j->gp.stop = (const char *const *)j->stop;
    return true;
}

/* logit_bias: {"token id": bias in [-100, 100]}; -100 bans the token. */
static bool get_logit_bias(srv_req *r, json_t *o, srv_job *j) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return true;
    if (!json_is_object(v)) {
        BAD(r, "logit_bias", "'logit_bias' must be an object mapping token ids to numbers");
        return false;
    }
    int32_t n_vocab = kiln_model_n_vocab(r->server->model);
    j->bias = calloc(json_object_size(v) + 1, sizeof *j->bias);
    if (!j->bias) return oom(r);
    const char *k;
    json_t *b;
    json_object_foreach(v, k, b) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id >= n_vocab) {
            BAD(r, "logit_bias", "logit_bias key '%s' is not a token id in [0, %d)", k, n_vocab);
            return false;
        }
        double x = json_is_number(b) ? json_number_value(b) : NAN;
        if (!(x >= -100 && x <= 100)) {
            BAD(r, "logit_bias", "logit_bias for token %ld must be a number between -100 and 100", id);
            return false;
        }
        j->bias[j->gp.sampling.n_logit_bias++] = (kiln_logit_bias){(kiln_token)id, x <= -100 ? -INFINITY : (float)x};
    }
    j->gp.sampling.logit_bias = j->bias;
    return true;
}

bool srv_generation_params(srv_req *r, json_t *req, srv_job *j) {
    const srv_config *cfg = &r->server->cfg;
    if (!kiln_model_can_generate(r->server->model)) {
        srv_send_error(r, 400, "invalid_request_error", "model", "model_not_generative",
                       "the served model '%s' (%s) is an embedding model; it does not generate text (its route is "
                       "/v1/embeddings)",
                       r->server->model_id, kiln_model_arch(r->server->model));
        return false;
    }
    kiln_generate_params *gp = &j->gp;
    gp->sampling = cfg->sampling;
    gp->max_tokens = cfg->max_tokens;
    gp->add_special = false;
    gp->parse_special = true;
    long long max_tokens = -2, top_k = -1, seed = -2;
    if (!get_int(r, req, "max_tokens", 0, 1 << 30, &max_tokens)) return false;
    if (!get_int(r, req, "max_completion_tokens", 0, 1 << 30, &max_tokens)) return false;
    if (max_tokens >= 0) gp->max_tokens = (int32_t)max_tokens;
    kiln_sampler_params *sp = &gp->sampling;
    /* The accepted ranges are the library's one table (kiln_sampler_param_range). */
#define SP_RANGE(param) kiln_sampler_param_range(param)->min, kiln_sampler_param_range(param)->max
    if (!get_num(r, req, "temperature", SP_RANGE(KILN_SAMPLER_TEMPERATURE), &sp->temperature) ||
        !get_num(r, req, "top_p", SP_RANGE(KILN_SAMPLER_TOP_P), &sp->top_p) ||
        !get_num(r, req, "min_p", SP_RANGE(KILN_SAMPLER_MIN_P), &sp->min_p) ||
        !get_num(r, req, "presence_penalty", SP_RANGE(KILN_SAMPLER_PRESENCE_PENALTY), &sp->presence_penalty) ||
        !get_num(r, req, "frequency_penalty", SP_RANGE(KILN_SAMPLER_FREQUENCY_PENALTY), &sp->frequency_penalty) ||
        !get_num(r, req, "repetition_penalty", SP_RANGE(KILN_SAMPLER_REPEAT_PENALTY), &sp->repeat_penalty) ||
        !get_num(r, req, "repeat_penalty", SP_RANGE(KILN_SAMPLER_REPEAT_PENALTY), &sp->repeat_penalty))
        return false;
#undef SP_RANGE
    const kiln_sampler_range *top_k_range = kiln_sampler_param_range(KILN_SAMPLER_TOP_K);
    if (!get_int(r, req, "top_k", (long long)top_k_range->min, (long long)top_k_range->max, &top_k)) return false;
    if (top_k >= 0) sp->top_k = (int32_t)top_k;
    if (!get_int(r, req, "seed", -1, INT64_MAX, &seed)) return false;
    if (seed >= 0) sp->seed = (uint64_t)seed;
    if (seed == -1) sp->seed = KILN_SEED_RANDOM;
    if (!srv_get_bool(r, req, "ignore_eos", &gp->ignore_eos)) return false;
    if (!srv_get_bool(r, req, "speculative", &gp->speculative)) return false; /* false: no speculative decoding */
    if (!get_stop(r, req, j) || !get_logit_bias(r, req, j)) return false;
    if (!srv_constraint(r, req, &j->grammar)) return false;
    gp->grammar = srv_grammar_get(j->grammar);
    return true;
}

/* The fields both endpoints share, into the job's generation parameters and g. */
static bool parse_common(srv_req *r, json_t *req, srv_job *j, gen_out *g) {
    if (!srv_generation_params(r, req, j)) return false;
    if (!srv_get_bool(r, req, "stream", &g->stream)) return false;
    long long n = 1;
    if (!get_int(r, req, "n", 1, SRV_MAX_CHOICES, &n)) return false;
    g->n = (int)n;

    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            BAD(r, "stream_options", "'stream_options' must be an object");
            return false;
        }
        if (!srv_get_bool(r, so, "include_usage", &g->include_usage)) return false;
    }
    return true;
}

/* ---- prompt ------------------------------------------------------------------------------------- */

void srv_send_tokenize_error(srv_req *r, const char *param, kiln_status st) {
    if (st == KILN_ERR_INVALID_ARG) {
        srv_send_error(r, 400, "invalid_request_error", param, "invalid_value", "%s", kiln_last_error());
        return;
    }
    srv_send_error(r, 500, "server_error", NULL, NULL, "tokenization failed: %s", kiln_last_error());
}

kiln_token *srv_tokenize_prompt(srv_req *r, const char *param, const char *text, size_t len, size_t *n_out) {
    const kiln_model *m = r->server->model;
    size_t cap = len + 2, n = 0;
    kiln_token *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        oom(r);
        return NULL;
    }
    const kiln_status st = kiln_tokenize_chat(m, text, len, ids, cap, &n);
    if (st != KILN_OK) {
        srv_send_tokenize_error(r, param, st);
        free(ids);
        return NULL;
    }
    if (n == 0) {
        BAD(r, "prompt", "the prompt is empty and the model has no BOS token to start from");
        free(ids);
        return NULL;
    }
    if (n >= (size_t)r->server->n_ctx) {
        srv_send_error(r, 400, "invalid_request_error", param, "context_length_exceeded",
                       "this model's context holds %d tokens, but the prompt has %zu tokens (at least one token "
                       "must be left to generate)",
                       r->server->n_ctx, n);
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

/* Text of a message's content: a string, null, or an array of {"type": "text", "text": ...} parts
 * (joined with "\n"). Returns a new JSON string, or NULL after sending 400. */
static json_t *content_text(srv_req *r, json_t *c, size_t idx) {
    if (!c || json_is_null(c)) return json_string("");
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        BAD(r, "messages", "messages[%zu].content must be a string or an array of content parts", idx);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        oom(r);
        return NULL;
    }
    size_t i;
    json_t *part;
    bool ok = true;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type)) {
            BAD(r, "messages", "messages[%zu].content[%zu] must be an object with a 'type'", idx, i);
            ok = false;
            break;
        }
        if (strcmp(json_string_value(type), "text") != 0) {
            BAD(r, "messages", "messages[%zu].content[%zu]: content type '%s' is not supported (only 'text')", idx, i,
                json_string_value(type));
            ok = false;
            break;
        }
        if (!json_is_string(text)) {
            BAD(r, "messages", "messages[%zu].content[%zu].text must be a string", idx, i);
            ok = false;
            break;
        }
        if (i) fputc('\n', f);
        fwrite(json_string_value(text), 1, json_string_length(text), f);
    }
    fclose(f);
    json_t *s = ok ? json_stringn(buf, len) : NULL;
    free(buf);
    return s;
}

char *srv_render_chat(srv_req *r, json_t *req, size_t *len) {
    json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        BAD(r, "messages", "'messages' must be a non-empty array");
        return NULL;
    }
    if (json_array_size(msgs) > SRV_MAX_MESSAGES) {
        BAD(r, "messages", "'messages' has %zu entries; at most %d are allowed", json_array_size(msgs),
            SRV_MAX_MESSAGES);
        return NULL;
    }
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
    json_t *norm = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        bool known = false;
        for (size_t k = 0; json_is_string(role) && k < sizeof roles / sizeof roles[0]; k++)
            known |= strcmp(json_string_value(role), roles[k]) == 0;
        if (!json_is_object(m) || !known) {
            BAD(r, "messages",
                "messages[%zu] must be an object with a role of system, developer, user, assistant or tool", i);
            json_decref(norm);
            return NULL;
        }
        json_t *text = content_text(r, json_object_get(m, "content"), i);
        if (!text) {
            json_decref(norm);
            return NULL;
        }
        json_t *copy = json_deep_copy(m); /* keeps tool_calls, name, tool_call_id, ... */
        json_object_set_new(copy, "content", text);
        json_array_append_new(norm, copy);
        if (!srv_tools_message(r, m, i, copy)) {
            json_decref(norm);
            return NULL;
        }
    }
    json_t *ctx = json_object();
    json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) {
            BAD(r, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
            json_decref(norm);
            json_decref(ctx);
            return NULL;
        }
        json_object_update(ctx, kw);
    }
    json_object_set_new(ctx, "messages", norm);
    json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            BAD(r, "tools", "'tools' must be an array");
            json_decref(ctx);
            return NULL;
        }
        json_object_set(ctx, "tools", tools);
    }
    json_t *agp = json_object_get(req, "add_generation_prompt");
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(!json_is_false(agp)));
    const char *tmpl = r->server->cfg.chat_template;
    if (tmpl) { /* --chat-template-file: kiln_chat_apply's context, rendered with that template */
        kiln_token ids[2] = {kiln_token_bos(r->server->model), kiln_token_eos(r->server->model)};
        const char *keys[2] = {"bos_token", "eos_token"};
        for (int k = 0; k < 2; k++) {
            char piece[256];
            size_t n = 0;
            if (ids[k] < 0 || kiln_token_piece(r->server->model, ids[k], true, piece, sizeof piece, &n) != KILN_OK)
                n = 0;
            json_t *v = json_stringn(piece, n);
            if (!json_object_get(ctx, keys[k])) json_object_set_new(ctx, keys[k], v ? v : json_string(""));
            else json_decref(v);
        }
    }
    char *cj = json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    char *out = NULL;
    if (!cj) {
        oom(r);
        return NULL;
    }
    kiln_status st = tmpl ? kiln_template_render(tmpl, strlen(tmpl), cj, strlen(cj), &out, len)
                          : kiln_chat_apply(r->server->model, cj, strlen(cj), &out, len);
    free(cj);
    if (st == KILN_ERR_NOMEM) oom(r);
    else if (st) BAD(r, "messages", "the chat template failed: %s", kiln_last_error());
    return st ? NULL : out;
}

/* ---- output ------------------------------------------------------------------------------------- */

/* A token's text for logprobs: its bytes as a JSON string (invalid UTF-8 replaced by U+FFFD) and
 * as an array of byte values. */
static void token_text(const kiln_model *m, kiln_token t, json_t **str, json_t **bytes) {
    char buf[256], fixed[768];
    size_t n = 0, k = 0;
    if (kiln_token_piece(m, t, true, buf, sizeof buf, &n) != KILN_OK) n = 0;
    *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    *str = json_stringn(buf, n);
    if (*str) return;
    for (size_t i = 0; i < n; i++) { /* byte-wise: ASCII kept, every other byte becomes U+FFFD */
        if ((unsigned char)buf[i] < 0x80) fixed[k++] = buf[i];
        else {
            memcpy(fixed + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
    }
    *str = json_stringn(fixed, k);
}

/* The bytes token t adds to decoded text (special tokens none): its share of an echoed prompt. */
static size_t piece_len(const kiln_model *m, kiln_token t) {
    char buf[256];
    size_t n = 0;
    return kiln_token_piece(m, t, false, buf, sizeof buf, &n) == KILN_OK ? n : 0;
}

/* Appends a completions logprobs entry (steals tok, lp, top) at the text offset, which then
 * advances by adv bytes. */
static void append_cmpl_entry(gen_out *g, json_t *dst, json_t *tok, json_t *lp, json_t *top, size_t adv) {
    json_array_append_new(json_object_get(dst, "text_offset"), json_integer((json_int_t)g->text_offset));
    g->text_offset += adv;
    json_array_append_new(json_object_get(dst, "tokens"), tok);
    json_array_append_new(json_object_get(dst, "token_logprobs"), lp);
    json_array_append_new(json_object_get(dst, "top_logprobs"), top);
}

/* Records the logprobs of one token: a chat entry ({token, logprob, bytes, top_logprobs}) or a
 * completions entry (parallel arrays) appended to dst. */
static void add_logprob(gen_out *g, json_t *dst, const kiln_token_event *ev) {
    json_t *tok, *bytes;
    token_text(g->model, ev->token, &tok, &bytes);
    if (g->chat) {
        json_t *top = json_array();
        for (size_t i = 0; i < ev->n_top; i++) {
            json_t *ts, *tb;
            token_text(g->model, ev->top[i].token, &ts, &tb);
            json_array_append_new(
                top, json_pack("{s:o, s:f, s:o}", "token", ts, "logprob", (double)ev->top[i].logprob, "bytes", tb));
        }
        json_array_append_new(dst, json_pack("{s:o, s:f, s:o, s:o}", "token", tok, "logprob", (double)ev->logprob,
                                             "bytes", bytes, "top_logprobs", top));
        return;
    }
    json_decref(bytes);
    json_t *top = json_object();
    for (size_t i = 0; i < ev->n_top; i++) {
        json_t *ts, *tb;
        token_text(g->model, ev->top[i].token, &ts, &tb);
        json_decref(tb);
        if (!json_object_get(top, json_string_value(ts)))
            json_object_set_new(top, json_string_value(ts), json_real((double)ev->top[i].logprob));
        json_decref(ts);
    }
    const size_t adv = ev->prompt ? piece_len(g->model, ev->token) : strlen(json_string_value(tok));
    append_cmpl_entry(g, dst, tok, json_real((double)ev->logprob), top, adv);
}

/* The completions entry of the prompt's first token (echo with logprobs), at offset 0: no logprob,
 * no alternatives, as OpenAI gives it. */
static void add_first_prompt_token(gen_out *g, json_t *dst, kiln_token t) {
    json_t *tok, *bytes;
    token_text(g->model, t, &tok, &bytes);
    json_decref(bytes);
    g->text_offset = 0;
    append_cmpl_entry(g, dst, tok, json_null(), json_null(), piece_len(g->model, t));
}

/* An empty logprobs container: chat {"content": [], "refusal": null}'s array, or the completions
 * object of parallel arrays. */
static json_t *new_lp(bool chat) {
    if (chat) return json_array();
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static json_t *lp_value(gen_out *g, json_t *lp) {
    if (!lp) return json_null();
    if (g->chat) return json_pack("{s:O, s:n}", "content", lp, "refusal");
    return json_incref(lp);
}

static const char *finish_reason(kiln_stop_reason s) {
    return (s == KILN_STOP_LENGTH || s == KILN_STOP_CONTEXT) ? "length" : "stop";
}

/* finish_reason of a chat reply: "tool_calls" when it made calls (unless it was cut off). */
static const char *chat_finish(gen_out *g, kiln_stop_reason s) {
    const char *f = finish_reason(s);
    return g->parser && strcmp(f, "stop") == 0 && kiln_chat_parser_n_tool_calls(g->parser) > 0 ? "tool_calls" : f;
}

static json_t *usage(const kiln_generate_result *res) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", res->n_prompt, "completion_tokens", res->n_generated,
                     "total_tokens", res->n_prompt + res->n_generated, "prompt_tokens_details", "cached_tokens",
                     res->n_cached);
}

/* The envelope of a response or chunk: id, object, created, model, system_fingerprint, choices. */
static json_t *envelope(gen_out *g, const char *object, json_t *choice) {
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:s, s:s, s:[]}", "id", g->id, "object", object, "created", (json_int_t)g->created,
                  "model", g->model_id, "system_fingerprint", g->fingerprint, "choices");
    if (o && choice) json_array_append_new(json_object_get(o, "choices"), choice);
    else json_decref(choice);
    return o;
}

/* Appends one SSE event "data: <json>\n\n" to the job's output (lock held), or to its sink's
 * (taking the sink's lock); steals obj. An event that cannot be made or appended marks the output
 * lost (srv_job.lost). */
static void emit_sse(srv_job *j, json_t *obj) {
    gen_out *g = j->user;
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    srv_job *dst = g->sink ? g->sink : j;
    if (g->sink) pthread_mutex_lock(&dst->mu);
    if (!s || !srv_job_append(dst, "data: ", 6) || !srv_job_append(dst, s, strlen(s)) ||
        !srv_job_append(dst, "\n\n", 2))
        g->oom = dst->lost = true;
    if (g->sink) {
        pthread_cond_broadcast(&dst->cv);
        pthread_mutex_unlock(&dst->mu);
    }
    free(s);
}

/* A streaming choice ended (its lock held): its usage joins the sink's; the last one sends the
 * usage chunk (when asked) and [DONE] and ends the sink's stream. failures: this thread's count of
 * jansson's failures when the choice's end began. A part of the end that could not be made whole
 * marks the sink lost: then, as when any output of the stream was lost, no [DONE] goes out, and
 * the stream is cut off after what it has (stream_read). */
static void end_choice(srv_job *j, unsigned failures) {
    gen_out *g = j->user;
    srv_job *sink = g->sink;
    gen_out *sg = sink->user;
    pthread_mutex_lock(&sink->mu);
    /* this choice's end was not made whole */
    if (srv_json_alloc_failures() != failures) sink->lost = true;
    if (g->index % g->n == 0) { /* the first choice of its prompt */
        sg->total.n_prompt += j->result.n_prompt;
        sg->total.n_cached += j->result.n_cached;
    }
    sg->total.n_generated += j->result.n_generated;
    if (--sg->pending == 0) {
        if (g->include_usage && !sink->lost) {
            json_t *o = envelope(g, g->chat ? "chat.completion.chunk" : "text_completion", NULL);
            if (o) json_object_set_new(o, "usage", usage(&sg->total));
            char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
            json_decref(o);
            if (!txt || srv_json_alloc_failures() != failures || !srv_job_append(sink, "data: ", 6) ||
                !srv_job_append(sink, txt, strlen(txt)) || !srv_job_append(sink, "\n\n", 2))
                sink->lost = true;
            free(txt);
        }
        if (!sink->lost) srv_job_append(sink, "data: [DONE]\n\n", 14);
        sink->done = true;
    }
    pthread_cond_broadcast(&sink->cv);
    pthread_mutex_unlock(&sink->mu);
}

/* A streaming chunk with text (and the logprobs gathered since the last one), or the final chunk
 * with finish_reason. */
static json_t *chunk(gen_out *g, const char *text, size_t len, const char *finish) {
    json_t *lp = g->lp_pending;
    g->lp_pending = NULL;
    json_t *choice;
    if (g->chat) {
        json_t *delta = finish ? json_object() : json_pack("{s:s%}", "content", text, len);
        choice = json_pack("{s:i, s:o, s:o, s:s?}", "index", g->index, "delta", delta, "logprobs", lp_value(g, lp),
                           "finish_reason", finish);
    } else {
        choice = json_pack("{s:s%, s:i, s:o, s:s?}", "text", finish ? "" : text, finish ? (size_t)0 : len, "index",
                           g->index, "logprobs", lp_value(g, lp), "finish_reason", finish);
    }
    json_decref(lp);
    if (choice && !finish) json_object_set_new(choice, "finish_reason", json_null());
    json_t *o = envelope(g, g->chat ? "chat.completion.chunk" : "text_completion", choice);
    if (o && g->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* A streaming chunk of one parser delta, as OpenAI streams them: content, reasoning_content, or a
 * tool call (its first delta with index, id, type, name and the start of its arguments; later
 * ones with index and more arguments). */
static json_t *delta_chunk(gen_out *g, const kiln_chat_delta *d) {
    json_t *delta;
    if (d->kind == KILN_DELTA_TOOL_CALL) {
        json_t *fn = d->name ? json_pack("{s:s}", "name", d->name) : json_object();
        json_object_set_new(fn, "arguments", json_stringn(d->text ? d->text : "", d->text ? d->len : 0));
        json_t *call = json_pack("{s:i}", "index", (int)d->index);
        if (d->id) {
            json_object_set_new(call, "id", json_string(d->id));
            json_object_set_new(call, "type", json_string("function"));
        }
        json_object_set_new(call, "function", fn);
        delta = json_pack("{s:[o]}", "tool_calls", call);
    } else
        delta = json_pack("{s:s%}", d->kind == KILN_DELTA_REASONING ? "reasoning_content" : "content", d->text, d->len);
    json_t *lp = g->lp_pending;
    g->lp_pending = NULL;
    json_t *choice = json_pack("{s:i, s:o, s:o, s:n}", "index", g->index, "delta", delta, "logprobs", lp_value(g, lp),
                               "finish_reason");
    json_decref(lp);
    json_t *o = envelope(g, "chat.completion.chunk", choice);
    if (o && g->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* Feeds text to the parser (finish: ends its input) and, streaming, sends the deltas it has. */
static void parse_text(srv_job *j, const char *text, size_t len, bool finish) {
    gen_out *g = j->user;
    srv_chat_parser_step(j, g->parser, &g->parse_failed, text, len, finish);
    if (!g->stream) return;
    kiln_chat_delta d;
    while (kiln_chat_parser_next(g->parser, &d)) emit_sse(j, delta_chunk(g, &d));
}

/* Where the job's logprob entries go (the whole response's, or a stream's next chunk's), made when
 * missing; the prompt's first token's entry comes first with echo. */
static json_t *lp_dst(srv_job *j) {
    gen_out *g = j->user;
    json_t **dst = g->stream ? &g->lp_pending : &g->lp;
    if (!*dst) *dst = new_lp(g->chat);
    if (g->lp_first && *dst) {
        g->lp_first = false;
        add_first_prompt_token(g, *dst, j->prompt[0]);
    }
    return *dst;
}

static void on_event(srv_job *j, const kiln_token_event *ev) {
    gen_out *g = j->user;
    g->started = true;
    if (g->sink && atomic_load(&g->sink->cancel)) atomic_store(&j->cancel, true); /* the client left */
    if (ev && ev->prompt) { /* echo with logprobs: a prompt token */
        add_logprob(g, lp_dst(j), ev);
        return;
    }
    if (g->echo_held) { /* the prompt's logprobs are all there: the echo chunk carries them */
        g->echo_held = false;
        lp_dst(j);
        emit_sse(j, chunk(g, g->echo, g->n_echo, NULL));
    }
    if (g->echo && g->logprobs >= 0 && g->text_offset < g->n_echo) g->text_offset = g->n_echo; /* after the prompt */
    if (ev && g->logprobs >= 0 && ev->token >= 0) add_logprob(g, lp_dst(j), ev);
    if (ev && g->parser) {
        parse_text(j, ev->text, ev->text_len, false);
        return;
    }
    if (!ev && g->parser) parse_text(j, NULL, 0, true);
    if (ev) {
        /* A stream gets one chunk per token, as OpenAI sends them, even when the token's text is
         * empty (part of a character, or held back as a possible stop string): clients see
         * every token arrive. Text released without a token (the end) comes only if non-empty. */
        if (g->stream && (ev->text_len || ev->token >= 0)) {
            emit_sse(j, chunk(g, ev->text, ev->text_len, NULL));
            return;
        }
        if (g->stream || !ev->text_len) return;
        if (!srv_text_append(&g->text, &g->n_text, &g->cap_text, ev->text, ev->text_len)) g->oom = true;
        return;
    }
    /* End of the generation: the final chunk, usage, [DONE] (streaming only). */
    if (!g->stream) return;
    const unsigned failures = srv_json_alloc_failures();
    if (j->status == KILN_OK) {
        emit_sse(j, chunk(g, NULL, 0, g->chat ? chat_finish(g, j->result.stop) : finish_reason(j->result.stop)));
        if (g->include_usage && !g->sink) {
            json_t *o = envelope(g, g->chat ? "chat.completion.chunk" : "text_completion", NULL);
            if (o) json_object_set_new(o, "usage", usage(&j->result));
            emit_sse(j, o);
        }
    } else {
        const char *msg = j->status == KILN_ERR_CANCELLED ? "the generation was cancelled (server stopping)" : j->error;
        const char *type = j->status == KILN_ERR_UNSUPPORTED ? "invalid_request_error" : "server_error";
        emit_sse(j, json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", msg, "type", type, "param", "code"));
    }
    if (g->sink) {
        end_choice(j, failures);
        return;
    }
    if (!srv_job_append(j, "data: [DONE]\n\n", 14)) g->oom = true;
}

/* The choice of a finished job at index, or NULL after sending the error. */
static json_t *result_choice(srv_req *r, srv_job *j, int index) {
    gen_out *g = j->user;
    if (j->status != KILN_OK || g->oom) {
        if (j->status == KILN_ERR_CANCELLED)
            srv_send_error(r, 503, "server_error", NULL, NULL,
                           "the generation was cancelled because the server is stopping");
        else if (j->status == KILN_ERR_UNSUPPORTED && !g->oom) /* the grammar's property, e.g. too ambiguous */
            srv_send_error(r, 400, "invalid_request_error", NULL, NULL, "generation failed: %s", j->error);
        else
            srv_send_error(r, 500, "server_error", NULL, NULL, "generation failed: %s",
                           g->oom ? "out of memory" : j->error);
        return NULL;
    }
    json_t *lp = g->logprobs >= 0 ? json_incref(lp_dst(j)) : NULL;
    json_t *choice;
    const char *finish = g->chat ? chat_finish(g, j->result.stop) : finish_reason(j->result.stop);
    if (g->parser) {
        char *mj = NULL;
        size_t mlen = 0;
        json_t *msg = NULL;
        if (kiln_chat_parser_message(g->parser, &mj, &mlen) == KILN_OK) msg = json_loadb(mj, mlen, 0, NULL);
        kiln_free(mj);
        if (!msg) {
            json_decref(lp);
            srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
            return NULL;
        }
        if (!json_object_get(msg, "content")) json_object_set_new(msg, "content", json_string(""));
        json_object_set_new(msg, "refusal", json_null());
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", index, "message", msg, "logprobs", lp_value(g, lp),
                           "finish_reason", finish);
    } else if (g->chat)
        choice = json_pack("{s:i, s:{s:s, s:s%, s:n}, s:o, s:s}", "index", index, "message", "role", "assistant",
                           "content", g->text ? g->text : "", g->n_text, "refusal", "logprobs", lp_value(g, lp),
                           "finish_reason", finish);
    else {
        char *text = g->text;
        size_t n_text = g->n_text;
        if (g->echo) { /* the prompt's text, then the completion */
            if (!(text = malloc(g->n_echo + n_text + 1))) {
                json_decref(lp);
                oom(r);
                return NULL;
            }
            memcpy(text, g->echo, g->n_echo);
            if (n_text) memcpy(text + g->n_echo, g->text, n_text);
            n_text += g->n_echo;
        }
        choice = json_pack("{s:s%, s:i, s:o, s:s}", "text", text ? text : "", n_text, "index", index, "logprobs",
                           lp_value(g, lp), "finish_reason", finish);
        if (text != g->text) free(text);
    }
    json_decref(lp);
    return choice;
}

/* Non-streaming response once the jobs[n] (the choices, each done) are: usage counts each prompt
 * once (the first of its g->n choices). */
static void send_result(srv_req *r, srv_job **jobs, int n) {
    gen_out *g = jobs[0]->user;
    json_t *o = envelope(g, g->chat ? "chat.completion" : "text_completion", NULL);
    kiln_generate_result total = {0};
    for (int i = 0; i < n; i++) {
        json_t *choice = result_choice(r, jobs[i], i);
        if (!choice) {
            json_decref(o);
            return;
        }
        if (o) json_array_append_new(json_object_get(o, "choices"), choice);
        else json_decref(choice);
        if (i % g->n == 0) {
            total.n_prompt += jobs[i]->result.n_prompt;
            total.n_cached += jobs[i]->result.n_cached;
        }
        total.n_generated += jobs[i]->result.n_generated;
    }
    if (o) json_object_set_new(o, "usage", usage(&total));
    srv_send_json(r, 200, o);
}

/* ---- the two endpoints -------------------------------------------------------------------------- */

/* A stream's first chunk of a choice, sent before the choice is submitted: the role (chat), or the
 * prompt's text (completions with echo); nothing otherwise. The job's lock held when it has no sink. */
static void open_choice(srv_job *j) {
    gen_out *g = j->user;
    json_t *o;
    if (g->chat) {
        o = envelope(g, "chat.completion.chunk",
                     json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", g->index, "delta", "role", "assistant",
                               "content", "", "logprobs", "finish_reason"));
        if (o && g->include_usage) json_object_set_new(o, "usage", json_null());
    } else if (g->echo && !g->echo_held) o = chunk(g, g->echo, g->n_echo, NULL);
    else return;
    emit_sse(j, o);
}

/* Queues the job and answers: a stream at once, or the whole response when the job is done. */
static void run(srv_req *r, srv_job *j) {
    srv *s = r->server;
    gen_out *g = j->user;
    j->gp.logprobs = g->logprobs;
    if (atomic_load(&s->stopping)) {
        srv_send_error(r, 503, "server_error", NULL, NULL, "the server is shutting down");
        return;
    }
    if (g->stream) { /* the role (or the echoed prompt) comes first, as OpenAI sends it */
        pthread_mutex_lock(&j->mu);
        open_choice(j);
        pthread_mutex_unlock(&j->mu);
    }
    kiln_status st = srv_job_submit(s, j);
    if (st == KILN_ERR_BUSY) {
        srv_send_error(r, 429, "requests", NULL, "rate_limit_exceeded",
                       "the server is busy: %d requests are already waiting; retry later", s->cfg.max_queue);
        return;
    }
    if (st) { /* validated already, so only an allocation can fail here */
        srv_send_error(r, 500, "server_error", NULL, NULL, "cannot start the generation: %s", kiln_last_error());
        return;
    }
    if (g->stream) {
        srv_send_stream(r, j);
        return;
    }
    if (srv_wait_job(r, j)) send_result(r, &j, 1);
}

static srv_job *new_job(srv_req *r, bool chat);

/* Choice i (>= 1) of j's request: the same prompt, parameters and output state; a fixed seed
 * becomes seed + i, so every choice is reproducible. The stop strings are copied; the logit bias
 * and grammar are j's, which the engine copies or references when the choice is submitted (j
 * outlives that). NULL after sending 500. */
static srv_job *clone_choice(srv_req *r, srv_job *j, int i) {
    gen_out *g0 = j->user;
    srv_job *c = new_job(r, g0->chat);
    if (!c) return NULL;
    gen_out *g = c->user;
    memcpy(g->id, g0->id, sizeof g->id);
    g->created = g0->created;
    g->logprobs = g0->logprobs;
    g->n = g0->n;
    g->stream = g0->stream;
    g->include_usage = g0->include_usage;
    size_t echo_cap = 0;
    g->echo_held = g0->echo_held;
    g->lp_first = g0->lp_first;
    if (g0->echo && !srv_text_append(&g->echo, &g->n_echo, &echo_cap, g0->echo, g0->n_echo)) {
        srv_job_unref(c);
        oom(r);
        return NULL;
    }
    c->gp = j->gp;
    c->gp.share_prompt = false;
    c->gp.n_stop = 0;
    c->gp.stop = NULL;
    if (j->gp.sampling.seed != KILN_SEED_RANDOM) c->gp.sampling.seed = j->gp.sampling.seed + (uint64_t)i;
    c->prompt = malloc(j->n_prompt * sizeof *c->prompt);
    c->stop = j->gp.n_stop ? calloc(j->gp.n_stop, sizeof *c->stop) : NULL;
    bool ok = c->prompt && (!j->gp.n_stop || c->stop);
    for (size_t k = 0; ok && k < j->gp.n_stop; k++, c->gp.n_stop++) ok = (c->stop[k] = strdup(j->stop[k])) != NULL;
    if (!ok) {
        srv_job_unref(c);
        oom(r);
        return NULL;
    }
    memcpy(c->prompt, j->prompt, j->n_prompt * sizeof *c->prompt);
    c->n_prompt = j->n_prompt;
    c->gp.stop = (const char *const *)c->stop;
    return c;
}

/* Submits job j of a request with several choices; false (setting *st) when the engine refuses it. */
static bool submit_choice(srv *s, srv_job *j, kiln_status *st) {
    j->gp.logprobs = ((gen_out *)j->user)->logprobs;
    return (*st = srv_job_submit(s, j)) == KILN_OK;
}

/* Runs the choices jobs[n] (n > 1: one or more prompts, g->n choices each, in order) as rows of
 * one batch: the first choice of every prompt is submitted (with share_prompt when the prompt has
 * more), and once a prompt is evaluated (its first choice's first event) its other choices, which
 * restore it from the prefix cache and run beside it; then one response. */
static void run_choices(srv_req *r, srv_job **jobs, int n) {
    srv *s = r->server;
    if (atomic_load(&s->stopping)) {
        srv_send_error(r, 503, "server_error", NULL, NULL, "the server is shutting down");
        return;
    }
    gen_out *g0 = jobs[0]->user;
    const int per = g0->n;
    srv_job *sink = NULL;
    if (g0->stream) { /* one stream: each choice's chunks with its index, the role first */
        if (!(sink = new_job(r, g0->chat))) return;
        gen_out *sg = sink->user;
        sg->pending = n;
        for (int i = 0; i < n; i++) {
            gen_out *g = jobs[i]->user;
            g->sink = sink;
            g->index = i;
            srv_job_ref(sink);
            open_choice(jobs[i]);
        }
    }
    kiln_status st = KILN_OK;
    for (int i = 0; i < n; i += per) {
        jobs[i]->gp.share_prompt = per > 1;
        if (!submit_choice(s, jobs[i], &st)) break;
    }
    for (int i = 0; i < n && !st && per > 1; i += per) {
        gen_out *g = jobs[i]->user; /* wait until the prompt is in the cache (or the choice ended) */
        pthread_mutex_lock(&jobs[i]->mu);
        while (!g->started && !jobs[i]->done) pthread_cond_wait(&jobs[i]->cv, &jobs[i]->mu);
        pthread_mutex_unlock(&jobs[i]->mu);
        for (int c = 1; c < per; c++)
            if (!submit_choice(s, jobs[i + c], &st)) break;
    }
    if (st) {
        for (int i = 0; i < n; i++) srv_job_cancel(jobs[i]); /* those not submitted only get the flag */
        if (st == KILN_ERR_BUSY)
            srv_send_error(r, 429, "requests", NULL, "rate_limit_exceeded",
                           "the server is busy: %d requests are already waiting; retry later", s->cfg.max_queue);
        else srv_send_error(r, 500, "server_error", NULL, NULL, "cannot start the generation: %s", kiln_last_error());
        srv_job_unref(sink);
        return;
    }
    if (sink) {
        srv_send_stream(r, sink);
        srv_job_unref(sink);
        return;
    }
    for (int i = 0; i < n; i++)
        if (!srv_wait_job(r, jobs[i])) { /* the client went away */
            for (int k = i + 1; k < n; k++) srv_job_cancel(jobs[k]);
            return;
        }
    send_result(r, jobs, n);
}

/* A job for endpoint chat (or completions) with its output state; NULL after sending 500. */
static srv_job *new_job(srv_req *r, bool chat) {
    srv_job *j = srv_job_new();
    gen_out *g = j ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        srv_job_unref(j);
        oom(r);
        return NULL;
    }
    g->chat = chat;
    g->logprobs = -1;
    g->created = (long)time(NULL);
    g->model = r->server->model;
    g->model_id = r->server->model_id;
    g->fingerprint = r->server->fingerprint;
    srv_make_id(g->id, sizeof g->id, chat ? "chatcmpl-" : "cmpl-");
    j->user = g;
    j->free_user = gen_out_free;
    j->on_event = on_event;
    return j;
}

void srv_chat_parser_step(srv_job *j, kiln_chat_parser *parser, bool *failed, const char *text, size_t len,
                          bool finish) {
    if (*failed) return;
    kiln_status st = len ? kiln_chat_parser_feed(parser, text, len) : KILN_OK;
    if (!st && finish) st = kiln_chat_parser_finish(parser);
    if (st) *failed = true;
    if (st == KILN_ERR_NOMEM) j->lost = true;
}

bool srv_chat_parser_setup(srv_req *r, srv_job *j, const srv_tools *t, const char *prompt, kiln_chat_parser **parser) {
    srv *s = r->server;
    *parser = NULL;
    const char *tmpl = s->cfg.chat_template ? s->cfg.chat_template : kiln_model_chat_template(s->model);
    const char *format = s->cfg.tool_format ? s->cfg.tool_format : kiln_chat_format_detect(tmpl);
    const bool calls = t->tools && t->choice != SRV_TOOL_NONE;
    if (!calls && (t->reasoning == KILN_REASONING_NONE || strcmp(format, "generic") == 0)) return true;
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    pp.format = format;
    pp.chat_template = tmpl;
    pp.reasoning = t->reasoning;
    pp.prompt = prompt;
    pp.parse_tool_calls = calls;
    char *tools_json = t->tools ? json_dumps(t->tools, JSON_COMPACT) : NULL;
    pp.tools = tools_json;
    kiln_status st = (t->tools && !tools_json) ? KILN_ERR_NOMEM : kiln_chat_parser_new(&pp, parser);
    free(tools_json);
    if (st == KILN_ERR_NOMEM) return oom(r);
    if (st) {
        BAD(r, "tools", "the tools cannot be read: %s", kiln_last_error());
        return false;
    }
    format = kiln_chat_parser_format(*parser); /* the canonical name of an alias */
    j->gp.render_special = kiln_chat_format_renders_special(format);
    if (calls && (t->choice == SRV_TOOL_REQUIRED || t->choice == SRV_TOOL_NAMED)) {
        if (j->grammar) {
            BAD(r, "tool_choice",
                "'tool_choice' %s and an output constraint (response_format, json_schema or "
                "grammar) cannot be combined",
                t->choice == SRV_TOOL_REQUIRED ? "\"required\"" : "naming a function");
            return false;
        }
    }
    if (calls && !j->grammar) { /* "auto" with an output constraint keeps that constraint */
        if (!srv_tools_grammar(r, t, format, tmpl, prompt, &j->grammar)) return false;
        j->gp.grammar = srv_grammar_get(j->grammar);
    }
    return true;
}

/* The chat fields that ask for what kiln does not do: OpenAI's deprecated function calling (its
 * replies have another shape than tool calls) and audio output. A 400 naming each, never ignored;
 * false after sending it. */
static bool refuse_chat_unsupported(srv_req *r, json_t *req) {
    static const char *const legacy[] = {"functions", "function_call"};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(req, legacy[i]);
        if (v && !json_is_null(v)) {
            BAD(r, legacy[i],
                "'%s' (OpenAI's deprecated function calling) is not supported: declare the functions in 'tools' "
                "([{\"type\": \"function\", \"function\": {...}}]) and choose with 'tool_choice'",
                legacy[i]);
            return false;
        }
    }
    json_t *mod = json_object_get(req, "modalities"), *m;
    size_t i;
    if (mod && !json_is_null(mod)) {
        bool ok = json_is_array(mod);
        json_array_foreach(mod, i, m) ok = ok && json_is_string(m) && strcmp(json_string_value(m), "text") == 0;
        if (!ok) {
            BAD(r, "modalities", "'modalities' may only ask for [\"text\"]: kiln generates text, not audio");
            return false;
        }
    }
    json_t *audio = json_object_get(req, "audio");
    if (audio && !json_is_null(audio)) {
        BAD(r, "audio", "'audio' (audio output) is not supported: kiln generates text");
        return false;
    }
    return true;
}

void srv_chat_completions(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    srv_job *jobs[SRV_MAX_CHOICES];
    int n_jobs = 0;
    srv_job *j = new_job(r, true);
    char *prompt = NULL;
    size_t len = 0;
    if (!j) goto done;
    gen_out *g = j->user;
    bool lp = false;
    long long top = 0;
    if (!refuse_chat_unsupported(r, req) || !parse_common(r, req, j, g) || !srv_get_bool(r, req, "logprobs", &lp) ||
        !get_int(r, req, "top_logprobs", 0, KILN_MAX_TOP_LOGPROBS, &top))
        goto done;
    if (top > 0 && !lp) {
        BAD(r, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        goto done;
    }
    g->logprobs = lp ? (int)top : -1;
    srv_tools tools;
    if (!srv_tools_parse(r, req, &tools)) goto done;
    if (!(prompt = srv_render_chat(r, req, &len))) goto done;
    if (!(j->prompt = srv_tokenize_prompt(r, "messages", prompt, len, &j->n_prompt))) goto done;
    if (!srv_chat_parser_setup(r, j, &tools, prompt, &g->parser)) goto done;
    if (g->n == 1) {
        run(r, j);
        goto done;
    }
    jobs[0] = j;
    for (n_jobs = 1; n_jobs < g->n; n_jobs++) {
        srv_job *c = clone_choice(r, j, n_jobs);
        if (!c) goto done;
        jobs[n_jobs] = c;
        c->grammar = j->grammar; /* borrowed while its parser is set up like j's */
        const bool set = srv_chat_parser_setup(r, c, &tools, prompt, &((gen_out *)c->user)->parser);
        if (c->grammar == j->grammar) c->grammar = NULL;
        if (!set) {
            n_jobs++;
            goto done;
        }
    }
    run_choices(r, jobs, n_jobs);
done:
    for (int i = 1; i < n_jobs; i++) srv_job_unref(jobs[i]);
    free(prompt);
    srv_job_unref(j);
    json_decref(req);
}

/* The most choices one completions request may make: a batch of prompts times n. */
#define SRV_MAX_BATCH 64

/* The token ids of a prompt given as ids (a non-empty JSON array p), checked against the vocabulary
 * and the context; what names it in errors ("prompt", "prompt[2]"). NULL after sending the error. */
static kiln_token *prompt_ids(srv_req *r, json_t *p, const char *what, size_t *n_out) {
    const size_t n = json_array_size(p);
    const int32_t n_vocab = kiln_model_n_vocab(r->server->model);
    if (n >= (size_t)r->server->n_ctx) {
        srv_send_error(r, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                       "this model's context holds %d tokens, but %s has %zu tokens", r->server->n_ctx,
                       strcmp(what, "prompt") ? what : "the prompt", n);
        return NULL;
    }
    kiln_token *ids = malloc(n * sizeof *ids);
    if (!ids) {
        oom(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(p, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= n_vocab) {
            BAD(r, "prompt", "%s[%zu] is not a token id in [0, %d)", what, i, n_vocab);
            free(ids);
            return NULL;
        }
        ids[i] = (kiln_token)id;
    }
    *n_out = n;
    return ids;
}

/* The prompts of a completions request as a JSON array of items of one kind, each a string or a
 * non-empty array of token ids: a string, a token-id array (one prompt each), or an array of either
 * (a batch). NULL after sending 400. */
static json_t *prompt_list(srv_req *r, json_t *p) {
    static const char msg[] = "'prompt' must be a string, an array of token ids, or a non-empty array of strings "
                              "or of token-id arrays";
    if (json_is_string(p) || (json_is_array(p) && json_is_integer(json_array_get(p, 0)))) return json_pack("[O]", p);
    const size_t n = json_array_size(p);
    if (!json_is_array(p) || n == 0) {
        BAD(r, "prompt", msg);
        return NULL;
    }
    const bool strings = json_is_string(json_array_get(p, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(p, i);
        if (strings ? !json_is_string(e) : !json_is_array(e) || json_array_size(e) == 0) {
            BAD(r, "prompt", "%s (prompt[%zu] is not like prompt[0])", msg, i);
            return NULL;
        }
    }
    return json_incref(p);
}

/* The completions fields that ask for what kiln does not do: a 400 naming each, never ignored.
 * False after sending it. */
static bool refuse_unsupported(srv_req *r, json_t *req, const gen_out *g) {
    json_t *suffix = json_object_get(req, "suffix");
    if (suffix && !json_is_null(suffix) && (!json_is_string(suffix) || json_string_length(suffix))) {
        BAD(r, "suffix", "'suffix' (text to follow the completion: fill in the middle) is not supported");
        return false;
    }
    long long best_of = g->n;
    if (!get_int(r, req, "best_of", 1, SRV_MAX_CHOICES, &best_of)) return false;
    if (best_of != g->n) {
        BAD(r, "best_of", "'best_of' other than n (%lld, n = %d: ranking completions on the server) is not supported",
            best_of, g->n);
        return false;
    }
    return true;
}

/* Sets the echo text of choice g: the prompt string as sent, or the text of its token ids (bytes
 * that are not UTF-8 shown as U+FFFD), which a string prompt gets too with logprobs (the tokens'
 * text_offset index it). False after sending 500. */
static bool set_echo(srv_req *r, gen_out *g, json_t *p, const kiln_token *ids, size_t n) {
    size_t cap = 0;
    g->n_echo = 0;
    g->echo_held = g->stream && g->logprobs >= 0;
    g->lp_first = g->logprobs >= 0;
    if (!srv_text_append(&g->echo, &g->n_echo, &cap, "", 0)) return oom(r); /* "" at least */
    if (json_is_string(p) && g->logprobs < 0) {
        if (!srv_text_append(&g->echo, &g->n_echo, &cap, json_string_value(p), json_string_length(p))) return oom(r);
        return true;
    }
    char *raw = NULL;
    size_t n_raw = 0, cap_raw = 0;
    bool ok = srv_text_append(&raw, &n_raw, &cap_raw, "", 0);
    for (size_t i = 0; ok && i < n; i++) {
        char buf[256];
        size_t len = 0;
        if (kiln_token_piece(g->model, ids[i], false, buf, sizeof buf, &len) == KILN_OK)
            ok = srv_text_append(&raw, &n_raw, &cap_raw, buf, len);
    }
    ok = ok && srv_text_append_utf8(&g->echo, &g->n_echo, &cap, raw, n_raw);
    free(raw);
    return ok || oom(r);
}

void srv_completions(srv_req *r) {
    json_t *req = srv_parse_body(r), *prompts = NULL;
    if (!req) return;
    srv_job **jobs = NULL;
    int n_jobs = 0;
    srv_job *j = new_job(r, false);
    if (!j) goto done;
    gen_out *g = j->user;
    long long lp = -1;
    bool echo = false;
    if (!parse_common(r, req, j, g) || !get_int(r, req, "logprobs", 0, KILN_MAX_TOP_LOGPROBS, &lp) ||
        !srv_get_bool(r, req, "echo", &echo))
        goto done;
    g->logprobs = (int)lp;
    if (echo) j->gp.prompt_logprobs = g->logprobs; /* -1 without logprobs */
    if (!refuse_unsupported(r, req, g) || !(prompts = prompt_list(r, json_object_get(req, "prompt")))) goto done;
    const size_t n_prompts = json_array_size(prompts);
    if (n_prompts * (size_t)g->n > SRV_MAX_BATCH) {
        BAD(r, "prompt", "%zu prompts with n = %d make %zu choices; a request makes at most %d", n_prompts, g->n,
            n_prompts * (size_t)g->n, SRV_MAX_BATCH);
        goto done;
    }
    const int total = (int)n_prompts * g->n;
    if (total > 1 && !(jobs = calloc((size_t)total, sizeof *jobs))) {
        oom(r);
        goto done;
    }
    for (size_t p = 0; p < n_prompts; p++) {
        json_t *e = json_array_get(prompts, p);
        char what[32] = "prompt";
        if (n_prompts > 1) snprintf(what, sizeof what, "prompt[%zu]", p);
        kiln_token *ids;
        size_t n_ids = 0;
        if (json_is_string(e))
            ids = srv_tokenize_prompt(r, "prompt", json_string_value(e), json_string_length(e), &n_ids);
        else ids = prompt_ids(r, e, what, &n_ids);
        if (!ids) goto done;
        srv_job *lead = p == 0 ? j : clone_choice(r, j, 0); /* j's parameters, this prompt */
        if (!lead) {
            free(ids);
            goto done;
        }
        if (total > 1) jobs[n_jobs++] = lead;
        free(lead->prompt);
        lead->prompt = ids;
        lead->n_prompt = n_ids;
        if (echo && !set_echo(r, lead->user, e, ids, n_ids)) goto done;
        for (int c = 1; c < g->n; c++) {
            srv_job *cj = clone_choice(r, lead, c);
            if (!cj) goto done;
            jobs[n_jobs++] = cj;
        }
    }
    if (total == 1) run(r, j);
    else run_choices(r, jobs, n_jobs);
done:
    for (int i = 0; i < n_jobs; i++)
        if (jobs[i] != j) srv_job_unref(jobs[i]);
    free(jobs);
    json_decref(prompts);
    srv_job_unref(j);
    json_decref(req);
}
