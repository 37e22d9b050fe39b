/*
 * responses.c - OpenAI's Responses API: POST /v1/responses, GET and DELETE /v1/responses/{id}.
 *
 * A request is validated and translated into the chat request the chat route reads, which then goes
 * through the same code (srv_generation_params, srv_tools_parse, srv_render_chat, the chat parser
 * and the grammar of a required call, a job on the shared engine and its prefix cache):
 *   instructions -> a system message first; input (a string, or items: messages with text parts,
 *   developer messages as system messages,
 *   function_call, function_call_output; reasoning items are skipped) -> messages; tools (function
 *   tools, flat: name, description, parameters, strict) and tool_choice -> the chat's tools and
 *   tool_choice; max_output_tokens -> max_tokens; text.format (text, json_object, json_schema) ->
 *   response_format, enforced by the constrained decoder; reasoning.effort "none" -> the template's
 *   enable_thinking false (any other effort: true); temperature, top_p, parallel_tool_calls as they
 *   are. previous_response_id continues a stored response: its conversation (input and output, not
 *   its instructions) comes before the new input.
 * The response lists output items: reasoning (reasoning_text), a message (output_text) and each
 * function_call, with status completed, or incomplete with incomplete_details.reason
 * max_output_tokens when the generation was cut. Usage counts the prompt tokens the prefix cache
 * supplied as input_tokens_details.cached_tokens. A stream sends the typed events with
 * sequence_number: response.created, response.in_progress, per item response.output_item.added,
 * response.content_part.added, response.output_text.delta / response.reasoning_text.delta /
 * response.function_call_arguments.delta, their .done events, response.output_item.done, and
 * response.completed (or response.incomplete, or response.failed).
 * Responses are stored (store, default true) in memory, at most STORE_MAX of them and STORE_BYTES in
 * all, the oldest dropped first; GET returns one, DELETE drops it. With the SSD tier on (--ssd-cache
 * DIR) they are also written through to DIR/responses.sqlite under the same limits (responses_db.c),
 * which GET and previous_response_id read when memory misses, so they outlive a restart.
 */
#include "responses_db.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BAD(r, param, ...) srv_send_error(r, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

#define STORE_MAX   512        /* stored responses at most */
#define STORE_BYTES (64 << 20) /* bytes of stored JSON at most */

