/*
 * toolcall.c - the chat parser's handle and public API (kiln_chat_parser_* in kiln.h): parameters
 * and tools, input, the message being built (content, reasoning, calls), the queue of deltas the
 * caller takes, call ids, and the message as OpenAI JSON.
 *
 * Output goes through the kn_tc_emit_* / kn_tc_call_* functions below, which append to the message
 * and record a delta event. Events are coalesced (consecutive text of one kind is one delta) and
 * refer to ranges of the message's buffers, so a delta costs no copy. A call becomes visible to
 * the delta queue once it is "released": its name is known and its id is final (formats that
 * write the id after the arguments keep the call back until the id or the call's end); at release
 * one event covers its first delta and everything it has so far.
 */
#include "text/toolcall.h"
#include "base/json.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct kiln_chat_parser {
    kn_tcp p;
};

/* ---- events ------------------------------------------------------------------------------------ */

static bool push_event(kn_tcp *p, kn_tc_evkind kind, int32_t call, bool first, size_t off, size_t len) {
    if (len == 0 && !first) return true;
    if (p->n_ev > p->ev_head && !first) {
        kn_tc_event *last = &p->ev[p->n_ev - 1];
        if (last->kind == kind && last->call == call && last->off + last->len == off) {
            last->len += len;
            return true;
        }
    }
    if (p->ev_head > 0 && p->ev_head == p->n_ev) p->ev_head = p->n_ev = 0; /* all taken: reuse */
    if (p->n_ev == p->cap_ev) {
        size_t nc = p->cap_ev ? p->cap_ev * 2 : 32;
        kn_tc_event *ne = realloc(p->ev, nc * sizeof *ne);
        if (!ne) return false;
        p->ev = ne;
        p->cap_ev = nc;
    }
    p->ev[p->n_ev++] = (kn_tc_event){(uint8_t)kind, first, call, off, len};
    return true;
}

kn_tc_step kn_tc_fail(kn_tcp *p, kiln_status st, const char *fmt, ...) {
    if (!p->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->errmsg, sizeof p->errmsg, fmt, ap);
        va_end(ap);
        p->fail_st = st;
        p->failed = true;
    }
    return KN_TC_DONE;
}

static bool oom(kn_tcp *p) {
    kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
    return false;
}

/* ---- output ------------------------------------------------------------------------------------ */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool kn_tc_emit_content(kn_tcp *p, const char *s, size_t n) {
    if (p->content.n == 0)
        while (n && is_ws(*s)) s++, n--;
    if (!n) return true;
    size_t off = p->content.n;
    if (!kn_tcbuf_add(&p->content, s, n) || !push_event(p, KN_EV_CONTENT, -1, false, off, n)) return oom(p);
    return true;
}

/* Appends reasoning text as released. */
static bool add_reasoning(kn_tcp *p, const char *s, size_t n) {
    size_t off = p->reasoning.n;
    if (!kn_tcbuf_add(&p->reasoning, s, n) || !push_event(p, KN_EV_REASONING, -1, false, off, n)) return oom(p);
    return true;
}

bool kn_tc_emit_reasoning(kn_tcp *p, const char *s, size_t n) {
    if (p->rfmt == KILN_REASONING_NONE) {
        /* the opening marker of a thinking block the prompt opened, before its first text */
        if (p->think_prefix.n) {
            size_t off = p->content.n, k = p->think_prefix.n;
            p->think_prefix.n = 0;
            if (!kn_tcbuf_add(&p->content, p->think_prefix.p, k) || !push_event(p, KN_EV_CONTENT, -1, false, off, k))
                return oom(p);
        }
        return kn_tc_emit_content(p, s, n);
    }
    if (!p->think_started) {
        while (n && is_ws(*s)) s++, n--;
        if (!n) return true;
        if (p->reasoning.n && !add_reasoning(p, "\n\n", 2)) return false;
        p->think_started = true;
    }
    size_t body = n;
    while (body && is_ws(s[body - 1])) body--;
    if (body) {
        if (p->think_ws.n && !add_reasoning(p, p->think_ws.p, p->think_ws.n)) return false;
        p->think_ws.n = 0;
        if (!add_reasoning(p, s, body)) return false;
    }
    if (body < n && !kn_tcbuf_add(&p->think_ws, s + body, n - body)) return oom(p);
    return true;
}

/* ---- calls ------------------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A generated id for call i: "call_" and 24 alphanumerics, or 9 alphanumerics for formats whose
 * templates require that (Mistral). */
