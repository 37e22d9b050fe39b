/*
 * toolcall_py.c - tool calls written as expressions rather than JSON:
 *   LFM2 / LFM2.5:      [get_weather(city="Paris", days=3), other()]  (in <|tool_call_start|> ...
 *                       <|tool_call_end|>, or bare at the start of the reply)
 *   Llama 3.x built-ins: <|python_tag|>brave_search.call(query="...")
 *   Gemma 4:            <|tool_call>call:get_time{city:<|"|>London<|"|>,n:3}<tool_call|>
 *
 * The arguments are built as JSON. A call is released when its name is read; each keyword
 * argument writes its key at once and its value when the value is complete (Python literals:
 * strings in either quote, True / False / None, numbers, lists, dicts and tuples). Gemma's
 * arguments are read whole, then converted (unquoted keys, <|"|> string quotes).
 */
#include "base/json.h"
#include "text/toolcall.h"

#include <stdio.h>
#include <string.h>

enum { P_CALL = 1, P_ARG, P_ARGSEP, P_VAL, P_SEP, P_AFTER, G_ARGS, G_AFTER };

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Reads an identifier at p->pos (after spaces) into out: 1, 0 (none), -1 (it may go on). */
static int read_ident(kn_tcp *p, kn_tcbuf *out) {
    size_t save = p->pos;
    kn_tc_skip_ws(p);
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), i = 0;
    while (i < n && i <= KN_TC_MAX_NAME && ident_char(s[i])) i++;
    if ((i == n && !p->at_end) || i == 0 || i > KN_TC_MAX_NAME) {
        p->pos = save;
        return i == n && !p->at_end ? -1 : 0;
    }
    out->n = 0;
    if (!kn_tcbuf_add(out, s, i)) return 0;
    p->pos += i;
    return 1;
}

/* ---- Python literals ------------------------------------------------------------------------------ */

/* Converts a Python string literal body s[n] (between quotes) to the body of a JSON string. */
static bool py_str(const char *s, size_t n, kn_tcbuf *out) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\\' || i + 1 >= n) {
            if (!kn_tcbuf_add_jstr(out, &c, 1)) return false;
            continue;
        }
        char e = s[++i], r;
        switch (e) {
            case 'n': r = '\n'; break;
            case 't': r = '\t'; break;
            case 'r': r = '\r'; break;
            case '0': r = '\0'; break;
            case '\\': r = '\\'; break;
            case '\'': r = '\''; break;
            case '"': r = '"'; break;
            case 'x':
            case 'u':
                /* \xHH and \uXXXX are JSON's \u escapes once padded */
                if (i + (e == 'x' ? 2u : 4u) < n + 0u) {
                    char u[8];
                    snprintf(u, sizeof u, "\\u%s%.*s", e == 'x' ? "00" : "", e == 'x' ? 2 : 4, s + i + 1);
                    if (!kn_tcbuf_adds(out, u)) return false;
                    i += e == 'x' ? 2 : 4;
                    continue;
                }
                /* fall through */
            default:
                if (!kn_tcbuf_add_jstr(out, "\\", 1) || !kn_tcbuf_add_jstr(out, &e, 1)) return false;
                continue;
        }
        if (!kn_tcbuf_add_jstr(out, &r, 1)) return false;
    }
    return true;
}

/* Converts a Python literal s[n] to JSON text in out (tuples become arrays). False when it is not
 * one; the result is then checked by the caller. */
static bool py_to_json(const char *s, size_t n, kn_tcbuf *out) {
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (is_space(c)) {
            i++;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) j += s[j] == '\\' ? 2 : 1;
            if (j >= n) return false;
            if (!kn_tcbuf_addc(out, '"') || !py_str(s + i + 1, j - i - 1, out) || !kn_tcbuf_addc(out, '"'))
                return false;
            i = j + 1;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i;
            while (j < n && ident_char(s[j])) j++;
            const char *w = s + i;
            size_t k = j - i;
            const char *v = k == 4 && !memcmp(w, "True", 4)    ? "true"
                            : k == 5 && !memcmp(w, "False", 5) ? "false"
                            : k == 4 && !memcmp(w, "None", 4)  ? "null"
                            : k == 4 && !memcmp(w, "true", 4)  ? "true"
                            : k == 5 && !memcmp(w, "false", 5) ? "false"
                            : k == 4 && !memcmp(w, "null", 4)  ? "null"
                                                               : NULL;
            if (!v || !kn_tcbuf_adds(out, v)) return false;
            i = j;
            continue;
        }
        char o = c == '(' ? '[' : c == ')' ? ']' : c;
        if (!kn_tcbuf_addc(out, o)) return false;
        i++;
    }
    return true;
}