static bool oom(srv_req *r) {
    srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

static bool present(const json_t *v) { return v && !json_is_null(v); }

/* ---- the store ---------------------------------------------------------------------------------- */

/* One stored response: its JSON and the conversation it ends (chat messages), both serialized. */
typedef struct stored {
    char id[48];
    char *response;
    char *messages;
    size_t bytes;
} stored;

static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
static stored store[STORE_MAX]; /* oldest first */
static size_t n_store, store_bytes;

static void drop_at(size_t i) {
    store_bytes -= store[i].bytes;
    free(store[i].response);
    free(store[i].messages);
    memmove(store + i, store + i + 1, (n_store - i - 1) * sizeof *store);
    n_store--;
}

/* Keeps a response (taking the two strings), on disk too when the database is open; the oldest ones
 * leave to make room. */
static void store_put(const char *id, long created, char *response, char *messages) {
    const size_t bytes = strlen(response) + strlen(messages);
    if (bytes <= STORE_BYTES) srv_rdb_put(id, created, response, messages);
    if (bytes > STORE_BYTES) {
        free(response);
        free(messages);
        return;
    }
    pthread_mutex_lock(&store_mu);
    while (n_store && (n_store == STORE_MAX || store_bytes + bytes > STORE_BYTES)) drop_at(0);
    stored *s = &store[n_store++];
    snprintf(s->id, sizeof s->id, "%s", id);
    s->response = response;
    s->messages = messages;
    s->bytes = bytes;
    store_bytes += bytes;
    pthread_mutex_unlock(&store_mu);
}

/* A copy of what is stored under id (which: 0 the response, 1 the messages), parsed, from memory or
 * else the database; NULL when none is. */
static json_t *store_get(const char *id, int which) {
    json_t *v = NULL;
    pthread_mutex_lock(&store_mu);
    for (size_t i = 0; i < n_store; i++)
        if (strcmp(store[i].id, id) == 0) {
            v = json_loads(which ? store[i].messages : store[i].response, 0, NULL);
            break;
        }
    pthread_mutex_unlock(&store_mu);
    if (!v) {
        char *text = srv_rdb_get(id, which);
        if (text) v = json_loads(text, 0, NULL);
        free(text);
    }
    return v;
}

/* Drops id from memory and the database; true when either had it. */
static bool store_delete(const char *id) {
    bool found = false;
    pthread_mutex_lock(&store_mu);
    for (size_t i = 0; i < n_store && !found; i++)
        if (strcmp(store[i].id, id) == 0) {
            drop_at(i);
            found = true;
        }
    pthread_mutex_unlock(&store_mu);
    return srv_rdb_delete(id) || found;
}

/* ---- the request: its fields into a chat request ------------------------------------------------ */

/* The text of content that is a string or an array of text parts (input_text, output_text, text),
 * joined with "\n"; NULL after sending 400 naming param. */
static json_t *parts_text(srv_req *r, json_t *c, const char *param) {
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        BAD(r, param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        oom(r);
        return NULL;
    }
    bool ok = true;
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        if (!type || (strcmp(type, "input_text") != 0 && strcmp(type, "output_text") != 0 &&
                      strcmp(type, "text") != 0 && strcmp(type, "refusal") != 0)) {
            BAD(r, param, "%s[%zu]: only text parts are supported (input_text, output_text)%s%s%s", param, i,
                type ? ", got '" : "", type ? type : "", type ? "'" : "");
            ok = false;
            break;
        }
        if (strcmp(type, "refusal") == 0) text = json_object_get(p, "refusal");
        if (!json_is_string(text)) {
            BAD(r, param, "%s[%zu].text must be a string", param, i);
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

/* Appends the chat messages of input (a string or an array of items) to out. */
static bool translate_input(srv_req *r, json_t *input, json_t *out) {
    if (json_is_string(input))
        return json_array_append_new(out, json_pack("{s:s, s:O}", "role", "user", "content", input)) == 0 || oom(r);
    if (!json_is_array(input)) {
        BAD(r, "input", "'input' must be a string or an array of items");
        return false;
    }
    char param[64];
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        snprintf(param, sizeof param, "input[%zu]", i);
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!json_is_object(it)) {
            BAD(r, param, "%s must be an object", param);
            return false;
        }
        if ((!type && role) || (type && strcmp(type, "message") == 0)) {
            if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0 && strcmp(role, "system") != 0 &&
                          strcmp(role, "developer") != 0)) {
                BAD(r, param, "%s.role must be user, assistant, system or developer", param);
                return false;
            }
            char cparam[80];
            snprintf(cparam, sizeof cparam, "%s.content", param);
            json_t *text = parts_text(r, json_object_get(it, "content"), cparam);
            if (!text) return false;
            /* developer messages are system messages to the templates (most know no other role) */
            if (strcmp(role, "developer") == 0) role = "system";
            if (json_array_append_new(out, json_pack("{s:s, s:o}", "role", role, "content", text))) return oom(r);
        } else if (type && strcmp(type, "function_call") == 0) {
            json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
            json_t *args = json_object_get(it, "arguments");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args)) {
                BAD(r, param, "%s: a function_call needs call_id, name and arguments (strings)", param);
                return false;
            }
            json_t *last = json_array_get(out, json_array_size(out) - 1);
            const char *lrole = json_string_value(json_object_get(last, "role"));
            if (!lrole || strcmp(lrole, "assistant") != 0) {
                last = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
                if (!last || json_array_append_new(out, last)) return oom(r);
            }
            json_t *calls = json_object_get(last, "tool_calls");
            if (!calls) json_object_set_new(last, "tool_calls", calls = json_array());
            /* arguments as the object templates expect, when they parse as one */
            json_t *obj = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            json_t *a = json_is_object(obj) ? obj : json_incref(args);
            if (!json_is_object(obj)) json_decref(obj);
            if (json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", a)))
                return oom(r);
        } else if (type && strcmp(type, "function_call_output") == 0) {
            json_t *id = json_object_get(it, "call_id");
            char oparam[80];
            snprintf(oparam, sizeof oparam, "%s.output", param);
            if (!json_is_string(id) || json_string_length(id) == 0) {
                BAD(r, param, "%s: a function_call_output needs the call_id of its call", param);
                return false;
            }
            json_t *text = parts_text(r, json_object_get(it, "output"), oparam);
            if (!text) return false;
            if (json_array_append_new(
                    out, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", text)))
                return oom(r);
        } else if (type && strcmp(type, "reasoning") == 0) {
            /* earlier thinking: not given back to the model */
        } else {
            BAD(r, param, "%s: items of type '%s' are not supported (message, function_call, function_call_output)",
                param, type ? type : "(none)");
            return false;
        }
    }
    return true;
}

