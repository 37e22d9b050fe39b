/*
 * ollama.c - Ollama's API under /api/: POST /api/chat and /api/generate (NDJSON streams), GET
 * /api/tags, POST /api/show, GET /api/ps, GET /api/version, and POST /api/embed and /api/embeddings
 * (embeddings.c does the work).
 *
 * An Ollama request is translated into the fields of a chat or completions request and handed to
 * the code those share (openai.c): `options` (num_predict, temperature, top_k, top_p, min_p, seed,
 * stop, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty; other options, such as
 * num_ctx or num_gpu, describe Ollama's runner and are accepted and ignored) become the generation
 * parameters, `format` ("json" or a JSON Schema) the output constraint of the constrained decoder,
 * `tools` and the messages' tool_calls the tool declarations and history of the chat parser, and
 * `think` the template's enable_thinking (and, as kiln's extension, `tool_choice` takes OpenAI's
 * values: "required" or a named function makes the reply a call, through the tools' grammar, and
 * `parallel_tool_calls` false keeps it to one). So the same validation,
 * prompt rendering, batching, prefix cache, parser and grammar serve both APIs; only the shapes differ. Errors take
 * Ollama's shape {"error": "message"} (srv_send_error on an /api/ route), with the same status codes.
 *
 * Output: a stream is one JSON object per line ({"model", "created_at", "message": {"role",
 * "content"} or "response", "done": false}), then a last one with "done": true, done_reason
 * ("stop" or "length") and the counts and durations (nanoseconds); a failure mid-stream is a line
 * {"error": "..."}. A chat without messages or a generation without a prompt (how Ollama's clients
 * load a model) answers at once with done_reason "load". Reasoning goes into "thinking", tool calls into
 * message.tool_calls with their arguments as objects. `stream` defaults to true, as in Ollama.
 *
 * Models: a request names any model of the pool (pool.h: its id, "ID:latest", an alias or a name
 * `kiln ls` lists; chosen before these routes run, 404 for any other name); /api/tags lists the
 * served model and the other models `kiln ls` finds (srv_config.list_models), /api/ps the loaded
 * ones.
 *
 * keep_alive (/api/generate, /api/chat, /api/embed, /api/embeddings), as Ollama defines it: a
 * duration string ("30s", "5m", "1h"), a number of seconds, 0 (unload the model right after the
 * response) or negative (keep it loaded; also the default when absent, as kiln always kept its
 * models). Any other value is a 400 here; the pool's owner (pool.c, or the supervisor) read the
 * value from the body before this route ran and applies it: the model is unloaded once it has been
 * idle that long, and /api/ps shows when (expires_at; 2100 for a model kept loaded). A generation
 * without prompt (a chat without messages) and with keep_alive 0 is Ollama's unload call: it answers
 * done_reason "unload" (the supervisor answers it itself when the model is not loaded).
 */
#include "pool.h"
#include "server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The Ollama API version /api/version reports: the release whose request and response shapes kiln
 * follows (clients compare it to decide which features to use). */
#define OLLAMA_VERSION "0.12.0"
#define BAD(r, ...)    srv_send_error(r, 400, "invalid_request_error", NULL, "invalid_value", __VA_ARGS__)

static bool oom(srv_req *r) {
    srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Unix time t as Ollama writes times: "2025-01-02T03:04:05.123456789Z" (UTC). */
static json_t *time_value(long long sec, long nsec) {
    time_t t = (time_t)sec;
    struct tm tm;
    char buf[64], date[40];
    if (!gmtime_r(&t, &tm)) return json_string("1970-01-01T00:00:00Z");
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, sizeof buf, "%s.%09ldZ", date, nsec);
    return json_string(buf);
}

static json_t *now_value(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return time_value((long long)ts.tv_sec, ts.tv_nsec);
}

/* ---- models ----------------------------------------------------------------------------------- */

/* The served model's name in Ollama's lists: its id with the tag ":latest" (unless it has one). */
static void served_name(const srv *s, char *out, size_t cap) {
    snprintf(out, cap, strchr(s->model_id, ':') ? "%s" : "%s:latest", s->model_id);
}

/* "1.5B", "134.52M": a parameter count as Ollama shows it. */
static void param_size(uint64_t n, char *out, size_t cap) {
    if (n >= 1000000000ull) snprintf(out, cap, "%.1fB", (double)n / 1e9);
    else if (n >= 1000000ull) snprintf(out, cap, "%.2fM", (double)n / 1e6);
    else snprintf(out, cap, "%.2fK", (double)n / 1e3);
}

static json_t *details(const char *arch, uint64_t n_params, const char *weight_type) {
    char ps[32];
    param_size(n_params, ps, sizeof ps);
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf", "family", arch,
                     "families", arch, "parameter_size", ps, "quantization_level", weight_type);
}

/* What is known of the served model's file: kiln_model_info_read of its path (zeroed when it
 * cannot be read), and the file's modification time. */
