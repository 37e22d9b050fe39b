/*
 * toolcall_json.c - the JSON family of tool-call formats: calls written as JSON objects with a
 * name and arguments, alone after a tag (Hermes / Qwen2.5 <tool_call>{...}</tool_call>, GigaChat,
 * Llama 3.x's bare object), in an array (Mistral Nemo [TOOL_CALLS][...], Command R7B's action
 * list, Granite, Firefunction, Apriel, Nemotron, Apertus's {"name": {args}} items), or in the
 * generic envelope {"tool_calls": [...]} / {"tool_call": {...}} / {"response": "..."}.
 *
 * The object is read key by key as it streams: the name key starts the call, the arguments value
 * streams into the call's arguments (minified), an id key sets the id. Keys may come in any order:
 * arguments that come before the name are collected and released with it, and formats whose id
 * may follow the arguments (cfg->id_later) keep the call back until the id or the object's end.
 * An object without a name makes no call. Input that stops being JSON ends the block there; the
 * rest is content again.
 */
#include "text/toolcall.h"

#include <string.h>

enum {
    S_ARR_OPEN = 1,
    S_ARR_ITEM,
    S_ARR_SEP,
    S_OBJ_OPEN,
    S_KEY,
    S_COLON,
    S_VALUE,
    S_SEP,
    S_AFTER,
    S_CLOSE2,
    S_ENV_OPEN,
    S_ENV_KEY,
    S_ENV_COLON,
    S_ENV_VALUE,
    S_ENV_SEP,
};

/* What a value is (b->role). */
enum { R_SKIP = 0, R_NAME, R_ARGS, R_ID, R_CALLS, R_CALL, R_RESPONSE };

/* b->ret: the state after an object; b->nparams (reused): the state after an array. */

static const kn_tc_json_cfg *cfg_of(const kn_tcp *p) { return p->blk.cfg; }

static bool key_in(const char *const *keys, const char *k) {
    for (int i = 0; i < 3 && keys[i]; i++)
        if (strcmp(keys[i], k) == 0) return true;
    return false;
}

static void json_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) {
    kn_tc_block *b = &p->blk;
    const kn_tc_opener *op = &p->fmt->open[b->opener];
    size_t s, e;
    if (kn_tc_group(p, re, "body", &s, &e)) p->pos = s;
    if (kn_tc_group(p, re, "tag", &s, &e) && e - s + 2 < sizeof b->close) {
        b->close[0] = '<';
        b->close[1] = '/';
        memcpy(b->close + 2, p->in.p + s + 1, e - s - 1);
        b->close[e - s + 1] = 0;
    } else if (op->close) {
        snprintf(b->close, sizeof b->close, "%s", op->close);
    }
    if (kn_tc_group(p, re, "fence", &s, &e)) snprintf(b->close2, sizeof b->close2, "```");
    b->ret = S_AFTER;
    b->nparams = S_AFTER;
    b->st = b->kind == KN_J_ARRAY ? S_ARR_OPEN : b->kind == KN_J_ENVELOPE ? S_ENV_OPEN : S_OBJ_OPEN;
}

/* Expects byte c after spaces: 1 consumed, 0 something else, -1 need input. */
static int expect(kn_tcp *p, char c) {
    kn_tc_skip_ws(p);
    if (kn_tc_avail(p) == 0) return p->at_end ? 0 : -1;
    if (*kn_tc_rest(p) != c) return 0;
    p->pos++;
    return 1;
}

/* The next byte after spaces, or 0 (need input, or none at the end: *end). */
static char peek(kn_tcp *p) {
    kn_tc_skip_ws(p);
    return kn_tc_avail(p) ? *kn_tc_rest(p) : 0;
}

/* Starts the call of the current object named name[n] (once). */
static bool start_call(kn_tcp *p, const char *name, size_t n) {
    kn_tc_block *b = &p->blk;
    b->call = kn_tc_call_begin(p, name, n, b->aux.p, b->aux.n, cfg_of(p)->id_later);
    if (b->call < 0) return false;
    if (b->val.n && !kn_tc_call_args(p, b->call, b->val.p, b->val.n)) return false;
    b->val.n = 0;
    return true;
}

