/*
 * toolcall_xml.c - tool-call formats with XML-like parameters, one element per argument:
 *   Qwen3-Coder / Qwen3.5 / Nemotron 3 / Step 3.5 / Seed-OSS:
 *       <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>
 *   MiniMax M2: <minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter>...
 *   DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter name="KEY"
 *       string="true|false">VALUE</｜DSML｜parameter>...
 *   GLM 4.5+: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>
 *
 * The values carry no JSON types, so the arguments are built as JSON: a value is a string when the
 * format says so (DSML's string="true") or the declared tool's parameter is a string, else it is
 * taken as JSON when it parses (numbers, booleans, objects) and as a string otherwise. A string
 * value streams as it comes (escaped; formats that put the value on its own lines lose one leading
 * and one trailing newline); any other value is decided when its element closes.
 */
#include "text/toolcall.h"

#include <string.h>

enum { X_INVOKE = 1, X_PARAM, X_VALUE };

/* Starts the call named by group "name" of re's last match; its arguments open with "{". */
static bool start_invoke(kn_tcp *p, const pcre2_code *re) {
    size_t s, e;
    if (!kn_tc_group(p, re, "name", &s, &e)) return false;
    while (e > s && (p->in.p[e - 1] == ' ' || p->in.p[e - 1] == '\n')) e--; /* GLM: "NAME\n" */
    if (e == s) return false;
    p->blk.call = kn_tc_call_begin(p, p->in.p + s, e - s, NULL, 0, false);
    p->blk.nparams = 0;
    p->blk.st = X_PARAM;
    return p->blk.call >= 0 && kn_tc_call_args(p, p->blk.call, "{", 1);
}

static void xml_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) {
    kn_tc_block *b = &p->blk;
    if (b->kind == KN_X_BLOCK) {
        b->flag = true;
        b->st = X_INVOKE;
    } else if (!start_invoke(p, re)) {
        b->st = 0;
    }
}

/* Closes the current call's arguments and the call. */
static void end_invoke(kn_tcp *p) {
    if (p->blk.call >= 0) {
        kn_tc_call_args(p, p->blk.call, "}", 1);
        kn_tc_call_end(p, p->blk.call);
    }
    p->blk.call = -1;
}

/* Ends the block where the input is not what the format writes: the call is closed as it is. */
static kn_tc_step abandon(kn_tcp *p) {
    end_invoke(p);
    return kn_tc_block_end(p);
}

/* Starts parameter value reading after a header matched by re: writes `"key":` (and the opening
 * quote of a string). */
static bool start_param(kn_tcp *p, const pcre2_code *re) {
    kn_tc_block *b = &p->blk;
    size_t ks, ke, ss, se;
    if (!kn_tc_group(p, re, "key", &ks, &ke) || ke == ks) return false;
    b->key.n = 0;
    if (!kn_tcbuf_add(&b->key, p->in.p + ks, ke - ks)) return false;
    if (kn_tc_group(p, re, "str", &ss, &se)) b->is_string = se - ss == 4 && memcmp(p->in.p + ss, "true", 4) == 0;
    else b->is_string = kn_tc_param_is_string(p, p->calls[b->call].name.p, b->key.p);
    b->val.n = 0;
    bool ok = kn_tcbuf_add(&b->val, b->nparams ? ",\"" : "\"", b->nparams ? 2 : 1) &&
              kn_tcbuf_add_jstr(&b->val, b->key.p, b->key.n) && kn_tcbuf_add(&b->val, "\":", 2) &&
              (!b->is_string || kn_tcbuf_addc(&b->val, '"')) && kn_tc_call_args(p, b->call, b->val.p, b->val.n);
    b->val.n = 0;
    b->pend.n = 0;
    b->lead_done = false;
    b->nparams++;
    b->st = X_VALUE;
    return ok;
}

/* Reads a parameter value up to cfg->param_close. */
static kn_tc_step value_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const kn_tc_xml_cfg *cfg = b->cfg;
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), k = strlen(cfg->param_close), upto;
    const char *t = memmem(s, n, cfg->param_close, k);
    bool final = t != NULL || p->at_end;
    upto = t ? (size_t)(t - s) : p->at_end ? n : n - kn_tc_hold_len(s, n, cfg->param_close);
    size_t used = upto;
    if (!b->lead_done) {
        if (upto == 0 && !final) return KN_TC_NEED;
        if (cfg->trim_newline && upto > 0 && s[0] == '\n') s++, upto--;
        b->lead_done = true;
    }
    if (b->is_string) {
        /* pend holds a newline that may be the value's last (dropped) */
        if (!kn_tcbuf_add(&b->pend, s, upto)) return kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
        size_t emit = b->pend.n;
        if (cfg->trim_newline && emit && b->pend.p[emit - 1] == '\n') emit--;
        b->val.n = 0;
        if (!kn_tcbuf_add_jstr(&b->val, b->pend.p, emit) || !kn_tc_call_args(p, b->call, b->val.p, b->val.n))
            return kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
        memmove(b->pend.p, b->pend.p + emit, b->pend.n - emit);
        b->pend.n -= emit;
        if (final && !kn_tc_call_args(p, b->call, "\"", 1)) return kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
    } else {
        if (!kn_tc_sink_add(p, (kn_tc_sink){-1, &b->val, false}, s, upto)) return abandon(p);
        if (final) {
            size_t vn = b->val.n;
            if (cfg->trim_newline && vn && b->val.p[vn - 1] == '\n') vn--;
            if (!kn_tc_args_value(p, b->call, b->val.p, vn, false)) return abandon(p);
        }
    }
    p->pos += used;
    if (!final) return KN_TC_NEED;
    if (t) p->pos += k;
    b->st = X_PARAM;
    return KN_TC_MORE;
}

static kn_tc_step xml_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const kn_tc_xml_cfg *cfg = b->cfg;
    size_t ms, me;
    int r;
    switch (b->st) {
        case X_INVOKE: {
            kn_tc_skip_ws(p);
            if (cfg->block_close) {
                r = kn_tc_lit(p, cfg->block_close);
                if (r < 0) return KN_TC_NEED;
                if (r > 0) return kn_tc_block_end(p);
            }
            const pcre2_code *re = p->fre[cfg->invoke];
            r = kn_tc_match(p, re, true, &ms, &me);
            if (r < 0) return KN_TC_NEED;
            if (r == 0) return kn_tc_block_end(p);
            p->pos = me;
            return start_invoke(p, re) ? KN_TC_MORE : abandon(p);
        }
        case X_PARAM: {
            size_t save = p->pos;
            kn_tc_skip_ws(p);
            r = kn_tc_lit(p, cfg->invoke_close);
            if (r < 0) {
                p->pos = save;
                return KN_TC_NEED;
            }
            if (r > 0) {
                end_invoke(p);
                if (!b->flag) return kn_tc_block_end(p);
                b->st = X_INVOKE;
                return KN_TC_MORE;
            }
            const pcre2_code *re = p->fre[cfg->param];
            r = kn_tc_match(p, re, true, &ms, &me);
            if (r <= 0) {
                p->pos = save;
                return r < 0 ? KN_TC_NEED : abandon(p);
            }
            p->pos = me;
            return start_param(p, re) ? KN_TC_MORE : abandon(p);
        }
        case X_VALUE: return value_step(p);
    }
    return abandon(p);
}

const kn_tc_family kn_tc_fam_xml = {"xml", xml_begin, xml_step};
