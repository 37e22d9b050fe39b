/*
 * anthropic.c - POST /v1/messages and POST /v1/messages/count_tokens in the shapes of Anthropic's
 * Messages API, so that Claude Code and the Anthropic SDKs can use kiln.
 *
 * A request is validated field by field (a 400 in Anthropic's error shape naming the field, e.g.
 * "messages.1.content.0.tool_use_id: ...") and translated into the chat request the OpenAI route
 * reads, which then goes through the same code: srv_generation_params (sampling, stop strings),
 * srv_tools_parse (tools, tool_choice), srv_render_chat (the model's template), the chat parser and
 * the grammar that enforces a call (srv_chat_parser_setup), and a job on the shared engine with its
 * prefix cache. The translation:
 *   system (a string or text blocks; cache_control and other block fields are ignored) -> a system
 *   message; a user message's text blocks -> user messages, its tool_result blocks -> tool messages
 *   (in order); an assistant message's text -> content, thinking -> reasoning_content, tool_use ->
 *   tool_calls with the input object as arguments (redacted_thinking is dropped); a final assistant
 *   message of text only is a prefill: the reply continues it (rendered after the generation
 *   prompt, and not repeated in the response); tools {name, description, input_schema} ->
 *   functions; tool_choice auto / any / tool / none -> "auto" / "required" / the named function /
 *   "none" (any and tool are enforced by the constrained decoder); thinking enabled (or adaptive)
 *   / disabled -> the template's enable_thinking true / false (budget_tokens is checked as
 *   Anthropic does, not enforced); stop_sequences -> stop; temperature, top_p, top_k as they are.
 *   metadata and anthropic-version are accepted and unused, and unknown top-level fields (newer API
 *   features) are ignored.
 * The response is a message of content blocks: thinking (the reasoning the parser separated; its
 * signature is empty), text, and tool_use with the parsed input, with stop_reason end_turn,
 * max_tokens, stop_sequence (and which one) or tool_use, and usage whose cache_read_input_tokens are
 * the prompt tokens the prefix cache supplied (input_tokens are the rest, as Anthropic counts).
 * Streaming sends Anthropic's named events: message_start, ping, then per block
 * content_block_start, content_block_delta (text_delta, thinking_delta, input_json_delta),
 * content_block_stop, and message_delta (stop_reason, usage) and message_stop, or an error event
 * when the generation fails.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(r, ...) srv_send_error(r, 400, "invalid_request_error", NULL, "invalid_value", __VA_ARGS__)

/* Sends 500 for an allocation failure; returns false so callers can `return oom(r);`. */
static bool oom(srv_req *r) {
    srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

json_t *srv_anthropic_error(unsigned status, const char *message) {
    const char *type = "api_error";
    switch (status) {
        case 401: type = "authentication_error"; break;
        case 403: type = "permission_error"; break;
        case 404: type = "not_found_error"; break;
        case 413: type = "request_too_large"; break;
        case 429: type = "rate_limit_error"; break;
        case 503:
        case 529: type = "overloaded_error"; break;
        default:
            if (status >= 400 && status < 500) type = "invalid_request_error";
    }
    return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message", message);
}

/* ---- the request: Anthropic's fields into a chat request ---------------------------------------- */

static bool present(const json_t *v) { return v && !json_is_null(v); }

/* The text of content that is a string or an array of text blocks (other block fields, e.g.
 * cache_control and citations, are ignored), joined with "\n" into f. False after sending 400
 * naming path (other block types are refused, with what kiln reads). */
static bool text_of(srv_req *r, FILE *f, json_t *c, const char *path) {
    if (json_is_string(c)) {
        fwrite(json_string_value(c), 1, json_string_length(c), f);
        return true;
    }
    if (!json_is_array(c)) {
        BAD(r, "%s: must be a string or an array of text blocks", path);
        return false;
    }
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *text = json_object_get(b, "text");
        if (!type || strcmp(type, "text") != 0) {
            BAD(r, "%s.%zu.type: only text blocks are supported here%s%s%s", path, i, type ? " (got '" : "",
                type ? type : "", type ? "')" : "");
            return false;
        }
        if (!json_is_string(text)) {
            BAD(r, "%s.%zu.text: must be a string", path, i);
            return false;
        }
        if (i) fputc('\n', f);
        fwrite(json_string_value(text), 1, json_string_length(text), f);
    }
    return true;
}

