/*
 * tools.c - a chat request's tools: validation of "tools", "tool_choice", "parallel_tool_calls" and
 * "reasoning_format", of the tool messages and assistant tool calls in its history, and the
 * grammar that enforces tool_choice "required" or a named function.
 *
 * Validation turns every malformed field into a 400 naming it, before anything is rendered. The
 * history is also normalized for the chat templates: OpenAI clients send an assistant message's
 * tool_call.function.arguments as a JSON string, while templates write it with `| tojson` or walk
 * its items as an object; a string that parses as a JSON object is given to the template as that
 * object (other strings stay strings).
 *
 * The grammar of a required call is built from the tools' parameter schemas with the public API
 * only: each schema is compiled (kiln_grammar_compile, JSON Schema) and the GBNF it compiled to
 * (kiln_grammar_gbnf) is spliced into one grammar with its rule names prefixed "t<i>-" (tool i),
 * so the rules of two schemas (each has its own "root", "string", "ws", ...) cannot collide; the
 * wrapper's own rules are named "call" and "root", which no prefixed name can be. The sentences are
 * exactly one call, in the markup of the detected format: Hermes / Qwen <tool_call>\n{"name": ...,
 * "arguments": ...}\n</tool_call> and the generic envelope {"tool_call": {"name": ..., "arguments":
 * ...}}. Other formats refuse "required" with a 400 rather than run unconstrained.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(r, param, ...) srv_send_error(r, 400, "invalid_request_error", param, "invalid_value", __VA_ARGS__)

/* OpenAI's rule for function names: 1 to 64 of [a-zA-Z0-9_-]. */
static bool valid_name(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* The function object of tools[i] (validated). */
static json_t *tool_fn(json_t *tools, size_t i) { return json_object_get(json_array_get(tools, i), "function"); }

bool srv_tools_parse(srv_req *r, json_t *req, srv_tools *t) {
    *t = (srv_tools){.choice = SRV_TOOL_AUTO, .parallel = true, .reasoning = KILN_REASONING_AUTO};
    char param[64];
    json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            BAD(r, "tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}} objects");
            return false;
        }
        size_t i;
        json_t *e;
        json_array_foreach(tools, i, e) {
            snprintf(param, sizeof param, "tools[%zu]", i);
            json_t *type = json_object_get(e, "type");
            if (!json_is_object(e) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0) {
                BAD(r, param, "%s must be an object with \"type\": \"function\"", param);
                return false;
            }
            json_t *fn = json_object_get(e, "function");
            snprintf(param, sizeof param, "tools[%zu].function", i);
            if (!json_is_object(fn)) {
                BAD(r, param, "%s must be an object with a name", param);
                return false;
            }
            json_t *name = json_object_get(fn, "name");
            snprintf(param, sizeof param, "tools[%zu].function.name", i);
            if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name))) {
                BAD(r, param, "%s must be a string of 1 to 64 letters, digits, '_' or '-'", param);
                return false;
            }
            for (size_t k = 0; k < i; k++)
                if (json_equal(json_object_get(tool_fn(tools, k), "name"), name)) {
                    BAD(r, param, "%s: the function '%s' is declared twice", param, json_string_value(name));
                    return false;
                }
            json_t *params = json_object_get(fn, "parameters");
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (params && !json_is_null(params) && !json_is_object(params)) {
                BAD(r, param, "%s must be a JSON Schema object", param);
                return false;
            }
            json_t *strict = json_object_get(fn, "strict");
            snprintf(param, sizeof param, "tools[%zu].function.strict", i);
            if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
                BAD(r, param, "%s must be a boolean", param);
                return false;
            }
        }
        if (json_array_size(tools)) t->tools = tools;
    }
    json_t *tc = json_object_get(req, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *s = json_string_value(tc);
        if (s && strcmp(s, "none") == 0) t->choice = SRV_TOOL_NONE;
        else if (s && strcmp(s, "auto") == 0) t->choice = SRV_TOOL_AUTO;
        else if (s && strcmp(s, "required") == 0) t->choice = SRV_TOOL_REQUIRED;
        else if (json_is_object(tc)) {
            json_t *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
            json_t *name = json_object_get(fn, "name");
            if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0 || !json_is_string(name)) {
                BAD(r, "tool_choice",
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}");
                return false;
            }
            t->choice = SRV_TOOL_NAMED;
            t->named = json_string_value(name);
            bool found = false;
            for (size_t i = 0; t->tools && i < json_array_size(t->tools); i++)
                found |= json_equal(json_object_get(tool_fn(t->tools, i), "name"), name);
            if (!found) {
                BAD(r, "tool_choice", "'tool_choice' names the function '%s', which 'tools' does not declare",
                    t->named);
                return false;
            }
        } else {
            BAD(r, "tool_choice",
                "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                "{\"name\": ...}}");
            return false;
        }
        if (t->choice == SRV_TOOL_REQUIRED && !t->tools) {
            BAD(r, "tool_choice", "'tool_choice' \"required\" needs a non-empty 'tools'");
            return false;
        }
    }
    if (!srv_get_bool(r, req, "parallel_tool_calls", &t->parallel)) return false;
    json_t *rf = json_object_get(req, "reasoning_format");
    if (rf && !json_is_null(rf)) {
        const char *s = json_string_value(rf);
        if (s && strcmp(s, "none") == 0) t->reasoning = KILN_REASONING_NONE;
        else if (s && strcmp(s, "auto") == 0) t->reasoning = KILN_REASONING_AUTO;
        else if (s && strcmp(s, "deepseek") == 0) t->reasoning = KILN_REASONING_DEEPSEEK;
        else {
            BAD(r, "reasoning_format", "'reasoning_format' must be \"none\", \"auto\" or \"deepseek\"");
            return false;
        }
    }
    return true;
}

