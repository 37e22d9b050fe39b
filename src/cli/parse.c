/*
 * parse.c - `kiln parse`: read a model's raw reply on standard input and print the OpenAI message
 * kiln makes of it ({"role", "content", "reasoning_content", "tool_calls"}), with the library's
 * chat parser (kiln_chat_parser_*).
 *
 * The reply is taken as the answer to a conversation rendered with --template: the template is
 * rendered with one user message, the tools and the --chat-template-kwargs, and the end of that
 * prompt tells the parser the state the generation prompt leaves (a thinking block it opened, a
 * harmony header, a recipient line). The format is the one the template writes, or --tool-format.
 * With --deltas the reply is fed in --chunk-byte pieces and every delta is printed as a JSON line
 * (as the "delta" object of an OpenAI stream chunk) before the final message.
 */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads all of standard input (at most 64 MiB). */
static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            if (cap >= (64u << 20)) {
                fprintf(stderr, "kiln parse: the reply is longer than 64 MiB\n");
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) {
            if (ferror(stdin)) {
                fprintf(stderr, "kiln parse: cannot read standard input\n");
                free(buf);
                return NULL;
            }
            *len = n;
            return buf;
        }
    }
    free(buf);
    fprintf(stderr, "kiln parse: out of memory\n");
    return NULL;
}

/* Renders the template with one user message, the tools and the kwargs (a JSON object): the
 * prompt whose end the parser looks at. NULL (with a warning) when the template cannot render. */
static char *render_prompt(const char *tmpl, size_t tlen, json_t *tools, json_t *kwargs) {
    json_t *ctx = json_pack("{s:[{s:s, s:s}], s:b, s:s, s:s}", "messages", "role", "user", "content", "Hello",
                            "add_generation_prompt", 1, "bos_token", "", "eos_token", "");
    if (!ctx) return NULL;
    if (tools) json_object_set(ctx, "tools", tools);
    if (kwargs) json_object_update(ctx, kwargs);
    char *cj = json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    if (!cj) return NULL;
    char *out = NULL;
    size_t out_len = 0;
    kiln_status st = kiln_template_render(tmpl, tlen, cj, strlen(cj), &out, &out_len);
    free(cj);
    if (st) {
        fprintf(stderr,
                "kiln parse: warning: the template does not render (%s); the state its generation prompt "
                "leaves is unknown\n",
                kiln_last_error());
        return NULL;
    }
    return out;
}

/* Prints one delta as the "delta" object of an OpenAI stream chunk, on one line. */
static void print_delta(const kiln_chat_delta *d) {
    json_t *o = NULL;
    json_t *text = json_stringn(d->text ? d->text : "", d->len);
    if (!text) text = json_string("\xEF\xBF\xBD"); /* a piece that is not UTF-8 */
    if (d->kind == KILN_DELTA_CONTENT) o = json_pack("{s:o}", "content", text);
    else if (d->kind == KILN_DELTA_REASONING) o = json_pack("{s:o}", "reasoning_content", text);
    else {
        json_t *fn = json_pack("{s:o}", "arguments", text);
        json_t *tc = json_pack("{s:i}", "index", (int)d->index);
        if (d->id) {
            json_object_set_new(tc, "id", json_string(d->id));
            json_object_set_new(tc, "type", json_string("function"));
            json_object_set_new(fn, "name", json_string(d->name));
        }
        json_object_set_new(tc, "function", fn);
        o = json_pack("{s:[o]}", "tool_calls", tc);
    }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
}

/* Parses a JSON file or text into *out (tools: an array; kwargs: an object). */
static bool load_json(const char *what, const char *text, size_t len, bool object, json_t **out) {
    json_error_t err;
    *out = json_loadb(text, len, 0, &err);
    if (!*out) {
        fprintf(stderr, "kiln parse: %s is not valid JSON: line %d, column %d: %s\n", what, err.line, err.column,
                err.text);
        return false;
    }
    if (object ? !json_is_object(*out) : !json_is_array(*out)) {
        fprintf(stderr, "kiln parse: %s must be a JSON %s\n", what, object ? "object" : "array");
        json_decref(*out);
        *out = NULL;
        return false;
    }
    return true;
}

