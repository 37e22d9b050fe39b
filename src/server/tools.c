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
 * The grammar of the calls is the library's (kiln_tool_grammar), built through the server's grammar
 * cache: with tool_choice "required" or a named function the reply must be calls (one, or one or
 * more with parallel_tool_calls), and a format without a grammar is a 400 rather than a run
 * unconstrained; with "auto" (and tools) the grammar is lazy: free text until the format's call
 * opener, then well-formed calls whose arguments match their schemas. Under "auto" a schema kiln
 * cannot enforce, or a format without a grammar, leaves the reply unconstrained, unless a tool
 * says "strict": true, which makes it a 400 as under "required".
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
        if (json_array_size(tools) > SRV_MAX_TOOLS) {
            BAD(r, "tools", "'tools' has %zu entries; at most %d are allowed", json_array_size(tools), SRV_MAX_TOOLS);
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

/* ---- the grammar of the calls ------------------------------------------------------------------- */

bool srv_tools_grammar(srv_req *r, const srv_tools *t, const char *format, const char *tmpl, const char *prompt,
                       srv_grammar **out) {
    *out = NULL;
    char *tools = json_dumps(t->tools, JSON_COMPACT);
    if (!tools) {
        srv_send_error(r, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    kiln_tool_grammar_params p = kiln_tool_grammar_default_params();
    p.format = format;
    p.tools = tools;
    p.choice = t->choice == SRV_TOOL_REQUIRED ? KILN_TOOL_CHOICE_REQUIRED
               : t->choice == SRV_TOOL_NAMED  ? KILN_TOOL_CHOICE_NAMED
                                              : KILN_TOOL_CHOICE_AUTO;
    p.name = t->named;
    p.parallel = t->parallel;
    p.prompt = prompt;
    p.chat_template = tmpl;
    /* "auto" is enforced on a best-effort basis, unless a tool asks for strict */
    bool strict = false;
    for (size_t i = 0; i < json_array_size(t->tools); i++)
        strict |= json_is_true(json_object_get(tool_fn(t->tools, i), "strict"));
    const bool quiet = p.choice == KILN_TOOL_CHOICE_AUTO && !strict;
    bool ok = srv_grammar_tools(r, &p, quiet, out);
    free(tools);
    return ok || quiet;
}