static void served_info(const srv *s, kiln_model_info *info, long long *modified) {
    memset(info, 0, sizeof *info);
    struct stat st;
    *modified = s->model_path && stat(s->model_path, &st) == 0 ? (long long)st.st_mtime : s->started;
    if (s->model_path && kiln_model_info_read(s->model_path, info) != KILN_OK) memset(info, 0, sizeof *info);
    if (!info->arch[0]) snprintf(info->arch, sizeof info->arch, "%s", kiln_model_arch(s->model));
    if (!info->n_params) info->n_params = kiln_model_n_params(s->model);
    if (!info->file_bytes) info->file_bytes = kiln_model_size_bytes(s->model);
}

/* The served model as an entry of /api/tags or /api/ps. */
static json_t *served_entry(const srv *s) {
    kiln_model_info info;
    long long modified;
    served_info(s, &info, &modified);
    char name[512];
    served_name(s, name, sizeof name);
    char digest[80];
    snprintf(digest, sizeof digest, "%s", kiln_model_fingerprint(s->model));
    return json_pack("{s:s, s:s, s:o, s:I, s:s, s:o}", "name", name, "model", name, "modified_at",
                     time_value(modified, 0), "size", (json_int_t)info.file_bytes, "digest", digest, "details",
                     details(info.arch, info.n_params, info.weight_type));
}

/* The other local models (a new array, empty without a list). */
static json_t *other_models(const srv *s) {
    json_t *a = s->cfg.list_models ? s->cfg.list_models(s->model_path) : NULL;
    return a ? a : json_array();
}

/* The request's keep_alive (absent or null: *given false); false after sending a 400 for a value
 * that is not one (pool.h: srv_pool_keep_alive_parse). The pool applies it to the model (its
 * owner read it from the body before this route ran). */
static bool check_keep_alive(srv_req *r, json_t *req, bool *given, int64_t *ms) {
    json_t *v = json_object_get(req, "keep_alive");
    *given = v && !json_is_null(v);
    *ms = SRV_POOL_KEEP_FOREVER;
    if (!*given || srv_pool_keep_alive_parse(v, ms)) return true;
    BAD(r, "keep_alive must be a duration (\"30s\", \"5m\", \"1h\"), a number of seconds, 0 (unload the model after "
           "the response) or negative (keep it loaded)");
    return false;
}

/* The request's "model" (or the older "name"): true when it is there. Which model serves it was
 * chosen before the route ran (pool.h: srv_pool_enter, which answers an unknown name with 404);
 * false after sending 400 (missing). */
static bool check_model(srv_req *r, json_t *req) {
    json_t *m = json_object_get(req, "model");
    if (!m || json_is_null(m)) m = json_object_get(req, "name");
    if (!json_is_string(m) || json_string_length(m) == 0) {
        BAD(r, "model is required (a string; GET /api/tags lists the models; this one is '%s')", r->server->model_id);
        return false;
    }
    return true;
}

/* ---- translating a request -------------------------------------------------------------------- */

/* options, format and stream of an Ollama request into the fields srv_generation_params reads
 * (into oai); num_predict and repeat_last_n are applied to j afterwards by apply_options. False
 * after sending a 400. */
static bool translate_options(srv_req *r, json_t *req, json_t *oai) {
    json_t *opt = json_object_get(req, "options");
    if (opt && !json_is_null(opt)) {
        if (!json_is_object(opt)) {
            BAD(r, "'options' must be an object (e.g. {\"temperature\": 0.7, \"num_predict\": 128})");
            return false;
        }
        static const char *const same[] = {
            "temperature",       "top_p",         "top_k", "min_p", "seed", "stop", "presence_penalty",
            "frequency_penalty", "repeat_penalty"};
        for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
            json_t *v = json_object_get(opt, same[i]);
            if (v) json_object_set(oai, same[i], v);
        }
    }
    json_t *fmt = json_object_get(req, "format");
    if (fmt && !json_is_null(fmt) && !(json_is_string(fmt) && json_string_length(fmt) == 0)) {
        json_t *rf = NULL;
        if (json_is_string(fmt) && strcmp(json_string_value(fmt), "json") == 0)
            rf = json_pack("{s:s}", "type", "json_object");
        else if (json_is_object(fmt))
            rf =
                json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name", "format", "schema", fmt);
        else {
            BAD(r, "'format' must be \"json\" or a JSON Schema object");
            return false;
        }
        if (!rf) return oom(r);
        json_object_set_new(oai, "response_format", rf);
    }
    return true;
}

