/*
 * toolcall_util.c - helpers the tool-call parser's parts share: growable buffers, JSON string
 * escaping and decoding, regex matching with "could still match" answers, token readers on the
 * unread input, a streaming JSON value copier, and the conversion of typeless argument values
 * (XML parameters, Python literals) to JSON guided by the declared tools' parameter types.
 *
 * Every reader follows one convention: it looks at the unread input (p->pos onwards) and answers
 * 1 (read, consumed), 0 (not there: the input says otherwise) or -1 (the input so far is too short
 * to say; only while more input may come). That lets each family decide every byte exactly once.
 */
#include "base/json.h"
#include "text/toolcall.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffers ----------------------------------------------------------------------------------- */

_Thread_local unsigned long kn_tcbuf_nomem;

bool kn_tcbuf_add(kn_tcbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n + 1) {
            if (nc > SIZE_MAX / 2) {
                kn_tcbuf_nomem++;
                return false;
            }
            nc *= 2;
        }
        char *np = realloc(b->p, nc);
        if (!np) {
            kn_tcbuf_nomem++;
            return false;
        }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

void kn_tcbuf_free(kn_tcbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

bool kn_tcbuf_add_jstr(kn_tcbuf *b, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char ubuf[8];
        switch (c) {
            case '"': esc = "\\\""; break;
            case '\\': esc = "\\\\"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
            default:
                if (c < 0x20) {
                    snprintf(ubuf, sizeof ubuf, "\\u%04x", c);
                    esc = ubuf;
                }
        }
        if (!esc) continue;
        if (!kn_tcbuf_add(b, s + run, i - run) || !kn_tcbuf_adds(b, esc)) return false;
        run = i + 1;
    }
    return kn_tcbuf_add(b, s + run, n - run);
}

/* Appends code point cp as UTF-8. */
static bool add_utf8(kn_tcbuf *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) u[0] = (char)cp, k = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), k = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), k = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)),
        u[3] = (char)(0x80 | (cp & 63)), k = 4;
    return kn_tcbuf_add(b, u, k);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the body of a JSON string s[n] (no quotes) into out. False when malformed. */
static bool jstr_decode(const char *s, size_t n, kn_tcbuf *out) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            if (!kn_tcbuf_addc(out, s[i])) return false;
            continue;
        }
        if (++i >= n) return false;
        char c = s[i], r = 0;
        switch (c) {
            case '"': r = '"'; break;
            case '\\': r = '\\'; break;
            case '/': r = '/'; break;
            case 'b': r = '\b'; break;
            case 'f': r = '\f'; break;
            case 'n': r = '\n'; break;
            case 'r': r = '\r'; break;
            case 't': r = '\t'; break;
            case 'u': {
                if (i + 4 >= n) return false;
                uint32_t cp = 0;
                for (size_t k = 1; k <= 4; k++) {
                    int h = hexval(s[i + k]);
                    if (h < 0) return false;
                    cp = cp << 4 | (uint32_t)h;
                }
                i += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
                    uint32_t lo = 0;
                    bool ok = true;
                    for (size_t k = 3; ok && k <= 6; k++) {
                        int h = hexval(s[i + k]);
                        if (h < 0) ok = false;
                        else lo = lo << 4 | (uint32_t)h;
                    }
                    if (ok && lo >= 0xDC00 && lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        i += 6;
                    }
                }
                if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
                if (!add_utf8(out, cp)) return false;
                continue;
            }
            default: return false;
        }
        if (!kn_tcbuf_addc(out, r)) return false;
    }
    return true;
}

/* ---- regexes ------------------------------------------------------------------------------------ */