static bool make_id(kn_tcp *p, int32_t i, kn_tcbuf *out) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t x = p->id_seed ^ ((uint64_t)(uint32_t)i * 0xD1B54A32D192ED03ull);
    bool short_id = p->fmt->flags & KN_FMT_ID9;
    char buf[32];
    size_t k = 0;
    if (!short_id) memcpy(buf, "call_", 5), k = 5;
    uint64_t r = splitmix64(&x);
    for (int j = 0; j < (short_id ? 9 : 24); j++) {
        if (j % 10 == 9) r = splitmix64(&x);
        buf[k++] = al[r % 62];
        r /= 62;
    }
    out->n = 0;
    return kn_tcbuf_add(out, buf, k);
}

/* Makes the call's first delta available, with everything it has so far. */
static bool release(kn_tcp *p, int32_t i) {
    kn_tc_call *c = &p->calls[i];
    if (c->released) return true;
    if (c->id.n == 0 && !make_id(p, i, &c->id)) return oom(p);
    c->released = true;
    return push_event(p, KN_EV_CALL, i, true, 0, c->args.n) || oom(p);
}

int32_t kn_tc_call_begin(kn_tcp *p, const char *name, size_t nn, const char *id, size_t ni, bool id_later) {
    if (nn == 0) return -1;
    for (size_t k = 0; k < nn; k++)
        if ((unsigned char)name[k] < 0x20) return -1; /* not a function name: no call */
    for (size_t k = 0; k < ni; k++)
        if ((unsigned char)id[k] < 0x20) ni = 0; /* not an id: one is made */
    if (p->n_calls >= KN_TC_MAX_CALLS) {
        kn_tc_fail(p, KILN_ERR_INVALID_ARG, "more than %d tool calls", KN_TC_MAX_CALLS);
        return -1;
    }
    if (p->n_calls == p->cap_calls) {
        size_t nc = p->cap_calls ? p->cap_calls * 2 : 4;
        kn_tc_call *n = realloc(p->calls, nc * sizeof *n);
        if (!n) return oom(p), -1;
        p->calls = n;
        p->cap_calls = nc;
    }
    int32_t i = (int32_t)p->n_calls++;
    kn_tc_call *c = &p->calls[i];
    memset(c, 0, sizeof *c);
    if (nn > KN_TC_MAX_NAME) nn = KN_TC_MAX_NAME;
    if (ni > KN_TC_MAX_ID) ni = KN_TC_MAX_ID;
    if (!kn_tcbuf_add(&c->name, name, nn) || !kn_tcbuf_add(&c->id, id ? id : "", id ? ni : 0) ||
        !kn_tcbuf_add(&c->args, "", 0))
        return oom(p), -1;
    if ((ni > 0 || !id_later) && !release(p, i)) return -1;
    return i;
}

bool kn_tc_call_id(kn_tcp *p, int32_t i, const char *id, size_t ni) {
    if (i < 0) return false;
    kn_tc_call *c = &p->calls[i];
    if (c->released) return true; /* the id went out with the first delta: it never changes */
    if (ni > KN_TC_MAX_ID) ni = KN_TC_MAX_ID;
    for (size_t k = 0; k < ni; k++)
        if ((unsigned char)id[k] < 0x20) ni = 0; /* not an id: one is made */
    c->id.n = 0;
    if (!kn_tcbuf_add(&c->id, id, ni)) return oom(p);
    return release(p, i);
}

bool kn_tc_call_args(kn_tcp *p, int32_t i, const char *s, size_t n) {
    if (i < 0 || n == 0) return i >= 0;
    kn_tc_call *c = &p->calls[i];
    size_t off = c->args.n;
    if (!kn_tcbuf_add(&c->args, s, n)) return oom(p);
    return !c->released || push_event(p, KN_EV_CALL, i, false, off, n) || oom(p);
}

void kn_tc_call_end(kn_tcp *p, int32_t i) {
    if (i < 0 || (size_t)i >= p->n_calls || p->calls[i].closed) return;
    if (p->calls[i].args.n == 0) kn_tc_call_args(p, i, "{}", 2); /* a call without arguments */
    p->calls[i].closed = true;
    release(p, i);
}

/* ---- public API --------------------------------------------------------------------------------- */

kiln_chat_parser_params kiln_chat_parser_default_params(void) {
    kiln_chat_parser_params pp;
    memset(&pp, 0, sizeof pp);
    pp.reasoning = KILN_REASONING_AUTO;
    pp.parse_tool_calls = true;
    return pp;
}