/* An integer option: *out unchanged when absent or null; false after a 400. */
static bool int_option(srv_req *r, json_t *opt, const char *key, long long lo, long long hi, long long *out) {
    json_t *v = json_object_get(opt, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        BAD(r, "options.%s must be an integer between %lld and %lld", key, lo, hi);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

/* num_predict (-1 and -2: until the end of the turn or of the context) and repeat_last_n (-1: the
 * whole context) into j's generation parameters. */
static bool apply_options(srv_req *r, json_t *req, srv_job *j) {
    json_t *opt = json_object_get(req, "options");
    if (!json_is_object(opt)) return true;
    long long n = -3, last = -2;
    if (!int_option(r, opt, "num_predict", -2, 1 << 30, &n)) return false;
    if (n >= 0) j->gp.max_tokens = (int32_t)n;
    else if (n >= -2) j->gp.max_tokens = -1;
    const kiln_sampler_range *lr = kiln_sampler_param_range(KILN_SAMPLER_PENALTY_LAST_N);
    if (!int_option(r, opt, "repeat_last_n", -1, (long long)lr->max, &last)) return false;
    if (last == -1) last = r->server->n_ctx < lr->max ? r->server->n_ctx : (long long)lr->max;
    if (last >= 0) {
        if (last < lr->min) last = (long long)lr->min;
        j->gp.sampling.penalty_last_n = (int32_t)last;
    }
    return true;
}

/* Ollama's messages into OpenAI's (into oai.messages): content must be a string, images are
 * refused, "thinking" becomes reasoning_content, tool calls get ids (call_M_K) where they have
 * none, and a tool message without tool_call_id answers the oldest call not yet answered. False
 * after sending a 400. */
static bool translate_messages(srv_req *r, json_t *req, json_t *oai) {
    json_t *msgs = json_object_get(req, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        BAD(r, "'messages' must be a non-empty array of {\"role\", \"content\"}");
        return false;
    }
    json_t *out = json_array(), *pending = json_array();
    size_t next = 0; /* pending[next] is the oldest unanswered call */
    size_t i;
    json_t *m;
    bool ok = out && pending;
    json_array_foreach(msgs, i, m) {
        if (!ok) break;
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        json_t *images = json_object_get(m, "images");
        if (!json_is_object(m) || !json_is_string(role)) {
            BAD(r, "messages[%zu] must be an object with a string 'role'", i);
            ok = false;
            break;
        }
        if (content && !json_is_null(content) && !json_is_string(content)) {
            BAD(r, "messages[%zu].content must be a string", i);
            ok = false;
            break;
        }
        if (images && !json_is_null(images) && !(json_is_array(images) && json_array_size(images) == 0)) {
            BAD(r, "messages[%zu].images: images are not supported (kiln runs text models)", i);
            ok = false;
            break;
        }
        json_t *c = json_deep_copy(m);
        json_object_del(c, "images");
        json_t *thinking = json_object_get(c, "thinking");
        if (json_is_string(thinking)) json_object_set(c, "reasoning_content", thinking);
        json_object_del(c, "thinking");
        json_t *calls = json_object_get(c, "tool_calls");
        if (json_is_array(calls)) {
            size_t k;
            json_t *call;
            json_array_foreach(calls, k, call) {
                if (!json_is_object(call)) continue; /* srv_render_chat names the error */
                if (!json_is_string(json_object_get(call, "id"))) {
                    char id[48];
                    snprintf(id, sizeof id, "call_%zu_%zu", i, k);
                    json_object_set_new(call, "id", json_string(id));
                }
                if (!json_object_get(call, "type")) json_object_set_new(call, "type", json_string("function"));
                json_array_append(pending, json_object_get(call, "id"));
            }
        }
        if (strcmp(json_string_value(role), "tool") == 0 && !json_is_string(json_object_get(c, "tool_call_id"))) {
            json_t *id = json_array_get(pending, next);
            if (id) next++;
            json_object_set_new(c, "tool_call_id", id ? json_incref(id) : json_string("call_unanswered"));
        }
        json_array_append_new(out, c);
    }
    json_decref(pending);
    if (!ok) {
        json_decref(out);
        return false;
    }
    json_object_set_new(oai, "messages", out);
    return true;
}

/* think (true / false / "high" / "medium" / "low") into the template's enable_thinking. */
static bool translate_think(srv_req *r, json_t *req, json_t *oai) {
    json_t *t = json_object_get(req, "think");
    if (!t || json_is_null(t)) return true;
    bool on;
    if (json_is_boolean(t)) on = json_is_true(t);
    else if (json_is_string(t) && (!strcmp(json_string_value(t), "high") || !strcmp(json_string_value(t), "medium") ||
                                   !strcmp(json_string_value(t), "low")))
        on = true;
    else {
        BAD(r, "'think' must be true, false, \"high\", \"medium\" or \"low\"");
        return false;
    }
    json_object_set_new(oai, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    return true;
}

/* ---- output ----------------------------------------------------------------------------------- */

/* What a generation job needs to shape its output. Owned by the job (freed with it). */
typedef struct ollama_out {
    bool chat, stream;
    char model[512];          /* the name the request used */
    double t0;                /* when the request came (ns, monotonic), for total_duration */
    kiln_chat_parser *parser; /* chat with tools or a reasoning format, else NULL */
    bool parse_failed;        /* the parser refused input: the rest is not parsed */
    char *text;               /* non-streaming without a parser: the whole reply */
    size_t n_text, cap_text;
    bool oom;
} ollama_out;

static void out_free(void *p) {
    ollama_out *o = p;
    if (!o) return;
    kiln_chat_parser_free(o->parser);
    free(o->text);
    free(o);
}

/* {"model", "created_at"} with the body of the endpoint: message or response. */
static json_t *envelope(const ollama_out *o) {
    return json_pack("{s:s, s:o}", "model", o->model, "created_at", now_value());
}

/* Text as a JSON string; bytes that are not UTF-8 (which the library never hands out) escaped. */
static json_t *text_value(const char *s, size_t n) {
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    if (v) return v;
    char *buf = malloc(4 * n + 8);
    if (!buf) return json_string("");
    srv_text_sanitize(buf, 4 * n + 8, s, n, true);
    v = json_string(buf);
    free(buf);
    return v;
}

/* One piece of the reply: content (or, thinking, reasoning) for the chat's message or the
 * generation's response. */
static json_t *piece(const ollama_out *o, const char *s, size_t n, bool thinking) {
    json_t *e = envelope(o);
    json_t *t = text_value(s, n);
    if (o->chat) {
        json_t *msg = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        json_object_set_new(msg, thinking ? "thinking" : "content", t);
        json_object_set_new(e, "message", msg);
    } else {
        json_object_set_new(e, "response", thinking ? json_string("") : t);
        if (thinking) json_object_set_new(e, "thinking", t);
    }
    json_object_set_new(e, "done", json_false());
    return e;
}

/* Appends o as one line of the stream (lock held); o is stolen. */
static void emit(srv_job *j, json_t *o) {
    ollama_out *oo = j->user;
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s || !srv_job_append(j, s, strlen(s)) || !srv_job_append(j, "\n", 1)) oo->oom = true;
    free(s);
}

/* The parser's tool calls in Ollama's shape, their arguments as objects (NULL when none). */
static json_t *ollama_calls(json_t *openai_calls) {
    if (!json_is_array(openai_calls) || json_array_size(openai_calls) == 0) return NULL;
    json_t *a = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(openai_calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *args = json_object_get(fn, "arguments");
        json_t *obj = json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL)
                                           : json_incref(args);
        if (!json_is_object(obj)) {
            json_decref(obj);
            obj = json_object();
        }
        json_t *name = json_object_get(fn, "name");
        json_array_append_new(a, json_pack("{s:O?, s:{s:i, s:O?, s:o}}", "id", json_object_get(c, "id"), "function",
                                           "index", (int)i, "name", name, "arguments", obj));
    }
    return a;
}

/* The parser's message (content, reasoning_content, tool_calls), or NULL. */
static json_t *parser_message(const ollama_out *o) {
    char *mj = NULL;
    size_t n = 0;
    json_t *msg = NULL;
    if (kiln_chat_parser_message(o->parser, &mj, &n) == KILN_OK) msg = json_loadb(mj, n, 0, NULL);
    kiln_free(mj);
    return msg;
}

static const char *done_reason(kiln_stop_reason stop) {
    return stop == KILN_STOP_LENGTH || stop == KILN_STOP_CONTEXT ? "length" : "stop";
}

/* The counts and durations of the last object: nanoseconds, as Ollama gives them. */
static void add_stats(json_t *e, const ollama_out *o, const kiln_generate_result *res) {
    json_object_set_new(e, "done", json_true());
    json_object_set_new(e, "done_reason", json_string(done_reason(res->stop)));
    json_object_set_new(e, "total_duration", json_integer((json_int_t)(now_ns() - o->t0)));
    json_object_set_new(e, "load_duration", json_integer(0));
    json_object_set_new(e, "prompt_eval_count", json_integer(res->n_prompt));
    json_object_set_new(e, "prompt_eval_duration", json_integer((json_int_t)(res->prompt_ms * 1e6)));
    json_object_set_new(e, "eval_count", json_integer(res->n_generated));
    json_object_set_new(e, "eval_duration", json_integer((json_int_t)(res->gen_ms * 1e6)));
}

/* Feeds the parser (finish: ends its input); streaming, its content and reasoning go out as they
 * come (tool calls go out whole at the end). */
static void parse_text(srv_job *j, const char *text, size_t len, bool finish) {
    ollama_out *o = j->user;
    srv_chat_parser_step(j, o->parser, &o->parse_failed, text, len, finish);
    if (!o->stream) return;
    kiln_chat_delta d;
    while (kiln_chat_parser_next(o->parser, &d))
        if (d.kind != KILN_DELTA_TOOL_CALL && d.len) emit(j, piece(o, d.text, d.len, d.kind == KILN_DELTA_REASONING));
}

static void on_event(srv_job *j, const kiln_token_event *ev) {
    ollama_out *o = j->user;
    if (ev) {
        if (!ev->text_len) return;
        if (o->parser) parse_text(j, ev->text, ev->text_len, false);
        else if (o->stream) emit(j, piece(o, ev->text, ev->text_len, false));
        else if (!srv_text_append(&o->text, &o->n_text, &o->cap_text, ev->text, ev->text_len)) o->oom = true;
        return;
    }
    if (o->parser) parse_text(j, NULL, 0, true);
    if (!o->stream) return;
    if (j->status != KILN_OK) {
        const char *msg = j->status == KILN_ERR_CANCELLED ? "the generation was cancelled (server stopping)" : j->error;
        emit(j, json_pack("{s:s}", "error", msg));
        return;
    }
    if (o->parser && o->chat) { /* the calls, whole */
        json_t *msg = parser_message(o);
        json_t *calls = ollama_calls(json_object_get(msg, "tool_calls"));
        json_decref(msg);
        if (calls) {
            json_t *e = envelope(o);
            json_object_set_new(e, "message",
                                json_pack("{s:s, s:s, s:o}", "role", "assistant", "content", "", "tool_calls", calls));
            json_object_set_new(e, "done", json_false());
            emit(j, e);
        }
    }
    json_t *e = envelope(o);
    if (o->chat) json_object_set_new(e, "message", json_pack("{s:s, s:s}", "role", "assistant", "content", ""));
    else json_object_set_new(e, "response", json_string(""));
    add_stats(e, o, &j->result);
    emit(j, e);
}

/* The whole response once the job is done (not streaming). */
static void send_result(srv_req *r, srv_job *j) {
    ollama_out *o = j->user;
    if (j->status != KILN_OK || o->oom) {
        if (j->status == KILN_ERR_CANCELLED)
            srv_send_error(r, 503, "server_error", NULL, NULL, "the generation was cancelled: the server is stopping");
        else if (j->status == KILN_ERR_UNSUPPORTED && !o->oom)
            srv_send_error(r, 400, "invalid_request_error", NULL, NULL, "generation failed: %s", j->error);
        else
            srv_send_error(r, 500, "server_error", NULL, NULL, "generation failed: %s",
                           o->oom ? "out of memory" : j->error);
        return;
    }
    json_t *content, *thinking = NULL, *calls = NULL;
    if (o->parser) {
        json_t *msg = parser_message(o);
        if (!msg) {
            oom(r);
            return;
        }
        json_t *c = json_object_get(msg, "content");
        content = json_is_string(c) ? json_incref(c) : json_string("");
        thinking = json_incref(json_object_get(msg, "reasoning_content"));
        calls = ollama_calls(json_object_get(msg, "tool_calls"));
        json_decref(msg);
    } else {
        content = text_value(o->text, o->n_text);
    }
    json_t *e = envelope(o);
    if (o->chat) {
        json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
        if (thinking) json_object_set_new(m, "thinking", thinking);
        if (calls) json_object_set_new(m, "tool_calls", calls);
        json_object_set_new(e, "message", m);
    } else {
        json_object_set_new(e, "response", content);
        if (thinking) json_object_set_new(e, "thinking", thinking);
        json_decref(calls);
    }
    add_stats(e, o, &j->result);
    srv_send_json(r, 200, e);
}

/* Queues the job and answers: a stream at once, or the whole response when the job is done. */
static void run(srv_req *r, srv_job *j) {
    srv *s = r->server;
    ollama_out *o = j->user;
    if (atomic_load(&s->stopping)) {
        srv_send_error(r, 503, "server_error", NULL, NULL, "the server is shutting down");
        return;
    }
    kiln_status st = srv_job_submit(s, j);
    if (st == KILN_ERR_BUSY) {
        srv_send_error(r, 429, "requests", NULL, NULL,
                       "the server is busy: %d requests are already waiting; retry later", s->cfg.max_queue);
        return;
    }
    if (st) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "cannot start the generation: %s", kiln_last_error());
        return;
    }
    if (o->stream) srv_send_ndjson(r, j);
    else if (srv_wait_job(r, j)) send_result(r, j);
}

