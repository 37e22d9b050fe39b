/*
 * detok.c - the incremental detokenizer: token ids in, text out, one token at a time, never
 * splitting a UTF-8 character.
 *
 * Byte-level vocabularies (byte fallback <0xNN>, GPT-2 byte tokens) spread one character over
 * several tokens; the bytes of an incomplete character wait in d->pending until the rest arrives.
 * Ill-formed bytes become U+FFFD (one per maximal ill-formed subpart, as the Unicode standard
 * recommends). For SentencePiece vocabularies that prefix text with a space, the leading space of
 * the first piece of a text (at the start of the stream, or after BOS) is dropped, as llama2.c's
 * run.c and llama.cpp do.
 */
#include "text/tok_internal.h"
#include "text/unicode.h"

#include <string.h>

void kn_detok_init(kn_detok *d, const kn_tokenizer *t, bool at_start, bool render_special) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->at_start = at_start;
    d->render_special = render_special;
}

static size_t put_replacement(char *out, size_t o) {
    memcpy(out + o, "\xef\xbf\xbd", 3);
    return o + 3;
}

const char *kn_detok_push(kn_detok *d, int32_t id, size_t *len) {
    const kn_tokenizer *t = d->tok;
    *len = 0;
    if (!t || id < 0 || id >= t->n_vocab) return d->out;
    bool is_bos = id == t->bos; /* a new text starts after it */
    size_t plen = kn_token_piece(t, id, d->render_special, NULL, 0);
    const uint8_t *p = (const uint8_t *)t->pieces + t->tok[id].piece_off;
    /* (a tokenizer.json's decoder strips a space at the start of the text only: a BOS shown as text
     * does not start a new one) */
    if (plen == 0 || is_bos) d->at_start |= is_bos && !(t->tj && d->render_special);
    if (plen == 0) return d->out;
    if (d->at_start && !is_bos) {
        d->at_start = false;
        if ((t->kind == KN_TOK_SPM || t->tj) && t->add_space_prefix && d->n_pending == 0 && p[0] == ' ') {
            p++;
            plen--;
        }
    }
    /* work on pending + piece: at most 3 + KN_TOK_MAX_PIECE bytes */
    uint8_t buf[KN_TOK_MAX_PIECE + 8];
    size_t n = d->n_pending;
    memcpy(buf, d->pending, n);
    memcpy(buf + n, p, plen);
    n += plen;
    d->n_pending = 0;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = kn_utf8_decode(buf + i, n - i, &adv);
        if (cp != KN_UTF8_INVALID) {
            memcpy(d->out + o, buf + i, adv);
            o += adv;
        } else if (i + adv == n && kn_utf8_incomplete(buf + i, n - i)) {
            memcpy(d->pending, buf + i, n - i); /* wait for the rest of the character */
            d->n_pending = n - i;
        } else {
            o = put_replacement(d->out, o);
        }
        i += adv;
    }
    *len = o;
    return d->out;
}

const char *kn_detok_flush(kn_detok *d, size_t *len) {
    *len = 0;
    if (d->n_pending) {
        *len = put_replacement(d->out, 0);
        d->n_pending = 0;
    }
    return d->out;
}