/* A random seed for ids (the OS's random source, else the clock and an address). */
static uint64_t random_seed(void) {
    uint64_t s = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &s, sizeof s) != (ssize_t)sizeof s) s = 0;
        close(fd);
    }
    if (!s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)&s;
    }
    return s ? s : 1;
}

/* Checks the tools array: objects with a function name (the OpenAI wrapper or the inner object). */
static kiln_status check_tools(const json_t *tools) {
    if (!json_is_array(tools)) return kn_error(KILN_ERR_INVALID_ARG, "tools must be a JSON array");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const json_t *f = json_object_get(t, "function");
        if (!json_is_object(t)) return kn_error(KILN_ERR_INVALID_ARG, "tools[%zu] is not an object", i);
        if (!f) f = t;
        if (!json_is_string(json_object_get(f, "name")) || json_string_length(json_object_get(f, "name")) == 0)
            return kn_error(KILN_ERR_INVALID_ARG, "tools[%zu] has no function name", i);
        const json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_object(params) && !json_is_boolean(params))
            return kn_error(KILN_ERR_INVALID_ARG, "tools[%zu].function.parameters is not a schema", i);
    }
    return KILN_OK;
}

kiln_status kiln_chat_parser_new(const kiln_chat_parser_params *params, kiln_chat_parser **out) {
    kn_error_clear();
    if (!out) return kn_error(KILN_ERR_INVALID_ARG, "kiln_chat_parser_new: out is NULL");
    *out = NULL;
    kiln_chat_parser_params pp = params ? *params : kiln_chat_parser_default_params();
    const kn_tc_format *f;
    if (!pp.format || !*pp.format || strcmp(pp.format, "auto") == 0) f = kn_tc_format_detect(pp.chat_template);
    else if (!(f = kn_tc_format_find(pp.format)))
        return kn_error(KILN_ERR_INVALID_ARG, "unknown tool-call format '%s' (kiln parse --list-formats names them)",
                        pp.format);
    if ((unsigned)pp.reasoning > KILN_REASONING_DEEPSEEK)
        return kn_error(KILN_ERR_INVALID_ARG, "unknown reasoning format %d", (int)pp.reasoning);
    json_t *tools = NULL;
    if (pp.tools) {
        json_error_t err;
        tools = kn_json_loads(pp.tools, 0, &err);
        if (!tools)
            return kn_error(kn_json_status(&err, KILN_ERR_INVALID_ARG),
                            "tools are not valid JSON: line %d, column %d: %s", err.line, err.column, err.text);
        kiln_status st = check_tools(tools);
        if (st) {
            json_decref(tools);
            return st;
        }
    }
    kiln_chat_parser *cp = calloc(1, sizeof *cp);
    if (!cp) {
        json_decref(tools);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    kn_tcp *p = &cp->p;
    p->fmt = f;
    p->rfmt = pp.reasoning;
    p->parse_calls = pp.parse_tool_calls;
    p->tools = tools;
    p->id_seed = pp.id_seed ? pp.id_seed : random_seed();
    p->blk.call = -1;
    if (!kn_tcbuf_add(&p->in, "", 0) || !kn_tcbuf_add(&p->content, "", 0) || !kn_tcbuf_add(&p->reasoning, "", 0)) {
        kiln_chat_parser_free(cp);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    kiln_status st = kn_tc_scan_init(p, pp.prompt, pp.thinking_open);
    if (st) {
        kiln_chat_parser_free(cp);
        return st;
    }
    *out = cp;
    return KILN_OK;
}

void kiln_chat_parser_free(kiln_chat_parser *cp) {
    if (!cp) return;
    kn_tcp *p = &cp->p;
    kn_tc_scan_free(p);
    json_decref(p->tools);
    kn_tcbuf_free(&p->in);
    kn_tcbuf_free(&p->content);
    kn_tcbuf_free(&p->reasoning);
    kn_tcbuf_free(&p->think_ws);
    kn_tcbuf_free(&p->think_prefix);
    kn_tcbuf_free(&p->blk.key);
    kn_tcbuf_free(&p->blk.val);
    kn_tcbuf_free(&p->blk.aux);
    kn_tcbuf_free(&p->blk.pend);
    for (size_t i = 0; i < p->n_calls; i++) {
        kn_tcbuf_free(&p->calls[i].id);
        kn_tcbuf_free(&p->calls[i].name);
        kn_tcbuf_free(&p->calls[i].args);
    }
    free(p->calls);
    free(p->ev);
    kn_tcbuf_free(&p->delta_id);
    kn_tcbuf_free(&p->delta_name);
    free(cp);
}

const char *kiln_chat_parser_format(const kiln_chat_parser *cp) { return cp ? cp->p.fmt->name : ""; }

const char *kiln_chat_parser_last_error(const kiln_chat_parser *cp) { return cp ? cp->p.errmsg : ""; }

/* Records a failure of a public call in the parser and the thread. */
static kiln_status fail_call(kn_tcp *p, kiln_status st, const char *msg) {
    snprintf(p->errmsg, sizeof p->errmsg, "%s", msg);
    return kn_error(st, "%s", msg);
}

/* The length of the valid UTF-8 sequence at s[0, n): 1..4, 0 when s[0] cannot start one there
 * (invalid, or cut short: *short_ says the bytes so far are a valid beginning). */
static size_t utf8_seq(const unsigned char *s, size_t n, bool *short_) {
    *short_ = false;
    unsigned char c = s[0];
    size_t k;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    for (size_t i = 1; i < k; i++) {
        if (i >= n) {
            *short_ = true;
            return 0;
        }
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return 0;
    }
    return k;
}

/* Appends s[n] to b as UTF-8: a byte that does not begin a valid character becomes U+FFFD. With
 * more_follows, a valid beginning of a character cut off at the end is not appended: its length
 * goes to *kept (it waits for the next piece). */
static bool add_clean_utf8(kn_tcbuf *b, const char *s, size_t n, bool more_follows, size_t *kept) {
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0, i = 0;
    *kept = 0;
    while (i < n) {
        bool cut;
        size_t k = utf8_seq(u + i, n - i, &cut);
        if (k) {
            i += k;
            continue;
        }
        if (cut && more_follows) {
            *kept = n - i;
            break;
        }
        if (!kn_tcbuf_add(b, s + run, i - run) || !kn_tcbuf_adds(b, "\xEF\xBF\xBD")) return false;
        run = ++i;
    }
    return kn_tcbuf_add(b, s + run, i - run);
}

kiln_status kiln_chat_parser_feed(kiln_chat_parser *cp, const char *text, size_t len) {
    kn_error_clear();
    if (!cp) return kn_error(KILN_ERR_INVALID_ARG, "kiln_chat_parser_feed: parser is NULL");
    kn_tcp *p = &cp->p;
    if (!text && len) return fail_call(p, KILN_ERR_INVALID_ARG, "kiln_chat_parser_feed: text is NULL");
    if (p->at_end) return fail_call(p, KILN_ERR_INVALID_ARG, "kiln_chat_parser_feed: the parser was finished");
    if (p->failed) return kn_error(p->fail_st, "%s", p->errmsg);
    if (len > KN_TC_MAX_INPUT - p->in.n) {
        kn_tc_fail(p, KILN_ERR_INVALID_ARG, "the reply is longer than the parser's limit (64 MiB)");
        return kn_error(p->fail_st, "%s", p->errmsg);
    }
    /* the scanner sees whole, valid UTF-8 characters: a character cut at the end waits in utf8 for
     * the next piece, and bytes that are not UTF-8 are read as U+FFFD */
    size_t kept;
    bool ok;
    if (p->n_utf8) {
        kn_tcbuf joined = {0};
        ok = kn_tcbuf_add(&joined, p->utf8, p->n_utf8) && kn_tcbuf_add(&joined, text, len) &&
             add_clean_utf8(&p->in, joined.p, joined.n, true, &kept);
        if (ok) memcpy(p->utf8, joined.p + joined.n - kept, kept);
        kn_tcbuf_free(&joined);
    } else {
        ok = add_clean_utf8(&p->in, text, len, true, &kept);
        if (ok) memcpy(p->utf8, text + len - kept, kept);
    }
    if (!ok) return fail_call(p, KILN_ERR_NOMEM, "out of memory");
    p->n_utf8 = kept;
    kn_tc_scan(p);
    if (p->failed) return kn_error(p->fail_st, "%s", p->errmsg);
    return KILN_OK;
}

kiln_status kiln_chat_parser_finish(kiln_chat_parser *cp) {
    kn_error_clear();
    if (!cp) return kn_error(KILN_ERR_INVALID_ARG, "kiln_chat_parser_finish: parser is NULL");
    kn_tcp *p = &cp->p;
    if (p->at_end) return KILN_OK;
    p->at_end = true;
    size_t kept;
    if (p->n_utf8 && !add_clean_utf8(&p->in, p->utf8, p->n_utf8, false, &kept))
        return fail_call(p, KILN_ERR_NOMEM, "out of memory");
    p->n_utf8 = 0;
    if (!p->failed) kn_tc_scan(p);
    for (size_t i = 0; i < p->n_calls; i++) kn_tc_call_end(p, (int32_t)i);
    if (p->failed) return kn_error(p->fail_st, "%s", p->errmsg);
    return KILN_OK;
}

bool kiln_chat_parser_next(kiln_chat_parser *cp, kiln_chat_delta *out) {
    if (!cp || !out) return false;
    kn_tcp *p = &cp->p;
    if (p->ev_head >= p->n_ev) return false;
    kn_tc_event e = p->ev[p->ev_head++];
    memset(out, 0, sizeof *out);
    out->index = -1;
    switch (e.kind) {
        case KN_EV_CONTENT:
            out->kind = KILN_DELTA_CONTENT;
            out->text = p->content.p + e.off;
            break;
        case KN_EV_REASONING:
            out->kind = KILN_DELTA_REASONING;
            out->text = p->reasoning.p + e.off;
            break;
        default: {
            const kn_tc_call *c = &p->calls[e.call];
            out->kind = KILN_DELTA_TOOL_CALL;
            out->index = e.call;
            out->text = c->args.p + e.off;
            if (e.first) {
                /* copies: the strings stay valid until the next call whatever the parser does */
                p->delta_id.n = p->delta_name.n = 0;
                if (!kn_tcbuf_add(&p->delta_id, c->id.p, c->id.n) ||
                    !kn_tcbuf_add(&p->delta_name, c->name.p, c->name.n))
                    return false;
                out->id = p->delta_id.p;
                out->name = p->delta_name.p;
            }
        }
    }
    out->len = e.len;
    return true;
}

int32_t kiln_chat_parser_n_tool_calls(const kiln_chat_parser *cp) { return cp ? (int32_t)cp->p.n_calls : 0; }

/* A JSON string of s[n]; bytes that are not UTF-8 become U+FFFD. */
static json_t *jstring(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    kn_tcbuf b = {0};
    bool ok = kn_tcbuf_add(&b, "", 0);
    for (size_t i = 0; ok && i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        bool good = k > 0 && i + k <= n;
        for (size_t j2 = 1; good && j2 < k; j2++) good = ((unsigned char)s[i + j2] & 0xC0) == 0x80;
        if (good && k > 1) {
            json_t *t = json_stringn(s + i, k);
            good = t != NULL;
            json_decref(t);
        }
        ok = good ? kn_tcbuf_add(&b, s + i, k) : kn_tcbuf_adds(&b, "\xEF\xBF\xBD");
        i += good ? k : 1;
    }
    j = ok ? json_stringn(b.p, b.n) : NULL;
    kn_tcbuf_free(&b);
    return j;
}

kiln_status kiln_chat_parser_message(const kiln_chat_parser *cp, char **json, size_t *len) {
    kn_error_clear();
    if (!cp || !json) return kn_error(KILN_ERR_INVALID_ARG, "kiln_chat_parser_message: NULL argument");
    *json = NULL;
    if (len) *len = 0;
    const kn_tcp *p = &cp->p;
    json_t *m = json_object();
    bool ok = m && !json_object_set_new(m, "role", json_string("assistant"));
    ok = ok && !json_object_set_new(m, "content",
                                    p->content.n || !p->n_calls ? jstring(p->content.p, p->content.n) : json_null());
    if (ok && p->reasoning.n)
        ok = !json_object_set_new(m, "reasoning_content", jstring(p->reasoning.p, p->reasoning.n));
    if (ok && p->n_calls) {
        json_t *arr = json_array();
        ok = arr && !json_object_set_new(m, "tool_calls", arr);
        for (size_t i = 0; ok && i < p->n_calls; i++) {
            const kn_tc_call *c = &p->calls[i];
            json_t *tc = json_object(), *fn = json_object();
            ok = tc && fn && !json_array_append_new(arr, tc) &&
                 !json_object_set_new(tc, "id", jstring(c->id.p, c->id.n));
            ok = ok && !json_object_set_new(tc, "type", json_string("function")) &&
                 !json_object_set_new(tc, "function", fn);
            ok = ok && !json_object_set_new(fn, "name", jstring(c->name.p, c->name.n)) &&
                 !json_object_set_new(fn, "arguments", jstring(c->args.p, c->args.n));
        }
    }
    char *s = ok ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(m);
    if (!s) return kn_error(KILN_ERR_NOMEM, "out of memory");
    *json = s;
    if (len) *len = strlen(s);
    return KILN_OK;
}