/* A job for /api/chat (chat) or /api/generate with its output state, the request's stream flag
 * (default true) and model name read; NULL after sending the error. */
static srv_job *new_job(srv_req *r, json_t *req, bool chat) {
    bool stream = true;
    if (!srv_get_bool(r, req, "stream", &stream)) return NULL;
    srv_job *j = srv_job_new();
    ollama_out *o = j ? calloc(1, sizeof *o) : NULL;
    if (!o) {
        srv_job_unref(j);
        oom(r);
        return NULL;
    }
    o->chat = chat;
    o->stream = stream;
    o->t0 = now_ns();
    json_t *m = json_object_get(req, "model");
    snprintf(o->model, sizeof o->model, "%s", json_is_string(m) ? json_string_value(m) : r->server->model_id);
    j->user = o;
    j->free_user = out_free;
    j->on_event = on_event;
    return j;
}

/* ---- the endpoints ---------------------------------------------------------------------------- */

/* {"model", "created_at", "message" (chat) or "response", "done": true, "done_reason": reason}. */
static json_t *done_body(bool chat, const char *model, const char *reason) {
    json_t *e = json_pack("{s:s, s:o}", "model", model, "created_at", now_value());
    if (!e) return NULL;
    if (chat) json_object_set_new(e, "message", json_pack("{s:s, s:s}", "role", "assistant", "content", ""));
    else json_object_set_new(e, "response", json_string(""));
    json_object_set_new(e, "done", json_true());
    json_object_set_new(e, "done_reason", json_string(reason));
    return e;
}