/* `kiln parse`: flags, the prompt, the parser, the output (see the file comment). */
int cli_parse(int argc, char **argv) {
    const char *tmpl_path = NULL, *tools_path = NULL, *kwargs_text = NULL, *format = NULL;
    kiln_chat_parser_params pp = kiln_chat_parser_default_params();
    bool deltas = false, list = false;
    int chunk = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_usage("parse", false);
            return 0;
        }
        if (strcmp(a, "--deltas") == 0) {
            deltas = true;
            continue;
        }
        if (strcmp(a, "--list-formats") == 0) {
            list = true;
            continue;
        }
        if (strcmp(a, "--no-tool-calls") == 0) {
            pp.parse_tool_calls = false;
            continue;
        }
        const char *const valued[] = {
            "--template", "--tools", "--chat-template-kwargs", "--tool-format", "--reasoning-format",
            "--chunk",    "--seed"};
        int k = -1;
        for (int j = 0; j < 7; j++)
            if (strcmp(a, valued[j]) == 0) k = j;
        if (k < 0) {
            fprintf(stderr, "kiln parse: unknown option '%s'\n", a);
            cli_usage("parse", true);
            return CLI_EXIT_USAGE;
        }
        if (!v) {
            fprintf(stderr, "kiln parse: %s needs a value\n", a);
            return CLI_EXIT_USAGE;
        }
        i++;
        switch (k) {
            case 0: tmpl_path = v; break;
            case 1: tools_path = v; break;
            case 2: kwargs_text = v; break;
            case 3: format = v; break;
            case 4:
                if (strcmp(v, "none") == 0) pp.reasoning = KILN_REASONING_NONE;
                else if (strcmp(v, "auto") == 0) pp.reasoning = KILN_REASONING_AUTO;
                else if (strcmp(v, "deepseek") == 0) pp.reasoning = KILN_REASONING_DEEPSEEK;
                else {
                    fprintf(stderr, "kiln parse: --reasoning-format is none, auto or deepseek, not '%s'\n", v);
                    return CLI_EXIT_USAGE;
                }
                break;
            case 5:
                if (!cli_int(a, v, 1, 1 << 30, &chunk)) return CLI_EXIT_USAGE;
                break;
            default: {
                char *end;
                unsigned long long s = strtoull(v, &end, 10);
                if (*v == '-' || *end || end == v) {
                    fprintf(stderr, "kiln parse: --seed needs a number, not '%s'\n", v);
                    return CLI_EXIT_USAGE;
                }
                pp.id_seed = (uint64_t)s;
            }
        }
    }
    if (list) {
        const char *name, *models;
        for (size_t i = 0; kiln_chat_format_get(i, &name, &models); i++) printf("%-18s %s\n", name, models);
        return 0;
    }
    if (!tmpl_path && !format) {
        fprintf(stderr, "kiln parse: give --template FILE (or --tool-format NAME)\n");
        cli_usage("parse", true);
        return CLI_EXIT_USAGE;
    }

    int rc = CLI_EXIT_FAIL;
    char *tmpl = NULL, *tools_text = NULL, *prompt = NULL, *raw = NULL, *msg = NULL;
    json_t *tools = NULL, *kwargs = NULL;
    kiln_chat_parser *parser = NULL;
    size_t tlen = 0, tools_len = 0, raw_len = 0;
    if (tmpl_path && !(tmpl = cli_read_file(tmpl_path, &tlen))) goto out;
    if (tools_path && (!(tools_text = cli_read_file(tools_path, &tools_len)) ||
                       !load_json("--tools", tools_text, tools_len, false, &tools)))
        goto out;
    if (kwargs_text && !load_json("--chat-template-kwargs", kwargs_text, strlen(kwargs_text), true, &kwargs)) {
        rc = CLI_EXIT_USAGE;
        goto out;
    }
    if (tmpl) prompt = render_prompt(tmpl, tlen, tools, kwargs);
    pp.format = format;
    pp.chat_template = tmpl;
    pp.tools = tools_text;
    pp.prompt = prompt;
    if (kiln_chat_parser_new(&pp, &parser) != KILN_OK) {
        fprintf(stderr, "kiln parse: %s\n", kiln_last_error());
        goto out;
    }
    if (!(raw = read_stdin(&raw_len))) goto out;
    size_t step = deltas && chunk > 0 ? (size_t)chunk : raw_len;
    for (size_t off = 0; off < raw_len || off == 0; off += step) {
        size_t n = raw_len - off < step ? raw_len - off : step;
        if (kiln_chat_parser_feed(parser, raw + off, n) != KILN_OK) {
            fprintf(stderr, "kiln parse: %s\n", kiln_last_error());
            goto out;
        }
        kiln_chat_delta d;
        while (deltas && kiln_chat_parser_next(parser, &d)) print_delta(&d);
        if (raw_len == 0) break;
    }
    if (kiln_chat_parser_finish(parser) != KILN_OK) {
        fprintf(stderr, "kiln parse: %s\n", kiln_last_error());
        goto out;
    }
    kiln_chat_delta d;
    while (deltas && kiln_chat_parser_next(parser, &d)) print_delta(&d);
    size_t mlen;
    if (kiln_chat_parser_message(parser, &msg, &mlen) != KILN_OK) {
        fprintf(stderr, "kiln parse: %s\n", kiln_last_error());
        goto out;
    }
    printf("%s\n", msg);
    rc = fflush(stdout) == 0 ? 0 : CLI_EXIT_FAIL;
out:
    kiln_free(msg);
    kiln_chat_parser_free(parser);
    kiln_free(prompt);
    free(raw);
    free(tmpl);
    free(tools_text);
    json_decref(tools);
    json_decref(kwargs);
    return rc;
}