/* tools, tool_choice, parallel_tool_calls into chat. */
static bool translate_tools(srv_req *r, json_t *req, json_t *chat) {
    json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice");
    json_t *ptc = json_object_get(req, "parallel_tool_calls");
    if (present(tools)) {
        if (!json_is_array(tools)) {
            BAD(r, "tools", "'tools' must be an array of function tools");
            return false;
        }
        json_t *fns = json_array();
        json_object_set_new(chat, "tools", fns);
        char param[64];
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            snprintf(param, sizeof param, "tools[%zu]", i);
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!json_is_object(t) || !type || strcmp(type, "function") != 0) {
                BAD(r, param, "%s: only function tools are supported (got %s%s%s)", param, type ? "'" : "",
                    type ? type : "no type", type ? "'" : "");
                return false;
            }
            json_t *fn = json_deep_copy(t);
            json_object_del(fn, "type");
            if (!fn || json_array_append_new(fns, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
                return oom(r);
        }
    }
    if (present(ptc)) json_object_set(chat, "parallel_tool_calls", ptc);
    if (!present(tc)) return true;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc);
        return true;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name");
    if (!type || strcmp(type, "function") != 0 || !json_is_string(name)) {
        BAD(r, "tool_choice",
            "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
            "\"name\": ...}");
        return false;
    }
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    return true;
}

