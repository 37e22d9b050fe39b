/*
 * toolcall_scan.c - the driver of the tool-call parser: it walks the reply's text in content and
 * reasoning modes, finds the markers of the format (reasoning open / close, markers to drop, tool-call
 * openers), releases the text between them, holds back text that may be the start of a marker, and
 * hands tool-call blocks to the format's family.
 *
 * Markers are PCRE2 patterns matched with partial matching: a match that runs into the end of the
 * input so far is "partial", and the text from its start is held back until more input decides it.
 * At the end of the input (finish) nothing is partial: what never completed is text.
 *
 * Rules of the message it builds (they keep streaming and the whole-text parse identical):
 *   - content never starts with white space, and white space right after a tool call is dropped
 *     (space after reasoning, between calls, after the last call);
 *   - each reasoning block loses its leading and trailing white space, and blocks are joined by a
 *     blank line; with reasoning "none" the reasoning text, markers included, is content;
 *   - tool-call markup inside reasoning stays reasoning, except for formats where a call opener
 *     ends the reasoning (KN_FMT_CALL_ENDS_THINK);
 *   - openers flagged KN_OP_START (markup-less calls such as a bare JSON object) are tried only
 *     where the reply's content starts (after reasoning, before any content or call);
 *   - with reasoning "none" nothing is reasoning: thinking text and its markers are content, calls
 *     in it are calls, and a thinking block the prompt opened shows its opening marker before its
 *     first text.
 */
#include "text/toolcall.h"

#include <stdlib.h>
#include <string.h>

enum { MK_THINK_OPEN = 1, MK_THINK_CLOSE, MK_STRIP, MK_OPEN };

/* Adds a compiled marker. pattern is a regex, or a literal when literal. KILN_ERR_NOMEM, or
 * KILN_ERR_INTERNAL for a pattern that does not compile, with the error recorded. */
