/*
 * toolcall_named.c - tool-call formats that write a call as a header naming the function (and
 * sometimes its id) followed by JSON arguments: DeepSeek R1 / V3.1 (<｜tool▁call▁begin｜>...),
 * Kimi K2 (functions.name:0 ids), Mistral Small 3.2 / Devstral / Ministral ([TOOL_CALLS]name
 * [CALL_ID]id[ARGS]{...}), Functionary v3.1 (<function=name>{...}</function>, <|python_tag|> code),
 * Solar Open; and Functionary v3.2, whose reply is a series of recipient lines (">>>name\n" then
 * the arguments, "all" for the answer, "python" for raw code).
 *
 * A call is released as soon as its header is read, so its arguments stream. A block (DeepSeek's
 * tool_calls_begin ... tool_calls_end) holds several calls; its headers are matched with the
 * format's own pattern fre[cfg->hdr]. Raw code (a python call without JSON) streams as the JSON
 * string of {"code": ...} up to a terminator (">>>") or the end of the reply.
 */
#include "text/toolcall.h"

#include <string.h>

enum { N_HDR = 1, N_ARGS, N_CLOSE, N_CODE, R_LINE, R_PYTHON };

/* Starts a call from the name / id groups of the last match of re. */
static bool call_from_groups(kn_tcp *p, const pcre2_code *re) {
    size_t ns, ne, is = 0, ie = 0;
    if (!kn_tc_group(p, re, "name", &ns, &ne) || ne == ns) return false;
    bool has_id = kn_tc_group(p, re, "id", &is, &ie);
    p->blk.call = kn_tc_call_begin(p, p->in.p + ns, ne - ns, has_id ? p->in.p + is : NULL, has_id ? ie - is : 0, false);
    memset(&p->blk.jv, 0, sizeof p->blk.jv);
    return p->blk.call >= 0;
}

/* Starts a python call whose arguments are the code that follows, as {"code": "..."}. */
static bool start_code(kn_tcp *p, const char *name, size_t n) {
    p->blk.call = kn_tc_call_begin(p, name, n, NULL, 0, false);
    if (p->blk.call < 0 || !kn_tc_call_args(p, p->blk.call, "{\"code\":\"", 9)) return false;
    p->blk.st = N_CODE;
    return true;
}

static void named_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) {
    kn_tc_block *b = &p->blk;
    const kn_tc_opener *op = &p->fmt->open[b->opener];
    if (op->close) snprintf(b->close, sizeof b->close, "%s", op->close);
    if (b->kind == KN_N_BLOCK) {
        b->flag = true; /* in a block: headers repeat until block_close */
        b->st = N_HDR;
    } else if (b->kind == KN_N_CODE) {
        size_t ns, ne;
        bool named = kn_tc_group(p, re, "name", &ns, &ne);
        if (!start_code(p, named ? p->in.p + ns : "python", named ? ne - ns : 6)) kn_tc_block_end(p);
    } else {
        b->st = call_from_groups(p, re) ? N_ARGS : 0;
    }
}

/* Ends the current call and goes on with the block's next header, or ends the block. */
static kn_tc_step next_call(kn_tcp *p) {
    kn_tc_call_end(p, p->blk.call);
    p->blk.call = -1;
    if (!p->blk.flag) return kn_tc_block_end(p);
    p->blk.st = N_HDR;
    return KN_TC_MORE;
}

/* Streams code up to the terminator b->close ("" : to the end of the reply) as a JSON string. */
static kn_tc_step code_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), upto = n;
    bool found = false;
    if (b->close[0]) {
        const char *t = memmem(s, n, b->close, strlen(b->close));
        if (t) upto = (size_t)(t - s), found = true;
        else if (!p->at_end) upto = n - kn_tc_hold_len(s, n, b->close);
    }
    b->val.n = 0;
    if (upto && (!kn_tcbuf_add_jstr(&b->val, s, upto) || !kn_tc_call_args(p, b->call, b->val.p, b->val.n)))
        return kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
    p->pos += upto;
    if (!found && !p->at_end) return KN_TC_NEED;
    kn_tc_call_args(p, b->call, "\"}", 2);
    return kn_tc_block_end(p);
}