/* The sampling fields, text.format and reasoning into chat. */
static bool translate_generation(srv_req *r, json_t *req, json_t *chat) {
    static const char *const same[] = {"temperature", "top_p", "top_k", "seed", "stop"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(req, same[i]);
        if (present(v)) json_object_set(chat, same[i], v);
    }
    json_t *mt = json_object_get(req, "max_output_tokens");
    if (present(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
            BAD(r, "max_output_tokens", "'max_output_tokens' must be a positive integer");
            return false;
        }
        json_object_set(chat, "max_tokens", mt);
    }
    json_t *text = json_object_get(req, "text");
    if (present(text)) {
        json_t *fmt = json_object_get(text, "format");
        const char *type = json_string_value(json_object_get(fmt, "type"));
        if (!json_is_object(text) || (present(fmt) && !type)) {
            BAD(r, "text.format", "'text.format' must be an object with a type of text, json_object or json_schema");
            return false;
        }
        if (type && strcmp(type, "json_schema") == 0) {
            json_t *js = json_object();
            json_t *name = json_object_get(fmt, "name"), *schema = json_object_get(fmt, "schema");
            json_t *strict = json_object_get(fmt, "strict");
            if (present(name)) json_object_set(js, "name", name);
            if (schema) json_object_set(js, "schema", schema);
            if (present(strict)) json_object_set(js, "strict", strict);
            json_object_set_new(chat, "response_format",
                                json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
        } else if (type) {
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", type));
        }
    }
    json_t *rs = json_object_get(req, "reasoning");
    if (present(rs)) {
        json_t *effort = json_object_get(rs, "effort");
        if (!json_is_object(rs) || (present(effort) && !json_is_string(effort))) {
            BAD(r, "reasoning", "'reasoning' must be an object {effort, summary}");
            return false;
        }
        if (json_is_string(effort))
            json_object_set_new(json_object_get(chat, "chat_template_kwargs"), "enable_thinking",
                                json_boolean(strcmp(json_string_value(effort), "none") != 0));
    }
    return true;
}

/* The chat request of a Responses request; *history receives the conversation without the
 * instructions (what a later request continues). NULL after sending the error. */
static json_t *translate(srv_req *r, json_t *req, json_t **history) {
    json_t *instr = json_object_get(req, "instructions"), *input = json_object_get(req, "input");
    json_t *prev = json_object_get(req, "previous_response_id"), *bg = json_object_get(req, "background");
    *history = NULL;
    if (present(instr) && !json_is_string(instr)) {
        BAD(r, "instructions", "'instructions' must be a string");
        return NULL;
    }
    if (!present(input)) {
        BAD(r, "input", "'input' is required");
        return NULL;
    }
    if (json_is_true(bg)) {
        BAD(r, "background", "background responses are not supported");
        return NULL;
    }
    json_t *msgs = NULL;
    if (present(prev)) {
        if (!json_is_string(prev)) {
            BAD(r, "previous_response_id", "'previous_response_id' must be a string");
            return NULL;
        }
        if (!(msgs = store_get(json_string_value(prev), 1))) {
            srv_send_error(r, 400, "invalid_request_error", "previous_response_id", "previous_response_not_found",
                           "Previous response with id '%s' not found.", json_string_value(prev));
            return NULL;
        }
    } else msgs = json_array();
    json_t *chat = json_pack("{s:{}}", "chat_template_kwargs");
    if (!chat || !msgs) {
        json_decref(chat);
        json_decref(msgs);
        oom(r);
        return NULL;
    }
    if (!translate_input(r, input, msgs) || !translate_tools(r, req, chat) || !translate_generation(r, req, chat)) {
        json_decref(chat);
        json_decref(msgs);
        return NULL;
    }
    json_t *all = json_is_string(instr) ? json_pack("[{s:s, s:O}]", "role", "system", "content", instr) : json_array();
    json_array_extend(all, msgs);
    json_object_set_new(chat, "messages", all);
    *history = json_deep_copy(msgs); /* owned by the job: the engine's thread reads it */
    json_decref(msgs);
    if (!*history) {
        json_decref(chat);
        oom(r);
        return NULL;
    }
    return chat;
}

/* ---- output ------------------------------------------------------------------------------------- */

typedef enum item_kind { ITEM_REASONING, ITEM_MESSAGE, ITEM_CALL } item_kind;

/* What a /v1/responses job needs to shape its output. Owned by the job (freed with it). */
typedef struct resp_out {
    bool stream;
    bool store;
    char id[48];
    long created;
    json_t *resp;    /* the response object (output filled in as items finish) */
    json_t *history; /* the conversation before this reply */
    kiln_chat_parser *parser;
    bool parse_failed;
    bool oom;
    int seq;      /* streaming: the next sequence_number */
    int open;     /* the kind of the item still open, or -1 */
    int32_t call; /* the open function_call's call index */
    json_t *item; /* the open item */
    char *buf;    /* its text (message, reasoning) or arguments (call) so far */
    size_t n_buf, cap_buf;
} resp_out;

static void resp_out_free(void *p) {
    resp_out *g = p;
    if (!g) return;
    json_decref(g->resp);
    json_decref(g->history);
    json_decref(g->item);
    kiln_chat_parser_free(g->parser);
    free(g->buf);
    free(g);
}

/* Appends one typed event (lock held; streaming only); steals ev, adds its type and sequence_number. */
static void emit(srv_job *j, const char *type, json_t *ev) {
    resp_out *g = j->user;
    if (!g->stream) {
        json_decref(ev);
        return;
    }
    if (ev) {
        json_object_set_new(ev, "type", json_string(type));
        json_object_set_new(ev, "sequence_number", json_integer(g->seq++));
    }
    char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    json_decref(ev);
    if (!s || !srv_job_append(j, "event: ", 7) || !srv_job_append(j, type, strlen(type)) ||
        !srv_job_append(j, "\ndata: ", 7) || !srv_job_append(j, s, strlen(s)) || !srv_job_append(j, "\n\n", 2))
        g->oom = true;
    free(s);
}

static bool buf_add(resp_out *g, const char *s, size_t n) {
    if (g->n_buf + n + 1 > g->cap_buf) {
        size_t cap = g->cap_buf ? g->cap_buf * 2 : 1024;
        while (cap < g->n_buf + n + 1) cap *= 2;
        char *b = realloc(g->buf, cap);
        if (!b) {
            g->oom = true;
            return false;
        }
        g->buf = b;
        g->cap_buf = cap;
    }
    memcpy(g->buf + g->n_buf, s, n);
    g->n_buf += n;
    g->buf[g->n_buf] = 0;
    return true;
}

static json_t *text_part(item_kind k, const char *text, size_t n) {
    return k == ITEM_REASONING ? json_pack("{s:s, s:s%}", "type", "reasoning_text", "text", text, n)
                               : json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text, n,
                                           "annotations", "logprobs");
}

