/*
 * chat.c - the chat-template functions of kiln.h: kiln_model_chat_template, kiln_template_render,
 * kiln_chat_apply and kiln_free.
 *
 * kiln_template_render parses the JSON context (jansson) and the template (jinja/parse.c) and
 * renders one with the other (jinja/eval.c). kiln_chat_apply does the same with the model's
 * GGUF template, after completing the chat object the way apply_chat_template callers do:
 * bos_token and eos_token become the text of the model's BOS / EOS tokens (special tokens
 * rendered; "" when the vocabulary has none) unless the object sets them, and
 * add_generation_prompt defaults to true.
 *
 * Plain fallback, for a model whose file has no chat template: the text is the messages'
 * contents joined by "\n\n", with no role markers, no BOS text and no generation prompt, so that
 * a base model simply continues the conversation's text. A content is a string or an array of
 * parts of which those with "type": "text" contribute their "text" (concatenated); a message
 * whose content is missing or null contributes nothing (and no separator). Any other content is
 * KILN_ERR_INVALID_ARG.
 */
#include "base/json.h"
#include "model/model.h"
#include "text/jinja/jinja.h"
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

const char *kiln_model_chat_template(const kiln_model *model) { return model ? model->chat_template : NULL; }

void kiln_free(void *p) { free(p); }

/* Parses a context / chat object. NULL with length 0 is the empty object. */
static kiln_status parse_object(const char *json, size_t len, const char *what, json_t **out) {
    *out = NULL;
    if (!json && len) return kn_error(KILN_ERR_INVALID_ARG, "%s is NULL", what);
    if (!json || len == 0) {
        if (!(*out = json_object())) return kn_error(KILN_ERR_NOMEM, "out of memory");
        return KILN_OK;
    }
    json_error_t err;
    json_t *j = kn_json_loadb(json, len, JSON_ALLOW_NUL, &err);
    if (!j)
        return kn_error(kn_json_status(&err, KILN_ERR_INVALID_ARG), "%s is not valid JSON: line %d, column %d: %s",
                        what, err.line, err.column, err.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return kn_error(KILN_ERR_INVALID_ARG, "%s must be a JSON object", what);
    }
    *out = j;
    return KILN_OK;
}

/* Parses and renders a template with a context object. */
static kiln_status render(const char *tmpl, size_t tmpl_len, const json_t *ctx, char **out, size_t *out_len) {
    kn_jtmpl *t;
    kiln_status st = kn_jinja_parse(tmpl, tmpl_len, &t);
    if (st) return st;
    st = kn_jinja_render(t, ctx, out, out_len);
    kn_jinja_free(t);
    return st;
}

kiln_status kiln_template_render(const char *tmpl, size_t tmpl_len, const char *context_json, size_t context_len,
                                 char **out, size_t *out_len) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_template_render: out is NULL");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!tmpl && tmpl_len) return kn_error(KILN_ERR_INVALID_ARG, "kiln_template_render: template is NULL");
    json_t *ctx;
    kiln_status st = parse_object(context_json, context_len, "the template context", &ctx);
    if (st) return st;
    st = render(tmpl ? tmpl : "", tmpl_len, ctx, out, out_len);
    json_decref(ctx);
    return st;
}

/* Sets key to the text of a special token (render_special) unless the object has it. */
static kiln_status set_token_text(json_t *obj, const char *key, const kiln_model *m, int32_t id) {
    if (json_object_get(obj, key)) return KILN_OK;
    char buf[KN_TOK_MAX_PIECE];
    size_t n = 0;
    if (id >= 0) n = kn_token_piece(m->tok, id, true, buf, sizeof buf);
    if (n > sizeof buf) n = 0;
    json_t *s = json_stringn(buf, n);
    if (!s) s = json_string(""); /* a piece that is not valid UTF-8 */
    if (!s || json_object_set_new(obj, key, s)) return kn_error(KILN_ERR_NOMEM, "out of memory");
    return KILN_OK;
}