/* text_of into a new JSON string; NULL after sending the error. */
static json_t *text_value(srv_req *r, json_t *c, const char *path) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        oom(r);
        return NULL;
    }
    bool ok = text_of(r, f, c, path);
    fclose(f);
    json_t *s = ok ? json_stringn(buf, len) : NULL;
    free(buf);
    if (ok && !s) BAD(r, "%s: the text is not valid UTF-8", path);
    return s;
}

/* An open text buffer of one translated message (joined with "\n"). */
typedef struct textbuf {
    char *buf;
    size_t len;
    FILE *f;
    bool any;
} textbuf;

static bool tb_open(textbuf *t) {
    *t = (textbuf){0};
    t->f = open_memstream(&t->buf, &t->len);
    return t->f != NULL;
}

/* The text so far as a JSON string (the buffer stays open for more); NULL when out of memory. */
static json_t *tb_value(textbuf *t) {
    fflush(t->f);
    return json_stringn(t->buf ? t->buf : "", t->len);
}

static void tb_close(textbuf *t) {
    if (t->f) fclose(t->f);
    free(t->buf);
    *t = (textbuf){0};
}

static void tb_add(textbuf *t, const char *s, size_t n) {
    if (t->any) fputc('\n', t->f);
    fwrite(s, 1, n, t->f);
    t->any = true;
}

/* Appends to out the messages of user message m (messages[idx], content already checked to be a
 * string or an array): its text as user messages, each tool_result as a tool message, in order. */
static bool user_message(srv_req *r, json_t *out, json_t *content, size_t idx) {
    char path[96];
    if (json_is_string(content))
        return json_array_append_new(out, json_pack("{s:s, s:O}", "role", "user", "content", content)) == 0 || oom(r);
    textbuf t;
    if (!tb_open(&t)) return oom(r);
    bool ok = true;
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        snprintf(path, sizeof path, "messages.%zu.content.%zu", idx, i);
        if (!json_is_object(b) || !type) {
            BAD(r, "%s: must be a content block with a 'type'", path);
            ok = false;
            break;
        }
        if (strcmp(type, "text") == 0) {
            json_t *text = json_object_get(b, "text");
            if (!json_is_string(text)) {
                BAD(r, "%s.text: must be a string", path);
                ok = false;
                break;
            }
            tb_add(&t, json_string_value(text), json_string_length(text));
        } else if (strcmp(type, "tool_result") == 0) {
            json_t *id = json_object_get(b, "tool_use_id"), *c = json_object_get(b, "content");
            json_t *err = json_object_get(b, "is_error");
            if (!json_is_string(id) || json_string_length(id) == 0) {
                BAD(r, "%s.tool_use_id: must be the id of the tool_use block it answers", path);
                ok = false;
                break;
            }
            if (present(err) && !json_is_boolean(err)) {
                BAD(r, "%s.is_error: must be a boolean", path);
                ok = false;
                break;
            }
            char cpath[112];
            snprintf(cpath, sizeof cpath, "%s.content", path);
            json_t *text = present(c) ? text_value(r, c, cpath) : json_string("");
            if (!text) {
                ok = false;
                break;
            }
            if (json_is_true(err)) { /* the model is told the call failed */
                json_t *e = json_sprintf("Error: %s", json_string_value(text));
                json_decref(text);
                text = e;
            }
            if (t.any) { /* the text before it is a message of its own */
                json_t *u = tb_value(&t);
                tb_close(&t);
                if (!u || json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", u)) ||
                    !tb_open(&t)) {
                    json_decref(text);
                    ok = oom(r);
                    break;
                }
            }
            if (!text || json_array_append_new(
                             out, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", id, "content", text))) {
                ok = oom(r);
                break;
            }
        } else {
            BAD(r, "%s.type: '%s' blocks are not supported in user messages (kiln reads text and tool_result)", path,
                type);
            ok = false;
            break;
        }
    }
    if (ok && (t.any || json_array_size(content) == 0)) {
        json_t *u = tb_value(&t);
        if (!u || json_array_append_new(out, json_pack("{s:s, s:o}", "role", "user", "content", u))) ok = oom(r);
    }
    tb_close(&t);
    return ok;
}

/* Appends the translation of assistant message content (messages[idx]) to out: text -> content,
 * thinking -> reasoning_content, tool_use -> tool_calls. */