/* The output index of the open item (the items before it are in the response's output). */
static int open_index(const resp_out *g) { return (int)json_array_size(json_object_get(g->resp, "output")); }

/* Finishes the open item: its .done events, and it joins the response's output. */
static void close_item(srv_job *j) {
    resp_out *g = j->user;
    if (g->open < 0) return;
    json_t *output = json_object_get(g->resp, "output");
    const int idx = (int)json_array_size(output);
    const char *item_id = json_string_value(json_object_get(g->item, "id"));
    const char *text = g->buf ? g->buf : "";
    if (g->open == ITEM_CALL) {
        json_object_set_new(g->item, "arguments", json_stringn(text, g->n_buf));
        emit(j, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:s%}", "item_id", item_id, "output_index", idx, "arguments", text, g->n_buf));
    } else {
        emit(j, g->open == ITEM_REASONING ? "response.reasoning_text.done" : "response.output_text.done",
             json_pack("{s:s, s:i, s:i, s:s%}", "item_id", item_id, "output_index", idx, "content_index", 0, "text",
                       text, g->n_buf));
        emit(j, "response.content_part.done",
             json_pack("{s:s, s:i, s:i, s:o}", "item_id", item_id, "output_index", idx, "content_index", 0, "part",
                       text_part(g->open, text, g->n_buf)));
        json_array_append_new(json_object_get(g->item, "content"), text_part(g->open, text, g->n_buf));
    }
    if (g->open != ITEM_REASONING) json_object_set_new(g->item, "status", json_string("completed"));
    emit(j, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", idx, "item", g->item));
    json_array_append_new(output, g->item);
    g->item = NULL;
    g->open = -1;
    g->n_buf = 0;
}

/* Opens an item (closing the open one): item is its empty start, stolen. */
static void open_item(srv_job *j, item_kind k, json_t *item) {
    resp_out *g = j->user;
    close_item(j);
    const int idx = (int)json_array_size(json_object_get(g->resp, "output"));
    g->item = item;
    g->open = k;
    emit(j, "response.output_item.added", json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    if (k != ITEM_CALL)
        emit(j, "response.content_part.added",
             json_pack("{s:s, s:i, s:i, s:o}", "item_id", json_string_value(json_object_get(item, "id")),
                       "output_index", idx, "content_index", 0, "part", text_part(k, "", 0)));
}

/* One piece of the reply into the open item (a new one when its kind changes). */
static void add_delta(srv_job *j, const kiln_chat_delta *d) {
    resp_out *g = j->user;
    char id[48];
    if (d->kind == KILN_DELTA_TOOL_CALL) {
        if (d->name) {
            srv_make_id(id, sizeof id, "fc_");
            open_item(j, ITEM_CALL,
                      json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "function_call", "status",
                                "in_progress", "call_id", d->id ? d->id : id, "name", d->name, "arguments", ""));
            g->call = d->index;
        } else if (g->open != ITEM_CALL || g->call != d->index) {
            return;
        }
        if (!d->len || !buf_add(g, d->text, d->len)) return;
        emit(j, "response.function_call_arguments.delta",
             json_pack("{s:s, s:i, s:s%}", "item_id", json_string_value(json_object_get(g->item, "id")), "output_index",
                       open_index(g), "delta", d->text, d->len));
        return;
    }
    if (!d->len) return;
    const item_kind k = d->kind == KILN_DELTA_REASONING ? ITEM_REASONING : ITEM_MESSAGE;
    if (g->open != (int)k) {
        srv_make_id(id, sizeof id, k == ITEM_REASONING ? "rs_" : "msg_");
        open_item(j, k,
                  k == ITEM_REASONING
                      ? json_pack("{s:s, s:s, s:[], s:[]}", "id", id, "type", "reasoning", "summary", "content")
                      : json_pack("{s:s, s:s, s:s, s:s, s:[]}", "id", id, "type", "message", "status", "in_progress",
                                  "role", "assistant", "content"));
    }
    if (!buf_add(g, d->text, d->len)) return;
    const int idx = open_index(g);
    emit(j, k == ITEM_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta",
         k == ITEM_REASONING
             ? json_pack("{s:s, s:i, s:i, s:s%}", "item_id", json_string_value(json_object_get(g->item, "id")),
                         "output_index", idx, "content_index", 0, "delta", d->text, d->len)
             : json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", json_string_value(json_object_get(g->item, "id")),
                         "output_index", idx, "content_index", 0, "delta", d->text, d->len, "logprobs"));
}