/* The object ended: the call (if it had a name) gets "{}" when it had no arguments, and ends. */
static void end_object(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    if (b->call >= 0) {
        if (!b->flag) kn_tc_call_args(p, b->call, "{}", 2);
        kn_tc_call_end(p, b->call);
    }
    b->call = -1;
    b->st = b->ret;
}

/* One step inside a call object. */
static kn_tc_step object_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const kn_tc_json_cfg *cfg = cfg_of(p);
    int r;
    switch (b->st) {
        case S_OBJ_OPEN:
            if ((r = expect(p, '{')) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            b->call = -1;
            b->flag = false; /* arguments seen */
            b->aux.n = b->val.n = 0;
            b->st = S_KEY;
            return KN_TC_MORE;
        case S_KEY: {
            char c = peek(p);
            if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            if (c == '}') {
                p->pos++;
                end_object(p);
                return KN_TC_MORE;
            }
            if ((r = kn_tc_read_jstring(p, &b->key, KN_TC_MAX_NAME)) <= 0)
                return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            if (cfg->name_is_key) {
                if (b->call >= 0) { /* one object, several calls */
                    if (!b->flag) kn_tc_call_args(p, b->call, "{}", 2);
                    kn_tc_call_end(p, b->call);
                    b->flag = false;
                }
                if (!start_call(p, b->key.p, b->key.n)) return kn_tc_block_end(p);
                b->role = R_ARGS;
            } else {
                b->role = key_in(cfg->name_keys, b->key.p)   ? R_NAME
                          : key_in(cfg->args_keys, b->key.p) ? R_ARGS
                          : key_in(cfg->id_keys, b->key.p)   ? R_ID
                                                             : R_SKIP;
            }
            b->st = S_COLON;
            return KN_TC_MORE;
        }
        case S_COLON:
            if ((r = expect(p, ':')) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            memset(&b->jv, 0, sizeof b->jv);
            memset(&b->jd, 0, sizeof b->jd);
            b->lead_done = false;
            b->st = S_VALUE;
            return KN_TC_MORE;
        case S_VALUE:
            switch (b->role) {
                case R_NAME:
                    if ((r = kn_tc_read_jstring(p, &b->key, KN_TC_MAX_NAME)) <= 0)
                        return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
                    if (b->call < 0 && !start_call(p, b->key.p, b->key.n)) return kn_tc_block_end(p);
                    break;
                case R_ID: {
                    char c = peek(p);
                    if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
                    r = c == '"' ? kn_tc_read_jstring(p, &b->aux, KN_TC_MAX_ID) : kn_tc_read_jscalar(p, &b->aux);
                    if (r <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
                    if (b->call >= 0 && !kn_tc_call_id(p, b->call, b->aux.p, b->aux.n)) return kn_tc_block_end(p);
                    break;
                }
                case R_ARGS: {
                    kn_tc_sink sink = {b->call, b->call < 0 ? &b->val : NULL, false};
                    if (!b->lead_done) {
                        char c = peek(p);
                        if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
                        b->is_string = c == '"'; /* arguments given as a JSON string of JSON */
                        b->lead_done = true;
                    }
                    r = b->is_string ? kn_tc_jstr_stream(p, &b->jd, sink) : kn_tc_json_value(p, &b->jv, sink);
                    if (r <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
                    b->flag = true;
                    break;
                }
                default:
                    r = kn_tc_json_value(p, &b->jv, (kn_tc_sink){-1, NULL, false});
                    if (r <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            }
            b->st = S_SEP;
            return KN_TC_MORE;
        case S_SEP: {
            char c = peek(p);
            if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            p->pos++;
            if (c == ',') b->st = S_KEY;
            else if (c == '}') end_object(p);
            else {
                p->pos--;
                return kn_tc_block_end(p);
            }
            return KN_TC_MORE;
        }
    }
    return kn_tc_block_end(p);
}

/* Consumes closer lit (after spaces) when it follows. Returns NEED or MORE. */
static kn_tc_step closer(kn_tcp *p, const char *lit, int next) {
    if (*lit && kn_tc_ws_lit(p, lit) < 0) return KN_TC_NEED;
    p->blk.st = next;
    return KN_TC_MORE;
}

static kn_tc_step json_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    int r;
    switch (b->st) {
        case S_ARR_OPEN:
            if ((r = expect(p, '[')) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            b->st = S_ARR_ITEM;
            return KN_TC_MORE;
        case S_ARR_ITEM: {
            char c = peek(p);
            if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            if (c == ']') {
                p->pos++;
                b->st = b->nparams;
                return KN_TC_MORE;
            }
            if (c != '{') return kn_tc_block_end(p);
            b->ret = S_ARR_SEP;
            b->st = S_OBJ_OPEN;
            return KN_TC_MORE;
        }
        case S_ARR_SEP: {
            char c = peek(p);
            if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            if (c != ',' && c != ']') return kn_tc_block_end(p);
            p->pos++;
            b->st = c == ',' ? S_ARR_ITEM : b->nparams;
            return KN_TC_MORE;
        }
        case S_AFTER: return closer(p, b->close, S_CLOSE2);
        case S_CLOSE2: {
            kn_tc_step s = closer(p, b->close2, 0);
            return s == KN_TC_NEED ? s : kn_tc_block_end(p);
        }
        case S_ENV_OPEN:
            if ((r = expect(p, '{')) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            b->st = S_ENV_KEY;
            return KN_TC_MORE;
        case S_ENV_KEY: {
            char c = peek(p);
            if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            if (c == '}') {
                p->pos++;
                b->st = S_AFTER;
                return KN_TC_MORE;
            }
            if ((r = kn_tc_read_jstring(p, &b->key, KN_TC_MAX_NAME)) <= 0)
                return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            b->role = strcmp(b->key.p, "tool_calls") == 0  ? R_CALLS
                      : strcmp(b->key.p, "tool_call") == 0 ? R_CALL
                      : strcmp(b->key.p, "response") == 0  ? R_RESPONSE
                                                           : R_SKIP;
            b->st = S_ENV_COLON;
            return KN_TC_MORE;
        }
        case S_ENV_COLON:
            if ((r = expect(p, ':')) <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            memset(&b->jv, 0, sizeof b->jv);
            memset(&b->jd, 0, sizeof b->jd);
            b->lead_done = false;
            b->st = S_ENV_VALUE;
            return KN_TC_MORE;
        case S_ENV_VALUE:
            if (b->role == R_CALLS) {
                b->nparams = S_ENV_SEP;
                b->st = S_ARR_OPEN;
                return KN_TC_MORE;
            }
            if (b->role == R_CALL) {
                b->ret = S_ENV_SEP;
                b->st = S_OBJ_OPEN;
                return KN_TC_MORE;
            }
            if (b->role == R_RESPONSE && !b->lead_done) {
                char c = peek(p);
                if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
                b->is_string = c == '"';
                b->lead_done = true;
            }
            if (b->role == R_RESPONSE && b->is_string) r = kn_tc_jstr_stream(p, &b->jd, (kn_tc_sink){-1, NULL, true});
            else r = kn_tc_json_value(p, &b->jv, (kn_tc_sink){-1, NULL, b->role == R_RESPONSE});
            if (r <= 0) return r < 0 ? KN_TC_NEED : kn_tc_block_end(p);
            b->st = S_ENV_SEP;
            return KN_TC_MORE;
        case S_ENV_SEP: {
            char c = peek(p);
            if (!c) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            if (c != ',' && c != '}') return kn_tc_block_end(p);
            p->pos++;
            b->st = c == ',' ? S_ENV_KEY : S_AFTER;
            return KN_TC_MORE;
        }
        default: return object_step(p);
    }
}

const kn_tc_family kn_tc_fam_json = {"json", json_begin, json_step};