static bool assistant_message(srv_req *r, json_t *out, json_t *content, size_t idx) {
    char path[96];
    if (json_is_string(content))
        return json_array_append_new(out, json_pack("{s:s, s:O}", "role", "assistant", "content", content)) == 0 ||
               oom(r);
    textbuf t, th;
    json_t *calls = json_array();
    if (!calls || !tb_open(&t)) {
        json_decref(calls);
        return oom(r);
    }
    if (!tb_open(&th)) {
        tb_close(&t);
        json_decref(calls);
        return oom(r);
    }
    bool ok = true;
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        snprintf(path, sizeof path, "messages.%zu.content.%zu", idx, i);
        if (!json_is_object(b) || !type) {
            BAD(r, "%s: must be a content block with a 'type'", path);
            ok = false;
        } else if (strcmp(type, "text") == 0 || strcmp(type, "thinking") == 0) {
            const bool thinking = type[1] == 'h';
            json_t *text = json_object_get(b, thinking ? "thinking" : "text");
            if (!json_is_string(text)) {
                BAD(r, "%s.%s: must be a string", path, thinking ? "thinking" : "text");
                ok = false;
            } else tb_add(thinking ? &th : &t, json_string_value(text), json_string_length(text));
        } else if (strcmp(type, "redacted_thinking") == 0) {
            /* opaque: nothing a local model could read */
        } else if (strcmp(type, "tool_use") == 0) {
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"),
                   *input = json_object_get(b, "input");
            if (!json_is_string(id) || json_string_length(id) == 0) {
                BAD(r, "%s.id: must be a non-empty string", path);
                ok = false;
            } else if (!json_is_string(name) || json_string_length(name) == 0) {
                BAD(r, "%s.name: must be a non-empty string", path);
                ok = false;
            } else if (!json_is_object(input)) {
                BAD(r, "%s.input: must be an object", path);
                ok = false;
            } else if (json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function",
                                                              "function", "name", name, "arguments", input)))
                ok = oom(r);
        } else {
            BAD(r,
                "%s.type: '%s' blocks are not supported in assistant messages (kiln reads text, thinking and "
                "tool_use)",
                path, type);
            ok = false;
        }
        if (!ok) break;
    }
    json_t *msg = NULL;
    if (ok) {
        json_t *text = tb_value(&t), *thinking = th.any ? tb_value(&th) : NULL;
        msg = json_pack("{s:s, s:o}", "role", "assistant", "content", text);
        if (msg && th.any) json_object_set_new(msg, "reasoning_content", thinking);
        else json_decref(thinking);
        if (msg && json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        if (!msg || json_array_append_new(out, msg)) ok = oom(r);
    }
    json_decref(calls);
    tb_close(&t);
    tb_close(&th);
    return ok;
}

/* Anthropic's rule for tool names: 1 to 64 of [a-zA-Z0-9_-]. */
static bool valid_name(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* tools and tool_choice into chat's "tools", "tool_choice" and "parallel_tool_calls". */
static bool translate_tools(srv_req *r, json_t *req, json_t *chat) {
    json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice");
    json_t *fns = json_array();
    if (!fns) return oom(r);
    json_object_set_new(chat, "tools", fns);
    if (present(tools)) {
        if (!json_is_array(tools)) {
            BAD(r, "tools: must be an array of tools {name, description, input_schema}");
            return false;
        }
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
            json_t *schema = json_object_get(t, "input_schema"), *strict = json_object_get(t, "strict");
            if (!json_is_object(t)) {
                BAD(r, "tools.%zu: must be an object", i);
                return false;
            }
            if (present(json_object_get(t, "type")) && (!type || strcmp(type, "custom") != 0)) {
                BAD(r,
                    "tools.%zu.type: '%s' tools are not supported: kiln runs custom tools (name, description, "
                    "input_schema)",
                    i, type ? type : "(not a string)");
                return false;
            }
            if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name))) {
                BAD(r, "tools.%zu.name: must be 1 to 64 letters, digits, '_' or '-'", i);
                return false;
            }
            for (size_t k = 0; k < i; k++)
                if (json_equal(json_object_get(json_array_get(tools, k), "name"), name)) {
                    BAD(r, "tools.%zu.name: the tool '%s' is declared twice", i, json_string_value(name));
                    return false;
                }
            if (present(desc) && !json_is_string(desc)) {
                BAD(r, "tools.%zu.description: must be a string", i);
                return false;
            }
            if (!json_is_object(schema)) {
                BAD(r, "tools.%zu.input_schema: must be a JSON Schema object", i);
                return false;
            }
            if (present(strict) && !json_is_boolean(strict)) {
                BAD(r, "tools.%zu.strict: must be a boolean", i);
                return false;
            }
            json_t *fn = json_pack("{s:O, s:O}", "name", name, "parameters", schema);
            if (fn && present(desc)) json_object_set(fn, "description", desc);
            if (fn && present(strict)) json_object_set(fn, "strict", strict);
            if (!fn || json_array_append_new(fns, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
                return oom(r);
        }
    }
    if (!present(tc)) return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (!json_is_object(tc) || !type) {
        BAD(r, "tool_choice: must be an object with a type of auto, any, tool or none");
        return false;
    }
    if (present(dp) && !json_is_boolean(dp)) {
        BAD(r, "tool_choice.disable_parallel_tool_use: must be a boolean");
        return false;
    }
    if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    if (strcmp(type, "auto") == 0 || strcmp(type, "none") == 0) {
        json_object_set_new(chat, "tool_choice", json_string(type));
        return true;
    }
    const bool any = strcmp(type, "any") == 0;
    if (!any && strcmp(type, "tool") != 0) {
        BAD(r, "tool_choice.type: must be auto, any, tool or none (got '%s')", type);
        return false;
    }
    if (json_array_size(fns) == 0) {
        BAD(r, "tool_choice: type '%s' needs a non-empty 'tools'", type);
        return false;
    }
    if (any) {
        json_object_set_new(chat, "tool_choice", json_string("required"));
        return true;
    }
    json_t *name = json_object_get(tc, "name");
    bool found = false;
    for (size_t i = 0; json_is_string(name) && i < json_array_size(tools); i++)
        found |= json_equal(json_object_get(json_array_get(tools, i), "name"), name);
    if (!found) {
        BAD(r, "tool_choice.name: must name one of the tools (got %s%s%s)", json_is_string(name) ? "'" : "",
            json_is_string(name) ? json_string_value(name) : "no name", json_is_string(name) ? "'" : "");
        return false;
    }
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
    return true;
}