static void parse_text(srv_job *j, const char *text, size_t len, bool finish) {
    resp_out *g = j->user;
    srv_chat_parser_step(j, g->parser, &g->parse_failed, text, len, finish);
    kiln_chat_delta d;
    while (kiln_chat_parser_next(g->parser, &d)) add_delta(j, &d);
}

/* The assistant message of the finished output (for the stored conversation). */
static json_t *assistant_message(const resp_out *g) {
    json_t *msg = json_pack("{s:s, s:s}", "role", "assistant", "content", ""), *calls = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(g->resp, "output"), i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        json_t *part = json_array_get(json_object_get(it, "content"), 0);
        if (strcmp(type, "message") == 0) json_object_set(msg, "content", json_object_get(part, "text"));
        else if (strcmp(type, "reasoning") == 0)
            json_object_set(msg, "reasoning_content", json_object_get(part, "text"));
        else {
            json_t *args = json_object_get(it, "arguments");
            json_t *obj = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            if (!json_is_object(obj)) {
                json_decref(obj);
                obj = json_incref(args);
            }
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", json_object_get(it, "call_id"),
                                                   "type", "function", "function", "name", json_object_get(it, "name"),
                                                   "arguments", obj));
        }
    }
    if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
    json_decref(calls);
    return msg;
}

