/*
 * unigram.c - the Unigram model of a tokenizer.json (SentencePiece's unigram language model): the
 * segmentation of a word with the highest total score, by dynamic programming over its byte
 * positions (Viterbi). Every vocabulary piece that matches at a position is a candidate (found by
 * walking the trie of the vocabulary's texts from there, which stops where no piece continues); a character
 * that no piece covers is the unknown token with the lowest score minus 10, as the tokenizers
 * library scores it. Ties keep the earlier-found candidate (shorter start, then shorter piece).
 * With byte_fallback an unknown character becomes its <0xNN> tokens instead.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <math.h>
#include <stdlib.h>

kiln_status kn_unigram_encode(const kn_tokenizer *t, const char *w, size_t n, kn_ivec *out) {
    if (n == 0) return KILN_OK;
    double *best = malloc((n + 1) * sizeof *best);
    int32_t *from = malloc((n + 1) * sizeof *from), *tok = malloc((n + 1) * sizeof *tok);
    if (!best || !from || !tok) {
        free(best);
        free(from);
        free(tok);
        return kn_error(KILN_ERR_NOMEM, "out of memory");
    }
    double unk_score = t->tj->unigram_min_score - 10.0;
    for (size_t i = 0; i <= n; i++) best[i] = -INFINITY, from[i] = -1, tok[i] = -1;
    best[0] = 0;
    for (size_t s = 0; s < n;) {
        size_t cl;
        kn_utf8_decode((const uint8_t *)w + s, n - s, &cl);
        if (best[s] == -INFINITY) {
            s += cl;
            continue;
        }
        bool single = false;
        const kn_tj_trie *tr = &t->tj->pieces;
        size_t next = s + cl; /* the next character boundary: a piece must end at one */
        int32_t node = 0;
        for (size_t e = s; e < n;) {
            node = kn_tj_trie_child(tr, node, (uint8_t)w[e++]);
            if (node < 0) break; /* no piece continues: none longer matches here */
            if (e != next) continue;
            const int32_t id = tr->term[node];
            if (id >= 0 && (t->tok[id].attr & (KN_ATTR_NORMAL | KN_ATTR_USER_DEFINED | KN_ATTR_BYTE))) {
                double sc = best[s] + (t->tok[id].attr & KN_ATTR_USER_DEFINED ? 0.0 : t->tok[id].score);
                if (e == s + cl) single = true;
                if (sc > best[e]) best[e] = sc, from[e] = (int32_t)s, tok[e] = id;
            }
            if (e < n) {
                size_t adv;
                kn_utf8_decode((const uint8_t *)w + e, n - e, &adv);
                next = e + adv;
            }
        }
        if (!single) {
            double sc = best[s] + unk_score;
            if (sc > best[s + cl]) best[s + cl] = sc, from[s + cl] = (int32_t)s, tok[s + cl] = -1;
        }
        s += cl;
    }
    /* walk back, then emit in order */
    size_t cnt = 0;
    for (size_t e = n; e > 0; e = (size_t)from[e]) cnt++;
    size_t *ends = malloc(cnt * sizeof *ends);
    kiln_status st = ends ? KILN_OK : KILN_ERR_NOMEM;
    size_t k = cnt;
    for (size_t e = n; st == KILN_OK && e > 0; e = (size_t)from[e]) ends[--k] = e;
    for (size_t i = 0; st == KILN_OK && i < cnt; i++) {
        size_t e = ends[i], s = (size_t)from[e];
        if (tok[e] >= 0) {
            if (!kn_ivec_push(out, tok[e])) st = KILN_ERR_NOMEM;
            continue;
        }
        bool all = t->tj->byte_fallback;
        for (size_t b = s; b < e && all; b++) all = t->byte_tok[(uint8_t)w[b]] >= 0;
        if (all) {
            for (size_t b = s; b < e && st == KILN_OK; b++)
                if (!kn_ivec_push(out, t->byte_tok[(uint8_t)w[b]])) st = KILN_ERR_NOMEM;
        } else if (t->unk >= 0 && !kn_ivec_push(out, t->unk)) {
            st = KILN_ERR_NOMEM;
        }
    }
    free(ends);
    free(best);
    free(from);
    free(tok);
    return st;
}