static kiln_status add_mark(kn_tcp *p, const char *pattern, bool literal, uint8_t kind, int16_t index, uint8_t flags) {
    kn_tcbuf pat = {0};
    if (literal) {
        /* \Q...\E quotes everything but a "\E" inside, which no marker has */
        if (!kn_tcbuf_adds(&pat, "\\Q") || !kn_tcbuf_adds(&pat, pattern) || !kn_tcbuf_adds(&pat, "\\E")) {
            kn_tcbuf_free(&pat);
            return kn_error(KILN_ERR_NOMEM, "out of memory");
        }
        pattern = pat.p;
    }
    kn_re *nm = realloc(p->marks, (p->n_marks + 1) * sizeof *nm);
    if (!nm) {
        kn_tcbuf_free(&pat);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    p->marks = nm;
    kn_re *m = &p->marks[p->n_marks];
    memset(m, 0, sizeof *m);
    const kiln_status st = kn_tc_compile(p, pattern, &m->code);
    kn_tcbuf_free(&pat);
    if (st) return st;
    m->kind = kind;
    m->index = index;
    m->flags = flags;
    p->n_marks++;
    return KILN_OK;
}

/* The length of s[n] without trailing white space. */
static size_t rtrim_len(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    return n;
}

/* Whether the prompt ends inside a reasoning block: it ends (white space aside) with an open marker.
 * *pair gets the pair, *at where the marker starts in prompt. */
static bool prompt_opens_think(const kn_tc_format *f, const char *prompt, int *pair, size_t *at) {
    size_t n = rtrim_len(prompt, strlen(prompt));
    for (int i = 0; i < KN_TC_MAX_THINK && f->think[i].open; i++) {
        size_t k = strlen(f->think[i].open);
        size_t ko = rtrim_len(f->think[i].open, k); /* markers such as "Here are my steps:\n" */
        if (n >= ko && memcmp(prompt + n - ko, f->think[i].open, ko) == 0) {
            *pair = i;
            *at = n - ko;
            return true;
        }
    }
    return false;
}

/* Enters reasoning mode for pair i. */
static void enter_think(kn_tcp *p, int pair) {
    p->mode = KN_MODE_THINK;
    p->think_pair = pair;
    p->think_started = false;
    p->think_ws.n = 0;
}

/* Leaves reasoning mode: held trailing space is dropped. */
static void leave_think(kn_tcp *p) {
    p->mode = KN_MODE_CONTENT;
    p->think_started = false;
    p->think_ws.n = 0;
}

kiln_status kn_tc_scan_init(kn_tcp *p, const char *prompt, bool thinking_open) {
    const kn_tc_format *f = p->fmt;
    bool tools = json_array_size(p->tools) > 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < KN_TC_MAX_THINK && f->think[i].open && !st; i++)
        if (!(st = add_mark(p, f->think[i].open, true, MK_THINK_OPEN, (int16_t)i, 0)))
            st = add_mark(p, f->think[i].close, true, MK_THINK_CLOSE, (int16_t)i, 0);
    for (int i = 0; i < KN_TC_MAX_STRIP && f->strip[i] && !st; i++)
        st = add_mark(p, f->strip[i], true, MK_STRIP, (int16_t)i, 0);
    for (int i = 0; i < KN_TC_MAX_OPENERS && f->open[i].re && !st; i++) {
        if (!p->parse_calls && !(f->open[i].flags & KN_OP_ALWAYS)) continue;
        if ((f->open[i].flags & KN_OP_TOOLS) && !tools) continue;
        st = add_mark(p, f->open[i].re, false, MK_OPEN, (int16_t)i, f->open[i].flags);
    }
    for (int i = 0; i < KN_TC_MAX_FRE && f->fre[i] && !st; i++) st = kn_tc_compile(p, f->fre[i], &p->fre[i]);
    if (st) return st;
    p->md = pcre2_match_data_create(20, NULL);
    if (!p->md) return kn_error(KILN_ERR_NOMEM, "out of memory");

    p->mode = KN_MODE_CONTENT;
    if (f->flags & KN_FMT_HARMONY) {
        kn_tc_harmony_start(p);
        return KILN_OK;
    }
    if (f->flags & KN_FMT_RECIPIENT) {
        kn_tc_recipient_start(p);
        return KILN_OK;
    }
    int pair = 0;
    size_t at = 0;
    bool open = prompt && prompt_opens_think(f, prompt, &pair, &at);
    if (!open && thinking_open && f->think[0].open) open = true, pair = 0;
    if (open) {
        enter_think(p, pair);
        /* the reply continues the prompt's thinking block: with reasoning "none" content shows the
         * block whole, its opening marker (as the prompt wrote it) before its first text */
        if (p->rfmt == KILN_REASONING_NONE) {
            const char *pre = prompt && at < strlen(prompt) ? prompt + at : f->think[pair].open;
            if (!kn_tcbuf_adds(&p->think_prefix, pre)) return kn_error(KILN_ERR_NOMEM, "out of memory");
        }
    }
    return KILN_OK;
}

void kn_tc_scan_free(kn_tcp *p) {
    for (size_t i = 0; i < p->n_marks; i++) pcre2_code_free(p->marks[i].code);
    free(p->marks);
    for (int i = 0; i < KN_TC_MAX_FRE; i++) pcre2_code_free(p->fre[i]);
    pcre2_match_data_free(p->md);
}

/* The earliest marker at or after p->pos among those `want` selects: *best, its match [ms, me)
 * and whether it is partial. want(kind, flags) filters. Ties go to a partial match (more input may
 * make the longer marker), then to table order. */
typedef bool (*mark_filter)(const kn_tcp *p, const kn_re *m);

