/*
 * toolcall_harmony.c - gpt-oss's harmony format. A reply is a series of messages, each a header
 * and a body:
 *     <|channel|>analysis<|message|>thinking...<|end|>
 *     <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}<|call|>
 *     <|start|>assistant<|channel|>final<|message|>the answer<|return|>
 * The generation prompt ends with "<|start|>assistant", so the reply starts inside the first
 * header (with "<|channel|>" or " to=functions.x"). The analysis channel is reasoning, a message to
 * functions.NAME (the recipient may be written before or after the channel) is a tool call whose
 * body is its JSON arguments, messages to other recipients (built-in tools such as python or
 * browser) are dropped, and final or commentary text is content.
 *
 * With reasoning "none" an analysis message stays in content with its markup. A reply that is not
 * harmony at all (no header) is content.
 */
#include "text/toolcall.h"

#include <string.h>

enum { H_HEADER = 1, H_TEXT, H_THINK, H_SKIP, H_ARGS, H_AFTER_CALL, H_NEXT };

static const char *const ENDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>"};

/* Whether s[n] can begin a header: after an optional "<|start|>" and "assistant" comes
 * "<|channel|>", " to=" or "<|constrain|>" (or s[n] is the beginning of that). *need: too short. */
static bool headerish(const char *s, size_t n, bool *need) {
    static const char *const starts[] = {"<|start|>", "assistant", "<|channel|>", " to=", "to=", "<|constrain|>"};
    *need = false;
    for (int skip = 0; skip < 2; skip++) { /* optional <|start|>, then optional assistant */
        size_t k = strlen(starts[skip]);
        if (n >= k && memcmp(s, starts[skip], k) == 0) s += k, n -= k;
    }
    if (n == 0) {
        *need = true;
        return true;
    }
    for (int i = 0; i < 6; i++) {
        size_t k = strlen(starts[i]);
        size_t m = n < k ? n : k;
        if (memcmp(s, starts[i], m) == 0) {
            if (n < k) *need = true;
            return true;
        }
    }
    return false;
}

/* The word after the last occurrence of key in h[n] (letters, digits, _ . -), or length 0. */
static size_t word_after(const char *h, size_t n, const char *key, const char **w, bool first_not_assistant) {
    size_t k = strlen(key), found = 0;
    *w = NULL;
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(h + i, key, k) != 0) continue;
        size_t j = i + k, e = j;
        while (e < n && h[e] != ' ' && h[e] != '<' && h[e] != '\n') e++;
        if (first_not_assistant && e - j == 9 && memcmp(h + j, "assistant", 9) == 0) continue;
        *w = h + j;
        found = e - j;
        if (first_not_assistant) break;
    }
    return found;
}

static void harmony_begin(kn_tcp *p, const pcre2_code *re, size_t ms, size_t me) {
    p->pos = ms; /* the marker is part of the header */
    p->blk.st = p->blk.kind == 1 ? H_NEXT : H_HEADER;
}

void kn_tc_harmony_start(kn_tcp *p) {
    kn_tc_block_reset(p, &kn_tc_fam_harmony, NULL);
    p->blk.st = H_HEADER;
}

/* Reads a header up to <|message|> and chooses what the body is. */
static kn_tc_step header_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p);
    bool need;
    if (!headerish(s, n, &need)) return kn_tc_block_end(p); /* not harmony: content */
    const char *m = memmem(s, n < KN_TC_MAX_HEADER ? n : KN_TC_MAX_HEADER, "<|message|>", 11);
    if (!m) {
        if (n >= KN_TC_MAX_HEADER) return kn_tc_block_end(p); /* no header is that long: content */
        if (!p->at_end) return KN_TC_NEED;
        p->pos += n; /* a header cut off by the end of the reply says nothing */
        return kn_tc_block_end(p);
    }
    size_t hn = (size_t)(m - s);
    const char *ch, *to;
    size_t chn = word_after(s, hn, "<|channel|>", &ch, false);
    size_t ton = word_after(s, hn, "to=", &to, true);
    p->pos += hn + 11;
    b->val.n = 0;
    if (ton >= 10 && memcmp(to, "functions.", 10) == 0) {
        if (!p->parse_calls) {
            b->st = H_SKIP;
            return KN_TC_MORE;
        }
        b->call = kn_tc_call_begin(p, to + 10, ton - 10, NULL, 0, false);
        if (b->call < 0) return kn_tc_block_end(p);
        memset(&b->jv, 0, sizeof b->jv);
        b->st = H_ARGS;
    } else if (ton) {
        b->st = H_SKIP; /* a built-in tool's call: not an OpenAI function call */
    } else if (chn == 8 && memcmp(ch, "analysis", 8) == 0) {
        b->st = H_THINK;
        p->think_started = false;
        p->think_ws.n = 0;
        if (p->rfmt == KILN_REASONING_NONE && !kn_tc_emit_content(p, s, hn + 11)) return kn_tc_block_end(p);
    } else {
        b->st = H_TEXT;
    }
    return KN_TC_MORE;
}

