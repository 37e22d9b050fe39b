/*
 * unigram.c - the Unigram model of a tokenizer.json (SentencePiece's unigram language model): the
 * segmentation of a word with the highest total score, by dynamic programming over its byte
 * positions (Viterbi). Every vocabulary piece that matches at a position is a candidate (found by
 * walking the trie of the vocabulary's texts from there, which stops where no piece continues); a character
 * that no piece covers is the unknown token with the lowest score minus 10, as the tokenizers
 * library scores it. Ties keep the earlier-found candidate (shorter start, then shorter piece).
 * With byte_fallback an unknown character becomes its <0xNN> tokens instead. Without an unk_id a
 * character with no piece of its own fails the encode where its unknown step would improve the
 * segmentation, byte_fallback or not, as the tokenizers library does.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the trie of the vocabulary ---------------------------------------------------------------- */

typedef struct text_ref {
    uint64_t key; /* the first 8 bytes, big-endian, zero-padded: most comparisons end here */
    const char *p;
    uint32_t n;
    int32_t id;
} text_ref;

/* Byte order, a text before the longer ones it begins. */
static int cmp_text(const void *a, const void *b) {
    const text_ref *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    const uint32_t k = x->n < y->n ? x->n : y->n;
    const int c = k > 8 ? memcmp(x->p + 8, y->p + 8, k - 8) : 0;
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

void kn_tj_ptrie_free(kn_tj_ptrie *p) {
    free(p->first);
    free(p->label);
    free(p->term);
    memset(p, 0, sizeof *p);
}

/* The texts sorted, each node of the trie is the range of the texts that begin with its path (the
 * first of them its own when one ends there); the nodes are made in breadth-first order, each
 * splitting its range by the next byte. A node per distinct prefix: at most the texts' bytes + 1. */
kiln_status kn_unigram_build_trie(kn_tokenizer *t) {
    kn_tj_ptrie *p = &t->tj->pieces;
    text_ref *r = malloc(((size_t)t->n_vocab + 1) * sizeof *r);
    if (!r) return KILN_ERR_NOMEM;
    size_t m = 0, cap = 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const kn_tok_info *ti = &t->tok[id];
        const char *s = t->text + ti->text_off;
        if (!ti->text_len) continue;
        uint64_t key = 0;
        for (uint32_t i = 0; i < 8; i++) key = key << 8 | (i < ti->text_len ? (uint8_t)s[i] : 0);
        r[m++] = (text_ref){key, s, ti->text_len, id};
    }
    qsort(r, m, sizeof *r, cmp_text);
    size_t k = 0; /* one entry per text: a text several tokens share is the one kn_tok_lookup gives */
    for (size_t i = 0, j; i < m; i = j) {
        for (j = i + 1; j < m && cmp_text(&r[i], &r[j]) == 0;) j++;
        r[k] = r[i];
        if (j - i > 1) r[k].id = kn_tok_lookup(t, r[i].p, r[i].n);
        if (r[k].id >= 0) cap += r[k++].n;
    }
    m = k;
    uint32_t *lo = malloc(cap * sizeof *lo), *hi = malloc(cap * sizeof *hi), *depth = malloc(cap * sizeof *depth);
    p->first = malloc((cap + 1) * sizeof *p->first);
    p->label = malloc(cap);
    p->term = malloc(cap * sizeof *p->term);
    kiln_status st = lo && hi && depth && p->first && p->label && p->term ? KILN_OK : KILN_ERR_NOMEM;
    if (!st) {
        uint32_t n = 1;
        lo[0] = 0, hi[0] = (uint32_t)m, depth[0] = 0, p->term[0] = -1, p->label[0] = 0;
        for (uint32_t x = 0; x < n; x++) {
            p->first[x] = n;
            uint32_t i = lo[x];
            const uint32_t d = depth[x];
            if (i < hi[x] && r[i].n == d) p->term[x] = r[i++].id;
            while (i < hi[x]) {
                const uint8_t b = (uint8_t)r[i].p[d];
                uint32_t j = i + 1;
                while (j < hi[x] && (uint8_t)r[j].p[d] == b) j++; /* sorted: the longer texts of the prefix */
                lo[n] = i, hi[n] = j, depth[n] = d + 1, p->term[n] = -1, p->label[n] = b;
                n++;
                i = j;
            }
        }
        p->first[n] = n;
        p->n = n;
        /* the arrays were sized for a node per byte; give back what the shared prefixes saved */
        uint32_t *f = realloc(p->first, (n + 1) * sizeof *f);
        uint8_t *l = realloc(p->label, n);
        int32_t *tm = realloc(p->term, n * sizeof *tm);
        if (f) p->first = f;
        if (l) p->label = l;
        if (tm) p->term = tm;
        for (int b = 0; b < 256; b++) p->root[b] = -1;
        for (uint32_t c = p->first[0]; c < p->first[1]; c++) p->root[p->label[c]] = (int32_t)c;
    }
    free(r);
    free(lo);
    free(hi);
    free(depth);
    if (st) kn_tj_ptrie_free(p);
    return st;
}

/* The child of node x along byte b; -1 when there is none. */
static inline int32_t trie_child(const kn_tj_ptrie *p, int32_t x, uint8_t b) {
    if (x == 0) return p->root[b];
    uint32_t lo = p->first[x], hi = p->first[x + 1];
    const uint32_t end = hi;
    while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (p->label[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < end && p->label[lo] == b ? (int32_t)lo : -1;
}

/* ---- segmentation ----------------------------------------------------------------------------- */

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
        const kn_tj_ptrie *tr = &t->tj->pieces;
        size_t next = s + cl; /* the next character boundary: a piece must end at one */
        int32_t node = 0;
        for (size_t e = s; e < n && tr->n;) {
            node = trie_child(tr, node, (uint8_t)w[e++]);
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
            if (sc > best[s + cl] && t->tj->unk < 0) { /* the tokenizers library fails here (MissingUnkId) */
                free(best);
                free(from);
                free(tok);
                return kn_tj_no_unk(w + s, n - s);
            }
            if (sc > best[s + cl]) best[s + cl] = sc, from[s + cl] = (int32_t)s, tok[s + cl] = -1;
        }
        s += cl;
    }
    /* walk back, then emit in order; the end is always reached (the unknown step adds a finite score
     * to a reachable position: every piece's score is a finite float, tok_tj_load.c) */
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
        } else {
            st = kn_tj_push_unk(t, w + s, e - s, out);
        }
    }
    free(ends);
    free(best);
    free(from);
    free(tok);
    return st;
}