static const kn_re *find_mark(kn_tcp *p, mark_filter want, size_t *ms, size_t *me, bool *partial) {
    const kn_re *best = NULL;
    size_t bs = 0, be = 0;
    bool bp = false;
    for (size_t i = 0; i < p->n_marks; i++) {
        const kn_re *m = &p->marks[i];
        if (!want(p, m)) continue;
        size_t s, e;
        int r = kn_tc_match(p, m->code, false, &s, &e);
        if (r == 0) continue;
        if (!best || s < bs || (s == bs && r < 0 && !bp)) {
            best = m;
            bs = s;
            be = e;
            bp = r < 0;
        }
    }
    *ms = bs;
    *me = be;
    *partial = bp;
    return best;
}

static bool want_content(const kn_tcp *p, const kn_re *m) {
    return m->kind == MK_THINK_OPEN || m->kind == MK_STRIP || (m->kind == MK_OPEN && !(m->flags & KN_OP_START));
}

/* In reasoning: its close marker, and tool-call openers where a call ends the reasoning, or with
 * reasoning "none" (thinking is then content like any other, so calls in it are calls). */
static bool want_think(const kn_tcp *p, const kn_re *m) {
    if (m->kind == MK_THINK_CLOSE) return m->index == p->think_pair;
    return m->kind == MK_OPEN && !(m->flags & KN_OP_START) &&
           ((p->fmt->flags & KN_FMT_CALL_ENDS_THINK) || p->rfmt == KILN_REASONING_NONE);
}

/* Starts the block of opener mark m matched at [ms, me). */
static void start_block(kn_tcp *p, const kn_re *m, size_t ms, size_t me) {
    const kn_tc_opener *op = &p->fmt->open[m->index];
    kn_tc_block_reset(p, op->fam ? op->fam : p->fmt->family, op->cfg ? op->cfg : p->fmt->cfg);
    p->blk.opener = m->index;
    p->blk.kind = op->kind;
    /* the match data holds the last pattern tried: match this one again for its groups */
    p->pos = ms;
    kn_tc_match(p, m->code, true, &ms, &me);
    p->pos = me;
    p->blk.fam->begin(p, m->code, ms, me);
}

/* Tries the start-only openers where the content starts. Returns NEED, MORE (a block started), or
 * DONE (none applies: normal scanning). */
static kn_tc_step try_start(kn_tcp *p) {
    kn_tc_skip_ws(p);
    if (kn_tc_avail(p) == 0) return p->at_end ? KN_TC_DONE : KN_TC_NEED;
    bool partial = false;
    for (size_t i = 0; i < p->n_marks; i++) {
        const kn_re *m = &p->marks[i];
        if (m->kind != MK_OPEN || !(m->flags & KN_OP_START)) continue;
        size_t s, e;
        int r = kn_tc_match(p, m->code, true, &s, &e);
        if (r > 0) {
            start_block(p, m, s, e);
            return KN_TC_MORE;
        }
        if (r < 0) partial = true;
    }
    return partial ? KN_TC_NEED : KN_TC_DONE;
}

/* Content mode. */
static kn_tc_step scan_content(kn_tcp *p) {
    if (p->after_call) { /* white space right after a call is dropped */
        kn_tc_skip_ws(p);
        if (kn_tc_avail(p) == 0) return KN_TC_NEED;
        p->after_call = false;
    }
    if (p->content.n == 0 && p->n_calls == 0) {
        kn_tc_step r = try_start(p);
        if (r != KN_TC_DONE) return r;
    }
    size_t ms, me;
    bool partial;
    const kn_re *m = find_mark(p, want_content, &ms, &me, &partial);
    size_t upto = m ? ms : p->in.n;
    if (upto > p->pos && !kn_tc_emit_content(p, p->in.p + p->pos, upto - p->pos)) return KN_TC_NEED;
    p->pos = upto;
    if (!m || partial) return KN_TC_NEED;
    switch (m->kind) {
        case MK_THINK_OPEN:
            if (p->rfmt == KILN_REASONING_NONE && !kn_tc_emit_content(p, p->in.p + ms, me - ms)) return KN_TC_NEED;
            p->pos = me;
            enter_think(p, m->index);
            return KN_TC_MORE;
        case MK_STRIP: p->pos = me; return KN_TC_MORE;
        default: start_block(p, m, ms, me); return KN_TC_MORE;
    }
}