/* The fields of a generation (not read by count_tokens) into chat: max_tokens (required),
 * sampling, stop_sequences, metadata, thinking's budget. */
static bool translate_generation(srv_req *r, json_t *req, json_t *chat) {
    json_t *mt = json_object_get(req, "max_tokens");
    if (!present(mt)) {
        BAD(r, "max_tokens: Field required");
        return false;
    }
    if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > (1 << 30)) {
        BAD(r, "max_tokens: must be an integer of at least 1");
        return false;
    }
    json_object_set(chat, "max_tokens", mt);
    static const struct {
        const char *key;
        double hi;
    } nums[] = {{"temperature", 1}, {"top_p", 1}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        json_t *v = json_object_get(req, nums[i].key);
        if (!present(v)) continue;
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > nums[i].hi) {
            BAD(r, "%s: must be a number between 0 and %g", nums[i].key, nums[i].hi);
            return false;
        }
        json_object_set(chat, nums[i].key, v);
    }
    json_t *k = json_object_get(req, "top_k");
    if (present(k)) {
        if (!json_is_integer(k) || json_integer_value(k) < 0) {
            BAD(r, "top_k: must be an integer of at least 0");
            return false;
        }
        json_object_set(chat, "top_k", k);
    }
    json_t *stop = json_object_get(req, "stop_sequences");
    if (present(stop)) {
        if (!json_is_array(stop) || json_array_size(stop) > KILN_MAX_STOP) {
            BAD(r, "stop_sequences: must be an array of at most %d strings", KILN_MAX_STOP);
            return false;
        }
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s) {
            if (!json_is_string(s) || json_string_length(s) > KILN_MAX_STOP_LEN ||
                strlen(json_string_value(s)) != json_string_length(s)) {
                BAD(r, "stop_sequences.%zu: must be a string of at most %d bytes without NUL characters", i,
                    KILN_MAX_STOP_LEN);
                return false;
            }
        }
        json_object_set(chat, "stop", stop);
    }
    json_t *md = json_object_get(req, "metadata");
    if (present(md)) {
        json_t *uid = json_object_get(md, "user_id");
        if (!json_is_object(md) || (present(uid) && !json_is_string(uid))) {
            BAD(r, "metadata: must be an object whose user_id is a string");
            return false;
        }
    }
    json_t *th = json_object_get(req, "thinking");
    const char *type = json_string_value(json_object_get(th, "type"));
    if (type && strcmp(type, "enabled") == 0) {
        json_t *b = json_object_get(th, "budget_tokens");
        if (!json_is_integer(b) || json_integer_value(b) < 1024) {
            BAD(r, "thinking.budget_tokens: must be an integer of at least 1024");
            return false;
        }
        if (json_integer_value(b) >= json_integer_value(mt)) {
            BAD(r, "max_tokens: must be greater than thinking.budget_tokens");
            return false;
        }
    }
    return true;
}