/* Appends the text of one message's content for the plain fallback; *any says whether it had text. */
static kiln_status append_content(const json_t *content, size_t index, char **buf, size_t *len, size_t *cap,
                                  bool *any) {
    *any = false;
    if (!content || json_is_null(content)) return KILN_OK;
    size_t n_items = json_is_array(content) ? json_array_size(content) : 1;
    if (!json_is_string(content) && !json_is_array(content))
        return kn_error(KILN_ERR_INVALID_ARG, "message %zu: content must be a string or an array of text parts", index);
    for (size_t i = 0; i < n_items; i++) {
        const json_t *s = content;
        if (json_is_array(content)) {
            const json_t *part = json_array_get(content, i);
            const json_t *type = json_object_get(part, "type");
            if (!json_is_object(part))
                return kn_error(KILN_ERR_INVALID_ARG, "message %zu: content part %zu is not an object", index, i);
            if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0) continue;
            s = json_object_get(part, "text");
            if (!json_is_string(s))
                return kn_error(KILN_ERR_INVALID_ARG, "message %zu: text part %zu has no \"text\" string", index, i);
        }
        const char *text = json_string_value(s);
        size_t k = json_string_length(s);
        if (*len + k + 1 > *cap) {
            size_t nc = KN_MAX(*cap * 2, *len + k + 1);
            char *nb = realloc(*buf, nc);
            if (!nb) return kn_error(KILN_ERR_NOMEM, "out of memory");
            *buf = nb;
            *cap = nc;
        }
        memcpy(*buf + *len, text, k);
        *len += k;
        *any = true;
    }
    return KILN_OK;
}

/* The plain fallback of a model without a template (see the file comment). */
static kiln_status plain_fallback(const json_t *messages, char **out, size_t *out_len) {
    size_t len = 0, cap = 256;
    char *buf = malloc(cap);
    if (!buf) return kn_error(KILN_ERR_NOMEM, "out of memory");
    bool first = true;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *msg = json_array_get(messages, i);
        if (!json_is_object(msg)) {
            free(buf);
            return kn_error(KILN_ERR_INVALID_ARG, "message %zu is not an object", i);
        }
        size_t mark = len;
        if (!first) {
            if (len + 3 > cap) {
                char *nb = realloc(buf, cap * 2);
                if (!nb) {
                    free(buf);
                    return kn_error(KILN_ERR_NOMEM, "out of memory");
                }
                buf = nb;
                cap *= 2;
            }
            memcpy(buf + len, "\n\n", 2);
            len += 2;
        }
        bool any;
        kiln_status st = append_content(json_object_get(msg, "content"), i, &buf, &len, &cap, &any);
        if (st) {
            free(buf);
            return st;
        }
        if (!any) len = mark;
        else first = false;
    }
    buf[len] = 0;
    *out = buf;
    if (out_len) *out_len = len;
    return KILN_OK;
}

/* kiln_chat_apply after its argument checks, without the error recording. */
static kiln_status chat_apply(const kiln_model *model, const char *chat_json, size_t len, char **out, size_t *out_len) {
    json_t *chat;
    kiln_status st = parse_object(chat_json, len, "the chat", &chat);
    if (st) return st;
    const json_t *messages = json_object_get(chat, "messages");
    if (!json_is_array(messages)) {
        json_decref(chat);
        return kn_error(KILN_ERR_INVALID_ARG, "the chat needs a \"messages\" array");
    }
    if (!model->chat_template) {
        st = plain_fallback(messages, out, out_len);
        json_decref(chat);
        return st;
    }
    if (!json_object_get(chat, "add_generation_prompt") &&
        json_object_set_new(chat, "add_generation_prompt", json_true()))
        st = kn_error(KILN_ERR_NOMEM, "out of memory");
    if (!st) st = set_token_text(chat, "bos_token", model, kn_tok_bos(model->tok));
    if (!st) st = set_token_text(chat, "eos_token", model, kn_tok_eos(model->tok));
    if (!st) st = render(model->chat_template, strlen(model->chat_template), chat, out, out_len);
    json_decref(chat);
    return st;
}

kiln_status kiln_chat_apply(const kiln_model *model, const char *chat_json, size_t len, char **out, size_t *out_len) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_chat_apply: out is NULL");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!model) return kn_error(KILN_ERR_INVALID_ARG, "kiln_chat_apply: model is NULL");
    return kn_model_fail(model, chat_apply(model, chat_json, len, out, out_len));
}