kiln_status kn_tc_compile(kn_tcp *p, const char *pattern, pcre2_code **out) {
    kn_tcbuf pat = {0};
    const char *at = strstr(pattern, "%TOOLS%");
    bool ok = true;
    if (at) {
        ok = kn_tcbuf_add(&pat, pattern, (size_t)(at - pattern)) && kn_tcbuf_adds(&pat, "(?:");
        size_t n = json_array_size(p->tools);
        for (size_t i = 0; ok && i < n; i++) {
            const json_t *t = json_array_get(p->tools, i);
            const json_t *f = json_object_get(t, "function");
            const char *name = json_string_value(json_object_get(f ? f : t, "name"));
            if (!name) continue;
            if (i && !kn_tcbuf_addc(&pat, '|')) ok = false;
            for (const char *c = name; ok && *c; c++) {
                char e[8];
                bool plain =
                    (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_';
                if (plain) ok = kn_tcbuf_addc(&pat, *c);
                else {
                    snprintf(e, sizeof e, "\\x%02x", (unsigned char)*c);
                    ok = kn_tcbuf_adds(&pat, e);
                }
            }
        }
        ok = ok && kn_tcbuf_addc(&pat, ')') && kn_tcbuf_adds(&pat, at + 7);
    } else {
        ok = kn_tcbuf_adds(&pat, pattern);
    }
    if (!ok) {
        kn_tcbuf_free(&pat);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    int err;
    PCRE2_SIZE off;
    *out = pcre2_compile((PCRE2_SPTR)pat.p, pat.n, 0, &err, &off, NULL);
    kiln_status st = KILN_OK;
    if (!*out && err == PCRE2_ERROR_NOMEMORY) {
        st = kn_error(KILN_ERR_NOMEM, "out of memory");
    } else if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        st = kn_error(KILN_ERR_INTERNAL, "tool-call pattern %s: %s at %zu", pattern, (const char *)msg, (size_t)off);
    }
    kn_tcbuf_free(&pat);
    return st;
}

int kn_tc_match(kn_tcp *p, const pcre2_code *re, bool anchored, size_t *ms, size_t *me) {
    if (p->pos >= p->in.n && !p->at_end) { /* nothing to look at yet: anything may follow */
        *ms = *me = p->pos;
        return -1;
    }
    uint32_t opts = anchored ? PCRE2_ANCHORED : 0;
    if (!p->at_end) opts |= PCRE2_PARTIAL_HARD;
    int rc = pcre2_match(re, (PCRE2_SPTR)p->in.p, p->in.n, p->pos, opts, p->md, NULL);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
    if (rc >= 0 || rc == PCRE2_ERROR_PARTIAL) {
        *ms = ov[0];
        *me = ov[1];
        return rc == PCRE2_ERROR_PARTIAL ? -1 : 1;
    }
    return 0;
}

bool kn_tc_group(kn_tcp *p, const pcre2_code *re, const char *name, size_t *s, size_t *e) {
    int g = pcre2_substring_number_from_name(re, (PCRE2_SPTR)name);
    if (g <= 0 || (uint32_t)g >= pcre2_get_ovector_count(p->md)) return false;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
    if (ov[2 * g] == PCRE2_UNSET) return false;
    *s = ov[2 * g];
    *e = ov[2 * g + 1];
    return true;
}

/* ---- token readers ------------------------------------------------------------------------------ */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void kn_tc_skip_ws(kn_tcp *p) {
    while (p->pos < p->in.n && is_ws(p->in.p[p->pos])) p->pos++;
}

int kn_tc_ws_lit(kn_tcp *p, const char *lit) {
    size_t save = p->pos;
    kn_tc_skip_ws(p);
    int r = kn_tc_lit(p, lit);
    if (r != 1) p->pos = save;
    return r;
}

int kn_tc_lit(kn_tcp *p, const char *lit) {
    size_t k = strlen(lit), n = kn_tc_avail(p);
    const char *s = kn_tc_rest(p);
    size_t m = n < k ? n : k;
    if (memcmp(s, lit, m) != 0) return 0;
    if (n < k) return p->at_end ? 0 : -1;
    p->pos += k;
    return 1;
}

size_t kn_tc_hold_len(const char *s, size_t n, const char *lit) {
    size_t k = strlen(lit);
    for (size_t h = (n < k - 1 ? n : k - 1); h > 0; h--)
        if (memcmp(s + n - h, lit, h) == 0) return h;
    return 0;
}

int kn_tc_read_jstring(kn_tcp *p, kn_tcbuf *out, size_t cap) {
    size_t save = p->pos;
    kn_tc_skip_ws(p);
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p);
    if (n == 0) {
        p->pos = save;
        return p->at_end ? 0 : -1;
    }
    if (s[0] != '"') {
        p->pos = save;
        return 0;
    }
    size_t i = 1;
    for (; i < n && s[i] != '"'; i++) {
        if (s[i] == '\\') i++;
        if (i > cap * 6 + 2) break;
    }
    if (i >= n) {
        p->pos = save;
        return p->at_end ? 0 : -1;
    }
    out->n = 0;
    if (out->p) out->p[0] = 0;
    if (s[i] != '"' || !jstr_decode(s + 1, i - 1, out) || out->n > cap) {
        p->pos = save;
        return 0;
    }
    if (!out->p && !kn_tcbuf_add(out, "", 0)) return 0;
    p->pos += i + 1;
    return 1;
}