json_t *srv_ollama_unload_body(bool chat, const char *model) { return done_body(chat, model, "unload"); }

/* The answer to a request without messages (chat) or prompt (generate), which Ollama's clients send
 * to load a model: done at once, done_reason "load"; with keep_alive 0 it is Ollama's unload call,
 * done_reason "unload" (the pool unloads the model once this answer is sent). */
static void send_loaded(srv_req *r, json_t *req, bool chat, bool unload) {
    json_t *m = json_object_get(req, "model");
    srv_send_json(
        r, 200,
        done_body(chat, json_is_string(m) ? json_string_value(m) : r->server->model_id, unload ? "unload" : "load"));
}

static void api_chat(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    json_t *oai = json_object();
    srv_job *j = NULL;
    char *prompt = NULL;
    size_t len = 0;
    if (!oai) {
        oom(r);
        goto done;
    }
    bool ka_given;
    int64_t ka;
    if (!check_model(r, req) || !check_keep_alive(r, req, &ka_given, &ka)) goto done;
    json_t *given = json_object_get(req, "messages");
    if (!given || json_is_null(given) || (json_is_array(given) && json_array_size(given) == 0)) {
        send_loaded(r, req, true, ka_given && ka == 0); /* Ollama's way to load (or unload) a model */
        goto done;
    }
    if (!translate_options(r, req, oai) || !translate_messages(r, req, oai) || !translate_think(r, req, oai)) goto done;
    json_t *tools = json_object_get(req, "tools"), *choice = json_object_get(req, "tool_choice"),
           *parallel = json_object_get(req, "parallel_tool_calls");
    if (tools && !json_is_null(tools) && !(json_is_array(tools) && json_array_size(tools) == 0))
        json_object_set(oai, "tools", tools);
    if (choice) json_object_set(oai, "tool_choice", choice); /* kiln's extension: OpenAI's values */
    if (parallel) json_object_set(oai, "parallel_tool_calls", parallel);
    if (!(j = new_job(r, req, true))) goto done;
    ollama_out *o = j->user;
    srv_tools t;
    if (!srv_generation_params(r, oai, j) || !apply_options(r, req, j) || !srv_tools_parse(r, oai, &t)) goto done;
    if (!(prompt = srv_render_chat(r, oai, &len))) goto done;
    if (!(j->prompt = srv_tokenize_prompt(r, "messages", prompt, len, &j->n_prompt))) goto done;
    if (!srv_chat_parser_setup(r, j, &t, prompt, &o->parser)) goto done;
    run(r, j);
done:
    free(prompt);
    srv_job_unref(j);
    json_decref(oai);
    json_decref(req);
}