/* Writes the value s[n] of parameter key of the current call as JSON. */
static bool py_value(kn_tcp *p, const char *s, size_t n) {
    kn_tc_block *b = &p->blk;
    while (n && is_space(s[n - 1])) n--;
    while (n && is_space(*s)) s++, n--;
    bool quoted = n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0];
    if (!quoted && kn_tc_param_is_string(p, p->calls[b->call].name.p, b->key.p))
        return kn_tc_args_value(p, b->call, s, n, true);
    kn_tcbuf j = {0};
    bool ok = py_to_json(s, n, &j) && j.n;
    if (ok) {
        json_error_t err;
        json_t *v = kn_json_loadb(j.p, j.n, JSON_DECODE_ANY, &err);
        if (!v && kn_json_status(&err, KILN_OK)) kn_tcbuf_nomem++; /* fails the parser's step */
        ok = v != NULL;
        json_decref(v);
    }
    ok = ok ? kn_tc_call_args(p, b->call, j.p, j.n) : kn_tc_args_value(p, b->call, s, n, true);
    kn_tcbuf_free(&j);
    return ok;
}

/* Collects a Python value up to a ',' or ')' outside brackets and strings. 1: complete (the
 * delimiter stays), -1: more needed, 0: malformed. */
static int collect_py(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), i = 0;
    int ret = -1;
    for (; i < n; i++) {
        char c = s[i];
        if (b->quote) {
            if (b->jv.esc) b->jv.esc = false;
            else if (c == '\\') b->jv.esc = true;
            else if (c == b->quote) b->quote = 0;
            continue;
        }
        if (c == '\'' || c == '"') b->quote = c;
        else if (c == '(' || c == '[' || c == '{') {
            if (++b->jv.depth > KN_TC_MAX_DEPTH) {
                ret = 0;
                break;
            }
        } else if (c == ')' || c == ']' || c == '}') {
            if (b->jv.depth == 0) {
                if (c != ')') ret = 0;
                else ret = 1;
                break;
            }
            b->jv.depth--;
        } else if (c == ',' && b->jv.depth == 0) {
            ret = 1;
            break;
        }
    }
    if (!kn_tc_sink_add(p, (kn_tc_sink){-1, &b->val, false}, s, i)) return 0;
    p->pos += i;
    if (ret < 0 && p->at_end) ret = b->quote || b->jv.depth ? 0 : 1;
    return ret;
}

static void py_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) {
    size_t s, e;
    if (kn_tc_group(p, re, "body", &s, &e)) p->pos = s;
    const kn_tc_opener *op = &p->fmt->open[p->blk.opener];
    if (op->close) snprintf(p->blk.close, sizeof p->blk.close, "%s", op->close);
    p->blk.st = P_CALL;
}