bool srv_tools_message(srv_req *r, json_t *msg, size_t idx, json_t *copy) {
    char param[96];
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (strcmp(role, "tool") == 0) {
        json_t *id = json_object_get(msg, "tool_call_id");
        if (!json_is_string(id) || json_string_length(id) == 0) {
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", idx);
            BAD(r, param, "%s: a tool message needs the id of the call it answers (a non-empty string)", param);
            return false;
        }
        return true;
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    if (strcmp(role, "assistant") != 0 || !calls || json_is_null(calls)) return true;
    snprintf(param, sizeof param, "messages[%zu].tool_calls", idx);
    if (!json_is_array(calls)) {
        BAD(r, param, "%s must be an array of calls", param);
        return false;
    }
    json_t *ccalls = json_object_get(copy, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function"), *type = json_object_get(c, "type"), *id = json_object_get(c, "id");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", idx, i);
        if (!json_is_object(c) || (type && !json_is_null(type) &&
                                   !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0))) {
            BAD(r, param, "%s must be an object with \"type\": \"function\"", param);
            return false;
        }
        if (id && !json_is_null(id) && !json_is_string(id)) {
            BAD(r, param, "%s.id must be a string", param);
            return false;
        }
        if (!json_is_object(fn) || !json_is_string(name) || json_string_length(name) == 0) {
            BAD(r, param, "%s.function must be an object with a non-empty name", param);
            return false;
        }
        if (args && !json_is_null(args) && !json_is_string(args) && !json_is_object(args)) {
            BAD(r, param, "%s.function.arguments must be a string of JSON (or an object)", param);
            return false;
        }
        if (json_is_string(args)) { /* give templates the object they expect */
            json_t *obj = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
            json_t *cfn = json_object_get(json_array_get(ccalls, i), "function");
            if (json_is_object(obj) && json_is_object(cfn)) json_object_set(cfn, "arguments", obj);
            json_decref(obj);
        }
    }
    return true;
}

/* ---- the grammar of a required call ------------------------------------------------------------ */