/* The chat request (OpenAI's shape) that Anthropic request req asks for, and its prefill: the text
 * of a final assistant message, which the reply continues (*prefill borrowed from req, NULL when
 * none). generate: the fields of a generation are read too (/v1/messages); count_tokens reads only
 * what makes the prompt. NULL after sending the error. */
static json_t *translate(srv_req *r, json_t *req, bool generate, json_t **prefill) {
    json_t *model = json_object_get(req, "model"), *msgs = json_object_get(req, "messages");
    json_t *system = json_object_get(req, "system"), *th = json_object_get(req, "thinking");
    *prefill = NULL;
    if (!json_is_string(model) || json_string_length(model) == 0) {
        BAD(r,
            "model: Field required (a model name: GET /v1/models lists them; claude-* names mean the default model)");
        return NULL;
    }
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        BAD(r, "messages: must be a non-empty array of {role, content}");
        return NULL;
    }
    json_t *chat = json_object(), *out = json_array(), *kw = json_object();
    if (!chat || !out || !kw) {
        json_decref(chat);
        json_decref(out);
        json_decref(kw);
        oom(r);
        return NULL;
    }
    json_object_set_new(chat, "messages", out);
    json_object_set_new(chat, "chat_template_kwargs", kw);
    if (generate && !translate_generation(r, req, chat)) goto fail;
    if (present(th)) {
        const char *type = json_string_value(json_object_get(th, "type"));
        if (!json_is_object(th) || !type) {
            BAD(r, "thinking: must be an object {type: enabled | disabled, budget_tokens}");
            goto fail;
        }
        if (strcmp(type, "disabled") == 0) json_object_set_new(kw, "enable_thinking", json_false());
        else if (strcmp(type, "enabled") == 0 || strcmp(type, "adaptive") == 0 || strcmp(type, "between_tools") == 0)
            json_object_set_new(kw, "enable_thinking", json_true());
        else {
            BAD(r, "thinking.type: must be enabled, disabled or adaptive (got '%s')", type);
            goto fail;
        }
    }
    if (present(system)) {
        json_t *text = text_value(r, system, "system");
        if (!text) goto fail;
        if (json_string_length(text) == 0) json_decref(text);
        else if (json_array_append_new(out, json_pack("{s:s, s:o}", "role", "system", "content", text))) {
            oom(r);
            goto fail;
        }
    }
    const size_t n = json_array_size(msgs);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        if (!json_is_object(m)) {
            BAD(r, "messages.%zu: must be an object {role, content}", i);
            goto fail;
        }
        if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)) {
            BAD(r, "messages.%zu.role: Input should be 'user' or 'assistant'%s%s%s", i, role ? " (got '" : "",
                role ? role : "", role ? "')" : "");
            goto fail;
        }
        if (!json_is_string(content) && !json_is_array(content)) {
            BAD(r, "messages.%zu.content: must be a string or an array of content blocks", i);
            goto fail;
        }
        if (role[0] == 'u') {
            if (!user_message(r, out, content, i)) goto fail;
            continue;
        }
        if (!assistant_message(r, out, content, i)) goto fail;
        json_t *last = json_array_get(out, json_array_size(out) - 1);
        if (i == n - 1 && !json_object_get(last, "tool_calls") && !json_object_get(last, "reasoning_content")) {
            *prefill = json_incref(json_object_get(last, "content"));
            json_array_remove(out, json_array_size(out) - 1);
        }
    }
    if (!translate_tools(r, req, chat)) goto fail;
    if (json_array_size(json_object_get(chat, "tools")) == 0) json_object_del(chat, "tools");
    return chat;
fail:
    json_decref(*prefill);
    *prefill = NULL;
    json_decref(chat);
    return NULL;
}

/* The prompt of a translated request: the rendered chat, then the prefill. NULL after sending the
 * error. */
static char *render(srv_req *r, json_t *chat, json_t *prefill, size_t *len) {
    char *p = srv_render_chat(r, chat, len);
    if (!p || !prefill || json_string_length(prefill) == 0) return p;
    const size_t n = json_string_length(prefill);
    char *q = realloc(p, *len + n + 1);
    if (!q) {
        free(p);
        oom(r);
        return NULL;
    }
    memcpy(q + *len, json_string_value(prefill), n + 1);
    *len += n;
    return q;
}