static bool scalar_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' ||
           c == '.';
}

int kn_tc_read_jscalar(kn_tcp *p, kn_tcbuf *out) {
    size_t save = p->pos;
    kn_tc_skip_ws(p);
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), i = 0;
    while (i < n && i < KN_TC_MAX_ID && scalar_char(s[i])) i++;
    if (i == n && !p->at_end) {
        p->pos = save;
        return -1;
    }
    if (i == 0 || i >= KN_TC_MAX_ID) {
        p->pos = save;
        return 0;
    }
    out->n = 0;
    if (!kn_tcbuf_add(out, s, i)) return 0;
    p->pos += i;
    return 1;
}

/* ---- streaming JSON values ---------------------------------------------------------------------- */

bool kn_tc_sink_add(kn_tcp *p, kn_tc_sink sink, const char *s, size_t n) {
    if (n == 0) return true;
    if (sink.call >= 0) return kn_tc_call_args(p, sink.call, s, n);
    if (sink.buf) {
        if (sink.buf->n + n > KN_TC_MAX_VALUE) {
            kn_tc_fail(p, KILN_ERR_INVALID_ARG, "a tool-call value longer than %u bytes", KN_TC_MAX_VALUE);
            return false;
        }
        if (!kn_tcbuf_add(sink.buf, s, n)) {
            kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
            return false;
        }
        return true;
    }
    if (sink.content) return kn_tc_emit_content(p, s, n);
    return true;
}

int kn_tc_json_value(kn_tcp *p, kn_tc_jv *jv, kn_tc_sink sink) {
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), i = 0, run = 0;
    bool bad = false;
    /* jv->st: 0 before the value, 1 in a top-level scalar, 2 in a container, 3 in a top-level
     * string; jv->stack[0, depth) the open brackets. Bytes are copied in runs between dropped
     * spaces. */
    while (i < n && !bad) {
        char c = s[i];
        if (jv->st == 0) {
            if (is_ws(c)) {
                run = ++i;
                continue;
            }
            if (c == '{' || c == '[') jv->st = 2; /* the container branch opens it */
            else if (c == '"') {
                jv->st = 3;
                jv->in_str = true;
                i++;
                continue;
            } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') jv->st = 1;
            else bad = true;
            continue;
        }
        if (jv->st == 1) {
            if (scalar_char(c)) {
                i++;
                continue;
            }
            p->pos += i;
            return kn_tc_sink_add(p, sink, s + run, i - run) ? 1 : 0;
        }
        if (jv->in_str) {
            i++;
            if (jv->esc) jv->esc = false;
            else if (c == '\\') jv->esc = true;
            else if (c == '"') {
                jv->in_str = false;
                if (jv->st == 3) {
                    p->pos += i;
                    return kn_tc_sink_add(p, sink, s + run, i - run) ? 1 : 0;
                }
            }
            continue;
        }
        /* in a container, outside strings */
        if (is_ws(c)) {
            if (!kn_tc_sink_add(p, sink, s + run, i - run)) return 0;
            run = ++i;
            continue;
        }
        if (c == '{' || c == '[') {
            if (jv->depth >= KN_TC_MAX_DEPTH) {
                bad = true;
                continue;
            }
            jv->stack[jv->depth++] = c;
        } else if (c == '}' || c == ']') {
            if (jv->depth == 0 || jv->stack[jv->depth - 1] != (c == '}' ? '{' : '[')) {
                bad = true;
                continue;
            }
            if (--jv->depth == 0) {
                i++;
                p->pos += i;
                return kn_tc_sink_add(p, sink, s + run, i - run) ? 1 : 0;
            }
        } else if (c == '"') {
            jv->in_str = true;
        } else if (!(scalar_char(c) || c == ',' || c == ':')) {
            bad = true;
            continue;
        }
        i++;
    }
    bool ok = kn_tc_sink_add(p, sink, s + run, i - run);
    p->pos += i;
    if (bad || !ok) return 0;                  /* not JSON from here: the value ends */
    if (p->at_end) return jv->st == 1 ? 1 : 0; /* a scalar ends with the input; anything else is cut */
    return -1;
}