/* Streams a body up to its end marker. */
static kn_tc_step body_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    const char *s = kn_tc_rest(p);
    size_t n = kn_tc_avail(p), upto = n, hold = 0, mk = 0;
    int which = -1;
    for (int i = 0; i < 5; i++) {
        const char *e = memmem(s, upto, ENDS[i], strlen(ENDS[i]));
        if (e && (size_t)(e - s) < upto) upto = (size_t)(e - s), which = i;
    }
    if (which < 0 && !p->at_end)
        for (int i = 0; i < 5; i++) {
            size_t h = kn_tc_hold_len(s, n, ENDS[i]);
            if (h > hold) hold = h;
        }
    if (which < 0) upto = n - hold;
    bool ok = true;
    if (b->st == H_TEXT) ok = kn_tc_emit_content(p, s, upto);
    else if (b->st == H_THINK) ok = kn_tc_emit_reasoning(p, s, upto);
    p->pos += upto;
    if (!ok) return kn_tc_block_end(p);
    if (which < 0) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
    if (which <= 2) mk = strlen(ENDS[which]); /* <|start|> and <|channel|> begin the next message */
    if (b->st == H_THINK) {
        if (p->rfmt == KILN_REASONING_NONE && mk) kn_tc_emit_content(p, ENDS[which], mk);
        p->think_started = false;
        p->think_ws.n = 0;
    }
    p->pos += mk;
    b->st = H_NEXT;
    return KN_TC_MORE;
}

static kn_tc_step harmony_step(kn_tcp *p) {
    kn_tc_block *b = &p->blk;
    int r;
    switch (b->st) {
        case H_HEADER: return header_step(p);
        case H_TEXT:
        case H_THINK:
        case H_SKIP: return body_step(p);
        case H_ARGS:
            r = kn_tc_json_value(p, &b->jv, (kn_tc_sink){b->call, NULL, false});
            if (r < 0) return KN_TC_NEED;
            kn_tc_call_end(p, b->call);
            b->call = -1;
            b->st = r > 0 ? H_AFTER_CALL : H_SKIP; /* what is not JSON is dropped with the message */
            return KN_TC_MORE;
        case H_AFTER_CALL:
            for (int i = 0; i < 2; i++) {
                r = kn_tc_ws_lit(p, ENDS[i]);
                if (r < 0) return KN_TC_NEED;
                if (r > 0) break;
            }
            b->st = H_NEXT;
            return KN_TC_MORE;
        case H_NEXT: {
            kn_tc_skip_ws(p);
            if (!kn_tc_avail(p)) return p->at_end ? kn_tc_block_end(p) : KN_TC_NEED;
            r = kn_tc_lit(p, "<|start|>");
            if (r < 0) return KN_TC_NEED;
            if (r > 0 && (r = kn_tc_lit(p, "assistant")) < 0) {
                p->pos -= 9; /* decide "<|start|>assistant" as a whole */
                return KN_TC_NEED;
            }
            b->st = H_HEADER;
            return KN_TC_MORE;
        }
    }
    return kn_tc_block_end(p);
}

const kn_tc_family kn_tc_fam_harmony = {"harmony", harmony_begin, harmony_step};