/* ---- output ------------------------------------------------------------------------------------- */

/* What a /v1/messages job needs to shape its output. Owned by the job (freed with it). */
typedef struct msg_out {
    bool stream;
    char id[48];
    const char *model_id;
    int32_t n_prompt;
    kiln_chat_parser *parser; /* the reply's parser, or NULL (plain text) */
    bool parse_failed;        /* the parser refused input (past a limit): the rest is not parsed */
    bool oom;
    char *text; /* non-streaming without a parser: the whole reply */
    size_t n_text, cap_text;
    /* streaming: the content blocks sent so far */
    int n_blocks;            /* blocks started */
    int open;                /* the kind (kiln_chat_delta_kind) of the block still open, or -1 */
    int32_t open_call;       /* the open tool_use block's call index */
    const char *const *stop; /* the job's stop strings (stop_sequence of the result) */
} msg_out;

static void msg_out_free(void *p) {
    msg_out *g = p;
    if (!g) return;
    free(g->text);
    kiln_chat_parser_free(g->parser);
    free(g);
}

/* Appends one named server-sent event "event: NAME\ndata: JSON\n\n" to the job's output (lock
 * held); steals obj. */
static void emit(srv_job *j, const char *name, json_t *obj) {
    msg_out *g = j->user;
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s || !srv_job_append(j, "event: ", 7) || !srv_job_append(j, name, strlen(name)) ||
        !srv_job_append(j, "\ndata: ", 7) || !srv_job_append(j, s, strlen(s)) || !srv_job_append(j, "\n\n", 2))
        g->oom = true;
    free(s);
}

static void close_block(srv_job *j) {
    msg_out *g = j->user;
    if (g->open < 0) return;
    emit(j, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", g->n_blocks - 1));
    g->open = -1;
}

/* Opens the next content block (closing the open one); block is its empty start, stolen. */
static void open_block(srv_job *j, int kind, json_t *block) {
    msg_out *g = j->user;
    close_block(j);
    emit(j, "content_block_start",
         json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", g->n_blocks, "content_block", block));
    g->n_blocks++;
    g->open = kind;
}

static void block_delta(srv_job *j, json_t *delta) {
    msg_out *g = j->user;
    emit(j, "content_block_delta",
         json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", g->n_blocks - 1, "delta", delta));
}

/* Streams one piece of the reply: text and thinking go to a block of their kind (a new one when
 * the kind changes), a tool call's first delta opens its tool_use block and its argument fragments
 * are input_json_delta events. */
static void stream_delta(srv_job *j, const kiln_chat_delta *d) {
    msg_out *g = j->user;
    if (d->kind == KILN_DELTA_TOOL_CALL) {
        if (d->name) {
            open_block(j, KILN_DELTA_TOOL_CALL,
                       json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", d->id ? d->id : "", "name", d->name,
                                 "input"));
            g->open_call = d->index;
        } else if (g->open != KILN_DELTA_TOOL_CALL || g->open_call != d->index) {
            return; /* the parser finishes one call before the next starts */
        }
        if (d->len)
            block_delta(j, json_pack("{s:s, s:s%}", "type", "input_json_delta", "partial_json", d->text, d->len));
        return;
    }
    if (!d->len) return;
    const bool thinking = d->kind == KILN_DELTA_REASONING;
    if (g->open != (int)d->kind)
        open_block(j, d->kind,
                   thinking ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "")
                            : json_pack("{s:s, s:s}", "type", "text", "text", ""));
    block_delta(j, thinking ? json_pack("{s:s, s:s%}", "type", "thinking_delta", "thinking", d->text, d->len)
                            : json_pack("{s:s, s:s%}", "type", "text_delta", "text", d->text, d->len));
}

/* Feeds text to the parser (finish: ends its input) and, streaming, sends the deltas it has. */
static void parse_text(srv_job *j, const char *text, size_t len, bool finish) {
    msg_out *g = j->user;
    srv_chat_parser_step(j, g->parser, &g->parse_failed, text, len, finish);
    if (!g->stream) return;
    kiln_chat_delta d;
    while (kiln_chat_parser_next(g->parser, &d)) stream_delta(j, &d);
}

/* stop_reason of a finished generation, and in *seq the stop sequence that ended it (or NULL). */
static const char *stop_reason(const msg_out *g, const kiln_generate_result *res, const char **seq) {
    *seq = NULL;
    switch (res->stop) {
        case KILN_STOP_LENGTH:
        case KILN_STOP_CONTEXT: return "max_tokens";
        case KILN_STOP_STRING:
            if (res->stop_index >= 0 && g->stop) {
                *seq = g->stop[res->stop_index];
                return "stop_sequence";
            }
            return "end_turn";
        default: return g->parser && kiln_chat_parser_n_tool_calls(g->parser) > 0 ? "tool_use" : "end_turn";
    }
}

/* Usage as Anthropic counts it: input_tokens are the prompt tokens evaluated, without those read
 * from the prefix cache. */
static json_t *usage(const kiln_generate_result *res) {
    return json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", res->n_prompt - res->n_cached,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", res->n_cached, "output_tokens",
                     res->n_generated);
}