/* An optional string field: *out stays NULL when absent or null; false after a 400. */
static bool get_string(srv_req *r, json_t *req, const char *key, const char **out, size_t *len) {
    json_t *v = json_object_get(req, key);
    *out = NULL;
    *len = 0;
    if (!v || json_is_null(v)) return true;
    if (!json_is_string(v)) {
        BAD(r, "'%s' must be a string", key);
        return false;
    }
    *out = json_string_value(v);
    *len = json_string_length(v);
    return true;
}

static void api_generate(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    json_t *oai = json_object();
    srv_job *j = NULL;
    char *rendered = NULL;
    size_t len = 0, plen, slen, xlen;
    const char *prompt, *system, *suffix;
    bool raw = false, ka_given;
    int64_t ka;
    if (!oai) {
        oom(r);
        goto done;
    }
    if (!check_model(r, req) || !check_keep_alive(r, req, &ka_given, &ka) ||
        !get_string(r, req, "prompt", &prompt, &plen) || !get_string(r, req, "system", &system, &slen) ||
        !get_string(r, req, "suffix", &suffix, &xlen) || !srv_get_bool(r, req, "raw", &raw) ||
        !translate_options(r, req, oai) || !translate_think(r, req, oai))
        goto done;
    json_t *images = json_object_get(req, "images");
    if (images && !json_is_null(images) && !(json_is_array(images) && json_array_size(images) == 0)) {
        BAD(r, "'images' are not supported (kiln runs text models)");
        goto done;
    }
    if (xlen) {
        BAD(r, "'suffix' (fill in the middle) is not supported");
        goto done;
    }
    if (!(j = new_job(r, req, false))) goto done;
    ollama_out *o = j->user;
    if (!plen && (!system || (ka_given && ka == 0))) { /* Ollama's way to load (or unload) a model */
        send_loaded(r, req, false, ka_given && ka == 0);
        goto done;
    }
    if (!srv_generation_params(r, oai, j) || !apply_options(r, req, j)) goto done;
    const char *text;
    if (raw) { /* the prompt as it is */
        text = prompt ? prompt : "";
        len = plen;
    } else { /* the chat template (or its plain fallback) over the system and user messages */
        json_t *msgs = json_array();
        if (system) json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", "system", "content", system, slen));
        json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", "user", "content", prompt ? prompt : "", plen));
        json_object_set_new(oai, "messages", msgs);
        if (!(rendered = srv_render_chat(r, oai, &len))) goto done;
        text = rendered;
    }
    if (!(j->prompt = srv_tokenize_prompt(r, "prompt", text, len, &j->n_prompt))) goto done;
    if (!raw) { /* reasoning is read from the reply where the template's format writes it */
        srv_tools t = {.choice = SRV_TOOL_AUTO, .reasoning = KILN_REASONING_AUTO};
        if (!srv_tools_parse(r, oai, &t) || !srv_chat_parser_setup(r, j, &t, text, &o->parser)) goto done;
    }
    run(r, j);
done:
    free(rendered);
    srv_job_unref(j);
    json_decref(oai);
    json_decref(req);
}