static kn_tc_step named_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const kn_tc_named_cfg *cfg = b->cfg;
    size_t ms, me;
    int r;
    switch (b->st) {
        case N_HDR: {
            kn_tc_skip_ws(p);
            if (cfg->block_close) {
                r = kn_tc_lit(p, cfg->block_close);
                if (r < 0) return KN_TC_NEED;
                if (r > 0) return kn_tc_block_end(p);
            }
            const pcre2_code *re = p->fre[cfg->hdr];
            r = kn_tc_match(p, re, true, &ms, &me);
            if (r < 0) return KN_TC_NEED;
            if (r == 0) return kn_tc_block_end(p);
            p->pos = me;
            if (!call_from_groups(p, re)) return kn_tc_block_end(p);
            b->st = N_ARGS;
            return KN_TC_MORE;
        }
        case N_ARGS:
            r = kn_tc_json_value(p, &b->jv, (kn_tc_sink){b->call, NULL, false});
            if (r < 0) return KN_TC_NEED;
            if (r == 0) return kn_tc_block_end(p);
            b->st = N_CLOSE;
            return KN_TC_MORE;
        case N_CLOSE: {
            size_t save = p->pos;
            kn_tc_skip_ws(p);
            if (cfg && cfg->close_re >= 0) {
                r = kn_tc_match(p, p->fre[cfg->close_re], true, &ms, &me);
                p->pos = r > 0 ? me : save;
                if (r < 0) return KN_TC_NEED;
            } else {
                p->pos = save;
                const char *lit = b->close[0] ? b->close : cfg ? cfg->close : NULL;
                if (lit && kn_tc_ws_lit(p, lit) < 0) return KN_TC_NEED;
            }
            return next_call(p);
        }
        case N_CODE: return code_step(p);
    }
    return kn_tc_block_end(p);
}

const kn_tc_family kn_tc_fam_named = {"named", named_begin, named_step};

/* ---- Functionary v3.2: recipient lines ------------------------------------------------------------ */

static void recipient_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) { p->blk.st = R_LINE; }

void kn_tc_recipient_start(kn_tcp *p) {
    kn_tc_block_reset(p, &kn_tc_fam_recipient, NULL);
    p->blk.st = R_LINE;
}

static kn_tc_step recipient_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    size_t ms, me, ns, ne;
    switch (b->st) {
        case R_LINE: {
            const pcre2_code *re = p->fre[0];
            int r = kn_tc_match(p, re, true, &ms, &me);
            if (r < 0) return KN_TC_NEED;
            if (r == 0 || !kn_tc_group(p, re, "name", &ns, &ne)) return kn_tc_block_end(p);
            const char *name = p->in.p + ns;
            size_t nn = ne - ns;
            p->pos = me;
            if (nn == 3 && memcmp(name, "all", 3) == 0) return kn_tc_block_end(p); /* the answer follows */
            if (!p->parse_calls) return kn_tc_block_end(p);
            if (nn == 6 && memcmp(name, "python", 6) == 0) {
                b->st = R_PYTHON;
                return KN_TC_MORE;
            }
            b->call = kn_tc_call_begin(p, name, nn, NULL, 0, false);
            if (b->call < 0) return kn_tc_block_end(p);
            memset(&b->jv, 0, sizeof b->jv);
            b->st = N_ARGS;
            return KN_TC_MORE;
        }
        case R_PYTHON: { /* JSON arguments, or raw code up to the next recipient */
            size_t save = p->pos;
            kn_tc_skip_ws(p);
            if (!kn_tc_avail(p) && !p->at_end) {
                p->pos = save;
                return KN_TC_NEED;
            }
            if (kn_tc_avail(p) && *kn_tc_rest(p) == '{') {
                b->call = kn_tc_call_begin(p, "python", 6, NULL, 0, false);
                if (b->call < 0) return kn_tc_block_end(p);
                memset(&b->jv, 0, sizeof b->jv);
                b->st = N_ARGS;
                return KN_TC_MORE;
            }
            p->pos = save;
            snprintf(b->close, sizeof b->close, ">>>");
            if (!start_code(p, "python", 6)) return kn_tc_block_end(p);
            return KN_TC_MORE;
        }
        case N_ARGS: {
            int r = kn_tc_json_value(p, &b->jv, (kn_tc_sink){b->call, NULL, false});
            if (r < 0) return KN_TC_NEED;
            return kn_tc_block_end(p);
        }
        case N_CODE: return code_step(p);
    }
    return kn_tc_block_end(p);
}

const kn_tc_family kn_tc_fam_recipient = {"recipient", recipient_begin, recipient_step};