/* Completes the response object once the job is done: status, usage; stores it when asked. */
static void finish(srv_job *j) {
    resp_out *g = j->user;
    const kiln_generate_result *res = &j->result;
    json_t *o = g->resp;
    const bool cut = res->stop == KILN_STOP_LENGTH || res->stop == KILN_STOP_CONTEXT;
    json_object_set_new(o, "status", json_string(cut ? "incomplete" : "completed"));
    json_object_set_new(o, "incomplete_details", cut ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
    json_object_set_new(o, "usage",
                        json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", res->n_prompt,
                                  "input_tokens_details", "cached_tokens", res->n_cached, "output_tokens",
                                  res->n_generated, "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                                  res->n_prompt + res->n_generated));
    json_object_set_new(o, "completed_at", cut ? json_null() : json_integer((json_int_t)time(NULL)));
    if (!g->store) return;
    json_t *conv = json_copy(g->history);
    json_array_append_new(conv, assistant_message(g));
    char *rs = json_dumps(o, JSON_COMPACT), *ms = json_dumps(conv, JSON_COMPACT);
    json_decref(conv);
    if (rs && ms) store_put(g->id, g->created, rs, ms);
    else {
        free(rs);
        free(ms);
    }
}

static void on_event(srv_job *j, const kiln_token_event *ev) {
    resp_out *g = j->user;
    if (ev) {
        if (!ev->text_len) return;
        if (g->parser) parse_text(j, ev->text, ev->text_len, false);
        else {
            const kiln_chat_delta d = {.kind = KILN_DELTA_CONTENT, .text = ev->text, .len = ev->text_len};
            add_delta(j, &d);
        }
        return;
    }
    if (g->parser) parse_text(j, NULL, 0, true);
    close_item(j);
    if (j->status == KILN_OK && !g->oom) {
        finish(j);
        const char *status = json_string_value(json_object_get(g->resp, "status"));
        emit(j, strcmp(status, "completed") == 0 ? "response.completed" : "response.incomplete",
             json_pack("{s:O}", "response", g->resp));
    } else {
        const char *msg = g->oom                            ? "out of memory"
                          : j->status == KILN_ERR_CANCELLED ? "the generation was cancelled (server stopping)"
                                                            : j->error;
        json_object_set_new(g->resp, "status", json_string("failed"));
        json_object_set_new(g->resp, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", msg));
        emit(j, "response.failed", json_pack("{s:O}", "response", g->resp));
    }
}

/* ---- the endpoints ------------------------------------------------------------------------------ */

/* A float setting as the decimal it was given as (0.8, not 0.800000011920929). */
static double short_real(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)x);
    return strtod(b, NULL);
}

/* The response object as it starts (status in_progress, no output), echoing the request's settings. */
static json_t *new_response(srv_req *r, json_t *req, const resp_out *g, const srv_job *j) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:s, s:[], s:b, s:n}", "id", g->id, "object", "response",
                          "created_at", (json_int_t)g->created, "status", "in_progress", "error", "incomplete_details",
                          "model", r->server->model_id, "output", "store", g->store, "usage");
    if (!o) return NULL;
    static const char *const echo[] = {
        "instructions",        "previous_response_id", "metadata", "tools",     "tool_choice",
        "parallel_tool_calls", "max_output_tokens",    "text",     "reasoning", "user"};
    for (size_t i = 0; i < sizeof echo / sizeof echo[0]; i++) {
        json_t *v = json_object_get(req, echo[i]);
        json_object_set_new(o, echo[i], v ? json_deep_copy(v) : json_null()); /* owned: the engine's thread reads it */
    }
    if (!json_is_array(json_object_get(o, "tools"))) json_object_set_new(o, "tools", json_array());
    if (!json_is_string(json_object_get(o, "tool_choice")) && !json_is_object(json_object_get(o, "tool_choice")))
        json_object_set_new(o, "tool_choice", json_string("auto"));
    if (!json_is_boolean(json_object_get(o, "parallel_tool_calls")))
        json_object_set_new(o, "parallel_tool_calls", json_true());
    if (!json_is_object(json_object_get(o, "metadata"))) json_object_set_new(o, "metadata", json_object());
    if (!json_is_object(json_object_get(o, "text")))
        json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(o, "temperature", json_real(short_real(j->gp.sampling.temperature)));
    json_object_set_new(o, "top_p", json_real(short_real(j->gp.sampling.top_p)));
    json_object_set_new(o, "truncation", json_string("disabled"));
    return o;
}