int kn_tc_jstr_stream(kn_tcp *p, kn_tc_jdec *jd, kn_tc_sink sink) {
    if (jd->st == 0) {
        kn_tc_skip_ws(p);
        if (kn_tc_avail(p) == 0) return p->at_end ? 0 : -1;
        if (*kn_tc_rest(p) != '"') return 0;
        p->pos++;
        jd->st = 1;
    }
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), i = 0, run = 0;
    kn_tcbuf tmp = {0};
    int ret = -1;
    while (i < n) {
        char c = s[i];
        if (jd->st == 1) {
            if (c == '"' || c == '\\') {
                if (!kn_tc_sink_add(p, sink, s + run, i - run)) {
                    ret = 0;
                    break;
                }
                i++;
                run = i;
                if (c == '"') {
                    ret = 1;
                    break;
                }
                jd->st = 2;
                continue;
            }
            if (jd->hi) { /* a high surrogate not followed by its pair */
                tmp.n = 0;
                if (!add_utf8(&tmp, 0xFFFD) || !kn_tc_sink_add(p, sink, tmp.p, tmp.n)) {
                    ret = 0;
                    break;
                }
                jd->hi = 0;
            }
            i++;
            continue;
        }
        if (jd->st == 2) {
            const char *r = NULL;
            switch (c) {
                case '"': r = "\""; break;
                case '\\': r = "\\"; break;
                case '/': r = "/"; break;
                case 'b': r = "\b"; break;
                case 'f': r = "\f"; break;
                case 'n': r = "\n"; break;
                case 'r': r = "\r"; break;
                case 't': r = "\t"; break;
                case 'u': jd->st = 3, jd->ucount = 0, jd->u = 0; break;
                default: break;
            }
            if (jd->st == 2 && !r) {
                ret = 0;
                break;
            }
            i++;
            run = i;
            if (r) {
                jd->st = 1;
                if (jd->hi) {
                    tmp.n = 0;
                    if (!add_utf8(&tmp, 0xFFFD) || !kn_tc_sink_add(p, sink, tmp.p, tmp.n)) {
                        ret = 0;
                        break;
                    }
                    jd->hi = 0;
                }
                if (!kn_tc_sink_add(p, sink, r, 1)) {
                    ret = 0;
                    break;
                }
            }
            continue;
        }
        /* \u digits */
        int h = hexval(c);
        if (h < 0) {
            ret = 0;
            break;
        }
        jd->u = jd->u << 4 | (uint32_t)h;
        i++;
        run = i;
        if (++jd->ucount < 4) continue;
        jd->st = 1;
        uint32_t cp = jd->u;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (jd->hi) {
                tmp.n = 0;
                if (!add_utf8(&tmp, 0xFFFD) || !kn_tc_sink_add(p, sink, tmp.p, tmp.n)) {
                    ret = 0;
                    break;
                }
            }
            jd->hi = cp;
            continue;
        }
        if (cp >= 0xDC00 && cp < 0xE000) cp = jd->hi ? 0x10000 + ((jd->hi - 0xD800) << 10) + (cp - 0xDC00) : 0xFFFD;
        else if (jd->hi) {
            tmp.n = 0;
            if (!add_utf8(&tmp, 0xFFFD) || !kn_tc_sink_add(p, sink, tmp.p, tmp.n)) {
                ret = 0;
                break;
            }
        }
        jd->hi = 0;
        tmp.n = 0;
        if (!add_utf8(&tmp, cp) || !kn_tc_sink_add(p, sink, tmp.p, tmp.n)) {
            ret = 0;
            break;
        }
    }
    if (ret == -1 && jd->st == 1 && !kn_tc_sink_add(p, sink, s + run, i - run)) ret = 0;
    kn_tcbuf_free(&tmp);
    p->pos += i;
    if (ret == -1 && p->at_end) ret = 0;
    return ret;
}

/* ---- typeless values ---------------------------------------------------------------------------- */

/* The declared function object named tool (the inner {"name", "parameters"}), or NULL. */
static const json_t *find_tool(const kn_tcp *p, const char *tool, size_t n) {
    for (size_t i = 0; i < json_array_size(p->tools); i++) {
        const json_t *t = json_array_get(p->tools, i);
        const json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        const json_t *nm = json_object_get(f, "name");
        if (json_is_string(nm) && json_string_length(nm) == n && memcmp(json_string_value(nm), tool, n) == 0) return f;
    }
    return NULL;
}