/* Appends gbnf with every rule name prefixed by prefix: names are the word runs ([A-Za-z0-9-]+)
 * outside string literals, character classes, repetition braces and comments. */
static void splice(FILE *f, const char *g, const char *prefix) {
    for (size_t i = 0; g[i];) {
        char c = g[i];
        if (c == '"' || c == '[') {
            char close = c == '"' ? '"' : ']';
            fputc(g[i++], f);
            while (g[i] && g[i] != close) {
                if (g[i] == '\\' && g[i + 1]) fputc(g[i++], f);
                fputc(g[i++], f);
            }
            if (g[i]) fputc(g[i++], f);
        } else if (c == '{' || c == '#') {
            char close = c == '{' ? '}' : '\n';
            while (g[i] && g[i] != close) fputc(g[i++], f);
            if (g[i]) fputc(g[i++], f);
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') {
            fputs(prefix, f);
            while ((g[i] >= 'a' && g[i] <= 'z') || (g[i] >= 'A' && g[i] <= 'Z') || (g[i] >= '0' && g[i] <= '9') ||
                   g[i] == '-')
                fputc(g[i++], f);
        } else fputc(g[i++], f);
    }
}

bool srv_tools_grammar(srv_req *r, const srv_tools *t, const char *format, srv_grammar **out) {
    *out = NULL;
    bool hermes = strcmp(format, "hermes") == 0, generic = strcmp(format, "generic") == 0;
    if (!hermes && !generic) {
        BAD(r, "tool_choice",
            "tool_choice %s is not supported for format %s (kiln enforces calls for the hermes and generic "
            "formats); use \"auto\"",
            t->choice == SRV_TOOL_NAMED ? "naming a function" : "required", format);
        return false;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    fprintf(f, "root ::= %s\ncall ::= ",
            hermes ? "\"<tool_call>\\n\" call \"\\n</tool_call>\"" : "\"{\\\"tool_call\\\": \" call \"}\"");
    bool first = true, ok = true;
    char param[64];
    for (size_t i = 0; ok && i < json_array_size(t->tools); i++) {
        json_t *fn = tool_fn(t->tools, i);
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (t->choice == SRV_TOOL_NAMED && strcmp(name, t->named) != 0) continue;
        fprintf(f, "%s\"{\\\"name\\\": \\\"%s\\\", \\\"arguments\\\": \" t%zu-root \"}\"", first ? "" : " | ", name, i);
        first = false;
    }
    fputc('\n', f);
    for (size_t i = 0; ok && i < json_array_size(t->tools); i++) {
        json_t *fn = tool_fn(t->tools, i);
        if (t->choice == SRV_TOOL_NAMED && strcmp(json_string_value(json_object_get(fn, "name")), t->named) != 0)
            continue;
        json_t *params = json_object_get(fn, "parameters");
        char *schema = json_is_object(params) ? json_dumps(params, JSON_COMPACT) : strdup("{\"type\":\"object\"}");
        kiln_grammar_params gp = kiln_grammar_default_params();
        gp.kind = KILN_GRAMMAR_JSON_SCHEMA;
        gp.strict = json_is_true(json_object_get(fn, "strict"));
        kiln_grammar *g = NULL;
        kiln_status st = schema ? kiln_grammar_compile(schema, strlen(schema), &gp, &g) : KILN_ERR_NOMEM;
        free(schema);
        snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
        if (st == KILN_ERR_NOMEM) {
            srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
            ok = false;
        } else if (st) {
            BAD(r, param, "%s cannot be enforced for tool_choice: %s", param, kiln_last_error());
            ok = false;
        } else {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "t%zu-", i);
            splice(f, kiln_grammar_gbnf(g), prefix);
            fputc('\n', f);
        }
        kiln_grammar_free(g);
    }
    if (fclose(f) != 0 && ok) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        ok = false;
    }
    if (ok) ok = srv_grammar_gbnf(r, "tool_choice", text, len, out);
    free(text);
    return ok;
}