static kn_tc_step py_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    bool list = b->kind == KN_P_LIST;
    int r;
    switch (b->st) {
        case P_CALL: {
            kn_tc_skip_ws(p);
            if (!kn_tc_avail(p)) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            if (list && *kn_tc_rest(p) == ']') {
                p->pos++;
                b->st = P_AFTER;
                return KN_TC_MORE;
            }
            size_t save = p->pos;
            if ((r = read_ident(p, &b->key)) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            kn_tc_skip_ws(p);
            r = kn_tc_lit(p, list ? "(" : ".call(");
            if (r <= 0) {
                p->pos = save;
                return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            }
            b->call = kn_tc_call_begin(p, b->key.p, b->key.n, NULL, 0, false);
            if (b->call < 0 || !kn_tc_call_args(p, b->call, "{", 1)) return kn_tc_block_end(p);
            b->nparams = 0;
            b->st = P_ARG;
            return KN_TC_MORE;
        }
        case P_ARG:
        case P_ARGSEP: {
            kn_tc_skip_ws(p);
            if (!kn_tc_avail(p)) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            char c = *kn_tc_rest(p);
            if (c == ')') {
                p->pos++;
                kn_tc_call_args(p, b->call, "}", 1);
                kn_tc_call_end(p, b->call);
                b->call = -1;
                b->st = list ? P_SEP : P_AFTER;
                return KN_TC_MORE;
            }
            if (b->st == P_ARGSEP) {
                if (c != ',') return kn_tc_block_end(p);
                p->pos++;
                b->st = P_ARG;
                return KN_TC_MORE;
            }
            size_t save = p->pos;
            if ((r = read_ident(p, &b->key)) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            kn_tc_skip_ws(p);
            if ((r = kn_tc_lit(p, "=")) <= 0) {
                p->pos = save;
                return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            }
            b->val.n = 0;
            bool ok = kn_tcbuf_add(&b->val, b->nparams ? ",\"" : "\"", b->nparams ? 2 : 1) &&
                      kn_tcbuf_add_jstr(&b->val, b->key.p, b->key.n) && kn_tcbuf_add(&b->val, "\":", 2) &&
                      kn_tc_call_args(p, b->call, b->val.p, b->val.n);
            if (!ok) return kn_tc_block_end(p);
            b->nparams++;
            b->val.n = 0;
            b->quote = 0;
            memset(&b->jv, 0, sizeof b->jv);
            b->st = P_VAL;
            return KN_TC_MORE;
        }
        case P_VAL:
            if ((r = collect_py(p)) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            if (!py_value(p, b->val.p, b->val.n)) return kn_tc_block_end(p);
            b->st = P_ARGSEP;
            return KN_TC_MORE;
        case P_SEP: {
            kn_tc_skip_ws(p);
            if (!kn_tc_avail(p)) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            char c = *kn_tc_rest(p);
            if (c != ',' && c != ']') return kn_tc_block_end(p);
            p->pos++;
            b->st = c == ',' ? P_CALL : P_AFTER;
            return KN_TC_MORE;
        }
        case P_AFTER:
        case G_AFTER: {
            if (b->close[0] && kn_tc_ws_lit(p, b->close) < 0) return KN_TC_NEED;
            return kn_tc_block_end(p);
        }
    }
    return kn_tc_block_end(p);
}

const kn_tc_family kn_tc_fam_py = {"python", py_begin, py_step};

/* ---- Gemma 4 ------------------------------------------------------------------------------------ */

#define GQ "<|\"|>" /* Gemma's string quote */

/* Converts Gemma's argument syntax s[n] ({key:value,...} with <|"|> quotes) to JSON. */
static bool gemma_to_json(const char *s, size_t n, kn_tcbuf *out) {
    size_t q = strlen(GQ);
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (n - i >= q && memcmp(s + i, GQ, q) == 0) {
            const char *e = memmem(s + i + q, n - i - q, GQ, q);
            size_t end = e ? (size_t)(e - s) : n;
            if (!kn_tcbuf_addc(out, '"') || !kn_tcbuf_add_jstr(out, s + i + q, end - i - q) || !kn_tcbuf_addc(out, '"'))
                return false;
            i = e ? end + q : n;
            continue;
        }
        if (is_space(c)) {
            i++;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i;
            while (j < n && (ident_char(s[j]) || s[j] == '.')) j++;
            size_t k = j;
            while (k < n && is_space(s[k])) k++;
            bool key = k < n && s[k] == ':';
            bool lit = !key && ((j - i == 4 && (!memcmp(s + i, "true", 4) || !memcmp(s + i, "null", 4))) ||
                                (j - i == 5 && !memcmp(s + i, "false", 5)));
            if (lit) {
                if (!kn_tcbuf_add(out, s + i, j - i)) return false;
            } else if (!kn_tcbuf_addc(out, '"') || !kn_tcbuf_add_jstr(out, s + i, j - i) || !kn_tcbuf_addc(out, '"')) {
                return false;
            }
            i = j;
            continue;
        }
        if (!kn_tcbuf_addc(out, c)) return false;
        i++;
    }
    return true;
}

static void gemma_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) {
    kn_tc_block *b = &p->blk;
    size_t s, e;
    if (kn_tc_group(p, re, "body", &s, &e)) p->pos = s;
    snprintf(b->close, sizeof b->close, "<tool_call|>");
    if (!kn_tc_group(p, re, "name", &s, &e)) return;
    b->call = kn_tc_call_begin(p, p->in.p + s, e - s, NULL, 0, false);
    b->st = b->call >= 0 ? G_ARGS : 0;
}

/* Collects the arguments up to their closing brace. */
static kn_tc_step gemma_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    if (b->st != G_ARGS) return py_step(p);
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), i = 0, q = strlen(GQ);
    bool done = false, need = false;
    while (i < n && !done) {
        if (s[i] == '<') {
            size_t m = n - i < q ? n - i : q;
            if (memcmp(s + i, GQ, m) == 0) {
                if (m < q) {
                    need = true;
                    break;
                }
                b->flag = !b->flag;
                i += q;
                continue;
            }
        }
        if (!b->flag) {
            if (s[i] == '{' || s[i] == '[') b->jv.depth++;
            else if ((s[i] == '}' || s[i] == ']') && --b->jv.depth <= 0) done = true;
        }
        i++;
    }
    if (!kn_tc_sink_add(p, (kn_tc_sink){-1, &b->val, false}, s, i)) return kn_tc_block_end(p);
    p->pos += i;
    if (!done && (need || !p->at_end)) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
    kn_tcbuf j = {0};
    bool ok = gemma_to_json(b->val.p, b->val.n, &j) && kn_tc_call_args(p, b->call, j.p, j.n);
    kn_tcbuf_free(&j);
    if (!ok) return kn_tc_block_end(p);
    kn_tc_call_end(p, b->call);
    b->call = -1;
    b->st = G_AFTER;
    return KN_TC_MORE;
}

const kn_tc_family kn_tc_fam_gemma = {"gemma", gemma_begin, gemma_step};