void srv_responses(srv_req *r) {
    srv_rdb_open(r->server->cfg.ssd_dir, STORE_MAX, STORE_BYTES);
    json_t *req = srv_parse_body(r), *chat = NULL;
    if (!req) return;
    char *prompt = NULL;
    size_t len = 0;
    srv_job *j = srv_job_new();
    resp_out *g = j ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        srv_job_unref(j);
        j = NULL;
        oom(r);
        goto done;
    }
    g->open = -1;
    g->store = true;
    g->created = (long)time(NULL);
    srv_make_id(g->id, sizeof g->id, "resp_");
    j->user = g;
    j->free_user = resp_out_free;
    j->on_event = on_event;
    if (!srv_get_bool(r, req, "stream", &g->stream) || !srv_get_bool(r, req, "store", &g->store)) goto done;
    if (!(chat = translate(r, req, &g->history))) goto done;
    if (!srv_generation_params(r, chat, j)) goto done;
    srv_tools tools;
    if (!srv_tools_parse(r, chat, &tools)) goto done;
    if (!(prompt = srv_render_chat(r, chat, &len))) goto done;
    if (!(j->prompt = srv_tokenize_prompt(r, "input", prompt, len, &j->n_prompt))) goto done;
    if (!srv_chat_parser_setup(r, j, &tools, prompt, &g->parser)) goto done;
    if (!(g->resp = new_response(r, req, g, j))) {
        oom(r);
        goto done;
    }
    if (atomic_load(&r->server->stopping)) {
        srv_send_error(r, 503, "server_error", NULL, NULL, "the server is shutting down");
        goto done;
    }
    if (g->stream) {
        pthread_mutex_lock(&j->mu);
        emit(j, "response.created", json_pack("{s:O}", "response", g->resp));
        emit(j, "response.in_progress", json_pack("{s:O}", "response", g->resp));
        pthread_mutex_unlock(&j->mu);
    }
    kiln_status st = srv_job_submit(r->server, j);
    if (st == KILN_ERR_BUSY) {
        srv_send_error(r, 429, "requests", NULL, "rate_limit_exceeded",
                       "the server is busy: %d requests are already waiting; retry later", r->server->cfg.max_queue);
    } else if (st) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "cannot start the generation: %s", kiln_last_error());
    } else if (g->stream) {
        srv_send_stream(r, j);
    } else if (srv_wait_job(r, j)) {
        if (j->status != KILN_OK || g->oom) {
            if (j->status == KILN_ERR_UNSUPPORTED && !g->oom)
                srv_send_error(r, 400, "invalid_request_error", NULL, NULL, "generation failed: %s", j->error);
            else
                srv_send_error(r, j->status == KILN_ERR_CANCELLED ? 503 : 500, "server_error", NULL, NULL,
                               "generation failed: %s", g->oom ? "out of memory" : j->error);
        } else {
            srv_send_json(r, 200, json_incref(g->resp));
        }
    }
done:
    free(prompt);
    srv_job_unref(j);
    json_decref(chat);
    json_decref(req);
}

void srv_response_by_id(srv_req *r, const char *id) {
    srv_rdb_open(r->server->cfg.ssd_dir, STORE_MAX, STORE_BYTES);
    if (strcmp(r->method, "DELETE") == 0) {
        if (!store_delete(id)) {
            srv_send_error(r, 404, "invalid_request_error", NULL, "not_found", "No response with id '%s' found.", id);
            return;
        }
        srv_send_json(r, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1));
        return;
    }
    json_t *o = store_get(id, 0);
    if (!o) {
        srv_send_error(r, 404, "invalid_request_error", NULL, "not_found", "No response with id '%s' found.", id);
        return;
    }
    srv_send_json(r, 200, o);
}