static void api_tags(srv_req *r) {
    json_t *models = json_array();
    json_array_append_new(models, served_entry(r->server));
    json_t *others = other_models(r->server);
    size_t i;
    json_t *m;
    json_array_foreach(others, i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *arch = json_string_value(json_object_get(m, "arch"));
        const char *wt = json_string_value(json_object_get(m, "weight_type"));
        if (!name) continue;
        json_array_append_new(
            models, json_pack("{s:s, s:s, s:o, s:O?, s:s, s:o}", "name", name, "model", name, "modified_at",
                              time_value(json_integer_value(json_object_get(m, "modified")), 0), "size",
                              json_object_get(m, "size"), "digest", "", "details",
                              details(arch ? arch : "", (uint64_t)json_integer_value(json_object_get(m, "n_params")),
                                      wt ? wt : "")));
    }
    json_decref(others);
    srv_send_json(r, 200, json_pack("{s:o}", "models", models));
}

/* When the pool's model id is unloaded if it stays idle (its keep_alive), as Ollama writes times;
 * a model kept for ever (the default) shows 2100-01-01. */
static json_t *expires_value(const char *id) {
    const srv_pool_table *t = srv_pool_table_get();
    double at = 0;
    for (uint32_t i = 0; t && i < t->n && i < SRV_POOL_MAX; i++) {
        srv_pool_entry pe = t->e[i]; /* a copy: the pool's owner may be writing */
        pe.id[sizeof pe.id - 1] = 0;
        if (strcmp(pe.id, id) == 0) {
            at = srv_pool_expires_unix(&pe);
            break;
        }
    }
    if (at <= 0) return time_value(4102444800LL, 0);
    const long long sec = (long long)at;
    return time_value(sec, (long)((at - (double)sec) * 1e9));
}

static void api_ps(srv_req *r) {
    json_t *e = served_entry(r->server);
    if (e) {
        json_object_del(e, "modified_at");
        json_object_set_new(e, "expires_at", expires_value(r->server->model_id));
        json_object_set_new(e, "size_vram", json_integer(0));
        json_object_set_new(e, "context_length", json_integer(r->server->n_ctx));
    }
    json_t *a = json_array();
    if (e) json_array_append_new(a, e);
    const srv_pool_table *t = srv_pool_table_get();
    for (uint32_t i = 0; t && a && i < t->n && i < SRV_POOL_MAX; i++) { /* the pool's other loaded models */
        srv_pool_entry pe = t->e[i];
        pe.id[sizeof pe.id - 1] = 0;
        if (pe.state != SRV_POOL_READY || strcmp(pe.id, r->server->model_id) == 0) continue;
        char name[256];
        snprintf(name, sizeof name, strchr(pe.id, ':') ? "%s" : "%s:latest", pe.id);
        json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:s, s:o, s:i, s:o}", "name", name, "model", name, "size",
                                           (json_int_t)pe.bytes, "digest", "", "expires_at", expires_value(pe.id),
                                           "size_vram", 0, "details", details("", 0, "")));
    }
    srv_send_json(r, 200, json_pack("{s:o}", "models", a));
}

static void api_show(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    if (check_model(r, req)) {
        const srv *s = r->server;
        kiln_model_info info;
        long long modified;
        served_info(s, &info, &modified);
        const char *tmpl = s->cfg.chat_template ? s->cfg.chat_template : kiln_model_chat_template(s->model);
        json_t *caps = json_pack("[s]", kiln_model_can_generate(s->model) ? "completion" : "embedding");
        if (tmpl && strstr(tmpl, "tools")) json_array_append_new(caps, json_string("tools"));
        if (tmpl && strstr(tmpl, "think")) json_array_append_new(caps, json_string("thinking"));
        char ctx_key[64];
        snprintf(ctx_key, sizeof ctx_key, "%s.context_length", info.arch);
        json_t *mi = json_pack("{s:s, s:I}", "general.architecture", info.arch, "general.parameter_count",
                               (json_int_t)info.n_params);
        if (mi) json_object_set_new(mi, ctx_key, json_integer(kiln_model_n_ctx_train(s->model)));
        srv_send_json(r, 200,
                      json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "license", "", "modelfile", "",
                                "parameters", "", "template", tmpl ? tmpl : "", "system", "", "details",
                                details(info.arch, info.n_params, info.weight_type), "model_info", mi, "capabilities",
                                caps, "modified_at", time_value(modified, 0)));
    }
    json_decref(req);
}