/* The message object around content (stolen); stop_reason NULL for message_start. */
static json_t *message(const msg_out *g, json_t *content, const char *stop, const char *seq, json_t *use) {
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s?, s:s?, s:o}", "id", g->id, "type", "message", "role", "assistant",
                     "model", g->model_id, "content", content, "stop_reason", stop, "stop_sequence", seq, "usage", use);
}

static void on_event(srv_job *j, const kiln_token_event *ev) {
    msg_out *g = j->user;
    if (ev) {
        if (!ev->text_len) return;
        if (g->parser) {
            parse_text(j, ev->text, ev->text_len, false);
        } else if (g->stream) {
            const kiln_chat_delta d = {.kind = KILN_DELTA_CONTENT, .text = ev->text, .len = ev->text_len};
            stream_delta(j, &d);
        } else if (!srv_text_append(&g->text, &g->n_text, &g->cap_text, ev->text, ev->text_len)) {
            g->oom = true;
        }
        return;
    }
    if (g->parser) parse_text(j, NULL, 0, true);
    if (!g->stream) return;
    if (j->status == KILN_OK) {
        const char *seq, *stop = stop_reason(g, &j->result, &seq);
        close_block(j);
        emit(j, "message_delta",
             json_pack("{s:s, s:{s:s, s:s?}, s:o}", "type", "message_delta", "delta", "stop_reason", stop,
                       "stop_sequence", seq, "usage", usage(&j->result)));
        emit(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    } else {
        const char *msg = j->status == KILN_ERR_CANCELLED ? "the generation was cancelled (server stopping)" : j->error;
        json_t *e = srv_anthropic_error(j->status == KILN_ERR_UNSUPPORTED ? 400 : 500, msg);
        emit(j, "error", e);
    }
}

/* The content blocks of a finished reply: thinking, text, then each tool_use with its input. */
static json_t *content_blocks(srv_req *r, const msg_out *g) {
    json_t *content = json_array();
    if (!g->parser) {
        if (g->n_text)
            json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text", g->text, g->n_text));
        return content;
    }
    char *mj = NULL;
    size_t mlen = 0;
    json_t *msg = NULL;
    if (kiln_chat_parser_message(g->parser, &mj, &mlen) == KILN_OK) msg = json_loadb(mj, mlen, 0, NULL);
    kiln_free(mj);
    if (!msg) {
        json_decref(content);
        oom(r);
        return NULL;
    }
    json_t *reasoning = json_object_get(msg, "reasoning_content"), *text = json_object_get(msg, "content");
    if (json_is_string(reasoning) && json_string_length(reasoning))
        json_array_append_new(content,
                              json_pack("{s:s, s:O, s:s}", "type", "thinking", "thinking", reasoning, "signature", ""));
    if (json_is_string(text) && json_string_length(text))
        json_array_append_new(content, json_pack("{s:s, s:O}", "type", "text", "text", text));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, c) {
        json_t *fn = json_object_get(c, "function"), *args = json_object_get(fn, "arguments");
        json_t *input =
            json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL) : NULL;
        if (!json_is_object(input)) { /* a call cut off before its arguments closed */
            json_decref(input);
            input = json_object();
        }
        json_array_append_new(content,
                              json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id", json_object_get(c, "id"),
                                        "name", json_object_get(fn, "name"), "input", input));
    }
    json_decref(msg);
    return content;
}