const json_t *kn_tc_deref(const json_t *root, const json_t *s) {
    for (int hop = 0; hop < 8 && json_is_object(s); hop++) {
        const char *ref = json_string_value(json_object_get(s, "$ref"));
        if (!ref || ref[0] != '#' || (ref[1] && ref[1] != '/')) break;
        const json_t *at = root;
        for (const char *q = ref + 1; at && *q == '/';) {
            char tok[256];
            size_t n = 0;
            for (q++; *q && *q != '/'; q++) {
                char c = *q;
                if (c == '~' && (q[1] == '0' || q[1] == '1')) c = *++q == '0' ? '~' : '/';
                if (n + 1 >= sizeof tok) return s; /* a key longer than any schema's */
                tok[n++] = c;
            }
            tok[n] = 0;
            if (json_is_object(at)) at = json_object_get(at, tok);
            else if (json_is_array(at)) {
                char *end;
                unsigned long i = strtoul(tok, &end, 10);
                at = n && !*end ? json_array_get(at, i) : NULL;
            } else at = NULL;
        }
        if (!at || at == s) break;
        s = at;
    }
    return s;
}

json_t *kn_tc_schema_alone(const json_t *root, const json_t *s) {
    json_t *c = json_copy((json_t *)s);
    if (!c || !json_is_object(c)) return c;
    static const char *const containers[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++) {
        json_t *d = json_object_get(root, containers[i]);
        if (d && !json_object_get(c, containers[i]) && json_object_set(c, containers[i], d) != 0) {
            json_decref(c);
            return NULL;
        }
    }
    return c;
}

static bool schema_is_string(const json_t *root, const json_t *s, int depth) {
    s = kn_tc_deref(root, s);
    if (!json_is_object(s) || depth > 4) return false;
    const json_t *t = json_object_get(s, "type");
    if (json_is_string(t)) return strcmp(json_string_value(t), "string") == 0;
    if (json_is_array(t)) {
        for (size_t i = 0; i < json_array_size(t); i++) {
            const char *v = json_string_value(json_array_get(t, i));
            if (v && strcmp(v, "string") == 0) return true;
        }
        return false;
    }
    const json_t *e = json_object_get(s, "enum");
    if (json_is_array(e) && json_array_size(e) > 0) {
        for (size_t i = 0; i < json_array_size(e); i++)
            if (!json_is_string(json_array_get(e, i))) return false;
        return true;
    }
    const json_t *c = json_object_get(s, "const");
    if (c) return json_is_string(c);
    const char *alts[] = {"anyOf", "oneOf", "allOf"};
    for (int a = 0; a < 3; a++) {
        const json_t *l = json_object_get(s, alts[a]);
        for (size_t i = 0; i < json_array_size(l); i++)
            if (schema_is_string(root, json_array_get(l, i), depth + 1)) return true;
    }
    return false;
}

bool kn_tc_schema_is_string(const json_t *root, const json_t *s) { return schema_is_string(root, s, 0); }

bool kn_tc_param_is_string(const kn_tcp *p, const char *tool, const char *key) {
    const json_t *f = find_tool(p, tool, strlen(tool));
    if (!f) return false;
    const json_t *params = json_object_get(f, "parameters");
    return kn_tc_schema_is_string(params, json_object_get(json_object_get(params, "properties"), key));
}

bool kn_tc_args_value(kn_tcp *p, int32_t call, const char *value, size_t n, bool as_string) {
    if (!as_string) {
        size_t a = 0, e = n;
        while (a < e && is_ws(value[a])) a++;
        while (e > a && is_ws(value[e - 1])) e--;
        if (e > a) {
            json_error_t err;
            json_t *j = kn_json_loadb(value + a, e - a, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
            if (!j && kn_json_status(&err, KILN_OK)) kn_tcbuf_nomem++; /* fails the parser's step */
            if (j) {
                /* the value as the model wrote it, spaces outside strings dropped */
                char *d = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
                json_decref(j);
                bool number = (value[a] == '-' || (value[a] >= '0' && value[a] <= '9'));
                /* numbers keep their own spelling (3.14 stays 3.14, not 3.1400000000000001) */
                bool ok = d ? kn_tc_call_args(p, call, number ? value + a : d, number ? e - a : strlen(d)) : false;
                free(d);
                return ok;
            }
        }
    }
    kn_tcbuf s = {0};
    bool ok = kn_tcbuf_addc(&s, '"') && kn_tcbuf_add_jstr(&s, value, n) && kn_tcbuf_addc(&s, '"') &&
              kn_tc_call_args(p, call, s.p, s.n);
    kn_tcbuf_free(&s);
    return ok;
}