static void api_version(srv_req *r) { srv_send_json(r, 200, json_pack("{s:s}", "version", OLLAMA_VERSION)); }

/* POST /api/embed: {model, input (a string or an array of strings), truncate (default true, as
 * Ollama's), dimensions} -> {model, embeddings: [[...]], total_duration, load_duration,
 * prompt_eval_count}, unit-length vectors. POST /api/embeddings (Ollama's older route):
 * {model, prompt} -> {embedding: [...]}, not normalized, as Ollama answers it. */
/* Milliseconds on the monotonic clock. */
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void api_embed(srv_req *r) {
    json_t *req = srv_parse_body(r);
    if (!req) return;
    const bool legacy = strcmp(r->url, "/api/embeddings") == 0;
    const double t0 = now_ms();
    srv_embed_inputs in = {0};
    float *out = NULL;
    kiln_embed_params p = kiln_embed_default_params();
    p.truncate = true;
    p.normalize = !legacy;
    bool ka_given;
    int64_t ka;
    if (!check_model(r, req) || !check_keep_alive(r, req, &ka_given, &ka)) goto done;
    if (!srv_get_bool(r, req, "truncate", &p.truncate)) goto done;
    json_t *dims = json_object_get(req, "dimensions");
    if (dims && !json_is_null(dims)) {
        const long long d = json_integer_value(dims);
        if (!json_is_integer(dims) || d < 1 || d > kiln_model_n_embd(r->server->model)) {
            BAD(r, "dimensions must be an integer from 1 to %d (the model's embedding width)",
                kiln_model_n_embd(r->server->model));
            goto done;
        }
        p.dimensions = (int32_t)d;
    }
    const char *param = legacy ? "prompt" : "input";
    json_t *input = json_object_get(req, param);
    if (!legacy && json_is_array(input) && json_array_size(input) == 0) { /* Ollama: loads the model, no vectors */
        srv_send_json(r, 200,
                      json_pack("{s:s, s:[], s:i, s:i, s:i}", "model", r->server->model_id, "embeddings",
                                "total_duration", 0, "load_duration", 0, "prompt_eval_count", 0));
        goto done;
    }
    if (legacy && !json_is_string(input)) {
        BAD(r, "prompt must be a string");
        goto done;
    }
    if (!srv_embed_inputs_read(r, input, param, &in)) goto done;
    kiln_embed_result res;
    if (!(out = srv_embed_run(r, param, &in, &p, &res))) goto done;
    if (legacy) {
        srv_send_json(r, 200, json_pack("{s:o}", "embedding", srv_embed_vector(out, (size_t)res.dim, false)));
        goto done;
    }
    json_t *embs = json_array();
    for (size_t i = 0; embs && i < in.n; i++)
        json_array_append_new(embs, srv_embed_vector(out + i * (size_t)res.dim, (size_t)res.dim, false));
    srv_send_json(r, 200,
                  json_pack("{s:s, s:o, s:I, s:i, s:I}", "model", r->server->model_id, "embeddings", embs,
                            "total_duration", (json_int_t)((now_ms() - t0) * 1e6), "load_duration", 0,
                            "prompt_eval_count", (json_int_t)res.n_tokens));
done:
    free(out);
    srv_embed_inputs_free(&in);
    json_decref(req);
}

typedef struct route {
    const char *method;
    const char *path;
    void (*fn)(srv_req *r);
} route;

static const route routes[] = {
    {"POST", "/api/chat", api_chat},   {"POST", "/api/generate", api_generate}, {"GET", "/api/tags", api_tags},
    {"GET", "/api/ps", api_ps},        {"POST", "/api/show", api_show},         {"GET", "/api/version", api_version},
    {"POST", "/api/embed", api_embed}, {"POST", "/api/embeddings", api_embed},
};

bool srv_ollama_route(srv_req *r) {
    if (strncmp(r->url, "/api/", 5) != 0) return false;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(r->url, routes[i].path) != 0) continue;
        path_known = true;
        if (strcmp(r->method, routes[i].method) == 0 ||
            (strcmp(r->method, "HEAD") == 0 && routes[i].method[0] == 'G')) {
            routes[i].fn(r);
            return true;
        }
    }
    if (path_known)
        srv_send_error(r, 405, "invalid_request_error", NULL, NULL, "%s is not allowed on %s", r->method, r->url);
    else
        srv_send_error(
            r, 404, "invalid_request_error", NULL, NULL,
            "%s %s is not part of kiln's Ollama API (chat, generate, embed, embeddings, tags, show, ps, version)",
            r->method, r->url);
    return true;
}