/* Non-streaming response once the job is done. */
static void send_result(srv_req *r, srv_job *j) {
    msg_out *g = j->user;
    if (j->status != KILN_OK || g->oom) {
        if (j->status == KILN_ERR_CANCELLED)
            srv_send_error(r, 503, "server_error", NULL, NULL,
                           "the generation was cancelled because the server is stopping");
        else if (j->status == KILN_ERR_UNSUPPORTED && !g->oom)
            srv_send_error(r, 400, "invalid_request_error", NULL, NULL, "generation failed: %s", j->error);
        else
            srv_send_error(r, 500, "server_error", NULL, NULL, "generation failed: %s",
                           g->oom ? "out of memory" : j->error);
        return;
    }
    json_t *content = content_blocks(r, g);
    if (!content) return;
    const char *seq, *stop = stop_reason(g, &j->result, &seq);
    srv_send_json(r, 200, message(g, content, stop, seq, usage(&j->result)));
}

/* ---- the two endpoints -------------------------------------------------------------------------- */

/* Queues the job and answers: a stream at once (message_start and a ping first), or the whole
 * message when the job is done. */
static void run(srv_req *r, srv_job *j) {
    srv *s = r->server;
    msg_out *g = j->user;
    if (atomic_load(&s->stopping)) {
        srv_send_error(r, 503, "server_error", NULL, NULL, "the server is shutting down");
        return;
    }
    if (g->stream) {
        json_t *use = json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", g->n_prompt, "cache_creation_input_tokens", 0,
                                "cache_read_input_tokens", 0, "output_tokens", 0);
        pthread_mutex_lock(&j->mu);
        emit(j, "message_start",
             json_pack("{s:s, s:o}", "type", "message_start", "message", message(g, json_array(), NULL, NULL, use)));
        emit(j, "ping", json_pack("{s:s}", "type", "ping"));
        pthread_mutex_unlock(&j->mu);
    }
    kiln_status st = srv_job_submit(s, j);
    if (st == KILN_ERR_BUSY) {
        srv_send_error(r, 429, "rate_limit_error", NULL, NULL,
                       "the server is busy: %d requests are already waiting; retry later", s->cfg.max_queue);
        return;
    }
    if (st) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "cannot start the generation: %s", kiln_last_error());
        return;
    }
    if (g->stream) {
        srv_send_stream(r, j);
        return;
    }
    if (srv_wait_job(r, j)) send_result(r, j);
}

void srv_messages(srv_req *r) {
    json_t *req = srv_parse_body(r), *chat = NULL, *prefill = NULL;
    if (!req) return;
    char *prompt = NULL;
    size_t len = 0;
    srv_job *j = srv_job_new();
    msg_out *g = j ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        srv_job_unref(j);
        j = NULL;
        oom(r);
        goto done;
    }
    g->open = -1;
    g->model_id = r->server->model_id;
    srv_make_id(g->id, sizeof g->id, "msg_");
    j->user = g;
    j->free_user = msg_out_free;
    j->on_event = on_event;
    if (!(chat = translate(r, req, true, &prefill))) goto done;
    if (!srv_get_bool(r, req, "stream", &g->stream) || !srv_generation_params(r, chat, j)) goto done;
    g->stop = j->gp.stop;
    srv_tools tools;
    if (!srv_tools_parse(r, chat, &tools)) goto done;
    if (!(prompt = render(r, chat, prefill, &len))) goto done;
    if (!(j->prompt = srv_tokenize_prompt(r, "messages", prompt, len, &j->n_prompt))) goto done;
    g->n_prompt = (int32_t)j->n_prompt;
    if (!srv_chat_parser_setup(r, j, &tools, prompt, &g->parser)) goto done;
    run(r, j);
done:
    free(prompt);
    srv_job_unref(j);
    json_decref(prefill);
    json_decref(chat);
    json_decref(req);
}

void srv_messages_count_tokens(srv_req *r) {
    json_t *req = srv_parse_body(r), *chat = NULL, *prefill = NULL;
    if (!req) return;
    char *prompt = NULL;
    size_t len = 0, n = 0;
    kiln_token *ids = NULL;
    srv_tools tools;
    if (!(chat = translate(r, req, false, &prefill)) || !srv_tools_parse(r, chat, &tools) ||
        !(prompt = render(r, chat, prefill, &len)))
        goto done;
    if (!(ids = malloc((len + 2) * sizeof *ids))) {
        oom(r);
        goto done;
    }
    const kiln_status st = kiln_tokenize_chat(r->server->model, prompt, len, ids, len + 2, &n);
    if (st != KILN_OK) {
        srv_send_tokenize_error(r, "messages", st);
        goto done;
    }
    srv_send_json(r, 200, json_pack("{s:i}", "input_tokens", (json_int_t)n));
done:
    free(ids);
    free(prompt);
    json_decref(prefill);
    json_decref(chat);
    json_decref(req);
}