/* Reasoning mode. */
static kn_tc_step scan_think(kn_tcp *p) {
    size_t ms, me;
    bool partial;
    const kn_re *m = find_mark(p, want_think, &ms, &me, &partial);
    size_t upto = m ? ms : p->in.n;
    if (upto > p->pos && !kn_tc_emit_reasoning(p, p->in.p + p->pos, upto - p->pos)) return KN_TC_NEED;
    p->pos = upto;
    if (!m || partial) return KN_TC_NEED;
    if (m->kind == MK_THINK_CLOSE) {
        if (p->rfmt == KILN_REASONING_NONE &&
            (!kn_tc_emit_reasoning(p, "", 0) || !kn_tc_emit_content(p, p->in.p + ms, me - ms)))
            return KN_TC_NEED;
        p->pos = me;
        leave_think(p);
        return KN_TC_MORE;
    }
    leave_think(p); /* a call opener ends the reasoning */
    start_block(p, m, ms, me);
    return KN_TC_MORE;
}

void kn_tc_block_reset(kn_tcp *p, const kn_tc_family *fam, const void *cfg) {
    kn_tc_block *b = &p->blk;
    kn_tcbuf key = b->key, val = b->val, aux = b->aux, pend = b->pend;
    memset(b, 0, sizeof *b);
    key.n = val.n = aux.n = pend.n = 0;
    b->key = key;
    b->val = val;
    b->aux = aux;
    b->pend = pend;
    b->call = -1;
    b->opener = -1;
    b->fam = fam;
    b->cfg = cfg;
    p->mode = KN_MODE_BLOCK;
}

kn_tc_step kn_tc_block_end(kn_tcp *p) {
    if (p->blk.call >= 0) kn_tc_call_end(p, p->blk.call);
    p->blk.call = -1;
    p->mode = KN_MODE_CONTENT;
    p->after_call = p->n_calls > 0;
    return KN_TC_DONE;
}

void kn_tc_scan(kn_tcp *p) {
    int stuck = 0;
    while (!p->failed) {
        size_t pos = p->pos;
        kn_tc_mode mode = p->mode;
        int st = p->blk.st;
        const unsigned long nomem = kn_tcbuf_nomem;
        kn_tc_step r;
        if (p->mode == KN_MODE_CONTENT) r = scan_content(p);
        else if (p->mode == KN_MODE_THINK) r = scan_think(p);
        else {
            r = p->blk.fam->step(p);
            if (r == KN_TC_NEED && p->at_end) r = kn_tc_block_end(p); /* a reader that cannot finish */
            if (r == KN_TC_DONE) {
                p->mode = KN_MODE_CONTENT;
                r = KN_TC_MORE;
            }
        }
        if (kn_tcbuf_nomem != nomem) {
            kn_tc_fail(p, KILN_ERR_NOMEM, "out of memory");
            break;
        }
        if (r == KN_TC_NEED) {
            if (!p->at_end || p->pos >= p->in.n || p->mode == KN_MODE_BLOCK) break;
            /* at the end every text mode consumes everything it is given */
            if (p->pos == pos && p->mode == mode) break;
            continue;
        }
        if (p->pos == pos && p->mode == mode && p->blk.st == st) {
            if (++stuck > 64) {
                kn_tc_fail(p, KILN_ERR_INTERNAL, "the tool-call parser made no progress at byte %zu", p->pos);
                break;
            }
        } else {
            stuck = 0;
        }
    }
    if (p->at_end && !p->failed) {
        /* close what is open: a call cut off, a reasoning block never closed */
        if (p->mode == KN_MODE_BLOCK) kn_tc_block_end(p);
        if (p->mode == KN_MODE_THINK) leave_think(p);
    }
}
